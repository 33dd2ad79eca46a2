"""Writes: save, append, feedback, update, truncate and delete.

Each is a function of a ``.unit.Unit``; a write locks (or bumps) its
chat's row first, so that writes to one chat take turns and its ``version``
counts every one of them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime
from functools import partial
from typing import Any, TypedDict, Unpack

from sqlalchemy import and_, case, func, select, true
from sqlalchemy import delete as delete_rows
from sqlalchemy import update as update_rows

from chatarchive._arguments import (
    is_whole_number,
    optional_text,
    require_at_least_one,
    require_many,
    require_moment,
    require_text,
    require_user_id,
    require_version,
)
from chatarchive._document import (
    ChatDocument,
    Feedback,
    Limits,
    Message,
    Usage,
    parse_feedback,
    parse_messages,
    without_parent,
)
from chatarchive._exceptions import ChatNotFound, ConflictError, InvalidArgument, InvalidDocument, quoted
from chatarchive._rows import (
    CHAT_ORDERED,
    chat_ordered_json,
    document_to_rows,
    feedback_to_row,
    messages_to_rows,
)
from chatarchive._schema import in_pieces, tables
from chatarchive.redaction import Redactor, redact_document, redact_feedback, redact_messages

from . import attachments, sealing, searching
from .appends import Guesses, append_in_one_statement
from .chat_rows import (
    CREATE_ATTEMPTS,
    bump,
    delete_children,
    insert_messages,
    lock,
    lock_chats,
    lock_in_order,
    lock_row,
    message_data,
    refuse_to_lose_branches,
    require_chat,
    rewrite_message,
    stored_message,
    touch,
    written_again,
)
from .plans import FaceFacts, Kind, Plan, Step
from .tree import cut_path_below, message_at, move_path, next_sibling_index, path_positions, remove, subtree
from .unit import NOBODY, Unit, now, scoped_user

__all__ = [
    "ChatChanges",
    "add_feedback",
    "append",
    "append_messages",
    "delete",
    "delete_feedback",
    "delete_older_than",
    "delete_user",
    "delete_user_key",
    "edit",
    "parsed_messages",
    "regenerate",
    "save",
    "set_active_leaf",
    "truncate",
    "update",
    "update_message",
]


#: Chats deleted per statement by ``delete_older_than``.
_DELETE_CHUNK = 500


class ChatChanges(TypedDict, total=False):
    """Chat fields that ``update`` can change; ``None`` clears one."""

    user_id: str | None
    title: str | None
    model: str | None
    model_settings: dict[str, Any] | None
    workflow: dict[str, Any] | None
    metadata: dict[str, Any] | None
    tags: list[str]


class MessageChanges(TypedDict, total=False):
    """Message fields that ``update_message`` can change: what is known of an
    answer only after it is stored; ``None`` clears one."""

    model: str | None
    finish_reason: str | None
    usage: Usage | Mapping[str, Any] | None


def save(unit: Unit, /, doc: ChatDocument | Mapping[str, Any], *, expected_version: int | None = None) -> int:
    """Insert a chat, or replace the stored chat with the same ``chat_id``.

    The document is the whole chat: its whole tree, or a linear chat. A
    linear document does not replace a stored chat that has branches (the
    document ``get`` returns is its active path alone): that would delete
    them unasked.

    Args:
        doc: the document (or its canonical JSON as a mapping).
        expected_version: if given, the version the stored chat must have
            (``0``: the chat must not exist yet).

    Returns:
        The chat's new version.

    Raises:
        InvalidDocument: the document is not valid.
        ConflictError: the stored version is not ``expected_version``, or a
            linear document would replace a chat with branches.
    """
    require_version(expected_version)
    return _store(
        unit,
        redact_document(unit.redactor, ChatDocument.parse(doc, limits=unit.limits)),
        expected_version=expected_version,
    )


def _store(unit: Unit, /, doc: ChatDocument, *, expected_version: int | None) -> int:
    """``save`` of a document already checked (and redacted)."""
    doc = unit.owned(doc)
    with unit.writing():
        for _ in range(CREATE_ATTEMPTS):
            current = lock_row(unit, doc.chat_id)
            if current is not None and not unit.visible(current):
                raise ChatNotFound(doc.chat_id)
            stored = 0 if current is None else current["version"]
            if expected_version is not None and stored != expected_version:
                raise ConflictError(f"chat {doc.chat_id!r} is at version {stored}, not {expected_version}")
            if current is not None and doc.is_linear:
                refuse_to_lose_branches(doc.chat_id, current)
            rows = document_to_rows(doc, now=now(), version=stored + 1)
            rows.chat["search_from"] = searching.pending_mark(unit)
            sealing.seal_chat(unit, rows)
            if current is None:
                if not unit.backend.create_chat(unit.executor, rows.chat):
                    continue  # another writer created the chat after the lock found none: replace it
            else:
                delete_children(unit, tables.chats.c.chat_id == doc.chat_id, replacing=True)
                unit.execute(
                    update_rows(tables.chats)
                    .where(tables.chats.c.chat_id == doc.chat_id)
                    .values(written_again(rows.chat))
                )
            unit.insert(tables.chat_tags, rows.tags)
            insert_messages(unit, rows)
            searching.written(unit, rows.messages, rows.parts, marked=True)
            unit.insert(tables.feedback, rows.feedback)
            return stored + 1
    if unit.user_id is not None:  # there, but row-level security hides it: another user's
        raise ChatNotFound(doc.chat_id)
    raise ConflictError(f"chat {doc.chat_id!r} keeps being created by another writer; try again")


def append(
    face: FaceFacts,
    /,
    chat_id: str,
    messages: Iterable[Message | Mapping[str, Any]],
    *,
    parent: str | None = None,
    expected_version: int | None = None,
    create: Mapping[str, Any] | None = None,
) -> Plan[list[Message]]:
    """Add messages to a chat as a chain, without touching earlier rows: the
    first answers the active leaf (or ``parent``, the uid of any message of
    the chat: a new branch), each next one the one before. The last becomes
    the active leaf, so ``get`` shows them.

    With ``create`` (the new chat's other fields, as a document has them:
    ``user_id``, ``title``, ``metadata``... or ``{}``), a chat that is not
    there is created with the messages, as ``save`` of that document would
    create it (no messages: no chat, ``ChatNotFound``); what a framework's
    store does at a session's first add. On PostgreSQL the creation too is
    one statement.

    Errors name the message by its index in ``messages``.

    Returns:
        The messages as stored (uids and timestamps filled in).

    Raises:
        InvalidArgument: ``parent`` names no message of the chat; ``create``
            with ``parent`` or ``expected_version`` (a chat that may be new
            has neither).
        InvalidDocument: ``create`` holds what a document may not.
    """
    optional_text(parent, "parent")
    new_chat = _chat_to_create(chat_id, create, parent, expected_version, face)
    parsed, given = parsed_messages(chat_id, messages, face.limits, face.redactor)
    # What the archive last saw of its database, where the append can be one statement.
    guesses = (
        face.guesses
        if parent is None
        and parsed
        and face.guesses is not None  # an archive's own transaction, which the statement can be
        and not face.guesses.distributed
        and face.user_id is None  # a user's would first tell row-level security who writes
        and face.backend.appends_in_one_statement
        else None
    )
    try:
        if guesses is not None:
            stored: list[Message] | None = yield _in_one_statement(
                guesses, chat_id, parsed, given, expected_version=expected_version
            )
            if stored is not None:
                return stored
        added: list[Message] = yield Step(
            Kind.WRITE,
            partial(
                _add,
                chat_id=chat_id,
                parsed=parsed,
                given=given,
                expected_version=expected_version,
                parent=parent,
            ),
        )
        return added
    except ChatNotFound:
        if new_chat is None or not parsed:
            raise
    # The chat is not there: created with the messages, a chain as an append makes it.
    moment = now()
    chain = [
        without_parent(m if m.created_at else m.model_copy(update={"created_at": moment})) for m in parsed
    ]
    doc = new_chat.model_copy(update={"messages": chain})
    if guesses is not None:
        stored = yield _in_one_statement(guesses, chat_id, chain, given, expected_version=None, create=doc)
        if stored is not None:
            return stored
    try:
        yield Step(Kind.WRITE, partial(_store, doc=doc, expected_version=0))
    except ConflictError:  # created meanwhile: the messages follow what it holds
        again: list[Message] = yield Step(
            Kind.WRITE,
            partial(_add, chat_id=chat_id, parsed=parsed, given=given, expected_version=None),
        )
        return again
    return list(doc.messages)


def _in_one_statement(
    guesses: Guesses,
    chat_id: str,
    parsed: list[Message],
    given: list[str],
    *,
    expected_version: int | None,
    create: ChatDocument | None = None,
) -> Step[list[Message] | None]:
    """The append (or, with ``create``, the creation) as one statement: see ``append_in_one_statement``."""
    return Step(
        Kind.STATEMENT,
        partial(
            append_in_one_statement,
            chat_id=chat_id,
            parsed=parsed,
            given=given,
            expected_version=expected_version,
            guesses=guesses,
            create=create,
        ),
    )


def _chat_to_create(
    chat_id: str,
    create: Mapping[str, Any] | None,
    parent: str | None,
    expected_version: int | None,
    face: FaceFacts,
) -> ChatDocument | None:
    """The chat ``append(..., create=...)`` makes when it is not there,
    without messages: checked, and redacted as a saved document is."""
    if create is None:
        return None
    if not isinstance(create, Mapping):
        raise InvalidArgument(
            f"create must be a mapping of the new chat's fields, not {type(create).__name__}",
            argument="create",
        )
    if parent is not None or expected_version is not None:
        raise InvalidArgument(
            "create makes the chat when it is not there: it has no parent or version to name",
            argument="create",
        )
    for name in ("chat_id", "messages"):
        if name in create:
            raise InvalidArgument(
                f"create holds the new chat's other fields; {name!r} is given apart", argument="create"
            )
    chat = ChatDocument.parse({**create, "chat_id": chat_id}, limits=face.limits)
    return redact_document(face.redactor, chat)


def append_messages(
    unit: Unit, /, chat_id: str, messages: Iterable[Message | Mapping[str, Any]]
) -> list[Message]:
    """``append`` as one write in ``unit`` (for the writes that record
    messages made from API responses)."""
    parsed, given = parsed_messages(chat_id, messages, unit.limits, unit.redactor)
    return _add(unit, chat_id, parsed, given, expected_version=None)


def regenerate(
    unit: Unit,
    /,
    chat_id: str,
    message_uid: str,
    messages: Iterable[Message | Mapping[str, Any]],
    *,
    expected_version: int | None = None,
) -> list[Message]:
    """Add another answer in place of the message ``message_uid``: ``messages``
    (a new answer, or an answer with its tool calls and results) become a
    sibling branch of it, and the active path. The old answer stays, off the
    path: with feedback, the pair is preference data.

    Returns:
        The messages as stored.

    Raises:
        InvalidArgument: ``message_uid`` names no message of the chat.
    """
    require_text(message_uid, "message_uid")
    parsed, given = parsed_messages(chat_id, messages, unit.limits, unit.redactor)
    return _add(unit, chat_id, parsed, given, expected_version=expected_version, sibling_of=message_uid)


def edit(
    unit: Unit,
    /,
    chat_id: str,
    message_uid: str,
    content: str | list[Any] | None,
    *,
    expected_version: int | None = None,
) -> Message:
    """Edit a message as chat products do: a new message with the same role
    (and name) and ``content`` becomes a sibling of ``message_uid`` and the
    active leaf, ready for the answer to be appended; the original and what
    followed it stay, off the path.

    Returns:
        The new message as stored.

    Raises:
        InvalidArgument: ``message_uid`` names no message of the chat.
    """
    require_text(message_uid, "message_uid")
    with unit.writing():
        lock(unit, chat_id, expected_version)
        original = message_at(unit, chat_id, message_uid, argument="message_uid")
        edited: dict[str, Any] = {"role": original["role"], "content": content}
        if original["name"] is not None:
            edited["name"] = original["name"]
        parsed, given = parsed_messages(chat_id, [edited], unit.limits, unit.redactor)
        (message,) = _add(unit, chat_id, parsed, given, expected_version=None, sibling_of=message_uid)
    return message


def parsed_messages(
    chat_id: str,
    messages: Iterable[Message | Mapping[str, Any]],
    limits: Limits | None,
    redactor: Redactor | None,
) -> tuple[list[Message], list[str]]:
    """Messages to add to a chat, checked, and the uids that came with them
    (a uid generated here, for a mapping without one, is a new random UUID
    that no stored message has: only the given ones need looking up)."""
    require_many(messages, "messages", "messages", chat_id=chat_id)
    messages = list(messages)  # read twice: parsed, then for the uids they came with
    parsed = redact_messages(redactor, chat_id, parse_messages(messages, chat_id=chat_id, limits=limits))
    seen: set[str] = set()
    for index, message in enumerate(parsed):
        if message.uid in seen:
            raise InvalidDocument(
                f"duplicate message uid {message.uid!r}", chat_id=chat_id, message_index=index, field="uid"
            )
        seen.add(message.uid)
    given = [
        message.uid
        for raw, message in zip(messages, parsed, strict=True)
        if not (isinstance(raw, Mapping) and "uid" not in raw)
    ]
    return parsed, given


def _add(
    unit: Unit,
    /,
    chat_id: str,
    parsed: list[Message],
    given: list[str],
    *,
    expected_version: int | None,
    parent: str | None = None,
    sibling_of: str | None = None,
) -> list[Message]:
    """Add ``parsed`` (``_parsed``) as a chain under the active leaf,
    ``parent``, or the parent of ``sibling_of``, and make the last one the
    active leaf."""
    if not parsed:
        require_chat(unit, chat_id)
        return []
    moment = now()
    with unit.writing():
        before = bump(unit, chat_id, expected_version, moment, len(parsed))
        count = before["message_count"]
        taken = None
        for uids in in_pieces(given):
            stored = select(tables.messages.c.uid).where(
                tables.messages.c.chat_id == chat_id, tables.messages.c.uid.in_(uids)
            )
            taken = unit.execute(stored).scalars().first()
            if taken is not None:
                break
        if taken is not None:
            index = next(i for i, message in enumerate(parsed) if message.uid == taken)
            raise InvalidDocument(
                f"message uid {taken!r} is already in the chat",
                chat_id=chat_id,
                message_index=index,
                field="uid",
            )
        attach_to, on_path = before["active_leaf"], True
        if parent is not None:
            row = message_at(unit, chat_id, parent, argument="parent")
            attach_to, on_path = row["position"], row["on_path"]
        elif sibling_of is not None:
            row = message_at(unit, chat_id, sibling_of, argument="message_uid")
            attach_to, on_path = row["parent_position"], row["on_path"]  # a message's parent is on its path
            if attach_to is None:  # a new root: the whole path goes
                on_path = True
            elif not on_path:  # a sibling of a message off the path: is its parent on it?
                on_path = unit.execute(
                    select(tables.messages.c.on_path).where(
                        tables.messages.c.chat_id == chat_id, tables.messages.c.position == attach_to
                    )
                ).scalar_one()
        sibling_index = next_sibling_index(unit, chat_id, attach_to, count)
        if attach_to != before["active_leaf"]:  # a new branch: the path moves to it
            path_length: Any
            if on_path:  # the path is cut below the branch's parent (the usual case: no walk up the tree)
                path_length = tables.chats.c.path_length - cut_path_below(unit, chat_id, attach_to)
            else:
                path_length = move_path(unit, chat_id, attach_to) + len(parsed)
            unit.execute(
                update_rows(tables.chats)
                .where(tables.chats.c.chat_id == chat_id)
                .values(path_length=path_length)
            )
        rows = messages_to_rows(
            chat_id,
            parsed,
            user_id=before["user_id"],
            first_position=count,
            now=moment,
            parent=attach_to,
            sibling_index=sibling_index,
        )
        sealing.seal_new(unit, rows)
        insert_messages(unit, rows)
        searching.written(unit, rows.messages, rows.parts, marked=before.get("search_marked", False))
    return [m if m.created_at else m.model_copy(update={"created_at": moment}) for m in parsed]


def set_active_leaf(unit: Unit, /, chat_id: str, leaf: str, *, expected_version: int | None = None) -> int:
    """Show another path: the one from a root down to the message ``leaf``
    (a uid; any message, so that a path can also end early). Nothing is
    deleted; ``expected_version`` makes the move conditional, so that of two
    users moving the same chat at once, one is refused rather than undone.

    Returns:
        The chat's version (a new one if the path moved).

    Raises:
        InvalidArgument: ``leaf`` names no message of the chat.
    """
    require_text(leaf, "leaf")
    moment = now()
    with unit.writing():
        current = lock(unit, chat_id, expected_version)
        position = message_at(unit, chat_id, leaf, argument="leaf")["position"]
        if position == current["active_leaf"]:
            return int(current["version"])
        path_length = move_path(unit, chat_id, position)
        return touch(unit, chat_id, current, moment, active_leaf=position, path_length=path_length)


def add_feedback(unit: Unit, /, chat_id: str, feedback: Feedback | Mapping[str, Any]) -> Feedback:
    """Attach feedback to a chat (or to one of its messages, by ``message_uid``).

    Returns:
        The feedback as stored (id and timestamp filled in).
    """
    parsed = redact_feedback(
        unit.redactor, chat_id, parse_feedback(feedback, chat_id=chat_id, limits=unit.limits)
    )
    moment = now()
    known_message = (
        true()
        if parsed.message_uid is None
        else select(tables.messages.c.position)
        .where(tables.messages.c.chat_id == chat_id, tables.messages.c.uid == parsed.message_uid)
        .exists()
    )
    with unit.writing():
        before = bump(unit, chat_id, None, moment)
        next_position, clashes, message_found = unit.execute(
            select(
                func.coalesce(func.max(tables.feedback.c.position) + 1, 0),
                func.count(case((tables.feedback.c.id == parsed.id, 1))),
                known_message,
            ).where(tables.feedback.c.chat_id == chat_id)
        ).one()
        if not message_found:
            raise InvalidDocument(
                f"feedback on unknown message uid {parsed.message_uid!r}",
                chat_id=chat_id,
                field="message_uid",
            )
        if clashes:
            raise InvalidDocument(f"duplicate feedback id {parsed.id!r}", chat_id=chat_id, field="id")
        unit.insert(
            tables.feedback,
            [feedback_to_row(chat_id, next_position, parsed, now=moment, user_id=before["user_id"])],
        )
    return parsed if parsed.created_at else parsed.model_copy(update={"created_at": moment})


def delete_feedback(
    unit: Unit, /, chat_id: str, feedback_id: str, *, expected_version: int | None = None
) -> int:
    """Remove one feedback item (a vote taken back). To change one, delete it
    and add the new one, with the same ``id`` if you like, in one transaction.

    Returns:
        The chat's new version.

    Raises:
        InvalidArgument: the chat has no feedback with this id.
    """
    require_text(feedback_id, "feedback_id")
    moment = now()
    with unit.writing():
        before = bump(unit, chat_id, expected_version, moment)
        removed = unit.execute(
            delete_rows(tables.feedback).where(
                tables.feedback.c.chat_id == chat_id, tables.feedback.c.id == feedback_id
            )
        )
        if not removed.rowcount:  # type: ignore[attr-defined]
            raise InvalidArgument(
                f"no feedback with id {quoted(feedback_id)}", argument="feedback_id", chat_id=chat_id
            )
    return int(before["version"]) + 1


def update(
    unit: Unit, /, chat_id: str, *, expected_version: int | None = None, **changes: Unpack[ChatChanges]
) -> int:
    """Change a chat's own fields (not its messages); ``None`` clears a field.

    Returns:
        The chat's new version.
    """
    require_text(chat_id, "chat_id")
    unknown = set(changes) - set(ChatChanges.__annotations__)
    if unknown:
        raise InvalidArgument(f"cannot update {sorted(unknown)}", chat_id=chat_id)
    if unit.user_id is not None and "user_id" in changes and changes["user_id"] != unit.user_id:
        raise InvalidDocument(f"user_id must be {unit.user_id!r}", chat_id=chat_id, field="user_id")
    checked = redact_document(
        unit.redactor, ChatDocument.parse({"chat_id": chat_id, **changes}, limits=unit.limits)
    )
    values: dict[str, Any] = {name: getattr(checked, name) for name in changes if name != "tags"}
    moment = now()
    with unit.writing():
        current = lock(unit, chat_id, expected_version)
        ordered = current["ordered_json"] or {}
        extra = ordered.get("extra", current["extra"])
        if extra and any(name in extra for name in changes):
            values["extra"] = {k: v for k, v in extra.items() if k not in changes} or None
        if ordered or any(name in values for name, _ in CHAT_ORDERED):
            kept = {name: value for name, value in ordered.items() if name not in values}
            values["ordered_json"] = {**kept, **(chat_ordered_json(values) or {})} or None
        user = values["user_id"] if "user_id" in values else current["user_id"]
        if "user_id" in values and user != current["user_id"] and current["sealed"]:
            raise InvalidArgument(
                f"chat {chat_id!r} is sealed with the key of user {current['user_id']!r}: it cannot be given "
                "to another user (save it as theirs, then delete it)",
                argument="user_id",
                chat_id=chat_id,
            )
        if "user_id" in values and user != current["user_id"]:  # the chat's rows follow it
            for table in unit.backend.owned_tables():
                unit.execute(update_rows(table).where(table.c.chat_id == chat_id).values(chat_user_id=user))
            attachments.moved_to_user(unit, chat_id, current["user_id"], user)
        if "tags" in changes:
            unit.execute(delete_rows(tables.chat_tags).where(tables.chat_tags.c.chat_id == chat_id))
            unit.insert(
                tables.chat_tags,
                [
                    {"chat_id": chat_id, "tag": tag, "position": i, "chat_user_id": user}
                    for i, tag in enumerate(checked.tags)
                ],
            )
        return touch(unit, chat_id, current, moment, **values)


def update_message(
    unit: Unit,
    /,
    chat_id: str,
    message_uid: str,
    *,
    expected_version: int | None = None,
    **changes: Unpack[MessageChanges],
) -> Message:
    """Change a stored message's ``model``, ``finish_reason`` or ``usage``;
    its content, tool calls and place in the chat stay. What a run of an
    agent cost is known when the run ends, after its messages are stored:
    this puts it in the token columns that ``stats`` and SQL read.

    Returns:
        The message as stored.

    Raises:
        InvalidArgument: ``message_uid`` names no message of the chat, or a
            field that cannot be changed is given.
        InvalidDocument: a value that is not valid (``usage`` with a
            non-integer count...).
    """
    require_text(message_uid, "message_uid")
    unknown = set(changes) - set(MessageChanges.__annotations__)
    if unknown:
        raise InvalidArgument(
            f"update_message cannot change {sorted(unknown)}; only {sorted(MessageChanges.__annotations__)}",
            chat_id=chat_id,
        )
    moment = now()
    with unit.writing():
        bump(unit, chat_id, expected_version, moment)
        found = stored_message(unit, chat_id, message_uid)
        if found is None:
            raise InvalidArgument(
                f"no message with uid {quoted(message_uid)}", argument="message_uid", chat_id=chat_id
            )
        position = found["position"]
        data = message_data(unit, chat_id, found)
        for name, value in changes.items():
            if value is None:
                data.pop(name, None)  # cleared: reads back as never set
            else:
                data[name] = value.model_dump(mode="json") if isinstance(value, Usage) else value
        parsed = parse_messages([data], chat_id=chat_id, first_index=position, limits=unit.limits)
        (message,) = redact_messages(unit.redactor, chat_id, parsed)
        rewrite_message(unit, found, message, moment, children=False)
    return message


def truncate(
    unit: Unit, /, chat_id: str, keep: int, *, expected_version: int | None = None, delete: bool = False
) -> int:
    """Cut the active path after its first ``keep`` messages (to regenerate
    an answer, or to edit a message and go on from there): the message at
    ``keep - 1`` becomes the active leaf, and the next message appended
    answers it.

    The messages cut off stay in the chat as a branch off the active path,
    with their feedback: a rejected answer is what preference data is made
    of, and ``set_active_leaf`` brings them back. With ``delete=True`` they are
    deleted instead, with everything below them (their parts, tool calls,
    streamed chunks, feedback, and the other branches that grew from them).
    Earlier rows are not touched; nothing to cut changes nothing.

    Returns:
        The chat's version (a new one if the path changed).
    """
    if not is_whole_number(keep) or keep < 0:
        raise InvalidArgument(
            f"keep must be a whole number >= 0, not {keep!r}", argument="keep", chat_id=chat_id
        )
    if not isinstance(delete, bool):
        raise InvalidArgument(
            f"delete must be True or False, not {delete!r}", argument="delete", chat_id=chat_id
        )
    moment = now()
    with unit.writing():
        current = lock(unit, chat_id, expected_version)
        count, length = current["message_count"], current["path_length"]
        if keep >= length:
            return int(current["version"])
        linear = length == count  # the path is positions 0 to count - 1
        path = range(count) if linear else path_positions(unit, chat_id, current["active_leaf"])
        leaf = path[keep - 1] if keep else None
        if not delete:
            unit.execute(
                update_rows(tables.messages)
                .where(
                    tables.messages.c.chat_id == chat_id,
                    tables.messages.c.on_path,
                    tables.messages.c.position >= path[keep],
                )
                .values(on_path=False)
            )
            return touch(unit, chat_id, current, moment, active_leaf=leaf, path_length=keep)
        removed = range(keep, count) if linear else subtree(unit, chat_id, path[keep])
        remove(unit, chat_id, removed, count)
        return touch(
            unit,
            chat_id,
            current,
            moment,
            message_count=count - len(removed),
            active_leaf=leaf,
            path_length=keep,
        )


def delete(unit: Unit, /, chat_id: str) -> None:
    """Delete a chat with all its messages, parts, tool calls, tags and feedback.

    Raises:
        ChatNotFound: no such chat.
    """
    with unit.writing():
        lock(unit, chat_id)
        delete_children(unit, tables.chats.c.chat_id == chat_id)
        unit.execute(delete_rows(tables.chats).where(tables.chats.c.chat_id == chat_id))


def delete_user(unit: Unit, /, user_id: str) -> int:
    """Delete every chat of a user, and the user's key (``chatarchive.encryption``):
    what a backup still holds of their sealed chats can never be read; returns
    how many chats there were."""
    user_id = require_user_id(user_id)
    if unit.user_id is not None and user_id != unit.user_id:
        return 0
    owned = tables.chats.c.user_id == user_id
    listed = select(tables.chats.c.chat_id).where(owned).order_by(tables.chats.c.chat_id).limit(_DELETE_CHUNK)
    deleted = 0
    with unit.writing():
        # The user's chats locked before any of their rows goes, one at a time
        # in id order: a writer holds one chat's lock while it writes the
        # chat's rows, so erasure waits for it, never it for erasure.
        while chat_ids := list(unit.execute(listed).scalars()):
            locked = lock_in_order(unit, chat_ids, owned)
            chosen = tables.chats.c.chat_id.in_(locked)
            delete_children(unit, chosen)
            unit.execute(delete_rows(tables.chats).where(chosen))
            deleted += len(locked)
        sealing.delete_key(unit, user_id)
    return deleted


def delete_user_key(unit: Unit, /, user_id: str) -> bool:
    """Delete the user's key (crypto-shredding): the user's sealed chats, and
    every copy of them in backups, can never be read again; their rows stay
    (reading one raises ``SealedChat``) until deleted. Returns whether the user
    had a key. A user's archive deletes its own user's key alone."""
    user_id = require_user_id(user_id)
    if unit.user_id is not None and user_id != unit.user_id:
        return False
    with unit.writing():
        return sealing.delete_key(unit, user_id)


def delete_older_than(
    face: FaceFacts,
    /,
    cutoff: datetime,
    *,
    user_id: str | None = None,
    batch_size: int = 500,
    limit: int | None = None,
) -> Plan[int]:
    """Delete the chats last updated before ``cutoff`` (``updated_at <
    cutoff``; a naive datetime is UTC), or only those of ``user_id``, with all
    their rows: a retention policy. Works through the least recently updated
    chats first, ``batch_size`` at a time (an archive commits each batch, so a
    large purge holds its locks briefly; if it is interrupted, the batches done
    stay deleted and calling it again finishes the job); at most ``limit`` in
    all. Returns how many chats were deleted.

    The chats of a batch are locked before their rows go, so a chat that a
    concurrent ``append`` brings past the cutoff is kept whole.
    """
    cutoff = require_moment(cutoff, "cutoff")
    optional_text(user_id, "user_id")
    require_at_least_one(batch_size, "batch_size")
    if limit is not None:
        require_at_least_one(limit, "limit")
    deleted = 0
    while limit is None or deleted < limit:
        size = batch_size if limit is None else min(batch_size, limit - deleted)
        done = yield Step(Kind.WRITE, partial(_delete_old_chats, cutoff=cutoff, user_id=user_id, limit=size))
        if not done:
            break
        deleted += done
    return deleted


def _delete_old_chats(unit: Unit, /, cutoff: datetime, user_id: str | None, limit: int) -> int:
    user = scoped_user(unit.user_id, user_id)
    if user is NOBODY:
        return 0
    old = tables.chats.c.updated_at < cutoff
    if user is not None:
        old = and_(old, tables.chats.c.user_id == user)
    candidates = (
        select(tables.chats.c.chat_id).where(old).order_by(tables.chats.c.updated_at, tables.chats.c.chat_id)
    )
    deleted = 0
    with unit.writing():
        # A chunk at a time, so that neither the ids held here nor the
        # statements grow with the number of chats.
        while deleted < limit:
            chat_ids = list(unit.execute(candidates.limit(min(_DELETE_CHUNK, limit - deleted))).scalars())
            if not chat_ids:
                break
            # Locked, then checked again: one that an append has just brought past the cutoff stays.
            locked = [
                row["chat_id"] for row in lock_chats(unit, and_(tables.chats.c.chat_id.in_(chat_ids), old))
            ]
            chosen = tables.chats.c.chat_id.in_(locked)
            delete_children(unit, chosen)
            unit.execute(delete_rows(tables.chats).where(chosen))
            deleted += len(locked)
    return deleted


# -- what the writes share -------------------------------------------------------------
