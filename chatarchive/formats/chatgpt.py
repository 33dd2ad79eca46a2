"""One conversation of ChatGPT's data export (an item of ``conversations.json``).

A conversation is a tree: ``mapping`` holds nodes (``id``, ``message``,
``parent``, ``children``) and ``current_node`` the leaf of the branch the user
last saw. Import takes that active path, from the root down, as the chat's
messages: each node's message becomes a message with the author's role, its
text as content (the ``parts`` of its content, one text part being a string;
or its content's ``text``, as code has) and its time. ``title``,
``create_time`` and ``update_time`` are the chat's.

Nothing else is dropped, so that export gives back the same conversation:

- each message keeps, under ``chatgpt``, its node id, message id, content type,
  author name and metadata (for SQL), and ``original``: its node as it was,
  the text and metadata the message holds left empty in their places;
- the chat keeps, under ``chatgpt``, ``conversation_id``, ``current_node``, the
  root node id, ``other_nodes`` (the parent of each node off the active path:
  regenerations and edits), ``nodes`` (the nodes that are not messages of the
  chat, whole: the other branches and the message-less root) and
  ``conversation`` (the conversation's keys, in their order, with ``mapping``
  the list of its node ids: the nodes are kept as said above).

Export rebuilds the tree from these. What the archive changed since import
(a message's role, content or time, the title, the chat's times) is written as
the archive has it; messages with no original node (appended in the archive,
or imported by an earlier version, which kept none) continue the active path.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chatarchive._document import ChatDocument, ContentPart, Message
from chatarchive._exceptions import InvalidDocument

from ._seconds import time_of

__all__ = ["KEY", "from_document", "looks_like", "to_document"]

KEY = "chatgpt"


def looks_like(data: Any) -> bool:
    return isinstance(data, dict) and isinstance(data.get("mapping"), dict) and "current_node" in data


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def _changed(seconds: Any, moment: datetime | None) -> bool:
    """Whether the archive changed a time the original gave (one it did not
    give, the archive set to the time of saving: that is not written back)."""
    given = time_of(seconds)
    return given is not None and given != moment


def _role(author: Any) -> str:
    return (author.get("role") if isinstance(author, dict) else None) or "unknown"


def to_document(data: Any) -> ChatDocument:
    if not looks_like(data):
        raise InvalidDocument("a ChatGPT conversation has a 'mapping' and a 'current_node'")
    mapping: dict[str, Any] = data["mapping"]
    path: list[str] = []
    on_path: set[str] = set()
    node_id = data.get("current_node")
    while node_id is not None:
        if type(node_id) is not str or node_id in on_path or not isinstance(mapping.get(node_id), dict):
            raise InvalidDocument(f"the tree is broken at node {node_id!r}", field="mapping")
        path.append(node_id)
        on_path.add(node_id)
        node_id = mapping[node_id].get("parent")
    path.reverse()
    messages = [message for node_id in path if (message := _message(node_id, mapping[node_id])) is not None]
    carried = {message[KEY]["node"] for message in messages}
    conversation_id = data.get("conversation_id") or data.get("id")
    document: dict[str, Any] = {
        "title": data.get("title"),
        "messages": messages,
        KEY: {
            "conversation_id": conversation_id,
            "current_node": data.get("current_node"),
            "root": path[0] if path else None,
            "other_nodes": {
                node_id: node.get("parent") if isinstance(node, dict) else None
                for node_id, node in mapping.items()
                if node_id not in on_path
            },
            "nodes": {node_id: node for node_id, node in mapping.items() if node_id not in carried},
            # The nodes are in the messages and in 'nodes': 'mapping' keeps their order, and its place.
            "conversation": {
                key: list(mapping) if key == "mapping" else value for key, value in data.items()
            },
        },
    }
    if isinstance(conversation_id, str) and conversation_id:
        document["chat_id"] = conversation_id
    for field, key in (("created_at", "create_time"), ("updated_at", "update_time")):
        moment = time_of(data.get(key), key)
        if moment is not None:
            document[field] = moment
    return ChatDocument.parse(document)


def _message(node_id: str, node: dict[str, Any]) -> dict[str, Any] | None:
    message = node.get("message")
    if not isinstance(message, dict):
        return None
    author = message.get("author")
    content = message.get("content")
    original = dict(message)
    result: dict[str, Any] = {"role": _role(author)}
    kept: dict[str, Any] = {
        "node": node_id,
        "message_id": message.get("id"),
        "content_type": content.get("content_type") if isinstance(content, dict) else None,
        "author_name": author.get("name") if isinstance(author, dict) else None,
        "metadata": message.get("metadata") or {},
    }
    text_key = _text_key(content)
    if text_key is None:
        result["content"] = None
    else:
        assert isinstance(content, dict)
        original["content"] = {**content, text_key: None}  # the text is the message's; its place is kept
        kept["text_in"] = text_key
        result["content"] = _content(content[text_key])
    if isinstance(original.get("metadata"), dict) and original["metadata"]:
        original["metadata"] = {}  # kept["metadata"] holds it; this keeps its place
    moment = time_of(message.get("create_time"), f"mapping[{node_id!r}].message.create_time")
    if moment is not None:
        result["created_at"] = moment
    kept["original"] = {**node, "message": original}
    result[KEY] = kept
    return result


def _text_key(content: Any) -> str | None:
    """Where a message's content holds its text: ``parts`` (a list), or ``text`` (code, output)."""
    if isinstance(content, dict):
        if isinstance(content.get("parts"), list):
            return "parts"
        if isinstance(content.get("text"), str):
            return "text"
    return None


def _content(text: str | list[Any]) -> str | list[dict[str, Any]]:
    """A content's ``text`` or ``parts`` as a message's content: one text part is a string."""
    if isinstance(text, str):
        return text
    if len(text) == 1 and isinstance(text[0], str):
        return text[0]
    return [_part(part) for part in text]


def _part(part: Any) -> dict[str, Any]:
    """A text part, or a non-text part (an image pointer...) kept whole."""
    return {"type": "text", "text": part} if isinstance(part, str) else {"type": "chatgpt_part", "part": part}


def _part_back(part: ContentPart) -> Any:
    return part.text if part.type == "text" else (part.model_extra or {}).get("part")


def _parts(content: str | list[ContentPart] | None) -> list[Any]:
    if isinstance(content, str):
        return [content]
    return [_part_back(part) for part in content or []]


def _kept(record: ChatDocument | Message) -> dict[str, Any]:
    kept = (record.model_extra or {}).get(KEY)
    return kept if isinstance(kept, dict) else {}


def _original(kept: dict[str, Any]) -> dict[str, Any] | None:
    """The message's node as imported, if it was kept."""
    original = kept.get("original")
    return original if isinstance(original, dict) and isinstance(original.get("message"), dict) else None


def from_document(doc: ChatDocument) -> Any:
    own = _kept(doc)
    nodes = own.get("nodes")
    mapping: dict[str, Any] = dict(nodes) if isinstance(nodes, dict) else {}
    previous: str | None = None
    last_is_original = False
    for message in doc.messages:
        kept = _kept(message)
        node_id = kept["node"] if isinstance(kept.get("node"), str) else message.uid
        original = _original(kept)
        last_is_original = original is not None
        if original is not None:
            node = {**original, "message": _message_back(original["message"], message, kept)}
        else:
            node = _new_node(node_id, message, kept, parent=previous)
            if previous is not None:
                parent = mapping[previous]
                siblings = parent.get("children")
                siblings = siblings if isinstance(siblings, list) else []
                if node_id not in siblings:
                    mapping[previous] = {**parent, "children": [*siblings, node_id]}
        mapping[node_id] = node
        previous = node_id
    for node_id, node in mapping.items():  # children that were cut off (truncate) are gone
        children = node.get("children") if isinstance(node, dict) else None
        if isinstance(children, list):
            remaining = [child for child in children if type(child) is not str or child in mapping]
            if len(remaining) < len(children):
                mapping[node_id] = {**node, "children": remaining}
    conversation = own.get("conversation")
    if not isinstance(conversation, dict):  # imported before conversations were kept whole
        return {
            "title": doc.title,
            "create_time": _seconds(doc.created_at),
            "update_time": _seconds(doc.updated_at),
            "mapping": mapping,
            "current_node": previous,
            "conversation_id": own.get("conversation_id") or doc.chat_id,
        }
    result = {**conversation}
    if conversation.get("title") != doc.title:
        result["title"] = doc.title
    for key, moment in (("create_time", doc.created_at), ("update_time", doc.updated_at)):
        if _changed(conversation.get(key), moment):
            result[key] = _seconds(moment)
    current = conversation.get("current_node")
    if previous is not None and not (last_is_original and type(current) is str and current in mapping):
        result["current_node"] = previous
    order = conversation.get("mapping")
    if isinstance(order, list):  # the nodes in their order; those the archive added after them
        placed = {
            node_id: mapping.pop(node_id) for node_id in order if type(node_id) is str and node_id in mapping
        }
        mapping = {**placed, **mapping}
    result["mapping"] = mapping
    return result


def _message_back(original: dict[str, Any], message: Message, kept: dict[str, Any]) -> dict[str, Any]:
    """The original message, with what the archive holds put back (changed where the archive changed it)."""
    restored = dict(original)
    author = original.get("author")
    if _role(author) != message.role:
        restored["author"] = {**(author if isinstance(author, dict) else {}), "role": message.role}
    if _changed(original.get("create_time"), message.created_at):
        restored["create_time"] = _seconds(message.created_at)
    metadata = kept.get("metadata")
    # The original holds {} in its place (imported by an earlier chatarchive: no metadata key at all).
    if original.get("metadata", {}) == {} and isinstance(metadata, dict) and metadata:
        restored["metadata"] = metadata
    content = original.get("content")
    text_in = kept.get("text_in")
    if isinstance(content, dict) and text_in in ("parts", "text"):
        if text_in == "text" and isinstance(message.content, str):
            restored["content"] = {**content, "text": message.content}
        elif text_in == "text":  # the archive made a code message's text into parts
            others = {key: value for key, value in content.items() if key != "text"}
            restored["content"] = {**others, "parts": _parts(message.content)}
        else:
            restored["content"] = {**content, "parts": _parts(message.content)}
    return restored


def _new_node(node_id: str, message: Message, kept: dict[str, Any], *, parent: str | None) -> dict[str, Any]:
    """A node for a message that has no original one."""
    return {
        "id": node_id,
        "message": {
            "id": kept.get("message_id") or message.uid,
            "author": {"role": message.role, "name": kept.get("author_name"), "metadata": {}},
            "create_time": _seconds(message.created_at),
            "content": {"content_type": kept.get("content_type") or "text", "parts": _parts(message.content)},
            "metadata": kept.get("metadata") or {},
        },
        "parent": parent,
        "children": [],
    }
