"""The conversation tree in rows: where a message attaches, which messages are
on the active path, and what goes with a message that is removed.

A chat's messages are numbered by ``position`` in the order they were added,
so a parent always has a smaller position than its children. The active path
is kept as ``on_path`` on its messages (reading it then reads only its rows),
and as ``active_leaf`` and ``path_length`` on the chat. The writes of
``.writes`` change them only through these functions, with the chat's row
locked.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Any, cast

from sqlalchemy import CursorResult, func, not_, select
from sqlalchemy import delete as delete_rows
from sqlalchemy import update as update_rows

from chatarchive._exceptions import InvalidArgument, quoted
from chatarchive._schema import tables

from . import attachments, searching
from .unit import Unit

__all__ = [
    "cut_path_below",
    "message_at",
    "move_path",
    "next_sibling_index",
    "path_positions",
    "remove",
    "subtree",
]


#: Positions named per statement.
_POSITIONS_PER_STATEMENT = 10_000


def message_at(unit: Unit, /, chat_id: str, uid: str, *, argument: str) -> Mapping[Any, Any]:
    """The row of the chat's message ``uid`` (``argument`` names it in the error).

    Raises:
        InvalidArgument: the chat has no message with this uid.
    """
    row = (
        unit.execute(
            select(tables.messages).where(tables.messages.c.chat_id == chat_id, tables.messages.c.uid == uid)
        )
        .mappings()
        .first()
    )
    if row is None:
        raise InvalidArgument(f"no message with uid {quoted(uid)}", argument=argument, chat_id=chat_id)
    return row


def next_sibling_index(unit: Unit, /, chat_id: str, parent: int | None, message_count: int) -> int:
    """The place among its siblings of a new child of ``parent`` (``None``: a
    new root). The last message has no children yet: no query then."""
    if (parent is None and message_count == 0) or (parent is not None and parent == message_count - 1):
        return 0
    same_parent = (
        tables.messages.c.parent_position.is_(None)
        if parent is None
        else (tables.messages.c.parent_position == parent)
        & (tables.messages.c.position > parent)  # children come later
    )
    return int(
        unit.execute(
            select(func.count()).where(tables.messages.c.chat_id == chat_id, same_parent)
        ).scalar_one()
    )


def path_positions(unit: Unit, /, chat_id: str, leaf: int | None) -> list[int]:
    """The positions from a root down to ``leaf``, in order."""
    return _path(_links(unit, chat_id), leaf)


def _links(unit: Unit, /, chat_id: str) -> dict[int, tuple[int | None, bool]]:
    """Each message's parent and whether it is on the active path, by
    position: one read of two small columns of the chat's rows, which is
    cheaper than walking up a long path an index lookup at a time."""
    rows = unit.execute(
        select(
            tables.messages.c.position, tables.messages.c.parent_position, tables.messages.c.on_path
        ).where(tables.messages.c.chat_id == chat_id)
    )
    return {position: (parent, bool(on_path)) for position, parent, on_path in rows}


def _path(links: Mapping[int, tuple[int | None, bool]], leaf: int | None) -> list[int]:
    path = []
    while leaf is not None:
        path.append(leaf)
        leaf = links[leaf][0]
    return path[::-1]


def cut_path_below(unit: Unit, /, chat_id: str, position: int | None) -> int:
    """End the active path at ``position``, a message on it (``None``: empty
    it): the messages of the path below it leave it, which are the path's
    messages after it. Returns how many left."""
    below = tables.messages.c.position > (-1 if position is None else position)
    statement = update_rows(tables.messages).where(
        tables.messages.c.chat_id == chat_id, tables.messages.c.on_path, below
    )
    result = cast(CursorResult[Any], unit.execute(statement.values(on_path=False)))
    return int(result.rowcount)


def move_path(unit: Unit, /, chat_id: str, leaf: int | None) -> int:
    """Make the messages from a root down to ``leaf`` (``None``: none) the
    active path, changing only the rows that leave or join it; returns the
    path's length. The caller sets the chat's ``active_leaf`` and ``path_length``."""
    links = _links(unit, chat_id)
    path = set(_path(links, leaf))
    changed = sorted(position for position, (_, on_path) in links.items() if on_path != (position in path))
    for piece in _pieces(changed):
        unit.execute(
            update_rows(tables.messages)
            .where(tables.messages.c.chat_id == chat_id, tables.messages.c.position.in_(piece))
            .values(on_path=not_(tables.messages.c.on_path))
        )
    return len(path)


def subtree(unit: Unit, /, chat_id: str, root: int) -> list[int]:
    """The positions of ``root`` and of every message below it. Children come
    after their parent, so one pass over the later messages finds them all."""
    rows = unit.execute(
        select(tables.messages.c.position, tables.messages.c.parent_position)
        .where(tables.messages.c.chat_id == chat_id, tables.messages.c.position >= root)
        .order_by(tables.messages.c.position)
    ).all()
    found = {root}
    for position, parent in rows:
        if parent in found:
            found.add(position)
    return sorted(found)


def remove(unit: Unit, /, chat_id: str, positions: Sequence[int], message_count: int) -> None:
    """Delete the messages at ``positions`` (ascending; each one's subtree
    among them) with their parts, tool calls, chunks and feedback, then close
    the gap they leave: the later messages move down, so positions stay
    gapless."""
    if not positions:
        return
    first = positions[0]
    last_ones = positions[-1] == message_count - 1 and len(positions) == message_count - first
    pieces = [None] if last_ones else list(_pieces(positions))
    for piece in pieces:

        def chosen(column: Any, piece: Sequence[int] | None = piece) -> Any:
            return column >= first if piece is None else column.in_(piece)

        uids = select(tables.messages.c.uid).where(
            tables.messages.c.chat_id == chat_id, chosen(tables.messages.c.position)
        )
        unit.execute(
            delete_rows(tables.feedback).where(
                tables.feedback.c.chat_id == chat_id, tables.feedback.c.message_uid.in_(uids)
            )
        )
        attachments.releasing(
            unit, tables.content_parts.c.chat_id == chat_id, chosen(tables.content_parts.c.message_position)
        )
        for table in (tables.message_chunks, tables.content_parts, tables.tool_calls):
            unit.execute(
                delete_rows(table).where(table.c.chat_id == chat_id, chosen(table.c.message_position))
            )
        unit.execute(
            delete_rows(tables.messages).where(
                tables.messages.c.chat_id == chat_id, chosen(tables.messages.c.position)
            )
        )
    if not last_ones:
        _close_gaps(unit, chat_id, after=first)
        # The messages that moved were written again, without their search terms.
        searching.changed(unit, chat_id, first)


def _close_gaps(unit: Unit, /, chat_id: str, *, after: int) -> None:
    """Number the messages after ``after`` (removed) on from it again, and
    their places among their siblings. The children tables name a message by
    position, and feedback by uid through a foreign key that deletes with it:
    the rows of the messages that move are taken out and put back."""
    moved = (
        unit.execute(
            select(tables.messages)
            .where(tables.messages.c.chat_id == chat_id, tables.messages.c.position > after)
            .order_by(tables.messages.c.position)
        )
        .mappings()
        .all()
    )
    new_position = {row["position"]: after + index for index, row in enumerate(moved)}
    if all(old == new for old, new in new_position.items()):
        return
    old = list(new_position)
    children = {
        table: unit.execute(
            select(table).where(table.c.chat_id == chat_id, table.c.message_position.in_(old))
        )
        .mappings()
        .all()
        for table in (tables.content_parts, tables.tool_calls, tables.message_chunks)
    }
    uids = [row["uid"] for row in moved]
    kept_feedback = (
        unit.execute(
            select(tables.feedback).where(
                tables.feedback.c.chat_id == chat_id, tables.feedback.c.message_uid.in_(uids)
            )
        )
        .mappings()
        .all()
    )
    unit.execute(
        delete_rows(tables.feedback).where(
            tables.feedback.c.chat_id == chat_id, tables.feedback.c.message_uid.in_(uids)
        )
    )
    for table in children:
        unit.execute(delete_rows(table).where(table.c.chat_id == chat_id, table.c.message_position.in_(old)))
    unit.execute(
        delete_rows(tables.messages).where(
            tables.messages.c.chat_id == chat_id, tables.messages.c.position > after
        )
    )

    # Siblings keep their order; those after a removed one move up a place.
    siblings_before = dict(
        unit.execute(
            select(tables.messages.c.parent_position, func.count())
            .where(tables.messages.c.chat_id == chat_id, tables.messages.c.position < after)
            .group_by(tables.messages.c.parent_position)
        ).all()
    )
    rows = []
    for row in moved:
        parent = row["parent_position"]
        parent = new_position.get(parent, parent)
        sibling_index = siblings_before.get(parent, 0)
        siblings_before[parent] = sibling_index + 1
        rows.append(
            {
                **row,
                "position": new_position[row["position"]],
                "parent_position": parent,
                "sibling_index": sibling_index,
            }
        )
    unit.insert(tables.messages, rows)
    for table, table_rows in children.items():
        unit.insert(
            table, [{**row, "message_position": new_position[row["message_position"]]} for row in table_rows]
        )
    unit.insert(tables.feedback, [dict(row) for row in kept_feedback])


def _pieces(positions: Sequence[int]) -> Iterator[Sequence[int]]:
    for start in range(0, len(positions), _POSITIONS_PER_STATEMENT):
        yield positions[start : start + _POSITIONS_PER_STATEMENT]
