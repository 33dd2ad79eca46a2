"""Gemini contents on the archive's rows, and as chat completions."""

from __future__ import annotations

import json
from typing import Any

from sqlalchemy import Engine, text

from chatarchive import ChatArchive, formats
from tests.support.official import validate_chat_completions
from tests.support.samples import format_sample


def sample(name: str) -> Any:
    return format_sample("gemini", name)


def test_contents_are_stored_on_the_archives_rows(archive: ChatArchive, engine: Engine) -> None:
    document = formats.to_document(sample("request-tools"))
    archive.save(document)
    with engine.connect() as connection:
        messages = connection.execute(
            text("SELECT role, name, content_form, text FROM messages WHERE chat_id = :c ORDER BY position"),
            {"c": document.chat_id},
        ).all()
        calls = connection.execute(
            text("SELECT name, arguments FROM tool_calls WHERE chat_id = :c ORDER BY position"),
            {"c": document.chat_id},
        ).all()
        parts = connection.execute(
            text(
                "SELECT type, text FROM content_parts WHERE chat_id = :c AND message_position = 2 ORDER BY position"
            ),
            {"c": document.chat_id},
        ).all()
    assert [(row.role, row.name) for row in messages] == [
        ("system", None),
        ("user", None),
        ("assistant", None),
        ("tool", "lookup_primer"),
        ("tool", "lookup_protocol"),
        ("assistant", None),
    ]
    assert json.loads(messages[3].text) == {"tm": 62}
    assert [(row.name, json.loads(row.arguments)) for row in calls] == [
        ("lookup_primer", {"pair": "P7"}),
        ("lookup_protocol", {"step": "anneal", "repeat": 2}),
    ]
    # Reasoning is a part of its own, its text searchable.
    assert [row.type for row in parts] == ["thought", "text"]
    assert parts[0].text == "The lower band looks like primer dimers; let me check the primers."


def test_contents_convert_to_chat_completions_pairing_answers_with_their_calls() -> None:
    messages = formats.export(formats.to_document(sample("request-tools")), "chat-completions")
    validate_chat_completions(messages)
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert messages[1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="},
    }
    # Gemini's calls have no ids: each gets one, and each answer the one of the function it names.
    assert [call["id"] for call in messages[2]["tool_calls"]] == ["call_1", "call_2"]
    assert [m["tool_call_id"] for m in messages[3:5]] == ["call_1", "call_2"]
    assert messages[2]["content"] == [
        {"type": "text", "text": "Let me look up the primers."}
    ]  # the thought left out
    snake = formats.export(formats.to_document(sample("contents-snake-case")), "chat-completions")
    validate_chat_completions(snake)
    assert snake[2] == {"role": "tool", "content": '{"ok": true}', "tool_call_id": "call-1"}
