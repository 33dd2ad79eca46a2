"""Anthropic's Messages API: requests, responses and stream events.

A **request** (``model``, ``system``, ``messages``, ``max_tokens``...) is a
chat: ``system`` (a string, or a list of text blocks) is its first message,
with the role ``system``; ``model`` is the chat's model, ``metadata.user_id``
its user, and every other parameter (``max_tokens``, ``tools``,
``tool_choice``, ``thinking``, ``metadata``...) is kept in its
``model_settings``. A **response** (``"type": "message"``) is a chat of one
assistant message, and a list of **stream events** (``message_start`` ...
``message_stop``) is assembled into the response it amounts to, as the
``anthropic`` package's stream helper does.

Each message of the API becomes messages of the archive, in the shape of
OpenAI's chat completions where the meanings match:

- a string content is the message's text;
- ``tool_use`` blocks (and ``server_tool_use``, ``mcp_tool_use``) are the
  message's ``tool_calls``: the block's ``id``, its ``name`` and its
  ``input`` as the ``arguments`` JSON text; the type is ``function`` for
  ``tool_use`` and the block's own for the others; any other key of the block
  is kept on the call;
- a ``tool_result`` block is a message of its own, with the role ``tool``:
  ``tool_use_id`` is its ``tool_call_id``, its content (a string or blocks)
  the message's, ``is_error`` and any other key kept on it;
- every other block (``text`` with its ``citations``, ``image`` and
  ``document`` with a ``base64``, ``url``, ``file`` or ``text`` source,
  ``thinking`` with its ``signature``, ``redacted_thinking``, the
  ``*_tool_result`` blocks of server tools, ``container_upload``, ``mcp``
  blocks...) is a content part as it is: its ``type`` is the part's type, and
  a ``text`` block's text is in the archive's text column.

So that export gives back the same JSON, a message that continues the API
message before it (the text after a user's tool results, say) is marked
``"anthropic": {"continues": true}``, and a message whose tool calls came
between its other blocks keeps where (``"anthropic": {"calls_at": [...]}``).
A response's ``id``, ``stop_reason`` and ``usage`` are the message's
``response_id``, ``finish_reason`` and ``usage`` (``input_tokens`` as
``prompt_tokens`` and ``output_tokens`` as ``completion_tokens``, in the
token columns, the other counts kept beside them); its ``model`` is the
message's and the chat's model; its other keys (``stop_sequence``,
``container``...) are kept on the message.

Export writes a request (or, for a chat imported from a response, the
response) from any chat: system messages become ``system``, tool messages
become ``tool_result`` blocks of a user message, and OpenAI's ``image_url``
and ``file`` parts become ``image`` and ``document`` blocks.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Iterable
from typing import Any

from chatarchive._document import ChatDocument, ContentPart, Message, ToolCall
from chatarchive._exceptions import InvalidDocument

from ._format import Format
from ._shapes import (
    Block,
    array,
    interleaved,
    json_object,
    kept,
    kind_of,
    plain,
    runs,
    text,
    usage_back,
    usage_in_archive,
)

__all__ = [
    "FORMATS",
    "KEY",
    "assemble_events",
    "from_document",
    "looks_like",
    "message_from_response",
    "to_document",
    "to_messages",
    "to_turns",
]

KEY = "anthropic"

#: Blocks that are tool calls, and the type of the archive's call for each.
_CALL_TYPES = {"tool_use": "function", "server_tool_use": "server_tool_use", "mcp_tool_use": "mcp_tool_use"}
_BLOCK_TYPES = {call_type: block_type for block_type, call_type in _CALL_TYPES.items()}
#: Block types only Anthropic's messages hold (an OpenAI message list has none).
_OWN_BLOCKS = frozenset(
    {"tool_use", "tool_result", "thinking", "redacted_thinking", "image", "document", "server_tool_use"}
)
#: A response's keys that the message takes in its own way.
_RESPONSE_KEYS = frozenset({"id", "type", "role", "content", "model", "stop_reason", "usage"})
#: The stream events that carry nothing to assemble.
_QUIET_EVENTS = frozenset({"ping", "message_stop", "content_block_stop"})
STREAM_EVENTS = frozenset(
    {"message_start", "message_delta", "message_stop", "content_block_start", "content_block_delta"}
    | _QUIET_EVENTS
)


def is_response(data: Any) -> bool:
    return (
        isinstance(data, dict)
        and data.get("type") == "message"
        and data.get("role") == "assistant"
        and isinstance(data.get("content"), list)
    )


def is_request(data: Any) -> bool:
    """An object with ``messages`` that only Anthropic's requests would have:
    no ``chat_id`` (chatarchive's own documents have one), and ``max_tokens``
    or ``system`` (which the Messages API takes and a chat document does not
    have), or a message holding a block only Anthropic's messages have."""
    if not (isinstance(data, dict) and isinstance(data.get("messages"), list)) or "chat_id" in data:
        return False
    if "max_tokens" in data or "system" in data:
        return True
    return any(
        isinstance(block, dict) and kind_of(block) in _OWN_BLOCKS
        for message in data["messages"]
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for block in message["content"]
    )


def is_stream(data: Any) -> bool:
    return (
        isinstance(data, list)
        and bool(data)
        and isinstance(data[0], dict)
        and data[0].get("type") == "message_start"
    )


def looks_like(data: Any) -> bool:
    return is_request(data) or is_response(data) or is_stream(data)


def to_document(data: Any) -> ChatDocument:
    if is_stream(data):
        data = assemble_events(data)
    if is_response(data):
        message = message_from_response(data)
        document: dict[str, Any] = {"messages": [message], KEY: {"shape": "response"}}
        if "model" in message:
            document["model"] = message["model"]
        return ChatDocument.parse(document)
    if not is_request(data):
        raise InvalidDocument(
            "an Anthropic Messages request has 'messages' and 'max_tokens' (or 'system'); "
            'a response has "type": "message"; a stream starts with a message_start event'
        )
    return _request_document(data)


def _request_document(data: dict[str, Any]) -> ChatDocument:
    messages: list[dict[str, Any]] = []
    if "system" in data:
        system = data["system"]
        messages.append({"role": "system", "content": list(system) if isinstance(system, list) else system})
    for index, message in enumerate(data["messages"]):
        messages.extend(to_messages(json_object(message, f"messages[{index}]"), f"messages[{index}]"))
    settings = {key: value for key, value in data.items() if key not in ("model", "system", "messages")}
    document: dict[str, Any] = {"messages": messages, KEY: {"shape": "request"}}
    if settings:
        document["model_settings"] = settings
    if "model" in data:
        document["model"] = data["model"]
    metadata = data.get("metadata")
    user = metadata.get("user_id") if isinstance(metadata, dict) else None
    if isinstance(user, str) and user:
        document["user_id"] = user
    return ChatDocument.parse(document)


def to_messages(message: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """One message of the API as the archive's messages: its tool results
    each a tool message, its other blocks in runs between them."""
    role = message.get("role")
    others = {key: value for key, value in message.items() if key not in ("role", "content")}
    content = message.get("content")
    if not isinstance(content, list):
        result = {"role": role, "content": content}
        if others:
            result[KEY] = {"keys": others}
        return [result]
    results = runs(
        role, (_block_of(block, f"{where}.content[{index}]") for index, block in enumerate(content)), KEY
    )
    if others:  # keys the API's messages do not have: kept, and given back
        results[0].setdefault(KEY, {})["keys"] = others
    return results


def _block_of(raw: Any, where: str) -> Block:
    """What one block of a message is, as ``runs`` takes it."""
    block = json_object(raw, where)
    kind = kind_of(block)
    if kind == "tool_result":
        return "result", _tool_message(block)
    if kind in _CALL_TYPES:
        return "call", _tool_call(block, where)
    return "part", block


def _tool_call(block: dict[str, Any], where: str) -> dict[str, Any]:
    block_type = block["type"]
    call: dict[str, Any] = {
        key: value for key, value in block.items() if key not in ("id", "type", "name", "input")
    }
    arguments = json.dumps(block["input"], ensure_ascii=False) if "input" in block else None
    function: dict[str, Any] = {"name": text(block.get("name"), f"{where}.name")}
    if arguments is not None:
        function["arguments"] = arguments
    if "id" in block:
        call["id"] = block["id"]
    call.update({"type": _CALL_TYPES[block_type], "function": function})
    return call


#: A tool result's keys that would be taken for the message's own fields.
_MESSAGE_FIELDS = frozenset(Message.model_fields)


def _tool_message(block: dict[str, Any]) -> dict[str, Any]:
    message = {key: value for key, value in block.items() if key not in ("type", "tool_use_id", "content")}
    clashing = {key: message.pop(key) for key in list(message) if key in _MESSAGE_FIELDS}
    if clashing:
        message[KEY] = {"block_keys": clashing}
    message["role"] = "tool"
    if "tool_use_id" in block:
        message["tool_call_id"] = block["tool_use_id"]
    if "content" in block:
        content = block["content"]
        message["content"] = list(content) if isinstance(content, list) else content
    return message


def message_from_response(response: Any) -> dict[str, Any]:
    """The assistant message of a Messages API response (a dict, an object of
    the ``anthropic`` package, or a list of its stream events), ready for
    ``ChatRepository.append``.

    Raises:
        InvalidDocument: not a response, naming the place.
    """
    if isinstance(response, (list, tuple)):
        response = assemble_events(response)
    data = plain(response, "an Anthropic Messages response", exclude_unset=True)
    if not is_response(data):
        raise InvalidDocument('an Anthropic Messages response has "type": "message" and a content list')
    (message, *continued) = to_messages({"role": "assistant", "content": data["content"]}, "content")
    if continued:  # tool results in a response: not the API's
        raise InvalidDocument("a response's content holds a tool_result block", field="content")
    mapped: dict[str, Any] = {
        "model": data.get("model"),
        "finish_reason": data.get("stop_reason"),
        "usage": usage_in_archive(data.get("usage")),
        "response_id": data.get("id"),
    }
    message.update({key: value for key, value in mapped.items() if value is not None})
    for key, value in data.items():
        if key not in _RESPONSE_KEYS:
            message.setdefault(key, value)
    given = [key for key in ("model", "stop_reason", "usage", "id") if key in data and data[key] is None]
    if given:  # a null the response gave: kept, to be given back
        message.setdefault(KEY, {})["nulls"] = given
    return message


def assemble_events(events: Iterable[Any]) -> dict[str, Any]:
    """The response a stream of Messages API events amounts to: text,
    thinking and signature fragments joined, a tool call's ``partial_json``
    fragments joined and parsed, citations gathered, the final stop reason
    and usage.

    Raises:
        InvalidDocument: an event of another shape, or an ``error`` event,
            naming it (``events[3].delta``).
    """
    response: dict[str, Any] | None = None
    blocks: dict[int, dict[str, Any]] = {}
    partial: dict[int, list[str]] = {}
    for number, raw in enumerate(events):
        where = f"events[{number}]"
        event = plain(raw, "an Anthropic stream event", exclude_unset=True)
        kind = kind_of(event)
        if kind == "error":
            raise InvalidDocument(f"the stream ended in an error: {event.get('error')!r}", field=where)
        if kind == "message_start":
            response = dict(json_object(event.get("message"), f"{where}.message"))
            response["content"] = list(array(response.get("content"), f"{where}.message.content"))
            continue
        if response is None:
            raise InvalidDocument("a stream starts with a message_start event", field=where)
        if kind == "content_block_start":
            index = _index(event, where)
            blocks[index] = dict(json_object(event.get("content_block"), f"{where}.content_block"))
        elif kind == "content_block_delta":
            index = _index(event, where)
            if index not in blocks:
                raise InvalidDocument(f"a delta of block {index}, which has not started", field=where)
            _apply_delta(blocks[index], partial.setdefault(index, []), event.get("delta"), f"{where}.delta")
        elif kind == "message_delta":
            delta = json_object(event.get("delta"), f"{where}.delta", optional=True)
            response.update(delta)
            usage = json_object(event.get("usage"), f"{where}.usage", optional=True)
            merged = dict(json_object(response.get("usage"), f"{where}.usage", optional=True))
            merged.update({key: value for key, value in usage.items() if value is not None})
            response["usage"] = merged
        elif kind not in _QUIET_EVENTS:
            raise InvalidDocument(f"{kind!r} is not a Messages stream event", field=f"{where}.type")
    if response is None:
        raise InvalidDocument("a stream starts with a message_start event", field="events")
    for index, fragments in partial.items():
        if fragments:
            try:
                blocks[index]["input"] = json.loads("".join(fragments))
            except ValueError:
                raise InvalidDocument(
                    "a tool call's streamed input is not JSON", field=f"content[{index}].input"
                ) from None
    response["content"] = [*response["content"], *(block for _, block in sorted(blocks.items()))]
    return response


def _index(event: dict[str, Any], where: str) -> int:
    index = event.get("index")
    if type(index) is not int:
        raise InvalidDocument("a block's index must be a whole number", field=f"{where}.index")
    return index


def _apply_delta(block: dict[str, Any], partial: list[str], delta: Any, where: str) -> None:
    delta = json_object(delta, where)
    kind = kind_of(delta)
    if kind == "text_delta":
        block["text"] = block.get("text", "") + text(delta.get("text"), f"{where}.text")
    elif kind == "thinking_delta":
        block["thinking"] = block.get("thinking", "") + text(delta.get("thinking"), f"{where}.thinking")
    elif kind == "signature_delta":
        block["signature"] = text(delta.get("signature"), f"{where}.signature")
    elif kind == "input_json_delta":
        partial.append(text(delta.get("partial_json"), f"{where}.partial_json"))
    elif kind == "citations_delta":
        block.setdefault("citations", []).append(delta.get("citation"))
    else:
        raise InvalidDocument(f"{kind!r} is not a content block delta", field=f"{where}.type")


def from_document(doc: ChatDocument) -> dict[str, Any]:
    shape = kept(doc, KEY).get("shape")
    messages = doc.messages
    if shape == "response" and len(messages) == 1:
        return _response(messages[0])
    request: dict[str, Any] = {}
    if doc.model is not None:
        request["model"] = doc.model
    system: list[Message] = []
    rest = list(messages)
    while rest and rest[0].role in ("system", "developer"):
        system.append(rest.pop(0))
    turns = [turn for turn, _ in to_turns(rest, imported=shape is not None)]
    if len(system) == 1 and isinstance(system[0].content, str):
        request["system"] = system[0].content
    elif system:
        request["system"] = [block for message in system for block in _blocks(message)]
    request.update(doc.model_settings or {})
    request["messages"] = turns
    return request


def to_turns(messages: Iterable[Message], *, imported: bool) -> list[tuple[dict[str, Any], Message]]:
    """The API messages (``role``, ``content``) that archive messages make, each
    with the first archive message it was made of. A message marked as
    continuing the one before joins it; in chats not ``imported`` from this
    format, tool results that follow each other are one user message."""
    turns: list[tuple[dict[str, Any], Message]] = []
    for message in messages:
        hint = _hint(message)
        blocks = _blocks(message)
        previous = turns[-1][0] if turns else None
        joins = hint.get("continues") is True or (
            not imported and message.role == "tool" and previous is not None and _only_results(previous)
        )
        if joins and previous is not None and isinstance(previous["content"], list):
            previous["content"].extend(blocks)
            continue
        plain_text = isinstance(message.content, str) and not message.tool_calls and message.role != "tool"
        turn: dict[str, Any] = {
            "role": "user" if message.role in ("tool", "system", "developer") else message.role,
            "content": message.content if plain_text else blocks,
        }
        keys = hint.get("keys")
        if isinstance(keys, dict):
            turn.update(keys)
        turns.append((turn, message))
    return turns


def _hint(message: Message) -> dict[str, Any]:
    return kept(message, KEY)


def _only_results(turn: dict[str, Any]) -> bool:
    content = turn["content"]
    return (
        turn["role"] == "user"
        and isinstance(content, list)
        and bool(content)
        and all(isinstance(block, dict) and block.get("type") == "tool_result" for block in content)
    )


def _blocks(message: Message) -> list[Any]:
    """The message's blocks: its content's, with its tool calls where they were."""
    if message.role == "tool":
        return [_result_block(message)]
    content = message.content
    parts: list[Any] = (
        []
        if content is None
        else [{"type": "text", "text": content}]
        if isinstance(content, str)
        else [_block(part) for part in content]
    )
    calls = [_call_block(call) for call in message.tool_calls or []]
    return interleaved(parts, calls, _hint(message).get("calls_at"))


def _result_block(message: Message) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result"}
    if "tool_call_id" in message.model_fields_set:
        block["tool_use_id"] = message.tool_call_id
    content = message.content
    if isinstance(content, list):
        block["content"] = [_block(part) for part in content]
    elif content is not None or "content" in message.model_fields_set:
        block["content"] = content
    extra = message.model_extra or {}
    block.update({key: value for key, value in extra.items() if key != KEY})
    kept = _hint(message).get("block_keys")
    if isinstance(kept, dict):
        block.update(kept)
    return block


def _block(part: ContentPart) -> Any:
    """A content part as a block: Anthropic's own as they are, OpenAI's
    images and files as ``image`` and ``document`` blocks."""
    block = part.model_dump(mode="json")
    if part.type == "image_url":
        url = part.image_url.get("url") if isinstance(part.image_url, dict) else part.image_url
        return {"type": "image", "source": _source(url)}
    if part.type == "file" and isinstance(part.file, dict):
        file = part.file
        if isinstance(file.get("file_id"), str):
            return {"type": "document", "source": {"type": "file", "file_id": file["file_id"]}}
        return {"type": "document", "source": _source(file.get("file_data"))}
    return block


def _source(url: Any) -> dict[str, Any]:
    """A block's ``source`` from a URL: a data URL's bytes, or the URL."""
    if isinstance(url, str) and url.startswith("data:") and ";base64," in url:
        media_type, _, data = url[5:].partition(";base64,")
        try:
            base64.b64decode(data, validate=True)
        except (binascii.Error, ValueError):
            return {"type": "url", "url": url}
        return {"type": "base64", "media_type": media_type, "data": data}
    return {"type": "url", "url": url}


def _call_block(call: ToolCall) -> dict[str, Any]:
    extra = call.model_extra or {}
    function = call.function
    name = function.name if hasattr(function, "name") else None
    arguments = function.arguments if hasattr(function, "arguments") else None
    block: dict[str, Any] = {"type": _BLOCK_TYPES.get(str(call.type), "tool_use")}
    if "id" in call.model_fields_set:
        block["id"] = call.id
    block["name"] = name
    if arguments is not None:
        block["input"] = _input(arguments)
    block.update(extra)
    return block


def _input(arguments: Any) -> Any:
    """A call's ``input``: its arguments parsed (arguments that are not a JSON
    object, from another format, are kept under ``arguments``)."""
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            pass
    return {"arguments": arguments}


def _response(message: Message) -> dict[str, Any]:
    nulls = _hint(message).get("nulls") or []
    blocks = _blocks(message)
    response: dict[str, Any] = {
        "id": message.model_extra.get("response_id") if message.model_extra else None,
        "type": "message",
        "role": message.role,
        "content": blocks,
        "model": message.model,
        "stop_reason": message.finish_reason,
    }
    usage = message.model_dump(mode="json").get("usage")
    if usage is not None or "usage" in nulls:
        response["usage"] = usage_back(usage)
    for key in ("id", "model", "stop_reason"):
        if response[key] is None and key not in nulls:
            del response[key]
    extra = message.model_extra or {}
    response.update({key: value for key, value in extra.items() if key not in (KEY, "response_id")})
    return response


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="anthropic",
        what="an Anthropic Messages request, a response, or its stream events",
        round_trip="JSON-equal",
        family="model API",
        detection=20,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
        record="record_message",
        near_misses=(
            (
                lambda d: kind_of(d) in STREAM_EVENTS,
                "an Anthropic Messages stream event: a stream's events import together, from message_start "
                "to message_stop (a JSON list of them, or their lines in one file)",
            ),
            (
                lambda d: d.get("type") == "message" and "content" in d,
                "an Anthropic Messages response, but its content is not a list of blocks: use --format "
                "anthropic once it is",
            ),
        ),
    ),
)
