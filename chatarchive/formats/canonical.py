"""chatarchive's own document JSON (``ChatDocument.model_dump(mode="json")``).

A record is one when it is an object with a ``messages`` list. That list may
be empty: a chat with no messages yet is imported only when it says so
(``"messages": []``), so that an object that is no chat at all (``{}``, an
API response, a stream event) never becomes an empty chat.
"""

from __future__ import annotations

from typing import Any

from chatarchive._document import ChatDocument
from chatarchive._exceptions import InvalidDocument

from ._format import Format

__all__ = ["FORMATS", "from_document", "has_messages", "looks_like", "to_document"]


def looks_like(data: Any) -> bool:
    return has_messages(data)


def has_messages(data: Any) -> bool:
    """Whether ``data`` is an object with a ``messages`` list. No other format
    has one, so such a record is a document whatever other keys it keeps (an
    unknown key named ``conversations`` or ``main_messages`` is not ShareGPT's
    or Masterbrain's)."""
    return isinstance(data, dict) and isinstance(data.get("messages"), list)


def to_document(data: Any) -> ChatDocument:
    if isinstance(data, dict) and not has_messages(data):
        raise InvalidDocument("a chat document has a 'messages' list ([] for a chat with none yet)")
    return ChatDocument.parse(data)


def from_document(doc: ChatDocument) -> Any:
    return doc.model_dump(mode="json")


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="canonical",
        what="chatarchive's own document JSON",
        round_trip="exact, every branch",
        family="chatarchive",
        detection=50,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
        whole_tree=True,
    ),
)
