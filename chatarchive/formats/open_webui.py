"""One chat of Open WebUI's export (an item of its ``chat-export-*.json``).

A chat (``id``, ``user_id``, ``title``, ``chat``, ``created_at``,
``updated_at``...) holds its messages as a tree in ``chat.history``:
``messages`` by id, each with its ``parentId`` and ``childrenIds``, and
``currentId``, the message the user saw last. Import keeps the whole tree as
the chat's tree: each message (its ``id`` as its uid, its ``parentId`` as its
parent, siblings in the order of their parent's ``childrenIds``) has its
``role``, its ``content`` as its text, its ``timestamp`` as its time and its
``model``; ``currentId`` is the active leaf. The chat's ``id``, ``user_id``,
``title`` and times are the chat's, and the first of ``chat.models`` its model.
A message's ``files`` are parts after its text: images as ``image_url`` parts,
other files as ``open_webui_file`` parts.

``chat.messages`` (the current path, flattened) is what the tree gives; it is
kept only where it is not. A message's other keys are kept on it, and the
chat's under its ``open_webui`` key, so that export gives back the same JSON.
A bare chat object (with ``history`` and no ``chat``) imports too.
"""

from __future__ import annotations

from typing import Any

from chatarchive._document import ChatDocument, Message
from chatarchive._exceptions import LONGEST_ID, InvalidDocument

from ._format import Format
from ._seconds import time_of
from ._shapes import json_object, kept

__all__ = ["FORMATS", "KEY", "from_document", "looks_like", "to_document"]

KEY = "open_webui"
_FILE = "open_webui_file"
#: A message's keys that become the archive message's own.
_OWN = ("id", "parentId", "childrenIds", "role", "content", "timestamp", "files")
#: Marks a key a message does not have (while it is read).
_ABSENT_MARK: Any = object()
#: Keys of a message named like the archive message's fields (kept apart);
#: the message's own ``role``, ``content`` and ``model`` are its fields.
_CLASHING = (frozenset(Message.model_fields) - {"role", "content", "model"}) | {KEY}


def _history_holder(data: Any) -> dict[str, Any] | None:
    """The object that holds ``history``: the record's ``chat``, or the record."""
    if not isinstance(data, dict):
        return None
    chat = data.get("chat")
    holder = chat if isinstance(chat, dict) and "history" in chat else data
    history = holder.get("history")
    if isinstance(history, dict) and isinstance(history.get("messages"), dict):
        return holder
    return None


def looks_like(data: Any) -> bool:
    """An export's chat (``chat.history``), or the bare chat object Open WebUI
    keeps (``history`` with ``currentId`` and messages that link to each other
    by ``parentId`` / ``childrenIds``): it has a ``messages`` list too, the
    current path, and is Open WebUI's and not a chat document for that."""
    holder = _history_holder(data)
    if holder is None:
        return False
    if holder is not data:
        return True
    history = holder["history"]
    nodes = history["messages"].values()
    return (
        "chat_id" not in data
        and "currentId" in history
        and all(isinstance(node, dict) and "parentId" in node and "childrenIds" in node for node in nodes)
    )


def to_document(data: Any) -> ChatDocument:
    holder = _history_holder(data)
    if holder is None:
        raise InvalidDocument("an Open WebUI chat has chat.history.messages (a message tree) and currentId")
    history = holder["history"]
    nodes: dict[str, Any] = history["messages"]
    order = _preorder(nodes)
    messages = [
        _message(node_id, json_object(nodes[node_id], f"history.messages[{node_id!r}]")) for node_id in order
    ]
    by_id = {node_id: message["uid"] for node_id, message in zip(order, messages, strict=True)}
    for message in messages:
        parent = message.pop("parentId", None)
        message["parent"] = by_id.get(parent) if isinstance(parent, str) else None
    kept_history = {key: value for key, value in history.items() if key != "messages"}
    hint: dict[str, Any] = {"history": kept_history, "order": list(nodes)}
    kept_holder = {key: value for key, value in holder.items() if key != "history"}
    path = _path(nodes, history.get("currentId"))
    if kept_holder.get("messages") == [nodes[node_id] for node_id in path]:
        kept_holder["messages"] = None
        hint["messages_derived"] = True
    if holder is data:
        hint["chat"] = kept_holder
    else:
        hint["record"] = {key: value for key, value in data.items() if key != "chat"}
        hint["chat"] = kept_holder
    document: dict[str, Any] = {"messages": messages, KEY: hint}
    current = history.get("currentId")
    if isinstance(current, str) and current in by_id:
        document["active_leaf"] = by_id[current]
    for field, value in (("chat_id", data.get("id")), ("user_id", data.get("user_id"))):
        if isinstance(value, str) and 0 < len(value) <= LONGEST_ID:
            document[field] = value
    title = data.get("title", holder.get("title"))
    if isinstance(title, str):
        document["title"] = title
    models = holder.get("models")
    if isinstance(models, list) and models and isinstance(models[0], str):
        document["model"] = models[0]
    for field in ("created_at", "updated_at"):
        moment = time_of(data.get(field), field)
        if moment is not None:
            document[field] = moment
    return ChatDocument.parse(document)


def _preorder(nodes: dict[str, Any]) -> list[str]:
    """The message ids, each parent before its children, siblings in the
    order of their parent's ``childrenIds``.

    Raises:
        InvalidDocument: a message that is not an object, or a cycle.
    """
    children: dict[str | None, list[str]] = {}
    for node_id, node in nodes.items():
        if not isinstance(node, dict):
            raise InvalidDocument(f"the tree is broken at message {node_id!r}", field="history.messages")
        parent = node.get("parentId")
        key = parent if isinstance(parent, str) and parent in nodes else None
        children.setdefault(key, []).append(node_id)
    for parent, found in children.items():
        listed = nodes[parent].get("childrenIds") if parent is not None else None
        if isinstance(listed, list) and len(found) > 1:
            rank = {child: index for index, child in enumerate(listed) if isinstance(child, str)}
            found.sort(key=lambda child: rank.get(child, len(listed)))
    order: list[str] = []
    stack = list(reversed(children.get(None, [])))
    while stack:
        node_id = stack.pop()
        order.append(node_id)
        stack.extend(reversed(children.get(node_id, [])))
    if len(order) < len(nodes):
        stray = next(node_id for node_id in nodes if node_id not in set(order))
        raise InvalidDocument(f"the tree is broken at message {stray!r}", field="history.messages")
    return order


def _path(nodes: dict[str, Any], leaf: Any) -> list[str]:
    """The ids from a root down to ``leaf``."""
    path: list[str] = []
    while isinstance(leaf, str) and leaf in nodes and leaf not in path:
        path.append(leaf)
        leaf = nodes[leaf].get("parentId")
    return path[::-1]


def _message(node_id: str, node: dict[str, Any]) -> dict[str, Any]:
    message: dict[str, Any] = {key: value for key, value in node.items() if key not in _OWN}
    hint: dict[str, Any] = {}
    clashing = {key: message.pop(key) for key in list(message) if key in _CLASHING}
    if clashing:
        hint["keys"] = clashing
    model = message.pop("model", None)
    if isinstance(model, str):
        message["model"] = model
    elif "model" in node:
        hint.setdefault("keys", {})["model"] = model
    if not 0 < len(node_id) <= LONGEST_ID:
        raise InvalidDocument(
            f"message id {node_id[:40]!r} is not one chatarchive can keep", field="history.messages"
        )
    message["uid"] = node_id
    if "id" not in node:
        hint["no_id"] = True
    elif node["id"] != node_id:
        hint["id"] = node["id"]
    role = node.get("role")
    message["role"] = role if isinstance(role, str) and role else "unknown"
    if role != message["role"]:
        hint["role"] = role
        if "role" not in node:
            hint["no_role"] = True
    content = node.get("content", _ABSENT_MARK)
    files = node.get("files")
    if (
        isinstance(files, list)
        and all(isinstance(item, dict) for item in files)
        and (isinstance(content, str) or content is _ABSENT_MARK)
    ):
        parts = [] if content is _ABSENT_MARK else [{"type": "text", "text": content}]
        message["content"] = [*parts, *(_file_part(item) for item in files)]
        hint["files"] = "parts" if content is not _ABSENT_MARK else "parts_only"
    elif content is not _ABSENT_MARK:
        message["content"] = content if isinstance(content, str) or content is None else None
        if not (isinstance(content, str) or content is None):
            hint["content"] = content
        if "files" in node:
            hint.setdefault("keys", {})["files"] = files
    elif "files" in node:
        hint.setdefault("keys", {})["files"] = files
    if "content" not in node:
        hint["no_content"] = True
    moment = time_of(node.get("timestamp"), f"history.messages[{node_id!r}].timestamp")
    if moment is not None:
        message["created_at"] = moment
    if "timestamp" in node:
        hint["timestamp"] = node["timestamp"]
    if "parentId" in node:
        message["parentId"] = node["parentId"]
        hint["parentId"] = node["parentId"]
    if "childrenIds" in node:
        hint["childrenIds"] = node["childrenIds"]
    message[KEY] = hint
    return message


def _file_part(item: dict[str, Any]) -> dict[str, Any]:
    if item.get("type") == "image" and isinstance(item.get("url"), str):
        rest = {key: value for key, value in item.items() if key not in ("type", "url")}
        part: dict[str, Any] = {"type": "image_url", "image_url": {"url": item["url"]}}
        if rest:
            part[KEY] = rest
        return part
    return {"type": _FILE, "file_data": item}


def from_document(doc: ChatDocument) -> dict[str, Any]:
    hint = kept(doc, KEY)
    parents = doc.parent_indexes()
    nodes: dict[str, Any] = {}
    for message, parent in zip(doc.messages, parents, strict=True):
        nodes[message.uid] = _node(message, None if parent is None else doc.messages[parent].uid)
    for node_id, node in nodes.items():  # children of messages added in the archive
        parent = node.get("parentId")
        if isinstance(parent, str) and parent in nodes:
            siblings = nodes[parent].setdefault("childrenIds", [])
            if isinstance(siblings, list) and node_id not in siblings:
                siblings.append(node_id)
    order = hint.get("order")
    if isinstance(order, list):
        nodes = {**{node_id: nodes.pop(node_id) for node_id in order if node_id in nodes}, **nodes}
    leaf = doc.active_index()
    history: dict[str, Any] = dict(hint.get("history") or {})
    history["messages"] = nodes
    if leaf is not None or "currentId" in history:
        history["currentId"] = None if leaf is None else doc.messages[leaf].uid
    chat: dict[str, Any] = dict(
        hint.get("chat") or {"title": doc.title, "models": [doc.model] if doc.model else []}
    )
    chat["history"] = history
    if hint.get("messages_derived") or "messages" not in chat:
        chat["messages"] = [nodes[node_id] for node_id in _path(nodes, history.get("currentId"))]
    record = hint.get("record")
    if "record" not in hint and "chat" in hint:
        return chat
    result: dict[str, Any] = (
        dict(record) if isinstance(record, dict) else {"id": doc.chat_id, "title": doc.title}
    )
    if doc.user_id is not None or "user_id" in result:
        result["user_id"] = doc.user_id
    result["chat"] = chat
    return result


def _node(message: Message, parent: str | None) -> dict[str, Any]:
    hint = kept(message, KEY)
    node: dict[str, Any] = {}
    if not hint.get("no_id"):
        node["id"] = hint.get("id", message.uid)
    if "parentId" in hint:
        node["parentId"] = hint["parentId"] if parent is None else parent
    elif not hint or parent is not None:
        node["parentId"] = parent
    if "childrenIds" in hint or not hint:
        children = hint.get("childrenIds", [])
        node["childrenIds"] = list(children) if isinstance(children, list) else children
    if not hint.get("no_role"):
        node["role"] = hint.get("role", message.role)
    files = hint.get("files")
    content = message.content
    if files in ("parts", "parts_only") and isinstance(content, list):
        text_parts = [] if files == "parts_only" else content[:1]
        node["content"] = text_parts[0].text if text_parts else None
        if files == "parts_only":
            node.pop("content")
        node["files"] = [_file_back(part.model_dump(mode="json")) for part in content[len(text_parts) :]]
    elif "content" in hint:
        node["content"] = hint["content"]
    elif not hint.get("no_content"):
        node["content"] = content if content is None or isinstance(content, str) else _text(message)
    if "timestamp" in hint and time_of(hint["timestamp"]) == message.created_at:
        node["timestamp"] = hint["timestamp"]
    elif message.created_at is not None and ("timestamp" in hint or not hint):
        node["timestamp"] = int(message.created_at.timestamp())
    if message.model is not None:
        node["model"] = message.model
    node.update((key, value) for key, value in (message.model_extra or {}).items() if key != KEY)
    clashing = hint.get("keys")
    if isinstance(clashing, dict):
        node.update(clashing)
    return node


def _text(message: Message) -> str:
    content = message.content
    if isinstance(content, list):
        return "".join(part.text for part in content if isinstance(part.text, str))
    return content or ""


def _file_back(part: dict[str, Any]) -> Any:
    if part.get("type") == "image_url":
        image = part.get("image_url")
        url = image.get("url") if isinstance(image, dict) else image
        return {"type": "image", "url": url, **(part.get(KEY) or {})}
    return part.get("file_data")


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="open-webui",
        what="a chat of Open WebUI's export",
        round_trip="JSON-equal, every branch",
        family="chat product",
        detection=45,  # before canonical: the bare chat object has a 'messages' list too
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
        whole_tree=True,
    ),
)
