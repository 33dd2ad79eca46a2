"""Trying hard to break the archive: concurrent writers, faults, hostile input, limits."""

from __future__ import annotations

import asyncio
import contextlib
import json
import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import URL, Engine, text
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from chatarchive import (
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
from chatarchive._repository import writes
from chatarchive._schema import metadata

from .test_repository import snapshot, tool_chat


def _libpq(url: URL) -> str:
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


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_fuzz_the_parser_only_raises_its_own_errors(data: Any) -> None:
    for candidate in (data, {"chat_id": "fuzz", "messages": [data]}, {"chat_id": "fuzz", "messages": data}):
        with contextlib.suppress(InvalidDocument):
            ChatDocument.parse(candidate)
    with contextlib.suppress(InvalidDocument):
        ChatDocument.from_openai(data if isinstance(data, list) else [data])


# -- concurrent writers (real processes, both dialects) ---------------------------------------


def _append_many(url: str, worker: int, count: int) -> None:
    archive = ChatArchive(url)
    for number in range(count):
        archive.append(
            "shared", [{"role": "user", "content": f"w{worker}-{number}", "uid": f"w{worker}-{number}"}]
        )
    archive.close()


def _save_with_version(url: str, worker: int, barrier: Any, results: Any) -> None:
    archive = ChatArchive(url)
    barrier.wait()
    try:
        archive.save(
            ChatDocument.from_openai([{"role": "user", "content": str(worker)}], chat_id="race"),
            expected_version=1,
        )
        results.put("won")
    except ConflictError:
        results.put("conflict")
    archive.close()


def test_concurrent_appends_lose_nothing(own_archive: tuple[ChatArchive, str]) -> None:
    archive, url = own_archive
    archive.save({"chat_id": "shared"})
    workers, count = 8, 50
    context = multiprocessing.get_context("spawn")
    processes = [context.Process(target=_append_many, args=(url, worker, count)) for worker in range(workers)]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    chat = archive.get("shared")
    uids = [message.uid for message in chat.messages]
    assert len(uids) == workers * count == len(set(uids))  # stored exactly once
    with archive.engine.connect() as connection:
        positions = (
            connection.execute(
                text("SELECT position FROM messages WHERE chat_id = 'shared' ORDER BY position")
            )
            .scalars()
            .all()
        )
    assert positions == list(range(workers * count))  # gapless
    for worker in range(workers):  # each writer's messages in the order it wrote them
        mine = [uid for uid in uids if uid.startswith(f"w{worker}-")]
        assert mine == [f"w{worker}-{number}" for number in range(count)]
    assert chat.version == 1 + workers * count


def test_concurrent_saves_have_one_winner(own_archive: tuple[ChatArchive, str]) -> None:
    archive, url = own_archive
    archive.save({"chat_id": "race"})
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(6), context.Queue()
    processes = [
        context.Process(target=_save_with_version, args=(url, worker, barrier, results))
        for worker in range(6)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
    outcomes = sorted(results.get(timeout=5) for _ in processes)
    assert outcomes == ["conflict"] * 5 + ["won"]
    assert archive.get("race").version == 2


def _while_a_transaction_waits(archive: ChatArchive, first: Any, then: Any) -> Any:
    """Call ``first(repository)`` in a transaction, then ``then()`` in a thread,
    which waits for that transaction (its row or write lock); commit, and give
    what ``then()`` returned or raised."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(then())
        except ChatArchiveError as exc:
            outcome.append(exc)

    thread = threading.Thread(target=run)
    with archive.transaction() as repository:
        first(repository)
        thread.start()
        _wait_for_a_lock_wait(archive)
    thread.join(60)
    (result,) = outcome
    return result


def test_two_writers_creating_one_chat_both_succeed_the_later_winning(
    own_archive: tuple[ChatArchive, str],
) -> None:
    """A save replaces whatever is stored, also a chat another writer creates
    while this save runs (on PostgreSQL its insert waits for that writer's
    commit, then finds the chat there: before, a ConflictError)."""
    archive, _ = own_archive
    later = tool_chat("new", title="later")
    version = _while_a_transaction_waits(
        archive,
        lambda repository: repository.save(tool_chat("new", title="earlier")),
        lambda: archive.save(later),
    )
    assert version == 2
    stored = archive.get("new")
    assert (stored.title, stored.version) == ("later", 2)
    assert [message.uid for message in stored.messages] == [message.uid for message in later.messages]
    refused = _while_a_transaction_waits(  # expected_version=0, "must not exist yet", still holds
        archive,
        lambda repository: repository.save(tool_chat("newer")),
        lambda: archive.save(tool_chat("newer", title="second"), expected_version=0),
    )
    assert isinstance(refused, ConflictError)
    assert "'newer' is at version 1, not 0" in str(refused)
    assert archive.get("newer").title is None


@pytest.mark.parametrize("how", ["transaction", "archive", "on_error", "writers"])
def test_a_batch_that_loses_a_race_replaces_the_chat_created_meanwhile(
    own_archive: tuple[ChatArchive, str], how: str
) -> None:
    """save_many whose batch collides with a chat that another writer creates
    while the batch is written (on PostgreSQL: its COPY waits for that writer's
    commit, then fails on the key) writes the batch again, which finds the chat
    and replaces it, as save does; before, a ConflictError (or, with on_error,
    the chats one at a time)."""
    archive, _ = own_archive
    docs = [tool_chat(f"batch-{n}", title="loaded") for n in range(4)]
    errors: list[tuple[int, ChatArchiveError]] = []

    def load() -> int:
        if how == "transaction":  # strict: one transaction
            with archive.transaction() as repository:
                return repository.save_many(docs, batch_size=2)
        if how == "on_error":  # as the CLI import
            return archive.save_many(docs, on_error=lambda index, error: errors.append((index, error)))
        return archive.save_many(docs, batch_size=2, writers=2 if how == "writers" else 1)

    saved = _while_a_transaction_waits(
        archive, lambda repository: repository.save(tool_chat("batch-1", title="first")), load
    )
    assert (saved, errors) == (4, [])
    stored = archive.get_many([doc.chat_id for doc in docs])
    assert [(doc.title, doc.version) for doc in stored] == [
        ("loaded", 1),
        ("loaded", 2),
        ("loaded", 1),
        ("loaded", 1),
    ]
    assert [[m.uid for m in doc.messages] for doc in stored] == [
        [m.uid for m in doc.messages] for doc in docs
    ]


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


def test_feedback_and_appends_do_not_block_each_other(own_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = own_archive
    archive.save(tool_chat("busy"))
    errors: list[BaseException] = []

    def feedback() -> None:
        try:
            for number in range(40):
                archive.add_feedback("busy", {"score": number % 3 - 1})
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    thread = threading.Thread(target=feedback)
    thread.start()
    for number in range(40):
        archive.append("busy", [{"role": "user", "content": str(number)}])
    thread.join(60)
    assert not errors
    chat = archive.get("busy")
    assert (len(chat.messages), len(chat.feedback), chat.version) == (45, 40, 81)


def test_reads_do_not_wait_for_an_open_write(own_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = own_archive
    archive.save(tool_chat("open"))
    with archive.transaction() as repository:
        repository.append("open", [{"role": "user", "content": "not yet committed"}])
        # Another connection, same thread: it would deadlock if reads queued for the write lock.
        assert len(archive.get("open").messages) == 5
        assert [summary.chat_id for summary in archive.list_chats().items] == ["open"]
    assert len(archive.get("open").messages) == 6


def test_a_purge_keeps_whole_a_chat_appended_to_meanwhile(own_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = own_archive
    long_ago = datetime(2026, 1, 1, tzinfo=UTC)
    archive.save_many([tool_chat(f"old{n}", updated_at=long_ago) for n in range(3)])
    purged: list[int] = []
    purge = threading.Thread(
        target=lambda: purged.append(archive.delete_older_than(long_ago + timedelta(days=1), batch_size=1))
    )
    with archive.transaction() as repository:
        # Brings old1 past the cutoff, once committed; meanwhile the purge reaches old1 and waits.
        repository.append("old1", [{"role": "user", "content": "still talking"}])
        purge.start()
        _wait_for_a_lock_wait(archive)
    purge.join(60)
    assert purged == [2]
    assert [message.content for message in archive.get("old1").messages][-2:] == [
        "It is 42.",
        "still talking",
    ]


def _wait_for_a_lock_wait(archive: ChatArchive) -> None:
    """Until another session of the archive's PostgreSQL database waits for a
    row lock (on SQLite, whose writers queue for the one write lock, a moment)."""
    if archive.engine.dialect.name != "postgresql":
        time.sleep(0.5)
        return
    with archive.engine.connect() as connection:
        for _ in range(600):
            waiting = connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
            if waiting:
                return
            connection.rollback()  # pg_stat_activity is read once a transaction: look again in a new one
            time.sleep(0.05)
    raise AssertionError("no other session waited for a lock")


def test_processes_forked_from_a_used_archive_get_their_own_connections(
    own_archive: tuple[ChatArchive, str],
) -> None:
    # As gunicorn --preload and multiprocessing's fork do: the pool holds a
    # connection when the processes fork, and each child goes on reading.
    archive, _ = own_archive
    archive.save(tool_chat("shared"))
    expected = archive.get("shared")
    children = []
    for _ in range(3):
        pid = os.fork()
        if pid == 0:  # pragma: no cover - the child reports by its exit status
            status = 1
            try:
                for _ in range(50):
                    assert archive.get("shared") == expected
                status = 0
            finally:
                os._exit(status)
        children.append(pid)
    outcomes: dict[int, int | str] = {}
    deadline = time.monotonic() + 60  # on one shared connection they could wait for each other forever
    while len(outcomes) < len(children) and time.monotonic() < deadline:
        for pid in children:
            done, status = (0, 0) if pid in outcomes else os.waitpid(pid, os.WNOHANG)
            if done:
                outcomes[pid] = os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    for pid in children:
        if pid not in outcomes:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            outcomes[pid] = "hung"
    assert [outcomes[pid] for pid in children] == [0, 0, 0]
    assert archive.get("shared") == expected  # and the parent's pooled connection still works


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
    original = writes.insert_messages
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
    with pytest.raises(RuntimeError):
        archive.append("kept", [{"role": "user", "content": "lost"}])
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
    assert archive.delete_user("gone") == 3
    with engine.connect() as connection:
        remaining = {
            name: connection.execute(
                text(f"SELECT count(*) FROM {name} WHERE chat_id LIKE 'c%'")
            ).scalar_one()
            for name in metadata.tables
        }
    assert set(remaining.values()) == {0}
    assert json.loads(archive.get("other").model_dump_json())["user_id"] == "stays"


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=20,
    ),
    st.sampled_from(["json", "jsonl", "broken"]),
)
def test_fuzz_the_cli_import_reports_instead_of_crashing(tmp_path: Path, data: Any, shape: str) -> None:
    from click.testing import CliRunner

    from chatarchive.cli import main

    database = tmp_path / "fuzz.db"
    path = tmp_path / f"input.{'jsonl' if shape == 'jsonl' else 'json'}"
    text = json.dumps(data, allow_nan=True)
    if shape == "jsonl":
        text = text + "\n" + json.dumps([data]) + "\n"
    elif shape == "broken":
        text = text[: len(text) // 2]
    path.write_text(text, encoding="utf-8")
    runner = CliRunner()
    url = f"sqlite:///{database}"
    if not database.exists():
        assert runner.invoke(main, ["--db", url, "db", "upgrade"]).exit_code == 0
    result = runner.invoke(main, ["--db", url, "import", str(path)])
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)


#: Set to 1 to let a test restart the local PostgreSQL server (every other
#: connection to it is dropped, other tests' included).
RESTART_OPT_IN = "CHATARCHIVE_TEST_RESTART_SERVER"


def _restart_local_server() -> None:
    import shutil
    import subprocess

    if os.environ.get(RESTART_OPT_IN) != "1":
        pytest.skip(f"restarts the shared PostgreSQL server: set {RESTART_OPT_IN}=1 to run it")
    clusters = sorted(Path("/etc/postgresql").glob("*/main")) if Path("/etc/postgresql").exists() else []
    if not shutil.which("pg_ctlcluster") or not clusters:
        pytest.skip("no local PostgreSQL cluster this test may restart (pg_ctlcluster)")
    version = clusters[-1].parent.name
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True, timeout=120
    )


def test_pooled_connections_recover_after_a_server_restart(pg_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = pg_archive
    archive.save(tool_chat("before"))
    assert archive.get("before").chat_id == "before"  # the pool now holds a connection
    _restart_local_server()
    # Reads recover on their own (a lost connection is retried once); writes too,
    # since every connection that sat idle through the restart is pinged first.
    assert archive.get("before").chat_id == "before"
    archive.save(tool_chat("after"))
    assert [c.chat_id for c in archive.list_chats().items] == ["after", "before"]


@pytest.mark.parametrize("scoped", [False, True])
def test_a_read_on_a_connection_the_server_dropped_is_retried(
    pg_archive: tuple[ChatArchive, str], monkeypatch: pytest.MonkeyPatch, scoped: bool
) -> None:
    archive, url = pg_archive
    archive.save(tool_chat("kept", user_id="u"))
    reader = archive.for_user("u") if scoped else archive
    # Never ping at checkout: the first attempt must meet the dropped connection.
    monkeypatch.setattr("chatarchive._backends.postgresql.PING_AFTER_IDLE", float("inf"))
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
