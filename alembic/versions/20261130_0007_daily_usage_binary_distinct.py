"""daily_usage counts distinct chats by bytes (PostgreSQL).

``count(DISTINCT chat_id)`` sorted each day's chat ids with the database's
collation (``strcoll`` for every comparison) just to count the distinct ones.
Comparing the bytes (``COLLATE "C"``) finds the same distinct ids, since equal
ids are equal bytes under any deterministic collation, and faster. The view keeps its name, columns, comments and
``security_invoker``. SQLite compares bytes already: nothing changes there.

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-30
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0007"
down_revision: str | Sequence[str] | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DISTINCT_CHATS = "count(DISTINCT d.chat_id)"
DISTINCT_CHATS_BY_BYTES = 'count(DISTINCT (d.chat_id COLLATE "C"))'


def _daily_usage(*, by_bytes: bool) -> str:
    """The PostgreSQL body of daily_usage as revision 0002 made it, or by bytes."""
    path = Path(__file__).with_name("20261130_0002_analytics_views_and_search.py")
    spec = importlib.util.spec_from_file_location("chatarchive_revision_0002", path)
    assert spec is not None
    assert spec.loader is not None
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    words = base._DIALECT["postgresql"]
    body: str = base.VIEWS["daily_usage"][0].format(
        **words,
        message_date=words["date"].format("m.created_at"),
        day_label=words["date_label"].format("d.day"),
    )
    if DISTINCT_CHATS not in body:
        raise RuntimeError(f"revision 0002's daily_usage has no {DISTINCT_CHATS!r}")
    return body.replace(DISTINCT_CHATS, DISTINCT_CHATS_BY_BYTES) if by_bytes else body


def _replace(*, by_bytes: bool) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"CREATE OR REPLACE VIEW daily_usage AS {_daily_usage(by_bytes=by_bytes)}")
    # CREATE OR REPLACE VIEW resets the view's options: put back revision 0003's
    # (PostgreSQL 15 and later; the server decides, so SQL rendered offline fits any).
    op.execute(
        "DO $$ BEGIN IF current_setting('server_version_num')::int >= 150000 THEN "
        "ALTER VIEW daily_usage SET (security_invoker = true); END IF; END $$"
    )


def upgrade() -> None:
    _replace(by_bytes=True)


def downgrade() -> None:
    _replace(by_bytes=False)
