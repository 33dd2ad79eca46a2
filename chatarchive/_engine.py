"""Where the archive lives: the database URL, and engines set up for chatarchive.

What each database needs of its engine (PostgreSQL's checks of idle
connections, SQLite's pragmas and write locks...) is its backend's; this module
only chooses the URL and the backend, and keeps engines right across a fork.
"""

from __future__ import annotations

import math
import os
import threading
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TypeVar, cast

import sqlalchemy
import sqlalchemy.ext.asyncio
from sqlalchemy import URL, Engine, make_url
from sqlalchemy.exc import ArgumentError, NoSuchModuleError
from sqlalchemy.ext.asyncio import AsyncEngine

from ._arguments import is_real_number
from ._backends import backend_named, backend_of, backend_of_url
from ._exceptions import InvalidArgument

__all__ = [
    "DEFAULT_URL",
    "URL_ENV",
    "create_async_engine",
    "create_engine",
    "database_url",
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
        InvalidArgument: (argument ``url``) for a string that is not a URL,
            or a database other than PostgreSQL and SQLite.
    """
    if url is None:
        url = os.environ.get(URL_ENV) or DEFAULT_URL
    try:
        parsed = make_url(url)
    except ArgumentError:
        # Not echoed: the string may hold a password.
        raise InvalidArgument(
            "not a database URL (postgresql://user@host/database or sqlite:///file.db)", argument="url"
        ) from None
    return backend_of_url(parsed).url(parsed)


def create_engine(
    url: str | URL | None = None, *, statement_timeout: float | None = None, **options: Any
) -> Engine:
    """An engine for the archive's database, set up for chatarchive's needs.

    A PostgreSQL connection that has sat idle in the pool for more than a
    second is pinged before use and replaced if the server has gone away
    (after a restart, say); connections in steady use skip the round trip
    that ``pool_pre_ping`` would cost on every call. SQLite connections
    enforce foreign keys, wait for locks, use WAL on files, and let SQLAlchemy
    (not the driver) begin transactions so that savepoints work.
    ``statement_timeout`` (seconds) applies to every PostgreSQL statement.
    """
    parsed = database_url(url)
    backend = backend_named(parsed.get_backend_name())
    backend.engine_options(parsed, options, statement_timeout=_seconds(statement_timeout))
    with _driver_of(parsed):
        engine = sqlalchemy.create_engine(parsed, **options)
    backend.set_up(engine, parsed, options)
    _new_pool_after_fork(engine)
    return engine


def create_async_engine(
    url: str | URL | None = None, *, statement_timeout: float | None = None, **options: Any
) -> AsyncEngine:
    """The asyncio twin of ``create_engine``: psycopg 3's async driver for
    PostgreSQL, aiosqlite for SQLite, set up the same way."""
    parsed = database_url(url)
    backend = backend_named(parsed.get_backend_name())
    parsed = backend.async_url(parsed)
    backend.async_engine_options(parsed, options, statement_timeout=_seconds(statement_timeout))
    with _driver_of(parsed):
        engine = sqlalchemy.ext.asyncio.create_async_engine(parsed, **options)
    backend.set_up(engine.sync_engine, parsed, options)
    _new_pool_after_fork(engine.sync_engine)
    return engine


def _seconds(statement_timeout: object) -> float | None:
    if statement_timeout is not None and (
        not is_real_number(statement_timeout) or not 0 < statement_timeout < math.inf
    ):
        raise InvalidArgument(
            f"statement_timeout must be a number of seconds > 0, not {statement_timeout!r}",
            argument="statement_timeout",
        )
    return statement_timeout


@contextmanager
def _driver_of(url: URL) -> Iterator[None]:
    """A URL naming a driver that is not installed fails with that said."""
    try:
        yield
    except (ImportError, NoSuchModuleError) as exc:
        raise InvalidArgument(
            f"cannot load the database driver {url.get_driver_name()!r}: {exc}", argument="url"
        ) from exc


def in_memory(url: URL) -> bool:
    """Whether ``url`` names a database that lives only in this process (``sqlite://``)."""
    return backend_named(url.get_backend_name()).in_memory(url)


def missing_archive(url: URL) -> str | None:
    """What is wrong with an archive that does not exist yet and that
    connecting would create (a SQLite file); ``None`` otherwise. The callers
    that only look at an archive ask this first and do not connect."""
    return backend_named(url.get_backend_name()).missing(url)


def shown_url(url: URL) -> str:
    """``url`` as messages show it: the password hidden (and a SQLite path as
    it is on disk)."""
    return backend_named(url.get_backend_name()).shown_url(url)


_AnyEngine = TypeVar("_AnyEngine", Engine, AsyncEngine)


def for_writing(engine: _AnyEngine) -> _AnyEngine:
    """The same engine (and pool) set up for transactions that write: on SQLite
    they begin ``IMMEDIATE``, so a writer waits for the write lock up front
    instead of failing with "database is locked" when another writer committed
    after its first read. PostgreSQL needs nothing."""
    return cast(_AnyEngine, backend_of(engine).for_writing(engine))


#: Engines made here and still in use: a forked process gives each a new pool.
_ENGINES: weakref.WeakSet[Engine] = weakref.WeakSet()
_FORK_HOOK = threading.Lock()
_fork_hook_registered = False


def _new_pool_after_fork(engine: Engine) -> None:
    """Give a process forked from this one (``gunicorn --preload``, a
    ``multiprocessing`` or Celery worker) an empty pool of its own: two
    processes on one pooled connection corrupt each other's results ("server
    sent data without prior row description", or another query's rows). The
    parent's connections are left to the parent (psycopg closes a connection
    only in the process that opened it). One hook, registered with the first
    engine, serves every engine, held weakly, so that engines made and dropped
    again and again cost nothing."""
    global _fork_hook_registered
    with _FORK_HOOK:
        if not _fork_hook_registered and hasattr(os, "register_at_fork"):
            os.register_at_fork(after_in_child=_new_pools_in_the_child)
            _fork_hook_registered = True
    _ENGINES.add(engine)


def _new_pools_in_the_child() -> None:
    for engine in list(_ENGINES):
        engine.dispose(close=False)
