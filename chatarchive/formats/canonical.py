"""chatarchive's own document JSON (``ChatDocument.model_dump(mode="json")``)."""

from __future__ import annotations

from typing import Any

from chatarchive._document import ChatDocument

__all__ = ["from_document", "looks_like", "to_document"]


def looks_like(data: Any) -> bool:
    return isinstance(data, dict)


def to_document(data: Any) -> ChatDocument:
    return ChatDocument.parse(data)


def from_document(doc: ChatDocument) -> Any:
    return doc.model_dump(mode="json")
