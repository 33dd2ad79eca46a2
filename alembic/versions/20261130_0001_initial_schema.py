"""Initial schema: chats, chat_tags, messages, content_parts, tool_calls, feedback.

Revision ID: 0001
Revises:
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op

# Plain types, so that this revision never depends on chatarchive's code.
TEXT = sa.Text()
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)

revision: str = "0001"
down_revision: str | Sequence[str] | None = None
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "chats",
        sa.Column("chat_id", TEXT, nullable=False),
        sa.Column("user_id", TEXT, nullable=True),
        sa.Column("title", TEXT, nullable=True),
        sa.Column("model", TEXT, nullable=True),
        sa.Column("model_settings", JSON, nullable=True),
        sa.Column("workflow", JSON, nullable=True),
        sa.Column("metadata", JSON, nullable=True),
        sa.Column("extra", JSON, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=False),
        sa.Column("message_count", sa.Integer(), nullable=False),
        sa.Column("version", sa.Integer(), nullable=False),
        sa.CheckConstraint("message_count >= 0", name=op.f("ck_chats_message_count_not_negative")),
        sa.CheckConstraint("version >= 1", name=op.f("ck_chats_version_positive")),
        sa.PrimaryKeyConstraint("chat_id", name=op.f("pk_chats")),
    )
    op.create_index(
        op.f("ix_chats_updated_at_chat_id"),
        "chats",
        ["updated_at", "chat_id"],
        unique=False,
    )
    op.create_index(
        op.f("ix_chats_user_id_updated_at_chat_id"),
        "chats",
        ["user_id", "updated_at", "chat_id"],
        unique=False,
    )
    op.create_table(
        "chat_tags",
        sa.Column("chat_id", TEXT, nullable=False),
        sa.Column("tag", TEXT, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["chat_id"],
            ["chats.chat_id"],
            name=op.f("fk_chat_tags_chat_id_chats"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("chat_id", "tag", name=op.f("pk_chat_tags")),
    )
    op.create_index(op.f("ix_chat_tags_tag"), "chat_tags", ["tag"], unique=False)
    op.create_table(
        "messages",
        sa.Column("chat_id", TEXT, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("uid", TEXT, nullable=False),
        sa.Column("role", TEXT, nullable=False),
        sa.Column("name", TEXT, nullable=True),
        sa.Column("tool_call_id", TEXT, nullable=True),
        sa.Column("content_form", TEXT, nullable=False),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("updated_at", TIMESTAMP, nullable=True),
        sa.Column("completed", sa.Boolean(), nullable=False),
        sa.Column("model", TEXT, nullable=True),
        sa.Column("finish_reason", TEXT, nullable=True),
        sa.Column("prompt_tokens", sa.Integer(), nullable=True),
        sa.Column("completion_tokens", sa.Integer(), nullable=True),
        sa.Column("total_tokens", sa.Integer(), nullable=True),
        sa.Column("extra", JSON, nullable=True),
        sa.CheckConstraint(
            "content_form IN ('string', 'parts', 'null', 'absent')",
            name=op.f("ck_messages_content_form_known"),
        ),
        sa.CheckConstraint("position >= 0", name=op.f("ck_messages_position_not_negative")),
        sa.ForeignKeyConstraint(
            ["chat_id"],
            ["chats.chat_id"],
            name=op.f("fk_messages_chat_id_chats"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("chat_id", "position", name=op.f("pk_messages")),
        sa.UniqueConstraint("chat_id", "uid", name=op.f("uq_messages_chat_id_uid")),
    )
    op.create_table(
        "content_parts",
        sa.Column("chat_id", TEXT, nullable=False),
        sa.Column("message_position", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("type", TEXT, nullable=False),
        sa.Column("text", TEXT, nullable=True),
        sa.Column("data", JSON, nullable=True),
        sa.ForeignKeyConstraint(
            ["chat_id", "message_position"],
            ["messages.chat_id", "messages.position"],
            name=op.f("fk_content_parts_chat_id_message_position_messages"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("chat_id", "message_position", "position", name=op.f("pk_content_parts")),
    )
    op.create_table(
        "feedback",
        sa.Column("chat_id", TEXT, nullable=False),
        sa.Column("id", TEXT, nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("message_uid", TEXT, nullable=True),
        sa.Column("user_id", TEXT, nullable=True),
        sa.Column("score", sa.Double(), nullable=True),
        sa.Column("label", TEXT, nullable=True),
        sa.Column("comment", TEXT, nullable=True),
        sa.Column("created_at", TIMESTAMP, nullable=False),
        sa.Column("extra", JSON, nullable=True),
        sa.ForeignKeyConstraint(
            ["chat_id", "message_uid"],
            ["messages.chat_id", "messages.uid"],
            name=op.f("fk_feedback_chat_id_message_uid_messages"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["chat_id"],
            ["chats.chat_id"],
            name=op.f("fk_feedback_chat_id_chats"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("chat_id", "id", name=op.f("pk_feedback")),
    )
    op.create_table(
        "tool_calls",
        sa.Column("chat_id", TEXT, nullable=False),
        sa.Column("message_position", sa.Integer(), nullable=False),
        sa.Column("position", sa.Integer(), nullable=False),
        sa.Column("call_id", TEXT, nullable=True),
        sa.Column("type", TEXT, nullable=True),
        sa.Column("name", TEXT, nullable=True),
        sa.Column("arguments", TEXT, nullable=True),
        sa.Column("data", JSON, nullable=True),
        sa.ForeignKeyConstraint(
            ["chat_id", "message_position"],
            ["messages.chat_id", "messages.position"],
            name=op.f("fk_tool_calls_chat_id_message_position_messages"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("chat_id", "message_position", "position", name=op.f("pk_tool_calls")),
    )
    op.create_index(
        op.f("ix_tool_calls_chat_id_call_id"),
        "tool_calls",
        ["chat_id", "call_id"],
        unique=False,
    )


def downgrade() -> None:
    op.drop_index(op.f("ix_tool_calls_chat_id_call_id"), table_name="tool_calls")
    op.drop_table("tool_calls")
    op.drop_table("feedback")
    op.drop_table("content_parts")
    op.drop_table("messages")
    op.drop_index(op.f("ix_chat_tags_tag"), table_name="chat_tags")
    op.drop_table("chat_tags")
    op.drop_index(op.f("ix_chats_user_id_updated_at_chat_id"), table_name="chats")
    op.drop_index(op.f("ix_chats_updated_at_chat_id"), table_name="chats")
    op.drop_table("chats")
