"""Sealed chats: their rows' text encrypted with their user's key on the
way in, and opened on the way out (see ``chatarchive.encryption``).

A chat is sealed when an archive with ``UserKeys`` writes it whole and it
has a user; ``chats.sealed`` says so, and every later write of its messages
seals them too (without the keys, it is refused). Each sealed value is bound
to its chat and column (the AES-GCM associated data), not to its position,
so that rows moved within the chat stay readable.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidTag
from sqlalchemy import bindparam, select, text
from sqlalchemy import delete as delete_rows
from sqlalchemy import update as update_rows

from chatarchive._exceptions import InvalidArgument, SealedChat, UserScopeError
from chatarchive._schema import tables
from chatarchive._types import UTCDateTime
from chatarchive.encryption import open_text, seal_text

from .unit import Unit, now

if TYPE_CHECKING:
    from chatarchive._rows import ChatRows, MessageRows

__all__ = [
    "delete_key",
    "is_sealed",
    "key_of_chat",
    "known",
    "open_rows",
    "rewrap",
    "seal_chat",
    "seal_new",
    "sealed_value",
]

Row = MutableMapping[str, Any]

_NEW_KEY = text(
    "INSERT INTO user_keys (user_id, wrapped, created_at) VALUES (:user_id, :wrapped, :created_at) "
    "ON CONFLICT (user_id) DO NOTHING"
).bindparams(bindparam("created_at", type_=UTCDateTime()))

#: The columns sealed in each table, and whether each holds JSON.
SEALED_COLUMNS: dict[str, tuple[tuple[str, bool], ...]] = {
    "messages": (("text", False),),
    "content_parts": (("text", False), ("data", True), ("ordered_json", True)),
    "tool_calls": (("arguments", False),),
    "message_chunks": (("text", False),),
}


def known(unit: Unit, /, chat_id: str, sealed: bool, user_id: str | None) -> None:
    """Tell the unit whether a chat it has read or locked is sealed, and whose it is."""
    unit.seals[chat_id] = (bool(sealed), user_id)


def is_sealed(unit: Unit, /, chat_id: str) -> bool:
    """Whether the chat is sealed (as the unit knows it, else as stored)."""
    if chat_id not in unit.seals:
        row = unit.execute(
            select(tables.chats.c.sealed, tables.chats.c.user_id).where(tables.chats.c.chat_id == chat_id)
        ).first()
        known(unit, chat_id, bool(row and row[0]), row[1] if row else None)
    return unit.seals[chat_id][0]


def _key(unit: Unit, /, chat_id: str, user_id: str | None, *, create: bool) -> bytes:
    """The data key that seals the chat of ``user_id``, made when ``create`` and the user has none."""
    keys = unit.keys
    if keys is None or user_id is None:
        raise SealedChat(
            f"chat {chat_id!r} is sealed with its user's key: reading or writing it needs the archive's keys "
            "(ChatArchive(..., keys=UserKeys(...)); on the command line, $CHATARCHIVE_MASTER_KEY)",
            chat_id=chat_id,
            user_id=user_id,
        )
    if user_id not in unit.user_keys:
        table = tables.user_keys
        wrapped = unit.execute(select(table.c.wrapped).where(table.c.user_id == user_id)).scalar()
        if wrapped is None and create:
            _, wrapped = keys.new_key(user_id)
            # Another writer may make the user's key at the same moment: the first one stays.
            unit.execute(_NEW_KEY, {"user_id": user_id, "wrapped": wrapped, "created_at": now()})
            stored = unit.execute(select(table.c.wrapped).where(table.c.user_id == user_id)).scalar()
            if stored is not None:
                wrapped = stored
        unit.user_keys[user_id] = None if wrapped is None else keys.key_of(user_id, bytes(wrapped))
    found = unit.user_keys[user_id]
    if found is None:
        raise SealedChat(
            f"chat {chat_id!r} is sealed with the key of user {user_id!r}, which is deleted: "
            "its text cannot be read",
            chat_id=chat_id,
            user_id=user_id,
        )
    return found


def _aad(chat_id: str, table: str, column: str) -> str:
    return f"{chat_id}\x00{table}.{column}"


def sealed_value(key: bytes, chat_id: str, table: str, column: str, value: Any, as_json: bool) -> Any:
    """``value`` of a sealed chat's column as it is stored."""
    if value is None:
        return None
    if not as_json:
        return seal_text(key, value, _aad(chat_id, table, column))
    # A JSON column holds an object (a top-level string reads back ambiguously through some drivers).
    return {"sealed": seal_text(key, json.dumps(value, ensure_ascii=False), _aad(chat_id, table, column))}


def _seal_rows(key: bytes, chat_id: str, table: str, rows: Iterable[Row]) -> None:
    for row in rows:
        for column, as_json in SEALED_COLUMNS[table]:
            row[column] = sealed_value(key, chat_id, table, column, row[column], as_json)


def seal_chat(unit: Unit, /, rows: ChatRows) -> bool:
    """Before a chat written whole is inserted: seal its rows when the unit
    has keys and the chat a user (and mark it sealed, never to be indexed);
    returns whether it did."""
    chat = rows.chat
    chat_id, user_id = chat["chat_id"], chat["user_id"]
    sealed = unit.keys is not None and user_id is not None
    known(unit, chat_id, sealed, user_id)
    if not sealed:
        return False
    key = _key(unit, chat_id, user_id, create=True)
    chat["sealed"] = True
    chat["search_from"] = None  # nothing of it is searchable
    _seal_message_rows(key, chat_id, rows)
    return True


def _seal_message_rows(key: bytes, chat_id: str, rows: MessageRows) -> None:
    _seal_rows(key, chat_id, "messages", rows.messages)
    _seal_rows(key, chat_id, "content_parts", rows.parts)
    _seal_rows(key, chat_id, "tool_calls", rows.tool_calls)


def seal_new(unit: Unit, /, rows: MessageRows) -> bool:
    """Before new or rewritten messages' rows are written to a stored chat:
    seal them if the chat is sealed; returns whether it is."""
    if not rows.messages:
        return False
    chat_id = rows.messages[0]["chat_id"]
    if not is_sealed(unit, chat_id):
        return False
    _seal_message_rows(_key(unit, chat_id, unit.seals[chat_id][1], create=False), chat_id, rows)
    return True


def key_of_chat(unit: Unit, /, chat_id: str) -> bytes:
    """The key that seals the chat (known sealed).

    Raises:
        SealedChat: the unit has no keys, or the chat's user has none left.
    """
    return _key(unit, chat_id, unit.seals[chat_id][1], create=False)


def seal_chunk(unit: Unit, /, chat_id: str, chunk: str) -> str:
    """A streamed chunk of the chat's, as stored (sealed if the chat is)."""
    if not is_sealed(unit, chat_id):
        return chunk
    key = _key(unit, chat_id, unit.seals[chat_id][1], create=False)
    return str(sealed_value(key, chat_id, "message_chunks", "text", chunk, False))


def open_rows(
    unit: Unit, /, chat: Mapping[str, Any], children: Mapping[Any, list[Mapping[str, Any]]]
) -> None:
    """Open the rows of a chat read (``children``: its child rows by table,
    replaced in their lists) if the chat is sealed."""
    chat_id = chat["chat_id"]
    known(unit, chat_id, chat.get("sealed", False), chat["user_id"])
    if not chat.get("sealed"):
        return
    key = _key(unit, chat_id, chat["user_id"], create=False)
    for table, rows in children.items():
        if table.name in SEALED_COLUMNS:
            rows[:] = [opened(key, chat_id, table.name, row) for row in rows]


def opened(key: bytes, chat_id: str, table: str, row: Mapping[Any, Any]) -> dict[Any, Any]:
    """A sealed chat's row of ``table`` with its sealed columns opened."""
    plain = dict(row)
    for column, as_json in SEALED_COLUMNS[table]:
        value = plain.get(column)
        if value is None:
            continue
        try:
            text = open_text(key, value["sealed"] if as_json else value, _aad(chat_id, table, column))
        except (InvalidTag, ValueError, TypeError, KeyError):
            raise SealedChat(
                f"chat {chat_id!r}: a value of {table}.{column} is not sealed with its user's key",
                chat_id=chat_id,
            ) from None
        plain[column] = json.loads(text) if as_json else text
    return plain


def open_message_rows(
    unit: Unit, /, chat_id: str, table: str, rows: Sequence[Mapping[Any, Any]]
) -> list[Mapping[Any, Any]]:
    """Rows of ``table`` of one chat, opened if the chat is sealed."""
    if not rows or not is_sealed(unit, chat_id):
        return list(rows)
    key = _key(unit, chat_id, unit.seals[chat_id][1], create=False)
    return [opened(key, chat_id, table, row) for row in rows]


def delete_key(unit: Unit, /, user_id: str) -> bool:
    """Delete the user's data key: their sealed chats can never be read again."""
    table = tables.user_keys
    deleted = unit.execute(
        delete_rows(table).where(table.c.user_id == user_id).returning(table.c.user_id)
    ).first()
    unit.user_keys[user_id] = None
    return deleted is not None


def rewrap(unit: Unit, /) -> int:
    """Wrap every user's data key again with the archive's master key (or its
    key management service's ``wrap``), after unwrapping it with the current
    or a previous one (``UserKeys.previous_master_keys``): the step of a
    rotation after which the previous master key can be destroyed, and with
    it what backups hold of deleted users' keys. Returns how many keys.

    Raises:
        InvalidArgument: the archive has no keys.
        UserScopeError: through a user's archive (the keys are every user's).
    """
    if unit.user_id is not None:
        raise UserScopeError("rewrap_user_keys wraps every user's key: call it on the archive, not a user's")
    keys = unit.keys
    if keys is None:
        raise InvalidArgument(
            "rewrap_user_keys needs the archive's keys (keys=UserKeys(...))", argument="keys"
        )
    table = tables.user_keys
    count = 0
    with unit.writing():
        for user_id, wrapped in unit.execute(select(table.c.user_id, table.c.wrapped)).all():
            key = keys.key_of(user_id, bytes(wrapped))
            unit.execute(
                update_rows(table)
                .where(table.c.user_id == user_id, table.c.wrapped == wrapped)
                .values(wrapped=keys.wrapped(user_id, key))
            )
            count += 1
    return count
