"""LangGraph's checkpointer on the archive, against the real langgraph: the
conformance suite langgraph-checkpoint-conformance runs against any saver,
and graphs whose threads are chats."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import AsyncGenerator
from typing import Annotated, Any, TypedDict

import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage
from langgraph.checkpoint.conformance import checkpointer_test, validate
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from sqlalchemy import Engine, func, select
from sqlalchemy.ext.asyncio import AsyncEngine

from chatarchive import AsyncChatArchive, ChatArchive, ChatFilter
from chatarchive._schema import tables
from chatarchive.integrations.langgraph import ChatArchiveSaver


@pytest.mark.parametrize("kind", ["ChatArchive", "AsyncChatArchive"])
def test_the_saver_passes_langgraphs_conformance_suite(
    kind: str, archive: ChatArchive, async_engine: AsyncEngine
) -> None:
    """Every capability: put, put_writes, get_tuple, list, delete_thread,
    delete_for_runs, copy_thread, prune (the async methods, as the suite
    calls them)."""
    chosen: ChatArchive | AsyncChatArchive = (
        archive if kind == "ChatArchive" else AsyncChatArchive(engine=async_engine)
    )

    @checkpointer_test(name=f"ChatArchiveSaver on {kind}")
    async def saver() -> AsyncGenerator[ChatArchiveSaver, None]:
        yield ChatArchiveSaver(chosen)

    report = asyncio.run(validate(saver))
    failures = {name: result.failures for name, result in report.results.items() if not result.passed}
    assert failures == {}
    assert report.passed_all()
    assert all(result.detected for result in report.results.values())


class Notes(TypedDict):
    messages: Annotated[list[Any], add_messages]
    steps: Annotated[list[str], operator.add]


def _graph(saver: ChatArchiveSaver) -> Any:
    def answer(state: Notes) -> dict[str, Any]:
        question = state["messages"][-1].content
        return {"messages": [AIMessage(f"About {question!r}: anneal hotter.")], "steps": ["answer"]}

    builder = StateGraph(Notes)
    builder.add_node("answer", answer)
    builder.add_edge(START, "answer")
    return builder.compile(checkpointer=saver)


def test_a_threads_messages_are_the_chats_rows_and_its_other_channels_come_back(
    archive: ChatArchive, engine: Engine
) -> None:
    saver = ChatArchiveSaver(archive)
    graph = _graph(saver)
    config: Any = {"configurable": {"thread_id": "pcr-1"}}
    graph.invoke({"messages": [HumanMessage("Why two bands?", id="h1")], "steps": []}, config)
    graph.invoke({"messages": [HumanMessage("And smears?", id="h2")], "steps": []}, config)

    state = graph.get_state(config).values
    assert [m.content for m in state["messages"]] == [
        "Why two bands?",
        "About 'Why two bands?': anneal hotter.",
        "And smears?",
        "About 'And smears?': anneal hotter.",
    ]
    assert state["steps"] == ["answer", "answer"]
    stored = archive.get("pcr-1")
    assert [(m.role, m.content) for m in stored.messages] == [
        (m.type.replace("human", "user").replace("ai", "assistant"), m.content) for m in state["messages"]
    ]
    assert len(archive.get_tree("pcr-1").messages) == 4  # each message stored once, whatever the checkpoints
    hits = archive.search("smears")
    assert {hit.chat_id for hit in hits} == {"pcr-1"}
    with engine.connect() as connection:
        count = connection.execute(
            select(func.count())
            .select_from(tables.checkpoints)
            .where(tables.checkpoints.c.chat_id == "pcr-1")
        ).scalar()
    assert count == len(list(saver.list(config)))
    # Every checkpoint comes back with the messages it had.
    histories = [len(snapshot.values.get("messages", [])) for snapshot in graph.get_state_history(config)]
    assert histories == [4, 3, 2, 2, 1, 0]


def test_time_travel_and_edits_are_branches_of_the_chat(archive: ChatArchive) -> None:
    saver = ChatArchiveSaver(archive)
    graph = _graph(saver)
    config: Any = {"configurable": {"thread_id": "pcr-2"}}
    graph.invoke({"messages": [HumanMessage("Q1", id="q1")], "steps": []}, config)
    graph.invoke({"messages": [HumanMessage("Q2", id="q2")], "steps": []}, config)
    # Back to the state after the first answer, then another question from there.
    first_answer = next(
        snapshot
        for snapshot in graph.get_state_history(config)
        if len(snapshot.values.get("messages", [])) == 2
    )
    graph.invoke({"messages": [HumanMessage("Q2, again", id="q2b")], "steps": []}, first_answer.config)
    assert [m.content for m in graph.get_state(config).values["messages"]] == [
        "Q1", "About 'Q1': anneal hotter.", "Q2, again", "About 'Q2, again': anneal hotter.",
    ]  # fmt: skip
    tree = archive.get_tree("pcr-2")
    assert len(tree.messages) == 6
    assert [m.content for m in archive.get("pcr-2").messages][-1] == "About 'Q2, again': anneal hotter."
    # An edit that removes the last answer: the path ends before it, nothing is deleted.
    last = graph.get_state(config).values["messages"][-1]
    graph.update_state(config, {"messages": [RemoveMessage(id=last.id)]})
    assert [m.content for m in graph.get_state(config).values["messages"]] == [
        "Q1",
        "About 'Q1': anneal hotter.",
        "Q2, again",
    ]
    assert len(archive.get_tree("pcr-2").messages) == 6
    # The earlier checkpoints still give their messages back.
    old = [snapshot.values.get("messages", []) for snapshot in graph.get_state_history(config)]
    assert [m.content for m in old[-2]] == ["Q1"]
    assert any(
        [m.content for m in history]
        == ["Q1", "About 'Q1': anneal hotter.", "Q2", "About 'Q2': anneal hotter."]
        for history in old
    )


def test_the_async_graph_on_an_async_archive_and_deleting_a_thread(
    async_engine: AsyncEngine, archive: ChatArchive
) -> None:
    async def run() -> list[Any]:
        saver = ChatArchiveSaver(AsyncChatArchive(engine=async_engine))
        graph = _graph(saver)
        config: Any = {"configurable": {"thread_id": "pcr-async"}}
        await graph.ainvoke({"messages": [HumanMessage("Q", id="q")], "steps": []}, config)
        messages: list[Any] = (await graph.aget_state(config)).values["messages"]
        await saver.adelete_thread("pcr-async")
        assert (await saver.aget_tuple(config)) is None
        return messages

    assert [m.content for m in asyncio.run(run())] == ["Q", "About 'Q': anneal hotter."]
    assert archive.find("pcr-async") is None


def test_a_users_saver_sees_only_that_users_threads(archive: ChatArchive) -> None:
    alice = ChatArchiveSaver(archive.for_user("alice"))
    graph = _graph(alice)
    config: Any = {"configurable": {"thread_id": "alice-1"}}
    graph.invoke({"messages": [HumanMessage("Mine", id="m")], "steps": []}, config)
    assert archive.get("alice-1").user_id == "alice"
    bob = ChatArchiveSaver(archive.for_user("bob"))
    assert bob.get_tuple(config) is None
    assert list(bob.list(None)) == []
    assert len(list(alice.list(None))) == len(list(ChatArchiveSaver(archive).list(config)))
    assert archive.count_chats(ChatFilter(user_id="alice")) == 1


def test_the_modules_example_runs() -> None:
    import doctest

    import chatarchive.integrations.langgraph as module

    assert doctest.testmod(module).failed == 0


def test_a_thread_going_on_appends_without_reading_its_tree_unless_the_chat_changed(
    archive: ChatArchive, monkeypatch: pytest.MonkeyPatch
) -> None:
    from chatarchive._repository import checkpoints

    looked: list[int] = []
    matched_prefix = checkpoints._matched_prefix

    def counted(tree: Any, wanted: Any) -> Any:
        looked.append(len(wanted))
        return matched_prefix(tree, wanted)

    monkeypatch.setattr(checkpoints, "_matched_prefix", counted)
    graph = _graph(ChatArchiveSaver(archive))
    config: Any = {"configurable": {"thread_id": "going-on"}}
    graph.invoke({"messages": [HumanMessage("Q1", id="q1")], "steps": []}, config)
    looked.clear()
    graph.invoke({"messages": [HumanMessage("Q2", id="q2")], "steps": []}, config)
    assert looked == []  # each put went on from where the one before left the messages
    # Someone else writes the chat: the next put looks at the tree again, and gets it right.
    first = archive.get("going-on").messages[0]
    archive.add_feedback("going-on", {"score": 1, "message_uid": first.uid})
    archive.update("going-on", title="renamed")
    graph.invoke({"messages": [HumanMessage("Q3", id="q3")], "steps": []}, config)
    assert looked != []
    assert [m.content for m in archive.get("going-on").messages] == [
        "Q1", "About 'Q1': anneal hotter.", "Q2", "About 'Q2': anneal hotter.", "Q3", "About 'Q3': anneal hotter.",
    ]  # fmt: skip
    assert len(archive.get_tree("going-on").messages) == 6
    assert [len(s.values.get("messages", [])) for s in graph.get_state_history(config)][:3] == [6, 5, 4]
