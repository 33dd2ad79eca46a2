"""``chatarchive import`` and ``export``: chats in and out as JSON, in every format."""

from __future__ import annotations

import errno
import json
import os
import sys
import threading
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from datetime import datetime
from itertools import count
from typing import Any, BinaryIO, NoReturn

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

from chatarchive import formats
from chatarchive._document import ChatDocument, ChatFilter
from chatarchive._exceptions import ChatArchiveError, InvalidDocument
from chatarchive._jsonio import READ_ERRORS, Record, open_text, read_records, written
from chatarchive._repository.batches import MAX_BATCH_SIZE, PREPARING_THREAD, documents_in_flight
from chatarchive.formats import DATASET_FORMATS, EXPORT_FORMATS, IMPORT_FORMATS
from chatarchive.formats.finetune import Filters, Selection

from .app import INTERRUPTED, archive, chat_filter_options, count_of_chats, fail, main, moment
from .rendering import literal, stderr

__all__ = ["export", "formats_", "import_", "records"]


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
    after another (jq output); a record is a chat in any format 'chatarchive
    formats' lists: a chat document, an OpenAI message list, Responses API
    items or response, an Anthropic Messages request or response, Gemini
    contents, LangChain messages, a ChatGPT, Claude.ai or Open WebUI
    conversation (from an export's zip: unzip -p export.zip conversations.json
    | chatarchive import -), a Masterbrain ChatDoc, a Malevich message list, a
    ShareGPT record or a fine-tuning line. Streams (chat-completion chunks,
    Anthropic or Responses API events), one event a line, import as the message
    they amount to. Chats already stored with the same chat_id are replaced.
    Bad records are reported with file and line; the good ones are kept
    (unless --strict).
    """
    if writers > 1 and (strict or bulk):
        raise click.UsageError("--writers takes one transaction per batch: not with --strict or --bulk")
    target = archive()
    failed = 0
    # Where the documents in flight came from, by their index: a failed write
    # names one of them. Added to by the thread that reads the input, looked up
    # (a single dict.get) by the writers.
    in_flight: dict[int, str] = {}
    remembered = documents_in_flight(batch_size)

    def report(where: str, reason: object) -> None:
        nonlocal failed
        if strict:
            fail(f"{where}: {reason} (nothing imported)")
        failed += 1
        stderr().print(literal(f"{where}: {reason}"))

    def on_error(index: int, error: ChatArchiveError) -> None:
        report(in_flight.get(index, "?"), error)

    # Where each chat id was first seen, to report records that name a chat again
    # (the later one replaces the earlier): ids only, not documents.
    first_seen: dict[str, str] = {}
    duplicates: list[tuple[str, str, str]] = []

    def documents(moved: Callable[[int, int], None]) -> Iterator[ChatDocument | Mapping[str, Any]]:
        positions = count()
        streamed = formats.gather_streams(
            records(paths, moved),
            lambda record: None if record.error is not None else record.value,
            lambda first, events: replace(first, value=events),
        )
        for record in streamed:
            where = record.where
            try:
                document = _document(record, fmt)
            except ChatArchiveError as exc:
                report(where, exc)
                continue
            finally:
                del record  # its parsed JSON goes once converted: memory is bounded by bytes
            chat_id = document.chat_id if isinstance(document, ChatDocument) else document.get("chat_id")
            if isinstance(chat_id, str):
                if chat_id in first_seen:
                    duplicates.append((chat_id, first_seen[chat_id], where))
                else:
                    first_seen[chat_id] = where
            in_flight[next(positions)] = where
            if len(in_flight) > remembered:
                del in_flight[next(iter(in_flight))]
            yield document
            del document

    # The files' sizes, for the progress bar; a missing file is reported before anything is written.
    total = None if "-" in paths else sum(os.stat(path).st_size for path in paths)
    try:
        with _progress(total) as moved:
            if strict:
                with target.transaction() as repository:
                    imported = repository.save_many(
                        documents(moved), batch_size=batch_size, bulk=bulk, on_error=on_error
                    )
            else:
                imported = target.save_many(
                    documents(moved), batch_size=batch_size, bulk=bulk, on_error=on_error, writers=writers
                )
    except KeyboardInterrupt:
        if strict or bulk:
            stderr().print("interrupted: nothing imported (one transaction, rolled back)")
        else:
            stderr().print(
                "interrupted: the batches written until then are kept; importing the same input again "
                "replaces them and imports the rest"
            )
        _exit_interrupted()
    if duplicates:
        shown = "; ".join(f"{chat_id!r} at {first} and {again}" for chat_id, first, again in duplicates[:3])
        more = f"; and {len(duplicates) - 3} more" if len(duplicates) > 3 else ""
        stderr().print(
            literal(
                f"{len(duplicates)} records named a chat an earlier record of the input named, and replaced "
                f"it: {shown}{more}"
            )
        )
    stderr().print(f"imported {count_of_chats(imported)}" + (f", {failed} failed" if failed else ""))
    if failed:
        sys.exit(1)


def records(paths: tuple[str, ...], moved: Callable[[int, int], None]) -> Iterator[Record]:
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
                    del record  # not held while the next one is read
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
        raise InvalidDocument(record.error)
    name = formats.detect(record.value) if fmt == "auto" else fmt
    if name == "canonical" and isinstance(record.value, Mapping) and "chat_id" in record.value:
        return record.value
    return formats.to_document(record.value, name)


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
    if any(thread.name == PREPARING_THREAD and thread.is_alive() for thread in threading.enumerate()):
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(INTERRUPTED)
    sys.exit(INTERRUPTED)
