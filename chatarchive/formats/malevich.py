"""Malevich Brain messages: a conversation is their ordered list.

A message has ``uid``, ``created_at``, ``updated_at``, ``role``, ``content`` (a
list of content items), ``completed``, the flags ``is_intent``,
``is_tool_extra_message``, ``is_helper_message``, ``is_reasoning``,
``tool_call_id`` and any extra fields: all map onto a chatarchive message
(``uid``, timestamps and ``completed`` are archive fields; the flags and extras
are kept as they are), so export gives back the same list (timestamps as the
same instants, written in ISO 8601). A message without ``completed`` is not
completed, as in Malevich's model, and export writes ``"completed": false``.
"""

from __future__ import annotations

from typing import Any

from chatarchive._document import ChatDocument
from chatarchive._exceptions import InvalidDocument

from ._format import Format

__all__ = [
    "FLAGS",
    "FORMATS",
    "from_document",
    "looks_like",
    "to_document",
]

FLAGS = ("is_intent", "is_tool_extra_message", "is_helper_message", "is_reasoning")
_MALEVICH_ONLY = frozenset({"uid", "completed", *FLAGS})


def looks_like(data: Any) -> bool:
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(item, dict) and "role" in item and "uid" in item for item in data)
        and any(_MALEVICH_ONLY & item.keys() - {"uid"} for item in data)
    )


def to_document(data: Any) -> ChatDocument:
    if not isinstance(data, list):
        raise InvalidDocument("a Malevich conversation is a list of messages")
    # Malevich's own default: a message that does not say it is completed is not
    # (the archive's default, for a message given to save, is the other way).
    messages = [
        {**message, "completed": False}
        if isinstance(message, dict) and "completed" not in message
        else message
        for message in data
    ]
    return ChatDocument.parse({"messages": messages})


def from_document(doc: ChatDocument) -> Any:
    return [message.model_dump(mode="json") for message in doc.messages]


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="malevich",
        what="a list of Malevich Brain messages",
        round_trip="exact (timestamps as instants)",
        family="agent framework",
        detection=150,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
    ),
)
