"""Reads: whole documents, chat listings, counts, search and export."""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable, Sequence
from datetime import datetime
from functools import partial
from typing import Any

from sqlalchemy import func, literal, select, tuple_

from chatarchive._arguments import (
    fits_utc,
    is_whole_number,
    optional_moment,
    optional_text,
    require_at_least_one,
    require_choice,
    require_many,
    require_text,
)
from chatarchive._backends.base import DocumentRows
from chatarchive._document import ChatDocument, ChatFilter, ChatPage, ChatSummary, ChatTree
from chatarchive._exceptions import ChatNotFound, InvalidArgument
from chatarchive._rows import documents_from_rows
from chatarchive._schema import tables
from chatarchive._search import (
    BRANCHES,
    SEARCH_MODES,
    Branches,
    SearchFilters,
    SearchMode,
    SearchResults,
    check_query,
)
from chatarchive._types import ArchiveText, UTCDateTime

from . import attachments, sealing, searching
from .plans import Emit, FaceFacts, Kind, Step, Stream
from .unit import NOBODY, Unit, scoped_user

__all__ = [
    "chat_ids",
    "count_chats",
    "export",
    "find",
    "get",
    "get_many",
    "get_tree",
    "list_chats",
    "requested_ids",
    "search",
]


_SUMMARY_COLUMNS = (
    tables.chats.c.chat_id,
    tables.chats.c.user_id,
    tables.chats.c.title,
    tables.chats.c.model,
    tables.chats.c.created_at,
    tables.chats.c.updated_at,
    tables.chats.c.path_length.label("message_count"),
    tables.chats.c.version,
)


def get(unit: Unit, /, chat_id: str, *, leaf: str | None = None) -> ChatDocument:
    """The stored chat's active path, as a linear document, with ``version``
    set: for a chat without branches, the chat as it was saved. Only the
    path's rows are read, whatever the branches off it.

    Args:
        leaf: the uid of a message: the path from a root down to it instead.

    Raises:
        ChatNotFound: no such chat.
        InvalidArgument: ``leaf`` names no message of the chat.
    """
    if leaf is not None:
        require_text(leaf, "leaf")
        return get_tree(unit, chat_id).path_document(leaf)
    found = get_many(unit, [chat_id])
    if not found:
        raise ChatNotFound(chat_id)
    return found[0]


def find(unit: Unit, /, chat_id: str) -> ChatDocument | None:
    """The stored chat's active path, as ``get`` gives it, or ``None`` when
    there is no such chat (or it is another user's).

    Example:
        >>> from chatarchive import ChatArchive
        >>> with ChatArchive("sqlite://") as archive:
        ...     archive.upgrade()
        ...     archive.find("nobody's") is None
        True
    """
    require_text(chat_id, "chat_id")
    found = get_many(unit, [chat_id])
    return found[0] if found else None


def last_messages(unit: Unit, /, chat_id: str, count: int) -> ChatDocument | None:
    """The stored chat with the last ``count`` messages of its active path
    alone (``None``: no such chat, or another user's), reading only their
    rows: for the framework stores that give the latest messages of a long
    history. Not a document to save back: it lacks the messages before."""
    require_text(chat_id, "chat_id")
    if not is_whole_number(count) or count < 1:
        raise InvalidArgument(f"count must be a whole number >= 1, not {count!r}", argument="count")
    rows = _document_rows(unit, [chat_id], last=count)
    if not rows.chats:
        return None
    children = rows.children[chat_id]
    messages = children[tables.messages]
    if messages:  # the first message kept follows none of those read
        children = {**children, tables.messages: [{**messages[0], "parent_position": None}, *messages[1:]]}
    return documents_from_rows([chat_id], rows.chats, {chat_id: children})[0]


def get_tree(unit: Unit, /, chat_id: str) -> ChatTree:
    """The stored chat whole: every message of every branch, each with its
    parent, and the active leaf.

    Raises:
        ChatNotFound: no such chat.
    """
    wanted = requested_ids([chat_id])
    rows = _document_rows(unit, wanted, whole=True)
    found = documents_from_rows(wanted, rows.chats, rows.children)
    if not found:
        raise ChatNotFound(chat_id)
    return ChatTree(found[0])


def get_many(unit: Unit, /, chat_ids: Iterable[str], *, whole: bool = False) -> list[ChatDocument]:
    """Stored chats in the order asked, unknown ids skipped, each its active
    path as ``get`` returns it (``whole``: its whole tree, as ``export``
    gives it); a fixed number of queries however many messages there are
    (PostgreSQL: one; SQLite: one per table for every 10,000 chats)."""
    wanted = requested_ids(chat_ids)
    if not wanted:
        return []
    rows = _document_rows(unit, wanted, whole=whole)
    return documents_from_rows(wanted, rows.chats, rows.children)


#: How often a read whose chats were written meanwhile (an attachment of a part
#: read is gone) is read again before it gives up.
_READ_ATTEMPTS = 3


def _document_rows(
    unit: Unit, /, chat_ids: Sequence[str], *, whole: bool = False, last: int | None = None
) -> DocumentRows:
    """The rows of the documents of ``chat_ids`` (see ``Backend.load_document_rows``),
    sealed chats' rows opened and their parts' attachments put back."""
    for attempt in range(_READ_ATTEMPTS):
        with unit.reading():
            rows = unit.backend.load_document_rows(
                unit.executor, chat_ids, user_id=unit.user_id, whole=whole, last=last
            )
            last_attempt = attempt == _READ_ATTEMPTS - 1
            if all(
                attachments.restore(
                    unit, children[tables.content_parts], chat_id=chat_id if last_attempt else None
                )
                for chat_id, children in rows.children.items()
            ):
                for chat in rows.chats:
                    sealing.open_rows(unit, chat, rows.children[chat["chat_id"]])
                return rows
    raise AssertionError("the last attempt raises")  # pragma: no cover


def requested_ids(chat_ids: Iterable[str]) -> list[str]:
    """The chat ids asked for, each once, in order. A string is refused: it
    is one id, not a list of them (its characters would be looked up)."""
    require_many(chat_ids, "chat_ids", "chat ids")
    return list(dict.fromkeys(require_text(chat_id, "chat_id") for chat_id in chat_ids))


def list_chats(
    unit: Unit, /, where: ChatFilter | None = None, *, limit: int = 50, cursor: str | None = None
) -> ChatPage:
    """Chat summaries, most recently updated first, a page at a time.

    Args:
        where: which chats (all of them when not given).
        limit: how many at most.
        cursor: the ``next_cursor`` of the page before, for the page after it.
    """
    require_at_least_one(limit, "limit")
    query = _chats_where(unit, select(*_SUMMARY_COLUMNS), where)
    if cursor is not None:
        after_time, after_id = _decode_cursor(cursor)
        query = query.where(
            tuple_(tables.chats.c.updated_at, tables.chats.c.chat_id)
            < tuple_(literal(after_time, UTCDateTime()), literal(after_id, ArchiveText()))
        )
    query = query.order_by(tables.chats.c.updated_at.desc(), tables.chats.c.chat_id.desc()).limit(limit + 1)
    with unit.reading():
        rows = unit.execute(query).mappings().all()
    items = [ChatSummary.model_validate(dict(row)) for row in rows[:limit]]
    next_cursor = None
    if len(rows) > limit:
        last = items[-1]
        next_cursor = _encode_cursor(last.updated_at, last.chat_id)
    return ChatPage(items=items, next_cursor=next_cursor)


def count_chats(unit: Unit, /, where: ChatFilter | None = None) -> int:
    """How many chats ``where`` selects (all of them when not given)."""
    query = _chats_where(unit, select(func.count()).select_from(tables.chats), where)
    with unit.reading():
        return int(unit.execute(query).scalar_one())


def chat_ids(
    unit: Unit, /, where: ChatFilter | None = None, *, after: str | None = None, limit: int | None = None
) -> list[str]:
    """The ids of the chats ``where`` selects, in ascending order: all of
    them, or a page of ``limit`` after ``after``."""
    if limit is not None:
        require_at_least_one(limit, "limit")
    optional_text(after, "after")
    query = _chats_where(
        unit, select(tables.chats.c.chat_id).order_by(tables.chats.c.chat_id).limit(limit), where
    )
    if after is not None:
        query = query.where(tables.chats.c.chat_id > after)
    with unit.reading():
        return list(unit.execute(query).scalars())


def export(
    face: FaceFacts, /, where: ChatFilter | None = None, *, batch_size: int = 100
) -> Stream[ChatDocument]:
    """Every chat ``where`` selects (all of them when not given), whole (every
    branch: ``save`` takes each back as it was), in ``chat_id`` order, read
    ``batch_size`` chats at a time. An archive reads each batch in a
    transaction of its own, so none stays open between batches;
    ``where=ChatFilter(until=cutoff)`` exports what
    ``delete_older_than(cutoff)`` would delete."""
    require_at_least_one(batch_size, "batch_size")
    _check_filter(where)
    after: str | None = None
    while batch := (yield Step(Kind.READ, partial(chat_ids, where=where, after=after, limit=batch_size))):
        documents = yield Step(Kind.READ, partial(get_many, chat_ids=batch, whole=True))
        yield Emit(documents)
        after = batch[-1]


def search(
    unit: Unit,
    /,
    query: str,
    *,
    mode: SearchMode = "keyword",
    user_id: str | None = None,
    role: str | None = None,
    model: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    tag: str | None = None,
    branches: Branches = "all",
    limit: int = 20,
) -> SearchResults:
    """Messages that match ``query``, best first, one hit per message, and
    how fresh the search index is (``SearchResults.pending_chats``).

    ``mode`` is ``keyword`` (the default: messages with the query's words),
    ``vector`` (the messages whose text is nearest in meaning to the query's,
    by the archive's embedder: ``configure_search(embedder=...)``) or
    ``hybrid`` (both lists fused by reciprocal rank: a message found by
    both ranks first). A hit's ``rank`` is the keyword rank, the cosine
    similarity, or the fused score; its snippet marks the query's words.

    ``query`` takes web-search syntax: words (all must match), "quoted
    phrases", ``-word`` to exclude, ``or`` between alternatives. Input is never
    SQL; a query with nothing searchable in it finds nothing by keyword, and
    one of more than 64 words is refused (its snippets would take seconds).
    ``model`` matches the chat's or the message's model; ``since`` and
    ``until`` bound the message's ``created_at``; ``tag`` keeps chats with
    that tag; ``branches`` is ``all`` (every message of the chats' trees) or
    ``active`` (their active paths alone).

    Raises:
        InvalidArgument: an argument of the wrong kind, or a query of more
            than 64 words.
        SchemaNotReady: the archive's search index is off
            (``set_search_index``), or a search by meaning in an archive
            without an embedder.
        EmbedderError: the archive's embedder is not at hand in this process,
            or failed.
    """
    require_at_least_one(limit, "limit")
    since, until = optional_moment(since, "since"), optional_moment(until, "until")
    check_query(require_text(query, "query"))
    role, model, tag = optional_text(role, "role"), optional_text(model, "model"), optional_text(tag, "tag")
    require_choice(mode, "mode", SEARCH_MODES)
    require_choice(branches, "branches", BRANCHES)
    user = scoped_user(unit.user_id, user_id)
    if user is NOBODY:
        return SearchResults()
    filters = SearchFilters(
        user_id=user,
        role=role,
        model=model,
        since=since,
        until=until,
        tag=tag,
        active_path=branches == "active",
    )
    with unit.reading():
        return searching.search(unit, query.replace("\x00", " "), filters, limit=limit, mode=mode)


def _check_filter(where: object) -> None:
    if where is not None and not isinstance(where, ChatFilter):
        raise InvalidArgument(f"where must be a ChatFilter, not {type(where).__name__}", argument="where")


def _chats_where(unit: Unit, /, query: Any, where: ChatFilter | None) -> Any:
    """``query`` over ``chats``, kept to the chats the unit may see that
    ``where`` selects."""
    _check_filter(where)
    where = where or ChatFilter()
    query = unit.only_chats_of(query, where.user_id)
    if where.model is not None:
        query = query.where(tables.chats.c.model == where.model)
    if where.tag is not None:
        query = query.where(
            select(tables.chat_tags.c.chat_id)
            .where(tables.chat_tags.c.chat_id == tables.chats.c.chat_id, tables.chat_tags.c.tag == where.tag)
            .exists()
        )
    if where.since is not None:
        query = query.where(tables.chats.c.updated_at >= where.since)
    if where.until is not None:
        query = query.where(tables.chats.c.updated_at < where.until)
    return query


def _encode_cursor(updated_at: datetime, chat_id: str) -> str:
    raw = json.dumps([updated_at.isoformat(), chat_id], ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: object) -> tuple[datetime, str]:
    """The ``(updated_at, chat_id)`` a cursor of ``_encode_cursor`` holds;
    anything else (a cursor edited by hand) is refused, not half-read."""
    try:
        if not isinstance(cursor, str):
            raise TypeError
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        stamp, chat_id = json.loads(raw)
        if not isinstance(stamp, str) or not isinstance(chat_id, str):
            raise TypeError
        moment = datetime.fromisoformat(stamp)
        if not fits_utc(moment):
            raise ValueError
        return moment, chat_id
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise InvalidArgument("not a cursor returned by list_chats", argument="cursor") from None
