"""What PostgreSQL's errors mean for chatarchive: SQLSTATEs, and the constraint an error names (on a Citus
shard too).
"""

from __future__ import annotations

import re

from chatarchive._schema import metadata

# SQLSTATE classes and codes, see https://www.postgresql.org/docs/current/errcodes-appendix.html
_CONFLICT_STATES = {"40001", "40P01"}  # serialization failure, deadlock
_SCHEMA_STATES = {"42P01", "42703", "42883"}  # undefined table, column, function
_LOCK_NOT_AVAILABLE = "55P03"  # lock_timeout ran out (or NOWAIT)


def _summary(error: BaseException) -> str:
    text_ = str(error).strip()
    return text_.splitlines()[0] if text_ else type(error).__name__


def _clipped(value: str, limit: int = 300) -> str:
    """``value``, cut to ``limit`` characters: a key in an error message may be
    a chat id of any length."""
    return value if len(value) <= limit else f"{value[: limit - 1]}…"


#: The names of the archive's constraints and unique indexes.
_CONSTRAINTS = frozenset(
    str(name)
    for table in metadata.tables.values()
    for name in (*(item.name for item in table.constraints), *(item.name for item in table.indexes))
    if name is not None
)
_SHARD_SUFFIX = re.compile(r"_\d+$")


_CONSTRAINT_IN_MESSAGE = re.compile(r'constraint "([^"]+)"')


def _named_constraint(message: str | None) -> str | None:
    """The constraint an error's message names: a Citus worker's error
    reaches the coordinator's client without its constraint field."""
    found = _CONSTRAINT_IN_MESSAGE.search(message or "")
    return found.group(1) if found else None


def _relayed_violation(sqlstate: str, message: str | None) -> bool:
    """Whether an error is a constraint's violation that a Citus coordinator
    relays from a worker's COPY: as an internal error (XX000) with the
    worker's message, not with the violation's own SQLSTATE."""
    return sqlstate == "XX000" and " violates " in (message or "") and _named_constraint(message) is not None


def _unsharded(name: str | None) -> str | None:
    """A constraint's name as the archive's schema gives it: a distributed
    archive reports the shard's copy (``pk_chats_102011``)."""
    if name is None or name in _CONSTRAINTS:
        return name
    bare = _SHARD_SUFFIX.sub("", name)
    return bare if bare in _CONSTRAINTS else name
