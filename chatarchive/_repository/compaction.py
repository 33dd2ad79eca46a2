"""Compaction that keeps the original: a summary and the last turns become
the active path, and what they stand for stays in the tree, off the path.

The summary's messages become a new root chain, placed just before the first
message kept; the first kept message becomes the summary's child (the rest
of the kept turns follow it as before), and the summary's last message names
the message the summary stands for up to (``Message.summarizes``): the one
before the kept turns, or the active leaf when none is kept. Nothing is
copied: every message is stored once, counted once by analytics, and found
once by a search of all branches; ``ChatDocument.history`` walks the tree
back through each summary to read the chat as it was written.

The chat is written again whole, in one transaction (its rows take new
positions: a summary comes before the turns it keeps, and a parent always
before its children).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from chatarchive._arguments import is_whole_number, require_text, require_version
from chatarchive._document import ChatDocument, Message
from chatarchive._exceptions import InvalidArgument, InvalidDocument

from .chat_rows import lock
from .reads import get_tree
from .unit import Unit, now
from .writes import parsed_messages, save

__all__ = ["compact", "history"]


def compact(
    unit: Unit,
    /,
    chat_id: str,
    summary: Iterable[Message | Mapping[str, Any]],
    *,
    keep_last: int = 1,
    expected_version: int | None = None,
) -> int:
    """Compact the chat's active path: the ``summary`` messages and the last
    ``keep_last`` turns of the path (a turn: a user message and what follows
    it up to the next one) become the active path; the turns before them
    stay in the chat, off the path, still found by search (unless it asks
    for ``branches="active"``),
    counted by analytics and exported with the tree. ``get`` returns the
    compacted path; ``history`` returns the chat as it was written. Turns are
    counted after the path's last summary, which a new compaction replaces.

    Example:
        >>> from chatarchive import ChatArchive
        >>> with ChatArchive("sqlite://") as archive:
        ...     archive.upgrade()
        ...     turns = [{"role": r, "content": f"{r} {n}"} for n in range(3) for r in ("user", "assistant")]
        ...     archive.save({"chat_id": "long", "messages": turns})
        ...     archive.compact("long", [{"role": "system", "content": "Earlier: two turns."}], keep_last=1)
        ...     [m.content for m in archive.get("long").messages]
        ...     len(archive.history("long").messages)
        1
        2
        ['Earlier: two turns.', 'user 2', 'assistant 2']
        6

    Args:
        summary: the messages that stand for the turns compacted (at least one).
        keep_last: how many of the path's last turns stay after the summary (0: none).
        expected_version: if given, the version the stored chat must have.

    Returns:
        The chat's new version.

    Raises:
        ChatNotFound: no such chat.
        InvalidArgument: ``keep_last`` keeps the whole path: nothing to compact.
        InvalidDocument: a summary message that is not valid, or whose uid the chat has.
        ConflictError: the stored version is not ``expected_version``.
    """
    require_text(chat_id, "chat_id")
    require_version(expected_version)
    if not is_whole_number(keep_last) or keep_last < 0:
        raise InvalidArgument(
            f"keep_last must be a whole number >= 0, not {keep_last!r}", argument="keep_last", chat_id=chat_id
        )
    added, _ = parsed_messages(chat_id, summary, unit.limits, unit.redactor)
    if not added:
        raise InvalidArgument("summary must hold at least one message", argument="summary", chat_id=chat_id)
    with unit.writing():
        current = lock(unit, chat_id, expected_version)
        tree = get_tree(unit, chat_id).document
        compacted = _compacted(tree, added, keep_last)
        return save(unit, compacted, expected_version=current["version"])


def _compacted(tree: ChatDocument, summary: list[Message], keep_last: int) -> ChatDocument:
    """The tree with ``summary`` in front of the path's last ``keep_last`` turns."""
    chat_id = tree.chat_id
    taken = {message.uid for message in tree.messages}
    for index, message in enumerate(summary):
        if message.uid in taken:
            raise InvalidDocument(
                f"the chat has a message with uid {message.uid!r}",
                chat_id=chat_id,
                message_index=index,
                field="uid",
            )
    path = tree.path()
    start = max((index + 1 for index, message in enumerate(path) if message.summarizes), default=0)
    turns = [index for index in range(start, len(path)) if path[index].role == "user"]
    if keep_last == 0:
        cut = len(path)
    elif turns:
        cut = turns[-min(keep_last, len(turns))]
    else:
        cut = start
    if cut == 0:
        raise InvalidArgument(
            f"keep_last={keep_last} keeps the whole active path of chat {chat_id!r}: nothing to compact",
            argument="keep_last",
            chat_id=chat_id,
        )
    head = summary[0].model_copy(update={"parent": None})
    chain = [head, *summary[1:]]
    chain[-1] = chain[-1].model_copy(update={"summarizes": path[cut - 1].uid})
    messages = list(tree.messages)
    if cut < len(path):
        first_kept = messages.index(path[cut])
        messages[first_kept] = path[cut].model_copy(update={"parent": chain[-1].uid})
        messages[first_kept:first_kept] = chain
        leaf = tree.messages[tree.active_index() or 0].uid
    else:
        messages += chain
        leaf = chain[-1].uid
    return tree.model_copy(update={"messages": messages, "active_leaf": leaf, "updated_at": now()})


def history(unit: Unit, /, chat_id: str) -> ChatDocument:
    """The chat as it was written, before any compaction: the messages from
    a root to the active leaf, each summary that ``compact`` wrote giving way
    to the turns it stands for (see ``ChatDocument.history``); for a chat
    never compacted, what ``get`` returns.

    Raises:
        ChatNotFound: no such chat.
    """
    return get_tree(unit, chat_id).document.history_document()
