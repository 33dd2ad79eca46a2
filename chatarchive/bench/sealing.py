"""``chatarchive bench --keys``: what sealing users' chats with their keys
(``chatarchive.encryption``) costs ``save_many`` and ``get``.

The workload is loaded with ``save_many`` into emptied tables by an archive
without keys and by one with ``UserKeys`` (a master key), alternately,
``runs`` times each; then ``get`` of the same chats is timed on each (the
chats the keyed archive sealed, the others plain), alternating chat by chat.
"""

from __future__ import annotations

import os
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import Engine

from chatarchive._api import ChatArchive
from chatarchive.encryption import UserKeys

from .attachments import empty

__all__ = ["measure_sealing"]

Progress = Callable[[str, int, int], None]

#: Chats read by ``get`` in each archive.
READS = 300


def measure_sealing(
    archive: ChatArchive, engine: Engine, docs: Sequence[dict[str, Any]], *, runs: int, progress: Progress
) -> dict[str, float | None]:
    """``save_many`` (messages a second) and ``get`` (median ms) without and with keys."""
    sealed = ChatArchive(engine=engine, keys=UserKeys(master_key=os.urandom(32)))
    messages = sum(len(doc["messages"]) for doc in docs)
    rates: dict[bool, list[float]] = {False: [], True: []}
    for run in range(runs):
        for keyed in (False, True):
            progress(f"save_many {'sealed' if keyed else 'plain'}", run, runs)
            empty(engine)
            start = time.perf_counter()
            (sealed if keyed else archive).save_many(docs)
            rates[keyed].append(messages / (time.perf_counter() - start))
    # Half the chats sealed, half plain, each read by the archive that wrote it.
    empty(engine)
    half = len(docs) // 2
    archive.save_many(docs[:half])
    sealed.save_many(docs[half:])
    rng = random.Random(7)
    plain_ids = [doc["chat_id"] for doc in rng.sample(list(docs[:half]), min(READS, half))]
    sealed_ids = [doc["chat_id"] for doc in rng.sample(list(docs[half:]), min(READS, len(docs) - half))]
    timings: dict[bool, list[float]] = {False: [], True: []}
    for plain_id, sealed_id in zip(plain_ids, sealed_ids, strict=False):
        for keyed, chat_id in ((False, plain_id), (True, sealed_id)):
            start = time.perf_counter()
            (sealed if keyed else archive).get(chat_id)
            timings[keyed].append((time.perf_counter() - start) * 1000)
    empty(engine)
    sealed.close()
    return {
        "sealing_plain_save_many": statistics.median(rates[False]),
        "sealing_sealed_save_many": statistics.median(rates[True]),
        "sealing_plain_get_median_ms": statistics.median(timings[False]),
        "sealing_sealed_get_median_ms": statistics.median(timings[True]),
    }
