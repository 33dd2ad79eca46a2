"""LangChain's message history on the archive, against the real langchain-core."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, messages_from_dict
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_core.runnables.history import RunnableWithMessageHistory
from sqlalchemy.ext.asyncio import AsyncEngine

from chatarchive import AsyncChatArchive, ChatArchive, InvalidDocument, Limits
from chatarchive.integrations.langchain import ChatArchiveMessageHistory
from tests.support.samples import format_sample


def test_messages_come_back_equal(archive: ChatArchive) -> None:
    """Every message type, content lists, valid and invalid tool calls,
    additional_kwargs, response and usage metadata, ids and names."""
    messages: list[BaseMessage] = messages_from_dict(format_sample("langchain", "messages-to-dict"))
    history = ChatArchiveMessageHistory(archive, "session-1", user_id="alice")
    assert history.messages == []
    history.add_messages(messages[:3])
    history.add_messages(messages[3:])
    assert history.messages == messages
    assert archive.get("session-1").user_id == "alice"
    history.clear()
    assert history.messages == []
    history.clear()  # clearing an absent history is no error


def test_a_message_the_archive_refuses_names_the_chat_and_the_message_and_stores_nothing(
    archive: ChatArchive,
) -> None:
    """LangChain's messages are checked once, by the archive's write: an
    error names the chat and the message's index, and the chat is as it was."""
    history = ChatArchiveMessageHistory(archive, "session-2")
    history.add_messages([HumanMessage("hello")])
    too_long = ChatArchive(engine=archive.engine, limits=Limits(max_message_bytes=1000))
    with pytest.raises(InvalidDocument) as raised:
        ChatArchiveMessageHistory(too_long, "session-2").add_messages(
            [AIMessage("ok"), AIMessage("x" * 2000)]
        )
    assert raised.value.chat_id == "session-2"
    assert raised.value.message_index == 1
    assert history.messages == [HumanMessage("hello")]


# The issue asks for it; langchain-core 1 marks it deprecated in favour of LangGraph's persistence.
@pytest.mark.filterwarnings("ignore::langchain_core._api.deprecation.LangChainDeprecationWarning")
def test_runnable_with_message_history_keeps_each_session(archive: ChatArchive) -> None:
    model = GenericFakeChatModel(messages=iter([AIMessage("Primer dimers."), AIMessage("Anneal hotter.")]))
    prompt = ChatPromptTemplate.from_messages([MessagesPlaceholder("history"), ("human", "{question}")])
    chain = RunnableWithMessageHistory(
        prompt | model,
        lambda session_id: ChatArchiveMessageHistory(archive, session_id, user_id="bob"),
        input_messages_key="question",
        history_messages_key="history",
    )
    config: Any = {"configurable": {"session_id": "gel"}}
    chain.invoke({"question": "Why two bands?"}, config=config)
    chain.invoke({"question": "What now?"}, config=config)
    stored = archive.get("gel")
    assert [(m.role, m.content) for m in stored.messages] == [
        ("user", "Why two bands?"),
        ("assistant", "Primer dimers."),
        ("user", "What now?"),
        ("assistant", "Anneal hotter."),
    ]
    assert stored.user_id == "bob"


def test_the_async_methods_use_an_async_archive(async_engine: AsyncEngine, runner: asyncio.Runner) -> None:
    messages = [
        HumanMessage("Hi", id="h-1"),
        AIMessage("Hello!", id="a-1", response_metadata={"model_name": "m"}),
    ]

    async def run() -> list[BaseMessage]:
        archive = AsyncChatArchive(engine=async_engine)
        history = ChatArchiveMessageHistory(archive, "async-1")
        await history.aadd_messages(messages)
        found = await history.aget_messages()
        await history.aclear()
        assert await history.aget_messages() == []
        return found

    assert runner.run(run()) == messages


def test_the_modules_example_runs() -> None:
    import doctest

    import chatarchive.integrations.langchain as module

    result = doctest.testmod(module, optionflags=doctest.ELLIPSIS)
    assert (result.failed, result.attempted > 0) == (0, True)
