"""Operations on an archive as a whole: its migrations and its switches.

They change (or look at) the archive for every user, so a user's archive
(``for_user``) may look but not change. Each runs on a connection of the
archive's own (``_repository.plans.Connected``).
"""

from __future__ import annotations

from functools import partial

from ._arguments import require_flag
from ._exceptions import NotSupported, UserScopeError, quoted
from ._migrations import migrate, problems_of, require_archive_file, require_reachable, revision_of
from ._repository.plans import Connected, FaceFacts, Plan

__all__ = [
    "check",
    "current_revision",
    "downgrade",
    "rebuild_search_index",
    "row_level_security",
    "search_index",
    "set_row_level_security",
    "set_search_index",
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
    return problems


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
    """Whether the archive has its full-text search index (see ``set_search_index``)."""
    enabled: bool = yield Connected(face.backend.search_index)
    return enabled


def set_search_index(face: FaceFacts, /, enabled: bool) -> Plan[None]:
    """Create the full-text search index from the stored text, or drop it.

    Indexing each message's text is most of what a write costs on PostgreSQL:
    an archive that is not searched, or one being loaded before it is
    searched, writes faster without it. While it is off, ``search`` raises
    ``SchemaNotReady``; turning it on indexes every stored message, in one
    transaction during which writes wait (reads go on). Dropping it waits for
    the queries running on the messages and their parts, and holds back new
    ones for that short moment. The setting is the database's: every
    connection sees it until it is changed.
    """
    _archive_wide(face, "set_search_index")
    require_flag(enabled, "enabled")
    yield Connected(partial(face.backend.set_search_index, enabled=enabled), transaction=True)


def rebuild_search_index(face: FaceFacts, /) -> Plan[None]:
    """Rebuild the full-text search index from the stored text, in one
    transaction that blocks writes (and PostgreSQL's searches) while it runs:
    after restoring a SQLite archive from a dump (its search tables point at
    rows by rowid), or after changing PostgreSQL's text search dictionaries.

    Raises:
        SchemaNotReady: the index is off (``set_search_index``).
    """
    _archive_wide(face, "rebuild_search_index")
    yield Connected(face.backend.rebuild_search_index, transaction=True)


def _archive_wide(face: FaceFacts, /, operation: str) -> None:
    """Refuse a change of the whole archive through a user's archive (``for_user``)."""
    if face.user_id is not None:
        raise UserScopeError(
            f"{operation} changes the archive for every user: call it on the archive, "
            f"not on the one for_user({quoted(face.user_id)}) gave"
        )
