"""The unit of work every operation runs in.

A ``Unit`` is one operation's view of the archive: where its statements
run (the caller's session, or a connection the archive opened), the backend
that speaks to that database, the user whose chats it may see, and the limits
of its input. Operations are functions of a unit; they never commit: the face
that made the unit owns the transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime
from functools import cache
from typing import Any

from sqlalchemy import Connection, Result, Table, false, insert

from chatarchive._arguments import optional_text
from chatarchive._backends import Backend, Executor, database_errors
from chatarchive._backends.base import connection_of
from chatarchive._document import ChatDocument, Limits
from chatarchive._exceptions import InvalidDocument
from chatarchive._schema import tables
from chatarchive._terms import SearchSettings
from chatarchive.encryption import UserKeys
from chatarchive.redaction import Redactor

from . import attachments

__all__ = ["NOBODY", "Unit", "now", "scoped_user"]


#: A user no chat can belong to: what a user's unit reads for another user.
NOBODY = "\x00nobody"


@cache
def _insert_into(table: Table) -> Any:
    """The INSERT of ``table``'s rows, built once (its compiled SQL is cached with it)."""
    return insert(table)


def now() -> datetime:
    """The time of a write, in UTC."""
    return datetime.now(UTC)


def scoped_user(scope: str | None, user_id: object) -> str | None:
    """The user a read is about, for a unit scoped to ``scope`` (``None``:
    unscoped): ``user_id``, or the scope's own; ``NOBODY`` when it asks
    about another user."""
    user_id = optional_text(user_id, "user_id")
    if scope is None:
        return user_id
    if user_id is not None and user_id != scope:
        return NOBODY
    return scope


class Unit:
    """One operation's work, in the transaction it is given.

    Args:
        executor: where statements run: a session, or a connection.
        backend: the database's backend.
        user_id: the user whose chats the unit may see and write (``None``: any).
        limits: the largest input accepted (``None``: the defaults).
        redactor: what replaces text before it is stored (``None``: nothing).
        keys: the users' keys that seal their chats (``None``: none are sealed,
            and sealed chats cannot be read or written).
        savepoints: wrap each write in a savepoint, so that a failed write
            leaves the transaction as it was (off when the transaction holds
            exactly one operation, which rolls back whole).
    """

    def __init__(
        self,
        executor: Executor,
        *,
        backend: Backend,
        user_id: str | None,
        limits: Limits | None,
        savepoints: bool,
        redactor: Redactor | None = None,
        keys: UserKeys | None = None,
    ) -> None:
        self.executor = executor
        self.backend = backend
        self.user_id = user_id
        self.limits = limits
        self.redactor = redactor
        self.keys = keys
        #: Each chat written or read in this unit: whether it is sealed, and its user (``sealing``).
        self.seals: dict[str, tuple[bool, str | None]] = {}
        #: Each user's data key, once read (``sealing``; ``None``: the user has none).
        self.user_keys: dict[str, bytes | None] = {}
        self.savepoints = savepoints
        #: The archive's search settings, once read (``searching.settings``).
        self.search_settings: SearchSettings | None = None
        #: Whether the archive stores attachments once, once read (``attachments.stored_once``).
        self.attachments_stored_once: bool | None = None
        #: Attachments (user, SHA-256) whose parts this write deleted: swept when it ends.
        self.released: set[tuple[str, str]] = set()

    @property
    def connection(self) -> Connection:
        return connection_of(self.executor)

    # -- running statements --------------------------------------------------------

    def execute(self, statement: Any, params: Any = None) -> Result[*tuple[Any, ...]]:
        return self.executor.execute(statement, params)

    def insert(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self.executor.execute(_insert_into(table), rows)

    @contextmanager
    def writing(self, *, savepoint: bool | None = None) -> Iterator[None]:
        """A write: in a savepoint (with ``savepoints``, or if ``savepoint``),
        database errors translated, the user told to the database."""
        use_savepoint = self.savepoints if savepoint is None else savepoint
        with database_errors(), self.executor.begin_nested() if use_savepoint else nullcontext():
            self._start()
            yield
            if self.released:
                attachments.sweep(self)

    @contextmanager
    def reading(self) -> Iterator[None]:
        """A read: database errors translated, the user told to the database."""
        with database_errors():
            self._start()
            yield

    def _start(self) -> None:
        if self.user_id is not None:
            self.backend.set_user(self.executor, self.user_id)

    # -- the user's scope ------------------------------------------------------------

    def scoped(self, query: Any) -> Any:
        """``query`` over ``chats``, kept to this unit's user's chats (when it has one)."""
        return query if self.user_id is None else query.where(tables.chats.c.user_id == self.user_id)

    def only_chats_of(self, query: Any, user_id: str | None) -> Any:
        """``query`` over ``chats``, kept to the chats of ``user_id`` (a user
        filter given by the caller) that this unit may see."""
        user = scoped_user(self.user_id, user_id)
        if user is NOBODY:
            return query.where(false())
        return query if user is None else query.where(tables.chats.c.user_id == user)

    def visible(self, row: Mapping[Any, Any]) -> bool:
        """Whether this unit may see the chat of ``row`` (a chats row)."""
        return self.user_id is None or row["user_id"] == self.user_id

    def owned(self, doc: ChatDocument) -> ChatDocument:
        """The document, given to this unit's user (when it has one)."""
        if self.user_id is None or doc.user_id == self.user_id:
            return doc
        if doc.user_id is None:
            return doc.model_copy(update={"user_id": self.user_id})
        raise InvalidDocument(f"user_id must be {self.user_id!r}", chat_id=doc.chat_id, field="user_id")
