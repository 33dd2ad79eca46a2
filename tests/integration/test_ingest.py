"""save_many and the bulk-load mode: same rows as save, replacement, errors, memory."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from sqlalchemy import Connection, Engine, event, inspect, select, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    ChatArchiveError,
    ChatDocument,
    ChatRepository,
    InvalidArgument,
    InvalidDocument,
)
from chatarchive._rows import ChatRows, document_to_rows
from chatarchive._schema import metadata
from chatarchive.bench.workload import generate_chats
from tests.support.async_shim import in_sync_session
from tests.support.chats import HOSTILE, SIGNED, UNSORTED, counts, empty_archive, snapshot
from tests.support.strategies import exact


def stored_rows(session: Session) -> dict[str, list[Any]]:
    return snapshot(session)


def test_save_many_and_bulk_store_the_same_rows_as_save(repo: ChatRepository, session: Session) -> None:
    at = {"created_at": "2026-01-01T00:00:00Z"}
    odd: dict[
        str, Any
    ] = {  # values jsonb would change (see test_repository); ids and times given, as in the workload
        "chat_id": "odd",
        **at,
        "updated_at": at["created_at"],
        "messages": [
            {
                "role": "user",
                "content": [{"type": "text", "text": "x", "m": SIGNED}],
                "x": UNSORTED,
                "uid": "u",
                **at,
            }
        ],
        "metadata": SIGNED,
        "workflow": UNSORTED,
        "feedback": [{"id": "f1", "score": 4.0, "x": SIGNED, **at}, {"id": "f2", "score": -0.0, **at}],
    }
    docs = [*generate_chats(25, 12, seed=3), odd]
    for doc in docs:
        repo.save(doc)
    one_by_one = stored_rows(session)
    empty_archive(session)
    assert repo.save_many(iter(docs), batch_size=7) == 26
    assert stored_rows(session) == one_by_one
    empty_archive(session)
    assert repo.save_many(iter(docs), batch_size=10, bulk=True) == 26
    assert stored_rows(session) == one_by_one
    back = repo.get("odd")
    assert exact([back.to_openai(), back.metadata, back.workflow]) == exact(
        [[{k: v for k, v in odd["messages"][0].items() if k not in ("uid", "created_at")}], SIGNED, UNSORTED]
    )
    assert exact([item.model_dump(include={"score", "x"}) for item in back.feedback]) == exact(
        [{"score": 4.0, "x": SIGNED}, {"score": -0.0}]
    )
    assert [doc.chat_id for doc in repo.get_many([d["chat_id"] for d in docs])] == [
        d["chat_id"] for d in docs
    ]


def test_the_bulk_load_restores_every_constraint(
    engine: Engine, repo: ChatRepository, session: Session
) -> None:
    before = _constraints(engine)
    repo.save_many(generate_chats(5, 6), bulk=True)
    during = in_sync_session(session, lambda sync: _constraints(sync.connection()))
    assert during == before  # inside the load's transaction


def _constraints(bind: Engine | Connection) -> dict[str, tuple[list[str], list[str]]]:
    inspector = inspect(bind)
    return {
        table.name: (
            sorted(str(fk["name"]) for fk in inspector.get_foreign_keys(table.name)),
            sorted(str(ix["name"]) for ix in inspector.get_indexes(table.name)),
        )
        for table in metadata.sorted_tables
    }


def test_reimport_replaces_without_duplicates(repo: ChatRepository, session: Session) -> None:
    docs = list(generate_chats(10, 8))
    repo.save_many(docs)
    first = counts(session)
    changed = [{**doc, "title": "again"} for doc in docs]
    assert repo.save_many(changed + changed[:3], batch_size=4) == 13  # the same chat twice in one call
    assert counts(session) == first
    versions = session.execute(text("SELECT DISTINCT version FROM chats ORDER BY version")).scalars().all()
    assert versions == [2, 3]
    assert {doc.title for doc in repo.get_many([d["chat_id"] for d in docs])} == {"again"}


def test_save_many_reports_bad_documents_and_keeps_the_rest(repo: ChatRepository, session: Session) -> None:
    docs: list[Any] = list(generate_chats(6, 4))
    docs.insert(2, {"chat_id": "bad", "messages": [{"content": "no role"}]})
    docs.insert(5, 42)
    errors: list[tuple[int, ChatArchiveError]] = []
    assert (
        repo.save_many(docs, batch_size=3, on_error=lambda index, error: errors.append((index, error))) == 6
    )
    assert [index for index, _ in errors] == [2, 5]
    assert isinstance(errors[0][1], InvalidDocument)
    assert errors[0][1].field == "role"
    assert counts(session)["chats"] == 6


def test_save_many_without_on_error_raises_the_first_error(repo: ChatRepository, session: Session) -> None:
    docs: list[Any] = [
        *generate_chats(4, 4),
        {"chat_id": "bad", "messages": [{}]},
        *generate_chats(2, 4, seed=9),
    ]
    before = snapshot(session)
    with pytest.raises(InvalidDocument, match="bad"):
        repo.save_many(docs, batch_size=2)
    assert snapshot(session) == before  # the repository's call is atomic


def part_of_no_message(chat_id: str) -> dict[str, Any]:
    """A content part row whose message does not exist (a foreign-key violation)."""
    return {
        "chat_id": chat_id,
        "message_position": 999,
        "position": 0,
        "type": "text",
        "text": "x",
        "data": None,
        "ordered_json": None,
        "attachment_sha256": None,
        "attachment_path": None,
        "chat_user_id": None,
    }


def refuse_in_database(monkeypatch: pytest.MonkeyPatch, chat_id: str) -> None:
    """Make the rows of ``chat_id`` include a part of no message, which the
    database refuses (a broken conversion, injected)."""
    original = document_to_rows

    def corrupt(doc: ChatDocument, **kwargs: Any) -> ChatRows:
        rows = original(doc, **kwargs)
        if doc.chat_id == chat_id:
            rows.parts.append(part_of_no_message(doc.chat_id))
        return rows

    monkeypatch.setattr("chatarchive._repository.batches.document_to_rows", corrupt)


def test_a_write_error_is_traced_to_its_document(
    repo: ChatRepository, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A row the database refuses (a broken conversion, injected here) is reported
    for its own document; the rest of its batch is saved."""
    refuse_in_database(monkeypatch, "chat-00000003")
    errors: list[int] = []
    saved = repo.save_many(
        generate_chats(6, 4), batch_size=6, on_error=lambda index, error: errors.append(index)
    )
    assert (saved, errors) == (5, [3])
    assert "chat-00000003" not in session.execute(select(metadata.tables["chats"].c.chat_id)).scalars().all()


def test_a_bulk_load_violation_rolls_everything_back(
    engine: Engine, archive: ChatArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive.save_many(generate_chats(3, 4, seed=1))
    with engine.connect() as connection:
        before = snapshot(Session(bind=connection))
    constraints = _constraints(engine)
    refuse_in_database(monkeypatch, "chat-00000007")
    with pytest.raises(ChatArchiveError):
        archive.save_many(generate_chats(10, 4, seed=2), batch_size=3, bulk=True)
    with engine.connect() as connection:
        assert snapshot(Session(bind=connection)) == before
    assert _constraints(engine) == constraints


def test_a_failed_bulk_load_leaves_the_callers_transaction_usable(
    engine: Engine, repo: ChatRepository, session: Session, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In a repository's transaction, a bulk load that fails when its foreign
    keys are re-created is rolled back to where it began: the dropped
    constraints are back and the transaction goes on (the asyncio repository
    runs the load in steps, each batch in a call of its own)."""
    repo.save_many(generate_chats(2, 3, seed=1))
    before = counts(session)
    constraints = _constraints(engine)
    refuse_in_database(monkeypatch, "chat-00000004")
    with pytest.raises(ChatArchiveError):
        repo.save_many(generate_chats(6, 3, seed=2), batch_size=2, bulk=True)
    assert counts(session) == before
    assert in_sync_session(session, lambda sync: _constraints(sync.connection())) == constraints
    repo.save({"chat_id": "after", "messages": []})
    assert counts(session)["chats"] == before["chats"] + 1


def test_the_bulk_load_keeps_the_full_text_indexes_in_place(pg_archive: tuple[ChatArchive, str]) -> None:
    # Rebuilding them would re-tokenize every message already stored, for no gain on the new ones.
    archive, _ = pg_archive
    archive.save_many(generate_chats(3, 4, seed=1))
    oids = text(
        "SELECT indexrelid::regclass::text, indexrelid::int FROM pg_index "
        "WHERE indrelid IN ('messages'::regclass, 'content_parts'::regclass, 'message_terms'::regclass)"
    )

    def index_oids() -> dict[str, int]:
        with archive.engine.connect() as connection:
            return dict(connection.execute(oids).all())

    before = index_oids()
    loaded = {"chat_id": "loaded", "messages": [{"role": "user", "content": "zanzibar marmalade"}]}
    archive.save_many([*generate_chats(5, 4, seed=2), loaded], bulk=True)
    after = index_oids()
    assert after["ix_message_terms_terms"] == before["ix_message_terms_terms"]
    assert after.keys() == before.keys()
    assert [hit.chat_id for hit in archive.search("marmalade")] == ["loaded"]  # the index took the new rows


def test_a_bulk_load_into_an_empty_archive_indexes_once_after_loading(
    archive: ChatArchive, database_kind: str
) -> None:
    """On one PostgreSQL server the search terms' index is built again after
    the load; a distributed archive keeps its indexes (see begin_bulk)."""
    oid = text("SELECT to_regclass('ix_message_terms_terms')::oid::int")
    postgres = database_kind == "postgresql"
    if postgres:
        with archive.engine.connect() as connection:
            before = connection.execute(oid).scalar_one()
    loaded = {"chat_id": "loaded", "messages": [{"role": "user", "content": "zanzibar 条带 marmalade"}]}
    archive.save_many([*generate_chats(5, 4, seed=2), loaded], bulk=True)
    assert [hit.chat_id for hit in archive.search("条带")] == ["loaded"]
    assert archive.search("条带").fresh
    if postgres:  # the index was built again, over every term at once
        with archive.engine.connect() as connection:
            assert connection.execute(oid).scalar_one() != before


def test_a_bulk_load_builds_the_terms_index_again_with_its_own_settings(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    """An operator's settings of the search terms' index (fastupdate off, for
    appends of even speed) outlive a bulk load into an empty archive, which
    builds the index again."""
    archive, _ = pg_archive
    options = text("SELECT reloptions FROM pg_class WHERE oid = to_regclass('ix_message_terms_terms')")
    with archive.engine.begin() as connection:
        connection.execute(text("ALTER INDEX ix_message_terms_terms SET (fastupdate = off)"))
    loaded = {"chat_id": "loaded", "messages": [{"role": "user", "content": "zanzibar marmalade"}]}
    archive.save_many([*generate_chats(5, 4, seed=2), loaded], bulk=True)
    with archive.engine.connect() as connection:
        assert connection.execute(options).scalar_one() == ["fastupdate=off"]
    assert [hit.chat_id for hit in archive.search("marmalade")] == ["loaded"]


def test_a_bulk_load_with_deferred_indexing_leaves_the_chats_marked(archive: ChatArchive) -> None:
    archive.configure_search(indexing="deferred")
    archive.save_many([{"chat_id": "loaded", "messages": [{"role": "user", "content": "条带"}]}], bulk=True)
    assert archive.search("条带").pending_chats == 1
    assert archive.index_pending() == 1
    assert [hit.chat_id for hit in archive.search("条带")] == ["loaded"]


def test_the_producer_stops_when_the_consumer_fails(repo: ChatRepository) -> None:
    consumed = 0

    def endless() -> Iterator[dict[str, Any]]:
        nonlocal consumed
        for doc in generate_chats(10**6, 3):
            consumed += 1
            yield doc if consumed != 20 else {"chat_id": 1}

    with pytest.raises(InvalidDocument):
        repo.save_many(endless(), batch_size=5)
    assert consumed < 60  # read ahead by a bounded number of batches, then stopped


def _emptied(engine: Engine) -> None:
    with engine.begin() as connection:
        empty_archive(connection)


def _stored(engine: Engine) -> dict[str, list[Any]]:
    with engine.connect() as connection:
        return snapshot(Session(bind=connection))


def copies_in_adjacent_batches(docs: list[dict[str, Any]], batch_size: int) -> list[dict[str, Any]]:
    """Batches of ``batch_size``: the first copies (title "first") of some chats,
    then their second copies (title "second") in the next batch."""
    copies = []
    for start in range(0, len(docs), batch_size):
        copies += [{**doc, "title": "first"} for doc in docs[start : start + batch_size]]
        copies += [{**doc, "title": "second"} for doc in docs[start : start + batch_size]]
    return copies


def test_parallel_writers_store_the_same_rows(archive: ChatArchive, engine: Engine) -> None:
    docs = list(generate_chats(40, 6, seed=5))
    assert archive.save_many(docs, batch_size=7) == 40
    one_writer = _stored(engine)
    _emptied(engine)
    assert archive.save_many(iter(docs), batch_size=7, writers=3) == 40
    assert _stored(engine) == one_writer


def test_parallel_writers_keep_the_later_copy_of_a_chat(archive: ChatArchive, engine: Engine) -> None:
    docs = list(generate_chats(40, 4))
    archive.save_many(docs, writers=3)
    copies = copies_in_adjacent_batches(docs, 4)
    assert archive.save_many(copies, batch_size=4, writers=3) == 80
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT title, version FROM chats")).all()
    assert sorted(rows) == [("second", 3)] * 40


def test_parallel_writers_report_every_error(archive: ChatArchive, monkeypatch: pytest.MonkeyPatch) -> None:
    refuse_in_database(monkeypatch, "chat-00000003")
    docs: list[Any] = list(generate_chats(12, 4))
    docs.insert(6, {"chat_id": "bad", "messages": [{"content": "no role"}]})
    errors: list[int] = []
    saved = archive.save_many(docs, batch_size=3, writers=3, on_error=lambda index, _: errors.append(index))
    assert (saved, sorted(errors)) == (11, [3, 6])
    assert len(archive.list_chats(limit=100).items) == 11
    # Without on_error, the first error is raised (and every writer stops).
    with pytest.raises(ChatArchiveError):
        archive.save_many(generate_chats(12, 4, seed=4), batch_size=3, writers=3)
    monkeypatch.undo()
    with pytest.raises(InvalidDocument, match="bad"):
        archive.save_many(docs, batch_size=3, writers=3)


def test_writers_must_be_one_or_more_and_one_for_a_bulk_load(archive: ChatArchive) -> None:
    with pytest.raises(InvalidArgument, match="writers"):
        archive.save_many([], writers=0)
    with pytest.raises(InvalidArgument, match="one writer"):
        archive.save_many([], bulk=True, writers=2)


@pytest.mark.parametrize(("batch_size", "reason"), [(0, "at least 1"), (10_001, "at most 10,000")])
@pytest.mark.parametrize("bulk", [False, True])
def test_batch_size_is_from_one_to_ten_thousand(
    archive: ChatArchive,
    async_engine: AsyncEngine,
    runner: asyncio.Runner,
    batch_size: int,
    reason: str,
    bulk: bool,
) -> None:
    with pytest.raises(InvalidArgument, match=reason) as raised:
        archive.save_many([], batch_size=batch_size, bulk=bulk)
    assert raised.value.argument == "batch_size"
    with pytest.raises(InvalidArgument, match=reason):
        runner.run(AsyncChatArchive(engine=async_engine).save_many([], batch_size=batch_size, bulk=bulk))


def test_parallel_writers_through_asyncio(
    archive: ChatArchive, engine: Engine, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    """The asyncio API writes each batch's shares concurrently: same outcome."""
    docs = list(generate_chats(16, 4))
    copies: list[Any] = copies_in_adjacent_batches(docs, 4)
    copies.insert(5, {"chat_id": "bad", "messages": [{"content": "no role"}]})
    errors: list[int] = []
    async_archive = AsyncChatArchive(engine=async_engine)
    saved = runner.run(
        async_archive.save_many(
            copies, batch_size=4, writers=3, on_error=lambda index, _: errors.append(index)
        )
    )
    assert (saved, errors) == (32, [5])
    with engine.connect() as connection:
        rows = connection.execute(text("SELECT title, version FROM chats")).all()
    assert sorted(rows) == [("second", 2)] * 16
    with pytest.raises(InvalidDocument, match="bad"):
        runner.run(async_archive.save_many(copies, batch_size=4, writers=3))
    with pytest.raises(InvalidArgument, match="one writer"):
        runner.run(async_archive.save_many([], bulk=True, writers=2))


def test_the_asyncio_api_saves_from_an_async_iterable(
    archive: ChatArchive, engine: Engine, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    """An async generator (over a network stream, say) is read a batch at a
    time, as save_many reads an iterable; errors are named by their index in
    the whole input. It was refused: 'docs must be a list ..., not async_generator'."""
    docs: list[Any] = list(generate_chats(11, 3))
    docs.insert(7, {"chat_id": "bad", "messages": [{"content": "no role"}]})
    read: list[int] = []

    async def stream() -> Any:
        for number, doc in enumerate(docs):
            read.append(number)
            await asyncio.sleep(0)
            yield doc

    async_archive = AsyncChatArchive(engine=async_engine)
    errors: list[int] = []
    saved = runner.run(
        async_archive.save_many(
            stream(), batch_size=3, writers=2, on_error=lambda index, _: errors.append(index)
        )
    )
    assert (saved, errors, len(read)) == (11, [7], 12)
    assert [doc.chat_id for doc in archive.export()] == sorted(
        doc["chat_id"] for doc in docs if doc["chat_id"] != "bad"
    )
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM chats"))
    read.clear()
    with pytest.raises(InvalidDocument, match="bad"):  # strict: the batches before it are kept
        runner.run(async_archive.save_many(stream(), batch_size=3))
    assert archive.count_chats() == 6
    assert len(read) == 8  # read no further than the bad document, as from an iterable

    async def in_a_transaction() -> int:
        async with async_archive.transaction() as repo:
            return await repo.save_many(
                stream(), batch_size=5, on_error=lambda index, _: errors.append(index)
            )

    errors.clear()
    assert runner.run(in_a_transaction()) == 11
    assert errors == [7]
    with pytest.raises(InvalidArgument, match="batch_size"):
        runner.run(async_archive.save_many(stream(), batch_size=0))


def test_asyncio_save_many_writes_with_copy_on_postgresql(
    archive: ChatArchive, engine: Engine, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    """The asyncio API's save_many writes rows with binary COPY on PostgreSQL,
    as the synchronous one does, text escaped the same way; SQLite's
    executemany stays."""
    docs: list[Any] = list(generate_chats(6, 3, seed=4))
    at = "2026-01-01T00:00:00Z"
    hostile = [
        {"role": "user", "content": v, "uid": f"h{n}", "created_at": at} for n, v in enumerate(HOSTILE)
    ]
    docs.append(
        {"chat_id": "hostile", "title": HOSTILE[6], "created_at": at, "updated_at": at, "messages": hostile}
    )
    archive.save_many(docs)
    expected = [doc.model_dump() for doc in archive.export()]
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM chats"))
    inserted: list[str] = []

    def record(*args: Any) -> None:
        if args[2].lstrip().upper().startswith("INSERT INTO MESSAGES"):
            inserted.append(args[2])

    event.listen(async_engine.sync_engine, "before_cursor_execute", record)
    try:
        for bulk in (False, True):
            assert runner.run(AsyncChatArchive(engine=async_engine).save_many(docs, bulk=bulk)) == 7
            assert [doc.model_dump() for doc in archive.export()] == expected
    finally:
        event.remove(async_engine.sync_engine, "before_cursor_execute", record)
    assert bool(inserted) == (engine.dialect.name == "sqlite")


def test_a_bulk_load_through_asyncio_reads_an_async_iterable(
    archive: ChatArchive, engine: Engine, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    """bulk=True takes an async generator too: the same rows as save_many, and a
    bad document (strict) rolls the whole load back. It was refused ("a bulk
    load takes an iterable ..., not an async iterable")."""
    docs: list[Any] = list(generate_chats(12, 3, seed=5))

    async def stream(items: list[Any]) -> Any:
        for doc in items:
            await asyncio.sleep(0)
            yield doc

    async_archive = AsyncChatArchive(engine=async_engine)
    constraints = _constraints(engine)
    with Session(engine) as session:
        assert runner.run(async_archive.save_many(stream(docs), batch_size=5)) == 12
        expected = stored_rows(session)
    with engine.begin() as connection:
        connection.execute(text("DELETE FROM chats"))
    assert runner.run(async_archive.save_many(stream(docs), batch_size=5, bulk=True)) == 12
    with Session(engine) as session:
        assert stored_rows(session) == expected
    bad = [*docs[:7], {"chat_id": "bad", "messages": [{"content": "no role"}]}]
    with pytest.raises(InvalidDocument, match="bad"):
        runner.run(async_archive.save_many(stream([{**doc, "title": "new"} for doc in bad]), bulk=True))
    with Session(engine) as session:
        assert stored_rows(session) == expected  # all or nothing
    assert _constraints(engine) == constraints


def test_a_cancelled_save_many_stops_waiting_for_an_idle_async_stream(
    archive: ChatArchive, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    """A timeout around save_many of a stream that has nothing more for now
    cancels the item being awaited: the stream sees the cancellation and the
    reading thread ends, rather than wait for an item that may never come."""
    cancelled = []

    async def idle_after_five() -> Any:
        for doc in generate_chats(5, 2):
            yield doc
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(True)
            raise
        yield {}  # never reached

    async_archive = AsyncChatArchive(engine=async_engine)
    for bulk in (False, True):
        cancelled.clear()
        with pytest.raises(TimeoutError):
            runner.run(asyncio.wait_for(async_archive.save_many(idle_after_five(), bulk=bulk), timeout=1))
        assert cancelled == [True]
        for thread in threading.enumerate():
            if thread.name.startswith("chatarchive-"):
                thread.join(timeout=10)
        assert [t.name for t in threading.enumerate() if t.name.startswith("chatarchive-")] == []
    assert archive.count_chats() == 0  # a batch of 250 never filled; the bulk load rolled back


def test_asyncio_save_many_waits_for_batches_without_blocking_the_event_loop(
    archive: ChatArchive, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    """An input that needs the event loop to make progress (here, a thread fed
    by a task on the loop) does not stall a save_many waiting for its next
    batch: not in a bulk load, nor in a transaction's repository. Both waited
    on the loop's own thread before, and this input then never came."""
    async_archive = AsyncChatArchive(engine=async_engine)

    def fed_by_the_loop(given: threading.Event) -> Iterator[dict[str, Any]]:
        yield from generate_chats(3, 2, seed=7)
        if not given.wait(timeout=20):
            raise AssertionError("the event loop was blocked")
        for doc in generate_chats(2, 2, seed=8):
            yield {**doc, "chat_id": f"later-{doc['chat_id']}"}

    async def save(bulk: bool, in_transaction: bool) -> int:
        given = threading.Event()

        async def give() -> None:
            await asyncio.sleep(0.05)
            given.set()

        feeder = asyncio.create_task(give())
        if in_transaction:
            async with async_archive.transaction() as repo:
                saved = await repo.save_many(fed_by_the_loop(given), batch_size=2, bulk=bulk)
        else:
            saved = await async_archive.save_many(fed_by_the_loop(given), batch_size=2, bulk=bulk)
        await feeder
        return saved

    for bulk in (False, True):
        for in_transaction in (False, True):
            assert runner.run(save(bulk, in_transaction)) == 5
    assert archive.count_chats() == 5


@pytest.mark.parametrize("writers", [1, 3])
def test_a_failed_save_many_stops_its_threads_before_it_returns(
    archive: ChatArchive, monkeypatch: pytest.MonkeyPatch, writers: int
) -> None:
    refuse_in_database(monkeypatch, "chat-00000012")
    with pytest.raises(ChatArchiveError) as raised:
        archive.save_many(generate_chats(2000, 4), batch_size=5, writers=writers)
    # The traceback (kept in `raised`) still holds the call's frames: no thread
    # may be left running until they go.
    assert raised.value is not None
    assert [t.name for t in threading.enumerate() if t.name.startswith("chatarchive-")] == []


@pytest.mark.parametrize("api", ["sync", "asyncio"])
@pytest.mark.parametrize("writers", [1, 3])
def test_a_failed_save_many_does_not_wait_for_more_input(
    archive: ChatArchive,
    async_engine: AsyncEngine,
    runner: asyncio.Runner,
    monkeypatch: pytest.MonkeyPatch,
    writers: int,
    api: str,
) -> None:
    """An error raises at once even when the input has nothing more for now (an
    open pipe, ``tail -f``); the reading thread ends at the input's next item."""
    refuse_in_database(monkeypatch, "chat-00000012")
    more_input = threading.Event()
    waiting = threading.Timer(60, more_input.set)  # the input sends more, much later

    def stalled() -> Iterator[dict[str, Any]]:
        yield from generate_chats(20, 4)
        more_input.wait()
        yield from generate_chats(1, 4, seed=2)

    def save() -> int:
        if api == "sync":
            return archive.save_many(stalled(), batch_size=5, writers=writers)
        async_archive = AsyncChatArchive(engine=async_engine)
        return runner.run(async_archive.save_many(stalled(), batch_size=5, writers=writers))

    waiting.start()
    try:
        with pytest.raises(ChatArchiveError):
            save()
        assert not more_input.is_set()  # it did not wait for the input
    finally:
        more_input.set()
        waiting.cancel()
    for thread in threading.enumerate():
        if thread.name.startswith("chatarchive-"):
            thread.join(timeout=30)
    assert [t.name for t in threading.enumerate() if t.name.startswith("chatarchive-")] == []


def test_a_cancelled_async_save_many_stops_and_raises_the_cancellation(
    archive: ChatArchive, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    """A timeout around the asyncio save_many cancels it as any coroutine: the
    caller sees the timeout (before: "generator already executing"), batches
    written so far stay, and its threads end."""

    def slowing_down() -> Iterator[dict[str, Any]]:
        for number, doc in enumerate(generate_chats(10_000, 2)):
            if number >= 20:
                time.sleep(0.05)
            yield doc

    async_archive = AsyncChatArchive(engine=async_engine)
    with pytest.raises(TimeoutError):
        runner.run(asyncio.wait_for(async_archive.save_many(slowing_down(), batch_size=5), timeout=4))
    assert 20 <= archive.count_chats() < 10_000
    assert [t.name for t in threading.enumerate() if t.name.startswith("chatarchive-")] == []
