"""A graph's thread as a chat: its checkpoints, their channels' values and
the writes pending at them (the rows of a LangGraph checkpointer).

What the graph's serializer makes is stored as it is (a type and bytes), but
a channel of messages: its value is a path of the chat's tree. A
checkpoint's messages that continue the path of an earlier one are appended
to it; where they part from every stored path (a fork, time travel, an
edited or removed message), they start a branch there. Each message is so
stored once, the chat's active path is the latest checkpoint's messages, and
search, analytics and exports read a thread like any chat.

Nothing here knows LangGraph's types: ``chatarchive.integrations.langgraph``
serializes, and converts messages to the archive's.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from sqlalchemy import delete as delete_rows
from sqlalchemy import select, tuple_

from chatarchive._arguments import require_text
from chatarchive._document import ChatDocument, ChatTree, Message
from chatarchive._exceptions import ChatNotFound, ConflictError
from chatarchive._schema import tables
from chatarchive.redaction import redact_messages

from . import reads, writes
from .chat_rows import lock_row
from .unit import Unit, now

__all__ = [
    "MESSAGES",
    "ChannelValue",
    "Checkpoint",
    "CheckpointRows",
    "MessagesPath",
    "Serialized",
    "StoredWrite",
    "copy_thread",
    "delete_for_runs",
    "delete_thread",
    "load",
    "prune",
    "put",
    "put_writes",
]

#: The ``type`` of a channel whose messages are the chat's rows.
MESSAGES = "chatarchive:messages"


@dataclass(frozen=True)
class Serialized:
    """A value as the graph's serializer made it."""

    type: str
    data: bytes | None


@dataclass(frozen=True)
class MessagesPath:
    """Where a put left a thread's messages: the message ending them (``None``:
    none) and the chat's version then."""

    leaf: str | None
    version: int


@dataclass(frozen=True)
class ChannelValue:
    """A channel's value at a version: serialized, or ``messages`` (the
    archive's messages, in order) for a channel of messages. ``continues``:
    the path an earlier put left and how many of ``messages`` it holds, so
    that, if the chat has not changed since, the rest is appended there
    without reading the chat's tree."""

    channel: str
    version: str
    value: Serialized | None = None
    messages: Sequence[Mapping[str, Any]] | None = None
    continues: tuple[MessagesPath, int] | None = None


@dataclass(frozen=True)
class StoredWrite:
    """A task's write to a channel."""

    task_id: str
    idx: int
    channel: str
    value: Serialized
    task_path: str = ""


@dataclass(frozen=True)
class Checkpoint:
    """A checkpoint as it is stored: its ids, the serialized checkpoint and
    metadata, and the version of each channel (as text)."""

    thread_id: str
    namespace: str
    checkpoint_id: str
    parent_id: str | None
    run_id: str | None
    checkpoint: Serialized
    metadata: Serialized
    channel_versions: Mapping[str, str]


@dataclass(frozen=True)
class CheckpointRows:
    """A checkpoint read back: itself, its channels' values (messages as the
    archive's), and the writes pending at it, in the order they were put."""

    checkpoint: Checkpoint
    values: dict[str, Serialized | list[Message]] = field(default_factory=dict)
    writes: list[StoredWrite] = field(default_factory=list)


# -- writes ------------------------------------------------------------------------------------


def put(unit: Unit, /, checkpoint: Checkpoint, values: Sequence[ChannelValue]) -> MessagesPath | None:
    """Store ``checkpoint`` and the channels' values it brings (the thread's
    chat made with its first checkpoint), in one transaction; where it left
    the messages of a channel of messages (``None``: it brings none)."""
    chat_id = checkpoint.thread_id
    with unit.writing():
        user, version = _thread(unit, chat_id)
        rows = []
        left: str | None = None
        brings_messages = False
        for value in values:
            row: dict[str, Any] = {"channel": value.channel, "version": value.version, "message_uid": None}
            if value.messages is not None:
                brings_messages = True
                known = value.continues if value.continues and value.continues[0].version == version else None
                left = _messages_leaf(unit, chat_id, value.messages, known)
                row |= {"type": MESSAGES, "blob": None, "message_uid": left}
            elif value.value is not None:
                row |= {"type": value.value.type, "blob": value.value.data}
            else:
                row |= {"type": "empty", "blob": None}
            rows.append(row)
        blobs = tables.checkpoint_blobs
        if rows:
            unit.execute(
                delete_rows(blobs).where(
                    blobs.c.chat_id == chat_id,
                    blobs.c.checkpoint_ns == checkpoint.namespace,
                    tuple_(blobs.c.channel, blobs.c.version).in_(
                        [(r["channel"], r["version"]) for r in rows]
                    ),
                )
            )
            base = {"chat_id": chat_id, "checkpoint_ns": checkpoint.namespace, "chat_user_id": user}
            unit.insert(blobs, [{**base, **row} for row in rows])
        stored = tables.checkpoints
        unit.execute(
            delete_rows(stored).where(
                *_one(stored, checkpoint.thread_id, checkpoint.namespace, checkpoint.checkpoint_id)
            )
        )
        unit.insert(
            stored,
            [
                {
                    "chat_id": chat_id,
                    "checkpoint_ns": checkpoint.namespace,
                    "checkpoint_id": checkpoint.checkpoint_id,
                    "parent_checkpoint_id": checkpoint.parent_id,
                    "run_id": checkpoint.run_id,
                    "type": checkpoint.checkpoint.type,
                    "checkpoint": checkpoint.checkpoint.data,
                    "metadata_type": checkpoint.metadata.type,
                    "metadata": checkpoint.metadata.data,
                    "channel_versions": dict(checkpoint.channel_versions),
                    "created_at": now(),
                    "chat_user_id": user,
                }
            ],
        )
        if not brings_messages:
            return None
        after = lock_row(unit, chat_id)
        assert after is not None
        return MessagesPath(left, int(after["version"]))


def put_writes(
    unit: Unit, /, thread_id: str, namespace: str, checkpoint_id: str, stored: Sequence[StoredWrite]
) -> None:
    """Store the writes of a task pending at a checkpoint: a write already
    stored at its place is kept, but those of special channels (a negative
    ``idx``), which are written again."""
    table = tables.checkpoint_writes
    with unit.writing():
        user, _ = _thread(unit, thread_id)
        at = _one(table, thread_id, namespace, checkpoint_id)
        kept = (
            {
                (row.task_id, row.idx)
                for row in unit.execute(
                    select(table.c.task_id, table.c.idx).where(
                        *at, tuple_(table.c.task_id, table.c.idx).in_([(w.task_id, w.idx) for w in stored])
                    )
                )
            }
            if stored
            else set()
        )
        again = [(w.task_id, w.idx) for w in stored if w.idx < 0 and (w.task_id, w.idx) in kept]
        if again:
            unit.execute(delete_rows(table).where(*at, tuple_(table.c.task_id, table.c.idx).in_(again)))
        unit.insert(
            table,
            [
                {
                    "chat_id": thread_id,
                    "checkpoint_ns": namespace,
                    "checkpoint_id": checkpoint_id,
                    "task_id": write.task_id,
                    "idx": write.idx,
                    "channel": write.channel,
                    "type": write.value.type,
                    "blob": write.value.data,
                    "task_path": write.task_path,
                    "chat_user_id": user,
                }
                for write in stored
                if (write.task_id, write.idx) not in kept or write.idx < 0
            ],
        )


def delete_thread(unit: Unit, /, thread_id: str) -> None:
    """Delete the thread's chat, with its checkpoints (nothing: no such thread)."""
    with contextlib.suppress(ChatNotFound):
        writes.delete(unit, thread_id)


def delete_for_runs(unit: Unit, /, run_ids: Sequence[str]) -> None:
    """Delete the checkpoints the runs ``run_ids`` made, with the writes
    pending at them. The threads' messages stay: they are the conversation."""
    if not run_ids:
        return
    stored = tables.checkpoints
    with unit.writing():
        doomed = list(
            unit.execute(
                _scoped(
                    unit,
                    select(stored.c.chat_id, stored.c.checkpoint_ns, stored.c.checkpoint_id).where(
                        stored.c.run_id.in_(list(run_ids))
                    ),
                    stored,
                )
            )
        )
        _delete_checkpoints(unit, doomed)


def prune(unit: Unit, /, thread_ids: Sequence[str], *, keep_latest: bool) -> None:
    """Delete the threads' checkpoints but the latest of each namespace
    (``keep_latest``), or all of them, with the writes pending at them."""
    stored = tables.checkpoints
    with unit.writing():
        rows = (
            list(
                unit.execute(
                    _scoped(
                        unit,
                        select(stored.c.chat_id, stored.c.checkpoint_ns, stored.c.checkpoint_id).where(
                            stored.c.chat_id.in_(list(thread_ids))
                        ),
                        stored,
                    )
                )
            )
            if thread_ids
            else []
        )
        latest: dict[tuple[str, str], str] = {}
        for row in rows:
            key = (row.chat_id, row.checkpoint_ns)
            latest[key] = max(latest.get(key, row.checkpoint_id), row.checkpoint_id)
        doomed = [
            row
            for row in rows
            if not keep_latest or latest[row.chat_id, row.checkpoint_ns] != row.checkpoint_id
        ]
        _delete_checkpoints(unit, doomed)


def copy_thread(unit: Unit, /, source: str, target: str) -> None:
    """Give thread ``target`` the chat of ``source`` (its whole tree) and its
    checkpoints; nothing when there is no ``source``."""
    require_text(target, "target")
    try:
        tree = reads.get_tree(unit, source)
    except ChatNotFound:
        return
    with unit.writing():
        delete_thread(unit, target)
        document = tree.document.model_dump(mode="json", exclude={"version"})
        writes.save(unit, {**document, "chat_id": target}, expected_version=0)
        user = lock_row(unit, target)
        for table in (tables.checkpoints, tables.checkpoint_blobs, tables.checkpoint_writes):
            copies = [
                {**row, "chat_id": target, "chat_user_id": user["user_id"] if user else None}
                for row in unit.execute(select(table).where(table.c.chat_id == source)).mappings()
            ]
            unit.insert(table, copies)


# -- reads -------------------------------------------------------------------------------------


def load(
    unit: Unit,
    /,
    thread_id: str | None,
    namespace: str | None = None,
    checkpoint_id: str | None = None,
    *,
    before: str | None = None,
    limit: int | None = None,
) -> list[CheckpointRows]:
    """The checkpoints of ``thread_id`` (every thread's: ``None``), of
    ``namespace`` (every one: ``None``), newest first: the one
    ``checkpoint_id``, those before the id ``before``, at most ``limit``."""
    stored = tables.checkpoints
    query = select(stored)
    if thread_id is not None:
        query = query.where(stored.c.chat_id == thread_id)
    if namespace is not None:
        query = query.where(stored.c.checkpoint_ns == namespace)
    if checkpoint_id is not None:
        query = query.where(stored.c.checkpoint_id == checkpoint_id)
    if before is not None:
        query = query.where(stored.c.checkpoint_id < before)
    query = query.order_by(stored.c.checkpoint_id.desc(), stored.c.chat_id, stored.c.checkpoint_ns)
    if limit is not None:
        query = query.limit(limit)
    with unit.reading():
        rows = list(unit.execute(_scoped(unit, query, stored)).mappings())
        found = [CheckpointRows(_checkpoint(row)) for row in rows]
        _with_values(unit, found)
        _with_writes(unit, found)
    return found


def _checkpoint(row: Mapping[Any, Any]) -> Checkpoint:
    return Checkpoint(
        thread_id=row["chat_id"],
        namespace=row["checkpoint_ns"],
        checkpoint_id=row["checkpoint_id"],
        parent_id=row["parent_checkpoint_id"],
        run_id=row["run_id"],
        checkpoint=Serialized(row["type"], bytes(row["checkpoint"])),
        metadata=Serialized(row["metadata_type"], bytes(row["metadata"])),
        channel_versions=row["channel_versions"],
    )


def _with_values(unit: Unit, found: Sequence[CheckpointRows]) -> None:
    blobs = tables.checkpoint_blobs
    wanted = {
        (rows.checkpoint.thread_id, rows.checkpoint.namespace, channel, version)
        for rows in found
        for channel, version in rows.checkpoint.channel_versions.items()
    }
    values: dict[tuple[str, str, str, str], Mapping[Any, Any]] = {}
    for thread_id in {key[0] for key in wanted}:
        versions = [key[1:] for key in wanted if key[0] == thread_id]
        query = select(blobs).where(
            blobs.c.chat_id == thread_id,
            tuple_(blobs.c.checkpoint_ns, blobs.c.channel, blobs.c.version).in_(versions),
        )
        for blob in unit.execute(query).mappings():
            values[blob["chat_id"], blob["checkpoint_ns"], blob["channel"], blob["version"]] = blob
    trees: dict[str, ChatTree] = {}
    for rows in found:
        for channel, version in rows.checkpoint.channel_versions.items():
            row = values.get((rows.checkpoint.thread_id, rows.checkpoint.namespace, channel, version))
            if row is None or row["type"] == "empty":
                continue
            if row["type"] != MESSAGES:
                rows.values[channel] = Serialized(
                    row["type"], None if row["blob"] is None else bytes(row["blob"])
                )
            elif row["message_uid"] is None:
                rows.values[channel] = []
            else:
                thread = rows.checkpoint.thread_id
                if thread not in trees:
                    trees[thread] = reads.get_tree(unit, thread)
                rows.values[channel] = trees[thread].path(row["message_uid"])


def _with_writes(unit: Unit, found: Sequence[CheckpointRows]) -> None:
    """Give each checkpoint the writes pending at it: one query per thread."""
    table = tables.checkpoint_writes
    at = {
        (rows.checkpoint.thread_id, rows.checkpoint.namespace, rows.checkpoint.checkpoint_id): rows
        for rows in found
    }
    for thread_id in {key[0] for key in at}:
        ids = [key[1:] for key in at if key[0] == thread_id]
        query = (
            select(table)
            .where(
                table.c.chat_id == thread_id, tuple_(table.c.checkpoint_ns, table.c.checkpoint_id).in_(ids)
            )
            .order_by(table.c.task_path, table.c.task_id, table.c.idx)
        )
        for row in unit.execute(query):
            value = Serialized(row.type, bytes(row.blob))
            write = StoredWrite(row.task_id, row.idx, row.channel, value, row.task_path)
            at[row.chat_id, row.checkpoint_ns, row.checkpoint_id].writes.append(write)


# -- the thread's chat ---------------------------------------------------------------------------


def _scoped(unit: Unit, query: Any, table: Any) -> Any:
    """``query`` over ``table``, kept to the rows of this unit's user's chats (when it has one)."""
    return query if unit.user_id is None else query.where(table.c.chat_user_id == unit.user_id)


def _delete_checkpoints(unit: Unit, doomed: Sequence[Any]) -> None:
    """Delete the checkpoints ``doomed`` (rows of their ids), the writes
    pending at them, and the channels' values no other checkpoint holds."""
    stored, blobs, pending = tables.checkpoints, tables.checkpoint_blobs, tables.checkpoint_writes
    threads = {(row.chat_id, row.checkpoint_ns) for row in doomed}
    for chat_id, namespace in threads:
        ids = [
            row.checkpoint_id for row in doomed if (row.chat_id, row.checkpoint_ns) == (chat_id, namespace)
        ]
        for table in (stored, pending):
            unit.execute(
                delete_rows(table).where(
                    table.c.chat_id == chat_id,
                    table.c.checkpoint_ns == namespace,
                    table.c.checkpoint_id.in_(ids),
                )
            )
        held = {
            (channel, version)
            for versions in unit.execute(
                select(stored.c.channel_versions).where(
                    stored.c.chat_id == chat_id, stored.c.checkpoint_ns == namespace
                )
            ).scalars()
            for channel, version in versions.items()
        }
        values = unit.execute(
            select(blobs.c.channel, blobs.c.version).where(
                blobs.c.chat_id == chat_id, blobs.c.checkpoint_ns == namespace
            )
        )
        unheld = [(row.channel, row.version) for row in values if (row.channel, row.version) not in held]
        if unheld:
            unit.execute(
                delete_rows(blobs).where(
                    blobs.c.chat_id == chat_id,
                    blobs.c.checkpoint_ns == namespace,
                    tuple_(blobs.c.channel, blobs.c.version).in_(unheld),
                )
            )


def _one(table: Any, thread_id: str, namespace: str, checkpoint_id: str) -> list[Any]:
    return [
        table.c.chat_id == thread_id,
        table.c.checkpoint_ns == namespace,
        table.c.checkpoint_id == checkpoint_id,
    ]


def _thread(unit: Unit, thread_id: str) -> tuple[str | None, int]:
    """Lock the thread's chat (made, empty, when there is none); its user and version."""
    require_text(thread_id, "thread_id")
    row = lock_row(unit, thread_id)
    if row is None:
        # (made by another writer meanwhile: it is there to lock now)
        with contextlib.suppress(ConflictError):
            writes.save(unit, {"chat_id": thread_id, "messages": []}, expected_version=0)
        row = lock_row(unit, thread_id)
    if row is None or not unit.visible(row):
        raise ChatNotFound(thread_id)
    user: str | None = row["user_id"]
    return user, int(row["version"])


def _messages_leaf(
    unit: Unit,
    chat_id: str,
    messages: Sequence[Mapping[str, Any]],
    known: tuple[MessagesPath, int] | None = None,
) -> str | None:
    """The uid of the message ending the path of ``messages`` in the chat:
    they follow the longest stored path they begin with (looked for from
    the active path, then from every root; or ``known``: the path an earlier
    put left, holding the first of them, in a chat unchanged since), and the
    rest is appended there. The path becomes the active one."""
    if not messages:
        return None
    parsed = ChatDocument.parse({"chat_id": chat_id, "messages": list(messages)}, limits=unit.limits)
    # Redacted as stored, so that the path already stored is recognized.
    wanted = redact_messages(unit.redactor, chat_id, parsed.messages)
    if known is not None and known[1] <= len(wanted) and (known[0].leaf is None) == (known[1] == 0):
        leaf, rest = known[0].leaf, wanted[known[1] :]
    else:
        matched = _matched_prefix(reads.get_tree(unit, chat_id), wanted)
        rest = wanted[len(matched) :]
        leaf = matched[-1].uid if matched else None
    if rest:
        if leaf is None:
            writes.truncate(unit, chat_id, 0)
        else:
            writes.set_active_leaf(unit, chat_id, leaf)
        added = writes.append_messages(unit, chat_id, [_given(message) for message in rest])
        return added[-1].uid
    assert leaf is not None
    writes.set_active_leaf(unit, chat_id, leaf)
    return leaf


def _matched_prefix(tree: ChatTree, wanted: Sequence[Message]) -> list[Message]:
    """The longest stored path from a root whose messages equal the first of ``wanted``."""
    document = tree.document
    parents = document.parent_indexes()
    children: dict[int | None, list[int]] = {}
    for index, parent in enumerate(parents):
        children.setdefault(parent, []).append(index)
    on_path = {message.uid for message in tree.path()} if tree.active_leaf is not None else set()
    matched: list[Message] = []
    at: int | None = None
    for message in wanted:
        candidates = children.get(at, [])
        # The active path first: a graph's next checkpoint most often goes on from it.
        candidates = sorted(candidates, key=lambda index: tree.messages[index].uid not in on_path)
        found = next((index for index in candidates if _same(tree.messages[index], message)), None)
        if found is None:
            break
        matched.append(tree.messages[found])
        at = found
    return matched


#: What is the archive's, not the message's.
_ARCHIVE_FIELDS = {"uid", "parent", "created_at", "updated_at"}


def _same(stored: Message, given: Message) -> bool:
    return (
        stored.model_dump(mode="json", exclude=_ARCHIVE_FIELDS)
        == given.model_dump(mode="json", exclude=_ARCHIVE_FIELDS)
        # (an absent content and a null one dump alike)
        and ("content" in stored.model_fields_set) == ("content" in given.model_fields_set)
    )


def _given(message: Message) -> dict[str, Any]:
    return message.model_dump(mode="json", exclude_unset=True, exclude={"uid", "parent"})
