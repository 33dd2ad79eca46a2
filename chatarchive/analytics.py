"""Answers to the common questions about an archive, as typed rows.

Every function takes the archive (a ``ChatArchive``, or a
SQLAlchemy ``Session`` / ``Connection`` on its database) and the same filters:

- ``since`` / ``until``: bound the time of what is counted (inclusive /
  exclusive): a message's ``created_at`` for per-day usage, a feedback item's
  for feedback, otherwise the chat's ``created_at``;
- ``user_id``, ``model`` (the chat's chosen model), ``workflow`` (the workflow
  context's name).

A user's archive (``ChatArchive.for_user``) counts only that
user's chats, as its own calls see only them.

The queries read the views that migration 0002 creates (``chat_stats``,
``tool_call_results``, ``daily_usage``, ``feedback_summary``); the SQL
reference's ready queries ask more questions in plain SQL.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime
from typing import Any, TypedDict, TypeVar, Unpack

from pydantic import BaseModel, ConfigDict
from sqlalchemy import (
    ColumnElement,
    Connection,
    Select,
    case,
    column,
    false,
    func,
    literal,
    select,
    table,
)
from sqlalchemy.orm import Session

from ._api import ChatArchive
from ._arguments import optional_moment, optional_text
from ._backends import Backend, backend_of, database_errors
from ._document import Timestamp
from ._exceptions import InvalidArgument
from ._migrations import require_archive_file, require_revision, stored_revision
from ._repository.unit import NOBODY, scoped_user
from ._types import ArchiveText, UTCDateTime

__all__ = [
    "READY_QUERIES",
    "DailyUsage",
    "FeedbackSummary",
    "Filters",
    "ModelUsage",
    "ToolUsage",
    "UserActivity",
    "WorkflowUsage",
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


class Filters(TypedDict, total=False):
    """The filters every analytics function takes (each one given narrows what is counted)."""

    #: From this time on (inclusive): of a message for per-day usage, of a
    #: feedback item for feedback, otherwise of the chat.
    since: datetime | None
    #: Before this time (exclusive), as ``since``.
    until: datetime | None
    #: Only this user's chats.
    user_id: str | None
    #: Only chats whose chosen model is this one.
    model: str | None
    #: Only chats of this workflow (the workflow context's name).
    workflow: str | None


_Row = TypeVar("_Row", bound=BaseModel)


class _Stats(BaseModel):
    model_config = ConfigDict(frozen=True, protected_namespaces=())


class DailyUsage(_Stats):
    """Activity on one UTC day for one model."""

    day: date
    model: str | None
    chats: int
    messages: int
    user_turns: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int


class ModelUsage(_Stats):
    """Activity of chats by their chosen model."""

    model: str | None
    chats: int
    messages: int
    user_turns: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    feedback_count: int
    mean_score: float | None


class ToolUsage(_Stats):
    """Calls of one tool and how many were answered."""

    tool_name: str | None
    calls: int
    answered: int
    unanswered: int
    unanswered_share: float
    mean_position_distance: float | None


class UserActivity(_Stats):
    """Activity of one user."""

    user_id: str | None
    chats: int
    messages: int
    user_turns: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    first_chat_at: Timestamp
    last_chat_at: Timestamp


class WorkflowUsage(_Stats):
    """Activity of chats by workflow."""

    workflow: str | None
    chats: int
    messages: int
    tool_calls: int
    prompt_tokens: int
    completion_tokens: int
    feedback_count: int
    mean_score: float | None


class FeedbackSummary(_Stats):
    """Feedback by model and workflow."""

    model: str | None
    workflow: str | None
    feedback_count: int
    mean_score: float | None
    positive_share: float
    negative_share: float


#: The views' and tables' text and time columns, typed as the models' are: on
#: PostgreSQL, a text with NUL in it is stored escaped (see ``_types``), so a
#: filter must be escaped and a result unescaped like the repository's.
_TEXT_COLUMNS = frozenset({"chat_id", "user_id", "model", "workflow_name", "tool_name", "role"})
_TIME_COLUMNS = frozenset({"created_at"})


def _view(name: str, *columns: str) -> Any:
    return table(name, *(column(name, _column_type(name)) for name in columns))


def _column_type(name: str) -> ArchiveText | UTCDateTime | None:
    if name in _TEXT_COLUMNS:
        return ArchiveText()
    return UTCDateTime() if name in _TIME_COLUMNS else None


_chat_stats = _view(
    "chat_stats",
    "chat_id",
    "user_id",
    "model",
    "workflow_name",
    "created_at",
    "message_count",
    "user_messages",
    "tool_calls",
    "prompt_tokens",
    "completion_tokens",
    "feedback_count",
    "mean_score",
)
_tool_call_results = _view("tool_call_results", "chat_id", "tool_name", "answered", "position_distance")
_chats = _view("chats", "chat_id", "user_id", "model", "workflow", "created_at")
_messages = _view(
    "messages",
    "chat_id",
    "position",
    "role",
    "model",
    "created_at",
    "prompt_tokens",
    "completion_tokens",
    "extra",
)
_feedback = _view("feedback", "chat_id", "score", "created_at")


def _filtered(
    query: Select[Any],
    source: Source,
    filters: Filters,
    *,
    chat: Any,
    time: ColumnElement[Any],
    workflow: ColumnElement[Any],
) -> Select[Any]:
    """``query`` kept to what ``filters`` select: ``chat`` the table or view of
    chats, ``time`` the column of the time counted, ``workflow`` the workflow
    name's expression."""
    unknown = set(filters) - set(Filters.__annotations__)
    if unknown:
        raise InvalidArgument(f"unknown filters {sorted(unknown)}", argument=sorted(unknown)[0])
    # A user's archive (for_user) counts only that user's chats.
    user_id = scoped_user(source.user_id if isinstance(source, ChatArchive) else None, filters.get("user_id"))
    if user_id is NOBODY:
        return query.where(false())
    since, until = (
        optional_moment(filters.get("since"), "since"),
        optional_moment(filters.get("until"), "until"),
    )
    model, workflow_name = (
        optional_text(filters.get("model"), "model"),
        optional_text(filters.get("workflow"), "workflow"),
    )
    if since is not None:
        query = query.where(time >= _timestamp(since))
    if until is not None:
        query = query.where(time < _timestamp(until))
    if user_id is not None:
        query = query.where(chat.c.user_id == user_id)
    if model is not None:
        query = query.where(chat.c.model == model)
    if workflow_name is not None:
        query = query.where(workflow == workflow_name)
    return query


def _timestamp(moment: datetime) -> ColumnElement[Any]:
    return literal(moment, UTCDateTime())


def _rows(source: Source, query: Select[Any], model: type[_Row]) -> list[_Row]:
    if isinstance(source, ChatArchive):
        require_archive_file(source.url)  # looking would create it
    with database_errors():
        if isinstance(source, ChatArchive):
            with source.engine.connect() as connection:
                # At the revision whose views these queries read.
                require_revision(source.url, stored_revision(connection))
                rows: Sequence[Any] = _execute(connection, query)
        else:
            rows = _execute(source, query)
    return [model.model_validate(dict(row)) for row in rows]


def _execute(executor: Session | Connection, query: Select[Any]) -> Sequence[Any]:
    _backend(executor).before_analytics(executor)
    return executor.execute(query).mappings().all()


def _backend(source: Source) -> Backend:
    if isinstance(source, ChatArchive):
        return backend_of(source.engine)
    if isinstance(source, (Session, Connection)):
        return backend_of(source)
    wrong = f"source must be a ChatArchive, a Session or a Connection, not {type(source).__name__}"
    if type(source).__name__.startswith("Async"):
        wrong += " (from asyncio: async with archive.engine.connect() as c: await c.run_sync(function))"
    raise InvalidArgument(wrong, argument="source")


def _workflow_of_chat(source: Source) -> ColumnElement[Any]:
    return _backend(source).json_text(_chats.c.workflow, "name")


def _legacy_function_call(source: Source) -> ColumnElement[bool]:
    """Whether a message carries a legacy ``function_call`` (kept in ``extra``)."""
    return _backend(source).json_is_object(_messages.c.extra, "function_call")


def _by_bytes(source: Source, value: ColumnElement[str]) -> ColumnElement[str]:
    """``value`` compared by its bytes: the same equalities as under any
    deterministic collation, without the cost of collating."""
    return _backend(source).by_bytes(value)


def _day(source: Source, moment: ColumnElement[Any]) -> ColumnElement[Any]:
    return _backend(source).utc_day(moment)


def daily_usage(source: Source, **filters: Unpack[Filters]) -> list[DailyUsage]:
    """Messages, chats, user turns, tool calls and tokens per UTC day and model
    (the view ``daily_usage``, filterable)."""
    tool_calls = _view("tool_calls", "chat_id", "message_position")
    calls = (
        select(tool_calls.c.chat_id, tool_calls.c.message_position, func.count().label("calls"))
        .group_by(tool_calls.c.chat_id, tool_calls.c.message_position)
        .subquery()
    )
    day = _day(source, _messages.c.created_at).label("day")
    chat_model = func.coalesce(_chats.c.model, _messages.c.model).label("model")
    query = (
        select(
            day,
            chat_model,
            func.count(_by_bytes(source, _messages.c.chat_id).distinct()).label("chats"),
            func.count().label("messages"),
            func.sum(case((_messages.c.role == "user", 1), else_=0)).label("user_turns"),
            (
                func.coalesce(func.sum(calls.c.calls), 0)
                + func.sum(case((_legacy_function_call(source), 1), else_=0))
            ).label("tool_calls"),
            func.coalesce(func.sum(_messages.c.prompt_tokens), 0).label("prompt_tokens"),
            func.coalesce(func.sum(_messages.c.completion_tokens), 0).label("completion_tokens"),
        )
        .select_from(_messages)
        .join(_chats, _chats.c.chat_id == _messages.c.chat_id)
        .outerjoin(
            calls,
            (calls.c.chat_id == _messages.c.chat_id) & (calls.c.message_position == _messages.c.position),
        )
        .group_by(day, chat_model)
        .order_by(day, chat_model)
    )
    query = _filtered(
        query, source, filters, chat=_chats, time=_messages.c.created_at, workflow=_workflow_of_chat(source)
    )
    return _rows(source, query, DailyUsage)


def _per_chat(source: Source, key: ColumnElement[Any], filters: Filters) -> Select[Any]:
    stats = _chat_stats
    query = select(
        key,
        func.count().label("chats"),
        func.sum(stats.c.message_count).label("messages"),
        func.sum(stats.c.user_messages).label("user_turns"),
        func.sum(stats.c.tool_calls).label("tool_calls"),
        func.sum(stats.c.prompt_tokens).label("prompt_tokens"),
        func.sum(stats.c.completion_tokens).label("completion_tokens"),
    ).group_by(key)
    return _filtered(
        query, source, filters, chat=stats, time=stats.c.created_at, workflow=stats.c.workflow_name
    )


def _feedback_columns() -> list[ColumnElement[Any]]:
    stats = _chat_stats
    scored = func.sum(case((stats.c.mean_score.is_not(None), stats.c.mean_score * stats.c.feedback_count)))
    weights = func.sum(case((stats.c.mean_score.is_not(None), stats.c.feedback_count)))
    return [
        func.sum(stats.c.feedback_count).label("feedback_count"),
        (scored / func.nullif(weights, 0)).label("mean_score"),
    ]


def model_usage(source: Source, **filters: Unpack[Filters]) -> list[ModelUsage]:
    """Chats, messages, tool calls, tokens and feedback per chosen model."""
    key = _chat_stats.c.model.label("model")
    query = _per_chat(source, key, filters)
    query = query.add_columns(*_feedback_columns()).order_by(func.count().desc(), key)
    return _rows(source, query, ModelUsage)


def workflow_usage(source: Source, **filters: Unpack[Filters]) -> list[WorkflowUsage]:
    """Chats, messages, tool calls, tokens and feedback per workflow."""
    key = _chat_stats.c.workflow_name.label("workflow")
    query = _per_chat(source, key, filters)
    query = query.add_columns(*_feedback_columns()).order_by(func.count().desc(), key)
    return _rows(source, query, WorkflowUsage)


def user_activity(source: Source, **filters: Unpack[Filters]) -> list[UserActivity]:
    """Chats, messages, tool calls and tokens per user, with their first and last chat."""
    key = _chat_stats.c.user_id.label("user_id")
    query = _per_chat(source, key, filters)
    query = query.add_columns(
        func.min(_chat_stats.c.created_at).label("first_chat_at"),
        func.max(_chat_stats.c.created_at).label("last_chat_at"),
    ).order_by(func.count().desc(), key)
    return _rows(source, query, UserActivity)


def tool_usage(source: Source, **filters: Unpack[Filters]) -> list[ToolUsage]:
    """Calls per tool, answered or not (legacy function calls included)."""
    results = _tool_call_results
    calls = func.count()
    unanswered = func.sum(1 - results.c.answered)
    query = (
        select(
            results.c.tool_name,
            calls.label("calls"),
            func.sum(results.c.answered).label("answered"),
            unanswered.label("unanswered"),
            (1.0 * unanswered / calls).label("unanswered_share"),
            func.avg(results.c.position_distance).label("mean_position_distance"),
        )
        .select_from(results)
        .join(_chat_stats, _chat_stats.c.chat_id == results.c.chat_id)
        .group_by(results.c.tool_name)
        .order_by(calls.desc(), results.c.tool_name)
    )
    query = _filtered(
        query,
        source,
        filters,
        chat=_chat_stats,
        time=_chat_stats.c.created_at,
        workflow=_chat_stats.c.workflow_name,
    )
    return _rows(source, query, ToolUsage)


def feedback_summary(source: Source, **filters: Unpack[Filters]) -> list[FeedbackSummary]:
    """Feedback count, mean score and positive/negative shares per model and workflow."""
    workflow_name = _workflow_of_chat(source).label("workflow")
    count = func.count()
    query = (
        select(
            _chats.c.model,
            workflow_name,
            count.label("feedback_count"),
            func.avg(_feedback.c.score).label("mean_score"),
            (1.0 * func.sum(case((_feedback.c.score > 0, 1), else_=0)) / count).label("positive_share"),
            (1.0 * func.sum(case((_feedback.c.score < 0, 1), else_=0)) / count).label("negative_share"),
        )
        .select_from(_feedback)
        .join(_chats, _chats.c.chat_id == _feedback.c.chat_id)
        .group_by(_chats.c.model, workflow_name)
        .order_by(count.desc(), _chats.c.model, workflow_name)
    )
    query = _filtered(
        query, source, filters, chat=_chats, time=_feedback.c.created_at, workflow=_workflow_of_chat(source)
    )
    return _rows(source, query, FeedbackSummary)
