"""Where the archive lives: the database URL and a correctly set-up engine."""

from __future__ import annotations

import asyncio
import math
import os
import sqlite3
import threading
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import psycopg
import sqlalchemy
import sqlalchemy.ext.asyncio
from sqlalchemy import URL, Connection, Engine, event, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, DisconnectionError, NoSuchModuleError
from sqlalchemy.ext.asyncio import AsyncEngine

from ._exceptions import ChatArchiveError, DatabaseError, InvalidDocument, is_real_number

__all__ = [
    "DEFAULT_URL",
    "PING_AFTER_IDLE",
    "URL_ENV",
    "create_async_engine",
    "create_engine",
    "database_url",
    "driver_call",
    "for_reading",
    "for_writing",
    "in_memory",
    "missing_archive",
    "shown_url",
]

#: Environment variable that names the archive's database.
URL_ENV = "CHATARCHIVE_DATABASE_URL"
#: The embedded default: a SQLite file in the working directory.
DEFAULT_URL = "sqlite:///chatarchive.db"


def database_url(url: str | URL | None = None) -> URL:
    """The URL to use: ``url``, else ``$CHATARCHIVE_DATABASE_URL``, else the SQLite default.

    ``postgresql://`` and ``postgres://`` URLs are given the psycopg 3 driver.

    Raises:
        InvalidDocument: (field ``url``) for a string that is not a URL, or a
            database other than PostgreSQL and SQLite.
    """
    if url is None:
        url = os.environ.get(URL_ENV) or DEFAULT_URL
    try:
        parsed = make_url(url)
    except ArgumentError:
        # Not echoed: the string may hold a password.
        raise InvalidDocument(
            "not a database URL (postgresql://user@host/database or sqlite:///file.db)", field="url"
        ) from None
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    if parsed.get_backend_name() not in ("postgresql", "sqlite"):
        raise InvalidDocument(
            f"chatarchive keeps archives in PostgreSQL or SQLite, not {parsed.get_backend_name()!r}",
            field="url",
        )
    return parsed


@contextmanager
def _driver_of(url: URL) -> Iterator[None]:
    """A URL naming a driver that is not installed fails with that said."""
    try:
        yield
    except (ImportError, NoSuchModuleError) as exc:
        raise InvalidDocument(
            f"cannot load the database driver {url.get_driver_name()!r}: {exc}", field="url"
        ) from exc


#: A pooled PostgreSQL connection idle for longer than this (seconds) is
#: checked with a ping before it is handed out.
PING_AFTER_IDLE = 1.0


def create_engine(
    url: str | URL | None = None, *, statement_timeout: float | None = None, **options: Any
) -> Engine:
    """An engine for the archive's database, set up for chatarchive's needs.

    A PostgreSQL connection that has sat idle in the pool for more than
    :data:`PING_AFTER_IDLE` seconds is pinged before use and replaced if the
    server has gone away (after a restart, say); connections in steady use
    skip the round trip that ``pool_pre_ping`` would cost on every call.
    SQLite connections enforce foreign keys, wait for locks, use WAL on files,
    and let SQLAlchemy (not the driver) begin transactions so that savepoints
    work. ``statement_timeout`` (seconds) applies to every PostgreSQL statement.
    """
    parsed = database_url(url)
    _add_statement_timeout(parsed, statement_timeout, options)
    _one_memory_connection(parsed, options, _MemoryPool)
    with _driver_of(parsed):
        engine = sqlalchemy.create_engine(parsed, **options)
    _set_up(engine, parsed, options)
    return engine


def create_async_engine(
    url: str | URL | None = None, *, statement_timeout: float | None = None, **options: Any
) -> AsyncEngine:
    """The asyncio twin of :func:`create_engine`: psycopg 3's async driver for
    PostgreSQL, aiosqlite for SQLite, set up the same way."""
    parsed = database_url(url)
    if parsed.drivername in ("sqlite", "sqlite+pysqlite"):
        parsed = parsed.set(drivername="sqlite+aiosqlite")
    _add_statement_timeout(parsed, statement_timeout, options)
    _one_memory_connection(parsed, options, _AsyncMemoryPool)
    with _driver_of(parsed):
        engine = sqlalchemy.ext.asyncio.create_async_engine(parsed, **options)
    _set_up(engine.sync_engine, parsed, options)
    return engine


def in_memory(url: URL) -> bool:
    """Whether ``url`` names an in-memory SQLite database (``sqlite://``, ``sqlite:///:memory:``)."""
    return url.get_backend_name() == "sqlite" and url.database in (None, "", ":memory:")


def _sqlite_file(url: URL) -> str | None:
    """The path of a SQLite archive that ``url`` names by a plain path (``None``
    for any other: another database, in memory, or a ``file:`` URI with
    ``?uri=true``, which says for itself whether to create the file)."""
    if url.get_backend_name() != "sqlite" or in_memory(url) or url.query.get("uri") is not None:
        return None
    return str(url.database)


def shown_url(url: URL) -> str:
    """``url`` as messages show it: the password hidden, and a SQLite path as
    it is on disk (SQLAlchemy 2.1 writes its ``:`` as ``%3A``: ``:memory:``
    came out as ``%3Amemory%3A``)."""
    if url.get_backend_name() != "sqlite" or not url.database:
        return url.render_as_string()
    query = url.render_as_string().partition("?")[2]
    return f"{url.drivername}:///{url.database}" + (f"?{query}" if query else "")


def missing_archive(url: URL) -> str | None:
    """What is wrong with a SQLite URL whose file does not exist (``None``
    otherwise). Connecting creates an empty file, so a read through a mistyped
    path left a stray database behind it: the callers that only look at an
    archive ask this first and do not connect."""
    path = _sqlite_file(url)
    return None if path is None or os.path.exists(path) else f"no archive at {path} (no such file)"


class _MemoryPool(sqlalchemy.pool.QueuePool):
    """The one connection of an in-memory SQLite database, lent to one thread
    at a time; the others wait for it. A thread that asks again while it holds
    it (an archive call inside that archive's ``transaction()`` block) would
    wait for itself: it is refused at once."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._holder: object = None

    def _caller(self) -> object:
        return threading.get_ident()

    def _do_get(self) -> Any:
        caller = self._caller()
        if caller is not None and caller == self._holder:
            raise ChatArchiveError(
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
    """:class:`_MemoryPool` for the asyncio engine: lent to one task at a time."""

    def _caller(self) -> object:
        try:
            return asyncio.current_task()
        except RuntimeError:  # no event loop: a thread of its own
            return threading.get_ident()


def _one_memory_connection(url: URL, options: dict[str, Any], pool: type[_MemoryPool]) -> None:
    """An in-memory SQLite database lives in one connection: share that one
    connection, one caller at a time, between the threads (and tasks) that use
    the archive. SQLAlchemy's defaults gave each thread a database of its own
    (another thread found no tables), and let concurrent tasks into one
    connection at once ("cannot start a transaction within a transaction").
    The caller's own pool options win."""
    if not in_memory(url) or {"poolclass", "pool", "creator"} & options.keys():
        return
    options.update(poolclass=pool, pool_size=1, max_overflow=0)
    options["connect_args"] = {"check_same_thread": False, **options.get("connect_args", {})}


def _add_statement_timeout(url: URL, seconds: float | None, options: dict[str, Any]) -> None:
    if seconds is not None and (not is_real_number(seconds) or not 0 < seconds < math.inf):
        raise InvalidDocument(
            f"statement_timeout must be a number of seconds > 0, not {seconds!r}", field="statement_timeout"
        )
    if seconds is not None and url.get_backend_name() == "postgresql":
        connect_args = dict(options.pop("connect_args", {}))
        setting = f"-c statement_timeout={max(1, round(seconds * 1000))}"
        connect_args["options"] = f"{connect_args.get('options', '')} {setting}".strip()
        options["connect_args"] = connect_args


def _set_up(engine: Engine, url: URL, options: dict[str, Any]) -> None:
    _new_pool_after_fork(engine)
    if url.get_backend_name() == "postgresql":
        _require_utf8(engine)
        _iso_dates(engine)
        if not options.get("pool_pre_ping"):
            _ping_idle_connections(engine)
    if url.get_backend_name() == "sqlite":
        path = _sqlite_file(url)
        _set_up_sqlite(engine, in_memory=in_memory(url), path=path)
        if path is not None:
            _name_a_missing_directory(engine, path)


#: Engines made here and still in use: a forked process gives each a new pool.
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()


def _new_pools_in_the_child() -> None:
    for engine in list(_ENGINES):
        engine.dispose(close=False)


os.register_at_fork(after_in_child=_new_pools_in_the_child)


def _new_pool_after_fork(engine: Engine) -> None:
    """Give a process forked from this one (``gunicorn --preload``, a
    ``multiprocessing`` or Celery worker) an empty pool of its own: two
    processes on one pooled connection corrupt each other's results ("server
    sent data without prior row description", or another query's rows). The
    parent's connections are left to the parent (psycopg closes a connection
    only in the process that opened it). One hook serves every engine, held
    weakly, so that engines made and dropped again and again cost nothing."""
    _ENGINES.add(engine)


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


def _iso_dates(engine: Engine) -> None:
    """Make PostgreSQL print dates in ISO format on every connection: psycopg
    reads no other (a server or role set to ``DateStyle = 'German'``, say,
    made every read of a timestamp fail). The server's setting is known from
    the connection's start-up, so connections to ISO servers cost nothing."""

    @event.listens_for(engine, "connect")
    def _set_iso(dbapi_connection: Any, _record: Any) -> None:
        # The asyncio driver's connection comes wrapped by SQLAlchemy.
        driver = getattr(dbapi_connection, "driver_connection", dbapi_connection)
        style = driver.info.parameter_status("DateStyle") or "ISO"
        if not style.startswith("ISO"):
            order = style.rpartition(",")[2].strip() if "," in style else "MDY"
            cursor = dbapi_connection.cursor()
            cursor.execute(f"SET DateStyle = 'ISO, {order}'")
            cursor.close()
            if not dbapi_connection.autocommit:
                dbapi_connection.commit()


def _ping_idle_connections(engine: Engine) -> None:
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


def _set_up_sqlite(engine: Engine, *, in_memory: bool, path: str | None) -> None:
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


# Execution option that makes a SQLite transaction begin IMMEDIATE (see for_writing).
_WRITING = "chatarchive_writing"

_AnyEngine = TypeVar("_AnyEngine", Engine, AsyncEngine)


def for_writing(engine: _AnyEngine) -> _AnyEngine:
    """The same engine (and pool) set up for transactions that write: on SQLite
    they begin ``IMMEDIATE``, so a writer waits for the write lock up front
    instead of failing with "database is locked" when another writer committed
    after its first read. PostgreSQL needs nothing."""
    if engine.dialect.name != "sqlite":
        return engine
    return engine.execution_options(**{_WRITING: True})


def writing_on(connection: Connection) -> None:
    """:func:`for_writing` for one connection already taken from the pool: its
    next transactions begin ``IMMEDIATE`` on SQLite."""
    connection.execution_options(**{_WRITING: True})


def for_reading(engine: _AnyEngine) -> _AnyEngine:
    """The same engine (and pool) set up for reads: without a transaction on
    PostgreSQL (a read that is one statement needs none), unchanged on SQLite."""
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="AUTOCOMMIT")
    return engine


@contextmanager
def driver_call(connection: Connection, statement: str, params: Any = None) -> Iterator[None]:
    """Work done on the psycopg connection under ``connection`` directly (a
    COPY, a hot read), with what SQLAlchemy does for the statements it runs
    itself: a driver error is raised as SQLAlchemy's ``DBAPIError`` (which
    :func:`database_errors` translates), and a connection that is lost, or
    cut short mid-command by Ctrl-C or a cancelled task (after which it
    refuses even a rollback), is invalidated so that the pool drops it.
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
