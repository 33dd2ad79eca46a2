"""The databases an archive can live in, one backend each: PostgreSQL and SQLite.

``backend_of`` is the one place that asks which database a connection,
session or engine is on; everything that differs between the two is a method
of the backend it returns (see ``_backends.base.Backend``).
Driver errors are translated into chatarchive's own here too
(``database_errors``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import URL, Connection, Engine
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine
from sqlalchemy.orm import Session

from chatarchive._exceptions import ChatArchiveError, DatabaseError, InvalidArgument
from chatarchive._types import register_column_rules

from .base import Backend, BulkLoad, Executor, RowWriter
from .postgresql import PostgreSQL
from .sqlite import SQLite

__all__ = [
    "BACKENDS",
    "Backend",
    "BulkLoad",
    "Executor",
    "RowWriter",
    "backend_named",
    "backend_of",
    "backend_of_url",
    "database_errors",
]

#: Every backend, by SQLAlchemy's name for its database.
BACKENDS: dict[str, Backend] = {backend.name: backend for backend in (PostgreSQL(), SQLite())}
for _name, _backend in BACKENDS.items():
    register_column_rules(_name, _backend)


def backend_named(name: str) -> Backend:
    """The backend of the database SQLAlchemy calls ``name``.

    Raises:
        InvalidArgument: for a database chatarchive does not keep archives in.
    """
    backend = BACKENDS.get(name)
    if backend is None:
        titles = " or ".join(known.title for known in BACKENDS.values())
        raise InvalidArgument(f"chatarchive keeps archives in {titles}, not {name!r}", argument="url")
    return backend


def backend_of_url(url: URL) -> Backend:
    """The backend of the database ``url`` names (``postgres://`` is PostgreSQL too)."""
    name = url.get_backend_name()
    return backend_named("postgresql" if name == "postgres" else name)


def backend_of(bind: Engine | AsyncEngine | Connection | AsyncConnection | Session | Dialect) -> Backend:
    """The backend of the database ``bind`` is on."""
    if isinstance(bind, Session):
        bind = bind.get_bind()
    dialect = bind if isinstance(bind, Dialect) else bind.dialect
    return backend_named(dialect.name)


@contextmanager
def database_errors() -> Iterator[None]:
    """Translate database driver errors raised inside the block into chatarchive's."""
    try:
        yield
    except sa_exc.SQLAlchemyError as exc:  # the driver's own errors arrive wrapped (driver_call)
        if (interruption := _interruption(exc)) is not None:
            raise interruption from exc
        if isinstance(exc, sa_exc.DBAPIError):
            raise _translated(exc.orig, lost=exc.connection_invalidated) from exc
        raise DatabaseError(f"database error: {exc}") from exc


def _interruption(error: BaseException) -> BaseException | None:
    """The Ctrl-C (or asyncio cancellation) that ``error`` was raised while
    handling, if any. Cut short mid-command, a connection refuses the rollback
    that follows ("another command is already in progress"): the interruption
    is what happened, and what the caller must see."""
    cause = error.__context__
    while cause is not None:
        if isinstance(cause, (KeyboardInterrupt, asyncio.CancelledError)):
            return cause
        cause = cause.__context__
    return None


def _translated(orig: BaseException | None, *, lost: bool) -> ChatArchiveError:
    if orig is not None:
        for backend in BACKENDS.values():
            if (translated := backend.translate(orig)) is not None:
                return translated
    summary = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    what = "database connection lost" if lost else "database error"
    sqlstate = getattr(orig, "sqlstate", None)
    code = f" [{sqlstate}]" if isinstance(sqlstate, str) else ""
    errorname = getattr(orig, "sqlite_errorname", None)
    lasting = (isinstance(sqlstate, str) and sqlstate.startswith(_LASTING_STATES)) or (
        isinstance(errorname, str) and errorname.startswith(_LASTING_SQLITE_ERRORS)
    )
    return DatabaseError(f"{what}{code}: {summary}", lasting=lasting)


#: What no retry mends: insufficient resources (a full disk, out of memory or
#: connections, 53), a read-only transaction (25006), no privilege (42501).
_LASTING_STATES = ("53", "25006", "42501")
_LASTING_SQLITE_ERRORS = ("SQLITE_FULL", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_PERM", "SQLITE_IOERR")
