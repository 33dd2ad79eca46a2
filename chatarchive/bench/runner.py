"""``chatarchive bench``: chatarchive's speed, measured against the database's own limits.

Like ``pgbench`` for this schema: a deterministic synthetic workload is loaded
and read in one run, and every figure is reported next to a reference measured
in that same run (raw ``COPY`` of the same rows, JSONB-blob designs, hand-written
queries), so that the ratios, not the machine, are what is compared.
"""

from __future__ import annotations

import asyncio
import gc
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import tracemalloc
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import URL, Engine, make_url, text

from chatarchive._api import AsyncChatArchive, ChatArchive
from chatarchive._backends import backend_of
from chatarchive._backends.postgresql import bare_connection, copy_prepared, copy_values
from chatarchive._document import ChatDocument, ChatFilter
from chatarchive._embeddings import Embedder
from chatarchive._engine import create_engine, database_url
from chatarchive._repository.searching import texts_of
from chatarchive._rows import ChatRows, document_to_rows
from chatarchive._schema import SEARCH_TERMS, metadata
from chatarchive._terms import SearchSettings, Tokenizer
from chatarchive.formats import export

from .attachments import measure_attachments
from .citus import measure_citus
from .frameworks import FRAMEWORKS, INDEXING_PASSES, available, measure_frameworks
from .sealing import measure_sealing
from .search import measure_search
from .workload import chatgpt_export, generate_chats, search_terms

__all__ = ["BenchReport", "run_bench"]

Progress = Callable[[str, int, int], None]  # (phase, done, total)

#: The tables a run fills (the archive's settings stay as they are).
_TABLES = [table.name for table in metadata.sorted_tables if table.name != "archive_settings"]
#: The reference designs' schema and tables (PostgreSQL), dropped after the run.
_PK_ONLY, _JSONB_DOCS, _JSONB_HISTORY = "bench_pk_only", "bench_jsonb_docs", "bench_jsonb_history"
#: langchain-postgres's table, when that package is installed.
_LANGCHAIN_HISTORY = "bench_langchain_history"


#: The figures ``--citus`` measures on both archives: label -> figure.
_CITUS_FIGURES = {
    "save_many": "save_many",
    "save_many, 2 writers": "save_many_2_writers",
    "get, median": "get_median_ms",
    "append, median": "append_median_ms",
    "list_chats, median": "list_chats_median_ms",
    "storage": "bytes_per_message",
}


@dataclass
class BenchReport:
    """Every figure of one run; ``None`` where the database does not apply."""

    database: str
    chats: int
    messages: int
    tool_calls: int
    runs: int
    figures: dict[str, float | None] = field(default_factory=dict)
    #: The embedder of ``--search``'s vectors when one was given (``None``: the bench's own).
    search_embedder: str | None = None

    def ratio(self, numerator: str, denominator: str) -> float | None:
        top, bottom = self.figures.get(numerator), self.figures.get(denominator)
        return None if top is None or not bottom else top / bottom

    def ratios(self) -> dict[str, float | None]:
        return {
            "save_many / raw COPY (own schema)": self.ratio("ingest_save_many", "ingest_raw_copy_own"),
            "save_many / raw COPY (own schema), no search index": self.ratio(
                "ingest_save_many_no_search_index", "ingest_raw_copy_own_no_search_index"
            ),
            "save_many, no search index / JSONB row per message": self.ratio(
                "ingest_save_many_no_search_index", "ingest_jsonb_per_message"
            ),
            "save_many / JSONB row per message": self.ratio("ingest_save_many", "ingest_jsonb_per_message"),
            "save_many, 2 writers / 1 writer": self.ratio("ingest_save_many_2_writers", "ingest_save_many"),
            "save_many, asyncio / sync": self.ratio("ingest_save_many_asyncio", "ingest_save_many"),
            "save_many, asyncio / sync, no search index": self.ratio(
                "ingest_save_many_asyncio_no_search_index", "ingest_save_many_no_search_index"
            ),
            "save_many, 2 writers / JSONB row per message": self.ratio(
                "ingest_save_many_2_writers", "ingest_jsonb_per_message"
            ),
            "save_many, 2 writers, no search index / JSONB row per message": self.ratio(
                "ingest_save_many_2_writers_no_search_index", "ingest_jsonb_per_message"
            ),
            "2 writers without the search index, then building it / save_many": self.ratio(
                "ingest_2_writers_then_search_index", "ingest_save_many"
            ),
            "bulk / raw COPY (primary keys only)": self.ratio("ingest_bulk", "ingest_raw_copy_pk_only"),
            "bulk, no search index / raw COPY (primary keys only)": self.ratio(
                "ingest_bulk_no_search_index", "ingest_raw_copy_pk_only"
            ),
            "JSONB doc per chat / raw COPY (primary keys only)": self.ratio(
                "ingest_jsonb_per_chat", "ingest_raw_copy_pk_only"
            ),
            "get / hand-written 4-query read": self.ratio("get_median_ms", "get_by_hand_median_ms"),
            "append at 1,000 / append at 10 messages": self.ratio(
                "append_1000_median_ms", "append_10_median_ms"
            ),
            "append at 1,000 / at 10 messages, 100 sibling branches": self.ratio(
                "append_1000_branched_median_ms", "append_10_branched_median_ms"
            ),
            "regenerate at 1,000 / at 10 messages, 100 sibling branches": self.ratio(
                "regenerate_1000_median_ms", "regenerate_10_median_ms"
            ),
            "get, 1,000 messages and 100 branches / the same path without branches": self.ratio(
                "get_branched_1000_median_ms", "get_linear_1000_median_ms"
            ),
            "storage / JSONB doc per chat": self.ratio("bytes_per_message", "bytes_per_message_jsonb_doc"),
            "storage with repeated images, attachments stored once / inline": self.ratio(
                "attachments_once_bytes_per_message", "attachments_inline_bytes_per_message"
            ),
            "save_many with repeated images, attachments stored once / inline": self.ratio(
                "attachments_once_save_many", "attachments_inline_save_many"
            ),
            "save_many, chats sealed with their users' keys / plain": self.ratio(
                "sealing_sealed_save_many", "sealing_plain_save_many"
            ),
            "save_many, chats sealed with their users' keys / plain without the search index": self.ratio(
                "sealing_sealed_save_many", "ingest_save_many_no_search_index"
            ),
            "get, a chat sealed with its user's key / plain": self.ratio(
                "sealing_sealed_get_median_ms", "sealing_plain_get_median_ms"
            ),
            "storage, no search index / JSONB doc per chat": self.ratio(
                "bytes_per_message_no_search_index", "bytes_per_message_jsonb_doc"
            ),
            "append_chunk at 10,000 / at 10 chunks": self.ratio(
                "append_chunk_at_10000_ms", "append_chunk_at_10_ms"
            ),
            "tokenizer / its path in Python, new": self.ratio(
                "tokenizer_new_texts_per_s", "tokenizer_in_python_new_texts_per_s"
            ),
            "tokenizer / its path in Python, words known": self.ratio(
                "tokenizer_known_texts_per_s", "tokenizer_in_python_known_texts_per_s"
            ),
            "save_many / langchain-postgres add_messages": self.ratio(
                "ingest_save_many", "ingest_langchain_postgres"
            ),
            "save_many, sync indexing / raw COPY (own schema), no search index": self.ratio(
                "ingest_save_many", "ingest_raw_copy_own_no_search_index"
            ),
            "index catch-up / save_many": self.ratio("ingest_index_catch_up", "ingest_save_many"),
            "save_many, deferred indexing / raw COPY (own schema), no search index": self.ratio(
                "ingest_save_many_deferred", "ingest_raw_copy_own_no_search_index"
            ),
            "save_many, deferred indexing / save_many, no search index": self.ratio(
                "ingest_save_many_deferred", "ingest_save_many_no_search_index"
            ),
            "validating and converting alone / raw COPY (own schema), no search index": self.ratio(
                "ingest_validate_and_convert", "ingest_raw_copy_own_no_search_index"
            ),
            "save_many, deferred indexing / validating and converting alone": self.ratio(
                "ingest_save_many_deferred", "ingest_validate_and_convert"
            ),
            "bulk onto a loaded archive / bulk into an empty one": self.ratio(
                "ingest_bulk_onto_loaded", "ingest_bulk"
            ),
            "append at 1,000, deferred indexing / bare insert, median": self.ratio(
                "append_1000_deferred_median_ms", "bare_insert_median_ms"
            ),
            "append at 1,000, deferred indexing / bare insert, p95": self.ratio(
                "append_1000_deferred_p95_ms", "bare_insert_p95_ms"
            ),
            "append at 1,000, sync indexing / bare insert, median": self.ratio(
                "append_1000_sync_median_ms", "bare_insert_median_ms"
            ),
            "append at 1,000, sync indexing / bare insert, p95": self.ratio(
                "append_1000_sync_p95_ms", "bare_insert_p95_ms"
            ),
            "index catch-up / save_many, deferred indexing, 2 writers, at scale": self.ratio(
                "scale_index_catch_up_messages_per_s", "scale_save_many_deferred_2_writers_messages_per_s"
            ),
            "index catch-up with vectors / save_many, deferred indexing, 2 writers, at scale": self.ratio(
                "scale_index_catch_up_with_vectors_messages_per_s",
                "scale_save_many_deferred_2_writers_messages_per_s",
            ),
            "search at scale, common / rare words, p50": self.ratio(
                "scale_search_common_p50_ms", "scale_search_rare_p50_ms"
            ),
            **{
                f"search at scale, {mode} / keyword, {kind} words, {statistic}": self.ratio(
                    f"scale_search_{mode}_{kind}_{statistic}_ms", f"scale_search_{kind}_{statistic}_ms"
                )
                for mode in ("vector", "hybrid")
                for kind in ("common", "rare")
                for statistic in ("p50", "p95")
            },
            **{
                f"Citus / one server: {label}": self.ratio(f"citus_{figure}", f"single_{figure}")
                for label, figure in _CITUS_FIGURES.items()
            },
            "Citus: save_many, 2 writers / 1 writer": self.ratio(
                "citus_save_many_2_writers", "citus_save_many"
            ),
            "one server: save_many, 2 writers / 1 writer": self.ratio(
                "single_save_many_2_writers", "single_save_many"
            ),
            "import peak RSS above the baseline / largest chat": self.ratio(
                "import_peak_above_baseline_mib", "import_largest_chat_mib"
            ),
            **{
                f"{framework} {operation} per turn{how}, {statistic} / {peer}": self.ratio(
                    f"{framework}{suffix}_archive_{operation}_{statistic}_ms",
                    f"{framework}{suffix}_peer_{operation}_{statistic}_ms",
                )
                for framework, (peer, _) in FRAMEWORKS.items()
                for indexing, suffix in INDEXING_PASSES.items()
                for how in [", deferred indexing" if indexing == "deferred" else ""]
                for operation in ("add", "get")
                for statistic in ("median", "p95")
            },
        }

    def as_dict(self) -> dict[str, Any]:
        return {
            "database": self.database,
            "chats": self.chats,
            "messages": self.messages,
            "tool_calls": self.tool_calls,
            "runs": self.runs,
            **({} if self.search_embedder is None else {"search_embedder": self.search_embedder}),
            "figures": self.figures,
            "ratios": self.ratios(),
        }


def run_bench(
    url: str | URL | None,
    *,
    chats: int = 2000,
    messages: int = 20,
    seed: int = 0,
    runs: int = 3,
    keep: bool = False,
    analytics: bool = False,
    streaming: bool = False,
    import_memory: float = 0,
    frameworks: int = 0,
    search: int = 0,
    embedder: Embedder | None = None,
    vector_scan: int | None = None,
    citus: str | URL | None = None,
    attachments: bool = False,
    keys: bool = False,
    progress: Progress | None = None,
) -> BenchReport:
    """Load and read the synthetic workload; see the module docstring."""
    report_progress = progress or (lambda phase, done, total: None)
    docs = list(generate_chats(chats, messages, seed))
    # The workload stays in memory for the whole run (as do the pre-built rows of
    # the raw COPY baseline): move it out of the garbage collector's way so that
    # it is not rescanned by every collection the measured code triggers.
    gc.collect()
    gc.freeze()
    with _database(database_url(url), keep=keep) as target:
        engine = create_engine(target)
        archive = ChatArchive(engine=engine)
        try:
            archive.upgrade()
            bench = _Bench(archive, engine, docs, runs, seed, report_progress)
            return bench.run(
                analytics=analytics,
                streaming=streaming,
                import_memory=import_memory,
                frameworks=frameworks,
                search=search,
                embedder=embedder,
                vector_scan=vector_scan,
                citus=None if citus is None else database_url(citus),
                attachments=attachments,
                keys=keys,
            )
        finally:
            engine.dispose()
            gc.unfreeze()


#: Run in the measured process: ``chatarchive``, and at exit its peak resident
#: memory since it started (``VmHWM``: the fork it came from is not counted,
#: as it is in ``ru_maxrss``), on standard error's last line.
_MEASURED = """
import atexit, sys
def _peak():
    with open("/proc/self/status") as status:
        line = next(line for line in status if line.startswith("VmHWM:"))
    sys.stderr.write("\\npeak " + line.split()[1] + "\\n")
atexit.register(_peak)
from chatarchive.cli import main
main()
"""


def _peak_rss_of(arguments: list[str]) -> int:
    """The peak resident memory, in bytes, of ``chatarchive ARGUMENTS`` run
    in a process of its own (Linux)."""
    done = subprocess.run(
        [sys.executable, "-c", _MEASURED, *arguments],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        check=False,
    )
    errors = done.stderr.decode(errors="replace")
    if done.returncode != 0 or "\npeak " not in errors:
        raise RuntimeError(f"chatarchive {' '.join(arguments[2:])} failed: {errors}")
    return int(errors.rsplit("\npeak ", 1)[1].split()[0]) * 1024


@contextmanager
def _database(url: URL, *, keep: bool) -> Iterator[URL]:
    """The database to run in: ``url`` itself with ``keep``, else a throwaway one."""
    if keep:
        yield url
        return
    if url.get_backend_name() == "sqlite":
        with tempfile.TemporaryDirectory(prefix="chatarchive-bench-") as directory:
            yield make_url(f"sqlite:///{Path(directory) / 'bench.db'}")
        return
    name = f"chatarchive_bench_{uuid.uuid4().hex[:10]}"
    with bare_connection(url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield url.set(database=name)
    finally:
        with bare_connection(url, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


#: Each view computed in full: every column an analyst would use is read.
VIEW_AGGREGATES = {
    "message_texts": "SELECT count(*), sum(length(text)) FROM message_texts",
    "tool_call_results": (
        "SELECT count(*), sum(answered), sum(length(result_text)), sum(position_distance) "
        "FROM tool_call_results"
    ),
    "chat_stats": (
        "SELECT sum(message_count), sum(user_messages), sum(tool_calls), sum(unanswered_tool_calls), "
        "sum(image_parts), sum(prompt_tokens), sum(feedback_count), avg(mean_score) FROM chat_stats"
    ),
    "daily_usage": "SELECT * FROM daily_usage",
    "feedback_summary": "SELECT * FROM feedback_summary",
}


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _p95(values: Sequence[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]


class _Bench:
    def __init__(
        self,
        archive: ChatArchive,
        engine: Engine,
        docs: list[dict[str, Any]],
        runs: int,
        seed: int,
        progress: Progress,
    ) -> None:
        self.archive = archive
        self.engine = engine
        self.docs = docs
        self.runs = runs
        self.rng = random.Random(seed + 1)
        self.progress = progress
        # The reference designs (raw COPY, JSONB documents) are PostgreSQL's.
        self.postgres = backend_of(engine).name == "postgresql"
        #: The schema the archive's tables are in (its search path's first; not
        #: always public), quoted for SQL.
        self.schema = self._schema() if self.postgres else ""
        self.message_total = sum(len(doc["messages"]) for doc in docs)
        self.figures: dict[str, float | None] = {}

    def run(
        self,
        *,
        analytics: bool = False,
        streaming: bool = False,
        import_memory: float = 0,
        frameworks: int = 0,
        search: int = 0,
        embedder: Embedder | None = None,
        vector_scan: int | None = None,
        citus: URL | None = None,
        attachments: bool = False,
        keys: bool = False,
    ) -> BenchReport:
        tool_calls = sum(len(m.get("tool_calls") or ()) for doc in self.docs for m in doc["messages"])
        try:
            self._tokenizer()
            self._ingest()
            self._storage()
            self._reads()
            if analytics:
                self._analytics()
            if streaming:
                self._streaming()
            self._memory()
            if import_memory:
                self._import_memory(import_memory)
            if frameworks:
                self.figures.update(
                    measure_frameworks(
                        self.archive, self.engine, self.engine.url, self.docs[:frameworks], self.progress
                    )
                )
            if attachments:
                self.figures.update(
                    measure_attachments(
                        self.archive, self.engine, self.docs, runs=self.runs, progress=self.progress
                    )
                )
            if keys:
                self.figures.update(
                    measure_sealing(
                        self.archive, self.engine, self.docs, runs=self.runs, progress=self.progress
                    )
                )
            if citus is not None and self.postgres:
                self.figures.update(
                    measure_citus(self.archive, citus, self.docs, runs=self.runs, progress=self.progress)
                )
            if search and self.postgres:  # last: it leaves its own workload behind
                self.figures.update(
                    measure_search(
                        self.archive,
                        self.engine,
                        scale=search,
                        progress=self.progress,
                        embedder=embedder,
                        vector_scan=vector_scan,
                    )
                )
        finally:
            self._drop_references()
        return BenchReport(
            database=self.engine.url.render_as_string(),
            chats=len(self.docs),
            messages=self.message_total,
            tool_calls=tool_calls,
            runs=self.runs,
            figures=self.figures,
            search_embedder=None if embedder is None else embedder.name,
        )

    # -- ingest ------------------------------------------------------------------

    def _schema(self) -> str:
        with self.engine.connect() as connection:
            return str(connection.execute(text("SELECT quote_ident(current_schema())")).scalar_one())

    def _truncate(self, schema: str | None = None) -> None:
        schema = schema or self.schema
        with self.engine.begin() as connection:
            if self.postgres:
                tables = [*_TABLES, SEARCH_TERMS] if schema == self.schema else _TABLES
                connection.execute(text(f"TRUNCATE {', '.join(f'{schema}.{t}' for t in tables)}"))
            else:
                for table in reversed(_TABLES):
                    connection.execute(text(f"DELETE FROM {table}"))

    def _rate(self, seconds: float) -> float:
        return self.message_total / seconds

    def _ingest(self) -> None:
        ways: dict[str, Callable[[], float]] = {
            "ingest_save_many": self._time_save_many,
            "ingest_bulk": self._time_bulk,
            "ingest_save_many_asyncio": self._time_async_save_many,
            # What save_many does in Python before any row reaches the database.
            "ingest_validate_and_convert": self._time_validate_and_convert,
        }
        if self.postgres:
            rows = self._rows()
            gc.freeze()
            self._create_pk_only_schema()
            ways |= {
                "ingest_raw_copy_own": lambda: self._time_raw_copy(rows, self.schema),
                "ingest_raw_copy_pk_only": lambda: self._time_raw_copy(rows, _PK_ONLY),
                "ingest_jsonb_per_chat": self._time_jsonb_per_chat,
                "ingest_jsonb_per_message": self._time_jsonb_per_message,
                # As many connections as cores: the server indexes text on each.
                "ingest_save_many_2_writers": lambda: self._time_save_many(writers=2),
                # The full-text index costs more than everything else together:
                # the same measures with it off (set_search_index(False)).
                "ingest_save_many_no_search_index": lambda: self._without_search_index(self._time_save_many),
                "ingest_save_many_2_writers_no_search_index": lambda: self._without_search_index(
                    lambda: self._time_save_many(writers=2)
                ),
                "ingest_bulk_no_search_index": lambda: self._without_search_index(self._time_bulk),
                "ingest_save_many_asyncio_no_search_index": lambda: self._without_search_index(
                    self._time_async_save_many
                ),
                # Loading before searching: the load, then building the index.
                "ingest_2_writers_then_search_index": lambda: self._without_search_index(
                    lambda: self._time_save_many(writers=2), then_index=True
                ),
                "ingest_raw_copy_own_no_search_index": lambda: self._without_search_index(
                    lambda: self._time_raw_copy(rows, self.schema)
                ),
                # Writes that leave indexing to 'chatarchive db index'.
                "ingest_save_many_deferred": lambda: self._deferred(self._time_save_many),
                # ... and 'chatarchive db index' catching up with them.
                "ingest_index_catch_up": lambda: self._deferred(self._time_catch_up),
                # A bulk load into an archive that holds data keeps the search index.
                "ingest_bulk_onto_loaded": self._time_bulk_onto_loaded,
            }
            if available("langchain"):
                ways["ingest_langchain_postgres"] = self._langchain_postgres()
        total = self.runs * len(ways)
        timings: dict[str, list[float]] = {name: [] for name in ways}
        for run in range(self.runs):
            for index, (name, measure) in enumerate(ways.items()):
                self.progress(f"ingest: {name.removeprefix('ingest_')}", run * len(ways) + index, total)
                timings[name].append(self._rate(measure()))
        for name, rates in timings.items():
            self.figures[name] = _median(rates)
        self.progress("ingest", total, total)
        # Leave the workload loaded for the reads, with fresh planner statistics
        # (as autovacuum would have them).
        self._truncate()
        self.archive.save_many(self.docs)
        with self.engine.begin() as connection:
            connection.execute(text("ANALYZE"))

    def _tokenizer(self) -> None:
        """Messages' terms found a second, with no database: the tokenizer as
        indexing uses it, and its path in Python (where the C part is not
        built), each new (its first pass: the stems of every word found) and
        once it knows the workload's words."""
        rows = self._rows()
        texts = list(texts_of([m for r in rows for m in r.messages], [p for r in rows for p in r.parts]))
        ways = {"tokenizer": Tokenizer.terms, "tokenizer_in_python": Tokenizer._found_in_python}
        settings = SearchSettings()  # the default language and CJK mode
        rates: dict[str, list[float]] = {f"{name}_{kind}": [] for name in ways for kind in ("new", "known")}
        for run in range(self.runs):
            self.progress("tokenizer", run, self.runs)
            for name, terms in ways.items():
                tokenizer = Tokenizer(settings.language, settings.cjk)
                for kind in ("new", "known"):
                    start = time.perf_counter()
                    for message_text in texts:
                        terms(tokenizer, message_text)
                    rates[f"{name}_{kind}"].append(len(texts) / (time.perf_counter() - start))
        for name, found in rates.items():
            self.figures[f"{name}_texts_per_s"] = _median(found)
        self.progress("tokenizer", self.runs, self.runs)

    def _without_search_index(self, measure: Callable[[], float], *, then_index: bool = False) -> float:
        """``measure`` with the search index off; with ``then_index``, plus the
        time to build it over what was loaded."""
        self.archive.set_search_index(False)
        try:
            seconds = measure()
            if then_index:
                start = time.perf_counter()
                self.archive.set_search_index(True)
                seconds += time.perf_counter() - start
            return seconds
        finally:
            self._truncate()
            self.archive.set_search_index(True)

    def _deferred(self, measure: Callable[[], float]) -> float:
        """``measure`` with deferred indexing."""
        self.archive.configure_search(indexing="deferred")
        try:
            return measure()
        finally:
            self._truncate()
            self.archive.configure_search(indexing="sync")

    def _time_bulk_onto_loaded(self) -> float:
        """A bulk load of half the workload into an archive holding the other
        half, as the time the whole workload would take at that rate."""
        self._truncate()
        half = len(self.docs) // 2
        self.archive.save_many(self.docs[half:])
        start = time.perf_counter()
        self.archive.save_many(self.docs[:half], bulk=True)
        seconds = time.perf_counter() - start
        loaded = sum(len(doc["messages"]) for doc in self.docs[:half])
        return seconds * self.message_total / max(1, loaded)

    def _time_save_many(self, writers: int = 1) -> float:
        self._truncate()
        start = time.perf_counter()
        self.archive.save_many(self.docs, writers=writers)
        return time.perf_counter() - start

    def _time_catch_up(self) -> float:
        """``index_pending`` over the whole workload, written with deferred indexing."""
        self._truncate()
        self.archive.save_many(self.docs)
        start = time.perf_counter()
        self.archive.index_pending()
        return time.perf_counter() - start

    def _langchain_postgres(self) -> Callable[[], float]:
        """LangChain's own PostgreSQL store (``PostgresChatMessageHistory``):
        each chat's messages, already LangChain messages, by one ``add_messages``."""
        from langchain_core.messages import messages_from_dict
        from langchain_postgres import PostgresChatMessageHistory

        histories = [
            (
                str(uuid.uuid5(uuid.NAMESPACE_URL, doc["chat_id"])),
                messages_from_dict(export(doc, "langchain")),
            )
            for doc in self.docs
        ]

        def load() -> float:
            with self._driver() as connection:
                connection.execute(f"DROP TABLE IF EXISTS {_LANGCHAIN_HISTORY}")
                connection.commit()
                PostgresChatMessageHistory.create_tables(connection, _LANGCHAIN_HISTORY)
                start = time.perf_counter()
                for session, messages in histories:
                    history = PostgresChatMessageHistory(
                        _LANGCHAIN_HISTORY, session, sync_connection=connection
                    )
                    history.add_messages(messages)
                return time.perf_counter() - start

        return load

    def _time_async_save_many(self) -> float:
        """save_many through the asyncio API (AsyncChatArchive), in a new event loop."""

        async def load() -> float:
            async with AsyncChatArchive(self.engine.url) as archive:
                start = time.perf_counter()
                await archive.save_many(self.docs)
                return time.perf_counter() - start

        self._truncate()
        return asyncio.run(load())

    def _time_bulk(self) -> float:
        self._truncate()
        start = time.perf_counter()
        self.archive.save_many(self.docs, bulk=True)
        return time.perf_counter() - start

    def _time_validate_and_convert(self) -> float:
        """The workload validated and converted to rows, as save_many's
        preparing thread does, with no database."""
        start = time.perf_counter()
        self._rows()
        return time.perf_counter() - start

    def _rows(self) -> list[ChatRows]:
        now = datetime.now().astimezone()
        return [document_to_rows(ChatDocument.parse(doc), now=now, version=1) for doc in self.docs]

    def _drop_references(self) -> None:
        """Drop the reference designs' tables: with ``--keep`` they were left in
        the user's database, where ``db check`` saw them."""
        if not self.postgres:
            return
        with self.engine.begin() as connection:
            connection.execute(text(f"DROP SCHEMA IF EXISTS {_PK_ONLY} CASCADE"))
            connection.execute(
                text(f"DROP TABLE IF EXISTS {_JSONB_DOCS}, {_JSONB_HISTORY}, {_LANGCHAIN_HISTORY}")
            )

    def _create_pk_only_schema(self) -> None:
        with self.engine.begin() as connection:
            connection.execute(text(f"DROP SCHEMA IF EXISTS {_PK_ONLY} CASCADE"))
            connection.execute(text(f"CREATE SCHEMA {_PK_ONLY}"))
            for table in metadata.sorted_tables:
                keys = ", ".join(column.name for column in table.primary_key.columns)
                connection.execute(
                    text(
                        f"CREATE TABLE {_PK_ONLY}.{table.name} "
                        f"(LIKE {self.schema}.{table.name} INCLUDING DEFAULTS, PRIMARY KEY ({keys}))"
                    )
                )

    def _time_raw_copy(self, rows: list[ChatRows], schema: str) -> float:
        """The same rows, already converted, through binary COPY and nothing else."""
        self._truncate(schema)
        tables = {
            "chats": [r.chat for r in rows],
            "chat_tags": [t for r in rows for t in r.tags],
            "messages": [m for r in rows for m in r.messages],
            "content_parts": [p for r in rows for p in r.parts],
            "tool_calls": [c for r in rows for c in r.tool_calls],
            "feedback": [f for r in rows for f in r.feedback],
        }
        prepared = {
            name: copy_values(metadata.tables[name], table_rows) for name, table_rows in tables.items()
        }
        with self._driver() as connection:
            start = time.perf_counter()
            for name in (table for table in _TABLES if table in prepared):
                copy_prepared(connection, metadata.tables[name], prepared[name], schema=schema)
            connection.commit()
            return time.perf_counter() - start

    @contextmanager
    def _driver(self) -> Iterator[Any]:
        with bare_connection(self.engine.url) as connection:
            yield connection

    def _time_jsonb_per_chat(self) -> float:
        """The JSONB-blob design: one document per chat, executemany in a pipeline."""
        with self._driver() as connection:
            connection.execute(f"DROP TABLE IF EXISTS {_JSONB_DOCS}")
            connection.execute(f"CREATE TABLE {_JSONB_DOCS} (chat_id text PRIMARY KEY, doc jsonb NOT NULL)")
            connection.commit()
            start = time.perf_counter()
            with connection.cursor() as cursor:
                cursor.executemany(
                    f"INSERT INTO {_JSONB_DOCS} (chat_id, doc) VALUES (%s, %s::jsonb)",
                    [(doc["chat_id"], json.dumps(doc, default=str)) for doc in self.docs],
                )
            connection.commit()
            return time.perf_counter() - start

    def _time_jsonb_per_message(self) -> float:
        """A chat-history store: one JSONB row per message, one call per chat."""
        with self._driver() as connection:
            connection.execute(f"DROP TABLE IF EXISTS {_JSONB_HISTORY}")
            connection.execute(
                f"CREATE TABLE {_JSONB_HISTORY} (id bigserial PRIMARY KEY, session_id text NOT NULL, "
                "message jsonb NOT NULL, created_at timestamptz NOT NULL DEFAULT now())"
            )
            connection.execute(f"CREATE INDEX ON {_JSONB_HISTORY} (session_id)")
            connection.commit()
            insert = f"INSERT INTO {_JSONB_HISTORY} (session_id, message) VALUES (%s, %s::jsonb)"
            start = time.perf_counter()
            for doc in self.docs:
                with connection.cursor() as cursor:
                    cursor.executemany(
                        insert,
                        [(doc["chat_id"], json.dumps(m, default=str)) for m in doc["messages"]],
                    )
                connection.commit()
            return time.perf_counter() - start

    # -- reads -------------------------------------------------------------------

    def _reads(self) -> None:
        samples = max(50, min(400, len(self.docs)))
        chat_ids = [self.rng.choice(self.docs)["chat_id"] for _ in range(samples)]
        for chat_id in chat_ids[:10]:  # warm the pool and the caches
            self.archive.get(chat_id)
        if self.postgres:
            timings, by_hand = self._get_and_by_hand(chat_ids)
            self.figures["get_by_hand_median_ms"] = _median(by_hand)
        else:
            timings = self._timed("get", chat_ids, self.archive.get)
        self.figures["get_median_ms"] = _median(timings)
        self.figures["get_p95_ms"] = _p95(timings)

        users = sorted({doc["user_id"] for doc in self.docs})
        picks = [self.rng.choice(users) for _ in range(samples)]
        self.figures["list_chats_median_ms"] = _median(
            self._timed(
                "list_chats", picks, lambda user: self.archive.list_chats(ChatFilter(user_id=user), limit=20)
            )
        )

        for size in (10, 1000):
            chat_id = f"bench-append-{size}"
            (doc,) = generate_chats(1, size, seed=size)
            doc["chat_id"] = chat_id
            self.archive.save(doc)
            timings = self._timed(f"append at {size}", [chat_id] * samples, self._append_one)
            self.figures[f"append_{size}_median_ms"] = _median(timings)
            self._trees(size, samples)
        self.figures["get_linear_1000_median_ms"], self.figures["get_branched_1000_median_ms"] = map(
            _median,
            self._timed_in_turn(
                "get with and without branches",
                range(samples),
                [
                    lambda _: self.archive.get("bench-linear-1000"),
                    lambda _: self.archive.get("bench-tree-1000"),
                ],
            ),
        )

        query = text("SELECT name, count(*) FROM tool_calls GROUP BY name ORDER BY count(*) DESC")

        def tool_calls_per_name(_: object) -> None:
            with self.engine.connect() as connection:
                connection.execute(query).all()

        self.figures["tool_calls_per_name_ms"] = _median(
            self._timed("tool calls per name", range(20), tool_calls_per_name)
        )

    def _trees(self, size: int, samples: int, branches: int = 100) -> None:
        """Appends and regenerations on a chat of ``size`` messages whose last
        answer was regenerated ``branches`` times; and the same chat without
        the branches, for reads."""
        (doc,) = generate_chats(1, size, seed=size)
        self.archive.save({**doc, "chat_id": f"bench-linear-{size}"})
        chat_id = f"bench-tree-{size}"
        self.archive.save({**doc, "chat_id": chat_id})
        answered = self.archive.get(chat_id).messages[-1].uid
        for number in range(branches):
            self.archive.regenerate(
                chat_id, answered, [{"role": "assistant", "content": f"Answer {number}."}]
            )
        self.archive.set_active_leaf(chat_id, answered)  # the path the linear chat has
        timings = self._timed(f"append at {size}, {branches} branches", [chat_id] * samples, self._append_one)
        self.figures[f"append_{size}_branched_median_ms"] = _median(timings)

        def regenerate(_: object) -> None:
            self.archive.regenerate(chat_id, answered, [{"role": "assistant", "content": "Another answer."}])

        timings = self._timed(f"regenerate at {size}", range(samples), regenerate)
        self.figures[f"regenerate_{size}_median_ms"] = _median(timings)
        self.archive.set_active_leaf(chat_id, answered)

    def _append_one(self, chat_id: str) -> None:
        self.archive.append(chat_id, [{"role": "user", "content": "One more question about the assay."}])

    def _timed(self, phase: str, items: Sequence[Any], call: Callable[[Any], object]) -> list[float]:
        """Milliseconds of ``call`` on each item."""
        (timings,) = self._timed_in_turn(phase, items, [call])
        return timings

    def _timed_in_turn(
        self, phase: str, items: Sequence[Any], calls: Sequence[Callable[[Any], object]]
    ) -> list[list[float]]:
        """Milliseconds of each call on each item, the calls taking turns on an
        item (in the given order on even items, reversed on odd ones), so that
        they meet the same caches and the same machine."""
        timings: list[list[float]] = [[] for _ in calls]
        turns = list(zip(calls, timings, strict=True))
        for index, item in enumerate(items):
            if index % 50 == 0:
                self.progress(phase, index, len(items))
            for call, into in turns if index % 2 == 0 else reversed(turns):
                start = time.perf_counter()
                call(item)
                into.append((time.perf_counter() - start) * 1000)
        return timings

    def _get_and_by_hand(self, chat_ids: Sequence[str]) -> list[list[float]]:
        """``get`` and the reference read, four indexed queries written by hand
        with no library, timed in turn on each chat: on a large archive, whichever
        read a chat first would otherwise pay for bringing its pages into shared
        buffers."""
        queries = (
            "SELECT * FROM chats WHERE chat_id = %s",
            "SELECT * FROM messages WHERE chat_id = %s ORDER BY position",
            "SELECT * FROM content_parts WHERE chat_id = %s ORDER BY message_position, position",
            "SELECT * FROM tool_calls WHERE chat_id = %s ORDER BY message_position, position",
        )
        with self._driver() as connection:
            connection.autocommit = True

            def by_hand(chat_id: str) -> None:
                for query in queries:
                    connection.execute(query, (chat_id,)).fetchall()

            for chat_id in chat_ids[:10]:
                by_hand(chat_id)
            return self._timed_in_turn("get and the hand-written read", chat_ids, [self.archive.get, by_hand])

    # -- analytics -------------------------------------------------------------

    def _analytics(self) -> None:
        """Each view's full aggregate, each ready query, and full-text searches."""
        from chatarchive.analytics import READY_QUERIES

        queries = {f"view_{name}_ms": sql for name, sql in VIEW_AGGREGATES.items()}
        queries |= {f"query_{name}_ms": sql for name, sql in READY_QUERIES.items()}
        for index, (name, sql) in enumerate(queries.items()):
            self.progress(f"analytics: {name}", index, len(queries))
            timings = []
            for _ in range(3):
                with self.engine.connect() as connection:
                    if self.postgres:
                        connection.execute(text("SET jit = off"))  # see the analytics guide's note on JIT
                    start = time.perf_counter()
                    connection.execute(text(sql)).all()
                    timings.append((time.perf_counter() - start) * 1000)
            self.figures[name] = _median(timings)
        terms = search_terms()
        for query in terms[:3]:
            self.archive.search(query)  # warm up
        searches = self._timed("search", terms * 5, self.archive.search)
        self.figures["search_median_ms"] = _median(searches)
        self.figures["search_p95_ms"] = _p95(searches)

    # -- streaming -------------------------------------------------------------

    def _streaming(self, streams: int = 100, chunks: int = 20) -> None:
        """Concurrent streams in one event loop (the asyncio API), and the cost of
        one chunk early and late in a long message (the synchronous API)."""
        self.progress("streaming", 0, 2)

        async def stream(archive: AsyncChatArchive, number: int) -> None:
            chat_id = f"bench-stream-{number}"
            await archive.save({"chat_id": chat_id, "messages": [{"role": "user", "content": "go"}]})
            answer = await archive.begin_message(chat_id)
            for piece in range(chunks):
                await archive.append_chunk(chat_id, answer.uid, f"token{piece} ")
            await archive.complete_message(chat_id, answer.uid, finish_reason="stop")

        async def all_streams() -> float:
            async with AsyncChatArchive(self.engine.url, pool_size=20) as archive:
                start = time.perf_counter()
                await asyncio.gather(*(stream(archive, number) for number in range(streams)))
                return time.perf_counter() - start

        self.figures["streaming_chunks_per_s"] = streams * chunks / asyncio.run(all_streams())
        self.progress("streaming", 1, 2)
        self.archive.save({"chat_id": "bench-long-stream", "messages": [{"role": "user", "content": "go"}]})
        answer = self.archive.begin_message("bench-long-stream")
        timings = []
        for piece in range(10_050):
            start = time.perf_counter()
            self.archive.append_chunk("bench-long-stream", answer.uid, f"token{piece} ")
            timings.append((time.perf_counter() - start) * 1000)
        self.figures["append_chunk_at_10_ms"] = _median(timings[5:25])
        self.figures["append_chunk_at_10000_ms"] = _median(timings[10_000:10_050])
        self.progress("streaming", 2, 2)

    # -- storage and memory ------------------------------------------------------

    def _storage(self) -> None:
        """Bytes on disk per message, tables and indexes included, right after the load."""
        if not self.postgres:
            database = self.engine.url.database
            size = Path(database).stat().st_size if database else None
            self.figures["bytes_per_message"] = None if size is None else size / self.message_total
            return
        with self.engine.connect() as connection:
            ours = sum(
                connection.execute(
                    text("SELECT pg_total_relation_size(CAST(:name AS regclass))"),
                    {"name": f"{self.schema}.{name}"},
                ).scalar_one()
                for name in [*_TABLES, SEARCH_TERMS]
            )
            docs = connection.execute(text(f"SELECT pg_total_relation_size('{_JSONB_DOCS}')")).scalar_one()
            search_index = connection.execute(
                text("SELECT pg_total_relation_size(CAST(:name AS regclass))"),
                {"name": f"{self.schema}.{SEARCH_TERMS}"},
            ).scalar_one()
        self.figures["bytes_per_message"] = ours / self.message_total
        self.figures["bytes_per_message_no_search_index"] = (ours - search_index) / self.message_total
        self.figures["bytes_per_message_jsonb_doc"] = docs / self.message_total

    def _memory(self) -> None:
        """Peak Python memory of save_many over a generator of the same workload."""
        self.progress("memory", 0, 1)
        self._truncate()
        chats, size = len(self.docs), round(self.message_total / len(self.docs))
        tracemalloc.start()
        try:
            self.archive.save_many(generate_chats(chats, size, seed=7))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        self.figures["save_many_peak_mib"] = peak / 2**20
        self.progress("memory", 1, 1)

    def _import_memory(self, megabytes: float) -> None:
        """Peak resident memory of ``chatarchive import`` of a generated ChatGPT
        export of ``megabytes`` MB (one JSON list on one line, as the export
        writes it), in a process of its own; and of the same command importing
        one empty chat, the baseline (the interpreter and the libraries)."""
        self.progress("import memory", 0, 2)
        self._truncate()
        with tempfile.TemporaryDirectory() as folder:
            export, tiny = Path(folder) / "conversations.json", Path(folder) / "tiny.json"
            largest = 0
            with export.open("w", encoding="utf-8") as out:
                out.write("[")
                for number, conversation in enumerate(chatgpt_export(megabytes)):
                    line = json.dumps(conversation)
                    largest = max(largest, len(line))
                    out.write(("," if number else "") + line)
                out.write("]")
            tiny.write_text('{"chat_id": "bench-tiny", "messages": []}', encoding="utf-8")
            url = self.engine.url.render_as_string(hide_password=False)
            baseline = _peak_rss_of(["--db", url, "import", str(tiny)])
            self.progress("import memory", 1, 2)
            peak = _peak_rss_of(["--db", url, "import", str(export)])
            self.figures["import_file_mib"] = export.stat().st_size / 2**20
        self._truncate()
        self.figures["import_largest_chat_mib"] = largest / 2**20
        self.figures["import_baseline_rss_mib"] = baseline / 2**20
        self.figures["import_peak_rss_mib"] = peak / 2**20
        self.figures["import_peak_above_baseline_mib"] = (peak - baseline) / 2**20
        self.progress("import memory", 2, 2)
