"""Pydantic AI's message history: a list of ``ModelRequest`` and
``ModelResponse`` objects, as its ``ModelMessagesTypeAdapter`` writes them
to JSON (``{"kind": "request" | "response", "parts": [...], ...}``).

Each part is stored where the archive keeps its meaning:

- a request's parts are a message each: ``system-prompt`` a ``system``
  message, ``user-prompt`` a ``user`` message (its content a string, or
  parts: text, and ``image-url`` as an ``image_url`` part; other media kept as
  parts of their kind), ``tool-return`` a ``tool`` message answering its
  ``tool_call_id`` and named by ``tool_name``, ``retry-prompt`` and ``retry-feedback``
  a ``tool`` message when they answer a call and a ``user`` message when not; content
  that is not a string (a tool's return value, a retry's errors) is its JSON
  text, so that search finds it;
- a response is one ``assistant`` message: ``text`` parts are text parts,
  ``thinking`` parts ``thinking`` parts (their text searchable), ``tool-call``
  parts its tool calls (``tool_call_id``, ``tool_name``, ``args`` as the
  ``arguments`` JSON text), other parts (built-in tool calls and returns,
  files) kept as parts of their kind; its ``usage`` is the message's
  (``input_tokens`` as ``prompt_tokens``, ``output_tokens`` as
  ``completion_tokens``, the other counts beside them), ``model_name`` its
  model, ``finish_reason`` its finish reason;
- each part's other keys, and each request's and response's own keys
  (``timestamp``, ``run_id``, ``instructions``, ``provider_name``...), are kept
  under ``pydantic_ai``; the timestamp is also each message's ``created_at``.

Export gives back the same list, JSON-equal; a chat of another format is
written as the requests and responses of the same meaning.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from chatarchive._document import ChatDocument, ContentPart, Message, ToolCall, ToolFunction
from chatarchive._exceptions import InvalidDocument

from ._format import Format
from ._shapes import Block, array, interleaved, json_object, kept, runs, usage_back, usage_in_archive

__all__ = ["FORMATS", "KEY", "from_document", "looks_like", "to_document"]

KEY = "pydantic_ai"

#: Request parts that answer the model: a tool's return (``tool`` messages),
#: a retry (a ``tool`` message when it answers a call, else a ``user`` one).
_ANSWERS = frozenset({"tool-return", "retry-prompt", "retry-feedback"})


def looks_like(data: Any) -> bool:
    """A non-empty list of objects, each a ``request`` or ``response`` with ``parts``."""
    return (
        isinstance(data, list)
        and bool(data)
        and all(
            isinstance(item, dict)
            and item.get("kind") in ("request", "response")
            and isinstance(item.get("parts"), list)
            for item in data
        )
    )


def to_document(data: Any) -> ChatDocument:
    if not looks_like(data):
        raise InvalidDocument(
            'Pydantic AI messages are a list of {"kind": "request" | "response", "parts": [...]}'
        )
    messages = [
        message
        for index, record in enumerate(data)
        for message in _messages(json_object(record, f"[{index}]"), f"[{index}]")
    ]
    return ChatDocument.parse({"messages": messages})


def _messages(record: dict[str, Any], where: str) -> list[dict[str, Any]]:
    parts = array(record.get("parts"), f"{where}.parts")
    if record["kind"] == "request":
        made = [
            _request_part(json_object(part, f"{where}.parts[{i}]"), where) for i, part in enumerate(parts)
        ]
        if not made:
            made = [{"role": "user", KEY: {"empty": True}}]
        for later in made[1:]:
            later[KEY]["continues"] = True
    else:
        blocks = [_response_block(json_object(part, f"{where}.parts[{i}]")) for i, part in enumerate(parts)]
        made = runs("assistant", blocks, KEY)
        (answer,) = made  # a response has no results: its blocks are one run
        if isinstance(record.get("usage"), dict):
            answer["usage"] = usage_in_archive(record["usage"])
        if isinstance(record.get("model_name"), str):
            answer["model"] = record["model_name"]
        if isinstance(record.get("finish_reason"), str):
            answer["finish_reason"] = record["finish_reason"]
    stored_apart = ("parts", "usage") if isinstance(record.get("usage"), dict) else ("parts",)
    envelope = {key: value for key, value in record.items() if key not in stored_apart}
    made[0].setdefault(KEY, {})["message"] = envelope
    moment = _moment(record.get("timestamp"))
    if moment is not None:
        for message in made:
            message["created_at"] = moment
    return made


def _moment(value: Any) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        return None


def _rest(part: dict[str, Any], *taken: str) -> dict[str, Any]:
    return {key: value for key, value in part.items() if key not in taken}


def _as_text(value: Any, hint: dict[str, Any]) -> str:
    """A part's content as text: itself, or (marked ``json``) its JSON."""
    if isinstance(value, str):
        return value
    hint["json"] = True
    return json.dumps(value, ensure_ascii=False)


def _kind(part: dict[str, Any]) -> str | None:
    kind = part.get("part_kind")
    return kind if isinstance(kind, str) and kind else None


def _request_part(part: dict[str, Any], where: str) -> dict[str, Any]:
    kind = _kind(part)
    hint: dict[str, Any] = {"part": _rest(part, "content", "tool_call_id", "tool_name")}
    message: dict[str, Any]
    if kind == "system-prompt":
        message = {"role": "system", "content": _as_text(part.get("content"), hint)}
    elif kind == "user-prompt":
        content = part.get("content")
        message = {"role": "user", "content": content if isinstance(content, str) else _user_parts(content)}
    elif kind in _ANSWERS:
        answers_a_call = kind == "tool-return" or part.get("tool_name") is not None
        message = {
            "role": "tool" if answers_a_call else "user",
            "content": _as_text(part.get("content"), hint),
        }
        if "tool_call_id" in part:
            message["tool_call_id"] = part["tool_call_id"]
        if "tool_name" in part:
            message["name"] = part["tool_name"]
            hint["tool_name"] = part["tool_name"]  # a name may be null, which a message's is not
    elif kind is not None:
        message = {"role": kind}
        hint["part"] = part
    else:
        raise InvalidDocument("a request part has no part_kind", field=f"{where}.parts")
    message[KEY] = hint
    return message


def _user_parts(content: Any) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    for index, item in enumerate(array(content, "content")):
        if isinstance(item, str):
            parts.append({"type": "text", "text": item})
        elif isinstance(item, dict) and item.get("kind") == "image-url" and isinstance(item.get("url"), str):
            parts.append({"type": "image_url", "image_url": {"url": item["url"]}, KEY: _rest(item, "url")})
        elif isinstance(item, dict) and isinstance(item.get("kind"), str):
            parts.append({"type": item["kind"], KEY: _rest(item, "kind")})
        else:
            raise InvalidDocument(
                "a user prompt item is a string or an object with a kind", field=f"content[{index}]"
            )
    return parts


def _response_block(part: dict[str, Any]) -> Block:
    kind = _kind(part)
    if kind in ("text", "thinking") and isinstance(part.get("content"), str):
        return "part", {"type": kind, "text": part["content"], KEY: _rest(part, "content")}
    if kind == "tool-call":
        hint = _rest(part, "tool_call_id", "tool_name", "args")
        function: dict[str, Any] = {"name": part.get("tool_name")}
        if "args" in part:
            function["arguments"] = _as_text(part["args"], hint)
        return "call", {"id": part.get("tool_call_id"), "type": "function", "function": function, KEY: hint}
    if kind is not None:
        return "part", {"type": kind, KEY: _rest(part, "part_kind")}
    raise InvalidDocument("a response part has no part_kind", field="parts")


# -- back --------------------------------------------------------------------------------


def from_document(doc: ChatDocument) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    for message in doc.messages:
        hint = kept(message, KEY)
        if not hint:
            _foreign(message, records)
            continue
        if not hint.get("continues") or not records:
            envelope = hint.get("message")
            records.append({**(envelope if isinstance(envelope, dict) else {}), "parts": []})
        record = records[-1]
        if record.get("kind") == "response":
            record["parts"].extend(_response_parts(message))
            if message.usage is not None:
                record["usage"] = usage_back(message.usage.model_dump(mode="json"))
        elif not hint.get("empty"):
            record["parts"].append(_request_part_back(message, hint))
    return records


def _text_back(value: Any, hint: dict[str, Any]) -> Any:
    if hint.get("json") and isinstance(value, str):
        return json.loads(value)
    return value


def _request_part_back(message: Message, hint: dict[str, Any]) -> dict[str, Any]:
    found = hint.get("part")
    part = dict(found) if isinstance(found, dict) else {}
    kind = _kind(part)
    if kind == "user-prompt":
        content = message.content
        part["content"] = (
            content if not isinstance(content, list) else [_user_part_back(item) for item in content]
        )
    elif kind == "system-prompt" or kind in _ANSWERS:
        part["content"] = _text_back(message.content, hint)
        if "tool_call_id" in message.model_fields_set:
            part["tool_call_id"] = message.tool_call_id
        if "tool_name" in hint:
            part["tool_name"] = hint["tool_name"]
    return part


def _user_part_back(part: ContentPart) -> Any:
    own = kept(part, KEY)
    if part.type == "text" and not own:
        return part.text
    if part.type == "image_url" and isinstance(part.image_url, dict):
        return {**own, "url": part.image_url.get("url")}
    return {**own, "kind": part.type}


def _response_parts(message: Message) -> list[dict[str, Any]]:
    content = message.content if isinstance(message.content, list) else []
    blocks = interleaved(content, message.tool_calls or [], kept(message, KEY).get("calls_at"))
    return [_call_back(block) if isinstance(block, ToolCall) else _part_back(block) for block in blocks]


def _part_back(part: ContentPart) -> dict[str, Any]:
    own = kept(part, KEY)
    if part.type in ("text", "thinking"):
        return {**own, "content": part.text, "part_kind": own.get("part_kind", part.type)}
    return {**own, "part_kind": part.type}


def _call_back(call: ToolCall) -> dict[str, Any]:
    own = kept(call, KEY)
    back = dict(own)
    back.pop("json", None)
    function = call.function if isinstance(call.function, ToolFunction) else None
    back["tool_call_id"] = call.id
    back["tool_name"] = function.name if function is not None else None
    if function is not None and "arguments" in function.model_fields_set:
        back["args"] = _text_back(function.arguments, own)
    return back


def _foreign(message: Message, records: list[dict[str, Any]]) -> None:
    """A message of another format, as the request part or response of the same meaning."""
    text = message.content if isinstance(message.content, str) else _texts(message.content)
    if message.role == "assistant":
        parts: list[dict[str, Any]] = [{"part_kind": "text", "content": text}] if text else []
        for call in message.tool_calls or []:
            function = call.function if isinstance(call.function, ToolFunction) else None
            if function is not None and isinstance(function.name, str):
                arguments = function.arguments if isinstance(function.arguments, str) else "{}"
                parts.append(
                    {
                        "part_kind": "tool-call",
                        "tool_name": function.name,
                        "args": arguments,
                        "tool_call_id": call.id,
                    }
                )
        records.append({"kind": "response", "parts": parts})
        return
    part: dict[str, Any]
    if message.role in ("system", "developer"):
        part = {"part_kind": "system-prompt", "content": text}
    elif message.role == "tool":
        part = {
            "part_kind": "tool-return",
            "tool_name": message.name or "",
            "content": text,
            "tool_call_id": message.tool_call_id,
        }
    elif message.role == "user":
        part = {"part_kind": "user-prompt", "content": text}
    else:  # reasoning and other roles the request and response shapes have no place for
        return
    if not records or records[-1].get("kind") != "request":
        records.append({"kind": "request", "parts": []})
    records[-1]["parts"].append(part)


def _texts(content: list[ContentPart] | None) -> str:
    return "".join(part.text for part in content or [] if part.type == "text" and isinstance(part.text, str))


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="pydantic-ai",
        what="Pydantic AI messages, as ModelMessagesTypeAdapter writes them",
        round_trip="JSON-equal",
        family="agent framework",
        detection=110,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
    ),
)
