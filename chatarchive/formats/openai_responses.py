"""OpenAI's Responses API: input item lists, ``Response`` objects and stream events.

Each item is one message of the archive, in the shape of OpenAI's chat
completions where the meanings match, so that SQL, search and the other
formats read them as they read any chat:

- a ``message`` item (or an easy input message, ``{"role", "content"}``) is
  a message of its role; its content (a string, or its ``input_text``,
  ``output_text`` with ``annotations`` and ``logprobs``, ``input_image``,
  ``input_file``, ``input_audio`` and ``refusal`` parts) is the message's,
  each part's text in the archive's text column;
- a ``function_call`` is an assistant message with one tool call of type
  ``function`` (``call_id`` as its id, ``name``, ``arguments``), a
  ``custom_tool_call`` one of type ``custom`` (``name``, ``input``), and the
  built-in tool calls (``web_search_call``, ``file_search_call``,
  ``code_interpreter_call``, ``image_generation_call``, ``computer_call``,
  ``local_shell_call``, ``shell_call``, ``apply_patch_call``, ``mcp_call``,
  ``mcp_list_tools``, ``mcp_approval_request``...) one of the item's own type,
  named by the item's ``name`` or by its type (``web_search``): queryable in
  ``tool_calls`` by type and name. The item's other keys are kept on the call,
  under ``item``;
- the outputs (``function_call_output``, ``custom_tool_call_output``,
  ``computer_call_output``, ``local_shell_call_output``, ``shell_call_output``,
  ``apply_patch_call_output``, ``mcp_approval_response``...) are tool messages
  answering their call (``tool_call_id``); an output that is a string or parts
  is the message's content, any other output is kept as it is;
- a ``reasoning`` item is a message of the role ``reasoning``: its ``summary``
  parts are the content (their text searchable), ``encrypted_content`` and the
  rest kept;
- an item of any other type is a message whose role is its type, kept whole.

Every message keeps, under ``openai_responses``, the item's type; the item's
keys named like the message's own fields are kept there too. A ``Response``
imports as a chat of its output items: its ``model`` and ``created_at`` are
the chat's and each message's, the ``usage`` (``input_tokens`` as
``prompt_tokens``, ``output_tokens`` as ``completion_tokens``,
``total_tokens``) and ``status`` (as ``finish_reason``) its last message's, and
the response without its output is kept on the chat, so that export gives it
back. Stream events are assembled into their response first.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from chatarchive._document import (
    ChatDocument,
    ContentPart,
    Message,
    ToolCall,
    ToolFunction,
)
from chatarchive._exceptions import InvalidDocument

from ._format import Format
from ._seconds import time_of
from ._shapes import array, json_object, kept, kind_of, plain, text, usage_in_archive

__all__ = [
    "FORMATS",
    "KEY",
    "assemble_events",
    "from_document",
    "items_to_messages",
    "looks_like",
    "messages_from_response",
    "to_document",
    "to_items",
]

KEY = "openai_responses"

#: Items that are tool calls: the type of the archive's call for each (the
#: item's own type for the built-in tools).
_CALLS = {"function_call": "function", "custom_tool_call": "custom"}
_BUILT_IN_CALLS = frozenset(
    {
        "file_search_call",
        "web_search_call",
        "computer_call",
        "tool_search_call",
        "image_generation_call",
        "code_interpreter_call",
        "local_shell_call",
        "shell_call",
        "apply_patch_call",
        "mcp_call",
        "mcp_list_tools",
        "mcp_approval_request",
        "program",
    }
)
#: Items that answer a call, by the key that names the call they answer.
_OUTPUTS = {
    "function_call_output": "call_id",
    "custom_tool_call_output": "call_id",
    "computer_call_output": "call_id",
    "local_shell_call_output": "id",
    "shell_call_output": "call_id",
    "apply_patch_call_output": "call_id",
    "tool_search_output": "call_id",
    "program_output": "call_id",
    "mcp_approval_response": "approval_request_id",
}
_ITEM_TYPES = frozenset({"message", "reasoning", *_CALLS, *_BUILT_IN_CALLS, *_OUTPUTS})
_PART_TYPES = frozenset({"input_text", "output_text", "input_image", "input_file", "input_audio"})
#: Keys of the message that are the archive's or this module's, not the item's.
_NOT_ITEM_KEYS = frozenset({KEY, "response_id", "response"})
#: The message fields an item's key of the same name would be taken for.
_MESSAGE_FIELDS = frozenset(Message.model_fields) | _NOT_ITEM_KEYS
_TERMINAL_EVENTS = frozenset({"response.completed", "response.incomplete", "response.failed"})


def is_response(data: Any) -> bool:
    return (
        isinstance(data, dict) and data.get("object") == "response" and isinstance(data.get("output"), list)
    )


def is_stream(data: Any) -> bool:
    return isinstance(data, list) and bool(data) and str(kind_of(data[0]) or "").startswith("response.")


def is_input(data: Any) -> bool:
    """A list of items, one of which only the Responses API has: a typed
    item, or a message with Responses content parts (``input_text``...). A
    list of chat-completions messages has neither."""
    if not (isinstance(data, list) and data and all(isinstance(item, dict) for item in data)):
        return False
    return any(
        kind_of(item) in _ITEM_TYPES
        or (
            isinstance(item.get("content"), list)
            and any(kind_of(part) in _PART_TYPES for part in item["content"])
        )
        for item in data
    )


def looks_like(data: Any) -> bool:
    return is_input(data) or is_response(data) or is_stream(data)


def to_document(data: Any) -> ChatDocument:
    if is_stream(data):
        data = assemble_events(data)
    if is_response(data):
        messages = messages_from_response(data, envelope=False)
        envelope = {key: value for key, value in data.items() if key != "output"}
        document: dict[str, Any] = {"messages": messages, KEY: {"shape": "response", "response": envelope}}
        if isinstance(data.get("model"), str):
            document["model"] = data["model"]
        created = time_of(data.get("created_at"), "created_at")
        if created is not None:
            document["created_at"] = created
        return ChatDocument.parse(document)
    if not is_input(data):
        raise InvalidDocument(
            "a Responses API input is a list of items (a typed item, or a message with input_text parts); "
            'a response has "object": "response" and an output list'
        )
    return ChatDocument.parse({"messages": items_to_messages(data, "input"), KEY: {"shape": "input"}})


def items_to_messages(items: Iterable[Any], where: str) -> list[dict[str, Any]]:
    """The archive's messages of Responses items, one for each."""
    return [
        _message(json_object(item, f"{where}[{index}]"), f"{where}[{index}]")
        for index, item in enumerate(items)
    ]


def _message(item: dict[str, Any], where: str) -> dict[str, Any]:
    kind = kind_of(item)
    hint: dict[str, Any] = {} if kind is None else {"item": kind}
    rest = {key: value for key, value in item.items() if key != "type"}
    message: dict[str, Any]
    if kind in _CALLS or kind in _BUILT_IN_CALLS:
        message = {"role": "assistant", "tool_calls": [_call(kind, rest, hint, where)]}
        rest = {}
    elif kind in _OUTPUTS:
        answers = _OUTPUTS[kind]
        message = {"role": "tool", "tool_call_id": rest.pop(answers, None)}
        if answers not in item:
            hint["unanswered"] = True
        output = rest.pop("output", None) if "output" in rest else _ABSENT
        content = _output_content(output)
        if content is not _ABSENT:
            message["content"] = content
            if isinstance(output, dict):
                hint["output"] = "part"
        elif output is not _ABSENT:
            hint.setdefault("keys", {})["output"] = output
    elif kind == "reasoning":
        message = {"role": "reasoning"}
        if "summary" in rest:
            summary = rest.pop("summary")
            message["content"] = list(summary) if isinstance(summary, list) else summary
            hint["summary"] = True
    elif kind == "message" or kind is None:
        message = {"role": rest.pop("role", None)}
        if "content" in rest:
            content = rest.pop("content")
            message["content"] = list(content) if isinstance(content, list) else content
    else:  # an item of a type this version does not know: kept whole
        message = {"role": kind}
    if not isinstance(message.get("role"), str) or not message["role"]:
        raise InvalidDocument("an item has no 'type' and no 'role'", field=where)
    for key, value in rest.items():
        if key in _MESSAGE_FIELDS:
            hint.setdefault("keys", {})[key] = value
        else:
            message[key] = value
    if hint:
        message[KEY] = hint
    return message


class _Absent:
    """An output key an item does not have."""


_ABSENT: Any = _Absent()


def _output_content(output: Any) -> Any:
    """An output as a message's content: a string, parts (objects with a
    ``type``), or one such object as one part; ``_ABSENT`` for any other."""
    if output is _ABSENT or output is None:
        return _ABSENT
    if isinstance(output, str):
        return output
    if isinstance(output, list) and all(kind_of(part) for part in output):
        return list(output)
    if kind_of(output):
        return [output]
    return _ABSENT


def _call(kind: str, rest: dict[str, Any], hint: dict[str, Any], where: str) -> dict[str, Any]:
    """A call item as a tool call: its id, its type, its name and its
    arguments in their columns; its other keys under ``item``."""
    id_key = "call_id" if "call_id" in rest else "id" if "id" in rest else None
    call_id = None if id_key is None else rest.pop(id_key)
    if id_key is not None:
        hint["id_key"] = id_key
    name = rest.pop("name", None)
    if name is None:
        name = kind.removesuffix("_call")
        hint["derived_name"] = True
    elif not isinstance(name, str):
        raise InvalidDocument("a tool call's name must be a string", field=f"{where}.name")
    call: dict[str, Any] = {"id": call_id}
    if kind == "custom_tool_call":
        body: dict[str, Any] = {"name": name}
        if "input" in rest:
            body["input"] = rest.pop("input")
        call.update({"type": "custom", "custom": body})
    else:
        function: dict[str, Any] = {"name": name}
        if isinstance(rest.get("arguments"), str):
            function["arguments"] = rest.pop("arguments")
        call.update({"type": _CALLS.get(kind, kind), "function": function})
    if rest:
        call["item"] = rest
    return call


def messages_from_response(response: Any, *, envelope: bool = True) -> list[dict[str, Any]]:
    """The messages of a ``Response`` (a dict, an object of the ``openai``
    package, or a list of its stream events), ready for
    ``ChatRepository.append``: its output items, with the model and the
    time; the last one also with the usage, the status as ``finish_reason``,
    the response's id and (when ``envelope``) the response without its
    output, under ``response``.

    Raises:
        InvalidDocument: not a response, naming the place.
    """
    if isinstance(response, (list, tuple)):
        response = assemble_events(response)
    data = plain(response, "an OpenAI Responses API response", exclude_unset=True)
    if not is_response(data):
        raise InvalidDocument('a Responses API response has "object": "response" and an output list')
    messages = items_to_messages(data["output"], "output")
    created = time_of(data.get("created_at"), "created_at")
    for message in messages:
        if isinstance(data.get("model"), str):
            message["model"] = data["model"]
        if created is not None:
            message["created_at"] = created
    if messages:
        last = messages[-1]
        if isinstance(data.get("usage"), dict):
            last["usage"] = usage_in_archive(data["usage"])
        if isinstance(data.get("status"), str):
            last["finish_reason"] = data["status"]
        if data.get("id") is not None:
            last["response_id"] = data["id"]
        if envelope:
            last["response"] = {key: value for key, value in data.items() if key != "output"}
    return messages


def assemble_events(events: Iterable[Any]) -> dict[str, Any]:
    """The response a stream of Responses API events amounts to: the
    response of its last ``response.completed`` (or ``.incomplete``,
    ``.failed``) event; for a stream cut short, the ``response.created``
    snapshot with the items done and the text and argument deltas of those
    still open.

    Raises:
        InvalidDocument: an event of another shape, or an ``error`` event.
    """
    response: dict[str, Any] | None = None
    items: dict[int, dict[str, Any]] = {}
    for number, raw in enumerate(events):
        where = f"events[{number}]"
        event = plain(raw, "an OpenAI Responses API stream event", exclude_unset=True)
        kind = kind_of(event) or ""
        if kind == "error":
            raise InvalidDocument(f"the stream ended in an error: {event.get('message')!r}", field=where)
        if kind in _TERMINAL_EVENTS or kind in ("response.created", "response.in_progress"):
            response = dict(json_object(event.get("response"), f"{where}.response"))
            if kind in _TERMINAL_EVENTS:
                items.clear()
            continue
        if kind in ("response.output_item.added", "response.output_item.done"):
            items[_index(event, "output_index", where)] = dict(
                json_object(event.get("item"), f"{where}.item")
            )
        elif kind == "response.content_part.added":
            item = items.get(_index(event, "output_index", where))
            if item is not None:
                item.setdefault("content", []).append(dict(json_object(event.get("part"), f"{where}.part")))
        elif kind in ("response.output_text.delta", "response.refusal.delta"):
            key = "text" if kind == "response.output_text.delta" else "refusal"
            item = items.get(_index(event, "output_index", where))
            parts = item.get("content") if item is not None else None
            index = _index(event, "content_index", where)
            if isinstance(parts, list) and index < len(parts) and isinstance(parts[index], dict):
                parts[index][key] = parts[index].get(key, "") + text(event.get("delta"), f"{where}.delta")
        elif kind in ("response.function_call_arguments.delta", "response.custom_tool_call_input.delta"):
            key = "arguments" if kind == "response.function_call_arguments.delta" else "input"
            item = items.get(_index(event, "output_index", where))
            if item is not None:
                item[key] = item.get(key, "") + text(event.get("delta"), f"{where}.delta")
        elif not kind.startswith("response."):
            raise InvalidDocument(f"{kind!r} is not a Responses API stream event", field=f"{where}.type")
    if response is None:
        raise InvalidDocument("a stream has a response.created or response.completed event", field="events")
    if items:
        response["output"] = [
            *array(response.get("output"), "output"),
            *(item for _, item in sorted(items.items())),
        ]
    return response


def _index(event: dict[str, Any], key: str, where: str) -> int:
    index = event.get(key)
    if type(index) is not int or index < 0:
        raise InvalidDocument(f"{key} must be a whole number", field=f"{where}.{key}")
    return index


def from_document(doc: ChatDocument) -> Any:
    own = kept(doc, KEY)
    items = [item for message in doc.messages for item in to_items(message)]
    if own.get("shape") == "response" and isinstance(own.get("response"), dict):
        return {**own["response"], "output": items}
    return items


def _hint(message: Message) -> dict[str, Any]:
    return kept(message, KEY)


def to_items(message: Message) -> list[dict[str, Any]]:
    """The item a message was imported from; for a message of another
    format, the items of the same meaning (none, for a role they do not have)."""
    hint = _hint(message)
    if not hint:
        return _foreign_items(message) if message.role in _FOREIGN_ROLES else []
    kind = hint.get("item")
    item: dict[str, Any] = {} if kind is None else {"type": kind}
    given = message.model_fields_set
    content = message.model_dump(mode="json")["content"] if "content" in given else _ABSENT
    if kind in _CALLS or kind in _BUILT_IN_CALLS:
        for call in message.tool_calls or []:
            item.update(_call_back(kind, call, hint))
    elif kind in _OUTPUTS:
        if not hint.get("unanswered"):
            item[_OUTPUTS[kind]] = message.tool_call_id
        if content is not _ABSENT:
            item["output"] = (
                content[0] if hint.get("output") == "part" and isinstance(content, list) else content
            )
    elif kind == "reasoning":
        if hint.get("summary") and content is not _ABSENT:
            item["summary"] = content
    elif kind == "message" or kind is None:
        item["role"] = message.role
        if content is not _ABSENT:
            item["content"] = content
    item.update(
        (key, value) for key, value in (message.model_extra or {}).items() if key not in _NOT_ITEM_KEYS
    )
    kept = hint.get("keys")
    if isinstance(kept, dict):
        item.update(kept)
    return [item]


def _call_back(kind: str, call: ToolCall, hint: dict[str, Any]) -> dict[str, Any]:
    item: dict[str, Any] = {}
    if hint.get("id_key") in ("call_id", "id"):
        item[hint["id_key"]] = call.id
    body = call.custom if kind == "custom_tool_call" else call.function
    if isinstance(body, ToolFunction):
        body = body.model_dump(mode="json")
    if isinstance(body, dict):
        if not hint.get("derived_name"):
            item["name"] = body.get("name")
        item.update((key, body[key]) for key in ("arguments", "input") if key in body)
    rest = (call.model_extra or {}).get("item")
    if isinstance(rest, dict):
        item.update(rest)
    return item


_FOREIGN_ROLES = frozenset({"system", "developer", "user", "assistant", "tool"})


def _foreign_items(message: Message) -> list[dict[str, Any]]:
    """A chat-completions message as the input items of the same meaning: a
    message, and its tool calls as ``function_call`` items after it; a tool
    message as a ``function_call_output``."""
    if message.role == "tool":
        output = message.content if isinstance(message.content, str) else _texts(message.content)
        return [{"type": "function_call_output", "call_id": message.tool_call_id, "output": output}]
    items: list[dict[str, Any]] = []
    content: Any = message.content
    if isinstance(content, list):
        content = [part for item in content if (part := _foreign_part(item, message.role)) is not None]
    if content or not message.tool_calls:
        items.append({"role": message.role, "content": content if content is not None else ""})
    for call in message.tool_calls or []:
        function = call.function
        if call.type == "function" and isinstance(function, ToolFunction) and isinstance(call.id, str):
            items.append(
                {
                    "type": "function_call",
                    "call_id": call.id,
                    "name": function.name,
                    "arguments": function.arguments,
                }
            )
    return items


def _texts(content: list[ContentPart] | None) -> str:
    return "".join(part.text for part in content or [] if isinstance(part.text, str))


def _foreign_part(part: ContentPart, role: str) -> dict[str, Any] | None:
    if part.type == "text" and isinstance(part.text, str):
        return {"type": "output_text" if role == "assistant" else "input_text", "text": part.text}
    if part.type == "image_url":
        url = part.image_url.get("url") if isinstance(part.image_url, dict) else part.image_url
        return {"type": "input_image", "image_url": url, "detail": "auto"} if isinstance(url, str) else None
    if part.type in _PART_TYPES:
        return part.model_dump(mode="json")
    return None


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="openai-responses",
        what="OpenAI Responses API input items, a Response, or its stream events",
        round_trip="JSON-equal",
        family="model API",
        detection=30,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
        record="record_response",
        near_misses=(
            (
                lambda d: str(kind_of(d) or "").startswith("response."),
                "an OpenAI Responses API stream event: a stream's events import together, from "
                "response.created to response.completed (a JSON list of them, or their lines in one file)",
            ),
        ),
    ),
)
