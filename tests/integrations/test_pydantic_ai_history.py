"""Pydantic AI's message history on the archive, against the real pydantic-ai package."""

from __future__ import annotations

import asyncio

from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from chatarchive import AsyncChatArchive, ChatArchive
from chatarchive._schema import metadata
from chatarchive.integrations.pydantic_ai import ChatArchiveHistory
from tests.support.samples import format_sample


def _lab_model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Thinks and calls the tool first; answers with the tool's return once it has one."""
    returns = [part for part in messages[-1].parts if isinstance(part, ToolReturnPart)]
    if returns:
        return ModelResponse(parts=[TextPart(f"Tm is {returns[0].content}: anneal below it.")])
    return ModelResponse(
        parts=[
            ThinkingPart("The Tm decides the annealing step.", signature="sig"),
            ToolCallPart("melting_point", {"primer": "AGGA"}, tool_call_id="call-1"),
        ]
    )


def _agent() -> Agent[None, str]:
    agent = Agent(FunctionModel(_lab_model), system_prompt="Help with PCR.")

    @agent.tool_plain
    def melting_point(primer: str) -> str:
        """The melting point of a primer."""
        return f"{2 * primer.count('A') + 4 * primer.count('G')} C"

    return agent


def test_agent_runs_come_back_equal(archive: ChatArchive) -> None:
    # agent.run in asyncio.run: run_sync leaves its event loop open, which the suite counts as an error
    agent = _agent()
    history = ChatArchiveHistory(archive, "pai-1", user_id="alice", metadata={"bench": "pcr"})
    assert history.load() == []
    first = asyncio.run(agent.run("Tm of AGGA?", message_history=history.load()))
    history.add(first.new_messages())
    second = asyncio.run(agent.run("And of AGGA again?", message_history=history.load()))
    history.add(second.new_messages())
    assert history.load() == second.all_messages()
    dumped = ModelMessagesTypeAdapter.dump_python(history.load(), mode="json")
    assert dumped == ModelMessagesTypeAdapter.dump_python(second.all_messages(), mode="json")

    stored = archive.get("pai-1")
    assert (stored.user_id, stored.metadata) == ("alice", {"bench": "pcr"})
    roles = [message.role for message in stored.messages]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    part_types = [
        part.type
        for message in stored.messages
        if isinstance(message.content, list)
        for part in message.content
    ]
    assert part_types == ["thinking", "text"] * 2
    calls = metadata.tables["tool_calls"]
    with archive.engine.connect() as connection:
        names = connection.execute(select(calls.c.name).where(calls.c.chat_id == "pai-1")).scalars().all()
    assert names == ["melting_point", "melting_point"]
    history.clear()
    assert history.load() == []
    history.clear()  # clearing an absent history is no error


def test_the_formats_sample_comes_back_equal_as_objects(archive: ChatArchive) -> None:
    messages = ModelMessagesTypeAdapter.validate_python(format_sample("pydantic-ai", "run-with-tools"))
    history = ChatArchiveHistory(archive, "pai-sample")
    history.add(messages[:2])
    history.add(messages[2:])
    history.add([])
    assert history.load() == messages


def test_a_chat_of_another_format_loads_as_model_messages(archive: ChatArchive) -> None:
    archive.save(
        {
            "chat_id": "pai-foreign",
            "messages": [
                {"role": "system", "content": "Help with PCR."},
                {"role": "user", "content": "Tm?"},
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {"id": "c1", "type": "function", "function": {"name": "tm", "arguments": "{}"}}
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "12 C"},
                {"role": "assistant", "content": "Anneal below 12 C."},
            ],
        }
    )
    loaded = ChatArchiveHistory(archive, "pai-foreign").load()
    assert [message.kind for message in loaded] == ["request", "response", "request", "response"]
    assert [type(part).__name__ for message in loaded for part in message.parts] == [
        "SystemPromptPart",
        "UserPromptPart",
        "ToolCallPart",
        "ToolReturnPart",
        "TextPart",
    ]
    result = asyncio.run(_agent().run("And now?", message_history=loaded))  # an agent goes on from it
    assert result.output.startswith("Tm is")


def test_the_async_methods_use_an_async_archive(async_engine: AsyncEngine, runner: asyncio.Runner) -> None:
    agent = _agent()

    async def run() -> None:
        history = ChatArchiveHistory(AsyncChatArchive(engine=async_engine), "pai-async")
        result = await agent.run("Tm of AGGA?", message_history=await history.aload())
        await history.aadd(result.new_messages())
        assert await history.aload() == result.all_messages()
        await history.aclear()
        assert await history.aload() == []

    runner.run(run())


def test_the_modules_example_runs() -> None:
    import doctest

    import chatarchive.integrations.pydantic_ai as module

    assert doctest.testmod(module, optionflags=doctest.ELLIPSIS).failed == 0
