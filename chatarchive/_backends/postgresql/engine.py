"""Engines and connections on PostgreSQL: UTF-8 checked, session settings, idle connections pinged, lost
connections recognized, and statements sent through psycopg directly where SQLAlchemy's per-statement work
would cost as much as the server's.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache, lru_cache
from typing import Any, cast

import psycopg
from sqlalchemy import URL, Connection, Engine, event
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import AdaptedConnection, Dialect, ExceptionContext
from sqlalchemy.exc import DBAPIError, DisconnectionError
from sqlalchemy.sql.elements import TextClause

from chatarchive._exceptions import DatabaseError

#: A pooled connection idle for longer than this (seconds) is checked with a
#: ping before it is handed out.
PING_AFTER_IDLE = 1.0


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


#: The SQLSTATE class of the errors with which the server ends a session:
#: shut down (57P01), crashed (57P02), its database dropped (57P04), idle for
#: too long (57P05).
_SESSION_ENDED = "57P"


def _in_pipeline_mode(driver: Any) -> bool:
    """Whether psycopg's connection is still in pipeline mode. The archive
    opens no pipeline of its own: psycopg leaves the pipeline of an
    ``executemany`` before its error surfaces. When the server ends the
    session while that pipeline exits, psycopg reports only "cannot exit
    pipeline mode while busy" and leaves the connection in pipeline mode,
    where a command either fails ("PQsendQuery not allowed in pipeline mode")
    or, prepared, waits for a result that never comes."""
    pgconn = getattr(driver, "pgconn", None)
    return pgconn is not None and pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF


def _lost(error: BaseException, connection: Connection) -> str | None:
    """How ``error`` left ``connection`` unusable, beyond what SQLAlchemy's
    dialect sees (a connection psycopg marked closed or broken): ``"session"``
    if the server ended the session, which psycopg may report before it has
    seen the socket close; ``"connection"`` if the connection is still in
    pipeline mode (``_in_pipeline_mode``). None: still usable."""
    sqlstate = getattr(error, "sqlstate", None)
    if isinstance(sqlstate, str) and sqlstate.startswith(_SESSION_ENDED):
        return "session"
    if connection.closed or connection.invalidated:
        return None
    return "connection" if _in_pipeline_mode(connection.connection.driver_connection) else None


def _lost_connections(engine: Engine) -> None:
    """Tell SQLAlchemy of the lost connections ``_lost`` recognizes, so that
    it drops them (a read is then retried on a new one, and the error says
    the connection was lost): a connection stuck in pipeline mode alone, a
    session the server ended with every pooled connection (a restart). And
    never hand out a connection stuck in pipeline mode: the pool replaces it."""

    @event.listens_for(engine, "handle_error")
    def _recognize(context: ExceptionContext) -> None:
        if context.is_disconnect or context.connection is None or context.original_exception is None:
            return
        how = _lost(context.original_exception, context.connection)
        if how is not None:
            context.is_disconnect = True
            context.invalidate_pool_on_disconnect = how == "session"

    @event.listens_for(engine, "checkout")
    def _usable(dbapi_connection: Any, _record: Any, _proxy: Any) -> None:
        if _in_pipeline_mode(getattr(dbapi_connection, "driver_connection", dbapi_connection)):
            # The pool discards this connection and checks out another one.
            raise DisconnectionError("connection left in pipeline mode")


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
        lost = lost or _lost(exc, connection) is not None
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


@dataclass(frozen=True)
class Prepared:
    """A Core statement as psycopg's raw cursor takes it (``execute_one``)."""

    #: Its SQL with positional parameters (``$1``, ``$2``...): psycopg sends
    #: it as it is, without parsing it again at each execution (it caches its
    #: parsing of statements of up to 4 kB only, and an append's is longer).
    sql: str
    #: The name of each positional parameter, in order.
    names: tuple[str, ...]
    #: The values of the parameters the statement holds itself (its literals
    #: that are not written into the SQL).
    fixed: Mapping[str, Any]
    #: The bind processor of each parameter it is given that has one.
    processors: tuple[tuple[str, Any], ...]

    def values(self, params: Mapping[str, Any]) -> list[Any]:
        """The positional values for ``params``."""
        given = {**self.fixed, **params}
        for name, process in self.processors:
            given[name] = process(given[name])
        return [given[name] for name in self.names]


_NAMED_PARAMETER = re.compile(r"%\((\w+)\)s|%%")


@lru_cache(maxsize=64)
def _prepared(statement: Any, dialect: Dialect) -> Prepared:
    """A Core statement as psycopg's raw cursor takes it: its literals written
    into the SQL where they are plain integers or words (so that an execution
    sends and converts only what it is given), its parameters positional."""
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
    names: dict[str, str] = {}

    def positional(match: re.Match[str]) -> str:
        if (name := match.group(1)) is None:
            return "%"  # an escaped percent sign
        return names.setdefault(name, f"${len(names) + 1}")

    sql = _NAMED_PARAMETER.sub(positional, sql)
    return Prepared(sql, tuple(names), fixed, tuple(processors))


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
