"""Waiting, in a test, for another transaction to be waiting on a lock."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from sqlalchemy import event, text

from chatarchive import (
    ChatArchive,
    ChatArchiveError,
)


def while_a_transaction_waits(archive: ChatArchive, first: Any, then: Any) -> Any:
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
    with lock_waits(archive) as wait, archive.transaction() as repository:
        first(repository)
        thread.start()
        wait()
    thread.join(60)
    (result,) = outcome
    return result


@contextmanager
def lock_waits(archive: ChatArchive) -> Iterator[Callable[[], None]]:
    """A call that returns once another transaction of the archive waits for a
    lock: on PostgreSQL, once a session of the archive's own database waits
    for a lock (on Citus, a session on any node); on SQLite, whose writers queue for the one write lock, once
    another thread has begun a transaction that writes."""
    writing = threading.Event()
    here = threading.get_ident()

    def seen(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.startswith("BEGIN IMMEDIATE") and threading.get_ident() != here:
            writing.set()

    def wait() -> None:
        if archive.engine.dialect.name == "sqlite":
            assert writing.wait(60), "no other transaction began to write"
            return
        _wait_for_a_postgresql_lock_wait(archive)

    event.listen(archive.engine, "before_cursor_execute", seen)
    try:
        yield wait
    finally:
        event.remove(archive.engine, "before_cursor_execute", seen)


def _wait_for_a_postgresql_lock_wait(archive: ChatArchive) -> None:
    with archive.engine.connect() as connection:
        # On a Citus cluster the rows' locks are the workers': their sessions count.
        cluster = connection.execute(text("SELECT to_regclass('citus_stat_activity')")).scalar() is not None
        sessions = "citus_stat_activity" if cluster else "pg_stat_activity"
        connection.rollback()
        for _ in range(1200):
            waiting = connection.execute(
                text(
                    f"SELECT count(*) FROM {sessions} "
                    "WHERE datname = current_database() AND wait_event_type = 'Lock'"
                )
            ).scalar_one()
            if waiting:
                return
            connection.rollback()  # pg_stat_activity is read once a transaction: look again in a new one
            time.sleep(0.05)
    raise AssertionError("no other session waited for a lock")
