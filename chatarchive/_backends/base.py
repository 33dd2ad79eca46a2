"""The one interface behind which each database keeps its differences.

Everything chatarchive does that is not the same SQL on PostgreSQL and SQLite
is a method of ``Backend``: setting up engines and connections, the
column types' conversions, translating driver errors, reading whole documents,
writing many rows, creating a chat if absent, search, telling the database
whose rows a transaction may see, row-level security, JSON field access for
analytics, the bulk-load DDL and the migrations' locking. The rest of the code
asks ``_backends.backend_of`` for the backend and never which
database it is on.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Protocol

from sqlalchemy import URL, ColumnElement, Connection, Engine, Table, insert, text
from sqlalchemy.engine import Dialect
from sqlalchemy.ext.asyncio import AsyncEngine
from sqlalchemy.orm import Session
from sqlalchemy.types import TypeEngine

from chatarchive._embeddings import Embedder
from chatarchive._exceptions import ChatArchiveError, NotSupported
from chatarchive._schema import SEARCH_TERMS, metadata
from chatarchive._search import SearchFilters, SearchQuery
from chatarchive._terms import StoredTerms

from .citus import Distribution

__all__ = [
    "AnyEngine",
    "Backend",
    "BulkLoad",
    "DocumentRows",
    "ExecuteManyWriter",
    "Executor",
    "RowWriter",
    "connection_of",
]

#: Where a unit of work runs its statements: the caller's ORM session, or a
#: connection the archive opened.
Executor = Session | Connection
AnyEngine = Engine | AsyncEngine


#: A message's search terms to store: its chat's id, its position, the terms
#: in order, and the chat's user (``chat_user_id``).
TermsEntry = tuple[str, int, Sequence[str], str | None]


@dataclass(frozen=True)
class DocumentRows:
    """Stored documents as rows: the chat rows found, and each chat's child
    rows by table, in document order (``_rows.documents_from_rows`` builds
    the documents)."""

    chats: Sequence[Mapping[str, Any]]
    children: Mapping[str, Mapping[Table, list[Mapping[str, Any]]]]


class RowWriter(Protocol):
    """Writes many rows of one table at once, in the executor's transaction."""

    def write(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None: ...


@dataclass
class BulkLoad:
    """What a bulk load took away from the archive's tables (foreign keys,
    secondary indexes), as the statements that put it back."""

    restore: list[str] = field(default_factory=list)


class Backend(ABC):
    """What chatarchive needs of a database, implemented once per database."""

    #: SQLAlchemy's name for the database (``engine.dialect.name``).
    name: ClassVar[str]
    #: How the documentation names it.
    title: ClassVar[str]
    #: Whether several connections can write at once (``save_many(writers=...)``).
    parallel_writers: ClassVar[bool]
    #: Whether the database has row-level security.
    has_row_level_security: ClassVar[bool]
    #: Whether an append to the end of a chat can be one statement (a
    #: data-modifying ``WITH``: see ``insert_terms``).
    appends_in_one_statement: ClassVar[bool] = False

    # -- URLs, engines and connections ---------------------------------------------

    def url(self, url: URL) -> URL:
        """``url`` with the driver chatarchive uses for this database."""
        return url

    def async_url(self, url: URL) -> URL:
        """``url`` with the asyncio driver chatarchive uses for this database."""
        return url

    def engine_options(self, url: URL, options: dict[str, Any], *, statement_timeout: float | None) -> None:
        """Add what this database needs to ``create_engine``'s options (the caller's own win)."""
        return

    def async_engine_options(
        self, url: URL, options: dict[str, Any], *, statement_timeout: float | None
    ) -> None:
        """``engine_options`` for an asyncio engine."""
        self.engine_options(url, options, statement_timeout=statement_timeout)

    @abstractmethod
    def set_up(self, engine: Engine, url: URL, options: Mapping[str, Any]) -> None:
        """Register what every new connection of ``engine`` needs."""

    def missing(self, url: URL) -> str | None:
        """What is wrong with an archive that does not exist yet and that
        connecting would create (``None``: nothing, or nothing known)."""
        return None

    def in_memory(self, url: URL) -> bool:
        """Whether ``url`` names a database that lives only in this process."""
        return False

    def shown_url(self, url: URL) -> str:
        """``url`` as messages show it, its password hidden."""
        return url.render_as_string()

    def for_reading(self, engine: AnyEngine, *, scoped: bool) -> AnyEngine:
        """The engine set up for a read (``scoped``: of one user's chats)."""
        return engine

    def reads_in_transaction(self, *, scoped: bool) -> bool:
        """Whether a read (``scoped``: of one user's chats) runs in a transaction."""
        return True

    def for_writing(self, engine: AnyEngine) -> AnyEngine:
        """The engine set up for transactions that write."""
        return engine

    def write_on(self, connection: Connection) -> None:
        """``for_writing`` for one connection taken from the pool already."""
        return

    # -- errors ---------------------------------------------------------------------

    @abstractmethod
    def translate(self, error: BaseException) -> ChatArchiveError | None:
        """chatarchive's error for a driver error of this database (``None``:
        not one of this database's, or none more specific than DatabaseError)."""

    # -- column types ---------------------------------------------------------------

    def text_processors(self) -> tuple[Callable[[Any], Any] | None, Callable[[Any], Any] | None]:
        """Conversions of text values on their way in and out (``None``: none)."""
        return None, None

    @abstractmethod
    def json_type(self, dialect: Dialect, *, binary: bool) -> TypeEngine[Any]:
        """The column type of a JSON value; ``binary``: the database's own
        binary JSON, where it has one, else JSON text as given."""

    def json_processors(self, *, binary: bool) -> tuple[Callable[[Any], Any], Callable[[Any], Any]] | None:
        """Conversions of JSON values on their way in and out, where
        SQLAlchemy's own are not used (``None``)."""
        return None

    def stored_time(self, value: datetime) -> datetime:
        """A time in UTC (aware) as this database's timestamp column takes it."""
        return value

    @abstractmethod
    def vector_type(self, dialect: Dialect) -> TypeEngine[Any]:
        """The column type of an embedding vector."""

    def vector_processors(self) -> tuple[Callable[[Any], Any] | None, Callable[[Any], Any] | None]:
        """Conversions of embedding vectors (lists of floats) on their way in and out (``None``: none)."""
        return None, None

    # -- the statements of a unit of work ------------------------------------------------

    def set_user(self, executor: Executor, user_id: str) -> None:
        """Tell the database whose chats this transaction may see (row-level security)."""
        return

    @abstractmethod
    def load_document_rows(
        self,
        executor: Executor,
        chat_ids: Sequence[str],
        *,
        user_id: str | None,
        whole: bool = False,
        last: int | None = None,
    ) -> DocumentRows:
        """The stored rows of the documents of ``chat_ids`` (only ``user_id``'s,
        if given), unknown ids left out, read in one snapshot: each chat's
        active path (only its rows are read, see ``ON_ACTIVE_PATH``), or with
        ``whole`` its whole tree; with ``last`` (one chat, not ``whole``) the
        rows of the last ``last`` messages of its active path alone. The
        repository builds the documents."""

    @abstractmethod
    def row_writer(self, executor: Executor) -> RowWriter:
        """The fastest way to insert many rows in the executor's transaction."""

    @abstractmethod
    def create_chat(self, executor: Executor, row: Mapping[str, Any]) -> bool:
        """Insert a new chat row; ``False`` if another writer's transaction
        created the same chat since this one found none."""

    def begin_bulk(self, executor: Executor, *, terms_index: bool = True) -> BulkLoad | None:
        """Make the archive's tables fast to load into, in the executor's
        transaction (``None``: this database loads no faster for it);
        ``terms_index``: keep the index of the search terms (else it is built
        at the end, over every term written meanwhile)."""
        return None

    def end_bulk(self, executor: Executor, load: BulkLoad) -> None:
        """Undo ``begin_bulk``, checking every row loaded."""
        for statement in load.restore:
            executor.execute(text(statement))

    # -- search terms ---------------------------------------------------------------------

    @abstractmethod
    def write_terms(self, executor: Executor, entries: Iterable[TermsEntry]) -> None:
        """Store the search terms of messages whose rows are written and that have none."""

    @abstractmethod
    def delete_terms(self, executor: Executor, starts: Sequence[tuple[str, int]]) -> None:
        """Delete the search terms of each chat's messages from a position on
        (``starts``: chat id and position), in one round trip."""

    def execute_one(self, executor: Executor, statement: Any, params: Mapping[str, Any]) -> Sequence[Any]:
        """The one row of ``statement`` (a Core statement built once and reused:
        a hot write's), run with ``params``."""
        return tuple(executor.execute(statement, params).one())

    # -- distribution (Citus) --------------------------------------------------------

    def distribution(self, connection: Connection) -> Distribution:
        """Where the archive's rows are (``citus``)."""
        return Distribution()

    def distribute(self, connection: Connection, shard_count: int) -> Distribution:
        """Distribute the archive's tables over Citus workers (``citus``)."""
        raise NotSupported(f"distribute needs PostgreSQL with Citus; {self.title} has no workers")

    def undistribute(self, connection: Connection) -> Distribution:
        """Bring a distributed archive's rows back to one server (``citus``)."""
        return Distribution()

    def locks_rows_in_any_statement(self, connection: Connection) -> bool:
        """Whether any statement may lock the rows it reads (``FOR UPDATE``
        over many rows, ``FOR KEY SHARE`` in an ``INSERT ... SELECT``);
        otherwise only a ``SELECT`` of rows of one shard may (Citus)."""
        return True

    def owned_tables(self) -> list[Any]:
        """The tables whose rows carry their chat's user (``chat_user_id``),
        which a change of the chat's user changes too."""
        return [table for table in metadata.sorted_tables if "chat_user_id" in table.c]

    def terms_value(self, terms: Sequence[str]) -> Any:
        """How ``insert_terms`` is given a message's terms (in order)."""
        raise NotImplementedError

    def insert_terms(self, first: ColumnElement[int], count: int, user: ColumnElement[Any]) -> Any:
        """The INSERT, to put in a ``WITH``, of ``count`` new messages' terms:
        parameters ``chat``, ``t{i}_position`` (counted from ``first``) and
        ``t{i}_terms`` (``terms_value``), for ``i`` below ``count``; the chat's
        user is ``user``."""
        raise NotImplementedError

    def clear_terms(self, connection: Connection) -> None:
        """Delete every message's search terms."""
        connection.exec_driver_sql(f"DELETE FROM {SEARCH_TERMS}")

    @abstractmethod
    def match(
        self, executor: Executor, query: SearchQuery, filters: SearchFilters, *, candidates: int
    ) -> list[tuple[Any, StoredTerms]]:
        """Up to ``candidates`` messages whose terms match ``query`` (their
        ``chat_id``, ``position``, ``uid``, ``role`` and ``created_at``), with
        their stored terms, in no particular order."""

    # -- vectors ---------------------------------------------------------------------------

    def index_vectors(self, connection: Connection, model: str | None, dimension: int | None) -> None:
        """Make the archive ready to search the vectors of ``model`` (of
        ``dimension`` numbers; ``None``: of no model), dropping what served
        another model's.

        Raises:
            NotSupported: the database cannot compare vectors.
        """
        return

    @abstractmethod
    def nearest(
        self,
        executor: Executor,
        embedder: Embedder,
        vector: Sequence[float],
        filters: SearchFilters,
        *,
        candidates: int,
        scan: int | None = None,
    ) -> Sequence[Any]:
        """Up to ``candidates`` messages whose ``embedder`` vectors are nearest
        to ``vector`` by cosine distance, nearest first (``typed_nearest``'s
        columns); an index that finds them approximately keeps ``scan``
        candidates as it goes (``SearchSettings.vector_scan``)."""

    # -- archive-wide switches -------------------------------------------------------------

    def row_level_security(self, connection: Connection) -> bool:
        """Whether row-level security is on for the archive's tables."""
        return False

    def set_row_level_security(self, connection: Connection, enabled: bool) -> None:
        """Turn row-level security on or off for the archive's tables."""
        raise NotSupported(f"row-level security needs PostgreSQL; {self.title} has none")

    # -- SQL expressions of analytics -----------------------------------------------------

    @abstractmethod
    def json_text(self, column: ColumnElement[Any], key: str) -> ColumnElement[str]:
        """The text of ``column``'s JSON key ``key`` (NULL if absent or not text)."""

    @abstractmethod
    def json_is_object(self, column: ColumnElement[Any], key: str) -> ColumnElement[bool]:
        """Whether ``column``'s JSON key ``key`` holds an object."""

    @abstractmethod
    def utc_day(self, moment: ColumnElement[Any]) -> ColumnElement[str]:
        """The UTC day of a timestamp, as ``YYYY-MM-DD``."""

    def by_bytes(self, value: ColumnElement[str]) -> ColumnElement[str]:
        """``value`` compared by its bytes."""
        return value

    @contextmanager
    def analytics_session(self, executor: Executor) -> Iterator[None]:
        """Around the analytics queries: settings they run best with."""
        yield

    # -- migrations ---------------------------------------------------------------------------

    #: Whether Alembic alters tables by copying them ("batch" mode).
    alters_by_copying: ClassVar[bool] = False

    #: Whether ``UPDATE ... FROM ... RETURNING`` may return the other table's
    #: columns (SQLite's RETURNING sees only the updated table).
    returns_joined_columns: ClassVar[bool] = True

    @contextmanager
    def migrating(self, connection: Connection) -> Iterator[None]:
        """Around a migration run, outside its transaction."""
        yield

    def lock_migrations(self, connection: Connection, lock_timeout: str | None) -> None:
        """At the start of a migration's transaction: wait for any other
        migration to end, then bound each wait for a lock (``lock_timeout``:
        the statement that does, or ``None``)."""
        return

    def offline_lock_timeout(self, lock_timeout: str | None) -> str | None:
        """The ``lock_timeout`` statement of a migration printed as SQL, if this database has one."""
        return None


def connection_of(executor: Executor) -> Connection:
    """The connection under ``executor`` (the session's, for a session)."""
    return executor if isinstance(executor, Connection) else executor.connection()


class ExecuteManyWriter:
    """Rows inserted with one ``executemany`` per table."""

    def __init__(self, executor: Executor) -> None:
        self._executor = executor

    def write(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        if rows:
            self._executor.execute(insert(table), rows)
