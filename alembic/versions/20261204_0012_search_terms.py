"""Search in every script: each message's terms, indexed once, now or later.

The full-text indexes split text at spaces (PostgreSQL's ``english``
configuration, SQLite's ``unicode61``), so nothing in a Chinese or Japanese
text could be found. chatarchive now splits each message's text into terms
itself (words of space-separated scripts, stemmed in the archive's language;
pairs of CJK characters; emoji), the same way on both databases, and stores
them in ``message_terms``: on PostgreSQL a table of ``tsvector`` with a GIN
index, on SQLite an FTS5 table. A message's terms go when the message does
(a foreign key on PostgreSQL, a trigger on SQLite).

``archive_settings`` holds the archive's search configuration (language,
CJK splitting, and whether writes index at once or leave it to
``chatarchive db index``); ``chats.search_from`` marks a chat whose messages
from that position on are still to be indexed.

The old indexes and FTS5 tables are dropped, and every chat is marked: its
terms are computed by chatarchive, not by SQL, so ``chatarchive db upgrade``
(and ``upgrade()``) index them right after this revision; after a plain
``alembic upgrade`` or ``--sql``, run ``chatarchive db index``. An archive
whose search index was off stays off.

The downgrade drops the terms and builds the old indexes (or FTS5 tables)
again, unless search was off.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-04
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import context, op
from chatarchive._revision_sql import distribute_new_table, if_distributed, unless_distributed

revision: str = "0012"
down_revision: str | Sequence[str] | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

UNSCOPED = "coalesce(current_setting('chatarchive.user_id', true), '') = ''"
TERMS_RULE = f"({UNSCOPED} OR EXISTS (SELECT 1 FROM chats c WHERE c.chat_id = message_terms.chat_id))"
TERMS_COMMENT = (
    "The search terms of each message with text (its string content, or its text parts), "
    "as chatarchive splits them, with their positions."
)
SEARCH_FROM_COMMENT = (
    "Position of the first message whose search terms are still to be indexed "
    "(null: the chat is searchable as written)."
)
SETTINGS_COMMENT = "The archive's settings (its search configuration), by name."

PG_TERMS = [
    "CREATE TABLE message_terms ("
    "chat_id text NOT NULL, message_position integer NOT NULL, terms tsvector NOT NULL, "
    "CONSTRAINT pk_message_terms PRIMARY KEY (chat_id, message_position))",
    # On a distributed archive the table joins the chats' shards before its foreign key.
    distribute_new_table("message_terms"),
    "ALTER TABLE message_terms ADD CONSTRAINT fk_message_terms_chat_id_message_position_messages "
    "FOREIGN KEY (chat_id, message_position) REFERENCES messages (chat_id, position) ON DELETE CASCADE",
    "CREATE INDEX ix_message_terms_terms ON message_terms USING gin (terms)",
    f"COMMENT ON TABLE message_terms IS '{TERMS_COMMENT}'",
    "COMMENT ON COLUMN message_terms.chat_id IS 'The chat.'",
    "COMMENT ON COLUMN message_terms.message_position IS 'The message''s position in its chat.'",
    "COMMENT ON COLUMN message_terms.terms IS "
    "'The message''s terms with their positions (at most 16,383), as chatarchive splits its text.'",
    unless_distributed(
        [f"CREATE POLICY chatarchive_user ON message_terms USING {TERMS_RULE} WITH CHECK {TERMS_RULE}"]
    ),
    # Row-level security is on for all the archive's tables or for none.
    "DO $$ BEGIN IF (SELECT relrowsecurity FROM pg_class WHERE oid = 'messages'::regclass) THEN "
    "ALTER TABLE message_terms ENABLE ROW LEVEL SECURITY; ALTER TABLE message_terms FORCE ROW LEVEL SECURITY; "
    "ALTER TABLE archive_settings ENABLE ROW LEVEL SECURITY; "
    "ALTER TABLE archive_settings FORCE ROW LEVEL SECURITY; END IF; END $$",
]
SQLITE_TERMS = [
    "CREATE VIRTUAL TABLE message_terms USING fts5(terms, tokenize='ascii')",
    "CREATE TRIGGER message_terms_delete AFTER DELETE ON messages BEGIN "
    "DELETE FROM message_terms WHERE rowid = old.rowid; END",
]

# The indexes and FTS5 tables of revisions 0002, 0005 and 0009.
PG_OLD = {
    "ix_messages_text_search": "ON messages USING gin (to_tsvector('english', left(text, 100000))) "
    "WHERE text IS NOT NULL",
    "ix_content_parts_text_search": "ON content_parts USING gin (to_tsvector('english', left(text, 100000))) "
    "WHERE type = 'text'",
}
SQLITE_OLD = {
    "message_text_search": [
        "CREATE VIRTUAL TABLE message_text_search USING fts5("
        "text, content='messages', content_rowid='rowid', tokenize='porter unicode61')",
        "CREATE TRIGGER message_text_search_insert AFTER INSERT ON messages WHEN new.text IS NOT NULL BEGIN "
        "INSERT INTO message_text_search (rowid, text) VALUES (new.rowid, new.text); END",
        "CREATE TRIGGER message_text_search_delete AFTER DELETE ON messages WHEN old.text IS NOT NULL BEGIN "
        "INSERT INTO message_text_search (message_text_search, rowid, text) "
        "VALUES ('delete', old.rowid, old.text); END",
        "CREATE TRIGGER message_text_search_update AFTER UPDATE OF text ON messages BEGIN "
        "INSERT INTO message_text_search (message_text_search, rowid, text) "
        "SELECT 'delete', old.rowid, old.text WHERE old.text IS NOT NULL; "
        "INSERT INTO message_text_search (rowid, text) SELECT new.rowid, new.text WHERE new.text IS NOT NULL; END",
        "INSERT INTO message_text_search (rowid, text) SELECT rowid, text FROM messages WHERE text IS NOT NULL",
    ],
    "message_search": [
        "CREATE VIRTUAL TABLE message_search USING fts5("
        "text, content='content_parts', content_rowid='rowid', tokenize='porter unicode61')",
        "CREATE TRIGGER message_search_insert AFTER INSERT ON content_parts WHEN new.type = 'text' BEGIN "
        "INSERT INTO message_search (rowid, text) VALUES (new.rowid, new.text); END",
        "CREATE TRIGGER message_search_delete AFTER DELETE ON content_parts WHEN old.type = 'text' BEGIN "
        "INSERT INTO message_search (message_search, rowid, text) VALUES ('delete', old.rowid, old.text); END",
        "CREATE TRIGGER message_search_update AFTER UPDATE ON content_parts BEGIN "
        "INSERT INTO message_search (message_search, rowid, text) "
        "SELECT 'delete', old.rowid, old.text WHERE old.type = 'text'; "
        "INSERT INTO message_search (rowid, text) SELECT new.rowid, new.text WHERE new.type = 'text'; END",
        "INSERT INTO message_search (rowid, text) SELECT rowid, text FROM content_parts WHERE type = 'text'",
    ],
}
TRIGGER_EVENTS = ("insert", "delete", "update")
OFF = "INSERT INTO archive_settings (name, value) SELECT 'search_indexing', 'off' WHERE {absent}"


def upgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    op.create_table(
        "archive_settings",
        sa.Column(
            "name",
            sa.Text(),
            nullable=False,
            comment="The setting's name (search_language, search_cjk, search_indexing).",
        ),
        sa.Column("value", sa.Text(), nullable=False, comment="The setting's value."),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_archive_settings")),
        comment=SETTINGS_COMMENT,
    )
    if postgres:  # on a distributed archive, a copy on every node
        op.execute(distribute_new_table("archive_settings", reference=True))
    op.add_column("chats", sa.Column("search_from", sa.Integer(), nullable=True, comment=SEARCH_FROM_COMMENT))
    op.create_index(
        "ix_chats_search_pending",
        "chats",
        ["updated_at", "chat_id"],
        postgresql_where=sa.text("search_from IS NOT NULL"),
        sqlite_where=sa.text("search_from IS NOT NULL"),
    )
    # An archive whose search index was off (dropped) stays off.
    if postgres:
        absent = " OR ".join(f"to_regclass('{name}') IS NULL" for name in PG_OLD)
        op.execute(OFF.format(absent=absent))
        for name in PG_OLD:
            op.execute(f"DROP INDEX IF EXISTS {name}")
        op.execute(f"CREATE POLICY chatarchive_user ON archive_settings USING (true) WITH CHECK ({UNSCOPED})")
        # A distributed archive records it again (see archive_settings above).
        op.execute(
            if_distributed(["INSERT INTO archive_settings (name, value) VALUES ('distribution', 'citus')"])
        )
        for statement in PG_TERMS:
            op.execute(statement)
    else:
        names = ", ".join(f"'{name}'" for name in SQLITE_OLD)
        op.execute(OFF.format(absent=f"(SELECT count(*) FROM sqlite_master WHERE name IN ({names})) < 2"))
        for name in SQLITE_OLD:
            for event in TRIGGER_EVENTS:
                op.execute(f"DROP TRIGGER IF EXISTS {name}_{event}")
            op.execute(f"DROP TABLE IF EXISTS {name}")
        for statement in SQLITE_TERMS:
            op.execute(statement)
    # Every chat's terms are to be computed (``chatarchive db index``).
    op.execute("UPDATE chats SET search_from = 0 WHERE message_count > 0")


def downgrade() -> None:
    postgres = op.get_bind().dialect.name == "postgresql"
    on = "NOT EXISTS (SELECT 1 FROM archive_settings WHERE name = 'search_indexing' AND value = 'off')"
    if postgres:
        op.execute("DROP TABLE message_terms")
        creates = " ".join(
            f"CREATE INDEX IF NOT EXISTS {name} {definition};" for name, definition in PG_OLD.items()
        )
        op.execute(f"DO $$ BEGIN IF {on} THEN {creates} END IF; END $$")
    else:
        op.execute("DROP TRIGGER IF EXISTS message_terms_delete")
        op.execute("DROP TABLE IF EXISTS message_terms")
        search_on = context.is_offline_mode() or bool(op.get_bind().execute(sa.text(f"SELECT {on}")).scalar())
        if search_on:
            for statements in SQLITE_OLD.values():
                for statement in statements:
                    op.execute(statement)
    op.drop_index("ix_chats_search_pending", table_name="chats")
    op.drop_column("chats", "search_from")
    op.drop_table("archive_settings")
