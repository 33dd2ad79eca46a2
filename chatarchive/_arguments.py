"""Checks of the arguments a call is given, before anything reaches the database.

Each check raises ``InvalidArgument`` naming the argument, so
that a wrong call fails the same way on both databases instead of somewhere
inside a driver.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import TypeGuard

from pydantic import BaseModel

from ._exceptions import InvalidArgument, quoted

__all__ = [
    "fits_utc",
    "is_real_number",
    "is_whole_number",
    "optional_moment",
    "optional_text",
    "require_at_least_one",
    "require_choice",
    "require_flag",
    "require_many",
    "require_moment",
    "require_text",
    "require_user_id",
    "require_version",
]


def is_whole_number(value: object) -> TypeGuard[int]:
    """Whether ``value`` is an int, and not a bool (``True`` is no count)."""
    return isinstance(value, int) and not isinstance(value, bool)


def is_real_number(value: object) -> TypeGuard[float]:
    """Whether ``value`` is an int or a float, and not a bool (``True`` is no
    number of seconds or score)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def require_at_least_one(value: int, name: str) -> None:
    """Refuse a count argument (``limit``, ``batch_size``, ``writers``) that is
    not a whole number of at least 1 (``True`` and ``2.5`` are not)."""
    if not is_whole_number(value):
        raise InvalidArgument(f"{name} must be a whole number, not {type(value).__name__}", argument=name)
    if value < 1:
        raise InvalidArgument(f"{name} must be at least 1", argument=name)


def require_flag(value: object, name: str) -> bool:
    """Refuse a yes-or-no argument (``bulk``, ``enabled``) that is not a bool:
    ``bulk="no"`` would otherwise count as yes."""
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be True or False, not {value!r}", argument=name)
    return value


def require_many(value: object, name: str, items: str, *, chat_id: str | None = None) -> None:
    """Refuse an argument meant to hold many items (``docs``, ``messages``,
    ``chat_ids``) that is one item or not iterable at all: a string's
    characters, a mapping's keys or a model's fields would be taken for items."""
    if isinstance(value, (str, bytes, Mapping, BaseModel)) or not isinstance(value, Iterable):
        raise InvalidArgument(
            f"{name} must be a list of {items}, not {type(value).__name__}", argument=name, chat_id=chat_id
        )


def require_version(value: object) -> None:
    """Refuse an ``expected_version`` that is neither None nor a whole number >= 0."""
    if value is not None and (not is_whole_number(value) or value < 0):
        raise InvalidArgument(
            f"expected_version must be a whole number >= 0, not {value!r}", argument="expected_version"
        )


def require_moment(value: object, name: str) -> datetime:
    """A time argument (``since``, ``until``, ``cutoff``) as an aware datetime,
    a naive one taken as UTC. Anything else (an ISO string, a ``date``) is
    refused here rather than failing inside the database driver, and so is
    a time that is no time in UTC (``datetime.min`` at UTC+14)."""
    if not isinstance(value, datetime):
        raise InvalidArgument(f"{name} must be a datetime, not {type(value).__name__}", argument=name)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    if not fits_utc(value):
        raise InvalidArgument(f"{name} is out of range once converted to UTC", argument=name)
    return value


def fits_utc(value: datetime) -> bool:
    """Whether ``value`` is a time in UTC's years 1-9999 (``datetime.min`` at
    UTC+14 is not: converting it overflows)."""
    try:
        value.astimezone(UTC)
    except OverflowError:
        return False
    return True


def optional_moment(value: object, name: str) -> datetime | None:
    """``require_moment``, letting ``None`` (no bound) through."""
    return None if value is None else require_moment(value, name)


def require_text(value: object, name: str) -> str:
    """Refuse an id or filter argument (``chat_id``, ``model``, ...) that is
    not a string: PostgreSQL would compare it as text, SQLite as a number, and
    the two archives would answer differently."""
    if not isinstance(value, str):
        raise InvalidArgument(f"{name} must be a string, not {type(value).__name__}", argument=name)
    return value


def require_choice(value: object, name: str, allowed: Sequence[str]) -> None:
    """Refuse an argument that is none of the ``allowed`` words."""
    if value not in allowed:
        raise InvalidArgument(
            f"{name} must be one of {', '.join(allowed)}, not {quoted(value)}", argument=name
        )


def optional_text(value: object, name: str) -> str | None:
    """``require_text``, letting ``None`` (no filter) through."""
    return None if value is None else require_text(value, name)


def require_user_id(user_id: object) -> str:
    """Refuse a user id that names nobody: ``None`` or ``""`` would otherwise
    select every chat without a user (``delete_user``) or lift the scope
    (``for_user``)."""
    if not isinstance(user_id, str) or not user_id:
        raise InvalidArgument(
            f"user_id must be a non-empty string, not {quoted(user_id)}", argument="user_id"
        )
    return user_id
