"""``chatarchive bench --citus URL``: a distributed archive against one server.

The same workload, in the same run, on the run's own PostgreSQL archive and on
an archive distributed over a Citus cluster (``URL``: a database of the
cluster's coordinator with the citus extension on every node and the workers
added, as a cluster's own tooling makes it; its chats are deleted after the
run). The two take turns: each load is timed on one then the other, each read
and append on one then the other for the same chat. Storage on Citus is
measured with its own size functions (the coordinator's tables are empty
shells).

- ``save_many``, one writer and two, on each;
- ``get`` of the workload's chats, ``append`` to a 10-message chat and
  ``list_chats`` of a user, median milliseconds on each;
- bytes per message on each.
"""

from __future__ import annotations

import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import URL, Engine, text

from chatarchive._api import ChatArchive
from chatarchive._backends.citus import DISTRIBUTED, REFERENCE
from chatarchive._document import ChatFilter

__all__ = ["measure_citus"]

Progress = Callable[[str, int, int], None]
_SHARDS = 32


def measure_citus(
    single: ChatArchive,
    url: URL,
    docs: Sequence[dict[str, Any]],
    *,
    runs: int,
    progress: Progress,
    samples: int = 200,
) -> dict[str, float | None]:
    """The figures above (``citus_*`` and ``single_*``); empties both archives after."""
    messages = sum(len(doc["messages"]) for doc in docs)
    figures: dict[str, float | None] = {}
    with ChatArchive(url) as distributed:
        distributed.upgrade()
        if distributed.count_chats():
            raise ValueError(f"the Citus archive at {url.render_as_string()} holds chats: give an empty one")
        distributed.distribute(shard_count=_SHARDS)
        archives = {"single": single, "citus": distributed}
        try:
            for writers in (1, 2):
                rates: dict[str, list[float]] = {name: [] for name in archives}
                for run in range(runs):
                    for name in archives if run % 2 == 0 else reversed(archives):
                        progress(f"citus: save_many, {writers} writer(s), {name}", run, runs)
                        _empty(archives[name].engine)
                        start = time.perf_counter()
                        archives[name].save_many(docs, writers=writers)
                        rates[name].append(messages / (time.perf_counter() - start))
                suffix = "" if writers == 1 else "_2_writers"
                for name, values in rates.items():
                    figures[f"{name}_save_many{suffix}"] = statistics.median(values)
            for name, archive in archives.items():
                figures[f"{name}_bytes_per_message"] = (
                    _bytes(archive.engine, citus=name == "citus") / messages
                )
            figures |= _reads(archives, docs, samples, progress)
        finally:
            for archive in archives.values():
                _empty(archive.engine)
    return figures


def _reads(
    archives: dict[str, ChatArchive], docs: Sequence[dict[str, Any]], samples: int, progress: Progress
) -> dict[str, float | None]:
    rng = random.Random(7)
    chat_ids = [rng.choice(docs)["chat_id"] for _ in range(samples)]
    users = sorted({doc["user_id"] for doc in docs})
    picks = [rng.choice(users) for _ in range(samples)]
    for archive in archives.values():
        archive.save({"chat_id": "bench-citus-append", "messages": list(docs[0]["messages"][:10])})
    calls: dict[str, Callable[[ChatArchive, int], object]] = {
        "get": lambda archive, index: archive.get(chat_ids[index]),
        "append": lambda archive, index: archive.append(
            "bench-citus-append", [{"role": "user", "content": "One more question about the assay."}]
        ),
        "list_chats": lambda archive, index: archive.list_chats(ChatFilter(user_id=picks[index]), limit=20),
    }
    figures: dict[str, float | None] = {}
    for operation, call in calls.items():
        timings: dict[str, list[float]] = {name: [] for name in archives}
        for index in range(samples + 10):  # the first ones warm the pools and caches up
            if index % 50 == 0:
                progress(f"citus: {operation}", index, samples + 10)
            for name in archives if index % 2 == 0 else reversed(archives):
                start = time.perf_counter()
                call(archives[name], index % samples)
                if index >= 10:
                    timings[name].append((time.perf_counter() - start) * 1000)
        for name, values in timings.items():
            figures[f"{name}_{operation}_median_ms"] = statistics.median(values)
    return figures


def _empty(engine: Engine) -> None:
    with engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {', '.join(DISTRIBUTED)}"))


def _bytes(engine: Engine, *, citus: bool) -> int:
    """The archive's tables and indexes on disk: on every worker, for a distributed archive."""
    size = "citus_total_relation_size" if citus else "pg_total_relation_size"
    with engine.connect() as connection:
        return sum(
            int(
                connection.execute(
                    text(f"SELECT {size}(CAST(:name AS regclass))"), {"name": name}
                ).scalar_one()
            )
            for name in [*DISTRIBUTED, *REFERENCE]
        )
