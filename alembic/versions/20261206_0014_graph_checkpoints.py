"""checkpoints, checkpoint_blobs, checkpoint_writes: graphs' threads (LangGraph).

A thread is a chat. Its checkpoints are rows, each with the version of each
channel; a channel's value at a version is a row of ``checkpoint_blobs``,
serialized, or for a channel of messages the message that ends its path in
the chat's tree (a foreign key keeps that message from being deleted from
under the checkpoint); the writes pending at a checkpoint are rows of
``checkpoint_writes``. Each row carries its chat's user, for row-level
security, and joins the chats' shards on a distributed archive.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op
from chatarchive._revision_sql import distribute_new_table

revision: str = "0014"
down_revision: str | Sequence[str] | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TEXT = sa.Text()
BYTES = sa.LargeBinary()
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
TIMESTAMP = sa.DateTime(timezone=True)
POLICY = "chatarchive_user"
UNSCOPED = "coalesce(current_setting('chatarchive.user_id', true), '') = ''"
OWN_ROW = f"({UNSCOPED} OR chat_user_id = current_setting('chatarchive.user_id', true))"
USER_COMMENT = (
    "The chat's user (chats.user_id), kept in step with it: what row-level security reads "
    "(a policy cannot look the chat up on a distributed archive)."
)


def _user() -> sa.Column[str]:
    return sa.Column("chat_user_id", TEXT, nullable=True, comment=USER_COMMENT)


TABLES = ("checkpoints", "checkpoint_blobs", "checkpoint_writes")


def _chat_key(table: str) -> tuple[str, str, list[str], list[str]]:
    return (f"fk_{table}_chat_id_chats", "chats", ["chat_id"], ["chat_id"])


#: Each table's foreign keys: name, referred table, columns, referred columns, ON DELETE.
FOREIGN_KEYS: dict[str, list[tuple[str, str, list[str], list[str], str | None]]] = {
    "checkpoints": [(*_chat_key("checkpoints"), "CASCADE")],
    "checkpoint_blobs": [
        (*_chat_key("checkpoint_blobs"), "CASCADE"),
        (
            "fk_checkpoint_blobs_chat_id_message_uid_messages",
            "messages",
            ["chat_id", "message_uid"],
            ["chat_id", "uid"],
            None,
        ),
    ],
    "checkpoint_writes": [(*_chat_key("checkpoint_writes"), "CASCADE")],
}


def _columns(table: str) -> list[sa.Column[object]]:
    if table == "checkpoints":
        return [
            sa.Column("chat_id", TEXT, nullable=False, comment="The thread's chat."),
            sa.Column(
                "checkpoint_ns",
                TEXT,
                nullable=False,
                comment="The graph's namespace ('' for the root graph).",
            ),
            sa.Column(
                "checkpoint_id", TEXT, nullable=False, comment="The checkpoint's id, increasing with time."
            ),
            sa.Column(
                "parent_checkpoint_id",
                TEXT,
                nullable=True,
                comment="The checkpoint this one follows (null: the thread's first).",
            ),
            sa.Column("run_id", TEXT, nullable=True, comment="The run that made the checkpoint."),
            sa.Column(
                "type",
                TEXT,
                nullable=False,
                comment="How checkpoint is serialized (the graph serializer's type).",
            ),
            sa.Column(
                "checkpoint",
                BYTES,
                nullable=False,
                comment="The checkpoint without its channels' values, serialized.",
            ),
            sa.Column("metadata_type", TEXT, nullable=False, comment="How metadata is serialized."),
            sa.Column(
                "metadata",
                BYTES,
                nullable=False,
                comment="The checkpoint's metadata (source, step, ...), serialized.",
            ),
            sa.Column(
                "channel_versions",
                JSON,
                nullable=False,
                comment="The version of each channel at the checkpoint (JSON object of text).",
            ),
            sa.Column("created_at", TIMESTAMP, nullable=False, comment="When the checkpoint was stored."),
            _user(),
            sa.PrimaryKeyConstraint("chat_id", "checkpoint_ns", "checkpoint_id", name="pk_checkpoints"),
        ]
    if table == "checkpoint_blobs":
        return [
            sa.Column("chat_id", TEXT, nullable=False, comment="The thread's chat."),
            sa.Column("checkpoint_ns", TEXT, nullable=False, comment="The graph's namespace."),
            sa.Column("channel", TEXT, nullable=False, comment="The channel."),
            sa.Column("version", TEXT, nullable=False, comment="The channel's version (as text)."),
            sa.Column(
                "type",
                TEXT,
                nullable=False,
                comment="How blob is serialized; 'chatarchive:messages' for messages kept as the chat's rows.",
            ),
            sa.Column(
                "blob",
                BYTES,
                nullable=True,
                comment="The serialized value (null for messages kept as rows, or an empty channel).",
            ),
            sa.Column(
                "message_uid",
                TEXT,
                nullable=True,
                comment="For messages kept as rows: the uid of their path's last message (null: none).",
            ),
            _user(),
            sa.PrimaryKeyConstraint(
                "chat_id", "checkpoint_ns", "channel", "version", name="pk_checkpoint_blobs"
            ),
        ]
    return [
        sa.Column("chat_id", TEXT, nullable=False, comment="The thread's chat."),
        sa.Column("checkpoint_ns", TEXT, nullable=False, comment="The graph's namespace."),
        sa.Column("checkpoint_id", TEXT, nullable=False, comment="The checkpoint the write is pending at."),
        sa.Column("task_id", TEXT, nullable=False, comment="The task that wrote."),
        sa.Column(
            "idx",
            sa.Integer(),
            nullable=False,
            comment="The write's place among the task's writes (negative for special channels).",
        ),
        sa.Column("channel", TEXT, nullable=False, comment="The channel written."),
        sa.Column("type", TEXT, nullable=False, comment="How blob is serialized."),
        sa.Column("blob", BYTES, nullable=False, comment="The value written, serialized."),
        sa.Column("task_path", TEXT, nullable=False, comment="The task's path in the graph."),
        _user(),
        sa.PrimaryKeyConstraint(
            "chat_id", "checkpoint_ns", "checkpoint_id", "task_id", "idx", name="pk_checkpoint_writes"
        ),
    ]


COMMENTS = {
    "checkpoints": (
        "Checkpoints of graphs' threads (LangGraph): the graph's state at a step, serialized without its "
        "channels' values."
    ),
    "checkpoint_blobs": (
        "Values of a thread's channels by version: serialized, or the last message of a path for a "
        "channel of messages."
    ),
    "checkpoint_writes": "Writes of tasks to channels, pending at a checkpoint.",
}


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    for table in TABLES:
        keys = (
            []
            if postgres
            else [
                sa.ForeignKeyConstraint(
                    columns, [f"{referred}.{c}" for c in referred_columns], name=name, ondelete=action
                )
                for name, referred, columns, referred_columns, action in FOREIGN_KEYS[table]
            ]
        )
        op.create_table(table, *_columns(table), *keys, comment=COMMENTS[table])
        if postgres:
            # On a distributed archive the table joins the chats' shards before its foreign keys.
            op.execute(distribute_new_table(table))
            for name, referred, columns, referred_columns, action in FOREIGN_KEYS[table]:
                op.create_foreign_key(name, table, referred, columns, referred_columns, ondelete=action)
            op.execute(f"CREATE POLICY {POLICY} ON {table} USING {OWN_ROW} WITH CHECK {OWN_ROW}")
            # Row-level security as the archive's other tables have it.
            op.execute(
                "DO $$ BEGIN IF (SELECT relrowsecurity FROM pg_class WHERE oid = to_regclass('chats')) THEN "
                f"ALTER TABLE {table} ENABLE ROW LEVEL SECURITY; ALTER TABLE {table} FORCE ROW LEVEL SECURITY; "
                "END IF; END $$"
            )
    op.create_index("ix_checkpoints_run_id", "checkpoints", ["run_id"])


def downgrade() -> None:
    op.drop_index("ix_checkpoints_run_id", table_name="checkpoints")
    for table in reversed(TABLES):
        op.drop_table(table)
