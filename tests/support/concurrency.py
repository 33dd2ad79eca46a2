"""Waiting, in a test, for another transaction to be waiting on a lock."""

from __future__ import annotations

import threading
import time
from typing import Any

from sqlalchemy import text

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
    with archive.transaction() as repository:
        first(repository)
        thread.start()
        wait_for_a_lock_wait(archive)
    thread.join(60)
    (result,) = outcome
    return result


def wait_for_a_lock_wait(archive: ChatArchive) -> None:
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
