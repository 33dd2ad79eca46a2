"""Compaction that keeps the original: a summary and the last turns become
the active path; every message written stays, once, off the path; the
chat as it was written is one call away."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import text

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    ChatNotFound,
    ConflictError,
    InvalidArgument,
    InvalidDocument,
)
from tests.support.strategies import exact

START = datetime(2026, 3, 1, 9, 0, tzinfo=UTC)


def turns(first: int, count: int) -> list[dict[str, Any]]:
    """``count`` turns numbered from ``first``: a question, a tool call and its
    result every third turn, and an answer with its token counts."""
    messages: list[dict[str, Any]] = []
    for number in range(first, first + count):
        at = START + timedelta(minutes=number)
        messages.append(
            {
                "role": "user",
                "content": f"question {number} about primers",
                "uid": f"q{number}",
                "created_at": at,
            }
        )
        if number % 3 == 0:
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "uid": f"c{number}",
                    "created_at": at + timedelta(seconds=1),
                    "tool_calls": [
                        {
                            "id": f"call{number}",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": f'{{"n": {number}}}'},
                        }
                    ],
                }
            )
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": f"call{number}",
                    "content": f"result {number}",
                    "uid": f"r{number}",
                    "created_at": at + timedelta(seconds=2),
                }
            )
        messages.append(
            {
                "role": "assistant",
                "content": f"answer {number}: anneal at {50 + number} degrees",
                "uid": f"a{number}",
                "created_at": at + timedelta(seconds=3),
                "model": "gpt-4o",
                "usage": {
                    "prompt_tokens": 100 + number,
                    "completion_tokens": 10 + number,
                    "total_tokens": 110 + 2 * number,
                },
            }
        )
    return messages


def summary(text_: str, uid: str) -> list[dict[str, Any]]:
    return [{"role": "system", "content": text_, "uid": uid}]


def dumped(messages: list[Any]) -> list[Any]:
    return [exact(message.model_dump(exclude={"summarizes"})) for message in messages]


def written(archive: ChatArchive, messages: list[dict[str, Any]]) -> list[Any]:
    """The messages as the archive holds them once written (parsed, whole)."""
    from chatarchive import ChatDocument

    return dumped(ChatDocument.parse({"chat_id": "x", "messages": messages}).messages)


def test_compaction_repeated_keeps_the_whole_history_exactly(archive: ChatArchive) -> None:
    archive.save({"chat_id": "long", "user_id": "ann", "title": "PCR", "messages": turns(0, 8)})
    assert archive.compact("long", summary("Turns 0-5: primers chosen.", "s1"), keep_last=2) == 2
    assert [m.uid for m in archive.get("long").messages] == ["s1", "q6", "c6", "r6", "a6", "q7", "a7"]
    archive.append("long", turns(8, 3))
    archive.compact("long", summary("Turns 0-9: anneal at 59.", "s2"), keep_last=1)
    archive.append("long", turns(11, 2))
    archive.compact("long", summary("Everything so far.", "s3"), keep_last=0)
    archive.append("long", turns(13, 1))

    path = archive.get("long")
    assert [m.uid for m in path.messages] == ["s3", "q13", "a13"]
    assert path.messages[0].summarizes == "a12"
    history = archive.history("long")
    assert dumped(history.messages) == written(archive, turns(0, 14))
    assert history.title == "PCR"
    assert history.user_id == "ann"
    # Every message written is stored once: the originals, and the three summaries.
    with archive.engine.connect() as connection:
        stored = connection.execute(text("SELECT count(*), count(DISTINCT uid) FROM messages")).one()
    assert tuple(stored) == (len(turns(0, 14)) + 3, len(turns(0, 14)) + 3)
    tree = archive.get_tree("long")
    assert {m.uid for m in tree.messages} == {m["uid"] for m in turns(0, 14)} | {"s1", "s2", "s3"}


def test_the_compacted_path_is_what_the_model_sees_and_the_original_stays_off_it(
    archive: ChatArchive,
) -> None:
    archive.save({"chat_id": "c", "messages": turns(0, 4)})
    before = archive.get("c")
    archive.compact(
        "c",
        [{"role": "user", "content": "Summary so far"}, {"role": "assistant", "content": "Noted."}],
        keep_last=1,
    )
    after = archive.get("c")
    assert [m.content for m in after.messages] == [
        "Summary so far",
        "Noted.",
        "question 3 about primers",
        None,
        "result 3",
        "answer 3: anneal at 53 degrees",
    ]
    assert dumped(after.messages[2:]) == dumped(before.messages[-4:])
    assert after.messages[1].summarizes == "a2"
    assert "summarizes" not in after.to_openai()[1]
    # The turns compacted: off the path, found by a search of every branch, counted by analytics.
    assert [hit.message_uid for hit in archive.search("question 1")][:1] == ["q1"]
    assert list(archive.search("question 1", branches="active")) == []
    assert sum(row.completion_tokens for row in archive.model_usage()) == sum(10 + n for n in range(4))
    assert archive.history("c").messages == before.messages


def test_a_regenerated_answer_compacted_stays_a_preference_pair(archive: ChatArchive) -> None:
    archive.save({"chat_id": "p", "messages": turns(0, 3)})
    archive.regenerate("p", "a1", [{"role": "assistant", "content": "a better answer 1", "uid": "a1b"}])
    archive.add_feedback("p", {"id": "down", "message_uid": "a1", "score": -1})
    archive.add_feedback("p", {"id": "up", "message_uid": "a1b", "score": 1})
    archive.append(
        "p",
        [
            {"role": "user", "content": "and then?", "uid": "q9"},
            {"role": "assistant", "content": "done", "uid": "a9"},
        ],
    )
    archive.compact("p", summary("About primers.", "s"), keep_last=1)
    tree = archive.get_tree("p")
    assert [m.uid for m in tree.siblings("a1b")] == ["a1", "a1b"]
    assert {item.id for item in tree.document.feedback} == {"down", "up"}
    assert [m.uid for m in archive.history("p").messages] == ["q0", "c0", "r0", "a0", "q1", "a1b", "q9", "a9"]


def test_what_compaction_refuses_changes_nothing(archive: ChatArchive) -> None:
    archive.save({"chat_id": "r", "messages": turns(0, 2)})
    with pytest.raises(InvalidArgument, match="keeps the whole active path"):
        archive.compact("r", summary("s", "s"), keep_last=2)
    with pytest.raises(InvalidArgument, match="keep_last"):
        archive.compact("r", summary("s", "s"), keep_last=-1)
    with pytest.raises(InvalidArgument, match="at least one"):
        archive.compact("r", [], keep_last=1)
    with pytest.raises(InvalidDocument, match="uid 'q0'"):
        archive.compact("r", summary("s", "q0"), keep_last=1)
    with pytest.raises(ConflictError):
        archive.compact("r", summary("s", "s"), keep_last=1, expected_version=7)
    with pytest.raises(ChatNotFound):
        archive.compact("nobody", summary("s", "s"))
    assert archive.get("r").version == 1
    assert archive.compact("r", summary("s", "s"), keep_last=1, expected_version=1) == 2


def test_a_users_archive_compacts_its_own_chats_alone(archive: ChatArchive) -> None:
    archive.save({"chat_id": "ann-1", "user_id": "ann", "messages": turns(0, 3)})
    archive.save({"chat_id": "bob-1", "user_id": "bob", "messages": turns(0, 3)})
    with pytest.raises(ChatNotFound):
        archive.for_user("ann").compact("bob-1", summary("s", "s"))
    with pytest.raises(ChatNotFound):
        archive.for_user("ann").history("bob-1")
    archive.for_user("ann").compact("ann-1", summary("s", "s"))
    assert archive.get("ann-1").user_id == "ann"


def test_an_async_archive_compacts_and_reads_the_history(archive: ChatArchive) -> None:
    archive.save({"chat_id": "a", "messages": turns(0, 3)})
    url = archive.engine.url.render_as_string(hide_password=False)

    async def through_asyncio() -> tuple[list[str], list[str]]:
        async with AsyncChatArchive(url) as app:
            await app.compact("a", summary("s", "s"), keep_last=1)
            return [m.uid for m in (await app.get("a")).messages], [
                m.uid for m in (await app.history("a")).messages
            ]

    path, history = asyncio.run(through_asyncio())
    assert path == ["s", "q2", "a2"]
    assert history == [m["uid"] for m in turns(0, 3)]
