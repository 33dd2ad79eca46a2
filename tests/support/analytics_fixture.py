"""Four chats whose every statistic is known, for the views, analytics and ready queries.

    chat      user  model  workflow  created (UTC)      messages  tool calls                 feedback
    alpha     u1    m1     qa        2026-03-02 10:00   7         search (answered),         +1 on its last answer
                                                                  calc (unanswered)
    beta      u1    m2     qa        2026-03-03 09:00   2         -                          -1 (chat)
    gamma     u2    m1     cleanup   2026-03-10 12:00   4         lookup (legacy, answered)  -
    delta     u2    m1     (none)    2026-03-10 23:30   5         search, search (answered)  +1, 0 (chat)

beta's user message has a text and an image part; delta's first user message
has two text parts. Token usage: alpha 100+20, 300+40; beta 50+10; delta 10+5.
"""

from __future__ import annotations

from typing import Any


def _call(call_id: str, name: str, arguments: str) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def _at(day: str, time: str) -> str:
    return f"2026-03-{day}T{time}:00Z"


ALPHA: dict[str, Any] = {
    "chat_id": "alpha",
    "user_id": "u1",
    "model": "m1",
    "workflow": {"name": "qa"},
    "created_at": _at("02", "10:00"),
    "updated_at": _at("02", "10:10"),
    "messages": [
        {"role": "system", "content": "Answer lab questions.", "created_at": _at("02", "10:00")},
        {"role": "user", "content": "Why are there nonspecific PCR bands?", "created_at": _at("02", "10:01")},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [_call("a1", "search", '{"q": "pcr bands"}')],
            "created_at": _at("02", "10:02"),
        },
        {"role": "tool", "tool_call_id": "a1", "content": "primer dimers", "created_at": _at("02", "10:03")},
        {
            "role": "assistant",
            "content": "Probably primer dimers.",
            "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120},
            "created_at": _at("02", "10:04"),
        },
        {"role": "user", "content": "What annealing temperature then?", "created_at": _at("02", "10:05")},
        {
            "role": "assistant",
            "content": "Let me calculate.",
            "uid": "alpha-last",
            "tool_calls": [_call("a2", "calc", '{"tm": 62}')],
            "usage": {"prompt_tokens": 300, "completion_tokens": 40, "total_tokens": 340},
            "created_at": _at("02", "10:06"),
        },
    ],
    "feedback": [{"message_uid": "alpha-last", "score": 1, "created_at": _at("02", "10:07")}],
}

BETA: dict[str, Any] = {
    "chat_id": "beta",
    "user_id": "u1",
    "model": "m2",
    "workflow": {"name": "qa"},
    "created_at": _at("03", "09:00"),
    "messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "What is on this gel image?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/gel.png"}},
            ],
            "created_at": _at("03", "09:00"),
        },
        {
            "role": "assistant",
            "content": "A ladder and two bands.",
            "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60},
            "created_at": _at("03", "09:01"),
        },
    ],
    "feedback": [{"score": -1, "label": "wrong", "created_at": _at("03", "09:05")}],
}

GAMMA: dict[str, Any] = {
    "chat_id": "gamma",
    "user_id": "u2",
    "model": "m1",
    "workflow": {"name": "cleanup"},
    "created_at": _at("10", "12:00"),
    "messages": [
        {"role": "user", "content": "Clean up plate 7.", "created_at": _at("10", "12:00")},
        {
            "role": "assistant",
            "content": None,
            "function_call": {"name": "lookup", "arguments": '{"plate": 7}'},
            "created_at": _at("10", "12:01"),
        },
        {
            "role": "function",
            "name": "lookup",
            "content": "plate 7: 96 wells",
            "created_at": _at("10", "12:02"),
        },
        {"role": "assistant", "content": "Plate 7 has 96 wells.", "created_at": _at("10", "12:03")},
    ],
}

DELTA: dict[str, Any] = {
    "chat_id": "delta",
    "user_id": "u2",
    "model": "m1",
    "created_at": _at("10", "23:30"),
    "messages": [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Compare buffers"}, {"type": "text", "text": "A and B."}],
            "created_at": _at("10", "23:30"),
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [_call("d1", "search", '"buffer A"'), _call("d2", "search", '"buffer B"')],
            "created_at": _at("10", "23:31"),
        },
        {"role": "tool", "tool_call_id": "d1", "content": "A: Tris", "created_at": _at("10", "23:32")},
        {"role": "tool", "tool_call_id": "d2", "content": "B: HEPES", "created_at": _at("11", "00:10")},
        {
            "role": "assistant",
            "content": "Tris versus HEPES.",
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
            "created_at": _at("11", "00:11"),
        },
    ],
    "feedback": [
        {"score": 1, "created_at": _at("11", "00:20")},
        {"score": 0, "created_at": _at("11", "00:21")},
    ],
}

CHATS: list[dict[str, Any]] = [ALPHA, BETA, GAMMA, DELTA]


#: A chat with branches (kept out of CHATS, whose answers count linear chats):
#: a question answered three times, the second answer kept and followed up.
EPSILON: dict[str, Any] = {
    "chat_id": "epsilon",
    "user_id": "u3",
    "model": "m2",
    "created_at": _at("12", "08:00"),
    "messages": [
        {"role": "user", "content": "Which polymerase?", "uid": "e-q", "created_at": _at("12", "08:00")},
        {"role": "assistant", "content": "Taq.", "uid": "e-a1", "created_at": _at("12", "08:01")},
        {
            "role": "assistant",
            "content": "Q5, for fidelity.",
            "uid": "e-a2",
            "parent": "e-q",
            "created_at": _at("12", "08:02"),
        },
        {
            "role": "assistant",
            "content": "Phusion.",
            "uid": "e-a3",
            "parent": "e-q",
            "created_at": _at("12", "08:03"),
        },
        {
            "role": "user",
            "content": "Why?",
            "uid": "e-q2",
            "parent": "e-a2",
            "created_at": _at("12", "08:04"),
        },
        {"role": "assistant", "content": "It proofreads.", "uid": "e-b1", "created_at": _at("12", "08:05")},
    ],
    "feedback": [
        {"message_uid": "e-a1", "score": -1, "label": "too short", "created_at": _at("12", "08:06")}
    ],
}
