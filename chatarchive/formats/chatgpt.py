"""One conversation of ChatGPT's data export (an item of ``conversations.json``).

A conversation is a tree: ``mapping`` holds nodes (``id``, ``message``,
``parent``, ``children``) and ``current_node`` the leaf of the branch the user
last saw. Import takes that active path, from the root down, as the chat's
messages: each node's message becomes a message with the author's role, the
text parts as content (one part: a string), and its time. What else is kept:

- ``title`` is the title; ``create_time`` / ``update_time`` are the chat's times;
- on each message, under ``chatgpt``: the node id, the message id, its content
  type and metadata, and the author's name;
- under the document's ``chatgpt`` key: ``conversation_id``, ``current_node``,
  the root node id, and the ids of every node not on the active path (other
  branches: regenerations and edits), with their parent, so nothing is silently
  dropped. The other branches' messages themselves are not imported.

Export writes a conversation whose mapping is the chat's messages in a line.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from chatarchive._document import ChatDocument
from chatarchive._exceptions import InvalidDocument

__all__ = ["KEY", "from_document", "looks_like", "to_document"]

KEY = "chatgpt"


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("mapping"), dict) and "current_node" in data


def _time(seconds: Any) -> datetime | None:
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        return datetime.fromtimestamp(seconds, UTC)
    return None


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def to_document(data: Any) -> ChatDocument:
    if not looks_like(data):
        raise InvalidDocument("a ChatGPT conversation has a 'mapping' and a 'current_node'")
    mapping: dict[str, Any] = data["mapping"]
    path: list[str] = []
    node_id = data.get("current_node")
    while node_id is not None:
        if node_id in path or node_id not in mapping:
            raise InvalidDocument(f"the tree is broken at node {node_id!r}", field="mapping")
        path.append(node_id)
        node_id = mapping[node_id].get("parent")
    path.reverse()
    on_path = set(path)
    messages = [message for node in path if (message := _message(mapping[node])) is not None]
    document: dict[str, Any] = {
        "title": data.get("title"),
        "messages": messages,
        KEY: {
            "conversation_id": data.get("conversation_id") or data.get("id"),
            "current_node": data.get("current_node"),
            "root": path[0] if path else None,
            "other_nodes": {node: mapping[node].get("parent") for node in mapping if node not in on_path},
        },
    }
    conversation_id = data.get("conversation_id") or data.get("id")
    if isinstance(conversation_id, str) and conversation_id:
        document["chat_id"] = conversation_id
    for field, key in (("created_at", "create_time"), ("updated_at", "update_time")):
        moment = _time(data.get(key))
        if moment is not None:
            document[field] = moment
    return ChatDocument.parse(document)


def _message(node: dict[str, Any]) -> dict[str, Any] | None:
    message = node.get("message")
    if not isinstance(message, dict):
        return None
    author = message.get("author") or {}
    content = message.get("content") or {}
    parts = content.get("parts") if isinstance(content, dict) else None
    texts = [part for part in parts or [] if isinstance(part, str)]
    others = [part for part in parts or [] if not isinstance(part, str)]
    result: dict[str, Any] = {"role": author.get("role") or "unknown"}
    if texts and not others and len(texts) == 1:
        result["content"] = texts[0]
    else:
        result["content"] = [
            {"type": "text", "text": part}
            if isinstance(part, str)
            else {"type": "chatgpt_part", "part": part}
            for part in parts or []
        ]
    moment = _time(message.get("create_time"))
    if moment is not None:
        result["created_at"] = moment
    result[KEY] = {
        "node": node.get("id"),
        "message_id": message.get("id"),
        "content_type": content.get("content_type") if isinstance(content, dict) else None,
        "author_name": author.get("name"),
        "metadata": message.get("metadata") or {},
    }
    return result


def _part(part: Any) -> dict[str, Any]:
    """A text part, or a non-text part (an image pointer...) kept whole."""
    return {"type": "text", "text": part} if isinstance(part, str) else {"type": "chatgpt_part", "part": part}


def _part_back(part: Any) -> Any:
    return part.text if part.type == "text" else (part.model_extra or {}).get("part")


def from_document(doc: ChatDocument) -> Any:
    own = (doc.model_extra or {}).get(KEY) or {}
    mapping: dict[str, Any] = {}
    parent: str | None = None
    for message in doc.messages:
        kept = (message.model_extra or {}).get(KEY) or {}
        node_id = kept.get("node") or message.uid
        content = message.content
        parts: list[Any]
        if isinstance(content, str):
            parts = [content]
        elif isinstance(content, list):
            parts = [
                part.text if part.type == "text" else (part.model_extra or {}).get("part") for part in content
            ]
        else:
            parts = []
        mapping[node_id] = {
            "id": node_id,
            "message": {
                "id": kept.get("message_id") or message.uid,
                "author": {"role": message.role, "name": kept.get("author_name"), "metadata": {}},
                "create_time": _seconds(message.created_at),
                "content": {"content_type": kept.get("content_type") or "text", "parts": parts},
                "metadata": kept.get("metadata") or {},
            },
            "parent": parent,
            "children": [],
        }
        if parent is not None:
            mapping[parent]["children"].append(node_id)
        parent = node_id
    return {
        "title": doc.title,
        "create_time": _seconds(doc.created_at),
        "update_time": _seconds(doc.updated_at),
        "mapping": mapping,
        "current_node": parent,
        "conversation_id": own.get("conversation_id") or doc.chat_id,
    }
