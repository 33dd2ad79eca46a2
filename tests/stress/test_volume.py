"""Inputs larger than a batch, a statement or memory would hold at once."""

from __future__ import annotations

import json
import random
import tracemalloc
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from chatarchive import (
    ChatArchive,
    InvalidDocument,
)
from chatarchive.bench.runner import _peak_rss_of
from chatarchive.bench.workload import chatgpt_conversation, chatgpt_export, generate_chats

pytestmark = pytest.mark.slow


def test_memory_stays_bounded_on_a_large_generator(own_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = own_archive  # a database of its own: what these write would slow the next tests

    def peak(chats: int) -> int:
        tracemalloc.start()
        try:
            archive.save_many(generate_chats(chats, 10, seed=chats), batch_size=50)
            return tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()

    peak(200)  # warm up: statement caches, prepared statements, imports
    small, large = peak(200), peak(1600)  # eight times the input
    assert large < 2 * small, (small, large)  # linear growth would be 8x


def test_a_batch_of_ten_thousand_chats_replaces_them(own_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = own_archive  # a database of its own: what these write would slow the next tests
    # Above 65,535 ids, PostgreSQL refused the batch's lookup with a bare database error.
    docs = [{"chat_id": f"c{n}", "messages": []} for n in range(10_000)]
    assert archive.save_many(docs, batch_size=10_000) == 10_000
    assert archive.save_many(docs, batch_size=10_000) == 10_000
    assert archive.count_chats() == 10_000


def test_an_append_of_more_messages_than_a_statement_takes_parameters(
    own_archive: tuple[ChatArchive, str],
) -> None:
    archive, _ = own_archive  # a database of its own: what these write would slow the next tests
    # Its uids are checked against the chat's; 70,000 of them in one IN (...) were a database error.
    archive.save({"chat_id": "long", "messages": [{"role": "user", "content": "x", "uid": "last"}]})
    many = [{"role": "user", "content": "x", "uid": f"u{n}"} for n in range(70_000)]
    with pytest.raises(InvalidDocument, match="'last' is already in the chat") as raised:
        archive.append("long", [*many, {"role": "user", "content": "x", "uid": "last"}])
    assert raised.value.message_index == 70_000
    archive.append("long", many)
    assert archive.get("long").messages[-1].uid == "u69999"


#: What an import holds besides the chats it reads: the batches in flight
#: (four, each at most BATCH_BYTES of text, as Python objects). The documented bound.
IMPORT_MEMORY_CONSTANT = 64 * 2**20


def _long_conversation() -> Iterator[dict[str, Any]]:
    """A 5 MB export, and in the middle one conversation of 6,000 short
    messages (about 10 MB): Python objects, not text, are most of its size."""
    small = list(chatgpt_export(5, seed=2))
    yield from small[: len(small) // 2]
    yield chatgpt_conversation(random.Random(3), 10**6, 6000)
    yield from small[len(small) // 2 :]


@pytest.mark.parametrize(
    "conversations",
    [lambda: chatgpt_export(30, seed=1), _long_conversation],
    ids=["30-mb-export", "one-conversation-of-6000-messages"],
)
def test_import_memory_is_bounded_by_bytes_not_by_chats(
    tmp_path: Path, conversations: Callable[[], Iterable[dict[str, Any]]]
) -> None:
    """An export (one JSON list on one line) imports within the process's
    baseline, the batches in flight, and three times its largest chat: 250
    chats a batch held every conversation of an export in memory, and a long
    conversation was held two or three times over while it was read."""
    largest = 0
    export = tmp_path / "conversations.json"
    with export.open("w", encoding="utf-8") as out:
        out.write("[")
        for number, conversation in enumerate(conversations()):
            line = json.dumps(conversation)
            largest = max(largest, len(line))
            out.write(("," if number else "") + line)
        out.write("]")
    tiny = tmp_path / "tiny.json"
    tiny.write_text('{"chat_id": "tiny", "messages": []}', encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'import.db'}"
    with ChatArchive(url) as archive:
        archive.upgrade()
    baseline = _peak_rss_of(["--db", url, "import", str(tiny)])
    peak = _peak_rss_of(["--db", url, "import", str(export)])
    assert peak - baseline <= IMPORT_MEMORY_CONSTANT + 3 * largest, (baseline, peak, largest)
    with ChatArchive(url) as archive:
        assert archive.count_chats() > 100
