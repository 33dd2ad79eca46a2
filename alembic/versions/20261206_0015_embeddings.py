"""embeddings: the vector of each message's text, for search by meaning.

An archive given an embedding model (``configure_search(embedder=...)``)
keeps, for each message with text, the model's vector of it: a row per
message and model, written by the same ``sync`` / ``deferred`` indexing as the
search terms, deleted with its message. On PostgreSQL the vector is a
``real[]`` (the table is the same with or without pgvector; the HNSW index
that ``configure_search`` builds casts it to pgvector's ``vector``), on SQLite
32-bit floats in a BLOB. Each row carries its chat's user, for row-level
security, and joins the chats' shards on a distributed archive.

The downgrade drops the table and forgets the archive's embedder.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-06
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import op
from chatarchive._revision_sql import distribute_new_table

revision: str = "0015"
down_revision: str | Sequence[str] | None = "0014"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TEXT = sa.Text()
VECTOR = sa.LargeBinary().with_variant(postgresql.ARRAY(postgresql.REAL()), "postgresql")
POLICY = "chatarchive_user"
UNSCOPED = "coalesce(current_setting('chatarchive.user_id', true), '') = ''"
OWN_ROW = f"({UNSCOPED} OR chat_user_id = current_setting('chatarchive.user_id', true))"
FOREIGN_KEY = "fk_embeddings_chat_id_message_position_messages"
COMMENT = (
    "The vector of each message's text by the archive's embedding model, for search by meaning "
    "(written with the search terms, or by chatarchive db index)."
)


def _columns() -> list[sa.Column[object]]:
    return [
        sa.Column("chat_id", TEXT, nullable=False, comment="The chat."),
        sa.Column("message_position", sa.Integer(), nullable=False, comment="The message's position."),
        sa.Column(
            "model", TEXT, nullable=False, comment="The embedding model's name (the archive's embedder)."
        ),
        sa.Column("dimension", sa.Integer(), nullable=False, comment="How many numbers the vector has."),
        sa.Column(
            "embedding",
            VECTOR,
            nullable=False,
            comment=(
                "The vector of the message's text, scaled to length 1 (real[]; 32-bit floats on SQLite)."
            ),
        ),
        sa.Column(
            "chat_user_id",
            TEXT,
            nullable=True,
            comment=(
                "The chat's user (chats.user_id), kept in step with it: what row-level security reads "
                "(a policy cannot look the chat up on a distributed archive)."
            ),
        ),
        sa.PrimaryKeyConstraint("chat_id", "message_position", "model", name="pk_embeddings"),
    ]


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    keys = (
        []
        if postgres
        else [
            sa.ForeignKeyConstraint(
                ["chat_id", "message_position"],
                ["messages.chat_id", "messages.position"],
                name=FOREIGN_KEY,
                ondelete="CASCADE",
            )
        ]
    )
    op.create_table("embeddings", *_columns(), *keys, comment=COMMENT)
    if postgres:
        # On a distributed archive the table joins the chats' shards before its foreign key.
        op.execute(distribute_new_table("embeddings"))
        op.create_foreign_key(
            FOREIGN_KEY,
            "embeddings",
            "messages",
            ["chat_id", "message_position"],
            ["chat_id", "position"],
            ondelete="CASCADE",
        )
        op.execute(f"CREATE POLICY {POLICY} ON embeddings USING {OWN_ROW} WITH CHECK {OWN_ROW}")
        # Row-level security as the archive's other tables have it.
        op.execute(
            "DO $$ BEGIN IF (SELECT relrowsecurity FROM pg_class WHERE oid = to_regclass('chats')) THEN "
            "ALTER TABLE embeddings ENABLE ROW LEVEL SECURITY; ALTER TABLE embeddings FORCE ROW LEVEL SECURITY; "
            "END IF; END $$"
        )


def downgrade() -> None:
    op.drop_table("embeddings")
    op.execute("DELETE FROM archive_settings WHERE name IN ('search_embedder', 'search_dimension')")
