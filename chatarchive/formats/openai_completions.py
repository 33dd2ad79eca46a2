"""Chat completions from the OpenAI API, whole or streamed, as archive messages.

A completion (a dict, or an object of the official ``openai`` package, which
chatarchive does not depend on) becomes the assistant message of one choice,
with the archive's per-message ``model``, ``finish_reason`` and ``usage``, the
response's ``id`` (as ``response_id``) and ``created`` time, and every other key
of the completion and of the choice (``system_fingerprint``, ``service_tier``,
``moderation``, ``metadata``, ``logprobs``...) kept on the message under its own
name (``object``, always ``chat.completion``, is not). A completion with several
choices (``n > 1``) records one: ``choice`` picks it (the first by default),
and its ``choice_index`` is kept; record another choice with another call. A
choice without an ``index`` is the one at its place in ``choices``.

A list of streamed chunks (``chat.completion.chunk``) is first assembled into
the completion it amounts to: content and refusal fragments joined, tool calls
gathered by their index with their argument fragments joined in order, the
last finish reason, the usage of the final chunk (``stream_options``), logprobs
gathered, and any other part of a delta (``audio``...) put together as
OpenAI's own stream helper does: text joined (ids and types excepted), objects
merged, lists extended. The chunks' ``obfuscation`` padding is dropped.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from chatarchive._arguments import is_whole_number
from chatarchive._document import ChatDocument
from chatarchive._exceptions import InvalidArgument, InvalidDocument

from ._format import Format
from ._seconds import time_of
from ._shapes import array, json_object, plain, text

__all__ = ["FORMATS", "assemble_chunks", "is_chunk", "looks_like", "message_from_completion", "to_document"]


def is_chunk(data: Any) -> bool:
    return isinstance(data, dict) and data.get("object") == "chat.completion.chunk"


def looks_like(data: Any) -> bool:
    """A chat completion, a streamed chunk, or a list of chunks."""
    if isinstance(data, list):
        return bool(data) and all(is_chunk(item) for item in data)
    return is_chunk(data) or (isinstance(data, dict) and data.get("object") == "chat.completion")


def to_document(data: Any) -> ChatDocument:
    """A chat of one message: the assistant message of the completion's first
    choice (of the completion the chunks amount to), as ``record_completion``
    appends it; the completion's model is the chat's. Import only: the
    message is stored as ``record_completion`` stores it."""
    if not looks_like(data):
        raise InvalidDocument(
            'a chat completion has "object": "chat.completion"; its stream, chunks of "chat.completion.chunk"'
        )
    message = message_from_completion([data] if is_chunk(data) else data)
    document: dict[str, Any] = {"messages": [message]}
    if isinstance(message.get("model"), str):
        document["model"] = message["model"]
    return ChatDocument.parse(document)


def message_from_completion(completion: Any, *, choice: int = 0) -> dict[str, Any]:
    """The assistant message of one choice of a completion (or of a list of
    streamed chunks), ready for ``ChatRepository.append``."""
    if not is_whole_number(choice):
        raise InvalidArgument(
            f"choice must be a whole number, not {type(choice).__name__}", argument="choice"
        )
    if isinstance(completion, (list, tuple)):
        completion = assemble_chunks(completion)
    data = plain(completion, "a chat completion")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise InvalidDocument("the completion has no choices", field="choices")
    # A choice without an index (some OpenAI-compatible servers leave it out) is
    # the one at its place in the list, as a streamed chunk's choice is choice 0.
    picked = next(
        (
            item
            for position, item in enumerate(choices)
            if isinstance(item, dict) and item.get("index", position) == choice
        ),
        None,
    )
    if picked is None:
        raise InvalidDocument(f"the completion has no choice {choice}", field="choices")
    message = picked.get("message")
    if not isinstance(message, dict):
        raise InvalidDocument("the choice has no message", field=f"choices[{choice}].message")
    result: dict[str, Any] = dict(message)
    result.setdefault("role", "assistant")
    mapped = {
        "model": data.get("model"),
        "finish_reason": picked.get("finish_reason"),
        "usage": data.get("usage"),
        "response_id": data.get("id"),
    }
    result.update({key: value for key, value in mapped.items() if value is not None})
    for source, own in ((picked, _CHOICE_KEYS), (data, _COMPLETION_KEYS)):
        for key, value in source.items():
            if key not in own and value is not None:
                result.setdefault(key, value)
    if len(choices) > 1:
        result["choice_index"] = choice
    created = time_of(data.get("created"), "created")
    if created is not None:
        result["created_at"] = created
    return result


#: Keys of a completion, and of a choice, that the message takes in its own way.
_COMPLETION_KEYS = frozenset({"id", "object", "created", "model", "usage", "choices"})
_CHOICE_KEYS = frozenset({"index", "message", "finish_reason"})
#: Keys of a chunk, of its choices and of their deltas that assemble_chunks reads one by one.
_CHUNK_KEYS = frozenset({"object", "usage", "choices", "obfuscation"})
_CHUNK_CHOICE_KEYS = frozenset({"index", "delta", "finish_reason", "logprobs"})
_DELTA_KEYS = frozenset({"role", "content", "refusal", "tool_calls", "function_call"})


def assemble_chunks(chunks: Iterable[Any]) -> dict[str, Any]:
    """The completion a stream of ``chat.completion.chunk`` objects amounts to.

    Raises:
        InvalidDocument: a chunk of another shape, naming it (``chunks[3].choices[0].delta``).
    """
    completion: dict[str, Any] = {"object": "chat.completion"}
    choices: dict[int, dict[str, Any]] = {}
    for number, raw in enumerate(chunks):
        chunk = plain(raw, "a chat completion chunk")
        for key, value in chunk.items():
            if key not in _CHUNK_KEYS and value is not None:
                completion.setdefault(key, value)
        if chunk.get("usage") is not None:
            completion["usage"] = chunk["usage"]
        for position, part in enumerate(array(chunk.get("choices"), f"chunks[{number}].choices")):
            where = f"chunks[{number}].choices[{position}]"
            part = json_object(part, where)
            index = part.get("index", 0)
            if type(index) is not int:
                raise InvalidDocument("a choice's index must be a whole number", field=f"{where}.index")
            state = choices.setdefault(
                index, {"content": [], "refusal": [], "tool_calls": {}, "role": None, "other": {}}
            )
            delta = json_object(part.get("delta"), f"{where}.delta", optional=True)
            for key, value in delta.items():
                if key not in _DELTA_KEYS and value is not None:
                    _accumulate(state["other"], key, value)
            for key, value in part.items():
                if key not in _CHUNK_CHOICE_KEYS and value is not None:
                    state.setdefault("choice", {})[key] = value
            if delta.get("role"):
                state["role"] = delta["role"]
            for key in ("content", "refusal"):
                if delta.get(key) is not None:
                    state[key].append(text(delta[key], f"{where}.delta.{key}"))
            fragments = array(delta.get("tool_calls"), f"{where}.delta.tool_calls")
            for offset, fragment in enumerate(fragments):
                _merge_tool_call(state["tool_calls"], fragment, f"{where}.delta.tool_calls[{offset}]")
            if delta.get("function_call"):
                function = json_object(delta["function_call"], f"{where}.delta.function_call")
                call = state.setdefault("function_call", {"name": "", "arguments": ""})
                for key in ("name", "arguments"):
                    call[key] += text(function.get(key) or "", f"{where}.delta.function_call.{key}")
            if part.get("finish_reason") is not None:
                state["finish_reason"] = part["finish_reason"]
            if part.get("logprobs") is not None:
                _accumulate(state, "logprobs", part["logprobs"])
    completion["choices"] = [_choice(index, state) for index, state in sorted(choices.items())]
    return completion


class _Fragments(list[str]):
    """Pieces of a streamed text, joined once the stream is assembled."""


def _accumulate(into: dict[str, Any], key: str, value: Any) -> None:
    """Add a streamed fragment to what came before under ``key``: text joined
    (but an ``id`` or a ``type`` is replaced), objects merged key by key, lists
    extended, anything else replaced."""
    before = into.get(key)
    if isinstance(value, str) and key not in ("id", "type"):
        if isinstance(before, _Fragments):
            before.append(value)
        else:
            into[key] = _Fragments([before, value] if isinstance(before, str) else [value])
    elif isinstance(value, dict):
        merged = into[key] = before if isinstance(before, dict) else {}
        for name, item in value.items():
            if item is not None:
                _accumulate(merged, name, item)
    elif isinstance(value, list) and isinstance(before, list):
        before.extend(value)
    else:
        into[key] = list(value) if isinstance(value, list) else value


def _assembled(value: Any) -> Any:
    if isinstance(value, _Fragments):
        return "".join(value)
    if isinstance(value, dict):
        return {key: _assembled(item) for key, item in value.items()}
    return value


def _merge_tool_call(calls: dict[int, dict[str, Any]], fragment: Any, where: str) -> None:
    fragment = json_object(fragment, where)
    index = fragment.get("index", len(calls))
    if type(index) is not int:
        raise InvalidDocument("a tool call's index must be a whole number", field=f"{where}.index")
    call = calls.setdefault(index, {"function": {"name": "", "arguments": ""}})
    if fragment.get("id"):
        call["id"] = fragment["id"]
    if fragment.get("type"):
        call["type"] = fragment["type"]
    function = json_object(fragment.get("function"), f"{where}.function", optional=True)
    for key in ("name", "arguments"):
        if function.get(key):
            call["function"][key] += text(function[key], f"{where}.function.{key}")


def _choice(index: int, state: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {"role": state["role"] or "assistant", **_assembled(state["other"])}
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
    choice: dict[str, Any] = {
        **state.get("choice", {}),
        "index": index,
        "message": message,
        "finish_reason": state.get("finish_reason"),
    }
    if "logprobs" in state:
        choice["logprobs"] = _assembled(state["logprobs"])
    return choice


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="openai-completion",
        what="a chat completion, or its streamed chunks",
        round_trip="import only: the answer",
        family="model API",
        detection=40,
        looks_like=looks_like,
        to_document=to_document,
        record="record_completion",
    ),
)
