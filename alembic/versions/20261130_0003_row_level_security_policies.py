"""Row-level security policies keyed on the session setting chatarchive.user_id.

PostgreSQL only. The policies are created here but row-level security stays
off: ``chatarchive db rls on`` (ChatArchive.set_row_level_security) enables and
forces it on the six tables, so that even raw SQL through the application's
role sees only the rows of the user named by ``chatarchive.user_id``, which a
scoped archive (``archive.for_user(...)``) sets in every transaction. A session
that has not set it sees every row, as before. On PostgreSQL 15 and later the
views become security_invoker views, so they obey the same policies.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op
from chatarchive._revision_sql import unless_distributed

revision: str = "0003"
down_revision: str | Sequence[str] | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

POLICY = "chatarchive_user"
CHILD_TABLES = ("chat_tags", "messages", "content_parts", "tool_calls", "feedback")
VIEWS = ("message_texts", "tool_call_results", "chat_stats", "daily_usage", "feedback_summary")
UNSCOPED = "coalesce(current_setting('chatarchive.user_id', true), '') = ''"
OWN_CHAT = f"({UNSCOPED} OR user_id = current_setting('chatarchive.user_id', true))"


def _child_rule(table: str) -> str:
    return f"({UNSCOPED} OR EXISTS (SELECT 1 FROM chats c WHERE c.chat_id = {table}.chat_id))"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"CREATE POLICY {POLICY} ON chats USING {OWN_CHAT} WITH CHECK {OWN_CHAT}")
    # Citus refuses a policy that reads chats on a distributed table (a
    # distributed archive migrated back down and up again): those have none.
    op.execute(
        unless_distributed(
            [
                f"CREATE POLICY {POLICY} ON {table} USING {_child_rule(table)} WITH CHECK {_child_rule(table)}"
                for table in CHILD_TABLES
            ]
        )
    )
    # Views then read the tables with the rights (and the policies) of whoever queries them.
    op.execute(on_invoker_servers([f"ALTER VIEW {view} SET (security_invoker = true)" for view in VIEWS]))


def on_invoker_servers(statements: list[str]) -> str:
    """``statements`` run only by a server that has security_invoker views
    (PostgreSQL 15 and later), decided by the server itself so that the SQL
    rendered offline (``alembic upgrade --sql``) is right for any version."""
    body = " ".join(f"{statement};" for statement in statements)
    return f"DO $$ BEGIN IF current_setting('server_version_num')::int >= 150000 THEN {body} END IF; END $$"


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(on_invoker_servers([f"ALTER VIEW {view} RESET (security_invoker)" for view in VIEWS]))
    for table in ("chats", *CHILD_TABLES):
        op.execute(f"ALTER TABLE {table} NO FORCE ROW LEVEL SECURITY")
        op.execute(f"ALTER TABLE {table} DISABLE ROW LEVEL SECURITY")
        op.execute(f"DROP POLICY IF EXISTS {POLICY} ON {table}")  # none on a distributed child table
