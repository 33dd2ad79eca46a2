"""tool_call_results reads each answer's text where it finds the answer (PostgreSQL).

The view found the first tool message answering each call through the partial
index on ``(chat_id, tool_call_id, position)``, then looked that message up
again by primary key for its text: a second index descent and a subquery per
call. It now takes the text in the same pass (``DISTINCT ON`` over that
index). Same rows, in about two thirds of the time. A list content is still read from its text parts.
The view keeps its name, columns, comments and ``security_invoker``; the
legacy ``function_call`` branch is unchanged. SQLite: nothing changes.

Revision ID: 0008
Revises: 0007
Create Date: 2026-11-30
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from pathlib import Path

from alembic import op

revision: str = "0008"
down_revision: str | Sequence[str] | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

# The calls of tool_calls with their first answer, as revision 0005 left the
# view's first branch, except that the answer's text comes with its position.
TOOL_CALLS = """
        SELECT tc.chat_id, tc.message_position AS call_position, tc.position AS call_index,
               'tool_call' AS kind, tc.call_id, tc.name AS tool_name, tc.arguments,
               a.position AS result_position,
               coalesce(a.text, (SELECT string_agg(p.text, E'\\n' ORDER BY p.position) FROM content_parts p
                                 WHERE p.chat_id = a.chat_id AND p.message_position = a.position
                                 AND p.type = 'text')) AS result_text,
               CASE WHEN a.position IS NULL THEN 0 ELSE 1 END AS answered,
               a.position - tc.message_position AS position_distance
        FROM tool_calls tc
        LEFT JOIN (
            SELECT DISTINCT ON (chat_id, tool_call_id) chat_id, tool_call_id, position, text FROM messages
            WHERE tool_call_id IS NOT NULL AND role = 'tool' ORDER BY chat_id, tool_call_id, position
        ) a ON a.chat_id = tc.chat_id AND a.tool_call_id = tc.call_id
        """
BRANCHES = "UNION ALL"


def _tool_call_results(*, new: bool) -> str:
    """The PostgreSQL body of tool_call_results as revision 0005 made it, or this revision's."""
    path = Path(__file__).with_name("20261130_0005_string_content_on_messages.py")
    spec = importlib.util.spec_from_file_location("chatarchive_revision_0005", path)
    assert spec is not None
    assert spec.loader is not None
    base = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(base)
    body: str = base._view_bodies("postgresql", new=True)["tool_call_results"]
    if body.count(BRANCHES) != 1:
        raise RuntimeError("revision 0005's tool_call_results is not two branches")
    _, function_calls = body.split(BRANCHES)
    return f"{TOOL_CALLS}{BRANCHES}{function_calls}" if new else body


def _replace(*, new: bool) -> None:
    if op.get_bind().dialect.name != "postgresql":
        return
    op.execute(f"CREATE OR REPLACE VIEW tool_call_results AS {_tool_call_results(new=new)}")
    # CREATE OR REPLACE VIEW resets the view's options: put back revision 0003's
    # (PostgreSQL 15 and later; the server decides, so SQL rendered offline fits any).
    op.execute(
        "DO $$ BEGIN IF current_setting('server_version_num')::int >= 150000 THEN "
        "ALTER VIEW tool_call_results SET (security_invoker = true); END IF; END $$"
    )


def upgrade() -> None:
    _replace(new=True)


def downgrade() -> None:
    _replace(new=False)
