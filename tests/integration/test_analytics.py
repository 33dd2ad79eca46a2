"""Views, analytics functions, the ready queries and search, on a fixture with known answers."""

from __future__ import annotations

import asyncio
import re
import sqlite3
from contextlib import closing
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    ChatRepository,
    InvalidArgument,
    SchemaNotReady,
    analytics,
)
from chatarchive._terms import MAX_TERMS
from tests.support.analytics_fixture import CHATS, EPSILON
from tests.support.async_shim import in_sync_session
from tests.support.statements import recorded_statements

#: The documentation's ready queries, each one ```sql block headed "-- query: NAME".
READY_QUERIES_PAGE = Path(__file__).resolve().parents[2] / "docs" / "sql" / "queries.md"


def stats(session: Any, query: Any, **filters: Any) -> Any:
    """An analytics function on the test's session (whichever API it is for)."""
    return in_sync_session(session, lambda sync: query(sync, **filters))


@pytest.fixture
def loaded(repo: ChatRepository) -> ChatRepository:
    repo.save_many(CHATS)
    return repo


def rows(session: Session, sql: str) -> list[tuple[Any, ...]]:
    return [tuple(_plain(value) for value in row) for row in session.execute(text(sql))]


def _plain(value: Any) -> Any:
    """Numbers as floats rounded to 3 places (PostgreSQL gives Decimals, SQLite floats)."""
    if isinstance(value, bool) or value is None or isinstance(value, (str, datetime)):
        return value
    if isinstance(value, int):
        return value
    return round(float(value), 3)


def test_message_texts(loaded: ChatRepository, session: Session) -> None:
    texts = {
        (chat_id, position): value
        for chat_id, position, value in rows(session, "SELECT chat_id, position, text FROM message_texts")
    }
    assert texts[("delta", 0)] == "Compare buffers\nA and B."
    assert texts[("delta", 1)] == ""
    assert texts[("alpha", 2)] is None
    assert texts[("beta", 0)] == "What is on this gel image?"
    assert len(texts) == 18


def test_tool_call_results(loaded: ChatRepository, session: Session) -> None:
    assert rows(
        session,
        "SELECT chat_id, call_position, call_index, kind, call_id, tool_name, arguments, result_position, "
        "result_text, answered, position_distance FROM tool_call_results "
        "ORDER BY chat_id, call_position, call_index",
    ) == [
        ("alpha", 2, 0, "tool_call", "a1", "search", '{"q": "pcr bands"}', 3, "primer dimers", 1, 1),
        ("alpha", 6, 0, "tool_call", "a2", "calc", '{"tm": 62}', None, None, 0, None),
        ("delta", 1, 0, "tool_call", "d1", "search", '"buffer A"', 2, "A: Tris", 1, 1),
        ("delta", 1, 1, "tool_call", "d2", "search", '"buffer B"', 3, "B: HEPES", 1, 2),
        ("gamma", 1, 0, "function_call", None, "lookup", '{"plate": 7}', 2, "plate 7: 96 wells", 1, 1),
    ]


def test_tool_call_results_answer_texts(repo: ChatRepository, session: Session) -> None:
    """The first tool message answering a call is its result, whatever its content's form."""
    calls = [
        {"id": name, "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for name in ("c1", "c2", "c3")
    ]
    call = {"role": "assistant", "content": None, "tool_calls": calls}
    repo.save(
        {
            "chat_id": "answers",
            "messages": [
                {"role": "user", "content": "go"},
                call,
                {
                    "role": "tool",
                    "tool_call_id": "c1",
                    "content": [
                        {"type": "text", "text": "first"},
                        {"type": "image_url", "image_url": {"url": "https://example.com/x.png"}},
                        {"type": "text", "text": "answer"},
                    ],
                },
                {"role": "tool", "tool_call_id": "c2", "content": None},
                {"role": "tool", "tool_call_id": "c1", "content": "a later answer"},
                {"role": "tool", "tool_call_id": "c3", "content": ""},
            ],
        }
    )
    assert rows(
        session,
        "SELECT call_id, result_position, result_text, answered, position_distance FROM tool_call_results "
        "WHERE chat_id = 'answers' ORDER BY call_index",
    ) == [("c1", 2, "first\nanswer", 1, 1), ("c2", 3, None, 1, 2), ("c3", 5, "", 1, 4)]


def test_chat_stats(loaded: ChatRepository, session: Session) -> None:
    columns = (
        "chat_id, user_id, model, workflow_name, created_day, created_week, message_count, system_messages, "
        "user_messages, assistant_messages, tool_messages, tool_calls, unanswered_tool_calls, text_parts, "
        "image_parts, prompt_tokens, completion_tokens, feedback_count, mean_score"
    )
    assert rows(session, f"SELECT {columns} FROM chat_stats ORDER BY chat_id") == [
        ("alpha", "u1", "m1", "qa", "2026-03-02", "2026-03-02", 7, 1, 2, 3, 1, 2, 1, 6, 0, 400, 60, 1, 1.0),
        ("beta", "u1", "m2", "qa", "2026-03-03", "2026-03-02", 2, 0, 1, 1, 0, 0, 0, 2, 1, 50, 10, 1, -1.0),
        ("delta", "u2", "m1", None, "2026-03-10", "2026-03-09", 5, 0, 1, 2, 2, 2, 0, 6, 0, 10, 5, 2, 0.5),
        (
            "gamma",
            "u2",
            "m1",
            "cleanup",
            "2026-03-10",
            "2026-03-09",
            4,
            0,
            1,
            2,
            1,
            1,
            0,
            3,
            0,
            0,
            0,
            0,
            None,
        ),
    ]


DAILY = [
    ("2026-03-02", "m1", 1, 7, 2, 2, 400, 60),
    ("2026-03-03", "m2", 1, 2, 1, 0, 50, 10),
    ("2026-03-10", "m1", 2, 7, 2, 3, 0, 0),
    ("2026-03-11", "m1", 1, 2, 0, 0, 10, 5),
]


def test_daily_usage_view(loaded: ChatRepository, session: Session) -> None:
    sql = (
        "SELECT day, model, chats, messages, user_turns, tool_calls, prompt_tokens, completion_tokens "
        "FROM daily_usage ORDER BY day, model"
    )
    assert rows(session, sql) == DAILY


def test_feedback_summary_view(loaded: ChatRepository, session: Session) -> None:
    sql = (
        "SELECT model, workflow_name, feedback_count, mean_score, positive_share, negative_share "
        "FROM feedback_summary ORDER BY model, feedback_count"
    )
    assert rows(session, sql) == [
        ("m1", "qa", 1, 1.0, 1.0, 0.0),
        ("m1", None, 2, 0.5, 0.5, 0.0),
        ("m2", "qa", 1, -1.0, 0.0, 1.0),
    ]


# -- the analytics module ----------------------------------------------------------


def test_daily_usage_function(loaded: ChatRepository, session: Session) -> None:
    result = stats(session, analytics.daily_usage)
    assert [
        (
            r.day.isoformat(),
            r.model,
            r.chats,
            r.messages,
            r.user_turns,
            r.tool_calls,
            r.prompt_tokens,
            r.completion_tokens,
        )
        for r in result
    ] == DAILY
    only_u2 = stats(session, analytics.daily_usage, user_id="u2", since=datetime(2026, 3, 11, tzinfo=UTC))
    assert [(r.day, r.messages) for r in only_u2] == [(date(2026, 3, 11), 2)]
    assert [r.day for r in stats(session, analytics.daily_usage, workflow="qa")] == [
        date(2026, 3, 2),
        date(2026, 3, 3),
    ]
    naive = stats(session, analytics.daily_usage, user_id="u2", since=datetime(2026, 3, 11))  # UTC
    assert [(r.day, r.messages) for r in naive] == [(date(2026, 3, 11), 2)]
    for bad in ("2026-03-11", date(2026, 3, 11)):
        with pytest.raises(InvalidArgument, match="until must be a datetime") as caught:
            stats(session, analytics.daily_usage, until=bad)
        assert caught.value.argument == "until"


def test_model_and_workflow_usage(loaded: ChatRepository, session: Session) -> None:
    models = {r.model: r for r in stats(session, analytics.model_usage)}
    assert (models["m1"].chats, models["m1"].messages, models["m1"].tool_calls) == (3, 16, 5)
    assert (models["m1"].feedback_count, round(models["m1"].mean_score or 0, 3)) == (3, 0.667)
    assert (models["m2"].prompt_tokens, models["m2"].mean_score) == (50, -1.0)
    workflows = {r.workflow: r for r in stats(session, analytics.workflow_usage)}
    assert set(workflows) == {"qa", "cleanup", None}
    assert (workflows["qa"].chats, workflows["qa"].prompt_tokens, workflows["qa"].mean_score) == (2, 450, 0.0)
    assert workflows["cleanup"].mean_score is None
    assert [
        r.model for r in stats(session, analytics.model_usage, until=datetime(2026, 3, 3, tzinfo=UTC))
    ] == ["m1"]


def test_tool_usage_and_users(loaded: ChatRepository, session: Session) -> None:
    tools = [
        (r.tool_name, r.calls, r.answered, r.unanswered, r.unanswered_share)
        for r in stats(session, analytics.tool_usage)
    ]
    assert tools == [("search", 3, 3, 0, 0.0), ("calc", 1, 0, 1, 1.0), ("lookup", 1, 1, 0, 0.0)]
    assert [r.tool_name for r in stats(session, analytics.tool_usage, model="m1", workflow="cleanup")] == [
        "lookup"
    ]
    users = {r.user_id: r for r in stats(session, analytics.user_activity)}
    assert (users["u1"].chats, users["u1"].messages, users["u1"].user_turns) == (2, 9, 3)
    assert users["u2"].first_chat_at == datetime(2026, 3, 10, 12, tzinfo=UTC)
    assert users["u2"].last_chat_at == datetime(2026, 3, 10, 23, 30, tzinfo=UTC)


def test_feedback_summary_function(loaded: ChatRepository, session: Session) -> None:
    summary = [
        (r.model, r.workflow, r.feedback_count, r.mean_score)
        for r in stats(session, analytics.feedback_summary)
    ]
    assert summary == [("m1", None, 2, 0.5), ("m1", "qa", 1, 1.0), ("m2", "qa", 1, -1.0)]
    late = stats(session, analytics.feedback_summary, since=datetime(2026, 3, 11, tzinfo=UTC))
    assert [(r.model, r.feedback_count) for r in late] == [("m1", 2)]


def test_analytics_take_the_archive_itself(archive: ChatArchive) -> None:
    archive.save_many(CHATS)
    assert [r.tool_name for r in analytics.tool_usage(archive)] == ["search", "calc", "lookup"]
    functions = [
        analytics.daily_usage,
        analytics.model_usage,
        analytics.workflow_usage,
        analytics.user_activity,
        analytics.tool_usage,
        analytics.feedback_summary,
    ]
    for function in functions:  # anything else raised AttributeError
        for wrong in (archive.engine, archive.url.render_as_string(), None):
            with pytest.raises(InvalidArgument, match="source must be a ChatArchive, a Session") as caught:
                function(wrong)  # type: ignore[arg-type]
            assert caught.value.argument == "source"


def test_analytics_are_operations_of_every_face_sync_and_asyncio(
    archive: ChatArchive, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    archive.save_many(CHATS)
    since = datetime(2000, 1, 1, tzinfo=UTC)
    expected = analytics.tool_usage(archive)
    assert archive.tool_usage(since=since) == expected
    with archive.transaction() as repository:
        assert repository.tool_usage(since=since) == expected
    async_archive = AsyncChatArchive(engine=async_engine)
    with pytest.raises(InvalidArgument, match=r"not AsyncChatArchive \(from asyncio: await async_archive"):
        analytics.tool_usage(async_archive)  # type: ignore[arg-type]

    async def asked() -> list[Any]:
        answers: list[Any] = [await async_archive.tool_usage(since=since)]
        async with async_archive.transaction() as repository:
            answers.append(await repository.tool_usage(since=since))
        answers.append(await async_archive.user_activity(user_id="u2"))
        with pytest.raises(InvalidArgument, match="unknown filters"):
            await async_archive.model_usage(colour="blue")  # type: ignore[call-arg]
        return answers

    from_asyncio, in_transaction, u2 = runner.run(asked())
    assert from_asyncio == in_transaction == expected
    assert u2 == archive.user_activity(user_id="u2")
    assert [row.user_id for row in u2] == ["u2"]


def test_analytics_give_and_take_text_with_nul_as_it_is(archive: ChatArchive) -> None:
    # PostgreSQL stores NUL escaped: the functions gave the escaped text
    # ('a\ue000\ue002b') and a filter with NUL failed in the driver (DatabaseError).
    call = {"id": "i\x00", "type": "function", "function": {"name": "t\x00n", "arguments": "{}"}}
    archive.save(
        {
            "chat_id": "n\x00c",
            "user_id": "a\x00b",
            "model": "m\x00",
            "workflow": {"name": "w\x00f"},
            "messages": [
                {"role": "user", "content": "x"},
                {"role": "assistant", "content": None, "tool_calls": [call]},
                {"role": "tool", "tool_call_id": "i\x00", "content": "r"},
            ],
            "feedback": [{"score": 1}],
        }
    )
    mine: dict[str, Any] = {"user_id": "a\x00b", "model": "m\x00"}
    assert [r.user_id for r in analytics.user_activity(archive, **mine)] == ["a\x00b"]
    assert [r.user_id for r in analytics.user_activity(archive.for_user("a\x00b"))] == ["a\x00b"]
    assert [r.model for r in analytics.model_usage(archive, **mine)] == ["m\x00"]
    assert [r.model for r in analytics.daily_usage(archive, **mine)] == ["m\x00"]
    assert [r.tool_name for r in analytics.tool_usage(archive, **mine)] == ["t\x00n"]
    assert [r.model for r in analytics.feedback_summary(archive, **mine)] == ["m\x00"]
    assert analytics.user_activity(archive, user_id="a")[:1] == []
    first = analytics.user_activity(archive)[0].first_chat_at
    assert first.tzinfo is UTC  # not PostgreSQL's zoneinfo Etc/UTC
    workflows = [r.workflow for r in analytics.workflow_usage(archive)]
    if archive.engine.dialect.name == "postgresql":
        assert workflows == ["w\x00f"]
        assert [r.chats for r in analytics.workflow_usage(archive, workflow="w\x00f")] == [1]
    else:  # SQLite's JSON functions end a string at NUL (docs: Tables, Storage details)
        assert workflows == ["w"]


# -- ready queries ---------------------------------------------------------------------

READY_ANSWERS: dict[str, list[tuple[Any, ...]]] = {
    "tool_failure_rate": [("calc", 1, 1, 1.0), ("lookup", 1, 0, 0.0), ("search", 3, 0, 0.0)],
    "chats_per_user_per_week": [("u1", "2026-03-02", 2), ("u2", "2026-03-09", 2)],
    "user_turns_before_first_tool_call": [(1.0,)],
    "feedback_by_model_per_month": [("m1", "2026-03", 3, 0.667), ("m2", "2026-03", 1, -1.0)],
    "longest_chats": [("alpha", "u1", 7), ("delta", "u2", 5), ("gamma", "u2", 4), ("beta", "u1", 2)],
    "tokens_per_workflow": [("qa", 450, 70, 520), ("(none)", 10, 5, 15), ("cleanup", 0, 0, 0)],
    "multimodal_share": [(0.25,)],
    "unanswered_tool_calls": [("alpha", 6, "calc", '{"tm": 62}')],
    "busiest_days": [("2026-03-02", 7), ("2026-03-10", 7), ("2026-03-03", 2), ("2026-03-11", 2)],
    # With EPSILON, a chat with branches, stored too:
    "regeneration_rate_per_model": [("m2", 5, 2, 0.4), ("m1", 7, 0, 0.0)],
    "rejected_answers": [("epsilon", "e-a1", "Taq.", -1.0), ("epsilon", "e-a3", "Phusion.", None)],
}
#: The ready queries about branches, answered over CHATS and EPSILON.
ABOUT_BRANCHES = {"regeneration_rate_per_model", "rejected_answers"}


def documented_queries() -> dict[str, str]:
    page = READY_QUERIES_PAGE.read_text(encoding="utf-8")
    return dict(re.findall(r"```sql\n-- query: (\w+)\n(.*?)```", page, flags=re.DOTALL))


def test_the_documentation_has_the_ready_queries() -> None:
    assert set(documented_queries()) == set(READY_ANSWERS)
    assert len(READY_ANSWERS) >= 8
    assert {name: sql.strip() for name, sql in documented_queries().items()} == {
        name: sql.strip() for name, sql in analytics.READY_QUERIES.items()
    }


@pytest.mark.parametrize("name", sorted(READY_ANSWERS))
def test_a_ready_query_gives_the_known_answer(loaded: ChatRepository, session: Session, name: str) -> None:
    if name in ABOUT_BRANCHES:
        loaded.save(EPSILON)
    assert rows(session, documented_queries()[name]) == READY_ANSWERS[name]


# -- search -------------------------------------------------------------------------------


def test_search_finds_ranks_and_highlights(loaded: ChatRepository) -> None:
    hits = loaded.search("primer")
    assert [(h.chat_id, h.position, h.role) for h in hits] == [
        ("alpha", 3, "tool"),
        ("alpha", 4, "assistant"),
    ]
    assert all("«" in h.snippet and "»" in h.snippet for h in hits)
    assert hits[0].message_uid == loaded.get("alpha").messages[3].uid
    assert hits[0].created_at == datetime(2026, 3, 2, 10, 3, tzinfo=UTC)


def test_search_syntax(loaded: ChatRepository) -> None:
    def found(query: str) -> list[tuple[str, int]]:
        return [(h.chat_id, h.position) for h in loaded.search(query)]

    assert sorted(found("band")) == [("alpha", 1), ("beta", 1)]  # stemming: "band" finds "bands"
    assert found("nonspecific bands") == [("alpha", 1)]
    assert found('"primer dimers"') == [("alpha", 3), ("alpha", 4)]
    assert found("primer -probably") == [("alpha", 3)]
    assert sorted(found("tris or hepes")) == [("delta", 2), ("delta", 3), ("delta", 4)]
    assert found("compare buffers") == [("delta", 0)]
    # Only excluded words find nothing, on both databases (PostgreSQL's
    # websearch_to_tsquery would match every message without them).
    for query in ("-probably", '-"primer dimers" or -band', "or -band"):
        assert found(query) == [], query


@pytest.mark.parametrize(
    "query", ["", "   ", "'", "&", ":*", "!!", "-", '"', "or", "the", "a & b | !c", "%_\\"]
)
def test_odd_search_input_is_harmless(loaded: ChatRepository, query: str) -> None:
    assert isinstance(loaded.search(query), list)


def test_a_query_of_more_than_64_words_is_refused(loaded: ChatRepository) -> None:
    # PostgreSQL's snippets of a query of thousands of words cost seconds a hit:
    # a search box could hold a backend for minutes. Punctuation does not count as words.
    assert [h.position for h in loaded.search(" ".join(["primer"] * 64) + " -- & !")] == [3, 4]
    for query in [" ".join(["primer"] * 65), '"' + "primer " * 3000 + '"', "a-" * 65]:
        with pytest.raises(InvalidArgument) as error:
            loaded.search(query)
        assert error.value.argument == "query"
        assert "at most 64" in str(error.value)


def test_search_filters(loaded: ChatRepository) -> None:
    assert [h.chat_id for h in loaded.search("plate", user_id="u2")] == ["gamma", "gamma", "gamma"]
    assert loaded.search("plate", user_id="u1") == []
    assert [h.position for h in loaded.search("plate", role="function")] == [2]
    assert [h.chat_id for h in loaded.search("gel", model="m2")] == ["beta"]
    assert loaded.search("gel", model="m1") == []
    assert [h.position for h in loaded.search("hepes", since=datetime(2026, 3, 11, tzinfo=UTC))] == [3, 4]
    assert len(loaded.search("plate", limit=2)) == 2


def test_search_through_the_archive(archive: ChatArchive) -> None:
    archive.save_many(CHATS)
    assert [h.chat_id for h in archive.search("dimers")] == ["alpha", "alpha"]
    archive.delete("alpha")
    assert archive.search("dimers") == []


def test_a_text_of_megabytes_of_distinct_words_is_saved_and_searched(archive: ChatArchive) -> None:
    # A pasted CSV or log: 2.4 MB whose words are all different. PostgreSQL's
    # tsvector holds at most 1 MB of distinct words: a message's first
    # MAX_TERMS terms are indexed, on both databases.
    words = [f"w{n:07d}x" for n in range(240_000)]
    pasted = " ".join(words)
    doc = {
        "chat_id": "paste",
        "messages": [
            {"role": "user", "content": pasted},
            {"role": "user", "content": [{"type": "text", "text": pasted}]},
        ],
    }
    archive.save(doc)
    assert archive.get("paste").to_openai() == doc["messages"]
    assert [h.position for h in archive.search(words[0])] == [0, 1]
    assert [h.position for h in archive.search(words[MAX_TERMS - 1])] == [0, 1]
    assert archive.search(words[MAX_TERMS]) == []  # beyond the first MAX_TERMS terms: not indexed


def test_search_uses_the_full_text_indexes(pg_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = pg_archive
    archive.save_many(CHATS)
    with recorded_statements(archive.engine) as executed:
        archive.search("primer")
    (statement, parameters), *_ = [(s, p) for s, p in executed if "AS tsquery" in s]
    with archive.engine.connect() as connection:
        connection.exec_driver_sql("SET enable_seqscan = off")
        plan = connection.exec_driver_sql(f"EXPLAIN {statement}", parameters).scalars().all()
    assert any("ix_message_terms_terms" in line for line in plan), "\n".join(plan)


# 120 messages say "ribosome", 60 say "plasmid", 3 of them say both.
SAMPLING_CHAT = {
    "chat_id": "sampling",
    "messages": [{"role": "user", "content": f"ribosome note {n}"} for n in range(117)]
    + [{"role": "user", "content": f"plasmid note {n}"} for n in range(57)]
    + [{"role": "user", "content": f"ribosome and plasmid, together {n}"} for n in range(3)],
}


@pytest.fixture
def few_samples(monkeypatch: pytest.MonkeyPatch) -> None:
    """PostgreSQL's first, sampled search pass takes ~5 index entries a word."""
    monkeypatch.setattr("chatarchive._backends.postgresql.search.SAMPLED_MATCHES", 5)


def save_indexed(archive: ChatArchive, doc: dict[str, Any]) -> None:
    """Saves ``doc`` and moves new GIN entries from the index's pending list into
    its tree, as autovacuum does (only entries in the tree are ever sampled)."""
    archive.save(doc)
    if archive.engine.dialect.name == "postgresql":
        with archive.engine.begin() as connection:
            connection.execute(text("SELECT gin_clean_pending_list('ix_message_terms_terms')"))


@pytest.mark.usefixtures("few_samples")
def test_a_sampled_search_still_finds_rare_co_occurrences(archive: ChatArchive) -> None:
    save_indexed(archive, SAMPLING_CHAT)
    assert sorted(h.position for h in archive.search("ribosome plasmid")) == [174, 175, 176]
    common = archive.search("ribosome", limit=5)
    assert len(common) == 5
    assert all("ribosome" in h.snippet for h in common)


@pytest.mark.usefixtures("few_samples")
def test_search_returns_as_many_hits_as_asked_for(archive: ChatArchive) -> None:
    save_indexed(archive, SAMPLING_CHAT)
    assert len(archive.search("ribosome", limit=500)) == 120
    assert len(archive.search("ribosome", limit=110)) == 110


@pytest.mark.usefixtures("few_samples")
def test_search_puts_back_the_connections_own_index_setting(pg_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = pg_archive
    save_indexed(archive, SAMPLING_CHAT)
    with Session(archive.engine) as session:
        session.execute(text("SET gin_fuzzy_search_limit = 123"))
        assert len(ChatRepository(session).search("ribosome")) == 20
        assert session.execute(text("SHOW gin_fuzzy_search_limit")).scalar_one() == "123"


def compact(url: str) -> None:
    """What an operator runs to reclaim space: SQLite's VACUUM (it rebuilds the
    file, and may renumber rowids, which the full-text tables are keyed on);
    PostgreSQL's VACUUM FULL (it rewrites the tables and their indexes)."""
    parsed = make_url(url)
    if parsed.get_backend_name() == "sqlite":
        with closing(sqlite3.connect(str(parsed.database), isolation_level=None)) as connection:
            connection.execute("VACUUM")
        return
    with psycopg.connect(parsed.set(drivername="postgresql").render_as_string(False), autocommit=True) as pg:
        pg.execute("VACUUM FULL messages, content_parts")


def test_search_finds_the_same_messages_after_compaction(own_archive: tuple[ChatArchive, str]) -> None:
    archive, url = own_archive
    archive.save_many(
        {
            "chat_id": f"c{n}",
            "messages": [
                {"role": "user", "content": f"alpha{n} shared"},
                {"role": "assistant", "content": [{"type": "text", "text": f"beta{n} shared"}]},
            ],
        }
        for n in range(30)
    )
    for n in range(0, 30, 3):  # gaps in the rows before the compaction
        archive.delete(f"c{n}")
    compact(url)
    archive.delete("c1")  # the full-text tables are kept in step afterwards too
    archive.save({"chat_id": "late", "messages": [{"role": "user", "content": "alpha99 shared"}]})

    kept = [n for n in range(30) if n % 3 and n != 1]
    for n in kept:
        assert [(h.chat_id, h.position) for h in archive.search(f"alpha{n}")] == [(f"c{n}", 0)]
        assert [(h.chat_id, h.position, h.snippet) for h in archive.search(f"beta{n}")] == [
            (f"c{n}", 1, f"«beta{n}» shared")
        ]
    for n in (0, 1, 3):
        assert archive.search(f"alpha{n}") == []
    assert [h.chat_id for h in archive.search("alpha99")] == ["late"]
    assert len(archive.search("shared", limit=100)) == 2 * len(kept) + 1


def renumber_rows(url: str) -> None:
    """What a dump and reload without rowids does to SQLite's tables."""
    with closing(sqlite3.connect(str(make_url(url).database), isolation_level=None)) as connection:
        for table in ("messages", "content_parts"):
            connection.execute(f"UPDATE {table} SET rowid = rowid + 100000")


@pytest.mark.parametrize("through", ["sync", "async"])
def test_rebuilding_the_search_index(own_archive: tuple[ChatArchive, str], through: str) -> None:
    archive, url = own_archive
    archive.save_many(CHATS)
    before = archive.search("primer")
    assert before
    if archive.engine.dialect.name == "sqlite":
        renumber_rows(url)
        assert archive.search("primer") != before  # the search tables point at the old rowids
    if through == "async":
        asyncio.run(_rebuild_async(url))
    else:
        archive.rebuild_search_index()
    assert archive.search("primer") == before
    archive.delete("alpha")  # the triggers find what they delete after the rebuild
    assert archive.search("dimers") == []
    assert [h.chat_id for h in archive.search("primer")] == [
        h.chat_id for h in before if h.chat_id != "alpha"
    ]


async def _rebuild_async(url: str) -> None:
    async with AsyncChatArchive(url) as archive:
        await archive.rebuild_search_index()


def stored_terms(archive: ChatArchive) -> int:
    """How many messages have search terms stored."""
    with archive.engine.connect() as connection:
        return int(connection.execute(text("SELECT count(*) FROM message_terms")).scalar_one())


async def _set_search_index_async(url: str, enabled: bool) -> bool:
    async with AsyncChatArchive(url) as archive:
        await archive.set_search_index(enabled)
        if not enabled:
            with pytest.raises(SchemaNotReady, match="search-index on"):
                await archive.search("primer")
        return await archive.search_index()


@pytest.mark.parametrize("through", ["sync", "async"])
def test_the_search_index_off_and_on_again(own_archive: tuple[ChatArchive, str], through: str) -> None:
    archive, url = own_archive
    archive.save_many(CHATS)
    indexed = stored_terms(archive)
    assert indexed > 0
    before = {(h.chat_id, h.position) for h in archive.search("primer")}
    assert ("alpha", 3) in before

    def set_search_index(enabled: bool) -> None:
        if through == "async":
            assert asyncio.run(_set_search_index_async(url, enabled)) is enabled
        else:
            archive.set_search_index(enabled)
            assert archive.search_index() is enabled

    set_search_index(False)
    assert stored_terms(archive) == 0
    for call in (lambda: archive.search("primer"), archive.rebuild_search_index):
        with pytest.raises(SchemaNotReady, match="search-index on"):
            call()
    set_search_index(False)  # already off: nothing to do
    # Writes go on without it: saves (bulk too), appends, deletes.
    archive.delete("alpha")
    archive.save({"chat_id": "late", "messages": [{"role": "user", "content": "zebrafish primer"}]})
    archive.append("late", [{"role": "assistant", "content": [{"type": "text", "text": "a primer"}]}])
    archive.save_many([{"chat_id": "bulk", "messages": [{"role": "user", "content": "primer"}]}], bulk=True)

    set_search_index(True)
    expected = {hit for hit in before if hit[0] != "alpha"} | {("late", 0), ("late", 1), ("bulk", 0)}
    assert {(h.chat_id, h.position) for h in archive.search("primer")} == expected
    terms = stored_terms(archive)
    set_search_index(True)  # already on: nothing to do
    assert stored_terms(archive) == terms
    archive.delete("late")  # kept in step again
    assert archive.search("zebrafish") == []
    archive.rebuild_search_index()
    assert {(h.chat_id, h.position) for h in archive.search("primer")} == expected - {
        ("late", 0),
        ("late", 1),
    }


def test_a_time_range_of_daily_usage_reads_only_that_range(pg_archive: tuple[ChatArchive, str]) -> None:
    """daily_usage since a recent day finds that day's messages through the index
    on messages.created_at, instead of reading every message of the archive."""
    archive, _ = pg_archive
    start = datetime(2025, 1, 1, tzinfo=UTC)
    archive.save_many(
        {
            "chat_id": f"day-{n}",
            "model": "m",
            "messages": [
                {"role": "user", "content": "hi", "created_at": (start + timedelta(days=n)).isoformat()},
                {
                    "role": "assistant",
                    "content": "hello",
                    "created_at": (start + timedelta(days=n)).isoformat(),
                },
            ],
        }
        for n in range(500)
    )
    with archive.engine.begin() as connection:
        connection.exec_driver_sql("ANALYZE messages")
    with recorded_statements(archive.engine) as executed:
        rows = analytics.daily_usage(archive, since=start + timedelta(days=499))
    assert [(row.day, row.chats, row.messages) for row in rows] == [(date(2026, 5, 15), 1, 2)]
    (statement, parameters), *_ = [(s, p) for s, p in executed if "GROUP BY" in s]
    with archive.engine.connect() as connection:
        plan = connection.exec_driver_sql(f"EXPLAIN {statement}", parameters).scalars().all()
    assert any("ix_messages_created_at" in line for line in plan), "\n".join(plan)
