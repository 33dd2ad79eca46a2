"""Answers to the common questions about an archive, as typed rows.

Each question is an operation of every face: ``archive.model_usage()``,
``await async_archive.daily_usage(since=...)``, ``repository.tool_usage()``
in a transaction. This module documents them, gives their rows' types, and
offers each as a function of the archive too (a ``ChatArchive``, or a
SQLAlchemy ``Session`` / ``Connection`` on its database). They take the same
filters:

- ``since`` / ``until``: bound the time of what is counted (inclusive /
  exclusive): a message's ``created_at`` for per-day usage, a feedback item's
  for feedback, otherwise the chat's ``created_at``;
- ``user_id``, ``model`` (the chat's chosen model), ``workflow`` (the workflow
  context's name).

A user's archive (``ChatArchive.for_user``) counts only that user's chats, as
its own calls see only them.

The queries read the views that migration 0002 creates (``chat_stats``,
``tool_call_results``, ``daily_usage``, ``feedback_summary``); the SQL
reference's ready queries ask more questions in plain SQL.

Examples:
    >>> from chatarchive import ChatArchive
    >>> with ChatArchive("sqlite://") as archive:
    ...     archive.upgrade()
    ...     archive.save({"chat_id": "c", "model": "m", "messages": [{"role": "user", "content": "Hi"}]})
    ...     [(row.model, row.chats, row.user_turns) for row in archive.model_usage()]
    1
    [('m', 1, 1)]
"""

from __future__ import annotations

from typing import Unpack

from sqlalchemy import Connection
from sqlalchemy.orm import Session

from ._api import ChatArchive, ChatRepository
from ._exceptions import InvalidArgument
from ._repository.analytics import (
    DailyUsage,
    FeedbackSummary,
    Filters,
    ModelUsage,
    ToolUsage,
    UserActivity,
    WorkflowUsage,
)
from ._repository.prices import Cost, CostGroup, ModelPrice

__all__ = [
    "READY_QUERIES",
    "Cost",
    "CostGroup",
    "DailyUsage",
    "FeedbackSummary",
    "Filters",
    "ModelPrice",
    "ModelUsage",
    "ToolUsage",
    "UserActivity",
    "WorkflowUsage",
    "cost",
    "daily_usage",
    "feedback_summary",
    "model_usage",
    "tool_usage",
    "user_activity",
    "workflow_usage",
]

#: The ready queries of the SQL reference (plain SQL over the views; each runs on both databases).
READY_QUERIES: dict[str, str] = {
    "tool_failure_rate": """
SELECT tool_name, COUNT(*) AS calls, SUM(1 - answered) AS unanswered,
       ROUND(1.0 * SUM(1 - answered) / COUNT(*), 3) AS failure_rate
FROM tool_call_results
GROUP BY tool_name
ORDER BY failure_rate DESC, tool_name
""",
    "chats_per_user_per_week": """
SELECT user_id, created_week, COUNT(*) AS chats
FROM chat_stats
GROUP BY user_id, created_week
ORDER BY user_id, created_week
""",
    "user_turns_before_first_tool_call": """
SELECT AVG(1.0 * turns) AS user_turns_before_first_tool_call
FROM (
    SELECT f.chat_id,
           (SELECT COUNT(*) FROM messages m
            WHERE m.chat_id = f.chat_id AND m.role = 'user' AND m.position < f.first_call) AS turns
    FROM (SELECT chat_id, MIN(call_position) AS first_call FROM tool_call_results GROUP BY chat_id) f
) per_chat
""",
    "feedback_by_model_per_month": """
SELECT s.model, SUBSTR(s.created_day, 1, 7) AS month, COUNT(*) AS feedback, AVG(f.score) AS mean_score
FROM feedback f
JOIN chat_stats s ON s.chat_id = f.chat_id
GROUP BY s.model, SUBSTR(s.created_day, 1, 7)
ORDER BY month, s.model
""",
    "longest_chats": """
SELECT chat_id, user_id, message_count
FROM chat_stats
ORDER BY message_count DESC, chat_id
LIMIT 10
""",
    "tokens_per_workflow": """
SELECT COALESCE(workflow_name, '(none)') AS workflow, SUM(prompt_tokens) AS prompt_tokens,
       SUM(completion_tokens) AS completion_tokens, SUM(prompt_tokens + completion_tokens) AS total_tokens
FROM chat_stats
GROUP BY COALESCE(workflow_name, '(none)')
ORDER BY total_tokens DESC, workflow
""",
    "multimodal_share": """
SELECT ROUND(1.0 * SUM(CASE WHEN image_parts + audio_parts + file_parts > 0 THEN 1 ELSE 0 END) / COUNT(*), 3)
       AS multimodal_share
FROM chat_stats
""",
    "unanswered_tool_calls": """
SELECT chat_id, call_position, tool_name, arguments
FROM tool_call_results
WHERE answered = 0
ORDER BY chat_id, call_position, call_index
""",
    "busiest_days": """
SELECT day, SUM(messages) AS messages
FROM daily_usage
GROUP BY day
ORDER BY messages DESC, day
LIMIT 7
""",
    "regeneration_rate_per_model": """
SELECT COALESCE(c.model, m.model, '(none)') AS model, COUNT(*) AS answers,
       SUM(CASE WHEN m.sibling_index > 0 THEN 1 ELSE 0 END) AS regenerations,
       ROUND(1.0 * SUM(CASE WHEN m.sibling_index > 0 THEN 1 ELSE 0 END) / COUNT(*), 3) AS regeneration_rate
FROM messages m
JOIN chats c ON c.chat_id = m.chat_id
WHERE m.role = 'assistant'
GROUP BY COALESCE(c.model, m.model, '(none)')
ORDER BY regeneration_rate DESC, model
""",
    "rejected_answers": """
SELECT m.chat_id, m.uid, t.text,
       (SELECT AVG(f.score) FROM feedback f
        WHERE f.chat_id = m.chat_id AND f.message_uid = m.uid) AS mean_score
FROM messages m
JOIN message_texts t ON t.chat_id = m.chat_id AND t.position = m.position
WHERE m.role = 'assistant'
  AND (
    (NOT m.on_path AND EXISTS (
        SELECT 1 FROM messages kept
        WHERE kept.chat_id = m.chat_id AND kept.parent_position = m.parent_position
          AND kept.role = 'assistant' AND kept.on_path))
    OR (SELECT AVG(f.score) FROM feedback f WHERE f.chat_id = m.chat_id AND f.message_uid = m.uid) < 0
  )
ORDER BY m.chat_id, m.position
""",
}

Source = ChatArchive | Session | Connection


def _face(source: Source) -> ChatArchive | ChatRepository:
    """The face that answers for ``source``: the archive itself, or a
    repository in the caller's session or connection."""
    if isinstance(source, ChatArchive):
        return source
    if isinstance(source, (Session, Connection)):
        return ChatRepository(source)
    wrong = f"source must be a ChatArchive, a Session or a Connection, not {type(source).__name__}"
    if type(source).__name__.startswith("Async"):
        wrong += " (from asyncio: await async_archive.model_usage(...), and the other questions alike)"
    raise InvalidArgument(wrong, argument="source")


def daily_usage(source: Source, **filters: Unpack[Filters]) -> list[DailyUsage]:
    """Messages, chats, user turns, tool calls and tokens per UTC day and model
    (the view ``daily_usage``, filterable): ``archive.daily_usage(...)``."""
    return _face(source).daily_usage(**filters)


def model_usage(source: Source, **filters: Unpack[Filters]) -> list[ModelUsage]:
    """Chats, messages, tool calls, tokens and feedback per chosen model:
    ``archive.model_usage(...)``."""
    return _face(source).model_usage(**filters)


def workflow_usage(source: Source, **filters: Unpack[Filters]) -> list[WorkflowUsage]:
    """Chats, messages, tool calls, tokens and feedback per workflow:
    ``archive.workflow_usage(...)``."""
    return _face(source).workflow_usage(**filters)


def user_activity(source: Source, **filters: Unpack[Filters]) -> list[UserActivity]:
    """Chats, messages, tool calls and tokens per user, with their first and
    last chat: ``archive.user_activity(...)``."""
    return _face(source).user_activity(**filters)


def tool_usage(source: Source, **filters: Unpack[Filters]) -> list[ToolUsage]:
    """Calls per tool, answered or not (legacy function calls included):
    ``archive.tool_usage(...)``."""
    return _face(source).tool_usage(**filters)


def feedback_summary(source: Source, **filters: Unpack[Filters]) -> list[FeedbackSummary]:
    """Feedback count, mean score and positive/negative shares per model and
    workflow: ``archive.feedback_summary(...)``."""
    return _face(source).feedback_summary(**filters)


def cost(source: Source, by: CostGroup = "model", **filters: Unpack[Filters]) -> list[Cost]:
    """What messages cost per user, model, UTC day or chat, at the price of
    their model valid when each was created (the view ``message_costs``; prices
    loaded with ``archive.load_prices`` or ``chatarchive prices load``):
    ``archive.cost(by=...)``."""
    return _face(source).cost(by, **filters)
