"""Conversations are trees: every message has a parent, every chat an active leaf.

Regenerating an answer or editing a question adds a sibling message; the chat
shows one path, from a root to its active leaf. ``messages`` gains
``parent_position`` (null for a root; a parent comes before its children, so
``parent_position < position``), ``sibling_index`` (its place among its
parent's children: above 0, a regeneration or an edit) and ``on_path``
(whether it is on the active path, kept so that reading that path reads only
its rows). ``chats`` gains ``active_leaf`` (the position of the active path's
last message) and ``path_length``. Positions stay gapless, in the order the
messages were added, so a parent always comes before its children.

The upgrade makes every chat a single path: each message's parent is the one
before it, and the active leaf is the last.

The view ``active_path`` lists each chat's active path; ``chat_stats`` gains
``path_length`` and ``branch_count``. The other views count every message of
every branch, as before (a regenerated answer was generated, and its tokens
spent); on PostgreSQL each view's comment says so.

The downgrade makes every chat its active path again. Messages off the path
(regenerated answers, edited questions, kept branches) would be lost: the
downgrade refuses, naming them, unless it is told to drop them
(``-x drop_branches=true``; chatarchive: ``downgrade(..., drop_branches=True)``,
``chatarchive db downgrade --drop-branches``). It then deletes only those
messages (with their parts, tool calls, chunks and feedback), numbers each
path's messages from 0 again, and reports which it dropped.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-04
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import sqlalchemy as sa

from alembic import context, op

revision: str = "0011"
down_revision: str | Sequence[str] | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

log = logging.getLogger("alembic.runtime.migration")

COMMENTS = {
    ("chats", "active_leaf"): "Position of the last message of the active path (null: the path is empty).",
    ("chats", "path_length"): (
        "Number of messages on the active path (message_count when the chat has no branches)."
    ),
    ("messages", "parent_position"): "Position of the message this one answers or follows (null: a root).",
    ("messages", "sibling_index"): (
        "0-based place among the messages with the same parent; above 0: a regeneration or edit."
    ),
    (
        "messages",
        "on_path",
    ): "Whether the message is on the chat's active path (the root-to-active_leaf path).",
}
OLD_COMMENTS = {
    ("chats", "message_count"): "Number of messages (also the next message's position).",
    ("messages", "position"): "0-based place in the chat, gapless.",
}
NEW_COMMENTS = {
    ("chats", "message_count"): "Number of messages, every branch's (also the next message's position).",
    ("messages", "position"): "0-based place in the chat, gapless, in the order the messages were added.",
}
OLD_TABLE_COMMENT = "One row per message; position is 0-based and gapless within a chat."
NEW_TABLE_COMMENT = (
    "One row per message of the chat's tree; position is 0-based and gapless, in the order "
    "the messages were added. on_path marks the active path."
)

CHILD_FKS = {
    table: f"fk_{table}_chat_id_message_position_messages"
    for table in ("content_parts", "tool_calls", "message_chunks")
}

ACTIVE_PATH = """
        SELECT m.chat_id, row_number() OVER (PARTITION BY m.chat_id ORDER BY m.position) - 1 AS path_index,
               m.position, m.uid, m.role, m.created_at, m.model, m.sibling_index
        FROM messages m
        WHERE m.on_path
        """
ACTIVE_PATH_COLUMNS = {
    "chat_id": "The chat.",
    "path_index": "0-based place on the active path (the index in the document's messages).",
    "position": "The message's position (join messages on chat_id and position).",
    "uid": "The message's uid.",
    "role": "The message's role.",
    "created_at": "When the message was created.",
    "model": "The model that produced the message.",
    "sibling_index": "The message's place among its siblings (above 0: a regeneration or edit).",
}
CHAT_STATS_CHANGES = (
    (
        "sum(CASE WHEN text IS NOT NULL THEN 1 ELSE 0 END) AS string_contents,",
        "sum(CASE WHEN text IS NOT NULL THEN 1 ELSE 0 END) AS string_contents,\n"
        "                   sum(CASE WHEN sibling_index > 0 THEN 1 ELSE 0 END) AS branch_count,",
    ),
    (
        "f.mean_score\n",
        "f.mean_score, c.path_length, coalesce(m.branch_count, 0) AS branch_count\n",
    ),
)
CHAT_STATS_COLUMNS = {
    "path_length": "Messages on the chat's active path.",
    "branch_count": "Messages with an earlier sibling: regenerated answers and edited messages.",
}
EVERY_MESSAGE = "Counts every message of every branch (regenerations and edits included)."
VIEW_COMMENTS = {
    "message_texts": f"One row per message with its text. {EVERY_MESSAGE}",
    "tool_call_results": f"One row per tool call with its answer. {EVERY_MESSAGE}",
    "chat_stats": f"One row per chat. {EVERY_MESSAGE} path_length counts the active path.",
    "daily_usage": f"One row per UTC day and model. {EVERY_MESSAGE}",
    "feedback_summary": "One row per model and workflow: feedback on any message of the tree.",
    "active_path": "The messages on each chat's active path, in order: what get(chat_id) returns.",
}


def _revision(name: str, file: str) -> ModuleType:
    """An earlier revision's module (old revisions never change)."""
    spec = importlib.util.spec_from_file_location(
        f"chatarchive_revision_{name}", Path(__file__).with_name(file)
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _chat_stats(dialect: str, *, new: bool) -> str:
    revision_0005 = _revision("0005", "20261130_0005_string_content_on_messages.py")
    body = revision_0005._view_bodies(dialect, new=True)["chat_stats"]
    if new:
        for old, replacement in CHAT_STATS_CHANGES:
            if old not in body:
                raise RuntimeError(f"chat_stats has no {old!r}")
            body = body.replace(old, replacement)
    return str(body)


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _invoker(views: Sequence[str]) -> str:
    """The views made security_invoker views, as revision 0003 made the others
    (PostgreSQL 15 and later; the server decides)."""
    body = " ".join(f"ALTER VIEW {name} SET (security_invoker = true);" for name in views)
    return f"DO $$ BEGIN IF current_setting('server_version_num')::int >= 150000 THEN {body} END IF; END $$"


def _set_views(dialect: str, *, new: bool) -> None:
    """chat_stats as this revision makes it (``new``) or as it was, and active_path made or dropped."""
    op.execute("DROP VIEW chat_stats")
    if not new:
        op.execute("DROP VIEW active_path")
    op.execute(f"CREATE VIEW chat_stats AS {_chat_stats(dialect, new=new)}")
    if new:
        op.execute(f"CREATE VIEW active_path AS {ACTIVE_PATH}")
    if dialect != "postgresql":
        return
    base = _revision("0002", "20261130_0002_analytics_views_and_search.py")
    columns = dict(base.VIEWS["chat_stats"][1])
    if new:
        columns |= CHAT_STATS_COLUMNS
    for column, comment in columns.items():
        op.execute(f"COMMENT ON COLUMN chat_stats.{column} IS {_quote(comment)}")
    if new:
        for column, comment in ACTIVE_PATH_COLUMNS.items():
            op.execute(f"COMMENT ON COLUMN active_path.{column} IS {_quote(comment)}")
    for view, comment in VIEW_COMMENTS.items():
        if new or view != "active_path":
            op.execute(f"COMMENT ON VIEW {view} IS {_quote(comment) if new else 'NULL'}")
    op.execute(_invoker(["chat_stats", "active_path"] if new else ["chat_stats"]))


def _comments(comments: dict[tuple[str, str], str], table_comment: str) -> None:
    for (table, column), comment in comments.items():
        op.execute(f'COMMENT ON COLUMN {table}."{column}" IS {_quote(comment)}')
    op.execute(f"COMMENT ON TABLE messages IS {_quote(table_comment)}")


CHECKS = {
    "chats": {"path_length_in_range": "path_length >= 0 AND path_length <= message_count"},
    "messages": {
        "parent_comes_first": "parent_position < position",
        "sibling_index_not_negative": "sibling_index >= 0",
    },
}
#: The column each check belongs to on SQLite, which adds a check only with its column.
SQLITE_CHECKED_COLUMN = {
    "path_length_in_range": "path_length",
    "parent_comes_first": "parent_position",
    "sibling_index_not_negative": "sibling_index",
}


def _columns() -> dict[str, list[sa.Column[Any]]]:
    return {
        "chats": [
            sa.Column("active_leaf", sa.Integer(), nullable=True),
            sa.Column("path_length", sa.Integer(), server_default=sa.text("0"), nullable=False),
        ],
        "messages": [
            sa.Column("parent_position", sa.Integer(), nullable=True),
            sa.Column("sibling_index", sa.Integer(), server_default=sa.text("0"), nullable=False),
            sa.Column("on_path", sa.Boolean(), server_default=sa.text("true"), nullable=False),
        ],
    }


def upgrade() -> None:
    dialect = op.get_context().dialect.name
    checks = {
        SQLITE_CHECKED_COLUMN[name]: (name, rule) for named in CHECKS.values() for name, rule in named.items()
    }
    dialect_object = op.get_context().dialect
    for table, added in _columns().items():
        for column in added:
            column.comment = COMMENTS[(table, column.name)]
            if dialect == "postgresql" or column.name not in checks:
                op.add_column(table, column)
                continue
            name, rule = checks[column.name]
            kind = column.type.compile(dialect=dialect_object)
            null = "" if column.nullable else f" NOT NULL DEFAULT {column.server_default.arg}"  # type: ignore[union-attr]
            op.execute(
                f"ALTER TABLE {table} ADD COLUMN {column.name} {kind}{null} "
                f"CONSTRAINT ck_{table}_{name} CHECK ({rule})"
            )
    # Every chat a single path.
    op.execute("UPDATE messages SET parent_position = position - 1 WHERE position > 0")
    op.execute(
        "UPDATE chats SET path_length = message_count, "
        "active_leaf = CASE WHEN message_count > 0 THEN message_count - 1 END"
    )
    if dialect == "postgresql":
        for table, named in CHECKS.items():
            for name, rule in named.items():
                op.create_check_constraint(op.f(f"ck_{table}_{name}"), table, rule)
        _comments(NEW_COMMENTS, NEW_TABLE_COMMENT)
    _set_views(dialect, new=True)


def off_path_messages(connection: sa.Connection) -> list[tuple[str, str]]:
    """The messages (chat id, uid) that are off their chat's active path, in
    chat and position order: those a downgrade below this revision drops."""
    rows = connection.execute(
        sa.text("SELECT chat_id, uid FROM messages WHERE NOT on_path ORDER BY chat_id, position")
    )
    return [(chat_id, uid) for chat_id, uid in rows]


def describe(lost: Sequence[tuple[str, str]], *, shown: int = 5) -> str:
    """Which messages, by chat, in a sentence."""
    chats: dict[str, int] = {}
    for chat_id, _ in lost:
        chats[chat_id] = chats.get(chat_id, 0) + 1
    named = ", ".join(f"{chat_id!r} ({count})" for chat_id, count in list(chats.items())[:shown])
    more = f" and {len(chats) - shown} more" if len(chats) > shown else ""
    return f"{len(lost)} messages off the active path in {len(chats)} chats: {named}{more}"


def _drop_branches_allowed() -> bool:
    given = context.config.attributes.get("drop_branches")
    if given is None:
        given = context.get_x_argument(as_dictionary=True).get("drop_branches", "false").lower() == "true"
    return bool(given)


REFUSAL = (
    "downgrading below revision 0011 would lose {what}; to drop them, downgrade with "
    "drop_branches (alembic -x drop_branches=true; chatarchive db downgrade --drop-branches)"
)


def downgrade() -> None:
    dialect = op.get_context().dialect.name
    allowed = _drop_branches_allowed()
    if context.is_offline_mode():
        if not allowed:
            refusal = REFUSAL.format(what="the messages off the active path")
            for statement in _refuse_if_off_path(dialect, refusal):
                op.execute(statement)
        _drop_off_path(dialect)
    else:
        lost = off_path_messages(op.get_bind())
        if lost and not allowed:
            # chatarchive hands over how to refuse (its own error); plain Alembic raises.
            refuse = context.config.attributes.get("refuse_data_loss")
            if refuse is not None:
                refuse(REFUSAL.format(what=describe(lost)), "drop_branches")
            raise RuntimeError(REFUSAL.format(what=describe(lost)))
        if lost:
            log.warning("dropping %s", describe(lost))
            _drop_off_path(dialect)
        context.config.attributes["dropped_messages"] = lost
    _set_views(dialect, new=False)
    if dialect == "postgresql":
        for table, named in CHECKS.items():
            for name in named:
                op.drop_constraint(op.f(f"ck_{table}_{name}"), table, type_="check")
        _comments(OLD_COMMENTS, OLD_TABLE_COMMENT)
    for table, column in COMMENTS:
        if dialect == "postgresql":
            op.drop_column(table, column)
        else:
            op.execute(f"ALTER TABLE {table} DROP COLUMN {column}")


def _refuse_if_off_path(dialect: str, refusal: str) -> list[str]:
    """SQL (for SQL rendered offline) that fails, saying ``refusal``, if a
    message is off its active path."""
    quoted = _quote(refusal)
    if dialect == "postgresql":
        return [
            "DO $$ BEGIN IF EXISTS (SELECT 1 FROM messages WHERE NOT on_path) THEN "
            f"RAISE EXCEPTION {quoted}; END IF; END $$"
        ]
    # SQLite raises only in a trigger: one on a scratch table that gets a row if a branch exists.
    return [
        "CREATE TEMPORARY TABLE branch_check (found INTEGER)",
        "CREATE TEMPORARY TRIGGER refuse_to_drop_branches BEFORE INSERT ON branch_check "
        f"BEGIN SELECT RAISE(ABORT, {quoted}); END",
        "INSERT INTO branch_check SELECT 1 FROM messages WHERE NOT on_path LIMIT 1",
        "DROP TABLE branch_check",
    ]


def _drop_off_path(dialect: str) -> None:
    """Delete the messages off the active path, with everything that belongs
    to them, and number each path from 0 again (here and in the tables that
    name messages by position)."""
    off_path = "SELECT chat_id, position FROM messages WHERE NOT on_path"
    op.execute(
        "DELETE FROM feedback WHERE EXISTS (SELECT 1 FROM messages m WHERE m.chat_id = feedback.chat_id "
        "AND m.uid = feedback.message_uid AND NOT m.on_path)"
    )
    for table in CHILD_FKS:
        op.execute(f"DELETE FROM {table} WHERE (chat_id, message_position) IN ({off_path})")
    if dialect == "postgresql":
        for table, name in CHILD_FKS.items():
            op.drop_constraint(name, table, type_="foreignkey")
    op.execute(
        "CREATE TEMPORARY TABLE renumbered AS SELECT chat_id, position AS old_position, "
        "row_number() OVER (PARTITION BY chat_id ORDER BY position) - 1 AS new_position "
        "FROM messages WHERE on_path AND chat_id IN (SELECT chat_id FROM messages WHERE NOT on_path)"
    )
    op.execute("DELETE FROM messages WHERE NOT on_path")
    # The parents go with this revision's columns; until then, none may point past its child.
    op.execute("UPDATE messages SET parent_position = NULL WHERE chat_id IN (SELECT chat_id FROM renumbered)")
    # Two steps, so that no row takes a position another still holds: all
    # moved past every position in use, then each to its place.
    shift = "(SELECT coalesce(max(message_count), 0) + 1 FROM chats)"
    for table, column in (("messages", "position"), *((table, "message_position") for table in CHILD_FKS)):
        op.execute(
            f"UPDATE {table} SET {column} = {column} + {shift} "
            f"WHERE chat_id IN (SELECT chat_id FROM renumbered)"
        )
        op.execute(
            f"UPDATE {table} SET {column} = r.new_position FROM renumbered r "
            f"WHERE r.chat_id = {table}.chat_id AND r.old_position + {shift} = {table}.{column}"
        )
    op.execute("UPDATE chats SET message_count = path_length WHERE message_count <> path_length")
    op.execute("DROP TABLE renumbered")
    if dialect == "postgresql":
        for table, name in CHILD_FKS.items():
            op.create_foreign_key(
                name,
                table,
                "messages",
                ["chat_id", "message_position"],
                ["chat_id", "position"],
                ondelete="CASCADE",
            )
