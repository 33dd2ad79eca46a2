"""Operations on an archive as a whole: its migrations and its switches.

They change (or look at) the archive for every user, so a user's archive
(``for_user``) may look but not change. Each runs on a connection of the
archive's own (``_repository.plans.Connected``).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from typing import Literal, TypeVar

from sqlalchemy import Connection

from ._arguments import require_at_least_one, require_flag
from ._backends.citus import DEFAULT_SHARD_COUNT, Distribution
from ._embeddings import Embedder, required_embedder_named
from ._exceptions import InvalidArgument, NotSupported, SchemaNotReady, UserScopeError, quoted
from ._migrations import migrate, problems_of, require_archive_file, require_reachable, revision_of
from ._repository import attachments, searching
from ._repository.plans import Connected, FaceFacts, Plan
from ._repository.unit import Unit
from ._schema import SCHEMA_REVISION
from ._search import search_index_off
from ._terms import SearchSettings

R = TypeVar("R")

__all__ = [
    "attachments_stored_once",
    "check",
    "configure_search",
    "current_revision",
    "distribute",
    "distribution",
    "downgrade",
    "index_pending",
    "rebuild_search_index",
    "row_level_security",
    "search_index",
    "search_settings",
    "set_attachments_stored_once",
    "set_row_level_security",
    "set_search_index",
    "undistribute",
    "upgrade",
]


def upgrade(face: FaceFacts, /, revision: str = "head", *, lock_timeout: float | None = None) -> Plan[None]:
    """Migrate the database to ``revision`` (default: this version's newest).

    ``lock_timeout`` (seconds; PostgreSQL): fail with ``ConflictError``,
    changing nothing, when a lock the migration needs is not free within that
    time (a long query on a table it alters), rather than wait and hold up
    every query that comes after it meanwhile.

    Raises:
        InvalidArgument: an unknown revision, or one on the wrong side.
    """
    _archive_wide(face, "upgrade")
    require_reachable(face.url, revision)
    migration = partial(migrate, revision=revision, up=True, lock_timeout=lock_timeout)
    yield Connected(migration, schema=False, changes_schema=True)
    # Search terms are computed by chatarchive, not by SQL: a migration marks
    # the chats whose terms it dropped, and they are indexed here.
    if (yield Connected(revision_of, schema=False)) == SCHEMA_REVISION:
        yield from index_pending(face)


def downgrade(
    face: FaceFacts, /, revision: str, *, lock_timeout: float | None = None, drop_branches: bool = False
) -> Plan[list[tuple[str, str]]]:
    """Migrate the database down to ``revision`` (``"base"`` drops every
    table); ``lock_timeout`` as for ``upgrade``.

    Below revision 0011 chats are linear: a downgrade there that would lose
    messages off the active path (regenerations, edits, kept branches) is
    refused, naming them, and changes nothing, unless ``drop_branches``.

    Returns:
        The messages dropped for being off their chat's active path, as
        ``(chat_id, uid)`` pairs (none, usually).

    Raises:
        InvalidArgument: an unknown revision, or branches would be lost.
    """
    _archive_wide(face, "downgrade")
    require_archive_file(face.url)
    migration = partial(
        migrate, revision=revision, up=False, lock_timeout=lock_timeout, drop_branches=drop_branches
    )
    dropped: list[tuple[str, str]] = yield Connected(migration, schema=False, changes_schema=True)
    return dropped


def current_revision(face: FaceFacts, /) -> Plan[str | None]:
    """The migration revision the database is at (``None`` if never migrated,
    or a SQLite file that does not exist yet, which looking would create)."""
    if face.url is None or face.backend.missing(face.url) is not None:
        return None
    revision: str | None = yield Connected(revision_of, schema=False)
    return revision


def check(face: FaceFacts, /) -> Plan[list[str]]:
    """Problems that keep the database from matching this version of
    chatarchive: its revision, and differences between its tables and
    chatarchive's models (empty: none)."""
    if face.url is not None and (missing := face.backend.missing(face.url)) is not None:
        return [missing]
    problems: list[str] = yield Connected(problems_of, schema=False)
    if not problems:
        found: Distribution = yield Connected(face.backend.distribution, schema=False)
        problems.extend(found.problems)
    return problems


def distribution(face: FaceFacts, /) -> Plan[Distribution]:
    """Where the archive's rows are: on one server, or distributed over the
    workers of a Citus cluster (and how many shards each table has)."""
    found: Distribution = yield Connected(face.backend.distribution, schema=False)
    return found


def distribute(face: FaceFacts, /, *, shard_count: int = DEFAULT_SHARD_COUNT) -> Plan[Distribution]:
    """Distribute the archive over the workers of the Citus cluster whose
    coordinator it is on: every table by ``chat_id``, colocated with
    ``chats``, in ``shard_count`` shards (a chat's rows all on one worker),
    ``archive_settings`` copied to every node. Rows already stored move to the
    workers, in one transaction; writes wait meanwhile. Idempotent: tables
    distributed already stay as they are. See the scale-out guide.

    Returns:
        The distribution reached.

    Raises:
        NotSupported: not a Citus coordinator with workers.
        SchemaNotReady: the archive is not at this version's newest revision.
    """
    _archive_wide(face, "distribute")
    require_at_least_one(shard_count, "shard_count")
    if (yield Connected(revision_of, schema=False)) != SCHEMA_REVISION:
        raise SchemaNotReady(
            "distribute needs the archive at the newest revision: run 'chatarchive db upgrade'"
        )
    reached: Distribution = yield Connected(
        partial(face.backend.distribute, shard_count=shard_count), schema=False, transaction=True
    )
    _seen(face, reached)
    return reached


def undistribute(face: FaceFacts, /) -> Plan[Distribution]:
    """Bring a distributed archive's rows back to the coordinator, as plain
    tables (``distribute`` undone). Idempotent."""
    _archive_wide(face, "undistribute")
    reached: Distribution = yield Connected(face.backend.undistribute, schema=False, transaction=True)
    _seen(face, reached)
    return reached


def _seen(face: FaceFacts, /, reached: Distribution) -> None:
    """Tell the archive what its writes now run on (``appends.Guesses``)."""
    if face.guesses is not None:
        face.guesses.distributed = reached.distributed


def row_level_security(face: FaceFacts, /) -> Plan[bool]:
    """Whether PostgreSQL row-level security is on for the archive's tables
    (always off on SQLite, which has none)."""
    enabled: bool = yield Connected(face.backend.row_level_security, schema=False)
    return enabled


def set_row_level_security(face: FaceFacts, /, enabled: bool) -> Plan[None]:
    """Turn PostgreSQL row-level security on or off for the archive's tables.

    With it on, a transaction that sets ``chatarchive.user_id`` (as
    ``for_user`` does) sees only that user's rows, whatever SQL it runs; one
    that does not set it sees every row. Needs the tables' owner.

    Raises:
        NotSupported: on SQLite, which has no row-level security.
    """
    _archive_wide(face, "set_row_level_security")
    require_flag(enabled, "enabled")
    if not face.backend.has_row_level_security:
        raise NotSupported(f"row-level security needs PostgreSQL; {face.backend.title} has none")
    yield Connected(partial(face.backend.set_row_level_security, enabled=enabled), transaction=True)


def search_index(face: FaceFacts, /) -> Plan[bool]:
    """Whether search is on for the archive (see ``set_search_index``)."""
    current: SearchSettings = yield Connected(_on_unit(face, searching.settings))
    return current.indexing != "off"


def set_search_index(face: FaceFacts, /, enabled: bool) -> Plan[None]:
    """Turn search on or off for the archive.

    While it is off, writes compute no search terms (they mark their chats)
    and ``search`` raises ``SchemaNotReady``; the terms are deleted. Turning it
    on (with ``sync`` indexing, as before it was turned off, or ``deferred``)
    indexes every stored message again: at once with ``sync``, in this one
    transaction, during which writes wait; with ``deferred``, by
    ``index_pending``. The setting is the archive's: every connection sees it.
    """
    _archive_wide(face, "set_search_index")
    require_flag(enabled, "enabled")
    current: SearchSettings = yield Connected(_on_unit(face, searching.settings))
    if enabled == (current.indexing != "off"):
        return
    indexing = "sync" if enabled else "off"
    yield Connected(_on_unit(face, partial(searching.configure, indexing=indexing)), transaction=True)


def attachments_stored_once(face: FaceFacts, /) -> Plan[bool]:
    """Whether the archive stores attachments once (see ``set_attachments_stored_once``)."""
    enabled: bool = yield Connected(_on_unit(face, attachments.stored_once))
    return enabled


def set_attachments_stored_once(face: FaceFacts, /, enabled: bool) -> Plan[None]:
    """Store the base64 images, audio and files of content parts once, as
    bytes in the ``attachments`` table, or (off, the default) inline in the
    parts' JSON.

    With it on, each part's largest base64 payload of at least 1 KiB (a data
    URL's, or a bare base64 string's, that encodes back to the same text)
    is kept once per user under its SHA-256, and the part refers to it: the
    same image sent in ten turns or ten chats of a user is stored once, in
    three quarters of its base64 size. Documents come back exactly as they
    were given, whichever way their parts were stored. Deleting chats,
    messages or branches deletes the attachments that no remaining part
    refers to.

    The switch is the archive's (every connection sees it) and applies to
    writes from then on; turning it off leaves stored attachments where they
    are.

    Example:
        >>> from chatarchive import ChatArchive
        >>> with ChatArchive("sqlite://") as archive:
        ...     archive.upgrade()
        ...     archive.set_attachments_stored_once(True)
        ...     archive.attachments_stored_once()
        True
    """
    _archive_wide(face, "set_attachments_stored_once")
    require_flag(enabled, "enabled")
    yield Connected(_on_unit(face, partial(attachments.set_stored_once, enabled=enabled)), transaction=True)


def rebuild_search_index(face: FaceFacts, /) -> Plan[None]:
    """Compute every message's search terms again: at once, in one
    transaction that makes writes wait, with ``sync`` indexing; with
    ``deferred`` the chats are marked for ``index_pending``. For a SQLite
    archive restored from a dump (its terms point at messages by rowid).

    Raises:
        SchemaNotReady: search is off (``set_search_index``).
    """
    _archive_wide(face, "rebuild_search_index")
    current: SearchSettings = yield Connected(_on_unit(face, searching.settings))
    if current.indexing == "off":
        raise search_index_off()
    yield Connected(_on_unit(face, partial(searching.configure, rebuild=True)), transaction=True)


def search_settings(face: FaceFacts, /) -> Plan[SearchSettings]:
    """The archive's search settings: its language, how it splits CJK text,
    and whether writes index their messages at once (``sync``), leave it to
    ``index_pending`` (``deferred``), or not at all (``off``)."""
    current: SearchSettings = yield Connected(_on_unit(face, searching.settings))
    return current


def configure_search(
    face: FaceFacts,
    /,
    *,
    language: str | None = None,
    cjk: str | None = None,
    indexing: str | None = None,
    embedder: Embedder | str | Literal[False] | None = None,
    vector_scan: int | Literal[False] | None = None,
) -> Plan[SearchSettings]:
    """Change the archive's search settings (each one given); returns them.

    ``language`` stems words of space-separated text (``english`` by default;
    ``simple``: no stemming; any of ``chatarchive.SEARCH_LANGUAGES``), ``cjk``
    splits Chinese, Japanese and Korean text into pairs of characters
    (``bigram``, the default) or single ones (``unigram``), ``indexing`` is
    ``sync`` (the default: a write makes its messages searchable before it
    commits), ``deferred`` (writes only mark their chats; ``index_pending``, or
    ``chatarchive db index --follow``, indexes them) or ``off``.

    ``embedder`` (an ``Embedder``, or the name of one registered or offered
    by an installed package's ``chatarchive.embedders`` entry point) makes
    the archive keep each message's vector for search by meaning
    (``search(mode="vector" | "hybrid")``), written by the same ``indexing``;
    ``False`` forgets the vectors. On PostgreSQL it needs pgvector on the
    server (the archive creates the extension in its database, and an HNSW
    index of the model's vectors); on SQLite vectors are compared exactly.
    The archive records the embedder's name and dimension: every process
    that writes or searches needs the embedder too (``register_embedder``,
    or the entry point).

    ``vector_scan`` (1 to 1,000) is how many candidates a search by meaning
    keeps as it scans the HNSW index on PostgreSQL (pgvector's
    ``hnsw.ef_search``; a role's own larger setting wins); ``False`` goes back
    to the default, four times the candidates a search ranks (400). A model
    whose vectors the index finds easily keeps its recall with a narrower,
    faster scan: ``chatarchive bench --search N --embedder NAME`` measures
    both. It needs no indexing again.

    A new language, CJK splitting or embedder indexes every message again,
    as turning search on does: at once, in this transaction, with ``sync``
    indexing; with ``deferred``, by ``index_pending``. Going from
    ``deferred`` to ``sync`` indexes the chats still marked.

    Raises:
        InvalidArgument: an unknown language or mode, an embedder that is
            none, or a ``vector_scan`` out of its range.
        NotSupported: an embedder on a PostgreSQL server without pgvector.
        EmbedderError: no embedder of that name, or it failed.
    """
    _archive_wide(face, "configure_search")
    for name, value in (("language", language), ("cjk", cjk), ("indexing", indexing)):
        if value is not None and not isinstance(value, str):
            raise InvalidArgument(f"{name} must be a string, not {type(value).__name__}", argument=name)
    if vector_scan is not None and vector_scan is not False:
        SearchSettings(vector_scan=vector_scan)  # checked before anything is read
    chosen = _embedder(embedder)
    configure = partial(
        searching.configure,
        language=language,
        cjk=cjk,
        indexing=indexing,
        embedder=chosen,
        vector_scan=vector_scan,
    )
    changed: SearchSettings = yield Connected(_on_unit(face, configure), transaction=True)
    return changed


def _embedder(embedder: object) -> Embedder | Literal[False] | None:
    """The embedder ``configure_search`` was given (by name: the one registered or installed)."""
    if embedder is None or embedder is False or isinstance(embedder, Embedder):
        return embedder
    if isinstance(embedder, str):
        return required_embedder_named(embedder)
    raise InvalidArgument(
        f"embedder must be an Embedder, its name, or False, not {type(embedder).__name__}",
        argument="embedder",
    )


def index_pending(face: FaceFacts, /, *, batch_size: int = 200, limit: int | None = None) -> Plan[int]:
    """Index the messages of the chats that writes have marked (``deferred``
    indexing, or an upgrade), ``batch_size`` chats per transaction, the least
    recently written first, until none is left (or ``limit`` chats are done).
    A chat that a writer holds is left for the next call. Returns how many
    chats were indexed. ``chatarchive db index --follow`` calls it again and
    again.
    """
    _archive_wide(face, "index_pending")
    require_at_least_one(batch_size, "batch_size")
    if limit is not None:
        require_at_least_one(limit, "limit")
    done = 0
    while limit is None or done < limit:
        size = batch_size if limit is None else min(batch_size, limit - done)
        indexed: int = yield Connected(
            _on_unit(face, partial(searching.index_pending, chats_per_batch=size)), transaction=True
        )
        if not indexed:
            break
        done += indexed
    return done


def _on_unit(face: FaceFacts, call: Callable[..., R]) -> Callable[[Connection], R]:
    """``call`` of a unit of work on the connection an archive-wide operation runs on."""

    def on(connection: Connection) -> R:
        return call(Unit(connection, backend=face.backend, user_id=None, limits=None, savepoints=False))

    return on


def _archive_wide(face: FaceFacts, /, operation: str) -> None:
    """Refuse a change of the whole archive through a user's archive (``for_user``)."""
    if face.user_id is not None:
        raise UserScopeError(
            f"{operation} changes the archive for every user: call it on the archive, "
            f"not on the one for_user({quoted(face.user_id)}) gave"
        )
