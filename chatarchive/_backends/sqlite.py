"""SQLite, the embedded default: an archive in one file (or in memory).

What it does differently from PostgreSQL:

- a transaction that writes begins ``IMMEDIATE``: it takes the one write lock
  up front instead of failing with "database is locked" when another writer
  committed after its first read;
- documents are read a table at a time, in one transaction's snapshot;
- search terms are in an FTS5 table, by the rowid of their message;
- there is no row-level security and no parallel writing (one writer at a time);
- a path that cannot be an archive is named in the error, and one that does
  not exist is not created by a call that only looks at it.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any, ClassVar

import sqlalchemy
from sqlalchemy import (
    JSON,
    URL,
    ColumnElement,
    Connection,
    Engine,
    LargeBinary,
    Select,
    Table,
    bindparam,
    event,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeEngine

from chatarchive._embeddings import Embedder, cosine_distance, pack, unpack
from chatarchive._exceptions import (
    ChatArchiveError,
    ConflictError,
    DatabaseError,
    SchemaNotReady,
    TransactionInProgress,
)
from chatarchive._schema import (
    DOCUMENT_ORDER,
    ON_ACTIVE_PATH,
    SEARCH_TERMS,
    TAIL_START,
    active_path_filter,
    in_pieces,
    tables,
    tail_filter,
)
from chatarchive._search import SearchFilters, SearchQuery, typed_candidates, typed_nearest
from chatarchive._terms import Phrase, StoredTerms
from chatarchive._types import ArchiveText

from .base import AnyEngine, Backend, DocumentRows, ExecuteManyWriter, Executor, RowWriter, TermsEntry

__all__ = ["SEARCH_TERMS_DDL", "SQLite", "fts5_query"]


# Execution option that makes a transaction begin IMMEDIATE (see for_writing).
_WRITING = "chatarchive_writing"


@cache
def _chats_query(*, scoped: bool) -> Select[Any]:
    """The rows of the chats ``:ids`` (of ``:user_id`` alone, ``scoped``), built once."""
    query = select(tables.chats).where(tables.chats.c.chat_id.in_(bindparam("ids", expanding=True)))
    return query.where(tables.chats.c.user_id == bindparam("user_id")) if scoped else query


@cache
def _children_query(table: Table, *, whole: bool, tail: bool) -> Select[Any]:
    """The rows of ``table`` of the chats ``:ids`` in document order: of
    their active paths (unless ``whole``), of the last ``:last`` messages of
    the one chat's path (``tail``). Built once: building it costs more than
    SQLite's running it."""
    x = table.alias("x")
    order = DOCUMENT_ORDER[table]
    query = (
        select(x)
        .where(x.c.chat_id.in_(bindparam("ids", expanding=True)))
        .order_by(*(x.c[column.name] for column in order))
    )
    if not whole and table.name in ON_ACTIVE_PATH:
        query = query.where(text(active_path_filter(table.name)))
        if tail:
            tail_start = TAIL_START.format(chat="c.chat_id", row="c")
            start = f"(SELECT {tail_start} FROM chats c WHERE c.chat_id = x.chat_id)"
            query = query.where(text(tail_filter(table.name, start)))
    return query


class SQLite(Backend):
    name = "sqlite"
    title = "SQLite"
    parallel_writers: ClassVar[bool] = False
    has_row_level_security: ClassVar[bool] = False
    alters_by_copying: ClassVar[bool] = True
    returns_joined_columns: ClassVar[bool] = False

    # -- URLs, engines and connections ---------------------------------------------

    def async_url(self, url: URL) -> URL:
        if url.drivername in ("sqlite", "sqlite+pysqlite"):
            return url.set(drivername="sqlite+aiosqlite")
        return url

    def engine_options(self, url: URL, options: dict[str, Any], *, statement_timeout: float | None) -> None:
        _one_memory_connection(url, options, _MemoryPool)

    def async_engine_options(
        self, url: URL, options: dict[str, Any], *, statement_timeout: float | None
    ) -> None:
        _one_memory_connection(url, options, _AsyncMemoryPool)

    def set_up(self, engine: Engine, url: URL, options: Mapping[str, Any]) -> None:
        path = _file(url)
        _set_up_connections(engine, in_memory=self.in_memory(url), path=path)
        if path is not None:
            _name_a_missing_directory(engine, path)

    def missing(self, url: URL) -> str | None:
        """A SQLite URL whose file does not exist: connecting would create an
        empty file, so a read through a mistyped path left a stray database
        behind it."""
        path = _file(url)
        return None if path is None or os.path.exists(path) else f"no archive at {path} (no such file)"

    def in_memory(self, url: URL) -> bool:
        return url.database in (None, "", ":memory:")

    def shown_url(self, url: URL) -> str:
        """The path as it is on disk (SQLAlchemy 2.1 writes its ``:`` as
        ``%3A``: ``:memory:`` came out as ``%3Amemory%3A``)."""
        if not url.database:
            return url.render_as_string()
        query = url.render_as_string().partition("?")[2]
        return f"{url.drivername}:///{url.database}" + (f"?{query}" if query else "")

    def for_writing(self, engine: AnyEngine) -> AnyEngine:
        return engine.execution_options(**{_WRITING: True})

    def write_on(self, connection: Connection) -> None:
        connection.execution_options(**{_WRITING: True})

    # -- errors ---------------------------------------------------------------------

    def translate(self, error: BaseException) -> ChatArchiveError | None:
        errorname = getattr(error, "sqlite_errorname", None)
        if not isinstance(errorname, str):
            return None
        summary = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        if errorname == "SQLITE_ERROR" and summary.startswith("no such table"):
            return SchemaNotReady(f"{summary}; run 'chatarchive db upgrade'")
        if errorname.startswith("SQLITE_CONSTRAINT"):
            return ConflictError(f"write conflicts with stored data ({errorname}): {summary}")
        return None

    # -- column types ---------------------------------------------------------------

    def json_type(self, dialect: Dialect, *, binary: bool) -> TypeEngine[Any]:
        return dialect.type_descriptor(JSON(none_as_null=True))

    def stored_time(self, value: Any) -> Any:
        return value.replace(tzinfo=None)  # UTC, as text without an offset

    def vector_type(self, dialect: Dialect) -> TypeEngine[Any]:
        return dialect.type_descriptor(LargeBinary())

    def vector_processors(self) -> tuple[Callable[[Any], Any] | None, Callable[[Any], Any] | None]:
        def result(value: Any) -> Any:
            return None if value is None else list(unpack(value))

        return (lambda value: None if value is None else pack(value)), result

    # -- the statements of a unit of work ------------------------------------------------

    def load_document_rows(
        self,
        executor: Executor,
        chat_ids: Sequence[str],
        *,
        user_id: str | None,
        whole: bool = False,
        last: int | None = None,
    ) -> DocumentRows:
        """One query per table for every ``IDS_PER_STATEMENT`` chats (the
        caller's transaction keeps one snapshot)."""
        found: list[Mapping[Any, Any]] = []
        scoped = {} if user_id is None else {"user_id": user_id}
        for ids in in_pieces(chat_ids):
            found += executor.execute(
                _chats_query(scoped=user_id is not None), {"ids": ids, **scoped}
            ).mappings()
        children: dict[str, dict[Table, list[Mapping[Any, Any]]]] = {
            row["chat_id"]: {table: [] for table in DOCUMENT_ORDER} for row in found
        }
        tail = {} if last is None else {"last": last}
        for ids in in_pieces(list(children)):
            for table in DOCUMENT_ORDER:
                query = _children_query(table, whole=whole, tail=last is not None)
                for child in executor.execute(query, {"ids": ids, **tail}).mappings():
                    children[child["chat_id"]][table].append(child)
        return DocumentRows(found, children)

    def row_writer(self, executor: Executor) -> RowWriter:
        return ExecuteManyWriter(executor)

    def create_chat(self, executor: Executor, row: Mapping[str, Any]) -> bool:
        # Writers queue for one lock: the chat cannot appear after this
        # transaction looked for it.
        executor.execute(insert(tables.chats), [row])
        return True

    def write_terms(self, executor: Executor, entries: Iterable[TermsEntry]) -> None:
        # SQLite has no row-level security: its full-text table keeps no user.
        rows = [
            {"chat_id": chat_id, "position": position, "terms": " ".join(terms)}
            for chat_id, position, terms, _user in entries
        ]
        if rows:
            executor.execute(_WRITE_TERMS, rows)

    def delete_terms(self, executor: Executor, starts: Sequence[tuple[str, int]]) -> None:
        if starts:
            executor.execute(
                _DELETE_TERMS, [{"chat_id": chat, "position": position} for chat, position in starts]
            )

    def match(
        self, executor: Executor, query: SearchQuery, filters: SearchFilters, *, candidates: int
    ) -> list[tuple[Any, StoredTerms]]:
        where, params = filters.sql()
        params |= {"query": fts5_query(query)}
        rows = executor.execute(typed_candidates(_match_statement(where, candidates), params), params)
        return [(row, StoredTerms.of(row.terms.split(" "))) for row in rows]

    def nearest(
        self,
        executor: Executor,
        embedder: Embedder,
        vector: Sequence[float],
        filters: SearchFilters,
        *,
        candidates: int,
        scan: int | None = None,
    ) -> Sequence[Any]:
        # Every vector of the messages the filters select is compared: exact, in one scan
        # (no index, so no scan breadth).
        where, params = filters.sql()
        params |= {"embedder": embedder.name, "vector": pack(vector)}
        return executor.execute(typed_nearest(_nearest_statement(where, candidates), params), params).all()

    # -- SQL expressions of analytics -----------------------------------------------------

    def json_text(self, column: ColumnElement[Any], key: str) -> ColumnElement[str]:
        return func.json_extract(column, f"$.{key}", type_=ArchiveText())

    def json_is_object(self, column: ColumnElement[Any], key: str) -> ColumnElement[bool]:
        return func.json_type(column, f"$.{key}") == "object"

    def utc_day(self, moment: ColumnElement[Any]) -> ColumnElement[str]:
        return func.strftime("%Y-%m-%d", moment)

    # -- migrations ---------------------------------------------------------------------------

    @contextmanager
    def migrating(self, connection: Connection) -> Iterator[None]:
        """Alembic alters SQLite tables by copying them ("batch" mode): foreign
        keys must be off meanwhile, and the pragma only takes effect outside a
        transaction. Several processes may migrate at once (replicas that each
        run 'db upgrade' as they start): the first to begin takes the write
        lock, the others wait for it, then find the work done."""
        _foreign_keys(connection, enabled=False)
        self.write_on(connection)
        try:
            yield
        finally:
            _foreign_keys(connection, enabled=True)


# -- engines -------------------------------------------------------------------------------


def _file(url: URL) -> str | None:
    """The path of an archive that ``url`` names by a plain path (``None`` for
    an in-memory one, or a ``file:`` URI with ``?uri=true``, which says for
    itself whether to create the file)."""
    if url.database in (None, "", ":memory:") or url.query.get("uri") is not None:
        return None
    return str(url.database)


def _compare_vectors(dbapi_connection: Any) -> None:
    """``vec_distance_cosine``: sqlite-vec's, where it is installed (the
    ``vector`` extra) and this Python's sqlite3 can load extensions; else the
    archive's own, the same cosine distance computed in Python."""
    if isinstance(dbapi_connection, sqlite3.Connection) and hasattr(
        dbapi_connection, "enable_load_extension"
    ):
        try:
            import sqlite_vec  # type: ignore[import-not-found,import-untyped,unused-ignore]

            dbapi_connection.enable_load_extension(True)
            try:
                sqlite_vec.load(dbapi_connection)
                return
            finally:
                dbapi_connection.enable_load_extension(False)
        except (ImportError, sqlite3.Error):
            pass
    dbapi_connection.create_function("vec_distance_cosine", 2, cosine_distance, deterministic=True)


def _set_up_connections(engine: Engine, *, in_memory: bool, path: str | None) -> None:
    """Foreign keys enforced, locks waited for, WAL on files, and transactions
    begun by SQLAlchemy (not the driver) so that savepoints work."""

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Driver-level transactions off: SQLAlchemy emits BEGIN itself (below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA busy_timeout = 30000")
        _compare_vectors(dbapi_connection)
        if not in_memory:
            try:
                cursor.execute("PRAGMA journal_mode = WAL")  # the first statement that reads the file
            except sqlite3.DatabaseError as exc:
                # SQLite says only "file is not a database": say which file.
                if getattr(exc, "sqlite_errorname", None) == "SQLITE_NOTADB" and path is not None:
                    raise DatabaseError(
                        f"cannot open the SQLite archive {path}: it is not an SQLite database file "
                        "(or it is damaged, or encrypted)"
                    ) from exc
                raise
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        writing = connection.get_execution_options().get(_WRITING, False)
        connection.exec_driver_sql("BEGIN IMMEDIATE" if writing else "BEGIN")


def _name_a_missing_directory(engine: Engine, path: str) -> None:
    """SQLite cannot create a file in a directory that does not exist, nor open
    a directory, and says only "unable to open database file": say which path
    and what is wrong with it."""

    @event.listens_for(engine, "do_connect")
    def _connecting(dialect: Any, _record: Any, cargs: Any, cparams: Any) -> Any:
        # The path is looked at only when connecting fails: looking blocks, and
        # under asyncio a connection is made in the event loop.
        try:
            return dialect.connect(*cargs, **cparams)
        except Exception:
            directory = os.path.dirname(os.path.abspath(path))
            if not os.path.isdir(directory):
                raise DatabaseError(
                    f"cannot open the SQLite archive {path}: there is no directory {directory}"
                ) from None
            if os.path.isdir(path):
                raise DatabaseError(f"cannot open the SQLite archive {path}: it is a directory") from None
            raise


class _MemoryPool(sqlalchemy.pool.QueuePool):
    """The one connection of an in-memory database, lent to one thread at a
    time; the others wait for it. A thread that asks again while it holds it
    (an archive call inside that archive's ``transaction()`` block) would wait
    for itself: it is refused at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._holder: object = None

    def _caller(self) -> object:
        return threading.get_ident()

    def _do_get(self) -> Any:
        caller = self._caller()
        if caller is not None and caller == self._holder:
            raise TransactionInProgress(
                "an in-memory SQLite archive has one connection, and this caller's open transaction "
                "holds it: call the transaction's repository inside its block (or use a database file)"
            )
        record = super()._do_get()
        self._holder = caller
        return record

    def _do_return_conn(self, record: Any) -> None:
        self._holder = None
        super()._do_return_conn(record)


class _AsyncMemoryPool(_MemoryPool, sqlalchemy.pool.AsyncAdaptedQueuePool):
    """``_MemoryPool`` for the asyncio engine: lent to one task at a time."""

    def _caller(self) -> object:
        try:
            return asyncio.current_task()
        except RuntimeError:  # no event loop: a thread of its own
            return threading.get_ident()


def _one_memory_connection(url: URL, options: dict[str, Any], pool: type[_MemoryPool]) -> None:
    """An in-memory database lives in one connection: share that one
    connection, one caller at a time, between the threads (and tasks) that use
    the archive. SQLAlchemy's defaults gave each thread a database of its own
    (another thread found no tables), and let concurrent tasks into one
    connection at once ("cannot start a transaction within a transaction").
    The caller's own pool options win."""
    if url.database not in (None, "", ":memory:") or {"poolclass", "pool", "creator"} & options.keys():
        return
    options.update(poolclass=pool, pool_size=1, max_overflow=0)
    options["connect_args"] = {"check_same_thread": False, **options.get("connect_args", {})}


# -- migrations ----------------------------------------------------------------------------


def _foreign_keys(connection: Connection, *, enabled: bool) -> None:
    if not connection.in_transaction():
        cursor = connection.connection.dbapi_connection.cursor()  # type: ignore[union-attr]
        cursor.execute(f"PRAGMA foreign_keys = {'ON' if enabled else 'OFF'}")
        cursor.close()


# -- search ------------------------------------------------------------------------------------


def fts5_query(query: SearchQuery) -> str:
    """A search query as an FTS5 query in which every phrase is a quoted
    string (of terms that hold only letters and digits), so that no input is
    ever FTS5 syntax; a prefix is a ``*`` after its phrase."""

    def quoted(phrase: Phrase) -> str:
        return '"' + " ".join(phrase.terms) + '"' + (" *" if phrase.prefix else "")

    expression = " AND ".join("(" + " OR ".join(map(quoted, group)) + ")" for group in query.groups)
    if query.excluded:
        expression = f"({expression}) NOT ({' OR '.join(map(quoted, query.excluded))})"
    return expression


#: The search terms as the migrations leave them at head (0012): an FTS5
#: table keyed by its messages' rowids, split at spaces (``ascii``: the terms
#: are chatarchive's, folded already), and the trigger that deletes a
#: message's terms with it.
SEARCH_TERMS_DDL = (
    f"CREATE VIRTUAL TABLE {SEARCH_TERMS} USING fts5(terms, tokenize='ascii')",
    f"CREATE TRIGGER {SEARCH_TERMS}_delete AFTER DELETE ON messages BEGIN "
    f"DELETE FROM {SEARCH_TERMS} WHERE rowid = old.rowid; END",
)

_WRITE_TERMS = text(
    f"INSERT INTO {SEARCH_TERMS} (rowid, terms) "
    "SELECT rowid, :terms FROM messages WHERE chat_id = :chat_id AND position = :position"
)
_DELETE_TERMS = text(
    f"DELETE FROM {SEARCH_TERMS} WHERE rowid IN "
    "(SELECT rowid FROM messages WHERE chat_id = :chat_id AND position >= :position)"
)


def _nearest_statement(where: str, candidates: int) -> Any:
    return text(
        f"""
        SELECT m.chat_id, m.position, m.uid, m.role, m.created_at,
               vec_distance_cosine(e.embedding, :vector) AS distance
        FROM embeddings e
        JOIN messages m ON m.chat_id = e.chat_id AND m.position = e.message_position
        JOIN chats c ON c.chat_id = e.chat_id
        WHERE e.model = :embedder{where}
        ORDER BY distance IS NULL, distance
        LIMIT {candidates}
        """
    )


def _match_statement(where: str, candidates: int) -> Any:
    return text(
        f"""
        SELECT m.chat_id, m.position, m.uid, m.role, m.created_at, t.terms, 0 AS length
        FROM {SEARCH_TERMS} t
        JOIN messages m ON m.rowid = t.rowid
        JOIN chats c ON c.chat_id = m.chat_id
        WHERE {SEARCH_TERMS} MATCH :query{where}
        LIMIT {candidates}
        """
    )
