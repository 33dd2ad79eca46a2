"""The OpenAI Agents SDK's session on the archive, against the real openai-agents package."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from typing import Any

import pytest
from agents import Agent, Runner, function_tool, set_tracing_disabled
from agents.items import TResponseInputItem
from agents.memory import Session, SessionSettings
from agents.testing import ModelStep, ScriptedModel
from agents.usage import Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputItem,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary
from sqlalchemy import select
from sqlalchemy.ext.asyncio import AsyncEngine

from chatarchive import AsyncChatArchive, ChatArchive, ChatNotFound
from chatarchive._schema import metadata
from chatarchive.integrations.openai_agents import ChatArchiveSession
from tests.support.samples import format_sample

set_tracing_disabled(True)  # no traces are sent anywhere from these tests


@function_tool
def melting_point(primer: str) -> str:
    """The melting point of a primer."""
    return f"{2 * primer.count('A') + 4 * primer.count('G')} C"


def _say(item_id: str, text: str) -> ResponseOutputMessage:
    part = ResponseOutputText(type="output_text", text=text, annotations=[])
    return ResponseOutputMessage(
        id=item_id, type="message", role="assistant", status="completed", content=[part]
    )


def _lab_agent() -> Agent[Any]:
    """Three turns: a reasoned tool call and its answer, two tool calls at once, a plain answer."""
    outputs: list[list[ResponseOutputItem]] = [
        [
            ResponseReasoningItem(
                id="rs_1", type="reasoning", summary=[Summary(type="summary_text", text="Need the Tm.")]
            ),
            ResponseFunctionToolCall(
                id="fc_1",
                call_id="call_1",
                type="function_call",
                name="melting_point",
                arguments='{"primer": "AGGA"}',
            ),
        ],
        [_say("msg_1", "12 C: anneal below it.")],
        [
            ResponseFunctionToolCall(
                id="fc_2",
                call_id="call_2",
                type="function_call",
                name="melting_point",
                arguments='{"primer": "GG"}',
            ),
            ResponseFunctionToolCall(
                id="fc_3",
                call_id="call_3",
                type="function_call",
                name="melting_point",
                arguments='{"primer": "AA"}',
            ),
        ],
        [_say("msg_2", "8 C and 4 C.")],
        [_say("msg_3", "Touchdown PCR, then.")],
    ]
    usage = Usage(requests=1, input_tokens=40, output_tokens=8, total_tokens=48)
    model = ScriptedModel([ModelStep(output=output, usage=usage) for output in outputs])  # the SDK's own
    return Agent(name="lab", instructions="Help with PCR.", model=model, tools=[melting_point])


#: The items the three turns make, by type (or role).
TURN_KINDS = [
    "user", "reasoning", "function_call", "function_call_output", "message",
    "user", "function_call", "function_call", "function_call_output", "function_call_output", "message",
    "user", "message",
]  # fmt: skip


def _kinds(items: list[TResponseInputItem]) -> list[Any]:
    return [item.get("type", item.get("role")) for item in items]


class RecordingSession(ChatArchiveSession):
    """The session, remembering every item the Runner handed it."""

    added: list[TResponseInputItem]

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        self.added = [*getattr(self, "added", []), *items]
        await super().add_items(items)


async def _run_turns(session: ChatArchiveSession) -> None:
    agent = _lab_agent()
    for question in ("Tm of AGGA?", "And of GG and AA?", "What next?"):
        result = await Runner.run(agent, question, session=session)
        await session.store_run_usage(result)


def test_runner_turns_come_back_equal_in_a_new_process(own_archive: tuple[ChatArchive, str]) -> None:
    archive, url = own_archive
    session = RecordingSession("lab-1", archive, user_id="alice", metadata={"bench": "pcr"})
    assert isinstance(session, Session)
    asyncio.run(_run_turns(session))
    assert _kinds(session.added) == TURN_KINDS
    assert asyncio.run(session.get_items()) == session.added

    reload = (
        "import asyncio, json, sys\n"
        "from chatarchive import ChatArchive\n"
        "from chatarchive.integrations.openai_agents import ChatArchiveSession\n"
        "with ChatArchive(sys.argv[1]) as archive:\n"
        "    print(json.dumps(asyncio.run(ChatArchiveSession('lab-1', archive).get_items())))\n"
    )
    done = subprocess.run([sys.executable, "-c", reload, url], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == session.added

    stored = archive.get("lab-1")
    assert (stored.user_id, stored.metadata) == ("alice", {"bench": "pcr"})
    calls = metadata.tables["tool_calls"]
    with archive.engine.connect() as connection:
        names = connection.execute(select(calls.c.name).where(calls.c.chat_id == "lab-1")).scalars().all()
    assert names == ["melting_point"] * 3  # the calls are rows, queryable by name


def test_run_usage_is_recorded_per_turn_in_the_token_columns(archive: ChatArchive) -> None:
    session = ChatArchiveSession("lab-usage", archive)
    asyncio.run(_run_turns(session))
    turns = asyncio.run(session.get_turn_usage())
    assert isinstance(turns, list)
    assert [(t["user_turn_number"], t["requests"], t["input_tokens"], t["total_tokens"]) for t in turns] == [
        (1, 2, 80, 96),
        (2, 2, 80, 96),
        (3, 1, 40, 48),
    ]
    assert turns[0]["output_tokens_details"] == {"reasoning_tokens": 0}
    assert all({"input_tokens_details", "output_tokens_details"} <= turn.keys() for turn in turns)
    assert asyncio.run(session.get_turn_usage(3)) == {
        k: v for k, v in turns[2].items() if k != "user_turn_number"
    }
    assert asyncio.run(session.get_turn_usage(9)) == {}
    assert asyncio.run(session.get_session_usage()) == {
        "requests": 5,
        "input_tokens": 200,
        "output_tokens": 40,
        "total_tokens": 240,
        "total_turns": 3,
    }
    last = archive.get("lab-usage").messages[-1]
    assert last.usage is not None
    assert (last.usage.prompt_tokens, last.usage.completion_tokens) == (40, 8)
    assert "usage" not in json.dumps(asyncio.run(session.get_items(1)))  # usage is not in the items


def test_every_responses_item_type_comes_back_equal(archive: ChatArchive) -> None:
    items: list[Any] = [
        *format_sample("openai-responses", "input-conversation"),
        *format_sample("openai-responses", "input-computer-shell-mcp"),
        *format_sample("openai-responses", "response-built-in-tools")["output"],
    ]
    session = ChatArchiveSession("items", archive, session_settings=SessionSettings(limit=4))

    async def run() -> None:
        await session.add_items(items[:5])
        await session.add_items(items[5:])
        await session.add_items([])
        assert await session.get_items(limit=len(items)) == items
        assert await session.get_items() == items[-4:]  # the settings' limit
        assert await session.get_items(2) == items[-2:]
        assert await session.get_items(0) == []

    asyncio.run(run())


def test_pop_item_and_clear_session(archive: ChatArchive) -> None:
    session = ChatArchiveSession("pop", archive)
    items: list[Any] = [
        {"role": "user", "content": "Hi"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c", "output": "ok"},
    ]

    async def run() -> None:
        assert await session.pop_item() is None
        await session.add_items(items)
        assert await session.pop_item() == items[2]
        assert await session.pop_item() == items[1]
        assert await session.get_items() == items[:1]
        await session.clear_session()
        assert await session.get_items() == []
        assert await session.pop_item() is None
        await session.clear_session()  # clearing an absent session is no error

    asyncio.run(run())
    with pytest.raises(ChatNotFound):
        archive.get("pop")


def test_the_session_runs_on_an_async_archive(async_engine: AsyncEngine, runner: asyncio.Runner) -> None:
    async def run() -> list[TResponseInputItem]:
        archive = AsyncChatArchive(engine=async_engine)
        session = ChatArchiveSession("async-agents", archive, user_id="bob")
        await _run_turns(session)
        items = await session.get_items()
        assert (await archive.get("async-agents")).user_id == "bob"
        await session.clear_session()
        return items

    assert _kinds(runner.run(run())) == TURN_KINDS


# The behaviour the SDK's own tests ask of its SQLAlchemySession
# (tests/extensions/memory/test_sqlalchemy_session.py), asked of this session.


def test_sessions_are_isolated_and_their_ids_case_sensitive(archive: ChatArchive) -> None:
    upper, lower = ChatArchiveSession("Foo", archive), ChatArchiveSession("foo", archive)

    async def run() -> None:
        await upper.add_items([{"role": "user", "content": "upper"}])
        await lower.add_items([{"role": "user", "content": "lower"}])
        assert await upper.get_items() == [{"role": "user", "content": "upper"}]
        assert await lower.get_items() == [{"role": "user", "content": "lower"}]

    asyncio.run(run())


def test_concurrent_pops_return_each_item_once(async_engine: AsyncEngine, runner: asyncio.Runner) -> None:
    async def run() -> list[Any]:
        archive = AsyncChatArchive(engine=async_engine)
        one, other = ChatArchiveSession("pops", archive), ChatArchiveSession("pops", archive)
        await one.add_items(
            [{"role": "user", "content": "first"}, {"role": "assistant", "content": "second"}]
        )
        popped = list(await asyncio.gather(one.pop_item(), other.pop_item()))
        assert await one.get_items() == []
        await one.clear_session()
        return popped

    popped = runner.run(run())
    assert sorted(item["content"] for item in popped if item is not None) == ["first", "second"]


def test_the_modules_example_runs() -> None:
    import doctest

    import chatarchive.integrations.openai_agents as module

    assert doctest.testmod(module).failed == 0


def test_session_settings_given_as_a_dict_are_the_sdks_settings_and_unknown_keys_are_refused(
    archive: ChatArchive,
) -> None:
    # As the SDK's own sessions take them (coerce_session_settings).
    session = ChatArchiveSession("settings", archive, session_settings={"limit": 2})
    assert session.session_settings == SessionSettings(limit=2)
    with pytest.raises(TypeError, match="Unknown session settings"):
        ChatArchiveSession("settings", archive, session_settings={"limt": 2})


def test_turn_usage_reports_both_token_details_none_when_a_run_has_none(archive: ChatArchive) -> None:
    session = ChatArchiveSession("no-details", archive)

    async def run() -> Any:
        await session.add_items(
            [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]
        )
        message = archive.get("no-details").messages[-1]
        archive.update_message("no-details", message.uid, usage={"prompt_tokens": 3, "completion_tokens": 2})
        return await session.get_turn_usage(1)

    turn = asyncio.run(run())
    assert (turn["input_tokens"], turn["output_tokens"]) == (3, 2)
    assert turn["input_tokens_details"] is None
    assert turn["output_tokens_details"] is None
