"""Attachments stored once: the rows of ``attachments``, written with the
parts that hold them, put back into the parts read, and swept when no part
refers to them any more.

An attachment belongs to a user (its parts' ``chat_user_id``; '' for chats
of no user) and is named by the SHA-256 of its bytes: a user's image sent in
ten turns or ten chats is one row. The switch (``set_stored_once``) is the
archive's, kept in ``archive_settings``; it decides how new parts are
written. Reading puts payloads back whatever the switch says now.

Races: a write that refers to an attachment locks its row (an upsert that
updates nothing still locks the row it meets), and a sweep locks the rows it
may delete before it looks for parts that refer to them. Whichever comes
second waits for the other to commit, then sees its parts (the sweep keeps
the row) or finds the row gone (the write inserts it again).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, MutableMapping, Sequence
from typing import TYPE_CHECKING, Any

from sqlalchemy import bindparam, select, text
from sqlalchemy import delete as delete_rows
from sqlalchemy import update as update_rows

from chatarchive._attachments import (
    Attachment,
    cut_at,
    cut_payload,
    may_hold_payload,
    owner_of,
    restore_payload,
)
from chatarchive._exceptions import DatabaseError
from chatarchive._schema import tables

if TYPE_CHECKING:
    from .unit import Unit

__all__ = [
    "SETTING",
    "moved_to_user",
    "releasing",
    "restore",
    "set_stored_once",
    "store",
    "stored_once",
    "sweep",
]

#: The ``archive_settings`` row of the switch: present, with value ``once``, when on.
SETTING = "attachments"

Row = MutableMapping[str, Any]

_parts = tables.content_parts
_attachments = tables.attachments

# Inserts the attachment, or locks the row that has it already (updating nothing).
_UPSERT = text(
    "INSERT INTO attachments (user_id, sha256, media_type, size, data) "
    "VALUES (:user_id, :sha256, :media_type, :size, :data) "
    "ON CONFLICT (user_id, sha256) DO UPDATE SET size = excluded.size WHERE false"
)


def stored_once(unit: Unit, /) -> bool:
    """Whether the archive stores attachments once (read once per unit)."""
    if unit.attachments_stored_once is None:
        value = unit.execute(
            select(tables.archive_settings.c.value).where(tables.archive_settings.c.name == SETTING)
        ).scalar()
        unit.attachments_stored_once = value == "once"
    return unit.attachments_stored_once


def set_stored_once(unit: Unit, /, enabled: bool) -> None:
    """Turn the switch on or off for the archive (for writes from now on)."""
    settings = tables.archive_settings
    unit.execute(delete_rows(settings).where(settings.c.name == SETTING))
    if enabled:
        unit.insert(settings, [{"name": SETTING, "value": "once"}])
    unit.attachments_stored_once = enabled


def store(unit: Unit, /, part_rows: Sequence[Row]) -> None:
    """Before ``part_rows`` (new parts, each with its ``chat_user_id``) are
    inserted: with attachments stored once, cut each part's payload out of
    its JSON into an attachment, and write the attachments (in key order, so
    that writers lock them in one order)."""
    sealed = {chat_id for chat_id, (is_sealed, _) in unit.seals.items() if is_sealed}
    held = [
        row
        for row in part_rows
        # A sealed chat's parts are sealed whole, payloads included (sealing).
        if row["data"] and row["chat_id"] not in sealed and may_hold_payload(row["data"])
    ]
    if not held or not stored_once(unit):
        return
    found: dict[tuple[str, str], Attachment] = {}
    for row in held:
        cut = cut_payload(row["data"])
        if cut is None:
            continue
        row["data"] = cut.data
        ordered = row["ordered_json"]
        if ordered and "data" in ordered:
            row["ordered_json"] = {**ordered, "data": cut_at(ordered["data"], cut)}
        row["attachment_sha256"] = cut.attachment.sha256
        row["attachment_path"] = cut.path
        found[owner_of(row["chat_user_id"]), cut.attachment.sha256] = cut.attachment
    if found:
        unit.execute(
            _UPSERT,
            [
                {
                    "user_id": owner,
                    "sha256": sha256,
                    "media_type": attachment.media_type,
                    "size": len(attachment.data),
                    "data": attachment.data,
                }
                for (owner, sha256), attachment in sorted(found.items(), key=lambda item: item[0])
            ],
        )


def releasing(unit: Unit, /, *where: Any) -> None:
    """Before the parts ``where`` selects are deleted: note the attachments
    they refer to, for ``sweep`` at the end of the write."""
    found = unit.execute(
        select(_parts.c.chat_user_id, _parts.c.attachment_sha256)
        .where(*where, _parts.c.attachment_sha256.is_not(None))
        .distinct()
    ).all()
    unit.released.update((owner_of(user), sha256) for user, sha256 in found)


def moved_to_user(unit: Unit, /, chat_id: str, old_user: str | None, new_user: str | None) -> None:
    """A chat's rows now belong to ``new_user``: give them copies of the
    attachments its parts refer to, and release ``old_user``'s."""
    shas = sorted(
        unit.execute(
            select(_parts.c.attachment_sha256)
            .where(_parts.c.chat_id == chat_id, _parts.c.attachment_sha256.is_not(None))
            .distinct()
        ).scalars()
    )
    if not shas:
        return
    old, new = owner_of(old_user), owner_of(new_user)
    unit.execute(
        text(
            "INSERT INTO attachments (user_id, sha256, media_type, size, data) "
            "SELECT :new, sha256, media_type, size, data FROM attachments "
            "WHERE user_id = :old AND sha256 IN :shas "
            "ON CONFLICT (user_id, sha256) DO UPDATE SET size = excluded.size WHERE false"
        ).bindparams(bindparam("shas", expanding=True)),
        {"new": new, "old": old, "shas": shas},
    )
    unit.released.update((old, sha256) for sha256 in shas)


def sweep(unit: Unit, /) -> None:
    """Delete the attachments released in this unit that no part refers to any more."""
    released, unit.released = unit.released, set()
    by_owner: defaultdict[str, list[str]] = defaultdict(list)
    for owner, sha256 in sorted(released):
        by_owner[owner].append(sha256)
    for owner, shas in by_owner.items():
        mine = (_attachments.c.user_id == owner, _attachments.c.sha256.in_(shas))
        # Locked first: a write that refers to one of them now waits, or has committed.
        unit.execute(update_rows(_attachments).where(*mine).values(size=_attachments.c.size))
        whose = _parts.c.chat_user_id == owner if owner else _parts.c.chat_user_id.is_(None)
        referred = set(
            unit.execute(
                select(_parts.c.attachment_sha256)
                .where(_parts.c.attachment_sha256.in_(shas), whose)
                .distinct()
            ).scalars()
        )
        unreferred = [sha256 for sha256 in shas if sha256 not in referred]
        if unreferred:
            unit.execute(
                delete_rows(_attachments).where(
                    _attachments.c.user_id == owner, _attachments.c.sha256.in_(unreferred)
                )
            )


def restore(unit: Unit, /, part_rows: list[Mapping[str, Any]], *, chat_id: str | None = None) -> bool:
    """Put the payload of each of ``part_rows`` (as read) that refers to an
    attachment back into its JSON: the row is replaced in the list by one
    that holds it. ``False``: an attachment was not found (the chat was
    written or deleted between the reads: read it again); with ``chat_id``,
    that raises instead."""
    held = [index for index, row in enumerate(part_rows) if row["attachment_sha256"] is not None]
    if not held:
        return True
    owners = sorted({owner_of(part_rows[index]["chat_user_id"]) for index in held})
    shas = sorted({part_rows[index]["attachment_sha256"] for index in held})
    stored: dict[tuple[str, str], bytes] = {}
    for start in range(0, len(shas), _SHAS_PER_STATEMENT):
        piece = shas[start : start + _SHAS_PER_STATEMENT]
        for user, sha256, data in unit.execute(
            select(_attachments.c.user_id, _attachments.c.sha256, _attachments.c.data).where(
                _attachments.c.sha256.in_(piece), _attachments.c.user_id.in_(owners)
            )
        ):
            stored[user, sha256] = bytes(data)
    restored = {}
    for index in held:
        row = part_rows[index]
        raw = stored.get((owner_of(row["chat_user_id"]), row["attachment_sha256"]))
        if raw is None:
            if chat_id is None:
                return False
            raise DatabaseError(
                f"chat {chat_id!r}: message {row['message_position']}, part {row['position']}: its "
                f"attachment {row['attachment_sha256']} is not in the archive"
            )
        restored[index] = _put_back(row, raw)
    for index, row in restored.items():
        part_rows[index] = row
    return True


def _put_back(row: Mapping[str, Any], raw: bytes) -> dict[str, Any]:
    """The part's row with its payload in its JSON again."""
    path = row["attachment_path"]
    whole = {**row, "data": restore_payload(row["data"], path, raw)}
    ordered: Mapping[str, Any] | None = row["ordered_json"]
    if ordered and "data" in ordered:
        whole["ordered_json"] = {**ordered, "data": restore_payload(ordered["data"], path, raw)}
    whole["attachment_sha256"] = whole["attachment_path"] = None
    return whole


#: Attachments looked up per statement.
_SHAS_PER_STATEMENT = 1_000
