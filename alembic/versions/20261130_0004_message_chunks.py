"""message_chunks: streamed pieces of messages still being written.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from chatarchive._revision_sql import distribute_new_table, unless_distributed

revision: str = "0004"
down_revision: str | Sequence[str] | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TEXT = sa.Text()
FOREIGN_KEY = (["chat_id", "message_position"], ["messages.chat_id", "messages.position"])
FOREIGN_KEY_NAME = "fk_message_chunks_chat_id_message_position_messages"


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
        sa.PrimaryKeyConstraint("chat_id", "message_position", "position", name=op.f("pk_message_chunks")),
        *(
            []
            if postgres
            else [sa.ForeignKeyConstraint(*FOREIGN_KEY, name=op.f(FOREIGN_KEY_NAME), ondelete="CASCADE")]
        ),
        comment="Streamed pieces of messages still being written; folded in when complete.",
    )
    if postgres:
        # On a distributed archive the table joins the chats' shards before its foreign key.
        op.execute(distribute_new_table("message_chunks"))
        op.create_foreign_key(
            op.f(FOREIGN_KEY_NAME),
            "message_chunks",
            "messages",
            ["chat_id", "message_position"],
            ["chat_id", "position"],
            ondelete="CASCADE",
        )
        rule = (
            "(coalesce(current_setting('chatarchive.user_id', true), '') = '' OR "
            "EXISTS (SELECT 1 FROM chats c WHERE c.chat_id = message_chunks.chat_id))"
        )
        op.execute(
            unless_distributed(
                [f"CREATE POLICY chatarchive_user ON message_chunks USING {rule} WITH CHECK {rule}"]
            )
        )


def downgrade() -> None:
    op.drop_table("message_chunks")
