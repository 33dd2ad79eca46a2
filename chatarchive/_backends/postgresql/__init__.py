"""PostgreSQL, through psycopg 3: chatarchive's first database.

The only package that imports psycopg: ``engine`` (engines, connections,
statements through psycopg), ``errors``, ``documents`` (the one-statement
read), ``copy`` (binary COPY, bulk-load DDL) and ``search``; this module is
the backend's class. What it does differently from SQLite:

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
import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from itertools import chain, islice
from typing import Any, ClassVar, cast

import psycopg
from psycopg.types.json import Json, Jsonb
from sqlalchemy import (
    URL,
    ColumnElement,
    Connection,
    Engine,
    Integer,
    Table,
    Text,
    bindparam,
    func,
    insert,
    literal_column,
    select,
    text,
    union_all,
)
from sqlalchemy import cast as sql_cast
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import AdaptedConnection, Dialect
from sqlalchemy.types import TypeEngine

from chatarchive._backends import citus
from chatarchive._backends.base import (
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
from chatarchive._backends.citus import Distribution
from chatarchive._embeddings import Embedder
from chatarchive._exceptions import ChatArchiveError, ConflictError, SchemaNotReady
from chatarchive._schema import DOCUMENT_ORDER, SEARCH_TERMS, metadata, tables
from chatarchive._search import SearchFilters, SearchQuery, typed_candidates, typed_nearest
from chatarchive._terms import StoredTerms, TsvectorText, tsvector_literal
from chatarchive._types import (
    ArchiveText,
    escape_text,
    postgres_json_text,
    unescape_json_text,
    unescape_text,
    unescape_value,
)

from .copy import (
    _CITUS_LOADED,
    _FOREIGN_KEYS,
    _HAS_CITUS,
    _INDEX_DEFINITION,
    _ROW_SECURITY,
    _SECONDARY_INDEXES,
    _AsyncCopyWriter,
    _CopyWriter,
    copy_prepared,
    copy_values,
)
from .documents import _documents_query, _json_row
from .engine import (
    PING_AFTER_IDLE,
    _fetch_all,
    _lost_connections,
    _ping_idle_connections,
    _prepared,
    _quoted,
    _require_utf8,
    _session_settings,
    bare_connection,
    driver_call,
)
from .errors import (
    _CONFLICT_STATES,
    _LOCK_NOT_AVAILABLE,
    _SCHEMA_STATES,
    _clipped,
    _named_constraint,
    _relayed_violation,
    _summary,
    _unsharded,
)
from .search import (
    _COPIED_TERMS,
    _COPY_TERMS,
    _DELETE_TERMS,
    _TERMS,
    _TERMS_INDEX,
    _WRITE_TERMS,
    _hnsw_scans,
    _match_statement,
    _nearest_statement,
    _sampled_index_scans,
    index_vectors,
    tsquery,
    vector_text,
)

__all__ = [
    "PING_AFTER_IDLE",
    "PostgreSQL",
    "bare_connection",
    "copy_prepared",
    "copy_values",
    "driver_call",
    "tsquery",
]


_TABLES = [table.name for table in metadata.sorted_tables]
#: The tables row-level security covers: the archive's, and its search terms
#: (which the models do not describe).
_USERS_TABLES = [*_TABLES, SEARCH_TERMS]


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
        _lost_connections(engine)
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

    def vector_type(self, dialect: Dialect) -> TypeEngine[Any]:
        # real[], not pgvector's vector: the archive's tables are the same with or without pgvector.
        return dialect.type_descriptor(postgresql.ARRAY(postgresql.REAL()))

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
        self,
        executor: Executor,
        chat_ids: Sequence[str],
        *,
        user_id: str | None,
        whole: bool = False,
        last: int | None = None,
    ) -> DocumentRows:
        """The documents in one statement: one round trip and one snapshot,
        even under READ COMMITTED, or outside a transaction."""
        one = len(chat_ids) == 1
        params: dict[str, Any] = (
            {"chat_id": escape_text(chat_ids[0])} if one else {"ids": [escape_text(id_) for id_ in chat_ids]}
        )
        if user_id is not None:
            params["user_id"] = escape_text(user_id)
        if last is not None:
            params["last"] = last
        found = []
        children: dict[str, dict[Table, list[Mapping[str, Any]]]] = {}
        statement = _documents_query(scoped=user_id is not None, one=one, whole=whole, tail=last is not None)
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
        if not terms_index:  # built again as it is defined, with an operator's settings (fastupdate...)
            definition = executor.execute(_INDEX_DEFINITION, {"index": _TERMS_INDEX}).scalar_one()
            executor.execute(text(f"DROP INDEX {_TERMS_INDEX}"))
            load.restore.append(definition)
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
        """Straight on psycopg's connection (synchronous, or under the asyncio
        API asynchronous, awaited with SQLAlchemy's ``run_async``), with the
        statement's SQL and its types' bind processing prepared once: for an
        append, SQLAlchemy's work per execution is a quarter of the time. The
        statement is prepared on the connection at its first execution, not
        its fifth: a turn's shape recurs, and the server then plans it once."""
        connection = connection_of(executor)
        pooled = connection.connection
        driver, adapted = pooled.driver_connection, pooled.dbapi_connection
        prepared = _prepared(statement, connection.dialect)
        values = prepared.values(params)
        row: tuple[Any, ...] | None
        if isinstance(driver, psycopg.Connection):
            with driver_call(connection, prepared.sql, values), psycopg.RawCursor(driver) as cursor:
                row = cursor.execute(prepared.sql, values, prepare=True).fetchone()
        elif isinstance(driver, psycopg.AsyncConnection) and isinstance(adapted, AdaptedConnection):

            async def fetch(driver: psycopg.AsyncConnection[Any]) -> tuple[Any, ...] | None:
                async with psycopg.AsyncRawCursor(driver) as cursor:
                    await cursor.execute(prepared.sql, values, prepare=True)
                    return await cursor.fetchone()

            with driver_call(connection, prepared.sql, values):
                row = cast(tuple[Any, ...] | None, adapted.run_async(fetch))
        else:
            return super().execute_one(executor, statement, params)
        assert row is not None
        return tuple(row)

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

    # -- vectors ---------------------------------------------------------------------------

    def index_vectors(self, connection: Connection, model: str | None, dimension: int | None) -> None:
        index_vectors(connection, model, dimension)

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
        where, params = filters.sql()
        params |= {"vector": vector_text(vector)}
        statement = _nearest_statement(embedder.name, embedder.dimension, where, candidates=candidates)
        with _hnsw_scans(executor, candidates, scan):
            rows = executor.execute(typed_nearest(statement, params), params).all()
        # In the order of their exact distances (the index's is of half-precision vectors).
        return sorted(rows, key=_by_distance)

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


def _qualified(column: ColumnElement[Any]) -> str:
    table = getattr(column, "table", None)
    name = getattr(column, "name", None)
    return f"{table.name}.{name}" if table is not None else str(name)


def _by_distance(row: Any) -> tuple[bool, float]:
    """A vector search's row's place: by its distance, the rows without one
    (a vector of zeros has none, NaN) last."""
    distance = row.distance
    known = distance is not None and not math.isnan(distance)
    return (not known, distance if known else 0.0)
