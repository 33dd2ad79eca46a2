"""attachments: the bytes of images, audio and files stored once per user.

With attachments stored once (``set_attachments_stored_once``), a content
part's base64 payload (a data URL's, or a bare base64 string's) is kept as
bytes in ``attachments``, keyed by its user and its SHA-256, and the part's
row names it (``attachment_sha256``) and where in its JSON it was
(``attachment_path``). The same image sent in ten turns or ten chats of a
user is stored once. ``attachments`` has row-level security like the
chats' tables (a user sees their own), and on a distributed archive it is
distributed by ``sha256`` in as many shards as ``chats``.

The archive's own tables, ``archive_settings`` and ``model_prices``, get
two policies: every role reads them, and only a transaction that names no
user changes them. With row-level security on, ``model_prices`` had none
(a table without a policy shows no row), and the one policy of
``archive_settings`` let a user's transaction delete the settings.

The downgrade puts every payload back into its part, then drops the columns
and the table.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-08
"""

from __future__ import annotations

import base64
from collections.abc import Sequence

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql

from alembic import context, op
from chatarchive._revision_sql import distribute_new_table

revision: str = "0017"
down_revision: str | Sequence[str] | None = "0016"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TEXT = sa.Text()
JSON = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
POLICY = "chatarchive_user"
READ_POLICY = "chatarchive_read"
#: The tables that belong to no user.
ARCHIVE_TABLES = ("archive_settings", "model_prices")
UNSCOPED = "coalesce(current_setting('chatarchive.user_id', true), '') = ''"
OWN_ROW = f"({UNSCOPED} OR user_id = current_setting('chatarchive.user_id', true))"
COMMENT = (
    "The bytes of images, audio and files that content parts gave as base64, stored once per user "
    "by their SHA-256 (with attachments stored once); the parts refer to them."
)
COLUMN_COMMENTS = {
    "user_id": (
        "Whose attachment it is: the user of the chats whose parts hold it ('' for chats of no user)."
    ),
    "sha256": "The SHA-256 of the bytes (hex): the attachment's name.",
    "media_type": "Its media type, as the part gave it (else from its first bytes).",
    "size": "Its size in bytes.",
    "data": "The bytes.",
}
PART_SHA256_COMMENT = "The attachment holding the part's base64 payload (null: the part holds it)."
PART_PATH_COMMENT = (
    "Where in data the payload was (a JSON array of keys and indexes); the value there keeps what came "
    "before it (a data URL's prefix)."
)


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "attachments",
        sa.Column("user_id", TEXT, nullable=False, comment=COLUMN_COMMENTS["user_id"]),
        sa.Column("sha256", TEXT, nullable=False, comment=COLUMN_COMMENTS["sha256"]),
        sa.Column("media_type", TEXT, nullable=False, comment=COLUMN_COMMENTS["media_type"]),
        sa.Column("size", sa.BigInteger(), nullable=False, comment=COLUMN_COMMENTS["size"]),
        sa.Column("data", sa.LargeBinary(), nullable=False, comment=COLUMN_COMMENTS["data"]),
        sa.CheckConstraint("size >= 0", name="ck_attachments_size_not_negative"),
        sa.PrimaryKeyConstraint("user_id", "sha256", name="pk_attachments"),
        comment=COMMENT,
    )
    op.add_column(
        "content_parts", sa.Column("attachment_sha256", TEXT, nullable=True, comment=PART_SHA256_COMMENT)
    )
    op.add_column(
        "content_parts", sa.Column("attachment_path", JSON, nullable=True, comment=PART_PATH_COMMENT)
    )
    op.create_index(
        "ix_content_parts_attachments",
        "content_parts",
        ["attachment_sha256"],
        postgresql_where=sa.text("attachment_sha256 IS NOT NULL"),
        sqlite_where=sa.text("attachment_sha256 IS NOT NULL"),
    )
    if postgres:
        op.execute(distribute_new_table("attachments", by="sha256"))
        op.execute(f"CREATE POLICY {POLICY} ON attachments USING {OWN_ROW} WITH CHECK {OWN_ROW}")
        # The archive's own tables: every role reads them, only an unscoped
        # transaction changes them (a policy FOR ALL with USING (true) let a
        # user's transaction delete the archive's settings).
        op.execute(f"DROP POLICY IF EXISTS {POLICY} ON archive_settings")
        for table in ARCHIVE_TABLES:
            op.execute(f"CREATE POLICY {READ_POLICY} ON {table} FOR SELECT USING (true)")
            op.execute(f"CREATE POLICY {POLICY} ON {table} USING ({UNSCOPED}) WITH CHECK ({UNSCOPED})")
        # Row-level security as the archive's other tables have it.
        op.execute(
            "DO $$ BEGIN IF (SELECT relrowsecurity FROM pg_class WHERE oid = to_regclass('chats')) THEN "
            "ALTER TABLE attachments ENABLE ROW LEVEL SECURITY; ALTER TABLE attachments FORCE ROW LEVEL SECURITY; "
            "END IF; END $$"
        )


OFFLINE_REFUSAL = (
    "parts of stored chats refer to attachments, which only a downgrade run on the database puts back "
    "into them (chatarchive db downgrade, without --sql)"
)


def downgrade() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    if context.is_offline_mode():
        for statement in _refuse_if_held(postgres):
            op.execute(statement)
    else:
        _put_payloads_back()
    if postgres:
        for table in ARCHIVE_TABLES:
            op.execute(f"DROP POLICY IF EXISTS {READ_POLICY} ON {table}")
            op.execute(f"DROP POLICY IF EXISTS {POLICY} ON {table}")
        op.execute(f"CREATE POLICY {POLICY} ON archive_settings USING (true) WITH CHECK ({UNSCOPED})")
    op.drop_index("ix_content_parts_attachments", table_name="content_parts")
    op.drop_column("content_parts", "attachment_path")
    op.drop_column("content_parts", "attachment_sha256")
    op.drop_table("attachments")


def _refuse_if_held(postgres: bool) -> list[str]:
    """SQL (rendered offline) that fails, saying why, if a part refers to an attachment."""
    quoted = "'" + OFFLINE_REFUSAL.replace("'", "''") + "'"
    held = "SELECT 1 FROM content_parts WHERE attachment_sha256 IS NOT NULL"
    if postgres:
        return [f"DO $$ BEGIN IF EXISTS ({held}) THEN RAISE EXCEPTION {quoted}; END IF; END $$"]
    # SQLite raises only in a trigger: one on a scratch table that gets a row if a part is held.
    return [
        "CREATE TEMPORARY TABLE attachment_check (found INTEGER)",
        "CREATE TEMPORARY TRIGGER refuse_to_drop_attachments BEFORE INSERT ON attachment_check "
        f"BEGIN SELECT RAISE(ABORT, {quoted}); END",
        f"INSERT INTO attachment_check {held} LIMIT 1",
        "DROP TABLE attachment_check",
    ]


def _put_payloads_back() -> None:
    """Every part that refers to an attachment holds its payload again."""
    bind = op.get_bind()
    parts = sa.table(
        "content_parts",
        sa.column("chat_id", TEXT),
        sa.column("message_position", sa.Integer()),
        sa.column("position", sa.Integer()),
        sa.column("chat_user_id", TEXT),
        sa.column("data", JSON),
        sa.column("ordered_json", sa.JSON()),
        sa.column("attachment_sha256", TEXT),
        sa.column("attachment_path", JSON),
    )
    attachments = sa.table(
        "attachments",
        sa.column("user_id", TEXT),
        sa.column("sha256", TEXT),
        sa.column("data", sa.LargeBinary()),
    )
    held = bind.execute(sa.select(parts).where(parts.c.attachment_sha256.is_not(None))).mappings().all()
    for row in held:
        raw = bind.execute(
            sa.select(attachments.c.data).where(
                attachments.c.user_id == (row["chat_user_id"] or ""),
                attachments.c.sha256 == row["attachment_sha256"],
            )
        ).scalar_one()
        values = {"data": _restored(row["data"], row["attachment_path"], raw)}
        ordered = row["ordered_json"]
        if ordered and "data" in ordered:
            values["ordered_json"] = {
                **ordered,
                "data": _restored(ordered["data"], row["attachment_path"], raw),
            }
        bind.execute(
            sa.update(parts)
            .where(
                parts.c.chat_id == row["chat_id"],
                parts.c.message_position == row["message_position"],
                parts.c.position == row["position"],
            )
            .values(values)
        )


def _restored(data: object, path: Sequence[str | int], raw: bytes) -> object:
    """``data`` with the payload put back after the prefix at ``path`` (this
    revision's own copy of what the archive does, as revisions keep theirs)."""
    if not path:
        assert isinstance(data, str)
        return data + base64.b64encode(raw).decode("ascii")
    step, rest = path[0], path[1:]
    if isinstance(data, dict):
        return {**data, step: _restored(data[step], rest, raw)}
    assert isinstance(data, list)
    assert isinstance(step, int)
    copied = list(data)
    copied[step] = _restored(copied[step], rest, raw)
    return copied
