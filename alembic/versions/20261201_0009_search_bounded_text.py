"""PostgreSQL's full-text indexes cover the first 100,000 characters of each text.

``to_tsvector`` refuses a text whose distinct words take more than 1 MB (a
pasted CSV or log, a hex dump: any text of a few megabytes with few repeated
words), so a message the archive's limits allow could not be saved: the GIN
indexes on ``to_tsvector('english', text)`` failed the insert with a database
error. They now index ``left(text, 100000)``, which stays under that limit
whatever the text, and search matches words of a text's first 100,000
characters. SQLite's FTS5 tables have no such limit and are unchanged.

Each new index is built beside the old one (writes wait meanwhile, reads go on)
and then takes its place. An archive whose search index is off stays so.
Downgrading builds the old indexes back; an archive that holds a text they
cannot index fails the downgrade with PostgreSQL's error and is left as it was.

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-01
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0009"
down_revision: str | Sequence[str] | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

BOUNDED = "to_tsvector('english', left(text, 100000))"
WHOLE = "to_tsvector('english', text)"
# name: (table, which rows)
INDEXES = {
    "ix_messages_text_search": ("messages", "text IS NOT NULL"),
    "ix_content_parts_text_search": ("content_parts", "type = 'text'"),
}


def _index_on(expression: str) -> None:
    """Rebuild each search index that is there on ``expression``. Decided by
    the server (not by a query here) so that ``--sql`` prints the same work."""
    if op.get_context().dialect.name != "postgresql":
        return
    for name, (table, rows) in INDEXES.items():
        op.execute(
            f"""DO $$ BEGIN
    IF to_regclass('{name}') IS NOT NULL THEN
        CREATE INDEX {name}_new ON {table} USING gin ({expression}) WHERE {rows};
        DROP INDEX {name};
        ALTER INDEX {name}_new RENAME TO {name};
    END IF;
END $$"""
        )


def upgrade() -> None:
    _index_on(BOUNDED)


def downgrade() -> None:
    _index_on(WHOLE)
