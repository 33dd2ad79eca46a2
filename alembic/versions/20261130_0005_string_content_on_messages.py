"""A message's string content moves onto its own row: messages.text.

Until now a string content was stored as one ``text`` row in content_parts, so
every text query joined ~a million part rows to their messages. ``messages.text``
now holds a string content (``content_form`` 'string'); content_parts holds only
the parts of list contents. The data moves both ways; the views that read text
(message_texts, tool_call_results, chat_stats) are re-created to read both
places, with the same names, columns and comments; full-text search gains an
index on messages.text (PostgreSQL: GIN; SQLite: the FTS5 table
message_text_search, kept in step by triggers). As message rows get wider, a
small partial index finds legacy function calls without reading them all.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-30
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType

import sqlalchemy as sa

from alembic import op

revision: str = "0005"
down_revision: str | Sequence[str] | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TEXT_COMMENT = "A string content (content_form 'string'); list contents are in content_parts."
PARTS_COMMENT = "Ordered content parts of messages whose content is a list of parts."
OLD_PARTS_COMMENT = "Ordered content parts of messages; a string content is one text part."

PG_SEARCH_INDEX = (
    "CREATE INDEX ix_messages_text_search ON messages "
    "USING gin (to_tsvector('english', text)) WHERE text IS NOT NULL"
)
SQLITE_SEARCH = [
    "CREATE VIRTUAL TABLE message_text_search USING fts5("
    "text, content='messages', content_rowid='rowid', tokenize='porter unicode61')",
    "CREATE TRIGGER message_text_search_insert AFTER INSERT ON messages WHEN new.text IS NOT NULL BEGIN "
    "INSERT INTO message_text_search (rowid, text) VALUES (new.rowid, new.text); END",
    "CREATE TRIGGER message_text_search_delete AFTER DELETE ON messages WHEN old.text IS NOT NULL BEGIN "
    "INSERT INTO message_text_search (message_text_search, rowid, text) VALUES ('delete', old.rowid, old.text); END",
    "CREATE TRIGGER message_text_search_update AFTER UPDATE OF text ON messages BEGIN "
    "INSERT INTO message_text_search (message_text_search, rowid, text) "
    "SELECT 'delete', old.rowid, old.text WHERE old.text IS NOT NULL; "
    "INSERT INTO message_text_search (rowid, text) SELECT new.rowid, new.text WHERE new.text IS NOT NULL; END",
    "INSERT INTO message_text_search (rowid, text) SELECT rowid, text FROM messages WHERE text IS NOT NULL",
]

# The text of message {0}.chat_id / {1}: its string content, else its text parts in order.
TEXT_OF = {
    "postgresql": (
        "(SELECT coalesce(r.text, (SELECT string_agg(p.text, E'\\n' ORDER BY p.position) "
        "FROM content_parts p WHERE p.chat_id = r.chat_id AND p.message_position = r.position "
        "AND p.type = 'text')) FROM messages r WHERE r.chat_id = {0}.chat_id AND r.position = {1})"
    ),
    "sqlite": (
        "(SELECT coalesce(r.text, (SELECT group_concat(p.text, char(10)) FROM (SELECT text FROM content_parts "
        "WHERE chat_id = r.chat_id AND message_position = r.position AND type = 'text' ORDER BY position) p)) "
        "FROM messages r WHERE r.chat_id = {0}.chat_id AND r.position = {1})"
    ),
}
MESSAGE_TEXTS = """
        SELECT m.chat_id, m.position, m.uid, m.role, m.name, m.created_at, coalesce(m.text, t.text) AS text
        FROM messages m
        LEFT JOIN ({texts}) t ON t.chat_id = m.chat_id AND t.message_position = m.position
        """
# chat_stats: a string content still counts as one text part.
CHAT_STATS_CHANGES = (
    (
        "sum(prompt_tokens) AS prompt_tokens,",
        "sum(CASE WHEN text IS NOT NULL THEN 1 ELSE 0 END) AS string_contents,\n"
        "                   sum(prompt_tokens) AS prompt_tokens,",
    ),
    (
        "coalesce(p.text_parts, 0) AS text_parts",
        "coalesce(p.text_parts, 0) + coalesce(m.string_contents, 0) AS text_parts",
    ),
)
CHANGED_VIEWS = ("message_texts", "tool_call_results", "chat_stats")  # chat_stats reads tool_call_results


def _revision_0002() -> ModuleType:
    """Revision 0002, which defines the views (old revisions never change)."""
    path = Path(__file__).with_name("20261130_0002_analytics_views_and_search.py")
    spec = importlib.util.spec_from_file_location("chatarchive_revision_0002", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _view_bodies(dialect: str, *, new: bool) -> dict[str, str]:
    """The SQL of the three changed views, as 0002 made them or as this revision does."""
    base = _revision_0002()
    words = base._DIALECT["postgresql" if dialect == "postgresql" else "sqlite"]
    text_of = TEXT_OF["postgresql" if dialect == "postgresql" else "sqlite"] if new else words["text_of"]
    fill = {
        **words,
        "created_day": words["day"].format("c.created_at"),
        "created_week": words["week"].format("c.created_at"),
        "result_text_a": text_of.format("a", "a.position"),
        "result_text_f": text_of.format("f", "f.result_position"),
    }
    bodies = {name: base.VIEWS[name][0] for name in CHANGED_VIEWS}
    if new:
        bodies["message_texts"] = MESSAGE_TEXTS
        for old, replacement in CHAT_STATS_CHANGES:
            if old not in bodies["chat_stats"]:
                raise RuntimeError(f"revision 0002's chat_stats has no {old!r}")
            bodies["chat_stats"] = bodies["chat_stats"].replace(old, replacement)
    return {name: body.format(**fill) for name, body in bodies.items()}


def _replace_views(dialect: str, *, new: bool) -> None:
    for name in reversed(CHANGED_VIEWS):
        op.execute(f"DROP VIEW {name}")
    for name, body in _view_bodies(dialect, new=new).items():
        op.execute(f"CREATE VIEW {name} AS {body}")
    if dialect != "postgresql":
        return
    base = _revision_0002()
    for name in CHANGED_VIEWS:
        for column, comment in base.VIEWS[name][1].items():
            op.execute(f"COMMENT ON COLUMN {name}.{column} IS {base._quote(comment)}")
    # As revision 0003 made them (PostgreSQL 15 and later; the server decides,
    # so SQL rendered offline fits any).
    invoker = " ".join(f"ALTER VIEW {name} SET (security_invoker = true);" for name in CHANGED_VIEWS)
    op.execute(
        f"DO $$ BEGIN IF current_setting('server_version_num')::int >= 150000 THEN {invoker} END IF; END $$"
    )


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.add_column("messages", sa.Column("text", sa.Text(), nullable=True, comment=TEXT_COMMENT))
    # Rows of messages are now wider: tool_call_results finds legacy function
    # calls through this small index instead of reading every message.
    op.create_index(
        "ix_messages_function_calls",
        "messages",
        ["chat_id", "position"],
        postgresql_where=sa.text("extra IS NOT NULL AND jsonb_typeof(extra->'function_call') = 'object'"),
        sqlite_where=sa.text("extra IS NOT NULL AND json_type(extra, '$.function_call') = 'object'"),
    )
    if dialect == "postgresql":
        op.execute(
            "UPDATE messages m SET text = p.text FROM content_parts p WHERE m.content_form = 'string' "
            "AND p.chat_id = m.chat_id AND p.message_position = m.position AND p.position = 0"
        )
        op.execute(
            "DELETE FROM content_parts p USING messages m WHERE m.content_form = 'string' "
            "AND p.chat_id = m.chat_id AND p.message_position = m.position"
        )
        op.execute(f"COMMENT ON TABLE content_parts IS '{PARTS_COMMENT}'")
        op.execute(PG_SEARCH_INDEX)
    else:
        op.execute(
            "UPDATE messages SET text = (SELECT p.text FROM content_parts p WHERE p.chat_id = messages.chat_id "
            "AND p.message_position = messages.position AND p.position = 0) WHERE content_form = 'string'"
        )
        op.execute(
            "DELETE FROM content_parts WHERE EXISTS (SELECT 1 FROM messages m WHERE m.content_form = 'string' "
            "AND m.chat_id = content_parts.chat_id AND m.position = content_parts.message_position)"
        )
        for statement in SQLITE_SEARCH:
            op.execute(statement)
    _replace_views(dialect, new=True)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    _replace_views(dialect, new=False)
    # IF EXISTS: an archive may have dropped its search index (set_search_index).
    if dialect == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_messages_text_search")
        op.execute(f"COMMENT ON TABLE content_parts IS '{OLD_PARTS_COMMENT}'")
    else:
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS message_text_search_{trigger}")
        op.execute("DROP TABLE IF EXISTS message_text_search")
    op.execute(
        "INSERT INTO content_parts (chat_id, message_position, position, type, text, data) "
        "SELECT chat_id, position, 0, 'text', text, NULL FROM messages WHERE text IS NOT NULL"
    )
    op.drop_index("ix_messages_function_calls", table_name="messages")
    if dialect == "postgresql":
        op.drop_column("messages", "text")
    else:
        op.execute("ALTER TABLE messages DROP COLUMN text")
