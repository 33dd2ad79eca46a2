"""Anthropic's Messages API: requests, responses and streams on the archive's rows."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from anthropic.lib.streaming._messages import accumulate_event
from anthropic.types import Message as AnthropicMessage
from anthropic.types import RawMessageStreamEvent
from pydantic import TypeAdapter
from sqlalchemy import Engine, text

from chatarchive import ChatArchive, ChatRepository, InvalidDocument, formats
from chatarchive.formats import anthropic

SAMPLES = Path(__file__).parents[1] / "data" / "formats" / "anthropic"


def sample(name: str) -> Any:
    return json.loads((SAMPLES / f"{name}.json").read_text(encoding="utf-8"))


def events_of(response: dict[str, Any]) -> list[dict[str, Any]]:
    """The stream events that amount to ``response``, its texts and tool
    inputs cut in pieces, as the API streams them."""
    usage = response["usage"]
    start = {
        **{key: value for key, value in response.items() if key not in ("content", "usage")},
        "content": [],
        "stop_reason": None,
        "usage": {**usage, "output_tokens": 1},
    }
    events: list[dict[str, Any]] = [{"type": "message_start", "message": start}, {"type": "ping"}]
    for index, block in enumerate(response["content"]):
        empty = {"text": "", "thinking": "", "signature": "", "input": {}}
        opened = {key: empty.get(key, value) for key, value in block.items() if key != "citations"}
        events.append({"type": "content_block_start", "index": index, "content_block": opened})
        for key, kind in (("thinking", "thinking_delta"), ("text", "text_delta")):
            if key in block:
                for piece in (block[key][:5], block[key][5:]):
                    events.append(
                        {"type": "content_block_delta", "index": index, "delta": {"type": kind, key: piece}}
                    )
        deltas: list[dict[str, Any]] = []
        if "signature" in block:
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        deltas.extend(
            {"type": "citations_delta", "citation": citation} for citation in block.get("citations", [])
        )
        if "input" in block:
            whole = json.dumps(block["input"])
            deltas.extend(
                {"type": "input_json_delta", "partial_json": piece} for piece in (whole[:7], whole[7:])
            )
        events.extend({"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas)
        events.append({"type": "content_block_stop", "index": index})
    delta = {"stop_reason": response["stop_reason"], "stop_sequence": response["stop_sequence"]}
    events.append(
        {"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}}
    )
    events.append({"type": "message_stop"})
    return events


@pytest.mark.parametrize("name", ["response-tool-use", "response-server-tools"])
def test_stream_events_are_assembled_as_the_anthropic_package_does(name: str) -> None:
    response = sample(name)
    events = events_of(response)
    snapshot = None
    buffers: dict[int, bytes] = {}
    adapter: TypeAdapter[Any] = TypeAdapter(RawMessageStreamEvent)
    for event in events:
        if event["type"] == "ping":  # not an event of the SDK's: its stream leaves pings out
            continue
        snapshot = accumulate_event(
            event=adapter.validate_python(event), current_snapshot=snapshot, json_bufs=buffers
        )
    assert snapshot is not None
    theirs = AnthropicMessage.model_validate(snapshot.model_dump(mode="json")).model_dump(
        mode="json", exclude_none=True
    )
    ours = anthropic.assemble_events(copy.deepcopy(events))
    assert AnthropicMessage.model_validate(ours).model_dump(mode="json", exclude_none=True) == theirs
    assert ours == response
    assert formats.detect(events) == "anthropic"
    assert formats.export(formats.to_document(events), "anthropic") == response


def test_a_request_is_stored_on_the_archives_rows(archive: ChatArchive, engine: Engine) -> None:
    document = formats.to_document(sample("request-blocks"))
    archive.save(document)
    with engine.connect() as connection:
        roles = connection.execute(
            text(
                "SELECT role, content_form, tool_call_id FROM messages WHERE chat_id = :c ORDER BY position"
            ),
            {"c": document.chat_id},
        ).all()
        calls = connection.execute(
            text(
                "SELECT type, name, arguments FROM tool_calls WHERE chat_id = :c ORDER BY message_position, position"
            ),
            {"c": document.chat_id},
        ).all()
        parts = connection.execute(
            text(
                "SELECT message_position, type, text FROM content_parts WHERE chat_id = :c ORDER BY message_position, position"
            ),
            {"c": document.chat_id},
        ).all()
    # system; the user's blocks; the assistant's; two tool results, each a tool message; the answer.
    assert [tuple(row) for row in roles] == [
        ("system", "parts", None),
        ("user", "parts", None),
        ("assistant", "parts", None),
        ("tool", "parts", "toolu_01"),
        ("tool", "string", "toolu_02"),
        ("assistant", "parts", None),
    ]
    assert [(row.type, row.name, json.loads(row.arguments)) for row in calls] == [
        ("function", "lookup_primer", {"pair": "P7"}),
        ("function", "lookup_protocol", {"step": "anneal", "repeat": 2}),
    ]
    by_message: dict[int, list[tuple[str, str | None]]] = {}
    for row in parts:
        by_message.setdefault(row.message_position, []).append((row.type, row.text))
    assert [kind for kind, _ in by_message[1]] == [*["image"] * 2, *["document"] * 4, "text"]
    assert by_message[2] == [
        ("thinking", None),
        ("redacted_thinking", None),
        ("text", "The lower band is likely primer dimers."),
        ("text", "Let me also check the protocol."),
    ]
    assert by_message[5] == [("text", "Anneal at 57 °C.")]
    assert formats.export(archive.get(document.chat_id), "anthropic") == sample("request-blocks")
    # The chat's model, user (metadata.user_id) and settings.
    tools = formats.to_document(sample("request-tools"))
    assert (tools.model, tools.user_id) == ("claude-sonnet-4-5", "u-42")
    assert tools.model_settings is not None
    assert tools.model_settings["max_tokens"] == 1024


def test_server_tool_calls_stay_queryable_by_type_and_name(archive: ChatArchive, engine: Engine) -> None:
    documents = [formats.to_document(sample(name)) for name in ("response-server-tools", "request-mcp-code")]
    for document in documents:
        archive.save(document)
    with engine.connect() as connection:
        calls = connection.execute(
            text("SELECT type, name FROM tool_calls ORDER BY chat_id, message_position, position")
        ).all()
        results = connection.execute(
            text("SELECT type FROM content_parts WHERE type LIKE '%tool_result' ORDER BY type")
        ).scalars()
        assert sorted(tuple(row) for row in calls) == [
            ("mcp_tool_use", "echo"),
            ("server_tool_use", "code_execution"),
            ("server_tool_use", "web_search"),
        ]
        assert list(results) == ["code_execution_tool_result", "mcp_tool_result", "web_search_tool_result"]


def test_usage_goes_to_the_token_columns(archive: ChatArchive, engine: Engine) -> None:
    document = formats.to_document(sample("response-tool-use"))
    archive.save(document)
    with engine.connect() as connection:
        row = connection.execute(
            text(
                "SELECT model, finish_reason, prompt_tokens, completion_tokens FROM messages WHERE chat_id = :c"
            ),
            {"c": document.chat_id},
        ).one()
    assert tuple(row) == ("claude-sonnet-4-5-20250929", "tool_use", 472, 91)
    assert document.model == "claude-sonnet-4-5-20250929"


def test_record_message_from_a_dict_an_sdk_object_and_stream_events(repo: ChatRepository) -> None:
    response = sample("response-tool-use")
    repo.save({"chat_id": "c", "messages": [{"role": "user", "content": "Weather in SF?"}]})
    first = repo.record_message("c", response)
    second = repo.record_message("c", AnthropicMessage.model_validate(response))
    third = repo.record_message("c", events_of(response))
    stored = repo.get("c").messages
    assert stored[1:] == [first, second, third]
    for message in (first, second, third):
        assert (message.role, message.model, message.finish_reason) == (
            "assistant",
            "claude-sonnet-4-5-20250929",
            "tool_use",
        )
        assert message.usage is not None
        assert (message.usage.prompt_tokens, message.usage.completion_tokens) == (472, 91)
        assert [call.function.name for call in message.tool_calls or []] == ["get_weather"]
        assert (message.model_extra or {})["response_id"] == "msg_01Aq9w938a90dw8q"
    with pytest.raises(InvalidDocument, match="type") as caught:
        repo.record_message("c", {"type": "completion", "content": "hi"})
    assert caught.value.chat_id == "c"
    with pytest.raises(InvalidDocument, match="message_start"):
        repo.record_message("c", [{"type": "content_block_delta", "index": 0}])
    assert len(repo.get("c").messages) == 4  # nothing appended by the refused ones


def test_a_chat_of_another_format_exports_as_a_request_the_api_takes() -> None:
    from anthropic.types.message_create_params import MessageCreateParamsNonStreaming

    from tests.support.official import validate

    line = json.loads((SAMPLES.parent / "openai-finetune" / "tool-answered.json").read_text(encoding="utf-8"))
    document = formats.to_document(
        {
            "model": "claude-haiku-4-5",
            "model_settings": {"max_tokens": 512},
            "messages": [
                *line["messages"][:2],
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "And this gel?"},
                        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
                        {"type": "image_url", "image_url": {"url": "https://example.com/gel.png"}},
                        {"type": "file", "file": {"file_id": "file-1"}},
                    ],
                },
                *line["messages"][2:],
            ],
        },
        "canonical",
    )
    request = formats.export(document, "anthropic")
    validate(MessageCreateParamsNonStreaming, request)
    assert request["system"] == "You are a lab assistant."
    assert [turn["role"] for turn in request["messages"]] == [
        "user",
        "user",
        "assistant",
        "user",
        "assistant",
    ]
    assert request["messages"][1]["content"][1:] == [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0KGgo="}},
        {"type": "image", "source": {"type": "url", "url": "https://example.com/gel.png"}},
        {"type": "document", "source": {"type": "file", "file_id": "file-1"}},
    ]
    calls = request["messages"][2]["content"]
    assert [(block["type"], block["id"], block["input"]) for block in calls] == [
        ("tool_use", "call_1", {"pair": "P7"}),
        ("tool_use", "call_2", {"step": "anneal"}),
    ]
    # The two tool messages are one user message of tool results, as the API wants them.
    assert [block["tool_use_id"] for block in request["messages"][3]["content"]] == ["call_1", "call_2"]
