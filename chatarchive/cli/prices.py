"""``chatarchive prices``: load and list the models' prices that ``stats --cost`` uses."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

import click

from chatarchive._repository.prices import ModelPrice

from .app import CommandGroup, archive, fail, main
from .rendering import echo_json, literal, print_table, stderr, write_csv

__all__ = ["prices"]

#: The columns of a prices file, in the order ``prices list`` prints them.
COLUMNS = tuple(ModelPrice.model_fields)


@main.group(cls=CommandGroup)
def prices() -> None:
    """Models' prices per million tokens, for 'stats --cost'."""


def _records(path: Path, fmt: str | None) -> list[dict[str, Any]]:
    """The price records of a JSON file (a list of objects) or a CSV file (a
    header row of field names; an empty cell is no value)."""
    kind = fmt or ("csv" if path.suffix.lower() == ".csv" else "json")
    text = path.read_text(encoding="utf-8-sig")
    if kind == "csv":
        rows = list(csv.DictReader(text.splitlines()))
        return [{key: value for key, value in row.items() if value not in ("", None)} for row in rows]
    try:
        records = json.loads(text)
    except json.JSONDecodeError as exc:
        fail(f"{path}: not JSON ({exc.msg} at line {exc.lineno}, column {exc.colno})")
    if not isinstance(records, list) or not all(isinstance(record, dict) for record in records):
        fail(f"{path}: a prices file holds a JSON list of objects, one per price")
    return records


@prices.command("load")
@click.argument("file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["json", "csv"]),
    help="The file's format (default: by its name: .csv, else JSON).",
)
def load(file: Path, fmt: str | None) -> None:
    """Add the prices in FILE, replacing those of the same model and valid_from.

    FILE is a JSON list of objects, or a CSV file with a header row, with the
    fields model, valid_from (a date, or a time: UTC if no offset),
    input_per_million, output_per_million, and optionally
    cached_input_per_million, reasoning_per_million, provider and currency
    (USD if not given; one currency per archive). All or nothing.
    """
    records = _records(file, fmt)
    if not records:
        fail(f"{file}: holds no prices")
    loaded = archive().load_prices(records)
    stderr().print(literal(f"loaded {loaded} price{'' if loaded == 1 else 's'}"))


@prices.command("list")
@click.option("--model", help="Only this model's prices.")
@click.option(
    "--format", "fmt", type=click.Choice(["table", "csv", "json"]), default="table", show_default=True
)
def list_prices(model: str | None, fmt: str) -> None:
    """The archive's prices, by model and time."""
    found = archive().prices(model)
    if fmt == "table":
        if not found:
            stderr().print("no prices: 'chatarchive prices load FILE' loads them")
            return
        print_table(COLUMNS, [tuple(map(_shown, price.model_dump().values())) for price in found])
        return
    records = [price.model_dump(mode="json") for price in found]
    if fmt == "json":
        echo_json(records)
    else:
        write_csv(records)


def _shown(value: object) -> object:
    """A price as written (``0.0375``, not rounded to the table's three decimals)."""
    return repr(value) if isinstance(value, float) else value
