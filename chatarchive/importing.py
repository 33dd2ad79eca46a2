"""Importing chats from files: read them, detect each record's format, convert
it, save the chats in batches, and say where every bad record is.

``chatarchive import`` is this module on a terminal; applications call it the
same way::

    >>> import json, pathlib, tempfile
    >>> from chatarchive import ChatArchive
    >>> from chatarchive.importing import import_chats
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> source = folder / "chats.jsonl"
    >>> lines = [
    ...     [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello!"}],
    ...     {"not": "a chat"},
    ... ]
    >>> _ = source.write_text("\\n".join(json.dumps(line) for line in lines))
    >>> def bad(place, error):
    ...     print(pathlib.Path(place).name, type(error).__name__)
    >>> with ChatArchive(f"sqlite:///{folder / 'archive.db'}") as archive:
    ...     archive.upgrade()
    ...     report = import_chats(archive, [source], on_error=bad)
    chats.jsonl:2 InvalidDocument
    >>> report.imported, report.failed, report.records
    (1, 1, 2)

A file holds one record, a list of records (read one at a time, so that
memory does not grow with the file), JSON Lines of them, or records one after
another; ``.gz``, ``.bz2`` and ``.xz`` files are decompressed, and ``-`` is
standard input. A record is a chat in any format of
:mod:`chatarchive.formats`; the events of a stream (chat-completion chunks,
Anthropic or Responses API events), one a line, import as the message they
amount to. A chat already stored with the same chat id is replaced, and so is
one an earlier record of the same import named (the report lists those).
"""

from __future__ import annotations

import base64
import errno
import mimetypes
import os
import re
import sys
import threading
import zipfile
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field, replace
from functools import partial
from itertools import count
from typing import Any, BinaryIO, cast

from chatarchive import formats
from chatarchive._api import ChatArchive
from chatarchive._arguments import require_flag, require_text
from chatarchive._document import DEFAULT_LIMITS, ChatDocument, Limits
from chatarchive._exceptions import ChatArchiveError, ImportFailed, InvalidArgument, InvalidDocument
from chatarchive._jsonio import READ_ERRORS, Record, open_text, read_records
from chatarchive._repository.batches import (
    MAX_BATCH_SIZE,
    PREPARING_THREAD,
    check_save_many,
    documents_in_flight,
)

__all__ = [
    "MAX_BATCH_SIZE",
    "Duplicate",
    "ImportReport",
    "Record",
    "document_of",
    "files_of",
    "import_chats",
    "input_size",
    "records",
    "still_reading",
]

#: How many bad records an :class:`ImportReport` keeps (``on_error`` is told of every one).
KEPT_ERRORS = 100

#: ``on_error(place, error)``: a record that could not be imported, where it is
#: (``file:line``, and ``.[i]`` for an item of a list) and why.
OnImportError = Callable[[str, ChatArchiveError], None]


@dataclass(frozen=True)
class Duplicate:
    """A record that named a chat an earlier record of the same import named,
    and so replaced it."""

    chat_id: str
    first: str
    again: str


@dataclass
class ImportReport:
    """What an import did."""

    #: Records read (a stream's events count as one record).
    records: int = 0
    #: Chats saved.
    imported: int = 0
    #: Records not imported: unreadable, not a chat, invalid, or failing to save.
    failed: int = 0
    #: The first :data:`KEPT_ERRORS` of them, with their places.
    errors: list[tuple[str, ChatArchiveError]] = field(default_factory=list)
    #: Records that replaced a chat an earlier record of the input named.
    duplicates: list[Duplicate] = field(default_factory=list)
    #: The sources that held no record at all (an empty file).
    empty: list[str] = field(default_factory=list)


def records(
    sources: Sequence[str | os.PathLike[str]],
    moved: Callable[[int, int], None] | None = None,
    *,
    empty: list[str] | None = None,
    limits: Limits | None = None,
) -> Iterator[Record]:
    """The records of every source, in order; ``moved(records, bytes)`` is
    told, after each, how many there were so far and how many bytes of the
    files are read; ``empty`` is given the files that held no record. A
    directory or a zip file gives the records of the files it holds (see
    :func:`files_of`). A file that cannot be read, or is not UTF-8, gives a
    record with its ``error``. A string longer than the largest message
    ``limits`` allows is refused while it is read (a record with its
    ``error``), so that memory stays bounded whatever the files hold."""
    read, done = count(1), 0
    # A string's JSON text takes at most six characters a byte of its UTF-8 (an escape: \u0000).
    longest = _ESCAPED * (limits or DEFAULT_LIMITS).max_message_bytes
    for path in sources:
        for source, opener, sized in _files(path):
            held = 0
            with opener() as raw, open_text(raw, source) as stream:
                try:
                    for record in read_records(stream, source, longest_string=longest):
                        held += 1
                        if moved is not None:
                            moved(next(read), done + raw.tell() if sized else 0)
                        yield record
                        del record  # not held while the next one is read
                except UnicodeDecodeError as exc:
                    held += 1
                    yield Record(source, 0, error=f"not UTF-8 text ({exc.reason} at byte {exc.start})")
                except READ_ERRORS as exc:
                    held += 1
                    yield Record(source, 0, error=f"cannot be read: {exc}")
                if sized:
                    done += raw.tell()
            if not held and empty is not None:
                empty.append(source)


#: The most characters of JSON text one byte of a string takes (``\u0000``).
_ESCAPED = 6

#: What the files of records are called (each also compressed: ``.gz``, ``.bz2``, ``.xz``).
_RECORD_FILES = re.compile(r".*\.(json|jsonl|ndjson)(\.(gz|bz2|xz))?", re.IGNORECASE)
#: The conversation files of ChatGPT's and Claude.ai's exports: ``conversations.json``,
#: or ChatGPT's numbered parts of it (``conversations-000.json``...).
_CONVERSATION_FILES = re.compile(r"conversations([-_]\d+)?\.json", re.IGNORECASE)


def files_of(names: Iterable[str]) -> list[str]:
    """Which of a directory's or a zip's files an import reads: the
    conversation files of a ChatGPT or Claude.ai export when it holds them
    (``conversations.json``, ``conversations-000.json``...; the export's other
    files, ``user.json``, ``message_feedback.json``..., hold no chats), else
    every JSON or JSON Lines file; in the order of their names, numbers
    counted as numbers.

    Examples:
        >>> files_of(["user.json", "conversations-10.json", "conversations-9.json", "chat.html"])
        ['conversations-9.json', 'conversations-10.json']
        >>> files_of(["b.jsonl", "a.json.gz", "notes.txt"])
        ['a.json.gz', 'b.jsonl']
    """
    found = sorted((name for name in names if _RECORD_FILES.fullmatch(name)), key=_natural)
    conversations = [
        name for name in found if _CONVERSATION_FILES.fullmatch(name.replace("\\", "/").rsplit("/")[-1])
    ]
    return conversations or found


def _base_name(name: str) -> str:
    """A file's name without its folders (``/`` in a zip, the system's own on disk)."""
    return name.replace(os.sep, "/").rsplit("/", 1)[-1]


def _natural(name: str) -> list[Any]:
    return [int(piece) if piece.isdigit() else piece.lower() for piece in re.split(r"(\d+)", name)]


Opener = Callable[[], AbstractContextManager[BinaryIO]]


def _files(path: str | os.PathLike[str]) -> Iterator[tuple[str, Opener, bool]]:
    """The files ``path`` names: each one's name in the records' places, how
    to open it, and whether its bytes count towards the input's size."""
    name = os.fspath(path)
    if name == "-":
        yield "<stdin>", lambda: nullcontext(_standard_input()), False
    elif os.path.isdir(name):
        inside = {
            os.path.relpath(os.path.join(folder, file), name): os.path.join(folder, file)
            for folder, _, files in os.walk(name)
            for file in files
        }
        for relative in files_of(inside):
            full = inside[relative]
            yield full, partial(_file, full), True
    elif zipfile.is_zipfile(name):
        with zipfile.ZipFile(name) as archive:
            members = files_of(info.filename for info in archive.infolist() if not info.is_dir())
        for member in members:
            yield f"{name}/{member}", partial(_member, name, member), True
    else:
        yield name, partial(_file, name), True


def _file(path: str) -> BinaryIO:
    return open(path, "rb")


@contextmanager
def _member(zip_path: str, member: str) -> Iterator[BinaryIO]:
    with zipfile.ZipFile(zip_path) as archive, archive.open(member) as raw:
        yield cast(BinaryIO, raw)


def input_size(sources: Sequence[str | os.PathLike[str]]) -> int | None:
    """The bytes of the sources' files (of the files a directory or a zip
    holds that an import reads, uncompressed in a zip), for a progress bar;
    ``None`` when one is standard input. A missing file raises
    ``FileNotFoundError`` here, before anything is read or written."""
    total = 0
    stdin = False
    for path in sources:
        name = os.fspath(path)
        if name == "-":
            stdin = True
        elif os.path.isdir(name):
            total += sum(os.stat(full).st_size for full, _, sized in _files(name) if sized)
        elif zipfile.is_zipfile(name):
            with zipfile.ZipFile(name) as archive:
                chosen = set(files_of(info.filename for info in archive.infolist()))
                total += sum(info.file_size for info in archive.infolist() if info.filename in chosen)
        else:
            total += os.stat(name).st_size
    return None if stdin else total


#: What a ChatGPT part points at its file with: ``file-service://file-...`` or ``sediment://file_...``.
_ASSET_POINTER = re.compile(r"(?:file-service|sediment)://(file[-_][A-Za-z0-9]+)")
#: The asset id an export's file is named for: ``file-ID``, then the end, ``-`` or ``.``.
_ASSET_FILE = re.compile(r"(file[-_][A-Za-z0-9]+)(?:$|[-.])")


@dataclass
class _Files:
    """The files beside the records of a zip or a directory (an export's
    uploads and generated images): their base names and how to read each."""

    #: By the asset id a file is named for (``file-ID``, alone or before ``-`` or ``.``).
    openers: dict[str, tuple[str, Opener]] = field(default_factory=dict)

    def add(self, name: str, opener: Opener) -> None:
        base = _base_name(name)
        named = _ASSET_FILE.match(base)
        if named is not None:
            self.openers.setdefault(named.group(1), (base, opener))

    def find(self, asset: str) -> tuple[str, Opener] | None:
        """The file of a ChatGPT asset id."""
        return self.openers.get(asset)


def _files_beside(sources: Sequence[str | os.PathLike[str]]) -> _Files:
    """The files that the zips and directories among ``sources`` hold beside their records."""
    found = _Files()
    for path in sources:
        name = os.fspath(path)
        if name == "-":
            continue
        if os.path.isdir(name):
            for folder, _, files in os.walk(name):
                for file in files:
                    full = os.path.join(folder, file)
                    if not _RECORD_FILES.fullmatch(file):
                        found.add(full, partial(_file, full))
        elif zipfile.is_zipfile(name):
            with zipfile.ZipFile(name) as archive:
                for info in archive.infolist():
                    if not info.is_dir() and not _RECORD_FILES.fullmatch(_base_name(info.filename)):
                        found.add(info.filename, partial(_member, name, info.filename))
    return found


def _with_export_files(document: ChatDocument, files: _Files, *, most: int) -> ChatDocument:
    """``document`` (a ChatGPT conversation) with the file that each of its
    kept parts points at (an image, an upload) added to the part as a file
    (``file: {filename, file_data}``, a data URL), when the export holds it
    and it is at most ``most`` bytes; the ChatGPT export of the chat is
    unchanged (it gives back the part as it came)."""
    if not files.openers:
        return document
    changed = False
    messages = []
    for message in document.messages:
        content = message.content
        if isinstance(content, list) and any(part.type == "chatgpt_part" for part in content):
            parts = [_with_file(part, files, most) for part in content]
            if any(new is not old for new, old in zip(parts, content, strict=True)):
                message = message.model_copy(update={"content": parts})
                changed = True
        messages.append(message)
    return document.model_copy(update={"messages": messages}) if changed else document


def _with_file(part: Any, files: _Files, most: int) -> Any:
    kept = (part.model_extra or {}).get("part")
    pointer = kept.get("asset_pointer") if isinstance(kept, dict) else None
    matched = _ASSET_POINTER.fullmatch(pointer) if isinstance(pointer, str) else None
    if part.type != "chatgpt_part" or matched is None or part.file is not None:
        return part
    found = files.find(matched.group(1))
    if found is None:
        return part
    name, opener = found
    with opener() as raw:
        data = raw.read(most + 1)
    if len(data) > most:
        return part  # larger than a message may hold: the part stays a pointer
    media_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    url = f"data:{media_type};base64,{base64.b64encode(data).decode('ascii')}"
    return part.model_copy(update={"file": {"filename": name, "file_data": url}})


def document_of(record: Record, format: str = "auto") -> ChatDocument | Mapping[str, Any]:
    """The chat a record holds: a canonical document that names its chat as it
    is, for ``save_many`` to validate (once: a ``ChatDocument`` is validated
    again where it is saved), any other converted to one.

    Raises:
        InvalidDocument: the record could not be read, or is not a chat.
    """
    if record.error is not None:
        raise InvalidDocument(record.error)
    name = formats.detect(record.value) if format == "auto" else format
    if name == "canonical" and isinstance(record.value, Mapping) and "chat_id" in record.value:
        return record.value
    return formats.to_document(record.value, name)


def import_chats(
    archive: ChatArchive,
    sources: Sequence[str | os.PathLike[str]],
    *,
    format: str = "auto",
    strict: bool = False,
    bulk: bool = False,
    batch_size: int = 250,
    writers: int = 1,
    on_error: OnImportError | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> ImportReport:
    """Import the chats of ``sources`` (paths; ``-`` is standard input) into
    ``archive``. From a zip or a directory of a ChatGPT export, the files
    that conversations' parts point at (uploads, generated images) are added
    to those parts as files (``file: {filename, file_data}``, data URLs),
    stored once when the archive stores attachments once; the ChatGPT export
    of the chats is unchanged.

    Args:
        format: the records' format, or ``auto`` to detect each record's.
        strict: all or nothing: one transaction, which the first bad record
            ends (``ImportFailed``, nothing imported).
        bulk: bulk-load mode (see ``ChatArchive.save_many``).
        batch_size: chats per batch.
        writers: connections writing at once (not with ``strict`` or ``bulk``).
        on_error: told of every record not imported, with its place, while
            the import goes on.
        progress: told ``(records, bytes)`` after each record read.

    Raises:
        ImportFailed: in ``strict`` mode, at the first record not imported.
        InvalidArgument: for an unknown format or arguments that conflict.
        OSError: a source that cannot be opened (checked before any write).
    """
    if require_text(format, "format") != "auto" and format not in formats.IMPORT_FORMATS:
        raise InvalidArgument(f"unknown import format {format!r}", argument="format")
    require_flag(strict, "strict")
    check_save_many([], batch_size, bulk=bulk, on_error=on_error, writers=writers)
    if writers > 1 and strict:
        raise InvalidArgument("a strict import is one transaction: it has one writer", argument="writers")
    input_size(sources)  # a missing file is reported before anything is written
    report = ImportReport()
    # Where the documents in flight came from, by their index: a failed write
    # names one of them. Added to by the thread that reads the input, looked up
    # (a single dict.get) by the writers.
    in_flight: dict[int, str] = {}
    remembered = documents_in_flight(batch_size)

    def failed(place: str, error: ChatArchiveError) -> None:
        if strict:
            raise ImportFailed(place, error)
        report.failed += 1
        if len(report.errors) < KEPT_ERRORS:
            report.errors.append((place, error))
        if on_error is not None:
            on_error(place, error)

    # The files an export holds beside its conversations, and the largest one
    # a message can take (as base64, beside the rest of the message).
    beside = _files_beside(sources)
    most_file_bytes = (archive._limits or DEFAULT_LIMITS).max_message_bytes // 2

    # Where each chat id was first seen, to report records that name a chat
    # again: ids only, not documents.
    first_seen: dict[str, str] = {}

    def documents() -> Iterator[ChatDocument | Mapping[str, Any]]:
        positions = count()
        streamed = formats.gather_streams(
            records(sources, progress, empty=report.empty, limits=archive._limits),
            lambda record: None if record.error is not None else record.value,
            lambda first, events: replace(first, value=events),
        )
        for record in streamed:
            report.records += 1
            where = record.where
            try:
                document = document_of(record, format)
                if isinstance(document, ChatDocument):
                    document = _with_export_files(document, beside, most=most_file_bytes)
            except ChatArchiveError as exc:
                failed(where, exc)
                continue
            finally:
                del record  # its parsed JSON goes once converted: memory is bounded by bytes
            chat_id = document.chat_id if isinstance(document, ChatDocument) else document.get("chat_id")
            if isinstance(chat_id, str):
                if chat_id in first_seen:
                    report.duplicates.append(Duplicate(chat_id, first_seen[chat_id], where))
                else:
                    first_seen[chat_id] = where
            in_flight[next(positions)] = where
            if len(in_flight) > remembered:
                del in_flight[next(iter(in_flight))]
            yield document
            del document

    def write_failed(index: int, error: ChatArchiveError) -> None:
        failed(in_flight.get(index, "?"), error)

    if strict:
        with archive.transaction() as repository:
            report.imported = repository.save_many(
                documents(), batch_size=batch_size, bulk=bulk, on_error=write_failed
            )
    else:
        report.imported = archive.save_many(
            documents(), batch_size=batch_size, bulk=bulk, on_error=write_failed, writers=writers
        )
    return report


def still_reading() -> bool:
    """Whether a thread of an import still reads its input (an open pipe with
    nothing more yet, after the import was stopped): a process that ends then
    must end at once (``os._exit``), as the interpreter's shutdown would close
    the input under that thread and abort."""
    return any(thread.name == PREPARING_THREAD and thread.is_alive() for thread in threading.enumerate())


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
