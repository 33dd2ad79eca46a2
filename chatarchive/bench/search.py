"""``chatarchive bench --search N``: what the search index costs writes, how
fast deferred indexing catches up, and how fast search is at N messages.

PostgreSQL only (the figures compare against what the server itself does):

- an append of one message to a 1,000-message chat with ``sync`` and with
  ``deferred`` indexing, against a bare INSERT of the same message row into a
  table with the same columns and only its primary key, through psycopg with
  nothing around it; the three alternate, so that drift hits them alike;
- the appends' tail: ten times as many appends with each indexing, their p99,
  p99.9 and slowest, and how many took over 20 times the median (with ``sync``
  indexing, the append that finds the GIN index's pending list full merges it
  into the index, for all the appends before it);
- the lag of deferred indexing: one writer appends to a chat at a steady rate
  while an indexer runs as ``chatarchive db index --follow`` does; the lag of a
  message is from its commit to the commit of the batch that indexed it;
- at N messages: ``save_many`` with deferred indexing, then indexing them all
  (catch-up), search latency (p50, p95) for common and for rare words, and the
  size of the terms and their index;
- with pgvector on the server, the same with each message's vector of 384
  numbers by a synthetic embedder (``synthetic_embedder``), or by the
  embedder ``--embedder`` names, with its dimension: the catch-up
  writes terms and vectors, the HNSW index is built after the load (vectors a
  second), search by meaning and hybrid search are timed as keyword search
  is (the index read into the server's memory first when ``pg_prewarm`` is
  at hand, as a server that has been searching holds it), recall@10 of the
  index against exact search of the stored vectors, the vectors' and the
  index's bytes per message, and the server's ``shared_buffers``.
"""

from __future__ import annotations

import re
import statistics
import threading
import time
import zlib
from collections.abc import Callable, Sequence
from datetime import UTC, datetime

import numpy as np
from psycopg.types.json import Jsonb
from sqlalchemy import Connection, Engine, text

from chatarchive._api import ChatArchive
from chatarchive._backends.postgresql import bare_connection
from chatarchive._backends.postgresql.search import (
    EF_SEARCH_PER_CANDIDATE,
    _hnsw_scans,
    _nearest_statement,
    index_vectors,
    vector_index,
    vector_text,
)
from chatarchive._document import parse_messages
from chatarchive._embeddings import Embedder
from chatarchive._repository.searching import RANKED_CANDIDATES
from chatarchive._rows import messages_to_rows
from chatarchive._schema import SEARCH_TERMS, metadata
from chatarchive._search import SearchMode

from .workload import _VOCABULARY, generate_chats

__all__ = ["measure_search"]

Progress = Callable[[str, int, int], None]

#: The indexer's wait when nothing is marked, as ``db index --follow --interval``.
FOLLOW_INTERVAL = 0.25
_BARE = "bench_bare_messages"
_WORD = re.compile(r"\w+")
_TEXT = "The primer dimers formed because the annealing temperature was too low; raise it and rerun the gel."


def _median(values: Sequence[float]) -> float:
    return statistics.median(values)


def _p95(values: Sequence[float]) -> float:
    return _quantile(values, 0.95)


def _quantile(values: Sequence[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


def measure_search(
    archive: ChatArchive,
    engine: Engine,
    *,
    scale: int,
    progress: Progress,
    samples: int = 300,
    embedder: Embedder | None = None,
    vector_scan: int | None = None,
) -> dict[str, float | None]:
    """The figures above; leaves the archive's settings as it found them.
    ``embedder``: the vectors' model instead of ``synthetic_embedder``
    (``bench --embedder``); ``vector_scan``: the archive's setting while it
    searches (``bench --vector-scan``)."""
    figures: dict[str, float | None] = {}
    before = archive.search_settings()
    try:
        turns = _turns()
        figures |= _appends(archive, engine, turns, samples, progress)
        figures |= _append_tail(archive, turns, 10 * samples, progress)
        figures |= _lag(archive, engine, progress)
        figures |= _at_scale(archive, engine, scale, progress, embedder, vector_scan)
    finally:
        archive.configure_search(
            indexing=before.indexing,
            embedder=before.embedder or False,
            vector_scan=before.vector_scan or False,
        )
        with engine.begin() as connection:
            connection.execute(text(f"DROP TABLE IF EXISTS {_BARE}"))
    return figures


def _appends(
    archive: ChatArchive, engine: Engine, turns: list[dict[str, object]], samples: int, progress: Progress
) -> dict[str, float | None]:
    for mode in ("sync", "deferred"):
        archive.save({"chat_id": f"bench-append-{mode}", "messages": turns[:1000]})
    appended = turns[1000 : 1000 + samples + 20]
    with engine.begin() as connection:
        connection.execute(text(f"DROP TABLE IF EXISTS {_BARE}"))
        connection.execute(text(f"CREATE TABLE {_BARE} (LIKE messages INCLUDING DEFAULTS)"))
        connection.execute(text(f"ALTER TABLE {_BARE} ADD PRIMARY KEY (chat_id, position)"))
    parsed = parse_messages(appended, chat_id="bare")
    rows = messages_to_rows("bare", parsed, user_id=None, first_position=0, now=datetime.now(UTC)).messages
    columns = list(rows[0])
    insert = f"INSERT INTO {_BARE} ({', '.join(columns)}) VALUES ({', '.join(['%s'] * len(columns))})"
    timings: dict[str, list[float]] = {"sync": [], "deferred": [], "bare": []}
    position = 0
    with bare_connection(engine.url, autocommit=True) as connection:
        # A mode at a time (an archive acts on the settings it last saw), each
        # append followed by a bare insert of the same message's row, so that
        # both meet the same machine.
        for mode in ("sync", "deferred"):
            archive.configure_search(indexing=mode)
            for index, (message, row) in enumerate(zip(appended, rows, strict=True)):
                progress(f"search: appends, {mode}", index, samples + 20)
                start = time.perf_counter()
                archive.append(f"bench-append-{mode}", [message])
                if index >= 20:  # the first ones warm the caches up
                    timings[mode].append(time.perf_counter() - start)
                values = [row[column] for column in columns]
                values[columns.index("position")] = position
                position += 1
                values = [Jsonb(value) if isinstance(value, dict | list) else value for value in values]
                start = time.perf_counter()
                connection.execute(insert, values)
                if index >= 20:
                    timings["bare"].append(time.perf_counter() - start)
    figures: dict[str, float | None] = {}
    for name, values in timings.items():
        kept = [value * 1000 for value in values]
        label = "bare_insert" if name == "bare" else f"append_1000_{name}"
        figures[f"{label}_median_ms"] = _median(kept)
        figures[f"{label}_p95_ms"] = _p95(kept)
    for mode in ("sync", "deferred"):
        archive.delete(f"bench-append-{mode}")
    return figures


def _append_tail(
    archive: ChatArchive, turns: list[dict[str, object]], samples: int, progress: Progress
) -> dict[str, float | None]:
    """``samples`` appends of the workload's turns with each indexing, one
    message each, to a chat of 1,000 messages: the rare slow ones."""
    figures: dict[str, float | None] = {}
    for mode in ("sync", "deferred"):
        archive.configure_search(indexing=mode)
        chat_id = f"bench-append-tail-{mode}"
        archive.save({"chat_id": chat_id, "messages": turns[:1000]})
        timings = []
        for index in range(samples):
            if index % 500 == 0:
                progress(f"search: the appends' tail, {mode}", index, samples)
            start = time.perf_counter()
            archive.append(chat_id, [turns[1000 + index % (len(turns) - 1000)]])
            timings.append((time.perf_counter() - start) * 1000)
        figures[f"append_{mode}_p99_ms"] = _quantile(timings, 0.99)
        figures[f"append_{mode}_p999_ms"] = _quantile(timings, 0.999)
        figures[f"append_{mode}_max_ms"] = max(timings)
        slow = 20 * _median(timings)
        figures[f"append_{mode}_over_20x_median"] = sum(timing > slow for timing in timings)
        archive.delete(chat_id)
    return figures


def _turns() -> list[dict[str, object]]:
    """Turns of the workload, as long as users' and models' are, in every script."""
    return [
        {"role": message["role"], "content": message["content"]}
        for doc in generate_chats(200, 20, seed=3)
        for message in doc["messages"]
        if message["role"] in ("user", "assistant") and isinstance(message["content"], str)
    ]


def _lag(
    archive: ChatArchive, engine: Engine, progress: Progress, *, seconds: float = 10.0, rate: float = 40.0
) -> dict[str, float | None]:
    """A writer appending ``rate`` messages a second to one chat for
    ``seconds``, an indexer following it, and a watcher counting the chat's
    indexed messages every few milliseconds: a message's lag is from its
    commit to the first count that includes it."""
    archive.configure_search(indexing="deferred")
    archive.save({"chat_id": "bench-lag", "messages": [{"role": "user", "content": _TEXT}]})
    archive.index_pending()
    committed: list[float] = []  # the commit time of the message at position index + 1
    counts: list[tuple[float, int]] = []
    stop = threading.Event()

    def follow() -> None:
        while not stop.is_set():
            if not archive.index_pending(batch_size=200, limit=200):
                stop.wait(FOLLOW_INTERVAL)

    def watch() -> None:
        query = text("SELECT count(*) FROM message_terms WHERE chat_id = 'bench-lag'")
        with engine.connect() as connection:
            while not stop.is_set():
                counts.append((time.perf_counter(), int(connection.execute(query).scalar_one())))
                connection.rollback()
                stop.wait(0.005)

    threads = [threading.Thread(target=follow), threading.Thread(target=watch)]
    for thread in threads:
        thread.start()
    try:
        total = int(seconds * rate)
        start = time.perf_counter()
        for index in range(total):
            progress("search: indexing lag", index, total)
            time.sleep(max(0.0, start + index / rate - time.perf_counter()))
            archive.append("bench-lag", [{"role": "user", "content": f"{_TEXT} {index}"}])
            committed.append(time.perf_counter())
        deadline = time.perf_counter() + FOLLOW_INTERVAL * 10 + 5
        while (not counts or counts[-1][1] <= total) and time.perf_counter() < deadline:
            time.sleep(0.01)
    finally:
        stop.set()
        for thread in threads:
            thread.join()
    lags = []
    seen = iter(counts)
    moment, count = next(seen, (0.0, 0))
    for position, commit in enumerate(committed, 1):
        while count <= position:
            moment, count = next(seen, (float("nan"), total + 1))
        lags.append((moment - commit) * 1000)
    archive.delete("bench-lag")
    return {
        "index_lag_median_ms": _median(lags),
        "index_lag_p95_ms": _p95(lags),
        "index_lag_max_ms": max(lags),
        "index_follow_interval_ms": FOLLOW_INTERVAL * 1000,
        "index_lag_writes_per_s": rate,
    }


def _at_scale(
    archive: ChatArchive,
    engine: Engine,
    scale: int,
    progress: Progress,
    given: Embedder | None,
    vector_scan: int | None,
) -> dict[str, float | None]:
    per_chat = 20
    progress(f"search: generating {scale:,} messages", 0, 1)
    docs = list(generate_chats(max(1, scale // per_chat), per_chat, seed=7))
    messages = sum(len(doc["messages"]) for doc in docs)
    tables = [table.name for table in metadata.sorted_tables if table.name != "archive_settings"]
    with engine.begin() as connection:
        connection.execute(text(f"TRUNCATE {', '.join([*tables, SEARCH_TERMS])}"))
        vectors = given is not None or _has_pgvector(connection)
    embedder = (given or synthetic_embedder()) if vectors else None
    archive.configure_search(
        indexing="deferred", embedder=embedder or False, vector_scan=vector_scan or False
    )
    if embedder is not None:  # built after the load, and timed
        with engine.begin() as connection:
            index_vectors(connection, None, None)
    progress(f"search: save_many of {messages:,} messages, deferred", 0, 1)
    start = time.perf_counter()
    archive.save_many(docs, writers=2)
    loaded = time.perf_counter() - start
    del docs
    progress(f"search: indexing {messages:,} messages" + (" and their vectors" if vectors else ""), 0, 1)
    start = time.perf_counter()
    archive.index_pending(batch_size=500)
    caught_up = time.perf_counter() - start
    figures: dict[str, float | None] = {
        "scale_messages": float(messages),
        "scale_save_many_deferred_2_writers_messages_per_s": messages / loaded,
        (
            "scale_index_catch_up_with_vectors_messages_per_s"
            if vectors
            else "scale_index_catch_up_messages_per_s"
        ): (messages / caught_up),
    }
    if embedder is not None:
        figures |= _build_vector_index(engine, embedder, progress)
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(text("VACUUM ANALYZE"))  # as autovacuum would have it
        figures["scale_shared_buffers_mb"] = float(
            connection.execute(
                text("SELECT setting::bigint * 8 / 1024 FROM pg_settings WHERE name = 'shared_buffers'")
            ).scalar_one()
        )
        if embedder is not None:
            _prewarm(connection, vector_index(embedder.name, embedder.dimension))
    modes: tuple[SearchMode, ...] = ("keyword", "vector", "hybrid") if vectors else ("keyword",)
    figures |= _search_times(archive, modes, "", messages, progress)
    if embedder is not None:
        figures["scale_vector_dimension"] = float(embedder.dimension)
        figures["scale_vector_scan"] = float(vector_scan or EF_SEARCH_PER_CANDIDATE * RANKED_CANDIDATES)
        figures |= _recall(engine, embedder, progress, vector_scan)
        # The same with the wider scan an operator can set for the archive's role.
        database = engine.url.database
        with engine.begin() as connection:
            connection.execute(text(f'ALTER DATABASE "{database}" SET hnsw.ef_search = {WIDE_EF_SEARCH}'))
        engine.dispose()  # connections made from now on have it
        try:
            figures |= _search_times(archive, ("vector", "hybrid"), "wide_", messages, progress)
            figures |= _recall(engine, embedder, progress, vector_scan, label="wide_")
        finally:
            with engine.begin() as connection:
                connection.execute(text(f'ALTER DATABASE "{database}" RESET hnsw.ef_search'))
            engine.dispose()
    with engine.connect() as connection:

        def size(expression: str) -> int:
            return int(connection.execute(text(f"SELECT {expression}")).scalar_one())

        figures["scale_terms_bytes_per_message"] = size("pg_total_relation_size('message_terms')") / messages
        figures["scale_terms_index_bytes_per_message"] = (
            size("pg_relation_size('ix_message_terms_terms')") / messages
        )
        figures["scale_messages_bytes_per_message"] = size("pg_total_relation_size('messages')") / messages
        if embedder is not None:
            figures["scale_vectors"] = float(size("count(*) FROM embeddings"))
            figures["scale_vectors_bytes_per_message"] = size("pg_relation_size('embeddings')") / messages
            built = vector_index(embedder.name, embedder.dimension)
            figures["scale_vector_index_bytes_per_message"] = size(f"pg_relation_size('{built}')") / messages
    return figures


def _search_times(
    archive: ChatArchive, modes: Sequence[SearchMode], label: str, messages: int, progress: Progress
) -> dict[str, float | None]:
    """p50 and p95 of searches for common and for rare words, in each mode."""
    figures: dict[str, float | None] = {}
    common = _VOCABULARY[:10]
    rare = _VOCABULARY[-40:-20]
    for mode in modes:
        for name, words in (("common", common), ("rare", rare)):
            for word in words[:3]:
                archive.search(word, mode=mode)  # warm up
            timings = []
            for round_ in range(5):
                for index, word in enumerate(words):
                    progress(
                        f"search: {label}{mode}, {name} words at {messages:,}",
                        round_ * len(words) + index,
                        5 * len(words),
                    )
                    start = time.perf_counter()
                    archive.search(word, mode=mode, limit=10)
                    timings.append((time.perf_counter() - start) * 1000)
            kind = "" if mode == "keyword" else f"{mode}_"
            figures[f"scale_search_{label}{kind}{name}_p50_ms"] = _median(timings)
            figures[f"scale_search_{label}{kind}{name}_p95_ms"] = _p95(timings)
    return figures


# -- vectors ---------------------------------------------------------------------------------

#: The synthetic embedder's dimension: that of the small sentence models
#: (all-MiniLM-L6-v2, bge-small) users run beside an archive.
DIMENSION = 384
#: How many words of a text the synthetic embedder reads.
_EMBEDDED_WORDS = 32
_TABLE_ROWS = 1 << 16
#: The wider HNSW scan (``hnsw.ef_search``) also measured: what an operator
#: sets for more recall (a search keeps four times its candidates by default).
WIDE_EF_SEARCH = 800
#: Queries of the recall measure, and the hits each is compared by.
RECALL_QUERIES = 50
RECALL_AT = 10


def synthetic_embedder() -> Embedder:
    """A stand-in for a sentence model (the archive ships none): the sum of a
    fixed random vector per word over a text's first words. Texts that share
    words come out near each other, as a model's do for texts that share
    meaning; it costs the bench little time of its own."""
    table = np.random.default_rng(384).standard_normal((_TABLE_ROWS, DIMENSION), dtype=np.float32)

    def embed(texts: list[str]) -> list[list[float]]:
        rows = np.zeros((len(texts), DIMENSION), dtype=np.float32)
        for index, text_ in enumerate(texts):
            words = _WORD.findall(text_.lower())[:_EMBEDDED_WORDS]
            if words:
                rows[index] = table[[zlib.crc32(word.encode()) % _TABLE_ROWS for word in words]].sum(axis=0)
        vectors: list[list[float]] = rows.tolist()
        return vectors

    return Embedder("bench-synthetic-384", DIMENSION, embed)


def _has_pgvector(connection: Connection) -> bool:
    query = text("SELECT 1 FROM pg_available_extensions WHERE name = 'vector'")
    return connection.execute(query).first() is not None


def _build_vector_index(engine: Engine, embedder: Embedder, progress: Progress) -> dict[str, float | None]:
    """Build the HNSW index of the stored vectors, as ``configure_search``
    does, with the memory an operator gives a build (``maintenance_work_mem``)."""
    progress("search: building the HNSW index of the vectors", 0, 1)
    with engine.begin() as connection:
        count = int(connection.execute(text("SELECT count(*) FROM embeddings")).scalar_one())
        connection.execute(text("SET LOCAL maintenance_work_mem = '4GB'"))
        start = time.perf_counter()
        index_vectors(connection, embedder.name, embedder.dimension)
        built = time.perf_counter() - start
    return {"scale_vector_index_build_vectors_per_s": count / built}


def _prewarm(connection: Connection, index: str) -> None:
    """Read ``index`` into the server's shared buffers (with ``pg_prewarm``,
    if the server has it), as searches that came before would have."""
    if connection.execute(text("SELECT 1 FROM pg_available_extensions WHERE name = 'pg_prewarm'")).first():
        connection.execute(text("CREATE EXTENSION IF NOT EXISTS pg_prewarm"))
        connection.execute(text("SELECT pg_prewarm(:index)"), {"index": index})


def _recall(
    engine: Engine, embedder: Embedder, progress: Progress, vector_scan: int | None, *, label: str = ""
) -> dict[str, float | None]:
    """recall@10 of the HNSW index as a search scans it (``hnsw.ef_search``
    as ``search`` sets it, with the archive's ``vector_scan``), against exact
    nearest neighbours of the stored 32-bit vectors (the index holds them in
    half precision)."""
    queries = [
        " ".join(message["content"].split()[:12])
        for doc in generate_chats(RECALL_QUERIES, 2, seed=11)
        for message in doc["messages"][:1]
        if isinstance(message["content"], str)
    ][:RECALL_QUERIES]
    statement = _nearest_statement(embedder.name, embedder.dimension, "", candidates=RECALL_AT)
    vector = f"vector({embedder.dimension})"
    every = text(
        f"SELECT chat_id, message_position FROM embeddings WHERE model = '{embedder.name}' "
        f"ORDER BY CAST(embedding AS {vector}) <=> CAST(:vector AS {vector}) LIMIT {RECALL_AT}"
    )
    found = 0
    for index, query in enumerate(queries):
        progress("search: recall of the HNSW index", index, len(queries))
        params = {"vector": vector_text(embedder.vectors([query])[0])}
        with engine.connect() as connection, _hnsw_scans(connection, RANKED_CANDIDATES, vector_scan):
            near = {tuple(row[:2]) for row in connection.execute(statement, params)}
        with engine.connect() as connection:  # every stored vector compared
            exact = {tuple(row[:2]) for row in connection.execute(every, params)}
        found += len(near & exact)
    return {f"scale_{label}vector_recall_at_10": found / (RECALL_AT * len(queries))}
