"""Google Gemini ``contents``: a ``generateContent`` request, or its list of contents.

A request (``contents``, ``systemInstruction``, ``tools``,
``generationConfig``...) is a chat; so is a bare list of contents. The
``systemInstruction`` is its first message, with the role ``system``; ``model``
(when the request names one) is the chat's model and every other key is kept
in its ``model_settings``. Each content (``role`` ``user`` or ``model``, and its
``parts``) becomes messages of the archive, in the shape of OpenAI's chat
completions where the meanings match:

- ``model`` is the role ``assistant``;
- a ``text`` part is a ``text`` part, and a ``thought`` one (``"thought":
  true``, with its ``thoughtSignature``) a ``thought`` part: reasoning, its
  text searchable;
- ``functionCall`` parts are the message's tool calls, of type ``function``
  (their ``args`` as the ``arguments`` JSON text, their ``id`` when they have
  one);
- a ``functionResponse`` part is a message of its own, with the role
  ``tool``: its ``name``, its ``id`` as ``tool_call_id`` and its ``response``
  as the content's JSON text;
- every other part (``inlineData``, ``fileData``, ``executableCode``,
  ``codeExecutionResult``...) is a content part whose type is its key, its
  value kept whole.

Parts in the Python SDK's snake case (``inline_data``, ``function_call``...)
are read as well and written back as they came. As for Anthropic's messages, a
message that continues the content before it, and tool calls that came between
other parts, are marked (under ``gemini``) so that export gives back the same
JSON.
"""

from __future__ import annotations

import json
from typing import Any

from chatarchive._document import ChatDocument, ContentPart, Message, ToolCall, ToolFunction
from chatarchive._exceptions import InvalidDocument

from ._format import Format
from ._shapes import Block, interleaved, json_object, kept, runs

__all__ = ["FORMATS", "KEY", "from_document", "looks_like", "to_document"]

KEY = "gemini"
_ROLES = {"user": "user", "model": "assistant"}
_CALL_KEYS = ("functionCall", "function_call")
_RESPONSE_KEYS = ("functionResponse", "function_response")


def _is_content(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("parts"), list) and item.keys() <= {"role", "parts"}


def _contents(data: Any) -> list[Any] | None:
    if isinstance(data, dict) and isinstance(data.get("contents"), list) and "messages" not in data:
        return list(data["contents"])
    if isinstance(data, list) and data and all(_is_content(item) for item in data):
        return data
    return None


def looks_like(data: Any) -> bool:
    contents = _contents(data)
    return contents is not None and all(_is_content(item) for item in contents)


def to_document(data: Any) -> ChatDocument:
    contents = _contents(data)
    if contents is None:
        raise InvalidDocument("a Gemini request has 'contents': a list of {'role', 'parts'}")
    messages: list[dict[str, Any]] = []
    document: dict[str, Any] = {
        "messages": messages,
        KEY: {"shape": "request" if isinstance(data, dict) else "contents"},
    }
    if isinstance(data, dict):
        for key in ("systemInstruction", "system_instruction"):
            if key in data:
                instruction = json_object(data[key], key)
                made = _messages("system", instruction.get("parts"), key)
                made[0][KEY] = {**made[0].get(KEY, {}), "system": key, "content_keys": _others(instruction)}
                messages.extend(made)
        settings = {
            key: value
            for key, value in data.items()
            if key not in ("contents", "systemInstruction", "system_instruction", "model")
        }
        if settings:
            document["model_settings"] = settings
        if isinstance(data.get("model"), str):
            document["model"] = data["model"]
    for index, content in enumerate(contents):
        content = json_object(content, f"contents[{index}]")
        role = content.get("role")
        made = _messages(
            _ROLES.get(role, role) if isinstance(role, str) else "user",
            content.get("parts"),
            f"contents[{index}]",
        )
        if not (isinstance(role, str) and role in _ROLES):
            hint = made[0].setdefault(KEY, {})
            hint["role"] = role
            if "role" not in content:
                hint["no_role"] = True
        messages.extend(made)
    return ChatDocument.parse(document)


def _others(content: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in content.items() if key != "parts"}


def _kind(part: dict[str, Any]) -> str:
    """What a part is: ``text``, ``thought``, or the key of its data."""
    if "text" in part:
        return "thought" if part.get("thought") is True else "text"
    for key in part:
        if key not in ("thought", "thoughtSignature", "thought_signature", "videoMetadata", "video_metadata"):
            return key
    return "empty"


def _messages(role: str, parts: Any, where: str) -> list[dict[str, Any]]:
    if not isinstance(parts, list):
        raise InvalidDocument("a content's parts must be a list", field=f"{where}.parts")
    return runs(role, (_block_of(raw, f"{where}.parts[{index}]") for index, raw in enumerate(parts)), KEY)


def _block_of(raw: Any, where: str) -> Block:
    """What one part of a content is, as ``runs`` takes it."""
    part = json_object(raw, where)
    kind = _kind(part)
    if kind in _RESPONSE_KEYS:
        return "result", _tool_message(kind, part)
    if kind in _CALL_KEYS:
        return "call", _call(kind, part, where)
    return "part", _part(kind, part)


def _part(kind: str, part: dict[str, Any]) -> dict[str, Any]:
    if kind in ("text", "thought"):
        rest = {key: value for key, value in part.items() if key not in ("text", "thought")}
        return {"type": kind, "text": part["text"], **rest}
    return {"type": kind, **part}


def _part_back(part: ContentPart) -> dict[str, Any]:
    data = part.model_dump(mode="json")
    kind = data.pop("type")
    if kind == "thought":
        text = data.pop("text", None)
        return {"text": text, "thought": True, **data}
    return data


def _call(kind: str, part: dict[str, Any], where: str) -> dict[str, Any]:
    body = json_object(part[kind], f"{where}.{kind}")
    call: dict[str, Any] = {"type": "function", "function": {"name": body.get("name")}}
    if "args" in body:
        call["function"]["arguments"] = json.dumps(body["args"], ensure_ascii=False)
    if "id" in body:
        call["id"] = body["id"]
    rest = {key: value for key, value in body.items() if key not in ("name", "args", "id")}
    outside = {key: value for key, value in part.items() if key != kind}
    call[KEY] = {"key": kind, "call": rest, "part": outside}
    return call


def _call_back(call: ToolCall) -> dict[str, Any]:
    hint = kept(call, KEY)
    function = call.function if isinstance(call.function, ToolFunction) else None
    body: dict[str, Any] = {"name": function.name if function else None}
    if function is not None and "arguments" in function.model_fields_set:
        arguments = function.arguments
        try:
            body["args"] = json.loads(arguments) if isinstance(arguments, str) else arguments
        except ValueError:
            body["args"] = {"arguments": arguments}
    if "id" in call.model_fields_set:
        body["id"] = call.id
    body.update(hint.get("call") or {})
    key = hint.get("key") if hint.get("key") in _CALL_KEYS else "functionCall"
    return {key: body, **(hint.get("part") or {})}


def _tool_message(kind: str, part: dict[str, Any]) -> dict[str, Any]:
    body = part[kind] if isinstance(part[kind], dict) else {}
    message: dict[str, Any] = {"role": "tool"}
    if "name" in body:
        message["name"] = body["name"]
    if "id" in body:
        message["tool_call_id"] = body["id"]
    if "response" in body:
        message["content"] = json.dumps(body["response"], ensure_ascii=False)
    rest = {key: value for key, value in body.items() if key not in ("name", "id", "response")}
    outside = {key: value for key, value in part.items() if key != kind}
    message[KEY] = {"key": kind, "response": rest, "part": outside}
    if not isinstance(part[kind], dict):
        message[KEY]["raw"] = part[kind]
    return message


def _response_back(message: Message) -> dict[str, Any]:
    hint = _hint(message)
    key = hint.get("key") if hint.get("key") in _RESPONSE_KEYS else "functionResponse"
    if "raw" in hint:
        return {key: hint["raw"], **(hint.get("part") or {})}
    body: dict[str, Any] = {}
    if "name" in message.model_fields_set:
        body["name"] = message.name
    if "tool_call_id" in message.model_fields_set:
        body["id"] = message.tool_call_id
    content = message.content
    if isinstance(content, str):
        try:
            body["response"] = json.loads(content) if hint else {"output": content}
        except ValueError:
            body["response"] = {"output": content}
    elif content is not None:
        body["response"] = {"output": "".join(p.text for p in content if isinstance(p.text, str))}
    body.update(hint.get("response") or {})
    return {key: body, **(hint.get("part") or {})}


def _hint(message: Message) -> dict[str, Any]:
    return kept(message, KEY)


def _parts(message: Message) -> list[dict[str, Any]]:
    if message.role == "tool":
        return [_response_back(message)]
    content = message.content
    parts = (
        []
        if content is None
        else [{"text": content}]
        if isinstance(content, str)
        else [_part_back(part) for part in content]
    )
    calls = [_call_back(call) for call in message.tool_calls or []]
    return interleaved(parts, calls, _hint(message).get("calls_at"))


def from_document(doc: ChatDocument) -> Any:
    shape = kept(doc, KEY).get("shape")
    contents: list[dict[str, Any]] = []
    request: dict[str, Any] = {}
    for message in doc.messages:
        hint = _hint(message)
        if message.role in ("system", "developer") and not contents:
            key = "system_instruction" if hint.get("system") == "system_instruction" else "systemInstruction"
            if key in request:
                request[key]["parts"].extend(_parts(message))
            else:
                request[key] = {**(hint.get("content_keys") or {}), "parts": _parts(message)}
            continue
        if hint.get("continues") is True and contents:
            contents[-1]["parts"].extend(_parts(message))
            continue
        if shape is None and message.role == "tool" and contents and _only_responses(contents[-1]):
            contents[-1]["parts"].extend(_parts(message))
            continue
        content: dict[str, Any] = {}
        if not hint.get("no_role"):
            content["role"] = hint.get("role", "model" if message.role == "assistant" else "user")
        content["parts"] = _parts(message)
        contents.append(content)
    if shape == "contents":
        return contents
    if doc.model is not None:
        request["model"] = doc.model
    request.update(doc.model_settings or {})
    request["contents"] = contents
    return request


def _only_responses(content: dict[str, Any]) -> bool:
    parts = content.get("parts") or []
    return (
        content.get("role") == "user"
        and bool(parts)
        and all(any(key in part for key in _RESPONSE_KEYS) for part in parts)
    )


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="gemini",
        what="a Gemini generateContent request, or its contents",
        round_trip="JSON-equal",
        family="model API",
        detection=130,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
        near_misses=(
            (
                lambda d: "contents" in d,
                "a Gemini request, but its 'contents' is not a list of {'role', 'parts'}",
            ),
        ),
    ),
)
