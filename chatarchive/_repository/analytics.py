"""The analytics operations: the common questions about an archive, as typed rows.

The queries read the views that migration 0002 creates (``chat_stats``,
``tool_call_results``, ``daily_usage``, ``feedback_summary``), through a
unit of work like every other read, so that each face (sync and asyncio,
archive and repository) has them, scoped to a user's chats as its other
reads are. ``chatarchive.analytics`` documents the filters and the rows.
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any, TypedDict, TypeVar, Unpack

from pydantic import BaseModel, ConfigDict
from sqlalchemy import ColumnElement, Select, case, column, false, func, literal, select, table

from chatarchive._arguments import optional_moment, optional_text
from chatarchive._document import Timestamp
from chatarchive._exceptions import InvalidArgument
from chatarchive._types import ArchiveText, UTCDateTime

from .unit import NOBODY, Unit, scoped_user

__all__ = [
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
    unit: Unit,
    filters: Filters,
    *,
    chat: Any,
    time: ColumnElement[Any],
    workflow: ColumnElement[Any],
) -> Select[Any]:
    """``query`` kept to what ``filters`` select: ``chat`` the table or view of
    chats, ``time`` the column of the time counted, ``workflow`` the workflow
    name's expression. A user's archive (``for_user``) counts only that
    user's chats."""
    unknown = set(filters) - set(Filters.__annotations__)
    if unknown:
        raise InvalidArgument(f"unknown filters {sorted(unknown)}", argument=sorted(unknown)[0])
    user_id = scoped_user(unit.user_id, filters.get("user_id"))
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


def _rows(unit: Unit, query: Select[Any], model: type[_Row]) -> list[_Row]:
    with unit.reading(), unit.backend.analytics_session(unit.executor):
        rows = unit.execute(query).mappings().all()
    return [model.model_validate(dict(row)) for row in rows]


def _workflow_of_chat(unit: Unit) -> ColumnElement[Any]:
    return unit.backend.json_text(_chats.c.workflow, "name")


def _legacy_function_call(unit: Unit) -> ColumnElement[bool]:
    """Whether a message carries a legacy ``function_call`` (kept in ``extra``)."""
    return unit.backend.json_is_object(_messages.c.extra, "function_call")


def daily_usage(unit: Unit, /, **filters: Unpack[Filters]) -> list[DailyUsage]:
    """Messages, chats, user turns, tool calls and tokens per UTC day and model
    (the view ``daily_usage``, filterable)."""
    tool_calls = _view("tool_calls", "chat_id", "message_position")
    calls = (
        select(tool_calls.c.chat_id, tool_calls.c.message_position, func.count().label("calls"))
        .group_by(tool_calls.c.chat_id, tool_calls.c.message_position)
        .subquery()
    )
    day = unit.backend.utc_day(_messages.c.created_at).label("day")
    chat_model = func.coalesce(_chats.c.model, _messages.c.model).label("model")
    query = (
        select(
            day,
            chat_model,
            func.count(unit.backend.by_bytes(_messages.c.chat_id).distinct()).label("chats"),
            func.count().label("messages"),
            func.sum(case((_messages.c.role == "user", 1), else_=0)).label("user_turns"),
            (
                func.coalesce(func.sum(calls.c.calls), 0)
                + func.sum(case((_legacy_function_call(unit), 1), else_=0))
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
        query, unit, filters, chat=_chats, time=_messages.c.created_at, workflow=_workflow_of_chat(unit)
    )
    return _rows(unit, query, DailyUsage)


def _per_chat(unit: Unit, key: ColumnElement[Any], filters: Filters) -> Select[Any]:
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
        query, unit, filters, chat=stats, time=stats.c.created_at, workflow=stats.c.workflow_name
    )


def _feedback_columns() -> list[ColumnElement[Any]]:
    stats = _chat_stats
    scored = func.sum(case((stats.c.mean_score.is_not(None), stats.c.mean_score * stats.c.feedback_count)))
    weights = func.sum(case((stats.c.mean_score.is_not(None), stats.c.feedback_count)))
    return [
        func.sum(stats.c.feedback_count).label("feedback_count"),
        (scored / func.nullif(weights, 0)).label("mean_score"),
    ]


def model_usage(unit: Unit, /, **filters: Unpack[Filters]) -> list[ModelUsage]:
    """Chats, messages, tool calls, tokens and feedback per chosen model."""
    key = _chat_stats.c.model.label("model")
    query = _per_chat(unit, key, filters)
    query = query.add_columns(*_feedback_columns()).order_by(func.count().desc(), key)
    return _rows(unit, query, ModelUsage)


def workflow_usage(unit: Unit, /, **filters: Unpack[Filters]) -> list[WorkflowUsage]:
    """Chats, messages, tool calls, tokens and feedback per workflow."""
    key = _chat_stats.c.workflow_name.label("workflow")
    query = _per_chat(unit, key, filters)
    query = query.add_columns(*_feedback_columns()).order_by(func.count().desc(), key)
    return _rows(unit, query, WorkflowUsage)


def user_activity(unit: Unit, /, **filters: Unpack[Filters]) -> list[UserActivity]:
    """Chats, messages, tool calls and tokens per user, with their first and last chat."""
    key = _chat_stats.c.user_id.label("user_id")
    query = _per_chat(unit, key, filters)
    query = query.add_columns(
        func.min(_chat_stats.c.created_at).label("first_chat_at"),
        func.max(_chat_stats.c.created_at).label("last_chat_at"),
    ).order_by(func.count().desc(), key)
    return _rows(unit, query, UserActivity)


def tool_usage(unit: Unit, /, **filters: Unpack[Filters]) -> list[ToolUsage]:
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
        unit,
        filters,
        chat=_chat_stats,
        time=_chat_stats.c.created_at,
        workflow=_chat_stats.c.workflow_name,
    )
    return _rows(unit, query, ToolUsage)


def feedback_summary(unit: Unit, /, **filters: Unpack[Filters]) -> list[FeedbackSummary]:
    """Feedback count, mean score and positive/negative shares per model and workflow."""
    workflow_name = _workflow_of_chat(unit).label("workflow")
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
        query, unit, filters, chat=_chats, time=_feedback.c.created_at, workflow=_workflow_of_chat(unit)
    )
    return _rows(unit, query, FeedbackSummary)
