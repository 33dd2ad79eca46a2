"""Each framework adapter serves its sync and its async methods from one
object, on a ``ChatArchive`` and on an ``AsyncChatArchive`` alike, as the
frameworks' own stores do; and a session is used from more than one event
loop, as the Agents SDK's own tests use its ``SQLAlchemySession``."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, cast

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from llama_index.core.llms import ChatMessage
from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncEngine

from chatarchive import AsyncChatArchive, ChatArchive
from chatarchive.integrations.langchain import ChatArchiveMessageHistory
from chatarchive.integrations.llama_index import ChatArchiveChatStore
from chatarchive.integrations.openai_agents import ChatArchiveSession
from chatarchive.integrations.pydantic_ai import ChatArchiveHistory


@pytest.fixture(params=["ChatArchive", "AsyncChatArchive"])
def either(request: pytest.FixtureRequest, archive: ChatArchive, async_engine: AsyncEngine) -> Any:
    """Each kind of archive, on the same database."""
    return archive if request.param == "ChatArchive" else AsyncChatArchive(engine=async_engine)


def test_langchain_history_serves_both_apis(either: ChatArchive | AsyncChatArchive) -> None:
    history = ChatArchiveMessageHistory(either, "lc-both", user_id="alice")
    history.add_messages([HumanMessage("Hi", id="h1")])
    asyncio.run(history.aadd_messages([AIMessage("Hello!", id="a1")]))
    expected = [HumanMessage("Hi", id="h1"), AIMessage("Hello!", id="a1")]
    assert history.messages == expected
    assert asyncio.run(history.aget_messages()) == expected

    async def sync_inside_a_running_loop() -> list[Any]:
        return history.messages  # blocks the loop, as a sync call does, and works

    assert asyncio.run(sync_inside_a_running_loop()) == expected
    asyncio.run(history.aclear())
    assert history.messages == []
    history.clear()


def test_llama_index_store_serves_both_apis(either: ChatArchive | AsyncChatArchive) -> None:
    store = ChatArchiveChatStore.from_archive(either, user_id="li-both")
    store.add_message("k", ChatMessage(role="user", content="hello"))
    asyncio.run(store.async_add_message("k", ChatMessage(role="assistant", content="world")))
    assert [m.content for m in store.get_messages("k")] == ["hello", "world"]
    assert [m.content for m in asyncio.run(store.aget_messages("k"))] == ["hello", "world"]
    assert store.get_keys() == asyncio.run(store.aget_keys()) == ["k"]
    assert store.delete_last_message("k") == ChatMessage(role="assistant", content="world")
    assert asyncio.run(store.adelete_messages("k")) == [ChatMessage(role="user", content="hello")]
    assert store.get_messages("k") == []


def test_pydantic_ai_history_serves_both_apis(either: ChatArchive | AsyncChatArchive) -> None:
    history = ChatArchiveHistory(either, "pai-both")
    request = ModelRequest(parts=[UserPromptPart("Hi")])
    response = ModelResponse(parts=[TextPart("Hello!")])
    history.add([request])
    asyncio.run(history.aadd([response]))
    assert history.load() == asyncio.run(history.aload()) == [request, response]
    history.clear()
    assert asyncio.run(history.aload()) == []


def _added_from_two_loops(session: ChatArchiveSession) -> list[tuple[str, str]]:
    """Two threads, each with its own event loop, adding an item at once."""
    barrier = threading.Barrier(2)
    results: list[tuple[str, str]] = []

    def worker(content: str) -> None:
        async def add() -> None:
            barrier.wait()
            await asyncio.wait_for(session.add_items([{"role": "user", "content": content}]), timeout=30)

        try:
            asyncio.run(add())
            results.append((content, "ok"))
        except Exception as exc:  # reported by the test, with its type
            results.append((content, type(exc).__name__))

    threads = [threading.Thread(target=worker, args=(content,)) for content in ("one", "two")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sorted(results)


def _contents(session: ChatArchiveSession) -> list[Any]:
    return [cast(dict[str, Any], item)["content"] for item in asyncio.run(session.get_items())]


def test_an_agents_session_is_used_from_two_event_loops_at_once(
    engine: Engine, async_engine: AsyncEngine
) -> None:
    """Threads each with its own loop, on one shared session (the SDK's
    test_add_items_concurrent_first_access_with_shared_session_cross_loop)."""
    for archive in (ChatArchive(engine=engine), AsyncChatArchive(engine=async_engine)):
        session = ChatArchiveSession(f"loops-{type(archive).__name__}", archive)
        assert _added_from_two_loops(session) == [("one", "ok"), ("two", "ok")]
        assert sorted(_contents(session)) == ["one", "two"]
        asyncio.run(session.clear_session())


def test_an_agents_session_is_used_from_one_event_loop_after_another(async_engine: AsyncEngine) -> None:
    session = ChatArchiveSession("one-after-another", AsyncChatArchive(engine=async_engine))
    for content in ("first", "second", "third"):
        asyncio.run(session.add_items([{"role": "user", "content": content}]))
    assert _contents(session) == ["first", "second", "third"]
    asyncio.run(session.clear_session())
