"""JSON values keep the key order of their objects on PostgreSQL.

``jsonb`` stores an object's keys sorted (by length, then bytewise), so a JSON
schema in a chat's ``workflow`` or ``model_settings``, or any unknown key's
object, came back with its keys reordered; for a tool's or a response format's
schema the order is the order in which the model writes the fields. Each table
with JSON columns gains ``ordered_json`` (``json``, which keeps text as given):
for the row's JSON values whose key order ``jsonb`` would not keep, each as
given, by column name; null otherwise (nearly always). The ``jsonb`` columns
still hold every value, for queries. Rows written before this revision have
none and read back in ``jsonb``'s order, as before. Downgrading drops the
column: values read back in ``jsonb``'s order again.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

revision: str = "0010"
down_revision: str | Sequence[str] | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# Plain types, so that this revision never depends on chatarchive's code.
JSON_TEXT = sa.JSON().with_variant(postgresql.JSON(), "postgresql")
COMMENT = (
    "The row's JSON values whose key order jsonb would not keep, as given, by column name "
    "(JSON text); null when jsonb keeps every order."
)
TABLES = ("chats", "messages", "content_parts", "tool_calls", "feedback")


def upgrade() -> None:
    for table in TABLES:
        op.add_column(table, sa.Column("ordered_json", JSON_TEXT, nullable=True, comment=COMMENT))


def downgrade() -> None:
    for table in TABLES:
        if op.get_context().dialect.name == "postgresql":
            op.drop_column(table, "ordered_json")
        else:
            op.execute(f"ALTER TABLE {table} DROP COLUMN ordered_json")
