"""ChatArchive: the facade for scripts and applications."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import closing, contextmanager
from contextvars import ContextVar
from datetime import datetime
from functools import partial
from queue import Queue
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

from sqlalchemy import URL, Connection, Engine, inspect, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ._document import ChatDocument, ChatPage, Feedback, Limits, Message, check_limits
from ._engine import create_engine, for_reading, for_writing, in_memory, missing_archive, shown_url
from ._exceptions import (
    ChatArchiveError,
    ChatNotFound,
    DatabaseError,
    SchemaNotReady,
    database_errors,
    quoted,
    require_at_least_one,
    require_flag,
    require_unscoped,
    require_user_id,
)
from ._ingest import (
    WRITER_QUEUE,
    PreparedBatch,
    check_save_many,
    check_writers,
    prepared_batches,
    split_by_chat,
)
from ._repository import ChatChanges, ChatRepository, OnError, load_documents, requested_ids
from ._schema import SCHEMA_REVISION, VERSION_TABLE
from ._search import SearchHit, rebuild_search_index, search_index_of, set_search_index_on

__all__ = ["ChatArchive"]

_T = TypeVar("_T")


_TABLES = ("chats", "chat_tags", "messages", "content_parts", "tool_calls", "feedback", "message_chunks")


def row_level_security_of(connection: Connection) -> bool:
    query = text(
        "SELECT bool_and(relrowsecurity AND relforcerowsecurity) FROM pg_class "
        "WHERE relname = ANY(:tables) AND relnamespace = to_regnamespace(current_schema())"
    )
    return bool(connection.execute(query, {"tables": list(_TABLES)}).scalar())


def set_row_level_security_on(connection: Connection, enabled: bool) -> None:
    action, force = ("ENABLE", "FORCE") if require_flag(enabled, "enabled") else ("DISABLE", "NO FORCE")
    for table in _TABLES:
        connection.execute(text(f"ALTER TABLE {table} {action} ROW LEVEL SECURITY"))
        connection.execute(text(f"ALTER TABLE {table} {force} ROW LEVEL SECURITY"))


def _connection_lost(error: DatabaseError) -> bool:
    cause = error.__cause__
    return isinstance(cause, DBAPIError) and cause.connection_invalidated


def archive_repr(archive: object, url: URL, user_id: str | None) -> str:
    """``ChatArchive('postgresql+psycopg://u:***@host/db', user_id='bob')``:
    the database (its password hidden) and the user a scoped archive serves."""
    scope = "" if user_id is None else f", user_id={quoted(user_id)}"
    return f"{type(archive).__name__}({shown_url(url)!r}{scope})"


def require_open(archive: object, closed: bool) -> None:
    """Refuse a call on an archive after its ``close()`` (or its owner's, for
    an archive of ``for_user``): its engine would open new connections that
    nothing closes (an async archive's the garbage collector warns of)."""
    if closed:
        raise ChatArchiveError(f"{archive!r} is closed; make a new archive to go on")


#: The archives (their engines) whose writing transaction is open in this
#: thread or task, each with the thread it is open in: a task starts with its
#: creator's, and a thread that starts with a copy of its creator's (as Python
#: may do) is another caller.
_OPEN_WRITES: ContextVar[frozenset[tuple[int, int]]] = ContextVar(
    "chatarchive_open_writes", default=frozenset()
)


@contextmanager
def one_write_at_a_time(engine: object) -> Iterator[None]:
    """Mark the block as this thread's (or task's) writing transaction on the
    archive of ``engine``, refusing a second one inside it: an archive call made
    inside that archive's own ``transaction()`` block opens another transaction,
    which waits for the first to end, and the first waits for the call (on
    SQLite 30 s, for the write lock; on PostgreSQL for ever, for a row lock)."""
    key = (id(engine), threading.get_ident())
    if key in _OPEN_WRITES.get():
        raise ChatArchiveError(
            "this thread (or task) is inside a transaction() of this archive: write through the "
            "repository its block gave (repo.save(...)), not the archive, whose call would open a second "
            "transaction that waits for the first"
        )
    _OPEN_WRITES.set(_OPEN_WRITES.get() | {key})
    try:
        yield
    finally:
        _OPEN_WRITES.set(_OPEN_WRITES.get() - {key})


def require_file(url: URL) -> None:
    """Refuse, before connecting, a SQLite archive whose file does not exist
    (see :func:`missing_archive`)."""
    if (missing := missing_archive(url)) is not None:
        raise SchemaNotReady(f"{missing}: run 'chatarchive db upgrade' to create it")


def stored_revision(connection: Connection) -> str | None:
    """The revision in chatarchive's version table, read without Alembic (``None``: not migrated)."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    revision = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    return None if revision is None else str(revision)


def require_revision(url: URL, current: str | None) -> None:
    """Refuse a database that is not at the revision this version's models describe."""
    if current != SCHEMA_REVISION:
        raise SchemaNotReady(
            f"database {shown_url(url)} is at revision {current or 'none'}, "
            f"chatarchive needs {SCHEMA_REVISION}: "
            + (
                "an in-memory database starts empty: call the archive's upgrade() first"
                if in_memory(url)
                else "run 'chatarchive db upgrade'"
            )
        )


class ChatArchive:
    """A chat archive in one database; each method runs in its own transaction.

    Args:
        url: the database URL. Default: ``$CHATARCHIVE_DATABASE_URL``, else
            ``sqlite:///chatarchive.db`` in the working directory.
            ``postgresql://`` URLs use psycopg 3.
        engine: use this engine instead of creating one from ``url``.
        limits: the largest input accepted (:class:`Limits`; defaults if not given).
        statement_timeout: seconds after which PostgreSQL cancels a statement
            (the call then raises :class:`DatabaseError` and changes nothing).
        **engine_options: passed to :func:`sqlalchemy.create_engine`.

    Use :meth:`transaction` to make several calls in one transaction.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        engine: Engine | None = None,
        limits: Limits | None = None,
        statement_timeout: float | None = None,
        **engine_options: Any,
    ) -> None:
        self._owns_engine = engine is None
        self._owner: ChatArchive | None = None  # for_user: the archive whose engine it shares
        self._closed = False
        if engine is None:
            engine = create_engine(url, statement_timeout=statement_timeout, **engine_options)
            # An archive dropped without close() (or still open at exit) closes
            # its connections all the same, rather than leaving them to the
            # garbage collector (Python 3.13's sqlite3 warns of each one).
            weakref.finalize(self, engine.dispose)
        self._engine = engine
        self._limits = check_limits(limits)
        self._user_id: str | None = None
        self._schema_ready = False
        self._postgres = self._engine.dialect.name == "postgresql"
        self._reader = for_reading(self._engine)
        self._writer = for_writing(self._engine)

    def for_user(self, user_id: str) -> ChatArchive:
        """The same archive seen by one user: every call only sees that user's
        chats (another user's chat is reported as not found), and saved chats
        belong to that user. On PostgreSQL, each transaction also sets
        ``chatarchive.user_id`` for row-level security (``chatarchive db rls on``)."""
        self._require_open()
        scoped = ChatArchive(engine=self._engine, limits=self._limits)
        scoped._owner = self._owner or self  # keeps the engine's owner, and its connections, alive
        scoped._user_id = require_user_id(user_id)
        scoped._schema_ready = self._schema_ready
        return scoped

    @property
    def engine(self) -> Engine:
        return self._engine

    @property
    def url(self) -> URL:
        return self._engine.url

    def close(self) -> None:
        """Close the archive's pooled connections (when it created the engine).
        The archive, and the archives of its ``for_user``, then refuse every
        call with :class:`ChatArchiveError`; closing again does nothing."""
        self._closed = True
        if self._owns_engine:
            self._engine.dispose()

    def _require_open(self) -> None:
        require_open(self, self._closed or (self._owner is not None and self._owner._closed))

    def __repr__(self) -> str:
        return archive_repr(self, self.url, self._user_id)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    # -- transactions ----------------------------------------------------------

    @contextmanager
    def transaction(self) -> Iterator[ChatRepository]:
        """A repository whose calls share one transaction, committed when the
        block ends and rolled back if it raises."""
        with self._session(savepoints=True) as repository:
            try:
                yield repository
            finally:
                # Threads still calling it are refused; the call running ends before the transaction.
                repository._end()
                with repository._turn:
                    pass

    @contextmanager
    def _session(self, *, savepoints: bool) -> Iterator[ChatRepository]:
        with one_write_at_a_time(self._engine):
            self._require_schema()
            with database_errors(), Session(self._writer) as session, session.begin():
                yield self._repository(session, savepoints=savepoints)

    def _repository(self, session: Session, *, savepoints: bool) -> ChatRepository:
        return ChatRepository(session, savepoints=savepoints, limits=self._limits, user_id=self._user_id)

    def _call(self, method: Callable[[ChatRepository], _T]) -> _T:
        with self._session(savepoints=False) as repository:
            return method(repository)

    def _read(self, method: Callable[[ChatRepository], _T]) -> _T:
        """A read in a session: without a transaction on PostgreSQL (a read of
        one statement needs none), except for a user's archive, whose
        transaction tells row-level security who reads. On SQLite (no
        row-level security) a read begins deferred, a user's too: it waits
        for no writer."""
        engine = self._writer if self._user_id is not None and self._postgres else self._reader

        def in_session() -> _T:
            with Session(engine) as session, session.begin():
                return method(self._repository(session, savepoints=False))

        return self._retried(in_session)

    def _read_on_connection(self, method: Callable[[Connection], _T]) -> _T:
        """A read of one statement on a pooled connection, without a session."""

        def on_connection() -> _T:
            with self._reader.connect() as connection:
                return method(connection)

        return self._retried(on_connection)

    def _retried(self, read: Callable[[], _T]) -> _T:
        """``read()``, retried once if the connection was lost (a restarted server)."""
        self._require_schema()
        for attempt in (1, 2):
            try:
                with database_errors():
                    return read()
            except DatabaseError as exc:
                if attempt == 2 or not _connection_lost(exc):
                    raise
        raise AssertionError("unreachable")

    def _require_schema(self) -> None:
        self._require_open()
        if self._schema_ready:
            return
        require_file(self.url)
        with database_errors(), self._reader.connect() as connection:
            require_revision(self.url, stored_revision(connection))
        self._schema_ready = True

    # -- the repository's calls, one transaction each --------------------------

    def save(self, doc: ChatDocument | Mapping[str, Any], *, expected_version: int | None = None) -> int:
        """Insert or replace a chat; see :meth:`ChatRepository.save`."""
        return self._call(lambda repo: repo.save(doc, expected_version=expected_version))

    def save_many(
        self,
        docs: Iterable[ChatDocument | Mapping[str, Any]],
        *,
        batch_size: int = 250,
        bulk: bool = False,
        on_error: OnError | None = None,
        writers: int = 1,
    ) -> int:
        """Save many chats fast; see :meth:`ChatRepository.save_many`.

        Each batch of ``batch_size`` documents is committed in its own
        transaction, so memory and lock time stay bounded and a retried import
        simply replaces what was saved. With ``bulk=True`` the whole load is one
        transaction holding exclusive locks on the archive's tables. For an
        all-or-nothing import, call ``save_many`` on :meth:`transaction`'s repository.

        ``writers``: on PostgreSQL, write with that many connections at once,
        each chat always through the same one (so the later copy of a chat
        still wins); the database then indexes text on as many cores. Not with
        ``bulk``; on SQLite, which has one writer at a time, it changes nothing.
        ``on_error`` is then called from the writers' threads, one call at a time.
        """
        check_save_many(docs, batch_size, bulk=bulk, on_error=on_error)
        check_writers(writers, bulk=bulk)
        if bulk:
            return self._call(
                lambda repo: repo.save_many(docs, batch_size=batch_size, bulk=True, on_error=on_error)
            )
        self._require_schema()
        if writers > 1 and self._postgres:
            return self._save_in_parallel(docs, batch_size, writers, on_error)
        batches = prepared_batches(docs, batch_size, stop_at_error=on_error is None, limits=self._limits)
        # Closed on the way out, so that its thread stops even while an error's traceback lives on.
        with closing(batches):
            saved = 0
            for batch in batches:
                with self._session(savepoints=False) as repo:
                    saved += repo._save_prepared(batch, on_error)
            return saved

    def _save_in_parallel(
        self,
        docs: Iterable[ChatDocument | Mapping[str, Any]],
        batch_size: int,
        writers: int,
        on_error: OnError | None,
    ) -> int:
        """Each batch split by chat among ``writers`` threads, each writing its
        share in its own transactions. An invalid document (without
        ``on_error``) stops the reading; the writers finish what they were
        given, as one writer would have. A failed write stops every writer
        before its next batch, and the reading at once. The first error is raised."""
        lock = threading.Lock()
        report: OnError | None = None
        if on_error is not None:

            def report(index: int, error: ChatArchiveError) -> None:
                with lock:
                    on_error(index, error)

        queues: list[Queue[PreparedBatch | None]] = [Queue(maxsize=WRITER_QUEUE) for _ in range(writers)]
        saved = [0] * writers
        failures: list[BaseException] = []
        failed = threading.Event()

        def write(number: int) -> None:
            while (batch := queues[number].get()) is not None:
                if failures:
                    continue  # another writer failed: stop writing, keep draining
                try:
                    with self._session(savepoints=False) as repo:
                        saved[number] += repo._save_prepared(batch, report)
                except BaseException as exc:  # raised by the caller's thread below
                    with lock:
                        failures.append(exc)
                    failed.set()

        threads = [
            threading.Thread(target=write, args=(number,), name=f"chatarchive-writer-{number}", daemon=True)
            for number in range(writers)
        ]
        for thread in threads:
            thread.start()
        batches = prepared_batches(
            docs, batch_size, stop_at_error=on_error is None, limits=self._limits, abandoned=failed
        )
        try:
            with closing(batches):
                for batch in batches:
                    if failures:
                        break
                    batch.report_errors(report)
                    for number, part in enumerate(split_by_chat(batch, writers)):
                        if part.documents:
                            queues[number].put(part)
        finally:
            for queue in queues:
                queue.put(None)
            for thread in threads:
                thread.join()
        if failures:
            raise failures[0]
        return sum(saved)

    def get(self, chat_id: str) -> ChatDocument:
        """The stored chat; see :meth:`ChatRepository.get`."""
        found = self.get_many([chat_id])
        if not found:
            raise ChatNotFound(chat_id)
        return found[0]

    def get_many(self, chat_ids: Iterable[str]) -> list[ChatDocument]:
        """Stored chats in the order asked, unknown ids skipped."""
        wanted = requested_ids(chat_ids)
        if self._postgres and self._user_id is None and wanted:
            # One statement: no session needed (its bookkeeping cost ~0.1 ms a get).
            return self._read_on_connection(partial(load_documents, chat_ids=wanted, user_id=None))
        return self._read(lambda repo: repo.get_many(wanted))

    def append(
        self,
        chat_id: str,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        expected_version: int | None = None,
    ) -> list[Message]:
        """Add messages at the end of a chat; see :meth:`ChatRepository.append`."""
        return self._call(lambda repo: repo.append(chat_id, messages, expected_version=expected_version))

    def record_completion(self, chat_id: str, completion: Any, *, choice: int = 0) -> Message:
        """Append the assistant message of an OpenAI chat completion (or of its
        streamed chunks); see :meth:`ChatRepository.record_completion`."""
        return self._call(lambda repo: repo.record_completion(chat_id, completion, choice=choice))

    def begin_message(
        self, chat_id: str, role: str = "assistant", uid: str | None = None, **fields: Any
    ) -> Message:
        """Start a streamed message; see :meth:`ChatRepository.begin_message`."""
        return self._call(lambda repo: repo.begin_message(chat_id, role, uid, **fields))

    def append_chunk(
        self, chat_id: str, message_uid: str, chunk: str, *, tool_call_index: int | None = None
    ) -> None:
        """Store one chunk of a streamed message (one insert, committed at once)."""
        self._call(
            lambda repo: repo.append_chunk(chat_id, message_uid, chunk, tool_call_index=tool_call_index)
        )

    def complete_message(self, chat_id: str, message_uid: str, **fields: Any) -> Message:
        """Fold a streamed message's chunks in and mark it complete."""
        return self._call(lambda repo: repo.complete_message(chat_id, message_uid, **fields))

    def add_feedback(self, chat_id: str, feedback: Feedback | Mapping[str, Any]) -> Feedback:
        """Attach feedback to a chat or one of its messages."""
        return self._call(lambda repo: repo.add_feedback(chat_id, feedback))

    def delete_feedback(self, chat_id: str, feedback_id: str, *, expected_version: int | None = None) -> int:
        """Remove one feedback item; see :meth:`ChatRepository.delete_feedback`."""
        return self._call(
            lambda repo: repo.delete_feedback(chat_id, feedback_id, expected_version=expected_version)
        )

    def update(
        self, chat_id: str, *, expected_version: int | None = None, **changes: Unpack[ChatChanges]
    ) -> int:
        """Change a chat's own fields; see :meth:`ChatRepository.update`."""
        return self._call(lambda repo: repo.update(chat_id, expected_version=expected_version, **changes))

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
        """A page of chat summaries, newest first; see :meth:`ChatRepository.list_chats`."""
        return self._read(
            lambda repo: repo.list_chats(
                user_id=user_id, model=model, tag=tag, since=since, until=until, limit=limit, cursor=cursor
            )
        )

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
        return self._read(
            lambda repo: repo.count_chats(user_id=user_id, model=model, tag=tag, since=since, until=until)
        )

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
        """Full-text search over message text; see :meth:`ChatRepository.search`."""
        return self._read(
            partial(
                ChatRepository.search,
                query=query,
                user_id=user_id,
                role=role,
                model=model,
                since=since,
                limit=limit,
            )
        )

    def truncate(self, chat_id: str, keep: int, *, expected_version: int | None = None) -> int:
        """Remove the chat's messages after its first ``keep``; see :meth:`ChatRepository.truncate`."""
        return self._call(lambda repo: repo.truncate(chat_id, keep, expected_version=expected_version))

    def delete(self, chat_id: str) -> None:
        """Delete a chat and everything in it."""
        self._call(lambda repo: repo.delete(chat_id))

    def delete_user(self, user_id: str) -> int:
        """Delete every chat of a user; returns how many there were."""
        return self._call(lambda repo: repo.delete_user(user_id))

    def delete_older_than(
        self, cutoff: datetime, *, user_id: str | None = None, batch_size: int = 500
    ) -> int:
        """Delete every chat last updated before ``cutoff`` (``updated_at <
        cutoff``; a naive datetime is UTC), or only those of ``user_id``: a
        retention policy. Works through the chats least recently updated first,
        ``batch_size`` chats per transaction, so a large purge holds its locks
        briefly; if it is interrupted, the batches done stay deleted and calling
        it again finishes the job. Returns how many chats were deleted."""
        require_at_least_one(batch_size, "batch_size")
        deleted = 0
        while done := self._call(
            lambda repo: repo.delete_older_than(cutoff, user_id=user_id, limit=batch_size)
        ):
            deleted += done
        return deleted

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
        """Every chat, or those that pass the filters of :meth:`list_chats`
        (``since`` / ``until`` bound ``updated_at``), in ``chat_id`` order, read
        ``batch_size`` chats per transaction so no transaction stays open
        between batches. ``until=cutoff`` exports what
        :meth:`delete_older_than` would delete."""
        require_at_least_one(batch_size, "batch_size")
        after: str | None = None
        while True:
            chat_ids = self._read(
                partial(
                    ChatRepository.chat_ids,
                    user_id=user_id,
                    model=model,
                    tag=tag,
                    since=since,
                    until=until,
                    after=after,
                    limit=batch_size,
                )
            )
            if not chat_ids:
                return
            yield from self._read(partial(ChatRepository.get_many, chat_ids=chat_ids))
            after = chat_ids[-1]

    # -- schema ----------------------------------------------------------------

    def upgrade(self, revision: str = "head", *, lock_timeout: float | None = None) -> None:
        """Migrate the database to ``revision`` (default: this version's newest).

        ``lock_timeout`` (seconds; PostgreSQL): fail with :class:`ConflictError`,
        changing nothing, when a lock the migration needs is not free within
        that time (a long query on a table it alters), rather than wait and
        hold up every query that comes after it meanwhile.
        """
        from ._migrations import upgrade

        require_unscoped(self._user_id, "upgrade")
        self._require_open()
        upgrade(self._engine, revision, lock_timeout=lock_timeout)
        self._schema_ready = False

    def downgrade(self, revision: str, *, lock_timeout: float | None = None) -> None:
        """Migrate the database down to ``revision`` (``"base"`` drops every
        table); ``lock_timeout`` as for :meth:`upgrade`."""
        from ._migrations import downgrade

        require_unscoped(self._user_id, "downgrade")
        self._require_open()
        require_file(self.url)
        downgrade(self._engine, revision, lock_timeout=lock_timeout)
        self._schema_ready = False

    def current_revision(self) -> str | None:
        """The migration revision the database is at (``None`` if never migrated)."""
        from ._migrations import current_revision

        self._require_open()
        return current_revision(self._engine)

    def row_level_security(self) -> bool:
        """Whether PostgreSQL row-level security is on for the archive's tables."""
        self._require_open()
        if not self._postgres:
            return False
        with database_errors(), self._engine.connect() as connection:
            return row_level_security_of(connection)

    def set_row_level_security(self, enabled: bool) -> None:
        """Turn PostgreSQL row-level security on or off for the archive's tables.

        With it on, a transaction that sets ``chatarchive.user_id`` (as
        :meth:`for_user` does) sees only that user's rows, whatever SQL it runs;
        one that does not set it sees every row. Needs the tables' owner.

        Raises:
            SchemaNotReady: on SQLite, which has no row-level security.
        """
        require_unscoped(self._user_id, "set_row_level_security")
        if not self._postgres:
            raise SchemaNotReady("row-level security needs PostgreSQL")
        self._require_schema()
        with database_errors(), self._engine.begin() as connection:
            set_row_level_security_on(connection, enabled)

    def search_index(self) -> bool:
        """Whether the archive has its full-text search index (see :meth:`set_search_index`)."""
        self._require_schema()
        with database_errors(), self._engine.connect() as connection:
            return search_index_of(connection)

    def set_search_index(self, enabled: bool) -> None:
        """Create the full-text search index from the stored text, or drop it.

        Indexing each message's text is most of what a write costs on
        PostgreSQL (about 4x the rest, see the README): an archive that is not
        searched, or one being loaded before it is searched, writes faster
        without it. While it is off, :meth:`search` raises
        :class:`SchemaNotReady`; turning it on indexes every stored message, in
        one transaction during which writes wait (reads go on). Dropping it
        waits for the queries running on the messages and their parts, and
        holds back new ones for that short moment. The setting is the
        database's: every connection sees it until it is changed.
        """
        require_unscoped(self._user_id, "set_search_index")
        self._require_schema()
        with database_errors(), self._writer.begin() as connection:
            set_search_index_on(connection, enabled)

    def rebuild_search_index(self) -> None:
        """Rebuild the full-text search index from the stored text, in one
        transaction that blocks writes (and PostgreSQL's searches) while it
        runs: after restoring a SQLite archive from a dump (its search tables
        point at rows by rowid), or after changing PostgreSQL's text search
        dictionaries."""
        require_unscoped(self._user_id, "rebuild_search_index")
        self._require_schema()
        with database_errors(), self._writer.begin() as connection:
            rebuild_search_index(connection)

    def check(self) -> list[str]:
        """Problems that keep the database from matching this version (empty: none)."""
        from ._migrations import check

        self._require_open()
        if (missing := missing_archive(self.url)) is not None:
            return [missing]
        return check(self._engine)
