"""Databases for the tests: a new, empty one of either kind for each use.

PostgreSQL comes from ``$CHATARCHIVE_TEST_DATABASE_URL`` (any database on the
server; the tests create and drop their own, with names no other test or
worker uses). Without a reachable server the PostgreSQL tests are skipped with
the reason shown, except when ``$CI`` is set, where that is an error.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psycopg
import pytest
from sqlalchemy import URL, make_url

from chatarchive import (
    database_url,
)

DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/postgres"


def pg_server_url() -> URL:
    return database_url(os.environ.get("CHATARCHIVE_TEST_DATABASE_URL") or DEFAULT_PG_URL)


def libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


_pg_problem: str | None = None


_pg_checked = False


def require_postgresql() -> URL:
    """The server URL, or skip (fail under CI) when no server answers."""
    global _pg_problem, _pg_checked
    url = pg_server_url()
    if not _pg_checked:
        _pg_checked = True
        try:
            psycopg.connect(libpq(url), connect_timeout=5).close()
        except psycopg.Error as exc:
            _pg_problem = f"PostgreSQL at {url.render_as_string()} is not reachable: {exc}".strip()
    if _pg_problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{_pg_problem} (CI is set: PostgreSQL tests may not be skipped)", pytrace=False)
        pytest.skip(_pg_problem)
    return url


@contextmanager
def throwaway_database(dialect: str, directory: Path, pg_options: str = "") -> Iterator[URL]:
    """A new, empty database that is dropped afterwards (``pg_options``: more
    of PostgreSQL's CREATE DATABASE)."""
    if dialect == "sqlite":
        yield make_url(f"sqlite:///{directory / f'archive-{uuid.uuid4().hex[:8]}.db'}")
        return
    server = require_postgresql()
    name = f"chatarchive_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq(server), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" {pg_options}')
    try:
        yield server.set(database=name)
    finally:
        with psycopg.connect(libpq(server), autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
