"""chatarchive bench with every figure it can measure, on both databases."""

from __future__ import annotations

import json

import pytest

from tests.support.commands import Run

pytestmark = pytest.mark.slow


def test_bench_streaming_figures(run: Run) -> None:
    args = ("bench", "--chats", "5", "--messages", "4", "--runs", "1", "--streaming", "--json")
    report = json.loads(run(*args).stdout)
    figures = report["figures"]
    for name in ("streaming_chunks_per_s", "append_chunk_at_10_ms", "append_chunk_at_10000_ms"):
        assert figures[name] > 0
    assert report["ratios"]["append_chunk at 10,000 / at 10 chunks"] > 0
