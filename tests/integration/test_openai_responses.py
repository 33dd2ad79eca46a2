"""OpenAI's Responses API: items, responses and streams on the archive's rows."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from openai.types.responses import Response, ResponseInputParam
from sqlalchemy import Engine, text

from chatarchive import ChatArchive, ChatRepository, InvalidDocument, formats
from chatarchive.formats import openai_responses
from tests.support.official import validate, validate_chat_completions
from tests.support.samples import format_sample


def sample(name: str) -> Any:
    return format_sample("openai-responses", name)


def events_of(response: dict[str, Any], *, completed: bool = True) -> list[dict[str, Any]]:
    """The stream events of ``response``: created, each item added (a
    message's text in two deltas, a call's arguments in two), done, completed."""
    opened = {**response, "output": [], "status": "in_progress", "usage": None}
    events: list[dict[str, Any]] = [{"type": "response.created", "sequence_number": 0, "response": opened}]
    for index, item in enumerate(response["output"]):
        added = {key: value for key, value in item.items() if key not in ("content", "arguments")}
        events.append({"type": "response.output_item.added", "output_index": index, "item": added})
        for position, part in enumerate(item.get("content", [])):
            events.append(
                {
                    "type": "response.content_part.added",
                    "output_index": index,
                    "content_index": position,
                    "part": {**part, "text": ""},
                }
            )
            for piece in (part["text"][:4], part["text"][4:]):
                events.append(
                    {
                        "type": "response.output_text.delta",
                        "output_index": index,
                        "content_index": position,
                        "delta": piece,
                    }
                )
        if "arguments" in item:
            for piece in (item["arguments"][:3], item["arguments"][3:]):
                events.append(
                    {"type": "response.function_call_arguments.delta", "output_index": index, "delta": piece}
                )
        if completed:
            events.append({"type": "response.output_item.done", "output_index": index, "item": item})
    if completed:
        events.append({"type": "response.completed", "response": response})
    return events


def test_a_stream_is_assembled_into_its_response() -> None:
    response = sample("response-built-in-tools")
    assert openai_responses.assemble_events(events_of(response)) == response
    assert formats.detect(events_of(response)) == "openai-responses"
    assert formats.export(formats.to_document(events_of(response)), "openai-responses") == response
    # Cut short: the snapshot, the items as far as their deltas went.
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "get_weather",
        "arguments": '{"city": "Paris"}',
        "status": "completed",
    }
    cut = openai_responses.assemble_events(
        events_of({**response, "output": [*response["output"], call]}, completed=False)
    )
    assert cut["status"] == "in_progress"
    assert cut["output"][-1] == call
    assert cut["output"][4]["content"][0]["text"] == response["output"][4]["content"][0]["text"]
    with pytest.raises(InvalidDocument, match="error"):
        openai_responses.assemble_events([{"type": "error", "message": "overloaded"}])


def test_items_are_stored_on_the_archives_rows(archive: ChatArchive, engine: Engine) -> None:
    documents = [
        formats.to_document(sample(name))
        for name in ("input-conversation", "response-built-in-tools", "input-computer-shell-mcp")
    ]
    for document in documents:
        archive.save(document)
    conversation, response, computer = (document.chat_id for document in documents)
    with engine.connect() as connection:

        def rows(query: str, chat_id: str) -> list[tuple[Any, ...]]:
            return [tuple(row) for row in connection.execute(text(query), {"c": chat_id})]

        assert rows(
            "SELECT role, tool_call_id FROM messages WHERE chat_id = :c ORDER BY position", conversation
        ) == [
            ("developer", None),
            ("user", None),
            ("reasoning", None),
            ("assistant", None),
            ("user", None),
            ("assistant", None),
            ("tool", "call_12345xyz"),
            ("assistant", None),
            ("tool", "call_custom_1"),
            ("assistant", None),
            ("assistant", None),
        ]
        calls = "SELECT type, call_id, name, arguments FROM tool_calls WHERE chat_id = :c ORDER BY message_position"
        assert rows(calls, conversation) == [
            ("function", "call_12345xyz", "get_weather", '{"location":"Paris, France"}'),
            ("custom", "call_custom_1", "send_email", "To: bob@example.com\n14 degrees in Paris."),
        ]
        assert rows(
            "SELECT type, name FROM tool_calls WHERE chat_id = :c ORDER BY message_position", response
        ) == [
            ("web_search_call", "web_search"),
            ("file_search_call", "file_search"),
            ("code_interpreter_call", "code_interpreter"),
            ("image_generation_call", "image_generation"),
        ]
        assert rows(
            "SELECT type, name FROM tool_calls WHERE chat_id = :c ORDER BY message_position", computer
        ) == [
            ("computer_call", "computer"),
            ("local_shell_call", "local_shell"),
            ("mcp_list_tools", "mcp_list_tools"),
            ("mcp_approval_request", "roll"),
            ("mcp_call", "roll"),
        ]
        # Text in the text columns: the reasoning summary and the answers are searchable.
        texts = "SELECT type, text FROM content_parts WHERE chat_id = :c AND text IS NOT NULL ORDER BY message_position, position"
        assert rows(texts, conversation)[1:3] == [
            ("summary_text", "**Looking at the image**\n\nA basketball player is going for a layup."),
            ("output_text", "Arr, a basketball player layin' it up, says the log of LeBron James."),
        ]
        usage = "SELECT model, finish_reason, prompt_tokens, completion_tokens, total_tokens FROM messages WHERE chat_id = :c AND prompt_tokens IS NOT NULL"
        assert rows(usage, response) == [("gpt-5-2025-08-07", "completed", 36, 87, 123)]
    assert archive.get(response).model == "gpt-5-2025-08-07"
    assert archive.get(response).created_at is not None
    assert archive.get(response).created_at.timestamp() == 1741476542  # type: ignore[union-attr]


def test_record_response_from_a_dict_an_sdk_object_and_stream_events(repo: ChatRepository) -> None:
    response = sample("response-built-in-tools")
    repo.save({"chat_id": "r", "messages": [{"role": "user", "content": "Good news?"}]})
    first = repo.record_response("r", response)
    second = repo.record_response("r", Response.model_validate(response))
    third = repo.record_response("r", events_of(response))
    assert [len(batch) for batch in (first, second, third)] == [5, 5, 5]
    stored = repo.get("r").messages
    assert stored[1:] == [*first, *second, *third]
    for batch in (first, second, third):
        last = batch[-1]
        assert last.usage is not None
        assert (last.usage.prompt_tokens, last.usage.completion_tokens, last.finish_reason) == (
            36,
            87,
            "completed",
        )
        assert (last.model_extra or {})["response_id"] == response["id"]
        assert [openai_responses.to_items(message)[0] for message in batch] == response["output"]
    with pytest.raises(InvalidDocument, match="object") as caught:
        repo.record_response("r", {"object": "chat.completion", "choices": []})
    assert caught.value.chat_id == "r"
    with pytest.raises(InvalidDocument, match="no output items"):
        repo.record_response("r", {**response, "output": []})
    assert len(repo.get("r").messages) == 16  # nothing appended by the refused ones


def test_items_convert_to_chat_completions_and_chats_to_items() -> None:
    messages = formats.export(formats.to_document(sample("input-conversation")), "chat-completions")
    validate_chat_completions(messages)
    # Reasoning is left out; the refusal and the answer after it are one assistant turn.
    assert [m["role"] for m in messages] == [
        "developer",
        "user",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
    ]
    assert [call["id"] for m in (messages[4], messages[6]) for call in m["tool_calls"]] == [
        "call_12345xyz",
        "call_custom_1",
    ]
    assert messages[8]["content"] == [
        {"type": "refusal", "refusal": "I cannot read Bob's replies."},
        {"type": "text", "text": "Done: 14 degrees, and Bob has it."},
    ]
    assert messages[2]["content"] == [
        {"type": "text", "text": "Arr, a basketball player layin' it up, says the log of LeBron James."}
    ]
    assert messages[1]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": sample("input-conversation")[1]["content"][1]["image_url"], "detail": "auto"},
    }
    # A chat-completions chat as input items the Responses API takes.
    line = format_sample("openai-finetune", "tool-answered")
    items = formats.export(formats.to_document({"messages": line["messages"]}), "openai-responses")
    validate(ResponseInputParam, items)
    assert [item.get("type", item.get("role")) for item in items] == [
        "system",
        "user",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "assistant",
    ]


def test_input_audio_and_unknown_items_are_kept() -> None:
    items = [
        {
            "role": "user",
            "content": [{"type": "input_audio", "input_audio": {"data": "UklGRg==", "format": "wav"}}],
        },
        {"type": "compaction", "id": "cmp_1", "encrypted_content": "gAAAA"},
        {"type": "item_reference", "id": "msg_1"},
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [],
            "content": [{"type": "reasoning_text", "text": "hm"}],
        },
    ]
    document = formats.to_document(copy.deepcopy(items))
    assert [m.role for m in document.messages] == ["user", "compaction", "item_reference", "reasoning"]
    assert json.loads(json.dumps(formats.export(document, "openai-responses"))) == items
