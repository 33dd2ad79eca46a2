"""Search finds words in every script, ranks and snippets them alike on both
databases, and keeps its terms in step with every write, now or later."""

from __future__ import annotations

import asyncio
import re
import threading
import unicodedata
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from chatarchive import AsyncChatArchive, ChatArchive, InvalidArgument, SchemaNotReady, SearchSettings
from chatarchive.bench.workload import generate_chats
from tests.support.databases import throwaway_database
from tests.support.reference_terms import reference_terms

CHATS: list[dict[str, Any]] = [
    {
        "chat_id": "zh",
        "user_id": "li",
        "messages": [
            {"role": "user", "content": "为什么PCR会出现非特异性条带？"},
            {"role": "assistant", "content": "非特异性条带通常来自引物二聚体或退火温度太低。"},
            {"role": "user", "content": "条带很弱怎么办？"},
        ],
    },
    {
        "chat_id": "ja",
        "messages": [
            {"role": "user", "content": "東京タワーに行きました。"},
            {"role": "assistant", "content": [{"type": "text", "text": "東京の天気はどうでしたか？"}]},
        ],
    },
    {
        "chat_id": "ko",
        "messages": [{"role": "user", "content": "서울에서 만나요. 서울 날씨가 좋아요."}],
    },
    {
        "chat_id": "de",
        "messages": [
            {"role": "user", "content": "Die Häuser an der Straße sind schön."},
            {"role": "assistant", "content": "Das Haus am Ende der Strasse ist älter."},
        ],
    },
    {
        "chat_id": "mixed",
        "messages": [
            {"role": "user", "content": "Run the PCR again 🧪 then 检查条带 and send a 😀"},
            {"role": "assistant", "content": "Running it now; the gel 🧪 is ready."},
        ],
    },
]


def found(archive: ChatArchive, query: str, **options: Any) -> list[tuple[str, int]]:
    return [(hit.chat_id, hit.position) for hit in archive.search(query, **options)]


@pytest.fixture
def languages(archive: ChatArchive) -> ChatArchive:
    archive.save_many(CHATS)
    return archive


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("条带", [("zh", 0), ("zh", 1), ("zh", 2), ("mixed", 0)]),  # two characters: one term
        ("特异性", [("zh", 0), ("zh", 1)]),  # three: its two pairs in a row
        ("PCR", [("zh", 0), ("mixed", 0)]),  # Latin inside Chinese
        ("pcr 条带", [("zh", 0), ("mixed", 0)]),
        ('"引物二聚体"', [("zh", 1)]),
        ("东京", []),  # simplified is not traditional: no match
        ("東京", [("ja", 0), ("ja", 1)]),
        ("タワー", [("ja", 0)]),
        ("天気", [("ja", 1)]),  # in a text part
        ("서울", [("ko", 0)]),  # a Korean word with its particle attached
        ("날씨", [("ko", 0)]),
        ("häuser", [("de", 0)]),
        ("STRASSE", [("de", 0), ("de", 1)]),  # "Straße" folds to "strasse"
        ("🧪", [("mixed", 0), ("mixed", 1)]),
        ("😀", [("mixed", 0)]),
        ("run", [("mixed", 0), ("mixed", 1)]),  # English stemming, the default
        ("条带 -pcr", [("zh", 1), ("zh", 2)]),
        ("서울 or タワー", [("ja", 0), ("ko", 0)]),
    ],
)
def test_search_finds_words_in_every_script(languages: ChatArchive, query: str, expected: list[Any]) -> None:
    assert sorted(found(languages, query)) == sorted(expected)


def test_accents_composed_or_not_find_each_other(archive: ChatArchive) -> None:
    composed, decomposed = "Un café crème", unicodedata.normalize("NFD", "Un café crème")
    archive.save_many(
        [
            {"chat_id": "nfc", "messages": [{"role": "user", "content": composed}]},
            {"chat_id": "nfd", "messages": [{"role": "user", "content": decomposed}]},
        ]
    )
    for query in ("café", unicodedata.normalize("NFD", "café"), '"café crème"'):
        assert sorted(found(archive, query)) == [("nfc", 0), ("nfd", 0)], query
    assert {hit.snippet for hit in archive.search("crème")} == {"Un café «crème»"}
    assert archive.get("nfd").messages[0].content == decomposed  # stored as it came


def test_a_snippet_marks_what_matched_in_the_text_as_written(languages: ChatArchive) -> None:
    (hit,) = languages.search("特异性 PCR")
    assert hit.snippet == "为什么«PCR»会出现非«特异性»条带？"
    (hit,) = languages.search("strasse", role="user")
    assert hit.snippet == "Die Häuser an der «Straße» sind schön."
    assert [h.snippet for h in languages.search("🧪", role="assistant")] == [
        "Running it now; the gel «🧪» is ready."
    ]


def test_more_matches_rank_first(languages: ChatArchive) -> None:
    # "条带" twice in the shortest message of the two.
    languages.save({"chat_id": "again", "messages": [{"role": "user", "content": "条带，条带。"}]})
    hits = languages.search("条带")
    assert hits[0].chat_id == "again"
    assert [h.rank for h in hits] == sorted((h.rank for h in hits), reverse=True)


def test_one_character_finds_where_it_begins_a_pair_or_stands_alone(languages: ChatArchive) -> None:
    languages.save({"chat_id": "one", "messages": [{"role": "user", "content": "带3个"}]})
    assert sorted(found(languages, "条")) == [("mixed", 0), ("zh", 0), ("zh", 1), ("zh", 2)]
    assert found(languages, "个") == [("one", 0)]


QUERIES = ["条带", "特异性", "PCR", "東京", "서울", "Straße", "🧪", "run", '"gel 🧪"', "条带 or tower", "the"]


def test_ranking_and_snippets_agree_between_the_databases(tmp_path: Path) -> None:
    corpus = [
        *CHATS,
        *(
            {
                "chat_id": f"filler-{n}",
                "messages": [
                    {"role": "user", "content": f"the run number {n} had 条带 {'and PCR ' * (n % 4)}in it"},
                    {"role": "assistant", "content": [{"type": "text", "text": f"東京 {n}: the gel 🧪 ran"}]},
                ],
            }
            for n in range(30)
        ),
    ]
    results = []
    for dialect in ("sqlite", "postgresql"):
        with throwaway_database(dialect, tmp_path) as url:
            archive = ChatArchive(url)
            try:
                archive.upgrade()
                archive.save_many(corpus)
                results.append(
                    {
                        query: [
                            (h.chat_id, h.position, h.role, h.rank, h.snippet)
                            for h in archive.search(query, limit=200)
                        ]
                        for query in QUERIES
                    }
                )
            finally:
                archive.close()
    sqlite, postgresql = results
    assert all(sqlite[query] for query in QUERIES)
    assert sqlite == postgresql


# -- the archive's configuration --------------------------------------------------------


def test_the_default_settings_find_every_script(own_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = own_archive
    assert archive.search_settings() == SearchSettings(language="english", cjk="bigram", indexing="sync")


def test_a_new_language_indexes_every_message_again(own_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = own_archive
    archive.save_many(CHATS)
    assert found(archive, "haus") == [("de", 1)]  # English stemming leaves "häuser" as it is
    settings = archive.configure_search(language="german")
    assert settings == SearchSettings(language="german")
    assert archive.search_settings() == settings
    assert sorted(found(archive, "haus")) == [("de", 0), ("de", 1)]  # "Häuser" stems to "haus"
    assert sorted(found(archive, "条带")) == [("mixed", 0), ("zh", 0), ("zh", 1), ("zh", 2)]
    archive.configure_search(language="simple")
    assert found(archive, "running") == [("mixed", 1)]  # no stemming


def test_unigrams_find_any_sequence_of_characters(own_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = own_archive
    archive.save_many(CHATS)
    assert found(archive, "か") == []  # "か" ends its run: no pair begins with it
    archive.configure_search(cjk="unigram")
    assert found(archive, "か") == [("ja", 1)]
    assert sorted(found(archive, "带")) == [("mixed", 0), ("zh", 0), ("zh", 1), ("zh", 2)]
    assert sorted(found(archive, "条带")) == [("mixed", 0), ("zh", 0), ("zh", 1), ("zh", 2)]
    assert found(archive, "带很") == [("zh", 2)]


@pytest.mark.parametrize(
    ("setting", "value"),
    [("language", "klingon"), ("cjk", "trigram"), ("indexing", "later"), ("language", 3)],
)
def test_an_unknown_setting_is_refused(
    own_archive: tuple[ChatArchive, str], setting: str, value: Any
) -> None:
    archive, _ = own_archive
    with pytest.raises(InvalidArgument, match=setting):
        archive.configure_search(**{setting: value})
    assert archive.search_settings() == SearchSettings()


def test_a_users_archive_cannot_change_the_settings(archive: ChatArchive) -> None:
    with pytest.raises(Exception, match="configure_search changes the archive for every user"):
        archive.for_user("u").configure_search(language="simple")


# -- deferred indexing ----------------------------------------------------------------------


def stored_terms(archive: ChatArchive) -> list[Any]:
    """Every message's stored terms, in a form both databases compare by."""
    with archive.engine.connect() as connection:
        if archive.engine.dialect.name == "postgresql":
            query = "SELECT chat_id, message_position, terms::text FROM message_terms"
        else:
            query = "SELECT m.chat_id, m.position, t.terms FROM message_terms t JOIN messages m ON m.rowid = t.rowid"
        return sorted(tuple(row) for row in connection.execute(text(query)))


def writes(archive: ChatArchive) -> Iterator[str]:
    """Every kind of write that changes messages, one after another."""
    archive.save_many(CHATS)
    yield "save_many"
    archive.save({**CHATS[0], "messages": [*CHATS[0]["messages"], {"role": "user", "content": "再试一次"}]})
    yield "save over"
    archive.append("ko", [{"role": "assistant", "content": "네, 서울역에서 봐요."}])
    yield "append"
    archive.regenerate(
        "ko", archive.get("ko").messages[-1].uid, [{"role": "assistant", "content": "좋아요!"}]
    )
    yield "regenerate"
    archive.edit("de", archive.get("de").messages[0].uid, "Die Brücke ist alt.")
    yield "edit"
    streamed = archive.begin_message("mixed")
    archive.append_chunk("mixed", streamed.uid, "Gel ")
    archive.append_chunk("mixed", streamed.uid, "電気泳動 done")
    archive.complete_message("mixed", streamed.uid)
    yield "complete_message"
    archive.truncate("zh", 1, delete=True)
    yield "truncate"
    first_answer = archive.get_tree("ko").document.messages[1]
    archive.set_active_leaf("ko", first_answer.uid)
    archive.truncate("ko", 1, delete=True)  # the regenerated answer moves down a place
    assert [m.content for m in archive.get_tree("ko").document.messages][1] == "좋아요!"
    yield "truncate with branches"
    archive.delete("ja")
    yield "delete"


@pytest.mark.parametrize("indexing", ["sync", "deferred"])
def test_every_write_keeps_the_terms_in_step(own_archive: tuple[ChatArchive, str], indexing: str) -> None:
    archive, _ = own_archive
    archive.configure_search(indexing=indexing)
    for write in writes(archive):
        if indexing == "deferred":
            archive.index_pending()
        now = stored_terms(archive)
        archive.rebuild_search_index()
        if indexing == "deferred":
            assert stored_terms(archive) == []  # every chat marked again
            archive.index_pending()
        assert stored_terms(archive) == now, write
    assert found(archive, "電気") == [("mixed", 2)]
    assert found(archive, "브릿지 or brücke") == [("de", 2)]
    assert found(archive, "東京") == []


def test_deferred_writes_are_searchable_once_indexed(own_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = own_archive
    archive.configure_search(indexing="deferred")
    archive.save_many(CHATS)
    archive.append("zh", [{"role": "assistant", "content": "提高退火温度"}])
    results = archive.search("条带")
    assert results == []
    assert results.pending_chats == len(CHATS)
    assert results.pending_since is not None
    assert not results.fresh
    with archive.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM message_terms")).scalar_one() == 0
    assert archive.index_pending(batch_size=2, limit=3) == 3
    assert archive.index_pending(batch_size=2) == len(CHATS) - 3
    assert archive.index_pending() == 0
    results = archive.search("退火")
    assert sorted((h.chat_id, h.position) for h in results) == [("zh", 1), ("zh", 3)]
    assert results.fresh
    # Back to indexing as they are written: what is still marked is indexed at once.
    archive.append("ko", [{"role": "user", "content": "내일 서울에서"}])
    assert archive.search("내일").pending_chats == 1
    archive.configure_search(indexing="sync")
    assert found(archive, "내일") == [("ko", 1)]


def test_search_reports_only_the_users_pending_chats(own_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = own_archive
    archive.configure_search(indexing="deferred")
    archive.save_many(CHATS)
    assert archive.for_user("li").search("条带").pending_chats == 1
    assert archive.search("条带", user_id="nobody").pending_chats == 0


def test_deferred_indexing_through_asyncio(own_archive: tuple[ChatArchive, str]) -> None:
    _, url = own_archive

    async def scenario() -> tuple[int, list[str]]:
        async with AsyncChatArchive(url) as archive:
            await archive.configure_search(indexing="deferred")
            await archive.save_many(CHATS)
            indexed = await archive.index_pending()
            return indexed, [hit.chat_id for hit in await archive.search("서울")]

    assert asyncio.run(scenario()) == (len(CHATS), ["ko"])


def test_search_off_marks_writes_and_indexes_them_when_on_again(own_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = own_archive
    archive.set_search_index(False)
    archive.save_many(CHATS)
    with pytest.raises(SchemaNotReady):
        archive.search("条带")
    assert archive.index_pending() == 0  # nothing is indexed while search is off
    archive.set_search_index(True)
    assert sorted(found(archive, "条带")) == [("mixed", 0), ("zh", 0), ("zh", 1), ("zh", 2)]


def test_an_indexer_beside_writers_leaves_every_message_searchable(
    own_archive: tuple[ChatArchive, str],
) -> None:
    archive, _ = own_archive
    archive.configure_search(indexing="deferred")
    archive.save_many({"chat_id": f"w{n}", "messages": []} for n in range(3))
    done = threading.Event()
    indexed: list[int] = []

    def write(chat: int) -> None:
        for index in range(30):
            archive.append(f"w{chat}", [{"role": "user", "content": f"条带 number{chat}x{index}"}])

    def index() -> None:
        while not done.is_set():
            indexed.append(archive.index_pending(batch_size=1))

    indexer = threading.Thread(target=index)
    indexer.start()
    writers = [threading.Thread(target=write, args=(chat,)) for chat in range(3)]
    for writer in writers:
        writer.start()
    for writer in writers:
        writer.join()
    done.set()
    indexer.join()
    archive.index_pending()
    assert sum(indexed) > 0  # the indexer ran while the writers did
    assert len(archive.search("条带", limit=200)) == 90
    now = stored_terms(archive)
    archive.rebuild_search_index()
    archive.index_pending()
    assert stored_terms(archive) == now


def test_indexers_side_by_side_each_index_chats_the_other_does_not_hold(
    server_archive: tuple[ChatArchive, str],
) -> None:
    """Several ``chatarchive db index --follow`` share one backlog: a batch
    passes over the marked chats another indexer (or a writer) holds and
    takes the next ones, rather than finding nothing to do."""
    archive, _ = server_archive
    archive.configure_search(indexing="deferred")
    archive.save_many(
        {"chat_id": f"c{n:02}", "messages": [{"role": "user", "content": f"条带 {n}"}]} for n in range(12)
    )
    with archive.engine.connect() as other_indexer:
        for chat_id in ("c00", "c01", "c02"):  # the oldest marked chats, one lock each (as on Citus)
            other_indexer.execute(text("SELECT 1 FROM chats WHERE chat_id = :c FOR UPDATE"), {"c": chat_id})
        assert archive.index_pending(batch_size=3, limit=3) == 3
        assert sorted(hit.chat_id for hit in archive.search("条带")) == ["c03", "c04", "c05"]
    assert archive.index_pending() == 9
    assert archive.search("条带", limit=20).fresh


def test_many_messages_terms_keep_a_chat_id_that_needs_escaping(archive: ChatArchive) -> None:
    # PostgreSQL copies a batch's terms; the chat id is stored escaped, as in every other table.
    chat_id = "tab\there\ue000private"
    archive.save_many(
        [{"chat_id": chat_id, "messages": [{"role": "user", "content": f"条带 {n}"} for n in range(30)]}]
    )
    assert {hit.chat_id for hit in archive.search("条带", limit=50)} == {chat_id}
    now = stored_terms(archive)
    archive.rebuild_search_index()
    assert stored_terms(archive) == now
    archive.delete(chat_id)
    assert stored_terms(archive) == []


# -- threads --------------------------------------------------------------------------------


def stored_term_lists(archive: ChatArchive) -> dict[tuple[str, int], list[str]]:
    """Every message's stored terms, in order."""
    found: dict[tuple[str, int], list[str]] = {}
    for chat_id, position, terms in stored_terms(archive):
        if archive.engine.dialect.name == "postgresql":
            places = sorted(
                (int(place), term)
                for term, listed in re.findall(r"'([^']*)':([0-9,]+)", terms)
                for place in listed.split(",")
            )
            found[(chat_id, position)] = [term for _, term in places]
        else:
            found[(chat_id, position)] = terms.split(" ")
    return found


def reference_terms_of(docs: list[dict[str, Any]]) -> dict[tuple[str, int], list[str]]:
    """The terms each message of ``docs`` has, found piece by piece in one thread."""
    expected = {}
    for doc in docs:
        for position, message in enumerate(doc["messages"]):
            content = message["content"]
            if isinstance(content, list):
                content = "\n".join(part["text"] for part in content if part["type"] == "text")
            terms = reference_terms(unicodedata.normalize("NFC", content or ""))
            if terms:
                expected[(doc["chat_id"], position)] = terms
    return expected


def test_threads_sharing_an_archive_store_the_terms_one_thread_finds(
    own_archive: tuple[ChatArchive, str],
) -> None:
    archive, _ = own_archive
    docs = list(generate_chats(32, 10, seed=21))  # long texts in a dozen scripts
    start = threading.Barrier(4)

    def save(share: list[dict[str, Any]]) -> None:
        start.wait()
        for doc in share:
            archive.save(doc)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(save, [docs[index::4] for index in range(4)]))
    assert stored_term_lists(archive) == reference_terms_of(docs)
    archive.delete_user(docs[0]["user_id"])
    rest = [doc for doc in docs if doc["user_id"] != docs[0]["user_id"]]
    archive.save_many(rest, writers=3, on_error=lambda index, error: pytest.fail(repr(error)))
    assert stored_term_lists(archive) == reference_terms_of(rest)
