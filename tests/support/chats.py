"""Chats the tests save, and what the tests read of the tables directly."""

from __future__ import annotations

import random
from typing import Any

from sqlalchemy import Connection, delete, func, select, text
from sqlalchemy.orm import Session

from chatarchive import (
    ChatDocument,
)
from chatarchive._backends.citus import DISTRIBUTION_SETTING
from chatarchive._schema import SEARCH_TERMS, metadata


def empty_archive(executor: Connection | Session) -> None:
    """Delete every chat and every setting, but the record that the archive
    is distributed (on Citus), which is where its rows are, not what they are."""
    for table in reversed(metadata.sorted_tables):
        statement = delete(table)
        if table.name == "archive_settings":
            statement = statement.where(table.c.name != DISTRIBUTION_SETTING)
        executor.execute(statement)


def counts(session: Session) -> dict[str, int]:
    """The rows of each table that holds chats."""
    return {
        name: session.execute(select(func.count()).select_from(table)).scalar_one()
        for name, table in metadata.tables.items()
        if "chat_id" in table.c  # not the archive's settings and prices
    }


def snapshot(session: Session) -> dict[str, list[Any]]:
    """Every row of every table, and the search terms, for "nothing changed" checks."""
    tables = {
        name: sorted(repr(tuple(row)) for row in session.execute(select(table)))
        for name, table in metadata.tables.items()
    }
    postgres = session.get_bind().dialect.name == "postgresql"
    columns = "chat_id, message_position, terms" if postgres else "rowid, terms"
    terms = session.execute(text(f"SELECT {columns} FROM {SEARCH_TERMS}"))
    return tables | {SEARCH_TERMS: sorted(repr(tuple(row)) for row in terms)}


def tool_chat(chat_id: str = "c1", **fields: Any) -> ChatDocument:
    return ChatDocument.from_openai(
        [
            {"role": "system", "content": "be brief"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": "u"}],
            },
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "content": "42"},
            {"role": "assistant", "content": "It is 42."},
        ],
        chat_id=chat_id,
        **fields,
    )


HOSTILE = [
    "",
    "'; DROP TABLE chats; --",
    'quote " and backslash \\ and \\u0000 text',
    "nul \x00 in the middle",
    "\x00",
    "\ue000\ue001\ue002 private use",
    "\ue000\x00\ue000",
    "emoji 😀 and CJK 漢字 and RTL \u202e",
    "line\nbreaks\r\nand\ttabs",
    "x" * 100_000,
    # Incompressible, longer than a B-tree entry can hold (ids in indexed columns).
    "".join(random.Random(0).choices([chr(code) for code in range(0x21, 0x7F)], k=6000)),
]


UNSORTED = {"zeta": 1, "alpha": {"y": [{"long_key": 1, "k": 2}], "\x00x": 3, "b": 4}}


# Numbers jsonb (negative zero) or a double column (whole-number floats) would change.
SIGNED = {"a": -0.0, "bb": [4.0, -0.0, 0.0, 1, {"c": -0.0}], "ccc": 1e300}
