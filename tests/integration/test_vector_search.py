"""Search by meaning: each message's vector kept as a row by the same
indexing as its terms, searched alone or fused with keyword search, under
the same filters and scope, on every database."""

from __future__ import annotations

import asyncio
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import event, func, select, text

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    Embedder,
    EmbedderError,
    InvalidArgument,
    NotSupported,
    SchemaNotReady,
    create_engine,
    register_embedder,
)
from chatarchive._backends.postgresql.search import _hnsw_scans
from chatarchive._embeddings import _REGISTERED
from chatarchive._repository.searching import RRF_K
from chatarchive._schema import tables
from tests.support.embedders import DIMENSION, CountingEmbedder, meanings, vector_of

CHATS: list[dict[str, Any]] = [
    {
        "chat_id": "garage",
        "user_id": "ann",
        "model": "gpt-4o",
        "tags": ["home"],
        "messages": [
            {"role": "user", "content": "My automobile will not start this morning."},
            {"role": "assistant", "content": "Check the battery of the vehicle first."},
        ],
    },
    {
        "chat_id": "pets",
        "user_id": "bob",
        "model": "claude",
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "We adopted a puppy."}]},
            {"role": "assistant", "content": "A young dog needs walks, not a car ride."},
        ],
    },
    {
        "chat_id": "lab",
        "user_id": "ann",
        "messages": [
            {"role": "user", "content": "Why do my primers give extra bands?"},
            {"role": "assistant", "content": "Raise the annealing temperature."},
        ],
    },
]


@pytest.fixture
def embedded(archive: ChatArchive) -> ChatArchive:
    """The shared archive with the test embedder and the chats."""
    archive.configure_search(embedder=meanings())
    archive.save_many(CHATS)
    return archive


def found(hits: Any) -> list[tuple[str, int]]:
    return [(hit.chat_id, hit.position) for hit in hits]


def test_search_by_meaning_finds_what_the_words_do_not(embedded: ChatArchive) -> None:
    assert found(embedded.search("car")) == [("pets", 1)]
    assert found(embedded.search("car", mode="vector")) == [("garage", 0), ("garage", 1), ("pets", 1)]
    hybrid = embedded.search("car", mode="hybrid")
    # Found by both lists first; then the vector list's own, in its order.
    assert found(hybrid) == [("pets", 1), ("garage", 0), ("garage", 1)]
    assert hybrid[0].rank == pytest.approx(1 / (RRF_K + 1) + 1 / (RRF_K + 3))
    assert hybrid[1].rank == pytest.approx(1 / (RRF_K + 1))


def test_a_hit_by_meaning_has_a_snippet_and_its_similarity(embedded: ChatArchive) -> None:
    hits = embedded.search("dog", mode="vector")
    assert found(hits) == [("pets", 0), ("pets", 1)]
    assert hits[0].snippet == "We adopted a puppy."
    assert hits[1].snippet == "A young «dog» needs walks, not a car ride."
    assert hits[0].rank > 0.99  # a part's text, its one word of meaning the query's
    assert 0 < hits[1].rank < 1
    assert hits[0].message_uid == embedded.get("pets").messages[0].uid


def test_each_message_with_text_has_one_vector_row(embedded: ChatArchive) -> None:
    with embedded.engine.connect() as connection:
        rows = connection.execute(
            select(
                tables.embeddings.c.chat_id,
                tables.embeddings.c.message_position,
                tables.embeddings.c.model,
                tables.embeddings.c.dimension,
                tables.embeddings.c.embedding,
                tables.embeddings.c.chat_user_id,
            ).order_by(tables.embeddings.c.chat_id, tables.embeddings.c.message_position)
        ).all()
    assert [(row[0], row[1], row[2], row[3], row[5]) for row in rows] == [
        ("garage", 0, "meanings", DIMENSION, "ann"),
        ("garage", 1, "meanings", DIMENSION, "ann"),
        ("lab", 0, "meanings", DIMENSION, "ann"),
        ("lab", 1, "meanings", DIMENSION, "ann"),
        ("pets", 0, "meanings", DIMENSION, "bob"),
        ("pets", 1, "meanings", DIMENSION, "bob"),
    ]
    stored = rows[0][4]
    expected = vector_of("My automobile will not start this morning.")
    norm = sum(x * x for x in expected) ** 0.5
    assert stored == pytest.approx([x / norm for x in expected], abs=1e-6)


def _vectors(archive: ChatArchive) -> dict[tuple[str, int], list[float]]:
    with archive.engine.connect() as connection:
        rows = connection.execute(
            select(
                tables.embeddings.c.chat_id,
                tables.embeddings.c.message_position,
                tables.embeddings.c.embedding,
            )
        ).all()
    return {(chat_id, position): list(vector) for chat_id, position, vector in rows}


def test_every_write_keeps_the_vectors_in_step(embedded: ChatArchive) -> None:
    archive = embedded
    archive.append("garage", [{"role": "user", "content": "Now the kitten is in the engine."}])
    assert found(archive.search("cat", mode="vector")) == [("garage", 2)]
    uid = archive.get("garage").messages[2].uid
    archive.edit("garage", uid, "Now the puppy is in the engine.")
    assert found(archive.search("cat", mode="vector", branches="active")) == []
    assert found(archive.search("cat", mode="vector")) == [
        ("garage", 2)
    ]  # the edited message stays, off the path
    assert ("garage", 3) in found(archive.search("dog", mode="vector", branches="active"))
    archive.truncate("pets", keep=1, delete=True)
    assert found(archive.search("dog", mode="vector")) == [("pets", 0), ("garage", 3)]
    archive.save({**CHATS[1], "chat_id": "pets", "messages": [{"role": "user", "content": "Kittens, now."}]})
    assert found(archive.search("cat", mode="vector")) == [("pets", 0), ("garage", 2)]
    archive.delete("lab")
    assert found(archive.search("primer", mode="vector")) == []
    archive.update("garage", user_id="cy")
    assert found(archive.search("car", mode="vector", user_id="cy")) == [("garage", 0), ("garage", 1)]
    with_text = {
        (chat_id, position)
        for chat_id in archive.chat_ids()
        for position, message in enumerate(archive.get_tree(chat_id).document.messages)
        if message.content
    }
    assert set(_vectors(archive)) == with_text


def test_deferred_indexing_embeds_when_the_chats_are_indexed(archive: ChatArchive) -> None:
    function = CountingEmbedder()
    archive.configure_search(embedder=meanings(function=function), indexing="deferred")
    archive.save_many(CHATS)
    assert function.texts == []  # the write waited for no model
    results = archive.search("car", mode="vector")
    assert (found(results), results.pending_chats) == ([], 3)
    assert archive.index_pending() == 3
    results = archive.search("car", mode="vector")
    assert (found(results), results.pending_chats) == ([("garage", 0), ("garage", 1), ("pets", 1)], 0)
    assert len(function.texts) == 6 + 2  # each message once, and the query of each search


def test_configuring_an_embedder_embeds_what_is_stored(archive: ChatArchive) -> None:
    archive.save_many(CHATS)
    with pytest.raises(SchemaNotReady, match="needs an embedder"):
        archive.search("car", mode="vector")
    settings = archive.configure_search(embedder=meanings())
    assert (settings.embedder, settings.dimension) == ("meanings", DIMENSION)
    assert archive.search_settings() == settings
    assert len(archive.search("car", mode="vector")) == 3
    archive.configure_search(embedder=False)
    assert _vectors(archive) == {}
    with pytest.raises(SchemaNotReady, match="needs an embedder"):
        archive.search("car", mode="hybrid")
    assert found(archive.search("car")) == [("pets", 1)]  # keyword search is as it was


def test_another_embedder_replaces_the_vectors(embedded: ChatArchive) -> None:
    embedded.configure_search(embedder=meanings("meanings-2"))
    with embedded.engine.connect() as connection:
        models = connection.execute(select(tables.embeddings.c.model).distinct()).scalars().all()
    assert models == ["meanings-2"]
    assert len(embedded.search("car", mode="vector")) == 3


def test_an_embedder_is_named_by_its_registered_name(embedded: ChatArchive) -> None:
    register_embedder(meanings("by-name"))
    assert embedded.configure_search(embedder="by-name").embedder == "by-name"
    with pytest.raises(EmbedderError, match="no embedder named 'nobody'"):
        embedded.configure_search(embedder="nobody")
    with pytest.raises(InvalidArgument, match="embedder must be"):
        embedded.configure_search(embedder=42)  # type: ignore[arg-type]


def test_a_process_without_the_embedder_marks_its_writes_for_one_that_has_it(
    embedded: ChatArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    given = _REGISTERED["meanings"]
    monkeypatch.delitem(_REGISTERED, "meanings")
    embedded.save({"chat_id": "later", "messages": [{"role": "user", "content": "a sedan for sale"}]})
    assert found(embedded.search("sedan")) == [("later", 0)]  # its words are searchable at once
    with pytest.raises(EmbedderError, match="this process was not given"):
        embedded.search("car", mode="vector")
    with pytest.raises(EmbedderError, match="register_embedder"):
        embedded.index_pending()
    register_embedder(given)
    results = embedded.search("car", mode="vector")
    assert (("later", 0) in found(results), results.pending_chats) == (False, 1)
    assert embedded.index_pending() == 1
    assert ("later", 0) in found(embedded.search("car", mode="vector"))


def test_an_embedder_of_another_dimension_is_refused(embedded: ChatArchive) -> None:
    register_embedder(
        Embedder("meanings", DIMENSION + 1, lambda texts: [[1.0] * (DIMENSION + 1) for _ in texts])
    )
    try:
        with pytest.raises(EmbedderError, match="archive keeps 32"):
            embedded.search("car", mode="vector")
    finally:
        register_embedder(meanings())


@pytest.mark.parametrize(
    ("function", "message"),
    [
        (lambda texts: [[1.0] * DIMENSION], "gave 1 vectors for 2 texts"),
        (lambda texts: [[1.0] * 3 for _ in texts], "vector of 3 numbers; its dimension is 32"),
        (lambda texts: [[float("nan")] * DIMENSION for _ in texts], "not finite"),
        (lambda texts: [["x"] * DIMENSION for _ in texts], "not numbers"),
        (lambda texts: 1 / 0, "failed: ZeroDivisionError"),
    ],
)
def test_a_failing_embedder_leaves_the_archive_as_it_was(
    archive: ChatArchive, function: Any, message: str
) -> None:
    archive.configure_search(embedder=Embedder("broken", DIMENSION, vector_of_each))
    register_embedder(Embedder("broken", DIMENSION, function))
    with pytest.raises(EmbedderError, match=message):
        archive.save(CHATS[0])
    assert archive.chat_ids() == []
    assert _vectors(archive) == {}


def vector_of_each(texts: list[str]) -> list[list[float]]:
    return [vector_of(text) for text in texts]


def test_filters_apply_to_search_by_meaning(embedded: ChatArchive) -> None:
    archive = embedded
    for mode in ("vector", "hybrid"):
        assert found(archive.search("car", mode=mode, user_id="ann")) == [("garage", 0), ("garage", 1)]
        answers = [("garage", 1), ("pets", 1)] if mode == "vector" else [("pets", 1), ("garage", 1)]
        assert found(archive.search("car", mode=mode, role="assistant")) == answers
        assert found(archive.search("car", mode=mode, model="claude")) == [("pets", 1)]
        assert found(archive.search("car", mode=mode, tag="home")) == [("garage", 0), ("garage", 1)]
        assert found(archive.search("car", mode=mode, since=datetime.now(UTC) + timedelta(days=1))) == []
        assert found(archive.search("car", mode=mode, until=datetime.now(UTC) - timedelta(days=1))) == []
        assert len(archive.search("car", mode=mode, limit=1)) == 1
        assert found(archive.for_user("bob").search("car", mode=mode)) == [("pets", 1)]
        assert found(archive.for_user("bob").search("car", mode=mode, user_id="ann")) == []


def test_branches_all_or_the_active_path(archive: ChatArchive) -> None:
    archive.configure_search(embedder=meanings())
    archive.save(
        {
            "chat_id": "t",
            "messages": [
                {"role": "user", "content": "Tell me of a puppy."},
                {"role": "assistant", "content": "A hound."},
            ],
        }
    )
    first = archive.get("t").messages[1].uid
    archive.regenerate("t", first, [{"role": "assistant", "content": "A kitten."}])
    for mode in ("keyword", "vector", "hybrid"):
        assert ("t", 1) in found(archive.search("hound", mode=mode))
        assert ("t", 1) not in found(archive.search("hound", mode=mode, branches="active"))
    archive.set_active_leaf("t", first)
    assert found(archive.search("hound", mode="vector", branches="active")) == [("t", 1), ("t", 0)]


def test_arguments_of_a_search_by_meaning_are_checked(embedded: ChatArchive) -> None:
    with pytest.raises(InvalidArgument, match="mode must be one of hybrid, keyword, vector"):
        embedded.search("car", mode="semantic")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="branches must be one of all, active"):
        embedded.search("car", branches="some")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="tag must be a string"):
        embedded.search("car", tag=1)  # type: ignore[arg-type]


def test_a_query_without_words_still_searches_by_meaning(embedded: ChatArchive) -> None:
    assert found(embedded.search("🚗 !!", mode="keyword")) == []
    assert found(embedded.search("«car»", mode="vector"))[:2] == [("garage", 0), ("garage", 1)]


def test_search_by_meaning_through_asyncio(embedded: ChatArchive) -> None:
    async def main() -> list[tuple[str, int]]:
        async with AsyncChatArchive(embedded.url) as archive:
            await archive.save({"chat_id": "async", "messages": [{"role": "user", "content": "a red sedan"}]})
            return found(await archive.search("car", mode="vector", limit=2))

    url = embedded.url
    if url.get_backend_name() == "sqlite" and not url.database:
        pytest.skip("an in-memory SQLite archive is not shared with a second engine")
    assert asyncio.run(main()) == [("async", 0), ("garage", 0)]


def test_long_texts_are_cut_before_they_are_embedded(archive: ChatArchive) -> None:
    function = CountingEmbedder()
    archive.configure_search(embedder=meanings(function=function, max_chars=100))
    archive.save({"chat_id": "long", "messages": [{"role": "user", "content": "word " * 1000}]})
    assert len(function.texts) == 1
    assert 90 <= len(function.texts[0]) <= 100
    assert not function.texts[0].endswith(" ")


def test_an_installed_package_offers_an_embedder_by_entry_point(
    archive: ChatArchive, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "some_embedders.py").write_text(
        "from tests.support.embedders import meanings\ndef make():\n    return meanings('installed')\n"
    )
    dist = tmp_path / "some_embedders-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: some-embedders\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[chatarchive.embedders]\ninstalled = some_embedders:make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "some_embedders", raising=False)
    try:
        assert archive.configure_search(embedder="installed").embedder == "installed"
        archive.save_many(CHATS)
        assert len(archive.search("dog", mode="vector")) == 2
    finally:
        _REGISTERED.pop("installed", None)


def test_vectors_cost_nothing_when_no_embedder_is_configured(archive: ChatArchive) -> None:
    archive.save_many(CHATS)
    with archive.engine.connect() as connection:
        assert connection.execute(select(func.count()).select_from(tables.embeddings)).scalar_one() == 0


def test_a_server_without_pgvector_says_search_by_meaning_needs_it(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    """A server whose catalog offers no pgvector (each connection sees an empty
    list of available extensions, as on a server without it installed)."""
    _, url = pg_archive
    engine = create_engine(url)

    @event.listens_for(engine, "connect")
    def without_pgvector(dbapi_connection: Any, _record: Any) -> None:
        with dbapi_connection.cursor() as cursor:
            cursor.execute(
                "CREATE TEMP VIEW pg_available_extensions AS "
                "SELECT name, default_version, installed_version, comment FROM pg_catalog.pg_available_extensions "
                "WHERE name <> 'vector'"
            )
        dbapi_connection.commit()

    with ChatArchive(engine=engine) as archive:
        archive.save_many(CHATS)
        with pytest.raises(NotSupported, match="needs the pgvector extension, which this server lacks"):
            archive.configure_search(embedder=meanings())
        assert archive.search_settings().embedder is None
        assert found(archive.search("car")) == [("pets", 1)]
        with pytest.raises(SchemaNotReady, match="needs an embedder"):
            archive.search("car", mode="hybrid")
    engine.dispose()


def test_the_hnsw_index_is_built_and_scanned_wide_enough_for_recall(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    """The index has more links than pgvector's default; a scan keeps four
    times the candidates a search ranks, or the operator's own larger
    ``hnsw.ef_search``, and the connection's setting is as it was after."""
    archive, _ = pg_archive
    archive.configure_search(embedder=meanings())
    with archive.engine.connect() as connection:
        definition = connection.execute(
            text("SELECT indexdef FROM pg_indexes WHERE indexname LIKE 'ix_embeddings_vectors_%'")
        ).scalar_one()
        assert "m='24'" in definition
        assert "ef_construction='128'" in definition
        assert "::halfvec(32)) halfvec_cosine_ops" in definition
        connection.execute(text("LOAD 'vector'"))
        setting = text("SELECT current_setting('hnsw.ef_search')")
        with _hnsw_scans(connection, 100):
            assert connection.execute(setting).scalar_one() == "400"
        with _hnsw_scans(connection, 5000):
            assert connection.execute(setting).scalar_one() == "1000"
        with _hnsw_scans(connection, 100, 60):  # the archive's vector_scan
            assert connection.execute(setting).scalar_one() == "60"
        connection.execute(text("SET hnsw.ef_search = 700"))
        with _hnsw_scans(connection, 100):
            assert connection.execute(setting).scalar_one() == "700"
        with _hnsw_scans(connection, 100, 60):
            assert connection.execute(setting).scalar_one() == "700"
        assert connection.execute(setting).scalar_one() == "700"


def test_the_scan_of_the_vectors_index_is_a_setting_of_the_archive(embedded: ChatArchive) -> None:
    """``vector_scan`` is kept with the other settings, searched with (on
    PostgreSQL, as the HNSW scan's ``hnsw.ef_search``), and back to the
    default with ``False``; a value out of its range changes nothing."""
    scans: list[str] = []

    def watch(_connection: Any, _cursor: Any, statement: str, parameters: Any, *_: Any) -> None:
        if "set_config" in statement and isinstance(parameters, dict):
            scans.extend(
                parameters[f"v{key[1:]}"]
                for key, name in parameters.items()
                if key.startswith("n") and name == "hnsw.ef_search"
            )

    event.listen(embedded.engine, "before_cursor_execute", watch)
    try:
        assert embedded.search_settings().vector_scan is None
        default = found(embedded.search("car", mode="vector"))
        settings = embedded.configure_search(vector_scan=60)
        assert settings.vector_scan == 60
        assert embedded.search_settings() == settings
        assert settings.embedder == "meanings"  # the other settings as they were
        assert found(embedded.search("car", mode="vector")) == default
        for wrong in (0, 1001, True, "60", 2.5):
            with pytest.raises(InvalidArgument, match="vector_scan must be a whole number from 1 to 1,000"):
                embedded.configure_search(vector_scan=wrong)  # type: ignore[arg-type]
        assert embedded.search_settings() == settings
        assert embedded.configure_search(vector_scan=False).vector_scan is None
        assert found(embedded.search("car", mode="hybrid"))
    finally:
        event.remove(embedded.engine, "before_cursor_execute", watch)
    if embedded.engine.dialect.name == "postgresql":  # each search sets the scan, then puts it back
        assert scans[0::2] == ["400", "60", "400"]
    else:  # every vector compared: no index, no scan
        assert scans == []


def test_a_search_by_meaning_is_ordered_by_the_index_and_ranked_by_exact_distance(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    """The search's ordering is the index's expression (a plan may scan the
    index), and its hits' similarities are those of the stored 32-bit vectors."""
    from chatarchive._backends.postgresql.search import _nearest_statement, vector_text

    archive, _ = pg_archive
    archive.configure_search(embedder=meanings())
    archive.save_many(CHATS)
    statement = _nearest_statement("meanings", DIMENSION, "", candidates=10)
    query = vector_text(meanings().vectors(["car"])[0])
    with archive.engine.begin() as connection:
        connection.execute(text("SET LOCAL enable_seqscan = off"))
        plan = "\n".join(connection.execute(text(f"EXPLAIN {statement.text}"), {"vector": query}).scalars())
    assert "Index Scan using ix_embeddings_vectors_" in plan
    hits = archive.search("car", mode="vector")
    exact = meanings().vectors(["car", "Check the battery of the vehicle first."])
    similarity = sum(a * b for a, b in zip(*exact, strict=True))
    assert [hit.rank for hit in hits if (hit.chat_id, hit.position) == ("garage", 1)] == [
        pytest.approx(similarity, abs=1e-6)
    ]
    assert [hit.rank for hit in hits] == sorted((hit.rank for hit in hits), reverse=True)


def test_vectors_of_up_to_4000_numbers_are_indexed(pg_archive: tuple[ChatArchive, str]) -> None:
    """OpenAI's largest embedding model gives 3,072 numbers: more than an
    HNSW index of 32-bit vectors holds, not more than one of half precision."""
    archive, _ = pg_archive
    wide = Embedder(
        "wide", 3072, lambda texts: [[*vector_of(t), *([0.0] * (3072 - DIMENSION))] for t in texts]
    )
    archive.configure_search(embedder=wide)
    archive.save_many(CHATS)
    assert found(archive.search("car", mode="vector")) == [("garage", 0), ("garage", 1), ("pets", 1)]
    with pytest.raises(InvalidArgument, match="dimension must be at most 4,000, not 4,001"):
        Embedder("wider", 4001, vector_of_each)
