"""An archive's append: one statement on PostgreSQL for the usual turn, the
general write for everything else, the same results either way."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from sqlalchemy import URL, Connection, Engine, text
from sqlalchemy.pool import StaticPool

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    ChatNotFound,
    ConflictError,
    InvalidDocument,
    create_async_engine,
    create_engine,
)
from chatarchive._backends.citus import DISTRIBUTION_SETTING
from chatarchive._repository.appends import MOST_ROWS
from chatarchive._repository.searching import _SETTING_NAMES
from tests.support.chats import empty_archive
from tests.support.statements import recorded_statements

TURN: list[dict[str, Any]] = [
    {"role": "user", "content": [{"type": "text", "text": "weigh the ketchup"}]},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "scale", "arguments": "{}"}}],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "41.5 g"},
    {"role": "assistant", "content": "About 41.5 grams of ketchup."},
]


def _writes(statements: list[tuple[str, Any]]) -> list[str]:
    return [sql for sql, _ in statements if not sql.lstrip().upper().startswith(("SELECT", "SHOW"))]


def test_a_turn_appended_to_the_end_is_one_statement_on_postgresql(
    archive: ChatArchive, engine: Engine, database_kind: str
) -> None:
    """One statement on one PostgreSQL server; the general write elsewhere (a
    distributed archive's, whose every statement Citus routes to the chat's
    worker, which it does not do with the one statement)."""
    archive.save({"chat_id": "a", "messages": [{"role": "system", "content": "be brief"}]})
    archive.append("a", TURN[:1])  # the archive learns the search settings
    with recorded_statements(engine) as statements:
        stored = archive.append("a", TURN[1:])
    if database_kind == "postgresql":
        assert len(statements) == 1, statements
        sql = statements[0][0]
        assert sql.lstrip().startswith("WITH")
        # The statement's own constants are written into its SQL, and its
        # parameters are positional: an execution sends only the append's
        # values (the chat, the moment, the settings its terms were computed
        # with, the rows' fields), which psycopg passes on without parsing.
        values = statements[0][1]
        assert sorted({int(n) for n in re.findall(r"\$(\d+)", sql)}) == list(range(1, len(values) + 1))
        assert "%(" not in sql
        constants = {*_SETTING_NAMES.values(), DISTRIBUTION_SETTING}
        assert all(f"'{constant}'" in sql for constant in constants)
        assert not constants & {value for value in values if isinstance(value, str)}
        assert "a" in values
        assert "be brief" not in values
    else:
        assert len(_writes(statements)) > 1
    document = archive.get("a")
    assert document.to_openai() == [{"role": "system", "content": "be brief"}, *TURN]
    assert [m.uid for m in document.messages[2:]] == [m.uid for m in stored]
    assert document.version == 3
    assert {hit.message_uid for hit in archive.search("ketchup")} == {
        stored[-1].uid,
        document.messages[1].uid,
    }


def _prepared_appends(connectable: Engine | Connection) -> list[int]:
    """How often each append statement prepared on the (one) connection ran."""
    query = text(
        "SELECT generic_plans + custom_plans FROM pg_prepared_statements WHERE statement LIKE 'WITH%' ORDER BY 1"
    )
    if isinstance(connectable, Connection):
        return list(connectable.execute(query).scalars())
    with connectable.connect() as connection:
        return list(connection.execute(query).scalars())


@contextmanager
def _on_one_connection(url: URL, **options: Any) -> Iterator[tuple[ChatArchive, Engine]]:
    """An archive on an engine of one connection (the one whose prepared
    statements a test looks at), emptied and closed afterwards."""
    engine = create_engine(url, poolclass=StaticPool, **options)
    try:
        yield ChatArchive(engine=engine), engine
    finally:
        with engine.begin() as connection:
            empty_archive(connection)
        engine.dispose()


def test_an_append_is_planned_once_on_a_connection_and_a_missing_chat_keeps_it(
    migrated_url: URL, database_kind: str
) -> None:
    """On PostgreSQL the server plans an append's statement once per
    connection, from its first execution; an append to a chat that is not
    there says so from the same statement, without the general write's
    transaction, whose rollback would make psycopg forget the connection's
    prepared statements. Every database gives the same results."""
    with _on_one_connection(migrated_url) as (archive, engine):
        archive.save({"chat_id": "planned", "messages": [{"role": "system", "content": "be brief"}]})
        archive.append("planned", TURN[:1])  # the archive learns the search settings
        with recorded_statements(engine) as statements:
            for turn in range(3):
                archive.append("planned", [{"role": "user", "content": f"turn {turn}"}])
                with pytest.raises(ChatNotFound, match="'nowhere' not found"):
                    archive.append("nowhere", [{"role": "user", "content": f"turn {turn}"}])
        if database_kind == "postgresql":
            assert [sql.lstrip()[:4] for sql, _ in statements] == ["WITH"] * 6  # no general write
            assert max(_prepared_appends(engine)) >= 6  # each ran the statement prepared on the connection
        assert archive.get("planned").to_openai()[-1] == {"role": "user", "content": "turn 2"}
        assert archive.chat_ids() == ["planned"]


def test_an_archive_behind_a_pooler_can_prepare_nothing(migrated_url: URL, database_kind: str) -> None:
    """``prepare_threshold=None`` (PgBouncer before 1.21 in transaction mode)
    turns preparing off for appends too."""
    options: dict[str, Any] = (
        {} if database_kind == "sqlite" else {"connect_args": {"prepare_threshold": None}}
    )
    with _on_one_connection(migrated_url, **options) as (archive, engine):
        archive.save({"chat_id": "pooled", "messages": []})
        for turn in range(7):
            archive.append("pooled", [{"role": "user", "content": f"turn {turn}"}])
        if database_kind != "sqlite":
            assert _prepared_appends(engine) == []
        assert len(archive.get("pooled").messages) == 7


def test_an_asyncio_append_is_planned_once_on_a_connection(migrated_url: URL, database_kind: str) -> None:
    async def appends() -> None:
        engine = create_async_engine(migrated_url, poolclass=StaticPool)
        archive = AsyncChatArchive(engine=engine)
        try:
            await archive.save(
                {"chat_id": "planned-async", "messages": [{"role": "system", "content": "hi"}]}
            )
            await archive.append("planned-async", TURN[:1])
            for turn in range(3):
                await archive.append("planned-async", [{"role": "user", "content": f"turn {turn}"}])
                with pytest.raises(ChatNotFound):
                    await archive.append("nowhere", [{"role": "user", "content": f"turn {turn}"}])
            if database_kind == "postgresql":
                async with engine.connect() as connection:
                    plans = await connection.run_sync(_prepared_appends)
                assert max(plans) >= 6
            assert (await archive.get("planned-async")).to_openai()[-1] == {
                "role": "user",
                "content": "turn 2",
            }
        finally:
            async with engine.begin() as connection:
                await connection.run_sync(empty_archive)
            await engine.dispose()

    asyncio.run(appends())


def test_one_statement_appends_keep_the_tree_and_the_counts(archive: ChatArchive) -> None:
    archive.save({"chat_id": "t", "messages": []})
    for index in range(3):
        archive.append(
            "t", [{"role": "user", "content": f"q{index}"}, {"role": "assistant", "content": f"a{index}"}]
        )
    tree = archive.get_tree("t")
    assert [message.content for message in tree.path()] == ["q0", "a0", "q1", "a1", "q2", "a2"]
    assert [len(tree.children(message.uid)) for message in tree.path()] == [1, 1, 1, 1, 1, 0]
    assert [(s.chat_id, s.message_count) for s in archive.list_chats().items] == [("t", 6)]


def test_an_append_after_moving_the_active_leaf_branches_from_it(archive: ChatArchive) -> None:
    archive.save(
        {
            "chat_id": "b",
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}],
        }
    )
    first = archive.get("b").messages[0]
    archive.set_active_leaf("b", first.uid)
    archive.append("b", [{"role": "assistant", "content": "another answer"}])
    assert [m.content for m in archive.get("b").messages] == ["q", "another answer"]
    siblings = archive.get_tree("b").children(first.uid)
    assert [message.content for message in siblings] == ["a", "another answer"]


def test_the_general_write_gives_every_error_of_an_append(archive: ChatArchive) -> None:
    archive.save({"chat_id": "e", "messages": [{"role": "user", "content": "hi", "uid": "u1"}]})
    before = archive.get("e")
    with pytest.raises(ChatNotFound):
        archive.append("nothing here", [{"role": "user", "content": "x"}])
    with pytest.raises(ConflictError, match="is at version 1, not 7"):
        archive.append("e", [{"role": "user", "content": "x"}], expected_version=7)
    with pytest.raises(InvalidDocument, match="'u1' is already in the chat") as caught:
        archive.append("e", [{"role": "user", "content": "x"}, {"role": "user", "content": "y", "uid": "u1"}])
    assert caught.value.message_index == 1
    assert archive.get("e") == before
    assert len(archive.append("e", [{"role": "user", "content": "x", "uid": "u2"}], expected_version=1)) == 1
    assert archive.get("e").version == 2


def test_an_append_larger_than_one_statement_takes_is_stored_whole(archive: ChatArchive) -> None:
    archive.save({"chat_id": "big", "messages": []})
    messages = [{"role": "user", "content": f"m{index}"} for index in range(MOST_ROWS + 1)]
    archive.append("big", messages)
    assert [m.content for m in archive.get("big").messages] == [m["content"] for m in messages]


def test_an_append_acts_on_search_settings_another_archive_changed(
    own_archive: tuple[ChatArchive, str],
) -> None:
    archive, url = own_archive
    archive.save({"chat_id": "s", "messages": []})
    archive.append("s", [{"role": "user", "content": "first"}])  # seen: sync, english
    with ChatArchive(url) as other:
        other.configure_search(indexing="deferred")
        archive.append("s", [{"role": "user", "content": "waiting lists"}])
        assert archive.search("waiting") == []
        assert archive.search("waiting").pending_chats == 1
        other.configure_search(indexing="sync", language="german")
        archive.append("s", [{"role": "user", "content": "Die Häuser"}])
        assert [hit.snippet for hit in archive.search("Haus")] == ["Die «Häuser»"]
        assert [hit.snippet for hit in archive.search("waiting")] == ["«waiting» lists"]


def test_a_user_archive_and_the_asyncio_archive_append_the_same(archive: ChatArchive) -> None:
    archive.save({"chat_id": "u", "user_id": "ann", "messages": []})
    archive.for_user("ann").append("u", TURN[:2])

    async def more() -> None:
        async with AsyncChatArchive(archive.url.render_as_string(hide_password=False)) as other:
            await other.append("u", TURN[2:])

    asyncio.run(more())
    assert archive.get("u").to_openai() == TURN
