"""Reading chat documents from JSON and JSONL files, record by record.

A file may hold one document, a list of documents, a bare OpenAI message list
(one chat), or JSON Lines of any of these. Every record carries the file and
line it starts on, so that a bad one can be reported precisely while the good
ones are kept.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from itertools import chain
from typing import IO, Any

__all__ = ["Record", "is_message_list", "read_records"]

_JSONL_SUFFIXES = (".jsonl", ".ndjson", ".jsonlines")
_WHITESPACE = " \t\n\r"
_BOM = "\ufeff"
_decoder = json.JSONDecoder()


@dataclass(frozen=True)
class Record:
    """One JSON value read from ``source`` at ``line``, or the reason it could not be read."""

    source: str
    line: int
    value: Any = None
    error: str | None = None

    @property
    def where(self) -> str:
        return f"{self.source}:{self.line}"


def is_message_list(value: object) -> bool:
    """A bare OpenAI message list: objects with a ``role`` and no ``messages``."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) for item in value)
        and "role" in value[0]
        and not any("messages" in item for item in value)
    )


def read_records(stream: IO[str], source: str) -> Iterator[Record]:
    """The records in one file (``stream`` opened as text). A byte order mark
    at the start is skipped: Windows tools write one, and JSON's RFC 8259 lets
    readers ignore it.

    JSON Lines are read a line at a time, whatever the file is called (a pipe
    into standard input included), so memory does not grow with the input;
    lines end at ``\n`` only, as JSON text may hold U+2028 and other
    characters that :meth:`str.splitlines` would break lines at. Other text
    is one JSON document (pretty-printed, say), read whole."""
    lines = _without_bom(stream)
    if source.lower().endswith(_JSONL_SUFFIXES):
        yield from _json_lines(lines, source, first_line=1)
        return
    # JSON Lines if the first value fills its line and another line follows.
    head: list[str] = []
    for line in lines:
        head.append(line)
        if line.strip():
            break
    if head and _is_json(head[-1]):
        for line in lines:
            head.append(line)
            if line.strip():
                yield from _json_lines(chain(head, lines), source, first_line=1)
                return
    yield from _document("".join(chain(head, lines)), source)


def _document(text: str, source: str) -> Iterator[Record]:
    """The records of a text that may be one document (or a list of them), or
    JSON Lines whose first line is broken."""
    start = _skip(text, 0)
    if start == len(text):
        return
    try:
        value, end = _decoder.raw_decode(text, start)
    except RecursionError:
        yield Record(source, _line_of(text, start), error="invalid JSON: nested too deeply")
        return
    except json.JSONDecodeError as exc:
        if exc.lineno > _line_of(text, start) or "\n" not in text[start:].strip():
            # The first value runs over several lines: one JSON document, broken.
            yield Record(source, exc.lineno, error=f"invalid JSON: {exc.msg} (column {exc.colno})")
            return
        yield from _json_lines(io.StringIO(text, newline="\n"), source, first_line=1)
        return
    if _skip(text, end) < len(text):
        yield from _json_lines(io.StringIO(text, newline="\n"), source, first_line=1)
    elif isinstance(value, list) and not is_message_list(value):
        yield from _array_items(text, start, source)
    else:
        yield Record(source, _line_of(text, start), value)


def _is_json(line: str) -> bool:
    try:
        json.loads(line)
    except (ValueError, RecursionError):
        return False
    return True


def _without_bom(lines: Iterable[str]) -> Iterator[str]:
    lines = iter(lines)
    first = next(lines, None)
    if first is not None:
        yield first.removeprefix(_BOM)
        yield from lines


def _skip(text: str, index: int) -> int:
    while index < len(text) and text[index] in _WHITESPACE:
        index += 1
    return index


def _line_of(text: str, index: int) -> int:
    return text.count("\n", 0, index) + 1


def _array_items(text: str, start: int, source: str) -> Iterator[Record]:
    """The items of a (valid) top-level JSON array, each with its line."""
    index = _skip(text, start + 1)
    line, counted = 1, 0
    while text[index] != "]":
        line += text.count("\n", counted, index)
        counted = index
        value, index = _decoder.raw_decode(text, index)
        yield Record(source, line, value)
        index = _skip(text, index)
        if text[index] == ",":
            index = _skip(text, index + 1)


def _json_lines(lines: Iterator[str], source: str, *, first_line: int) -> Iterator[Record]:
    for number, line in enumerate(lines, start=first_line):
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
        yield Record(source, number, value)
