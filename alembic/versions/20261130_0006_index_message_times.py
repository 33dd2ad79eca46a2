"""An index on messages.created_at: time ranges of message analytics.

``daily_usage`` filtered by ``since`` / ``until`` (``chatarchive.analytics``,
``chatarchive stats --since``) selects messages by their time; without an index
PostgreSQL read every message of the archive to find the last week's.

Revision ID: 0006
Revises: 0005
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0006"
down_revision: str | Sequence[str] | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_messages_created_at", "messages", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_messages_created_at", table_name="messages")
