"""LangGraph's checkpointer, kept in the archive: a thread is a chat.

``ChatArchiveSaver`` is a ``BaseCheckpointSaver`` of ``langgraph-checkpoint``
(what a compiled graph's ``checkpointer=`` takes), sync and async from one
object, on a ``ChatArchive`` or an ``AsyncChatArchive``. Each thread is the
archive's chat of its ``thread_id``:

- the root graph's ``messages`` channel (a list of LangChain messages, as
  ``add_messages`` keeps it) is the chat's messages, stored as the
  ``langchain`` format stores them. A checkpoint's messages that go on from
  an earlier checkpoint's are appended after them; where they part (a fork,
  time travel, ``update_state`` that edits or removes a message) a branch of
  the chat's tree starts. The active path is the latest checkpoint's
  messages, so ``get``, search, ``stats`` and exports read a thread as any
  chat;
- every other channel, the checkpoints, their metadata and the writes
  pending at them are rows too (``checkpoints``, ``checkpoint_blobs``,
  ``checkpoint_writes``), serialized by the graph's serializer exactly as
  it gives them.

Every checkpoint comes back equal to what was put. Needs ``langgraph``
(``pip install 'chatarchive[langgraph]'``).

Examples:
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> from langgraph.graph import START, MessagesState, StateGraph
    >>> from chatarchive import ChatArchive
    >>> archive = ChatArchive("sqlite://")
    >>> archive.upgrade()
    >>> def answer(state: MessagesState) -> dict:
    ...     return {"messages": [AIMessage("Primer dimers, probably.")]}
    >>> builder = StateGraph(MessagesState)
    >>> _ = builder.add_node("answer", answer)
    >>> _ = builder.add_edge(START, "answer")
    >>> graph = builder.compile(checkpointer=ChatArchiveSaver(archive))
    >>> config = {"configurable": {"thread_id": "gel-7"}}
    >>> _ = graph.invoke({"messages": [HumanMessage("Why two bands?")]}, config)
    >>> [(m.role, m.content) for m in archive.get("gel-7").messages]
    [('user', 'Why two bands?'), ('assistant', 'Primer dimers, probably.')]
    >>> archive.close()
"""

from __future__ import annotations

import builtins
import json
import random
import threading
from collections import OrderedDict
from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any, cast

from . import extra_missing

try:
    from langchain_core.messages import BaseMessage
    from langchain_core.runnables import RunnableConfig
    from langgraph.checkpoint.base import (
        WRITES_IDX_MAP,
        BaseCheckpointSaver,
        ChannelVersions,
        Checkpoint,
        CheckpointMetadata,
        CheckpointTuple,
        get_checkpoint_id,
        get_checkpoint_metadata,
    )
    from langgraph.checkpoint.serde.base import SerializerProtocol
except ImportError as exc:  # the extra is missing
    raise extra_missing(__name__, "LangGraph (langgraph, langgraph-checkpoint)", "langgraph") from exc

from chatarchive._api import AsyncChatArchive, ChatArchive
from chatarchive._repository import checkpoints
from chatarchive._repository.checkpoints import (
    ChannelValue,
    CheckpointRows,
    MessagesPath,
    Serialized,
    StoredWrite,
)
from chatarchive._repository.plans import Kind

from ._chats import Work, arun, require_archive, run, step
from .langchain import archive_messages, langchain_messages

__all__ = ["ChatArchiveSaver"]

#: Threads whose latest messages a saver remembers where it left.
_THREADS_KEPT = 1024


class ChatArchiveSaver(BaseCheckpointSaver[str]):
    """A checkpointer whose threads are chats of ``archive``.

    Args:
        archive: a ``ChatArchive`` or an ``AsyncChatArchive``; either serves
            the sync methods and the async ones.
        serde: the serializer of the channels' values (LangGraph's default).
        messages_channel: the root graph's channel that holds the messages.
    """

    def __init__(
        self,
        archive: ChatArchive | AsyncChatArchive,
        *,
        serde: SerializerProtocol | None = None,
        messages_channel: str = "messages",
    ) -> None:
        super().__init__(serde=serde)
        require_archive(archive)
        self.archive = archive
        self.messages_channel = messages_channel
        # Where the latest puts left each thread's messages, and a fingerprint of
        # each of them: a put whose messages go on from there appends the new ones
        # without reading the thread's tree (if the chat has not changed since).
        self._left: OrderedDict[tuple[str, str], tuple[MessagesPath, tuple[str, ...]]] = OrderedDict()
        self._left_lock = threading.Lock()

    # -- sync ----------------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return run(self.archive, self._get_tuple(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        return iter(run(self.archive, self._list(config, filter, before, limit)))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return run(self.archive, self._put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        run(self.archive, self._put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        run(self.archive, step(Kind.WRITE, checkpoints.delete_thread, str(thread_id)))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        run(self.archive, step(Kind.WRITE, checkpoints.delete_for_runs, [str(r) for r in run_ids]))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        run(
            self.archive,
            step(Kind.WRITE, checkpoints.copy_thread, str(source_thread_id), str(target_thread_id)),
        )

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        run(self.archive, _pruned(thread_ids, strategy))

    # -- async ---------------------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await arun(self.archive, self._get_tuple(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for found in await arun(self.archive, self._list(config, filter, before, limit)):
            yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await arun(self.archive, self._put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await arun(self.archive, self._put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await arun(self.archive, step(Kind.WRITE, checkpoints.delete_thread, str(thread_id)))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await arun(self.archive, step(Kind.WRITE, checkpoints.delete_for_runs, [str(r) for r in run_ids]))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await arun(
            self.archive,
            step(Kind.WRITE, checkpoints.copy_thread, str(source_thread_id), str(target_thread_id)),
        )

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await arun(self.archive, _pruned(thread_ids, strategy))

    def get_next_version(self, current: str | None, channel: None) -> str:
        """A version after ``current``: a count, then a random tail (as
        LangGraph's own savers make them), so that versions sort as text."""
        number = 0 if current is None else current if isinstance(current, int) else int(current.split(".")[0])
        return f"{number + 1:032}.{random.random():016}"

    # -- the work of both ----------------------------------------------------------------

    def _put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Work[RunnableConfig]:
        thread_id, namespace, parent_id = _where(config)
        state = cast(dict[str, Any], checkpoint.copy())
        values: dict[str, Any] = state.pop("channel_values")
        channels = []
        fingerprints: tuple[str, ...] = ()
        for channel, version in new_versions.items():
            value = values.get(channel)
            if channel not in values:
                channels.append(ChannelValue(channel, str(version)))
            elif channel == self.messages_channel and namespace == "" and _are_messages(value):
                messages = archive_messages(cast(builtins.list[BaseMessage], value))
                fingerprints = tuple(json.dumps(message, sort_keys=True) for message in messages)
                channels.append(
                    ChannelValue(
                        channel,
                        str(version),
                        messages=messages,
                        continues=self._continued(thread_id, fingerprints),
                    )
                )
            else:
                channels.append(ChannelValue(channel, str(version), value=self._dumped(value)))
        full_metadata = get_checkpoint_metadata(config, metadata)
        run_id = full_metadata.get("run_id")
        stored = checkpoints.Checkpoint(
            thread_id=thread_id,
            namespace=namespace,
            checkpoint_id=checkpoint["id"],
            parent_id=parent_id,
            run_id=None if run_id is None else str(run_id),
            checkpoint=self._dumped(state),
            metadata=self._dumped(full_metadata),
            channel_versions={
                channel: str(version) for channel, version in checkpoint["channel_versions"].items()
            },
        )
        left = yield from step(Kind.WRITE, checkpoints.put, stored, channels)
        if left is not None:
            with self._left_lock:
                self._left[thread_id, namespace] = (left, fingerprints)
                self._left.move_to_end((thread_id, namespace))
                while len(self._left) > _THREADS_KEPT:
                    self._left.popitem(last=False)
        return _config(thread_id, namespace, checkpoint["id"])

    def _continued(self, thread_id: str, fingerprints: tuple[str, ...]) -> tuple[MessagesPath, int] | None:
        """Where the latest put left the thread's messages, if these go on from them."""
        with self._left_lock:
            found = self._left.get((thread_id, ""))
        if found is None or fingerprints[: len(found[1])] != found[1]:
            return None
        return found[0], len(found[1])

    def _put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> Work[None]:
        thread_id, namespace, checkpoint_id = _where(config)
        if checkpoint_id is None:
            raise ValueError("put_writes needs the checkpoint's id in the config (checkpoint_id)")
        stored = [
            StoredWrite(task_id, WRITES_IDX_MAP.get(channel, index), channel, self._dumped(value), task_path)
            for index, (channel, value) in enumerate(writes)
        ]
        yield from step(Kind.WRITE, checkpoints.put_writes, thread_id, namespace, checkpoint_id, stored)

    def _get_tuple(self, config: RunnableConfig) -> Work[CheckpointTuple | None]:
        thread_id, namespace, checkpoint_id = _where(config)
        found = yield from step(Kind.READ, checkpoints.load, thread_id, namespace, checkpoint_id, limit=1)
        return self._tuple(found[0]) if found else None

    def _list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Work[builtins.list[CheckpointTuple]]:
        configurable = (config or {}).get("configurable", {})
        thread_id = configurable.get("thread_id")
        found = yield from step(
            Kind.READ,
            checkpoints.load,
            None if thread_id is None else str(thread_id),
            configurable.get("checkpoint_ns"),
            configurable.get("checkpoint_id"),
            before=None if before is None else get_checkpoint_id(before),
            limit=None if filter else limit,
        )
        listed = [self._tuple(rows) for rows in found]
        if filter:
            listed = [
                item
                for item in listed
                if all(item.metadata.get(key) == value for key, value in filter.items())
            ]
        return listed if limit is None else listed[:limit]

    def _tuple(self, rows: CheckpointRows) -> CheckpointTuple:
        stored = rows.checkpoint
        values: dict[str, Any] = {
            channel: langchain_messages(value) if isinstance(value, list) else self._loaded(value)
            for channel, value in rows.values.items()
        }
        return CheckpointTuple(
            config=_config(stored.thread_id, stored.namespace, stored.checkpoint_id),
            checkpoint=cast(Checkpoint, {**self._loaded(stored.checkpoint), "channel_values": values}),
            metadata=self._loaded(stored.metadata),
            parent_config=None
            if stored.parent_id is None
            else _config(stored.thread_id, stored.namespace, stored.parent_id),
            pending_writes=[
                (write.task_id, write.channel, self._loaded(write.value)) for write in rows.writes
            ],
        )

    def _dumped(self, value: Any) -> Serialized:
        return Serialized(*self.serde.dumps_typed(value))

    def _loaded(self, value: Serialized) -> Any:
        return self.serde.loads_typed((value.type, value.data or b""))


def _pruned(thread_ids: Sequence[str], strategy: str) -> Work[None]:
    if strategy not in ("keep_latest", "delete"):
        raise ValueError(f"strategy must be 'keep_latest' or 'delete', not {strategy!r}")
    threads = [str(thread) for thread in thread_ids]
    yield from step(Kind.WRITE, checkpoints.prune, threads, keep_latest=strategy == "keep_latest")


def _where(config: RunnableConfig) -> tuple[str, str, str | None]:
    """The thread, namespace and checkpoint a config names."""
    configurable = config["configurable"]
    return str(configurable["thread_id"]), configurable.get("checkpoint_ns", ""), get_checkpoint_id(config)


def _config(thread_id: str, namespace: str, checkpoint_id: str) -> RunnableConfig:
    return {
        "configurable": {"thread_id": thread_id, "checkpoint_ns": namespace, "checkpoint_id": checkpoint_id}
    }


def _are_messages(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, BaseMessage) for item in value)
