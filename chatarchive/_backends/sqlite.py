"""SQLite, the embedded default: an archive in one file (or in memory).

What it does differently from PostgreSQL:

- a transaction that writes begins ``IMMEDIATE``: it takes the one write lock
  up front instead of failing with "database is locked" when another writer
  committed after its first read;
- documents are read a table at a time, in one transaction's snapshot;
- search runs on FTS5 tables kept in step by triggers;
- there is no row-level security and no parallel writing (one writer at a time);
- a path that cannot be an archive is named in the error, and one that does
  not exist is not created by a call that only looks at it.
"""

from __future__ import annotations

import asyncio
import os
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, ClassVar, NamedTuple

import sqlalchemy
from sqlalchemy import (
    JSON,
    URL,
    ColumnElement,
    Connection,
    Engine,
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

from chatarchive._document import ChatDocument
from chatarchive._exceptions import (
    ChatArchiveError,
    ConflictError,
    DatabaseError,
    SchemaNotReady,
    TransactionInProgress,
)
from chatarchive._rows import documents_from_rows
from chatarchive._schema import DOCUMENT_ORDER, ON_ACTIVE_PATH, in_pieces, metadata
from chatarchive._search import (
    HIGHLIGHT,
    SearchFilters,
    SearchHit,
    SearchWords,
    hits,
    parse_query,
    search_index_off,
    typed_search,
)
from chatarchive._types import ArchiveText

from .base import AnyEngine, Backend, ExecuteManyWriter, Executor, RowWriter, connection_of

__all__ = ["SEARCH_TABLES", "SQLite", "fts5_query"]

_chats = metadata.tables["chats"]

# Execution option that makes a transaction begin IMMEDIATE (see for_writing).
_WRITING = "chatarchive_writing"


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

    # -- the statements of a unit of work ------------------------------------------------

    def load_documents(
        self, executor: Executor, chat_ids: Sequence[str], *, user_id: str | None, whole: bool = False
    ) -> list[ChatDocument]:
        """One query per table for every ``IDS_PER_STATEMENT`` chats (the
        caller's transaction keeps one snapshot)."""
        found: list[Mapping[Any, Any]] = []
        for ids in in_pieces(chat_ids):
            query = select(_chats).where(_chats.c.chat_id.in_(ids))
            if user_id is not None:
                query = query.where(_chats.c.user_id == user_id)
            found += executor.execute(query).mappings()
        children: dict[str, dict[Table, list[Mapping[Any, Any]]]] = {
            row["chat_id"]: {table: [] for table in DOCUMENT_ORDER} for row in found
        }
        for ids in in_pieces(list(children)):
            for table, order in DOCUMENT_ORDER.items():
                x = table.alias("x")
                query = (
                    select(x).where(x.c.chat_id.in_(ids)).order_by(*(x.c[column.name] for column in order))
                )
                if not whole and table.name in ON_ACTIVE_PATH:
                    query = query.where(text(ON_ACTIVE_PATH[table.name]))
                for child in executor.execute(query).mappings():
                    children[child["chat_id"]][table].append(child)
        return documents_from_rows(chat_ids, found, children)

    def row_writer(self, executor: Executor) -> RowWriter:
        return ExecuteManyWriter(executor)

    def create_chat(self, executor: Executor, row: Mapping[str, Any]) -> bool:
        # Writers queue for one lock: the chat cannot appear after this
        # transaction looked for it.
        executor.execute(insert(_chats), [row])
        return True

    def search(
        self, executor: Executor, words: str, filters: SearchFilters, *, limit: int
    ) -> list[SearchHit]:
        if not self.search_index(connection_of(executor)):
            raise search_index_off()
        parsed = parse_query(words)
        if parsed is None:
            return []
        where, params = filters.sql()
        params |= {"query": fts5_query(parsed), "limit": limit}
        return hits(executor.execute(typed_search(_search_statement(where), params), params).all())

    # -- archive-wide switches -------------------------------------------------------------

    def search_index(self, connection: Connection) -> bool:
        present = text("SELECT count(*) FROM sqlite_master WHERE name IN :names").bindparams(
            bindparam("names", expanding=True)
        )
        names = [name for table in SEARCH_TABLES for name in table.object_names()]
        return bool(connection.execute(present, {"names": names}).scalar_one() == len(names))

    def set_search_index(self, connection: Connection, enabled: bool) -> None:
        if enabled and self.search_index(connection):
            return
        for table in SEARCH_TABLES:
            for statement in table.drop() + ([*table.create(), table.fill()] if enabled else []):
                connection.exec_driver_sql(statement)

    def rebuild_search_index(self, connection: Connection) -> None:
        # The FTS5 tables point at rows by rowid, which a dump and reload (or a
        # VACUUM, which SQLite allows to renumber rows) may change.
        if not self.search_index(connection):
            raise search_index_off()
        for table in SEARCH_TABLES:
            connection.exec_driver_sql(f"INSERT INTO {table.name} ({table.name}) VALUES ('delete-all')")
            connection.exec_driver_sql(table.fill())

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
    def _before_connecting(*_args: Any) -> None:
        directory = os.path.dirname(os.path.abspath(path))
        if not os.path.isdir(directory):
            raise DatabaseError(f"cannot open the SQLite archive {path}: there is no directory {directory}")
        if os.path.isdir(path):
            raise DatabaseError(f"cannot open the SQLite archive {path}: it is a directory")


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


def fts5_query(words: SearchWords) -> str:
    """A parsed query as an FTS5 query in which every term is a quoted string,
    so that no input is ever FTS5 syntax."""

    def quoted(term: str) -> str:
        return '"' + term.replace('"', '""') + '"'

    expression = " AND ".join("(" + " OR ".join(map(quoted, group)) + ")" for group in words.groups)
    if words.excluded:
        expression = f"({expression}) NOT ({' OR '.join(map(quoted, words.excluded))})"
    return expression


_TRIGGER_EVENTS = ("insert", "delete", "update")


class FullTextTable(NamedTuple):
    """An FTS5 table over one table's text, keyed by its rowids, and the
    triggers that keep it in step."""

    name: str
    table: str
    indexed: str  # which rows of ``table`` it holds
    triggers: tuple[str, str, str]  # named {name}_{event}, for each of _TRIGGER_EVENTS

    def create(self) -> list[str]:
        return [
            f"CREATE VIRTUAL TABLE {self.name} USING fts5("
            f"text, content='{self.table}', content_rowid='rowid', tokenize='porter unicode61')",
            *self.triggers,
        ]

    def drop(self) -> list[str]:
        return [
            *(f"DROP TRIGGER IF EXISTS {self.name}_{event}" for event in _TRIGGER_EVENTS),
            f"DROP TABLE IF EXISTS {self.name}",
        ]

    def fill(self) -> str:
        return (
            f"INSERT INTO {self.name} (rowid, text) SELECT rowid, text FROM {self.table} WHERE {self.indexed}"
        )

    def object_names(self) -> list[str]:
        return [self.name, *(f"{self.name}_{event}" for event in _TRIGGER_EVENTS)]


#: The full-text tables as the migrations leave them at head (0005 for string
#: contents, 0002 for text parts), to drop and create again
#: (``set_search_index``); a test keeps them equal to what the migrations create.
SEARCH_TABLES = (
    FullTextTable(
        "message_text_search",
        "messages",
        "text IS NOT NULL",
        (
            "CREATE TRIGGER message_text_search_insert AFTER INSERT ON messages "
            "WHEN new.text IS NOT NULL BEGIN "
            "INSERT INTO message_text_search (rowid, text) VALUES (new.rowid, new.text); END",
            "CREATE TRIGGER message_text_search_delete AFTER DELETE ON messages "
            "WHEN old.text IS NOT NULL BEGIN "
            "INSERT INTO message_text_search (message_text_search, rowid, text) "
            "VALUES ('delete', old.rowid, old.text); END",
            "CREATE TRIGGER message_text_search_update AFTER UPDATE OF text ON messages BEGIN "
            "INSERT INTO message_text_search (message_text_search, rowid, text) "
            "SELECT 'delete', old.rowid, old.text WHERE old.text IS NOT NULL; "
            "INSERT INTO message_text_search (rowid, text) "
            "SELECT new.rowid, new.text WHERE new.text IS NOT NULL; END",
        ),
    ),
    FullTextTable(
        "message_search",
        "content_parts",
        "type = 'text'",
        (
            "CREATE TRIGGER message_search_insert AFTER INSERT ON content_parts WHEN new.type = 'text' BEGIN "
            "INSERT INTO message_search (rowid, text) VALUES (new.rowid, new.text); END",
            "CREATE TRIGGER message_search_delete AFTER DELETE ON content_parts WHEN old.type = 'text' BEGIN "
            "INSERT INTO message_search (message_search, rowid, text) "
            "VALUES ('delete', old.rowid, old.text); END",
            "CREATE TRIGGER message_search_update AFTER UPDATE ON content_parts BEGIN "
            "INSERT INTO message_search (message_search, rowid, text) "
            "SELECT 'delete', old.rowid, old.text WHERE old.type = 'text'; "
            "INSERT INTO message_search (rowid, text) "
            "SELECT new.rowid, new.text WHERE new.type = 'text'; END",
        ),
    ),
)


def _search_statement(where: str) -> Any:
    start, stop = HIGHLIGHT
    # FTS5's rank is computed for every match inside the FTS5 module (cheap);
    # snippets only for the hits returned.
    return text(
        f"""
        WITH matched AS MATERIALIZED (
            SELECT 0 AS source, rowid AS row, -rank AS rank
            FROM message_text_search WHERE message_text_search MATCH :query
            UNION ALL
            SELECT 1, rowid, -rank FROM message_search WHERE message_search MATCH :query
        ),
        located AS (
            SELECT m.chat_id, m.position AS message_position, matched.source, matched.row, matched.rank
            FROM matched JOIN messages m ON m.rowid = matched.row WHERE matched.source = 0
            UNION ALL
            SELECT p.chat_id, p.message_position, matched.source, matched.row, matched.rank
            FROM matched JOIN content_parts p ON p.rowid = matched.row WHERE matched.source = 1
        ),
        hits AS (
            SELECT located.*,
                   row_number() OVER (
                       PARTITION BY located.chat_id, located.message_position ORDER BY located.rank DESC
                   ) AS nth
            FROM located
            JOIN messages m ON m.chat_id = located.chat_id AND m.position = located.message_position
            JOIN chats c ON c.chat_id = located.chat_id
            WHERE true{where}
        ),
        best AS (
            SELECT * FROM hits WHERE nth = 1 ORDER BY rank DESC, chat_id, message_position LIMIT :limit
        )
        SELECT best.chat_id, m.uid, m.position, m.role, m.created_at, best.rank,
               CASE best.source
                   WHEN 0 THEN (SELECT snippet(message_text_search, 0, '{start}', '{stop}', '…', 24)
                                FROM message_text_search
                                WHERE message_text_search MATCH :query AND rowid = best.row)
                   ELSE (SELECT snippet(message_search, 0, '{start}', '{stop}', '…', 24)
                         FROM message_search WHERE message_search MATCH :query AND rowid = best.row)
               END AS snippet
        FROM best
        JOIN messages m ON m.chat_id = best.chat_id AND m.position = best.message_position
        ORDER BY best.rank DESC, best.chat_id, best.message_position
        """
    )
