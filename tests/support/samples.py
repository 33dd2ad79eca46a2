"""Realistic records of every format, shared by the format tests."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

from openai.types.chat import ChatCompletionChunk

#: The format samples: tests/data/formats/<format>/<name>.json.
FORMAT_SAMPLES = Path(__file__).parents[1] / "data" / "formats"


def format_sample(format: str, name: str) -> Any:
    """The sample ``name`` of ``format``, parsed."""
    return json.loads((FORMAT_SAMPLES / format / f"{name}.json").read_text(encoding="utf-8"))


MASTERBRAIN: dict[str, Any] = {
    "chat_id": "mb-1",
    "user_id": "u-7",
    "title": "PCR troubleshooting",
    "start_time": "2026-03-01T08:00:00+08:00",
    "end_time": None,
    "active": True,
    "deleted": False,
    "model": {"name": "qwen3-235b", "enable_thinking": True, "temperature": 0.3},
    "system_message_name": "lab_assistant_v2",
    "function_names": ["airalogy_search"],
    "scenario": {"protocol_id": "pcr-basic", "step": 4},
    "scenario_messages": [{"role": "system", "content": "You help with protocol pcr-basic."}],
    "main_messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Bands?"},
                {"type": "image_url", "image_url": "https://x/gel.png"},
            ],
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "airalogy_search"},
                    "arguments": '{"q": "bands"}',
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"r": "primer dimers"}'},
        {"role": "assistant", "content": "Primer dimers, probably."},
    ],
    "human_feedback": [None, None, None, {"score": 1, "additional": "spot on"}],
}


MALEVICH: list[dict[str, Any]] = [
    {
        "uid": "m-1",
        "created_at": "2026-02-01T10:00:00+00:00",
        "updated_at": None,
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
        "updated_at": "2026-02-01T10:00:03+00:00",
        "role": "assistant",
        "content": [{"type": "text", "text": "Thinking"}, {"type": "reasoning", "summary": ["step 1"]}],
        "completed": False,
        "is_intent": False,
        "is_tool_extra_message": False,
        "is_helper_message": True,
        "is_reasoning": True,
        "tool_call_id": "call-9",
        "trace": {"spans": [1, 2]},
    },
]


def instants(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            k: datetime.fromisoformat(v.replace("Z", "+00:00"))
            if k in ("created_at", "updated_at") and v
            else v
            for k, v in m.items()
        }
        for m in messages
    ]


SHAREGPT: dict[str, Any] = {
    "id": "sg-1",
    "system": "Be kind.",
    "conversations": [
        {"from": "system", "value": "You are a lab assistant."},
        {"from": "human", "value": "What is a ladder?"},
        {"from": "gpt", "value": "A set of DNA fragments of known sizes.", "weight": 1},
        {"from": "function_call", "value": '{"name": "search"}'},
        {"from": "observation", "value": "results"},
        {"from": "user", "value": "Thanks"},
    ],
}


def node(
    node_id: str,
    parent: str | None,
    children: list[str],
    role: str | None,
    text: str | None,
    at: float = 0,
    **message_fields: Any,
) -> dict[str, Any]:
    message = None
    if role is not None:
        message = {
            "id": f"msg-{node_id}",
            "author": {"role": role, "name": None, "metadata": {}},
            "create_time": at,
            "content": {"content_type": "text", "parts": [text]},
            "metadata": {},
            **message_fields,
        }
    return {"id": node_id, "message": message, "parent": parent, "children": children}


CHATGPT: dict[str, Any] = {
    "title": "Gel question",
    "create_time": 1767225600.5,
    "update_time": 1767225700.25,
    "conversation_id": "conv-1",
    "id": "conv-1",
    "is_archived": False,
    "moderation_results": [],
    "current_node": "a2",
    "mapping": {
        "root": node("root", None, ["sys"], None, None),
        "sys": node(
            "sys",
            "root",
            ["u1"],
            "system",
            "",
            metadata={"is_visually_hidden_from_conversation": True},
            create_time=None,
        ),
        "u1": {
            **node("u1", "sys", ["a1", "a2"], "user", "Why two bands?", 1767225601.1234567),
            "node_note": "kept",
        },
        "a1": node(
            "a1",
            "u1",
            [],
            "assistant",
            "First answer (regenerated).",
            1767225602,
            status="finished_successfully",
        ),
        "a2": node(
            "a2",
            "u1",
            ["c2"],
            "assistant",
            "Second answer.",
            1767225603,
            metadata={"model_slug": "gpt-4o", "citations": [{"start_ix": 0}]},
            end_turn=True,
            weight=1.0,
            recipient="all",
        ),
    },
}


CHATGPT["mapping"]["c2"] = {
    "id": "c2",
    "message": {
        "id": "msg-c2",
        "author": {"role": "assistant", "name": None, "metadata": {"x": 1}},
        "create_time": 1767225604.0,
        "content": {"content_type": "code", "language": "python", "text": "print(2)"},
        "metadata": {},
    },
    "parent": "a2",
    "children": ["u3"],
}


CHATGPT["mapping"]["u3"] = {
    "id": "u3",
    "message": {
        "id": "msg-u3",
        "author": {"role": "user"},
        "content": {
            "content_type": "multimodal_text",
            "parts": [
                {"content_type": "image_asset_pointer", "asset_pointer": "file-service://f1"},
                "This gel?",
            ],
        },
    },
    "parent": "c2",
    "children": [],
}


CHATGPT["current_node"] = "u3"


COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1767225600,
    "model": "gpt-4o-2024-08-06",
    "system_fingerprint": "fp_1",
    "service_tier": "default",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Primer dimers.", "refusal": None},
            "finish_reason": "stop",
            "logprobs": None,
        },
        {
            "index": 1,
            "message": {"role": "assistant", "content": "Contamination.", "refusal": None},
            "finish_reason": "length",
            "logprobs": None,
        },
    ],
    "usage": {
        "prompt_tokens": 20,
        "completion_tokens": 4,
        "total_tokens": 24,
        "prompt_tokens_details": {"cached_tokens": 0},
    },
}


def completion_chunk(
    delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None
) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate(
        {
            "id": "chatcmpl-2",
            "object": "chat.completion.chunk",
            "created": 1767225601,
            "model": "gpt-4o",
            "system_fingerprint": "fp_2",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta is not None else [],
            "usage": usage,
        }
    )


MODERATION = {
    "input": {"type": "moderation_results", "model": "omni-moderation", "results": []},
    "output": {"type": "moderation_results", "model": "omni-moderation", "results": []},
}


#: Every shape an OpenAI chat-completions message can take, and some that break the spec.
OPENAI_VARIANTS: list[dict[str, Any]] = [
    {"role": "user", "content": "hello"},
    {"role": "assistant", "content": ""},
    {"role": "assistant", "content": None},
    {"role": "assistant"},
    {"role": "user", "content": []},
    {
        "role": "user",
        "content": [{"type": "text", "text": "a"}, {"type": "image_url", "image_url": "https://x/i.png"}],
    },
    {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "https://x", "detail": "high"}}],
    },
    {
        "role": "user",
        "content": [{"type": "input_audio", "input_audio": {"data": "AAA=", "format": "mp3"}}],
    },
    {"role": "user", "content": [{"type": "file", "file": {"file_id": "file-1", "filename": "a.pdf"}}]},
    {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}]},
    {"role": "user", "content": [{"type": "hologram", "depth": [1, 2], "text": 3}]},
    {"role": "assistant", "content": None, "refusal": "I can't.", "audio": {"id": "audio_1"}},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{not json"}},
            {"id": "c2", "type": "custom", "custom": {"name": "g", "input": "free text"}},
            {"function": {"name": "h"}, "arguments": "{}"},
            {"id": "c3", "type": "function", "function": {"name": "k", "arguments": {"as": "object"}}},
            {"id": 4, "type": None, "function": "not an object"},
        ],
    },
    {"role": "assistant", "content": None, "function_call": {"name": "f", "arguments": "{}"}},
    {"role": "function", "name": "f", "content": "42"},
    {"role": "tool", "tool_call_id": "c1", "content": "ok"},
    {"role": "user", "tool_call_id": "odd-but-kept", "content": "x"},
    {"role": "critic", "content": "any role string is kept"},
    {"role": "assistant", "content": "x", "tool_calls": None, "function_call": None, "refusal": None},
    {
        "role": "user",
        "content": "x",
        "is_intent": True,
        "is_helper_message": False,
        "nested": {"a": [1, None]},
    },
    {"role": "user", "content": "nul \x00 and private use \ue000\ue002 and emoji 😀"},
    {"role": "assistant", "content": "x", "tool_calls": []},
]
