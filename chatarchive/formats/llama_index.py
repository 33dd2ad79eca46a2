"""LlamaIndex chat messages: a list of ``ChatMessage`` as ``model_dump``
writes them (``{"role", "additional_kwargs", "blocks": [...]}``), as its chat
stores keep them.

Each message is one of the archive's, of its role:

- its blocks are the message's content: a message of one plain ``text``
  block is a string, any other a list of parts: ``text`` blocks text parts,
  ``thinking`` blocks ``thinking`` parts (their text searchable), ``image``
  blocks with a ``url`` ``image_url`` parts, other blocks (audio, documents,
  citations...) parts of their ``block_type``, each block's other keys kept;
- ``tool_call`` blocks are its tool calls (``tool_call_id``, ``tool_name``,
  ``tool_kwargs`` as the ``arguments`` JSON text), in their place among the
  blocks; so are OpenAI-shaped ``tool_calls`` in ``additional_kwargs`` (as
  LlamaIndex's OpenAI agents write them) when the message has no
  ``tool_call`` block;
- ``additional_kwargs``' ``tool_call_id`` and ``name`` are the message's own;
  its other keys are kept under ``llama_index``.

Export gives back the same list, JSON-equal; a message of another format is
written as the ``ChatMessage`` of its role, text and tool calls.
"""

from __future__ import annotations

import json
from typing import Any

from chatarchive._document import ChatDocument, ContentPart, Message, ToolCall, ToolFunction
from chatarchive._exceptions import InvalidDocument

from ._format import Format
from ._shapes import Block, array, interleaved, json_object, kept, runs

__all__ = ["FORMATS", "KEY", "from_document", "from_messages", "looks_like", "to_document", "to_messages"]

KEY = "llama_index"

#: ``additional_kwargs`` that are the archive message's own fields.
_OWN_KWARGS = ("tool_call_id", "name")


def looks_like(data: Any) -> bool:
    """A non-empty list of objects, each with a ``role`` and a ``blocks`` list."""
    return (
        isinstance(data, list)
        and bool(data)
        and all(
            isinstance(item, dict) and "role" in item and isinstance(item.get("blocks"), list)
            for item in data
        )
    )


def to_document(data: Any) -> ChatDocument:
    if not looks_like(data):
        raise InvalidDocument('LlamaIndex chat messages are a list of {"role", "blocks": [...]}')
    return ChatDocument.parse({"messages": to_messages(data)})


def to_messages(data: list[Any]) -> list[dict[str, Any]]:
    """The archive's messages of LlamaIndex messages (dicts), one for each."""
    return [_message(json_object(item, f"[{index}]"), f"[{index}]") for index, item in enumerate(data)]


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    role = item.get("role")
    if not isinstance(role, str) or not role:
        raise InvalidDocument("a message's role must be a non-empty string", field=f"{where}.role")
    blocks = array(item.get("blocks"), f"{where}.blocks")
    kwargs = dict(json_object(item.get("additional_kwargs"), f"{where}.additional_kwargs", optional=True))
    hint: dict[str, Any] = {key: value for key, value in item.items() if key not in ("role", "blocks")}
    message: dict[str, Any]
    if (
        len(blocks) == 1
        and isinstance(blocks[0], dict)
        and blocks[0] == {"block_type": "text", "text": blocks[0].get("text")}
        and isinstance(blocks[0]["text"], str)
    ):
        message = {"role": role, "content": blocks[0]["text"]}
    else:
        (message,) = runs(
            role, [_block(json_object(b, f"{where}.blocks[{i}]")) for i, b in enumerate(blocks)], KEY
        )
    taken = []
    calls = kwargs.get("tool_calls")
    if (
        "tool_calls" not in message
        and isinstance(calls, list)
        and calls
        and all(_openai_call(c) for c in calls)
    ):
        message["tool_calls"] = kwargs.pop("tool_calls")
        taken.append("tool_calls")
    for key in _OWN_KWARGS:
        if isinstance(kwargs.get(key), str):
            message[key] = kwargs.pop(key)
            taken.append(key)
    hint["additional_kwargs"] = kwargs
    if taken:
        hint["taken"] = taken
    message.setdefault(KEY, {}).update(hint)
    return message


def _openai_call(call: Any) -> bool:
    return (
        isinstance(call, dict) and isinstance(call.get("function"), dict) and isinstance(call.get("id"), str)
    )


def _block(block: dict[str, Any]) -> Block:
    kind = block.get("block_type")
    rest = {key: value for key, value in block.items() if key != "block_type"}
    if kind == "tool_call":
        hint = {
            key: value
            for key, value in rest.items()
            if key not in ("tool_call_id", "tool_name", "tool_kwargs")
        }
        arguments = rest.get("tool_kwargs")
        if not isinstance(arguments, str):
            hint["json"] = True
            arguments = json.dumps(arguments, ensure_ascii=False)
        function = {"name": rest.get("tool_name"), "arguments": arguments}
        return "call", {"id": rest.get("tool_call_id"), "type": "function", "function": function, KEY: hint}
    if kind == "text" and isinstance(rest.get("text"), str):
        return "part", {"type": "text", "text": rest.pop("text"), KEY: rest}
    if kind == "thinking" and isinstance(rest.get("content"), str):
        return "part", {"type": "thinking", "text": rest.pop("content"), KEY: rest}
    if kind == "image" and isinstance(rest.get("url"), str):
        return "part", {"type": "image_url", "image_url": {"url": rest.pop("url")}, KEY: rest}
    if isinstance(kind, str) and kind:
        return "part", {"type": kind, KEY: rest}
    raise InvalidDocument("a block has no block_type", field="blocks")


# -- back --------------------------------------------------------------------------------


def from_document(doc: ChatDocument) -> list[dict[str, Any]]:
    return from_messages(doc.messages)


#: LlamaIndex's roles (``MessageRole``): a message of another format of any
#: other role (``reasoning``...) has no LlamaIndex message.
_ROLES = frozenset({"system", "developer", "user", "assistant", "function", "tool", "chatbot", "model"})


def from_messages(messages: list[Message]) -> list[dict[str, Any]]:
    """The LlamaIndex messages (dicts, for ``ChatMessage.model_validate``) of the archive's."""
    return [_back(message) for message in messages if kept(message, KEY) or message.role in _ROLES]


def _back(message: Message) -> dict[str, Any]:
    hint = kept(message, KEY)
    if not hint:
        return _foreign(message)
    item = {key: value for key, value in hint.items() if key not in ("taken", "calls_at")}
    item["role"] = message.role
    found = item.get("additional_kwargs")
    kwargs = dict(found) if isinstance(found, dict) else {}
    found_taken = hint.get("taken")
    taken: list[Any] = found_taken if isinstance(found_taken, list) else []
    for key in taken:
        if key == "tool_calls":
            kwargs[key] = [call.model_dump(mode="json") for call in message.tool_calls or []]
        elif key in _OWN_KWARGS:
            kwargs[key] = getattr(message, key)
    item["additional_kwargs"] = kwargs
    if isinstance(message.content, str):
        item["blocks"] = [{"block_type": "text", "text": message.content}]
        return item
    calls = [] if "tool_calls" in taken else (message.tool_calls or [])
    blocks = interleaved(message.content or [], calls, hint.get("calls_at"))
    item["blocks"] = [
        _call_back(block) if isinstance(block, ToolCall) else _part_back(block) for block in blocks
    ]
    return item


def _part_back(part: ContentPart) -> dict[str, Any]:
    own = kept(part, KEY)
    if part.type == "text":
        return {"block_type": "text", **own, "text": part.text}
    if part.type == "thinking":
        return {"block_type": "thinking", **own, "content": part.text}
    if part.type == "image_url" and isinstance(part.image_url, dict):
        return {"block_type": "image", **own, "url": part.image_url.get("url")}
    return {"block_type": part.type, **own}


def _call_back(call: ToolCall) -> dict[str, Any]:
    own = dict(kept(call, KEY))
    as_json = own.pop("json", False)
    function = call.function if isinstance(call.function, ToolFunction) else ToolFunction()
    arguments = function.arguments
    if as_json and isinstance(arguments, str):
        arguments = json.loads(arguments)
    return {
        "block_type": "tool_call",
        **own,
        "tool_call_id": call.id,
        "tool_name": function.name,
        "tool_kwargs": arguments,
    }


def _foreign(message: Message) -> dict[str, Any]:
    """A message of another format: its role, its text as a text block, its calls as OpenAI's."""
    text = message.content if isinstance(message.content, str) else None
    blocks: list[dict[str, Any]] = []
    if text is not None:
        blocks.append({"block_type": "text", "text": text})
    for part in message.content if isinstance(message.content, list) else []:
        if part.type == "text" and isinstance(part.text, str):
            blocks.append({"block_type": "text", "text": part.text})
    kwargs: dict[str, Any] = {}
    if message.tool_calls:
        kwargs["tool_calls"] = [call.model_dump(mode="json") for call in message.tool_calls]
    for key in _OWN_KWARGS:
        if getattr(message, key) is not None:
            kwargs[key] = getattr(message, key)
    return {"role": message.role, "additional_kwargs": kwargs, "blocks": blocks}


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="llama-index",
        what="LlamaIndex ChatMessages, as model_dump writes them",
        round_trip="JSON-equal",
        family="agent framework",
        detection=120,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
    ),
)
