"""Many rows written with binary ``COPY``, and the bulk-load DDL."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from operator import itemgetter
from typing import Any

import psycopg
from psycopg.types.json import Jsonb, set_json_dumps
from sqlalchemy import Boolean, Connection, Double, Integer, Table, text
from sqlalchemy.engine import AdaptedConnection

from chatarchive._types import (
    ArchiveText,
    JsonObject,
    OrderedJson,
    UTCDateTime,
    escape_text,
    postgres_json_text,
)

from .engine import driver_call

#: Whether row-level security applies to this role on the archive's tables
#: (all of them have the same setting; see ``set_row_level_security``).
_ROW_SECURITY = text("SELECT row_security_active('chats')")
_HAS_CITUS = text("SELECT current_setting('citus.propagate_set_commands', true) IS NOT NULL")
_CITUS_LOADED = "chatarchive.citus"

_PG_TYPES: tuple[tuple[type, str], ...] = (
    (ArchiveText, "text"),
    (OrderedJson, "json"),  # before JsonObject, its base
    (JsonObject, "jsonb"),
    (UTCDateTime, "timestamptz"),
    (Boolean, "bool"),
    (Integer, "int4"),
    (Double, "float8"),
)


class _CopyPlan:
    """How one table's rows are copied: the statement, the columns in order
    and their types, and which of them are text (to escape)."""

    def __init__(self, table: Table) -> None:
        self.columns = tuple(column.name for column in table.columns)
        self.types = tuple(
            next(pg for kind, pg in _PG_TYPES if isinstance(column.type, kind)) for column in table.columns
        )
        self.statement = f"COPY {table.name} ({', '.join(self.columns)}) FROM STDIN (FORMAT BINARY)"
        self.text_columns = tuple(index for index, kind in enumerate(self.types) if kind == "text")

    def values(self, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
        """The rows' values in column order, text escaped if needed."""
        values = list(map(itemgetter(*self.columns), rows))
        if _needs_escape(values, self.text_columns):
            values = [_escaped(row, self.text_columns) for row in values]
        return values


@cache
def _copy_plan(table: Table) -> _CopyPlan:
    return _CopyPlan(table)


def _needs_escape(rows: list[tuple[Any, ...]], text_columns: tuple[int, ...]) -> bool:
    """Whether any text value holds NUL or U+E000 (rare), checked a column at a time."""
    for index in text_columns:
        joined = "\x01".join([value for row in rows if (value := row[index]) is not None])
        if "\x00" in joined or "\ue000" in joined:
            return True
    return False


def _escaped(values: tuple[Any, ...], text_columns: tuple[int, ...]) -> tuple[Any, ...]:
    escaped = list(values)
    for index in text_columns:
        if escaped[index] is not None:
            escaped[index] = escape_text(escaped[index])
    return tuple(escaped)


class _CopyWriter:
    """Binary COPY through the connection's own psycopg connection (and transaction)."""

    def __init__(self, connection: Connection, driver: psycopg.Connection[Any]) -> None:
        self._connection = connection
        self._cursor = driver.cursor()
        set_json_dumps(postgres_json_text, self._cursor)

    def write(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        plan = _copy_plan(table)
        values = plan.values(rows)
        with driver_call(self._connection, plan.statement), self._cursor.copy(plan.statement) as copy:
            copy.set_types(plan.types)
            write_row = copy.write_row
            for row in values:
                write_row(row)


class _AsyncCopyWriter:
    """Binary COPY under the asyncio API: through the connection's asynchronous
    psycopg connection, awaited with SQLAlchemy's ``AdaptedConnection.run_async``
    (the repository's code runs in ``run_sync``), so the event loop goes on
    while the server reads the rows."""

    def __init__(self, connection: Connection, adapted: AdaptedConnection) -> None:
        self._connection = connection
        self._adapted = adapted

    def write(self, table: Table, rows: Sequence[Mapping[str, Any]]) -> None:
        if not rows:
            return
        plan = _copy_plan(table)
        values = plan.values(rows)

        async def copy_rows(driver: psycopg.AsyncConnection[Any]) -> None:
            cursor = driver.cursor()
            set_json_dumps(postgres_json_text, cursor)
            async with cursor.copy(plan.statement) as copy:
                copy.set_types(plan.types)
                for row in values:
                    await copy.write_row(row)

        with driver_call(self._connection, plan.statement):
            self._adapted.run_async(copy_rows)


def copy_values(table: Table, rows: Sequence[Mapping[str, Any]]) -> list[tuple[Any, ...]]:
    """``rows`` of ``table`` as ``copy_prepared`` takes them."""
    return [
        tuple(Jsonb(value) if type(value) is dict else value for value in row)
        for row in _copy_plan(table).values(rows)
    ]


def copy_prepared(driver: Any, table: Table, values: Sequence[tuple[Any, ...]], *, schema: str) -> None:
    """Copy the rows ``copy_values`` prepared into ``schema``'s table of
    ``table``'s name, as the archive copies them, through a connection of
    ``bare_connection``: ``chatarchive bench``'s reference, which does
    nothing else."""
    plan = _copy_plan(table)
    statement = plan.statement.replace(f"COPY {table.name} ", f"COPY {schema}.{table.name} ", 1)
    with driver.cursor() as cursor, cursor.copy(statement) as copy:
        copy.set_types(plan.types)
        for row in values:
            copy.write_row(row)


# The archive's foreign keys and its indexes that back no constraint, with their
# definitions, from the catalog (for a bulk load).
_FOREIGN_KEYS = text(
    "SELECT conrelid::regclass::text, conname, pg_get_constraintdef(oid) FROM pg_constraint "
    "WHERE contype = 'f' AND conrelid::regclass::text = ANY(:tables) "
    "ORDER BY conrelid::regclass::text, conname"
)
_INDEX_DEFINITION = text("SELECT pg_get_indexdef(CAST(:index AS regclass))")
_SECONDARY_INDEXES = text(
    "SELECT t.relname, i.relname, pg_get_indexdef(i.oid) FROM pg_index x "
    "JOIN pg_class i ON i.oid = x.indexrelid JOIN pg_class t ON t.oid = x.indrelid "
    "WHERE t.relname = ANY(:tables) AND t.relnamespace = to_regnamespace(current_schema()) "
    "AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = x.indexrelid) "
    "AND i.relam <> (SELECT oid FROM pg_am WHERE amname = 'gin') ORDER BY i.relname"
)
