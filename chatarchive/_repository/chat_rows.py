"""The rows of one chat as writes handle them: locking and bumping the chat's
row, inserting, rewriting and deleting its messages and child rows.

The writes (``.writes``), ``save_many`` (``.bulk``) and streaming
(``.streaming``) share these; none of them is an operation of its own.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

from sqlalchemy import Integer, and_, bindparam, func, select
from sqlalchemy import delete as delete_rows
from sqlalchemy import update as update_rows

from chatarchive._arguments import require_text, require_version
from chatarchive._document import Message
from chatarchive._exceptions import ChatNotFound, ConflictError
from chatarchive._rows import MessageRows, message_from_rows, messages_to_rows
from chatarchive._schema import DOCUMENT_ORDER, tables

from . import attachments, sealing, searching
from .appends import adding_values
from .unit import Unit

__all__ = [
    "CREATE_ATTEMPTS",
    "bump",
    "delete_children",
    "insert_messages",
    "lock",
    "lock_chats",
    "lock_in_order",
    "lock_row",
    "message_data",
    "refuse_to_lose_branches",
    "require_chat",
    "rewrite_message",
    "stored_message",
    "touch",
    "written_again",
]


#: How often a write looks for a chat that another writer keeps creating (and
#: deleting) between its lookup and its insert before it gives up.
CREATE_ATTEMPTS = 3


# Children first, so that deleting never trips a foreign key.
_CHILD_TABLES = (
    tables.feedback,
    tables.message_chunks,
    tables.content_parts,
    tables.tool_calls,
    tables.messages,
    tables.chat_tags,
)


def refuse_to_lose_branches(chat_id: str, stored: Mapping[Any, Any]) -> None:
    """Refuse to replace the ``stored`` chat (its ``message_count`` and
    ``path_length``), if it has branches, with a linear document: the
    document ``get`` returns is the active path alone, and saving it back
    would delete the other branches without anyone asking.

    Raises:
        ConflictError: the stored chat has messages off its active path.
    """
    off_path = stored["message_count"] - stored["path_length"]
    if off_path:
        raise ConflictError(
            f"chat {chat_id!r} has {off_path} messages off its active path, which saving this linear "
            "document would delete; save the whole tree (get_tree(chat_id).document), "
            "or delete the chat first"
        )


def insert_messages(unit: Unit, /, rows: MessageRows) -> None:
    attachments.store(unit, rows.parts)
    unit.insert(tables.messages, rows.messages)
    unit.insert(tables.content_parts, rows.parts)
    unit.insert(tables.tool_calls, rows.tool_calls)


#: A graph thread's checkpoints, which hold messages of its chat (children first).
_CHECKPOINT_TABLES = (tables.checkpoint_writes, tables.checkpoint_blobs, tables.checkpoints)


def delete_children(unit: Unit, /, chat_filter: Any, *, replacing: bool = False) -> None:
    """Delete the rows of every chat ``chat_filter`` selects, but the chats'
    own. ``replacing``: the chats' messages only, for new ones; checkpoints
    stay, and one holding a message refuses its deletion."""
    selected = select(tables.chats.c.chat_id).where(chat_filter).scalar_subquery()
    attachments.releasing(unit, tables.content_parts.c.chat_id.in_(selected))
    for table in _CHILD_TABLES if replacing else (*_CHECKPOINT_TABLES, *_CHILD_TABLES):
        unit.execute(delete_rows(table).where(table.c.chat_id.in_(selected)))


def require_chat(unit: Unit, /, chat_id: str) -> None:
    """Raise ``ChatNotFound`` unless the unit sees the chat."""
    require_text(chat_id, "chat_id")
    with unit.reading():
        found = unit.execute(
            unit.scoped(select(tables.chats.c.chat_id).where(tables.chats.c.chat_id == chat_id))
        ).first()
    if found is None:
        raise ChatNotFound(chat_id)


def stored_message(unit: Unit, /, chat_id: str, uid: str) -> Mapping[Any, Any] | None:
    """The row of the chat's message ``uid`` (``None``: there is none)."""
    query = select(tables.messages).where(tables.messages.c.chat_id == chat_id, tables.messages.c.uid == uid)
    return unit.execute(query).mappings().first()


def message_data(unit: Unit, /, chat_id: str, row: Mapping[Any, Any]) -> dict[str, Any]:
    """The canonical dict of a stored message, from its row and its part and call rows."""
    position = row["position"]

    def rows_of(table: Any) -> list[Mapping[Any, Any]]:
        query = select(table).where(table.c.chat_id == chat_id, table.c.message_position == position)
        return list(unit.execute(query.order_by(*DOCUMENT_ORDER[table])).mappings())

    parts = rows_of(tables.content_parts)
    attachments.restore(unit, parts, chat_id=chat_id)
    parts = sealing.open_message_rows(unit, chat_id, "content_parts", parts)
    calls = sealing.open_message_rows(unit, chat_id, "tool_calls", rows_of(tables.tool_calls))
    (opened,) = sealing.open_message_rows(unit, chat_id, "messages", [row])
    return message_from_rows(opened, parts, calls)


def rewrite_message(
    unit: Unit, /, stored: Mapping[Any, Any], message: Message, moment: datetime, *, children: bool = True
) -> None:
    """Write a stored message (``stored``: its row) anew where it is in the
    tree: its row, and (``children``) its parts and tool calls."""
    chat_id, position = stored["chat_id"], stored["position"]
    rows = messages_to_rows(
        chat_id, [message], user_id=stored["chat_user_id"], first_position=position, now=moment
    )
    sealing.seal_new(unit, rows)
    if children:
        attachments.releasing(
            unit,
            tables.content_parts.c.chat_id == chat_id,
            tables.content_parts.c.message_position == position,
        )
        for table in (tables.content_parts, tables.tool_calls):
            unit.execute(
                delete_rows(table).where(table.c.chat_id == chat_id, table.c.message_position == position)
            )
    in_the_tree = ("parent_position", "sibling_index", "on_path")  # where it is does not change
    unit.execute(
        update_rows(tables.messages)
        .where(tables.messages.c.chat_id == chat_id, tables.messages.c.position == position)
        .values(
            {
                name: value
                for name, value in written_again(rows.messages[0]).items()
                if name not in in_the_tree
            }
        )
    )
    if children:
        attachments.store(unit, rows.parts)
        unit.insert(tables.content_parts, rows.parts)
        unit.insert(tables.tool_calls, rows.tool_calls)


def lock_chats(unit: Unit, /, where: Any, *columns: Any) -> list[Mapping[Any, Any]]:
    """Lock the chats ``where`` selects for this transaction; returns their
    ``chat_id`` and ``columns``, as locked. An UPDATE that changes nothing
    where the database has ``UPDATE ... RETURNING``: a distributed archive
    locks rows of several shards only so (it refuses ``SELECT ... FOR
    UPDATE`` across shards); ``SELECT ... FOR UPDATE`` elsewhere."""
    returned = (tables.chats.c.chat_id, *columns)
    if unit.connection.dialect.update_returning:
        statement: Any = (
            update_rows(tables.chats).where(where).values(version=tables.chats.c.version).returning(*returned)
        )
    else:
        statement = select(*returned).where(where).with_for_update()
    return list(unit.execute(statement).mappings())


def lock_in_order(unit: Unit, /, chat_ids: Sequence[str], where: Any) -> list[str]:
    """Lock the chats ``chat_ids`` that ``where`` still selects once locked,
    in ascending id order; returns their ids. One statement where the
    database locks many rows in one; on a distributed archive one chat at a
    time (each lock one shard's)."""
    if unit.backend.locks_rows_in_any_statement(unit.connection):
        ordered = (
            select(tables.chats.c.chat_id)
            .where(tables.chats.c.chat_id.in_(chat_ids), where)
            .order_by(tables.chats.c.chat_id)
            .with_for_update()
        )
        return list(unit.execute(ordered).scalars())
    return [
        chat_id
        for chat_id in sorted(chat_ids)
        if lock_chats(unit, and_(tables.chats.c.chat_id == chat_id, where))
    ]


def written_again(row: Mapping[str, Any]) -> dict[str, Any]:
    """A row's values for an UPDATE of the row it replaces: all but its
    ``chat_id``, which stays (a distributed archive refuses any UPDATE that
    sets the column it is distributed by, even to the same value)."""
    return {name: value for name, value in row.items() if name != "chat_id"}


def lock_row(unit: Unit, /, chat_id: str) -> Mapping[Any, Any] | None:
    """Lock the chat's row for this transaction and return its bookkeeping."""
    require_text(chat_id, "chat_id")
    return (
        unit.execute(
            select(tables.chats.c.version, tables.chats.c.message_count, tables.chats.c.user_id)
            .add_columns(
                tables.chats.c.sealed,
                tables.chats.c.extra,
                tables.chats.c.ordered_json,
                tables.chats.c.active_leaf,
                tables.chats.c.path_length,
            )
            .where(tables.chats.c.chat_id == chat_id)
            .with_for_update()
        )
        .mappings()
        .first()
    )


def lock(unit: Unit, /, chat_id: str, expected_version: int | None = None) -> Mapping[Any, Any]:
    """Lock the chat's row for a write, if the unit may see it and it is at
    ``expected_version`` (when given); returns its bookkeeping."""
    require_version(expected_version)
    return _checked(unit, chat_id, lock_row(unit, chat_id), expected_version)


def bump(
    unit: Unit, /, chat_id: str, expected_version: int | None, moment: datetime, added: int = 0
) -> Mapping[Any, Any]:
    """Lock the chat's row for a write and give it its new version; with
    ``added`` messages to come, as a chain under the active leaf, also their
    count and the last of them as the active leaf (a caller that puts them
    elsewhere corrects ``path_length``). One statement where the database has
    ``UPDATE ... RETURNING``; an error raised later in the write rolls it
    back with the rest. Returns the row's ``version``, ``message_count``,
    ``user_id`` and ``active_leaf`` as they were before."""
    if not unit.connection.dialect.update_returning or (added and not unit.backend.returns_joined_columns):
        current = lock(unit, chat_id, expected_version)
        values = {}
        if added:
            values = {
                "message_count": current["message_count"] + added,
                "active_leaf": current["message_count"] + added - 1,
                "path_length": current["path_length"] + added,
            }
        touch(unit, chat_id, current, moment, **values)
        return current
    require_version(expected_version)
    require_text(chat_id, "chat_id")
    if added:
        statement, params = _BUMP_ADDING, {"bumped_chat": chat_id, "moment": moment, "added": added}
    else:
        statement, params = _BUMP, {"bumped_chat": chat_id, "moment": moment}
    bumped = unit.execute(statement, params).first()
    before = None
    if bumped is not None:
        version, message_count, user_id, sealed, active_leaf, *settings = bumped
        before = {
            "version": version - 1,
            "message_count": message_count - added,
            "user_id": user_id,
            "sealed": sealed,
            "active_leaf": active_leaf,
        }
        if added:  # the statement read the search settings, and marked the chat if they defer indexing
            searching.known_settings(unit, settings)
            before["search_marked"] = searching.settings(unit).indexing != "sync"
    return _checked(unit, chat_id, before, expected_version)


def _bump_statements() -> tuple[Any, Any]:
    """``bump``'s two statements, built once (their SQL is cached with them):
    a new version alone, and a new version with ``added`` messages, whose
    RETURNING gives the active leaf before them, from the row as locked
    (RETURNING alone gives the row as written), and the archive's search
    settings; where they defer indexing, it marks the new messages for it
    (``searching``), so that an append is no more statements than with no
    search index at all."""
    new_version: dict[str, Any] = {"version": tables.chats.c.version + 1, "updated_at": bindparam("moment")}
    returned: list[Any] = [
        tables.chats.c.version,
        tables.chats.c.message_count,
        tables.chats.c.user_id,
        tables.chats.c.sealed,
    ]
    alone = (
        update_rows(tables.chats)
        .where(tables.chats.c.chat_id == bindparam("bumped_chat"))
        .values(new_version)
        .returning(*returned, tables.chats.c.active_leaf)
    )
    old = (
        select(tables.chats.c.chat_id, tables.chats.c.active_leaf.label("previous_leaf"))
        .where(tables.chats.c.chat_id == bindparam("bumped_chat"))
        .with_for_update()
        .cte("old")
    )
    added = bindparam("added", type_=Integer)
    deferred = func.coalesce(searching.stored_setting("indexing"), "sync") != "sync"
    adding = (
        update_rows(tables.chats)
        # The chat's id named again: Citus then sends the whole statement to the chat's shard.
        .where(tables.chats.c.chat_id == old.c.chat_id, tables.chats.c.chat_id == bindparam("bumped_chat"))
        .values(**new_version, **adding_values(added, deferred))
        .returning(
            *returned,
            old.c.previous_leaf,
            *(searching.stored_setting(field) for field in searching.SETTING_FIELDS),
        )
    )
    return alone, adding


_BUMP, _BUMP_ADDING = _bump_statements()


def _checked(
    unit: Unit, /, chat_id: str, row: Mapping[Any, Any] | None, expected_version: int | None
) -> Mapping[Any, Any]:
    """The locked chat's row, if the unit may see it and it is at the expected version."""
    if row is None or not unit.visible(row):
        raise ChatNotFound(chat_id)
    sealing.known(unit, chat_id, row["sealed"], row["user_id"])
    if expected_version is not None and row["version"] != expected_version:
        raise ConflictError(f"chat {chat_id!r} is at version {row['version']}, not {expected_version}")
    return row


def touch(unit: Unit, /, chat_id: str, current: Mapping[Any, Any], moment: datetime, **values: Any) -> int:
    """Give the locked chat its next version (and ``values``); returns it."""
    version = int(current["version"]) + 1
    unit.execute(
        update_rows(tables.chats)
        .where(tables.chats.c.chat_id == chat_id)
        .values(version=version, updated_at=moment, **values)
    )
    return version
