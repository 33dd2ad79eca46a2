"""``chatarchive db``: create, migrate and check the archive's tables, and its switches."""

from __future__ import annotations

import io
import sys
from collections.abc import Callable

import click

from chatarchive._api import ChatArchive
from chatarchive._migrations import render

from .app import CommandGroup, archive, ask_if_chats_are_lost, fail, main
from .rendering import stderr

__all__ = ["db"]


@main.group(cls=CommandGroup)
def db() -> None:
    """Create and migrate the archive's tables."""


_SQL_ONLY = click.option(
    "--sql",
    is_flag=True,
    help="Print the SQL it would run, from the database's current revision, without running it "
    "(for review, or to run with psql or sqlite3).",
)


_LOCK_TIMEOUT = click.option(
    "--lock-timeout",
    type=click.FloatRange(min=0, min_open=True, max=86_400, max_open=True),
    metavar="SECONDS",
    help="PostgreSQL: give up, changing nothing, when a lock the migration needs is not free within "
    "SECONDS (a long query on a table it alters), instead of waiting while queries pile up behind it.",
)


def _print_migration(
    archive: ChatArchive, revision: str, *, up: bool, lock_timeout: float | None, drop_branches: bool = False
) -> None:
    script = io.StringIO()  # printed whole or not at all: an unknown revision fails after "BEGIN;"
    render(
        archive.engine, revision, up=up, output=script, lock_timeout=lock_timeout, drop_branches=drop_branches
    )
    sys.stdout.write(script.getvalue())


@db.command("upgrade")
@click.argument("revision", default="head")
@_SQL_ONLY
@_LOCK_TIMEOUT
def db_upgrade(revision: str, sql: bool, lock_timeout: float | None) -> None:
    """Migrate the database up to REVISION (default: the newest)."""
    target = archive()
    if sql:
        _print_migration(target, revision, up=True, lock_timeout=lock_timeout)
        return
    target.upgrade(revision, lock_timeout=lock_timeout)
    stderr().print(f"database at revision {target.current_revision()}")


@db.command("downgrade")
@click.argument("revision")
@_SQL_ONLY
@_LOCK_TIMEOUT
@click.option("--yes", is_flag=True, help="Do not ask before 'base' drops tables that hold chats.")
@click.option(
    "--drop-branches",
    is_flag=True,
    help="Below revision 0011: drop the messages off each chat's active path (refused otherwise).",
)
def db_downgrade(
    revision: str, sql: bool, lock_timeout: float | None, yes: bool, drop_branches: bool
) -> None:
    """Migrate the database down to REVISION ('base' drops every table, and
    asks first if they hold chats). Chats are linear below revision 0011: a
    downgrade that would lose branches is refused unless --drop-branches, and
    then lists the messages it dropped."""
    target = archive()
    if sql:
        _print_migration(target, revision, up=False, lock_timeout=lock_timeout, drop_branches=drop_branches)
        return
    if revision == "base" and not yes:
        ask_if_chats_are_lost(target, "Drop every table of {where}, with the {chats} in them?")
    dropped = target.downgrade(revision, lock_timeout=lock_timeout, drop_branches=drop_branches)
    if dropped:
        stderr().print(f"dropped {len(dropped)} messages off the active path:")
        for chat_id, uid in dropped:
            click.echo(f"{chat_id}\t{uid}")  # tab-separated, for scripts
    stderr().print(f"database at revision {target.current_revision() or 'base'}")


@db.command("current")
def db_current() -> None:
    """Print the revision the database is at."""
    click.echo(archive().current_revision() or "none")


@db.command("check")
def db_check() -> None:
    """Exit 0 if the database matches this chatarchive, else 1 with the reasons."""
    problems = archive().check()
    if problems:
        fail("; ".join(problems))
    click.echo("ok")


@db.command("reindex")
def db_reindex() -> None:
    """Rebuild the full-text search index from the stored text.

    Needed after restoring a SQLite archive from a dump (its search tables
    point at rows by rowid) or after changing PostgreSQL's text search
    dictionaries. Writes (and, on PostgreSQL, searches) wait until it is done.
    """
    archive().rebuild_search_index()
    stderr().print("search index rebuilt")


@db.command("search-index")
@click.argument("state", type=click.Choice(["on", "off", "status"]), default="status")
def db_search_index(state: str) -> None:
    """Turn the full-text search index on or off (or show it).

    Indexing message text is most of what a write costs on PostgreSQL: an
    archive that is not searched, or one being loaded before it is searched,
    writes several times faster without it. While it is off, search fails with
    a message saying so. Turning it on indexes every stored message; writes
    wait until it is done.
    """
    target = archive()
    _switch(state, target.set_search_index, target.search_index)


@db.command("rls")
@click.argument("state", type=click.Choice(["on", "off", "status"]), default="status")
def db_rls(state: str) -> None:
    """Turn PostgreSQL row-level security on or off (or show it).

    With it on, a transaction that sets the setting chatarchive.user_id (as a
    scoped archive does) sees only that user's chats, whatever SQL it runs.
    """
    target = archive()
    _switch(state, target.set_row_level_security, target.row_level_security)


def _switch(state: str, turn: Callable[[bool], None], current: Callable[[], bool]) -> None:
    """An on|off|status command: set the switch unless asked its status, then print it."""
    if state != "status":
        turn(state == "on")
    click.echo("on" if current() else "off")


# -- import / export -------------------------------------------------------------
