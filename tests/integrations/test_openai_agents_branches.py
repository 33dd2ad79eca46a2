"""The API of the Agents SDK's ``AdvancedSQLiteSession`` on the archive's rows:
named branches, turns, search of turns by content, tool usage per turn.

Each case asks of ``ChatArchiveSession`` what a public-API case of the SDK's
own tests (tests/extensions/memory/test_advanced_sqlite_session.py) asks of
``AdvancedSQLiteSession``: the same calls, the same results, on SQLite and
PostgreSQL. What the archive adds: a branch is a path of the chat's tree, so
the rows say which messages each branch holds.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
from agents.items import TResponseInputItem
from agents.usage import Usage

from chatarchive import ChatArchive, InvalidArgument
from chatarchive.integrations.openai_agents import BRANCHES_KEY, ChatArchiveSession

T = TypeVar("T")


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def turn(question: str, answer: str) -> list[TResponseInputItem]:
    return [{"role": "user", "content": question}, {"role": "assistant", "content": answer}]


def three_turns() -> list[TResponseInputItem]:
    return (
        turn("First question", "First answer")
        + turn("Second question", "Second answer")
        + turn("Third question", "Third answer")
    )


def contents(items: list[TResponseInputItem]) -> list[Any]:
    return [item.get("content") for item in items]


class _Result:
    """What ``store_run_usage`` reads of a run: its context's usage."""

    def __init__(self, usage: Usage) -> None:
        self.context_wrapper = type("Context", (), {"usage": usage})()


def record_usage(session: ChatArchiveSession, requests: int, tokens: int) -> None:
    usage = Usage(requests=requests, input_tokens=tokens // 2, output_tokens=tokens // 2, total_tokens=tokens)
    run(session.store_run_usage(_Result(usage)))  # type: ignore[arg-type]


def test_branching_creates_switches_lists_and_deletes_branches(archive: ChatArchive) -> None:
    session = ChatArchiveSession("branching", archive)
    run(session.add_items(three_turns()))
    assert run(session.create_branch_from_turn(2, "test_branch")) == "test_branch"
    assert contents(run(session.get_items())) == ["First question", "First answer"]
    assert archive.get("branching").messages[-1].content == "First answer"  # the chat shows the branch

    run(session.switch_to_branch("main"))
    assert run(session.get_items()) == three_turns()
    branches = run(session.list_branches())
    assert [(b["branch_id"], b["message_count"], b["user_turns"], b["is_current"]) for b in branches] == [
        ("main", 6, 3, True),
        ("test_branch", 2, 1, False),
    ]
    assert all(b["created_at"] for b in branches)

    run(session.delete_branch("test_branch"))
    assert [b["branch_id"] for b in run(session.list_branches())] == ["main"]
    assert run(session.get_items()) == three_turns()


def test_a_branch_goes_on_from_its_turn_and_leaves_the_other_turns_where_they_were(
    archive: ChatArchive,
) -> None:
    session = ChatArchiveSession("going-on", archive)
    run(session.add_items(three_turns()))
    run(session.create_branch_from_turn(2, "retry"))
    run(session.add_items(turn("Second, asked again", "Another answer")))
    assert contents(run(session.get_items())) == [
        "First question", "First answer", "Second, asked again", "Another answer",
    ]  # fmt: skip
    assert run(session.get_items(branch_id="main")) == three_turns()
    assert len(archive.get_tree("going-on").messages) == 8  # one tree: the first turn is stored once

    # A new session object on the chat finds its current branch and goes on on it.
    again = ChatArchiveSession("going-on", archive)
    run(again.add_items(turn("Third, on the branch", "Fine")))
    assert len(run(again.get_items())) == 6
    assert run(again.get_items(branch_id="main")) == three_turns()
    assert run(again.get_items(2, branch_id="retry")) == turn("Third, on the branch", "Fine")
    assert BRANCHES_KEY in (archive.get("going-on").metadata or {})


def test_branch_names_are_checked_and_never_given_twice(archive: ChatArchive) -> None:
    session = ChatArchiveSession("names", archive)
    run(session.add_items(three_turns()))
    with pytest.raises(InvalidArgument, match="Branch name cannot be empty"):
        run(session.create_branch_from_turn(2, "  "))
    run(session.create_branch_from_turn(3, "used_branch"))
    with pytest.raises(InvalidArgument, match="already been used"):
        run(session.create_branch_from_turn(2, "used_branch"))
    with pytest.raises(InvalidArgument, match="already been used"):
        run(session.create_branch_from_turn(2, "main"))
    run(session.switch_to_branch("main"))
    run(session.delete_branch("used_branch"))
    with pytest.raises(InvalidArgument, match="already been used"):
        run(session.create_branch_from_turn(2, "used_branch"))

    first = run(session.create_branch_from_turn(2))
    run(session.switch_to_branch("main"))
    second = run(session.create_branch_from_turn(2))
    assert first.startswith("branch_from_turn_2_")
    assert second != first  # made up within the same second, still two branches


def test_branch_errors_are_the_sdks(archive: ChatArchive) -> None:
    session = ChatArchiveSession("errors", archive)
    with pytest.raises(ValueError, match="Turn 5 does not contain a user message"):
        run(session.create_branch_from_turn(5, "error_branch"))
    with pytest.raises(ValueError, match="Branch 'nonexistent' does not exist"):
        run(session.switch_to_branch("nonexistent"))
    with pytest.raises(ValueError, match="Branch 'nonexistent' does not exist"):
        run(session.delete_branch("nonexistent"))
    with pytest.raises(ValueError, match="Cannot delete the 'main' branch"):
        run(session.delete_branch("main"))
    for blank in ("", "   "):
        with pytest.raises(ValueError, match="Branch ID cannot be empty"):
            run(session.delete_branch(blank))
    run(session.add_items(turn("q", "a")))
    with pytest.raises(ValueError, match="Branch 'nonexistent' does not exist"):
        run(session.switch_to_branch("nonexistent"))
    with pytest.raises(ValueError, match="Branch 'nonexistent' does not exist"):
        run(session.get_items(branch_id="nonexistent"))


def test_the_current_branch_is_deleted_only_with_force(archive: ChatArchive) -> None:
    session = ChatArchiveSession("force", archive)
    run(session.add_items([{"role": "user", "content": "Main question"}]))
    run(session.add_items([{"role": "user", "content": "Second question"}]))
    run(session.create_branch_from_turn(2, "temp_branch"))
    run(session.add_items([{"role": "user", "content": "Branch question"}]))
    with pytest.raises(ValueError, match="Cannot delete current branch"):
        run(session.delete_branch("temp_branch"))
    run(session.delete_branch("temp_branch", force=True))
    assert [(b["branch_id"], b["is_current"]) for b in run(session.list_branches())] == [("main", True)]
    assert contents(run(session.get_items())) == ["Main question", "Second question"]
    assert [m.content for m in archive.get_tree("force").messages] == ["Main question", "Second question"]


def test_deleting_a_branch_deletes_the_messages_only_it_held(archive: ChatArchive) -> None:
    session = ChatArchiveSession("cleanup", archive)
    main = turn("First question", "First answer") + turn("Second question", "Second answer")
    run(session.add_items(main))
    run(session.create_branch_from_turn(2, "cleanup_branch"))
    run(session.add_items(turn("Branch-only question", "Branch-only answer")))
    run(session.delete_branch("cleanup_branch", force=True))
    assert contents(run(session.get_items())) == contents(main)
    assert [m.content for m in archive.get_tree("cleanup").messages] == contents(main)


def test_deleting_a_branch_keeps_the_messages_another_branch_holds(archive: ChatArchive) -> None:
    session = ChatArchiveSession("shared", archive)
    main = turn("Main first question", "Main first answer") + turn(
        "Main second question", "Main second answer"
    )
    shared = turn("Branch A shared question", "Branch A shared answer")
    only_a = turn("Branch A only question", "Branch A only answer")
    run(session.add_items(main))
    run(session.create_branch_from_turn(2, "branch_a"))
    run(session.add_items(shared + only_a))
    run(session.create_branch_from_turn(3, "branch_b"))
    run(session.delete_branch("branch_a"))

    stored = [m.content for m in archive.get_tree("shared").messages]
    assert set(contents(shared)) <= set(stored)
    assert not set(contents(only_a)) & set(stored)
    assert run(session.get_items(branch_id="branch_b")) == main[:2] + shared
    assert run(session.get_items(branch_id="main")) == main
    # branch_b goes on below the messages branch_a started; main's path is unchanged.
    run(session.add_items(turn("B question", "B answer")))
    assert run(session.get_items()) == main[:2] + shared + turn("B question", "B answer")
    run(session.switch_to_branch("main"))
    run(session.add_items(turn("Main third", "Main third answer")))
    assert run(session.get_items()) == main + turn("Main third", "Main third answer")
    assert run(session.get_items(branch_id="branch_b")) == main[:2] + shared + turn("B question", "B answer")


def test_pop_item_takes_the_current_branchs_own_item_and_keeps_shared_ones(archive: ChatArchive) -> None:
    session = ChatArchiveSession("pops", archive)
    main = turn("Main first question", "Main first answer") + turn(
        "Main second question", "Main second answer"
    )
    run(session.add_items(main))
    run(session.create_branch_from_turn(2, "branch_a"))
    run(session.add_items([{"role": "user", "content": "Branch-only question"}]))
    assert run(session.pop_item()) == {"role": "user", "content": "Branch-only question"}
    assert run(session.get_items(branch_id="main")) == main
    # Popping a message main holds too: the branch ends before it, main keeps it.
    assert run(session.pop_item()) == main[1]
    assert run(session.get_items()) == main[:1]
    assert run(session.get_items(branch_id="main")) == main
    assert len(archive.get_tree("pops").messages) == 4
    run(session.add_items([{"role": "assistant", "content": "Another first answer"}]))
    assert contents(run(session.get_items())) == ["Main first question", "Another first answer"]
    assert run(session.get_items(branch_id="main")) == main


def test_conversation_turns_and_their_search(archive: ChatArchive) -> None:
    session = ChatArchiveSession("turns", archive)
    run(session.add_items(turn("Tell me about cats", "Cats are great pets")))
    run(session.add_items(turn("What about dogs?", "Dogs are also great pets")))
    run(session.add_items(turn("Tell me about CATS again", "Cats are wonderful companions")))
    turns = run(session.get_conversation_turns())
    assert [(t["turn"], t["content"], t["full_content"], t["can_branch"]) for t in turns] == [
        (1, "Tell me about cats", "Tell me about cats", True),
        (2, "What about dogs?", "What about dogs?", True),
        (3, "Tell me about CATS again", "Tell me about CATS again", True),
    ]
    assert all(t["timestamp"] for t in turns)
    assert [t["turn"] for t in run(session.find_turns_by_content("cats"))] == [1, 3]
    assert [t["turn"] for t in run(session.find_turns_by_content("dogs"))] == [2]
    assert run(session.find_turns_by_content("elephants")) == []
    assert run(session.find_turns_by_content("%")) == []  # no pattern: the text itself


def test_turns_with_list_content_are_previewed_as_text(archive: ChatArchive) -> None:
    session = ChatArchiveSession("lists", archive)
    run(session.add_items([{"role": "user", "content": [{"type": "input_text", "text": "hello world"}]}]))
    long: list[Any] = [{"type": "input_text", "text": str(number)} for number in range(101)]
    run(session.add_items([{"role": "user", "content": long}]))
    turns = run(session.get_conversation_turns())
    assert [isinstance(t["content"], str) and isinstance(t["full_content"], list) for t in turns] == [
        True,
        True,
    ]
    assert turns[1]["content"].endswith("...")
    assert turns[1]["full_content"] == long
    (match,) = run(session.find_turns_by_content("hello"))
    assert (match["turn"], isinstance(match["content"], str)) == (1, True)


def test_a_branch_from_the_first_turn_holding_a_text(archive: ChatArchive) -> None:
    session = ChatArchiveSession("from-content", archive)
    run(session.add_items(turn("First question about math", "Math answer")))
    run(session.add_items(turn("Second question about science", "Science answer")))
    assert run(session.create_branch_from_content("science", "science_branch")) == "science_branch"
    assert contents(run(session.get_items())) == ["First question about math", "Math answer"]
    run(session.switch_to_branch("main"))
    assert run(session.create_branch_from_content("math", "math_branch")) == "math_branch"
    assert run(session.get_items()) == []
    with pytest.raises(ValueError, match="No user turns found containing 'nonexistent'"):
        run(session.create_branch_from_content("nonexistent", "error_branch"))
    # A branch from the first turn starts a new root of the chat.
    run(session.add_items(turn("Math, again", "Again")))
    assert run(session.get_items()) == turn("Math, again", "Again")
    assert len(run(session.get_items(branch_id="main"))) == 4


def test_each_branch_has_its_turns_usage_and_the_session_all_of_it(archive: ChatArchive) -> None:
    session = ChatArchiveSession("usage", archive)
    run(session.add_items(turn("Main branch question", "Main branch answer")))
    record_usage(session, 1, 80)
    run(session.create_branch_from_turn(1, "usage_branch"))
    run(session.add_items(turn("Branch question", "Branch answer")))
    record_usage(session, 2, 160)

    main_usage = run(session.get_session_usage(branch_id="main"))
    assert main_usage is not None
    assert (main_usage["requests"], main_usage["total_tokens"], main_usage["total_turns"]) == (1, 80, 1)
    branch_usage = run(session.get_session_usage(branch_id="usage_branch"))
    assert branch_usage is not None
    assert (branch_usage["requests"], branch_usage["total_tokens"], branch_usage["total_turns"]) == (
        2,
        160,
        1,
    )
    total = run(session.get_session_usage())
    assert total is not None
    assert (total["requests"], total["total_tokens"], total["total_turns"]) == (3, 240, 2)
    turns = run(session.get_turn_usage(branch_id="usage_branch"))
    assert isinstance(turns, list)
    assert [(t["user_turn_number"], t["requests"]) for t in turns] == [(1, 2)]
    main_turn = run(session.get_turn_usage(1, branch_id="main"))
    assert isinstance(main_turn, dict)
    assert main_turn["requests"] == 1
    assert len(run(session.get_conversation_turns(branch_id="main"))) == 1


def test_items_by_turn_with_their_types_and_tools(archive: ChatArchive) -> None:
    session = ChatArchiveSession("structure", archive)
    items: list[Any] = [
        {"type": "reasoning", "summary": [{"text": "Before any question", "type": "summary_text"}]},
        {"role": "user", "content": "What's 2+2?"},
        {
            "type": "function_call",
            "name": "calculator",
            "arguments": '{"expression": "2+2"}',
            "call_id": "c1",
        },
        {"type": "function_call_output", "output": "4", "call_id": "c1"},
        {"role": "assistant", "content": "The answer is 4"},
        {"type": "reasoning", "summary": [{"text": "Simple math", "type": "summary_text"}]},
    ]
    run(session.add_items(items))
    assert run(session.get_conversation_by_turns()) == {
        0: [{"type": "reasoning", "tool_name": None}],
        1: [
            {"type": "user", "tool_name": None},
            {"type": "function_call", "tool_name": "calculator"},
            {"type": "function_call_output", "tool_name": None},
            {"type": "assistant", "tool_name": None},
            {"type": "reasoning", "tool_name": None},
        ],
    }


def test_tool_usage_per_turn_names_tools_as_the_sdk_does(archive: ChatArchive) -> None:
    session = ChatArchiveSession("tools", archive)
    first: list[Any] = [
        {"role": "user", "content": "Search for cats"},
        {"type": "function_call", "name": "web_search", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "output": "Found cat information", "call_id": "c1"},
        {"type": "function_call", "name": "calculator", "arguments": "{}", "call_id": "c2"},
        {"type": "function_call_output", "output": "2", "call_id": "c2"},
        {"type": "function_call", "name": "web_search", "arguments": "{}", "call_id": "c3"},
        {"type": "function_call_output", "output": "More", "call_id": "c3"},
        {"role": "assistant", "content": "Cats, and 1+1=2"},
    ]
    second: list[Any] = [
        {"role": "user", "content": "Look it up"},
        {"type": "function_call", "name": "lookup", "namespace": "crm", "arguments": "{}", "call_id": "c4"},
        {"type": "function_call", "name": "same", "namespace": "same", "arguments": "{}", "call_id": "c5"},
        {"id": "ws_1", "type": "web_search_call", "status": "completed", "action": {"type": "search", "query": "q"}},
        {
            "id": "mcp_1", "type": "mcp_call", "server_label": "docs", "name": "fetch", "arguments": "{}",
        },
    ]  # fmt: skip
    run(session.add_items(first + second))
    assert run(session.get_tool_usage()) == [
        ("web_search", 2, 1),
        ("calculator", 1, 1),
        ("crm.lookup", 1, 2),
        ("same", 1, 2),
        ("web_search_call", 1, 2),
        ("docs.fetch", 1, 2),
    ]
    assert run(session.get_items()) == first + second  # the items themselves are untouched


def test_clearing_the_session_leaves_main_alone(archive: ChatArchive) -> None:
    session = ChatArchiveSession("clear", archive)
    run(session.add_items(turn("u1", "a1") + turn("u2", "a2")))
    run(session.create_branch_from_turn(2, "branch_a"))
    run(session.clear_session())
    assert run(session.get_items()) == []
    assert run(session.list_branches()) == []
    run(session.add_items(turn("again", "yes")))
    assert [(b["branch_id"], b["is_current"]) for b in run(session.list_branches())] == [("main", True)]
    assert archive.get("clear").metadata is None  # a chat without branches keeps no record


def test_the_latest_items_are_read_alone_and_equal_the_tail_of_the_history(archive: ChatArchive) -> None:
    """``get_items(limit)`` reads the last messages' rows only (parts, tool
    calls and feedback of the others left out), on a chat with branches too."""
    session = ChatArchiveSession("tail", archive)
    items: list[Any] = [
        {"role": "user", "content": [{"type": "input_text", "text": "Tm?"}]},
        {"type": "function_call", "name": "melting_point", "arguments": "{}", "call_id": "c1"},
        {"type": "function_call_output", "output": "60 C", "call_id": "c1"},
        {"role": "assistant", "content": "60 C."},
    ]
    run(session.add_items(items + turn("And GC?", "55%")))
    whole = run(session.get_items())
    for limit in range(1, len(whole) + 3):
        assert run(session.get_items(limit)) == whole[-limit:]
    run(session.create_branch_from_turn(2, "other"))
    run(session.add_items(turn("And AT?", "45%")))
    whole = run(session.get_items())
    assert [run(session.get_items(limit)) for limit in (1, 3, 5, 9)] == [
        whole[-1:],
        whole[-3:],
        whole[-5:],
        whole,
    ]
    assert run(ChatArchiveSession("none", archive).get_items(3)) == []


class _CompactingResponses:
    """What ``OpenAIResponsesCompactionSession`` asks of the OpenAI API
    (``responses.compact``), answered here: the network is not the archive.
    The compacted window is a compaction item and the last user message, as
    the API gives it."""

    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []

    async def compact(self, **request: Any) -> Any:
        self.inputs.append(list(request["input"]))
        last_user = [item for item in request["input"] if item.get("role") == "user"][-1]
        output = [
            {"type": "compaction", "id": f"cmp_{len(self.inputs)}", "encrypted_content": "opaque-summary"},
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": last_user["content"]}],
            },
        ]
        return type("Compacted", (), {"output": output, "usage": None})()


def test_the_sdks_compaction_keeps_the_items_it_replaces(archive: ChatArchive) -> None:
    """``OpenAIResponsesCompactionSession`` replaces a session's items with the
    compacted ones; over the archive the replaced items stay in the chat, off
    its path, and the archive's history reads the session as it was written."""
    from agents.memory import OpenAIResponsesCompactionSession

    session = ChatArchiveSession("compacted", archive)
    responses = _CompactingResponses()
    client = type("Client", (), {"responses": responses})()
    compacting = OpenAIResponsesCompactionSession("compacted", session, client=client)
    run(compacting.add_items(three_turns()))
    run(compacting.run_compaction({"force": True, "compaction_mode": "input"}))
    assert len(responses.inputs) == 1
    items = run(session.get_items())
    assert [item.get("type") for item in items] == ["compaction", "message"]
    run(compacting.add_items(turn("Fourth question", "Fourth answer")))
    assert contents(run(session.get_items()))[-2:] == ["Fourth question", "Fourth answer"]
    history = archive.history("compacted")
    assert [message.content for message in history.messages] == [
        *contents(three_turns()),
        "Fourth question",
        "Fourth answer",
    ]
    assert len(archive.get_tree("compacted").messages) == 6 + 2 + 2


def test_the_sdks_compaction_of_a_branch_goes_on_on_that_branch(archive: ChatArchive) -> None:
    from agents.memory import OpenAIResponsesCompactionSession

    session = ChatArchiveSession("branched", archive)
    run(session.add_items(three_turns()))
    name = run(session.create_branch_from_turn(2, "retry"))
    run(session.add_items(turn("Other second question", "Other second answer")))
    client = type("Client", (), {"responses": _CompactingResponses()})()
    compacting = OpenAIResponsesCompactionSession("branched", session, client=client)
    run(compacting.run_compaction({"force": True, "compaction_mode": "input"}))
    run(session.add_items(turn("Next", "Next answer")))
    assert [item.get("type") for item in run(session.get_items())][:1] == ["compaction"]
    assert contents(run(session.get_items()))[-2:] == ["Next", "Next answer"]
    run(session.switch_to_branch("main"))
    assert contents(run(session.get_items())) == contents(three_turns())
    run(session.switch_to_branch(name))
    assert contents(run(session.get_items()))[-2:] == ["Next", "Next answer"]
