"""``chatarchive db``: create, migrate and check the archive's tables, and its switches."""

from __future__ import annotations

import io
import sys
import time
from collections.abc import Callable
from typing import Literal

import click

from chatarchive._api import ChatArchive
from chatarchive._backends.citus import DEFAULT_SHARD_COUNT, Distribution
from chatarchive._migrations import render
from chatarchive._terms import CJK_MODES, INDEXING_MODES, LANGUAGES, MOST_VECTOR_SCAN, SearchSettings

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


_LANGUAGE = click.option(
    "--language",
    type=click.Choice(LANGUAGES),
    help="Stem the words of space-separated text in this language ('simple': no stemming).",
)
_CJK = click.option(
    "--cjk",
    type=click.Choice(CJK_MODES),
    help="Index Chinese, Japanese and Korean text as pairs of characters (bigram) or single ones (unigram).",
)
_INDEXING = click.option(
    "--indexing",
    type=click.Choice(INDEXING_MODES),
    help="Index messages as they are written (sync), after them with 'chatarchive db index' (deferred), "
    "or not at all (off).",
)


@db.command("upgrade")
@click.argument("revision", default="head")
@_SQL_ONLY
@_LOCK_TIMEOUT
@_LANGUAGE
@_CJK
@_INDEXING
def db_upgrade(
    revision: str,
    sql: bool,
    lock_timeout: float | None,
    language: str | None,
    cjk: str | None,
    indexing: str | None,
) -> None:
    """Migrate the database up to REVISION (default: the newest), and set
    its search configuration if asked (see 'chatarchive db search')."""
    target = archive()
    if sql:
        _print_migration(target, revision, up=True, lock_timeout=lock_timeout)
        return
    target.upgrade(revision, lock_timeout=lock_timeout)
    if language or cjk or indexing:
        _print_settings(target.configure_search(language=language, cjk=cjk, indexing=indexing))
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
    """Exit 0 if the database matches this chatarchive, else 1 with the reasons.

    On stderr it says where the rows are: on one server, or distributed over
    a Citus cluster (whose tables must all be as distribute left them).
    """
    target = archive()
    problems = target.check()
    if problems:
        fail("; ".join(problems))
    click.echo("ok")
    stderr().print(f"the archive is {_described(target.distribution())}")


@db.command("distribute")
@click.option(
    "--shards",
    type=click.IntRange(min=1, max=10_000),
    default=DEFAULT_SHARD_COUNT,
    show_default=True,
    help="Shards of each table: a few per core of the workers, to come as well as present.",
)
def db_distribute(shards: int) -> None:
    """Distribute the archive over the workers of its Citus cluster.

    Run on the coordinator, at the newest revision. Every table is distributed
    by chat_id and colocated with chats (a chat's rows all on one worker);
    rows already stored move to the workers. Idempotent.
    """
    click.echo(_described(archive().distribute(shard_count=shards)))


@db.command("undistribute")
def db_undistribute() -> None:
    """Bring a distributed archive's rows back to the coordinator, as plain tables."""
    click.echo(_described(archive().undistribute()))


def _described(found: Distribution) -> str:
    """A distribution, in words."""
    if not found.distributed:
        return "on one server" + ("" if found.citus is None else f" (a Citus {found.citus} coordinator)")
    return (
        f"distributed over {found.workers} Citus {found.citus} workers, {found.shard_count} shards per table"
    )


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


@db.command("attachments")
@click.argument("state", type=click.Choice(["on", "off", "status"]), default="status")
def db_attachments(state: str) -> None:
    """Store attachments once, or inline in their parts (or show which).

    With it on, the base64 images, audio and files of content parts (1 KiB
    and more) are kept once per user as bytes, by their SHA-256, and the
    parts refer to them: an image sent in many turns or chats is stored
    once. Chats come back exactly as they were given either way. It applies
    to writes from then on.
    """
    target = archive()
    _switch(state, target.set_attachments_stored_once, target.attachments_stored_once)


def _vector_scan(
    _context: click.Context, _param: click.Parameter, value: str | None
) -> int | Literal[False] | None:
    """``--vector-scan``: a number, or ``default`` (False: back to the default)."""
    if value is None:
        return None
    if value == "default":
        return False
    if not value.isdigit() or not 1 <= int(value) <= MOST_VECTOR_SCAN:
        raise click.BadParameter(
            f"a whole number from 1 to {MOST_VECTOR_SCAN:,}, or 'default'; not {value!r}"
        )
    return int(value)


@db.command("search")
@_LANGUAGE
@_CJK
@_INDEXING
@click.option(
    "--embedder",
    metavar="NAME",
    help="Keep each message's vector by this embedder (an installed 'chatarchive.embedders' entry point), "
    "for search by meaning; 'none' forgets the vectors.",
)
@click.option(
    "--vector-scan",
    metavar="N|default",
    callback=_vector_scan,
    help="Candidates a search by meaning keeps as it scans the HNSW index (pgvector's hnsw.ef_search, "
    "1 to 1000; default: four times those it ranks, 400). Fewer is faster and finds fewer of the nearest.",
)
def db_search(
    language: str | None,
    cjk: str | None,
    indexing: str | None,
    embedder: str | None,
    vector_scan: int | Literal[False] | None,
) -> None:
    """Show the archive's search configuration, or change it.

    A new language, CJK splitting or embedder, or indexing turned on, indexes
    every message again: at once with sync indexing (writes wait), or by
    'chatarchive db index' with deferred indexing.
    """
    target = archive()
    if language or cjk or indexing or embedder or vector_scan is not None:
        chosen: str | Literal[False] | None = False if embedder == "none" else embedder
        _print_settings(
            target.configure_search(
                language=language, cjk=cjk, indexing=indexing, embedder=chosen, vector_scan=vector_scan
            )
        )
    else:
        _print_settings(target.search_settings())


def _print_settings(settings: SearchSettings) -> None:
    for name in ("language", "cjk", "indexing", "embedder", "dimension", "vector_scan"):
        value = getattr(settings, name)
        click.echo(f"{name}\t{('default' if name == 'vector_scan' else 'none') if value is None else value}")


@db.command("index")
@click.option("--follow", is_flag=True, help="Keep going: index new writes as they come, until interrupted.")
@click.option(
    "--batch-size",
    default=200,
    show_default=True,
    type=click.IntRange(min=1),
    help="Chats indexed per transaction.",
)
@click.option(
    "--interval",
    default=1.0,
    show_default=True,
    type=click.FloatRange(min=0.01),
    metavar="SECONDS",
    help="With --follow: how long to wait when nothing is left to index.",
)
def db_index(follow: bool, batch_size: int, interval: float) -> None:
    """Index the chats whose writes are not searchable yet (deferred indexing,
    or after an upgrade), the least recently written first.

    With --follow it keeps indexing new writes, waiting INTERVAL seconds
    whenever none is left: new messages become searchable within about that
    long (plus the time to index a batch). Stop it with Ctrl-C.
    """
    target = archive()
    if target.search_settings().indexing == "off":
        fail(
            "search is off for this archive, so nothing is indexed: "
            "turn it on with 'chatarchive db search-index on'"
        )
    total = 0
    try:
        while True:
            done = target.index_pending(batch_size=batch_size, limit=batch_size if follow else None)
            total += done
            if done:
                stderr().print(f"indexed {total} chats")
            elif not follow:
                break
            else:
                time.sleep(interval)
    except KeyboardInterrupt:
        pass
    stderr().print(f"indexed {total} chats; up to date" if not follow else f"indexed {total} chats")


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
