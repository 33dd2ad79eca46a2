"""LlamaIndex's chat store on the archive, against the real llama-index-core.

The first tests hold the store to the behaviour llama-index-core's own tests
ask of its ``SimpleChatStore`` (llama-index-core/tests/storage/chat_store/
test_simple_chat_store.py): the same calls, the same results.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer
from sqlalchemy.ext.asyncio import AsyncEngine

from chatarchive import AsyncChatArchive, ChatArchive, InvalidArgument
from chatarchive.integrations.llama_index import ChatArchiveChatStore
from tests.support.samples import format_sample


def _said(*texts: str) -> list[ChatMessage]:
    return [ChatMessage(role="user", content=text) for text in texts]


@pytest.fixture
def store(archive: ChatArchive) -> ChatArchiveChatStore:
    return ChatArchiveChatStore.from_archive(archive)


def test_add_messages(store: ChatArchiveChatStore) -> None:
    for key in ("user1", "user2"):
        store.add_message(key, ChatMessage(role="user", content="hello"))
        store.add_message(key, ChatMessage(role="user", content="world"))
    assert store.get_messages("user1") == _said("hello", "world")
    assert store.get_messages("user2") == _said("hello", "world")
    assert store.get_keys() == ["user1", "user2"]
    store.add_message("user1", ChatMessage(role="user", content="hello"), idx=0)
    assert store.get_messages("user1") == _said("hello", "hello", "world")


def test_delete_chat_messages(store: ChatArchiveChatStore) -> None:
    for key in ("user1", "user2"):
        store.set_messages(key, _said("hello", "world"))
    assert store.delete_messages("user1") == _said("hello", "world")
    assert store.get_messages("user1") == []
    assert store.get_messages("user2") == _said("hello", "world")
    assert store.delete_messages("user1") is None


def test_delete_chat_message(store: ChatArchiveChatStore) -> None:
    store.set_messages("user1", _said("hello", "world"))
    assert store.delete_last_message("user1") == _said("world")[0]
    assert store.get_messages("user1") == _said("hello")


def test_delete_chat_message_idx(store: ChatArchiveChatStore) -> None:
    store.set_messages("user1", _said("hello", "world"))
    assert store.delete_message("user1", 0) == _said("hello")[0]
    assert store.get_messages("user1") == _said("world")


def test_delete_chat_message_out_of_bounds(store: ChatArchiveChatStore) -> None:
    store.add_message("user1", ChatMessage(role="user", content="hello"))
    assert store.delete_message("user1", -2) is None
    assert store.delete_message("user1", 1) is None
    assert store.delete_message("nobody", 0) is None
    assert store.get_messages("user1") == _said("hello")


def test_delete_last_chat_message_from_empty_history(store: ChatArchiveChatStore) -> None:
    message = ChatMessage(role="user", content="hello")
    store.add_message("user1", message)
    assert store.delete_last_message("user1") == message
    assert store.delete_last_message("user1") is None
    assert store.delete_last_message("nobody") is None


def test_non_ascii_comes_back_as_it_went_in(store: ChatArchiveChatStore) -> None:
    store.add_message("user1", ChatMessage(role="user", content="ハロー héllo 为什么PCR"))
    assert store.get_messages("user1") == _said("ハロー héllo 为什么PCR")


def test_blocks_and_tool_calls_come_back_equal(store: ChatArchiveChatStore, archive: ChatArchive) -> None:
    """Text, thinking, image and tool-call blocks, and OpenAI tool calls in additional_kwargs."""
    messages = [ChatMessage.model_validate(item) for item in format_sample("llama-index", "agent-with-tools")]
    store.set_messages("lab", messages[:3])
    for message in messages[3:]:
        store.add_message("lab", message)
    assert store.get_messages("lab") == messages
    stored = archive.get("lab")
    assert [len(m.tool_calls or []) for m in stored.messages] == [0, 0, 1, 0, 1, 0, 0]
    assert [m.tool_call_id for m in stored.messages if m.role == "tool"] == ["call-1", "call_2"]


def test_keys_are_the_stores_users_chats(archive: ChatArchive) -> None:
    alice = ChatArchiveChatStore.from_archive(archive, user_id="alice")
    bob = ChatArchiveChatStore.from_archive(archive, user_id="bob")
    for key in ("a-2", "a-1"):
        alice.add_message(key, ChatMessage(role="user", content="hi"))
    bob.set_messages("b-1", _said("hi"))
    assert alice.get_keys() == ["a-1", "a-2"]
    assert bob.get_keys() == ["b-1"]
    assert archive.get("b-1").user_id == "bob"


def test_chat_memory_buffer_keeps_its_messages_in_the_archive(store: ChatArchiveChatStore) -> None:
    memory = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="lab-7", token_limit=3000)
    memory.put(ChatMessage(role="user", content="Why two bands?"))
    memory.put(ChatMessage(role="assistant", content="Primer dimers, probably."))
    again = ChatMemoryBuffer.from_defaults(chat_store=store, chat_store_key="lab-7", token_limit=3000)
    assert [m.content for m in again.get_all()] == ["Why two bands?", "Primer dimers, probably."]


def test_the_store_refuses_what_is_not_an_archive(tmp_path: Path) -> None:
    with pytest.raises(InvalidArgument, match="must be a ChatArchive"):
        ChatArchiveChatStore.from_archive(str(tmp_path))  # type: ignore[arg-type]


def test_the_async_methods_use_an_async_archive(async_engine: AsyncEngine, runner: asyncio.Runner) -> None:
    async def run() -> None:
        store = ChatArchiveChatStore.from_archive(AsyncChatArchive(engine=async_engine), user_id="async-li")
        await store.aset_messages("k", _said("hello", "world"))
        await store.async_add_message("k", ChatMessage(role="assistant", content="!"))
        await store.async_add_message("k", ChatMessage(role="user", content="first"), idx=0)
        assert [m.content for m in await store.aget_messages("k")] == ["first", "hello", "world", "!"]
        assert await store.aget_keys() == ["k"]
        assert (await store.adelete_message("k", 1)) == _said("hello")[0]
        assert (await store.adelete_last_message("k")) == ChatMessage(role="assistant", content="!")
        assert await store.adelete_messages("k") == _said("first", "world")
        assert await store.aget_messages("k") == []

    runner.run(run())


def test_the_modules_example_runs() -> None:
    import doctest

    import chatarchive.integrations.llama_index as module

    assert doctest.testmod(module).failed == 0
