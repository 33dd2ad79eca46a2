"""Column types that keep every value exact on both databases.

PostgreSQL refuses the NUL character in ``text`` and in ``jsonb``, though JSON
allows it. On PostgreSQL, text and JSON values are therefore stored with a
reversible escape: U+E000 (a private-use character) becomes U+E000 U+E001 and
NUL becomes U+E000 U+E002. Values without either character (nearly all) are
stored as they are. SQLite stores NUL natively and needs no escape.

``jsonb`` also keeps numbers as ``numeric`` and prints them without an
exponent, so ``1e300`` would come back as the integer 10**300. Floats written
with an exponent are therefore stored in positional notation with a fraction
(``1000...0.0``), which reads back as the same float. What ``jsonb`` cannot
keep at all (an object's key order, negative zero) ``jsonb_keeps`` finds,
for the rows' ``ordered_json`` column (see ``_rows.ordered_json``).

Timestamps are stored in UTC and always read back timezone-aware.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from datetime import UTC, datetime
from decimal import Decimal
from math import copysign
from typing import Any, ClassVar, Protocol

from sqlalchemy import JSON, DateTime, LargeBinary, Text
from sqlalchemy.engine import Dialect
from sqlalchemy.types import TypeDecorator, TypeEngine

from chatarchive._exceptions import InvalidArgument

__all__ = [
    "ArchiveText",
    "ColumnRules",
    "JsonObject",
    "OrderedJson",
    "UTCDateTime",
    "Vector",
    "dumps_json",
    "escape_json_text",
    "escape_text",
    "jsonb_keeps",
    "postgres_json_text",
    "register_column_rules",
    "unescape_json_text",
    "unescape_text",
    "unescape_value",
]

_ESC = "\ue000"
_ESC_ESC = "\ue000\ue001"
_ESC_NUL = "\ue000\ue002"
# A JSON \u0000 escape that is not itself an escaped backslash followed by "u0000".
_JSON_NUL = re.compile(r"(?<!\\)((?:\\\\)*)\\u0000")


def escape_text(value: str) -> str:
    if "\x00" in value or _ESC in value:
        return value.replace(_ESC, _ESC_ESC).replace("\x00", _ESC_NUL)
    return value


def unescape_text(value: str) -> str:
    if _ESC in value:
        return value.replace(_ESC_NUL, "\x00").replace(_ESC_ESC, _ESC)
    return value


def dumps_json(value: Any) -> str:
    """Compact JSON text, non-ASCII kept as is."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def escape_json_text(text: str) -> str:
    """Escape serialized JSON for PostgreSQL ``jsonb`` (see the module docstring)."""
    if _ESC in text:
        text = text.replace(_ESC, _ESC_ESC)
    if "\\u0000" in text:
        text = _JSON_NUL.sub("\\1" + _ESC_NUL, text)
    return text


# A JSON string (left alone) or a number with an exponent (rewritten).
_JSON_EXPONENT_NUMBER = re.compile(r'"(?:[^"\\]|\\.)*"|-?\d+(?:\.\d+)?[eE][+-]?\d+')
_MAYBE_EXPONENT = re.compile(r"\d[eE][+-]?\d")


def _positional(match: re.Match[str]) -> str:
    token = match.group()
    if token.startswith('"'):
        return token
    text = format(Decimal(token), "f")
    return text if "." in text else text + ".0"


def postgres_json_text(value: Any) -> str:
    """JSON text for a ``jsonb`` value, escaped and with floats kept floats."""
    text = escape_json_text(dumps_json(value))
    if _MAYBE_EXPONENT.search(text):
        text = _JSON_EXPONENT_NUMBER.sub(_positional, text)
    return text


def unescape_json_text(text: str) -> str:
    """Undo ``escape_json_text`` on JSON text read back from PostgreSQL."""
    if _ESC in text:
        return text.replace(_ESC_NUL, "\\u0000").replace(_ESC_ESC, _ESC)
    return text


def unescape_value(value: Any) -> Any:
    """Undo ``escape_text`` on every string (keys included) of a JSON value."""
    if isinstance(value, str):
        return unescape_text(value)
    if isinstance(value, dict):
        return {unescape_text(key): unescape_value(item) for key, item in value.items()}
    if isinstance(value, list):
        return [unescape_value(item) for item in value]
    return value


class ColumnRules(Protocol):
    """How a database stores the archive's values: what its backend tells
    these types (each backend registers itself, ``register_column_rules``)."""

    def text_processors(self) -> tuple[Callable[[Any], Any] | None, Callable[[Any], Any] | None]:
        """The text values' bind and result processors."""

    def json_type(self, dialect: Dialect, *, binary: bool) -> TypeEngine[Any]:
        """The column type of a JSON value."""

    def json_processors(
        self, *, binary: bool
    ) -> tuple[Callable[[Any], Any], Callable[[Any], Any]] | None: ...

    def stored_time(self, value: datetime) -> datetime:
        """A UTC time as the database stores it."""

    def vector_type(self, dialect: Dialect) -> TypeEngine[Any]:
        """The column type of an embedding vector."""

    def vector_processors(self) -> tuple[Callable[[Any], Any] | None, Callable[[Any], Any] | None]:
        """An embedding vector's bind and result processors (from and to a list of floats)."""


#: The rules of each database, by SQLAlchemy's name for it: filled in by the
#: backends, which use these types (so that this module does not import them).
_RULES: dict[str, ColumnRules] = {}


def register_column_rules(dialect_name: str, rules: ColumnRules) -> None:
    """Make ``rules`` those of the database SQLAlchemy calls ``dialect_name``."""
    _RULES[dialect_name] = rules


def _backend(dialect: Dialect) -> ColumnRules:
    rules = _RULES.get(dialect.name)
    if rules is None:
        raise InvalidArgument(f"chatarchive keeps no archive in {dialect.name!r}", argument="url")
    return rules


class ArchiveText(TypeDecorator[str]):
    """``text``, stored NUL-safe where the database needs it (PostgreSQL)."""

    impl = Text
    cache_ok = True

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        bind: Callable[[Any], Any] | None = _backend(dialect).text_processors()[0]
        return bind

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        result: Callable[[Any], Any] | None = _backend(dialect).text_processors()[1]
        return result


class JsonObject(TypeDecorator[Any]):
    """JSON (``jsonb`` on PostgreSQL); Python ``None`` is SQL NULL."""

    impl = JSON
    cache_ok = True
    #: The database's binary JSON (``jsonb``) where it has one, else JSON text as given.
    binary: ClassVar[bool] = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        kind: TypeEngine[Any] = _backend(dialect).json_type(dialect, binary=self.binary)
        return kind

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        processors = _backend(dialect).json_processors(binary=self.binary)
        return super().bind_processor(dialect) if processors is None else processors[0]

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        processors = _backend(dialect).json_processors(binary=self.binary)
        return super().result_processor(dialect, coltype) if processors is None else processors[1]


class OrderedJson(JsonObject):
    """JSON kept as text (``json``, not ``jsonb``, on PostgreSQL), so that its
    objects keep their keys in the order given."""

    cache_ok = True
    binary = False


def jsonb_keeps(value: Any, *, ignoring: frozenset[str] = frozenset()) -> bool:
    """Whether ``jsonb`` gives ``value`` back as given. It orders an object's
    keys by their length in bytes, then bytewise (keys as stored, escaped), and
    has no negative zero (``-0.0`` comes back as ``0.0``). The order of the keys
    ``ignoring`` at the top level does not count."""
    if isinstance(value, dict):
        previous: tuple[int, bytes] | None = None
        for key in value:
            if key not in ignoring:
                stored = (escape_text(key) if _ESC in key or "\x00" in key else key).encode("utf-8")
                current = (len(stored), stored)
                if previous is not None and current < previous:
                    return False
                previous = current
        items: Iterable[Any] = value.values()
    elif isinstance(value, list):
        items = value
    else:
        items = (value,)
    for item in items:
        if isinstance(item, (dict, list)):
            if not jsonb_keeps(item):
                return False
        # Only numbers equal 0.0 among JSON values; copysign takes every one of them.
        elif item == 0.0 and copysign(1.0, item) < 0.0:
            return False
    return True


class UTCDateTime(TypeDecorator[datetime]):
    """``timestamptz`` on PostgreSQL; on SQLite, UTC text. Always aware on the way out."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        stored: datetime = _backend(dialect).stored_time(value.astimezone(UTC))
        return stored

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return value.astimezone(UTC)


class Vector(TypeDecorator[list[float]]):
    """An embedding vector, a list of floats: ``real[]`` on PostgreSQL (which
    pgvector casts to its ``vector``), 32-bit floats in a BLOB on SQLite."""

    impl = LargeBinary
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        kind: TypeEngine[Any] = _backend(dialect).vector_type(dialect)
        return kind

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any] | None:
        bind: Callable[[Any], Any] | None = _backend(dialect).vector_processors()[0]
        return bind

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any] | None:
        result: Callable[[Any], Any] | None = _backend(dialect).vector_processors()[1]
        return result
