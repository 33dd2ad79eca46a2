"""Bulk ingest: documents validated and converted in a background thread, rows
written with binary ``COPY`` on PostgreSQL (``executemany`` elsewhere).

The preparation of batch N+1 (pydantic validation, conversion to rows) runs
while batch N is being written: the writing thread spends most of its time
waiting for the server, with the GIL released.
"""

from __future__ import annotations

import gc
import threading
import time
import zlib
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from operator import itemgetter
from queue import Empty, Full, Queue
from typing import Any, Protocol

import psycopg
from psycopg.types.json import set_json_dumps
from sqlalchemy import Boolean, Double, Integer, Table, insert, text
from sqlalchemy.engine import AdaptedConnection
from sqlalchemy.orm import Session

from ._document import ChatDocument, Limits
from ._engine import driver_call
from ._exceptions import InvalidDocument, require_at_least_one, require_flag, require_many
from ._rows import ChatRows, document_to_rows
from ._types import ArchiveText, JsonObject, OrderedJson, UTCDateTime, escape_text, postgres_json_text

__all__ = [
    "MAX_BATCH_SIZE",
    "WRITER_QUEUE",
    "Batches",
    "CopyPlan",
    "PreparedBatch",
    "RowWriter",
    "check_save_many",
    "check_writers",
    "copy_plan",
    "documents_in_flight",
    "prepared_batches",
    "row_writer",
    "split_by_chat",
]


@dataclass
class PreparedBatch:
    """Up to ``batch_size`` input items: the valid documents' rows by chat id
    (with their index in the input; a later copy of a chat replaces an earlier
    one), and the invalid items' errors."""

    documents: dict[str, tuple[int, ChatRows]] = field(default_factory=dict)
    errors: list[tuple[int, InvalidDocument]] = field(default_factory=list)
    size: int = 0

    def report_errors(self, on_error: Callable[[int, InvalidDocument], None] | None) -> None:
        """Tell ``on_error`` about each invalid item; without it, raise the first."""
        for index, error in self.errors:
            if on_error is None:
                raise error
            on_error(index, error)


#: The most documents save_many writes in one batch. More gives no speed (a
#: batch of 250 is already ~5,000 rows per COPY) and only holds more memory;
#: it would also overflow PostgreSQL's 65,535 parameters of one statement.
MAX_BATCH_SIZE = 10_000


def check_save_many(docs: object, batch_size: int, *, bulk: object, on_error: object) -> None:
    """The arguments of save_many, checked before anything is read: ``docs``
    an iterable of documents (not one document), ``batch_size`` from 1 to
    ``MAX_BATCH_SIZE``, ``bulk`` a bool, ``on_error`` None or a callable."""
    require_many(docs, "docs", "chat documents (save takes one)")
    require_flag(bulk, "bulk")
    require_at_least_one(batch_size, "batch_size")
    if batch_size > MAX_BATCH_SIZE:
        raise InvalidDocument(f"batch_size must be at most {MAX_BATCH_SIZE:,}", field="batch_size")
    if on_error is not None and not callable(on_error):
        raise InvalidDocument(f"on_error must be callable, not {type(on_error).__name__}", field="on_error")


def check_writers(writers: int, *, bulk: bool) -> None:
    """The ``writers`` argument of save_many: at least one, and one for a bulk load."""
    require_at_least_one(writers, "writers")
    if bulk and writers > 1:
        raise InvalidDocument("a bulk load is one transaction: it has one writer", field="writers")


#: Parts of batches waiting for each parallel writer.
WRITER_QUEUE = 2


def documents_in_flight(batch_size: int, writers: int) -> int:
    """At most how many documents save_many has read but not yet written or
    reported: ``AHEAD`` prepared batches, the one being prepared, the one being
    split, and each writer's queue and current part."""
    return batch_size * (AHEAD + 2 + writers * (WRITER_QUEUE + 1))


def split_by_chat(batch: PreparedBatch, parts: int) -> list[PreparedBatch]:
    """The batch's documents in ``parts`` batches, each chat always in the same
    part (by a hash of its id), so that parallel writers never touch the same
    chat and the later copy of a chat is written after the earlier one."""
    split = [PreparedBatch() for _ in range(parts)]
    for chat_id, item in batch.documents.items():
        part = split[zlib.crc32(chat_id.encode("utf-8", "surrogatepass")) % parts]
        part.documents[chat_id] = item
        part.size += 1
    return split


class _Failure:
    def __init__(self, error: BaseException) -> None:
        self.error = error


_DONE = object()
# Batches prepared ahead of the writer: enough to keep it busy, few enough to
# keep memory bounded.
AHEAD = 2


#: What :func:`prepared_batches` returns.
Batches = Generator[PreparedBatch, None, None]


def prepared_batches(
    docs: Iterable[ChatDocument | Mapping[str, Any]],
    batch_size: int,
    *,
    stop_at_error: bool,
    limits: Limits | None = None,
    abandoned: threading.Event | None = None,
) -> Batches:
    """Batches of validated documents and their rows, prepared in a background
    thread that reads ``docs`` at most ``AHEAD`` batches ahead of the consumer.
    Setting ``abandoned`` (from any thread: a failed writer) ends the batches
    early, without waiting for the next one."""
    queue: Queue[object] = Queue(maxsize=AHEAD)
    stop = threading.Event()
    reading = threading.Event()  # set while the producer waits on the caller's input

    def read() -> Iterator[ChatDocument | Mapping[str, Any]]:
        iterator = iter(docs)
        while True:
            reading.set()
            try:
                item = next(iterator)
            except StopIteration:
                return
            finally:
                reading.clear()
            yield item

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.05)
            except Full:
                continue
            return True
        return False

    def produce() -> None:
        try:
            batch = PreparedBatch()
            now = datetime.now(UTC)
            for index, item in enumerate(read()):
                if stop.is_set():
                    return
                batch.size += 1
                try:
                    doc = ChatDocument.parse(item, limits=limits)
                except InvalidDocument as exc:
                    batch.errors.append((index, exc))
                    if stop_at_error:
                        break
                    continue
                batch.documents[doc.chat_id] = (index, document_to_rows(doc, now=now, version=1))
                if index % 4 == 0:
                    # Hand the GIL back: the writer needs it only briefly, but
                    # promptly, between its waits for the server.
                    time.sleep(0)
                if batch.size >= batch_size:
                    if not put(batch):
                        return
                    batch = PreparedBatch()
                    now = datetime.now(UTC)
            if batch.size:
                put(batch)
        except BaseException as exc:  # handed over to the consumer and raised there
            put(_Failure(exc))
        finally:
            put(_DONE)

    worker = threading.Thread(target=produce, name="chatarchive-prepare", daemon=True)
    with _collector_paused():
        worker.start()
        try:
            yield from _consume(queue, abandoned or threading.Event())
        finally:  # done, failed, interrupted (Ctrl-C) or closed early
            stop.set()
            _let_end(worker, queue, reading)


#: How long, at most, a save_many that stops early (an error, Ctrl-C) waits
#: for its reading thread to get the input's next item before it gives up on
#: it (seconds).
INPUT_WAIT = 0.5


def _let_end(worker: threading.Thread, queue: Queue[object], reading: threading.Event) -> None:
    """Wait for the stopped producer to end: unblock it while it waits on a full
    queue, and let it finish the item it prepares; but wait only ``INPUT_WAIT``
    for the caller's input, which may have nothing more for now (an open pipe,
    ``tail -f``): the producer then ends at the input's next item, on its own."""
    input_wait = INPUT_WAIT
    while worker.is_alive():
        if reading.is_set():
            if input_wait <= 0:
                return
            time.sleep(0.01)
            input_wait -= 0.01
            continue
        with suppress(Empty):
            queue.get(timeout=0.01)
    worker.join()


def _consume(queue: Queue[object], abandoned: threading.Event) -> Iterator[PreparedBatch]:
    while not abandoned.is_set():
        try:
            item = queue.get(timeout=0.05)
        except Empty:
            continue
        if item is _DONE:
            return
        if isinstance(item, _Failure):
            raise item.error
        assert isinstance(item, PreparedBatch)
        yield item
        # With the automatic collector paused, collect the young generations
        # once per batch (the caller's sessions and transactions form cycles).
        gc.collect(1)


class _CollectorPause:
    """Pause Python's cyclic garbage collector during bulk loads.

    Validation allocates millions of short-lived objects and no reference
    cycles; with the automatic collector running, it rescans the batches in
    flight again and again (measured: validation takes twice as long). Young
    objects are collected once per batch instead, and the collector is switched
    back on when the last concurrent load ends, if it was on before.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._depth = 0
        self._was_enabled = True

    @contextmanager
    def __call__(self) -> Iterator[None]:
        with self._lock:
            if self._depth == 0:
                self._was_enabled = gc.isenabled()
                gc.disable()
            self._depth += 1
        try:
            yield
        finally:
            with self._lock:
                self._depth -= 1
                if self._depth == 0 and self._was_enabled:
                    gc.enable()


_collector_paused = _CollectorPause()


class RowWriter(Protocol):
    def write(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None: ...


class _ExecuteManyWriter:
    def __init__(self, session: Session) -> None:
        self._session = session

    def write(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._session.execute(insert(table), rows)


_PG_TYPES: tuple[tuple[type, str], ...] = (
    (ArchiveText, "text"),
    (OrderedJson, "json"),  # before JsonObject, its base
    (JsonObject, "jsonb"),
    (UTCDateTime, "timestamptz"),
    (Boolean, "bool"),
    (Integer, "int4"),
    (Double, "float8"),
)


@dataclass(frozen=True)
class CopyPlan:
    statement: str
    columns: tuple[str, ...]
    types: tuple[str, ...]
    text_columns: tuple[int, ...]


@cache
def copy_plan(table: Table) -> CopyPlan:
    columns = tuple(column.name for column in table.columns)
    types = tuple(
        next(pg for kind, pg in _PG_TYPES if isinstance(column.type, kind)) for column in table.columns
    )
    return CopyPlan(
        statement=f"COPY {table.name} ({', '.join(columns)}) FROM STDIN (FORMAT BINARY)",
        columns=columns,
        types=types,
        text_columns=tuple(index for index, kind in enumerate(types) if kind == "text"),
    )


def _needs_escape(rows: list[tuple[Any, ...]], text_columns: tuple[int, ...]) -> bool:
    """Whether any text value holds NUL or U+E000 (rare), checked a column at a time."""
    for index in text_columns:
        joined = "\x01".join([value for row in rows if (value := row[index]) is not None])
        if "\x00" in joined or "\ue000" in joined:
            return True
    return False


def _escaped(values: tuple[Any, ...], text_columns: tuple[int, ...]) -> tuple[Any, ...]:
    escaped = list(values)
    for index in text_columns:
        if escaped[index] is not None:
            escaped[index] = escape_text(escaped[index])
    return tuple(escaped)


class _CopyWriter:
    """Binary COPY through the session's own psycopg connection (and transaction)."""

    def __init__(self, session: Session) -> None:
        self._connection = session.connection()
        driver = self._connection.connection.driver_connection
        self._cursor = driver.cursor()  # type: ignore[union-attr]
        set_json_dumps(postgres_json_text, self._cursor)

    def write(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        plan = copy_plan(table)
        values = _copy_values(plan, rows)
        with driver_call(self._connection, plan.statement), self._cursor.copy(plan.statement) as copy:
            copy.set_types(plan.types)
            write_row = copy.write_row
            for row in values:
                write_row(row)


class _AsyncCopyWriter:
    """Binary COPY under the asyncio API: through the session's asynchronous
    psycopg connection, awaited with SQLAlchemy's ``AdaptedConnection.run_async``
    (the repository's code runs in ``AsyncSession.run_sync``), so the event
    loop goes on while the server reads the rows."""

    def __init__(self, session: Session, adapted: AdaptedConnection) -> None:
        self._connection = session.connection()
        self._adapted = adapted

    def write(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        plan = copy_plan(table)
        values = _copy_values(plan, rows)

        async def copy_rows(driver: psycopg.AsyncConnection[Any]) -> None:
            cursor = driver.cursor()
            set_json_dumps(postgres_json_text, cursor)
            async with cursor.copy(plan.statement) as copy:
                copy.set_types(plan.types)
                for row in values:
                    await copy.write_row(row)

        with driver_call(self._connection, plan.statement):
            self._adapted.run_async(copy_rows)


def _copy_values(plan: CopyPlan, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """The rows' values in the plan's column order, text escaped if needed."""
    values = list(map(itemgetter(*plan.columns), rows))
    if _needs_escape(values, plan.text_columns):
        values = [_escaped(row, plan.text_columns) for row in values]
    return values


#: Whether row-level security applies to this role on the archive's tables
#: (all of them have the same setting; see ``set_row_level_security``).
_ROW_SECURITY = text("SELECT row_security_active('chats')")


def row_writer(session: Session) -> RowWriter:
    """The fastest way to insert many rows on the session's database: binary
    COPY through psycopg on PostgreSQL (its synchronous connection, or under the
    asyncio API its asynchronous one), ``executemany`` otherwise (SQLite, and
    PostgreSQL when row-level security applies to this connection's role:
    PostgreSQL refuses ``COPY FROM`` there, "not supported with row-level
    security")."""
    if session.get_bind().dialect.name == "postgresql" and not session.execute(_ROW_SECURITY).scalar_one():
        pooled = session.connection().connection
        if isinstance(pooled.driver_connection, psycopg.Connection):
            return _CopyWriter(session)
        adapted = pooled.dbapi_connection
        if isinstance(pooled.driver_connection, psycopg.AsyncConnection) and isinstance(
            adapted, AdaptedConnection
        ):
            return _AsyncCopyWriter(session, adapted)
    return _ExecuteManyWriter(session)
