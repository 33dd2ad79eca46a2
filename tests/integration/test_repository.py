"""ChatRepository against real databases: round trips, writes, reads, errors."""

from __future__ import annotations

import base64
import enum
import json
from collections import OrderedDict
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from sqlalchemy import text
from sqlalchemy.orm import Session

from chatarchive import (
    ChatArchiveError,
    ChatDocument,
    ChatFilter,
    ChatNotFound,
    ChatRepository,
    ConflictError,
    InvalidArgument,
    InvalidDocument,
    Message,
)
from chatarchive._types import jsonb_keeps, postgres_json_text, unescape_value
from tests.support.chats import HOSTILE, SIGNED, UNSORTED, counts, snapshot, tool_chat
from tests.support.databases import libpq, require_postgresql
from tests.support.samples import OPENAI_VARIANTS
from tests.support.statements import recorded_statements
from tests.support.strategies import canonical_documents, exact, json_values, message_lists
from tests.support.strategies import text as any_text

T0 = datetime(2026, 1, 1, tzinfo=UTC)


# -- round trips -----------------------------------------------------------------


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=canonical_documents())
def test_canonical_documents_round_trip(session: Session, make_repo: Any, data: dict[str, Any]) -> None:
    repo = make_repo()
    doc = ChatDocument.parse(data)
    savepoint = session.begin_nested()
    try:
        repo.save(doc)
        back = repo.get(doc.chat_id)
        assert exact(back.model_dump()) == exact(doc.model_dump())
    finally:
        savepoint.rollback()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(messages=message_lists)
def test_openai_message_lists_round_trip(
    session: Session, make_repo: Any, messages: list[dict[str, Any]]
) -> None:
    repo = make_repo()
    expected = json.loads(json.dumps(messages))
    doc = ChatDocument.from_openai(messages, chat_id="prop")
    savepoint = session.begin_nested()
    try:
        repo.save(doc)
        back = json.loads(json.dumps(repo.get("prop").to_openai()))
        assert back == expected
        # Each message's own keys in the model's order, and every nested object's as given.
        assert exact(back) == exact(json.loads(json.dumps(doc.to_openai())))
    finally:
        savepoint.rollback()


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=canonical_documents(), cut=st.integers(min_value=0, max_value=12))
def test_a_truncated_chat_is_the_document_cut_short(
    session: Session, make_repo: Any, data: dict[str, Any], cut: int
) -> None:
    repo = make_repo()
    doc = ChatDocument.parse(data)
    keep = min(cut, len(doc.messages))
    removed = {message.uid for message in doc.messages[keep:]}
    savepoint = session.begin_nested()
    try:
        repo.save(doc)
        repo.truncate(doc.chat_id, keep)
        back = repo.get(doc.chat_id)
        assert back.messages == doc.messages[:keep]
        assert back.feedback == [item for item in doc.feedback if item.message_uid not in removed]
        assert repo.list_chats().items[0].message_count == keep
    finally:
        savepoint.rollback()


def test_openai_variants_round_trip_through_the_database(repo: ChatRepository) -> None:
    repo.save(ChatDocument.from_openai(OPENAI_VARIANTS, chat_id="variants"))
    assert repo.get("variants").to_openai() == OPENAI_VARIANTS


def test_malevich_messages_round_trip(repo: ChatRepository) -> None:
    """Seed 002: uid, timestamps, completed, the is_* flags, tool_call_id and extra fields."""
    messages = [
        {
            "uid": "m-1",
            "created_at": "2026-02-01T10:00:00+00:00",
            "updated_at": "2026-02-01T10:00:01+00:00",
            "role": "user",
            "content": [{"type": "text", "text": "Plan the assay."}],
            "completed": True,
            "is_intent": True,
            "is_tool_extra_message": False,
            "is_helper_message": False,
            "is_reasoning": False,
            "tool_call_id": None,
            "channel": "web",
        },
        {
            "uid": "m-2",
            "created_at": "2026-02-01T10:00:02+00:00",
            "role": "assistant",
            "content": [{"type": "text", "text": "Thinking..."}],
            "completed": False,
            "is_reasoning": True,
            "tool_call_id": "call-9",
            "trace": {"spans": [1, 2]},
        },
    ]
    doc = ChatDocument.parse({"chat_id": "malevich", "messages": messages})
    repo.save(doc)
    back = repo.get("malevich").model_dump(mode="json")["messages"]
    for original, stored in zip(messages, back, strict=True):
        assert {k: v for k, v in stored.items() if k not in ("created_at", "updated_at")} == {
            k: v for k, v in original.items() if k not in ("created_at", "updated_at")
        }
        assert datetime.fromisoformat(stored["created_at"]) == datetime.fromisoformat(original["created_at"])  # type: ignore[arg-type]


@pytest.mark.parametrize("value", HOSTILE, ids=range(len(HOSTILE)))
def test_hostile_strings_survive_everywhere(repo: ChatRepository, value: str) -> None:
    doc = ChatDocument.from_openai(
        [
            {"role": "user", "name": value, "content": value, value: value},
            {
                "role": value or "r",
                "content": [{"type": "text", "text": value}, {"type": value or "t", "x": value}],
            },
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": value, "type": "function", "function": {"name": value, "arguments": value}}
                ],
            },
            {"role": "tool", "tool_call_id": value, "content": value},
        ],
        chat_id=(value or "c")[:255],
        title=value,
        metadata={value: [value, {value: value}]},
        tags=[value[:255]] if value else [],
        feedback=[{"comment": value, "label": value}],
    )
    repo.save(doc)
    back = repo.get(doc.chat_id)
    assert back.model_dump(exclude={"created_at", "updated_at"}) == doc.model_dump(
        exclude={"created_at", "updated_at"}
    ) | {
        "messages": back.model_dump()["messages"],
        "feedback": back.model_dump()["feedback"],
    }
    assert back.to_openai() == doc.to_openai()
    assert back.feedback[0].comment == value


def test_big_and_precise_numbers_survive(repo: ChatRepository) -> None:
    values = [1e300, -2.5e-300, 1e16, 0.1, 2**70, -(2**63), 1.0, 0]
    doc = ChatDocument.from_openai(
        [{"role": "user", "content": "x", "numbers": values}], chat_id="n", metadata={"n": values}
    )
    repo.save(doc)
    back = repo.get("n")
    assert back.to_openai()[0]["numbers"] == values
    assert [type(v) for v in back.to_openai()[0]["numbers"]] == [type(v) for v in values]
    assert back.metadata == {"n": values}


# Key orders PostgreSQL's jsonb would change (it sorts keys by length, then bytewise).
SCHEMA = {"type": "object", "properties": {"zz": {"type": "string"}, "a": {"type": "integer"}}}


@pytest.mark.parametrize(("value", "score"), [(UNSORTED, 1), (SIGNED, 4.0), (SIGNED, -0.0)])
def test_json_values_come_back_as_given_through_every_write(
    repo: ChatRepository, value: dict[str, Any], score: float
) -> None:
    repo.save(
        ChatDocument.from_openai(
            [
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "hi", "meta": value}],
                    "x_extra": value,
                }
            ],
            chat_id="order",
            metadata=value,
            model_settings={"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}},
            x_chat=value,
        )
    )
    repo.update("order", workflow={"tools": [{"type": "function", "function": {"parameters": SCHEMA}}]})
    repo.update("order", title="kept", metadata={"b": 1, "a": 2})
    repo.append(
        "order",
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {
                        "id": "c",
                        "type": "function",
                        "function": {"name": "f", "arguments": "{}"},
                        "x": value,
                    }
                ],
                "audio": value,
            }
        ],
    )
    repo.add_feedback("order", {"score": score, "details": value})
    begun = repo.begin_message("order", x_stream=value)
    repo.append_chunk("order", begun.uid, "done")
    repo.complete_message("order", begun.uid, finish_reason="stop", x_done=value)
    back = repo.get("order")
    assert exact(back.metadata) == exact({"b": 1, "a": 2})
    assert exact(back.model_settings) == exact(
        {"response_format": {"type": "json_schema", "json_schema": {"schema": SCHEMA}}}
    )
    assert exact(back.workflow) == exact(
        {"tools": [{"type": "function", "function": {"parameters": SCHEMA}}]}
    )
    dumped = back.model_dump()
    assert exact(dumped["x_chat"]) == exact(value)
    first, second, third = back.to_openai()
    assert exact(first["x_extra"]) == exact(first["content"][0]["meta"]) == exact(value)
    assert exact(second["audio"]) == exact(second["tool_calls"][0]["x"]) == exact(value)
    assert exact(third["x_stream"]) == exact(third["x_done"]) == exact(value)
    assert third["content"] == "done"
    assert exact(back.feedback[0].model_dump()["details"]) == exact(value)
    assert exact(back.feedback[0].score) == exact(score)
    repo.update("order", metadata=None, model_settings=None, workflow=None)
    cleared = repo.get("order")
    assert (cleared.metadata, cleared.model_settings, cleared.workflow) == (None, None, None)
    assert exact(cleared.model_dump()["x_chat"]) == exact(value)
    repo.update("order", metadata={"m": value})
    assert exact(repo.get("order").metadata) == exact({"m": value})


@settings(max_examples=300, deadline=None)
@given(value=st.dictionaries(any_text, json_values, max_size=6))
@example(value=UNSORTED)
@example(value={"a": [{"b": -0.0}]})
def test_jsonb_keeps_says_what_jsonb_does(value: dict[str, Any]) -> None:
    # The rule ordered_json relies on, checked against PostgreSQL itself.
    with psycopg.connect(libpq(require_postgresql()), autocommit=True) as connection:
        (stored,) = connection.execute(
            "SELECT CAST(%s AS jsonb)::text", [postgres_json_text(value)]
        ).fetchone()  # type: ignore[misc]
    back = unescape_value(json.loads(stored))
    assert back == value
    assert jsonb_keeps(value) == (exact(back) == exact(value))


class _Colour(enum.StrEnum):
    RED = "red"


class _Level(enum.IntEnum):
    HIGH = 3


class _Ratio(float):
    pass


@pytest.mark.parametrize("many", [False, True], ids=["save", "save_many"])
def test_subclasses_of_json_types_are_stored_as_their_base_types(repo: ChatRepository, many: bool) -> None:
    # As json.dumps writes them: a StrEnum as its text, also as an object key.
    given = {
        "colour": _Colour.RED,
        "level": _Level.HIGH,
        "ratio": _Ratio(0.5),
        "ordered": OrderedDict(b=1, a=2),
        "by_colour": {_Colour.RED: [_Level.HIGH]},
    }
    expected = {
        "colour": "red",
        "level": 3,
        "ratio": 0.5,
        "ordered": {"b": 1, "a": 2},
        "by_colour": {"red": [3]},
    }
    doc = ChatDocument.from_openai(
        [{"role": "user", "content": _Colour.RED, "meta": given}], chat_id="enums", metadata=given
    )
    if many:
        repo.save_many([doc])
    else:
        repo.save(doc)
    back = repo.get("enums")
    assert back.to_openai() == [{"role": "user", "content": "red", "meta": expected}]
    assert back.metadata == expected
    meta = back.to_openai()[0]["meta"]
    assert json.dumps(meta) == json.dumps(expected)  # the key order, too
    assert [type(meta[key]) for key in ("colour", "level", "ratio")] == [str, int, float]
    assert type(next(iter(meta["by_colour"]))) is str


def test_timestamps_come_back_as_the_same_instants(repo: ChatRepository) -> None:
    moment = datetime(2026, 5, 1, 12, 30, tzinfo=UTC).astimezone(UTC) + timedelta(microseconds=7)
    doc = ChatDocument.parse(
        {
            "chat_id": "t",
            "created_at": "2026-05-01T14:30:00.000007+02:00",
            "messages": [{"role": "u", "created_at": moment}],
        }
    )
    repo.save(doc)
    back = repo.get("t")
    assert back.created_at == moment
    assert back.created_at is not None
    assert back.created_at.tzinfo is not None
    assert back.messages[0].created_at == moment


# -- writes ----------------------------------------------------------------------


def test_save_replaces_the_whole_chat(repo: ChatRepository, session: Session) -> None:
    assert repo.save(tool_chat(tags=["a", "b"])) == 1
    smaller = ChatDocument.from_openai([{"role": "user", "content": "again"}], chat_id="c1", tags=["c"])
    assert repo.save(smaller) == 2
    back = repo.get("c1")
    assert back.to_openai() == [{"role": "user", "content": "again"}]
    assert back.tags == ["c"]
    assert back.version == 2
    assert counts(session) == {
        "chats": 1,
        "chat_tags": 1,
        "messages": 1,
        "content_parts": 0,  # a string content is on its message's row
        "tool_calls": 0,
        "feedback": 0,
        "message_chunks": 0,
        "checkpoints": 0,
        "checkpoint_blobs": 0,
        "checkpoint_writes": 0,
        "embeddings": 0,
    }


def test_missing_timestamps_are_filled_when_saved(repo: ChatRepository) -> None:
    repo.save(tool_chat())
    back = repo.get("c1")
    assert back.created_at is not None
    assert back.updated_at is not None
    assert all(m.created_at is not None for m in back.messages)


def test_expected_version(repo: ChatRepository) -> None:
    with pytest.raises(ConflictError):
        repo.save(tool_chat(), expected_version=3)
    assert repo.save(tool_chat(), expected_version=0) == 1
    with pytest.raises(ConflictError, match="version 1, not 0"):
        repo.save(tool_chat(), expected_version=0)
    assert repo.save(tool_chat(title="x"), expected_version=1) == 2
    with pytest.raises(ConflictError):
        repo.append("c1", [{"role": "user", "content": "x"}], expected_version=1)
    assert repo.get("c1").title == "x"


def test_append_continues_positions_and_touches_only_new_rows(repo: ChatRepository, session: Session) -> None:
    repo.save(tool_chat())
    before = repo.get("c1")
    added = repo.append(
        "c1", [{"role": "user", "content": "more"}, {"role": "assistant", "content": "sure", "uid": "a-1"}]
    )
    assert [m.uid for m in added][1] == "a-1"
    assert all(m.created_at is not None for m in added)
    after = repo.get("c1")
    assert after.version == before.version + 1  # type: ignore[operator]
    assert after.messages[:5] == before.messages
    assert [m.content for m in after.messages[5:]] == ["more", "sure"]
    positions = session.execute(
        text("SELECT position FROM messages WHERE chat_id = 'c1' ORDER BY position")
    ).scalars()
    assert list(positions) == list(range(7))
    assert session.execute(text("SELECT message_count FROM chats")).scalar_one() == 7


def test_append_refuses_duplicate_uids_and_changes_nothing(repo: ChatRepository, session: Session) -> None:
    repo.save(tool_chat())
    uid = repo.get("c1").messages[0].uid
    before = snapshot(session)
    with pytest.raises(InvalidDocument) as caught:
        repo.append("c1", [{"role": "user", "content": "ok"}, {"role": "user", "uid": uid}])
    assert caught.value.message_index == 1
    assert caught.value.field == "uid"
    with pytest.raises(InvalidDocument, match="duplicate"):
        repo.append("c1", [{"role": "user", "uid": "z"}, {"role": "user", "uid": "z"}])
    with pytest.raises(InvalidDocument) as bad:
        repo.append("c1", [{"role": "user"}, {"content": "no role"}])
    assert bad.value.message_index == 1
    assert bad.value.field == "role"
    assert bad.value.chat_id == "c1"
    # Message objects: one read back, or one built once and appended twice (its uid generated then).
    stored = repo.get("c1").messages[2]
    with pytest.raises(InvalidDocument, match="already in the chat") as again:
        repo.append("c1", (m for m in [Message(role="user"), stored]))
    assert again.value.message_index == 1
    assert snapshot(session) == before
    built = Message(role="user", content="once")
    repo.append("c1", [built])
    with pytest.raises(InvalidDocument, match="already in the chat"):
        repo.append("c1", [built])


@pytest.mark.parametrize("returning", [True, False], ids=["update-returning", "select-for-update"])
def test_writes_with_or_without_update_returning(
    make_repo: Any, session: Session, monkeypatch: pytest.MonkeyPatch, returning: bool
) -> None:
    """Where the database has no UPDATE ... RETURNING (SQLite before 3.35), a
    write locks the chat row by a SELECT first: the same outcome either way."""
    monkeypatch.setattr(session.get_bind().dialect, "update_returning", returning)
    repo = make_repo()
    repo.save(tool_chat())
    (added,) = repo.append("c1", [{"role": "user", "content": "more"}], expected_version=1)
    back = repo.get("c1")
    assert (back.version, len(back.messages), back.messages[-1]) == (2, 6, added)
    vote = repo.add_feedback("c1", {"message_uid": added.uid, "score": 1})
    assert repo.delete_feedback("c1", vote.id) == 4
    answer = repo.begin_message("c1")
    repo.append_chunk("c1", answer.uid, "streamed")
    repo.complete_message("c1", answer.uid, finish_reason="stop")
    back = repo.get("c1")
    assert (back.version, back.feedback, back.messages[-1].content) == (6, [], "streamed")
    assert repo.list_chats().items[0].message_count == 7
    before = snapshot(session)
    with pytest.raises(ConflictError, match="at version 6, not 1"):
        repo.append("c1", [{"role": "user"}], expected_version=1)
    with pytest.raises(InvalidDocument, match="already in the chat"):
        repo.append("c1", [{"role": "user"}, {"role": "user", "uid": added.uid}])
    with pytest.raises(InvalidDocument, match="unknown message"):
        repo.add_feedback("c1", {"message_uid": "nope", "score": 1})
    with pytest.raises(InvalidArgument, match="no feedback"):
        repo.delete_feedback("c1", vote.id)
    with pytest.raises(ChatArchiveError):
        repo.complete_message("c1", answer.uid)  # already complete
    bob = make_repo(user_id="bob")  # the chat has no user: not bob's
    with pytest.raises(ChatNotFound):
        bob.append("c1", [{"role": "user"}])
    with pytest.raises(ChatNotFound):
        bob.add_feedback("c1", {"score": 1})
    with pytest.raises(ChatNotFound):
        repo.append("missing", [{"role": "user"}])
    assert snapshot(session) == before


def test_append_looks_up_only_the_uids_it_was_given(repo: ChatRepository, session: Session) -> None:
    repo.save(tool_chat())
    engine = session.get_bind()
    with recorded_statements(engine) as made_here:
        repo.append("c1", [{"role": "user", "content": "a new uid is made here"}])
    with recorded_statements(engine) as given:
        repo.append("c1", [{"role": "user", "content": "given", "uid": "u-1"}])
    lookups = [
        (s, made) for made in (made_here, given) for s, _ in made if s.startswith("SELECT messages.uid")
    ]
    assert len(lookups) == 1
    assert lookups[0][1] is given
    assert [m.uid for m in repo.get("c1").messages][-1] == "u-1"


def test_truncate_with_delete_removes_the_last_messages_with_everything_on_them(
    repo: ChatRepository, session: Session
) -> None:
    original = tool_chat("t", feedback=[{"id": "on-chat", "score": 1}])
    repo.save(original)
    stored = repo.get("t")
    repo.add_feedback("t", {"id": "on-call", "message_uid": stored.messages[2].uid, "score": -1})
    repo.add_feedback("t", {"id": "on-user", "message_uid": stored.messages[1].uid, "score": 1})
    answer = repo.begin_message("t")
    repo.append_chunk("t", answer.uid, "half an answer with zebra")
    before = snapshot(session)

    # Regenerate from the tool call on: keep the system prompt and the user's question.
    version = repo.truncate("t", 2, expected_version=4, delete=True)
    back = repo.get("t")
    assert version == back.version == 5
    assert [m.model_dump() for m in back.messages] == [m.model_dump() for m in stored.messages[:2]]
    assert [item.id for item in back.feedback] == ["on-chat", "on-user"]
    assert counts(session)["tool_calls"] == counts(session)["message_chunks"] == 0
    assert repo.search("zebra") == []
    assert repo.search("42") == []  # the tool's answer and the last reply were text of removed messages
    # The rows of the first two messages are as they were (rows start with chat_id, message position).
    after = snapshot(session)
    for table in ("messages", "content_parts"):
        assert after[table] == [row for row in before[table] if row.startswith(("('t', 0,", "('t', 1,"))]
    # Positions go on from there.
    (again,) = repo.append("t", [{"role": "assistant", "content": "A new answer."}])
    assert [m.content for m in repo.get("t").messages][1:] == [stored.messages[1].content, "A new answer."]
    assert repo.get("t").messages[2].uid == again.uid
    assert repo.list_chats().items[0].message_count == 3

    assert repo.truncate("t", 3, delete=True) == 6  # nothing to remove: nothing changes
    assert repo.truncate("t", 99, delete=True) == 6
    assert repo.get("t").version == 6
    assert [hit.position for hit in repo.search("hi")] == [1]  # a text part, kept until now
    assert repo.truncate("t", 0, delete=True) == 7
    assert repo.get("t").messages == []
    assert repo.search("hi") == []
    for bad in (-1, "1", True, 1.0):
        with pytest.raises(InvalidArgument, match="keep must be a whole number") as caught:
            repo.truncate("t", bad)  # type: ignore[arg-type]
        assert caught.value.argument == "keep"
    with pytest.raises(ConflictError):
        repo.truncate("t", 0, expected_version=6)
    with pytest.raises(ChatNotFound):
        repo.truncate("missing", 0)


def test_append_to_a_missing_chat(repo: ChatRepository) -> None:
    with pytest.raises(ChatNotFound):
        repo.append("nope", [{"role": "user"}])
    with pytest.raises(ChatNotFound):
        repo.append("nope", [])


def test_feedback(repo: ChatRepository, session: Session) -> None:
    repo.save(tool_chat())
    doc = repo.get("c1")
    stored = repo.add_feedback(
        "c1", {"message_uid": doc.messages[4].uid, "score": -1, "label": "wrong", "x": [1]}
    )
    repo.add_feedback("c1", {"score": 5, "comment": "whole chat"})
    back = repo.get("c1")
    assert [f.score for f in back.feedback] == [-1, 5]
    assert back.feedback[0] == stored
    assert back.feedback[0].model_extra == {"x": [1]}
    before = snapshot(session)
    with pytest.raises(InvalidDocument, match="unknown message"):
        repo.add_feedback("c1", {"message_uid": "nope", "score": 1})
    with pytest.raises(InvalidDocument, match="duplicate feedback id"):
        repo.add_feedback("c1", {"id": stored.id})
    with pytest.raises(InvalidDocument) as wrong:
        repo.add_feedback("c1", {"score": "great"})
    assert wrong.value.field == "feedback.score"
    with pytest.raises(ChatNotFound):
        repo.add_feedback("missing", {"score": 1})
    assert snapshot(session) == before


def test_feedback_is_taken_back_or_changed(repo: ChatRepository, session: Session) -> None:
    repo.save(tool_chat(feedback=[{"id": "first", "score": 1}]))
    uid = repo.get("c1").messages[4].uid
    repo.add_feedback("c1", {"id": "vote", "message_uid": uid, "score": 1, "user_id": "u"})
    repo.add_feedback("c1", {"id": "last", "score": 5})
    assert repo.delete_feedback("c1", "vote", expected_version=3) == 4
    back = repo.get("c1")
    assert [item.id for item in back.feedback] == ["first", "last"]
    assert back.version == 4
    # Changing a vote: take it back and give the new one, same id (in the session's transaction).
    repo.delete_feedback("c1", "first")
    repo.add_feedback("c1", {"id": "first", "score": -1})
    assert [(item.id, item.score) for item in repo.get("c1").feedback] == [("last", 5), ("first", -1)]
    before = snapshot(session)
    with pytest.raises(InvalidArgument, match="no feedback with id 'vote'") as missing:
        repo.delete_feedback("c1", "vote")
    assert (missing.value.chat_id, missing.value.argument) == ("c1", "feedback_id")
    with pytest.raises(InvalidArgument) as not_text:
        repo.delete_feedback("c1", 7)  # type: ignore[arg-type]
    assert not_text.value.argument == "feedback_id"
    with pytest.raises(ConflictError):
        repo.delete_feedback("c1", "last", expected_version=3)
    with pytest.raises(ChatNotFound):
        repo.delete_feedback("missing", "last")
    assert snapshot(session) == before


def test_update(repo: ChatRepository) -> None:
    repo.save(
        ChatDocument.parse({"chat_id": "u", "title": None, "model": "m", "tags": ["a"], "workflow": {"w": 1}})
    )
    version = repo.update("u", title="New", workflow=None, tags=["x", "y"], metadata={"k": "v"})
    back = repo.get("u")
    assert version == back.version == 2
    assert (back.title, back.model, back.workflow, back.tags, back.metadata) == (
        "New",
        "m",
        None,
        ["x", "y"],
        {"k": "v"},
    )
    assert "title" not in back.model_extra  # type: ignore[operator]
    with pytest.raises(InvalidDocument):
        repo.update("u", tags="not a list")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="cannot update"):
        repo.update("u", messages=[])  # type: ignore[call-arg]
    with pytest.raises(ChatNotFound):
        repo.update("missing", title="x")
    with pytest.raises(ConflictError):
        repo.update("u", title="y", expected_version=1)


def test_update_message_changes_usage_model_and_finish_reason_only(repo: ChatRepository) -> None:
    content = [{"type": "text", "text": "Anneal at 55 C."}, {"type": "refusal", "refusal": "no"}]
    call = {"id": "c1", "type": "function", "function": {"name": "tm", "arguments": "{}"}}
    repo.save(
        {
            "chat_id": "um",
            "messages": [
                {"role": "user", "content": "Tm?", "uid": "q"},
                {"role": "assistant", "content": content, "tool_calls": [call], "uid": "a", "x": 1},
            ],
        }
    )
    before = repo.get("um")
    usage = {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17, "requests": 2}
    stored = repo.update_message("um", "a", usage=usage, model="m-2", finish_reason="stop")
    after = repo.get("um")
    assert after.version == before.version + 1  # type: ignore[operator]
    assert stored.usage is not None
    assert stored.usage.model_dump() == usage
    answer = after.messages[1].model_dump(mode="json")
    assert answer["usage"] == usage
    assert (answer["model"], answer["finish_reason"]) == ("m-2", "stop")
    unchanged = before.messages[1].model_dump(mode="json")
    assert {k: v for k, v in answer.items() if k not in ("usage", "model", "finish_reason")} == unchanged
    assert after.messages[0] == before.messages[0]
    repo.update_message("um", "a", usage=None, finish_reason=None)
    cleared = repo.get("um").messages[1].model_dump(mode="json")
    assert "usage" not in cleared  # cleared: read back as never set
    assert "finish_reason" not in cleared
    assert cleared["model"] == "m-2"
    with pytest.raises(InvalidArgument, match="no message with uid"):
        repo.update_message("um", "nope", model="m")
    with pytest.raises(InvalidArgument, match="cannot change"):
        repo.update_message("um", "a", content="x")  # type: ignore[call-arg]
    with pytest.raises(InvalidDocument):
        repo.update_message("um", "a", usage={"prompt_tokens": "many"})
    with pytest.raises(ConflictError):
        repo.update_message("um", "a", model="m", expected_version=1)
    with pytest.raises(ChatNotFound):
        repo.update_message("missing", "a", model="m")
    assert repo.get("um").messages[1].model == "m-2"  # the refused writes changed nothing


def test_delete_and_delete_user_remove_every_row(repo: ChatRepository, session: Session) -> None:
    for index in range(3):
        repo.save(
            tool_chat(
                f"c{index}",
                user_id="alice" if index < 2 else "bob",
                tags=["t"],
                feedback=[{"score": 1}, {"id": f"by-alice-{index}", "user_id": "alice", "score": 0}],
            )
        )
    repo.delete("c0")
    with pytest.raises(ChatNotFound):
        repo.get("c0")
    with pytest.raises(ChatNotFound):
        repo.delete("c0")
    assert repo.delete_user("alice") == 1
    assert repo.delete_user("alice") == 0
    assert counts(session)["messages"] == 5
    # What alice said about bob's chat is part of bob's chat (docs: Tenants and erasure).
    given = "SELECT chat_id, id, created_at FROM feedback WHERE user_id = 'alice'"
    assert [tuple(row[:2]) for row in session.execute(text(given))] == [("c2", "by-alice-2")]
    assert repo.delete_user("bob") == 1
    assert set(counts(session).values()) == {0}


def test_delete_older_than_deletes_by_last_update(
    repo: ChatRepository, session: Session, make_repo: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("chatarchive._repository.writes._DELETE_CHUNK", 2)  # several chunks
    ages = {"a0": 0, "a1": 10, "a2": 20, "a3": 30, "a4": 40, "b0": 5, "new": 120}
    for chat_id, minutes in ages.items():
        user = "bob" if chat_id.startswith("b") else "alice"
        repo.save(
            tool_chat(
                chat_id, user_id=user, feedback=[{"score": 1}], updated_at=T0 + timedelta(minutes=minutes)
            )
        )
    cutoff = T0 + timedelta(minutes=60)
    assert repo.delete_older_than(cutoff, limit=1) == 1  # the least recently updated first
    assert make_repo(user_id="alice").delete_older_than(cutoff, user_id="bob") == 0  # not alice's to see
    assert make_repo(user_id="bob").delete_older_than(cutoff) == 1  # only bob's own
    assert repo.delete_older_than(T0 + timedelta(minutes=40)) == 3  # exclusive: a4 stays
    assert repo.delete_older_than(cutoff.replace(tzinfo=None)) == 1  # naive is UTC
    assert [chat.chat_id for chat in repo.list_chats().items] == ["new"]
    assert (counts(session)["messages"], counts(session)["feedback"]) == (5, 1)
    for bad in ["2026-01-01", None, T0.date()]:
        with pytest.raises(InvalidArgument, match="cutoff must be a datetime") as caught:
            repo.delete_older_than(bad)  # type: ignore[arg-type]
        assert caught.value.argument == "cutoff"
    with pytest.raises(InvalidArgument, match="limit"):
        repo.delete_older_than(cutoff, limit=0)
    assert repo.delete_older_than(T0 + timedelta(days=1)) == 1
    assert set(counts(session).values()) == {0}


# -- reads -----------------------------------------------------------------------


def test_time_arguments_must_be_datetimes(repo: ChatRepository) -> None:
    repo.save(tool_chat("c", updated_at=T0))
    assert [c.chat_id for c in repo.list_chats(ChatFilter(since=T0.replace(tzinfo=None))).items] == [
        "c"
    ]  # naive: UTC
    assert repo.list_chats(ChatFilter(until=T0.replace(tzinfo=None))).items == []
    calls: dict[str, Callable[[Any], object]] = {
        "since": lambda bad: repo.list_chats(ChatFilter(since=bad)),
        "until": lambda bad: repo.list_chats(ChatFilter(until=bad)),
        "search since": lambda bad: repo.search("hi", since=bad),
    }
    for name, call in calls.items():
        for bad in ("2026-01-01", T0.date(), 1767225600):
            # It reached the driver and came back as a DatabaseError about 'tzinfo'.
            field = name.split()[-1]
            with pytest.raises(InvalidArgument, match=f"{field} must be a datetime") as caught:
                call(bad)
            assert caught.value.argument == field
    calls["cutoff"] = repo.delete_older_than
    for name, call in calls.items():
        # A time that is no time in UTC failed in the driver: DatabaseError (OverflowError).
        for bad in (
            datetime.min.replace(tzinfo=timezone(timedelta(hours=14))),
            datetime.max.replace(tzinfo=timezone(timedelta(hours=-1))),
        ):
            field = name.split()[-1]
            with pytest.raises(
                InvalidArgument, match=f"{field} is out of range once converted to UTC"
            ) as caught:
                call(bad)
            assert caught.value.argument == field
    assert repo.get("c").version == 1


def test_id_and_filter_arguments_must_be_strings(repo: ChatRepository) -> None:
    # PostgreSQL compared 7 with the text '7' (or failed inside the driver) where
    # SQLite compared it as a number; a string given for a list of ids was looked
    # up a character at a time.
    repo.save(tool_chat("7", user_id="7", model="7", tags=["7"]))
    calls: dict[str, Callable[[Any], object]] = {
        "chat_id get": lambda bad: repo.get(bad),
        "chat_id get_many": lambda bad: repo.get_many(["7", bad]),
        "chat_id append": lambda bad: repo.append(bad, [{"role": "user", "content": "x"}]),
        "chat_id update": lambda bad: repo.update(bad, title="x"),
        "chat_id delete": lambda bad: repo.delete(bad),
        "chat_id append_chunk": lambda bad: repo.append_chunk(bad, "uid", "x"),
        "message_uid append_chunk": lambda bad: repo.append_chunk("7", bad, "x"),
        "message_uid complete_message": lambda bad: repo.complete_message("7", bad),
        "user_id list_chats": lambda bad: repo.list_chats(ChatFilter(user_id=bad)),
        "model list_chats": lambda bad: repo.list_chats(ChatFilter(model=bad)),
        "tag list_chats": lambda bad: repo.list_chats(ChatFilter(tag=bad)),
        "model export": lambda bad: list(repo.export(ChatFilter(model=bad))),
        "tag export": lambda bad: list(repo.export(ChatFilter(tag=bad))),
        "user_id delete_older_than": lambda bad: repo.delete_older_than(T0, user_id=bad),
        "query search": lambda bad: repo.search(bad),
        "role search": lambda bad: repo.search("hi", role=bad),
        "model search": lambda bad: repo.search("hi", model=bad),
    }
    for name, call in calls.items():
        field = name.split()[0]
        for bad in (7, ["7"], b"7"):
            with pytest.raises(InvalidArgument, match=r"must be a string|valid string") as caught:
                call(bad)
            assert caught.value.argument == field, name
    with pytest.raises(InvalidArgument, match="chat_ids must be a list of chat ids, not str"):
        repo.get_many("7")
    assert repo.get("7").version == 1  # nothing changed


ANSWER = {"choices": [{"index": 0, "message": {"role": "assistant", "content": "x"}}]}


def test_count_and_version_arguments_must_be_whole_numbers(repo: ChatRepository) -> None:
    # A string or None was compared with 1 (TypeError); 2.5 reached SQLite as a
    # LIMIT it refused, and PostgreSQL as one it rounded; True counted as 1.
    repo.save(tool_chat("7"))
    calls: dict[str, Callable[[Any], object]] = {
        "limit list_chats": lambda bad: repo.list_chats(limit=bad),
        "limit search": lambda bad: repo.search("hi", limit=bad),
        "limit delete_older_than": lambda bad: repo.delete_older_than(T0, limit=bad),
        "batch_size export": lambda bad: list(repo.export(batch_size=bad)),
        "batch_size save_many": lambda bad: repo.save_many([], batch_size=bad),
        "tool_call_index append_chunk": lambda bad: repo.append_chunk("7", "uid", "x", tool_call_index=bad),
        "choice record_completion": lambda bad: repo.record_completion("7", ANSWER, choice=bad),
    }
    versioned: dict[str, Callable[[Any], object]] = {
        "save": lambda bad: repo.save(tool_chat("7"), expected_version=bad),
        "append": lambda bad: repo.append("7", [{"role": "user", "content": "x"}], expected_version=bad),
        "update": lambda bad: repo.update("7", title="x", expected_version=bad),
        "truncate": lambda bad: repo.truncate("7", 0, expected_version=bad),
        "delete_feedback": lambda bad: repo.delete_feedback("7", "f", expected_version=bad),
    }
    for name, call in calls.items():
        for bad in ("5", 2.5, True, [1]):
            with pytest.raises(InvalidArgument, match="must be a whole number") as caught:
                call(bad)
            assert caught.value.argument == name.split()[0], name
    for name, call in versioned.items():
        # "1" was compared with the stored 1 and reported as a conflict ("at version 1, not 1").
        for bad in ("1", 1.0, True, -1):
            with pytest.raises(InvalidArgument, match="expected_version must be a whole number") as caught:
                call(bad)
            assert caught.value.argument == "expected_version", name
    with pytest.raises(InvalidArgument, match="on_error must be callable") as caught:
        repo.save_many([{"messages": [{"content": "no role"}]}], on_error=5)  # type: ignore[arg-type]
    assert caught.value.argument == "on_error"
    assert repo.get("7").version == 1  # nothing changed


def test_collection_and_yes_no_arguments_of_the_wrong_kind_are_refused(repo: ChatRepository) -> None:
    # save_many read a dict as its keys ("a chat document must be a JSON object,
    # not a string") and a document as its fields; None raised TypeError; a
    # truthy bulk="no" ran a bulk load.
    repo.save(tool_chat("7"))
    bad_docs: list[Any] = [None, {"chat_id": "x", "messages": []}, tool_chat("x"), "x", b"x", 5]
    for bad in bad_docs:
        with pytest.raises(InvalidArgument, match="docs must be a list of chat documents") as caught:
            repo.save_many(bad)
        assert caught.value.argument == "docs"
    bad_messages: list[Any] = [None, {"role": "user", "content": "x"}, Message(role="user", content="x"), 5]
    for bad in bad_messages:
        with pytest.raises(InvalidArgument, match="messages must be a list of messages") as caught:
            repo.append("7", bad)
        assert (caught.value.chat_id, caught.value.argument) == ("7", "messages")
    with pytest.raises(InvalidArgument, match="chat_ids must be a list of chat ids, not NoneType"):
        repo.get_many(None)  # type: ignore[arg-type]
    for flag in ("no", 1, None):
        with pytest.raises(InvalidArgument, match="bulk must be True or False") as caught:
            repo.save_many([tool_chat("y")], bulk=flag)  # type: ignore[arg-type]
        assert caught.value.argument == "bulk"
    assert repo.get("7").version == 1  # nothing changed
    assert repo.get_many(["x", "y"]) == []


def test_chat_ids_gives_every_id_unless_asked_for_a_page(repo: ChatRepository) -> None:
    repo.save_many({"chat_id": f"c{index:03d}", "messages": []} for index in range(130))
    everything = repo.chat_ids()
    assert everything == [f"c{index:03d}" for index in range(130)]
    assert repo.chat_ids(limit=50, after="c099") == everything[100:]


def test_list_chats_pages_newest_first(repo: ChatRepository) -> None:
    for index in range(7):
        doc = tool_chat(
            f"c{index}",
            user_id="alice" if index % 2 else "bob",
            model="m1" if index < 4 else "m2",
            tags=["even"] if index % 2 == 0 else [],
            updated_at=T0 + timedelta(minutes=index // 2),  # ties, broken by chat_id
        )
        repo.save(doc)
    seen: list[str] = []
    cursor = None
    while True:
        page = repo.list_chats(limit=3, cursor=cursor)
        seen += [chat.chat_id for chat in page.items]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == ["c6", "c5", "c4", "c3", "c2", "c1", "c0"]
    assert [c.chat_id for c in repo.list_chats(ChatFilter(user_id="alice")).items] == ["c5", "c3", "c1"]
    assert [c.chat_id for c in repo.list_chats(ChatFilter(model="m1", tag="even")).items] == ["c2", "c0"]
    assert repo.count_chats() == 7
    assert repo.count_chats(ChatFilter(user_id="alice")) == 3
    assert repo.count_chats(ChatFilter(model="m1", tag="even")) == 2
    assert repo.count_chats(ChatFilter(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=3))) == 4
    assert repo.count_chats(ChatFilter(tag="none")) == 0
    window = repo.list_chats(ChatFilter(since=T0 + timedelta(minutes=1), until=T0 + timedelta(minutes=3)))
    assert [c.chat_id for c in window.items] == ["c5", "c4", "c3", "c2"]
    first = repo.list_chats(limit=1).items[0]
    assert (first.message_count, first.version, first.model) == (5, 1, "m2")
    with pytest.raises(InvalidArgument, match="cursor"):
        repo.list_chats(cursor="garbage!")
    # Edited cursors: a time outside UTC's range was a DatabaseError, a chat id
    # that is not a string was read as its str() ('None', '5').
    for stamp, chat_id in [
        ("9999-12-31T23:59:59-14:00", "c1"),
        ("0001-01-01T00:00:00+14:00", "c1"),
        ("2026-01-01T00:00:00+00:00", None),
        ("2026-01-01T00:00:00+00:00", 5),
        (20260101, "c1"),
    ]:
        edited = base64.urlsafe_b64encode(json.dumps([stamp, chat_id]).encode()).decode()
        with pytest.raises(InvalidArgument, match="not a cursor returned by list_chats") as caught:
            repo.list_chats(cursor=edited)
        assert caught.value.argument == "cursor"
    with pytest.raises(InvalidArgument):
        repo.list_chats(limit=0)


def test_list_chats_lists_no_chat_twice_while_chats_change(repo: ChatRepository) -> None:
    # A chat updated between pages moves to the front: one already listed is
    # not listed again, one not reached yet is on a new first page; a chat
    # deleted meanwhile, or the cursor's own chat, does not break the paging.
    for index in range(6):
        repo.save(tool_chat(f"c{index}", updated_at=T0 + timedelta(minutes=index)))
    first = repo.list_chats(limit=2)
    assert [c.chat_id for c in first.items] == ["c5", "c4"]
    repo.update("c5", title="seen, then changed")
    repo.update("c1", title="not reached, then changed")
    repo.delete("c4")  # the chat the cursor names
    repo.delete("c2")
    rest: list[str] = []
    cursor = first.next_cursor
    while cursor is not None:
        page = repo.list_chats(limit=2, cursor=cursor)
        rest += [c.chat_id for c in page.items]
        cursor = page.next_cursor
    assert rest == ["c3", "c0"]
    assert [c.chat_id for c in repo.list_chats(limit=2).items] == ["c1", "c5"]


def test_an_error_quotes_an_id_of_any_length_in_a_line(repo: ChatRepository) -> None:
    # An id passed to get or delete can be of any length: the error quoted all
    # of it (a megabyte of log per refused request).
    huge = "x" * 1_000_000
    repo.save(tool_chat("c1"))
    uid = repo.get("c1").messages[0].uid
    refusals: list[tuple[Callable[[], object], type[Exception]]] = [
        (lambda: repo.get(huge), ChatNotFound),
        (lambda: repo.delete(huge), ChatNotFound),
        (lambda: repo.save(tool_chat(huge)), InvalidDocument),
        (lambda: repo.delete_feedback("c1", huge), InvalidArgument),
        (lambda: repo.complete_message("c1", huge), InvalidArgument),
    ]
    for call, error in refusals:
        with pytest.raises(error) as caught:
            call()
        assert len(str(caught.value)) < 600
        assert "(1,000,000 characters)" in str(caught.value)
    with pytest.raises(ChatNotFound) as caught:
        repo.get("c1" + "y" * 253)  # a valid id is quoted whole
    assert str(caught.value) == f"chat {'c1' + 'y' * 253!r} not found"
    assert repo.get("c1").messages[0].uid == uid


def test_a_model_changed_after_it_was_made_is_validated_where_it_is_saved(
    repo: ChatRepository, session: Session
) -> None:
    # A ChatDocument was taken as it was: an empty chat id and a tag string
    # were stored, content=5 raised TypeError, a dict in messages AttributeError.
    doc = tool_chat("c1", feedback=[{"score": 1}])
    repo.save(doc)
    before = snapshot(session)

    def changed(change: Callable[[ChatDocument], object]) -> ChatDocument:
        copy = doc.model_copy(deep=True)
        change(copy)
        return copy

    refused = [
        (changed(lambda d: setattr(d, "chat_id", "")), None, "chat_id"),
        (changed(lambda d: setattr(d, "tags", "abc")), None, "tags"),
        (changed(lambda d: setattr(d.messages[0], "content", 5)), 0, "content"),
        (changed(lambda d: d.messages.append(d.messages[0])), len(doc.messages), "uid"),
        (changed(lambda d: setattr(d.feedback[0], "score", "high")), None, "feedback[0].score"),
        (
            changed(lambda d: setattr(d.messages[2].tool_calls[0].function, "name", 5)),  # type: ignore[index]
            2,
            "tool_calls[0].function.name",
        ),
    ]
    for bad, message_index, field in refused:
        for save in (repo.save, lambda d: repo.save_many([d])):
            with pytest.raises(InvalidDocument) as caught:
                save(bad)
            assert (caught.value.message_index, caught.value.field) == (message_index, field), caught.value
    message = doc.messages[0].model_copy()
    message.role = ""
    with pytest.raises(InvalidDocument) as caught:
        repo.append("c1", [message])
    assert (caught.value.chat_id, caught.value.field) == ("c1", "role")
    vote = doc.feedback[0].model_copy()
    vote.message_uid = ""
    with pytest.raises(InvalidDocument) as caught:
        repo.add_feedback("c1", vote)
    assert caught.value.field == "feedback.message_uid"
    assert snapshot(session) == before
    # A list of messages given as mappings inside a document that is a model is
    # validated into messages, and the model given is left as it was.
    listed = changed(lambda d: setattr(d, "messages", [{"role": "user", "content": "x"}]))
    repo.save(listed)
    assert repo.get("c1").to_openai() == [{"role": "user", "content": "x"}]
    assert listed.messages == [{"role": "user", "content": "x"}]  # type: ignore[comparison-overlap]


def test_find_gives_the_chat_get_gives_or_none(make_repo: Callable[..., Any]) -> None:
    repo = make_repo()
    repo.save(tool_chat("found"))
    repo.save({**tool_chat("hers").model_dump(mode="json"), "user_id": "alice"})
    assert repo.find("found") == repo.get("found")
    assert repo.find("missing") is None
    bob = make_repo(user_id="bob")
    assert bob.find("hers") is None  # another user's chat is as one that is not there
    with pytest.raises(ChatNotFound):
        bob.get("hers")
    with pytest.raises(InvalidArgument, match="chat_id"):
        repo.find(42)


def test_get_many_takes_any_number_of_ids(repo: ChatRepository) -> None:
    # 300,000 ids in one IN (...) were "too many SQL variables" on SQLite.
    repo.save_many([tool_chat(f"c{n}") for n in range(3)])
    asked = [f"c{n}" for n in range(300_000, 0, -1)] + ["c0"]
    assert [doc.chat_id for doc in repo.get_many(asked)] == ["c2", "c1", "c0"]
    assert [len(doc.messages) for doc in repo.get_many(asked)] == [len(tool_chat("c").messages)] * 3


def test_get_many_and_export(repo: ChatRepository) -> None:
    for index in range(5):
        repo.save(
            tool_chat(
                f"c{index}",
                user_id="alice" if index < 3 else "bob",
                model="m1" if index % 2 else "m2",
                tags=["even"] if index % 2 == 0 else [],
                updated_at=T0 + timedelta(hours=index),
            )
        )
    assert [d.chat_id for d in repo.get_many(["c3", "nope", "c1", "c3"])] == ["c3", "c1"]
    assert [d.chat_id for d in repo.export(batch_size=2)] == [f"c{i}" for i in range(5)]
    assert [d.chat_id for d in repo.export(ChatFilter(user_id="bob"))] == ["c3", "c4"]
    # since / until bound updated_at, as in list_chats
    window = repo.export(
        ChatFilter(since=T0 + timedelta(hours=1), until=T0 + timedelta(hours=4)), batch_size=2
    )
    assert [d.chat_id for d in window] == ["c1", "c2", "c3"]
    assert [d.chat_id for d in repo.export(ChatFilter(user_id="alice", since=T0 + timedelta(hours=2)))] == [
        "c2"
    ]
    # model and tag as in list_chats, combined with the others
    assert [d.chat_id for d in repo.export(ChatFilter(model="m1"), batch_size=1)] == ["c1", "c3"]
    assert [d.chat_id for d in repo.export(ChatFilter(tag="even", until=T0 + timedelta(hours=4)))] == [
        "c0",
        "c2",
    ]
    assert [d.chat_id for d in repo.export(ChatFilter(model="m2", tag="even", user_id="bob"))] == ["c4"]
    assert list(repo.export(ChatFilter(model="m3"))) == []
    with pytest.raises(InvalidArgument, match="until must be a datetime"):
        list(repo.export(ChatFilter(until="2026-01-01")))  # type: ignore[arg-type]


def test_get_uses_a_fixed_number_of_queries(repo: ChatRepository, session: Session) -> None:
    repo.save(tool_chat("small"))
    big = tool_chat("big")
    repo.save(big)
    repo.append("big", [{"role": "user", "content": [{"type": "text", "text": str(i)}]} for i in range(200)])
    engine = session.get_bind()
    with recorded_statements(engine) as small:
        repo.get("small")
    with recorded_statements(engine) as large:
        repo.get("big")
    # One per table on SQLite, one in all on PostgreSQL (through either API).
    assert 1 <= len(large) == len(small) <= 7


def test_a_failed_save_leaves_the_transaction_usable(repo: ChatRepository, session: Session) -> None:
    repo.save(tool_chat())
    before = snapshot(session)
    with pytest.raises(InvalidDocument):
        repo.save({"chat_id": "c1", "messages": [{"role": "user", "content": 1}]})
    with pytest.raises(ConflictError):
        repo.save(tool_chat(), expected_version=5)
    assert snapshot(session) == before
    repo.save(tool_chat("c2"))
    assert repo.get("c2").chat_id == "c2"


BAD_INPUT = [
    42,
    {"chat_id": "", "messages": []},
    {"chat_id": "x" * 256},
    {"chat_id": "bad", "messages": [{"content": "no role"}]},
    {"chat_id": "bad", "messages": [{"role": "user", "content": 3}]},
    {"chat_id": "bad", "messages": [{"role": "user", "content": [{"text": "no type"}]}]},
    {"chat_id": "bad", "messages": [{"role": "u", "uid": "a"}, {"role": "u", "uid": "a"}]},
    {"chat_id": "bad", "created_at": "not a time"},
    {"chat_id": "bad", "feedback": [{"message_uid": "ghost"}]},
    {"chat_id": "bad", "messages": [{"role": "user", "content": "\udc00"}]},
]


@pytest.mark.parametrize("data", BAD_INPUT, ids=range(len(BAD_INPUT)))
def test_bad_input_is_refused_and_changes_nothing(repo: ChatRepository, session: Session, data: Any) -> None:
    repo.save(tool_chat("bad"))
    before = snapshot(session)
    with pytest.raises(InvalidDocument):
        repo.save(data)
    assert snapshot(session) == before
