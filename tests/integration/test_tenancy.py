"""Tenant isolation: a user's archive sees only that user's chats, through every path."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import psycopg
import pytest
from sqlalchemy import make_url, text
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    ChatArchiveError,
    ChatFilter,
    ChatNotFound,
    ChatRepository,
    InvalidArgument,
    InvalidDocument,
    analytics,
)
from chatarchive._backends import backend_of
from tests.support.chats import tool_chat
from tests.support.databases import as_user
from tests.support.embedders import meanings


@pytest.fixture
def two_users(archive: ChatArchive) -> ChatArchive:
    archive.save(tool_chat("alice-1", user_id="alice", title="primer design"))
    archive.save(tool_chat("alice-2", user_id="alice"))
    archive.save(
        tool_chat("bob-1", user_id="bob", title="primer secrets", feedback=[{"id": "bobs", "score": 1}])
    )
    return archive


def test_a_user_sees_only_their_chats(two_users: ChatArchive) -> None:
    alice = two_users.for_user("alice")
    assert alice.get("alice-1").title == "primer design"
    assert [c.chat_id for c in alice.list_chats().items] == ["alice-2", "alice-1"]
    assert alice.list_chats(ChatFilter(user_id="bob")).items == []
    assert (alice.count_chats(), alice.count_chats(ChatFilter(user_id="bob")), two_users.count_chats()) == (
        2,
        0,
        3,
    )
    assert {hit.chat_id for hit in alice.search("42")} == {"alice-1", "alice-2"}
    assert alice.search("42", user_id="bob") == []
    assert [d.chat_id for d in alice.export()] == ["alice-1", "alice-2"]
    assert [d.chat_id for d in alice.get_many(["bob-1", "alice-2"])] == ["alice-2"]


def test_another_users_chat_is_not_found_through_every_path(two_users: ChatArchive) -> None:
    alice = two_users.for_user("alice")
    before = two_users.get("bob-1")
    for attempt in (
        lambda: alice.get("bob-1"),
        lambda: alice.append("bob-1", [{"role": "user", "content": "hi"}]),
        lambda: alice.append("bob-1", []),
        lambda: alice.add_feedback("bob-1", {"score": -1}),
        lambda: alice.update("bob-1", title="mine now"),
        lambda: alice.truncate("bob-1", 0),
        lambda: alice.delete_feedback("bob-1", "bobs"),
        lambda: alice.delete("bob-1"),
        lambda: alice.save(tool_chat("bob-1")),
    ):
        with pytest.raises(ChatNotFound):
            attempt()
    assert alice.delete_user("bob") == 0
    errors: list[int] = []
    assert (
        alice.save_many([tool_chat("bob-1"), tool_chat("alice-3")], on_error=lambda i, _: errors.append(i))
        == 1
    )
    assert errors == [0]
    after = two_users.get("bob-1")
    assert after.model_dump() == before.model_dump()
    assert after.version == before.version


def test_a_user_saves_only_their_own_chats(two_users: ChatArchive) -> None:
    alice = two_users.for_user("alice")
    alice.save(tool_chat("new"))  # no user_id: it becomes alice's
    assert two_users.get("new").user_id == "alice"
    with pytest.raises(InvalidDocument, match="user_id"):
        alice.save(tool_chat("stolen", user_id="bob"))
    with pytest.raises(InvalidDocument, match="user_id"):
        alice.update("alice-1", user_id="bob")
    assert alice.delete_user("alice") == 3
    assert [c.chat_id for c in two_users.list_chats().items] == ["bob-1"]


def test_a_users_analytics_count_only_their_chats(two_users: ChatArchive) -> None:
    alice = two_users.for_user("alice")
    assert [(row.user_id, row.chats) for row in analytics.user_activity(alice)] == [("alice", 2)]
    assert sum(row.messages for row in analytics.daily_usage(alice)) == 10
    assert sum(row.calls for row in analytics.tool_usage(alice)) == 2
    assert sum(row.chats for row in analytics.model_usage(alice)) == 2
    assert sum(row.chats for row in analytics.workflow_usage(alice)) == 2
    two_users.add_feedback("bob-1", {"score": 1})
    assert analytics.feedback_summary(alice) == []
    for ask in (analytics.user_activity, analytics.daily_usage, analytics.tool_usage):
        assert ask(alice, user_id="bob") == []
    # The unscoped archive still counts everyone.
    assert {row.user_id for row in analytics.user_activity(two_users)} == {"alice", "bob"}


@pytest.mark.parametrize("nobody", [None, ""])
def test_a_user_id_that_names_nobody_is_refused(
    two_users: ChatArchive, async_engine: AsyncEngine, runner: asyncio.Runner, nobody: str
) -> None:
    """``delete_user(None)`` would delete every chat without a user, and
    ``for_user(None)`` would see every user's chats."""
    two_users.save(tool_chat("anonymous"))
    async_archive = AsyncChatArchive(engine=async_engine)
    for attempt in (
        lambda: two_users.delete_user(nobody),
        lambda: two_users.for_user(nobody),
        lambda: async_archive.for_user(nobody),
        lambda: runner.run(async_archive.delete_user(nobody)),
        lambda: ChatRepository(Session(), user_id=""),
    ):
        with pytest.raises(InvalidArgument, match="user_id must be a non-empty string"):
            attempt()
    assert len(two_users.list_chats().items) == 4


def test_a_users_archive_cannot_change_the_schema(
    two_users: ChatArchive, async_engine: AsyncEngine, runner: asyncio.Runner
) -> None:
    # Migrations, row-level security and the search index are the whole
    # archive's: a user's archive refuses them (and reads them as before).
    alice = two_users.for_user("alice")
    async_alice = AsyncChatArchive(engine=async_engine).for_user("alice")
    operations: dict[str, Callable[[], object]] = {
        "upgrade": lambda: alice.upgrade(),
        "downgrade": lambda: alice.downgrade("base"),
        "set_row_level_security": lambda: alice.set_row_level_security(False),
        "set_search_index": lambda: alice.set_search_index(False),
        "rebuild_search_index": lambda: alice.rebuild_search_index(),
        "async upgrade": lambda: runner.run(async_alice.upgrade()),
        "async downgrade": lambda: runner.run(async_alice.downgrade("base")),
        "async set_row_level_security": lambda: runner.run(async_alice.set_row_level_security(False)),
        "async set_search_index": lambda: runner.run(async_alice.set_search_index(False)),
        "async rebuild_search_index": lambda: runner.run(async_alice.rebuild_search_index()),
    }
    for name, operation in operations.items():
        with pytest.raises(ChatArchiveError, match=f"{name.split()[-1]} changes the archive for every user"):
            operation()
    assert alice.current_revision() == two_users.current_revision()
    assert alice.search_index() is True
    assert {hit.chat_id for hit in alice.search("42")} == {"alice-1", "alice-2"}


def test_row_level_security_holds_for_raw_sql(server_archive: tuple[ChatArchive, str], app_role: str) -> None:
    archive, url = server_archive
    archive.save(tool_chat("alice-1", user_id="alice"))
    archive.save(tool_chat("bob-1", user_id="bob"))
    assert archive.row_level_security() is False
    archive.set_row_level_security(True)
    assert archive.row_level_security() is True
    as_app = (
        make_url(url).set(drivername="postgresql", username=app_role).render_as_string(hide_password=False)
    )
    with psycopg.connect(as_app) as raw:
        as_user(raw, "alice")
        for table in (
            "chats",
            "chat_tags",
            "messages",
            "content_parts",
            "tool_calls",
            "feedback",
            "message_terms",
        ):
            owners = raw.execute(f"SELECT DISTINCT chat_id FROM {table}").fetchall()
            assert owners in ([], [("alice-1",)]), table
        assert raw.execute("SELECT count(*) FROM messages").fetchone() == (5,)
        assert raw.execute("SELECT count(*) FROM chat_stats").fetchone() == (1,)
        assert raw.execute("SELECT count(*) FROM message_texts").fetchone() == (5,)
        assert raw.execute("SELECT sum(messages) FROM daily_usage").fetchone() == (5,)
        assert raw.execute("UPDATE chats SET title = 'x' WHERE chat_id = 'bob-1'").rowcount == 0
        assert raw.execute("DELETE FROM messages WHERE chat_id = 'bob-1'").rowcount == 0
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            raw.execute("INSERT INTO chat_tags (chat_id, tag, position) VALUES ('bob-1', 'planted', 0)")
        raw.rollback()
        assert raw.execute("SELECT count(*) FROM chats").fetchone() == (2,)  # unscoped: everything
    bob = archive.for_user("bob")
    assert [c.chat_id for c in bob.list_chats().items] == ["bob-1"]
    bob.append("bob-1", [{"role": "user", "content": "still works"}])
    with pytest.raises(ChatNotFound):
        bob.get("alice-1")
    archive.set_row_level_security(False)
    assert archive.row_level_security() is False


def test_row_level_security_knows_a_user_whose_id_has_quotes_colons_and_nul(
    server_archive: tuple[ChatArchive, str], app_role: str
) -> None:
    """The user a transaction is for is told to the database as the chat rows
    store it, whatever characters the id holds."""
    archive, url = server_archive
    odd = "o'brien:x\x00\ue000%s"
    archive.set_row_level_security(True)
    with ChatArchive(make_url(url).set(username=app_role)) as app:
        user = app.for_user(odd)
        user.save(tool_chat("odd-1", user_id=odd))
        user.append("odd-1", [{"role": "user", "content": "and again"}])
        assert [c.chat_id for c in user.list_chats().items] == ["odd-1"]
        assert user.get("odd-1").user_id == odd
        assert app.for_user("o'brien:x").list_chats().items == []
    archive.set_row_level_security(False)


def test_under_row_level_security_another_users_chat_id_is_not_found(
    server_archive: tuple[ChatArchive, str], app_role: str
) -> None:
    """Saving over a chat that row-level security hides (another user's) says
    ChatNotFound, as the repository's own check does without it, and leaves the
    chat as it was."""
    archive, url = server_archive
    archive.save(tool_chat("bob-1", user_id="bob", title="bob's"))
    archive.set_row_level_security(True)
    as_app = make_url(url).set(username=app_role).render_as_string(hide_password=False)
    with ChatArchive(as_app) as app:
        alice = app.for_user("alice")
        with pytest.raises(ChatNotFound):
            alice.save(tool_chat("bob-1", title="alice's"))
        alice.save(tool_chat("alice-1", title="alice's"))
    stored = archive.get("bob-1")
    assert (stored.user_id, stored.title, stored.version) == ("bob", "bob's", 1)
    assert archive.get("alice-1").user_id == "alice"


def test_a_users_reads_tell_row_level_security_who_reads(
    server_archive: tuple[ChatArchive, str], app_role: str
) -> None:
    """Every read of a user's archive runs in a transaction that sets
    chatarchive.user_id (outside one, the setting would not reach the read)."""
    archive, url = server_archive
    archive.save(tool_chat("alice-1", user_id="alice"))
    archive.save(tool_chat("bob-1", user_id="bob"))
    archive.set_row_level_security(True)
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as admin:
        # Stricter than chatarchive's own policy: nothing is visible unless a user
        # is set. (Not as a restrictive policy beside it: Citus 13.2 makes that
        # permissive on the shards.)
        admin.execute("DROP POLICY chatarchive_user ON chats")
        admin.execute(
            "CREATE POLICY only_scoped ON chats USING (user_id = current_setting('chatarchive.user_id', true))"
        )
    as_app = make_url(url).set(username=app_role).render_as_string(hide_password=False)
    with ChatArchive(as_app) as app:
        alice = app.for_user("alice")
        assert alice.get("alice-1").chat_id == "alice-1"
        assert [d.chat_id for d in alice.get_many(["alice-1", "bob-1"])] == ["alice-1"]
        assert [c.chat_id for c in alice.list_chats().items] == ["alice-1"]
        assert alice.count_chats() == 1
        assert {hit.chat_id for hit in alice.search("42")} == {"alice-1"}
        assert [d.chat_id for d in alice.export()] == ["alice-1"]
        alice.append("alice-1", [{"role": "user", "content": "more"}])
        assert len(alice.get("alice-1").messages) == 6
        with pytest.raises(ChatNotFound):
            app.get("alice-1")  # unscoped, so the stricter policy hides everything

    async def through_asyncio() -> None:
        async with AsyncChatArchive(as_app) as app:
            alice = app.for_user("alice")
            assert (await alice.get("alice-1")).chat_id == "alice-1"
            assert [c.chat_id for c in (await alice.list_chats()).items] == ["alice-1"]
            assert await alice.count_chats() == 1
            assert [d.chat_id for d in await alice.get_many(["alice-1", "bob-1"])] == ["alice-1"]

    asyncio.run(through_asyncio())


def test_under_row_level_security_save_many_saves_a_users_chats(
    server_archive: tuple[ChatArchive, str], app_role: str
) -> None:
    """PostgreSQL refuses COPY FROM on a table whose row-level security applies
    to the role ("COPY FROM not supported with row-level security"): save_many
    then inserts its rows instead, through both APIs. It failed with that error,
    and the asyncio API's failed too once it wrote with COPY."""
    archive, url = server_archive
    archive.save(tool_chat("bob-1", user_id="bob"))
    archive.set_row_level_security(True)
    as_app = make_url(url).set(username=app_role).render_as_string(hide_password=False)
    docs = [tool_chat(f"alice-{n}", title="nul \x00 and \ue000 kept") for n in range(3)]
    refused: list[int] = []
    with ChatArchive(as_app) as app:
        alice = app.for_user("alice")
        assert alice.save_many([*docs, tool_chat("bob-1")], on_error=lambda i, _: refused.append(i)) == 3
        assert alice.save_many(docs) == 3  # replaced, not duplicated

    async def through_asyncio() -> int:
        async with AsyncChatArchive(as_app) as app:
            return await app.for_user("carol").save_many([tool_chat("carol-1"), tool_chat("carol-2")])

    assert asyncio.run(through_asyncio()) == 2
    assert refused == [3]  # bob's, which alice cannot see: not found
    assert {(c.chat_id, c.user_id, c.version) for c in archive.list_chats().items} == {
        ("alice-0", "alice", 2),
        ("alice-1", "alice", 2),
        ("alice-2", "alice", 2),
        ("bob-1", "bob", 1),
        ("carol-1", "carol", 1),
        ("carol-2", "carol", 1),
    }
    assert archive.get("alice-1").title == "nul \x00 and \ue000 kept"


def test_every_row_of_a_chat_carries_the_chat_s_user_through_every_write(archive: ChatArchive) -> None:
    """chat_user_id, which row-level security reads, is the chat's user_id in
    every child row, whichever write made the row, and follows a change of
    the chat's user."""
    archive.save(tool_chat("one", user_id="ann", feedback=[{"id": "f0", "score": 1}], tags=["lab"]))
    archive.save(tool_chat("one", user_id="ann", title="again"))
    archive.save_many([tool_chat(f"many-{n}", user_id="bob") for n in range(3)])
    archive.save_many([tool_chat(f"bulk-{n}", user_id="cy") for n in range(3)], bulk=True)
    archive.for_user("dee").save_many([tool_chat("scoped-1", user_id=None)])
    archive.append("one", [{"role": "user", "content": "more primers", "uid": "q2"}])
    archive.regenerate("one", "q2", [{"role": "user", "content": "other primers", "uid": "q2b"}])
    streamed = archive.begin_message("one", uid="s1")
    archive.append_chunk("one", streamed.uid, "streamed ")
    archive.complete_message("one", streamed.uid)
    archive.add_feedback("one", {"id": "f1", "message_uid": "q2b", "score": 1})
    archive.update_message("one", "q2b", model="gpt-5")
    archive.update("many-1", tags=["moved"], user_id="eve")
    archive.configure_search(indexing="deferred")
    archive.append("many-2", [{"role": "user", "content": "later zebra", "uid": "z"}])
    archive.index_pending()
    archive.configure_search(indexing="sync")
    owned = [table.name for table in backend_of(archive.engine).owned_tables()]
    assert {"messages", "content_parts", "tool_calls", "feedback", "chat_tags", "message_chunks"} <= set(
        owned
    )
    with archive.engine.connect() as connection:
        for table in owned:
            wrong = connection.execute(
                text(
                    f"SELECT x.chat_id, x.chat_user_id, c.user_id FROM {table} x JOIN chats c "
                    "ON c.chat_id = x.chat_id WHERE x.chat_user_id IS DISTINCT FROM c.user_id"
                )
            ).all()
            assert wrong == [], table
        users: dict[str, str | None] = dict(
            connection.execute(text("SELECT chat_id, user_id FROM chats")).all()
        )
    assert (users["many-1"], users["scoped-1"]) == ("eve", "dee")


def test_under_row_level_security_every_write_answers_another_users_chat_as_one_that_is_not_there(
    server_archive: tuple[ChatArchive, str], app_role: str
) -> None:
    """An ordinary role under row-level security, writing as alice: each write
    to bob's chat says what it says of a chat id nobody holds (ChatNotFound,
    the same words but for the id), never which constraint the id met; the
    writes that create a missing chat (save, save_many, bulk, a framework's
    history) refuse bob's as not found. Bob's chat stays as it was."""
    from langchain_core.messages import HumanMessage

    from chatarchive.integrations.langchain import ChatArchiveMessageHistory

    archive, url = server_archive
    archive.save(tool_chat("bob-1", user_id="bob", title="bob's", feedback=[{"id": "bobs", "score": 1}]))
    streamed = archive.begin_message("bob-1", uid="bob-streamed")
    before = archive.get_tree("bob-1").document.model_dump()
    archive.set_row_level_security(True)
    first = archive.get("bob-1").messages[1].uid
    with ChatArchive(make_url(url).set(username=app_role)) as app:
        alice = app.for_user("alice")
        writes: list[Callable[[str], object]] = [
            lambda chat: alice.append(chat, [{"role": "user", "content": "hi"}]),
            lambda chat: alice.append(chat, []),
            lambda chat: alice.begin_message(chat),
            lambda chat: alice.append_chunk(chat, streamed.uid, "x"),
            lambda chat: alice.complete_message(chat, streamed.uid),
            lambda chat: alice.add_feedback(chat, {"score": -1}),
            lambda chat: alice.delete_feedback(chat, "bobs"),
            lambda chat: alice.update(chat, title="mine now"),
            lambda chat: alice.truncate(chat, 1),
            lambda chat: alice.regenerate(chat, first, [{"role": "assistant", "content": "no"}]),
            lambda chat: alice.edit(chat, first, "edited"),
            lambda chat: alice.set_active_leaf(chat, first),
            lambda chat: alice.delete(chat),
        ]
        for write in writes:
            answers = []
            for chat in ("bob-1", "nobody-1"):
                with pytest.raises(ChatArchiveError) as raised:
                    write(chat)
                answers.append((type(raised.value), str(raised.value).replace(chat, "ID")))
            assert answers[0] == answers[1]
            assert answers[0][0] is ChatNotFound
        creating: list[Callable[[], object]] = [
            lambda: alice.save(tool_chat("bob-1")),
            lambda: alice.save_many([tool_chat("bob-1")]),
            lambda: alice.save_many([tool_chat("alice-1"), tool_chat("bob-1"), tool_chat("alice-2")]),
            lambda: alice.save_many([tool_chat("bob-1")], writers=2),
            lambda: ChatArchiveMessageHistory(alice, "bob-1").add_messages([HumanMessage("hi")]),
        ]
        for create in creating:
            with pytest.raises(ChatNotFound, match="chat 'bob-1' not found"):
                create()
        errors: list[tuple[int, ChatArchiveError]] = []
        saved = alice.save_many(
            [tool_chat("alice-1"), tool_chat("bob-1"), tool_chat("alice-2")],
            on_error=lambda index, error: errors.append((index, error)),
        )
        assert saved == 2
        assert [(index, type(error), str(error)) for index, error in errors] == [
            (1, ChatNotFound, "chat 'bob-1' not found")
        ]
    # The table owner (no row-level security for it), as alice: the same answer.
    with pytest.raises(ChatNotFound, match="chat 'bob-1' not found"):
        archive.for_user("alice").save_many([tool_chat("bob-1")], bulk=True)
    archive.set_row_level_security(False)
    assert archive.get_tree("bob-1").document.model_dump() == before


def test_a_bulk_load_by_a_role_that_does_not_own_the_tables_says_why_it_cannot(
    server_archive: tuple[ChatArchive, str], app_role: str
) -> None:
    """A bulk load drops and re-creates keys and indexes, which only the
    tables' owner may: the error says so (the database's first error), not
    that the transaction was aborted by it, and nothing is saved. (A
    distributed archive keeps its keys and indexes: the role may bulk load.)"""
    archive, url = server_archive
    distributed = archive.distribution().distributed
    archive.set_row_level_security(True)
    with ChatArchive(make_url(url).set(username=app_role)) as app:
        alice = app.for_user("alice")
        loads: list[Callable[[], int]] = [
            lambda: alice.save_many([tool_chat("a"), tool_chat("b")], bulk=True),
            lambda: asyncio.run(_bulk_load_as(alice.engine.url, "alice")),
        ]
        for load in loads:
            if distributed:
                assert load() == 2
                continue
            with pytest.raises(ChatArchiveError) as raised:
                load()
            assert "must be owner" in str(raised.value)
            assert "aborted" not in str(raised.value)
        assert alice.save_many([tool_chat("a"), tool_chat("b")]) == 2  # without bulk, the role may
    archive.set_row_level_security(False)
    assert archive.count_chats() == 2


async def _bulk_load_as(url: Any, user_id: str) -> int:
    async with AsyncChatArchive(url) as archive:
        return await archive.for_user(user_id).save_many([tool_chat("a"), tool_chat("b")], bulk=True)


def test_search_by_meaning_is_scoped_by_row_level_security(
    server_archive: tuple[ChatArchive, str], app_role: str
) -> None:
    """An ordinary role's search by meaning sees its user's vectors alone,
    through the archive and in raw SQL, as keyword search does."""
    archive, url = server_archive
    archive.configure_search(embedder=meanings())
    archive.save(
        {"chat_id": "alice-1", "user_id": "alice", "messages": [{"role": "user", "content": "my car"}]}
    )
    archive.save({"chat_id": "bob-1", "user_id": "bob", "messages": [{"role": "user", "content": "a sedan"}]})
    archive.set_row_level_security(True)
    as_app = make_url(url).set(username=app_role)
    with ChatArchive(as_app) as app:
        for mode in ("vector", "hybrid"):
            assert [hit.chat_id for hit in app.for_user("alice").search("automobile", mode=mode)] == [
                "alice-1"
            ]
            assert [hit.chat_id for hit in app.for_user("bob").search("car", mode=mode)] == ["bob-1"]
            assert app.for_user("eve").search("car", mode=mode) == []
    with psycopg.connect(as_app.set(drivername="postgresql").render_as_string(hide_password=False)) as raw:
        as_user(raw, "alice")
        assert raw.execute("SELECT DISTINCT chat_id FROM embeddings").fetchall() == [("alice-1",)]
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            raw.execute(
                "INSERT INTO embeddings (chat_id, message_position, model, dimension, embedding, chat_user_id) "
                "VALUES ('bob-1', 0, 'planted', 1, '{1}', 'bob')"
            )
    archive.set_row_level_security(False)
