"""ChatArchive: one transaction per call, transaction(), configuration."""

from __future__ import annotations

import asyncio
import gc
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from click.testing import CliRunner
from sqlalchemy import URL, Engine, event, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session

from chatarchive import (
    DEFAULT_URL,
    AsyncChatArchive,
    AsyncChatRepository,
    ChatArchive,
    ChatArchiveError,
    ChatDocument,
    ChatFilter,
    ChatNotFound,
    ConflictError,
    DatabaseError,
    InvalidArgument,
    InvalidDocument,
    SchemaNotReady,
    create_async_engine,
    create_engine,
    database_url,
    for_writing,
)
from chatarchive._schema import SCHEMA_REVISION
from chatarchive.cli import main
from tests.support.databases import throwaway_database


def chat(chat_id: str, text: str = "hi", **fields: object) -> ChatDocument:
    return ChatDocument.from_openai([{"role": "user", "content": text}], chat_id=chat_id, **fields)


def test_every_call_commits_on_its_own(archive: ChatArchive) -> None:
    assert archive.save(chat("a", user_id="u")) == 1
    other = ChatArchive(engine=archive.engine)  # a second facade sees committed data
    assert other.get("a").to_openai() == [{"role": "user", "content": "hi"}]
    archive.append("a", [{"role": "assistant", "content": "hello"}])
    archive.add_feedback("a", {"score": 1})
    assert archive.update("a", title="T") == 4
    assert [c.chat_id for c in archive.list_chats().items] == ["a"]
    assert [d.chat_id for d in archive.get_many(["a", "b"])] == ["a"]
    assert [d.chat_id for d in archive.export(batch_size=1)] == ["a"]
    assert archive.delete_user("u") == 1
    with pytest.raises(ChatNotFound):
        other.get("a")


def test_transaction_commits_together_or_not_at_all(archive: ChatArchive) -> None:
    with archive.transaction() as repo:
        repo.save(chat("a"))
        repo.save(chat("b"))
    assert len(archive.get_many(["a", "b"])) == 2

    def failing_unit_of_work() -> None:
        with archive.transaction() as repo:
            repo.save(chat("c"))
            repo.delete("a")
            raise RuntimeError("application failure")

    with pytest.raises(RuntimeError):
        failing_unit_of_work()
    assert [d.chat_id for d in archive.get_many(["a", "b", "c"])] == ["a", "b"]


def test_a_write_through_the_archive_inside_its_own_transaction_is_refused_at_once(
    archive: ChatArchive, migrated_url: URL, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    # It opened a second transaction that waited for the first: on SQLite 30 s
    # for the write lock, then "database is locked"; on PostgreSQL, a write to
    # a chat the block had written waited for ever (here: for the timeout).
    del archive  # it empties the tables afterwards; this test's archive times its statements out
    archive = ChatArchive(migrated_url, statement_timeout=10)
    archive.save(chat("a"))
    nested = "inside a transaction\\(\\) of this archive"
    bob = archive.for_user("bob")

    def inside(write: Callable[[], object]) -> None:
        with archive.transaction() as repo:
            repo.append("a", [{"role": "user", "content": "inside"}])
            assert archive.get("a").chat_id == "a"  # reads go on, outside the block's transaction
            write()

    for write in (
        lambda: archive.append("a", [{"role": "user", "content": "again"}]),
        lambda: archive.save(chat("b")),
        lambda: archive.save_many([chat("b")]),
        lambda: archive.delete("a"),
        lambda: bob.save(chat("b")),
        lambda: archive.transaction().__enter__(),
    ):
        with pytest.raises(ChatArchiveError, match=nested):
            inside(write)
    assert len(archive.get("a").messages) == len(chat("a").messages)  # each block rolled back
    with archive.transaction() as repo:
        repo.save(chat("b"))
    archive.append("b", [{"role": "user", "content": "after the block"}])  # the block is over
    # Other threads are other callers: they wait their turn as before.
    with archive.transaction() as repo:
        repo.save(chat("c"))
        other = threading.Thread(target=lambda: archive.append("a", [{"role": "user", "content": "t"}]))
        other.start()
    other.join()
    assert archive.get("a").messages[-1].content == "t"

    async_archive = AsyncChatArchive(engine=async_engine)

    async def nested_async() -> None:
        async with async_archive.transaction() as repo:
            await repo.append("a", [{"role": "user", "content": "inside"}])
            assert (await async_archive.get("a")).chat_id == "a"
            await async_archive.append("a", [{"role": "user", "content": "again"}])

    with pytest.raises(ChatArchiveError, match=nested):
        runner.run(nested_async())
    assert archive.get("a").messages[-1].content == "t"
    archive.close()


def test_threads_sharing_one_transaction_take_turns(archive: ChatArchive) -> None:
    # Threads calling one transaction's repository at once broke its session:
    # DatabaseError "Method 'close()' can't be called here; ... already in progress".
    with archive.transaction() as repo, ThreadPoolExecutor(4) as pool:
        versions = list(pool.map(lambda i: repo.save(chat(f"t{i}")), range(40)))
        list(pool.map(lambda i: repo.append(f"t{i}", [{"role": "user", "content": "more"}]), range(40)))
    assert versions == [1] * 40
    assert [len(doc.messages) for doc in archive.get_many([f"t{i}" for i in range(40)])] == [2] * 40


def test_calls_gathered_on_one_async_transaction_take_turns(
    archive: ChatArchive, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    # asyncio.gather of calls on one transaction's repository failed with
    # SQLAlchemy's "Method 'close()' can't be called here; ... already in progress".
    async_archive = AsyncChatArchive(engine=async_engine)

    async def gathered() -> list[int]:
        async with async_archive.transaction() as repo:
            versions = await asyncio.gather(*(repo.save(chat(f"g{i}")) for i in range(8)))
            await asyncio.gather(
                *(repo.append(f"g{i}", [{"role": "user", "content": "more"}]) for i in range(8))
            )
            return list(versions)

    assert runner.run(gathered()) == [1] * 8
    assert [len(archive.get(f"g{i}").messages) for i in range(8)] == [2] * 8

    async def one_fails() -> None:
        async with async_archive.transaction() as repo:
            await asyncio.gather(repo.save(chat("h1")), repo.save({"chat_id": ""}), repo.save(chat("h2")))

    with pytest.raises(InvalidDocument):
        runner.run(one_fails())
    assert archive.get_many(["h1", "h2"]) == []  # the block rolled back


def test_a_repository_used_after_its_transaction_refuses(
    archive: ChatArchive, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    # Its session began a new transaction that nothing committed: the save
    # returned a version, and the chat was silently never stored.
    with archive.transaction() as repo:
        repo.save(chat("a"))
    async_archive = AsyncChatArchive(engine=async_engine)

    async def used_after() -> AsyncChatRepository:
        async with async_archive.transaction() as async_repo:
            await async_repo.save(chat("b"))
        return async_repo

    async_repo = runner.run(used_after())
    late: list[Callable[[], object]] = [
        lambda: repo.save(chat("late")),
        lambda: repo.get("a"),
        lambda: list(repo.export()),
        lambda: runner.run(async_repo.save(chat("late"))),
        lambda: runner.run(async_repo.get("b")),
    ]
    for call in late:
        with pytest.raises(ChatArchiveError, match="transaction has ended"):
            call()
    assert [d.chat_id for d in archive.get_many(["a", "b", "late"])] == ["a", "b"]


def test_a_failed_call_inside_a_transaction_leaves_the_rest(archive: ChatArchive) -> None:
    with archive.transaction() as repo:
        repo.save(chat("a"))
        with pytest.raises(ConflictError):
            repo.save(chat("a", "again"), expected_version=0)
        with pytest.raises(InvalidDocument):
            repo.append("a", [{"role": 1}])
        repo.append("a", [{"role": "assistant", "content": "still fine"}])
    assert [m.content for m in archive.get("a").messages] == ["hi", "still fine"]


def test_export_streams_in_batches(
    archive: ChatArchive, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    for index in range(7):
        archive.save(
            chat(
                f"c{index}",
                user_id="x" if index % 2 else "y",
                model="m3" if index % 3 == 0 else None,
                tags=["t"] if index > 2 else [],
            )
        )
    assert [d.chat_id for d in archive.export(batch_size=3)] == [f"c{i}" for i in range(7)]
    assert [d.chat_id for d in archive.export(ChatFilter(user_id="x"), batch_size=2)] == ["c1", "c3", "c5"]
    assert [d.chat_id for d in archive.export(ChatFilter(model="m3", tag="t"), batch_size=1)] == ["c3", "c6"]

    async def filtered_async() -> tuple[list[str], list[str]]:
        async_archive = AsyncChatArchive(engine=async_engine)
        outside = [
            doc.chat_id
            async for doc in async_archive.export(ChatFilter(model="m3", user_id="y"), batch_size=1)
        ]
        async with async_archive.transaction() as async_repository:
            inside = [doc.chat_id async for doc in async_repository.export(ChatFilter(tag="t", user_id="x"))]
        return outside, inside

    assert runner.run(filtered_async()) == (["c0", "c6"], ["c3", "c5"])
    # Not an empty export, and refused at the call, before anything is iterated.
    with pytest.raises(InvalidArgument, match="batch_size must be at least 1"):
        archive.export(batch_size=0)
    with (
        archive.transaction() as repository,
        pytest.raises(InvalidArgument, match="where must be a ChatFilter"),
    ):
        repository.export(where="m3")  # type: ignore[arg-type]

    async def export_async(in_transaction: bool) -> None:
        async_archive = AsyncChatArchive(engine=async_engine)
        if not in_transaction:
            async_archive.export(batch_size=0)
            return
        async with async_archive.transaction() as async_repository:
            async_repository.export(batch_size=0)

    for in_transaction in (False, True):
        with pytest.raises(InvalidArgument, match="batch_size"):
            runner.run(export_async(in_transaction))


@contextmanager
def counting_commits(engine: Engine) -> Iterator[list[object]]:
    """The connections that committed on ``engine`` while the block ran."""
    commits: list[object] = []

    def count(connection: object) -> None:
        commits.append(connection)

    event.listen(engine, "commit", count)
    try:
        yield commits
    finally:
        event.remove(engine, "commit", count)


def test_id_and_filter_arguments_must_be_strings(archive: ChatArchive) -> None:
    # The archive's own read path (one statement on PostgreSQL) and the analytics
    # filters; the repository's calls are checked in test_repository.
    from chatarchive import analytics

    archive.save(chat("7", model="7"))
    for call in (lambda: archive.get(7), lambda: archive.get_many([7])):  # type: ignore[arg-type, list-item]
        with pytest.raises(InvalidArgument, match="chat_id must be a string, not int"):
            call()
    with pytest.raises(InvalidArgument, match="chat_ids must be a list of chat ids, not str"):
        archive.get_many("7")
    with pytest.raises(InvalidArgument, match="model must be a string, not int"):
        analytics.model_usage(archive, model=7)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="workflow must be a string, not int"):
        analytics.daily_usage(archive, workflow=7)  # type: ignore[arg-type]
    assert [row.model for row in analytics.model_usage(archive, model="7")] == ["7"]


def test_yes_no_and_revision_arguments_of_the_wrong_kind_are_refused(
    archive: ChatArchive, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    # set_search_index("no") built the index (a truthy string), 0 dropped it;
    # bulk="no" on the archive ran a bulk load; upgrade(5) raised TypeError.
    async_archive = AsyncChatArchive(engine=async_engine)
    calls: dict[str, list[Callable[[Any], object]]] = {
        "enabled": [
            lambda bad: archive.set_search_index(bad),
            lambda bad: runner.run(async_archive.set_search_index(bad)),
        ],
        "bulk": [
            lambda bad: archive.save_many([chat("x")], bulk=bad),
            lambda bad: runner.run(async_archive.save_many([chat("x")], bulk=bad)),
        ],
    }
    if archive.engine.dialect.name == "postgresql":
        calls["enabled"] += [
            lambda bad: archive.set_row_level_security(bad),
            lambda bad: runner.run(async_archive.set_row_level_security(bad)),
        ]
    for field, each in calls.items():
        for call in each:
            for bad in ("no", 0, None):
                with pytest.raises(InvalidArgument, match=f"{field} must be True or False") as caught:
                    call(bad)
                assert caught.value.argument == field
    revision_calls: list[Callable[[Any], object]] = [
        lambda bad: archive.upgrade(bad),
        lambda bad: archive.downgrade(bad),
        lambda bad: runner.run(async_archive.upgrade(bad)),
    ]
    for revision_call in revision_calls:
        with pytest.raises(InvalidArgument, match="revision must be a string, not int") as caught:
            revision_call(5)
        assert caught.value.argument == "revision"
    assert archive.search_index() is True
    assert archive.row_level_security() is False
    assert archive.get_many(["x"]) == []
    assert archive.current_revision() == SCHEMA_REVISION


def test_a_retention_purge_commits_batch_by_batch(
    archive: ChatArchive, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    t0 = datetime(2026, 1, 1, tzinfo=UTC)
    old = [chat(f"old{n}", updated_at=t0 + timedelta(minutes=n)) for n in range(5)]
    archive.save_many([*old, chat("recent")])
    async_archive = AsyncChatArchive(engine=async_engine)

    def purge_sync(cutoff: datetime, batch_size: int) -> int:
        return archive.delete_older_than(cutoff, batch_size=batch_size)

    def purge_async(cutoff: datetime, batch_size: int) -> int:
        return runner.run(async_archive.delete_older_than(cutoff, batch_size=batch_size))

    def export_sync(since: datetime | None = None, until: datetime | None = None) -> list[str]:
        return [doc.chat_id for doc in archive.export(ChatFilter(since=since, until=until), batch_size=2)]

    def export_async(since: datetime | None = None, until: datetime | None = None) -> list[str]:
        async def ids() -> list[str]:
            return [
                doc.chat_id
                async for doc in async_archive.export(ChatFilter(since=since, until=until), batch_size=2)
            ]

        return runner.run(ids())

    for purge, export, engine in [
        (purge_sync, export_sync, archive.engine),
        (purge_async, export_async, async_engine.sync_engine),
    ]:
        archive.save_many(old)
        # What the purge will delete can be exported first (to cold storage, say).
        assert export(until=t0 + timedelta(days=1)) == [doc.chat_id for doc in old]
        assert export(since=t0 + timedelta(minutes=3), until=t0 + timedelta(days=1)) == ["old3", "old4"]
        assert export(since=t0 + timedelta(days=1)) == ["recent"]
        with counting_commits(engine) as commits:
            assert purge(t0 + timedelta(days=1), 2) == 5
        assert len(commits) == 4  # 2 + 2 + 1, and the one that found none
        assert [summary.chat_id for summary in archive.list_chats().items] == ["recent"]
        with pytest.raises(InvalidArgument, match="batch_size"):
            purge(t0, 0)


def test_database_url(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CHATARCHIVE_DATABASE_URL", raising=False)
    assert database_url().render_as_string() == DEFAULT_URL
    monkeypatch.setenv("CHATARCHIVE_DATABASE_URL", "postgresql://me@db.example/chats")
    assert database_url().drivername == "postgresql+psycopg"
    assert database_url("postgres://h/db").drivername == "postgresql+psycopg"
    assert database_url("sqlite:///x.db").drivername == "sqlite"


def testlibpq_parameters_in_the_url_reach_the_connection(pg_archive: tuple[ChatArchive, str]) -> None:
    _, url = pg_archive
    with ChatArchive(f"{url}?connect_timeout=7&application_name=chat-api") as archive:
        assert archive.count_chats() == 0
        with archive.engine.connect() as connection:
            name = connection.exec_driver_sql(
                "SELECT application_name FROM pg_stat_activity WHERE pid = pg_backend_pid()"
            ).scalar_one()
            info = connection.connection.driver_connection.info  # type: ignore[union-attr]
            assert (name, info.get_parameters()["connect_timeout"]) == ("chat-api", "7")


def test_an_archive_dropped_without_close_closes_its_connections(pg_archive: tuple[ChatArchive, str]) -> None:
    """Its connections are closed when it goes, not left to the garbage
    collector; a for_user view keeps the archive it came from (and its
    connections) alive."""
    _, url = pg_archive
    name = "dropped-archive"

    def backends(expected: int) -> int:
        """How many connections the archive has, once it is ``expected`` or after 5 s."""
        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as admin:
            for _ in range(100):  # a closed connection's backend takes a moment to go
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s", [name]
                ).fetchone()
                count = int(row[0]) if row else -1
                if count == expected:
                    break
                time.sleep(0.05)
            return count

    scoped = ChatArchive(f"{url}?application_name={name}").for_user("alice")
    gc.collect()
    assert scoped.count_chats() == 0  # its owner was dropped: the engine still works
    assert backends(1) == 1
    del scoped
    gc.collect()
    assert backends(0) == 0


def test_a_closed_archive_refuses_every_call(tmp_path: Path) -> None:
    """After close(), a call reopened the pool: an async archive's new
    connections were then left to the garbage collector, which warned of each."""
    url = f"sqlite:///{tmp_path / 'closed.db'}"
    archive = ChatArchive(url)
    archive.upgrade()
    archive.save(chat("kept"))
    scoped = archive.for_user("alice")
    archive.close()
    archive.close()  # again: nothing
    calls: list[Callable[[], object]] = [
        lambda: archive.get("kept"),
        lambda: archive.save(chat("new")),
        lambda: archive.save_many([chat("new")]),
        lambda: list(archive.export()),
        lambda: archive.upgrade(),
        lambda: archive.check(),
        lambda: archive.current_revision(),
        lambda: archive.search_index(),
        lambda: archive.transaction().__enter__(),
        lambda: archive.for_user("bob"),
        lambda: scoped.list_chats(),  # an archive of for_user goes with its owner
    ]
    for call in calls:
        with pytest.raises(ChatArchiveError, match=r"ChatArchive\('sqlite:///.*closed.db'.*is closed"):
            call()

    async def asynchronously() -> None:
        aarchive = AsyncChatArchive(url)
        ascoped = aarchive.for_user("alice")
        assert (await aarchive.get("kept")).chat_id == "kept"
        await aarchive.close()
        await aarchive.close()
        for acall in (
            lambda: aarchive.get("kept"),
            lambda: aarchive.save(chat("new")),
            lambda: aarchive.check(),
            lambda: aarchive.current_revision(),
            lambda: aarchive.upgrade(),
            lambda: ascoped.count_chats(),
        ):
            with pytest.raises(ChatArchiveError, match=r"AsyncChatArchive.* is closed"):
                await acall()
        with pytest.raises(ChatArchiveError, match="is closed"):
            aarchive.for_user("bob")

    asyncio.run(asynchronously())
    with ChatArchive(url) as reopened:  # a new archive on the same database goes on
        assert reopened.get("kept").chat_id == "kept"


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("not a url with a s3cret", "not a database URL"),
        ("mysql://me:s3cret@db.example/chats", "PostgreSQL or SQLite, not 'mysql'"),
        ("postgresql+nosuchdriver://me:s3cret@h/db", "cannot load the database driver 'nosuchdriver'"),
    ],
)
def test_unusable_urls_are_refused_clearly(url: str, reason: str) -> None:
    with pytest.raises(InvalidArgument, match=reason) as raised:
        ChatArchive(url)
    assert raised.value.argument == "url"
    assert "s3cret" not in str(raised.value)
    with pytest.raises(InvalidArgument, match=reason):
        create_async_engine(url)


def test_default_archive_lives_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHATARCHIVE_DATABASE_URL", raising=False)
    with ChatArchive() as archive:
        archive.upgrade()
        archive.save(chat("here"))
        assert archive.current_revision() is not None
        assert archive.check() == []
    assert (tmp_path / "chatarchive.db").exists()


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_archive_is_one_database_for_every_thread_and_task(url: str) -> None:
    """SQLAlchemy's defaults gave each thread a memory database of its own (a
    FastAPI TestClient's thread found no tables), and let concurrent tasks into
    one connection at once ("cannot start a transaction within a transaction")."""
    from concurrent.futures import ThreadPoolExecutor

    with ChatArchive(url) as archive:
        archive.upgrade()

        def write(number: int) -> int:
            archive.save(chat(f"t{number}"))
            archive.append(f"t{number}", [{"role": "assistant", "content": "ok"}])
            return len(archive.get(f"t{number}").messages)

        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(write, range(32))) == {2}
        assert len(archive.list_chats(limit=100).items) == 32

        # An archive call inside that archive's transaction block would wait for
        # the connection its own transaction holds: refused at once, rolled back.
        def nested() -> None:
            with archive.transaction() as repo:
                repo.save(chat("inside"))
                archive.get("t0")

        with pytest.raises(ChatArchiveError, match="one connection"):
            nested()
        with pytest.raises(ChatNotFound):
            archive.get("inside")

    async def tasks() -> tuple[int, int]:
        async with AsyncChatArchive(url) as aarchive:
            await aarchive.upgrade()
            await aarchive.save(chat("a"))
            appended = [aarchive.append("a", [{"role": "user", "content": "m"}]) for _ in range(20)]
            read = [aarchive.get("a") for _ in range(20)]
            await asyncio.gather(*appended, *read)  # raised DatabaseError

            async def nested() -> None:
                async with aarchive.transaction() as arepo:
                    await arepo.save(chat("inside"))
                    await aarchive.get("a")

            with pytest.raises(ChatArchiveError, match="one connection"):
                await nested()
            return len((await aarchive.get("a")).messages), len((await aarchive.list_chats()).items)

    assert asyncio.run(tasks()) == (21, 1)


def test_an_archive_on_a_sqlite_file_that_does_not_exist_does_not_create_it(tmp_path: Path) -> None:
    # Connecting creates the file: a read through a mistyped path left an empty
    # database behind and said it was "at revision none".
    path = tmp_path / "typo.db"
    refused = f"no archive at {path} (no such file): run 'chatarchive db upgrade' to create it"
    with ChatArchive(f"sqlite:///{path}") as archive:
        for call in (
            lambda: archive.get("x"),
            lambda: archive.list_chats(),
            lambda: archive.downgrade("base"),
        ):
            with pytest.raises(SchemaNotReady) as caught:
                call()
            assert str(caught.value) == refused
        assert archive.current_revision() is None
        assert archive.check() == [f"no archive at {path} (no such file)"]
        assert not path.exists()
        archive.upgrade()
        assert archive.current_revision() == SCHEMA_REVISION

    async def through_asyncio() -> tuple[str, str | None, list[str]]:
        async with AsyncChatArchive(f"sqlite+aiosqlite:///{tmp_path / 'async.db'}") as aarchive:
            with pytest.raises(SchemaNotReady) as caught:
                await aarchive.get("x")
            with pytest.raises(SchemaNotReady):
                await aarchive.downgrade("base")
            return str(caught.value), await aarchive.current_revision(), await aarchive.check()

    message, revision, problems = asyncio.run(through_asyncio())
    assert message == refused.replace("typo.db", "async.db")
    assert (revision, problems) == (None, [f"no archive at {tmp_path / 'async.db'} (no such file)"])
    assert not (tmp_path / "async.db").exists()
    # A file: URI says for itself whether to create the file (mode=rwc does).
    with ChatArchive(f"sqlite:///file:{tmp_path / 'uri.db'}?mode=rwc&uri=true") as archive:
        archive.upgrade()
        assert archive.current_revision() == SCHEMA_REVISION


def _upgrade_fails_on_both_apis(path: Path, named: str) -> None:
    """Upgrading a SQLite archive at ``path`` raises DatabaseError(``named``), sync and asyncio."""
    with ChatArchive(f"sqlite:///{path}") as archive, pytest.raises(DatabaseError) as caught:
        archive.upgrade()
    assert str(caught.value) == named

    async def through_asyncio() -> None:
        async with AsyncChatArchive(f"sqlite+aiosqlite:///{path}") as aarchive:
            await aarchive.upgrade()

    with pytest.raises(DatabaseError) as caught:
        asyncio.run(through_asyncio())
    assert str(caught.value) == named


def test_a_sqlite_archive_that_is_a_directory_names_it(tmp_path: Path) -> None:
    # SQLite said only "unable to open database file".
    _upgrade_fails_on_both_apis(tmp_path, f"cannot open the SQLite archive {tmp_path}: it is a directory")


def test_a_sqlite_archive_in_a_directory_that_does_not_exist_names_it(tmp_path: Path) -> None:
    # SQLite said only "unable to open database file".
    path = tmp_path / "no" / "such" / "archive.db"
    _upgrade_fails_on_both_apis(
        path, f"cannot open the SQLite archive {path}: there is no directory {path.parent}"
    )
    path.parent.mkdir(parents=True)
    with ChatArchive(f"sqlite:///{path}") as archive:
        archive.upgrade()
        assert archive.current_revision() == SCHEMA_REVISION


def test_a_file_that_is_not_a_sqlite_database_is_named(tmp_path: Path) -> None:
    # SQLite said only "file is not a database", whichever file it was.
    path = tmp_path / "notes.txt"
    path.write_text("some text, not a database: " * 10)
    named = f"cannot open the SQLite archive {path}: it is not an SQLite database file"
    _upgrade_fails_on_both_apis(path, f"{named} (or it is damaged, or encrypted)")
    with ChatArchive(f"sqlite:///{path}") as archive, pytest.raises(DatabaseError) as caught:
        archive.get("x")
    assert str(caught.value).startswith(named)
    assert path.read_text() == "some text, not a database: " * 10  # left as it was


def test_an_archive_shows_its_database_and_user_but_not_the_password() -> None:
    # Both archives showed only "<chatarchive._archive.ChatArchive object at 0x...>".
    url = "postgresql://reader:s3cret@db.example/chats"
    archive, aarchive = ChatArchive(url), AsyncChatArchive(url)
    shown = "'postgresql+psycopg://reader:***@db.example/chats'"
    assert repr(archive) == f"ChatArchive({shown})"
    assert repr(archive.for_user("bob")) == f"ChatArchive({shown}, user_id='bob')"
    assert repr(aarchive.for_user("bob")) == f"AsyncChatArchive({shown}, user_id='bob')"
    assert "s3cret" not in repr(archive) + repr(aarchive)
    archive.close()
    asyncio.run(aarchive.close())


@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite:////tmp/runs:2026/chats.db"])
def test_a_sqlite_path_is_shown_as_it_is_on_disk(url: str) -> None:
    # SQLAlchemy 2.1 writes ':' as '%3A': 'sqlite:///%3Amemory%3A' in reprs and errors.
    with ChatArchive(url) as archive:
        assert repr(archive) == f"ChatArchive('{url}')"
        if url.endswith(":memory:"):
            with pytest.raises(SchemaNotReady) as raised:
                archive.get("c")
            # Not "run 'chatarchive db upgrade'", which would migrate another, empty database.
            assert str(raised.value) == (
                f"database {url} is at revision none, chatarchive needs {SCHEMA_REVISION}: "
                "an in-memory database starts empty: call the archive's upgrade() first"
            )


def test_a_users_read_on_sqlite_waits_for_no_writer(tmp_path: Path) -> None:
    # A user's reads (for_user) began IMMEDIATE, as writes do, taking SQLite's
    # write lock: they waited for every writer, and one inside the archive's
    # own transaction() block waited 30 s for it, then failed "database is locked".
    url = f"sqlite:///{tmp_path / 'users.db'}"
    with ChatArchive(url) as archive:
        archive.upgrade()
        bob = archive.for_user("bob")
        bob.save(chat("b1"))

        async def read_async() -> list[str]:
            async with AsyncChatArchive(url.replace("sqlite:", "sqlite+aiosqlite:")) as aarchive:
                abob = aarchive.for_user("bob")
                return [(await abob.get("b1")).chat_id, (await abob.list_chats()).items[0].chat_id]

        with archive.transaction() as repo:
            repo.save(chat("x"))  # holds the write lock until the block ends
            assert bob.get("b1").chat_id == "b1"
            assert [c.chat_id for c in bob.list_chats().items] == ["b1"]
            assert asyncio.run(read_async()) == ["b1", "b1"]


def test_for_writing_takes_the_sqlite_write_lock_up_front(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'locks.db'}")
    other = sqlite3.connect(tmp_path / "locks.db", timeout=0, isolation_level=None)
    try:
        with engine.connect() as reader:
            reader.execute(text("SELECT 1"))  # a plain transaction only reads: no lock is taken
            other.execute("BEGIN IMMEDIATE")
            other.execute("ROLLBACK")
        with for_writing(engine).connect() as writer:
            writer.execute(text("SELECT 1"))  # the writer holds the write lock from its BEGIN
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")
        pg_engine = create_engine("postgresql://nobody@127.0.0.1/none")
        assert for_writing(pg_engine) is pg_engine  # PostgreSQL needs no change
    finally:
        other.close()
        engine.dispose()


@pytest.mark.parametrize("scoped", [False, True])
def test_get_reuses_one_plan_on_postgresql(pg_archive: tuple[ChatArchive, str], scoped: bool) -> None:
    """After psycopg prepares the read of one chat, PostgreSQL runs it with a
    generic plan rather than planning every call (it would keep planning a
    statement that takes an array of ids)."""
    _, url = pg_archive
    # One connection, so that every call's statements are in one server session.
    with ChatArchive(url, pool_size=1, max_overflow=0) as archive:
        archive.save_many(chat(f"c{n}", user_id="u") for n in range(12))
        reader = archive.for_user("u") if scoped else archive
        for n in range(25):  # psycopg prepares it at the 6th; PostgreSQL plans 5 times more
            assert reader.get(f"c{n % 12}").chat_id == f"c{n % 12}"
        with archive.engine.connect() as connection:
            plans = connection.execute(
                text(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                    "WHERE statement LIKE '%json_agg%' AND statement LIKE '%FROM chats c WHERE%'"
                )
            ).all()
    assert len(plans) == 1
    generic, custom = plans[0]
    assert generic >= 10
    assert custom <= 5


def _prepared_names(archive: ChatArchive) -> set[str]:
    """The statements prepared on the archive's (one) connection, read
    without a transaction, whose end would be a rollback."""
    with archive.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        return set(connection.execute(text("SELECT name FROM pg_prepared_statements")).scalars())


def test_calls_that_succeed_keep_the_statements_prepared_on_a_connection(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    """psycopg forgets every statement prepared on a connection at a rollback:
    no call of the archive that succeeds, or that answers that a chat is not
    there, ends in one, so that reads and appends stay planned once per
    connection (an application sharing the archive's pool would undo that;
    see the configuration page)."""
    _, url = pg_archive
    with ChatArchive(url, pool_size=1, max_overflow=0) as archive:
        archive.save_many(chat(f"c{n}", f"hello {n}", user_id="u") for n in range(6))
        mine = archive.for_user("u")
        for _ in range(7):  # psycopg prepares a statement at its sixth run (an append's at its first)
            archive.get("c0")
            mine.get("c1")
            archive.append("c2", [{"role": "user", "content": "more"}])
        prepared = _prepared_names(archive)
        assert len(prepared) >= 3
        archive.save(chat("c3", "replaced"))
        archive.save_many([chat("c4", "again", user_id="u")])
        archive.update("c5", title="renamed")
        archive.truncate("c2", 2)
        archive.add_feedback("c1", {"score": 1})
        mine.append("c1", [{"role": "user", "content": "mine"}])
        assert [hit.chat_id for hit in mine.search("mine")] == ["c1"]
        assert len(archive.list_chats().items) == archive.count_chats() == 6
        archive.configure_search(indexing="deferred")
        archive.append("c0", [{"role": "user", "content": "later"}])
        archive.index_pending()
        assert len(list(archive.export())) == 6
        with pytest.raises(ChatNotFound):
            archive.get("nowhere")
        with pytest.raises(ChatNotFound):
            archive.append("nowhere", [{"role": "user", "content": "lost"}])
        assert prepared <= _prepared_names(archive)


def test_a_get_on_postgresql_opens_no_orm_session(pg_archive: tuple[ChatArchive, str]) -> None:
    """get and get_many read one statement on a pooled connection, through
    both APIs, a user's archive in a transaction of that connection (which
    tells row-level security who reads): an ORM session's bookkeeping costs
    as much as the query."""
    archive, url = pg_archive
    archive.save_many(chat(f"c{n}", user_id="u") for n in range(3))
    sessions: list[object] = []

    def created(session: object, _transaction: object) -> None:
        sessions.append(session)

    async def through_asyncio(scoped: bool) -> list[str]:
        async with AsyncChatArchive(url) as aarchive:
            reader = aarchive.for_user("u") if scoped else aarchive
            found = [(await reader.get("c0")).chat_id]
            return found + [doc.chat_id for doc in await reader.get_many(["c2", "missing", "c1"])]

    event.listen(Session, "after_transaction_create", created)
    try:
        assert archive.get("c0").chat_id == "c0"
        assert [doc.chat_id for doc in archive.get_many(["c2", "c1"])] == ["c2", "c1"]
        assert asyncio.run(through_asyncio(scoped=False)) == ["c0", "c2", "c1"]
        assert asyncio.run(through_asyncio(scoped=True)) == ["c0", "c2", "c1"]
        assert sessions == []
    finally:
        event.remove(Session, "after_transaction_create", created)

    async def get_missing() -> None:
        async with AsyncChatArchive(url) as aarchive:
            await aarchive.get("missing")

    with pytest.raises(ChatNotFound):
        asyncio.run(get_missing())


def test_what_comes_back_does_not_depend_on_the_servers_settings(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    """The read builds JSON on the server, which prints timestamps in the
    session's TimeZone and rounds doubles to 15 digits under
    extra_float_digits = 0; both must come back exactly as they went in. And
    psycopg parses timestamps in no DateStyle but ISO."""
    _, url = pg_archive
    moment = "2026-01-01T00:00:00.250000Z"
    scores = [0.30000000000000004, 1e-300, 123456789.12345679, -2.5, 5, -1]
    doc = {
        "chat_id": "settings",
        "created_at": moment,
        "messages": [{"role": "user", "content": "hi", "created_at": moment}],
        "feedback": [{"id": f"f{n}", "score": score, "created_at": moment} for n, score in enumerate(scores)],
    }
    options = {"options": "-c TimeZone=Asia/Kolkata -c extra_float_digits=0 -c DateStyle=German"}
    with ChatArchive(url, connect_args=options) as archive:
        archive.save(doc)
        with archive.transaction() as repo:
            in_transaction = repo.get("settings")
        (summary,) = archive.list_chats().items
        assert summary.created_at == datetime(2026, 1, 1, 0, 0, 0, 250000, tzinfo=UTC)

    async def through_asyncio() -> ChatDocument:
        async with AsyncChatArchive(url, connect_args=options) as archive:
            (summary,) = (await archive.list_chats()).items
            assert summary.created_at == datetime(2026, 1, 1, 0, 0, 0, 250000, tzinfo=UTC)
            return await archive.get("settings")

    async_read = asyncio.run(through_asyncio())
    with ChatArchive(url, connect_args=options) as archive:
        for stored in (
            archive.get("settings"),
            archive.get_many(["settings"])[0],
            in_transaction,
            async_read,
        ):
            data = stored.model_dump(mode="json")
            assert data["created_at"] == moment
            assert data["messages"][0]["created_at"] == moment
            assert [item["created_at"] for item in data["feedback"]] == [moment] * len(scores)
            assert [item.score for item in stored.feedback] == scores
            assert [type(item.score) for item in stored.feedback] == [type(score) for score in scores]
            assert stored.updated_at is not None
            assert stored.updated_at.utcoffset() == timedelta(0)


@pytest.mark.parametrize("encoding", ["LATIN1", "SQL_ASCII"])
def test_a_database_that_cannot_hold_any_text_is_refused_up_front(tmp_path: Path, encoding: str) -> None:
    options = f"ENCODING '{encoding}' LC_COLLATE 'C' LC_CTYPE 'C' TEMPLATE template0"
    with throwaway_database("postgresql", tmp_path, options) as url:
        with ChatArchive(url) as archive, pytest.raises(DatabaseError, match=f"encoded {encoding}: .* UTF8"):
            archive.upgrade()
        result = CliRunner().invoke(
            main, ["--db", url.render_as_string(hide_password=False), "db", "upgrade"]
        )
        assert result.exit_code == 1
        assert f"encoded {encoding}" in result.output


@pytest.mark.parametrize("seconds", ["5", 0, -1.0, float("nan"), True])
def test_statement_timeout_must_be_seconds(seconds: object) -> None:
    with pytest.raises(InvalidArgument, match="statement_timeout must be a number of seconds") as caught:
        ChatArchive("sqlite://", statement_timeout=seconds)  # type: ignore[arg-type]
    assert caught.value.argument == "statement_timeout"


def test_an_async_archive_never_blocks_its_event_loop_on_the_file_system(
    own_archive: tuple[ChatArchive, str],
) -> None:
    # LangChain's and other frameworks' async tests run under blockbuster, which
    # fails any blocking call in the event loop: the first call of an archive
    # looked at its SQLite file there (os.stat), and so did each new connection.
    from blockbuster import blockbuster_ctx

    archive, url = own_archive
    archive.upgrade()
    archive.save({"chat_id": "c", "messages": [{"role": "user", "content": "hi"}]})

    async def first_calls() -> tuple[str, ChatDocument | None]:
        async with AsyncChatArchive(url) as async_archive:
            with blockbuster_ctx():
                found = await async_archive.get("c")
                missing = await async_archive.find("nobody")
                return found.chat_id, missing

    assert asyncio.run(first_calls()) == ("c", None)
