"""How the command line shows what it found: tables that never lose a
value, JSON, CSV, highlighted snippets, and any stored text made safe for a
terminal."""

from __future__ import annotations

import csv
import json
import os
import re
import sys
from datetime import UTC, datetime
from typing import Any

import click
from rich.cells import cell_len
from rich.console import Console
from rich.table import Table
from rich.text import Text

__all__ = [
    "echo_json",
    "highlighted",
    "literal",
    "print_stats",
    "print_table",
    "printable",
    "stderr",
    "stdout",
    "write_csv",
]


def stdout() -> Console:
    """The command's standard output, as rich writes to it."""
    return _console("stdout", highlight=False, soft_wrap=True)


def stderr() -> Console:
    """The command's standard error, as rich writes to it."""
    return _console("stderr", stderr=True, highlight=False, soft_wrap=True)


def _console(name: str, **options: Any) -> Console:
    """One console per command run, made when first used: a console reads the
    terminal's width (``$COLUMNS``) when it is made."""
    context = click.get_current_context(silent=True)
    if context is None:
        return Console(**options)
    consoles = context.find_root().meta.setdefault("chatarchive.consoles", {})
    if name not in consoles:
        consoles[name] = Console(**options)
    console: Console = consoles[name]
    return console


_CONTROLS = re.compile(r"\r\n|[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """``text`` safe to show on a terminal: control characters, escape
    sequences among them, shown as ``\\xNN`` instead of reaching the terminal
    (stored chats hold whatever users and models wrote). Newlines and tabs are
    kept, ``\\r\\n`` becomes a newline."""
    return _CONTROLS.sub(_visible, text)


def _visible(match: re.Match[str]) -> str:
    control = match.group()
    return "\n" if control == "\r\n" else f"\\x{ord(control):02x}"


def literal(text: str, style: str = "") -> Text:
    """``text`` for the console as it is: never read as markup or emoji codes,
    control characters made visible (``printable``)."""
    return Text(printable(text), style=style)


def write_csv(records: list[dict[str, Any]]) -> None:
    writer = csv.writer(sys.stdout, lineterminator="\n")
    if records:
        writer.writerow(records[0])
    for record in records:
        writer.writerow(["" if value is None else value for value in record.values()])


def echo_json(value: object) -> None:
    """``--json`` and ``--format json`` output: indented, the text exact (not ASCII-escaped)."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


_DAY = len("YYYY-MM-DD")


def print_table(headers: tuple[str, ...], rows: list[tuple[object, ...]]) -> None:
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
    if stdout().is_terminal or "COLUMNS" in os.environ:
        widths = _fitted(natural, words, whole, stdout().width - frame)
    else:
        widths = natural
    for shown, width in zip(table.columns, widths, strict=True):
        shown.width = width
    table.width = sum(widths) + frame
    stdout().print(table)


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


def print_stats(by: str, records: list[dict[str, Any]]) -> None:
    if not records:
        stdout().print("(no data)")
        return
    times = {key for record in records for key, value in record.items() if isinstance(value, datetime)}
    headers = tuple(f"{key} (UTC)" if key in times else key for key in records[0])
    print_table(headers, [tuple(record.values()) for record in records])
    if by == "day":
        _daily_bars(records)


def _cell(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, datetime):
        return f"{value.astimezone(UTC):%Y-%m-%d %H:%M:%S}"
    if isinstance(value, float):
        return f"{value:.3f}"
    return str(value)


def _daily_bars(records: list[dict[str, Any]]) -> None:
    per_day: dict[object, int] = {}
    for record in records:
        per_day[record["day"]] = per_day.get(record["day"], 0) + int(record["messages"])
    widest = max(per_day.values()) or 1
    stdout().print("\nmessages per day")
    for day, messages in per_day.items():
        bar = "█" * max(1, round(40 * messages / widest))
        stdout().print(f"{day} {bar} {messages}", markup=False)


def highlighted(snippet: str) -> Text:
    text = Text("    ")
    for index, piece in enumerate(snippet.replace("»", "«").split("«")):
        text.append(printable(piece), style="bold yellow" if index % 2 else "")
    return text


# -- bench -----------------------------------------------------------------------
