"""PostgreSQL, through psycopg 3: chatarchive's first database.

The only module that imports psycopg. What it does differently from SQLite:

- a whole document is read in one statement, as one JSON text per chat,
  through psycopg directly (SQLAlchemy's per-statement work costs as much as
  the server's for a read this small);
- many rows are written with binary ``COPY``;
- text and JSON with NUL in them are stored escaped (``_types``);
- search terms are ``tsvector`` values in ``message_terms``, under a GIN index;
- a user's transaction sets ``chatarchive.user_id`` for row-level security;
- a bulk load drops the foreign keys and B-tree indexes, and re-creates them.
"""

from __future__ import annotations

import json
import re
import struct
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from functools import cache, lru_cache
from itertools import chain, islice
from operator import itemgetter
from typing import Any, ClassVar, cast

import psycopg
from psycopg.types.json import Json, Jsonb, set_json_dumps
from sqlalchemy import (
    URL,
    Boolean,
    ColumnElement,
    Connection,
    Double,
    Engine,
    Integer,
    Table,
    Text,
    bindparam,
    column,
    event,
    func,
    insert,
    literal_column,
    select,
    text,
    union_all,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy import table as light_table
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import AdaptedConnection, Dialect
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.sql.elements import TextClause
from sqlalchemy.types import TypeEngine

from chatarchive._exceptions import (
    ChatArchiveError,
    ConflictError,
    DatabaseError,
    SchemaNotReady,
)
from chatarchive._schema import (
    DOCUMENT_ORDER,
    ON_ACTIVE_PATH,
    SEARCH_TERMS,
    active_path_filter,
    metadata,
    tables,
)
from chatarchive._search import SearchFilters, SearchQuery, typed_candidates
from chatarchive._terms import Phrase, StoredTerms, TsvectorText, tsvector_literal
from chatarchive._types import (
    ArchiveText,
    JsonObject,
    OrderedJson,
    UTCDateTime,
    escape_text,
    postgres_json_text,
    unescape_json_text,
    unescape_text,
    unescape_value,
)

from . import citus
from .base import (
    AnyEngine,
    Backend,
    BulkLoad,
    DocumentRows,
    ExecuteManyWriter,
    Executor,
    RowWriter,
    TermsEntry,
    connection_of,
)
from .citus import Distribution

__all__ = [
    "PING_AFTER_IDLE",
    "PostgreSQL",
    "bare_connection",
    "copy_prepared",
    "copy_values",
    "driver_call",
    "tsquery",
]

#: A pooled connection idle for longer than this (seconds) is checked with a
#: ping before it is handed out.
PING_AFTER_IDLE = 1.0

_TABLES = [table.name for table in metadata.sorted_tables]
#: The tables row-level security covers: the archive's, and its search terms
#: (which the models do not describe).
_USERS_TABLES = [*_TABLES, SEARCH_TERMS]

# SQLSTATE classes and codes, see https://www.postgresql.org/docs/current/errcodes-appendix.html
_CONFLICT_STATES = {"40001", "40P01"}  # serialization failure, deadlock
_SCHEMA_STATES = {"42P01", "42703", "42883"}  # undefined table, column, function
_LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout ran out (or NOWAIT)


class PostgreSQL(Backend):
    name = "postgresql"
    title = "PostgreSQL"
    parallel_writers: ClassVar[bool] = True
    has_row_level_security: ClassVar[bool] = True
    appends_in_one_statement: ClassVar[bool] = True

    # -- URLs, engines and connections ---------------------------------------------

    def url(self, url: URL) -> URL:
        if url.drivername in ("postgresql", "postgres"):
            return url.set(drivername="postgresql+psycopg")
        return url

    def engine_options(self, url: URL, options: dict[str, Any], *, statement_timeout: float | None) -> None:
        if "poolclass" not in options and "pool" not in options:
            # The connection returned last is taken first: calls one after
            # another run on one warm server process (round-robin over every
            # pooled connection cost an append a third more), and connections
            # left over from a burst sit idle until they are needed again.
            options.setdefault("pool_use_lifo", True)
        if statement_timeout is None:
            return
        connect_args = dict(options.pop("connect_args", {}))
        setting = f"-c statement_timeout={max(1, round(statement_timeout * 1000))}"
        connect_args["options"] = f"{connect_args.get('options', '')} {setting}".strip()
        options["connect_args"] = connect_args

    def set_up(self, engine: Engine, url: URL, options: Mapping[str, Any]) -> None:
        _require_utf8(engine)
        _session_settings(engine)
        if not options.get("pool_pre_ping"):
            _ping_idle_connections(engine)

    def for_reading(self, engine: AnyEngine, *, scoped: bool) -> AnyEngine:
        # A read of one statement needs no transaction; a user's read does: it
        # tells row-level security who reads.
        return engine if scoped else engine.execution_options(isolation_level="AUTOCOMMIT")

    def reads_in_transaction(self, *, scoped: bool) -> bool:
        return scoped

    # -- errors ---------------------------------------------------------------------

    def translate(self, error: BaseException) -> ChatArchiveError | None:
        sqlstate = getattr(error, "sqlstate", None)
        if not isinstance(error, psycopg.Error) or not isinstance(sqlstate, str):
            return None
        summary = _summary(error)
        if sqlstate.startswith("23") or _relayed_violation(sqlstate, error.diag.message_primary):
            constraint = _unsharded(
                error.diag.constraint_name or _named_constraint(error.diag.message_primary)
            )
            detail = error.diag.message_detail  # "Key (chat_id)=(...) already exists."
            if detail and detail.strip():
                summary = f"{summary}: {_clipped(detail.strip().splitlines()[0])}"
            return ConflictError(
                f"write conflicts with stored data (constraint {constraint}): {summary}",
                constraint=constraint,
            )
        if sqlstate in _CONFLICT_STATES:
            return ConflictError(f"concurrent write, try again: {summary}")
        if sqlstate == _LOCK_NOT_AVAILABLE:
            return ConflictError(f"another transaction holds a lock this one needs; try again: {summary}")
        if sqlstate in _SCHEMA_STATES:
            return SchemaNotReady(f"{summary}; run 'chatarchive db upgrade'")
        return None

    # -- column types ---------------------------------------------------------------

    def text_processors(self) -> tuple[Callable[[Any], Any] | None, Callable[[Any], Any] | None]:
        def escape(value: Any) -> Any:
            return escape_text(value) if isinstance(value, str) else value

        def unescape(value: Any) -> Any:
            return unescape_text(value) if isinstance(value, str) else value

        return escape, unescape

    def json_type(self, dialect: Dialect, *, binary: bool) -> TypeEngine[Any]:
        kind = postgresql.JSONB if binary else postgresql.JSON
        return dialect.type_descriptor(kind(none_as_null=True))

    def json_processors(self, *, binary: bool) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
        wrapper = Jsonb if binary else Json

        def bind(value: Any) -> Any:
            return None if value is None else wrapper(value, dumps=postgres_json_text)

        def result(value: Any) -> Any:
            if isinstance(value, (str, bytes)):  # a driver set up to return JSON as text
                value = json.loads(value)
            return unescape_value(value)

        return bind, result

    # -- the statements of a unit of work ------------------------------------------------

    def set_user(self, executor: Executor, user_id: str) -> None:
        # SET LOCAL, not set_config: a Citus coordinator carries a SET to the
        # workers (see _session_settings), where the shards' policies read it.
        # The id as the rows store it (escaped: no NUL), which the policies compare.
        executor.execute(text(f"SET LOCAL chatarchive.user_id TO {_quoted(escape_text(user_id))}"))

    def load_document_rows(
        self, executor: Executor, chat_ids: Sequence[str], *, user_id: str | None, whole: bool = False
    ) -> DocumentRows:
        """The documents in one statement: one round trip and one snapshot,
        even under READ COMMITTED, or outside a transaction."""
        one = len(chat_ids) == 1
        params: dict[str, Any] = (
            {"chat_id": escape_text(chat_ids[0])} if one else {"ids": [escape_text(id_) for id_ in chat_ids]}
        )
        if user_id is not None:
            params["user_id"] = escape_text(user_id)
        found = []
        children: dict[str, dict[Table, list[Mapping[str, Any]]]] = {}
        statement = _documents_query(scoped=user_id is not None, one=one, whole=whole)
        for (document,) in _fetch_all(connection_of(executor), statement, params):
            chat_values, *child_values = json.loads(unescape_json_text(document))
            chat = _json_row(tables.chats, chat_values)
            found.append(chat)
            children[chat["chat_id"]] = {
                table: [_json_row(table, values) for values in rows or ()]
                for table, rows in zip(DOCUMENT_ORDER, child_values, strict=True)
            }
        return DocumentRows(found, children)

    def row_writer(self, executor: Executor) -> RowWriter:
        """Binary COPY through psycopg (its synchronous connection, or under
        the asyncio API its asynchronous one), or ``executemany`` where
        row-level security applies to this connection's role: PostgreSQL
        refuses ``COPY FROM`` there, "not supported with row-level security"."""
        if executor.execute(_ROW_SECURITY).scalar_one():
            return ExecuteManyWriter(executor)
        connection = connection_of(executor)
        pooled = connection.connection
        if isinstance(pooled.driver_connection, psycopg.Connection):
            return _CopyWriter(connection, pooled.driver_connection)
        adapted = pooled.dbapi_connection
        if isinstance(pooled.driver_connection, psycopg.AsyncConnection) and isinstance(
            adapted, AdaptedConnection
        ):
            return _AsyncCopyWriter(connection, adapted)
        return ExecuteManyWriter(executor)

    def create_chat(self, executor: Executor, row: Mapping[str, Any]) -> bool:
        # Writers to different chats do not wait for each other: another may
        # have created this chat since this transaction looked.
        created = (
            postgresql.insert(tables.chats)
            .values(row)
            .on_conflict_do_nothing(index_elements=[tables.chats.c.chat_id])
        )
        return executor.execute(created.returning(tables.chats.c.chat_id)).first() is not None

    def begin_bulk(self, executor: Executor, *, terms_index: bool = True) -> BulkLoad:
        """Lock the archive's tables and drop their foreign keys and secondary
        B-tree indexes. Their definitions are read from the catalog, so indexes
        created in SQL and any an operator added are rebuilt as they were. The
        search terms keep their foreign key (deleting a replaced chat's
        messages deletes their terms), and their GIN index unless
        ``terms_index`` is false: rebuilding it would read every term already
        stored again.

        A distributed archive keeps them: dropping and making them again
        alters every shard, and a failure there, which Citus meets over
        several connections to a worker, cannot be rolled back to the load's
        savepoint, which a failed load needs."""
        if citus.is_distributed(connection_of(executor)):
            return BulkLoad()
        executor.execute(text(f"LOCK TABLE {', '.join(_USERS_TABLES)} IN ACCESS EXCLUSIVE MODE"))
        tables = {"tables": _TABLES}
        foreign_keys = list(executor.execute(_FOREIGN_KEYS, tables))
        indexes = list(executor.execute(_SECONDARY_INDEXES, tables))
        load = BulkLoad()
        for table_name, name, _ in foreign_keys:
            executor.execute(text(f'ALTER TABLE {table_name} DROP CONSTRAINT "{name}"'))
        for _, name, definition in indexes:
            executor.execute(text(f'DROP INDEX "{name}"'))
            load.restore.append(definition)
        if not terms_index:
            executor.execute(text(f"DROP INDEX {_TERMS_INDEX}"))
            load.restore.append(f"CREATE INDEX {_TERMS_INDEX} ON {SEARCH_TERMS} USING gin (terms)")
        # Indexes first, then the keys, which PostgreSQL checks in one pass each.
        load.restore += [
            f'ALTER TABLE {table_name} ADD CONSTRAINT "{name}" {definition}'
            for table_name, name, definition in foreign_keys
        ]
        return load

    def write_terms(self, executor: Executor, entries: Iterable[TermsEntry]) -> None:
        """Many messages' terms (a batch, the indexer's) by text COPY through the
        connection's own psycopg connection where it may (see ``row_writer``),
        a few (an append's) by INSERT. ``entries`` is consumed as the rows are
        sent: the server stores the first while the next are tokenized."""
        pending = iter(entries)
        first = list(islice(pending, _COPIED_TERMS))
        if not first:
            return
        connection = connection_of(executor)
        driver = connection.connection.driver_connection
        if (
            len(first) == _COPIED_TERMS
            and isinstance(driver, psycopg.Connection)
            and not executor.execute(_ROW_SECURITY).scalar_one()
        ):
            with (
                driver_call(connection, _COPY_TERMS),
                driver.cursor() as cursor,
                cursor.copy(_COPY_TERMS) as copy,
            ):
                for chat_id, position, terms, user in chain(first, pending):
                    copy.write_row(
                        (
                            escape_text(chat_id),
                            position,
                            tsvector_literal(terms),
                            None if user is None else escape_text(user),
                        )
                    )
            return
        executor.execute(
            _WRITE_TERMS,
            [
                {
                    "chat_id": chat_id,
                    "position": position,
                    "terms": tsvector_literal(terms),
                    "chat_user_id": user,
                }
                for chat_id, position, terms, user in chain(first, pending)
            ],
        )

    def execute_one(self, executor: Executor, statement: Any, params: Mapping[str, Any]) -> Sequence[Any]:
        """On psycopg's synchronous connection, straight on the driver with the
        statement's SQL and its types' bind processing prepared once: for an
        append, SQLAlchemy's work per execution is a quarter of the time."""
        connection = connection_of(executor)
        driver = connection.connection.driver_connection
        if not isinstance(driver, psycopg.Connection):
            return super().execute_one(executor, statement, params)
        sql, fixed, processors = _prepared(statement, connection.dialect)
        values = fixed | dict(params)
        for name, process in processors:
            values[name] = process(values[name])
        with driver_call(connection, sql, values), driver.cursor() as cursor:
            row: tuple[Any, ...] | None = cursor.execute(sql, values).fetchone()
        assert row is not None
        return row

    def distribution(self, connection: Connection) -> Distribution:
        return citus.distribution(connection)

    def distribute(self, connection: Connection, shard_count: int) -> Distribution:
        return citus.distribute(connection, shard_count)

    def undistribute(self, connection: Connection) -> Distribution:
        return citus.undistribute(connection)

    def terms_value(self, terms: Sequence[str]) -> Any:
        return tsvector_literal(terms)

    def locks_rows_in_any_statement(self, connection: Connection) -> bool:
        # Citus refuses any row lock in a distributed query but a single
        # SELECT's: asked once per connection, whether Citus is loaded.
        citus = connection.info.get(_CITUS_LOADED)
        if citus is None:
            citus = connection.info[_CITUS_LOADED] = bool(connection.execute(_HAS_CITUS).scalar_one())
        return not citus

    def owned_tables(self) -> list[Any]:
        return [*super().owned_tables(), _TERMS]

    def insert_terms(self, first: ColumnElement[int], count: int, user: ColumnElement[Any]) -> Any:
        rows = [
            select(
                bindparam("chat", type_=ArchiveText()),
                first + bindparam(f"t{index}_position", type_=Integer),
                sql_cast(bindparam(f"t{index}_terms", type_=Text()), postgresql.TSVECTOR),
                user,
            )
            for index in range(count)
        ]
        return insert(_TERMS).from_select(list(_TERMS.c), union_all(*rows) if count > 1 else rows[0])

    def delete_terms(self, executor: Executor, starts: Sequence[tuple[str, int]]) -> None:
        if starts:
            executor.execute(
                _DELETE_TERMS, [{"chat_id": chat, "position": position} for chat, position in starts]
            )

    def match(
        self, executor: Executor, query: SearchQuery, filters: SearchFilters, *, candidates: int
    ) -> list[tuple[Any, StoredTerms]]:
        where, params = filters.sql()
        params |= {"query": tsquery(query)}
        statement = typed_candidates(_match_statement(where, candidates=candidates), params)
        with _sampled_index_scans(executor):
            rows = executor.execute(statement, params).all()
        if len(rows) < candidates:  # the sample may have missed matches: look at them all
            rows = executor.execute(statement, params).all()
        return [(row, TsvectorText(row.terms, row.length)) for row in rows]

    # -- archive-wide switches -------------------------------------------------------------

    def row_level_security(self, connection: Connection) -> bool:
        query = text(
            "SELECT bool_and(relrowsecurity AND relforcerowsecurity) FROM pg_class "
            "WHERE relname = ANY(:tables) AND relnamespace = to_regnamespace(current_schema())"
        )
        return bool(connection.execute(query, {"tables": _USERS_TABLES}).scalar())

    def set_row_level_security(self, connection: Connection, enabled: bool) -> None:
        action, force = ("ENABLE", "FORCE") if enabled else ("DISABLE", "NO FORCE")
        for table in _USERS_TABLES:
            connection.execute(text(f"ALTER TABLE {table} {action} ROW LEVEL SECURITY"))
            connection.execute(text(f"ALTER TABLE {table} {force} ROW LEVEL SECURITY"))

    # -- SQL expressions of analytics -----------------------------------------------------

    def json_text(self, column: ColumnElement[Any], key: str) -> ColumnElement[str]:
        return literal_column(f"{_qualified(column)}->>'{key}'", ArchiveText())

    def json_is_object(self, column: ColumnElement[Any], key: str) -> ColumnElement[bool]:
        return literal_column(f"jsonb_typeof({_qualified(column)}->'{key}')") == "object"

    def utc_day(self, moment: ColumnElement[Any]) -> ColumnElement[str]:
        return func.to_char(func.timezone("UTC", moment), "YYYY-MM-DD")

    def by_bytes(self, value: ColumnElement[str]) -> ColumnElement[str]:
        # The same equalities as under any deterministic collation, without
        # strcoll for every comparison (the view daily_usage does the same).
        return value.collate("C")

    @contextmanager
    def analytics_session(self, executor: Executor) -> Iterator[None]:
        # These queries take well under a second; PostgreSQL's JIT compiler, which
        # their cost estimates would trigger, takes longer than that to compile them.
        # In a transaction, for it alone; a read without one (autocommit) sets it
        # for the session and sets it back after.
        connection = connection_of(executor)
        if connection.get_execution_options().get("isolation_level") != "AUTOCOMMIT":
            executor.execute(text("SET LOCAL jit = off"))
            yield
            return
        executor.execute(text("SET jit = off"))
        try:
            yield
        finally:
            executor.execute(text("RESET jit"))

    # -- migrations ---------------------------------------------------------------------------

    def lock_migrations(self, connection: Connection, lock_timeout: str | None) -> None:
        # Several processes may migrate at once (replicas that each run 'db
        # upgrade' as they start): one at a time, the others then find the work done.
        connection.execute(text("SELECT pg_advisory_xact_lock(hashtext('chatarchive migrations'))"))
        citus.prepare_migration(connection)
        if lock_timeout is not None:  # only once its turn has come
            connection.execute(text(lock_timeout))

    def offline_lock_timeout(self, lock_timeout: str | None) -> str | None:
        return lock_timeout


def _summary(error: BaseException) -> str:
    text_ = str(error).strip()
    return text_.splitlines()[0] if text_ else type(error).__name__


def _clipped(value: str, limit: int = 300) -> str:
    """``value``, cut to ``limit`` characters: a key in an error message may be
    a chat id of any length."""
    return value if len(value) <= limit else f"{value[: limit - 1]}…"


def _qualified(column: ColumnElement[Any]) -> str:
    table = getattr(column, "table", None)
    name = getattr(column, "name", None)
    return f"{table.name}.{name}" if table is not None else str(name)


# -- engines -------------------------------------------------------------------------------


#: The names of the archive's constraints and unique indexes.
_CONSTRAINTS = frozenset(
    str(name)
    for table in metadata.tables.values()
    for name in (*(item.name for item in table.constraints), *(item.name for item in table.indexes))
    if name is not None
)
_SHARD_SUFFIX = re.compile(r"_\d+$")


_CONSTRAINT_IN_MESSAGE = re.compile(r'constraint "([^"]+)"')


def _named_constraint(message: str | None) -> str | None:
    """The constraint an error's message names: a Citus worker's error
    reaches the coordinator's client without its constraint field."""
    found = _CONSTRAINT_IN_MESSAGE.search(message or "")
    return found.group(1) if found else None


def _relayed_violation(sqlstate: str, message: str | None) -> bool:
    """Whether an error is a constraint's violation that a Citus coordinator
    relays from a worker's COPY: as an internal error (XX000) with the
    worker's message, not with the violation's own SQLSTATE."""
    return sqlstate == "XX000" and " violates " in (message or "") and _named_constraint(message) is not None


def _unsharded(name: str | None) -> str | None:
    """A constraint's name as the archive's schema gives it: a distributed
    archive reports the shard's copy (``pk_chats_102011``)."""
    if name is None or name in _CONSTRAINTS:
        return name
    bare = _SHARD_SUFFIX.sub("", name)
    return bare if bare in _CONSTRAINTS else name


def _require_utf8(engine: Engine) -> None:
    """Refuse a database that cannot hold any Unicode text, before any use:
    in a LATIN1 database a save failed with the driver's UnicodeEncodeError,
    and SQL_ASCII sends bytes that SQLAlchemy cannot even start with."""

    # Before the dialect's own first-connect work, which fails on SQL_ASCII.
    @event.listens_for(engine, "first_connect", insert=True)
    def _check(dbapi_connection: Any, _record: Any) -> None:
        info = getattr(dbapi_connection, "driver_connection", dbapi_connection).info
        encoding = info.parameter_status("server_encoding")
        if encoding not in (None, "UTF8"):
            raise DatabaseError(
                f"database {info.dbname!r} is encoded {encoding}: chatarchive keeps any Unicode text and "
                "needs a UTF8 database (CREATE DATABASE ... ENCODING 'UTF8' TEMPLATE template0)"
            )


def _quoted(value: str) -> str:
    """``value`` as a string literal for ``text()``: quotes doubled, colons
    escaped from bind parameters (SQLAlchemy doubles any percent sign)."""
    return "'" + value.replace("'", "''").replace(":", "\\:") + "'"


def _session_settings(engine: Engine) -> None:
    """Set up every new connection, in one round trip: floats printed exactly
    (``extra_float_digits = 3``), for a Citus coordinator prints each value it
    sends a worker, and rounded them to 15 digits where a server or role sets
    it to 0; dates printed in ISO format, which is all psycopg reads (a server
    or role set to ``DateStyle = 'German'``, say, made every read of a
    timestamp fail)."""

    @event.listens_for(engine, "connect")
    def _set_up(dbapi_connection: Any, _record: Any) -> None:
        # The asyncio driver's connection comes wrapped by SQLAlchemy.
        driver = getattr(dbapi_connection, "driver_connection", dbapi_connection)
        # On a Citus coordinator, a transaction's SET LOCAL (the user row-level
        # security reads, a lock timeout) reaches the workers too.
        settings = (
            "SET extra_float_digits = 3; SELECT set_config('citus.propagate_set_commands', 'local', false) "
            "WHERE current_setting('citus.propagate_set_commands', true) IS NOT NULL"
        )
        style = driver.info.parameter_status("DateStyle") or "ISO"
        if not style.startswith("ISO"):
            order = style.rpartition(",")[2].strip() if "," in style else "MDY"
            settings += f"; SET DateStyle = 'ISO, {order}'"
        cursor = dbapi_connection.cursor()
        cursor.execute(settings)
        cursor.close()
        if not dbapi_connection.autocommit:
            dbapi_connection.commit()


def _ping_idle_connections(engine: Engine) -> None:
    """A connection that sat idle in the pool for more than
    ``PING_AFTER_IDLE`` seconds is pinged before use and replaced if the
    server has gone away (after a restart, say); connections in steady use
    skip the round trip that ``pool_pre_ping`` would cost on every call."""

    @event.listens_for(engine, "connect")
    @event.listens_for(engine, "checkin")
    def _idle_from_now(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _ping_if_idle(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if time.monotonic() - record.info.get("idle_since", 0.0) < PING_AFTER_IDLE:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except Exception as exc:
            # The pool discards this connection and checks out another one.
            raise DisconnectionError(f"stale connection: {exc}") from exc


# -- the driver --------------------------------------------------------------------------------


@contextmanager
def driver_call(connection: Connection, statement: str, params: Any = None) -> Iterator[None]:
    """Work done on the psycopg connection under ``connection`` directly (a
    COPY, a hot read), with what SQLAlchemy does for the statements it runs
    itself: a driver error is raised as SQLAlchemy's ``DBAPIError`` (which
    ``database_errors`` translates), and a connection that is lost, or cut
    short mid-command by Ctrl-C or a cancelled task (after which it refuses
    even a rollback), is invalidated so that the pool drops it.
    """
    try:
        yield
    except psycopg.Error as exc:
        proxied = connection.connection
        lost = connection.dialect.is_disconnect(cast(Any, exc), proxied.dbapi_connection, None)
        if lost:
            connection.invalidate(exc)
        raise DBAPIError.instance(
            statement, params, exc, psycopg.Error, connection_invalidated=lost, dialect=connection.dialect
        ) from exc
    except BaseException as exc:
        if not isinstance(exc, Exception):  # Ctrl-C, a cancelled task, an exit
            connection.invalidate()
        raise


_PSYCOPG = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]


@cache
def _psycopg_sql(statement: TextClause) -> str:
    """The statement as psycopg takes it (``%(name)s`` parameters)."""
    return str(statement.compile(dialect=_PSYCOPG))


@lru_cache(maxsize=64)
def _prepared(statement: Any, dialect: Dialect) -> tuple[str, dict[str, Any], list[tuple[str, Any]]]:
    """A Core statement as psycopg takes it (``execute_one``): its SQL, the
    values of the parameters it holds itself (its literals: written into the
    SQL where they are plain integers or words, so that an execution sends
    and converts only what it is given), and the bind processor of each
    parameter it is given that has one."""
    compiled = statement.compile(dialect=dialect)
    sql = str(compiled)
    fixed, processors = {}, []
    for bind, name in compiled.bind_names.items():
        process = bind.type.dialect_impl(dialect).bind_processor(dialect)
        if not bind.required:
            value = bind.value if process is None else process(bind.value)
            if (written := _plain_literal(value)) is not None:
                sql = sql.replace(f"%({name})s", written)
            else:
                fixed[name] = value
        elif process is not None:
            processors.append((name, process))
    return sql, fixed, processors


def _plain_literal(value: object) -> str | None:
    """``value`` as an SQL literal if it is a natural number (no sign, which
    a minus before it would turn into a comment) or a word of ASCII letters,
    digits and underscores (nothing to escape), else None."""
    if type(value) is int and value >= 0:
        return str(value)
    if type(value) is str and value.isascii() and value.replace("_", "a").isalnum():
        return f"'{value}'"
    return None


def _fetch_all(
    connection: Connection, statement: TextClause, params: Mapping[str, Any]
) -> Sequence[Sequence[Any]]:
    """The rows of ``statement`` (with untyped parameters), run on the psycopg
    connection under ``connection``: its synchronous one, or under the asyncio
    API its asynchronous one, awaited with SQLAlchemy's
    ``AdaptedConnection.run_async``; errors as ``driver_call`` says."""
    pooled = connection.connection
    driver, adapted = pooled.driver_connection, pooled.dbapi_connection
    sql = _psycopg_sql(statement)
    if isinstance(driver, psycopg.Connection):
        with driver_call(connection, sql, params), driver.cursor() as cursor:
            return cursor.execute(sql, params).fetchall()
    if isinstance(driver, psycopg.AsyncConnection) and isinstance(adapted, AdaptedConnection):

        async def fetch(driver: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            async with driver.cursor() as cursor:
                await cursor.execute(sql, params)
                return await cursor.fetchall()

        with driver_call(connection, sql, params):
            return adapted.run_async(fetch)
    return connection.execute(statement, params).all()


@contextmanager
def bare_connection(url: URL, *, autocommit: bool = False) -> Iterator[Any]:
    """A psycopg connection to ``url``'s database of its own, outside any
    engine: for hand-written reference code, and to create and drop
    databases (``chatarchive bench``)."""
    libpq = url.set(drivername="postgresql").render_as_string(hide_password=False)
    with psycopg.connect(libpq, autocommit=autocommit) as connection:
        yield connection


# -- reads ------------------------------------------------------------------------------------

#: The columns the one-statement read returns of each table, in order
#: (chat_id only for chats).
_JSON_COLUMNS = {
    table: tuple(column.name for column in table.columns if table is tables.chats or column.name != "chat_id")
    for table in (tables.chats, *DOCUMENT_ORDER)
}
#: The double columns of each table, read back from hex (see _json_values).
_HEX_DOUBLES = {
    table: tuple(name for name in columns if isinstance(table.c[name].type, Double))
    for table, columns in _JSON_COLUMNS.items()
}


def _json_values(table: Table, alias: str) -> str:
    """The table's columns for ``json_build_array``, printed the same whatever
    the session's settings: timestamps in UTC (JSON would show them in the
    session's TimeZone), doubles as their 8 bytes in hex (JSON would round them
    to 15 digits under ``extra_float_digits = 0``)."""
    values = []
    for name in _JSON_COLUMNS[table]:
        value = f"{alias}.{name}"
        kind = table.c[name].type
        if isinstance(kind, UTCDateTime):
            value = f"({value} AT TIME ZONE 'UTC')"
        elif isinstance(kind, Double):
            value = f"encode(float8send({value}), 'hex')"
        values.append(value)
    return ", ".join(values)


def _json_row(table: Table, values: Sequence[Any]) -> dict[str, Any]:
    row = dict(zip(_JSON_COLUMNS[table], values, strict=True))
    for name in _HEX_DOUBLES[table]:
        if row[name] is not None:
            (row[name],) = struct.unpack(">d", bytes.fromhex(row[name]))
    return row


@cache
def _documents_query(*, scoped: bool, one: bool, whole: bool) -> TextClause:
    """Each chat as one JSON array: its row, then its child rows of each table
    as arrays of arrays. One text value per chat is the cheapest result for the
    driver to hand over and for Python to decode.

    ``one``: for a single chat id, compared with ``=``. Once psycopg has
    prepared the statement, PostgreSQL then reuses one generic plan instead of
    planning each call, as it keeps doing for ``= ANY(array)`` (whose generic
    plan it estimates for several ids).

    Unless ``whole``, only the rows of the active path: a chat without
    branches needs no filter, so it costs what it did before chats had any.

    For a single chat every part names its id, so that on a distributed
    archive the whole read goes to the one worker that holds the chat (Citus
    sends a correlated subquery to every shard).
    """
    chat_id = ":chat_id" if one else "x.chat_id"
    own = "x.chat_id = c.chat_id" + (" AND x.chat_id = :chat_id" if one else "")
    children = []
    for table, order in DOCUMENT_ORDER.items():
        ordering = ", ".join(f"x.{column.name}" for column in order[1:])
        on_path = ""
        if not whole and table.name in ON_ACTIVE_PATH:
            on_path = f" AND (c.path_length = c.message_count OR {active_path_filter(table.name, chat_id)})"
        children.append(
            f"(SELECT json_agg(json_build_array({_json_values(table, 'x')}) ORDER BY {ordering}) "
            f"FROM {table.name} x WHERE {own}{on_path})"
        )
    wanted = "c.chat_id = :chat_id" if one else "c.chat_id = ANY(:ids)"
    owner = " AND c.user_id = :user_id" if scoped else ""
    chat = f"json_build_array({_json_values(tables.chats, 'c')})"
    return text(
        f"SELECT json_build_array({chat}, {', '.join(children)})::text FROM chats c WHERE {wanted}{owner}"
    )


# -- writes ------------------------------------------------------------------------------------

#: Whether row-level security applies to this role on the archive's tables
#: (all of them have the same setting; see ``set_row_level_security``).
_ROW_SECURITY = text("SELECT row_security_active('chats')")
_HAS_CITUS = text("SELECT current_setting('citus.propagate_set_commands', true) IS NOT NULL")
_CITUS_LOADED = "chatarchive.citus"

_PG_TYPES: tuple[tuple[type, str], ...] = (
    (ArchiveText, "text"),
    (OrderedJson, "json"),  # before JsonObject, its base
    (JsonObject, "jsonb"),
    (UTCDateTime, "timestamptz"),
    (Boolean, "bool"),
    (Integer, "int4"),
    (Double, "float8"),
)


class _CopyPlan:
    """How one table's rows are copied: the statement, the columns in order
    and their types, and which of them are text (to escape)."""

    def __init__(self, table: Table) -> None:
        self.columns = tuple(column.name for column in table.columns)
        self.types = tuple(
            next(pg for kind, pg in _PG_TYPES if isinstance(column.type, kind)) for column in table.columns
        )
        self.statement = f"COPY {table.name} ({', '.join(self.columns)}) FROM STDIN (FORMAT BINARY)"
        self.text_columns = tuple(index for index, kind in enumerate(self.types) if kind == "text")

    def values(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        """The rows' values in column order, text escaped if needed."""
        values = list(map(itemgetter(*self.columns), rows))
        if _needs_escape(values, self.text_columns):
            values = [_escaped(row, self.text_columns) for row in values]
        return values


@cache
def _copy_plan(table: Table) -> _CopyPlan:
    return _CopyPlan(table)


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
    """Binary COPY through the connection's own psycopg connection (and transaction)."""

    def __init__(self, connection: Connection, driver: psycopg.Connection[Any]) -> None:
        self._connection = connection
        self._cursor = driver.cursor()
        set_json_dumps(postgres_json_text, self._cursor)

    def write(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        plan = _copy_plan(table)
        values = plan.values(rows)
        with driver_call(self._connection, plan.statement), self._cursor.copy(plan.statement) as copy:
            copy.set_types(plan.types)
            write_row = copy.write_row
            for row in values:
                write_row(row)


class _AsyncCopyWriter:
    """Binary COPY under the asyncio API: through the connection's asynchronous
    psycopg connection, awaited with SQLAlchemy's ``AdaptedConnection.run_async``
    (the repository's code runs in ``run_sync``), so the event loop goes on
    while the server reads the rows."""

    def __init__(self, connection: Connection, adapted: AdaptedConnection) -> None:
        self._connection = connection
        self._adapted = adapted

    def write(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        plan = _copy_plan(table)
        values = plan.values(rows)

        async def copy_rows(driver: psycopg.AsyncConnection[Any]) -> None:
            cursor = driver.cursor()
            set_json_dumps(postgres_json_text, cursor)
            async with cursor.copy(plan.statement) as copy:
                copy.set_types(plan.types)
                for row in values:
                    await copy.write_row(row)

        with driver_call(self._connection, plan.statement):
            self._adapted.run_async(copy_rows)


def copy_values(table: Table, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """``rows`` of ``table`` as ``copy_prepared`` takes them."""
    return [
        tuple(Jsonb(value) if type(value) is dict else value for value in row)
        for row in _copy_plan(table).values(rows)
    ]


def copy_prepared(driver: Any, table: Table, values: Sequence[tuple[Any, ...]], *, schema: str) -> None:
    """Copy the rows ``copy_values`` prepared into ``schema``'s table of
    ``table``'s name, as the archive copies them, through a connection of
    ``bare_connection``: ``chatarchive bench``'s reference, which does
    nothing else."""
    plan = _copy_plan(table)
    statement = plan.statement.replace(f"COPY {table.name} ", f"COPY {schema}.{table.name} ", 1)
    with driver.cursor() as cursor, cursor.copy(statement) as copy:
        copy.set_types(plan.types)
        for row in values:
            copy.write_row(row)


# The archive's foreign keys and its indexes that back no constraint, with their
# definitions, from the catalog (for a bulk load).
_FOREIGN_KEYS = text(
    "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
    "WHERE contype = 'f' AND conrelid::regclass::text = ANY(:tables) "
    "ORDER BY conrelid::regclass::text, conname"
)
_SECONDARY_INDEXES = text(
    "SELECT t.relname, i.relname, pg_get_indexdef(i.oid) FROM pg_index x "
    "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
    "WHERE t.relname = ANY(:tables) AND t.relnamespace = to_regnamespace(current_schema()) "
    "AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid) "
    "AND i.relam <> (SELECT oid FROM pg_am WHERE amname = 'gin') ORDER BY i.relname"
)


# -- search ------------------------------------------------------------------------------------

#: A first search samples about this many of the index entries of each of its
#: terms (``gin_fuzzy_search_limit``), so that a word found in half the
#: archive is not read whole to pick a page of candidates. If the sample yields
#: fewer candidates than asked for, the search runs again over every match.
SAMPLED_MATCHES = 5000

_TERMS_INDEX = "ix_message_terms_terms"
#: From this many messages' terms on, ``write_terms`` copies them (COPY's own
#: round trips cost more than an INSERT's for a few rows).
_COPIED_TERMS = 20
_COPY_TERMS = f"COPY {SEARCH_TERMS} (chat_id, message_position, terms, chat_user_id) FROM STDIN"
_WRITE_TERMS = text(
    f"INSERT INTO {SEARCH_TERMS} (chat_id, message_position, terms, chat_user_id) "
    "VALUES (:chat_id, :position, CAST(:terms AS tsvector), :chat_user_id)"
).bindparams(bindparam("chat_id", type_=ArchiveText()), bindparam("chat_user_id", type_=ArchiveText()))
_TERMS = light_table(
    SEARCH_TERMS, column("chat_id"), column("message_position"), column("terms"), column("chat_user_id")
)
_DELETE_TERMS = text(
    f"DELETE FROM {SEARCH_TERMS} WHERE chat_id = :chat_id AND message_position >= :position"
).bindparams(bindparam("chat_id", type_=ArchiveText()))


@contextmanager
def _sampled_index_scans(executor: Executor) -> Iterator[None]:
    """Sets ``gin_fuzzy_search_limit`` for the block, then puts back the
    connection's own value. (After an error inside a transaction, the rollback
    undoes the setting; only then does the restore fail, and that is ignored.)"""
    setting = text("SELECT set_config('gin_fuzzy_search_limit', :value, false)")
    previous = executor.execute(text("SELECT current_setting('gin_fuzzy_search_limit')")).scalar_one()
    executor.execute(setting, {"value": str(SAMPLED_MATCHES)})
    try:
        yield
    except BaseException:
        with suppress(DBAPIError):
            executor.execute(setting, {"value": previous})
        raise
    executor.execute(setting, {"value": previous})


def tsquery(query: SearchQuery) -> str:
    """A search query as ``tsquery`` input: the terms quoted (they hold only
    letters and digits), phrases as ``<->``, a prefix as ``:*``."""

    def phrase(item: Phrase) -> str:
        quoted = [f"'{term}'" for term in item.terms]
        if item.prefix:
            quoted[-1] += ":*"
        return "(" + " <-> ".join(quoted) + ")"

    expression = " & ".join("(" + " | ".join(map(phrase, group)) + ")" for group in query.groups)
    if query.excluded:
        expression += " & !(" + " | ".join(map(phrase, query.excluded)) + ")"
    return expression


def _match_statement(where: str, *, candidates: int) -> TextClause:
    # The LIMIT is a literal: as a parameter, the plan that PostgreSQL caches
    # for the prepared statement (after five runs) cannot know it, and scans
    # every match.
    return text(
        f"""
        SELECT m.chat_id, m.position, m.uid, m.role, m.created_at, m.text,
               t.terms::text AS terms, length(t.terms) AS length
        FROM {SEARCH_TERMS} t
        JOIN messages m ON m.chat_id = t.chat_id AND m.position = t.message_position
        JOIN chats c ON c.chat_id = t.chat_id
        WHERE t.terms @@ CAST(:query AS tsquery){where}
        LIMIT {candidates}
        """
    )
