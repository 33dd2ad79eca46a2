"""chatarchive's own document JSON (``ChatDocument.model_dump(mode="json")``)."""

from __future__ import annotations

from typing import Any

from chatarchive._document import ChatDocument

__all__ = ["from_document", "has_messages", "looks_like", "to_document"]


def looks_like(data: Any) -> bool:
    return isinstance(data, dict)


def has_messages(data: Any) -> bool:
    """Whether ``data`` is an object with a ``messages`` list. No other format
    has one, so such a record is a document whatever other keys it keeps (an
    unknown key named ``conversations`` or ``main_messages`` is not ShareGPT's
    or Masterbrain's)."""
    return isinstance(data, dict) and isinstance(data.get("messages"), list)


def to_document(data: Any) -> ChatDocument:
    return ChatDocument.parse(data)


def from_document(doc: ChatDocument) -> Any:
    return doc.model_dump(mode="json")
