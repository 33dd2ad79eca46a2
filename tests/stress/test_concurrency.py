"""Writers, readers and streams at once, in threads, tasks and processes: nothing lost, nothing blocked."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import signal
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    ChatArchiveError,
    ChatDocument,
    ConflictError,
)
from tests.support.chats import tool_chat
from tests.support.concurrency import lock_waits, while_a_transaction_waits

pytestmark = pytest.mark.slow


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


def _regenerate(url: str, worker: int, barrier: Any, count: int) -> None:
    archive = ChatArchive(url)
    barrier.wait()
    for number in range(count):
        archive.regenerate("tree", "a0", [{"role": "assistant", "content": f"w{worker}-{number}"}])
    archive.close()


def test_regenerations_of_one_message_at_once_all_land_as_siblings(
    own_archive: tuple[ChatArchive, str],
) -> None:
    archive, url = own_archive
    archive.save(
        {
            "chat_id": "tree",
            "messages": [{"role": "user", "content": "q", "uid": "q"}, {"role": "assistant", "uid": "a0"}],
        }
    )
    workers, count = 4, 10
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(workers)
    processes = [
        context.Process(target=_regenerate, args=(url, worker, barrier, count)) for worker in range(workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    tree = archive.get_tree("tree")
    answers = tree.children("q")
    assert len(answers) == 1 + workers * count  # every regeneration, a sibling of the first answer
    contents = [str(message.content) for message in answers[1:]]
    assert sorted(contents) == sorted(f"w{w}-{n}" for w in range(workers) for n in range(count))
    with archive.engine.connect() as connection:
        rows = connection.execute(
            text(
                "SELECT sibling_index, on_path FROM messages WHERE chat_id = 'tree' AND position > 0 ORDER BY position"
            )
        ).all()
    assert [row.sibling_index for row in rows] == list(range(len(answers)))  # numbered in order, no two alike
    assert [row.on_path for row in rows].count(True) == 1
    assert tree.active_leaf == answers[-1].uid  # the last one written is shown
    assert archive.get("tree").messages[-1].uid == answers[-1].uid
    assert archive.get("tree").version == 1 + workers * count


def _move_leaf(url: str, leaf: str, version: int, barrier: Any, results: Any) -> None:
    archive = ChatArchive(url)
    barrier.wait()
    try:
        results.put(("moved", leaf, archive.set_active_leaf("tree", leaf, expected_version=version)))
    except ConflictError:
        results.put(("conflict", leaf, None))
    archive.close()


def test_moves_of_the_active_leaf_at_once_are_serialized_by_version(
    own_archive: tuple[ChatArchive, str],
) -> None:
    archive, url = own_archive
    archive.save(
        {
            "chat_id": "tree",
            "messages": [{"role": "user", "content": "q", "uid": "q"}]
            + [{"role": "assistant", "content": f"a{n}", "uid": f"a{n}", "parent": "q"} for n in range(6)],
            "active_leaf": "q",
        }
    )
    version = archive.get("tree").version
    assert version is not None
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(6), context.Queue()
    processes = [
        context.Process(target=_move_leaf, args=(url, f"a{n}", version, barrier, results)) for n in range(6)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join(120)
        assert process.exitcode == 0
    outcomes = [results.get(timeout=5) for _ in processes]
    moved = [outcome for outcome in outcomes if outcome[0] == "moved"]
    assert len(moved) == 1  # one move won; the others saw a stale version
    (_, winner, new_version) = moved[0]
    assert new_version == version + 1
    tree = archive.get_tree("tree")
    assert tree.active_leaf == winner
    assert [m.uid for m in tree.messages] == ["q"] + [f"a{n}" for n in range(6)]  # no branch lost


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


def test_two_writers_creating_one_chat_both_succeed_the_later_winning(
    own_archive: tuple[ChatArchive, str],
) -> None:
    """A save replaces whatever is stored, also a chat another writer creates
    while this save runs (on PostgreSQL its insert waits for that writer's
    commit, then finds the chat there: before, a ConflictError)."""
    archive, _ = own_archive
    later = tool_chat("new", title="later")
    version = while_a_transaction_waits(
        archive,
        lambda repository: repository.save(tool_chat("new", title="earlier")),
        lambda: archive.save(later),
    )
    assert version == 2
    stored = archive.get("new")
    assert (stored.title, stored.version) == ("later", 2)
    assert [message.uid for message in stored.messages] == [message.uid for message in later.messages]
    refused = while_a_transaction_waits(  # expected_version=0, "must not exist yet", still holds
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

    saved = while_a_transaction_waits(
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
    with lock_waits(archive) as wait, archive.transaction() as repository:
        # Brings old1 past the cutoff, once committed; meanwhile the purge reaches old1 and waits.
        repository.append("old1", [{"role": "user", "content": "still talking"}])
        purge.start()
        wait()
    purge.join(60)
    assert purged == [2]
    assert [message.content for message in archive.get("old1").messages][-2:] == [
        "It is 42.",
        "still talking",
    ]


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


def test_a_hundred_concurrent_streams_in_one_event_loop(own_archive: tuple[ChatArchive, str]) -> None:
    archive, url = own_archive
    streams, chunks = 100, 20

    async def stream(aarchive: AsyncChatArchive, number: int) -> None:
        chat_id = f"stream-{number}"
        await aarchive.save({"chat_id": chat_id, "messages": [{"role": "user", "content": "go"}]})
        answer = await aarchive.begin_message(chat_id)
        for piece in range(chunks):
            await aarchive.append_chunk(chat_id, answer.uid, f"{piece},")
        await aarchive.complete_message(chat_id, answer.uid, finish_reason="stop")

    async def run_all() -> float:
        async with AsyncChatArchive(url, pool_size=20) as aarchive:
            start = time.perf_counter()
            await asyncio.gather(*(stream(aarchive, number) for number in range(streams)))
            return time.perf_counter() - start

    elapsed = asyncio.run(run_all())
    expected = "".join(f"{piece}," for piece in range(chunks))
    documents = archive.get_many([f"stream-{number}" for number in range(streams)])
    assert len(documents) == streams
    assert all(doc.messages[1].content == expected and doc.messages[1].completed for doc in documents)
    print(f"\n{streams * chunks} chunks in {elapsed:.2f} s: {streams * chunks / elapsed:.0f} chunks/s")


def _write_to_users_chats(url: str, worker: int, seconds: float, errors: Any) -> None:
    """Append to and give feedback on user u's chats, whichever exist, until the time is up."""
    archive = ChatArchive(url)
    deadline = time.monotonic() + seconds
    number = 0
    while time.monotonic() < deadline:
        chat_id = f"u-{(worker * 7 + number) % 6}"
        number += 1
        try:
            (message,) = archive.append(chat_id, [{"role": "user", "content": f"w{worker} {number}"}])
            archive.add_feedback(chat_id, {"score": 1, "message_uid": message.uid})
        except ChatArchiveError as exc:
            if "not found" not in str(exc):  # erased meanwhile: as expected
                errors.put(f"{type(exc).__name__}: {exc}")
    archive.close()


def test_erasing_a_user_while_others_write_to_the_users_chats_never_deadlocks(
    server_archive: tuple[ChatArchive, str],
) -> None:
    """delete_user locks the user's chats in id order before it deletes any of
    their rows: the appends and feedback that hold one chat each make it wait,
    never deadlock with it."""
    archive, url = server_archive
    seconds = 4.0
    context = multiprocessing.get_context("spawn")
    errors = context.Queue()
    writers = [
        context.Process(target=_write_to_users_chats, args=(url, worker, seconds, errors))
        for worker in range(3)
    ]
    for writer in writers:
        writer.start()
    erased = 0
    deadline = time.monotonic() + seconds
    failures: list[str] = []
    while time.monotonic() < deadline:
        archive.save_many(tool_chat(f"u-{number}", user_id="u") for number in range(6))
        try:
            erased += archive.delete_user("u")
        except ChatArchiveError as exc:
            failures.append(f"{type(exc).__name__}: {exc}")
    for writer in writers:
        writer.join()
    while not errors.empty():
        failures.append(errors.get())
    assert failures == []
    assert erased > 0
