"""LangChain messages: a list in the shape of ``messages_to_dict`` or of ``dumpd``.

``messages_to_dict`` writes ``{"type": "ai", "data": {...}}`` for each
message, and ``dumpd`` ``{"lc": 1, "type": "constructor", "id": [...,
"AIMessage"], "kwargs": {...}}``; a list of either is one chat. Each message
is one of the archive's:

- its type is the role: ``human`` is ``user``, ``ai`` is ``assistant``,
  ``system``, ``tool`` and ``function`` are themselves, and a ``chat``
  message's ``role`` is its role (chunks, ``AIMessageChunk``..., are their
  message's type);
- ``content`` (a string, or a list of content blocks) is the message's;
  ``name`` and a tool message's ``tool_call_id`` are the message's own;
- ``tool_calls`` (``name``, ``args``, ``id``) are its tool calls, of type
  ``function``, ``args`` as the ``arguments`` JSON text; ``invalid_tool_calls``
  (whose ``args`` are text that did not parse) are tool calls too, marked
  ``invalid`` with their ``error``;
- ``usage_metadata`` is its ``usage`` (``input_tokens`` as ``prompt_tokens``,
  ``output_tokens`` as ``completion_tokens``, ``total_tokens``: the token
  columns; the details kept beside them), and ``response_metadata``'s
  ``model_name`` (or ``model``) and ``finish_reason`` are its model and finish
  reason;
- ``id``, ``additional_kwargs``, ``response_metadata``, ``artifact``,
  ``status`` and any other key are kept on it.

Export gives back the same shape, JSON-equal; a message of another format is
written as the LangChain message of its role.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from chatarchive._document import ChatDocument, Message, ToolCall, ToolFunction
from chatarchive._exceptions import InvalidDocument

from ._format import Format
from ._shapes import array, json_object, kept, usage_back, usage_in_archive

__all__ = ["FORMATS", "KEY", "from_document", "from_messages", "looks_like", "to_document", "to_messages"]

KEY = "langchain"

#: LangChain's message types, by the archive's role of the same meaning.
_ROLES = {"human": "user", "ai": "assistant", "system": "system", "tool": "tool", "function": "function"}
_TYPES = {role: kind for kind, role in _ROLES.items()}
#: The classes ``dumpd`` names, by message type.
_CLASSES = {
    "human": "HumanMessage",
    "ai": "AIMessage",
    "system": "SystemMessage",
    "tool": "ToolMessage",
    "function": "FunctionMessage",
    "chat": "ChatMessage",
}
_KINDS = {name: kind for kind, name in _CLASSES.items()}
#: Keys of a message's data that become the archive message's own.
_OWN = ("type", "content", "tool_calls", "invalid_tool_calls", "usage_metadata", "name", "tool_call_id")
#: Keys named like the archive message's fields, kept apart.
_CLASHING = (frozenset(Message.model_fields) - set(_OWN)) | {KEY}


#: Every type a serialized message names (chunks too), by its message type.
_BASE = {
    **{kind: kind for kind in _CLASSES},
    **{f"{name}Chunk": kind for kind, name in _CLASSES.items()},
}


def _envelope(item: Any) -> tuple[str, str, dict[str, Any]] | None:
    """``(shape, type named, data)`` of one serialized message, or ``None``."""
    if not isinstance(item, dict):
        return None
    if item.get("lc") == 1 and item.get("type") == "constructor" and isinstance(item.get("kwargs"), dict):
        path = item.get("id")
        name = path[-1] if isinstance(path, list) and path and isinstance(path[-1], str) else ""
        kind = _KINDS.get(name.removesuffix("Chunk"))
        return None if kind is None else ("dumpd", name, item["kwargs"])
    kind, data = item.get("type"), item.get("data")
    if isinstance(kind, str) and kind in _BASE and isinstance(data, dict):
        return "dict", kind, data
    return None


def looks_like(data: Any) -> bool:
    return isinstance(data, list) and bool(data) and all(_envelope(item) is not None for item in data)


def to_document(data: Any) -> ChatDocument:
    if not looks_like(data):
        raise InvalidDocument(
            'LangChain messages are a list of {"type", "data"} (messages_to_dict) or of dumpd objects'
        )
    return ChatDocument.parse({"messages": to_messages(data)})


def to_messages(data: list[Any]) -> list[dict[str, Any]]:
    """The archive's messages (dicts, not yet checked) of LangChain messages
    as ``messages_to_dict`` or ``dumpd`` writes them, one for each."""
    messages = []
    for index, item in enumerate(data):
        envelope = _envelope(item)
        if envelope is None:
            raise InvalidDocument(
                'a LangChain message is {"type", "data"} (messages_to_dict) or a dumpd object',
                message_index=index,
            )
        shape, kind, fields = envelope
        message = _message(kind, json_object(fields, f"[{index}]"), f"[{index}]")
        hint = message[KEY]
        if shape == "dumpd":
            hint["dumpd"] = item["id"]
            outside = {key: value for key, value in item.items() if key not in ("lc", "type", "id", "kwargs")}
        else:
            outside = {key: value for key, value in item.items() if key not in ("type", "data")}
            if kind != fields.get("type"):
                hint["envelope_type"] = kind
        if outside:
            hint["outside"] = outside
        messages.append(message)
    return messages


def _message(kind: str, data: dict[str, Any], where: str) -> dict[str, Any]:
    own_type = data.get("type", kind)
    named = _BASE.get(kind, _KINDS.get(kind.removesuffix("Chunk"), kind))
    base = _BASE.get(own_type, named) if isinstance(own_type, str) else named
    role = data.get("role") if base == "chat" else _ROLES.get(base, base)
    hint: dict[str, Any] = {"keys": [key for key in data if key in _OWN]}
    message: dict[str, Any] = {"role": role if isinstance(role, str) and role else "unknown"}
    if base == "chat":
        hint["chat"] = True
    for key, value in data.items():
        if key in _OWN:
            continue
        if key in _CLASHING or (key == "role" and base == "chat"):
            if key != "role":
                hint.setdefault("clashing", {})[key] = value
            continue
        message[key] = value
    if "type" in data:
        hint["type"] = data["type"]
    if "content" in data:
        content = data["content"]
        message["content"] = list(content) if isinstance(content, list) else content
    for key in ("name", "tool_call_id"):
        if key in data:
            message[key] = data[key]
    calls = [
        _tool_call(call, key == "invalid_tool_calls", f"{where}.{key}[{index}]")
        for key in ("tool_calls", "invalid_tool_calls")
        for index, call in enumerate(array(data.get(key), f"{where}.{key}"))
    ]
    if calls:
        message["tool_calls"] = calls
    usage = data.get("usage_metadata")
    if isinstance(usage, dict):
        message["usage"] = usage_in_archive(usage)
    elif "usage_metadata" in data:
        hint.setdefault("clashing", {})["usage_metadata"] = usage
    metadata = data.get("response_metadata")
    if isinstance(metadata, dict):
        model = metadata.get("model_name", metadata.get("model"))
        if isinstance(model, str):
            message["model"] = model
        if isinstance(metadata.get("finish_reason"), str):
            message["finish_reason"] = metadata["finish_reason"]
    message[KEY] = hint
    return message


def _tool_call(call: Any, invalid: bool, where: str) -> dict[str, Any]:
    call = json_object(call, where)
    args = call.get("args")
    arguments = args if invalid or not isinstance(args, dict) else json.dumps(args, ensure_ascii=False)
    kept = {key: value for key, value in call.items() if key not in ("id", "name", "args")}
    result: dict[str, Any] = {"type": "function", "function": {"name": call.get("name")}}
    if "args" in call:
        result["function"]["arguments"] = arguments
        if not invalid and not isinstance(args, dict):
            kept["args_kept"] = True
    if "id" in call:
        result["id"] = call["id"]
    result[KEY] = {"invalid": invalid, "call": kept}
    return result


def from_document(doc: ChatDocument) -> list[dict[str, Any]]:
    return from_messages(doc.messages)


def from_messages(messages: Iterable[Message]) -> list[dict[str, Any]]:
    """The archive's messages as LangChain's message dicts (``messages_to_dict``'s)."""
    return [_serialized(message) for message in messages]


def _serialized(message: Message) -> dict[str, Any]:
    hint = kept(message, KEY)
    data = _data(message, hint)
    kind = data.get("type") if isinstance(data.get("type"), str) else _TYPES.get(message.role, "chat")
    found_outside = hint.get("outside")
    outside: dict[str, Any] = found_outside if isinstance(found_outside, dict) else {}
    if isinstance(hint.get("dumpd"), list):
        return {"lc": 1, "type": "constructor", "id": hint["dumpd"], "kwargs": data, **outside}
    envelope = hint.get("envelope_type", kind)
    return {"type": envelope, "data": data, **outside}


def _data(message: Message, hint: dict[str, Any]) -> dict[str, Any]:
    own = hint.get("keys") if isinstance(hint.get("keys"), list) else None
    data: dict[str, Any] = {}
    if "type" in hint:
        data["type"] = hint["type"]
    elif not hint:
        data["type"] = _TYPES.get(message.role, "chat")
    if hint.get("chat") or (not hint and message.role not in _TYPES):
        data["role"] = message.role
    given = message.model_fields_set
    if "content" in given or own is None:
        content = _content_json(message)
        # LangChain's content is never null: a message of another format without text has "".
        data["content"] = "" if content is None and not hint else content
    for key in ("name", "tool_call_id"):
        if key in given:
            data[key] = getattr(message, key)
    valid = [call for call in message.tool_calls or [] if not _call_hint(call).get("invalid")]
    invalid = [call for call in message.tool_calls or [] if _call_hint(call).get("invalid")]
    if own is None or "tool_calls" in own:
        data["tool_calls"] = [_call_back(call, False) for call in valid]
    if own is None or "invalid_tool_calls" in own:
        data["invalid_tool_calls"] = [_call_back(call, True) for call in invalid]
    if message.usage is not None:
        data["usage_metadata"] = usage_back(message.usage.model_dump(mode="json"))
    data.update((key, value) for key, value in (message.model_extra or {}).items() if key != KEY)
    clashing = hint.get("clashing")
    if isinstance(clashing, dict):
        data.update(clashing)
    if own is not None:  # the keys in the order of the original, for readers that care
        ordered = {key: data[key] for key in own if key in data}
        return ordered | data if len(ordered) < len(data) else ordered
    return data


def _content_json(message: Message) -> Any:
    """The message's content as JSON (what ``model_dump`` gives for it, without dumping the rest)."""
    content = message.content
    if isinstance(content, list):
        return [part.model_dump(mode="json") for part in content]
    return content


def _call_hint(call: ToolCall) -> dict[str, Any]:
    return kept(call, KEY)


def _call_back(call: ToolCall, invalid: bool) -> dict[str, Any]:
    hint = _call_hint(call)
    kept: dict[str, Any] = dict(hint.get("call") or {}) if isinstance(hint.get("call"), dict) else {}
    function = call.function if isinstance(call.function, ToolFunction) else None
    result: dict[str, Any] = {"name": function.name if function else None}
    arguments = function.arguments if function else None
    if function is not None and "arguments" in function.model_fields_set:
        if invalid or kept.pop("args_kept", False):
            result["args"] = arguments
        else:
            try:
                result["args"] = json.loads(arguments) if isinstance(arguments, str) else arguments
            except ValueError:
                result["args"] = {"arguments": arguments}
    if "id" in call.model_fields_set:
        result["id"] = call.id
    elif not hint:
        result["id"] = call.id
    if not hint:
        result["type"] = "invalid_tool_call" if invalid else "tool_call"
    result.update(kept)
    return result


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="langchain",
        what="LangChain messages (messages_to_dict or dumpd)",
        round_trip="JSON-equal",
        family="agent framework",
        detection=100,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
    ),
)
