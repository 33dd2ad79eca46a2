"""message_chunks: streamed pieces of messages still being written.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TEXT = sa.Text()


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "message_chunks",
        sa.Column("chat_id", TEXT, nullable=False, comment="The chat."),
        sa.Column("message_position", sa.Integer(), nullable=False, comment="The message's position."),
        sa.Column("position", sa.Integer(), nullable=False, comment="Order of the chunks."),
        sa.Column(
            "tool_call_index",
            sa.Integer(),
            nullable=True,
            comment="Null for content text; else the tool call whose arguments this continues.",
        ),
        sa.Column("text", TEXT, nullable=False, comment="The chunk's text."),
        sa.ForeignKeyConstraint(
            ["chat_id", "message_position"],
            ["messages.chat_id", "messages.position"],
            name=op.f("fk_message_chunks_chat_id_message_position_messages"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("chat_id", "message_position", "position", name=op.f("pk_message_chunks")),
        comment="Streamed pieces of messages still being written; folded in when complete.",
    )
    if postgres:
        rule = (
            "(coalesce(current_setting('chatarchive.user_id', true), '') = '' OR "
            "EXISTS (SELECT 1 FROM chats c WHERE c.chat_id = message_chunks.chat_id))"
        )
        op.execute(f"CREATE POLICY chatarchive_user ON message_chunks USING {rule} WITH CHECK {rule}")


def downgrade() -> None:
    op.drop_table("message_chunks")
