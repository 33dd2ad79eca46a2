"""Where the archive lives: the database URL and a correctly set-up engine."""

from __future__ import annotations

import os
from typing import Any

import sqlalchemy
from sqlalchemy import URL, Engine, event, make_url

__all__ = ["DEFAULT_URL", "URL_ENV", "create_engine", "database_url"]

#: Environment variable that names the archive's database.
URL_ENV = "CHATARCHIVE_DATABASE_URL"
#: The embedded default: a SQLite file in the working directory.
DEFAULT_URL = "sqlite:///chatarchive.db"


def database_url(url: str | URL | None = None) -> URL:
    """The URL to use: ``url``, else ``$CHATARCHIVE_DATABASE_URL``, else the SQLite default.

    ``postgresql://`` and ``postgres://`` URLs are given the psycopg 3 driver.
    """
    if url is None:
        url = os.environ.get(URL_ENV) or DEFAULT_URL
    parsed = make_url(url)
    if parsed.drivername in ("postgresql", "postgres"):
        parsed = parsed.set(drivername="postgresql+psycopg")
    return parsed


def create_engine(url: str | URL | None = None, **options: Any) -> Engine:
    """An engine for the archive's database, set up for chatarchive's needs.

    PostgreSQL connections are checked before use (``pool_pre_ping``), so the
    pool recovers after a server restart. SQLite connections enforce foreign
    keys, wait for locks, use WAL on files, and let SQLAlchemy (not the driver)
    begin transactions so that savepoints work.
    """
    parsed = database_url(url)
    if parsed.get_backend_name() == "postgresql":
        options.setdefault("pool_pre_ping", True)
        return sqlalchemy.create_engine(parsed, **options)
    engine = sqlalchemy.create_engine(parsed, **options)
    if parsed.get_backend_name() == "sqlite":
        _set_up_sqlite(engine, in_memory=parsed.database in (None, "", ":memory:"))
    return engine


def _set_up_sqlite(engine: Engine, *, in_memory: bool) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Driver-level transactions off: SQLAlchemy emits BEGIN itself (below).
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA foreign_keys = ON")
        cursor.execute("PRAGMA busy_timeout = 30000")
        if not in_memory:
            cursor.execute("PRAGMA journal_mode = WAL")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        connection.exec_driver_sql("BEGIN")
