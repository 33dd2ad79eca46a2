"""One conversation of ChatGPT's data export (an item of ``conversations.json``).

A conversation is a tree: ``mapping`` holds nodes (``id``, ``message``,
``parent``, ``children``) and ``current_node`` the node the user last saw
(older exports and other tools leave it out: the active leaf is then the
latest leaf, by its message's ``create_time``, the later in the tree on a tie).
Import keeps the whole tree as the chat's tree: every node that holds a
message becomes a message, with the node id as its uid (when it is a valid
one) and, as its parent, the nearest node above it that holds a message;
siblings keep the order of their parent's ``children``. The message at or
above ``current_node`` is the active leaf, so ``get`` shows the branch the
user saw and ``get_tree`` every regeneration and edit. Each message has the
author's role, its text as content (the ``parts`` of its content, one text
part being a string; or its content's ``text``, as code has, ``result`` as a
browsing display has, or ``content`` as a reasoning recap has), its time and
its model (its metadata's ``model_slug``).

Tools and reasoning are rows, as in the other formats:

- an assistant message to a tool (``recipient`` other than ``all``: ``python``,
  ``browser``, ``dalle.text2im``, ``web.run``...) whose content is one text (code,
  a query, a JSON request) is a tool call: its id the message id, its name the
  recipient, its arguments that text; the message's content is then empty;
- a message of the author role ``tool`` is a tool message with the tool's name
  (``author.name``) answering the nearest call above it (back to the user's
  message);
- o3's reasoning, ``thoughts`` (each thought a text part: its ``content``, the
  ``summary`` and the rest kept on the part) and ``reasoning_recap`` (its text),
  is a message of the role ``reasoning``, as a Responses API reasoning item is. ``title``, ``create_time`` and
``update_time`` are the chat's, and so is ``default_model_slug`` (or else the
last message's model) as the chat's model.

Nothing else is dropped, so that export gives back the same conversation:

- each message keeps, under ``chatgpt``, its node id, message id, content type,
  author name and metadata (for SQL), and ``original``: its node as it was,
  the text and metadata the message holds left empty in their places;
- the chat keeps, under ``chatgpt``, ``conversation_id``, ``current_node``, the
  root node id, ``nodes`` (the nodes that hold no message, whole: the root)
  and ``conversation`` (the conversation's keys, in their order, with
  ``mapping`` the list of its node ids: the nodes are kept as said above).

Export rebuilds the tree from these. What the archive changed since import
(a message's role, content or time, the title, the chat's times, the active
leaf) is written as the archive has it; a message with no original node
(added in the archive) becomes a node under its parent's. Chats imported
as their active path alone (``other_nodes``, and the other branches whole
under ``nodes``) export as they did.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from chatarchive._document import ChatDocument, ContentPart, Message
from chatarchive._exceptions import LONGEST_ID, InvalidDocument

from ._format import Format
from ._seconds import time_of
from ._shapes import kept

__all__ = ["FORMATS", "KEY", "from_document", "looks_like", "to_document"]

KEY = "chatgpt"


def looks_like(data: Any) -> bool:
    """A ``mapping`` with ``current_node``, or without it a mapping of nodes."""
    if not isinstance(data, dict) or not isinstance(data.get("mapping"), dict):
        return False
    mapping: dict[str, Any] = data["mapping"]
    return "current_node" in data or (
        bool(mapping)
        and all(isinstance(node, dict) and _NODE_KEYS & node.keys() for node in mapping.values())
    )


#: The keys a node of a conversation's tree has.
_NODE_KEYS = frozenset({"message", "parent", "children"})
#: The content types of o3's reasoning.
_REASONING = frozenset({"thoughts", "reasoning_recap"})


def _seconds(moment: datetime | None) -> float | None:
    return None if moment is None else moment.timestamp()


def _changed(seconds: Any, moment: datetime | None) -> bool:
    """Whether the archive changed a time the original gave (one it did not
    give, the archive set to the time of saving: that is not written back)."""
    given = time_of(seconds)
    return given is not None and given != moment


def _role(author: Any) -> str:
    return (author.get("role") if isinstance(author, dict) else None) or "unknown"


def _archive_role(message: dict[str, Any]) -> str:
    """The role of a ChatGPT message in the archive: its author's, or
    ``reasoning`` for o3's thoughts and their recap."""
    content = message.get("content")
    if (
        isinstance(content, dict)
        and isinstance(kind := content.get("content_type"), str)
        and kind in _REASONING
    ):
        return "reasoning"
    return _role(message.get("author"))


def to_document(data: Any) -> ChatDocument:
    if not looks_like(data):
        raise InvalidDocument("a ChatGPT conversation has a 'mapping' of nodes")
    mapping: dict[str, Any] = data["mapping"]
    current = data.get("current_node")
    if current is not None and (type(current) is not str or current not in mapping):
        raise InvalidDocument(f"the tree is broken at node {current!r}", field="current_node")
    messages: list[dict[str, Any]] = []
    above: dict[str, str | None] = {}  # node id: the uid of the nearest message at or above it
    order = _preorder(mapping)
    created = time_of(data.get("create_time"), "create_time")
    times: dict[str | None, Any] = {None: created}  # a message's uid: its time
    by_uid: dict[str, dict[str, Any]] = {}
    for node_id in order:
        node = mapping[node_id]
        parent = node.get("parent")
        nearest = above.get(parent) if type(parent) is str else None
        message = _message(node_id, node)
        if message is not None:
            message["parent"] = nearest
            # A message without a time (a system prompt, an upload) is as old as the one before it.
            if "created_at" not in message and times[nearest] is not None:
                message["created_at"] = times[nearest]
            if message["role"] == "tool" and (answered := _answered(by_uid, nearest)) is not None:
                message["tool_call_id"] = answered
            nearest = message["uid"] = _uid(node_id)
            times[nearest] = message.get("created_at")
            by_uid[nearest] = message
            messages.append(message)
        above[node_id] = nearest
    carried = {message[KEY]["node"] for message in messages}
    conversation_id = data.get("conversation_id") or data.get("id")
    named = "current_node" in data
    leaf = (None if current is None else above[current]) if named else _latest_leaf(messages)
    document: dict[str, Any] = {
        "title": data.get("title"),
        "messages": messages,
        "active_leaf": leaf,
        KEY: {
            "conversation_id": conversation_id,
            "current_node": current,
            "root": order[0] if order else None,
            "nodes": {node_id: node for node_id, node in mapping.items() if node_id not in carried},
            # The nodes are in the messages and in 'nodes': 'mapping' keeps their order, and its place.
            "conversation": {
                key: list(mapping) if key == "mapping" else value for key, value in data.items()
            },
        },
    }
    if "current_node" not in data and leaf is not None:  # export leaves it out while the leaf stays
        document[KEY]["latest_leaf"] = by_uid[leaf][KEY]["node"]
    if isinstance(conversation_id, str) and conversation_id:
        document["chat_id"] = conversation_id
    model = _chat_model(data, messages)
    if model is not None:
        document["model"] = model
    for field, key in (("created_at", "create_time"), ("updated_at", "update_time")):
        moment = time_of(data.get(key), key)
        if moment is not None:
            document[field] = moment
    return ChatDocument.parse(document)


def _answered(by_uid: dict[str, dict[str, Any]], uid: str | None) -> str | None:
    """The id of the call a tool message below ``uid`` answers: the nearest
    call at or above it, back to the user's message."""
    while uid is not None:
        message = by_uid[uid]
        if message.get("tool_calls"):
            call_id: str = message["tool_calls"][0]["id"]
            return call_id
        if message["role"] == "user":
            return None
        uid = message.get("parent")
    return None


def _latest_leaf(messages: list[dict[str, Any]]) -> str | None:
    """The active leaf of a conversation that names none: the leaf whose
    message is the latest, the later in the tree on a tie (or with no times)."""
    parents = {message.get("parent") for message in messages}
    leaves = [(index, message) for index, message in enumerate(messages) if message["uid"] not in parents]
    if not leaves:
        return None
    _, latest = max(leaves, key=lambda item: (_timestamp(item[1].get("created_at")), item[0]))
    uid: str = latest["uid"]
    return uid


def _timestamp(moment: datetime | None) -> float:
    return float("-inf") if moment is None else moment.timestamp()


#: The namespace of the uids made for nodes whose id cannot be one (empty, or too long).
NODE_NAMESPACE = uuid.UUID("0b6c8f7e-4c0a-4f43-9d55-5a1f0c3f2e61")


def _uid(node_id: str) -> str:
    """A message's uid: its node id, or a name-based UUID made from it."""
    return node_id if 0 < len(node_id) <= LONGEST_ID else str(uuid.uuid5(NODE_NAMESPACE, node_id))


def _preorder(mapping: dict[str, Any]) -> list[str]:
    """The node ids, each parent before its children and siblings in the
    order of their parent's ``children``: from each root (a node with no
    parent in ``mapping``) down, depth first.

    Raises:
        InvalidDocument: a node that is not an object, a parent that is not a
            node id, or a cycle.
    """
    children: dict[str, list[str]] = {node_id: [] for node_id in mapping}
    roots = []
    for node_id, node in mapping.items():
        if not isinstance(node, dict):
            raise InvalidDocument(f"the tree is broken at node {node_id!r}", field="mapping")
        parent = node.get("parent")
        if parent is not None and type(parent) is not str:
            raise InvalidDocument(f"the tree is broken at node {node_id!r}", field="mapping")
        if parent is None or parent not in mapping:
            roots.append(node_id)
        else:
            children[parent].append(node_id)
    for node_id, found in children.items():
        listed = mapping[node_id].get("children")
        if isinstance(listed, list) and len(found) > 1:
            rank = {child: index for index, child in enumerate(listed) if type(child) is str}
            found.sort(key=lambda child: rank.get(child, len(listed)))
    order: list[str] = []
    stack = roots[::-1]
    while stack:
        node_id = stack.pop()
        order.append(node_id)
        stack.extend(reversed(children[node_id]))
    if len(order) < len(mapping):  # the rest hang from each other: a cycle
        reached = set(order)
        stray = next(node_id for node_id in mapping if node_id not in reached)
        raise InvalidDocument(f"the tree is broken at node {stray!r}", field="mapping")
    return order


def _message(node_id: str, node: dict[str, Any]) -> dict[str, Any] | None:
    message = node.get("message")
    if not isinstance(message, dict):
        return None
    author = message.get("author")
    content = message.get("content")
    original = dict(message)
    result: dict[str, Any] = {"role": _archive_role(message)}
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
        call = _call(node_id, message, content[text_key])
        if call is not None:
            result["content"] = None
            result["tool_calls"] = [call]
            kept["call"] = True
        elif text_key == "thoughts":
            result["content"] = [_thought(thought) for thought in content[text_key]]
        else:
            result["content"] = _content(content[text_key])
    if result["role"] == "tool" and isinstance(kept["author_name"], str):
        result["name"] = kept["author_name"]
    if isinstance(original.get("metadata"), dict) and original["metadata"]:
        original["metadata"] = {}  # kept["metadata"] holds it; this keeps its place
    model = _model_slug(message)
    if model is not None:
        result["model"] = model
    moment = time_of(message.get("create_time"), f"mapping[{node_id!r}].message.create_time")
    if moment is not None:
        result["created_at"] = moment
    kept["original"] = {**node, "message": original}
    result[KEY] = kept
    return result


def _model_slug(message: dict[str, Any]) -> str | None:
    """The model that wrote a message: its metadata's ``model_slug``."""
    metadata = message.get("metadata")
    slug = metadata.get("model_slug") if isinstance(metadata, dict) else None
    return slug if isinstance(slug, str) and slug else None


def _chat_model(data: dict[str, Any], messages: list[dict[str, Any]]) -> str | None:
    """The conversation's model: its ``default_model_slug``, or the model of
    its last message that names one."""
    default = data.get("default_model_slug")
    if isinstance(default, str) and default:
        return default
    return next((message["model"] for message in reversed(messages) if "model" in message), None)


def _text_key(content: Any) -> str | None:
    """Where a message's content holds its text: ``parts`` or ``thoughts``
    (lists), or ``text`` (code, output), ``result`` (a browsing display) or
    ``content`` (a reasoning recap)."""
    if isinstance(content, dict):
        for key in ("parts", "thoughts"):
            if isinstance(content.get(key), list):
                return key
        for key in ("text", "result", "content"):
            if isinstance(content.get(key), str):
                return key
    return None


def _call(node_id: str, message: dict[str, Any], text: Any) -> dict[str, Any] | None:
    """The tool call an assistant message to a tool makes: one text sent to
    its ``recipient``; ``None`` for a message to everyone."""
    recipient = message.get("recipient")
    if (
        _role(message.get("author")) != "assistant"
        or not isinstance(recipient, str)
        or recipient in ("", "all")
    ):
        return None
    if isinstance(text, list) and len(text) == 1:
        text = text[0]
    if not isinstance(text, str):
        return None
    message_id = message.get("id")
    call_id = message_id if isinstance(message_id, str) and message_id else node_id
    return {"id": call_id, "type": "function", "function": {"name": recipient, "arguments": text}}


def _thought(thought: Any) -> dict[str, Any]:
    """One of o3's thoughts as a text part (its ``content``, the rest kept on the part)."""
    if isinstance(thought, dict) and isinstance(thought.get("content"), str):
        return {"type": "text", "text": thought["content"], "chatgpt_thought": {**thought, "content": None}}
    return {"type": "chatgpt_part", "part": thought}


def _thought_back(part: ContentPart) -> Any:
    kept = (part.model_extra or {}).get("chatgpt_thought")
    if part.type == "text" and isinstance(kept, dict):
        return {**kept, "content": part.text}
    if part.type == "text":
        return {"content": part.text}
    return (part.model_extra or {}).get("part")


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
    return kept(record, KEY)


def _original(kept: dict[str, Any]) -> dict[str, Any] | None:
    """The message's node as imported, if it was kept."""
    original = kept.get("original")
    return original if isinstance(original, dict) and isinstance(original.get("message"), dict) else None


def from_document(doc: ChatDocument) -> Any:
    own = _kept(doc)
    nodes = own.get("nodes")
    mapping: dict[str, Any] = dict(nodes) if isinstance(nodes, dict) else {}
    parents = doc.parent_indexes()
    node_ids: list[str] = []
    for message, parent_index in zip(doc.messages, parents, strict=True):
        kept = _kept(message)
        node_id = kept["node"] if isinstance(kept.get("node"), str) else message.uid
        original = _original(kept)
        if original is not None:
            node = {**original, "message": _message_back(original["message"], message, kept)}
        else:
            parent = None if parent_index is None else node_ids[parent_index]
            node = _new_node(node_id, message, kept, parent=parent)
            if parent is not None:
                siblings = mapping[parent].get("children")
                siblings = siblings if isinstance(siblings, list) else []
                if node_id not in siblings:
                    mapping[parent] = {**mapping[parent], "children": [*siblings, node_id]}
        mapping[node_id] = node
        node_ids.append(node_id)
    for node_id, node in mapping.items():  # children deleted in the archive are gone
        children = node.get("children") if isinstance(node, dict) else None
        if isinstance(children, list):
            remaining = [child for child in children if type(child) is str and child in mapping]
            if len(remaining) < len(children):
                mapping[node_id] = {**node, "children": remaining}
    leaf = doc.active_index()
    leaf_node = None if leaf is None else node_ids[leaf]
    conversation = own.get("conversation")
    if not isinstance(conversation, dict):  # imported before conversations were kept whole
        return {
            "title": doc.title,
            "create_time": _seconds(doc.created_at),
            "update_time": _seconds(doc.updated_at),
            "mapping": mapping,
            "current_node": leaf_node,
            "conversation_id": own.get("conversation_id") or doc.chat_id,
        }
    result = {**conversation}
    if conversation.get("title") != doc.title:
        result["title"] = doc.title
    for key, moment in (("create_time", doc.created_at), ("update_time", doc.updated_at)):
        if _changed(conversation.get(key), moment):
            result[key] = _seconds(moment)
    current = conversation.get("current_node")
    if "current_node" not in conversation:  # the latest leaf was the active one
        if leaf_node != own.get("latest_leaf"):
            result["current_node"] = own.get("root") if leaf_node is None else leaf_node
    elif _message_at_or_above(mapping, current, set(node_ids)) != leaf_node:  # the archive moved it
        result["current_node"] = own.get("root") if leaf_node is None else leaf_node
    order = conversation.get("mapping")
    if isinstance(order, list):  # the nodes in their order; those the archive added after them
        placed = {
            node_id: mapping.pop(node_id) for node_id in order if type(node_id) is str and node_id in mapping
        }
        mapping = {**placed, **mapping}
    result["mapping"] = mapping
    return result


def _message_at_or_above(mapping: dict[str, Any], node_id: Any, messages: set[str]) -> str | None:
    """The nearest node at or above ``node_id`` that is one of the chat's ``messages``."""
    for _ in range(len(mapping)):
        if type(node_id) is not str or node_id not in mapping or node_id in messages:
            break
        node = mapping[node_id]
        node_id = node.get("parent") if isinstance(node, dict) else None
    return node_id if type(node_id) is str and node_id in messages else None


def _message_back(original: dict[str, Any], message: Message, kept: dict[str, Any]) -> dict[str, Any]:
    """The original message, with what the archive holds put back (changed where the archive changed it)."""
    restored = dict(original)
    author = original.get("author")
    if _archive_role(original) != message.role:  # the archive changed it
        restored["author"] = {**(author if isinstance(author, dict) else {}), "role": message.role}
    if _changed(original.get("create_time"), message.created_at):
        restored["create_time"] = _seconds(message.created_at)
    metadata = kept.get("metadata")
    # The original holds {} in its place (imported by an earlier chatarchive: no metadata key at all).
    if original.get("metadata", {}) == {} and isinstance(metadata, dict) and metadata:
        restored["metadata"] = metadata
    content = original.get("content")
    text_in = kept.get("text_in")
    if not isinstance(content, dict) or text_in not in ("parts", "thoughts", "text", "result", "content"):
        return restored
    arguments = _arguments(message) if kept.get("call") else None
    if arguments is not None:  # a call: its text is the call's arguments
        restored["content"] = {**content, text_in: [arguments] if text_in == "parts" else arguments}
    elif text_in == "thoughts":
        parts = [message.content] if isinstance(message.content, str) else message.content or []
        thoughts = [
            _thought_back(part) if isinstance(part, ContentPart) else {"content": part} for part in parts
        ]
        restored["content"] = {**content, "thoughts": thoughts}
    elif text_in == "parts":
        restored["content"] = {**content, "parts": _parts(message.content)}
    elif isinstance(message.content, str) or message.content is None:
        restored["content"] = {**content, text_in: message.content}
    else:  # the archive made the text into parts
        others = {key: value for key, value in content.items() if key != text_in}
        restored["content"] = {**others, "parts": _parts(message.content)}
    return restored


def _arguments(message: Message) -> str | None:
    """The arguments of the call a message to a tool made, if the archive still holds it."""
    for call in message.tool_calls or []:
        arguments = getattr(call.function, "arguments", None)
        if isinstance(arguments, str):
            return arguments
    return None


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


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="chatgpt",
        what="a conversation of ChatGPT's conversations.json",
        round_trip="exact, every branch",
        family="chat product",
        detection=70,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
        whole_tree=True,
        near_misses=(
            (
                lambda d: isinstance(d.get("mapping"), dict),
                "a ChatGPT conversation, but its 'mapping' holds no nodes (objects with a 'message', a "
                "'parent' or 'children')",
            ),
        ),
    ),
)
