"""Each child row carries its chat's user, so that row-level security works on Citus.

The child tables' row-level security policies looked their chat up
(``EXISTS (SELECT 1 FROM chats ...)``), which Citus refuses in a policy on a
distributed table. Each child table now has ``chat_user_id``, the chat's
``user_id`` kept in step by chatarchive's writes, and its policy compares
that column with the session's ``chatarchive.user_id``: the same rows are
visible, on one server or distributed. Stored rows are filled in here.

The downgrade drops the columns and gives the child tables their former
policies back (where the tables are not distributed, as revision 0003 made
them).

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-05
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from chatarchive._revision_sql import if_distributed, unless_distributed

revision: str = "0013"
down_revision: str | Sequence[str] | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

POLICY = "chatarchive_user"
#: The tables whose rows belong to a chat, as the models have them.
CHILD_TABLES = ("chat_tags", "messages", "content_parts", "tool_calls", "feedback", "message_chunks")
#: And the search terms (PostgreSQL's table; SQLite's is a full-text table, and SQLite has no policies).
PG_CHILD_TABLES = (*CHILD_TABLES, "message_terms")
COMMENT = (
    "The chat's user (chats.user_id), kept in step with it: what row-level security reads "
    "(a policy cannot look the chat up on a distributed archive)."
)
UNSCOPED = "coalesce(current_setting('chatarchive.user_id', true), '') = ''"
OWN_ROW = f"({UNSCOPED} OR chat_user_id = current_setting('chatarchive.user_id', true))"


def _former_rule(table: str) -> str:
    return f"({UNSCOPED} OR EXISTS (SELECT 1 FROM chats c WHERE c.chat_id = {table}.chat_id))"


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table in PG_CHILD_TABLES if postgres else CHILD_TABLES:
        op.add_column(table, sa.Column("chat_user_id", sa.Text(), nullable=True, comment=COMMENT))
        if postgres:
            # A join on chat_id: on a distributed archive each shard with its chats' shard.
            op.execute(
                f"UPDATE {table} x SET chat_user_id = c.user_id FROM chats c "
                "WHERE c.chat_id = x.chat_id AND c.user_id IS NOT NULL"
            )
            op.execute(f"DROP POLICY IF EXISTS {POLICY} ON {table}")
            op.execute(f"CREATE POLICY {POLICY} ON {table} USING {OWN_ROW} WITH CHECK {OWN_ROW}")
        else:
            op.execute(
                f"UPDATE {table} SET chat_user_id = "
                f"(SELECT c.user_id FROM chats c WHERE c.chat_id = {table}.chat_id)"
            )


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    if postgres:
        # Distributed tables get no policy back (Citus refuses the former ones):
        # row-level security goes off there, for every table, as before this revision.
        op.execute(
            if_distributed(
                [
                    f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY; ALTER TABLE {table} DISABLE ROW LEVEL SECURITY"
                    for table in ("chats", "archive_settings", *PG_CHILD_TABLES)
                ]
            )
        )
    for table in PG_CHILD_TABLES if postgres else CHILD_TABLES:
        if postgres:
            op.execute(f"DROP POLICY IF EXISTS {POLICY} ON {table}")
            rule = _former_rule(table)
            op.execute(
                unless_distributed([f"CREATE POLICY {POLICY} ON {table} USING {rule} WITH CHECK {rule}"])
            )
        op.drop_column(table, "chat_user_id")
