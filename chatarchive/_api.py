"""The four faces of the archive: ChatArchive, ChatRepository and their asyncio twins.

Their operations are declared once, in ``chatarchive._operations``; each face
here adds only how it runs a step. An archive owns an engine and runs each
operation in a transaction of its own (``ChatArchive.transaction`` for
several in one); a repository works inside the caller's session or connection
and never commits.
"""

from __future__ import annotations

import asyncio
import threading
import weakref
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager, nullcontext
from contextvars import ContextVar
from types import TracebackType
from typing import Any, Generic, Self, TypeVar, cast

from sqlalchemy import URL, Connection, Engine
from sqlalchemy.exc import DBAPIError
from sqlalchemy.ext.asyncio import AsyncConnection, AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from ._arguments import require_flag, require_user_id
from ._backends import Backend, backend_of, database_errors
from ._document import Limits, check_limits
from ._engine import create_async_engine, create_engine, shown_url
from ._exceptions import ArchiveClosed, DatabaseError, TransactionEnded, TransactionInProgress, quoted
from ._migrations import require_archive_file, require_revision, stored_revision
from ._operations import ArchiveOperations, AsyncFace, ChatOperations, SyncFace
from ._repository.appends import Guesses
from ._repository.plans import Connected, FaceFacts, Kind, Step
from ._repository.unit import Unit
from .encryption import UserKeys, check_keys
from .redaction import Redactor, check_redactor

__all__ = ["AsyncChatArchive", "AsyncChatRepository", "ChatArchive", "ChatRepository"]

_T = TypeVar("_T")

_AnyEngine = TypeVar("_AnyEngine", Engine, AsyncEngine)


# -- what both archives share ----------------------------------------------------------------


class _Archive(Generic[_AnyEngine]):
    """What is not I/O in an archive: its engine, user, limits and state."""

    def _set_up(
        self,
        engine: _AnyEngine,
        limits: Limits | None,
        redactor: Redactor | None,
        keys: UserKeys | None,
        *,
        owns_engine: bool,
    ) -> None:
        self._engine: _AnyEngine = engine
        self._backend: Backend = backend_of(engine)
        self._limits = check_limits(limits)
        self._redactor = check_redactor(redactor)
        self._keys = check_keys(keys)
        self._owns_engine = owns_engine
        self._owner: _Archive[_AnyEngine] | None = None  # for_user: the archive whose engine it shares
        self._user_id: str | None = None
        self._closed = False
        self._schema_ready = False
        self._writer: _AnyEngine = cast(_AnyEngine, self._backend.for_writing(engine))
        self._readers: dict[bool, _AnyEngine] = {}
        self._guesses = Guesses()

    def _scoped(self, scoped: _Archive[_AnyEngine], user_id: str) -> None:
        """Make ``scoped`` (new, on this archive's engine) this archive as seen by ``user_id``."""
        self._require_open()
        scoped._owner = self._owner or self  # keeps the engine's owner, and its connections, alive
        scoped._user_id = require_user_id(user_id)
        scoped._schema_ready = self._schema_ready

    @property
    def url(self) -> URL:
        """The archive's database."""
        return self._engine.url

    @property
    def user_id(self) -> str | None:
        """The user whose chats this archive sees (``for_user``); ``None``: every user's."""
        return self._user_id

    def _reader(self) -> _AnyEngine:
        """The engine for reads, made once: each engine made with other
        execution options is a new object that SQLAlchemy sets up again."""
        scoped = self._user_id is not None
        if scoped not in self._readers:
            self._readers[scoped] = cast(_AnyEngine, self._backend.for_reading(self._engine, scoped=scoped))
        return self._readers[scoped]

    def _read_transaction(self, connection: Any) -> Any:
        """The transaction a read runs in, where the backend needs one (a
        SQLite snapshot, a user's setting for row-level security)."""
        if self._backend.reads_in_transaction(scoped=self._user_id is not None):
            return connection.begin()
        return nullcontext() if isinstance(connection, Connection) else _nothing()

    def _facts(self) -> FaceFacts:
        return FaceFacts(
            backend=self._backend,
            user_id=self._user_id,
            limits=self._limits,
            commits_each_step=True,
            redactor=self._redactor,
            url=self.url,
            guesses=self._guesses,
        )

    def _unit(self, executor: Session | Connection, *, savepoints: bool) -> Unit:
        return Unit(
            executor,
            backend=self._backend,
            user_id=self._user_id,
            limits=self._limits,
            savepoints=savepoints,
            redactor=self._redactor,
            keys=self._keys,
        )

    def _require_open(self) -> None:
        """Refuse a call after ``close()`` (or its owner's, for an archive of
        ``for_user``): its engine would open new connections that nothing
        closes (an async archive's the garbage collector warns of)."""
        if self._closed or (self._owner is not None and self._owner._closed):
            raise ArchiveClosed(f"{self!r} is closed; make a new archive to go on")

    def _schema_checked(self, current: str | None) -> None:
        require_revision(self.url, current)
        self._schema_ready = True

    def __repr__(self) -> str:
        """``ChatArchive('postgresql+psycopg://u:***@host/db', user_id='bob')``:
        the database (its password hidden) and the user a scoped archive serves."""
        scope = "" if self._user_id is None else f", user_id={quoted(self._user_id)}"
        return f"{type(self).__name__}({shown_url(self.url)!r}{scope})"


#: The archives (their engines) whose writing transaction is open in this
#: thread or task, each with the thread it is open in: a task starts with its
#: creator's, and a thread that starts with a copy of its creator's (as Python
#: may do) is another caller.
_OPEN_WRITES: ContextVar[frozenset[tuple[int, int]]] = ContextVar(
    "chatarchive_open_writes", default=frozenset()
)


@contextmanager
def _one_write_at_a_time(engine: object) -> Iterator[None]:
    """Mark the block as this thread's (or task's) writing transaction on the
    archive of ``engine``, refusing a second one inside it: an archive call made
    inside that archive's own ``transaction()`` block opens another transaction,
    which waits for the first to end, and the first waits for the call (on
    SQLite 30 s, for the write lock; on PostgreSQL for ever, for a row lock)."""
    key = (id(engine), threading.get_ident())
    if key in _OPEN_WRITES.get():
        raise TransactionInProgress(
            "this thread (or task) is inside a transaction() of this archive: write through the "
            "repository its block gave (repo.save(...)), not the archive, whose call would open a second "
            "transaction that waits for the first"
        )
    _OPEN_WRITES.set(_OPEN_WRITES.get() | {key})
    try:
        yield
    finally:
        _OPEN_WRITES.set(_OPEN_WRITES.get() - {key})


def _connection_lost(error: DatabaseError) -> bool:
    cause = error.__cause__
    return isinstance(cause, DBAPIError) and cause.connection_invalidated


# -- the archives ------------------------------------------------------------------------------


class ChatArchive(ChatOperations, ArchiveOperations, _Archive[Engine], SyncFace):
    """A chat archive in one database; each method runs in its own transaction.

    Args:
        url: the database URL. Default: ``$CHATARCHIVE_DATABASE_URL``, else
            ``sqlite:///chatarchive.db`` in the working directory.
            ``postgresql://`` URLs use psycopg 3.
        engine: use this engine instead of creating one from ``url``. On
            PostgreSQL, one that nothing else uses: psycopg forgets the
            statements prepared on a connection whenever a transaction on it
            rolls back, so an application's sessions sharing the pool make
            the archive plan its statements again.
        limits: the largest input accepted (``Limits``; defaults if not given).
        redactor: replaces what must not be stored (e-mail addresses, card
            numbers, API keys...) in every write, before any row is written
            (see ``chatarchive.redaction``); ``None``: text is stored as given.
        keys: seal the chats of users with a key of each user's, wrapped by
            the application's master key (see ``chatarchive.encryption``);
            needed to read and write sealed chats.
        statement_timeout: seconds after which PostgreSQL cancels a statement
            (the call then raises ``DatabaseError`` and changes nothing).
        **engine_options: passed to ``sqlalchemy.create_engine``.

    Use ``transaction`` to make several calls in one transaction.

    Example:
        >>> from chatarchive import ChatArchive
        >>> with ChatArchive("sqlite://") as archive:
        ...     archive.upgrade()
        ...     archive.save({"chat_id": "hi", "messages": [{"role": "user", "content": "Hi!"}]})
        ...     archive.get("hi").messages[0].content
        1
        'Hi!'
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        engine: Engine | None = None,
        limits: Limits | None = None,
        statement_timeout: float | None = None,
        redactor: Redactor | None = None,
        keys: UserKeys | None = None,
        **engine_options: Any,
    ) -> None:
        owns_engine = engine is None
        if engine is None:
            engine = create_engine(url, statement_timeout=statement_timeout, **engine_options)
            # An archive dropped without close() (or still open at exit) closes
            # its connections all the same, rather than leaving them to the
            # garbage collector (Python 3.13's sqlite3 warns of each one).
            weakref.finalize(self, engine.dispose)
        self._set_up(engine, limits, redactor, keys, owns_engine=owns_engine)

    @property
    def engine(self) -> Engine:
        """The SQLAlchemy engine the archive uses."""
        return self._engine

    def for_user(self, user_id: str) -> ChatArchive:
        """The same archive seen by one user: every call only sees that user's
        chats (another user's chat is reported as not found), and saved chats
        belong to that user. On PostgreSQL, each transaction also sets
        ``chatarchive.user_id`` for row-level security (``chatarchive db rls on``)."""
        scoped = ChatArchive(
            engine=self._engine, limits=self._limits, redactor=self._redactor, keys=self._keys
        )
        self._scoped(scoped, user_id)
        return scoped

    def close(self) -> None:
        """Close the archive's pooled connections (when it created the engine).
        The archive, and the archives of its ``for_user``, then refuse every
        call with ``ArchiveClosed``; closing again does nothing."""
        self._closed = True
        if self._owns_engine:
            self._engine.dispose()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    @contextmanager
    def transaction(self) -> Iterator[ChatRepository]:
        """A repository whose calls share one transaction, committed when the
        block ends and rolled back if it raises."""
        self._require_open()
        with _one_write_at_a_time(self._engine):
            self._require_schema()
            with database_errors(), self._writer.begin() as connection:
                repository = ChatRepository(
                    connection,
                    limits=self._limits,
                    user_id=self._user_id,
                    redactor=self._redactor,
                    keys=self._keys,
                )
                try:
                    yield repository
                finally:
                    # Threads still calling it are refused; the call running ends before the transaction.
                    repository._end()

    # -- how it runs a step ----------------------------------------------------------------

    @contextmanager
    def _operation(self) -> Iterator[None]:
        self._require_open()
        yield

    def _transaction_face(self) -> Any:
        return self.transaction()

    def _step(self, step: Step[_T]) -> _T:
        self._require_schema()
        if step.kind is Kind.READ:
            return self._retried(lambda: self._read(step))
        if step.kind is Kind.STATEMENT:
            with _one_write_at_a_time(self._engine), database_errors(), self._writer.connect() as connection:
                connection.execution_options(isolation_level="AUTOCOMMIT")
                return step.call(self._unit(connection, savepoints=False))
        with _one_write_at_a_time(self._engine), database_errors(), self._writer.begin() as connection:
            return step.call(self._unit(connection, savepoints=False))

    def _read(self, step: Step[_T]) -> _T:
        """A read on a pooled connection: without a transaction on PostgreSQL
        (a read of one statement needs none), except for a user's archive,
        whose transaction tells row-level security who reads. On SQLite a
        read begins deferred, a user's too: it waits for no writer."""
        with database_errors(), self._reader().connect() as connection, self._read_transaction(connection):
            return step.call(self._unit(connection, savepoints=False))

    def _retried(self, read: Callable[[], _T]) -> _T:
        """``read()``, retried once if the connection was lost (a restarted server)."""
        try:
            return read()
        except DatabaseError as exc:
            if not _connection_lost(exc):
                raise
        return read()

    def _connected(self, instruction: Connected[_T]) -> _T:
        if instruction.schema:
            self._require_schema()
        engine = self._writer if instruction.transaction else self._engine
        try:
            with database_errors(), engine.connect() as connection:
                result = instruction.call(connection)
                if instruction.transaction:
                    connection.commit()
                return result
        finally:
            if instruction.changes_schema:
                self._schema_ready = False

    def _require_schema(self) -> None:
        if self._schema_ready:
            return
        require_archive_file(self.url)
        with database_errors(), self._engine.connect() as connection:
            self._schema_checked(stored_revision(connection))


class AsyncChatArchive(ChatOperations, ArchiveOperations, _Archive[AsyncEngine], AsyncFace):
    """``ChatArchive`` for asyncio applications: the same calls, awaited,
    each in its own transaction; ``transaction`` for several in one.

    Args:
        url: as for ``ChatArchive`` (SQLite URLs use aiosqlite).
        engine: an ``AsyncEngine`` to use instead.
        limits: the largest input accepted.
        redactor: replaces what must not be stored, in every write (see ``ChatArchive``).
        keys: seal users' chats with their keys (see ``ChatArchive``).
        statement_timeout: seconds after which PostgreSQL cancels a statement.
        **engine_options: passed to ``create_async_engine``.

    An ``AsyncChatArchive`` must be closed (``async with``, or ``await
    archive.close()`` before its event loop ends): its connections can only be
    closed from the loop.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        engine: AsyncEngine | None = None,
        limits: Limits | None = None,
        statement_timeout: float | None = None,
        redactor: Redactor | None = None,
        keys: UserKeys | None = None,
        **engine_options: Any,
    ) -> None:
        owns_engine = engine is None
        if engine is None:
            engine = create_async_engine(url, statement_timeout=statement_timeout, **engine_options)
        self._set_up(engine, limits, redactor, keys, owns_engine=owns_engine)

    @property
    def engine(self) -> AsyncEngine:
        """The SQLAlchemy ``AsyncEngine`` the archive uses."""
        return self._engine

    def for_user(self, user_id: str) -> AsyncChatArchive:
        """The same archive seen by one user; see ``ChatArchive.for_user``."""
        scoped = AsyncChatArchive(
            engine=self._engine, limits=self._limits, redactor=self._redactor, keys=self._keys
        )
        self._scoped(scoped, user_id)
        return scoped

    async def close(self) -> None:
        """Close the archive's pooled connections; see ``ChatArchive.close``."""
        self._closed = True
        if self._owns_engine:
            await self._engine.dispose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncChatRepository]:
        """A repository whose calls share one transaction, committed when the
        block ends and rolled back if it raises."""
        self._require_open()
        with _one_write_at_a_time(self._engine):
            await self._require_schema()
            with database_errors():
                async with self._writer.begin() as connection:
                    repository = AsyncChatRepository(
                        connection,
                        limits=self._limits,
                        user_id=self._user_id,
                        redactor=self._redactor,
                        keys=self._keys,
                    )
                    try:
                        yield repository
                    finally:
                        # Calls still waiting for their turn (gathered with one that
                        # failed) are refused; the one running ends before the transaction.
                        repository._end()
                        async with repository._turn:
                            pass

    # -- how it runs a step ----------------------------------------------------------------

    @asynccontextmanager
    async def _operation(self) -> AsyncIterator[None]:
        self._require_open()
        yield

    def _transaction_face(self) -> Any:
        return self.transaction()

    async def _step(self, step: Step[_T]) -> _T:
        await self._require_schema()
        reading = step.kind is Kind.READ
        engine = self._reader() if reading else self._writer
        with nullcontext() if reading else _one_write_at_a_time(self._engine), database_errors():
            async with engine.connect() as connection:
                if step.kind is Kind.STATEMENT:
                    await connection.execution_options(isolation_level="AUTOCOMMIT")
                async with nullcontext() if step.kind is Kind.STATEMENT else connection.begin():
                    result: _T = await connection.run_sync(
                        lambda sync: step.call(self._unit(sync, savepoints=False))
                    )
                return result

    async def _connected(self, instruction: Connected[_T]) -> _T:
        if instruction.schema:
            await self._require_schema()
        elif instruction.changes_schema:  # (connecting to a SQLite file that is not there creates it)
            await _first_connection(self._engine)
        engine = self._writer if instruction.transaction else self._engine
        try:
            with database_errors():
                async with engine.connect() as connection:
                    result = await connection.run_sync(instruction.call)
                    if instruction.transaction:
                        await connection.commit()
                    return result
        finally:
            if instruction.changes_schema:
                self._schema_ready = False

    async def _require_schema(self) -> None:
        if self._schema_ready:
            return
        # Looking at the file system blocks: not in the event loop (once an archive's schema is known, never).
        await asyncio.to_thread(require_archive_file, self.url)
        await _first_connection(self._engine)
        with database_errors():
            async with self._engine.connect() as connection:
                current = await connection.run_sync(stored_revision)
        self._schema_checked(current)


async def _first_connection(engine: AsyncEngine) -> None:
    """Make the engine's first connection, one engine at a time in the
    process, unless it has one already. SQLAlchemy sets a pool's first
    connection up under an asyncio lock, which belongs to the event loop that
    first waits on it: loops of other threads connecting at the same moment
    failed ("bound to a different event loop") or waited for ever. The
    process-wide lock is waited for in a thread, not in the event loop."""
    if engine.sync_engine in _CONNECTED_ONCE:
        return
    await asyncio.to_thread(_FIRST_CONNECTIONS.acquire)
    try:
        if engine.sync_engine not in _CONNECTED_ONCE:
            with database_errors():
                async with engine.connect():
                    pass
            _CONNECTED_ONCE.add(engine.sync_engine)
    finally:
        _FIRST_CONNECTIONS.release()


_FIRST_CONNECTIONS = threading.Lock()
_CONNECTED_ONCE: weakref.WeakSet[Engine] = weakref.WeakSet()


# -- the repositories -------------------------------------------------------------------------


SessionOrConnection = TypeVar("SessionOrConnection", Session | Connection, AsyncSession | AsyncConnection)


class _Repository(Generic[SessionOrConnection]):
    """What is not I/O in a repository: its session, options and state."""

    def __init__(
        self,
        session: SessionOrConnection,
        *,
        savepoints: bool = True,
        limits: Limits | None = None,
        user_id: str | None = None,
        redactor: Redactor | None = None,
        keys: UserKeys | None = None,
    ) -> None:
        self._session: SessionOrConnection = session
        self._savepoints = require_flag(savepoints, "savepoints")
        self._limits = check_limits(limits)
        self._redactor = check_redactor(redactor)
        self._keys = check_keys(keys)
        self._user_id = None if user_id is None else require_user_id(user_id)
        self._ended = False
        self._turn = self._one_call_at_a_time()

    def _one_call_at_a_time(self) -> Any:
        """The lock that calls made at once on the repository take turns on."""
        raise NotImplementedError

    def _end(self) -> None:
        """Refuse every later call: the transaction this repository was made
        for (an archive's ``transaction()`` block) is over, and its session
        would begin another that nothing commits."""
        self._ended = True

    def _require_going(self) -> None:
        if self._ended:
            raise TransactionEnded(
                "this repository's transaction has ended with its transaction() block; start a new one"
            )

    def _facts_of(self, backend: Backend) -> FaceFacts:
        return FaceFacts(
            backend=backend,
            user_id=self._user_id,
            limits=self._limits,
            commits_each_step=False,
            redactor=self._redactor,
        )

    def _unit_of(self, executor: Session | Connection) -> Unit:
        return Unit(
            executor,
            backend=backend_of(executor),
            user_id=self._user_id,
            limits=self._limits,
            savepoints=self._savepoints,
            redactor=self._redactor,
            keys=self._keys,
        )


class ChatRepository(ChatOperations, _Repository[Session | Connection], SyncFace):
    """Chat documents stored as rows, read and written inside the caller's
    session (or connection).

    The repository never commits: the caller owns the transaction. Each write
    runs in a savepoint, so a call that fails leaves nothing behind and the
    caller's transaction stays usable. Errors are chatarchive's own
    (``ChatArchiveError`` and subclasses).

    Args:
        session: a SQLAlchemy session (or connection) on a migrated database.
        savepoints: wrap each write in a savepoint (turn off only when the
            transaction holds exactly one call).
        limits: the largest input accepted (see ``Limits``); the defaults
            when not given.
        user_id: scope every call to this user's chats: another user's chat is
            reported as not found, saved chats belong to this user, and on
            PostgreSQL the setting ``chatarchive.user_id`` is set for
            row-level security (see ``chatarchive db rls``).
        redactor: replaces what must not be stored, in every write (see
            ``chatarchive.redaction``).
        keys: seal users' chats with their keys (see ``chatarchive.encryption``).

    Calls made at once from several threads take turns on the session.
    """

    def _one_call_at_a_time(self) -> threading.RLock:
        # Reentrant: calls made inside a call. Threads sharing a transaction's
        # repository broke its session ("... is already in progress").
        return threading.RLock()

    def _facts(self) -> FaceFacts:
        return self._facts_of(backend_of(self._session))

    @contextmanager
    def _operation(self) -> Iterator[None]:
        with self._turn:
            self._require_going()
            yield

    def _transaction_face(self) -> Any:
        return nullcontext(self)

    def _step(self, step: Step[_T]) -> _T:
        self._require_going()
        return step.call(self._unit_of(self._session))

    def _end(self) -> None:
        super()._end()
        with self._turn:  # the call running ends before the transaction
            pass


class AsyncChatRepository(ChatOperations, _Repository[AsyncSession | AsyncConnection], AsyncFace):
    """``ChatRepository`` for an ``AsyncSession`` (or ``AsyncConnection``):
    the same calls, awaited.

    Never commits; the caller owns the transaction. Calls gathered at once
    (``asyncio.gather``) take turns on the session, in the order they were made.
    """

    def _one_call_at_a_time(self) -> asyncio.Lock:
        # Calls gathered at once failed with "... is already in progress".
        return asyncio.Lock()

    def _facts(self) -> FaceFacts:
        bind = self._session.bind if isinstance(self._session, AsyncSession) else self._session
        assert bind is not None
        return self._facts_of(backend_of(bind))

    @asynccontextmanager
    async def _operation(self) -> AsyncIterator[None]:
        async with self._turn:
            self._require_going()
            yield

    def _transaction_face(self) -> Any:
        return _itself(self)

    async def _step(self, step: Step[_T]) -> _T:
        self._require_going()
        result: _T = await self._session.run_sync(lambda sync: step.call(self._unit_of(sync)))
        return result


@asynccontextmanager
async def _itself(face: AsyncChatRepository) -> AsyncIterator[AsyncChatRepository]:
    yield face


@asynccontextmanager
async def _nothing() -> AsyncIterator[None]:
    yield
