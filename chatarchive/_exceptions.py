"""Errors raised by chatarchive.

Every error chatarchive raises on purpose derives from ``ChatArchiveError``;
database driver errors are translated where they are raised (see
``chatarchive._backends.database_errors``) and never escape raw::

    ChatArchiveError
     ├── InvalidDocument          input is not a valid chat document, message, part or feedback item
     ├── ChatNotFound             the chat does not exist (or is not visible to the caller)
     ├── ConflictError            another writer got there first (version or key clash)
     ├── SchemaNotReady           the database has not been migrated to this version
     ├── DatabaseError            any other failure reported by the database
     ├── ImportFailed             a strict import stopped at a record (its place, and the error)
     └── UsageError               the API was called in a way it cannot serve
          ├── InvalidArgument         an argument is unusable (a URL, a limit, a batch size, a revision)
          ├── NotSupported            the database lacks what the call needs (row-level security on SQLite)
          ├── ArchiveClosed           a call on an archive after its close()
          ├── TransactionEnded        a transaction's repository used after its block
          ├── TransactionInProgress   a call that would wait for the caller's own open transaction
          └── UserScopeError          an archive-wide change asked of a user's archive (for_user)

``InvalidDocument`` and ``InvalidArgument`` are also ``ValueError``, and
``ChatNotFound`` a ``LookupError``.
"""

from __future__ import annotations

__all__ = [
    "LONGEST_ID",
    "ArchiveClosed",
    "ChatArchiveError",
    "ChatNotFound",
    "ConflictError",
    "DatabaseError",
    "EmbedderError",
    "ImportFailed",
    "InvalidArgument",
    "InvalidDocument",
    "NotSupported",
    "SchemaNotReady",
    "SealedChat",
    "TransactionEnded",
    "TransactionInProgress",
    "UsageError",
    "UserScopeError",
    "quoted",
]

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


def _located(reason: str, *, chat_id: str | None, message_index: int | None, field: str | None) -> str:
    where = []
    if chat_id is not None:
        where.append(f"chat {quoted(chat_id)}")
    if message_index is not None:
        where.append(f"message {message_index}")
    if field:
        where.append(f"field {field!r}")
    return f"{', '.join(where)}: {reason}" if where else reason


class ChatArchiveError(Exception):
    """Base class of every error raised by chatarchive."""


class InvalidDocument(ChatArchiveError, ValueError):
    """Raised when input is not a valid chat document, message, content part,
    tool call or feedback item (or a chunk of a streamed message).

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
        super().__init__(_located(reason, chat_id=chat_id, message_index=message_index, field=field))


class ChatNotFound(ChatArchiveError, LookupError):
    """Raised when a chat id names no stored chat (or one the caller may not see)."""

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
    """Raised when the database lacks chatarchive's tables, is at another
    revision, or lacks the search index a search needs; the message says what
    to run (``chatarchive db upgrade``, ``chatarchive db search-index on``)."""


class SealedChat(ChatArchiveError):
    """Raised when a chat sealed with its user's key (``chatarchive.encryption``)
    is read or written without that key: the archive was given no ``keys``,
    or the user's key is deleted (its text can then never be read again)."""

    def __init__(self, message: str, *, chat_id: str | None = None, user_id: str | None = None) -> None:
        self.chat_id = chat_id
        self.user_id = user_id
        super().__init__(message)


class DatabaseError(ChatArchiveError):
    """Raised for any other failure reported by the database (connection lost,
    timeout, permission denied, ...). The driver's error is the ``__cause__``.

    ``lasting`` is true for a failure that no retry of the same write can mend
    (the disk is full, the database is read-only, the role may not write):
    ``save_many`` raises it at once, even with ``on_error``, instead of
    trying every document again on its own."""

    def __init__(self, message: str, *, lasting: bool = False) -> None:
        self.lasting = lasting
        super().__init__(message)


class EmbedderError(ChatArchiveError):
    """Raised when the archive's embedder fails or gives what is not one
    vector of its dimension per text; the write or search that asked for the
    vectors changes nothing. When the archive was configured with an embedder
    that this process does not have, the message says how to give it."""


class ImportFailed(ChatArchiveError):
    """Raised by a strict import (``chatarchive.importing.import_chats(...,
    strict=True)``) at the first record it could not import; nothing of the
    import is kept. ``place`` is where the record is (``file:line``), and
    ``error`` why (an ``InvalidDocument``, a ``ConflictError``...)."""

    def __init__(self, place: str, error: ChatArchiveError) -> None:
        super().__init__(f"{place}: {error}")
        self.place = place
        self.error = error


class UsageError(ChatArchiveError):
    """Base class of the errors of a call the archive cannot serve as made:
    the fault is in the calling code, not in the data or the database."""


class InvalidArgument(UsageError, ValueError):
    """Raised when an argument is unusable: a database URL that is not one, a
    ``limit`` of 0, an unknown revision, a ``batch_size`` too large, an id that
    is not a string, a ``message_uid`` that names no message being streamed.

    ``argument`` names the argument (and ``chat_id`` the chat, when the call
    is about one).
    """

    def __init__(self, reason: str, *, argument: str | None = None, chat_id: str | None = None) -> None:
        self.reason = reason
        self.argument = argument
        self.chat_id = chat_id
        where = []
        if chat_id is not None:
            where.append(f"chat {quoted(chat_id)}")
        if argument:
            where.append(f"argument {argument!r}")
        super().__init__(f"{', '.join(where)}: {reason}" if where else reason)


class NotSupported(UsageError):
    """Raised when the call needs what this database does not have, such as
    row-level security on SQLite."""


class ArchiveClosed(UsageError):
    """Raised by every call on an archive after its ``close()`` (or its
    owner's, for an archive of ``for_user``)."""


class TransactionEnded(UsageError):
    """Raised by a call on the repository of a ``transaction()`` block after the
    block has ended: the call would begin a transaction that nothing commits."""


class TransactionInProgress(UsageError):
    """Raised when a call would wait for the caller's own open transaction: a
    write through an archive inside that archive's ``transaction()`` block, or
    a second connection asked of an in-memory SQLite archive that has one."""


class UserScopeError(UsageError):
    """Raised when an archive-wide change (migrations, row-level security, the
    search index) is asked of a user's archive (``for_user``)."""
