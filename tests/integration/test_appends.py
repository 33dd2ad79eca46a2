"""An archive's append: one statement on PostgreSQL for the usual turn, the
general write for everything else, the same results either way."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
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
    InvalidArgument,
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


def test_an_append_that_may_create_makes_the_chat_that_save_makes(
    archive: ChatArchive, engine: Engine, database_kind: str
) -> None:
    """``create``: a framework's first add to a session. A chat that is not
    there is created with the messages, as saving the document makes it (on
    one PostgreSQL server, by one statement after the append's own found no
    chat: no transaction of the general write); a chat that is there gets
    them appended, its fields as they were."""
    archive.save({"chat_id": "warm", "messages": [{"role": "system", "content": "be brief"}]})
    archive.append("warm", TURN[:1])  # the archive learns the search settings
    fields: dict[str, Any] = {"user_id": "alice", "title": "Ketchup", "metadata": {"z": 1, "a": [1, 2]}}
    with recorded_statements(engine) as statements:
        stored = archive.append("made", TURN, create=fields)
    if database_kind == "postgresql":
        assert [sql.lstrip()[:4] for sql, _ in statements] == ["WITH", "WITH"], statements
        assert "INSERT INTO chats" in statements[1][0]
    assert all(message.created_at is not None for message in stored)
    archive.save({**fields, "chat_id": "saved", "messages": [m.model_dump(mode="json") for m in stored]})
    made, saved = archive.get("made"), archive.get("saved")
    same = {"chat_id", "created_at", "updated_at"}
    assert made.model_dump(mode="json", exclude=same) == saved.model_dump(mode="json", exclude=same)
    assert list(made.metadata or {}) == ["z", "a"]
    assert (made.version, made.user_id, made.to_openai()) == (1, "alice", TURN)
    assert [m.uid for m in made.messages] == [m.uid for m in stored]
    assert {hit.chat_id for hit in archive.search("ketchup")} == {"made", "saved", "warm"}

    archive.append("made", [{"role": "user", "content": "and mustard?"}], create={"user_id": "bob"})
    again = archive.get("made")
    assert (again.version, again.user_id, again.title) == (2, "alice", "Ketchup")
    assert again.to_openai() == [*TURN, {"role": "user", "content": "and mustard?"}]


def test_a_chat_created_by_an_append_keeps_its_tags_and_parents_as_a_chain(archive: ChatArchive) -> None:
    """What the one statement does not write (tags) goes through the general
    write; a message naming a parent is added as an append adds it, after the
    one before."""
    archive.save({"chat_id": "warm", "messages": [{"role": "system", "content": "be brief"}]})
    archive.append("warm", TURN[:1])
    turn = [
        {"role": "user", "content": "hi", "uid": "q"},
        {"role": "assistant", "content": "hey", "parent": "q"},
    ]
    archive.append("tagged", turn, create={"tags": ["lab", "lab", "food"]})
    made = archive.get("tagged")
    assert made.tags == ["lab", "food"]
    assert [m.content for m in made.messages] == ["hi", "hey"]
    assert archive.get_tree("tagged").document.is_linear


def test_a_chat_created_by_an_append_with_deferred_indexing_waits_for_the_indexer(
    archive: ChatArchive,
) -> None:
    archive.configure_search(indexing="deferred")
    archive.save({"chat_id": "warm", "messages": [{"role": "system", "content": "be brief"}]})
    archive.append("warm", TURN[:1])
    archive.append("later", TURN, create={})
    before = archive.search("ketchup")
    assert {hit.chat_id for hit in before} == set()
    assert before.pending_chats == 2
    archive.index_pending()
    assert {hit.chat_id for hit in archive.search("ketchup")} == {"later", "warm"}


def test_appends_that_may_create_the_same_chat_at_once_keep_every_message(archive: ChatArchive) -> None:
    """Writers whose first add races: one creates the chat, the others append
    to it; every turn is stored once, whole, in the order the writes took."""
    archive.save({"chat_id": "warm", "messages": [{"role": "system", "content": "be brief"}]})
    archive.append("warm", TURN[:1])
    writers = 4
    barrier = threading.Barrier(writers)

    def write(writer: int) -> None:
        barrier.wait()
        turn = [{"role": "user", "content": f"q{writer}"}, {"role": "assistant", "content": f"a{writer}"}]
        archive.append("raced", turn, create={"user_id": "alice"})

    with ThreadPoolExecutor(writers) as pool:
        list(pool.map(write, range(writers)))
    raced = archive.get("raced")
    contents = [str(m.content) for m in raced.messages]
    assert sorted(contents) == sorted(f"{kind}{n}" for n in range(writers) for kind in "qa")
    assert all(contents[i + 1] == "a" + contents[i][1:] for i in range(0, len(contents), 2))
    assert (raced.version, raced.user_id) == (writers, "alice")


@pytest.mark.parametrize(
    ("create", "other"),
    [
        ({}, {"parent": "q"}),
        ({}, {"expected_version": 1}),
        ({"chat_id": "elsewhere"}, {}),
        ({"messages": []}, {}),
        (["user_id"], {}),
    ],
)
def test_an_append_refuses_to_create_what_a_new_chat_cannot_be(
    archive: ChatArchive, create: Any, other: dict[str, Any]
) -> None:
    with pytest.raises(InvalidArgument, match="create"):
        archive.append("c", TURN[:1], create=create, **other)
    assert archive.find("c") is None


def test_an_append_that_creates_names_the_chat_and_field_at_fault(archive: ChatArchive) -> None:
    with pytest.raises(InvalidDocument) as raised:
        archive.append("c", TURN[:1], create={"user_id": 5})
    assert (raised.value.chat_id, raised.value.field) == ("c", "user_id")
    with pytest.raises(ChatNotFound):  # without create, a missing chat is said as before
        archive.append("c", TURN[:1])
    with pytest.raises(ChatNotFound):  # and with no messages, no chat is made
        archive.append("c", [], create={})
    assert archive.find("c") is None


def test_a_users_archive_creates_the_chat_as_hers_and_never_reaches_anothers(archive: ChatArchive) -> None:
    ann, bob = archive.for_user("ann"), archive.for_user("bob")
    ann.append("hers", TURN[:2], create={})
    assert archive.get("hers").user_id == "ann"
    with pytest.raises(ChatNotFound):  # there, but another user's: not found, and left as it was
        bob.append("hers", TURN[2:], create={})
    with pytest.raises(InvalidDocument, match="user_id"):
        bob.append("his", TURN[:1], create={"user_id": "ann"})
    assert archive.get("hers").to_openai() == TURN[:2]
    assert archive.find("his") is None
