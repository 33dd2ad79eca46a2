"""Checks of the JSON shapes that API responses and stream events come in:
each names the place of what is wrong (``chunks[3].choices[0].delta``)."""

from __future__ import annotations

from typing import Any

from chatarchive._exceptions import InvalidDocument

__all__ = ["array", "json_object", "plain", "text"]


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
