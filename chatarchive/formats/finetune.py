"""OpenAI fine-tuning JSONL (export only): one ``{"messages": [...]}`` line per chat.

Messages keep only the keys the fine-tuning API knows (``role``, ``content``,
``name``, ``tool_calls``, ``tool_call_id``, ``function_call``, ``weight``); the
chat's ``workflow["tools"]`` list is written as ``tools`` when it holds tool
definitions (objects). ``select`` applies the filters that matter for
datasets and skips, with a reason, chats whose tool calls are not all answered,
chats with a message not completed (a stream still running, or one that
stopped: its text is cut short) and chats with no assistant message (none is
left to train on; OpenAI's fine-tuning refuses such an example).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chatarchive._arguments import is_real_number, optional_moment, optional_text, require_many, require_text
from chatarchive._document import ChatDocument, Message
from chatarchive._exceptions import InvalidArgument

__all__ = [
    "Filters",
    "Selection",
    "chosen",
    "from_document",
    "select",
    "tools_of",
    "training_messages",
    "unanswered_tool_calls",
]

_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "function_call", "weight")


def from_document(doc: ChatDocument, exclude_roles: Iterable[str] = ()) -> dict[str, Any]:
    line: dict[str, Any] = {"messages": training_messages(doc.messages, exclude_roles)}
    if tools := tools_of(doc):
        line["tools"] = tools
    return line


def training_messages(messages: Iterable[Message], exclude_roles: Iterable[str] = ()) -> list[dict[str, Any]]:
    """The messages as fine-tuning takes them: the keys it knows, the roles not excluded."""
    excluded = set(_roles(exclude_roles))
    return [
        {key: value for key, value in shaped.items() if key in _KEYS}
        for message in messages
        if (shaped := message.to_openai())["role"] not in excluded
    ]


def tools_of(doc: ChatDocument) -> list[dict[str, Any]] | None:
    """The chat's ``workflow["tools"]``, when it is a list of tool definitions."""
    tools = (doc.workflow or {}).get("tools")
    if isinstance(tools, list) and tools and all(isinstance(tool, dict) for tool in tools):
        return tools
    return None


def unanswered_tool_calls(doc: ChatDocument) -> list[str]:
    """Ids of tool calls that no later tool message answers."""
    answered: set[str] = set()
    missing: list[str] = []
    for message in reversed(doc.messages):
        if message.role == "tool" and message.tool_call_id:
            answered.add(message.tool_call_id)
        for call in message.tool_calls or []:
            if not (isinstance(call.id, str) and call.id in answered):
                missing.append(str(call.id))
    return missing


@dataclass(frozen=True)
class Filters:
    """What a dataset keeps: chats with a mean feedback score of at least
    ``min_score`` (chats without scored feedback are left out when it is set),
    of ``model``, created since ``since``, without the roles in ``exclude_roles``."""

    min_score: float | None = None
    model: str | None = None
    since: datetime | None = None
    exclude_roles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        score = self.min_score
        if score is not None and (not is_real_number(score) or not math.isfinite(score)):
            raise InvalidArgument(f"min_score must be a finite number, not {score!r}", argument="min_score")
        optional_text(self.model, "model")
        object.__setattr__(self, "since", optional_moment(self.since, "since"))
        object.__setattr__(self, "exclude_roles", _roles(self.exclude_roles))


def _roles(roles: Iterable[str]) -> tuple[str, ...]:
    """``exclude_roles`` as a tuple of role names: one name given alone would
    otherwise be read as its letters, and exclude nothing."""
    require_many(roles, "exclude_roles", "role names")
    return tuple(require_text(role, "exclude_roles") for role in roles)


@dataclass
class Selection:
    """The outcome of a dataset export: lines written and chats skipped, by reason."""

    written: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1


def chosen(doc: ChatDocument, filters: Filters, selection: Selection) -> bool:
    """Whether the chat passes the filters on chats (model, time, the mean
    score of the feedback on its active path); ``selection`` counts it as
    skipped when not."""
    if filters.model is not None and doc.model != filters.model:
        selection.skip("other model")
        return False
    if filters.since is not None and (doc.created_at is None or doc.created_at < filters.since):
        selection.skip("too old")
        return False
    if filters.min_score is not None:
        scores = [item.score for item in doc.feedback if item.score is not None]
        if not scores or sum(scores) / len(scores) < filters.min_score:
            selection.skip("score below the minimum")
            return False
    return True


def select(docs: Iterable[ChatDocument], filters: Filters, selection: Selection) -> Iterator[dict[str, Any]]:
    """The fine-tuning lines of the chats that pass ``filters``; ``selection``
    counts what is written and what is skipped."""
    for whole in docs:
        doc = whole.path_document()  # the path the user kept
        if not chosen(doc, filters, selection):
            continue
        if unanswered_tool_calls(doc):
            selection.skip("unanswered tool calls")
            continue
        if not all(message.completed for message in doc.messages):
            selection.skip("incomplete messages")
            continue
        line = from_document(doc, filters.exclude_roles)
        if not line["messages"]:  # none, or none left once the excluded roles are out
            selection.skip("no messages")
            continue
        if not any(message["role"] == "assistant" for message in line["messages"]):
            selection.skip("no assistant message")  # nothing to train on: OpenAI refuses the example
            continue
        selection.written += 1
        yield line
