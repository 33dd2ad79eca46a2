"""Per-user keys: a user's chats sealed with their key on every write path,
read back exactly, never searchable, refused without the keys, and
unreadable once the key is deleted, backups included once the master key
that wrapped it is retired."""

from __future__ import annotations

import asyncio
import json
import os
from typing import Any

import pytest
from sqlalchemy import Engine, insert, select, text
from sqlalchemy.orm import Session

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    ChatDocument,
    InvalidArgument,
    SealedChat,
    UserScopeError,
)
from chatarchive._schema import metadata, tables
from chatarchive.encryption import MASTER_KEY_ENV, UserKeys
from tests.support.chats import snapshot
from tests.support.commands import Run
from tests.support.strategies import exact

MASTER = bytes(range(32))
SECRETS = ("ultramarine", "vermilion", "chartreuse", "aubergine", "cerulean", "gamboge")


def sealed_archive(archive: ChatArchive, master: bytes = MASTER, **options: Any) -> ChatArchive:
    return ChatArchive(engine=archive.engine, keys=UserKeys(master_key=master, **options))


def chat(chat_id: str, user_id: str | None = "ann") -> dict[str, Any]:
    return {
        "chat_id": chat_id,
        "user_id": user_id,
        "title": "Colours",
        "messages": [
            {"role": "system", "content": "You name colours."},
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "What is ultramarine?"},
                    {
                        "type": "image_url",
                        "image_url": {"url": "https://example.com/vermilion.png", "detail": "low"},
                    },
                ],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "c1",
                        "type": "function",
                        "function": {"name": "lookup", "arguments": '{"q": "chartreuse"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "aubergine is a purple"},
            {
                "role": "assistant",
                "content": "A deep blue.",
                "model": "gpt-4o",
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13},
            },
        ],
    }


_WRITTEN: Any = {
    "version": True,
    "created_at": True,
    "updated_at": True,
    "messages": {"__all__": {"created_at"}},
}


def same(back: ChatDocument, given: ChatDocument) -> bool:
    return bool(exact(back.model_dump(exclude=_WRITTEN)) == exact(given.model_dump(exclude=_WRITTEN)))


def leaked(engine: Engine) -> list[str]:
    with engine.connect() as connection, Session(bind=connection) as session:
        rows = json.dumps(snapshot(session), ensure_ascii=False)
    return [secret for secret in SECRETS if secret in rows]


def test_every_write_path_seals_and_every_read_opens(archive: ChatArchive) -> None:
    sealed = sealed_archive(archive)
    given = ChatDocument.parse(chat("saved"))
    sealed.save(given)
    assert same(sealed.get("saved"), given)
    sealed.save_many([chat(f"many-{n}") for n in range(3)])
    sealed.append("saved", [{"role": "user", "content": "and cerulean?"}])
    sealed.regenerate(
        "many-0", sealed.get("many-0").messages[-1].uid, [{"role": "assistant", "content": "gamboge"}]
    )
    sealed.edit("many-1", sealed.get("many-1").messages[1].uid, "ultramarine again")
    sealed.begin_message("many-2", uid="streamed")
    sealed.append_chunk("many-2", "streamed", "a vermilion ")
    assert sealed.get("many-2").messages[-1].content == "a vermilion "
    sealed.complete_message("many-2", "streamed")
    sealed.update_message("many-2", "streamed", model="gpt-4o")
    sealed.compact("many-1", [{"role": "system", "content": "chartreuse so far"}], keep_last=0)

    async def through_asyncio() -> list[Any]:
        async with AsyncChatArchive(
            archive.engine.url.render_as_string(hide_password=False), keys=UserKeys(master_key=MASTER)
        ) as app:
            await app.append("many-0", [{"role": "user", "content": "aubergine?"}])
            return [m.content for m in (await app.get("many-0")).messages]

    assert asyncio.run(through_asyncio())[-2:] == ["gamboge", "aubergine?"]
    assert sealed.get("saved").messages[-1].content == "and cerulean?"
    assert sealed.history("many-1").messages[-1].content == "ultramarine again"
    assert sealed.get("many-2").messages[-1].content == "a vermilion "
    assert sealed.get("many-2").messages[-1].model == "gpt-4o"
    assert len(sealed.history("many-1").messages) == 2  # the system prompt and the edited question
    assert sealed.get_tree("many-0").document.messages[4].content == "A deep blue."
    assert [d.chat_id for d in sealed.get_many(["many-0", "saved"])] == ["many-0", "saved"]
    assert leaked(archive.engine) == []
    with archive.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM chats WHERE sealed")).scalar() == 4
        assert connection.execute(select(tables.user_keys.c.user_id)).scalars().all() == ["ann"]


def test_nothing_of_a_sealed_chat_is_searchable_but_its_clear_fields_are_listed_and_counted(
    archive: ChatArchive,
) -> None:
    sealed = sealed_archive(archive)
    sealed.save(chat("sealed"))
    sealed.save(chat("nobody's", user_id=None))  # no user, no key: stored as given
    assert [hit.chat_id for hit in sealed.search("ultramarine")] == ["nobody's"]
    archive.configure_search(indexing="deferred")
    sealed.append("sealed", [{"role": "user", "content": "ultramarine"}])
    archive.index_pending()
    archive.rebuild_search_index()  # deferred: marks every chat again
    archive.index_pending()
    assert [hit.chat_id for hit in sealed.search("ultramarine")] == ["nobody's"]
    assert sorted((c.chat_id, c.title) for c in sealed.list_chats().items) == [
        ("nobody's", "Colours"),
        ("sealed", "Colours"),
    ]
    assert sum(row.completion_tokens for row in sealed.model_usage()) == 6


def test_without_the_keys_a_sealed_chat_is_refused_and_left_as_it_was(archive: ChatArchive) -> None:
    sealed = sealed_archive(archive)
    sealed.save(chat("sealed"))
    sealed.begin_message("sealed", uid="streamed")
    with archive.engine.connect() as connection, Session(bind=connection) as session:
        before = snapshot(session)
    for call in (
        lambda: archive.get("sealed"),
        lambda: archive.get_tree("sealed"),
        lambda: archive.history("sealed"),
        lambda: archive.append("sealed", [{"role": "user", "content": "x"}]),
        lambda: archive.append_chunk("sealed", "streamed", "x"),
        lambda: archive.complete_message("sealed", "streamed"),
        lambda: list(archive.export()),
    ):
        with pytest.raises(SealedChat, match="needs the archive's keys"):
            call()
    with pytest.raises(SealedChat, match="not wrapped by this master key"):
        sealed_archive(archive, master=os.urandom(32)).get("sealed")
    with pytest.raises(InvalidArgument, match="cannot be given to another user"):
        sealed.update("sealed", user_id="bob")
    with archive.engine.connect() as connection, Session(bind=connection) as session:
        assert snapshot(session) == before


def test_deleting_the_key_shreds_the_chats_and_a_rotated_master_key_shreds_the_backups(
    archive: ChatArchive, tmp_path: Any
) -> None:
    old = sealed_archive(archive)
    old.save(chat("ann-1"))
    old.save(chat("bob-1", user_id="bob"))
    backup = _backup(archive.engine)  # before the deletion: it holds ann's wrapped key
    assert old.for_user("bob").delete_user_key("ann") is False  # not another user's
    assert old.delete_user_key("ann") is True
    with pytest.raises(SealedChat, match="which is deleted"):
        old.get("ann-1")
    assert old.get("bob-1").messages[4].content == "A deep blue."
    # Rotation: the new master key unwraps with the old one until every key is wrapped again.
    new_master = os.urandom(32)
    rotating = sealed_archive(archive, new_master, previous_master_keys=(MASTER,))
    assert rotating.rewrap_user_keys() == 1  # bob's
    with pytest.raises(UserScopeError):
        rotating.for_user("bob").rewrap_user_keys()
    question = sealed_archive(archive, new_master).get("bob-1").messages[1]
    assert question.model_dump(mode="json")["content"][0]["text"] == "What is ultramarine?"
    # The backup restored, read with the new master key alone: ann's chat is gone for good.
    _restore(archive.engine, backup)
    with pytest.raises(SealedChat, match="not wrapped by this master key"):
        sealed_archive(archive, new_master).get("ann-1")
    assert old.get("ann-1").messages[0].content == "You name colours."  # the old master key would: destroy it


def test_delete_user_deletes_the_users_key(archive: ChatArchive) -> None:
    sealed = sealed_archive(archive)
    sealed.save(chat("ann-1"))
    assert sealed.delete_user("ann") == 1
    with archive.engine.connect() as connection:
        assert connection.execute(select(tables.user_keys)).all() == []


def test_a_sealed_chat_keeps_its_images_sealed_in_its_parts_whatever_the_attachments_switch(
    archive: ChatArchive,
) -> None:
    import base64

    image = (
        "data:image/png;base64," + base64.b64encode(b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 16).decode()
    )
    sealed = sealed_archive(archive)
    sealed.set_attachments_stored_once(True)
    doc = {
        "chat_id": "img",
        "user_id": "ann",
        "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}],
    }
    sealed.save(doc)
    sealed.save_many([{**doc, "chat_id": "img-2"}])
    sealed.append("img", [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": image}}]}])
    for chat_id in ("img", "img-2"):
        assert (
            sealed.get(chat_id).messages[-1].model_dump(mode="json")["content"][0]["image_url"]["url"]
            == image
        )
    with archive.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM attachments")).scalar() == 0


def test_keys_are_checked() -> None:
    with pytest.raises(InvalidArgument, match="32 bytes"):
        UserKeys(master_key=b"short")
    with pytest.raises(InvalidArgument, match="master_key, or both wrap and unwrap"):
        UserKeys()
    with pytest.raises(InvalidArgument, match="keys must be UserKeys"):
        ChatArchive("sqlite://", keys="secret")  # type: ignore[arg-type]


def test_a_key_management_service_wraps_the_keys(archive: ChatArchive) -> None:
    """``wrap`` and ``unwrap`` as a KMS gives them (here a dictionary: a key per user, deletable)."""
    vault: dict[str, bytes] = {}

    def wrap(user_id: str, key: bytes) -> bytes:
        vault[user_id] = key
        return f"kms-key-of-{user_id}".encode()

    def unwrap(user_id: str, wrapped: bytes) -> bytes:
        return vault[user_id]

    sealed = ChatArchive(engine=archive.engine, keys=UserKeys(wrap=wrap, unwrap=unwrap))
    given = ChatDocument.parse(chat("kms"))
    sealed.save(given)
    assert same(sealed.get("kms"), given)
    assert leaked(archive.engine) == []


def test_the_command_line_seals_with_the_master_key_of_the_environment(
    run: Run, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    export = tmp_path / "chats.jsonl"
    export.write_text(json.dumps(chat("imported")) + "\n")
    monkeypatch.setenv(MASTER_KEY_ENV, MASTER.hex())
    assert run("db", "upgrade").returncode == 0
    assert run("import", str(export)).returncode == 0
    assert "What is ultramarine?" in run("show", "imported").stdout
    monkeypatch.delenv(MASTER_KEY_ENV)
    refused = run("show", "imported", expect=1)
    assert "$CHATARCHIVE_MASTER_KEY" in refused.stderr
    monkeypatch.setenv(MASTER_KEY_ENV, "not hex")
    assert "must be 64 hex digits" in run("show", "imported", expect=1).stderr


def _backup(engine: Engine) -> dict[str, list[dict[str, Any]]]:
    with engine.connect() as connection:
        return {
            table.name: [dict(row) for row in connection.execute(select(table)).mappings()]
            for table in metadata.sorted_tables
            if table.name != "archive_settings"
        }


def _restore(engine: Engine, backup: dict[str, list[dict[str, Any]]]) -> None:
    with engine.begin() as connection:
        for table in reversed(metadata.sorted_tables):
            if table.name in backup:
                connection.execute(table.delete())
        for table in metadata.sorted_tables:
            if backup.get(table.name):
                connection.execute(insert(table), backup[table.name])
