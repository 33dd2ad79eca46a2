"""ChatRepository: reads and writes chat documents inside the caller's session."""

from __future__ import annotations

import base64
import binascii
import json
import struct
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing, contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import cache
from typing import Any, NoReturn, TypedDict, Unpack

import psycopg
from sqlalchemy import (
    Connection,
    Double,
    Integer,
    Table,
    case,
    delete,
    false,
    func,
    insert,
    literal,
    select,
    text,
    true,
    tuple_,
    update,
)
from sqlalchemy.dialects import postgresql
from sqlalchemy.engine import AdaptedConnection
from sqlalchemy.orm import Session, SessionTransaction
from sqlalchemy.sql.elements import TextClause

from ._document import (
    DEFAULT_LIMITS,
    ChatDocument,
    ChatPage,
    ChatSummary,
    Feedback,
    Limits,
    Message,
    check_limits,
    parse_feedback,
    parse_messages,
)
from ._engine import driver_call
from ._exceptions import (
    ChatArchiveError,
    ChatNotFound,
    ConflictError,
    InvalidDocument,
    database_errors,
    fits_utc,
    is_whole_number,
    optional_moment,
    optional_text,
    quoted,
    require_at_least_one,
    require_flag,
    require_many,
    require_moment,
    require_text,
    require_user_id,
    require_version,
)
from ._ingest import PreparedBatch, check_save_many, prepared_batches, row_writer
from ._rows import (
    CHAT_ORDERED,
    ChatRows,
    MessageRows,
    chat_ordered_json,
    document_from_rows,
    document_to_rows,
    feedback_to_row,
    fold_chunks,
    message_from_rows,
    messages_to_rows,
)
from ._schema import metadata
from ._search import SearchHit, check_query, search_messages
from ._types import ArchiveText, UTCDateTime, escape_text, unescape_json_text

__all__ = ["ENDED", "NOBODY", "ChatChanges", "ChatRepository", "OnError", "scoped_user"]

#: ``on_error(index, error)``: told about a document that could not be saved.
OnError = Callable[[int, ChatArchiveError], None]

chats = metadata.tables["chats"]
chat_tags = metadata.tables["chat_tags"]
messages = metadata.tables["messages"]
content_parts = metadata.tables["content_parts"]
tool_calls = metadata.tables["tool_calls"]
feedback = metadata.tables["feedback"]
message_chunks = metadata.tables["message_chunks"]
# The same two tables, for the methods whose parameters (``messages``, ``feedback``) hide them.
_message_table = messages
_feedback_table = feedback
_CHATS_KEY = chats.primary_key.name

#: How often ``save`` (or a ``save_many`` batch) looks for a chat that another
#: writer keeps creating (and deleting) between its lookup and its insert
#: before it gives up.
_CREATE_ATTEMPTS = 3

#: Chats deleted per statement by ``delete_older_than``.
_DELETE_CHUNK = 500
#: Ids looked up per statement (see _in_pieces).
_IDS_PER_STATEMENT = 10_000
# Children first, so that deleting never trips a foreign key.
_CHILD_TABLES = (feedback, message_chunks, content_parts, tool_calls, messages, chat_tags)
_DOCUMENT_ORDER = {
    chat_tags: (chat_tags.c.chat_id, chat_tags.c.position),
    messages: (messages.c.chat_id, messages.c.position),
    content_parts: (
        content_parts.c.chat_id,
        content_parts.c.message_position,
        content_parts.c.position,
    ),
    tool_calls: (tool_calls.c.chat_id, tool_calls.c.message_position, tool_calls.c.position),
    feedback: (feedback.c.chat_id, feedback.c.position),
    message_chunks: (message_chunks.c.chat_id, message_chunks.c.message_position, message_chunks.c.position),
}


# The archive's foreign keys and its indexes that back no constraint, with their
# definitions, from PostgreSQL's catalog (for the bulk-load mode). GIN indexes
# (full text) stay: their cost is tokenizing each row, the same whether rows are
# indexed as they arrive or in a rebuild, and a rebuild would re-tokenize every
# row already stored (measured: 42,000 messages bulk-loaded next to 1,050,000
# took 72 s with the rebuild, 4.9 s without).
_FOREIGN_KEYS = text(
    "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
    "WHERE contype = 'f' AND conrelid::regclass::text = ANY(:tables) "
    "ORDER BY conrelid::regclass::text, conname"
)
_SECONDARY_INDEXES = text(
    "SELECT t.relname, i.relname, pg_get_indexdef(i.oid) FROM pg_index x "
    "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
    "WHERE t.relname = ANY(:tables) AND t.relnamespace = to_regnamespace(current_schema()) "
    "AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid) "
    "AND i.relam <> (SELECT oid FROM pg_am WHERE amname = 'gin') ORDER BY i.relname"
)


@dataclass
class _OpenedMany:
    """What :meth:`ChatRepository._begin_many` opened, for its end or its abandon."""

    savepoint: SessionTransaction | None
    bulk: SessionTransaction | None = None
    foreign_keys: list[tuple[str, str, str]] = field(default_factory=list)
    indexes: list[tuple[str, str, str]] = field(default_factory=list)


#: A user no chat can belong to: what a user's archive reads for another user.
NOBODY = "\x00nobody"


def scoped_user(scope: str | None, user_id: str | None) -> str | None:
    """The user a read is about, for an archive scoped to ``scope`` (``None``:
    unscoped): the scope's own; :data:`NOBODY` when it asks about another user."""
    optional_text(user_id, "user_id")
    if scope is None:
        return user_id
    if user_id is not None and user_id != scope:
        return NOBODY
    return scope


# Chat rows, and the child rows of each chat by chat id and table.
_Rows = Sequence[Mapping[Any, Any]]
_Children = dict[str, dict[Table, list[Mapping[Any, Any]]]]


class ChatChanges(TypedDict, total=False):
    """Chat fields that :meth:`ChatRepository.update` can change; ``None`` clears one."""

    user_id: str | None
    title: str | None
    model: str | None
    model_settings: dict[str, Any] | None
    workflow: dict[str, Any] | None
    metadata: dict[str, Any] | None
    tags: list[str]


#: What a repository says when it is used after its transaction() block.
ENDED = "this repository's transaction has ended with its transaction() block; start a new one"


def _now() -> datetime:
    return datetime.now(UTC)


class ChatRepository:
    """Chat documents stored as rows, read and written inside the caller's session.

    The repository never commits: the caller owns the transaction. Each write
    runs in a savepoint, so a call that fails leaves nothing behind and the
    caller's transaction stays usable. Errors are chatarchive's own
    (:class:`~chatarchive.ChatArchiveError` and subclasses).

    Args:
        session: a SQLAlchemy session bound to a migrated database.
        savepoints: wrap each write in a savepoint (turn off only when the
            transaction holds exactly one call, as :class:`ChatArchive` does).
        limits: the largest input accepted (see :class:`Limits`); the defaults
            when not given.
        user_id: scope every call to this user's chats: another user's chat is
            reported as not found, saved chats belong to this user, and on
            PostgreSQL the session setting ``chatarchive.user_id`` is set for
            row-level security (see ``chatarchive db rls``).
    """

    def __init__(
        self,
        session: Session,
        *,
        savepoints: bool = True,
        limits: Limits | None = None,
        user_id: str | None = None,
    ) -> None:
        self._session = session
        self._ended = False
        # One call at a time on the session (reentrant: calls made inside a
        # call): threads sharing a transaction's repository broke its session
        # ("... is already in progress"); they now take turns.
        self._turn = threading.RLock()
        self._savepoints = require_flag(savepoints, "savepoints")
        self._limits = check_limits(limits)
        self._user_id = None if user_id is None else require_user_id(user_id)

    # -- writes ----------------------------------------------------------------

    def save(self, doc: ChatDocument | Mapping[str, Any], *, expected_version: int | None = None) -> int:
        """Insert a chat, or replace the stored chat with the same ``chat_id``.

        Args:
            doc: the document (or its canonical JSON as a mapping).
            expected_version: if given, the version the stored chat must have
                (``0``: the chat must not exist yet).

        Returns:
            The chat's new version.

        Raises:
            InvalidDocument: the document is not valid.
            ConflictError: the stored version is not ``expected_version``.
        """
        require_version(expected_version)
        doc = self._owned(ChatDocument.parse(doc, limits=self._limits))
        with self._write():
            for _ in range(_CREATE_ATTEMPTS):
                current = self._lock_row(doc.chat_id)
                if current is not None and not self._visible(current):
                    raise ChatNotFound(doc.chat_id)
                stored = 0 if current is None else current["version"]
                if expected_version is not None and stored != expected_version:
                    raise ConflictError(
                        f"chat {doc.chat_id!r} is at version {stored}, not {expected_version}"
                    )
                rows = document_to_rows(doc, now=_now(), version=stored + 1)
                if current is None:
                    if not self._create(rows.chat):
                        continue  # another writer created the chat after the lock found none: replace it
                else:
                    self._delete_children(chats.c.chat_id == doc.chat_id)
                    self._execute(update(chats).where(chats.c.chat_id == doc.chat_id).values(rows.chat))
                self._insert(chat_tags, rows.tags)
                self._insert_messages(rows)
                self._insert(feedback, rows.feedback)
                return stored + 1
        if self._user_id is not None:  # there, but row-level security hides it: another user's
            raise ChatNotFound(doc.chat_id)
        raise ConflictError(f"chat {doc.chat_id!r} keeps being created by another writer; try again")

    def save_many(
        self,
        docs: Iterable[ChatDocument | Mapping[str, Any]],
        *,
        batch_size: int = 250,
        bulk: bool = False,
        on_error: OnError | None = None,
    ) -> int:
        """Save many chats fast: validated one by one, written ``batch_size`` at a
        time (binary COPY on PostgreSQL), in memory that does not grow with the input.

        Chats already stored with the same ``chat_id`` are replaced, as by :meth:`save`.

        Args:
            docs: any iterable, for instance a generator over a huge file.
            batch_size: documents written per round trip.
            bulk: load with foreign keys and secondary B-tree indexes dropped,
                and re-create them (validating every row in one pass) at the end.
                PostgreSQL only (elsewhere it changes nothing). Takes exclusive
                locks on the archive's tables until the transaction ends: use it
                only when nothing else writes to the archive meanwhile.
            on_error: called with the document's index in ``docs`` and the
                error for each document that cannot be saved; the others are
                saved. Without it, the first error is raised.

        Returns:
            How many documents were saved.
        """
        check_save_many(docs, batch_size, bulk=bulk, on_error=on_error)
        saved = 0
        batches = prepared_batches(docs, batch_size, stop_at_error=on_error is None, limits=self._limits)
        with closing(batches), self._turn:
            opened = self._begin_many(bulk=bulk)
            try:
                for batch in batches:
                    saved += self._save_prepared(batch, on_error)
                self._end_many(opened)
            except BaseException:
                self._abandon_many(opened)
                raise
        return saved

    # save_many in three steps, so that AsyncChatRepository can run each batch
    # in a call of its own and wait for the next one off the event loop.

    def _begin_many(self, *, bulk: bool) -> _OpenedMany:
        """What save_many opens before its first batch: its savepoint (with
        ``savepoints``) and, for a bulk load on PostgreSQL, PostgreSQL's recipe:
        a savepoint of its own, the tables locked, the foreign keys and
        secondary B-tree indexes dropped. Their definitions are read from the
        catalog, so indexes created in SQL and any an operator added are
        rebuilt as they were."""
        with database_errors():
            self._start()
            opened = _OpenedMany(self._session.begin_nested() if self._savepoints else None)
            if not bulk or self._session.get_bind().dialect.name != "postgresql":
                return opened
            try:
                opened.bulk = self._session.begin_nested()
                names = [table.name for table in metadata.sorted_tables]
                self._execute(text(f"LOCK TABLE {', '.join(names)} IN ACCESS EXCLUSIVE MODE"))
                tables = {"tables": names}
                opened.foreign_keys = [(a, b, c) for a, b, c in self._session.execute(_FOREIGN_KEYS, tables)]
                opened.indexes = [(a, b, c) for a, b, c in self._session.execute(_SECONDARY_INDEXES, tables)]
                for table_name, name, _ in opened.foreign_keys:
                    self._execute(text(f'ALTER TABLE {table_name} DROP CONSTRAINT "{name}"'))
                for _, name, _ in opened.indexes:
                    self._execute(text(f'DROP INDEX "{name}"'))
            except BaseException:
                self._abandon_many(opened)
                raise
            return opened

    def _end_many(self, opened: _OpenedMany) -> None:
        """After the last batch: a bulk load's indexes and foreign keys
        re-created (PostgreSQL checks every row in one pass), the savepoints
        released."""
        with database_errors():
            if opened.bulk is not None:
                for _, _, definition in opened.indexes:
                    self._execute(text(definition))
                for table_name, name, definition in opened.foreign_keys:
                    self._execute(text(f'ALTER TABLE {table_name} ADD CONSTRAINT "{name}" {definition}'))
                opened.bulk.commit()
            if opened.savepoint is not None:
                opened.savepoint.commit()

    def _abandon_many(self, opened: _OpenedMany) -> None:
        """After a failure: back to where save_many began (with
        ``savepoints``), or at least to before the bulk load, with the
        constraints it dropped in place again."""
        with database_errors():
            for savepoint in (opened.bulk, opened.savepoint):
                if savepoint is not None and savepoint.is_active:
                    savepoint.rollback()

    def _save_prepared(self, batch: PreparedBatch, on_error: OnError | None) -> int:
        """Write one prepared batch (used by ChatArchive.save_many as well)."""
        batch.report_errors(on_error)
        return self._save_rows(batch.documents, on_error)

    def _save_rows(self, documents: Mapping[str, tuple[int, ChatRows]], on_error: OnError | None) -> int:
        if not documents:
            return 0
        for attempt in range(1, _CREATE_ATTEMPTS + 1):
            try:
                with self._write(savepoint=True):
                    self._write_documents(documents)
                return len(documents)
            except ConflictError as exc:
                # Another writer created one of the chats after the lock found none:
                # the batch again finds it and replaces it, as save does.
                if exc.constraint == _CHATS_KEY and attempt < _CREATE_ATTEMPTS:
                    continue
                error: ChatArchiveError = exc
            except ChatArchiveError as exc:
                error = exc
            break
        if on_error is None:
            raise error
        if len(documents) == 1:
            ((index, _),) = documents.values()
            on_error(index, error)
            return 0
        # Find the culprit: save the documents one at a time.
        return sum(self._save_rows({chat_id: item}, on_error) for chat_id, item in documents.items())

    def _write_documents(self, documents: Mapping[str, tuple[int, ChatRows]]) -> None:
        if self._user_id is not None:
            for chat_id, (_, chat_rows) in documents.items():
                if chat_rows.chat["user_id"] is None:
                    chat_rows.chat["user_id"] = self._user_id
                elif chat_rows.chat["user_id"] != self._user_id:
                    raise InvalidDocument(
                        f"user_id must be {self._user_id!r}", chat_id=chat_id, field="user_id"
                    )
        locked = select(chats.c.chat_id, chats.c.version, chats.c.user_id).where(
            chats.c.chat_id.in_(documents)
        )
        stored: dict[str, int] = {}
        for chat_id, version, owner in self._session.execute(locked.with_for_update()):
            if self._user_id is not None and owner != self._user_id:
                raise ChatNotFound(chat_id)
            stored[chat_id] = version
        if stored:
            selected = chats.c.chat_id.in_(stored)
            self._delete_children(selected)
            self._execute(delete(chats).where(selected))
        rows = [item[1] for item in documents.values()]
        for chat_id, (_, chat_rows) in documents.items():  # a batch written again after a race: all of them
            chat_rows.chat["version"] = stored.get(chat_id, 0) + 1
        writer = row_writer(self._session)
        writer.write(chats, [r.chat for r in rows])
        writer.write(chat_tags, [tag for r in rows for tag in r.tags])
        writer.write(messages, [m for r in rows for m in r.messages])
        writer.write(content_parts, [p for r in rows for p in r.parts])
        writer.write(tool_calls, [c for r in rows for c in r.tool_calls])
        writer.write(feedback, [f for r in rows for f in r.feedback])

    def append(
        self,
        chat_id: str,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        expected_version: int | None = None,
    ) -> list[Message]:
        """Add messages at the end of a chat, without touching earlier rows.

        Errors name the message by its index in ``messages``.

        Returns:
            The messages as stored (uids and timestamps filled in).
        """
        require_many(messages, "messages", "messages", chat_id=chat_id)
        messages = list(messages)  # read twice: parsed, then for the uids they came with
        parsed = parse_messages(messages, chat_id=chat_id, limits=self._limits)
        seen: set[str] = set()
        for index, message in enumerate(parsed):
            if message.uid in seen:
                raise InvalidDocument(
                    f"duplicate message uid {message.uid!r}",
                    chat_id=chat_id,
                    message_index=index,
                    field="uid",
                )
            seen.add(message.uid)
        if not parsed:
            self._require(chat_id)
            return []
        # A uid generated here (for a mapping without one) is a new random UUID that no
        # stored message has: only the uids that came with the messages are looked up.
        given = [
            message.uid
            for raw, message in zip(messages, parsed, strict=True)
            if not (isinstance(raw, Mapping) and "uid" not in raw)
        ]
        now = _now()
        with self._write():
            count = self._bump(chat_id, expected_version, now, len(parsed))["message_count"]
            taken = None
            for uids in _in_pieces(given):
                stored = select(_message_table.c.uid).where(
                    _message_table.c.chat_id == chat_id, _message_table.c.uid.in_(uids)
                )
                taken = self._session.execute(stored).scalars().first()
                if taken is not None:
                    break
            if taken is not None:
                index = next(i for i, message in enumerate(parsed) if message.uid == taken)
                raise InvalidDocument(
                    f"message uid {taken!r} is already in the chat",
                    chat_id=chat_id,
                    message_index=index,
                    field="uid",
                )
            self._insert_messages(messages_to_rows(chat_id, parsed, first_position=count, now=now))
        return [m if m.created_at else m.model_copy(update={"created_at": now}) for m in parsed]

    def record_completion(self, chat_id: str, completion: Any, *, choice: int = 0) -> Message:
        """Append the assistant message of an OpenAI chat completion.

        ``completion`` is a completion (a dict, or an object of the ``openai``
        package) or a list of its streamed chunks; ``choice`` picks one choice
        when there are several. The message keeps the model, finish reason,
        token usage, the response's id, and every other key of the completion
        and the choice (see :mod:`chatarchive.formats.openai_completions`).

        Returns:
            The stored message.
        """
        from .formats.openai_completions import message_from_completion

        try:
            recorded = message_from_completion(completion, choice=choice)
        except InvalidDocument as exc:
            raise InvalidDocument(exc.reason, chat_id=chat_id, field=exc.field) from None
        (message,) = self.append(chat_id, [recorded])
        return message

    # -- streaming ---------------------------------------------------------------

    def begin_message(
        self, chat_id: str, role: str = "assistant", uid: str | None = None, **fields: Any
    ) -> Message:
        """Start a message that will arrive in chunks: it is stored at once with
        ``completed`` false and empty content (or ``fields["content"]``)."""
        message: dict[str, Any] = {"content": "", **fields, "role": role, "completed": False}
        if uid is not None:
            message["uid"] = uid
        (stored,) = self.append(chat_id, [message])
        return stored

    def append_chunk(
        self, chat_id: str, message_uid: str, chunk: str, *, tool_call_index: int | None = None
    ) -> None:
        """Store one streamed chunk of a message begun with :meth:`begin_message`:
        one insert, whatever was received before (earlier text is never
        rewritten). ``tool_call_index`` makes it a fragment of that tool call's
        arguments (a custom call's ``input``) instead of content text.

        Raises:
            InvalidDocument: unknown or completed message, or a bad chunk.
        """
        require_text(chat_id, "chat_id")
        require_text(message_uid, "message_uid")
        if not isinstance(chunk, str):
            raise InvalidDocument("a chunk is a string", chat_id=chat_id, field="chunk")
        # The chunk must be text the archive can hold (valid Unicode, within the limits).
        try:
            parse_messages([{"role": "chunk", "content": chunk}], chat_id=chat_id, limits=self._limits)
        except InvalidDocument as exc:
            raise InvalidDocument(exc.reason, chat_id=chat_id, field="chunk") from None
        if tool_call_index is not None:
            if not is_whole_number(tool_call_index) or tool_call_index < 0:
                raise InvalidDocument(
                    "tool_call_index must be a whole number >= 0", chat_id=chat_id, field="tool_call_index"
                )
            most = (self._limits or DEFAULT_LIMITS).max_tool_calls
            if tool_call_index >= most:  # reading the message makes a call for every index up to this one
                raise InvalidDocument(
                    f"tool_call_index {tool_call_index} is past the last of the {most} tool calls "
                    "a message may have",
                    chat_id=chat_id,
                    field="tool_call_index",
                )
        target = self._scoped(
            select(messages.c.chat_id, messages.c.position)
            .join(chats, chats.c.chat_id == messages.c.chat_id)
            .where(
                messages.c.chat_id == chat_id, messages.c.uid == message_uid, messages.c.completed.is_(False)
            )
        ).subquery()
        following = (
            select(func.coalesce(func.max(message_chunks.c.position) + 1, 0))
            .where(
                message_chunks.c.chat_id == target.c.chat_id,
                message_chunks.c.message_position == target.c.position,
            )
            .scalar_subquery()
        )
        statement = insert(message_chunks).from_select(
            ["chat_id", "message_position", "position", "tool_call_index", "text"],
            select(
                target.c.chat_id,
                target.c.position,
                following,
                literal(tool_call_index, Integer()),
                literal(chunk, ArchiveText()),
            ),
        )
        with self._read():
            inserted = self._execute(statement.returning(message_chunks.c.position)).first()
        if inserted is None:
            self._explain_missing_message(chat_id, message_uid)

    def complete_message(self, chat_id: str, message_uid: str, **fields: Any) -> Message:
        """Finish a streamed message: fold its chunks into its content (and tool
        call arguments), set ``completed`` and any given fields (``model``,
        ``finish_reason``, ``usage``...), and drop the chunks, in one transaction.

        Returns:
            The completed message.

        Raises:
            InvalidDocument: unknown or completed message, or fragments for a tool
                call that cannot take text (unless ``tool_calls`` is given).
        """
        require_text(message_uid, "message_uid")
        now = _now()
        with self._write():
            self._bump(chat_id, None, now)
            found = (
                self._session.execute(
                    select(messages).where(messages.c.chat_id == chat_id, messages.c.uid == message_uid)
                )
                .mappings()
                .first()
            )
            if found is None or found["completed"]:
                self._explain_missing_message(chat_id, message_uid)
            position = found["position"]

            def rows_of(table: Table) -> list[Mapping[Any, Any]]:
                order = _DOCUMENT_ORDER[table]
                query = select(table).where(table.c.chat_id == chat_id, table.c.message_position == position)
                return list(self._session.execute(query.order_by(*order)).mappings())

            data = message_from_rows(found, rows_of(content_parts), rows_of(tool_calls))
            unfolded = fold_chunks(data, rows_of(message_chunks))
            if unfolded and "tool_calls" not in fields:
                raise InvalidDocument(
                    "the streamed fragments cannot be added to a tool call that is not an object with "
                    "string text; give tool_calls=... to replace the calls",
                    chat_id=chat_id,
                    message_index=position,
                    field=unfolded[0],
                )
            data.update(fields)
            data["completed"] = True
            message = parse_messages([data], chat_id=chat_id, first_index=position, limits=self._limits)[0]
            rows = messages_to_rows(chat_id, [message], first_position=position, now=now)
            for table in (message_chunks, content_parts, tool_calls):
                self._execute(
                    delete(table).where(table.c.chat_id == chat_id, table.c.message_position == position)
                )
            self._execute(
                update(messages)
                .where(messages.c.chat_id == chat_id, messages.c.position == position)
                .values(rows.messages[0])
            )
            self._insert(content_parts, rows.parts)
            self._insert(tool_calls, rows.tool_calls)
        return message

    def _explain_missing_message(self, chat_id: str, message_uid: str) -> NoReturn:
        self._require(chat_id)
        with self._read():
            completed = self._session.execute(
                select(messages.c.completed).where(
                    messages.c.chat_id == chat_id, messages.c.uid == message_uid
                )
            ).scalar()
        reason = (
            "the message is already complete" if completed else f"no message with uid {quoted(message_uid)}"
        )
        raise InvalidDocument(reason, chat_id=chat_id, field="message_uid")

    def add_feedback(self, chat_id: str, feedback: Feedback | Mapping[str, Any]) -> Feedback:
        """Attach feedback to a chat (or to one of its messages, by ``message_uid``).

        Returns:
            The feedback as stored (id and timestamp filled in).
        """
        parsed = parse_feedback(feedback, chat_id=chat_id, limits=self._limits)
        now = _now()
        known_message = (
            true()
            if parsed.message_uid is None
            else select(messages.c.position)
            .where(messages.c.chat_id == chat_id, messages.c.uid == parsed.message_uid)
            .exists()
        )
        with self._write():
            self._bump(chat_id, None, now)
            next_position, clashes, message_found = self._session.execute(
                select(
                    func.coalesce(func.max(_feedback_table.c.position) + 1, 0),
                    func.count(case((_feedback_table.c.id == parsed.id, 1))),
                    known_message,
                ).where(_feedback_table.c.chat_id == chat_id)
            ).one()
            if not message_found:
                raise InvalidDocument(
                    f"feedback on unknown message uid {parsed.message_uid!r}",
                    chat_id=chat_id,
                    field="message_uid",
                )
            if clashes:
                raise InvalidDocument(f"duplicate feedback id {parsed.id!r}", chat_id=chat_id, field="id")
            self._insert(_feedback_table, [feedback_to_row(chat_id, next_position, parsed, now=now)])
        return parsed if parsed.created_at else parsed.model_copy(update={"created_at": now})

    def delete_feedback(self, chat_id: str, feedback_id: str, *, expected_version: int | None = None) -> int:
        """Remove one feedback item (a vote taken back). To change one, delete it
        and add the new one, with the same ``id`` if you like, in one transaction.

        Returns:
            The chat's new version.

        Raises:
            InvalidDocument: the chat has no feedback with this id.
        """
        require_text(feedback_id, "feedback_id")
        now = _now()
        with self._write():
            before = self._bump(chat_id, expected_version, now)
            removed = self._execute(
                delete(feedback).where(feedback.c.chat_id == chat_id, feedback.c.id == feedback_id)
            )
            if not removed.rowcount:
                raise InvalidDocument(
                    f"no feedback with id {quoted(feedback_id)}", chat_id=chat_id, field="feedback_id"
                )
        return int(before["version"]) + 1

    def update(
        self, chat_id: str, *, expected_version: int | None = None, **changes: Unpack[ChatChanges]
    ) -> int:
        """Change a chat's own fields (not its messages); ``None`` clears a field.

        Returns:
            The chat's new version.
        """
        unknown = set(changes) - set(ChatChanges.__annotations__)
        if unknown:
            raise InvalidDocument(f"cannot update {sorted(unknown)}", chat_id=chat_id)
        if self._user_id is not None and "user_id" in changes and changes["user_id"] != self._user_id:
            raise InvalidDocument(f"user_id must be {self._user_id!r}", chat_id=chat_id, field="user_id")
        checked = ChatDocument.parse({"chat_id": chat_id, **changes}, limits=self._limits)
        values: dict[str, Any] = {name: getattr(checked, name) for name in changes if name != "tags"}
        now = _now()
        with self._write():
            current = self._lock(chat_id, expected_version)
            ordered = current["ordered_json"] or {}
            extra = ordered.get("extra", current["extra"])
            if extra and any(name in extra for name in changes):
                values["extra"] = {k: v for k, v in extra.items() if k not in changes} or None
            if ordered or any(name in values for name, _ in CHAT_ORDERED):
                kept = {name: value for name, value in ordered.items() if name not in values}
                values["ordered_json"] = {**kept, **(chat_ordered_json(values) or {})} or None
            if "tags" in changes:
                self._execute(delete(chat_tags).where(chat_tags.c.chat_id == chat_id))
                self._insert(
                    chat_tags,
                    [{"chat_id": chat_id, "tag": tag, "position": i} for i, tag in enumerate(checked.tags)],
                )
            return self._touch(chat_id, current, now, **values)

    def truncate(self, chat_id: str, keep: int, *, expected_version: int | None = None) -> int:
        """Remove the chat's messages after its first ``keep``, with their
        parts, tool calls, streamed chunks and the feedback given on them (to
        regenerate an answer, or to edit a message and go on from there);
        earlier rows are not touched. Nothing to remove changes nothing.

        Returns:
            The chat's version (a new one if messages were removed).
        """
        if type(keep) is not int or keep < 0:
            raise InvalidDocument(
                f"keep must be a whole number >= 0, not {keep!r}", chat_id=chat_id, field="keep"
            )
        now = _now()
        with self._write():
            current = self._lock(chat_id, expected_version)
            if keep >= current["message_count"]:
                return int(current["version"])
            removed = select(messages.c.uid).where(messages.c.chat_id == chat_id, messages.c.position >= keep)
            self._execute(
                delete(feedback).where(feedback.c.chat_id == chat_id, feedback.c.message_uid.in_(removed))
            )
            for table in (message_chunks, content_parts, tool_calls):
                self._execute(
                    delete(table).where(table.c.chat_id == chat_id, table.c.message_position >= keep)
                )
            self._execute(delete(messages).where(messages.c.chat_id == chat_id, messages.c.position >= keep))
            return self._touch(chat_id, current, now, message_count=keep)

    def delete(self, chat_id: str) -> None:
        """Delete a chat with all its messages, parts, tool calls, tags and feedback.

        Raises:
            ChatNotFound: no such chat.
        """
        with self._write():
            self._lock(chat_id)
            self._delete_children(chats.c.chat_id == chat_id)
            self._execute(delete(chats).where(chats.c.chat_id == chat_id))

    def delete_user(self, user_id: str) -> int:
        """Delete every chat of a user; returns how many there were."""
        user_id = require_user_id(user_id)
        if self._user_id is not None and user_id != self._user_id:
            return 0
        with self._write():
            owned = chats.c.user_id == user_id
            self._delete_children(owned)
            result = self._execute(delete(chats).where(owned))
        return int(result.rowcount)

    def delete_older_than(
        self, cutoff: datetime, *, user_id: str | None = None, limit: int | None = None
    ) -> int:
        """Delete the chats last updated before ``cutoff`` (``updated_at <
        cutoff``; a naive datetime is UTC), or only those of ``user_id``, with
        all their rows; at most ``limit`` of them, least recently updated
        first. Returns how many were deleted.

        The chats are locked before their rows go, so a chat that a concurrent
        ``append`` brings past the cutoff is kept whole.
        """
        cutoff = require_moment(cutoff, "cutoff")
        if limit is not None:
            require_at_least_one(limit, "limit")
        user_id = scoped_user(self._user_id, user_id)
        if user_id is NOBODY:
            return 0
        old = select(chats.c.chat_id).where(chats.c.updated_at < cutoff)
        if user_id is not None:
            old = old.where(chats.c.user_id == user_id)
        old = old.order_by(chats.c.updated_at, chats.c.chat_id).with_for_update()
        deleted = 0
        with self._write():
            # A chunk at a time, so that neither the ids held here nor the
            # statements grow with the number of chats.
            while limit is None or deleted < limit:
                chunk = _DELETE_CHUNK if limit is None else min(_DELETE_CHUNK, limit - deleted)
                chat_ids = list(self._session.execute(old.limit(chunk)).scalars())
                if not chat_ids:
                    break
                chosen = chats.c.chat_id.in_(chat_ids)
                self._delete_children(chosen)
                self._execute(delete(chats).where(chosen))
                deleted += len(chat_ids)
        return deleted

    # -- reads -----------------------------------------------------------------

    def get(self, chat_id: str) -> ChatDocument:
        """The stored chat, with ``version`` set.

        Raises:
            ChatNotFound: no such chat.
        """
        found = self.get_many([chat_id])
        if not found:
            raise ChatNotFound(chat_id)
        return found[0]

    def get_many(self, chat_ids: Iterable[str]) -> list[ChatDocument]:
        """Stored chats in the order asked, unknown ids skipped; a fixed number
        of queries however many messages there are (PostgreSQL: one; SQLite:
        one per table for every 10,000 chats)."""
        wanted = requested_ids(chat_ids)
        return self._load(wanted) if wanted else []

    def list_chats(
        self,
        *,
        user_id: str | None = None,
        model: str | None = None,
        tag: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        limit: int = 50,
        cursor: str | None = None,
    ) -> ChatPage:
        """Chat summaries, most recently updated first, a page at a time.

        ``since`` / ``until`` bound ``updated_at`` (inclusive / exclusive).
        Pass the returned ``next_cursor`` as ``cursor`` for the next page.
        """
        require_at_least_one(limit, "limit")
        query = select(
            chats.c.chat_id,
            chats.c.user_id,
            chats.c.title,
            chats.c.model,
            chats.c.created_at,
            chats.c.updated_at,
            chats.c.message_count,
            chats.c.version,
        )
        query = self._chats_where(query, user_id=user_id, model=model, tag=tag, since=since, until=until)
        if cursor is not None:
            after_time, after_id = _decode_cursor(cursor)
            query = query.where(
                tuple_(chats.c.updated_at, chats.c.chat_id)
                < tuple_(literal(after_time, UTCDateTime()), literal(after_id, ArchiveText()))
            )
        query = query.order_by(chats.c.updated_at.desc(), chats.c.chat_id.desc()).limit(limit + 1)
        with self._read():
            rows = self._session.execute(query).mappings().all()
        items = [ChatSummary.model_validate(dict(row)) for row in rows[:limit]]
        next_cursor = None
        if len(rows) > limit:
            last = items[-1]
            next_cursor = _encode_cursor(last.updated_at, last.chat_id)
        return ChatPage(items=items, next_cursor=next_cursor)

    def count_chats(
        self,
        *,
        user_id: str | None = None,
        model: str | None = None,
        tag: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        """How many chats pass the filters of :meth:`list_chats`."""
        query = self._chats_where(
            select(func.count()).select_from(chats),
            user_id=user_id,
            model=model,
            tag=tag,
            since=since,
            until=until,
        )
        with self._read():
            return int(self._session.execute(query).scalar_one())

    def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        role: str | None = None,
        model: str | None = None,
        since: datetime | None = None,
        limit: int = 20,
    ) -> list[SearchHit]:
        """Messages whose text matches ``query``, best first, one hit per message.

        ``query`` takes web-search syntax: words (all must match), "quoted
        phrases", ``-word`` to exclude, ``or`` between alternatives. Input is
        never SQL; a query with nothing searchable in it finds nothing, and
        one of more than 64 words is refused (its snippets would take seconds).
        ``model`` matches the chat's or the message's model; ``since`` bounds
        the message's ``created_at``.

        Raises:
            InvalidDocument: an argument of the wrong kind, or a query of
                more than 64 words.
            SchemaNotReady: the archive's search index is off
                (:meth:`ChatArchive.set_search_index`).
        """
        require_at_least_one(limit, "limit")
        since = optional_moment(since, "since")
        check_query(require_text(query, "query"))
        role, model = optional_text(role, "role"), optional_text(model, "model")
        user_id = scoped_user(self._user_id, user_id)
        if user_id is NOBODY:
            return []
        with self._read():
            return search_messages(
                self._session,
                query.replace("\x00", " "),
                user_id=user_id,
                role=role,
                model=model,
                since=since,
                limit=limit,
            )

    def export(
        self,
        *,
        user_id: str | None = None,
        model: str | None = None,
        tag: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        batch_size: int = 100,
    ) -> Iterator[ChatDocument]:
        """Every stored chat, or those that pass the filters of
        :meth:`list_chats` (``since`` / ``until`` bound ``updated_at``), in
        ``chat_id`` order, loaded ``batch_size`` chats at a time."""
        require_at_least_one(batch_size, "batch_size")
        after: str | None = None
        while True:
            batch = self.chat_ids(
                user_id=user_id, model=model, tag=tag, since=since, until=until, after=after, limit=batch_size
            )
            if not batch:
                return
            yield from self.get_many(batch)
            after = batch[-1]

    def chat_ids(
        self,
        *,
        user_id: str | None = None,
        model: str | None = None,
        tag: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        after: str | None = None,
        limit: int = 100,
    ) -> list[str]:
        """Chat ids in ascending order, ``limit`` at a time after ``after``,
        of the chats that pass the filters of :meth:`list_chats`."""
        require_at_least_one(limit, "limit")
        query = self._chats_where(
            select(chats.c.chat_id).order_by(chats.c.chat_id).limit(limit),
            user_id=user_id,
            model=model,
            tag=tag,
            since=since,
            until=until,
        )
        if after is not None:
            query = query.where(chats.c.chat_id > after)
        with self._read():
            return list(self._session.execute(query).scalars())

    # -- internals -------------------------------------------------------------

    def _end(self) -> None:
        """Refuse every later call: the transaction this repository was made
        for (:meth:`ChatArchive.transaction`) is over, and its session would
        begin another that nothing commits."""
        self._ended = True

    @contextmanager
    def _write(self, *, savepoint: bool | None = None) -> Iterator[None]:
        use_savepoint = self._savepoints if savepoint is None else savepoint
        with self._turn, database_errors(), self._session.begin_nested() if use_savepoint else nullcontext():
            self._start()
            yield

    @contextmanager
    def _read(self) -> Iterator[None]:
        with self._turn, database_errors():
            self._start()
            yield

    def _start(self) -> None:
        """Where every read and write starts: refuse a repository whose
        transaction has ended, and tell PostgreSQL's row-level security whose
        rows this transaction may see."""
        if self._ended:
            raise ChatArchiveError(ENDED)
        if self._user_id is not None and self._session.get_bind().dialect.name == "postgresql":
            self._session.execute(select(func.set_config("chatarchive.user_id", self._user_id, True)))

    def _execute(self, statement: Any) -> Any:
        return self._session.execute(statement)

    def _insert(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._session.execute(insert(table), rows)

    def _insert_messages(self, rows: MessageRows) -> None:
        self._insert(messages, rows.messages)
        self._insert(content_parts, rows.parts)
        self._insert(tool_calls, rows.tool_calls)

    def _delete_children(self, chat_filter: Any) -> None:
        selected = select(chats.c.chat_id).where(chat_filter).scalar_subquery()
        for table in _CHILD_TABLES:
            self._execute(delete(table).where(table.c.chat_id.in_(selected)))

    def _create(self, row: Mapping[str, Any]) -> bool:
        """Insert a new chat row; False if another writer's transaction created
        the same chat since this one found none (PostgreSQL, where writers to
        different chats do not wait for each other; SQLite's writers queue for
        one lock, so the chat cannot appear meanwhile)."""
        if self._session.get_bind().dialect.name != "postgresql":
            self._insert(chats, [row])
            return True
        created = (
            postgresql.insert(chats).values(row).on_conflict_do_nothing(index_elements=[chats.c.chat_id])
        )
        return self._session.execute(created.returning(chats.c.chat_id)).first() is not None

    def _lock_row(self, chat_id: str) -> Mapping[Any, Any] | None:
        """Lock the chat's row for this transaction and return its bookkeeping."""
        require_text(chat_id, "chat_id")
        return (
            self._session.execute(
                select(chats.c.version, chats.c.message_count, chats.c.user_id)
                .add_columns(chats.c.extra, chats.c.ordered_json)
                .where(chats.c.chat_id == chat_id)
                .with_for_update()
            )
            .mappings()
            .first()
        )

    def _bump(
        self, chat_id: str, expected_version: int | None, now: datetime, added: int = 0
    ) -> Mapping[str, Any]:
        """Lock the chat's row for a write and give it its new version (and
        ``added`` more messages), in one statement where the database has
        ``UPDATE ... RETURNING`` (PostgreSQL; SQLite 3.35 and newer); an error
        raised later in the write rolls it back with the rest. Returns the
        row's ``version`` and ``message_count`` as they were before."""
        if not self._session.get_bind().dialect.update_returning:
            current = self._lock(chat_id, expected_version)
            self._touch(chat_id, current, now, message_count=current["message_count"] + added)
            return current
        require_version(expected_version)
        require_text(chat_id, "chat_id")
        bumped = (
            self._session.execute(
                update(chats)
                .where(chats.c.chat_id == chat_id)
                .values(
                    version=chats.c.version + 1, updated_at=now, message_count=chats.c.message_count + added
                )
                .returning(chats.c.version, chats.c.message_count, chats.c.user_id)
            )
            .mappings()
            .first()
        )
        before = None
        if bumped is not None:
            before = {
                "version": bumped["version"] - 1,
                "message_count": bumped["message_count"] - added,
                "user_id": bumped["user_id"],
            }
        return self._checked(chat_id, before, expected_version)

    def _lock(self, chat_id: str, expected_version: int | None = None) -> Mapping[str, Any]:
        require_version(expected_version)
        return self._checked(chat_id, self._lock_row(chat_id), expected_version)

    def _checked(
        self, chat_id: str, row: Mapping[str, Any] | None, expected_version: int | None
    ) -> Mapping[str, Any]:
        """The locked chat's row, if this repository may see it and it is at the expected version."""
        if row is None or not self._visible(row):
            raise ChatNotFound(chat_id)
        if expected_version is not None and row["version"] != expected_version:
            raise ConflictError(f"chat {chat_id!r} is at version {row['version']}, not {expected_version}")
        return row

    def _rows_table_by_table(self, chat_ids: Sequence[str]) -> tuple[_Rows, _Children]:
        """SQLite: one query per table for every ``_IDS_PER_STATEMENT`` chats (a
        transaction keeps one snapshot)."""
        found: list[Mapping[Any, Any]] = []
        for ids in _in_pieces(chat_ids):
            query = self._scoped(select(chats).where(chats.c.chat_id.in_(ids)))
            found += self._session.execute(query).mappings()
        children: _Children = {row["chat_id"]: {table: [] for table in _DOCUMENT_ORDER} for row in found}
        for ids in _in_pieces(list(children)):
            for table, order in _DOCUMENT_ORDER.items():
                query = select(table).where(table.c.chat_id.in_(ids)).order_by(*order)
                for child in self._session.execute(query).mappings():
                    children[child["chat_id"]][table].append(child)
        return found, children

    def _require(self, chat_id: str) -> None:
        require_text(chat_id, "chat_id")
        with self._read():
            query = self._scoped(select(chats.c.chat_id).where(chats.c.chat_id == chat_id))
            found = self._session.execute(query).first()
        if found is None:
            raise ChatNotFound(chat_id)

    def _visible(self, row: Mapping[Any, Any]) -> bool:
        return self._user_id is None or row["user_id"] == self._user_id

    def _chats_where(
        self,
        query: Any,
        *,
        user_id: str | None,
        model: str | None,
        tag: str | None,
        since: datetime | None,
        until: datetime | None,
    ) -> Any:
        """``query`` over ``chats``, kept to the chats this repository may see
        (a user's repository asked about another user: none) of ``user_id``,
        with the chosen ``model``, tagged ``tag``, whose ``updated_at`` is from
        ``since`` on and before ``until`` (each filter that is not None). The
        filters of :meth:`list_chats`, :meth:`count_chats` and :meth:`chat_ids`."""
        since, until = optional_moment(since, "since"), optional_moment(until, "until")
        model, tag = optional_text(model, "model"), optional_text(tag, "tag")
        user_id = scoped_user(self._user_id, user_id)
        if user_id is NOBODY:
            return query.where(false())
        if user_id is not None:
            query = query.where(chats.c.user_id == user_id)
        if model is not None:
            query = query.where(chats.c.model == model)
        if tag is not None:
            query = query.where(
                select(chat_tags.c.chat_id)
                .where(chat_tags.c.chat_id == chats.c.chat_id, chat_tags.c.tag == tag)
                .exists()
            )
        if since is not None:
            query = query.where(chats.c.updated_at >= since)
        if until is not None:
            query = query.where(chats.c.updated_at < until)
        return query

    def _scoped(self, query: Any) -> Any:
        """Only this repository's user's chats (when it has one)."""
        return query if self._user_id is None else query.where(chats.c.user_id == self._user_id)

    def _owned(self, doc: ChatDocument) -> ChatDocument:
        """The document, given to this repository's user (when it has one)."""
        if self._user_id is None or doc.user_id == self._user_id:
            return doc
        if doc.user_id is None:
            return doc.model_copy(update={"user_id": self._user_id})
        raise InvalidDocument(f"user_id must be {self._user_id!r}", chat_id=doc.chat_id, field="user_id")

    def _touch(self, chat_id: str, current: Mapping[str, Any], now: datetime, **values: Any) -> int:
        version = int(current["version"]) + 1
        self._execute(
            update(chats).where(chats.c.chat_id == chat_id).values(version=version, updated_at=now, **values)
        )
        return version

    def _load(self, chat_ids: Sequence[str]) -> list[ChatDocument]:
        """Whole documents for ``chat_ids`` (see :meth:`get_many`)."""
        with self._read():
            if self._session.get_bind().dialect.name == "postgresql":
                return load_documents(self._session.connection(), chat_ids, user_id=self._user_id)
            found, children = self._rows_table_by_table(chat_ids)
        return _documents(chat_ids, found, children)


def _in_pieces(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    """``ids`` in pieces small enough for one ``IN (...)`` (PostgreSQL takes at
    most 65,535 parameters, SQLite 32,766 or 250,000 as built)."""
    for start in range(0, len(ids), _IDS_PER_STATEMENT):
        yield ids[start : start + _IDS_PER_STATEMENT]


def _documents(chat_ids: Sequence[str], found: _Rows, children: _Children) -> list[ChatDocument]:
    """The documents of the chats found, in the order of ``chat_ids``."""
    documents = {}
    for chat in found:
        rows = children[chat["chat_id"]]
        documents[chat["chat_id"]] = document_from_rows(
            chat,
            [row["tag"] for row in rows[chat_tags]],
            rows[messages],
            rows[content_parts],
            rows[tool_calls],
            rows[feedback],
            rows[message_chunks],
        )
    return [documents[chat_id] for chat_id in chat_ids if chat_id in documents]


def load_documents(
    connection: Connection, chat_ids: Sequence[str], *, user_id: str | None
) -> list[ChatDocument]:
    """PostgreSQL: whole documents for ``chat_ids`` (only ``user_id``'s, if
    given) in one statement, so one round trip and one snapshot even under READ
    COMMITTED, or outside a transaction."""
    one = len(chat_ids) == 1
    params: dict[str, Any] = (
        {"chat_id": escape_text(chat_ids[0])} if one else {"ids": [escape_text(id_) for id_ in chat_ids]}
    )
    if user_id is not None:
        params["user_id"] = escape_text(user_id)
    found = []
    children: _Children = {}
    for (document,) in _fetch_all(
        connection, _pg_documents_query(scoped=user_id is not None, one=one), params
    ):
        chat_values, *child_values = json.loads(unescape_json_text(document))
        chat = _json_row(chats, chat_values)
        found.append(chat)
        children[chat["chat_id"]] = {
            table: [_json_row(table, values) for values in rows or ()]
            for table, rows in zip(_DOCUMENT_ORDER, child_values, strict=True)
        }
    return _documents(chat_ids, found, children)


#: The columns the PostgreSQL read returns of each table, in order (chat_id
#: only for chats).
_JSON_COLUMNS = {
    table: tuple(column.name for column in table.columns if table is chats or column.name != "chat_id")
    for table in (chats, *_DOCUMENT_ORDER)
}


def _json_values(table: Table, alias: str) -> str:
    """The table's columns for ``json_build_array``, printed the same whatever
    the session's settings: timestamps in UTC (JSON would show them in the
    session's TimeZone), doubles as their 8 bytes in hex (JSON would round them
    to 15 digits under ``extra_float_digits = 0``)."""
    values = []
    for name in _JSON_COLUMNS[table]:
        value = f"{alias}.{name}"
        kind = table.c[name].type
        if isinstance(kind, UTCDateTime):
            value = f"({value} AT TIME ZONE 'UTC')"
        elif isinstance(kind, Double):
            value = f"encode(float8send({value}), 'hex')"
        values.append(value)
    return ", ".join(values)


#: The double columns of each table, read back from hex (see _json_values).
_HEX_DOUBLES = {
    table: tuple(name for name in _JSON_COLUMNS[table] if isinstance(table.c[name].type, Double))
    for table in _JSON_COLUMNS
}


def _json_row(table: Table, values: Sequence[Any]) -> dict[str, Any]:
    row = dict(zip(_JSON_COLUMNS[table], values, strict=True))
    for name in _HEX_DOUBLES[table]:
        if row[name] is not None:
            (row[name],) = struct.unpack(">d", bytes.fromhex(row[name]))
    return row


@cache
def _pg_documents_query(*, scoped: bool, one: bool) -> TextClause:
    """Each chat as one JSON array: its row, then its child rows of each table
    as arrays of arrays. One text value per chat is the cheapest result for the
    driver to hand over and for Python to decode.

    ``one``: for a single chat id, compared with ``=``. Once psycopg has
    prepared the statement, PostgreSQL then reuses one generic plan instead of
    planning each call, as it keeps doing for ``= ANY(array)`` (whose generic
    plan it estimates for several ids): ~0.1 ms of each ``get``.
    """
    children = []
    for table, order in _DOCUMENT_ORDER.items():
        ordering = ", ".join(f"x.{column.name}" for column in order[1:])
        children.append(
            f"(SELECT json_agg(json_build_array({_json_values(table, 'x')}) ORDER BY {ordering}) "
            f"FROM {table.name} x WHERE x.chat_id = c.chat_id)"
        )
    wanted = "c.chat_id = :chat_id" if one else "c.chat_id = ANY(:ids)"
    owner = " AND c.user_id = :user_id" if scoped else ""
    return text(
        f"SELECT json_build_array(json_build_array({_json_values(chats, 'c')}), {', '.join(children)})::text "
        f"FROM chats c WHERE {wanted}{owner}"
    )


_PSYCOPG = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]


@cache
def _psycopg_sql(statement: TextClause) -> str:
    """The statement as psycopg takes it (``%(name)s`` parameters)."""
    return str(statement.compile(dialect=_PSYCOPG))


def _fetch_all(
    connection: Connection, statement: TextClause, params: Mapping[str, Any]
) -> Sequence[Sequence[Any]]:
    """The rows of ``statement`` (with untyped parameters), run on the psycopg
    connection under ``connection``.

    For a read of one small row, SQLAlchemy's per-statement work costs about
    as much as the database's, so it goes to the driver directly: psycopg's
    connection, or under the asyncio API its asynchronous one, awaited with
    SQLAlchemy's ``AdaptedConnection.run_async`` (other drivers go through
    SQLAlchemy); errors are handled as SQLAlchemy handles its own
    (:func:`driver_call`).
    """
    pooled = connection.connection
    driver, adapted = pooled.driver_connection, pooled.dbapi_connection
    sql = _psycopg_sql(statement)
    if isinstance(driver, psycopg.Connection):
        with driver_call(connection, sql, params), driver.cursor() as cursor:
            return cursor.execute(sql, params).fetchall()
    if isinstance(driver, psycopg.AsyncConnection) and isinstance(adapted, AdaptedConnection):

        async def fetch(driver: psycopg.AsyncConnection[Any]) -> list[tuple[Any, ...]]:
            async with driver.cursor() as cursor:
                await cursor.execute(sql, params)
                return await cursor.fetchall()

        with driver_call(connection, sql, params):
            return adapted.run_async(fetch)
    return connection.execute(statement, params).all()


def requested_ids(chat_ids: Iterable[str]) -> list[str]:
    """The chat ids asked for, each once, in order. A string is refused: it
    is one id, not a list of them (its characters would be looked up)."""
    require_many(chat_ids, "chat_ids", "chat ids")
    return list(dict.fromkeys(require_text(chat_id, "chat_id") for chat_id in chat_ids))


def _encode_cursor(updated_at: datetime, chat_id: str) -> str:
    raw = json.dumps([updated_at.isoformat(), chat_id], ensure_ascii=False).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_cursor(cursor: str) -> tuple[datetime, str]:
    """The ``(updated_at, chat_id)`` a cursor of :func:`_encode_cursor` holds;
    anything else (a cursor edited by hand) is refused, not half-read."""
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        stamp, chat_id = json.loads(raw)
        if not isinstance(stamp, str) or not isinstance(chat_id, str):
            raise TypeError
        moment = datetime.fromisoformat(stamp)
        if not fits_utc(moment):
            raise ValueError
        return moment, chat_id
    except (binascii.Error, ValueError, TypeError, UnicodeDecodeError):
        raise InvalidDocument("not a cursor returned by list_chats", field="cursor") from None
