"""Trying hard to break the archive: concurrent writers, faults, hostile input, limits."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.base import empty_checkpoint
from sqlalchemy import URL, Engine, event, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    ChatArchiveError,
    ChatDocument,
    ChatFilter,
    ChatRepository,
    ConflictError,
    DatabaseError,
    Feedback,
    InvalidArgument,
    InvalidDocument,
    Limits,
)
from chatarchive._backends import database_errors
from chatarchive._repository import chat_rows, writes
from chatarchive._schema import SEARCH_TERMS, metadata
from chatarchive.integrations.langgraph import ChatArchiveSaver
from tests.support.chats import snapshot, tool_chat


def libpq(url: URL) -> str:
    return url.set(drivername="postgresql").render_as_string(hide_password=False)


# -- hostile and oversized input ----------------------------------------------------


def _nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"d": [value]}
    return value


HOSTILE_INPUTS: list[Any] = [
    None,
    "a string",
    12,
    [],
    {"chat_id": None},
    {"chat_id": ["x"]},
    {"chat_id": "x" * 256},
    {"chat_id": "ok", "messages": "not a list"},
    {"chat_id": "ok", "messages": [None]},
    {"chat_id": "ok", "messages": [{"role": None}]},
    {"chat_id": "ok", "messages": [{"role": ""}]},
    {"chat_id": "ok", "messages": [{"role": "user", "content": {"a": 1}}]},
    {"chat_id": "ok", "messages": [{"role": "user", "content": [1, 2]}]},
    {"chat_id": "ok", "messages": [{"role": "user", "content": [{"type": 5}]}]},
    {"chat_id": "ok", "messages": [{"role": "user", "tool_calls": [7]}]},
    {"chat_id": "ok", "messages": [{"role": "user", "usage": {"prompt_tokens": "many"}}]},
    {"chat_id": "ok", "messages": [{"role": "user", "completed": "yes"}]},
    {"chat_id": "ok", "messages": [{"role": "user", "uid": ""}]},
    {"chat_id": "ok", "messages": [{"role": "u", "uid": "same"}, {"role": "u", "uid": "same"}]},
    {"chat_id": "ok", "messages": [{"role": "user", "created_at": "2026-02-30T00:00:00Z"}]},
    {"chat_id": "ok", "messages": [{"role": "user", "created_at": "10000-01-01T00:00:00Z"}]},
    {"chat_id": "ok", "messages": [{"role": "user", "created_at": -(10**20)}]},
    {"chat_id": "ok", "created_at": "0001-01-01T00:00:00+14:00"},
    {"chat_id": "ok", "tags": "tag"},
    {"chat_id": "ok", "tags": [""]},
    {"chat_id": "ok", "metadata": []},
    {"chat_id": "ok", "workflow": "name"},
    {"chat_id": "ok", "feedback": [{"score": "5"}]},
    {"chat_id": "ok", "feedback": [{"id": "f", "score": 1}, {"id": "f", "score": 2}]},
    {"chat_id": "ok", "feedback": [{"message_uid": "'; DROP TABLE chats; --"}]},
    {"chat_id": "ok", "messages": [{"role": "user", "content": "\ud83d"}]},
    {"chat_id": "ok", "title": "\udfff lone"},
    {"chat_id": "ok", "metadata": {"x": float("inf")}},
    {"chat_id": "ok", "metadata": {"x": {1, 2}}},
    {"chat_id": "ok", "metadata": {"x": b"bytes"}},
    {"chat_id": "ok", "metadata": _nested(10_000)},
    {"chat_id": "ok", "messages": [{"role": "user", "extra": _nested(100)}]},
    {"chat_id": "ok", "messages": [{"role": "user", "content": [{"type": "text", "text": "x"}] * 1001}]},
    {"chat_id": "ok", "messages": [{"role": "user", "content": "x" * (8 * 2**20 + 1)}]},
]


@pytest.mark.parametrize("data", HOSTILE_INPUTS, ids=range(len(HOSTILE_INPUTS)))
def test_hostile_input_is_refused_and_changes_nothing(
    repo: ChatRepository, session: Session, data: Any
) -> None:
    repo.save(tool_chat("ok"))
    before = snapshot(session)
    with pytest.raises(InvalidDocument):
        repo.save(data)
    with pytest.raises(InvalidDocument):
        repo.save_many([data])
    assert snapshot(session) == before


def test_ids_with_quotes_and_sql_are_just_text(repo: ChatRepository) -> None:
    for chat_id in ("'; DROP TABLE chats; --", 'a"b', "x' OR '1'='1", "%_\\", "\x00"):
        repo.save(
            ChatDocument.from_openai([{"role": "user", "content": chat_id}], chat_id=chat_id, user_id=chat_id)
        )
        assert repo.get(chat_id).to_openai() == [{"role": "user", "content": chat_id}]
        assert [c.chat_id for c in repo.list_chats(ChatFilter(user_id=chat_id)).items] == [chat_id]


def test_limits_are_configurable(engine: Engine) -> None:
    strict = ChatArchive(
        engine=engine, limits=Limits(max_message_bytes=100, max_parts=2, max_json_depth=3, max_tool_calls=2)
    )
    with pytest.raises(InvalidDocument, match="at most 100"):
        strict.save({"chat_id": "big", "messages": [{"role": "user", "content": "x" * 101}]})
    with pytest.raises(InvalidDocument, match="at most 2"):
        strict.save(
            {
                "chat_id": "parts",
                "messages": [{"role": "user", "content": [{"type": "text", "text": "a"}] * 3}],
            }
        )
    with pytest.raises(InvalidDocument, match="deeper than 3"):
        strict.save({"chat_id": "deep", "metadata": _nested(3)})
    with pytest.raises(InvalidDocument, match="3 tool calls; at most 2") as caught:
        strict.save({"chat_id": "calls", "messages": [{"role": "assistant", "tool_calls": [{}, {}, {}]}]})
    assert (caught.value.message_index, caught.value.field) == (0, "tool_calls")
    with pytest.raises(InvalidDocument, match="at most 100"):
        strict.append("anything", [{"role": "user", "content": "y" * 200}])
    errors: list[int] = []
    strict.save_many(
        [
            {"chat_id": "fine", "messages": [{"role": "user", "content": "ok"}]},
            {"chat_id": "no", "metadata": _nested(5)},
        ],
        on_error=lambda index, _: errors.append(index),
    )
    assert errors == [1]
    strict.delete("fine")
    # A ChatDocument, Message or Feedback built beforehand (against the default
    # limits) was saved as it was, past the archive's own limits.
    built = ChatDocument.parse({"chat_id": "built", "messages": [{"role": "user", "content": "x" * 101}]})
    with pytest.raises(InvalidDocument, match="at most 100"):
        strict.save(built)
    with pytest.raises(InvalidDocument, match="at most 100"):
        strict.save_many([built])
    strict.save({"chat_id": "small", "messages": []})
    with pytest.raises(InvalidDocument, match="at most 100") as caught:
        strict.append("small", [built.messages[0]])
    assert (caught.value.chat_id, caught.value.message_index) == ("small", 0)
    with pytest.raises(InvalidDocument, match="deeper than 3"):
        strict.add_feedback("small", Feedback.model_validate({"score": 1, "extra": _nested(5)}))
    assert strict.get("small").messages == []
    strict.delete("small")
    # Limits of the wrong kind failed at the first save with TypeError ('5'), or
    # refused everything (0), or were silently not limits at all (a dict).
    for wrong in (
        {"max_parts": "5"},
        {"max_parts": 0},
        {"max_message_bytes": -1},
        {"max_json_depth": True},
        {"max_tool_calls": 0},
    ):
        with pytest.raises(InvalidArgument, match="must be") as wrong_kind:
            Limits(**wrong)
        assert wrong_kind.value.argument == next(iter(wrong))
    for build in (
        lambda: ChatArchive(engine=engine, limits={"max_parts": 3}),  # type: ignore[arg-type]
        lambda: ChatDocument.parse({"chat_id": "x", "messages": []}, limits=5),  # type: ignore[arg-type]
    ):
        with pytest.raises(InvalidArgument, match="limits must be a Limits") as not_limits:
            build()
        assert not_limits.value.argument == "limits"


# -- concurrent writers (real processes, both dialects) ---------------------------------------


def test_a_key_clash_names_the_key(pg_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = pg_archive
    archive.save(tool_chat("taken"))
    row = {"chat_id": "taken", "version": 1, "message_count": 0, "created_at": datetime.now(UTC)}
    row["updated_at"] = row["created_at"]
    with archive.engine.connect() as connection, pytest.raises(ConflictError) as raised, database_errors():
        connection.execute(metadata.tables["chats"].insert(), row)
    assert raised.value.constraint == "pk_chats"
    assert str(raised.value).endswith(
        'violates unique constraint "pk_chats": Key (chat_id)=(taken) already exists.'
    )


# -- faults --------------------------------------------------------------------------------


@pytest.mark.parametrize("raised", [KeyboardInterrupt, asyncio.CancelledError])
def test_a_failed_clean_up_after_ctrl_c_is_reported_as_the_ctrl_c(raised: type[BaseException]) -> None:
    """Ctrl-C mid-command leaves a connection that refuses the rollback after
    it ("another command is already in progress"): the caller must still see
    the interruption (the CLI then says what it kept), not a database error."""
    interruption = raised()
    refused = psycopg.OperationalError("sending query failed: another command is already in progress")

    def interrupted_then_refused() -> None:
        try:
            raise interruption
        except raised:
            try:
                raise refused
            except psycopg.Error as exc:  # as SQLAlchemy wraps the driver's error
                raise sa_exc.OperationalError("ROLLBACK TO SAVEPOINT sa_savepoint_1", None, exc) from exc

    with pytest.raises(raised) as caught, database_errors():
        interrupted_then_refused()
    assert caught.value is interruption
    with pytest.raises(DatabaseError, match="another command"), database_errors():
        raise sa_exc.OperationalError("ROLLBACK", None, refused)  # on its own, an error like any other


def test_an_exception_in_the_middle_of_a_save_leaves_nothing(
    archive: ChatArchive, engine: Engine, monkeypatch: pytest.MonkeyPatch
) -> None:
    archive.save(tool_chat("kept"))
    with engine.connect() as connection:
        before = snapshot(Session(bind=connection))
    original = chat_rows.insert_messages
    calls = 0

    def failing(unit: Any, rows: Any) -> None:
        nonlocal calls
        calls += 1
        original(unit, rows)
        raise RuntimeError("injected failure after the messages were written")

    monkeypatch.setattr(writes, "insert_messages", failing)
    with pytest.raises(RuntimeError):
        archive.save(tool_chat("new"))
    with pytest.raises(RuntimeError):
        archive.save(tool_chat("kept", title="changed"))
    leaf = archive.get("kept").messages[-1].uid
    with pytest.raises(RuntimeError):  # with a parent, an append is the general write on every database
        archive.append("kept", [{"role": "user", "content": "lost"}], parent=leaf)
    assert calls == 3
    monkeypatch.undo()
    with engine.connect() as connection:
        assert snapshot(Session(bind=connection)) == before
    archive.append("kept", [{"role": "user", "content": "works again"}])


def test_a_killed_connection_loses_nothing_and_the_next_call_works(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    archive, url = pg_archive
    archive.save(tool_chat("victim"))
    killed = threading.Event()

    def documents(killer: psycopg.Connection[Any]) -> Iterator[dict[str, Any]]:
        for number in range(1000):
            if number == 20:  # the import's connection is killed from the server side
                killer.execute(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND pid <> pg_backend_pid()"
                )
                killed.set()
            yield {"chat_id": f"import-{number}", "messages": [{"role": "user", "content": str(number)}]}

    raw_url = url.replace("postgresql+psycopg", "postgresql")
    with (
        psycopg.connect(raw_url, autocommit=True) as killer,
        pytest.raises(DatabaseError, match="connection lost"),
        archive.transaction() as repo,
    ):
        repo.save_many(documents(killer), batch_size=5)
    assert killed.is_set()
    assert [c.chat_id for c in archive.list_chats().items] == [
        "victim"
    ]  # nothing half-done; the next call works
    # A retried import is idempotent.
    assert archive.save_many({"chat_id": f"import-{n}", "messages": []} for n in range(30)) == 30
    assert archive.save_many({"chat_id": f"import-{n}", "messages": []} for n in range(30)) == 30
    assert len(archive.list_chats(limit=100).items) == 31


def test_a_statement_timeout_cancels_the_call_and_changes_nothing(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    archive, url = pg_archive
    archive.save(tool_chat("locked"))
    impatient = ChatArchive(url, statement_timeout=0.2)
    holder = psycopg.connect(url.replace("postgresql+psycopg", "postgresql"))
    holder.execute("SELECT 1 FROM chats WHERE chat_id = 'locked' FOR UPDATE")
    with pytest.raises(DatabaseError, match="57014"):
        impatient.append("locked", [{"role": "user", "content": "waits"}])
    holder.rollback()
    holder.close()
    assert len(impatient.get("locked").messages) == 5
    impatient.append("locked", [{"role": "user", "content": "now it works"}])
    assert len(archive.get("locked").messages) == 6
    impatient.close()


def test_calls_one_after_another_run_on_the_connection_used_last(pg_archive: tuple[ChatArchive, str]) -> None:
    """After a burst has filled the pool, calls in a row reuse one warm
    connection rather than going round every pooled one in turn."""
    archive, _ = pg_archive
    archive.save(tool_chat("c"))
    burst = [archive.engine.connect() for _ in range(4)]
    for connection in burst:
        connection.close()
    used: list[int] = []
    event.listen(archive.engine, "checkout", lambda dbapi, record, proxy: used.append(id(dbapi)))
    for index in range(4):
        archive.append("c", [{"role": "user", "content": f"turn {index}"}])
        archive.get("c")
    assert len(set(used)) == 1, used


def test_no_call_leaves_a_transaction_open(pg_archive: tuple[ChatArchive, str]) -> None:
    archive, url = pg_archive
    archive.save(tool_chat("c"))
    archive.get("c")
    list(archive.export())
    archive.search("hi")
    with pytest.raises(ChatArchiveError):
        archive.append("missing", [{"role": "user"}])
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as observer:
        states = observer.execute(
            "SELECT state FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
    assert all(state == "idle" for (state,) in states), states


def test_every_table_is_emptied_by_erasure(archive: ChatArchive, engine: Engine) -> None:
    archive.save_many(
        [tool_chat(f"c{n}", user_id="gone", tags=["t"], feedback=[{"score": 1}]) for n in range(3)]
    )
    archive.save(tool_chat("other", user_id="stays"))
    # A LangGraph thread of the user's: its checkpoints, channels and pending writes are rows too.
    saver = ChatArchiveSaver(archive.for_user("gone"))
    config = saver.put(
        {"configurable": {"thread_id": "c-thread", "checkpoint_ns": ""}},
        {**empty_checkpoint(), "channel_values": {"messages": [HumanMessage("Hi")], "notes": "n"}},
        {"source": "input", "step": -1},
        {"messages": "1", "notes": "1"},
    )
    saver.put_writes(config, [("notes", "more")], "task-1")
    assert archive.delete_user("gone") == 4
    with engine.connect() as connection:
        remaining = {
            name: connection.execute(
                text(f"SELECT count(*) FROM {name} WHERE chat_id LIKE 'c%'")
            ).scalar_one()
            for name, table in metadata.tables.items()
            if "chat_id" in table.c  # not the archive's settings and prices, which hold no chat
        }
        # Their messages' search terms too (SQLite's hold no chat id: none outlives its message).
        remaining[SEARCH_TERMS] = connection.execute(
            text(f"SELECT count(*) FROM {SEARCH_TERMS} WHERE chat_id LIKE 'c%'")
            if engine.dialect.name == "postgresql"
            else text(
                f"SELECT count(*) FROM {SEARCH_TERMS} t WHERE NOT EXISTS "
                "(SELECT 1 FROM messages m WHERE m.rowid = t.rowid)"
            )
        ).scalar_one()
    assert set(remaining.values()) == {0}
    assert json.loads(archive.get("other").model_dump_json())["user_id"] == "stays"


@pytest.mark.parametrize("scoped", [False, True])
def test_a_read_on_a_connection_the_server_dropped_is_retried(
    pg_archive: tuple[ChatArchive, str], monkeypatch: pytest.MonkeyPatch, scoped: bool
) -> None:
    archive, url = pg_archive
    archive.save(tool_chat("kept", user_id="u"))
    reader = archive.for_user("u") if scoped else archive
    # Never ping at checkout: the first attempt must meet the dropped connection.
    monkeypatch.setattr("chatarchive._backends.postgresql.engine.PING_AFTER_IDLE", float("inf"))
    for read in (
        lambda: reader.get("kept").chat_id,
        lambda: [d.chat_id for d in reader.get_many(["kept", "missing"])],
        lambda: [c.chat_id for c in reader.list_chats().items],
    ):
        expected = read()  # the pool now holds a connection
        with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as killer:
            killed = killer.execute(
                "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchone()
        assert killed is not None
        assert killed[0] >= 1
        assert read() == expected


def _stuck_in_pipeline_mode(connection: Any) -> None:
    """Leave the psycopg connection under ``connection`` as psycopg leaves it
    when the server ends the session while an ``executemany``'s pipeline
    exits: in pipeline mode, with a command in flight."""
    pgconn = connection.connection.driver_connection.pgconn
    pgconn.enter_pipeline_mode()
    pgconn.send_query_params(b"SELECT 1", None)
    pgconn.flush()


def test_a_write_on_a_connection_stuck_in_pipeline_mode_fails_as_a_lost_connection(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    archive, _ = pg_archive
    archive.save(tool_chat("kept"))

    def write_on_a_stuck_connection() -> None:
        with database_errors(), archive.engine.begin() as connection:
            connection.execute(text("SELECT 1"))
            _stuck_in_pipeline_mode(connection)
            connection.execute(text("DELETE FROM chats"))

    with pytest.raises(DatabaseError, match="database connection lost") as raised:
        write_on_a_stuck_connection()
    assert isinstance(raised.value.__cause__, sa_exc.DBAPIError)
    assert raised.value.__cause__.connection_invalidated  # the pool dropped it
    archive.append("kept", [{"role": "user", "content": "the next call works"}])
    assert len(archive.get("kept").messages) == 6


def test_the_pool_never_hands_out_a_connection_stuck_in_pipeline_mode(
    pg_archive: tuple[ChatArchive, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, _ = pg_archive
    archive.save(tool_chat("kept"))
    # Never ping at checkout: the call must meet the connection as the pool holds it.
    monkeypatch.setattr("chatarchive._backends.postgresql.engine.PING_AFTER_IDLE", float("inf"))
    with archive.engine.connect() as connection:
        driver: Any = connection.connection.driver_connection
        driver.pgconn.enter_pipeline_mode()
    # On such a connection a prepared read would wait forever for its result.
    found: list[str] = []
    reading = threading.Thread(target=lambda: found.append(archive.get("kept").chat_id), daemon=True)
    reading.start()
    reading.join(timeout=10)
    assert found == ["kept"]


def test_the_async_pool_never_hands_out_a_connection_stuck_in_pipeline_mode(
    pg_archive: tuple[ChatArchive, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    archive, url = pg_archive
    archive.save(tool_chat("kept"))
    monkeypatch.setattr("chatarchive._backends.postgresql.engine.PING_AFTER_IDLE", float("inf"))

    async def read_after_a_stuck_connection() -> str:
        async with AsyncChatArchive(url) as shared:
            await shared.get("kept")  # the pool now holds a connection
            async with shared.engine.connect() as connection:
                driver: Any = (await connection.get_raw_connection()).driver_connection
                driver.pgconn.enter_pipeline_mode()
            return (await asyncio.wait_for(shared.get("kept"), timeout=10)).chat_id

    assert asyncio.run(read_after_a_stuck_connection()) == "kept"


def test_one_async_archive_serves_event_loops_one_after_another_and_side_by_side(
    empty_database: URL,
) -> None:
    """An AsyncChatArchive made outside any loop is used by ``asyncio.run``
    twice, then by threads each running a loop of its own, the first calls of
    which migrate the database at the same moment."""
    shared = AsyncChatArchive(empty_database)

    async def use(number: int) -> str:
        await shared.upgrade()
        await shared.save({"chat_id": f"c{number}", "messages": [{"role": "user", "content": "hi"}]})
        return (await shared.get(f"c{number}")).chat_id

    start = threading.Barrier(4)
    found: list[str] = []
    failed: list[BaseException] = []

    def in_a_loop_of_its_own(number: int) -> None:
        start.wait()
        try:
            found.append(asyncio.run(asyncio.wait_for(use(number), 60)))
        except BaseException as exc:
            failed.append(exc)

    threads = [threading.Thread(target=in_a_loop_of_its_own, args=(number,)) for number in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failed == []
    assert sorted(found) == ["c0", "c1", "c2", "c3"]
    assert asyncio.run(asyncio.wait_for(use(4), 60)) == "c4"
    assert asyncio.run(asyncio.wait_for(use(5), 60)) == "c5"
    asyncio.run(shared.close())
