"""One conversation of Claude.ai's data export (an item of ``conversations.json``).

A conversation (``uuid``, ``name``, ``created_at``, ``updated_at``,
``account``, ``chat_messages``) is a chat: ``uuid`` is its id, ``name`` its
title, the times its times, ``account.uuid`` its user and ``model`` (when the
export has it) its model. Each of ``chat_messages`` is a message of the role
``user`` (``sender: "human"``) or of its sender's role, with the message's
``uuid`` as its uid and its ``created_at`` as its time. Its ``content``
blocks are stored as Anthropic's Messages API blocks are (see
``formats.anthropic``): text and thinking as parts, ``tool_use`` as tool
calls, ``tool_result`` as tool messages; a message with only ``text`` has it
as its content. ``attachments`` are parts of the type ``claude_attachment``,
their ``extracted_content`` as the part's text (searchable), and ``files``
parts of the type ``claude_file``.

Where messages name their ``parent_message_uuid``, the conversation is a
tree (regenerated answers and edited questions are branches), and
``current_leaf_message_uuid`` names the active leaf; an export without them
is one path.

Every other key of a message is kept under its ``claude_ai`` key (its
``text`` only when it is not its text blocks joined), and the conversation's
other keys under the chat's, so that export gives back the same JSON.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from chatarchive._document import ChatDocument, Message
from chatarchive._exceptions import LONGEST_ID, InvalidDocument

from . import anthropic
from ._format import Format
from ._shapes import json_object, kept

__all__ = ["FORMATS", "KEY", "from_document", "looks_like", "to_document"]

KEY = "claude_ai"
#: The parent of a conversation's first message, in exports that name parents.
ROOT = "00000000-0000-4000-8000-000000000000"
#: The namespace of the uids of the further archive messages one message makes.
PART_NAMESPACE = uuid.UUID("5f0c7d0e-2f7a-4a47-8f55-2c3d4b6a9e10")
_ATTACHMENT, _FILE = "claude_attachment", "claude_file"


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("chat_messages"), list) and "uuid" in data


def _moment(value: Any, field: str) -> datetime | None:
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise InvalidDocument(f"{value!r} is not an ISO 8601 time", field=field) from None


def to_document(data: Any) -> ChatDocument:
    if not looks_like(data):
        raise InvalidDocument("a Claude.ai conversation has a 'uuid' and a 'chat_messages' list")
    messages: list[dict[str, Any]] = []
    last_of: dict[str, str] = {}  # a Claude.ai message's uuid: the uid of its last archive message
    tree = any(isinstance(item, dict) and "parent_message_uuid" in item for item in data["chat_messages"])
    for index, raw in enumerate(data["chat_messages"]):
        where = f"chat_messages[{index}]"
        made = _messages(json_object(raw, where), where)
        if tree:
            parent = raw.get("parent_message_uuid")
            made[0]["parent"] = last_of.get(parent) if isinstance(parent, str) else None
        key = raw.get("uuid")
        if isinstance(key, str):
            last_of[key] = made[-1]["uid"]
        messages.extend(made)
    conversation = {key: value for key, value in data.items() if key != "chat_messages"}
    document: dict[str, Any] = {"messages": messages, KEY: {"conversation": conversation}}
    if _is_id(data.get("uuid")):
        document["chat_id"] = data["uuid"]
    if isinstance(data.get("name"), str):
        document["title"] = data["name"]
    for field in ("created_at", "updated_at"):
        moment = _moment(data.get(field), field)
        if moment is not None:
            document[field] = moment
    account = data.get("account")
    if isinstance(account, dict) and _is_id(account.get("uuid")):
        document["user_id"] = account["uuid"]
    if isinstance(data.get("model"), str):
        document["model"] = data["model"]
    leaf = data.get("current_leaf_message_uuid")
    if tree and isinstance(leaf, str) and leaf in last_of:
        document["active_leaf"] = last_of[leaf]
    return ChatDocument.parse(document)


def _is_id(value: Any) -> bool:
    return isinstance(value, str) and 0 < len(value) <= LONGEST_ID


def _messages(raw: dict[str, Any], where: str) -> list[dict[str, Any]]:
    """A Claude.ai message as the archive's messages (one, or more when its
    content holds tool results)."""
    sender = raw.get("sender")
    role = "user" if sender == "human" else sender if isinstance(sender, str) and sender else "unknown"
    others = {key: value for key, value in raw.items() if key not in ("content", "attachments", "files")}
    hint: dict[str, Any] = {}
    content = raw.get("content")
    text = raw.get("text")
    if isinstance(content, list) and (content or not isinstance(text, str) or not text):
        made = anthropic.to_messages({"role": role, "content": content}, f"{where}.content")
        if isinstance(text, str) and text == _joined(content):
            del others["text"]  # its text blocks, joined
            hint["text_joined"] = True
    else:  # an older export: the text alone (and content, if any, kept as it is)
        made = [{"role": role, "content": text if isinstance(text, str) else None}]
        if isinstance(text, str):
            del others["text"]
        hint["text_only"] = True
        if "content" in raw:
            others["content"] = content
    first = made[0]
    extra_parts = [
        *(_attachment(item) for item in _list(raw, "attachments", others, hint)),
        *({"type": _FILE, **item} for item in _list(raw, "files", others, hint) if isinstance(item, dict)),
    ]
    if extra_parts:
        if not isinstance(first["content"], list):
            hint["content_was"] = "string" if isinstance(first["content"], str) else "null"
            first["content"] = (
                [] if first["content"] is None else [{"type": "text", "text": first["content"]}]
            )
        first["content"].extend(extra_parts)
    own = raw.get("uuid")
    key = own if isinstance(own, str) and own else where  # a message without a uuid: named by its place
    for number, message in enumerate(made):
        named = number == 0 and key == own and _is_id(key)
        message["uid"] = key if named else str(uuid.uuid5(PART_NAMESPACE, f"{key}/{number}"))
    moment = _moment(raw.get("created_at"), f"{where}.created_at")
    for message in made:
        if moment is not None:
            message["created_at"] = moment
        if isinstance(raw.get("model"), str):
            message["model"] = raw["model"]
    first[KEY] = {**hint, "message": others}
    return made


def _list(raw: dict[str, Any], key: str, others: dict[str, Any], hint: dict[str, Any]) -> list[Any]:
    """A message's ``attachments`` or ``files``: made parts when a list of
    objects; anything else kept as it is."""
    value = raw.get(key)
    if key not in raw:
        hint.setdefault("absent", []).append(key)
        return []
    if isinstance(value, list) and all(isinstance(item, dict) for item in value):
        return value
    others[key] = value
    return []


def _attachment(item: Any) -> dict[str, Any]:
    part = {"type": _ATTACHMENT, **item}
    if isinstance(item.get("extracted_content"), str) and "text" not in item:
        part["text"] = part.pop("extracted_content")
    return part


def _joined(content: list[Any]) -> str:
    return "".join(
        block["text"]
        for block in content
        if isinstance(block, dict) and block.get("type") == "text" and isinstance(block.get("text"), str)
    )


def from_document(doc: ChatDocument) -> dict[str, Any]:
    conversation = kept(doc, KEY).get("conversation")
    result: dict[str, Any] = dict(conversation) if isinstance(conversation, dict) else {"uuid": doc.chat_id}
    if doc.title is not None or "name" in result:
        result["name"] = doc.title
    for field, moment in (("created_at", doc.created_at), ("updated_at", doc.updated_at)):
        if moment is not None and _moment(result.get(field), field) != moment:
            result[field] = moment.isoformat().replace("+00:00", "Z")
    tree = not doc.is_linear
    parents = doc.parent_indexes()
    group_of: list[str] = []  # for each archive message, the uuid of its Claude.ai message
    turns = iter(anthropic.to_turns(doc.messages, imported=True))
    chat_messages: list[dict[str, Any]] = []
    for index, stored in enumerate(doc.messages):
        if index and kept(stored, anthropic.KEY).get("continues") is True:
            group_of.append(group_of[-1])
            continue
        turn, first = next(turns)
        message = _message_back(turn, first)
        group_of.append(str(message.get("uuid", first.uid)))
        if tree and "parent_message_uuid" not in message:
            parent = parents[index]
            message["parent_message_uuid"] = ROOT if parent is None else group_of[parent]
        chat_messages.append(message)
    if tree and isinstance(conversation, dict) and "current_leaf_message_uuid" in conversation:
        leaf = doc.active_index()
        result["current_leaf_message_uuid"] = None if leaf is None else group_of[leaf]
    result["chat_messages"] = chat_messages
    return result


def _message_back(turn: dict[str, Any], first: Message) -> dict[str, Any]:
    hint = kept(first, KEY)
    given = hint.get("message")
    original: dict[str, Any] = given if isinstance(given, dict) else {}
    message: dict[str, Any] = dict(original) if original else {"uuid": first.uid}  # one added in the archive
    if "sender" not in message or (message["sender"] == "human") != (first.role == "user"):
        message["sender"] = "human" if first.role == "user" else first.role
    content = turn["content"]
    blocks: list[Any] = content if isinstance(content, list) else [{"type": "text", "text": content}]
    attachments = [_attachment_back(block) for block in blocks if _part_type(block) == _ATTACHMENT]
    files = [_file_back(block) for block in blocks if _part_type(block) == _FILE]
    blocks = [block for block in blocks if _part_type(block) not in (_ATTACHMENT, _FILE)]
    absent = hint.get("absent") or []
    if hint.get("text_only"):
        if "text" not in original:
            message["text"] = content if isinstance(content, str) else _joined(blocks)
    else:
        message["content"] = blocks
        if hint.get("text_joined"):
            message["text"] = _joined(blocks)
    for key, items in (("attachments", attachments), ("files", files)):
        if key not in original and key not in absent:
            message[key] = items
    if first.created_at is not None and _moment(message.get("created_at"), "created_at") != first.created_at:
        message["created_at"] = first.created_at.isoformat().replace("+00:00", "Z")
        message.setdefault("updated_at", message["created_at"])
    return message


def _part_type(block: Any) -> str | None:
    return block.get("type") if isinstance(block, dict) else None


def _attachment_back(block: dict[str, Any]) -> dict[str, Any]:
    item = {key: value for key, value in block.items() if key != "type"}
    if "text" in item and "extracted_content" not in item:
        item["extracted_content"] = item.pop("text")
    return item


def _file_back(block: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in block.items() if key != "type"}


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="claude-ai",
        what="a conversation of Claude.ai's conversations.json",
        round_trip="JSON-equal, every branch",
        family="chat product",
        detection=80,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
        whole_tree=True,
        near_misses=(
            (
                lambda d: "chat_messages" in d,
                "a conversation of a Claude.ai export, but it has no 'uuid' or its 'chat_messages' is not "
                "a list",
            ),
        ),
    ),
)
