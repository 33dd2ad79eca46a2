"""Streaming: a message stored while a model writes it, a chunk at a time.

``begin_message`` stores the message at once, not completed; each
``append_chunk`` is one insert into ``message_chunks``, whatever came before;
``complete_message`` folds the chunks into the message's content and tool
calls. A crash mid-answer leaves every chunk received in the archive.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NoReturn

from sqlalchemy import Integer, func, insert, literal, select
from sqlalchemy import delete as delete_rows

from chatarchive._arguments import is_whole_number, require_text
from chatarchive._document import DEFAULT_LIMITS, Message, parse_messages
from chatarchive._exceptions import InvalidArgument, InvalidDocument, quoted
from chatarchive._rows import fold_chunks
from chatarchive._schema import DOCUMENT_ORDER, tables
from chatarchive._types import ArchiveText
from chatarchive.redaction import redact_messages

from . import sealing, searching
from .chat_rows import bump, message_data, require_chat, rewrite_message, stored_message
from .unit import Unit, now
from .writes import append_messages

__all__ = [
    "append_chunk",
    "begin_message",
    "complete_message",
    "record_completion",
    "record_message",
    "record_response",
]


def record_completion(unit: Unit, /, chat_id: str, completion: Any, *, choice: int = 0) -> Message:
    """Append the assistant message of an OpenAI chat completion.

    ``completion`` is a completion (a dict, or an object of the ``openai``
    package) or a list of its streamed chunks; ``choice`` picks one choice
    when there are several. The message keeps the model, finish reason,
    token usage, the response's id, and every other key of the completion
    and the choice (see ``formats.openai_completions``).

    Returns:
        The stored message.
    """
    from chatarchive.formats.openai_completions import message_from_completion

    return _record(unit, chat_id, lambda: message_from_completion(completion, choice=choice))


def record_message(unit: Unit, /, chat_id: str, message: Any) -> Message:
    """Append the assistant message of an Anthropic Messages API response.

    ``message`` is a response (a dict, or a ``Message`` of the ``anthropic``
    package) or a list of its stream events. The message keeps its blocks
    (text, thinking, tool calls as ``tool_calls``...), the model, the stop
    reason as ``finish_reason``, the usage in the token columns, the
    response's id, and every other key (see ``formats.anthropic``).

    Returns:
        The stored message.
    """
    from chatarchive.formats.anthropic import message_from_response

    return _record(unit, chat_id, lambda: message_from_response(message))


def record_response(unit: Unit, /, chat_id: str, response: Any) -> list[Message]:
    """Append the output items of an OpenAI Responses API response, one
    message each.

    ``response`` is a ``Response`` (a dict, or an object of the ``openai``
    package) or a list of its stream events. Messages, function and built-in
    tool calls, their outputs and reasoning are stored as the
    ``openai-responses`` format stores them (see ``formats.openai_responses``);
    each message has the response's model and time, and the last one its
    usage (in the token columns), its status as ``finish_reason``, its id and
    the response without its output (``response``).

    Returns:
        The stored messages.
    """
    from chatarchive.formats.openai_responses import messages_from_response

    try:
        recorded = messages_from_response(response)
    except InvalidDocument as exc:
        raise InvalidDocument(exc.reason, chat_id=chat_id, field=exc.field) from None
    if not recorded:
        raise InvalidDocument("the response has no output items", chat_id=chat_id, field="output")
    return append_messages(unit, chat_id, recorded)


def _record(unit: Unit, chat_id: str, convert: Callable[[], dict[str, Any]]) -> Message:
    """Append the message ``convert`` makes of an API response, its errors naming the chat."""
    try:
        recorded = convert()
    except InvalidDocument as exc:
        raise InvalidDocument(exc.reason, chat_id=chat_id, field=exc.field) from None
    (message,) = append_messages(unit, chat_id, [recorded])
    return message


def begin_message(
    unit: Unit, /, chat_id: str, role: str = "assistant", uid: str | None = None, **fields: Any
) -> Message:
    """Start a message that will arrive in chunks: it is stored at once with
    ``completed`` false and empty content (or ``fields["content"]``).

    Returns:
        The stored message (its ``uid`` is what the chunks name).
    """
    message: dict[str, Any] = {"content": "", **fields, "role": role, "completed": False}
    if uid is not None:
        message["uid"] = uid
    (stored,) = append_messages(unit, chat_id, [message])
    return stored


def append_chunk(
    unit: Unit, /, chat_id: str, message_uid: str, chunk: str, *, tool_call_index: int | None = None
) -> None:
    """Store one streamed chunk of a message begun with ``begin_message``: one
    insert, whatever was received before (earlier text is never rewritten).
    ``tool_call_index`` makes it a fragment of that tool call's arguments (a
    custom call's ``input``) instead of content text.

    Raises:
        InvalidDocument: a chunk that is not text the archive can hold.
        InvalidArgument: an unknown or completed message, or a bad ``tool_call_index``.
    """
    require_text(chat_id, "chat_id")
    require_text(message_uid, "message_uid")
    if not isinstance(chunk, str):
        raise InvalidDocument("a chunk is a string", chat_id=chat_id, field="chunk")
    # The chunk must be text the archive can hold (valid Unicode, within the limits).
    try:
        parse_messages([{"role": "chunk", "content": chunk}], chat_id=chat_id, limits=unit.limits)
    except InvalidDocument as exc:
        raise InvalidDocument(exc.reason, chat_id=chat_id, field="chunk") from None
    if tool_call_index is not None:
        _check_tool_call_index(unit, chat_id, tool_call_index)
    if unit.redactor is not None:  # piece by piece; the completed message is redacted again, whole
        chunk = unit.redactor.redact(chunk, chat_id)
    if unit.keys is not None:  # sealed if its chat is (without keys, a sealed chat takes no chunk: below)
        chunk = sealing.seal_chunk(unit, chat_id, chunk)
    following = (
        select(func.coalesce(func.max(tables.message_chunks.c.position) + 1, 0))
        .where(
            tables.message_chunks.c.chat_id == tables.messages.c.chat_id,
            tables.message_chunks.c.message_position == tables.messages.c.position,
        )
        .scalar_subquery()
    )
    # The message's row is locked (FOR KEY SHARE) as it is read: a truncate
    # that deletes it waits for the chunk (and deletes it with the message),
    # and a chunk that comes after the delete finds no message. Without the
    # lock, a message begun meanwhile at the deleted one's position took the
    # chunk, which names the message by its position.
    source = unit.scoped(
        select(
            tables.messages.c.chat_id,
            tables.messages.c.position,
            following,
            literal(tool_call_index, Integer()),
            literal(chunk, ArchiveText()),
            tables.messages.c.chat_user_id,
        )
        .join(tables.chats, tables.chats.c.chat_id == tables.messages.c.chat_id)
        .where(
            tables.messages.c.chat_id == chat_id,
            tables.messages.c.uid == message_uid,
            tables.messages.c.completed.is_(False),
        )
    )
    if unit.keys is None:
        source = source.where(tables.chats.c.sealed.is_(False))
    if unit.backend.locks_rows_in_any_statement(unit.connection):
        statement = insert(tables.message_chunks).from_select(
            _CHUNK_COLUMNS, source.with_for_update(**_KEY_SHARE)
        )
        # One statement: no savepoint needed, it changes all or nothing.
        with unit.reading():
            inserted = unit.execute(statement.returning(tables.message_chunks.c.position)).first()
    else:
        with unit.writing():
            locked = unit.execute(
                select(tables.messages.c.position)
                .where(tables.messages.c.chat_id == chat_id, tables.messages.c.uid == message_uid)
                .with_for_update(**_KEY_SHARE)
            ).first()
            statement = insert(tables.message_chunks).from_select(_CHUNK_COLUMNS, source)
            inserted = (
                None
                if locked is None
                else unit.execute(statement.returning(tables.message_chunks.c.position)).first()
            )
    if inserted is None:
        _explain_missing_message(unit, chat_id, message_uid)


_CHUNK_COLUMNS = ["chat_id", "message_position", "position", "tool_call_index", "text", "chat_user_id"]
_KEY_SHARE: dict[str, Any] = {"read": True, "key_share": True, "of": tables.messages}


def _check_tool_call_index(unit: Unit, /, chat_id: str, index: object) -> None:
    if not is_whole_number(index) or index < 0:
        raise InvalidArgument(
            "tool_call_index must be a whole number >= 0", argument="tool_call_index", chat_id=chat_id
        )
    most = (unit.limits or DEFAULT_LIMITS).max_tool_calls
    if index >= most:  # reading the message makes a call for every index up to this one
        raise InvalidArgument(
            f"tool_call_index {index} is past the last of the {most} tool calls a message may have",
            argument="tool_call_index",
            chat_id=chat_id,
        )


def complete_message(unit: Unit, /, chat_id: str, message_uid: str, **fields: Any) -> Message:
    """Finish a streamed message: fold its chunks into its content (and tool
    call arguments), set ``completed`` and any given fields (``model``,
    ``finish_reason``, ``usage``...), and drop the chunks, in one transaction.

    Returns:
        The completed message.

    Raises:
        InvalidArgument: an unknown or completed message.
        InvalidDocument: fragments for a tool call that cannot take text
            (unless ``tool_calls`` is given), or a message that is not valid.
    """
    require_text(message_uid, "message_uid")
    moment = now()
    with unit.writing():
        bump(unit, chat_id, None, moment)
        found = stored_message(unit, chat_id, message_uid)
        if found is None or found["completed"]:
            _explain_missing_message(unit, chat_id, message_uid)
        position = found["position"]
        data = message_data(unit, chat_id, found)
        chunks = select(tables.message_chunks).where(
            tables.message_chunks.c.chat_id == chat_id, tables.message_chunks.c.message_position == position
        )
        stored_chunks = list(unit.execute(chunks.order_by(*DOCUMENT_ORDER[tables.message_chunks])).mappings())
        unfolded = fold_chunks(
            data, sealing.open_message_rows(unit, chat_id, "message_chunks", stored_chunks)
        )
        if unfolded and "tool_calls" not in fields:
            raise InvalidDocument(
                "the streamed fragments cannot be added to a tool call that is not an object with "
                "string text; give tool_calls=... to replace the calls",
                chat_id=chat_id,
                message_index=position,
                field=unfolded[0],
            )
        data.update(fields)
        data["completed"] = True
        parsed = parse_messages([data], chat_id=chat_id, first_index=position, limits=unit.limits)
        (message,) = redact_messages(unit.redactor, chat_id, parsed)
        unit.execute(
            delete_rows(tables.message_chunks).where(
                tables.message_chunks.c.chat_id == chat_id,
                tables.message_chunks.c.message_position == position,
            )
        )
        rewrite_message(unit, found, message, moment)
        searching.changed(unit, chat_id, position)
    return message


def _explain_missing_message(unit: Unit, /, chat_id: str, message_uid: str) -> NoReturn:
    require_chat(unit, chat_id)
    if unit.keys is None and sealing.is_sealed(unit, chat_id):
        sealing.key_of_chat(unit, chat_id)  # raises: a sealed chat needs the keys
    with unit.reading():
        completed = unit.execute(
            select(tables.messages.c.completed).where(
                tables.messages.c.chat_id == chat_id, tables.messages.c.uid == message_uid
            )
        ).scalar()
    reason = "the message is already complete" if completed else f"no message with uid {quoted(message_uid)}"
    raise InvalidArgument(reason, argument="message_uid", chat_id=chat_id)
