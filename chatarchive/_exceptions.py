"""Errors raised by chatarchive.

Every error chatarchive raises on purpose derives from :class:`ChatArchiveError`;
database driver errors are translated at the repository boundary and never
escape raw::

    ChatArchiveError
     ├── InvalidDocument    bad input: a document, message, part or feedback item, or an argument
     ├── ChatNotFound       the chat does not exist (or is not visible to the caller)
     ├── ConflictError      another writer got there first (version or key clash)
     ├── SchemaNotReady     the database has not been migrated to this version
     └── DatabaseError      any other failure reported by the database
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import TypeGuard

from pydantic import BaseModel
from sqlalchemy import exc as sa_exc

__all__ = [
    "LONGEST_ID",
    "ChatArchiveError",
    "ChatNotFound",
    "ConflictError",
    "DatabaseError",
    "InvalidDocument",
    "SchemaNotReady",
    "database_errors",
    "fits_utc",
    "is_real_number",
    "is_whole_number",
    "optional_moment",
    "quoted",
    "require_at_least_one",
    "require_flag",
    "require_many",
    "require_moment",
    "require_user_id",
    "require_version",
]


class ChatArchiveError(Exception):
    """Base class of every error raised by chatarchive."""


class InvalidDocument(ChatArchiveError, ValueError):
    """Raised when input is not a valid chat document, message, part or feedback
    item, or an argument is unusable (a ``limit`` of 0, an unknown revision, a
    database URL that is not one).

    The message names the chat, the message index and the field at fault, and
    the same facts are available as attributes.
    """

    def __init__(
        self,
        reason: str,
        *,
        chat_id: str | None = None,
        message_index: int | None = None,
        field: str | None = None,
    ) -> None:
        self.reason = reason
        self.chat_id = chat_id
        self.message_index = message_index
        self.field = field
        where = []
        if chat_id is not None:
            where.append(f"chat {quoted(chat_id)}")
        if message_index is not None:
            where.append(f"message {message_index}")
        if field:
            where.append(f"field {field!r}")
        super().__init__(f"{', '.join(where)}: {reason}" if where else reason)


#: The longest id (chat_id, user_id, uid, feedback id, tag) a document may
#: hold; an error message quotes ids up to it whole.
LONGEST_ID = 255


def quoted(value: object) -> str:
    """``repr(value)`` for an error message, a string longer than any valid id
    cut and its length given: an id passed to ``get`` or ``delete`` may be of
    any length, and a message quoting a megabyte of it floods the log."""
    if isinstance(value, str) and len(value) > LONGEST_ID:
        return f"{value[:LONGEST_ID]!r}… ({len(value):,} characters)"
    return repr(value)


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
        raise InvalidDocument(f"{name} must be a whole number, not {type(value).__name__}", field=name)
    if value < 1:
        raise InvalidDocument(f"{name} must be at least 1", field=name)


def require_flag(value: object, name: str) -> bool:
    """Refuse a yes-or-no argument (``bulk``, ``enabled``) that is not a bool:
    ``bulk="no"`` would otherwise count as yes."""
    if not isinstance(value, bool):
        raise InvalidDocument(f"{name} must be True or False, not {value!r}", field=name)
    return value


def require_many(value: object, name: str, items: str, *, chat_id: str | None = None) -> None:
    """Refuse an argument meant to hold many items (``docs``, ``messages``,
    ``chat_ids``) that is one item or not iterable at all: a string's
    characters, a mapping's keys or a model's fields would be taken for items."""
    if isinstance(value, (str, bytes, Mapping, BaseModel)) or not isinstance(value, Iterable):
        raise InvalidDocument(
            f"{name} must be a list of {items}, not {type(value).__name__}", chat_id=chat_id, field=name
        )


def require_version(value: object) -> None:
    """Refuse an ``expected_version`` that is neither None nor a whole number >= 0."""
    if value is not None and (not is_whole_number(value) or value < 0):
        raise InvalidDocument(
            f"expected_version must be a whole number >= 0, not {value!r}", field="expected_version"
        )


def require_moment(value: object, name: str) -> datetime:
    """A time argument (``since``, ``until``, ``cutoff``) as an aware datetime,
    a naive one taken as UTC. Anything else (an ISO string, a ``date``) is
    refused here rather than failing inside the database driver, and so is
    a time that is no time in UTC (``datetime.min`` at UTC+14)."""
    if not isinstance(value, datetime):
        raise InvalidDocument(f"{name} must be a datetime, not {type(value).__name__}", field=name)
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    if not fits_utc(value):
        raise InvalidDocument(f"{name} is out of range once converted to UTC", field=name)
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
    """:func:`require_moment`, letting ``None`` (no bound) through."""
    return None if value is None else require_moment(value, name)


def require_text(value: object, name: str) -> str:
    """Refuse an id or filter argument (``chat_id``, ``model``, ...) that is
    not a string: PostgreSQL would compare it as text, SQLite as a number, and
    the two archives would answer differently."""
    if not isinstance(value, str):
        raise InvalidDocument(f"{name} must be a string, not {type(value).__name__}", field=name)
    return value


def optional_text(value: object, name: str) -> str | None:
    """:func:`require_text`, letting ``None`` (no filter) through."""
    return None if value is None else require_text(value, name)


def require_unscoped(user_id: str | None, operation: str) -> None:
    """Refuse a schema operation (migrations, row-level security, the search
    index) through a user's archive (``for_user``): it changes the archive for
    every user."""
    if user_id is not None:
        raise ChatArchiveError(
            f"{operation} changes the archive for every user: call it on the archive, "
            f"not on the one for_user({quoted(user_id)}) gave"
        )


def require_user_id(user_id: object) -> str:
    """Refuse a user id that names nobody: ``None`` or ``""`` would otherwise
    select every chat without a user (``delete_user``) or lift the scope
    (``for_user``)."""
    if not isinstance(user_id, str) or not user_id:
        raise InvalidDocument(f"user_id must be a non-empty string, not {quoted(user_id)}", field="user_id")
    return user_id


class ChatNotFound(ChatArchiveError, LookupError):
    """Raised when a chat id names no stored chat."""

    def __init__(self, chat_id: str) -> None:
        self.chat_id = chat_id
        super().__init__(f"chat {quoted(chat_id)} not found")


class ConflictError(ChatArchiveError):
    """Raised when a write loses a race: the stored version differs from
    ``expected_version``, or another writer created the same key first (then
    ``constraint`` names the database's constraint, where it says)."""

    def __init__(self, message: str, *, constraint: str | None = None) -> None:
        self.constraint = constraint
        super().__init__(message)


class SchemaNotReady(ChatArchiveError):
    """Raised when the database lacks chatarchive's tables or is at another
    revision; run ``chatarchive db upgrade``."""


class DatabaseError(ChatArchiveError):
    """Raised for any other failure reported by the database (connection lost,
    timeout, permission denied, ...). The driver's error is the ``__cause__``."""


# SQLSTATE classes and codes, see https://www.postgresql.org/docs/current/errcodes-appendix.html
_CONFLICT_STATES = {"40001", "40P01"}  # serialization failure, deadlock
_SCHEMA_STATES = {"42P01", "42703", "42883"}  # undefined table, column, function
_LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout ran out (or NOWAIT)


@contextmanager
def database_errors() -> Iterator[None]:
    """Translate database driver errors raised inside the block into chatarchive's."""
    try:
        yield
    except sa_exc.SQLAlchemyError as exc:  # the driver's own errors arrive wrapped (driver_call)
        if (interruption := _interruption(exc)) is not None:
            raise interruption from exc
        if isinstance(exc, sa_exc.DBAPIError):
            raise _translate(exc.orig, lost=exc.connection_invalidated) from exc
        raise DatabaseError(f"database error: {exc}") from exc


def _interruption(error: BaseException) -> BaseException | None:
    """The Ctrl-C (or asyncio cancellation) that ``error`` was raised while
    handling, if any. Cut short mid-command, a connection refuses the rollback
    that follows ("another command is already in progress"): the interruption
    is what happened, and what the caller must see."""
    cause = error.__context__
    while cause is not None:
        if isinstance(cause, (KeyboardInterrupt, asyncio.CancelledError)):
            return cause
        cause = cause.__context__
    return None


def _translate(orig: BaseException | None, *, lost: bool) -> ChatArchiveError:
    summary = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    sqlstate = getattr(orig, "sqlstate", None)
    if isinstance(sqlstate, str):
        if sqlstate.startswith("23"):
            diagnostic = getattr(orig, "diag", None)
            constraint = getattr(diagnostic, "constraint_name", None)
            detail = getattr(diagnostic, "message_detail", None)  # "Key (chat_id)=(...) already exists."
            if isinstance(detail, str) and detail.strip():
                summary = f"{summary}: {_clipped(detail.strip().splitlines()[0])}"
            return ConflictError(
                f"write conflicts with stored data (constraint {constraint}): {summary}",
                constraint=constraint if isinstance(constraint, str) else None,
            )
        if sqlstate in _CONFLICT_STATES:
            return ConflictError(f"concurrent write, try again: {summary}")
        if sqlstate == _LOCK_NOT_AVAILABLE:
            return ConflictError(f"another transaction holds a lock this one needs; try again: {summary}")
        if sqlstate in _SCHEMA_STATES:
            return SchemaNotReady(f"{summary}; run 'chatarchive db upgrade'")
    errorname = getattr(orig, "sqlite_errorname", None)
    if errorname == "SQLITE_ERROR" and summary.startswith("no such table"):
        return SchemaNotReady(f"{summary}; run 'chatarchive db upgrade'")
    if isinstance(errorname, str) and errorname.startswith("SQLITE_CONSTRAINT"):
        return ConflictError(f"write conflicts with stored data ({errorname}): {summary}")
    what = "database connection lost" if lost else "database error"
    code = f" [{sqlstate}]" if isinstance(sqlstate, str) else ""
    return DatabaseError(f"{what}{code}: {summary}")


def _clipped(text: str, limit: int = 300) -> str:
    """``text``, cut to ``limit`` characters: a key in an error message may be
    a chat id of any length."""
    return text if len(text) <= limit else f"{text[: limit - 1]}…"
