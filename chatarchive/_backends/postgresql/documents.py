"""A whole document read in one statement, as one JSON text per chat."""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import cache
from typing import Any

from sqlalchemy import Double, Table, text
from sqlalchemy.sql.elements import TextClause

from chatarchive._schema import (
    DOCUMENT_ORDER,
    ON_ACTIVE_PATH,
    TAIL_START,
    active_path_filter,
    tables,
    tail_filter,
)
from chatarchive._types import UTCDateTime

#: The columns the one-statement read returns of each table, in order
#: (chat_id only for chats).
_JSON_COLUMNS = {
    table: tuple(column.name for column in table.columns if table is tables.chats or column.name != "chat_id")
    for table in (tables.chats, *DOCUMENT_ORDER)
}
#: The double columns of each table, read back from hex (see _json_values).
_HEX_DOUBLES = {
    table: tuple(name for name in columns if isinstance(table.c[name].type, Double))
    for table, columns in _JSON_COLUMNS.items()
}


def _json_values(table: Table, alias: str) -> str:
    """The table's columns for ``json_build_array``, printed the same whatever
    the session's settings: timestamps in UTC (JSON would show them in the
    session's TimeZone), doubles as their 8 bytes in hex (JSON would round them
    to 15 digits under ``extra_float_digits = 0``)."""
    values = []
    for name in _JSON_COLUMNS[table]:
        value = f"{alias}.{name}"
        kind = table.c[name].type
        if isinstance(kind, UTCDateTime):
            value = f"({value} AT TIME ZONE 'UTC')"
        elif isinstance(kind, Double):
            value = f"encode(float8send({value}), 'hex')"
        values.append(value)
    return ", ".join(values)


def _json_row(table: Table, values: Sequence[Any]) -> dict[str, Any]:
    row = dict(zip(_JSON_COLUMNS[table], values, strict=True))
    for name in _HEX_DOUBLES[table]:
        if row[name] is not None:
            (row[name],) = struct.unpack(">d", bytes.fromhex(row[name]))
    return row


@cache
def _documents_query(*, scoped: bool, one: bool, whole: bool, tail: bool = False) -> TextClause:
    """Each chat as one JSON array: its row, then its child rows of each table
    as arrays of arrays. One text value per chat is the cheapest result for the
    driver to hand over and for Python to decode.

    ``one``: for a single chat id, compared with ``=``. Once psycopg has
    prepared the statement, PostgreSQL then reuses one generic plan instead of
    planning each call, as it keeps doing for ``= ANY(array)`` (whose generic
    plan it estimates for several ids).

    Unless ``whole``, only the rows of the active path: a chat without
    branches needs no filter, so it costs what it did before chats had any.

    For a single chat every part names its id, so that on a distributed
    archive the whole read goes to the one worker that holds the chat (Citus
    sends a correlated subquery to every shard).

    ``tail`` (one chat): only the rows of the last ``:last`` messages of its
    active path.
    """
    chat_id = ":chat_id" if one else "x.chat_id"
    tail_start = TAIL_START.format(chat=chat_id, row="c")
    own = "x.chat_id = c.chat_id" + (" AND x.chat_id = :chat_id" if one else "")
    children = []
    for table, order in DOCUMENT_ORDER.items():
        ordering = ", ".join(f"x.{column.name}" for column in order[1:])
        on_path = ""
        if not whole and table.name in ON_ACTIVE_PATH:
            on_path = f" AND (c.path_length = c.message_count OR {active_path_filter(table.name, chat_id)})"
            if tail:
                on_path += f" AND {tail_filter(table.name, tail_start, chat_id)}"
        children.append(
            f"(SELECT json_agg(json_build_array({_json_values(table, 'x')}) ORDER BY {ordering}) "
            f"FROM {table.name} x WHERE {own}{on_path})"
        )
    wanted = "c.chat_id = :chat_id" if one else "c.chat_id = ANY(:ids)"
    owner = " AND c.user_id = :user_id" if scoped else ""
    chat = f"json_build_array({_json_values(tables.chats, 'c')})"
    return text(
        f"SELECT json_build_array({chat}, {', '.join(children)})::text FROM chats c WHERE {wanted}{owner}"
    )
