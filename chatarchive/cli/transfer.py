"""``chatarchive import`` and ``export``: chats in and out as JSON, in every format."""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from datetime import datetime
from typing import Any, NoReturn

import click
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    TaskProgressColumn,
    TextColumn,
    TimeRemainingColumn,
)

from chatarchive import formats, importing
from chatarchive._api import ChatArchive
from chatarchive._document import ChatFilter
from chatarchive._exceptions import ChatArchiveError, ImportFailed
from chatarchive._jsonio import written
from chatarchive.formats import DATASET_FORMATS, EXPORT_FORMATS, IMPORT_FORMATS
from chatarchive.formats.finetune import Filters, Selection
from chatarchive.redaction import REDACTION_KEY_ENV, PatternRedactor

from .app import INTERRUPTED, archive, chat_filter_options, count_of_chats, fail, main, moment
from .rendering import literal, stderr

__all__ = ["export", "formats_", "import_"]


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
    type=click.IntRange(min=1, max=importing.MAX_BATCH_SIZE),
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
@click.option(
    "--redact",
    is_flag=True,
    help="Replace e-mail addresses, phone numbers, card numbers, IBANs and API keys before anything is "
    f"stored, with placeholders keyed by ${REDACTION_KEY_ENV} (stable across runs when it is set).",
)
def import_(
    paths: tuple[str, ...], strict: bool, bulk: bool, batch_size: int, writers: int, fmt: str, redact: bool
) -> None:
    """Import chats from JSON or JSON Lines files, directories and zip files
    ('-' reads standard input; names ending in .gz, .bz2 or .xz are
    decompressed). A directory or a zip (ChatGPT's and Claude.ai's data
    exports as they are downloaded) gives its conversations.json files
    (ChatGPT's numbered conversations-000.json... too) when it holds them, else
    every JSON and JSON Lines file it holds.

    A file may hold one record, a list of records (read one at a time, so
    memory does not grow with the file), JSON Lines of them, or records one
    after another (jq output); a record is a chat in any format 'chatarchive
    formats' lists: a chat document, an OpenAI message list, Responses API
    items or response, an Anthropic Messages request or response, Gemini
    contents, LangChain messages, a ChatGPT, Claude.ai or Open WebUI
    conversation, a Masterbrain ChatDoc, a Malevich message list, a
    ShareGPT record or a fine-tuning line. Streams (chat-completion chunks,
    Anthropic or Responses API events), one event a line, import as the message
    they amount to. Chats already stored with the same chat_id are replaced.
    Bad records are reported with file and line; the good ones are kept
    (unless --strict).
    """
    if writers > 1 and (strict or bulk):
        raise click.UsageError("--writers takes one transaction per batch: not with --strict or --bulk")
    target = archive()
    redactor = None
    if redact:
        key = os.environ.get(REDACTION_KEY_ENV)
        if not key:
            stderr().print(
                f"${REDACTION_KEY_ENV} is not set: the placeholders of this import will not match "
                "those of another"
            )
        redactor = PatternRedactor(key=key or None)
        target = ChatArchive(engine=target.engine, redactor=redactor)

    def report(where: str, reason: ChatArchiveError) -> None:
        stderr().print(literal(f"{where}: {reason}"))

    # The files' sizes, for the progress bar; a missing file is reported before anything is written.
    total = importing.input_size(paths)
    try:
        with _progress(total) as moved:
            done = importing.import_chats(
                target,
                paths,
                format=fmt,
                strict=strict,
                bulk=bulk,
                batch_size=batch_size,
                writers=writers,
                on_error=report,
                progress=moved,
            )
    except ImportFailed as exc:
        fail(f"{exc} (nothing imported)")
    except KeyboardInterrupt:
        if strict or bulk:
            stderr().print("interrupted: nothing imported (one transaction, rolled back)")
        else:
            stderr().print(
                "interrupted: the batches written until then are kept; importing the same input again "
                "replaces them and imports the rest"
            )
        _exit_interrupted()
    if done.duplicates:
        shown = "; ".join(
            f"{duplicate.chat_id!r} at {duplicate.first} and {duplicate.again}"
            for duplicate in done.duplicates[:3]
        )
        more = f"; and {len(done.duplicates) - 3} more" if len(done.duplicates) > 3 else ""
        stderr().print(
            literal(
                f"{len(done.duplicates)} records named a chat an earlier record of the input named, and "
                f"replaced it: {shown}{more}"
            )
        )
    for source in done.empty:
        stderr().print(literal(f"{source}: no records (the input is empty)"))
    failed = done.failed
    stderr().print(f"imported {count_of_chats(done.imported)}" + (f", {failed} failed" if failed else ""))
    if redactor is not None:
        counts = redactor.counts()
        found = ", ".join(f"{count} {kind}" for kind, count in counts.items()) if counts else "nothing"
        stderr().print(f"redacted {found}")
    if failed:
        sys.exit(1)


@contextmanager
def _progress(total: int | None) -> Iterator[Callable[[int, int], None]]:
    """A progress bar on standard error: of the bytes read when the input's
    size is known (files), with the time left; else a count."""
    columns: list[ProgressColumn] = [SpinnerColumn(), TextColumn("importing"), BarColumn()]
    if total is not None:
        columns += [TaskProgressColumn(), TimeRemainingColumn()]
    progress = Progress(
        *columns, TextColumn("{task.fields[records]} records"), console=stderr(), transient=True
    )
    with progress:
        task = progress.add_task("import", total=total, records=0)
        yield lambda records, position: progress.update(task, completed=position, records=records)


@main.command("formats")
def formats_() -> None:
    """The formats chatarchive imports and exports, and what each can do
    (record: the API method that appends a response; convert: to
    chat-completions messages)."""
    click.echo(formats.matrix_markdown(), nl=False)


@main.command("export")
@chat_filter_options
@click.option(
    "--format",
    "fmt",
    type=click.Choice(list({**EXPORT_FORMATS, **DATASET_FORMATS})),
    default="canonical",
    show_default=True,
    help="canonical: whole documents, every branch; chat-completions: each chat's active path as the "
    "messages OpenAI's API takes; openai-finetune: training lines; openai-preference, dpo: preference "
    "pairs of regenerated answers, one a line; the others: those formats ('chatarchive formats' lists them).",
)
@click.option(
    "--min-score",
    type=float,
    help="Datasets: chats whose mean feedback score (on the active path) is at least this.",
)
@click.option(
    "--created-since",
    type=moment,
    help="Datasets: only chats whose document was created from then on (UTC if no offset).",
)
@click.option(
    "--exclude-role", "exclude_roles", multiple=True, help="Datasets: leave out messages of this role."
)
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False, writable=True),
    help="File to write, whole or not at all; .gz, .bz2 or .xz compress it (default: stdout).",
)
def export(
    where: ChatFilter,
    fmt: str,
    min_score: float | None,
    created_since: datetime | None,
    exclude_roles: tuple[str, ...],
    output: str | None,
) -> None:
    """Write chats as JSON Lines, one chat per line, streamed, in chat_id order
    (--before or --older-than: what 'rm' with the same option would delete)."""
    if fmt not in DATASET_FORMATS:
        given = {"--min-score": min_score, "--created-since": created_since, "--exclude-role": exclude_roles}
        if misplaced := [name for name, value in given.items() if value not in (None, ())]:
            datasets = ", ".join(DATASET_FORMATS)
            raise click.UsageError(f"{', '.join(misplaced)}: only with a dataset --format ({datasets})")
    target = archive()
    documents = target.export(where)
    selection = Selection()
    if fmt in DATASET_FORMATS:
        filters = Filters(min_score=min_score, since=created_since, exclude_roles=exclude_roles)
        lines: Iterator[Any] = DATASET_FORMATS[fmt](documents, filters, selection)
    else:
        exporter = EXPORT_FORMATS[fmt]  # the archive's own documents: no need to validate them again
        lines = (exporter(document) for document in documents)
    written_lines = 0
    with nullcontext(sys.stdout) if output is None else written(output) as stream:
        for line in lines:
            stream.write(json.dumps(line, ensure_ascii=False) + "\n")
            written_lines += 1
    skipped = ", ".join(f"{count} ({reason})" for reason, count in sorted(selection.skipped.items()))
    what = count_of_chats(written_lines)  # one line a chat
    if fmt in ("openai-preference", "dpo"):
        what = f"{written_lines} preference pair" + ("" if written_lines == 1 else "s")
    stderr().print(f"wrote {what}" + (f"; skipped {skipped}" if skipped else ""))


# -- looking around --------------------------------------------------------------


def _exit_interrupted() -> NoReturn:
    """End the interrupted import with status 130. When the thread that reads
    the input still waits on it (an open pipe with nothing more yet), end the
    process at once: the interpreter's shutdown would close that input under
    the thread and abort ("could not acquire lock ... at interpreter
    shutdown, possibly due to daemon threads", SIGABRT). Nothing is left to
    clean up by then: the import's transaction has ended."""
    if importing.still_reading():
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(INTERRUPTED)
    sys.exit(INTERRUPTED)
