"""Times given as seconds since 1970 (ChatGPT's exports, OpenAI's ``created``)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from chatarchive._exceptions import InvalidDocument

__all__ = ["time_of"]


def time_of(seconds: Any, field: str | None = None) -> datetime | None:
    """The time ``seconds`` after 1970 (None if it is not a number).

    Raises:
        InvalidDocument: a number no date can be made of (naming ``field``).
    """
    if isinstance(seconds, (int, float)) and not isinstance(seconds, bool):
        try:
            return datetime.fromtimestamp(seconds, UTC)
        except (OverflowError, OSError, ValueError):
            raise InvalidDocument(f"{seconds!r} seconds since 1970 is not a time", field=field) from None
    return None
