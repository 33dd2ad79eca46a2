"""Fixtures: every database test runs on SQLite and on a real PostgreSQL server.

PostgreSQL comes from ``$CHATARCHIVE_TEST_DATABASE_URL`` (any database on the
server; the tests create and drop their own). Without a reachable server the
PostgreSQL tests are skipped with the reason shown, except when ``$CI`` is set,
where that is an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path
from typing import Any, cast

import pytest
from sqlalchemy import URL, Engine, delete
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession, AsyncTransaction
from sqlalchemy.orm import Session

from chatarchive import (
    AsyncChatRepository,
    ChatArchive,
    ChatRepository,
    create_async_engine,
    create_engine,
)
from chatarchive._schema import metadata
from tests.support.async_shim import RepositoryShim, SessionShim
from tests.support.commands import Run, invoke, spawn
from tests.support.databases import throwaway_database

DIALECTS = ("sqlite", "postgresql")


@pytest.fixture(scope="session", params=DIALECTS)
def dialect(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(scope="session")
def migrated_url(dialect: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[URL]:
    """A database of the current dialect, migrated to head, shared by the session."""
    with throwaway_database(dialect, tmp_path_factory.mktemp(dialect)) as url:
        with ChatArchive(url) as archive:
            archive.upgrade()
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
            for table in reversed(metadata.sorted_tables):
                connection.execute(delete(table))


@pytest.fixture
def empty_database(dialect: str, tmp_path: Path) -> Iterator[URL]:
    """A new database with no tables, for migration and CLI tests."""
    with throwaway_database(dialect, tmp_path) as url:
        yield url


@pytest.fixture
def pg_archive(tmp_path: Path) -> Iterator[tuple[ChatArchive, str]]:
    """An archive on its own new PostgreSQL database, and that database's URL."""
    with throwaway_database("postgresql", tmp_path) as url:
        archive = ChatArchive(url)
        archive.upgrade()
        yield archive, url.render_as_string(hide_password=False)
        archive.close()


@pytest.fixture
def own_archive(dialect: str, tmp_path: Path) -> Iterator[tuple[ChatArchive, str]]:
    """An archive on its own new database of each dialect (a SQLite file that
    other processes can open), and that database's URL."""
    with throwaway_database(dialect, tmp_path) as url:
        archive = ChatArchive(url)
        archive.upgrade()
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
