"""An append in one statement.

The usual append, a turn added at the end of a chat whose active path ends
at its last message, is one data-modifying ``WITH`` where the database has
them (PostgreSQL): it locks the chat's row, checks what the caller expects of
it, gives it its new version and counts (and, with deferred indexing, its
mark), and inserts the messages, their parts and tool calls (and, with sync
indexing, their terms). An archive runs it on its own, without a transaction
around it, so that the whole append is one round trip to the server.

An append that may create the chat (``append(..., create=...)``, a
framework's first add to a session) has one more statement of the same kind
for a chat that is not there: it inserts the chat's row, as ``save`` would
write it, and the rows under it.

Whenever a check fails, the statement changes nothing. A chat that is not
there is said at once (``ChatNotFound``); anything else runs as the general
write (``writes._add``), which raises the precise error or does the rarer
case: a chat not at the expected version, an active leaf that is not the last
message, a uid the chat already has, or search settings other than the ones
the terms were computed for.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from sqlalchemy import (
    Integer,
    Text,
    and_,
    any_,
    bindparam,
    case,
    cast,
    exists,
    false,
    func,
    insert,
    literal_column,
    null,
    or_,
    select,
    true,
    union_all,
)
from sqlalchemy import update as update_rows
from sqlalchemy.dialects import postgresql
from sqlalchemy.dialects.postgresql import ARRAY
from sqlalchemy.exc import IntegrityError

from chatarchive._attachments import may_hold_payload
from chatarchive._backends import Backend
from chatarchive._backends.citus import DISTRIBUTION_SETTING
from chatarchive._document import ChatDocument, Message
from chatarchive._exceptions import ChatNotFound
from chatarchive._rows import document_to_rows, messages_to_rows
from chatarchive._schema import tables
from chatarchive._terms import SearchSettings

from . import searching
from .unit import Unit, now

__all__ = ["MOST_ROWS", "Guesses", "adding_values", "append_in_one_statement"]


#: The most rows (messages, parts, tool calls) one statement inserts: a
#: turn's. Larger appends run as the general write, whose statements are the
#: same whatever their size (this one's SQL is made for each shape).
MOST_ROWS = 24


@dataclass
class Guesses:
    """What an archive last saw of its database, for statements that check it
    before acting on it (never taken on trust)."""

    #: The archive's search settings, which an append computes terms for.
    search: SearchSettings = field(default_factory=SearchSettings)
    #: Whether the archive is distributed over Citus workers, where the one
    #: statement is slower than the general write: Citus carries a
    #: data-modifying ``WITH`` out through the coordinator.
    distributed: bool = False


def adding_values(added: Any, deferred: Any) -> dict[str, Any]:
    """The chat row's new counts when ``added`` messages come as a chain under
    its active leaf, and its mark for deferred indexing (when ``deferred``):
    the first new position, unless an earlier one is marked already."""
    first_new = tables.chats.c.message_count
    return {
        "message_count": tables.chats.c.message_count + added,
        "active_leaf": tables.chats.c.message_count + added - 1,
        "path_length": tables.chats.c.path_length + added,
        "search_from": case(
            (and_(deferred, func.coalesce(tables.chats.c.search_from, first_new + 1) > first_new), first_new),
            else_=tables.chats.c.search_from,
        ),
    }


def append_in_one_statement(
    unit: Unit,
    /,
    chat_id: str,
    parsed: Sequence[Message],
    given: Sequence[str],
    expected_version: int | None,
    guesses: Guesses,
    create: ChatDocument | None = None,
) -> list[Message] | None:
    """Append ``parsed`` (whose uids ``given`` came with them) to the end of
    the chat in one statement; ``None`` if it changed nothing (a check
    failed), for the general write to do the append.

    ``create``: the chat is not there; create it as the document ``create``
    (whose messages are ``parsed``, as a chain), as ``save`` would; ``None``
    if it is there by now, or anything else needs the general write.

    Raises:
        ChatNotFound: the chat is not there (and none is to be created).
    """
    guess = guesses.search
    if guess.indexing == "sync" and guess.embedder is not None:
        return None  # the vectors are the general write's
    if unit.keys is not None:
        return None  # a sealed chat's rows are sealed by the general write
    moment = now()
    chat_row = None
    if create is None:
        # The rows' user is the chat's, which the statement reads from the chat's row.
        rows = messages_to_rows(chat_id, parsed, user_id=None, first_position=0, now=moment)
    else:
        made = document_to_rows(create, now=moment, version=1)
        if made.tags or made.feedback:
            return None
        rows, chat_row = made, {**made.chat, "search_from": None if guess.indexing == "sync" else 0}
    if len(rows.messages) + len(rows.parts) + len(rows.tool_calls) > MOST_ROWS:
        return None
    if any(row["data"] and may_hold_payload(row["data"]) for row in rows.parts):
        return None  # an attachment, maybe: the general write knows whose
    terms = list(searching.entries(guess, rows.messages, rows.parts)) if guess.indexing == "sync" else []
    statement = _statement(
        _Shape(
            messages=len(rows.messages),
            parts=len(rows.parts),
            calls=len(rows.tool_calls),
            terms=len(terms),
            sync=guess.indexing == "sync",
            expected=expected_version is not None,
            given=bool(given) and chat_row is None,
            create=chat_row is not None,
        ),
        unit.backend,
    )
    params: dict[str, Any] = {
        "chat": chat_id,
        "moment": moment,
        "expected": expected_version,
        "given": list(given),
    }
    params |= {"language": guess.language, "cjk": guess.cjk}
    if chat_row is not None:
        params |= {f"chat_{name}": value for name, value in chat_row.items()}
    for prefix, table_rows in (("m", rows.messages), ("p", rows.parts), ("c", rows.tool_calls)):
        for index, row in enumerate(table_rows):
            params |= {f"{prefix}{index}_{name}": value for name, value in row.items()}
    for index, (_, position, message_terms, _user) in enumerate(terms):
        params |= {f"t{index}_position": position, f"t{index}_terms": unit.backend.terms_value(message_terms)}
    with unit.writing():
        try:
            version, distribution, there, *stored = unit.backend.execute_one(unit.executor, statement, params)
        except IntegrityError:  # a uid given at the same moment by another append: the general write says so
            return None
    guesses.distributed = distribution is not None
    if version is None:
        if not there and chat_row is None:
            # Said here rather than by the general write, whose transaction
            # would end in a rollback: psycopg forgets a connection's prepared
            # statements at every rollback, and a framework's first add to a
            # new session comes here.
            raise ChatNotFound(chat_id)
        guesses.search = searching.settings_of(stored)
        return None
    return [m if m.created_at else m.model_copy(update={"created_at": moment}) for m in parsed]


@dataclass(frozen=True)
class _Shape:
    """What the statement's SQL depends on: how many rows of each kind, and which checks."""

    messages: int
    parts: int
    calls: int
    terms: int
    sync: bool
    expected: bool
    given: bool
    #: The chat created by the statement, rather than bumped.
    create: bool = False


_RELATIVE = ("position", "parent_position")


@lru_cache(maxsize=64)
def _statement(shape: _Shape, backend: Backend) -> Any:
    indexing = func.coalesce(searching.stored_setting("indexing"), SearchSettings().indexing)
    if shape.sync:  # the terms were computed for these settings
        settings_hold = and_(
            indexing == "sync",
            func.coalesce(searching.stored_setting("language"), SearchSettings().language)
            == bindparam("language"),
            func.coalesce(searching.stored_setting("cjk"), SearchSettings().cjk) == bindparam("cjk"),
            searching.stored_setting("embedder").is_(None),
        )
    else:
        settings_hold = indexing != "sync"
    bumped = _created(settings_hold) if shape.create else _bumped(shape, settings_hold)

    def value(table: Any, prefix: str, index: int, column: Any) -> Any:
        given = bindparam(f"{prefix}{index}_{column.name}", type_=column.type)
        if table is tables.messages and column.name == "parent_position" and index == 0:
            return bumped.c.leaf  # the first message answers the active leaf (none: a first root)
        if column.name == "chat_user_id":
            return bumped.c.user_id  # the chat's user, as the chat row has it
        if column.name == "message_position" or (table is tables.messages and column.name in _RELATIVE):
            return bumped.c.first + given  # positions in the rows count from the chat's first new message
        return given

    def rows(table: Any, prefix: str, count: int) -> Any:
        """An INSERT of ``count`` rows of ``table``."""
        selects = [
            select(
                *(value(table, prefix, index, column).label(column.name) for column in table.columns)
            ).select_from(bumped)
            for index in range(count)
        ]
        return insert(table).from_select(
            list(table.columns), union_all(*selects) if count > 1 else selects[0]
        )

    written = [
        rows(table, prefix, count).cte(f"written_{prefix}")
        for table, prefix, count in (
            (tables.messages, "m", shape.messages),
            (tables.content_parts, "p", shape.parts),
            (tables.tool_calls, "c", shape.calls),
        )
        if count
    ]
    if shape.terms:
        written.append(backend.insert_terms(bumped.c.first, shape.terms, bumped.c.user_id).cte("written_t"))
    distribution = select(tables.archive_settings.c.value).where(
        tables.archive_settings.c.name == DISTRIBUTION_SETTING
    )
    version = select(bumped.c.version).scalar_subquery()
    return select(
        version,
        distribution.scalar_subquery(),
        # Read only when a check failed: whether the chat is there at all.
        case((version.is_(None), exists().where(tables.chats.c.chat_id == bindparam("chat"))), else_=true()),
        # Read only when a check failed: the settings the next append computes terms for.
        *(case((version.is_(None), searching.stored_setting(name))) for name in searching.SETTING_FIELDS),
    ).add_cte(*written)


def _bumped(shape: _Shape, settings_hold: Any) -> Any:
    """The chat's row locked, checked and given its new version and counts
    (no row: a check failed), with the first new position and the old leaf."""
    checks = [
        tables.chats.c.chat_id == bindparam("chat"),
        tables.chats.c.sealed.is_(false()),  # the general write says that it needs the keys
        or_(
            tables.chats.c.active_leaf == tables.chats.c.message_count - 1, tables.chats.c.message_count == 0
        ),
        settings_hold,
    ]
    if shape.expected:
        checks.append(tables.chats.c.version == bindparam("expected", type_=Integer))
    if shape.given:
        checks.append(
            ~exists().where(
                tables.messages.c.chat_id == bindparam("chat"),
                tables.messages.c.uid == any_(bindparam("given", type_=ARRAY(Text))),
            )
        )
    old = (
        select(
            tables.chats.c.chat_id,
            tables.chats.c.message_count.label("first"),
            tables.chats.c.active_leaf.label("leaf"),
        )
        .where(*checks)
        .with_for_update()
        .cte("old")
    )
    return (
        update_rows(tables.chats)
        # The chat's id named again: Citus then sends the statement to the chat's shard.
        .where(tables.chats.c.chat_id == old.c.chat_id, tables.chats.c.chat_id == bindparam("chat"))
        .values(
            version=tables.chats.c.version + 1,
            updated_at=bindparam("moment"),
            # The check in "old" holds: marked exactly when the terms were not computed.
            **adding_values(shape.messages, false() if shape.sync else true()),
        )
        .returning(tables.chats.c.version, tables.chats.c.user_id, old.c.first, old.c.leaf)
        .cte("bumped")
    )


def _created(settings_hold: Any) -> Any:
    """The chat's row inserted from the parameters ``chat_<column>`` (no
    row: it is there already, or the settings do not hold), with the first
    position (0) and the leaf the first message answers (none)."""
    values = select(
        *(
            bindparam(f"chat_{column.name}", type_=column.type).label(column.name)
            for column in tables.chats.columns
        )
    ).where(settings_hold)
    return (
        postgresql.insert(tables.chats)
        .from_select(list(tables.chats.columns), values)
        .on_conflict_do_nothing(index_elements=[tables.chats.c.chat_id])
        .returning(
            tables.chats.c.version,
            tables.chats.c.user_id,
            literal_column("0", Integer).label("first"),
            cast(null(), Integer).label("leaf"),
        )
        .cte("bumped")
    )
