"""Chat completions from the OpenAI API, whole or streamed, as archive messages.

A completion (a dict, or an object of the official ``openai`` package, which
chatarchive does not depend on) becomes the assistant message of one choice,
with the archive's per-message ``model``, ``finish_reason`` and ``usage``, and the
response's ``id`` (as ``response_id``), ``system_fingerprint``, ``service_tier``,
``created`` time and the choice's ``logprobs`` kept. A completion with several
choices (``n > 1``) records one: ``choice`` picks it (the first by default),
and its ``choice_index`` is kept; record another choice with another call.

A list of streamed chunks (``chat.completion.chunk``) is first assembled into
the completion it amounts to: content and refusal fragments joined, tool calls
gathered by their index with their argument fragments joined in order, the
last finish reason, and the usage of the final chunk (``stream_options``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from chatarchive._exceptions import InvalidDocument

from ._seconds import time_of

__all__ = ["assemble_chunks", "message_from_completion"]


def _plain(value: Any) -> Any:
    """A dict from a dict or from a pydantic object of the ``openai`` package."""
    if isinstance(value, dict):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    raise InvalidDocument(
        f"expected a chat completion (a dict or an openai object), not {type(value).__name__}"
    )


def message_from_completion(completion: Any, *, choice: int = 0) -> dict[str, Any]:
    """The assistant message of one choice of a completion (or of a list of
    streamed chunks), ready for :meth:`ChatRepository.append`."""
    if isinstance(completion, (list, tuple)):
        completion = assemble_chunks(completion)
    data = _plain(completion)
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise InvalidDocument("the completion has no choices", field="choices")
    picked = next((item for item in choices if isinstance(item, dict) and item.get("index") == choice), None)
    if picked is None:
        raise InvalidDocument(f"the completion has no choice {choice}", field="choices")
    message = picked.get("message")
    if not isinstance(message, dict):
        raise InvalidDocument("the choice has no message", field=f"choices[{choice}].message")
    result: dict[str, Any] = dict(message)
    result.setdefault("role", "assistant")
    kept = {
        "model": data.get("model"),
        "finish_reason": picked.get("finish_reason"),
        "usage": data.get("usage"),
        "response_id": data.get("id"),
        "system_fingerprint": data.get("system_fingerprint"),
        "service_tier": data.get("service_tier"),
        "logprobs": picked.get("logprobs"),
    }
    result.update({key: value for key, value in kept.items() if value is not None})
    if len(choices) > 1:
        result["choice_index"] = choice
    created = time_of(data.get("created"), "created")
    if created is not None:
        result["created_at"] = created
    return result


def assemble_chunks(chunks: Iterable[Any]) -> dict[str, Any]:
    """The completion a stream of ``chat.completion.chunk`` objects amounts to."""
    completion: dict[str, Any] = {"object": "chat.completion"}
    choices: dict[int, dict[str, Any]] = {}
    for raw in chunks:
        chunk = _plain(raw)
        for key in ("id", "created", "model", "system_fingerprint", "service_tier"):
            if chunk.get(key) is not None:
                completion.setdefault(key, chunk[key])
        if chunk.get("usage") is not None:
            completion["usage"] = chunk["usage"]
        for part in chunk.get("choices") or []:
            index = part.get("index", 0)
            state = choices.setdefault(index, {"content": [], "refusal": [], "tool_calls": {}, "role": None})
            delta = part.get("delta") or {}
            if delta.get("role"):
                state["role"] = delta["role"]
            if delta.get("content") is not None:
                state["content"].append(delta["content"])
            if delta.get("refusal") is not None:
                state["refusal"].append(delta["refusal"])
            for fragment in delta.get("tool_calls") or []:
                _merge_tool_call(state["tool_calls"], fragment)
            if delta.get("function_call"):
                call = state.setdefault("function_call", {"name": "", "arguments": ""})
                call["name"] += delta["function_call"].get("name") or ""
                call["arguments"] += delta["function_call"].get("arguments") or ""
            if part.get("finish_reason") is not None:
                state["finish_reason"] = part["finish_reason"]
            if part.get("logprobs") is not None:
                state.setdefault("logprobs", {"content": []})["content"].extend(
                    (part["logprobs"] or {}).get("content") or []
                )
    completion["choices"] = [_choice(index, state) for index, state in sorted(choices.items())]
    return completion


def _merge_tool_call(calls: dict[int, dict[str, Any]], fragment: dict[str, Any]) -> None:
    index = fragment.get("index", len(calls))
    call = calls.setdefault(index, {"function": {"name": "", "arguments": ""}})
    if fragment.get("id"):
        call["id"] = fragment["id"]
    if fragment.get("type"):
        call["type"] = fragment["type"]
    function = fragment.get("function") or {}
    if function.get("name"):
        call["function"]["name"] += function["name"]
    if function.get("arguments"):
        call["function"]["arguments"] += function["arguments"]


def _choice(index: int, state: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": state["role"] or "assistant"}
    message["content"] = "".join(state["content"]) if state["content"] else None
    if state["refusal"]:
        message["refusal"] = "".join(state["refusal"])
    if state["tool_calls"]:
        message["tool_calls"] = [
            {"id": call.get("id"), "type": call.get("type", "function"), "function": call["function"]}
            for _, call in sorted(state["tool_calls"].items())
        ]
    if "function_call" in state:
        message["function_call"] = state["function_call"]
    choice: dict[str, Any] = {"index": index, "message": message, "finish_reason": state.get("finish_reason")}
    if "logprobs" in state:
        choice["logprobs"] = state["logprobs"]
    return choice
