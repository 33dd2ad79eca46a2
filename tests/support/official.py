"""Validation against the official SDK types: the request and response types
of the ``openai`` and ``anthropic`` packages.

Their request types are ``TypedDict``s, which pydantic validates without
looking at keys they do not declare; the API refuses such keys. So a value is
checked twice: by pydantic (``TypeAdapter``), and by a walk that finds a key
no member of the type declares.
"""

from __future__ import annotations

import collections.abc
import types
import typing
from typing import Any

import typing_extensions
from pydantic import BaseModel, TypeAdapter

__all__ = ["validate"]

_ADAPTERS: dict[Any, TypeAdapter[Any]] = {}


def validate(kind: Any, value: Any, *, allowed: frozenset[str] = frozenset()) -> None:
    """Raise when ``value`` is not a ``kind`` (an official type), or holds a key
    that the type does not declare (other than ``allowed``)."""
    adapter = _ADAPTERS.get(kind)
    if adapter is None:
        adapter = _ADAPTERS[kind] = TypeAdapter(kind)
    adapter.validate_python(value)
    problem = _unknown_key(kind, value, allowed, "$")
    if problem is not None:
        raise AssertionError(problem)


_MISMATCH = "is not the literal this member names"


def _unwrap(kind: Any) -> Any:
    while typing_extensions.get_origin(kind) in (
        typing_extensions.Required,
        typing_extensions.NotRequired,
        typing_extensions.Annotated,
        typing.Required,
        typing.NotRequired,
        typing.Annotated,
        typing_extensions.ReadOnly,
    ):
        kind = typing_extensions.get_args(kind)[0]
    return kind


def _unknown_key(kind: Any, value: Any, allowed: frozenset[str], where: str) -> str | None:
    """Where ``value`` has a key ``kind`` does not declare, or ``None``."""
    kind = _unwrap(kind)
    origin = typing_extensions.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        problems = [
            _unknown_key(member, value, allowed, where) for member in typing_extensions.get_args(kind)
        ]
        if any(problem is None for problem in problems):
            return None
        # The members whose literal keys (role, type) match say what is wrong.
        relevant = [problem for problem in problems if problem is not None and _MISMATCH not in problem]
        return (relevant or problems)[0]
    is_model = isinstance(kind, type) and issubclass(kind, BaseModel)
    if is_model or typing_extensions.is_typeddict(kind):
        if not isinstance(value, dict):
            return f"{where}: not an object {_MISMATCH}"
        if is_model:
            fields = {info.alias or name: info.annotation for name, info in kind.model_fields.items()}
        else:
            fields = typing_extensions.get_type_hints(kind, include_extras=True)
            missing = [key for key in kind.__required_keys__ if key not in value]
            if missing:
                return f"{where}: {kind.__name__} needs {missing[0]!r} {_MISMATCH}"
        for key, item in value.items():
            if key not in fields:
                if key in allowed:
                    continue
                return f"{where}: {key!r} is not a key of {kind.__name__}"
            problem = _unknown_key(fields[key], item, allowed, f"{where}.{key}")
            if problem is not None:
                return problem
        return None
    if origin is typing.Literal or origin is typing_extensions.Literal:
        return None if value in typing_extensions.get_args(kind) else f"{where}: {value!r} {_MISMATCH}"
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence) and isinstance(value, list):
        (item_kind,) = typing_extensions.get_args(kind) or (Any,)
        for index, item in enumerate(value):
            problem = _unknown_key(item_kind, item, allowed, f"{where}[{index}]")
            if problem is not None:
                return problem
        return None
    if origin in (list, collections.abc.Iterable, collections.abc.Sequence, dict, collections.abc.Mapping):
        return None if isinstance(value, origin) else f"{where}: not a {origin.__name__} {_MISMATCH}"
    if isinstance(kind, type) and kind is not object:
        fits = isinstance(value, kind) or (kind is float and isinstance(value, int))
        return None if fits else f"{where}: not a {kind.__name__} {_MISMATCH}"
    return None  # Any, object: pydantic checked it


def validate_chat_completions(messages: list[Any]) -> None:
    """Raise when the messages are not a chat-completions message list the
    API takes: each one of the official types, and each tool message after
    the assistant message that made its call (other tool messages between)."""
    from openai.types.chat import ChatCompletionMessageParam

    calls: set[str] = set()
    for index, message in enumerate(messages):
        validate(ChatCompletionMessageParam, message)
        if message["role"] == "tool":
            if message["tool_call_id"] not in calls:
                raise AssertionError(f"[{index}]: a tool message without its call just before it")
            continue
        calls = {call["id"] for call in message.get("tool_calls", [])}
