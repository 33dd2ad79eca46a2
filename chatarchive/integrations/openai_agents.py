"""The OpenAI Agents SDK's session memory, kept in a chat of the archive.

``ChatArchiveSession`` is a ``Session`` of the ``openai-agents`` package: the
``Runner`` reads a session's history from it and adds each turn's items to
it. Each Responses API item is one message of the chat, as the
``openai-responses`` format stores it (see ``chatarchive.formats.openai_responses``):
user and assistant messages with their parts, function and built-in tool
calls in ``tool_calls`` (by type and name), their outputs as tool messages,
reasoning as a ``reasoning`` message; the items that come out equal the
items that went in.

Beyond the SDK's ``Session``:

- the chat belongs to ``user_id`` and carries ``metadata``;
- ``store_run_usage(result)`` records a run's usage in the token columns of
  the turn's last message (where ``stats`` and SQL read usage);
  ``get_turn_usage`` and ``get_session_usage`` read it back per user turn and
  in all;
- ``create_branch_from_turn(n)`` goes back to just before the n-th user
  message: the next items start a branch there, and the turns that followed
  stay in the chat, off the active path (``list_branches``,
  ``switch_to_branch``).

Needs ``openai-agents`` (``pip install 'chatarchive[openai-agents]'``). The
archive is an ``AsyncChatArchive``, or a ``ChatArchive`` (whose calls then
run in a worker thread, as the SDK's ``SQLiteSession`` runs its own).

Examples:
    >>> import asyncio
    >>> from chatarchive import ChatArchive
    >>> archive = ChatArchive("sqlite://")
    >>> archive.upgrade()
    >>> session = ChatArchiveSession("lab-7", archive, user_id="alice")
    >>> asyncio.run(session.add_items([{"role": "user", "content": "Tm of ACGT?"}]))
    >>> asyncio.run(session.get_items())
    [{'role': 'user', 'content': 'Tm of ACGT?'}]
    >>> archive.get("lab-7").user_id
    'alice'
    >>> archive.close()
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar, cast

from agents.items import TResponseInputItem
from agents.memory import SessionABC, SessionSettings
from agents.memory.session_settings import coerce_session_settings, resolve_session_limit
from agents.result import RunResultBase
from agents.usage import Usage
from pydantic import TypeAdapter

from chatarchive._api import AsyncChatArchive, ChatArchive
from chatarchive._arguments import is_whole_number
from chatarchive._document import ChatDocument, ChatTree, Message
from chatarchive._exceptions import ChatNotFound, InvalidArgument
from chatarchive.formats import openai_responses
from chatarchive.formats._shapes import usage_back, usage_in_archive

from ._chats import SessionChat

__all__ = ["Branch", "ChatArchiveSession"]

T = TypeVar("T")


@dataclass(frozen=True)
class Branch:
    """One path of the session's chat: the uid of its last message, how many
    items it holds, and whether it is the active one."""

    leaf: str
    items: int
    active: bool


class ChatArchiveSession(SessionABC):
    """The history of the Agents SDK session ``session_id``, kept in the
    archive's chat of that id.

    Args:
        session_id: the session, and the chat's id.
        archive: an ``AsyncChatArchive`` or a ``ChatArchive``.
        user_id: the chat's user, when it is created.
        metadata: the chat's metadata, when it is created.
        session_settings: the SDK's settings (``limit``: how many of the
            latest items ``get_items`` returns by default).
    """

    def __init__(
        self,
        session_id: str,
        archive: ChatArchive | AsyncChatArchive,
        *,
        user_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        self._chat = SessionChat(archive, session_id, user_id, metadata)
        self.session_id = session_id
        # A dict as the SDK's own sessions take it: its keys checked ("Unknown session settings").
        self.session_settings = (
            SessionSettings() if session_settings is None else coerce_session_settings(session_settings)
        )

    async def _call(self, name: str, *args: Any, **kwargs: Any) -> Any:
        """The archive's operation ``name``, awaited (a ``ChatArchive``'s in a thread)."""
        archive = self._chat.archive
        if isinstance(archive, AsyncChatArchive):
            return await getattr(archive, name)(*args, **kwargs)
        operation: Callable[..., Any] = getattr(archive, name)
        return await asyncio.to_thread(operation, *args, **kwargs)

    async def _document(self) -> ChatDocument | None:
        return cast(ChatDocument | None, await self._call("find", self.session_id))

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The session's items (its chat's active path), or the latest
        ``limit`` of them, oldest first."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and (not is_whole_number(limit) or limit < 0):
            raise InvalidArgument(f"limit must be a whole number >= 0, not {limit!r}", argument="limit")
        document = await self._document()
        if document is None or limit == 0:
            return []
        messages = document.messages if limit is None else document.messages[-limit:]
        return [_item(message) for message in messages]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items, one message each, creating the chat with the first."""
        messages = openai_responses.items_to_messages(items, "items")
        if isinstance(self._chat.archive, AsyncChatArchive):
            await self._chat.aadd(messages)
        else:
            await asyncio.to_thread(self._chat.add, messages)

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the latest item and return it (``None``: the session is empty)."""
        if isinstance(self._chat.archive, AsyncChatArchive):
            popped = await self._chat.apop()
        else:
            popped = await asyncio.to_thread(self._chat.pop)
        return None if popped is None else _item(popped)

    async def clear_session(self) -> None:
        """Delete the session's chat, with every branch and its usage."""
        with contextlib.suppress(ChatNotFound):
            await self._call("delete", self.session_id)

    # -- usage ---------------------------------------------------------------------------

    async def store_run_usage(self, result: RunResultBase) -> None:
        """Record the usage of a run (``result.context_wrapper.usage``) as the
        usage of the turn it ended: on the session's last message, in its
        token columns (``input_tokens`` as ``prompt_tokens``,
        ``output_tokens`` as ``completion_tokens``) with ``requests`` and the
        token details beside them. Call it after ``Runner.run``."""
        usage = result.context_wrapper.usage
        document = await self._document()
        if usage is None or document is None or not document.messages:
            return
        await self._call("update_message", self.session_id, document.messages[-1].uid, usage=_usage_of(usage))

    async def get_turn_usage(
        self, user_turn_number: int | None = None
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """The usage of each user turn of the active path (a turn begins at a
        user message), as ``AdvancedSQLiteSession`` reports it:
        ``user_turn_number``, ``requests``, ``input_tokens``,
        ``output_tokens``, ``total_tokens`` and the token details. With
        ``user_turn_number``, that turn's alone (``{}``: none recorded)."""
        document = await self._document()
        turns = [] if document is None else _turn_usage(document.messages)
        if user_turn_number is None:
            return turns
        wanted = [turn for turn in turns if turn["user_turn_number"] == user_turn_number]
        return {key: value for key, value in wanted[0].items() if key != "user_turn_number"} if wanted else {}

    async def get_session_usage(self) -> dict[str, int] | None:
        """The usage of every turn recorded in the session, branches off the
        active path included (``None``: none recorded)."""
        try:
            tree = cast(ChatTree, await self._call("get_tree", self.session_id))
        except ChatNotFound:
            return None
        used = [_counts(message) for message in tree.messages if message.usage is not None]
        if not used:
            return None
        totals = {key: sum(counts[key] for counts in used) for key in _COUNTS}
        return {**totals, "total_turns": len(used)}

    # -- branches ------------------------------------------------------------------------

    async def create_branch_from_turn(self, turn_number: int) -> None:
        """Go back to just before the ``turn_number``-th user message (from
        1): the next items added start a branch there. The turns that
        followed stay in the chat, off the active path."""
        document = await self._document()
        starts = [] if document is None else _turn_starts(document.messages)
        if not is_whole_number(turn_number) or not 1 <= turn_number <= len(starts):
            raise InvalidArgument(
                f"the session has {len(starts)} user turns; there is no turn {turn_number!r}",
                argument="turn_number",
                chat_id=self.session_id,
            )
        assert document is not None
        await self._call(
            "truncate", self.session_id, starts[turn_number - 1], expected_version=document.version
        )

    async def list_branches(self) -> list[Branch]:
        """Every path of the chat, in the order its last message was added."""
        try:
            tree = cast(ChatTree, await self._call("get_tree", self.session_id))
        except ChatNotFound:
            return []
        active = tree.active_leaf
        ends = [message.uid for message in tree.leaves()]
        if active is not None and active not in ends:  # a path cut short ends within another
            ends.append(active)
        return [Branch(uid, len(tree.path(uid)), uid == active) for uid in ends]

    async def switch_to_branch(self, leaf: str) -> None:
        """Make the path ending at message ``leaf`` (a ``Branch.leaf``) the
        session's history."""
        await self._call("set_active_leaf", self.session_id, leaf)


def _item(message: Message) -> TResponseInputItem:
    (item,) = openai_responses.to_items(message)
    return cast(TResponseInputItem, item)


_COUNTS = ("requests", "input_tokens", "output_tokens", "total_tokens")
_DETAILS = ("input_tokens_details", "output_tokens_details")
_USAGE = TypeAdapter(Usage)


def _usage_of(usage: Usage) -> dict[str, Any]:
    """The SDK's usage as the archive's: its counts, details and per-request entries."""
    return cast(dict[str, Any], usage_in_archive(_USAGE.dump_python(usage, mode="json")))


def _counts(message: Message) -> dict[str, Any]:
    """A message's usage in the SDK's names: the counts (0 when absent) and the details."""
    usage = usage_back(message.usage.model_dump(mode="json")) if message.usage is not None else {}
    counts: dict[str, Any] = {key: usage.get(key) or 0 for key in _COUNTS}
    # Both details, None when absent, as the SDK's AdvancedSQLiteSession reports them.
    counts.update((key, usage[key] if isinstance(usage.get(key), dict) else None) for key in _DETAILS)
    return counts


def _added(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    """Two usages added up, key by key (nested details too; what is not a count is the later one's)."""
    total = dict(first)
    for key, value in second.items():
        before = total.get(key)
        if value is None and key in total:  # absent in the second: the first's stands
            continue
        if isinstance(before, dict) and isinstance(value, dict):
            total[key] = _added(before, value)
        elif type(before) is int and type(value) is int:
            total[key] = before + value
        else:
            total[key] = value
    return total


def _turn_starts(messages: list[Message]) -> list[int]:
    """The index of each user message: where each turn begins."""
    return [index for index, message in enumerate(messages) if message.role == "user"]


def _turn_usage(messages: list[Message]) -> list[dict[str, Any]]:
    starts = _turn_starts(messages)
    turns: list[dict[str, Any]] = []
    for number, (start, end) in enumerate(zip(starts, [*starts[1:], len(messages)], strict=True), start=1):
        used = [_counts(message) for message in messages[start:end] if message.usage is not None]
        if used:
            turn: dict[str, Any] = {}
            for counts in used:
                turn = _added(turn, counts)
            turns.append({"user_turn_number": number, **turn})
    return turns
