"""A bare OpenAI chat-completions message list (one chat, messages only)."""

from __future__ import annotations

from typing import Any

from chatarchive._document import ChatDocument

from ._format import Format

__all__ = ["FORMATS", "from_document", "looks_like", "to_document"]


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


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="openai",
        what="a bare chat-completions message list (one chat)",
        round_trip="exact (messages only)",
        family="model API",
        detection=160,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
    ),
)
