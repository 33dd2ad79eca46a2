"""The cases the Agents SDK's own session tests ask of its sessions
(tests/memory/test_session.py, test_session_limit.py and
tests/extensions/memory/test_sqlalchemy_session.py), asked of
``ChatArchiveSession``: the same calls through the SDK's ``Runner`` and
its ``ScriptedModel``, the same results, on SQLite, PostgreSQL and Citus.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar, cast

import pytest
from agents import Agent, RunConfig, Runner, set_tracing_disabled
from agents.items import TResponseInputItem
from agents.memory import SessionSettings
from agents.testing import ScriptedModel, assistant_message

from chatarchive import ChatArchive
from chatarchive.integrations.openai_agents import ChatArchiveSession

set_tracing_disabled(True)

T = TypeVar("T")
RUNNERS = ["run", "run_sync", "run_streamed"]


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def _agent(*answers: str) -> tuple[Agent[Any], ScriptedModel]:
    model = ScriptedModel([[assistant_message(answer)] for answer in answers])
    return Agent(name="test", model=model), model


def _run_agent(method: str, agent: Agent[Any], given: Any, **options: Any) -> Any:
    """One run, the way ``method`` runs it (the SDK's tests run each case each way)."""
    if method == "run_sync":
        try:
            return Runner.run_sync(agent, given, **options)
        finally:  # run_sync leaves the thread's default loop open: closed here, as a test must
            asyncio.get_event_loop_policy().get_event_loop().close()
            asyncio.set_event_loop(None)

    async def go() -> Any:
        if method == "run":
            return await Runner.run(agent, given, **options)
        streamed = Runner.run_streamed(agent, given, **options)
        async for _ in streamed.stream_events():
            pass
        return streamed

    return run(go())


def _texts(items: list[Any]) -> list[Any]:
    return [item.get("content") if "role" in item else item.get("type") for item in items]


@pytest.mark.parametrize("method", RUNNERS)
def test_session_memory_carries_the_history_into_the_next_run(archive: ChatArchive, method: str) -> None:
    session = ChatArchiveSession("memory", archive)
    agent, model = _agent("San Francisco", "California")
    _run_agent(method, agent, "What city is the Golden Gate Bridge in?", session=session)
    _run_agent(method, agent, "What state is it in?", session=session)
    last = model.last_call
    assert last is not None
    assert _texts(last.input)[0] == "What city is the Golden Gate Bridge in?"
    assert len(last.input) == 3  # the first question, its answer, the second question
    assert len(run(session.get_items())) == 4


@pytest.mark.parametrize("method", RUNNERS)
def test_different_sessions_keep_different_histories(archive: ChatArchive, method: str) -> None:
    agent, model = _agent("one", "two")
    _run_agent(method, agent, "first", session=ChatArchiveSession("s1", archive))
    _run_agent(method, agent, "second", session=ChatArchiveSession("s2", archive))
    last = model.last_call
    assert last is not None
    assert _texts(last.input) == ["second"]


@pytest.mark.parametrize("method", RUNNERS)
def test_a_list_input_is_appended_to_the_history(archive: ChatArchive, method: str) -> None:
    session = ChatArchiveSession("list-input", archive)
    history: list[TResponseInputItem] = [
        {"role": "user", "content": "Earlier message"},
        {"role": "assistant", "content": "Saved reply"},
    ]
    run(session.add_items(history))
    agent, model = _agent("This should run")
    given: list[TResponseInputItem] = [{"role": "user", "content": "Test message"}]
    _run_agent(method, agent, given, session=session)
    last = model.last_call
    assert last is not None
    assert last.input == history + given


@pytest.mark.parametrize("method", RUNNERS)
def test_the_session_input_callback_prepares_the_input(archive: ChatArchive, method: str) -> None:
    session = ChatArchiveSession("callback", archive)
    history: list[TResponseInputItem] = [
        {"role": "user", "content": "Hello there."},
        {"role": "assistant", "content": "Hi, I'm here to assist you."},
    ]
    run(session.add_items(history))
    agent, model = _agent("I'm a model")

    def users_only(old: list[Any], new: list[Any]) -> list[Any]:
        return [item for item in old if item.get("role") == "user"] + new

    given: list[TResponseInputItem] = [{"role": "user", "content": "What is your name?"}]
    _run_agent(method, agent, given, session=session, run_config=RunConfig(session_input_callback=users_only))
    last = model.last_call
    assert last is not None
    assert last.input == [history[0], given[0]]


@pytest.mark.parametrize("method", RUNNERS)
def test_a_limit_drops_a_tool_output_whose_call_it_cut_off(archive: ChatArchive, method: str) -> None:
    session = ChatArchiveSession("limit-pair", archive)
    history = cast(
        list[TResponseInputItem],
        [
            {"role": "user", "content": "What is the weather?"},
            {"type": "function_call", "call_id": "call_1", "name": "get_weather", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "call_1", "output": "sunny"},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "It is sunny.", "annotations": []}],
            },
        ],
    )
    run(session.add_items(history))
    assert run(session.get_items(limit=2)) == history[-2:]
    agent, model = _agent("Tomorrow is sunny too.")
    _run_agent(
        method,
        agent,
        "What about tomorrow?",
        session=session,
        run_config=RunConfig(session_settings=SessionSettings(limit=2)),
    )
    last = model.last_call
    assert last is not None
    assert last.input == [history[-1], {"role": "user", "content": "What about tomorrow?"}]


def test_limits_zero_none_and_beyond_the_history(archive: ChatArchive) -> None:
    session = ChatArchiveSession("limits", archive)
    items: list[TResponseInputItem] = [{"role": "user", "content": f"m{n}"} for n in range(5)]
    run(session.add_items(items))
    assert run(session.get_items(limit=0)) == []
    assert run(session.get_items(limit=None)) == items
    assert run(session.get_items(limit=10)) == items
    assert run(session.get_items(limit=3)) == items[2:]
    limited = ChatArchiveSession("limits", archive, session_settings=SessionSettings(limit=2))
    assert run(limited.get_items()) == items[3:]
    assert run(limited.get_items(limit=4)) == items[1:]  # an explicit limit wins


def test_strange_text_comes_back_as_it_went_in(archive: ChatArchive) -> None:
    session = ChatArchiveSession("strange", archive)
    items: list[TResponseInputItem] = [
        {"role": "user", "content": "こんにちは 🌍 Ünïcödé ñ"},
        {"role": "assistant", "content": "'; DROP TABLE messages; --"},
        {"role": "user", "content": "Quotes \"double\" 'single' back\\slash \x00 NUL, %s %(name)s"},
    ]
    run(session.add_items(items))
    assert run(ChatArchiveSession("strange", archive).get_items()) == items


def test_empty_adds_and_pops_of_an_empty_session_do_nothing(archive: ChatArchive) -> None:
    session = ChatArchiveSession("empty", archive)
    run(session.add_items([]))
    assert archive.find("empty") is None  # no chat made for nothing
    assert run(session.pop_item()) is None
    assert run(session.get_items()) == []
    run(session.clear_session())


def test_concurrent_adds_all_land_in_order_each(archive: ChatArchive) -> None:
    session = ChatArchiveSession("concurrent", archive)

    async def add_all() -> None:
        await asyncio.gather(
            *(
                session.add_items(
                    [{"role": "user", "content": f"{n}-a"}, {"role": "user", "content": f"{n}-b"}]
                )
                for n in range(10)
            )
        )

    run(add_all())
    contents = [cast(dict[str, Any], item)["content"] for item in run(session.get_items())]
    assert sorted(contents) == sorted(f"{n}-{x}" for n in range(10) for x in "ab")
    for n in range(10):  # each call's items stay together, in order
        assert contents.index(f"{n}-b") == contents.index(f"{n}-a") + 1
