"""Analytics views, column comments and full-text search.

Views (same names and columns on PostgreSQL and SQLite): message_texts,
tool_call_results, chat_stats, daily_usage, feedback_summary. Flags are 0/1
integers and days are 'YYYY-MM-DD' text (UTC) on both, so that the same SQL
runs on both. On PostgreSQL every table and view column gets a COMMENT and
message text gets a GIN full-text index; on SQLite an FTS5 table kept in step
by triggers.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-30
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op

revision: str = "0002"
down_revision: str | Sequence[str] | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TABLE_COMMENTS = {
    "chats": "One row per chat document.",
    "chat_tags": "A chat's tags, in the document's order.",
    "messages": "One row per message; position is 0-based and gapless within a chat.",
    "content_parts": "Ordered content parts of messages; a string content is one text part.",
    "tool_calls": "Tool calls made by assistant messages.",
    "feedback": "Human feedback on a chat, or on one of its messages.",
}
COLUMN_COMMENTS = {
    "chats": {
        "chat_id": "The chat's id (1-255 characters).",
        "user_id": "The user the chat belongs to.",
        "title": "The chat's title.",
        "model": "The chosen model's name.",
        "model_settings": "The chosen model's settings (JSON object).",
        "workflow": "The workflow context (JSON object); its name is workflow->>'name'.",
        "metadata": "Application metadata (JSON object).",
        "extra": "The document's unknown keys, and explicit nulls of known fields (JSON object).",
        "created_at": "When the chat was created.",
        "updated_at": "When the chat was last written.",
        "message_count": "Number of messages (also the next message's position).",
        "version": "Incremented by every write; for optimistic concurrency.",
    },
    "chat_tags": {
        "chat_id": "The chat.",
        "tag": "The tag.",
        "position": "The tag's place in the document's list.",
    },
    "messages": {
        "chat_id": "The chat.",
        "position": "0-based place in the chat, gapless.",
        "uid": "Stable message id, unique within the chat.",
        "role": "system, developer, user, assistant, tool, function, or any other role.",
        "name": "The participant's name (OpenAI 'name').",
        "tool_call_id": "The tool call this message answers (tool messages).",
        "content_form": "How content was given: string, parts, null or absent.",
        "created_at": "When the message was created (the time of saving if not given).",
        "updated_at": "When the message was last changed, if given.",
        "completed": "Whether the message is complete (false while streaming).",
        "model": "The model that produced this message.",
        "finish_reason": "Why the model stopped (stop, length, tool_calls, ...).",
        "prompt_tokens": "Prompt tokens of the response that produced this message.",
        "completion_tokens": "Completion tokens of the response that produced this message.",
        "total_tokens": "Total tokens of the response that produced this message.",
        "extra": "Everything else: unknown keys, refusal, audio, function_call, other usage keys (JSON).",
    },
    "content_parts": {
        "chat_id": "The chat.",
        "message_position": "The message's position.",
        "position": "0-based place in the message's content.",
        "type": "text, image_url, input_audio, file, refusal, or any other type.",
        "text": "The text of text and refusal parts.",
        "data": "The rest of the part (JSON object).",
    },
    "tool_calls": {
        "chat_id": "The chat.",
        "message_position": "The assistant message's position.",
        "position": "0-based place in the message's tool_calls.",
        "call_id": "The call's id, matched by the answering message's tool_call_id.",
        "type": "function, custom, or any other type.",
        "name": "The tool's name.",
        "arguments": "The arguments exactly as the model wrote them (custom calls: their input).",
        "data": "Anything else in the call (JSON object).",
    },
    "feedback": {
        "chat_id": "The chat.",
        "id": "The feedback item's id.",
        "position": "Order of the feedback items.",
        "message_uid": "The message the feedback is about; null for the whole chat.",
        "user_id": "Who gave the feedback.",
        "score": "The score: thumbs up/down as 1/-1, 0, stars, ...",
        "label": "A label such as helpful, wrong, unsafe.",
        "comment": "Free-text comment.",
        "created_at": "When the feedback was given.",
        "extra": "The feedback item's unknown keys (JSON object).",
    },
}

# Per dialect: how to take a JSON object's string field, a UTC day, and ordered text.
_DIALECT = {
    "postgresql": {
        "workflow_name": "c.workflow->>'name'",
        "day": "to_char({0} AT TIME ZONE 'UTC', 'YYYY-MM-DD')",
        "week": "to_char(date_trunc('week', {0} AT TIME ZONE 'UTC'), 'YYYY-MM-DD')",
        # Group by a date, format once per group.
        "date": "({0} AT TIME ZONE 'UTC')::date",
        "date_label": "to_char({0}, 'YYYY-MM-DD')",
        "function_name": "m.extra->'function_call'->>'name'",
        "function_arguments": "m.extra->'function_call'->>'arguments'",
        "has_function_call": "jsonb_typeof(m.extra->'function_call') = 'object'",
        "texts": (
            "SELECT chat_id, message_position, string_agg(text, E'\\n' ORDER BY position) AS text "
            "FROM content_parts WHERE type = 'text' GROUP BY chat_id, message_position"
        ),
        "text_of": (
            "(SELECT string_agg(p.text, E'\\n' ORDER BY p.position) FROM content_parts p "
            "WHERE p.chat_id = {0}.chat_id AND p.message_position = {1} AND p.type = 'text')"
        ),
    },
    "sqlite": {
        "workflow_name": "json_extract(c.workflow, '$.name')",
        "day": "strftime('%Y-%m-%d', {0})",
        "week": "date({0}, '-6 days', 'weekday 1')",
        "date": "strftime('%Y-%m-%d', {0})",
        "date_label": "{0}",
        "function_name": "json_extract(m.extra, '$.function_call.name')",
        "function_arguments": "json_extract(m.extra, '$.function_call.arguments')",
        "has_function_call": "json_type(m.extra, '$.function_call') = 'object'",
        # Rows reach group_concat in primary-key order (chat, message, position).
        "texts": (
            "SELECT chat_id, message_position, group_concat(text, char(10)) AS text FROM "
            "(SELECT chat_id, message_position, position, text FROM content_parts WHERE type = 'text' "
            "ORDER BY chat_id, message_position, position) GROUP BY chat_id, message_position"
        ),
        "text_of": (
            "(SELECT group_concat(p.text, char(10)) FROM (SELECT text FROM content_parts "
            "WHERE chat_id = {0}.chat_id AND message_position = {1} AND type = 'text' ORDER BY position) p)"
        ),
    },
}

VIEWS: dict[str, tuple[str, dict[str, str]]] = {
    "message_texts": (
        """
        SELECT m.chat_id, m.position, m.uid, m.role, m.name, m.created_at, t.text
        FROM messages m
        LEFT JOIN ({texts}) t ON t.chat_id = m.chat_id AND t.message_position = m.position
        """,
        {
            "chat_id": "The chat.",
            "position": "The message's position.",
            "uid": "The message's uid.",
            "role": "The message's role.",
            "name": "The message's name.",
            "created_at": "When the message was created.",
            "text": "All the message's text parts, in order, joined by newlines (null if none).",
        },
    ),
    "tool_call_results": (
        """
        SELECT tc.chat_id, tc.message_position AS call_position, tc.position AS call_index,
               'tool_call' AS kind, tc.call_id, tc.name AS tool_name, tc.arguments,
               a.position AS result_position, {result_text_a} AS result_text,
               CASE WHEN a.position IS NULL THEN 0 ELSE 1 END AS answered,
               a.position - tc.message_position AS position_distance
        FROM tool_calls tc
        LEFT JOIN (
            SELECT chat_id, tool_call_id, min(position) AS position FROM messages
            WHERE tool_call_id IS NOT NULL AND role = 'tool' GROUP BY chat_id, tool_call_id
        ) a ON a.chat_id = tc.chat_id AND a.tool_call_id = tc.call_id
        UNION ALL
        SELECT f.chat_id, f.call_position, 0, 'function_call', NULL, f.tool_name, f.arguments,
               f.result_position, {result_text_f},
               CASE WHEN f.result_position IS NULL THEN 0 ELSE 1 END,
               f.result_position - f.call_position
        FROM (
            SELECT m.chat_id, m.position AS call_position, {function_name} AS tool_name,
                   {function_arguments} AS arguments,
                   (SELECT min(x.position) FROM messages x
                    WHERE x.chat_id = m.chat_id AND x.role = 'function' AND x.position > m.position
                      AND x.name = {function_name}) AS result_position
            FROM messages m WHERE m.extra IS NOT NULL AND {has_function_call}
        ) f
        """,
        {
            "chat_id": "The chat.",
            "call_position": "Position of the assistant message that made the call.",
            "call_index": "Place of the call in that message's tool_calls (0 for a legacy function_call).",
            "kind": "tool_call, or function_call for the legacy single function call.",
            "call_id": "The call's id (null for legacy function calls).",
            "tool_name": "The tool's (function's) name.",
            "arguments": "The arguments exactly as the model wrote them.",
            "result_position": "Position of the first message answering the call (null if unanswered).",
            "result_text": "The answer's text.",
            "answered": "1 if a tool (or function) message answers the call, else 0.",
            "position_distance": "result_position - call_position.",
        },
    ),
    "chat_stats": (
        """
        SELECT c.chat_id, c.user_id, c.model, {workflow_name} AS workflow_name, c.title,
               c.created_at, c.updated_at, {created_day} AS created_day, {created_week} AS created_week,
               c.message_count,
               coalesce(m.system_messages, 0) AS system_messages,
               coalesce(m.developer_messages, 0) AS developer_messages,
               coalesce(m.user_messages, 0) AS user_messages,
               coalesce(m.assistant_messages, 0) AS assistant_messages,
               coalesce(m.tool_messages, 0) AS tool_messages,
               coalesce(t.tool_calls, 0) AS tool_calls,
               coalesce(t.unanswered_tool_calls, 0) AS unanswered_tool_calls,
               coalesce(p.text_parts, 0) AS text_parts,
               coalesce(p.image_parts, 0) AS image_parts,
               coalesce(p.audio_parts, 0) AS audio_parts,
               coalesce(p.file_parts, 0) AS file_parts,
               coalesce(p.other_parts, 0) AS other_parts,
               coalesce(m.prompt_tokens, 0) AS prompt_tokens,
               coalesce(m.completion_tokens, 0) AS completion_tokens,
               coalesce(f.feedback_count, 0) AS feedback_count,
               f.mean_score
        FROM chats c
        LEFT JOIN (
            SELECT chat_id,
                   sum(CASE WHEN role = 'system' THEN 1 ELSE 0 END) AS system_messages,
                   sum(CASE WHEN role = 'developer' THEN 1 ELSE 0 END) AS developer_messages,
                   sum(CASE WHEN role = 'user' THEN 1 ELSE 0 END) AS user_messages,
                   sum(CASE WHEN role = 'assistant' THEN 1 ELSE 0 END) AS assistant_messages,
                   sum(CASE WHEN role IN ('tool', 'function') THEN 1 ELSE 0 END) AS tool_messages,
                   sum(prompt_tokens) AS prompt_tokens,
                   sum(completion_tokens) AS completion_tokens
            FROM messages GROUP BY chat_id
        ) m ON m.chat_id = c.chat_id
        LEFT JOIN (
            SELECT chat_id, count(*) AS tool_calls, sum(1 - answered) AS unanswered_tool_calls
            FROM tool_call_results GROUP BY chat_id
        ) t ON t.chat_id = c.chat_id
        LEFT JOIN (
            SELECT chat_id,
                   sum(CASE WHEN type = 'text' THEN 1 ELSE 0 END) AS text_parts,
                   sum(CASE WHEN type = 'image_url' THEN 1 ELSE 0 END) AS image_parts,
                   sum(CASE WHEN type = 'input_audio' THEN 1 ELSE 0 END) AS audio_parts,
                   sum(CASE WHEN type = 'file' THEN 1 ELSE 0 END) AS file_parts,
                   sum(CASE WHEN type NOT IN ('text', 'image_url', 'input_audio', 'file', 'refusal')
                            THEN 1 ELSE 0 END) AS other_parts
            FROM content_parts GROUP BY chat_id
        ) p ON p.chat_id = c.chat_id
        LEFT JOIN (
            SELECT chat_id, count(*) AS feedback_count, avg(score) AS mean_score
            FROM feedback GROUP BY chat_id
        ) f ON f.chat_id = c.chat_id
        """,
        {
            "chat_id": "The chat.",
            "user_id": "The chat's user.",
            "model": "The chat's chosen model.",
            "workflow_name": "The workflow context's name (workflow.name).",
            "title": "The chat's title.",
            "created_at": "When the chat was created.",
            "updated_at": "When the chat was last written.",
            "created_day": "The UTC day the chat was created, YYYY-MM-DD.",
            "created_week": "The Monday of the UTC week the chat was created, YYYY-MM-DD.",
            "message_count": "Messages in the chat.",
            "system_messages": "Messages with role system.",
            "developer_messages": "Messages with role developer.",
            "user_messages": "Messages with role user (user turns).",
            "assistant_messages": "Messages with role assistant.",
            "tool_messages": "Messages with role tool or function (tool results).",
            "tool_calls": "Tool calls made (legacy function calls included).",
            "unanswered_tool_calls": "Tool calls no tool message answers.",
            "text_parts": "Text content parts (a string content counts as one).",
            "image_parts": "image_url content parts.",
            "audio_parts": "input_audio content parts.",
            "file_parts": "file content parts.",
            "other_parts": "Content parts of other (unknown) types.",
            "prompt_tokens": "Sum of the messages' prompt tokens.",
            "completion_tokens": "Sum of the messages' completion tokens.",
            "feedback_count": "Feedback items on the chat or its messages.",
            "mean_score": "Mean feedback score (null without scored feedback).",
        },
    ),
    "daily_usage": (
        """
        SELECT {day_label} AS day, d.model, count(DISTINCT d.chat_id) AS chats, count(*) AS messages,
               sum(d.user_turn) AS user_turns, sum(d.tool_calls) AS tool_calls,
               sum(d.prompt_tokens) AS prompt_tokens, sum(d.completion_tokens) AS completion_tokens
        FROM (
            SELECT {message_date} AS day, coalesce(c.model, m.model) AS model, m.chat_id,
                   CASE WHEN m.role = 'user' THEN 1 ELSE 0 END AS user_turn,
                   coalesce(t.calls, 0)
                   + CASE WHEN m.extra IS NOT NULL AND {has_function_call} THEN 1 ELSE 0 END AS tool_calls,
                   coalesce(m.prompt_tokens, 0) AS prompt_tokens,
                   coalesce(m.completion_tokens, 0) AS completion_tokens
            FROM messages m
            JOIN chats c ON c.chat_id = m.chat_id
            LEFT JOIN (
                SELECT chat_id, message_position, count(*) AS calls FROM tool_calls
                GROUP BY chat_id, message_position
            ) t ON t.chat_id = m.chat_id AND t.message_position = m.position
        ) d
        GROUP BY d.day, d.model
        """,
        {
            "day": "The UTC day of the messages, YYYY-MM-DD.",
            "model": "The chat's chosen model (else the message's own).",
            "chats": "Chats with messages that day.",
            "messages": "Messages that day.",
            "user_turns": "User messages that day.",
            "tool_calls": "Tool calls made that day (legacy function calls included).",
            "prompt_tokens": "Prompt tokens that day.",
            "completion_tokens": "Completion tokens that day.",
        },
    ),
    "feedback_summary": (
        """
        SELECT c.model, {workflow_name} AS workflow_name, count(*) AS feedback_count,
               avg(f.score) AS mean_score,
               1.0 * sum(CASE WHEN f.score > 0 THEN 1 ELSE 0 END) / count(*) AS positive_share,
               1.0 * sum(CASE WHEN f.score < 0 THEN 1 ELSE 0 END) / count(*) AS negative_share
        FROM feedback f
        JOIN chats c ON c.chat_id = f.chat_id
        GROUP BY c.model, {workflow_name}
        """,
        {
            "model": "The chat's chosen model.",
            "workflow_name": "The workflow context's name.",
            "feedback_count": "Feedback items.",
            "mean_score": "Mean score.",
            "positive_share": "Share of items scored above 0.",
            "negative_share": "Share of items scored below 0.",
        },
    ),
}

# Full-text search. PostgreSQL: an expression GIN index; SQLite: an FTS5 table
# over content_parts, kept in step by triggers.
TEXT_SEARCH_CONFIG = "english"
PG_SEARCH_INDEX = (
    f"CREATE INDEX ix_content_parts_text_search ON content_parts "
    f"USING gin (to_tsvector('{TEXT_SEARCH_CONFIG}', text)) WHERE type = 'text'"
)
# The views join on (chat_id, position) pairs; without these the planner takes
# the two columns for independent and misjudges group counts by 10x.
PG_STATISTICS = [
    "CREATE STATISTICS st_content_parts_message (ndistinct) ON chat_id, message_position FROM content_parts",
    "CREATE STATISTICS st_tool_calls_message (ndistinct) ON chat_id, message_position FROM tool_calls",
    "CREATE STATISTICS st_messages_tool_call (ndistinct) ON chat_id, tool_call_id FROM messages",
]
SQLITE_SEARCH = [
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
]


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    words = _DIALECT["postgresql" if dialect == "postgresql" else "sqlite"]
    fill = {
        **words,
        "created_day": words["day"].format("c.created_at"),
        "created_week": words["week"].format("c.created_at"),
        "message_date": words["date"].format("m.created_at"),
        "day_label": words["date_label"].format("d.day"),
        "result_text_a": words["text_of"].format("a", "a.position"),
        "result_text_f": words["text_of"].format("f", "f.result_position"),
    }
    # Answers to tool calls are found through these two partial indexes.
    op.create_index(
        "ix_messages_tool_results",
        "messages",
        ["chat_id", "tool_call_id", "position"],
        postgresql_where=sa.text("role = 'tool'"),
        sqlite_where=sa.text("role = 'tool'"),
    )
    for name, (body, _) in VIEWS.items():
        op.execute(f"CREATE VIEW {name} AS {body.format(**fill)}")
    if dialect == "postgresql":
        for table, comment in TABLE_COMMENTS.items():
            op.execute(f"COMMENT ON TABLE {table} IS {_quote(comment)}")
            for column, column_comment in COLUMN_COMMENTS[table].items():
                op.execute(f'COMMENT ON COLUMN {table}."{column}" IS {_quote(column_comment)}')
        for name, (_, columns) in VIEWS.items():
            for column, column_comment in columns.items():
                op.execute(f"COMMENT ON COLUMN {name}.{column} IS {_quote(column_comment)}")
        op.execute(PG_SEARCH_INDEX)
        for statement in PG_STATISTICS:
            op.execute(statement)
    else:
        for statement in SQLITE_SEARCH:
            op.execute(statement)


def downgrade() -> None:
    dialect = op.get_bind().dialect.name
    # IF EXISTS: an archive may have dropped its search index (set_search_index).
    if dialect == "postgresql":
        op.execute("DROP INDEX IF EXISTS ix_content_parts_text_search")
        for name in ("st_content_parts_message", "st_tool_calls_message", "st_messages_tool_call"):
            op.execute(f"DROP STATISTICS {name}")
        for table in TABLE_COMMENTS:
            op.execute(f"COMMENT ON TABLE {table} IS NULL")
            for column in COLUMN_COMMENTS[table]:
                op.execute(f'COMMENT ON COLUMN {table}."{column}" IS NULL')
    else:
        for trigger in ("insert", "delete", "update"):
            op.execute(f"DROP TRIGGER IF EXISTS message_search_{trigger}")
        op.execute("DROP TABLE IF EXISTS message_search")
    for name in reversed(list(VIEWS)):
        op.execute(f"DROP VIEW {name}")
    op.drop_index("ix_messages_tool_results", table_name="messages")
