"""The ``chatarchive`` command: parses arguments and calls :class:`ChatArchive`.

Exit codes: 0 success, 1 a user-facing error (one line on stderr, no
traceback), 2 a usage error, 130 an import stopped by Ctrl-C.
"""

from __future__ import annotations

import codecs
import csv
import errno
import io
import json
import os
import sys
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from datetime import UTC, datetime, timedelta
from functools import partial
from importlib import resources
from itertools import count
from typing import Any, BinaryIO, NoReturn

import click
from rich.cells import cell_len
from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text
from sqlalchemy import inspect, text

from . import formats
from ._archive import ChatArchive
from ._document import ChatDocument
from ._engine import DEFAULT_URL, URL_ENV, in_memory, missing_archive, shown_url
from ._exceptions import ChatArchiveError, database_errors, require_moment
from ._ingest import MAX_BATCH_SIZE, documents_in_flight
from ._jsonio import READ_ERRORS, Record, open_text, read_records, written
from ._transcript import literal, printable, render_transcript
from .formats import EXPORT_FORMATS, IMPORT_FORMATS
from .formats.finetune import Filters, Selection, select

__all__ = ["main"]

_moment = click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z"])
#: The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
_INTERRUPTED = 130
_AGE_UNITS = {"h": "hours", "d": "days", "w": "weeks"}


def _ago(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    """An age back from now, ``90d``, ``12h`` or ``4w``, as the moment that long ago."""
    if value is None:
        return None
    text = value.strip().lower()
    number, unit = text[:-1], _AGE_UNITS.get(text[-1:])
    if unit is None or not (number.isascii() and number.isdigit()) or int(number) == 0:
        raise click.BadParameter(
            f"{value!r} is not an age: a whole number above 0 and h, d or w, such as 90d, 12h or 4w",
            ctx,
            param,
        )
    try:
        return datetime.now(UTC) - timedelta(**{unit: int(number)})
    except OverflowError:
        raise click.BadParameter(f"{value!r} reaches back before the year 1", ctx, param) from None


def _before_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--before D`` and ``--older-than AGE``: read them with :func:`_before`."""
    command = click.option(
        "--older-than",
        metavar="AGE",
        callback=_ago,
        help="Chats last updated more than AGE ago: 90d, 12h, 4w.",
    )(command)
    return click.option(
        "--before", type=_moment, help="Chats last updated before this day or time (UTC if no offset)."
    )(command)


def _chat_filter_options(command: Callable[..., None]) -> Callable[..., None]:
    """The chat filters of ``ls`` and ``export`` (those of ``list_chats`` and ``export``)."""
    command = _before_options(command)
    for option in (
        click.option(
            "--since", type=_moment, help="Chats last updated from this day or time on (UTC if no offset)."
        ),
        click.option("--tag", help="Only chats with this tag."),
        click.option("--model", help="Only chats with this chosen model."),
        click.option("--user", "user_id", help="Only this user's chats."),
    ):
        command = option(command)
    return command


def _chats(number: int) -> str:
    """``1 chat``, ``1,234 chats``: how many chats a command read, wrote or deleted."""
    return f"{number:,} chat{'s' if number != 1 else ''}"


def _stored_chats(archive: ChatArchive) -> int:
    """How many chats the archive's tables hold, at whatever revision they are."""
    if missing_archive(archive.url) is not None:
        return 0  # and no empty file made by looking
    with database_errors(), archive.engine.connect() as connection:
        if not inspect(connection).has_table("chats"):
            return 0
        return int(connection.execute(text("SELECT count(*) FROM chats")).scalar_one())


def _ask_if_chats_are_lost(archive: ChatArchive, question: str) -> None:
    """Ask ``question`` (``{chats}``: how many, ``{where}``: the database, its
    password hidden) before a command loses the chats the archive holds; none,
    no question. No answer (no terminal) aborts."""
    stored = _stored_chats(archive)
    if stored:
        asked = question.format(chats=_chats(stored), where=shown_url(archive.url))
        click.confirm(printable(asked), abort=True, err=True)


def _before(before: datetime | None, older_than: datetime | None) -> datetime | None:
    if before is not None and older_than is not None:
        raise click.UsageError("give --before or --older-than, not both")
    return before or older_than


_stdout = Console(highlight=False, soft_wrap=True)
_stderr = Console(stderr=True, highlight=False, soft_wrap=True)


def _write_utf8() -> None:
    """Standard output and error write UTF-8 whatever the locale's encoding (a
    Windows pipe's is the ANSI code page): what ``export`` writes is JSON Lines,
    which is UTF-8, and a stored character that encoding lacks crashed the
    command with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and codecs.lookup(stream.encoding).name != "utf-8":
            stream.reconfigure(encoding="utf-8")


class _Group(click.Group):
    """Turns chatarchive's errors into a one-line message and exit code 1."""

    def invoke(self, ctx: click.Context) -> Any:
        _write_utf8()
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            # What reads the output went away ('chatarchive export | head'): stop
            # quietly, as Unix tools do. Python's own last flush of stdout would
            # fail again, so stdout now leads nowhere.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            ctx.exit(1)
        except ChatArchiveError as exc:
            raise click.ClickException(printable(str(exc))) from exc
        except OSError as exc:
            where = f"{exc.filename}: " if exc.filename else ""
            raise click.ClickException(printable(f"{where}{exc.strerror or exc}")) from exc


class _State:
    def __init__(self, url: str | None) -> None:
        self.url = url
        self._archive: ChatArchive | None = None

    @property
    def archive(self) -> ChatArchive:
        if self._archive is None:
            archive = ChatArchive(self.url)
            command = click.get_current_context()
            # Each command is a process of its own: what one wrote, the next would not see.
            # 'quickstart' does all its work in one; '--sql' only prints a migration.
            if in_memory(archive.url) and command.command is not quickstart and not command.params.get("sql"):
                archive.close()
                _fail(
                    f"{shown_url(archive.url)} is an in-memory database, which lasts one command: "
                    f"name a file, such as {DEFAULT_URL} ('quickstart' and 'db upgrade --sql' run in memory)"
                )
            self._archive = archive
        return self._archive

    def close(self) -> None:
        if self._archive is not None:
            self._archive.close()


def _state() -> _State:
    state = click.get_current_context().find_object(_State)
    assert state is not None
    return state


def _fail(message: str) -> NoReturn:
    raise click.ClickException(printable(message))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "url",
    metavar="URL",
    help=f"Database URL (default: ${URL_ENV}, else {DEFAULT_URL}).",
)
@click.version_option(package_name="chatarchive")
@click.pass_context
def main(ctx: click.Context, url: str | None) -> None:
    """Keep LLM chat conversations in a normalized database, losslessly."""
    state = _State(url)
    ctx.obj = state
    ctx.call_on_close(state.close)


# -- db --------------------------------------------------------------------------


@main.group(cls=_Group)
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


def _print_migration(archive: ChatArchive, revision: str, *, up: bool, lock_timeout: float | None) -> None:
    from ._migrations import render  # Alembic loads only for the db commands

    script = io.StringIO()  # printed whole or not at all: an unknown revision fails after "BEGIN;"
    render(archive.engine, revision, up=up, output=script, lock_timeout=lock_timeout)
    sys.stdout.write(script.getvalue())


@db.command("upgrade")
@click.argument("revision", default="head")
@_SQL_ONLY
@_LOCK_TIMEOUT
def db_upgrade(revision: str, sql: bool, lock_timeout: float | None) -> None:
    """Migrate the database up to REVISION (default: the newest)."""
    archive = _state().archive
    if sql:
        _print_migration(archive, revision, up=True, lock_timeout=lock_timeout)
        return
    archive.upgrade(revision, lock_timeout=lock_timeout)
    _stderr.print(f"database at revision {archive.current_revision()}")


@db.command("downgrade")
@click.argument("revision")
@_SQL_ONLY
@_LOCK_TIMEOUT
@click.option("--yes", is_flag=True, help="Do not ask before 'base' drops tables that hold chats.")
def db_downgrade(revision: str, sql: bool, lock_timeout: float | None, yes: bool) -> None:
    """Migrate the database down to REVISION ('base' drops every table, and
    asks first if they hold chats)."""
    archive = _state().archive
    if sql:
        _print_migration(archive, revision, up=False, lock_timeout=lock_timeout)
        return
    if revision == "base" and not yes:
        _ask_if_chats_are_lost(archive, "Drop every table of {where}, with the {chats} in them?")
    archive.downgrade(revision, lock_timeout=lock_timeout)
    _stderr.print(f"database at revision {archive.current_revision() or 'base'}")


@db.command("current")
def db_current() -> None:
    """Print the revision the database is at."""
    click.echo(_state().archive.current_revision() or "none")


@db.command("check")
def db_check() -> None:
    """Exit 0 if the database matches this chatarchive, else 1 with the reasons."""
    problems = _state().archive.check()
    if problems:
        _fail("; ".join(problems))
    click.echo("ok")


@db.command("reindex")
def db_reindex() -> None:
    """Rebuild the full-text search index from the stored text.

    Needed after restoring a SQLite archive from a dump (its search tables
    point at rows by rowid) or after changing PostgreSQL's text search
    dictionaries. Writes (and, on PostgreSQL, searches) wait until it is done.
    """
    _state().archive.rebuild_search_index()
    _stderr.print("search index rebuilt")


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
    archive = _state().archive
    _switch(state, archive.set_search_index, archive.search_index)


@db.command("rls")
@click.argument("state", type=click.Choice(["on", "off", "status"]), default="status")
def db_rls(state: str) -> None:
    """Turn PostgreSQL row-level security on or off (or show it).

    With it on, a transaction that sets the setting chatarchive.user_id (as a
    scoped archive does) sees only that user's chats, whatever SQL it runs.
    """
    archive = _state().archive
    _switch(state, archive.set_row_level_security, archive.row_level_security)


def _switch(state: str, turn: Callable[[bool], None], current: Callable[[], bool]) -> None:
    """An on|off|status command: set the switch unless asked its status, then print it."""
    if state != "status":
        turn(state == "on")
    click.echo("on" if current() else "off")


# -- import / export -------------------------------------------------------------


@main.command("import")
@click.argument("paths", nargs=-1, required=True, metavar="PATH... | -")
@click.option("--strict", is_flag=True, help="All or nothing: one transaction, stop at the first bad record.")
@click.option(
    "--bulk",
    is_flag=True,
    help="Bulk-load mode (PostgreSQL): one transaction that drops foreign keys and B-tree indexes, "
    "loads, and re-creates them. Locks the archive's tables while it runs; use it only when nothing "
    "else writes to the archive.",
)
@click.option(
    "--batch-size",
    default=250,
    show_default=True,
    type=click.IntRange(min=1, max=MAX_BATCH_SIZE),
    help="Chats per batch.",
)
@click.option(
    "--writers",
    default=1,
    show_default=True,
    type=click.IntRange(min=1),
    help="Write through this many connections at once (PostgreSQL; not with --strict or --bulk).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", *IMPORT_FORMATS]),
    default="auto",
    show_default=True,
    help="The records' format; auto detects it for each record.",
)
def import_(
    paths: tuple[str, ...], strict: bool, bulk: bool, batch_size: int, writers: int, fmt: str
) -> None:
    """Import chats from JSON or JSON Lines files ('-' reads standard input;
    names ending in .gz, .bz2 or .xz are decompressed).

    A file may hold one record, a list of records (read one at a time, so
    memory does not grow with the file), JSON Lines of them, or records one
    after another (jq output); a record is a chat document, a bare OpenAI
    message list (one chat), a Masterbrain ChatDoc, a Malevich message list, a
    ShareGPT record, or a ChatGPT conversation (conversations.json; from the
    export's zip: unzip -p export.zip conversations.json | chatarchive import -).
    Chats already stored with the same chat_id are replaced. Bad records are
    reported with file and line; the good ones are kept (unless --strict).
    """
    if writers > 1 and (strict or bulk):
        raise click.UsageError("--writers takes one transaction per batch: not with --strict or --bulk")
    archive = _state().archive
    failed = 0
    # Where the documents in flight came from, by their index: a failed write
    # names one of them. Added to by the thread that reads the input, looked up
    # (a single dict.get) by the writers.
    in_flight: dict[int, str] = {}
    remembered = documents_in_flight(batch_size, writers)

    def report(where: str, reason: object) -> None:
        nonlocal failed
        if strict:
            _fail(f"{where}: {reason} (nothing imported)")
        failed += 1
        _stderr.print(literal(f"{where}: {reason}"))

    def on_error(index: int, error: ChatArchiveError) -> None:
        report(in_flight.get(index, "?"), error)

    def documents(moved: Callable[[int, int], None]) -> Iterator[ChatDocument | Mapping[str, Any]]:
        positions = count()
        for record in _records(paths, moved):
            try:
                document = _document(record, fmt)
            except ChatArchiveError as exc:
                report(record.where, exc)
                continue
            in_flight[next(positions)] = record.where
            if len(in_flight) > remembered:
                del in_flight[next(iter(in_flight))]
            yield document

    # The files' sizes, for the progress bar; a missing file is reported before anything is written.
    total = None if "-" in paths else sum(os.stat(path).st_size for path in paths)
    try:
        with _progress(total) as moved:
            if strict:
                with archive.transaction() as repository:
                    imported = repository.save_many(
                        documents(moved), batch_size=batch_size, bulk=bulk, on_error=on_error
                    )
            else:
                imported = archive.save_many(
                    documents(moved), batch_size=batch_size, bulk=bulk, on_error=on_error, writers=writers
                )
    except KeyboardInterrupt:
        if strict or bulk:
            _stderr.print("interrupted: nothing imported (one transaction, rolled back)")
        else:
            _stderr.print(
                "interrupted: the batches written until then are kept; importing the same input again "
                "replaces them and imports the rest"
            )
        sys.exit(_INTERRUPTED)
    _stderr.print(f"imported {_chats(imported)}" + (f", {failed} failed" if failed else ""))
    if failed:
        sys.exit(1)


def _records(paths: tuple[str, ...], moved: Callable[[int, int], None]) -> Iterator[Record]:
    """The records of every input; ``moved`` is told, after each, how many
    there were so far and how many bytes of the files are read."""
    records, done = count(1), 0
    for path in paths:
        stdin = path == "-"
        source = "<stdin>" if stdin else path
        with _standard_input() if stdin else open(path, "rb") as raw, open_text(raw, source) as stream:
            try:
                for record in read_records(stream, source):
                    moved(next(records), 0 if stdin else done + raw.tell())
                    yield record
            except UnicodeDecodeError as exc:
                yield Record(source, 0, error=f"not UTF-8 text ({exc.reason} at byte {exc.start})")
            except READ_ERRORS as exc:
                yield Record(source, 0, error=f"cannot be read: {exc}")
            if not stdin:
                done += raw.tell()


def _standard_input() -> BinaryIO:
    """Standard input's bytes, decoded as a file's are: its text stream decodes
    with the locale's encoding (cp1252 in a Windows pipe), which made UTF-8
    mojibake. Read through a reader of its own (closing it leaves the file
    descriptor open): one still blocked in a read when Ctrl-C ends the import
    would otherwise hold the lock that closing ``sys.stdin`` at exit waits for."""
    if sys.stdin is None:  # started with it closed ('<&-')
        raise OSError(errno.EBADF, "standard input is closed", "-")
    try:
        return open(sys.stdin.fileno(), "rb", closefd=False)
    except (OSError, ValueError):  # no file descriptor (a test runner's stream)
        return sys.stdin.buffer


def _document(record: Record, fmt: str = "auto") -> ChatDocument | Mapping[str, Any]:
    """The chat a record holds: a canonical document that names its chat as it
    is, for ``save_many`` to validate (once: a ``ChatDocument`` is validated
    again where it is saved), any other converted to one."""
    if record.error is not None:
        raise _RecordError(record.error)
    name = formats.detect(record.value) if fmt == "auto" else fmt
    if name == "canonical" and isinstance(record.value, Mapping) and "chat_id" in record.value:
        return record.value
    return formats.to_document(record.value, name)


class _RecordError(ChatArchiveError):
    """A record that could not be read as JSON."""


@contextmanager
def _progress(total: int | None) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on standard error: of the bytes read when the input's
    size is known (files), with the time left; else a count."""
    columns: list[ProgressColumn] = [SpinnerColumn(), TextColumn("importing"), BarColumn()]
    if total is not None:
        columns += [TaskProgressColumn(), TimeRemainingColumn()]
    progress = Progress(
        *columns, TextColumn("{task.fields[records]} records"), console=_stderr, transient=True
    )
    with progress:
        task = progress.add_task("import", total=total, records=0)
        yield lambda records, position: progress.update(task, completed=position, records=records)


@main.command("export")
@_chat_filter_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(list(EXPORT_FORMATS)),
    default="canonical",
    show_default=True,
    help="canonical: whole documents; openai: each chat's message list; openai-finetune: training lines; "
    "masterbrain, malevich, sharegpt, chatgpt: those formats.",
)
@click.option(
    "--min-score", type=float, help="openai-finetune: chats whose mean feedback score is at least this."
)
@click.option(
    "--created-since",
    type=_moment,
    help="openai-finetune: only chats whose document was created from then on (UTC if no offset).",
)
@click.option(
    "--exclude-role", "exclude_roles", multiple=True, help="openai-finetune: leave out messages of this role."
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help="File to write, whole or not at all; .gz, .bz2 or .xz compress it (default: stdout).",
)
def export(
    user_id: str | None,
    model: str | None,
    tag: str | None,
    since: datetime | None,
    before: datetime | None,
    older_than: datetime | None,
    fmt: str,
    min_score: float | None,
    created_since: datetime | None,
    exclude_roles: tuple[str, ...],
    output: str | None,
) -> None:
    """Write chats as JSON Lines, one chat per line, streamed, in chat_id order
    (--before or --older-than: what 'rm' with the same option would delete)."""
    if fmt != "openai-finetune":
        given = {"--min-score": min_score, "--created-since": created_since, "--exclude-role": exclude_roles}
        if misplaced := [name for name, value in given.items() if value not in (None, ())]:
            raise click.UsageError(f"{', '.join(misplaced)}: only with --format openai-finetune")
    archive = _state().archive
    documents = archive.export(
        user_id=user_id, model=model, tag=tag, since=since, until=_before(before, older_than)
    )
    selection = Selection()
    if fmt == "openai-finetune":
        filters = Filters(min_score=min_score, since=created_since, exclude_roles=exclude_roles)
        lines: Iterator[Any] = select(documents, filters, selection)
    else:
        exporter = EXPORT_FORMATS[fmt]  # the archive's own documents: no need to validate them again
        lines = (exporter(document) for document in documents)
    chats = 0  # one line a chat, in every format
    with nullcontext(sys.stdout) if output is None else written(output) as stream:
        for line in lines:
            stream.write(json.dumps(line, ensure_ascii=False) + "\n")
            chats += 1
    skipped = ", ".join(f"{count} ({reason})" for reason, count in sorted(selection.skipped.items()))
    _stderr.print(f"wrote {_chats(chats)}" + (f"; skipped {skipped}" if skipped else ""))


# -- looking around --------------------------------------------------------------


@main.command("ls")
@_chat_filter_options
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1), help="How many chats.")
@click.option(
    "--cursor",
    metavar="CURSOR",
    help="The next page: the cursor a previous 'ls' with the same options printed.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the chats' summaries as JSON.")
def ls(
    user_id: str | None,
    model: str | None,
    tag: str | None,
    since: datetime | None,
    before: datetime | None,
    older_than: datetime | None,
    limit: int,
    cursor: str | None,
    as_json: bool,
) -> None:
    """List chats, most recently updated first (--before or --older-than
    shows what 'rm' with the same option would delete), a page at a time."""
    archive = _state().archive
    filters: dict[str, Any] = {
        "user_id": user_id,
        "model": model,
        "tag": tag,
        "since": since,
        "until": _before(before, older_than),
    }
    page = archive.list_chats(**filters, limit=limit, cursor=cursor)
    more = None
    if page.next_cursor:
        shown = f"{limit:,} shown" if cursor else f"showing the {limit:,} most recent"
        more = f"({shown} of {archive.count_chats(**filters):,}; next page: --cursor {page.next_cursor})"
    if as_json:
        _echo_json([chat.model_dump(mode="json") for chat in page.items])
        if more:
            _stderr.print(more)
        return
    _print_table(
        ("chat_id", "user", "title", "model", "messages", "updated (UTC)"),
        [
            (
                chat.chat_id,
                chat.user_id,
                chat.title,
                chat.model,
                chat.message_count,
                chat.updated_at,
            )
            for chat in page.items
        ],
    )
    if more:
        _stdout.print(more)


@main.command("show")
@click.argument("chat_id")
@click.option("--json", "as_json", is_flag=True, help="Print the canonical JSON document.")
def show(chat_id: str, as_json: bool) -> None:
    """Show one chat as a readable transcript."""
    document = _state().archive.get(chat_id)
    if as_json:
        click.echo(document.model_dump_json(indent=2))
    else:
        _stdout.print(render_transcript(document))


@main.command("rm")
@click.argument("chat_id", required=False)
@click.option("--user", "user_id", help="Delete every chat of this user (with --before/--older-than: those).")
@_before_options
@click.option("--yes", is_flag=True, help="Do not ask for confirmation.")
def rm(
    chat_id: str | None,
    user_id: str | None,
    before: datetime | None,
    older_than: datetime | None,
    yes: bool,
) -> None:
    """Delete a chat with everything in it; or, with --user, every chat of a
    user; or, with --before or --older-than, the chats not updated since
    then (a retention policy, deleted a few hundred chats per transaction)."""
    before = _before(before, older_than)
    if (chat_id is None) == (user_id is None and before is None):
        raise click.UsageError("give either CHAT_ID, or --user and/or --before/--older-than")
    archive = _state().archive
    if chat_id is not None:
        archive.delete(chat_id)
        _stderr.print(literal(f"deleted chat {chat_id}"))
        return
    whose = "" if user_id is None else f" of user {user_id!r}"
    if before is not None:
        cutoff = require_moment(before, "before").astimezone(UTC)
        whose += f" last updated before {cutoff:%Y-%m-%d %H:%M:%S} UTC"
        delete = partial(archive.delete_older_than, cutoff, user_id=user_id)
    else:
        assert user_id is not None
        delete = partial(archive.delete_user, user_id)
    if not yes:
        found = archive.count_chats(user_id=user_id, until=before)
        if not found:
            _stderr.print(literal(f"no chats{whose}"))
            return
        click.confirm(printable(f"Delete {_chats(found)}{whose}?"), abort=True, err=True)
    _stderr.print(literal(f"deleted {_chats(delete())}{whose}"))


# -- analytics and search ----------------------------------------------------------

_STATS = {
    "day": "daily_usage",
    "model": "model_usage",
    "tool": "tool_usage",
    "user": "user_activity",
    "workflow": "workflow_usage",
    "feedback": "feedback_summary",
}


@main.command("stats")
@click.option(
    "--by", "by", type=click.Choice(list(_STATS)), default="day", show_default=True, help="Group by."
)
@click.option("--since", type=_moment, help="From this day or time (UTC if no offset), inclusive.")
@click.option("--until", type=_moment, help="Up to this day or time, exclusive.")
@click.option("--user", "user_id", help="Only this user's chats.")
@click.option("--model", help="Only chats with this chosen model.")
@click.option("--workflow", help="Only chats of this workflow (workflow.name).")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True
)
def stats(
    by: str,
    since: datetime | None,
    until: datetime | None,
    user_id: str | None,
    model: str | None,
    workflow: str | None,
    fmt: str,
) -> None:
    """Usage statistics: per day, model, tool, user, workflow, or feedback."""
    from . import analytics

    query = getattr(analytics, _STATS[by])
    rows = query(
        _state().archive,
        since=since,
        until=until,
        user_id=user_id,
        model=model,
        workflow=workflow,
    )
    if fmt == "table":
        _print_stats(by, [row.model_dump() for row in rows])
        return
    records = [row.model_dump(mode="json") for row in rows]
    if fmt == "json":
        _echo_json(records)
    else:
        _write_csv(records)


def _write_csv(records: list[dict[str, Any]]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    if records:
        writer.writerow(records[0])
    for record in records:
        writer.writerow(["" if value is None else value for value in record.values()])


def _echo_json(value: object) -> None:
    """``--json`` and ``--format json`` output: indented, the text exact (not ASCII-escaped)."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


_DAY = len("YYYY-MM-DD")


def _print_table(headers: tuple[str, ...], rows: list[tuple[object, ...]]) -> None:
    """A table of stored values, written so that no value is lost.

    In a narrow terminal text is folded rather than cut short (an id cut to
    "chat-1…" cannot be passed to 'show'), the widest columns first and the
    first one (the key) last; a number is never folded ("1.000" over two lines
    reads as "1.00" and "0"), nor the day of a time. When even that does not
    fit, the table is wider than the terminal rather than losing columns.
    Written to a file or a pipe (no terminal, no $COLUMNS), it has its natural
    width."""
    cells = [[printable(_cell(value)) for value in row] for row in rows]
    table = Table()
    natural: list[int] = []
    words: list[int] = []  # the longest word, the header's included
    whole: list[int] = []  # never narrower: a number, the day of a time
    for index, header in enumerate(headers):
        column = [row[index] for row in cells]
        natural.append(max(map(cell_len, [header, *column])))
        words.append(max(cell_len(word) for cell in [header, *column] for word in [*cell.split(), ""]))
        types = {type(row[index]) for row in rows} - {type(None)}
        numbers = bool(types) and types <= {int, float}
        whole.append(max(map(cell_len, column)) if numbers else _DAY if types == {datetime} else 0)
        table.add_column(literal(header), justify="right" if numbers else "left", overflow="fold")
    for row in cells:
        table.add_row(*(Text(cell) for cell in row))
    frame = 3 * len(headers) + 1  # a space each side of a cell, the borders
    if _stdout.is_terminal or "COLUMNS" in os.environ:
        widths = _fitted(natural, words, whole, _stdout.width - frame)
    else:
        widths = natural
    for shown, width in zip(table.columns, widths, strict=True):
        shown.width = width
    table.width = sum(widths) + frame
    _stdout.print(table)


def _fitted(natural: list[int], words: list[int], whole: list[int], room: int) -> list[int]:
    """Column widths that fit ``room`` if they can, from the ``natural`` ones.

    The widest columns give way first: the other columns until a word would
    be folded (but for words longer than a day, "2026-03-02"), then until
    they are 3 wide, and only then the first column (the key), to a day's
    width. None is made narrower than its ``whole``."""
    others = range(1, len(natural))
    stages = [
        (others, [min(word, _DAY) for word in words]),
        (others, [min(width, 3) for width in natural]),
        (range(len(natural)), [min(width, _DAY) for width in natural]),
    ]
    widths = list(natural)
    for columns, floors in stages:
        least = [max(pair) for pair in zip(floors, whole, strict=True)]
        while (excess := sum(widths) - room) > 0:
            shrinkable = [index for index in columns if widths[index] > least[index]]
            if not shrinkable:
                break
            widest = max(shrinkable, key=widths.__getitem__)
            next_widest = max((widths[index] for index in shrinkable if index != widest), default=0)
            target = max(least[widest], widths[widest] - excess, next_widest)
            widths[widest] = min(target, widths[widest] - 1)
    return widths


def _print_stats(by: str, records: list[dict[str, Any]]) -> None:
    if not records:
        _stdout.print("(no data)")
        return
    times = {key for record in records for key, value in record.items() if isinstance(value, datetime)}
    headers = tuple(f"{key} (UTC)" if key in times else key for key in records[0])
    _print_table(headers, [tuple(record.values()) for record in records])
    if by == "day":
        _print_daily_bars(records)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _print_daily_bars(records: list[dict[str, Any]]) -> None:
    per_day: dict[object, int] = {}
    for record in records:
        per_day[record["day"]] = per_day.get(record["day"], 0) + int(record["messages"])
    widest = max(per_day.values()) or 1
    _stdout.print("\nmessages per day")
    for day, messages in per_day.items():
        bar = "█" * max(1, round(40 * messages / widest))
        _stdout.print(f"{day} {bar} {messages}", markup=False)


@main.command("search")
@click.argument("query")
@click.option("--user", "user_id", help="Only this user's chats.")
@click.option("--role", help="Only messages with this role.")
@click.option("--model", help="Only chats (or messages) of this model.")
@click.option("--since", type=_moment, help="Only messages created from then on.")
@click.option("--limit", default=20, show_default=True, type=click.IntRange(min=1))
@click.option("--json", "as_json", is_flag=True, help="Print the hits as JSON.")
def search(
    query: str,
    user_id: str | None,
    role: str | None,
    model: str | None,
    since: datetime | None,
    limit: int,
    as_json: bool,
) -> None:
    """Full-text search over message text: words, "phrases", -word, or."""
    hits = _state().archive.search(query, user_id=user_id, role=role, model=model, since=since, limit=limit)
    if as_json:
        _echo_json([hit.model_dump(mode="json") for hit in hits])
        return
    if not hits:
        _stderr.print("no matches")
        return
    for hit in hits:
        header = literal(f"{hit.chat_id} [{hit.position}] {hit.role}", style="bold")
        header.append(f"  {hit.created_at:%Y-%m-%d %H:%M}  rank {hit.rank:.3f}", style="dim")
        _stdout.print(header)
        _stdout.print(_highlighted(hit.snippet))


def _highlighted(snippet: str) -> Text:
    text = Text("    ")
    for index, piece in enumerate(snippet.replace("»", "«").split("«")):
        text.append(printable(piece), style="bold yellow" if index % 2 else "")
    return text


# -- bench -----------------------------------------------------------------------


@main.command("bench")
@click.option(
    "--chats", default=2000, show_default=True, type=click.IntRange(min=1), help="Chats in the workload."
)
@click.option(
    "--messages", default=20, show_default=True, type=click.IntRange(min=2), help="Messages per chat."
)
@click.option("--seed", default=0, show_default=True, help="Seed of the synthetic workload.")
@click.option(
    "--runs", default=3, show_default=True, type=click.IntRange(min=1), help="Runs per figure (median)."
)
@click.option(
    "--keep",
    is_flag=True,
    help="Run in the --db database itself: its chats are deleted (asked first), the workload is left in it.",
)
@click.option("--yes", is_flag=True, help="Do not ask before --keep deletes the chats the database holds.")
@click.option("--analytics", is_flag=True, help="Also time the views, the README queries and searches.")
@click.option(
    "--streaming", is_flag=True, help="Also time concurrent streams and append_chunk early and late."
)
@click.option("--json", "as_json", is_flag=True, help="Print the figures as JSON.")
def bench(
    chats: int,
    messages: int,
    seed: int,
    runs: int,
    keep: bool,
    yes: bool,
    analytics: bool,
    streaming: bool,
    as_json: bool,
) -> None:
    """Measure ingest, reads, storage and memory against the database's own limits.

    Runs in a throwaway database created next to --db (dropped afterwards)
    unless --keep is given. Ratios compare figures measured in the same run.
    """
    from ._bench import run_bench

    if keep and not yes:
        _ask_if_chats_are_lost(_state().archive, "Delete the {chats} of {where} to run the benchmark in it?")

    progress = Progress(
        SpinnerColumn(), TextColumn("{task.description}"), BarColumn(), console=_stderr, transient=True
    )
    with progress:
        task = progress.add_task("bench", total=None)

        def report(phase: str, done: int, total: int) -> None:
            progress.update(task, description=phase, completed=done, total=total)

        result = run_bench(
            _state().url,
            chats=chats,
            messages=messages,
            seed=seed,
            runs=runs,
            keep=keep,
            analytics=analytics,
            streaming=streaming,
            progress=report,
        )
    if as_json:
        click.echo(json.dumps(result.as_dict(), indent=2))
        return
    _stdout.print(
        f"{result.chats} chats, {result.messages} messages, {result.tool_calls} tool calls; "
        f"median of {result.runs} runs; {result.database}",
        markup=False,
    )
    figures = Table("figure", "value")
    for name, value in result.figures.items():
        figures.add_row(name, "n/a" if value is None else f"{value:,.3f}" if value < 100 else f"{value:,.0f}")
    _stdout.print(figures)
    ratios = Table("ratio", "value")
    for name, value in result.ratios().items():
        ratios.add_row(name, "n/a" if value is None else f"{value:.2f}")
    _stdout.print(ratios)


# -- quickstart ------------------------------------------------------------------


@main.command("quickstart")
def quickstart() -> None:
    """Create the archive, import the bundled sample chats, list and show one."""
    archive = _state().archive
    _stderr.print(f"archive: {shown_url(archive.url)}", markup=False)
    archive.upgrade()
    samples = sorted(
        (
            entry
            for entry in resources.files("chatarchive").joinpath("samples").iterdir()
            if entry.name.endswith(".json")
        ),
        key=lambda entry: entry.name,
    )
    for sample in samples:
        archive.save(ChatDocument.parse(json.loads(sample.read_text(encoding="utf-8"))))
    _stderr.print(f"imported {len(samples)} sample chats\n")
    click.get_current_context().invoke(ls, user_id=None, limit=20)
    _stdout.print()
    _stdout.print(render_transcript(archive.get("seed-tool-calling")))
    _stdout.print()
    _stdout.print("Next: chatarchive show CHAT_ID, chatarchive export, chatarchive import FILE")
