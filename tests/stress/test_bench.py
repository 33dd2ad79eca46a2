"""chatarchive bench with every figure it can measure, on both databases."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from chatarchive import ChatArchive, register_embedder
from chatarchive.bench.frameworks import FRAMEWORKS
from tests.support.commands import Run, invoke
from tests.support.databases import citus_database, throwaway_database
from tests.support.embedders import DIMENSION, meanings

pytestmark = pytest.mark.slow


def test_bench_streaming_figures(run: Run) -> None:
    args = ("bench", "--chats", "5", "--messages", "4", "--runs", "1", "--streaming", "--json")
    report = json.loads(run(*args).stdout)
    figures = report["figures"]
    for name in ("streaming_chunks_per_s", "append_chunk_at_10_ms", "append_chunk_at_10000_ms"):
        assert figures[name] > 0
    assert report["ratios"]["append_chunk at 10,000 / at 10 chunks"] > 0


def test_bench_plays_chats_into_each_framework_and_its_own_store(run: Run, dialect: str) -> None:
    args = ("bench", "--chats", "6", "--messages", "8", "--runs", "1", "--frameworks", "3", "--json")
    report = json.loads(run(*args).stdout)
    figures, ratios = report["figures"], report["ratios"]
    for framework in ("langchain", "openai_agents", "llama_index"):
        # A pass with each way of indexing: sync (the default), then deferred.
        for name in (framework, f"{framework}_deferred"):
            if dialect == "sqlite":  # the peer stores are PostgreSQL's
                assert figures[f"{name}_archive_add_median_ms"] is None
                continue
            for side in ("archive", "peer"):
                for operation in ("add", "get"):
                    assert figures[f"{name}_{side}_{operation}_median_ms"] > 0
                    assert (
                        figures[f"{name}_{side}_{operation}_median_ms"]
                        <= figures[f"{name}_{side}_{operation}_p95_ms"]
                    )
            assert figures[f"{name}_archive_exact_chats"] == 3
        if dialect != "sqlite":
            assert ratios[f"{framework} add per turn, median / {FRAMEWORKS[framework][0]}"] > 0
            assert (
                ratios[f"{framework} add per turn, deferred indexing, median / {FRAMEWORKS[framework][0]}"]
                > 0
            )


def test_bench_measures_indexing_and_search_at_scale(run: Run, dialect: str) -> None:
    args = ("bench", "--chats", "6", "--messages", "8", "--runs", "1", "--search", "2000", "--json")
    figures = json.loads(run(*args).stdout)["figures"]
    if dialect == "sqlite":  # measured against what PostgreSQL itself does
        assert "append_1000_deferred_median_ms" not in figures
        return
    for name in ("append_1000_sync", "append_1000_deferred", "bare_insert"):
        assert 0 < figures[f"{name}_median_ms"] <= figures[f"{name}_p95_ms"]
    for mode in ("sync", "deferred"):  # the appends' tail
        assert 0 < figures[f"append_{mode}_p99_ms"] <= figures[f"append_{mode}_p999_ms"]
        assert figures[f"append_{mode}_p999_ms"] <= figures[f"append_{mode}_max_ms"]
        assert isinstance(figures[f"append_{mode}_over_20x_median"], int)
    assert 0 < figures["index_lag_median_ms"] <= figures["index_lag_p95_ms"] <= figures["index_lag_max_ms"]
    assert 2000 <= figures["scale_messages"] < 2200  # whole chats of about 20 messages
    # The server has pgvector (CI installs it): the catch-up writes each message's vector too.
    assert figures["scale_index_catch_up_with_vectors_messages_per_s"] > 0
    assert figures["scale_vector_index_build_vectors_per_s"] > 0
    for kind in ("common", "rare"):
        for mode in ("", "vector_", "hybrid_"):
            assert (
                0
                < figures[f"scale_search_{mode}{kind}_p50_ms"]
                <= figures[f"scale_search_{mode}{kind}_p95_ms"]
            )
    assert 0.5 <= figures["scale_vector_recall_at_10"] <= 1
    # The wider scan an operator can set, measured in the same run.
    assert 0.5 <= figures["scale_wide_vector_recall_at_10"] <= 1
    for kind in ("common", "rare"):
        for mode in ("vector_", "hybrid_"):
            assert (
                0
                < figures[f"scale_search_wide_{mode}{kind}_p50_ms"]
                <= figures[f"scale_search_wide_{mode}{kind}_p95_ms"]
            )
    assert (
        0.8 * figures["scale_messages"] < figures["scale_vectors"] < figures["scale_messages"]
    )  # those with text
    per_vector = figures["scale_messages"] / figures["scale_vectors"]
    # 384 numbers of 4 bytes, and the row's own
    assert 384 * 4 < per_vector * figures["scale_vectors_bytes_per_message"] < 2 * 384 * 4
    assert per_vector * figures["scale_vector_index_bytes_per_message"] > 384 * 2  # half precision, and links
    assert figures["scale_shared_buffers_mb"] > 0
    assert figures["scale_terms_bytes_per_message"] > figures["scale_terms_index_bytes_per_message"] > 0
    assert figures["ingest_save_many_deferred"] > 0
    assert figures["ingest_validate_and_convert"] > 0
    assert figures["ingest_bulk_onto_loaded"] > 0


def test_bench_measures_search_by_meaning_with_an_embedder_it_is_given(run: Run, dialect: str) -> None:
    """``--embedder`` replaces the bench's synthetic vectors with a model's (here
    the tests' own, of 32 numbers); ``--vector-scan`` is the archive's setting
    while it searches."""
    register_embedder(meanings("bench-meanings"))
    small = ("bench", "--chats", "4", "--messages", "4", "--runs", "1", "--json")
    assert "apply to --search" in run(*small, "--embedder", "bench-meanings", expect=2).stderr
    assert (
        "no embedder named 'nowhere'"
        in run(*small, "--search", "500", "--embedder", "nowhere", expect=2).stderr
    )
    if dialect == "sqlite":  # --search measures against what PostgreSQL itself does
        return
    args = ("--search", "2000", "--embedder", "bench-meanings", "--vector-scan", "50")
    report = json.loads(run(*small, *args).stdout)
    figures = report["figures"]
    assert report["search_embedder"] == "bench-meanings"
    assert figures["scale_vector_dimension"] == DIMENSION
    assert figures["scale_vector_scan"] == 50
    assert 0.5 <= figures["scale_vector_recall_at_10"] <= 1
    per_vector = figures["scale_messages"] / figures["scale_vectors"]
    assert DIMENSION * 4 < per_vector * figures["scale_vectors_bytes_per_message"] < 2 * 384 * 4
    for kind in ("common", "rare"):
        assert (
            0 < figures[f"scale_search_hybrid_{kind}_p50_ms"] <= figures[f"scale_search_hybrid_{kind}_p95_ms"]
        )


def test_bench_compares_a_distributed_archive_with_one_server(tmp_path: Path) -> None:
    with citus_database() as citus, throwaway_database("postgresql", tmp_path) as single:
        target = citus.render_as_string(hide_password=False)
        args = ("bench", "--chats", "8", "--messages", "6", "--runs", "1", "--citus", target, "--json")
        report = json.loads(invoke(single.render_as_string(hide_password=False), *args).stdout)
        with ChatArchive(citus) as left:
            assert left.count_chats() == 0  # emptied after the run
            assert left.distribution().shard_count == 32
    figures, ratios = report["figures"], report["ratios"]
    for side in ("single", "citus"):
        for name in (
            "save_many",
            "save_many_2_writers",
            "get_median_ms",
            "append_median_ms",
            "list_chats_median_ms",
        ):
            assert figures[f"{side}_{name}"] > 0
        assert figures[f"{side}_bytes_per_message"] > 100  # measured on the workers, not the empty shells
    for label in (
        "save_many",
        "save_many, 2 writers",
        "get, median",
        "append, median",
        "list_chats, median",
        "storage",
    ):
        assert ratios[f"Citus / one server: {label}"] > 0
    assert ratios["Citus: save_many, 2 writers / 1 writer"] > 0
