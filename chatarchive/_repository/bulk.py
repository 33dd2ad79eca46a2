"""Bulk writes: ``save_many``, a batch at a time, and the bulk-load mode.

Documents are validated and converted in a thread (``.batches``) while the
batch before is written: by the backend's fastest row writer (binary ``COPY``
on PostgreSQL), several chats per statement.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterable, Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from sqlalchemy import delete as delete_rows

from chatarchive._backends import BulkLoad, database_errors
from chatarchive._exceptions import (
    ChatArchiveError,
    ChatNotFound,
    ConflictError,
    DatabaseError,
    InvalidArgument,
    InvalidDocument,
)
from chatarchive._rows import ChatRows
from chatarchive._schema import metadata, tables

from . import attachments, sealing, searching
from .batches import PreparedBatch, check_save_many, split_by_chat
from .chat_rows import CREATE_ATTEMPTS, delete_children, lock_chats, refuse_to_lose_branches
from .plans import Docs, FaceFacts, InTransaction, Kind, NextBatch, Plan, Prepare, Step, Together
from .unit import Unit

__all__ = ["OnError", "save_many"]

#: ``on_error(index, error)``: told about a document that could not be saved.
OnError = Callable[[int, ChatArchiveError], None]

_CHATS_KEY = tables.chats.primary_key.name


def save_many(
    face: FaceFacts,
    /,
    docs: Docs,
    *,
    batch_size: int = 250,
    bulk: bool = False,
    on_error: OnError | None = None,
    writers: int = 1,
) -> Plan[int]:
    """Save many chats fast: validated one by one, written ``batch_size`` at a
    time (binary COPY on PostgreSQL), in memory that does not grow with the
    input. Chats already stored with the same ``chat_id`` are replaced, as by
    ``save``.

    An archive commits each batch in a transaction of its own, so memory and
    lock time stay bounded and a retried import simply replaces what was
    saved; a repository writes them all in its transaction, in a savepoint
    (all or nothing).

    Args:
        docs: any iterable, for instance a generator over a huge file; on the
            asyncio faces an async iterable too, its items awaited on the
            event loop.
        batch_size: documents written per round trip (1 to 10,000).
        bulk: load with foreign keys and secondary B-tree indexes dropped, and
            re-create them (validating every row in one pass) at the end, in
            one transaction. PostgreSQL only (elsewhere it changes nothing).
            Takes exclusive locks on the archive's tables until the
            transaction ends: use it only when nothing else writes to the
            archive meanwhile.
        on_error: called with the document's index in ``docs`` and the error
            for each document that cannot be saved; the others are saved.
            Without it, the first error is raised.
        writers: an archive on PostgreSQL writes through this many connections
            at once, each chat always through the same one (so the later copy
            of a chat still wins); the database then indexes text on as many
            cores. Not with ``bulk``, nor in a repository's one transaction; on
            SQLite, which has one writer at a time, it changes nothing.
            ``on_error`` is then called from the writers' threads (or tasks),
            one call at a time.

    Returns:
        How many documents were saved.
    """
    check_save_many(
        [] if isinstance(docs, AsyncIterable) else docs,
        batch_size,
        bulk=bulk,
        on_error=on_error,
        writers=writers,
    )
    if not face.commits_each_step and writers != 1:
        raise InvalidArgument(
            "a transaction writes through its one connection: writers must be 1", argument="writers"
        )
    if bulk and face.commits_each_step:
        loaded: int = yield InTransaction(
            partial(save_many, docs=docs, batch_size=batch_size, bulk=True, on_error=on_error)
        )
        return loaded
    batches = yield Prepare(
        docs, batch_size, stop_at_error=on_error is None, limits=face.limits, redactor=face.redactor
    )
    if not face.commits_each_step:
        return (yield from _in_one_transaction(batches, bulk=bulk, on_error=on_error))
    writers = writers if face.backend.parallel_writers else 1
    report = on_error if writers == 1 or on_error is None else _one_at_a_time(on_error)
    saved = 0
    while (batch := (yield NextBatch(batches))) is not None:
        if writers == 1:
            saved += yield Step(Kind.WRITE, partial(write_batch, batch=batch, on_error=report))
            continue
        batch.report_errors(report)
        parts = [part for part in split_by_chat(batch, writers) if part.documents]
        results = yield Together(
            [
                Step(Kind.WRITE, partial(write_rows, documents=part.documents, on_error=report))
                for part in parts
            ]
        )
        saved += sum(results)
    return saved


def _in_one_transaction(batches: Any, *, bulk: bool, on_error: OnError | None) -> Plan[int]:
    """Every batch in the caller's transaction, in one savepoint: a failure
    leaves the transaction as it was before save_many."""
    opened = yield Step(Kind.WRITE, partial(_begin, bulk=bulk))
    saved = 0
    try:
        while (batch := (yield NextBatch(batches))) is not None:
            saved += yield Step(Kind.WRITE, partial(write_batch, batch=batch, on_error=on_error))
        yield Step(Kind.WRITE, partial(_end, opened=opened))
    except BaseException:
        yield Step(Kind.WRITE, partial(_abandon, opened=opened))
        raise
    return saved


def _one_at_a_time(on_error: OnError) -> OnError:
    lock = threading.Lock()

    def report(index: int, error: ChatArchiveError) -> None:
        with lock:
            on_error(index, error)

    return report


@dataclass
class _Opened:
    """What ``_begin`` opened: its savepoint, and a bulk load's own
    savepoint and what it took away."""

    savepoint: Any
    bulk: Any = None
    load: BulkLoad | None = None


def _begin(unit: Unit, /, *, bulk: bool) -> _Opened:
    """Before the first batch: a savepoint (with ``savepoints``) and, for a
    bulk load, one of its own and the backend's preparation of the tables."""
    with unit.reading():
        opened = _Opened(unit.executor.begin_nested() if unit.savepoints else None)
        if not bulk:
            return opened
        try:
            opened.bulk = unit.executor.begin_nested()
            # Into an empty archive the index of the search terms is built
            # once, at the end, over every term the load wrote.
            opened.load = unit.backend.begin_bulk(unit.executor, terms_index=not searching.is_empty(unit))
        except BaseException:
            _abandon(unit, opened=opened)
            raise
        return opened


def _end(unit: Unit, /, *, opened: _Opened) -> None:
    """After the last batch: what a bulk load took away put back (the
    database checks every row in one pass), the savepoints released."""
    with unit.reading():
        if opened.bulk is not None:
            if opened.load is not None:
                unit.backend.end_bulk(unit.executor, opened.load)
            opened.bulk.commit()
        if opened.savepoint is not None:
            opened.savepoint.commit()


def _abandon(unit: Unit, /, *, opened: _Opened) -> None:
    """After a failure: back to where save_many began (with ``savepoints``),
    or at least to before the bulk load, with what it took away in place again.
    Nothing is sent before the rollbacks: the failure may have aborted the
    transaction, where any other statement fails and hides the first error."""
    with database_errors():
        for savepoint in (opened.bulk, opened.savepoint):
            if savepoint is not None and savepoint.is_active:
                savepoint.rollback()


def write_batch(unit: Unit, /, batch: PreparedBatch, on_error: OnError | None) -> int:
    """Write one prepared batch; returns how many documents were saved."""
    batch.report_errors(on_error)
    return write_rows(unit, batch.documents, on_error)


def write_rows(
    unit: Unit,
    /,
    documents: Mapping[str, tuple[int, ChatRows]],
    on_error: OnError | None,
) -> int:
    """Write the rows of ``documents`` (by chat id, with their index in the
    input), each chat replacing the stored one; a document that cannot be
    written is reported to ``on_error``, or raised without it."""
    if not documents:
        return 0
    for attempt in range(1, CREATE_ATTEMPTS + 1):
        try:
            with unit.writing(savepoint=True):
                _write_documents(unit, documents)
            return len(documents)
        except ConflictError as exc:
            # Another writer created one of the chats after the lock found none:
            # the batch again finds it and replaces it, as save does.
            if exc.constraint == _CHATS_KEY and attempt < CREATE_ATTEMPTS:
                continue
            error: ChatArchiveError = exc
            if exc.constraint == _CHATS_KEY and unit.user_id is not None:
                # A chat that row-level security hides (another user's) holds the
                # id: not found, as save and every other write answer it.
                if len(documents) == 1:
                    error = ChatNotFound(next(iter(documents)))
                elif on_error is None:  # the first such chat's own error
                    for chat_id, item in documents.items():
                        write_rows(unit, {chat_id: item}, None)
        except ChatArchiveError as exc:
            error = exc
        break
    if on_error is None or (isinstance(error, DatabaseError) and error.lasting):
        raise error  # (a lasting failure is no document's: the next would meet it too)
    if len(documents) == 1:
        ((index, _),) = documents.values()
        on_error(index, error)
        return 0
    # Find the culprit: save the documents one at a time.
    return sum(write_rows(unit, {chat_id: item}, on_error) for chat_id, item in documents.items())


def _write_documents(unit: Unit, /, documents: Mapping[str, tuple[int, ChatRows]]) -> None:
    if unit.user_id is not None:
        for chat_id, (_, chat_rows) in documents.items():
            if chat_rows.chat["user_id"] is None:
                chat_rows.chat["user_id"] = unit.user_id
                chat_rows.of_user(unit.user_id)
            elif chat_rows.chat["user_id"] != unit.user_id:
                raise InvalidDocument(f"user_id must be {unit.user_id!r}", chat_id=chat_id, field="user_id")
    locked = lock_chats(
        unit,
        tables.chats.c.chat_id.in_(documents),
        tables.chats.c.version,
        tables.chats.c.user_id,
        tables.chats.c.message_count,
        tables.chats.c.path_length,
    )
    stored: dict[str, int] = {}
    for row in locked:
        chat_id = row["chat_id"]
        if unit.user_id is not None and row["user_id"] != unit.user_id:
            raise ChatNotFound(chat_id)
        new = documents[chat_id][1].chat
        if new["path_length"] == new["message_count"]:  # a linear document (all its messages on the path)
            refuse_to_lose_branches(chat_id, row)
        stored[chat_id] = row["version"]
    if stored:
        selected = tables.chats.c.chat_id.in_(stored)
        delete_children(unit, selected)
        unit.execute(delete_rows(tables.chats).where(selected))
    rows = [item[1] for item in documents.values()]
    mark = searching.pending_mark(unit)
    for chat_id, (_, chat_rows) in documents.items():  # a batch written again after a race: all of them
        chat_rows.chat["version"] = stored.get(chat_id, 0) + 1
        chat_rows.chat["search_from"] = mark
        sealing.seal_chat(unit, chat_rows)
    attachments.store(unit, [p for r in rows for p in r.parts])
    writer = unit.backend.row_writer(unit.executor)
    for table, table_rows in (
        ("chats", [r.chat for r in rows]),
        ("chat_tags", [tag for r in rows for tag in r.tags]),
        ("messages", [m for r in rows for m in r.messages]),
        ("content_parts", [p for r in rows for p in r.parts]),
        ("tool_calls", [c for r in rows for c in r.tool_calls]),
        ("feedback", [f for r in rows for f in r.feedback]),
    ):
        writer.write(metadata.tables[table], table_rows)
    searching.written(
        unit, [m for r in rows for m in r.messages], [p for r in rows for p in r.parts], marked=True
    )
