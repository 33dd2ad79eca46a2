"""A bare OpenAI chat-completions message list (one chat, messages only)."""

from __future__ import annotations

from typing import Any

from chatarchive._document import ChatDocument

__all__ = ["from_document", "looks_like", "to_document"]


def looks_like(data: Any) -> bool:
    return (
        isinstance(data, list)
        and bool(data)
        and all(isinstance(item, dict) for item in data)
        and "role" in data[0]
        and not any("messages" in item for item in data)
    )


def to_document(data: Any) -> ChatDocument:
    return ChatDocument.from_openai(data)


def from_document(doc: ChatDocument) -> Any:
    return doc.to_openai()
