"""user_keys and chats.sealed: a user's chats sealed with a key of their own.

An archive given ``UserKeys`` (``chatarchive.encryption``) seals the chats of
users it writes whole: their messages' text, their parts' text and data,
their tool calls' arguments and their streamed chunks are stored encrypted
under the user's data key, which ``user_keys`` holds wrapped by the
application's master key; ``chats.sealed`` says which chats are. Deleting a
user's key leaves their sealed chats unreadable. ``user_keys`` has
row-level security like the chats (a user sees their own key's row), and on
a distributed archive it is distributed by ``user_id``.

The downgrade refuses while a chat is sealed (its text would stay
ciphertext nobody reads); otherwise it drops the column and the table.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-08
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from chatarchive._revision_sql import distribute_new_table

revision: str = "0018"
down_revision: str | Sequence[str] | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TEXT = sa.Text()
POLICY = "chatarchive_user"
UNSCOPED = "coalesce(current_setting('chatarchive.user_id', true), '') = ''"
OWN_ROW = f"({UNSCOPED} OR user_id = current_setting('chatarchive.user_id', true))"
SEALED_COMMENT = (
    "Whether the chat's text (messages.text, content_parts.text and data, tool_calls.arguments, "
    "message_chunks.text) is sealed with its user's key (user_keys): AES-256-GCM, base64."
)
COMMENT = (
    "Each user's data key, wrapped by the application's master key: deleting it leaves the user's "
    "sealed chats unreadable."
)
REFUSAL = (
    "downgrading below revision 0018 would leave sealed chats as ciphertext that nothing reads; "
    "save them again with an archive without keys (or delete them) first"
)


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.add_column(
        "chats",
        sa.Column(
            "sealed", sa.Boolean(), server_default=sa.text("false"), nullable=False, comment=SEALED_COMMENT
        ),
    )
    op.create_table(
        "user_keys",
        sa.Column("user_id", TEXT, nullable=False, comment="The user."),
        sa.Column(
            "wrapped",
            sa.LargeBinary(),
            nullable=False,
            comment="The user's data key, wrapped (encrypted) by the application's master key or its KMS.",
        ),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False, comment="When the key was made."),
        sa.PrimaryKeyConstraint("user_id", name="pk_user_keys"),
        comment=COMMENT,
    )
    if postgres:
        op.execute(distribute_new_table("user_keys", by="user_id"))
        op.execute(f"CREATE POLICY {POLICY} ON user_keys USING {OWN_ROW} WITH CHECK {OWN_ROW}")
        op.execute(
            "DO $$ BEGIN IF (SELECT relrowsecurity FROM pg_class WHERE oid = to_regclass('chats')) THEN "
            "ALTER TABLE user_keys ENABLE ROW LEVEL SECURITY; ALTER TABLE user_keys FORCE ROW LEVEL SECURITY; "
            "END IF; END $$"
        )


def downgrade() -> None:
    postgres = op.get_context().dialect.name == "postgresql"
    quoted = "'" + REFUSAL.replace("'", "''") + "'"
    if postgres:
        op.execute(
            f"DO $$ BEGIN IF EXISTS (SELECT 1 FROM chats WHERE sealed) THEN RAISE EXCEPTION {quoted}; END IF; END $$"
        )
    elif context.is_offline_mode():
        for statement in (
            "CREATE TEMPORARY TABLE sealed_check (found INTEGER)",
            f"CREATE TEMPORARY TRIGGER refuse_to_unseal BEFORE INSERT ON sealed_check BEGIN SELECT RAISE(ABORT, {quoted}); END",
            "INSERT INTO sealed_check SELECT 1 FROM chats WHERE sealed LIMIT 1",
            "DROP TABLE sealed_check",
        ):
            op.execute(statement)
    elif op.get_bind().execute(sa.text("SELECT 1 FROM chats WHERE sealed LIMIT 1")).first() is not None:
        raise RuntimeError(REFUSAL)
    op.drop_table("user_keys")
    op.drop_column("chats", "sealed")
