"""Documents to rows and rows to documents: the one place that knows both shapes.

The split is generic and lossless by construction: of the keys a record was
given (its canonical JSON), those that have a column go into their columns (only
when the value has the column's type), and whatever is left is kept as JSON in
``extra`` / ``data``. Reading merges the two back. A ``NULL`` column therefore
means "not given, or kept in the JSON" and never loses an explicit ``null``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel

from ._document import ChatDocument, ContentPart, Feedback, Message, ToolCall
from ._types import jsonb_keeps

__all__ = [
    "CHAT_ORDERED",
    "TRUSTED",
    "ChatRows",
    "MessageRows",
    "chat_ordered_json",
    "document_from_rows",
    "document_to_rows",
    "documents_from_rows",
    "feedback_from_row",
    "feedback_to_row",
    "fold_chunks",
    "message_from_rows",
    "messages_to_rows",
    "ordered_json",
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
#: Tool call ids longer than this stay in the JSON: their columns are indexed,
#: and a B-tree entry holds at most ~2.7 kB (the length of the other ids).
_CALL_ID_LENGTH = 255


@dataclass
class MessageRows:
    messages: list[Row] = field(default_factory=list)
    parts: list[Row] = field(default_factory=list)
    tool_calls: list[Row] = field(default_factory=list)

    def children(self) -> Iterator[list[Row]]:
        """The rows of each child table here."""
        yield from (self.messages, self.parts, self.tool_calls)

    def of_user(self, user_id: str | None) -> None:
        """Give every child row its chat's user (``chat_user_id``, what row-level security reads)."""
        for table_rows in self.children():
            for row in table_rows:
                row["chat_user_id"] = user_id


@dataclass
class ChatRows(MessageRows):
    chat: Row = field(default_factory=dict)
    tags: list[Row] = field(default_factory=list)
    feedback: list[Row] = field(default_factory=list)

    def children(self) -> Iterator[list[Row]]:
        yield from super().children()
        yield from (self.tags, self.feedback)


def _given(record: BaseModel) -> Iterator[tuple[str, Any]]:
    """The fields the input named (with their values), then the unknown keys."""
    values = record.__dict__
    for name in record.__pydantic_fields_set__:
        if name in values:
            yield name, values[name]
    if record.__pydantic_extra__:
        yield from record.__pydantic_extra__.items()


def _plain(value: Any) -> Any:
    """A field's value as canonical JSON data (records become their dicts)."""
    if isinstance(value, BaseModel):
        return {name: _plain(item) for name, item in _given(value)}
    if type(value) is list and value and isinstance(value[0], BaseModel):
        return [_plain(item) for item in value]
    return value


def _is_text(value: Any) -> bool:
    return type(value) is str


def _is_call_id(value: Any) -> bool:
    return type(value) is str and len(value) <= _CALL_ID_LENGTH


def _is_int32(value: Any) -> bool:
    return type(value) is int and value in _INT32


def _text_key(part_type: str | None) -> str:
    return "refusal" if part_type == "refusal" else "text"


def _call_keys(call_type: str | None) -> tuple[str, str]:
    """Where a tool call keeps its name and its argument text."""
    return ("custom", "input") if call_type == "custom" else ("function", "arguments")


def document_to_rows(doc: ChatDocument, *, now: datetime, version: int) -> ChatRows:
    """The rows that store ``doc``; missing timestamps become ``now``."""
    chat_id = doc.chat_id
    rows = ChatRows()
    leaf = doc.active_index()
    chat: Row = {
        "chat_id": chat_id,
        "created_at": doc.created_at or now,
        "updated_at": doc.updated_at or now,
        "message_count": len(doc.messages),
        "version": version,
        "active_leaf": leaf,
        **dict.fromkeys((*_CHAT_TEXT_COLUMNS, *_CHAT_JSON_COLUMNS)),
    }
    extra: Row = {}
    for name, value in _given(doc):
        if name in _CHAT_SKIPPED:
            continue
        if name in _CHAT_COLUMN_TYPES and type(value) is _CHAT_COLUMN_TYPES[name]:
            chat[name] = value
        else:
            extra[name] = _plain(value)
    chat["extra"] = extra or None
    chat["ordered_json"] = ordered_json(chat, CHAT_ORDERED)
    rows.chat = chat
    rows.tags = [
        {"chat_id": chat_id, "tag": tag, "position": position} for position, tag in enumerate(doc.tags)
    ]
    if doc.is_linear:
        _add_messages(rows, chat_id, doc.messages, 0, now)
    else:
        parents = doc.parent_indexes()
        _add_messages(rows, chat_id, doc.messages, 0, now, parents=parents, on_path=_path_of(leaf, parents))
    chat["path_length"] = sum(1 for row in rows.messages if row["on_path"])
    chat["search_from"] = None  # searchable as written; a write that defers indexing marks it
    chat["sealed"] = False  # sealed by the write, when it seals
    rows.feedback = [
        feedback_to_row(chat_id, position, item, now=now) for position, item in enumerate(doc.feedback)
    ]
    rows.of_user(chat["user_id"])
    return rows


_CHAT_COLUMN_TYPES: dict[str, type] = {
    **dict.fromkeys(_CHAT_TEXT_COLUMNS, str),
    **dict.fromkeys(_CHAT_JSON_COLUMNS, dict),
}
_CHAT_SKIPPED = frozenset(
    {"chat_id", "created_at", "updated_at", "tags", "messages", "active_leaf", "feedback", "version"}
)
_MESSAGE_SKIPPED = frozenset(
    {"uid", "parent", "role", "completed", "created_at", "content", "tool_calls", "usage"}
)
_MESSAGE_COLUMNS = frozenset({*_MESSAGE_TEXT_COLUMNS, "updated_at"})


def _path_of(leaf: int | None, parents: Sequence[int | None]) -> set[int]:
    """The indexes of the messages from a root to ``leaf``."""
    path = set()
    while leaf is not None:
        path.add(leaf)
        leaf = parents[leaf]
    return path


def messages_to_rows(
    chat_id: str,
    messages: Sequence[Message],
    *,
    user_id: str | None,
    first_position: int,
    now: datetime,
    parent: int | None = None,
    sibling_index: int = 0,
) -> MessageRows:
    """The rows of messages added to a chat of ``user_id``'s as a chain, on
    its active path: the first a child of ``parent`` (a position; ``None``: a
    root), placed ``sibling_index`` among its siblings, and each next one a
    child of the one before."""
    rows = MessageRows()
    _add_messages(rows, chat_id, messages, first_position, now, first_parent=parent)
    if rows.messages:
        rows.messages[0]["sibling_index"] = sibling_index
    rows.of_user(user_id)
    return rows


def _add_messages(
    rows: MessageRows,
    chat_id: str,
    messages: Sequence[Message],
    first: int,
    now: datetime,
    *,
    first_parent: int | None = None,
    parents: Sequence[int | None] | None = None,
    on_path: set[int] | None = None,
) -> None:
    """Add the messages' rows at positions from ``first``: a chain (each
    message the child of the one before, the first of ``first_parent``), all
    on the active path; or, given ``parents`` (each message's parent by
    index) and ``on_path`` (the indexes on the active path), a whole tree."""
    children: dict[int | None, int] = {}
    for index, message in enumerate(messages):
        position = first + index
        chained = first_parent if index == 0 else position - 1
        parent = chained if parents is None else parents[index]
        sibling_index = children.get(parent, 0)
        children[parent] = sibling_index + 1
        values = message.__dict__
        given = message.__pydantic_fields_set__
        row: Row = {
            "chat_id": chat_id,
            "position": position,
            "parent_position": parent,
            "sibling_index": sibling_index,
            "on_path": on_path is None or index in on_path,
            "uid": values["uid"],
            "role": values["role"],
            "completed": values["completed"],
            "created_at": values["created_at"] or now,
            "updated_at": None,
            "text": None,
            "name": None,
            "tool_call_id": None,
            "model": None,
            "finish_reason": None,
            "prompt_tokens": None,
            "completion_tokens": None,
            "total_tokens": None,
        }
        extra: Row = dict(message.__pydantic_extra__) if message.__pydantic_extra__ else {}
        for name in given:
            if name in _MESSAGE_SKIPPED or name not in values:
                continue
            value = values[name]
            if (
                name in _MESSAGE_COLUMNS
                and value is not None
                and (name != "tool_call_id" or _is_call_id(value))
            ):
                row[name] = value
            else:
                extra[name] = value  # refusal, audio, function_call, or an explicit null
        content = values["content"]
        if content is None:
            row["content_form"] = "null" if "content" in given else "absent"
        elif type(content) is str:
            row["content_form"] = "string"
            row["text"] = content
        else:
            row["content_form"] = "parts"
            rows.parts.extend(
                _content_part_row(chat_id, position, index, part) for index, part in enumerate(content)
            )
        calls = values["tool_calls"]
        if calls:
            rows.tool_calls.extend(
                _tool_call_row(chat_id, position, index, call) for index, call in enumerate(calls)
            )
        elif "tool_calls" in given:
            extra["tool_calls"] = calls  # null or []
        usage = values["usage"]
        if usage is not None:
            remainder = {}
            for name, value in _given(usage):
                if name in _TOKEN_COLUMNS and _is_int32(value):
                    row[name] = value
                else:
                    remainder[name] = value
            if remainder or all(row[name] is None for name in _TOKEN_COLUMNS):
                extra["usage"] = remainder
        elif "usage" in given:
            extra["usage"] = None
        row["extra"] = extra or None
        row["ordered_json"] = ordered_json(row, _MESSAGE_ORDERED) if row["extra"] else None
        rows.messages.append(row)


def _content_part_row(chat_id: str, message: int, position: int, part: ContentPart) -> Row:
    part_type = part.type
    text_key = _text_key(part_type)
    text = part.__dict__.get(text_key)
    if type(text) is not str:
        text = None
    data = {
        name: value
        for name, value in _given(part)
        if name != "type" and not (name == text_key and text is not None)
    }
    return _part_row(chat_id, message, position, part_type, text, data or None)


def _part_row(chat_id: str, message: int, position: int, part_type: str, text: str | None, data: Any) -> Row:
    row = {
        "chat_id": chat_id,
        "message_position": message,
        "position": position,
        "type": part_type,
        "text": text,
        "data": data,
        "ordered_json": None,
        "attachment_sha256": None,
        "attachment_path": None,
    }
    if data:
        row["ordered_json"] = ordered_json(row, _PART_ORDERED)
    return row


def _tool_call_row(chat_id: str, message: int, position: int, call: ToolCall) -> Row:
    call_id = call.id if _is_call_id(call.id) else None
    call_type = call.type if _is_text(call.type) else None
    body_key, text_key = _call_keys(call_type)
    name = arguments = None
    data: Row = {}
    given_body = None
    for key, given in _given(call):
        if (key == "id" and call_id is not None) or (key == "type" and call_type is not None):
            continue
        value = _plain(given)
        if key == body_key and type(value) is dict:
            body = dict(value)
            if _is_text(body.get("name")):
                name = body.pop("name")
            if _is_text(body.get(text_key)):
                arguments = body.pop(text_key)
            if body or (name is None and arguments is None):
                data[key] = body
            # Reading puts the name and the text after the body's other keys. A
            # ``function`` comes back in its model's order anyway; a free-form
            # ``custom`` object given in another order is kept whole in ordered_json.
            if not isinstance(given, BaseModel) and list(value) != [
                *body,
                *(["name"] if name is not None else []),
                *([text_key] if arguments is not None else []),
            ]:
                given_body = value
        else:
            data[key] = value
    row = {
        "chat_id": chat_id,
        "message_position": message,
        "position": position,
        "call_id": call_id,
        "type": call_type,
        "name": name,
        "arguments": arguments,
        "data": data or None,
        "ordered_json": None,
    }
    if given_body is not None:
        row["ordered_json"] = {"data": {**data, body_key: given_body}}
    elif data:
        row["ordered_json"] = ordered_json(row, _CALL_ORDERED)
    return row


def feedback_to_row(
    chat_id: str, position: int, item: Feedback, *, now: datetime, user_id: str | None = None
) -> Row:
    """The feedback row of ``item``, on a chat of ``user_id``'s."""
    row: Row = {
        "chat_id": chat_id,
        "chat_user_id": user_id,
        "id": item.id,
        "position": position,
        "created_at": item.created_at or now,
        "score": None,
        **dict.fromkeys(_FEEDBACK_TEXT_COLUMNS),
    }
    extra: Row = {}
    for name, value in _given(item):
        if name in ("id", "created_at"):
            continue
        if name in _FEEDBACK_TEXT_COLUMNS and value is not None:
            row[name] = value
        elif name == "score" and (
            type(value) is float or (type(value) is int and abs(value) <= _EXACT_FLOAT)
        ):
            row[name] = value
            if type(value) is float and value.is_integer():
                extra[name] = value  # the column would give it back as an integer (-0.0 as 0)
        else:
            extra[name] = value
    row["extra"] = extra or None
    row["ordered_json"] = ordered_json(row, _FEEDBACK_ORDERED) if extra else None
    return row


def _keys(record: type[BaseModel]) -> frozenset[str]:
    return frozenset(
        key for name, info in record.model_fields.items() for key in (name, info.alias) if key is not None
    )


#: The JSON columns of each table, each with the keys whose order does not
#: matter at its top level: a record's known fields, which come back in the
#: model's order whatever order they were stored in.
CHAT_ORDERED = (
    *((name, frozenset[str]()) for name in _CHAT_JSON_COLUMNS),
    ("extra", _keys(ChatDocument)),
)
_MESSAGE_ORDERED = (("extra", _keys(Message)),)
_PART_ORDERED = (("data", _keys(ContentPart)),)
_CALL_ORDERED = (("data", _keys(ToolCall)),)
_FEEDBACK_ORDERED = (("extra", _keys(Feedback)),)


def chat_ordered_json(values: Mapping[str, Any]) -> Row | None:
    """``ordered_json`` of those of a chat row's JSON columns in ``values``."""
    return ordered_json(values, [(name, known) for name, known in CHAT_ORDERED if name in values])


def ordered_json(row: Mapping[str, Any], columns: Iterable[tuple[str, frozenset[str]]]) -> Row | None:
    """The row's ``ordered_json``: its JSON values (of ``columns``) that
    ``jsonb`` would not give back as given (keys in another order, ``-0.0`` as
    ``0.0``), as given, by column name; None if there are none (nearly always)."""
    kept = {
        name: value
        for name, known in columns
        if (value := row[name]) is not None and not jsonb_keeps(value, ignoring=known)
    }
    return kept or None


# -- rows to documents ---------------------------------------------------------


def _json(row: Mapping[Any, Any], name: str) -> Any:
    """A JSON column's value, in the key order it was given (see ordered_json)."""
    ordered = row.get("ordered_json")
    if ordered and name in ordered:
        return ordered[name]
    return row[name]


def _merge(columns: Mapping[Any, Any], names: Iterable[str]) -> Row:
    """The row's ``extra`` with the values of its columns ``names`` added."""
    if columns.get("ordered_json"):
        columns = {**columns, **columns["ordered_json"]}
    extra = columns["extra"]
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
    data = _merge(row, ("uid", "role", "completed", "created_at", "updated_at", *_MESSAGE_TEXT_COLUMNS))
    tokens = {name: row[name] for name in _TOKEN_COLUMNS if row[name] is not None}
    if tokens:
        usage = data.get("usage")
        data["usage"] = {**tokens, **usage} if isinstance(usage, dict) else tokens
    form = row["content_form"]
    if form == "null":
        data["content"] = None
    elif form == "string":
        data["content"] = row["text"] if row["text"] is not None else ""
    elif form == "parts":
        data["content"] = [_part_from_row(part) for part in parts]
    if calls:
        data["tool_calls"] = [_tool_call_from_row(call) for call in calls]
    return data


def _part_from_row(row: Mapping[Any, Any]) -> Row:
    data = _json(row, "data")
    part: Row = dict(data) if data else {}
    part["type"] = row["type"]
    if row["text"] is not None:
        part[_text_key(row["type"])] = row["text"]
    return part


def _tool_call_from_row(row: Mapping[Any, Any]) -> Row:
    data = _json(row, "data")
    call: Row = dict(data) if data else {}
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
    data = _merge(row, ("id", "created_at", *_FEEDBACK_TEXT_COLUMNS))
    score = row["score"]
    if score is not None and "score" not in data:  # whole-number floats are in extra
        data["score"] = int(score) if isinstance(score, float) and score.is_integer() else score
    return data


def fold_chunks(message: Row, chunks: Sequence[Mapping[Any, Any]]) -> list[str]:
    """Fold a message's streamed chunks into its canonical dict, in place:
    content chunks appended to its text, tool-call chunks to that call's text
    (``function.arguments``, a custom call's ``custom.input``). Returns the
    fields (``tool_calls[1].function``) that cannot take text, being no object
    or holding a text that is no string; their fragments are left out."""
    text = "".join(chunk["text"] for chunk in chunks if chunk["tool_call_index"] is None)
    if text:
        content = message.get("content")
        if isinstance(content, list):
            if content and content[-1].get("type") == "text" and isinstance(content[-1].get("text"), str):
                content[-1] = {**content[-1], "text": content[-1]["text"] + text}
            else:
                content.append({"type": "text", "text": text})
        else:
            message["content"] = (content or "") + text
    fragments: dict[int, list[str]] = {}
    for chunk in chunks:
        if chunk["tool_call_index"] is not None:
            fragments.setdefault(chunk["tool_call_index"], []).append(chunk["text"])
    if not fragments:
        return []
    calls = message.get("tool_calls") or []
    unfolded: list[str] = []
    for index in sorted(fragments):
        while len(calls) <= index:
            calls.append({"type": "function", "function": {"arguments": ""}})
        call = calls[index]
        body_key, text_key = _call_keys(call.get("type"))
        body = call.get(body_key)
        if body is None:
            body = {}
        so_far = body.get(text_key) if type(body) is dict else None
        if type(body) is not dict or not (so_far is None or type(so_far) is str):
            unfolded.append(f"tool_calls[{index}].{body_key}")
            continue
        call[body_key] = {**body, text_key: (so_far or "") + "".join(fragments[index])}
    message["tool_calls"] = calls
    return unfolded


def document_from_rows(
    chat: Mapping[Any, Any],
    tags: Sequence[str],
    messages: Sequence[Mapping[Any, Any]],
    parts: Sequence[Mapping[Any, Any]],
    calls: Sequence[Mapping[Any, Any]],
    feedback: Sequence[Mapping[Any, Any]],
    chunks: Sequence[Mapping[Any, Any]] = (),
) -> ChatDocument:
    """Rebuild one document from its rows (each list in key order); messages
    still being streamed show the text received so far. The message rows may
    be the whole tree, or the active path only (which gives a linear document)."""
    parts_of: defaultdict[int, list[Mapping[Any, Any]]] = defaultdict(list)
    for part in parts:
        parts_of[part["message_position"]].append(part)
    calls_of: defaultdict[int, list[Mapping[Any, Any]]] = defaultdict(list)
    for call in calls:
        calls_of[call["message_position"]].append(call)
    chunks_of: defaultdict[int, list[Mapping[Any, Any]]] = defaultdict(list)
    for chunk in chunks:
        chunks_of[chunk["message_position"]].append(chunk)
    data = _merge(chat, ("chat_id", "created_at", "updated_at", *_CHAT_TEXT_COLUMNS, *_CHAT_JSON_COLUMNS))
    data["tags"] = list(tags)
    data["messages"] = [
        message_from_rows(row, parts_of[row["position"]], calls_of[row["position"]]) for row in messages
    ]
    uid_of = {row["position"]: row["uid"] for row in messages}
    previous = None
    for message, row in zip(data["messages"], messages, strict=True):
        if row["position"] in chunks_of:
            fold_chunks(message, chunks_of[row["position"]])
        parent = row["parent_position"]
        if parent != previous:  # not the message before: named
            message["parent"] = None if parent is None else uid_of[parent]
        previous = row["position"]
    if chat["active_leaf"] != previous:  # not the last message: named
        data["active_leaf"] = None if chat["active_leaf"] is None else uid_of[chat["active_leaf"]]
    data["feedback"] = [feedback_from_row(row) for row in feedback]
    data["version"] = chat["version"]
    return ChatDocument.model_validate(data, context=TRUSTED)


def documents_from_rows(
    chat_ids: Sequence[str],
    chats: Sequence[Mapping[Any, Any]],
    children: Mapping[str, Mapping[Any, Sequence[Mapping[Any, Any]]]],
) -> list[ChatDocument]:
    """The documents of the chat rows found, in the order of ``chat_ids``;
    ``children`` holds each chat's child rows by table, in document order."""
    documents = {}
    for chat in chats:
        rows = {table.name: table_rows for table, table_rows in children[chat["chat_id"]].items()}
        documents[chat["chat_id"]] = document_from_rows(
            chat,
            [row["tag"] for row in rows["chat_tags"]],
            rows["messages"],
            rows["content_parts"],
            rows["tool_calls"],
            rows["feedback"],
            rows["message_chunks"],
        )
    return [documents[chat_id] for chat_id in chat_ids if chat_id in documents]
