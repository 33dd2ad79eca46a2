"""Adapters between chatarchive's documents and the formats chat systems already speak.

Each adapter converts to and from ``ChatDocument`` only (never to rows), in
its own module, which declares what it does in ``FORMATS``: one
:class:`Format` record per format name (what a record is, how it is
recognized, imported and exported, which API method records one of its
responses, the objects that look like its records but are not). This package
collects them: ``FORMATS`` holds every record, ``detect`` tries them in their
detection order, and ``matrix()`` says what each one can do: import, export,
record and convert (to OpenAI chat-completions messages, the
``chat-completions`` export). Adding a format is adding one module.
"""

from __future__ import annotations

import importlib
import json
import pkgutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from chatarchive._arguments import require_text
from chatarchive._document import ChatDocument
from chatarchive._exceptions import InvalidArgument, InvalidDocument

from . import anthropic, openai_completions
from ._format import FAMILIES, Format, NearMiss
from ._shapes import kind_of
from .finetune import Filters, Selection

__all__ = [
    "DATASET_FORMATS",
    "EXPORT_FORMATS",
    "FORMATS",
    "IMPORT_FORMATS",
    "RECORDERS",
    "Format",
    "Support",
    "detect",
    "export",
    "gather_streams",
    "matrix",
    "matrix_markdown",
    "to_document",
]

R = TypeVar("R")


def _collected() -> dict[str, Format]:
    """Every format module's records, in the order the documentation lists
    them: by family, then by name."""
    records: list[Format] = []
    for module in pkgutil.iter_modules(__path__):
        if not module.name.startswith("_"):
            records.extend(importlib.import_module(f"{__name__}.{module.name}").FORMATS)
    records.sort(key=lambda record: (FAMILIES.index(record.family), record.name))
    named = {record.name: record for record in records}
    if len(named) != len(records):
        raise RuntimeError("two format modules declare the same format name")
    return named


#: Every format, in the order the documentation lists them.
FORMATS: dict[str, Format] = _collected()

#: The formats imported, in the order auto-detection tries them, the most
#: specific first: an object with a ``messages`` list is a canonical document
#: unless it is a fine-tuning line, an Anthropic request or Open WebUI's chat
#: object, and no other format's key (``conversations``, ``main_messages``...) makes it one of theirs.
IMPORT_FORMATS: dict[str, Format] = {
    record.name: record
    for record in sorted(
        (record for record in FORMATS.values() if record.imports), key=lambda record: record.detection or 0
    )
}

#: The exporters of documents, each given a stored document: formats that
#: hold one path are given its active path.
EXPORT_FORMATS: dict[str, Callable[[ChatDocument], Any]] = {
    name: exporter for name, record in FORMATS.items() if (exporter := record.exporter()) is not None
}

#: Training datasets: the lines of the chats that pass the filters, one per
#: chat (fine-tuning) or one per preference pair.
DATASET_FORMATS: dict[
    str, Callable[[Iterable[ChatDocument], Filters, Selection], Iterator[dict[str, Any]]]
] = {name: record.dataset for name, record in FORMATS.items() if record.dataset is not None}

#: The method of ``ChatArchive`` (and of the repositories) that appends one
#: response of a format's API to a chat.
RECORDERS = {name: record.record for name, record in FORMATS.items() if record.record is not None}

#: Objects that are not chats, or not in a format chatarchive imports, by
#: their signature: what each one looks like.
_NEAR_MISSES: tuple[NearMiss, ...] = tuple(
    miss for record in IMPORT_FORMATS.values() for miss in record.near_misses
)


@dataclass(frozen=True)
class Support:
    """One row of the format matrix."""

    name: str
    what: str
    family: str
    imports: bool
    exports: bool
    record: str | None
    converts: bool
    round_trip: str


def matrix() -> list[Support]:
    """What each format can do: read from the formats' own records, so that
    the documentation's matrix (checked against this by a test) cannot drift.

    Examples:
        >>> [row.record for row in matrix() if row.name == "anthropic"]
        ['record_message']
    """
    return [
        Support(
            name=record.name,
            what=record.what,
            family=record.family,
            imports=record.imports,
            exports=record.exports,
            record=record.record,
            converts=record.imports,  # any imported chat exports as chat-completions
            round_trip=record.round_trip,
        )
        for record in FORMATS.values()
    ]


def matrix_markdown() -> str:
    """The format matrix as a Markdown table (the documentation's)."""
    lines = [
        "| format | kind | what | import | export | record | convert | round trip |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in matrix():
        cells = [
            f"`{row.name}`",
            row.family,
            row.what.replace("|", "\\|"),
            "yes" if row.imports else "-",
            "yes" if row.exports else "-",
            f"`{row.record}`" if row.record else "-",
            "yes" if row.converts else "-",
            row.round_trip,
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def detect(data: Any) -> str:
    """The name of the format ``data`` (a parsed JSON value) is in.

    Raises:
        InvalidDocument: when no format recognizes it.
    """
    for name, record in IMPORT_FORMATS.items():
        if record.looks_like is not None and record.looks_like(data):
            return name
    raise InvalidDocument(_not_a_chat(data))


def _stream_of(value: Any) -> tuple[str, Any] | None:
    """Which stream an event belongs to, ``(kind, key)``, or ``None`` for a
    record that is no stream event."""
    if openai_completions.is_chunk(value):
        return "chunk", value.get("id")
    kind = kind_of(value)
    if kind in anthropic.STREAM_EVENTS:
        return "anthropic", None
    if kind is not None and kind.startswith("response."):
        return "responses", None
    return None


#: The events that start a stream, and those that end one.
_STREAM_STARTS = frozenset({"message_start", "response.created"})
_STREAM_ENDS = frozenset({"message_stop", "response.completed", "response.incomplete", "response.failed"})


def gather_streams(
    records: Iterable[R], value: Callable[[R], Any], joined: Callable[[R, list[Any]], R]
) -> Iterator[R]:
    """``records`` as they come, except that each run of stream events
    (chat-completion chunks of one response, an Anthropic Messages stream
    from ``message_start`` to ``message_stop``, a Responses API stream from
    ``response.created`` to its end) is one record, ``joined(first, events)``:
    JSON Lines written as a stream arrived import as the one message it
    amounts to. ``value(record)`` is a record's JSON value (``None`` for one
    that could not be read)."""
    first: R | None = None
    events: list[Any] = []
    current: tuple[str, Any] | None = None
    for record in records:
        event = value(record)
        stream = _stream_of(event)
        kind = kind_of(event)
        continues = (
            current is not None
            and stream is not None
            and stream[0] == current[0]
            and (stream[0] != "chunk" or stream[1] == current[1] or stream[1] is None)
            and kind not in _STREAM_STARTS
        )
        if not continues and first is not None:
            yield joined(first, events)
            first, events, current = None, [], None
        if stream is None:
            del event
            yield record
            del record  # not held while the next one is read
            continue
        if first is None:
            first, current = record, stream
        events.append(event)
        if kind in _STREAM_ENDS:
            yield joined(first, events)
            first, events, current = None, [], None
    if first is not None:
        yield joined(first, events)


def _not_a_chat(data: Any) -> str:
    """Why ``data`` is refused: what it looks like, or what it lacks."""
    if isinstance(data, dict):
        for matches, what in _NEAR_MISSES:
            if matches(data):
                return f"looks like {what}"
        keys = ", ".join(repr(key) for key in list(data)[:5]) + (", ..." if len(data) > 5 else "")
        shown = "{}" if not data else f"an object with the keys {keys}"
        return (
            f"not a chat in any known format: {shown} has no messages (a chat document has a 'messages' list)"
        )
    if isinstance(data, list):
        if not data:
            return 'not a chat in any known format: [] has no messages (a chat with none is {"messages": []})'
        return "not a chat in any known format: a list that is not a message list (objects with a 'role')"
    kind = (
        "null"
        if data is None
        else "boolean"
        if isinstance(data, bool)
        else "string"
        if isinstance(data, str)
        else "number"
    )
    return f"not a chat in any known format: a JSON {kind}, not an object or a list"


def to_document(data: Any, format: str = "auto") -> ChatDocument:
    """Import one record in ``format`` (``auto``: detect it).

    A record that names no chat id (a bare message list, a ShareGPT record...)
    gets one made from its content, and its messages and feedback without a uid
    or id get ids made from that and their position: importing the same record
    again replaces its chat with the same document instead of adding a copy.
    """
    name = detect(data) if require_text(format, "format") == "auto" else format
    record = IMPORT_FORMATS.get(name)
    if record is None or record.to_document is None:
        raise InvalidArgument(f"unknown import format {format!r}", argument="format")
    document = record.to_document(data)
    if "chat_id" not in document.model_fields_set:
        _identify_by_content(document, data)
    return document


#: The namespace of the name-based (version 5) UUIDs of records without a chat id.
RECORD_NAMESPACE = uuid.UUID("270a51b5-08a3-42ca-b0c1-cf4ef2b1d0a5")


def _identify_by_content(document: ChatDocument, record: Any) -> None:
    """Give ``document`` the chat id of ``record``'s JSON (keys sorted, so that
    their order does not count), and its messages and feedback without a given
    uid or id theirs."""
    try:
        text = json.dumps(record, sort_keys=True, separators=(",", ":"), default=str)
    except (TypeError, ValueError, RecursionError):  # not JSON: the document was valid, keep its random id
        return
    chat = uuid.uuid5(RECORD_NAMESPACE, text)
    document.chat_id = str(chat)
    renamed: dict[str, str] = {}
    for position, message in enumerate(document.messages):
        if "uid" not in message.model_fields_set:
            uid = str(uuid.uuid5(chat, f"message/{position}"))
            renamed[message.uid] = uid
            message.uid = uid
    for message in document.messages:
        if message.parent in renamed:
            message.parent = renamed[message.parent]
    if document.active_leaf in renamed:
        document.active_leaf = renamed[document.active_leaf]
    for position, item in enumerate(document.feedback):
        if "id" not in item.model_fields_set:
            item.id = str(uuid.uuid5(chat, f"feedback/{position}"))
        if item.message_uid in renamed:
            item.message_uid = renamed[item.message_uid]


def export(doc: ChatDocument | Mapping[str, Any], format: str) -> Any:
    """Export one document (a ``ChatDocument``, or a mapping validated into
    one, as ``ChatArchive.save`` takes) in ``format``.

    Raises:
        InvalidDocument: for an unknown format or a document that is not valid.
    """
    if require_text(format, "format") not in EXPORT_FORMATS:
        raise InvalidArgument(f"unknown export format {format!r}", argument="format")
    return EXPORT_FORMATS[format](ChatDocument.parse(doc))
