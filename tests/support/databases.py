"""Databases for the tests: a new, empty one of either kind for each use.

PostgreSQL comes from ``$CHATARCHIVE_TEST_DATABASE_URL`` (any database on the
server; the tests create and drop their own, with names no other test or
worker uses). Without a reachable server the PostgreSQL tests are skipped with
the reason shown, except when ``$CI`` is set, where that is an error.

A Citus cluster comes from ``$CHATARCHIVE_TEST_CITUS_URL`` (its coordinator)
and ``$CHATARCHIVE_TEST_CITUS_WORKERS`` (``host:port`` of each worker, as the
coordinator reaches them); by default those that ``start-cluster.sh`` of
Citus' bundle starts on this machine. Without one, the Citus tests are
skipped with the reason shown (an error under ``$CI``, which starts it).
"""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import URL, make_url

from chatarchive import ChatArchive, database_url

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
    of PostgreSQL's CREATE DATABASE). ``dialect`` ``citus``: one on the Citus
    cluster, see ``citus_database``."""
    if dialect == "sqlite":
        yield make_url(f"sqlite:///{directory / f'archive-{uuid.uuid4().hex[:8]}.db'}")
        return
    if dialect == "citus":
        with citus_database() as url:
            yield url
        return
    server = require_postgresql()
    name = f"chatarchive_test_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(libpq(server), autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" {pg_options}')
    try:
        yield server.set(database=name)
    finally:
        drop_database(server, name)


DEFAULT_CITUS_URL = "postgresql://postgres@127.0.0.1:5433/postgres"
DEFAULT_CITUS_WORKERS = "localhost:5434 localhost:5435"
_citus_problem: str | None = None
_citus_checked = False


def require_citus() -> tuple[URL, list[tuple[str, int]]]:
    """The coordinator's URL and the workers, or skip (fail under CI) when the cluster does not answer."""
    global _citus_problem, _citus_checked
    url = database_url(os.environ.get("CHATARCHIVE_TEST_CITUS_URL") or DEFAULT_CITUS_URL)
    workers = []
    for node in (os.environ.get("CHATARCHIVE_TEST_CITUS_WORKERS") or DEFAULT_CITUS_WORKERS).split():
        host, _, port = node.rpartition(":")
        workers.append((host, int(port)))
    if not _citus_checked:
        _citus_checked = True
        try:
            with psycopg.connect(libpq(url), connect_timeout=5) as connection:
                found = connection.execute(
                    "SELECT 1 FROM pg_available_extensions WHERE name = 'citus'"
                ).fetchone()
            if found is None:
                _citus_problem = f"the server at {url.render_as_string()} has no citus extension"
        except psycopg.Error as exc:
            _citus_problem = f"no Citus coordinator at {url.render_as_string()}: {exc}".strip()
    if _citus_problem is not None:
        if os.environ.get("CI"):
            pytest.fail(f"{_citus_problem} (CI is set: .ci/run starts a cluster)", pytrace=False)
        pytest.skip(f"{_citus_problem}; start one with start-cluster.sh of Citus' bundle")
    return url, workers


@contextmanager
def citus_database() -> Iterator[URL]:
    """A new database on a Citus cluster's coordinator and workers, with the
    extension on each and the workers registered; dropped afterwards."""
    coordinator, workers = require_citus()
    name = f"chatarchive_test_{uuid.uuid4().hex[:12]}"
    nodes = [coordinator, *(coordinator.set(host=host, port=port) for host, port in workers)]
    # One at a time across the test processes: registering the workers copies
    # the roles to them, and two at once collide ("tuple concurrently updated").
    with psycopg.connect(libpq(coordinator), autocommit=True) as turn:
        turn.execute("SELECT pg_advisory_lock(hashtext('chatarchive tests: new Citus database'))")
        for node in nodes:
            with psycopg.connect(libpq(node), autocommit=True) as admin:
                admin.execute(f'CREATE DATABASE "{name}"')
            with psycopg.connect(libpq(node.set(database=name)), autocommit=True) as connection:
                connection.execute("CREATE EXTENSION citus")
        with psycopg.connect(libpq(coordinator.set(database=name)), autocommit=True) as connection:
            connection.execute(
                "SELECT citus_set_coordinator_host(%s, %s)", (coordinator.host, coordinator.port)
            )
            for host, port in workers:
                connection.execute("SELECT citus_add_node(%s, %s)", (host, port))
    try:
        yield coordinator.set(database=name)
    finally:
        for node in nodes:
            drop_database(node, name)


#: How often a drop is tried while another session still uses the database.
_DROP_ATTEMPTS = 10


def drop_database(server: URL, name: str) -> None:
    """Drop database ``name`` of ``server``, ending its sessions. Tried again
    while a session still holds it: ``WITH (FORCE)`` ends the sessions it
    finds, but on Citus a backend it ends can start the database's
    maintenance daemon again meanwhile (citusdata/citus#4897), and the drop
    then fails with "being accessed by other users"."""
    for attempt in range(_DROP_ATTEMPTS):
        try:
            with psycopg.connect(libpq(server), autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            return
        except psycopg.errors.ObjectInUse:
            if attempt == _DROP_ATTEMPTS - 1:
                raise
            time.sleep(0.5)


#: Shards per table of the tests' distributed archives: few, so that
#: distributing is quick, and more than the workers, so that chats spread.
TEST_SHARDS = 4


@contextmanager
def archive_database(kind: str, directory: Path) -> Iterator[URL]:
    """A new database of ``kind`` (``sqlite``, ``postgresql``, ``citus``)
    migrated to the newest revision; on Citus, distributed."""
    with throwaway_database(kind, directory) as url:
        with ChatArchive(url) as archive:
            archive.upgrade()
            if kind == "citus":
                archive.distribute(shard_count=TEST_SHARDS)
        yield url


def as_user(raw: psycopg.Connection[Any], user_id: str) -> None:
    """Tell row-level security who the raw connection's transaction is for:
    ``SET LOCAL``, which a Citus coordinator carries to the workers once told
    to (``set_config`` reaches the coordinator alone, whose shell tables hold
    no rows), as chatarchive's own connections do."""
    if raw.execute("SELECT current_setting('citus.propagate_set_commands', true)").fetchone() != (None,):
        raw.execute("SET citus.propagate_set_commands TO 'local'")
    raw.execute(f"SET LOCAL chatarchive.user_id TO '{user_id}'")
