"""The ``chatarchive`` command group: its archive, its errors, and the options
several commands share.

Exit codes: 0 success, 1 a user-facing error (one line on stderr, no
traceback), 2 a usage error, 130 an import stopped by Ctrl-C.
"""

from __future__ import annotations

import codecs
import functools
import io
import os
import sys
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any, NoReturn

import click

from chatarchive._api import ChatArchive
from chatarchive._document import ChatFilter
from chatarchive._engine import DEFAULT_URL, URL_ENV, in_memory, shown_url
from chatarchive._exceptions import ChatArchiveError, InvalidArgument
from chatarchive._migrations import stored_chats
from chatarchive._terms import TERMS_IN_C
from chatarchive.encryption import keys_from_environment

from .rendering import printable

__all__ = [
    "INTERRUPTED",
    "CommandGroup",
    "archive",
    "ask_if_chats_are_lost",
    "before_options",
    "chat_filter_options",
    "count_of_chats",
    "database_option",
    "fail",
    "main",
    "moment",
    "until_of",
]

#: A day, or a time of day (UTC if it has no offset), as the options take it.
moment = click.DateTime(formats=["%Y-%m-%d", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%dT%H:%M:%S%z"])
#: The exit status of a command stopped by Ctrl-C (128 + SIGINT), as shells report it.
INTERRUPTED = 130
_AGE_UNITS = {"h": "hours", "d": "days", "w": "weeks"}
#: Commands that do all their work in one process, and so may use an in-memory database.
_IN_MEMORY = ("quickstart",)


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


def before_options(command: Callable[..., None]) -> Callable[..., None]:
    """``--before D`` and ``--older-than AGE``: read them with ``until_of``."""
    command = click.option(
        "--older-than",
        metavar="AGE",
        callback=_ago,
        help="Chats last updated more than AGE ago: 90d, 12h, 4w.",
    )(command)
    return click.option(
        "--before", type=moment, help="Chats last updated before this day or time (UTC if no offset)."
    )(command)


def chat_filter_options(command: Callable[..., None]) -> Callable[..., None]:
    """The chat filters of ``ls`` and ``export``, given to the command as one
    ``ChatFilter``, ``where``."""

    @functools.wraps(command)
    def filtered(
        *,
        user_id: str | None,
        model: str | None,
        tag: str | None,
        since: datetime | None,
        before: datetime | None,
        older_than: datetime | None,
        **options: Any,
    ) -> None:
        until = until_of(before, older_than)
        command(where=ChatFilter(user_id=user_id, model=model, tag=tag, since=since, until=until), **options)

    decorated = before_options(filtered)
    for option in (
        click.option(
            "--since", type=moment, help="Chats last updated from this day or time on (UTC if no offset)."
        ),
        click.option("--tag", help="Only chats with this tag."),
        click.option("--model", help="Only chats with this chosen model."),
        click.option("--user", "user_id", help="Only this user's chats."),
    ):
        decorated = option(decorated)
    return decorated


def until_of(before: datetime | None, older_than: datetime | None) -> datetime | None:
    """The moment ``--before`` or ``--older-than`` gives (one of them at most)."""
    if before is not None and older_than is not None:
        raise click.UsageError("give --before or --older-than, not both")
    return before or older_than


def count_of_chats(number: int) -> str:
    """``1 chat``, ``1,234 chats``: how many chats a command read, wrote or deleted."""
    return f"{number:,} chat{'s' if number != 1 else ''}"


def ask_if_chats_are_lost(target: ChatArchive, question: str) -> None:
    """Ask ``question`` (``{chats}``: how many, ``{where}``: the database, its
    password hidden) before a command loses the chats the archive holds; none,
    no question. No answer (no terminal) aborts."""
    stored = stored_chats(target.engine)
    if stored:
        asked = question.format(chats=count_of_chats(stored), where=shown_url(target.url))
        click.confirm(printable(asked), abort=True, err=True)


def _write_utf8() -> None:
    """Standard output and error write UTF-8 whatever the locale's encoding (a
    Windows pipe's is the ANSI code page): what ``export`` writes is JSON Lines,
    which is UTF-8, and a stored character that encoding lacks crashed the
    command with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and codecs.lookup(stream.encoding).name != "utf-8":
            stream.reconfigure(encoding="utf-8")


class CommandGroup(click.Group):
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
    """The command's archive, opened when a command first asks for it."""

    def __init__(self, url: str | None) -> None:
        self.url = url
        self._archive: ChatArchive | None = None

    def archive(self) -> ChatArchive:
        if self._archive is None:
            try:
                keys = keys_from_environment()
            except InvalidArgument as exc:
                fail(str(exc))
            archive = ChatArchive(self.url, keys=keys)
            command = click.get_current_context()
            # Each command is a process of its own: what one wrote, the next would not see.
            # 'quickstart' does all its work in one; '--sql' only prints a migration.
            if (
                in_memory(archive.url)
                and command.info_name not in _IN_MEMORY
                and not command.params.get("sql")
            ):
                archive.close()
                fail(
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


def archive() -> ChatArchive:
    """The archive the command works on (``--db``)."""
    return _state().archive()


def database_option() -> str | None:
    """The URL ``--db`` gave, if any."""
    return _state().url


def fail(message: str) -> NoReturn:
    """End the command with ``message`` on standard error and exit status 1."""
    raise click.ClickException(printable(message))


@click.group(cls=CommandGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--db",
    "url",
    metavar="URL",
    help=f"Database URL (default: ${URL_ENV}, else {DEFAULT_URL}).",
)
@click.version_option(
    package_name="chatarchive",
    # Whether the tokenizer in C was compiled when the package was installed.
    message=f"%(prog)s, version %(version)s (search terms found in {'C' if TERMS_IN_C else 'Python'})",
)
@click.pass_context
def main(ctx: click.Context, url: str | None) -> None:
    """Keep LLM chat conversations in a normalized database, losslessly."""
    state = _State(url)
    ctx.obj = state
    ctx.call_on_close(state.close)
