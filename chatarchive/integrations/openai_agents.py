"""The OpenAI Agents SDK's session memory, kept in a chat of the archive.

``ChatArchiveSession`` is a ``Session`` of the ``openai-agents`` package: the
``Runner`` reads a session's history from it and adds each turn's items to
it. Each Responses API item is one message of the chat, as the
``openai-responses`` format stores it (see ``chatarchive.formats.openai_responses``):
user and assistant messages with their parts, function and built-in tool
calls in ``tool_calls`` (by type and name), their outputs as tool messages,
reasoning as a ``reasoning`` message; the items that come out equal the
items that went in.

It also has the API of the SDK's ``AdvancedSQLiteSession``, on the archive's
rows:

- the chat belongs to ``user_id`` and carries ``metadata``;
- ``store_run_usage(result)`` records a run's usage in the token columns of
  the turn's last message (where ``stats`` and SQL read usage);
  ``get_turn_usage`` and ``get_session_usage`` read it back per user turn and
  in all;
- named branches: ``create_branch_from_turn(n, name)`` (or
  ``create_branch_from_content``) starts branch ``name`` just before the n-th
  user turn and makes it the current one; ``switch_to_branch``,
  ``list_branches``, ``delete_branch``. A branch is a path of the chat's tree:
  the turns a branch leaves behind stay in the chat, and the current
  branch is the chat's active path, so ``get``, search and exports see it.
  The branches' names are kept in the chat's metadata, under
  ``"openai_agents_branches"``;
- ``get_conversation_turns``, ``find_turns_by_content``,
  ``get_conversation_by_turns`` and ``get_tool_usage`` (read from the
  messages and their ``tool_calls`` rows), for the current branch or a named
  one.

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

import json
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, cast

from . import extra_missing

try:
    from agents.items import TResponseInputItem
    from agents.memory import SessionABC, SessionSettings
    from agents.memory.session_settings import coerce_session_settings, resolve_session_limit
    from agents.result import RunResultBase
    from agents.usage import Usage
except ImportError as exc:  # the extra is missing
    raise extra_missing(__name__, "the OpenAI Agents SDK (openai-agents)", "openai-agents") from exc
from pydantic import TypeAdapter

from chatarchive._api import AsyncChatArchive, ChatArchive
from chatarchive._arguments import is_whole_number
from chatarchive._document import ChatDocument, ChatTree, Message, new_id
from chatarchive._exceptions import InvalidArgument
from chatarchive._repository import reads
from chatarchive._repository.plans import Kind
from chatarchive.formats import openai_responses
from chatarchive.formats._shapes import usage_back, usage_in_archive

from ._chats import Call, SessionChat, Work, arun, call, find, get_tree, step, together

__all__ = ["ChatArchiveSession"]

#: The key of the chat's metadata that holds the session's named branches.
BRANCHES_KEY = "openai_agents_branches"
MAIN = "main"


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
        # Whether the chat has named branches, as last read (None: not read yet). A
        # chat without them is its active path, written with plain appends.
        self._branched: bool | None = None

    def _run(self, work: Work[Any]) -> Any:
        return arun(self._chat.archive, work)

    # -- the Session protocol ------------------------------------------------------------

    async def get_items(
        self, limit: int | None = None, branch_id: str | None = None
    ) -> list[TResponseInputItem]:
        """The session's items (the current branch's, or ``branch_id``'s), or
        the latest ``limit`` of them, oldest first."""
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None and (not is_whole_number(limit) or limit < 0):
            raise InvalidArgument(f"limit must be a whole number >= 0, not {limit!r}", argument="limit")
        if limit == 0:
            return []
        if limit is not None and branch_id is None:  # the latest items alone are read
            document = cast(
                ChatDocument | None,
                await self._run(step(Kind.READ, reads.last_messages, self.session_id, limit)),
            )
            return [] if document is None else [_item(message) for message in document.messages]
        messages = cast(list[Message], await self._run(self._path_of(branch_id)))
        return [_item(message) for message in (messages if limit is None else messages[-limit:])]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append items to the current branch, one message each, creating the
        chat with the first."""
        await self._run(self._add(openai_responses.items_to_messages(items, "items")))

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the current branch's latest item and return it (``None``:
        the branch is empty). A message that another branch's path holds
        stays in the chat; the current branch ends before it."""
        popped = cast(Message | None, await self._run(self._pop()))
        return None if popped is None else _item(popped)

    async def clear_session(self) -> None:
        """Delete the session's chat, with every branch and its usage."""
        await self._run(self._chat.delete())
        self._branched = False

    async def _atomic_replace_items(self, items: list[TResponseInputItem]) -> bool:
        """The SDK's compaction (``OpenAIResponsesCompactionSession``)
        replaces the session's items with the compacted ones through this
        hook: they become the current branch's path as a summary, and the
        items they replace stay in the chat, off the path (``history`` of the
        archive reads the session as it was written), instead of being
        cleared and added again."""
        await self._run(self._compact(openai_responses.items_to_messages(items, "items")))
        return True

    def _compact(self, messages: list[dict[str, Any]]) -> Work[None]:
        document = yield from find(self.session_id)
        if document is None or not document.messages:  # nothing to compact: the items are the session
            yield from self._add(messages)
            return
        if not messages:  # compacted to nothing: an empty path, the items off it
            yield Call("truncate", (self.session_id, 0))
            return
        messages[-1] = {
            **messages[-1],
            "uid": new_id(),
        }  # the summary's last message: the branch goes on from it
        compacted = Call("compact", (self.session_id, messages), {"keep_last": 0})
        record = _record_of(document)
        if record is None:
            yield compacted
            return
        branch = _Branch(after=messages[-1]["uid"], created_at=record.branches[record.current].created_at)
        yield from together(compacted, _recorded(document, record.with_branch(record.current, branch)))

    # -- usage ---------------------------------------------------------------------------

    async def store_run_usage(self, result: RunResultBase) -> None:
        """Record the usage of a run (``result.context_wrapper.usage``) as the
        usage of the turn it ended: on the current branch's last message, in
        its token columns (``input_tokens`` as ``prompt_tokens``,
        ``output_tokens`` as ``completion_tokens``) with ``requests`` and the
        token details beside them. Call it after ``Runner.run``."""
        usage = result.context_wrapper.usage
        if usage is not None:
            await self._run(self._store_usage(_usage_of(usage)))

    async def get_turn_usage(
        self, user_turn_number: int | None = None, branch_id: str | None = None
    ) -> list[dict[str, Any]] | dict[str, Any]:
        """The usage of each user turn of the current branch (or
        ``branch_id``; a turn begins at a user message), as
        ``AdvancedSQLiteSession`` reports it: ``user_turn_number``,
        ``requests``, ``input_tokens``, ``output_tokens``, ``total_tokens`` and
        the token details. With ``user_turn_number``, that turn's alone
        (``{}``: none recorded)."""
        turns = _turn_usage(cast(list[Message], await self._run(self._path_of(branch_id))))
        if user_turn_number is None:
            return turns
        wanted = [turn for turn in turns if turn["user_turn_number"] == user_turn_number]
        return {key: value for key, value in wanted[0].items() if key != "user_turn_number"} if wanted else {}

    async def get_session_usage(self, branch_id: str | None = None) -> dict[str, int] | None:
        """The usage of every turn recorded in the session, on every branch
        and off them (or on ``branch_id``'s path alone); ``None``: none
        recorded."""
        tree = cast(ChatTree | None, await self._run(get_tree(self.session_id)))
        if tree is None:
            return None
        messages = tree.messages if branch_id is None else _Layout(tree).path(branch_id)
        used = [_counts(message) for message in messages if message.usage is not None]
        if not used:
            return None
        totals = {key: sum(counts[key] for counts in used) for key in _COUNTS}
        return {**totals, "total_turns": len(used)}

    # -- branches ------------------------------------------------------------------------

    async def create_branch_from_turn(self, turn_number: int, branch_name: str | None = None) -> str:
        """Start branch ``branch_name`` (a new name; made up when ``None``)
        just before the current branch's ``turn_number``-th user message
        (from 1), and make it the current branch: it holds the turns before
        that one, and the next items added go on from there. The turns that
        followed stay in the chat, on the branch they were on.

        Returns:
            The branch's name.
        """
        if branch_name is not None and (not isinstance(branch_name, str) or not branch_name.strip()):
            raise InvalidArgument("Branch name cannot be empty", argument="branch_name")
        return cast(str, await self._run(self._create_branch(turn_number, branch_name)))

    async def create_branch_from_content(self, search_term: str, branch_name: str | None = None) -> str:
        """``create_branch_from_turn`` at the first user turn of the current
        branch whose text holds ``search_term``."""
        turns = await self.find_turns_by_content(search_term)
        if not turns:
            raise InvalidArgument(
                f"No user turns found containing {search_term!r}",
                argument="search_term",
                chat_id=self.session_id,
            )
        return await self.create_branch_from_turn(turns[0]["turn"], branch_name)

    async def switch_to_branch(self, branch_id: str) -> None:
        """Make branch ``branch_id`` the current one (and the chat's active path)."""
        await self._run(self._switch(branch_id))

    async def delete_branch(self, branch_id: str, force: bool = False) -> None:
        """Delete branch ``branch_id`` and the messages no other branch's path
        holds. The current branch is deleted only with ``force`` (the
        session goes back to ``main``); ``main`` never. A deleted name is
        not given again."""
        if not isinstance(branch_id, str) or not branch_id.strip():
            raise InvalidArgument("Branch ID cannot be empty", argument="branch_id")
        if branch_id == MAIN:
            raise InvalidArgument("Cannot delete the 'main' branch", argument="branch_id")
        await self._run(self._delete_branch(branch_id, force))

    async def list_branches(self) -> list[dict[str, Any]]:
        """Every branch, oldest first: ``branch_id``, ``message_count``,
        ``user_turns``, ``is_current`` and ``created_at`` (``[]``: no chat)."""
        tree = cast(ChatTree | None, await self._run(get_tree(self.session_id)))
        if tree is None:
            return []
        layout = _Layout(tree)
        listed = []
        for name, branch in layout.record.branches.items():
            path = layout.path(name)
            listed.append(
                {
                    "branch_id": name,
                    "message_count": len(path),
                    "user_turns": sum(message.role == "user" for message in path),
                    "is_current": name == layout.record.current,
                    "created_at": branch.created_at or _first_time(tree),
                }
            )
        return listed

    # -- turns ---------------------------------------------------------------------------

    async def get_conversation_turns(self, branch_id: str | None = None) -> list[dict[str, Any]]:
        """The user turns of the current branch (or ``branch_id``), as
        ``AdvancedSQLiteSession`` gives them: ``turn`` (from 1), ``content``
        (the first 100 characters), ``full_content``, ``timestamp`` and
        ``can_branch``."""
        path = cast(list[Message], await self._run(self._path_of(branch_id)))
        return [_turn(number, message, 100) for number, message in _user_turns(path)]

    async def find_turns_by_content(
        self, search_term: str, branch_id: str | None = None
    ) -> list[dict[str, Any]]:
        """The user turns whose text holds ``search_term`` (ignoring the case
        of ASCII letters), shaped as ``get_conversation_turns`` shapes them."""
        if not isinstance(search_term, str):
            raise InvalidArgument("search_term must be a string", argument="search_term")
        pattern = re.compile(re.escape(search_term), re.IGNORECASE | re.ASCII)
        path = cast(list[Message], await self._run(self._path_of(branch_id)))
        return [
            _turn(number, message, 50)
            for number, message in _user_turns(path)
            if any(pattern.search(text) for text in _texts(_item(message).get("content")))
        ]

    async def get_conversation_by_turns(
        self, branch_id: str | None = None
    ) -> dict[int, list[dict[str, str | None]]]:
        """The current branch's (or ``branch_id``'s) items by user turn: each
        item's type (``user``, ``assistant`` or the item's ``type``) and tool
        name (``None`` for what is not a tool call)."""
        path = cast(list[Message], await self._run(self._path_of(branch_id)))
        turns: dict[int, list[dict[str, str | None]]] = {}
        for number, message in _numbered(path):
            item = _item(message)
            turns.setdefault(number, []).append({"type": _kind(item), "tool_name": _tool_name(item)})
        return turns

    async def get_tool_usage(self, branch_id: str | None = None) -> list[tuple[str, int, int]]:
        """How often each tool was called in each user turn of the current
        branch (or ``branch_id``): ``(tool_name, calls, turn)``, by turn."""
        path = cast(list[Message], await self._run(self._path_of(branch_id)))
        counted: dict[tuple[int, str], int] = {}
        for number, message in _numbered(path):
            item = _item(message)
            name = _tool_name(item) if _kind(item) in _CALLS else None
            if name is not None:
                counted[number, name] = counted.get((number, name), 0) + 1
        return [(name, count, number) for (number, name), count in counted.items()]

    # -- the work ------------------------------------------------------------------------

    def _path_of(self, branch_id: str | None) -> Work[list[Message]]:
        """The messages of the current branch (the active path) or of ``branch_id``."""
        if branch_id is None:
            document = yield from find(self.session_id)
            self._branched = _record_of(document) is not None
            return [] if document is None else document.messages
        tree = yield from get_tree(self.session_id)
        if tree is None:
            if branch_id == MAIN:
                return []
            raise _no_branch(branch_id, self.session_id)
        return _Layout(tree).path(branch_id)

    def _add(self, messages: list[dict[str, Any]]) -> Work[None]:
        if not messages:
            return
        if self._branched is not False:
            document = yield from find(self.session_id)
            record = _record_of(document)
            self._branched = record is not None
            if record is not None and document is not None:
                current = record.branches[record.current]
                if current.first not in {message.uid for message in document.messages}:
                    # The branch's first message of its own: its uid recorded with it.
                    messages[0] = {**messages[0], "uid": new_id()}
                    branch = replace(current, first=messages[0]["uid"])
                    yield from together(
                        _recorded(document, record.with_branch(record.current, branch)),
                        Call("append", (self.session_id, messages)),
                    )
                    return
        yield from self._chat.add(messages)

    def _pop(self) -> Work[Message | None]:
        if self._branched is False:
            return (yield from self._chat.pop())
        tree = yield from get_tree(self.session_id)
        if tree is None:
            return None
        layout = _Layout(tree)
        if not layout.branched:
            self._branched = False
            return (yield from self._chat.pop())
        name = layout.record.current
        path = layout.path(name)
        if not path:
            return None
        last, before = path[-1], (path[-2].uid if len(path) > 1 else None)
        branch = layout.record.branches[name]
        if last.uid in layout.held_by_others(name):  # another branch's too: the branch ends before it
            record = layout.record.with_branch(name, _Branch(before, None, branch.created_at)).detach(
                branch.first
            )
            calls = layout.moved_to(path[:-1])
        else:
            record = layout.record.with_branch(
                name, replace(branch, after=before) if branch.after == last.uid else branch
            )
            cut = Call("truncate", (self.session_id, len(path) - 1), {"delete": True})
            calls = [*layout.moved_to(path), cut]
        yield from together(_recorded(tree.document, record, tree.version), *calls)
        return last

    def _store_usage(self, usage: dict[str, Any]) -> Work[None]:
        document = yield from find(self.session_id)
        if document is not None and document.messages:
            yield from call("update_message", self.session_id, document.messages[-1].uid, usage=usage)

    def _create_branch(self, turn_number: int, name: str | None) -> Work[str]:
        tree = yield from get_tree(self.session_id)
        layout = _Layout(tree) if tree is not None else None
        current = MAIN if layout is None else layout.record.current
        path = [] if layout is None else layout.path(current)
        starts = _turn_starts(path)
        if (
            tree is None
            or layout is None
            or not is_whole_number(turn_number)
            or not 1 <= turn_number <= len(starts)
        ):
            raise InvalidArgument(
                f"Turn {turn_number!r} does not contain a user message in branch {current!r}",
                argument="turn_number",
                chat_id=self.session_id,
            )
        record = layout.record
        if name is None:
            name = record.new_name(f"branch_from_turn_{turn_number}_{int(time.time())}")
        elif not record.unused(name):
            raise InvalidArgument(
                f"Branch ID {name!r} has already been used. Choose a new branch ID.",
                argument="branch_name",
                chat_id=self.session_id,
            )
        start = starts[turn_number - 1]
        branch = _Branch(after=path[start - 1].uid if start else None, created_at=_now())
        record = replace(record.with_branch(name, branch), current=name)
        yield from together(_recorded(tree.document, record, tree.version), *layout.moved_to(path[:start]))
        self._branched = True
        return name

    def _switch(self, name: str) -> Work[None]:
        tree = yield from get_tree(self.session_id)
        if tree is None:
            if name == MAIN:
                return
            raise _no_branch(name, self.session_id)
        layout = _Layout(tree)
        path = layout.path(name)
        if layout.branched:
            record = replace(layout.record, current=name)
            yield from together(_recorded(tree.document, record, tree.version), *layout.moved_to(path))

    def _delete_branch(self, name: str, force: bool) -> Work[None]:
        tree = yield from get_tree(self.session_id)
        if tree is None:
            raise _no_branch(name, self.session_id)
        layout = _Layout(tree)
        path = layout.path(name)  # (unknown: refused)
        record = layout.record
        if name == record.current and not force:
            raise InvalidArgument(
                f"Cannot delete current branch {name!r}. Use force=True or switch branches first",
                argument="branch_id",
                chat_id=self.session_id,
            )
        held = layout.held_by_others(name)
        keep = next((index for index, message in enumerate(path) if message.uid not in held), len(path))
        calls: list[Call] = []
        if keep < len(path):  # the messages of its own, with what grew below them
            calls += [*layout.moved_to(path), Call("truncate", (self.session_id, keep), {"delete": True})]
        current = MAIN if name == record.current else record.current
        calls += layout.moved_to(layout.path(current))
        record = replace(record.without(name), current=current)
        if layout.record.branches[name].first in held:
            record = record.detach(layout.record.branches[name].first)
        yield from together(_recorded(tree.document, record, tree.version), *calls)


# -- the branches of a chat --------------------------------------------------------------------


@dataclass(frozen=True)
class _Branch:
    """A named branch: its path is the path to ``after`` (the message it
    starts after; ``None``: at the start), then from ``first`` (its first
    message of its own, when it has one) down the messages added after it
    that begin no other branch, the latest at each step."""

    after: str | None = None
    first: str | None = None
    created_at: str | None = None


@dataclass(frozen=True)
class _Record:
    """The session's named branches, as the chat's metadata keeps them."""

    current: str = MAIN
    branches: dict[str, _Branch] = field(default_factory=dict)
    #: The names of deleted branches (not given again).
    retired: tuple[str, ...] = ()
    #: First messages of branches that no longer start there, still in the
    #: chat (on other branches' paths): no branch's path goes down into them.
    detached: tuple[str, ...] = ()

    @classmethod
    def of(cls, kept: Any) -> _Record:
        branches = {name: _Branch(**value) for name, value in kept["branches"].items()}
        return cls(kept["current"], branches, tuple(kept.get("retired", ())), tuple(kept.get("detached", ())))

    def kept(self) -> dict[str, Any]:
        return {
            "current": self.current,
            "branches": {
                name: {key: value for key, value in vars(branch).items() if value is not None}
                for name, branch in self.branches.items()
            },
            "retired": list(self.retired),
            "detached": list(self.detached),
        }

    def with_branch(self, name: str, branch: _Branch) -> _Record:
        return replace(self, branches={**self.branches, name: branch})

    def without(self, name: str) -> _Record:
        kept = {key: value for key, value in self.branches.items() if key != name}
        return replace(self, branches=kept, retired=(*self.retired, name))

    def detach(self, uid: str | None) -> _Record:
        return self if uid is None else replace(self, detached=(*self.detached, uid))

    def unused(self, name: str) -> bool:
        return name not in self.branches and name not in self.retired

    def new_name(self, base: str) -> str:
        name, suffix = base, 1
        while not self.unused(name):
            suffix += 1
            name = f"{base}_{suffix}"
        return name


def _record_of(document: ChatDocument | None) -> _Record | None:
    kept = None if document is None or document.metadata is None else document.metadata.get(BRANCHES_KEY)
    return None if kept is None else _Record.of(kept)


def _recorded(document: ChatDocument, record: _Record, version: int | None = None) -> Call:
    """The update of the chat's metadata that keeps ``record`` (at ``version``, when given)."""
    metadata = {**(document.metadata or {}), BRANCHES_KEY: record.kept()}
    return Call("update", (document.chat_id,), {"metadata": metadata, "expected_version": version})


class _Layout:
    """The named branches of a chat's tree. A chat that has none has one,
    ``main``: its active path."""

    def __init__(self, tree: ChatTree) -> None:
        self.tree = tree
        record = _record_of(tree.document)
        self.branched = record is not None
        self.record = record or _Record(branches={MAIN: _Branch(after=tree.active_leaf)})
        self._uids = {message.uid for message in tree.messages}
        parents = tree.document.parent_indexes()
        self._children: dict[int, list[int]] = {}
        for index, parent in enumerate(parents):
            if parent is not None:
                self._children.setdefault(parent, []).append(index)
        self._index = {message.uid: index for index, message in enumerate(tree.messages)}

    def leaf(self, name: str) -> str | None:
        branch = self.record.branches.get(name)
        if branch is None:
            raise _no_branch(name, self.tree.chat_id)
        if branch.first is None or branch.first not in self._uids:
            return branch.after
        starts = {other.first for other in self.record.branches.values()} | set(self.record.detached)
        messages = self.tree.messages
        at = self._index[branch.first]
        while True:
            below = [child for child in self._children.get(at, ()) if messages[child].uid not in starts]
            if not below:
                return messages[at].uid
            at = below[-1]

    def path(self, name: str) -> list[Message]:
        leaf = self.leaf(name)
        return [] if leaf is None else self.tree.path(leaf)

    def held_by_others(self, name: str) -> set[str]:
        """The uids of the messages on the paths of the other branches."""
        return {
            message.uid for other in self.record.branches if other != name for message in self.path(other)
        }

    def moved_to(self, path: list[Message]) -> list[Call]:
        """The calls that make ``path`` the chat's active path."""
        if path:
            return [Call("set_active_leaf", (self.tree.chat_id, path[-1].uid))]
        return [Call("truncate", (self.tree.chat_id, 0))]


def _no_branch(name: str, chat_id: str) -> InvalidArgument:
    return InvalidArgument(f"Branch {name!r} does not exist", argument="branch_id", chat_id=chat_id)


def _now() -> str:
    return datetime.now(UTC).isoformat()


def _first_time(tree: ChatTree) -> str | None:
    created = tree.document.created_at or (tree.messages[0].created_at if tree.messages else None)
    return None if created is None else created.isoformat()


# -- turns and tools -----------------------------------------------------------------------------

#: The item types that are tool calls.
_CALLS = frozenset(
    {
        "function_call",
        "computer_call",
        "file_search_call",
        "web_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "tool_search_call",
        "custom_tool_call",
        "mcp_call",
        "mcp_approval_request",
        "mcp_list_tools",
    }
)


def _numbered(path: list[Message]) -> list[tuple[int, Message]]:
    """Each message with the number of its user turn (0 before the first)."""
    numbered, number = [], 0
    for message in path:
        number += message.role == "user"
        numbered.append((number, message))
    return numbered


def _user_turns(path: list[Message]) -> list[tuple[int, Message]]:
    return [(number, message) for number, message in _numbered(path) if message.role == "user"]


def _turn(number: int, message: Message, preview: int) -> dict[str, Any]:
    content = _item(message).get("content", "")
    text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
    return {
        "turn": number,
        "content": text[:preview] + "..." if len(text) > preview else text,
        "full_content": content,
        "timestamp": None if message.created_at is None else message.created_at.isoformat(),
        "can_branch": True,
    }


def _texts(content: Any) -> list[str]:
    if isinstance(content, str):
        return [content]
    if isinstance(content, list):
        return [
            part["text"] for part in content if isinstance(part, dict) and isinstance(part.get("text"), str)
        ]
    return []


def _kind(item: Mapping[str, Any]) -> str:
    role = item.get("role")
    if role in ("user", "assistant"):
        return cast(str, role)
    return str(item.get("type") or "other")


def _tool_name(item: Mapping[str, Any]) -> str | None:
    """The tool an item calls (or answers), named as ``AdvancedSQLiteSession``
    names it: ``server.tool`` for MCP, the type for built-in tools,
    ``namespace.name`` for namespaced functions."""
    kind = item.get("type")
    name, namespace = item.get("name"), item.get("namespace")
    if kind in ("mcp_call", "mcp_approval_request") and "server_label" in item:
        label = item.get("server_label")
        return f"{label}.{name}" if name and label else str(label or name) if (label or name) else None
    if kind in ("tool_search_call", "tool_search_output"):
        return "tool_search"
    if kind in _CALLS and "name" not in item:
        return str(kind)
    if not isinstance(name, str) or not name:
        return None
    if isinstance(namespace, str) and namespace and namespace != name:
        return f"{namespace}.{name}"
    return name


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
    """The usage recorded in each user turn, added up, by turn (the turns with none left out)."""
    turns: dict[int, dict[str, Any]] = {}
    for number, message in _numbered(messages):
        if number and message.usage is not None:
            turns[number] = _added(turns.get(number, {}), _counts(message))
    return [{"user_turn_number": number, **turn} for number, turn in turns.items()]
