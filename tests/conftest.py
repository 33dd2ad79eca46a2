"""Fixtures: every database test runs on SQLite, on a real PostgreSQL server
and on an archive distributed over a real Citus cluster.

PostgreSQL comes from ``$CHATARCHIVE_TEST_DATABASE_URL`` (any database on the
server; the tests create and drop their own), Citus from
``$CHATARCHIVE_TEST_CITUS_URL`` (see ``tests/support/databases.py``). Without
a reachable server the tests of that kind are skipped with the reason shown,
except when ``$CI`` is set, where that is an error. On Citus the archives are
distributed (in few shards, which routes and fans out like many) and the
``dialect`` is ``postgresql``: the same expectations hold.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, cast

import psycopg
import pytest
from sqlalchemy import URL, Engine
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, AsyncTransaction
from sqlalchemy.orm import Session

from chatarchive import (
    AsyncChatRepository,
    ChatArchive,
    ChatRepository,
    create_async_engine,
    create_engine,
)
from tests.support.async_shim import RepositoryShim, SessionShim
from tests.support.chats import empty_archive
from tests.support.commands import Run, invoke, spawn
from tests.support.databases import archive_database, throwaway_database

#: The databases the suite runs on; ``$CHATARCHIVE_TEST_DATABASES`` (a comma-separated list) narrows them.
KINDS = tuple(
    kind.strip()
    for kind in (os.environ.get("CHATARCHIVE_TEST_DATABASES") or "sqlite,postgresql,citus").split(",")
    if kind.strip()
)


@pytest.fixture(scope="session", params=KINDS)
def database_kind(request: pytest.FixtureRequest) -> str:
    """Which database the test runs on: SQLite, PostgreSQL, or a distributed archive on Citus."""
    return str(request.param)


@pytest.fixture(scope="session")
def dialect(database_kind: str) -> str:
    return "sqlite" if database_kind == "sqlite" else "postgresql"


@pytest.fixture(scope="session")
def migrated_url(database_kind: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[URL]:
    """A database of the current kind, migrated to head (and distributed on
    Citus), shared by the session."""
    with archive_database(database_kind, tmp_path_factory.mktemp(database_kind)) as url:
        yield url


@pytest.fixture(scope="session")
def engine(migrated_url: URL) -> Iterator[Engine]:
    engine = create_engine(migrated_url)
    yield engine
    engine.dispose()


@pytest.fixture(scope="session")
def runner() -> Iterator[asyncio.Runner]:
    """One event loop for all the asyncio work of the session."""
    with asyncio.Runner() as runner:
        yield runner


@pytest.fixture(scope="session")
def async_engine(migrated_url: URL, runner: asyncio.Runner) -> Iterator[AsyncEngine]:
    engine = create_async_engine(migrated_url)
    yield engine
    runner.run(engine.dispose())


@pytest.fixture(params=["sync", "async"])
def api(request: pytest.FixtureRequest) -> str:
    """Which API the repository tests drive: every one runs on both."""
    return str(request.param)


@pytest.fixture
def session(engine: Engine, api: str, request: pytest.FixtureRequest) -> Iterator[Any]:
    """A session inside a transaction that is rolled back after the test (for
    the async API, an AsyncSession behind a synchronous shim)."""
    if api == "async":
        yield from _async_session(request.getfixturevalue("async_engine"), request.getfixturevalue("runner"))
        return
    with engine.connect() as connection:
        transaction = connection.begin()
        session = Session(bind=connection, join_transaction_mode="create_savepoint")
        try:
            yield session
        finally:
            session.close()
            transaction.rollback()


def _async_session(engine: AsyncEngine, runner: asyncio.Runner) -> Iterator[SessionShim]:
    async def connect() -> AsyncConnection:
        return await engine.connect()

    async def begin(connection: AsyncConnection) -> AsyncTransaction:
        return await connection.begin()

    connection = runner.run(connect())
    transaction = runner.run(begin(connection))
    session = AsyncSession(bind=connection, join_transaction_mode="create_savepoint")
    try:
        yield SessionShim(session, runner)
    finally:
        runner.run(session.close())
        runner.run(transaction.rollback())
        runner.run(connection.close())


@pytest.fixture
def make_repo(session: Any) -> Callable[..., Any]:
    """A repository on the test's session, with options (user_id=...), for either API."""

    def make(**options: Any) -> Any:
        if isinstance(session, SessionShim):
            return RepositoryShim(AsyncChatRepository(session.async_session, **options), session)
        return ChatRepository(session, **options)

    return make


@pytest.fixture
def repo(make_repo: Callable[..., Any]) -> ChatRepository:
    return cast(ChatRepository, make_repo())


@pytest.fixture
def archive(engine: Engine) -> Iterator[ChatArchive]:
    """A facade on the shared database; every table is emptied afterwards."""
    archive = ChatArchive(engine=engine)
    try:
        yield archive
    finally:
        with engine.begin() as connection:
            empty_archive(connection)


@pytest.fixture
def empty_database(database_kind: str, tmp_path: Path) -> Iterator[URL]:
    """A new database with no tables, for migration and CLI tests (on Citus,
    with the extension and the workers, nothing distributed yet)."""
    with throwaway_database(database_kind, tmp_path) as url:
        yield url


@pytest.fixture(params=[kind for kind in KINDS if kind != "sqlite"])
def server_archive(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[tuple[ChatArchive, str]]:
    """An archive on its own new database, on one PostgreSQL server and
    distributed over Citus, and that database's URL: for what SQLite, one
    writer at a time, does not have (row locks held side by side, row-level
    security)."""
    with archive_database(request.param, tmp_path) as url:
        archive = ChatArchive(url)
        yield archive, url.render_as_string(hide_password=False)
        archive.close()


@pytest.fixture
def app_role(server_archive: tuple[ChatArchive, str]) -> Iterator[str]:
    """An ordinary role (superusers bypass row-level security) with the access an app needs."""
    _, url = server_archive
    role = f"chatarchive_app_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        admin.execute(f"GRANT USAGE ON SCHEMA public TO {role}")
        admin.execute(f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA public TO {role}")
    try:
        yield role
    finally:
        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as admin:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")


@pytest.fixture
def pg_archive(tmp_path: Path) -> Iterator[tuple[ChatArchive, str]]:
    """An archive on its own new PostgreSQL database, and that database's URL."""
    with throwaway_database("postgresql", tmp_path) as url:
        archive = ChatArchive(url)
        archive.upgrade()
        yield archive, url.render_as_string(hide_password=False)
        archive.close()


@pytest.fixture
def own_archive(database_kind: str, tmp_path: Path) -> Iterator[tuple[ChatArchive, str]]:
    """An archive on its own new database of each kind (a SQLite file that
    other processes can open), and that database's URL."""
    with archive_database(database_kind, tmp_path) as url:
        archive = ChatArchive(url)
        yield archive, url.render_as_string(hide_password=False)
        archive.close()


@pytest.fixture
def run(empty_database: URL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Run:
    """The command, in this process, on a new empty database."""
    monkeypatch.chdir(tmp_path)
    return partial(invoke, empty_database.render_as_string(hide_password=False))


@pytest.fixture
def run_process(empty_database: URL, tmp_path: Path) -> Run:
    """The command, in a process of its own, on a new empty database: for what
    only a real process shows (signals, pipes, the locale's encoding)."""
    return partial(spawn, empty_database.render_as_string(hide_password=False), cwd=tmp_path)
