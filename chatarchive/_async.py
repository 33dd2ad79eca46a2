"""The asyncio API: AsyncChatRepository and AsyncChatArchive.

There is one implementation of every query: these classes run
:class:`ChatRepository`'s own methods inside ``AsyncSession.run_sync``, which
SQLAlchemy drives over the async driver (psycopg 3's async connection, or
aiosqlite) without blocking the event loop. The methods, arguments, return
types and errors are the synchronous API's; each is awaited.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable, Iterator, Mapping
from concurrent.futures import CancelledError, Future
from contextlib import asynccontextmanager, nullcontext
from datetime import datetime
from functools import partial
from types import TracebackType
from typing import Any, Self, TypeVar, Unpack

from sqlalchemy import URL, Connection
from sqlalchemy.ext.asyncio import AsyncEngine, AsyncSession
from sqlalchemy.orm import Session

from ._archive import (
    archive_repr,
    one_write_at_a_time,
    require_file,
    require_open,
    require_revision,
    row_level_security_of,
    set_row_level_security_on,
    stored_revision,
)
from ._document import ChatDocument, ChatPage, Feedback, Limits, Message, check_limits
from ._engine import create_async_engine, for_reading, for_writing, missing_archive
from ._exceptions import (
    ChatArchiveError,
    ChatNotFound,
    SchemaNotReady,
    database_errors,
    require_at_least_one,
    require_unscoped,
    require_user_id,
)
from ._ingest import Batches, PreparedBatch, check_save_many, check_writers, prepared_batches, split_by_chat
from ._repository import ENDED, ChatChanges, ChatRepository, OnError, load_documents, requested_ids
from ._search import SearchHit, rebuild_search_index, search_index_of, set_search_index_on

__all__ = ["AsyncChatArchive", "AsyncChatRepository"]

_T = TypeVar("_T")


Docs = Iterable[ChatDocument | Mapping[str, Any]] | AsyncIterable[ChatDocument | Mapping[str, Any]]


_Doc = ChatDocument | Mapping[str, Any]


class _AsyncInput:
    """An async iterable read by save_many's preparing thread: each item is
    awaited on the event loop that runs save_many, while the thread waits for
    it, so batches are prepared ahead of the writes as from an iterable.
    :meth:`close` cancels the item being awaited, if any (save_many stopped
    early, and the next item of an idle stream may be long to come)."""

    def __init__(self, docs: AsyncIterable[_Doc], loop: asyncio.AbstractEventLoop) -> None:
        self._iterator = aiter(docs)
        self._loop = loop
        self._lock = threading.Lock()
        self._waiting: Future[list[_Doc]] | None = None
        self._closed = False

    def __iter__(self) -> Iterator[_Doc]:
        while True:
            with self._lock:
                if self._closed:
                    return
                self._waiting = waiting = asyncio.run_coroutine_threadsafe(self._next(), self._loop)
            try:
                item = waiting.result()
            except CancelledError:
                return
            if not item:
                return
            yield item[0]

    async def _next(self) -> list[_Doc]:
        """The next item alone in a list; none at the end."""
        try:
            return [await anext(self._iterator)]
        except StopAsyncIteration:
            return []

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._waiting is not None:
                self._waiting.cancel()


def _input(docs: Docs, batch_size: int, *, bulk: bool, on_error: OnError | None) -> Iterable[_Doc]:
    """save_many's arguments checked, and an async iterable made readable from
    the preparing thread."""
    if isinstance(docs, AsyncIterable):
        check_save_many([], batch_size, bulk=bulk, on_error=on_error)
        return _AsyncInput(docs, asyncio.get_running_loop())
    check_save_many(docs, batch_size, bulk=bulk, on_error=on_error)
    return docs


@asynccontextmanager
async def _preparing(
    docs: Iterable[_Doc], batch_size: int, *, on_error: OnError | None, limits: Limits | None
) -> AsyncIterator[Callable[[], Awaitable[PreparedBatch | None]]]:
    """save_many's batches, prepared in a thread: yields the call that awaits
    the next one (None after the last) without blocking the event loop."""
    abandoned = threading.Event()
    batches = prepared_batches(
        docs, batch_size, stop_at_error=on_error is None, limits=limits, abandoned=abandoned
    )
    try:
        yield partial(_next_batch, batches, abandoned)
    finally:
        if isinstance(docs, _AsyncInput):
            docs.close()
        await asyncio.to_thread(batches.close)


class AsyncChatRepository:
    """:class:`ChatRepository` for an ``AsyncSession``: the same calls, awaited.

    Never commits; the caller owns the transaction. See :class:`ChatRepository`
    for what each call does.
    """

    def __init__(
        self,
        session: AsyncSession,
        *,
        savepoints: bool = True,
        limits: Limits | None = None,
        user_id: str | None = None,
    ) -> None:
        self._session = session
        self._options: dict[str, Any] = {"savepoints": savepoints, "limits": limits, "user_id": user_id}
        self._ended = False
        # One call at a time on the session: calls gathered at once (asyncio.gather)
        # failed with SQLAlchemy's "... is already in progress"; they now take turns.
        self._turn = asyncio.Lock()

    def _end(self) -> None:
        """Refuse every later call; see :meth:`ChatRepository._end`."""
        self._ended = True

    async def _run(self, call: Callable[[ChatRepository], _T]) -> _T:
        async with self._turn:
            if self._ended:
                raise ChatArchiveError(ENDED)
            return await self._step(call)

    async def _step(self, call: Callable[[ChatRepository], _T]) -> _T:
        """``call`` on a ChatRepository over this session; the caller holds the turn."""

        def in_sync_session(session: Session) -> _T:
            return call(ChatRepository(session, **self._options))

        return await self._session.run_sync(in_sync_session)

    async def save(
        self, doc: ChatDocument | Mapping[str, Any], *, expected_version: int | None = None
    ) -> int:
        return await self._run(lambda repo: repo.save(doc, expected_version=expected_version))

    async def save_many(
        self,
        docs: Docs,
        *,
        batch_size: int = 250,
        bulk: bool = False,
        on_error: OnError | None = None,
    ) -> int:
        """See :meth:`ChatRepository.save_many`; ``docs`` may also be an async
        iterable. Batches are prepared in a thread, each written in a call of its
        own: the event loop is never blocked waiting for the next."""
        source = _input(docs, batch_size, bulk=bulk, on_error=on_error)
        return await self._save_many(source, batch_size, bulk=bulk, on_error=on_error)

    async def _save_many(
        self, docs: Iterable[_Doc], batch_size: int, *, bulk: bool, on_error: OnError | None
    ) -> int:
        """ChatRepository.save_many in its three steps (see ``_begin_many``),
        with the repository's turn held throughout."""
        async with self._turn:
            if self._ended:
                raise ChatArchiveError(ENDED)
            opened = await self._step(lambda repo: repo._begin_many(bulk=bulk))
            saved = 0
            try:
                async with _preparing(
                    docs, batch_size, on_error=on_error, limits=self._options["limits"]
                ) as next_batch:
                    while (batch := await next_batch()) is not None:
                        saved += await self._step(
                            partial(ChatRepository._save_prepared, batch=batch, on_error=on_error)
                        )
                await self._step(lambda repo: repo._end_many(opened))
            except BaseException:
                await self._step(lambda repo: repo._abandon_many(opened))
                raise
            return saved

    async def get(self, chat_id: str) -> ChatDocument:
        return await self._run(lambda repo: repo.get(chat_id))

    async def get_many(self, chat_ids: Iterable[str]) -> list[ChatDocument]:
        return await self._run(lambda repo: repo.get_many(chat_ids))

    async def append(
        self,
        chat_id: str,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        expected_version: int | None = None,
    ) -> list[Message]:
        return await self._run(lambda repo: repo.append(chat_id, messages, expected_version=expected_version))

    async def record_completion(self, chat_id: str, completion: Any, *, choice: int = 0) -> Message:
        return await self._run(lambda repo: repo.record_completion(chat_id, completion, choice=choice))

    async def begin_message(
        self, chat_id: str, role: str = "assistant", uid: str | None = None, **fields: Any
    ) -> Message:
        return await self._run(lambda repo: repo.begin_message(chat_id, role, uid, **fields))

    async def append_chunk(
        self, chat_id: str, message_uid: str, chunk: str, *, tool_call_index: int | None = None
    ) -> None:
        await self._run(
            partial(
                ChatRepository.append_chunk,
                chat_id=chat_id,
                message_uid=message_uid,
                chunk=chunk,
                tool_call_index=tool_call_index,
            )
        )

    async def complete_message(self, chat_id: str, message_uid: str, **fields: Any) -> Message:
        return await self._run(lambda repo: repo.complete_message(chat_id, message_uid, **fields))

    async def add_feedback(self, chat_id: str, feedback: Feedback | Mapping[str, Any]) -> Feedback:
        return await self._run(lambda repo: repo.add_feedback(chat_id, feedback))

    async def delete_feedback(
        self, chat_id: str, feedback_id: str, *, expected_version: int | None = None
    ) -> int:
        return await self._run(
            lambda repo: repo.delete_feedback(chat_id, feedback_id, expected_version=expected_version)
        )

    async def update(
        self, chat_id: str, *, expected_version: int | None = None, **changes: Unpack[ChatChanges]
    ) -> int:
        return await self._run(
            lambda repo: repo.update(chat_id, expected_version=expected_version, **changes)
        )

    async def truncate(self, chat_id: str, keep: int, *, expected_version: int | None = None) -> int:
        return await self._run(lambda repo: repo.truncate(chat_id, keep, expected_version=expected_version))

    async def delete(self, chat_id: str) -> None:
        await self._run(lambda repo: repo.delete(chat_id))

    async def delete_user(self, user_id: str) -> int:
        return await self._run(lambda repo: repo.delete_user(user_id))

    async def delete_older_than(
        self, cutoff: datetime, *, user_id: str | None = None, limit: int | None = None
    ) -> int:
        return await self._run(lambda repo: repo.delete_older_than(cutoff, user_id=user_id, limit=limit))

    async def list_chats(
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
        return await self._run(
            lambda repo: repo.list_chats(
                user_id=user_id, model=model, tag=tag, since=since, until=until, limit=limit, cursor=cursor
            )
        )

    async def count_chats(
        self,
        *,
        user_id: str | None = None,
        model: str | None = None,
        tag: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        return await self._run(
            lambda repo: repo.count_chats(user_id=user_id, model=model, tag=tag, since=since, until=until)
        )

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        role: str | None = None,
        model: str | None = None,
        since: datetime | None = None,
        limit: int = 20,
    ) -> list[SearchHit]:
        return await self._run(
            lambda repo: repo.search(query, user_id=user_id, role=role, model=model, since=since, limit=limit)
        )

    async def chat_ids(
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
        return await self._run(
            lambda repo: repo.chat_ids(
                user_id=user_id, model=model, tag=tag, since=since, until=until, after=after, limit=limit
            )
        )

    async def export(
        self,
        *,
        user_id: str | None = None,
        model: str | None = None,
        tag: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        batch_size: int = 100,
    ) -> AsyncIterator[ChatDocument]:
        require_at_least_one(batch_size, "batch_size")
        after: str | None = None
        while batch := await self.chat_ids(
            user_id=user_id, model=model, tag=tag, since=since, until=until, after=after, limit=batch_size
        ):
            for document in await self.get_many(batch):
                yield document
            after = batch[-1]


class AsyncChatArchive:
    """:class:`ChatArchive` for asyncio applications: the same calls, awaited,
    each in its own transaction; :meth:`transaction` for several in one.

    Args:
        url: as for :class:`ChatArchive` (SQLite URLs use aiosqlite).
        engine: an ``AsyncEngine`` to use instead.
        limits: the largest input accepted.
        statement_timeout: seconds after which PostgreSQL cancels a statement.
        **engine_options: passed to ``create_async_engine``.
    """

    def __init__(
        self,
        url: str | URL | None = None,
        *,
        engine: AsyncEngine | None = None,
        limits: Limits | None = None,
        statement_timeout: float | None = None,
        **engine_options: Any,
    ) -> None:
        self._owns_engine = engine is None
        self._owner: AsyncChatArchive | None = None  # for_user: the archive whose engine it shares
        self._closed = False
        if engine is None:
            engine = create_async_engine(url, statement_timeout=statement_timeout, **engine_options)
        self._engine = engine
        self._postgres = engine.dialect.name == "postgresql"
        self._reader = for_reading(engine)
        self._writer = for_writing(engine)
        self._limits = check_limits(limits)
        self._user_id: str | None = None
        self._schema_ready = False

    @property
    def engine(self) -> AsyncEngine:
        return self._engine

    @property
    def url(self) -> URL:
        return self._engine.url

    def for_user(self, user_id: str) -> AsyncChatArchive:
        """The same archive seen by one user; see :meth:`ChatArchive.for_user`."""
        self._require_open()
        scoped = AsyncChatArchive(engine=self._engine, limits=self._limits)
        scoped._owner = self._owner or self
        scoped._user_id = require_user_id(user_id)
        scoped._schema_ready = self._schema_ready
        return scoped

    async def close(self) -> None:
        """Close the archive's pooled connections; see :meth:`ChatArchive.close`."""
        self._closed = True
        if self._owns_engine:
            await self._engine.dispose()

    def _require_open(self) -> None:
        require_open(self, self._closed or (self._owner is not None and self._owner._closed))

    def __repr__(self) -> str:
        return archive_repr(self, self.url, self._user_id)

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    @asynccontextmanager
    async def transaction(self) -> AsyncIterator[AsyncChatRepository]:
        """A repository whose calls share one transaction."""
        async with self._session(savepoints=True) as repository:
            try:
                yield repository
            finally:
                # Calls still waiting for their turn (gathered with one that
                # failed) are refused; the one running ends before the transaction.
                repository._end()
                async with repository._turn:
                    pass

    @asynccontextmanager
    async def _session(
        self, *, savepoints: bool, reading: bool = False
    ) -> AsyncIterator[AsyncChatRepository]:
        await self._require_schema()
        # A user's reads need a transaction too on PostgreSQL: it tells row-level
        # security who reads. SQLite has none: its reads begin deferred, waiting for no writer.
        engine = self._reader if reading and (self._user_id is None or not self._postgres) else self._writer
        with nullcontext() if reading else one_write_at_a_time(self._engine), database_errors():
            async with AsyncSession(engine) as session, session.begin():
                yield AsyncChatRepository(
                    session, savepoints=savepoints, limits=self._limits, user_id=self._user_id
                )

    async def _call(self, call: Callable[[ChatRepository], _T], *, reading: bool = False) -> _T:
        async with self._session(savepoints=False, reading=reading) as repository:
            return await repository._run(call)

    async def _read(self, call: Callable[[ChatRepository], _T]) -> _T:
        """A read; see :meth:`ChatArchive._read`."""
        return await self._call(call, reading=True)

    async def _read_on_connection(self, method: Callable[[Connection], _T]) -> _T:
        """A read of one statement on a pooled connection, without a session."""
        await self._require_schema()
        with database_errors():
            async with self._reader.connect() as connection:
                return await connection.run_sync(method)

    async def _require_schema(self) -> None:
        self._require_open()
        if self._schema_ready:
            return
        require_file(self._engine.url)
        with database_errors():
            async with self._reader.connect() as connection:
                current = await connection.run_sync(stored_revision)
        require_revision(self._engine.url, current)
        self._schema_ready = True

    async def save(
        self, doc: ChatDocument | Mapping[str, Any], *, expected_version: int | None = None
    ) -> int:
        return await self._call(lambda repo: repo.save(doc, expected_version=expected_version))

    async def save_many(
        self,
        docs: Docs,
        *,
        batch_size: int = 250,
        bulk: bool = False,
        on_error: OnError | None = None,
        writers: int = 1,
    ) -> int:
        """Each batch in its own transaction (``bulk``: all in one); see :meth:`ChatArchive.save_many`.
        With ``writers``, each batch's share of every writer is written concurrently, and the
        next batch starts when they are all done. ``docs`` may also be an async iterable (an
        async generator over a stream), ``bulk`` or not. Batches are prepared in a thread,
        ahead of the writes, and waited for without blocking the event loop."""
        source = _input(docs, batch_size, bulk=bulk, on_error=on_error)
        check_writers(writers, bulk=bulk)
        if bulk:
            async with self._session(savepoints=False) as repository:
                return await repository._save_many(source, batch_size, bulk=True, on_error=on_error)
        if not self._postgres:
            writers = 1  # one writer at a time
        saved = 0
        async with _preparing(source, batch_size, on_error=on_error, limits=self._limits) as next_batch:
            while (batch := await next_batch()) is not None:
                if writers == 1:
                    saved += await self._save_prepared(batch, on_error)
                    continue
                batch.report_errors(on_error)
                parts = [part for part in split_by_chat(batch, writers) if part.documents]
                results = await asyncio.gather(
                    *(self._save_prepared(part, on_error) for part in parts), return_exceptions=True
                )
                for result in results:
                    if isinstance(result, BaseException):
                        raise result
                    saved += result
        return saved

    async def _save_prepared(self, batch: PreparedBatch, on_error: OnError | None) -> int:
        return await self._call(partial(ChatRepository._save_prepared, batch=batch, on_error=on_error))

    async def get(self, chat_id: str) -> ChatDocument:
        found = await self.get_many([chat_id])
        if not found:
            raise ChatNotFound(chat_id)
        return found[0]

    async def get_many(self, chat_ids: Iterable[str]) -> list[ChatDocument]:
        wanted = requested_ids(chat_ids)
        if self._postgres and self._user_id is None and wanted:
            # One statement: no session needed, as in ChatArchive.get_many.
            return await self._read_on_connection(partial(load_documents, chat_ids=wanted, user_id=None))
        return await self._read(lambda repo: repo.get_many(wanted))

    async def append(
        self,
        chat_id: str,
        messages: Iterable[Message | Mapping[str, Any]],
        *,
        expected_version: int | None = None,
    ) -> list[Message]:
        return await self._call(
            lambda repo: repo.append(chat_id, messages, expected_version=expected_version)
        )

    async def record_completion(self, chat_id: str, completion: Any, *, choice: int = 0) -> Message:
        return await self._call(lambda repo: repo.record_completion(chat_id, completion, choice=choice))

    async def begin_message(
        self, chat_id: str, role: str = "assistant", uid: str | None = None, **fields: Any
    ) -> Message:
        return await self._call(lambda repo: repo.begin_message(chat_id, role, uid, **fields))

    async def append_chunk(
        self, chat_id: str, message_uid: str, chunk: str, *, tool_call_index: int | None = None
    ) -> None:
        await self._call(
            partial(
                ChatRepository.append_chunk,
                chat_id=chat_id,
                message_uid=message_uid,
                chunk=chunk,
                tool_call_index=tool_call_index,
            )
        )

    async def complete_message(self, chat_id: str, message_uid: str, **fields: Any) -> Message:
        return await self._call(lambda repo: repo.complete_message(chat_id, message_uid, **fields))

    async def add_feedback(self, chat_id: str, feedback: Feedback | Mapping[str, Any]) -> Feedback:
        return await self._call(lambda repo: repo.add_feedback(chat_id, feedback))

    async def delete_feedback(
        self, chat_id: str, feedback_id: str, *, expected_version: int | None = None
    ) -> int:
        return await self._call(
            lambda repo: repo.delete_feedback(chat_id, feedback_id, expected_version=expected_version)
        )

    async def update(
        self, chat_id: str, *, expected_version: int | None = None, **changes: Unpack[ChatChanges]
    ) -> int:
        return await self._call(
            lambda repo: repo.update(chat_id, expected_version=expected_version, **changes)
        )

    async def list_chats(
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
        return await self._read(
            lambda repo: repo.list_chats(
                user_id=user_id, model=model, tag=tag, since=since, until=until, limit=limit, cursor=cursor
            )
        )

    async def count_chats(
        self,
        *,
        user_id: str | None = None,
        model: str | None = None,
        tag: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
    ) -> int:
        return await self._read(
            lambda repo: repo.count_chats(user_id=user_id, model=model, tag=tag, since=since, until=until)
        )

    async def search(
        self,
        query: str,
        *,
        user_id: str | None = None,
        role: str | None = None,
        model: str | None = None,
        since: datetime | None = None,
        limit: int = 20,
    ) -> list[SearchHit]:
        return await self._read(
            lambda repo: repo.search(query, user_id=user_id, role=role, model=model, since=since, limit=limit)
        )

    async def truncate(self, chat_id: str, keep: int, *, expected_version: int | None = None) -> int:
        return await self._call(lambda repo: repo.truncate(chat_id, keep, expected_version=expected_version))

    async def delete(self, chat_id: str) -> None:
        await self._call(lambda repo: repo.delete(chat_id))

    async def delete_user(self, user_id: str) -> int:
        return await self._call(lambda repo: repo.delete_user(user_id))

    async def delete_older_than(
        self, cutoff: datetime, *, user_id: str | None = None, batch_size: int = 500
    ) -> int:
        """Delete every chat last updated before ``cutoff``, ``batch_size``
        chats per transaction (see :meth:`ChatArchive.delete_older_than`)."""
        require_at_least_one(batch_size, "batch_size")
        deleted = 0
        while done := await self._call(
            lambda repo: repo.delete_older_than(cutoff, user_id=user_id, limit=batch_size)
        ):
            deleted += done
        return deleted

    # -- schema ----------------------------------------------------------------

    async def upgrade(self, revision: str = "head", *, lock_timeout: float | None = None) -> None:
        """Migrate the database to ``revision`` (default: the newest); see
        :meth:`ChatArchive.upgrade`."""
        from ._migrations import migrate, require_reachable

        require_unscoped(self._user_id, "upgrade")
        self._require_open()
        require_reachable(self._engine.url, revision)
        await self._on_connection(partial(migrate, revision=revision, up=True, lock_timeout=lock_timeout))
        self._schema_ready = False

    async def downgrade(self, revision: str, *, lock_timeout: float | None = None) -> None:
        """Migrate the database down to ``revision``."""
        from ._migrations import migrate

        require_unscoped(self._user_id, "downgrade")
        self._require_open()
        require_file(self._engine.url)
        await self._on_connection(partial(migrate, revision=revision, up=False, lock_timeout=lock_timeout))
        self._schema_ready = False

    async def current_revision(self) -> str | None:
        from ._migrations import revision_of

        self._require_open()
        if missing_archive(self._engine.url) is not None:
            return None
        return await self._on_connection(revision_of)

    async def check(self) -> list[str]:
        from ._migrations import problems_of

        self._require_open()
        if (missing := missing_archive(self._engine.url)) is not None:
            return [missing]
        return await self._on_connection(problems_of)

    async def row_level_security(self) -> bool:
        if not self._postgres:
            return False
        return await self._on_connection(row_level_security_of)

    async def set_row_level_security(self, enabled: bool) -> None:
        require_unscoped(self._user_id, "set_row_level_security")
        if not self._postgres:
            raise SchemaNotReady("row-level security needs PostgreSQL")
        await self._on_connection(partial(set_row_level_security_on, enabled=enabled), transaction=True)

    async def search_index(self) -> bool:
        """Whether the archive has its full-text search index (see :meth:`set_search_index`)."""
        await self._require_schema()
        return await self._on_connection(search_index_of)

    async def set_search_index(self, enabled: bool) -> None:
        """Create the full-text search index or drop it; see :meth:`ChatArchive.set_search_index`."""
        require_unscoped(self._user_id, "set_search_index")
        await self._require_schema()
        await self._on_connection(partial(set_search_index_on, enabled=enabled), transaction=True)

    async def rebuild_search_index(self) -> None:
        """Rebuild the full-text search index from the stored text (one transaction)."""
        require_unscoped(self._user_id, "rebuild_search_index")
        await self._require_schema()
        await self._on_connection(rebuild_search_index, transaction=True)

    async def _on_connection(self, call: Callable[[Connection], _T], *, transaction: bool = False) -> _T:
        self._require_open()
        with database_errors():
            async with self._engine.connect() as connection:
                result = await connection.run_sync(call)
                if transaction:
                    await connection.commit()
                return result

    async def export(
        self,
        *,
        user_id: str | None = None,
        model: str | None = None,
        tag: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        batch_size: int = 100,
    ) -> AsyncIterator[ChatDocument]:
        """Every chat (see :meth:`ChatArchive.export`) in ``chat_id`` order, a batch per transaction."""
        require_at_least_one(batch_size, "batch_size")
        after: str | None = None
        while batch := await self._read(
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
        ):
            for document in await self._read(partial(ChatRepository.get_many, chat_ids=batch)):
                yield document
            after = batch[-1]


async def _next_batch(batches: Batches, abandoned: threading.Event) -> PreparedBatch | None:
    """The next of ``batches``, waited for off the event loop. If the caller is
    cancelled meanwhile (a timeout), the batches are abandoned and the thread
    that waits for them is let go (within ~0.05 s) before the cancellation goes
    on, so that they can be closed: a generator cannot be closed while another
    thread runs it ("generator already executing")."""
    waiting = asyncio.ensure_future(asyncio.to_thread(next, batches, None))
    try:
        return await asyncio.shield(waiting)
    except asyncio.CancelledError:
        abandoned.set()
        await asyncio.wait([waiting])
        raise
