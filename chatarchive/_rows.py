"""Documents to rows and rows to documents: the one place that knows both shapes.

The split is generic and lossless by construction: a model is dumped to its
canonical dict, the keys that have a column are moved into their columns (only
when the value has the column's type), and whatever is left is kept as JSON in
``extra`` / ``data``. Reading merges the two back. A ``NULL`` column therefore
means "not given, or kept in the JSON" and never loses an explicit ``null``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from ._document import ChatDocument, Feedback, Message

__all__ = [
    "TRUSTED",
    "ChatRows",
    "MessageRows",
    "document_from_rows",
    "document_to_rows",
    "feedback_from_row",
    "feedback_to_row",
    "message_from_rows",
    "messages_to_rows",
]

Row = dict[str, Any]

#: Validation context for data read back from the archive (already checked once).
TRUSTED = {"trusted": True}

_INT32 = range(-(2**31), 2**31)
_EXACT_FLOAT = 2**53
_TOKEN_COLUMNS = ("prompt_tokens", "completion_tokens", "total_tokens")
_MESSAGE_TEXT_COLUMNS = ("name", "tool_call_id", "model", "finish_reason")
_CHAT_TEXT_COLUMNS = ("user_id", "title", "model")
_CHAT_JSON_COLUMNS = ("model_settings", "workflow", "metadata")
_FEEDBACK_TEXT_COLUMNS = ("message_uid", "user_id", "label", "comment")


@dataclass
class MessageRows:
    messages: list[Row] = field(default_factory=list)
    parts: list[Row] = field(default_factory=list)
    tool_calls: list[Row] = field(default_factory=list)


@dataclass
class ChatRows(MessageRows):
    chat: Row = field(default_factory=dict)
    tags: list[Row] = field(default_factory=list)
    feedback: list[Row] = field(default_factory=list)


def _take(data: dict[str, Any], key: str, kind: type | tuple[type, ...]) -> Any:
    """Pop ``key`` if its value has the column's type; otherwise leave it in ``data``."""
    value = data.get(key)
    if value is not None and isinstance(value, kind) and not isinstance(value, bool):
        return data.pop(key)
    return None


def _text_key(part_type: str | None) -> str:
    return "refusal" if part_type == "refusal" else "text"


def _call_keys(call_type: str | None) -> tuple[str, str]:
    """Where a tool call keeps its name and its argument text."""
    return ("custom", "input") if call_type == "custom" else ("function", "arguments")


def document_to_rows(doc: ChatDocument, *, now: datetime, version: int) -> ChatRows:
    """The rows that store ``doc``; missing timestamps become ``now``."""
    data = doc.model_dump()
    chat_id = doc.chat_id
    del data["chat_id"], data["messages"], data["feedback"], data["tags"]
    rows = ChatRows()
    rows.chat = {
        "chat_id": chat_id,
        **{name: _take(data, name, str) for name in _CHAT_TEXT_COLUMNS},
        **{name: _take(data, name, dict) for name in _CHAT_JSON_COLUMNS},
        "created_at": data.pop("created_at", None) or now,
        "updated_at": data.pop("updated_at", None) or now,
        "message_count": len(doc.messages),
        "version": version,
    }
    rows.chat["extra"] = data or None
    rows.tags = [
        {"chat_id": chat_id, "tag": tag, "position": position} for position, tag in enumerate(doc.tags)
    ]
    _add_messages(rows, chat_id, doc.messages, 0, now)
    rows.feedback = [
        feedback_to_row(chat_id, position, item, now=now) for position, item in enumerate(doc.feedback)
    ]
    return rows


def messages_to_rows(
    chat_id: str, messages: Sequence[Message], *, first_position: int, now: datetime
) -> MessageRows:
    rows = MessageRows()
    _add_messages(rows, chat_id, messages, first_position, now)
    return rows


def _add_messages(
    rows: MessageRows, chat_id: str, messages: Sequence[Message], first: int, now: datetime
) -> None:
    for position, message in enumerate(messages, start=first):
        data = message.model_dump()
        row: Row = {
            "chat_id": chat_id,
            "position": position,
            "uid": data.pop("uid"),
            "role": data.pop("role"),
            "completed": data.pop("completed"),
            "created_at": data.pop("created_at", None) or now,
            "updated_at": _take(data, "updated_at", datetime),
        }
        for name in _MESSAGE_TEXT_COLUMNS:
            row[name] = _take(data, name, str)
        _split_usage(data, row)
        _split_content(data, row, rows.parts, chat_id, position)
        calls = data.get("tool_calls")
        if isinstance(calls, list) and calls:
            del data["tool_calls"]
            rows.tool_calls.extend(
                _tool_call_row(chat_id, position, index, call) for index, call in enumerate(calls)
            )
        row["extra"] = data or None
        rows.messages.append(row)


def _split_usage(data: dict[str, Any], row: Row) -> None:
    usage = data.get("usage")
    for name in _TOKEN_COLUMNS:
        row[name] = None
    if not isinstance(usage, dict):
        return
    for name in _TOKEN_COLUMNS:
        value = usage.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value in _INT32:
            row[name] = usage.pop(name)
    if not usage and any(row[name] is not None for name in _TOKEN_COLUMNS):
        del data["usage"]


def _split_content(data: dict[str, Any], row: Row, parts: list[Row], chat_id: str, position: int) -> None:
    if "content" not in data:
        row["content_form"] = "absent"
        return
    content = data.pop("content")
    if content is None:
        row["content_form"] = "null"
    elif isinstance(content, str):
        row["content_form"] = "string"
        parts.append(_part_row(chat_id, position, 0, "text", content, None))
    else:
        row["content_form"] = "parts"
        for index, part in enumerate(content):
            part_type = part.pop("type")
            text = _take(part, _text_key(part_type), str)
            parts.append(_part_row(chat_id, position, index, part_type, text, part or None))


def _part_row(chat_id: str, message: int, position: int, part_type: str, text: str | None, data: Any) -> Row:
    return {
        "chat_id": chat_id,
        "message_position": message,
        "position": position,
        "type": part_type,
        "text": text,
        "data": data,
    }


def _tool_call_row(chat_id: str, message: int, position: int, call: dict[str, Any]) -> Row:
    call_id = _take(call, "id", str)
    call_type = _take(call, "type", str)
    body_key, text_key = _call_keys(call_type)
    name = arguments = None
    body = call.get(body_key)
    if isinstance(body, dict):
        name = _take(body, "name", str)
        arguments = _take(body, text_key, str)
        if not body and (name is not None or arguments is not None):
            del call[body_key]
    return {
        "chat_id": chat_id,
        "message_position": message,
        "position": position,
        "call_id": call_id,
        "type": call_type,
        "name": name,
        "arguments": arguments,
        "data": call or None,
    }


def feedback_to_row(chat_id: str, position: int, item: Feedback, *, now: datetime) -> Row:
    data = item.model_dump()
    row: Row = {
        "chat_id": chat_id,
        "id": data.pop("id"),
        "position": position,
        "created_at": data.pop("created_at", None) or now,
    }
    for name in _FEEDBACK_TEXT_COLUMNS:
        row[name] = _take(data, name, str)
    score = data.get("score")
    row["score"] = None
    if isinstance(score, float) or (isinstance(score, int) and abs(score) <= _EXACT_FLOAT):
        row["score"] = _take(data, "score", (int, float))
    row["extra"] = data or None
    return row


# -- rows to documents ---------------------------------------------------------


def _merge(columns: Mapping[Any, Any], names: Iterable[str], extra: Mapping[Any, Any] | None) -> Row:
    data: Row = dict(extra) if extra else {}
    for name in names:
        value = columns[name]
        if value is not None:
            data[name] = value
    return data


def message_from_rows(
    row: Mapping[Any, Any], parts: Sequence[Mapping[Any, Any]], calls: Sequence[Mapping[Any, Any]]
) -> Row:
    """The canonical dict of one message, from its row and its part and call rows."""
    data = _merge(
        row, ("uid", "role", "completed", "created_at", "updated_at", *_MESSAGE_TEXT_COLUMNS), row["extra"]
    )
    tokens = {name: row[name] for name in _TOKEN_COLUMNS if row[name] is not None}
    if tokens:
        usage = data.get("usage")
        data["usage"] = {**tokens, **usage} if isinstance(usage, dict) else tokens
    form = row["content_form"]
    if form == "null":
        data["content"] = None
    elif form == "string":
        data["content"] = parts[0]["text"] if parts else ""
    elif form == "parts":
        data["content"] = [_part_from_row(part) for part in parts]
    if calls:
        data["tool_calls"] = [_tool_call_from_row(call) for call in calls]
    return data


def _part_from_row(row: Mapping[Any, Any]) -> Row:
    part: Row = dict(row["data"]) if row["data"] else {}
    part["type"] = row["type"]
    if row["text"] is not None:
        part[_text_key(row["type"])] = row["text"]
    return part


def _tool_call_from_row(row: Mapping[Any, Any]) -> Row:
    call: Row = dict(row["data"]) if row["data"] else {}
    if row["call_id"] is not None:
        call["id"] = row["call_id"]
    if row["type"] is not None:
        call["type"] = row["type"]
    if row["name"] is not None or row["arguments"] is not None:
        body_key, text_key = _call_keys(row["type"])
        body = call[body_key] = dict(call.get(body_key) or {})
        if row["name"] is not None:
            body["name"] = row["name"]
        if row["arguments"] is not None:
            body[text_key] = row["arguments"]
    return call


def feedback_from_row(row: Mapping[Any, Any]) -> Row:
    data = _merge(row, ("id", "created_at", "score", *_FEEDBACK_TEXT_COLUMNS), row["extra"])
    score = row["score"]
    if isinstance(score, float) and score.is_integer():
        data["score"] = int(score)  # the column is a double; most scores are whole numbers
    return data


def document_from_rows(
    chat: Mapping[Any, Any],
    tags: Sequence[str],
    messages: Sequence[Mapping[Any, Any]],
    parts: Sequence[Mapping[Any, Any]],
    calls: Sequence[Mapping[Any, Any]],
    feedback: Sequence[Mapping[Any, Any]],
) -> ChatDocument:
    """Rebuild one document from its rows (each list in key order)."""
    parts_of: defaultdict[int, list[Mapping[Any, Any]]] = defaultdict(list)
    for part in parts:
        parts_of[part["message_position"]].append(part)
    calls_of: defaultdict[int, list[Mapping[Any, Any]]] = defaultdict(list)
    for call in calls:
        calls_of[call["message_position"]].append(call)
    data = _merge(
        chat,
        ("chat_id", "created_at", "updated_at", *_CHAT_TEXT_COLUMNS, *_CHAT_JSON_COLUMNS),
        chat["extra"],
    )
    data["tags"] = list(tags)
    data["messages"] = [
        message_from_rows(row, parts_of[row["position"]], calls_of[row["position"]]) for row in messages
    ]
    data["feedback"] = [feedback_from_row(row) for row in feedback]
    data["version"] = chat["version"]
    return ChatDocument.model_validate(data, context=TRUSTED)
