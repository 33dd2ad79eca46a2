"""Chat documents in JSON and JSONL files: reading them record by record,
and writing files that appear only whole.

A file may hold one document, a list of documents, a bare OpenAI message list
(one chat), JSON Lines of any of these, or JSON values one after another (the
output of ``jq``). Every record carries the file and line it starts on, so
that a bad one can be reported precisely while the good ones are kept.

Nothing is read whole: a list of documents (ChatGPT's ``conversations.json``,
one line of hundreds of megabytes) gives its documents one at a time, so
memory holds one document and a window of the text, whatever the file's size.

Files whose names end in ``.gz``, ``.bz2`` or ``.xz`` are read and written
compressed that way.
"""

from __future__ import annotations

import bz2
import gzip
import io
import json
import lzma
import os
import re
import sys
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from itertools import count
from pathlib import Path
from typing import IO, Any, BinaryIO, Literal, cast

__all__ = ["READ_ERRORS", "Record", "is_message_list", "open_text", "read_records", "written"]

_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonlines")
_COMPRESSED = (".gz", ".bz2", ".xz")
#: What reading a compressed file may raise when its content is not what its name says, or is cut short.
READ_ERRORS = (OSError, EOFError, lzma.LZMAError)
_BOM = "\ufeff"
_VALUE = re.compile(r"[^ \t\n\r]")  # where the next JSON token starts
_LINE_REST = re.compile(r"[^ \t\r]")  # what follows a value on its line
_NEWLINE = re.compile("\n")
_READ = 1 << 16  # characters to add at least when a value runs past what is read
_PIECE = 1 << 20  # a line is read in pieces of at most this many characters
# A value that fails this close to the end of what is read may only be cut short
# (json reports a cut token where the token starts; no token is longer than this).
_TOKEN = 16
_decoder = json.JSONDecoder()


def _too_long_a_number() -> str:
    """Why json raised a ValueError that is not a JSONDecodeError: an integer of
    more digits than Python converts (``sys.get_int_max_str_digits()``)."""
    return f"integer of more than {sys.get_int_max_str_digits()} digits"


@dataclass(frozen=True)
class Record:
    """One JSON value read from ``source`` at ``line`` (``index``: the
    item of a list it is), or the reason it could not be read."""

    source: str
    line: int
    value: Any = None
    error: str | None = None
    index: int | None = None

    @property
    def where(self) -> str:
        """``file:line``, and for a list's item its path as jq writes it
        (``conversations.json:1 .[57]``): a list on one line has no other name."""
        return f"{self.source}:{self.line}" + ("" if self.index is None else f" .[{self.index}]")


def is_message_list(value: object) -> bool:
    """A bare OpenAI message list: objects with a ``role`` and no ``messages``
    (and that are not API responses, which have a role too: a list of
    Anthropic responses is a list of records)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) for item in value)
        and "role" in value[0]
        and not any(
            "messages" in item or (item.get("type") == "message" and "stop_reason" in item) for item in value
        )
    )


def read_records(stream: IO[str], source: str, *, longest_string: int | None = None) -> Iterator[Record]:
    """The records in one file (``stream`` opened as text). A byte order mark
    at the start is skipped: Windows tools write one, and JSON's RFC 8259 lets
    readers ignore it.

    A list that is not one chat's messages gives its items, one at a time. The
    file is JSON Lines if its name says so or if its first value fills its line
    and another line follows: then it is read a line at a time, a broken line
    is reported and the next ones are read on (lines end at ``\n`` only, as JSON
    text may hold U+2028 and other characters that ``str.splitlines``
    breaks lines at). Otherwise values are read one after another, and reading
    stops where the text breaks.

    ``longest_string``: the most characters a JSON string may take as text
    (its escapes included); a longer one is refused as it is read, so that
    memory stays bounded whatever the file holds (a JSON line with one is
    refused, and the next lines are read; elsewhere reading stops there)."""
    if _uncompressed_name(source).endswith(_JSONL_SUFFIXES):
        yield from _json_lines(_without_bom(_lines(stream, longest_string)), source, first_line=1)
        return
    text = _Text(stream, longest_string)
    first = True
    while text.next_char():
        start = text.line()
        try:
            yield from _value_records(text, source)
        except _Broken as broken:
            yield Record(source, broken.line, error=f"invalid JSON: {broken.reason} (column {broken.column})")
            if first and broken.line == start:  # a broken first line of JSON Lines
                yield from _json_lines(text.following_lines(), source, first_line=start + 1)
            return
        if first and text.line() == start:  # a one-line value: what follows is JSON Lines
            yield from _json_lines(text.following_lines(), source, first_line=start + 1)
            return
        first = False


def open_text(raw: BinaryIO, name: str) -> io.TextIOWrapper:
    """The bytes of ``raw`` (a file opened to read bytes, which its opener
    closes) as UTF-8 text, decompressed if ``name`` says so."""
    return io.TextIOWrapper(_compression(raw, name, "rb") or raw, encoding="utf-8")


@contextmanager
def written(path: str) -> Iterator[IO[str]]:
    """UTF-8 text to write to ``path`` (compressed if its name says so).

    A file appears only whole: it is written under a temporary name in the
    same directory, flushed to disk, and renamed over ``path`` at the end,
    with the permissions ``open`` would have given it. If writing fails or is
    interrupted, ``path`` is left as it was, so an export that stopped
    half-way cannot pass for a complete one. Anything else at ``path`` (a
    pipe, ``/dev/stdout``) is written to as it is."""
    if Path(path).exists() and not Path(path).is_file():
        with open(path, "wb") as raw, _text(raw, Path(path).name) as stream:
            yield stream
        return
    target = Path(os.path.realpath(path))  # a link's file is replaced, not the link
    mode = target.stat().st_mode & 0o7777 if target.exists() else 0o666 & ~_umask()
    try:
        fd, temporary = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".partial")
    except OSError as exc:  # named by the path asked for, not by the temporary name
        raise OSError(exc.errno, exc.strerror, path) from None
    try:
        with open(fd, "wb") as raw:
            with _text(raw, target.name) as stream:
                yield stream
            raw.flush()
            os.fsync(raw.fileno())
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
    if os.name == "posix":  # the rename too is on disk
        directory = os.open(target.parent, os.O_RDONLY)
        try:
            os.fsync(directory)
        finally:
            os.close(directory)


@contextmanager
def _text(raw: BinaryIO, name: str) -> Iterator[IO[str]]:
    """Text written to ``raw``, compressed as ``name`` says; ``raw`` stays open."""
    compressed = _compression(raw, name, "wb")
    with compressed or nullcontext():
        stream = io.TextIOWrapper(compressed or raw, encoding="utf-8", newline="\n")
        try:
            yield stream
        finally:
            stream.detach()  # flushed; the compressed stream ends as the with block closes it


def _compression(
    raw: BinaryIO, name: str, mode: Literal["rb", "wb"]
) -> gzip.GzipFile | bz2.BZ2File | lzma.LZMAFile | None:
    """What (de)compresses ``raw`` as ``name``'s suffix says (None: plain
    text); closing it leaves ``raw`` open."""
    suffix = Path(name).suffix.lower()
    if suffix == ".gz":
        return gzip.GzipFile(filename=name, mode=mode, fileobj=raw)
    if suffix == ".bz2":
        return bz2.BZ2File(raw, mode)
    if suffix == ".xz":
        return lzma.LZMAFile(raw, mode)
    return None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _uncompressed_name(source: str) -> str:
    name = source.lower()
    for suffix in _COMPRESSED:
        name = name.removesuffix(suffix)
    return name


class _Broken(Exception):
    def __init__(self, reason: str, line: int, column: int) -> None:
        super().__init__(reason)
        self.reason, self.line, self.column = reason, line, column


class _Text:
    """A window on a text stream: what is read and not yet consumed (from
    ``pos``), and the line numbers that go with it."""

    def __init__(self, stream: IO[str], longest_string: int | None = None) -> None:
        self._stream = stream
        self._longest = longest_string
        self.text = ""
        self.pos = 0
        self._started = False
        self._ended = False
        self._line = 1  # the line ``_counted`` is on
        self._counted = 0
        self._column = 0  # of text[0] on its line, counted from 0

    def line(self) -> int:
        """The line ``pos`` is on (``pos`` only moves forward)."""
        self._line += self.text.count("\n", self._counted, self.pos)
        self._counted = self.pos
        return self._line

    def broken(self, reason: str, index: int) -> _Broken:
        self.pos = max(self.pos, index)
        newline = self.text.rfind("\n", 0, index)
        column = index - newline if newline >= 0 else self._column + index + 1
        return _Broken(reason, self.line(), column)

    def read(self, at_least: int) -> bool:
        """Read on: whole lines (in pieces of at most ``_PIECE``) until
        ``at_least`` characters came, or the end. False at the end."""
        if self._ended:
            return False
        pieces = [self._rest()]
        added = 0
        while added < at_least:
            piece = self._stream.readline(_PIECE)
            if not piece:
                self._ended = True
                break
            if not self._started:
                piece = piece.removeprefix(_BOM)
                self._started = True
            pieces.append(piece)
            added += len(piece)
        self.text = "".join(pieces)
        return added > 0

    def _rest(self) -> str:
        """What is not consumed yet, the window starting there (line and
        column kept)."""
        self.line()
        newline = self.text.rfind("\n", 0, self.pos)
        self._column = self.pos - newline - 1 if newline >= 0 else self._column + self.pos
        rest = self.text[self.pos :]
        self.pos = self._counted = 0
        return rest

    def forget_consumed(self) -> None:
        """Let go of the text of the values read so far, when it is large: a
        list's long item would otherwise stay in memory, as text, while its
        record is converted and written."""
        if self.pos > _PIECE:
            self.text = self._rest()

    def find(self, pattern: re.Pattern[str]) -> int | None:
        """Where ``pattern`` next matches from ``pos``, reading on as needed
        (``pos`` moves to the end of what is read); None: nowhere before the end."""
        while (found := pattern.search(self.text, self.pos)) is None:
            self.pos = len(self.text)
            if not self.read(1):
                return None
        return found.start()

    def next_char(self) -> str:
        """The character the next token starts with ("" at the end); ``pos`` moves to it."""
        found = self.find(_VALUE)
        if found is None:
            return ""
        self.pos = found
        return self.text[found]

    def value(self) -> Any:
        """The JSON value at ``pos``, read on as far as it goes."""
        while True:
            try:
                value, end = _decoder.raw_decode(self.text, self.pos)
            except RecursionError:
                raise self.broken("nested too deeply", self.pos) from None
            except json.JSONDecodeError as exc:
                cut_short = exc.pos >= len(self.text) - _TOKEN or exc.msg.startswith("Unterminated string")
                into_value = exc.pos - self.pos  # reading on moves the value to the window's start
                if cut_short and self._read_on():
                    continue
                raise self.broken(exc.msg, self.pos + into_value) from None
            except ValueError:
                raise self.broken(_too_long_a_number(), self.pos) from None
            length = end - self.pos
            if end < len(self.text) or not self._read_on():  # a number may go on
                # Reading on that found the end may have moved the window to start at the value.
                self.pos += length
                return value

    def _read_on(self) -> bool:
        # A long object, list or string: read to its end, found by a scan, and
        # join the text once. Any other value: at least as much again as it has
        # so far, so that each value is parsed a bounded number of times over.
        if len(self.text) - self.pos >= _PIECE and self.text[self.pos] in '[{"':
            return self._read_to_value_end()
        return self.read(max(_READ, len(self.text) - self.pos))

    def _read_to_value_end(self) -> bool:
        """Read on until the object, list or string at ``pos`` ends (or the
        text does), keeping the pieces apart until then: a long value is then
        in memory once as text, not in a window doubled again and again (a
        conversation of several megabytes held two or three times its size
        while it was read). False at the end of the text."""
        pieces = [self._rest()]
        scan = _ValueEnd(self._longest)
        added = 0
        try:
            if not scan.feed(pieces[0]):
                while True:
                    piece = self._stream.readline(_PIECE)
                    if not piece:
                        self._ended = True
                        break
                    pieces.append(piece)
                    added += len(piece)
                    if scan.feed(piece):
                        break
        except _TooLong as too_long:
            self.text = pieces[0]
            raise self.broken(str(too_long), self.pos) from None
        self.text = "".join(pieces)
        del pieces
        return added > 0

    def expect_line_end(self, start: int) -> None:
        """Only blanks may follow a value that fills line ``start`` (JSON
        Lines); after a longer one, the next value may start on the same line."""
        if self.line() != start:
            return
        found = self.find(_LINE_REST)
        if found is None:
            return
        if self.text[found] != "\n":
            raise self.broken("Extra data", found)
        self.pos = found

    def following_lines(self) -> Iterator[Line]:
        """The lines after the one ``pos`` is on: the rest of the window, then the stream's."""
        found = _NEWLINE.search(self.text, self.pos)
        if found is not None:
            rest, self.text, self.pos = self.text[found.start() + 1 :], "", 0
        else:  # the rest of this line is not needed: skip it, unkept
            rest, self.text, self.pos = "", "", 0
            while not self._ended:
                piece = self._stream.readline(_PIECE)
                if not piece:
                    self._ended = True
                elif piece.endswith("\n"):
                    break
            if self._ended:
                return
        partial = ""
        for line in io.StringIO(rest, newline="\n"):
            if line.endswith("\n"):
                yield line
            else:
                partial = line
        if not self._ended:
            for following in _lines(self._stream, self._longest):
                # The window's unfinished line is the start of the stream's next one.
                yield following if isinstance(following, _TooLong) else partial + following
                partial = ""
        if partial:
            yield partial


class _TooLong(Exception):
    def __init__(self, longest: int) -> None:
        super().__init__(
            f"a string of more than {longest:,} characters: longer than any message the archive takes"
        )


#: A line of JSON Lines, or why one was not kept (a string too long in it).
Line = str | _TooLong


def _lines(stream: Iterable[str], longest_string: int | None) -> Iterator[Line]:
    """The stream's lines; with ``longest_string``, a line that holds a
    longer string is read in pieces and given as the ``_TooLong`` that says
    so (its text is not kept), so that no line is held whole beyond the bound."""
    if longest_string is None:
        yield from stream
        return
    readline = cast(IO[str], stream).readline
    while True:
        piece: str = readline(_PIECE)
        if not piece:
            return
        if piece.endswith("\n") or len(piece) < _PIECE:
            yield piece
            continue
        pieces, scan = [piece], _ValueEnd(longest_string)
        scan.depth = 1  # the line's value counted one level deeper: none of its brackets ends the scan
        try:
            scan.feed(piece)
            while not pieces[-1].endswith("\n"):
                more: str = readline(_PIECE)
                if not more:
                    break
                pieces.append(more)
                scan.feed(more)
        except _TooLong as too_long:
            while not pieces[-1].endswith("\n"):  # skip the rest of the line, unkept
                pieces[-1] = readline(_PIECE)
                if not pieces[-1]:
                    break
            yield too_long
            continue
        yield "".join(pieces)


class _ValueEnd:
    """Where a JSON object, list or string ends, found in its text given a
    piece at a time: brackets counted outside strings, strings ended by an
    unescaped quote (an escape may be cut between two pieces). It does not
    check the JSON: the parser does, once the text is whole."""

    _SPECIAL = re.compile(r'["\[\]{}]')
    _IN_STRING = re.compile(r'["\\]')

    def __init__(self, longest_string: int | None = None) -> None:
        self.depth = 0
        self.in_string = False
        self.escaped = False
        self.longest = longest_string
        self.string_length = 0

    def feed(self, piece: str) -> bool:
        """Scan on through ``piece``; True once the value has ended."""
        index, end = 0, len(piece)
        while index < end:
            if self.in_string:
                if self.escaped:
                    self.escaped = False
                    index += 1
                    continue
                found = self._IN_STRING.search(piece, index)
                self.string_length += (end if found is None else found.start()) - index
                if self.longest is not None and self.string_length > self.longest:
                    raise _TooLong(self.longest)
                if found is None:
                    return False
                index = found.end()
                if found.group() == "\\":
                    self.escaped = True
                    continue
                self.in_string = False
                if self.depth == 0:  # a string value, whole
                    return True
                continue
            found = self._SPECIAL.search(piece, index)
            if found is None:
                return False
            index = found.end()
            char = found.group()
            if char == '"':
                self.in_string = True
                self.string_length = 0
            elif char in "[{":
                self.depth += 1
            else:
                self.depth -= 1
                if self.depth <= 0:
                    return True
        return False


def _value_records(text: _Text, source: str) -> Iterator[Record]:
    """The records of the top-level value at ``pos``: a list of documents
    gives its items as they are read; anything else is one record."""
    start = text.line()
    if text.next_char() != "[":
        value = text.value()
        text.expect_line_end(start)
        yield Record(source, start, value)
        return
    text.pos += 1
    items: Iterator[Record] = _items(text, source)
    first = next(items, None)
    if first is not None and is_message_list([first.value]):
        # Perhaps one chat's messages: it is known at the end of the list.
        held = [first, *items]
        text.expect_line_end(start)
        values = [record.value for record in held]
        yield from [Record(source, start, values)] if is_message_list(values) else held
        return
    if first is not None:
        yield first
        yield from items
    text.expect_line_end(start)


def _items(text: _Text, source: str) -> Iterator[Record]:
    """The items of the list whose ``[`` is just before ``pos``, up to its ``]``."""
    if text.next_char() == "]":
        text.pos += 1
        return
    for index in count():
        line = text.line()
        value = text.value()
        text.forget_consumed()
        yield Record(source, line, value, index=index)
        del value  # the record is the reader's to keep or drop
        separator = text.next_char()
        text.pos += 1
        if separator == "]":
            return
        if separator != ",":
            raise text.broken("Expecting ',' delimiter", text.pos - 1)
        text.next_char()


def _without_bom(lines: Iterable[Line]) -> Iterator[Line]:
    lines = iter(lines)
    first = next(lines, None)
    if first is not None:
        yield first.removeprefix(_BOM) if isinstance(first, str) else first
        yield from lines


def _json_lines(lines: Iterable[Line], source: str, *, first_line: int) -> Iterator[Record]:
    for number, line in enumerate(lines, start=first_line):
        if isinstance(line, _TooLong):
            yield Record(source, number, error=str(line))
            continue
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except RecursionError:
            yield Record(source, number, error="invalid JSON: nested too deeply")
            continue
        except json.JSONDecodeError as exc:
            ended_early = exc.msg.startswith("Unterminated") or exc.pos >= len(line.rstrip())
            reason = f"truncated line ({exc.msg})" if ended_early and not line.endswith("\n") else exc.msg
            yield Record(source, number, error=f"invalid JSON: {reason} (column {exc.colno})")
            continue
        except ValueError:
            yield Record(source, number, error=f"invalid JSON: {_too_long_a_number()}")
            continue
        if isinstance(value, list) and not is_message_list(value):
            yield from (Record(source, number, item, index=index) for index, item in enumerate(value))
        else:
            yield Record(source, number, value)
