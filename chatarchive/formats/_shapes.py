"""What the format adapters share: checks of the JSON shapes that API
responses and stream events come in (each names the place of what is wrong,
``chunks[3].choices[0].delta``), what a record keeps for its format, the
token counts' names, and the runs that messages mixing content blocks and
tool calls (Anthropic's, Gemini's) are stored as."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any, Literal

from pydantic import BaseModel

from chatarchive._exceptions import InvalidDocument

__all__ = [
    "Block",
    "array",
    "interleaved",
    "json_object",
    "kept",
    "kind_of",
    "plain",
    "runs",
    "text",
    "usage_back",
    "usage_in_archive",
]


def kind_of(data: Any) -> str | None:
    """A block's, item's or event's ``type``, when it is a string."""
    kind = data.get("type") if isinstance(data, dict) else None
    return kind if isinstance(kind, str) else None


def kept(record: BaseModel, key: str) -> dict[str, Any]:
    """What ``record`` (a document, message or tool call) keeps under its
    format's ``key`` ({} when nothing)."""
    found = (record.model_extra or {}).get(key)
    return found if isinstance(found, dict) else {}


#: Token counts named ``input_tokens`` and ``output_tokens`` (Anthropic's,
#: the Responses API's, LangChain's), by the archive's names for them.
_TOKENS = {"input_tokens": "prompt_tokens", "output_tokens": "completion_tokens"}
_TOKENS_BACK = {archive: own for own, archive in _TOKENS.items()}


def usage_in_archive(usage: Any) -> Any:
    """A usage object with ``input_tokens`` and ``output_tokens`` as the
    archive's ``prompt_tokens`` and ``completion_tokens`` (its token columns);
    the other counts as they are."""
    return (
        {_TOKENS.get(key, key): value for key, value in usage.items()} if isinstance(usage, dict) else usage
    )


def usage_back(usage: Any) -> Any:
    """The usage object ``usage_in_archive`` was given."""
    return (
        {_TOKENS_BACK.get(key, key): value for key, value in usage.items()}
        if isinstance(usage, dict)
        else usage
    )


#: What one block of a message is: a result (a message of its own), a tool
#: call, or a content part; and the archive's value for it.
Block = tuple[Literal["result", "call", "part"], dict[str, Any]]


def runs(role: Any, blocks: Iterable[Block], key: str) -> list[dict[str, Any]]:
    """The archive's messages of one API message whose blocks mix content,
    tool calls and tool results: each result a message of its own, the other
    blocks in runs between them (content parts, and tool calls as the run's
    ``tool_calls``). So that the API message can be given back, the messages
    after the first are marked ``{key: {"continues": true}}``, and a run whose
    calls were not all after its parts keeps where they were (``calls_at``)."""
    made: list[dict[str, Any]] = []
    order: list[list[str]] = []  # for each message, the kinds of its blocks
    run: dict[str, Any] | None = None
    for kind, value in blocks:
        if kind == "result":
            made.append(value)
            order.append([])
            run = None
            continue
        if run is None:
            run = {"role": role, "content": []}
            made.append(run)
            order.append([])
        if kind == "call":
            run.setdefault("tool_calls", []).append(value)
        else:
            run["content"].append(value)
        order[-1].append(kind)
    if not made:  # no blocks at all
        made.append({"role": role, "content": []})
        order.append([])
    for number, (message, kinds) in enumerate(zip(made, order, strict=True)):
        calls = [at for at, kind in enumerate(kinds) if kind == "call"]
        if calls and calls != list(range(len(kinds) - len(calls), len(kinds))):  # not all at the end
            message.setdefault(key, {})["calls_at"] = calls
        if number:
            message.setdefault(key, {})["continues"] = True
    return made


def interleaved(parts: Sequence[Any], calls: Sequence[Any], calls_at: Any) -> list[Any]:
    """A run's blocks: its parts, with its calls at the places ``runs`` kept
    (``calls_at``), or after the parts."""
    valid = (
        isinstance(calls_at, list)
        and len(calls_at) == len(calls)
        and all(type(at) is int for at in calls_at)
        and len(set(calls_at)) == len(calls_at)
    )
    if not valid:
        return [*parts, *calls]
    pending_calls, pending_parts = iter(calls), iter(parts)
    blocks = [
        next(pending_calls) if index in calls_at else next(pending_parts, None)
        for index in range(len(parts) + len(calls))
    ]
    leftover = [*pending_calls]  # places past the end: the calls come last
    return [block for block in blocks if block is not None] + leftover


def plain(value: Any, what: str, *, exclude_unset: bool = False) -> Any:
    """A dict from a dict, or from a pydantic object of an SDK (``openai``,
    ``anthropic``: neither is a dependency); ``exclude_unset`` leaves out the
    fields the object was not given (those the API did not send)."""
    if isinstance(value, dict):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json", exclude_unset=exclude_unset)
    raise InvalidDocument(f"expected {what} (a dict or an SDK object), not {type(value).__name__}")


def json_object(value: Any, field: str, *, optional: bool = False) -> dict[str, Any]:
    if optional and value is None:
        return {}
    if not isinstance(value, dict):
        raise InvalidDocument("expected a JSON object", field=field)
    return value


def array(value: Any, field: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidDocument("expected a JSON array", field=field)
    return value


def text(value: Any, field: str) -> str:
    if not isinstance(value, str):
        raise InvalidDocument("expected a string", field=field)
    return value
