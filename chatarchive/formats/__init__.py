"""Adapters between chatarchive's documents and the formats chat systems already speak.

Each adapter converts to and from ``ChatDocument`` only (never
to rows), in its own module, with the same three functions:

- ``looks_like(data) -> bool``: whether a parsed JSON value is in this format;
- ``to_document(data) -> ChatDocument``: import (raises ``InvalidDocument``);
- ``from_document(doc) -> Any``: export, a JSON-ready value.

``FORMATS`` describes each format, and ``matrix()`` says what each one can
do: import, export, record (the API method that appends one response of
that API to a chat) and convert (to OpenAI chat-completions messages, the
``chat-completions`` export).
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any, TypeVar

from chatarchive._arguments import require_text
from chatarchive._document import ChatDocument
from chatarchive._exceptions import InvalidArgument, InvalidDocument

from . import (
    anthropic,
    canonical,
    chat_completions,
    chatgpt,
    claude_ai,
    finetune,
    gemini,
    langchain,
    llama_index,
    malevich,
    masterbrain,
    open_webui,
    openai_completions,
    openai_messages,
    openai_responses,
    preference,
    pydantic_ai,
    sharegpt,
)
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

#: Formats in the order auto-detection tries them, the most specific first:
#: an object with a ``messages`` list is a canonical document unless it is
#: a fine-tuning line or an Anthropic request, and no other format's key
#: (``conversations``, ``main_messages``...) makes it one of theirs.
IMPORT_FORMATS = {
    "openai-finetune": finetune,
    "anthropic": anthropic,
    "openai-responses": openai_responses,
    "openai-completion": openai_completions,
    "canonical": canonical,
    "masterbrain": masterbrain,
    "chatgpt": chatgpt,
    "claude-ai": claude_ai,
    "open-webui": open_webui,
    "langchain": langchain,
    "pydantic-ai": pydantic_ai,
    "llama-index": llama_index,
    "gemini": gemini,
    "sharegpt": sharegpt,
    "malevich": malevich,
    "openai": openai_messages,
}


def _active_path(exporter: Callable[[ChatDocument], Any]) -> Callable[[ChatDocument], Any]:
    """``exporter``, for a format that holds one path: given the active path."""

    def export(doc: ChatDocument) -> Any:
        return exporter(doc.path_document())

    return export


#: The exporters. ``canonical`` and ``chatgpt`` write the whole tree; the
#: other formats hold one path, and write the active one.
EXPORT_FORMATS: dict[str, Callable[[ChatDocument], Any]] = {
    "canonical": canonical.from_document,
    "openai": _active_path(openai_messages.from_document),
    "masterbrain": _active_path(masterbrain.from_document),
    "malevich": _active_path(malevich.from_document),
    "sharegpt": _active_path(sharegpt.from_document),
    "chatgpt": chatgpt.from_document,
    "claude-ai": claude_ai.from_document,
    "open-webui": open_webui.from_document,
    "langchain": _active_path(langchain.from_document),
    "pydantic-ai": _active_path(pydantic_ai.from_document),
    "llama-index": _active_path(llama_index.from_document),
    "gemini": _active_path(gemini.from_document),
    "anthropic": _active_path(anthropic.from_document),
    "openai-responses": _active_path(openai_responses.from_document),
    "openai-finetune": _active_path(finetune.from_document),
    "chat-completions": chat_completions.from_document,
}


#: Training datasets: the lines of the chats that pass the filters, one per
#: chat (fine-tuning) or one per preference pair.
DATASET_FORMATS: dict[
    str, Callable[[Iterable[ChatDocument], Filters, Selection], Iterator[dict[str, Any]]]
] = {
    "openai-finetune": finetune.select,
    "openai-preference": partial(preference.select, line=preference.openai_preference),
    "dpo": partial(preference.select, line=preference.dpo),
}


@dataclass(frozen=True)
class Format:
    """What a format is, and how exactly its records come back."""

    what: str
    round_trip: str


#: Every format, in the order the documentation lists them.
FORMATS: dict[str, Format] = {
    "canonical": Format("chatarchive's own document JSON", "exact, every branch"),
    "openai": Format("a bare chat-completions message list (one chat)", "exact (messages only)"),
    "openai-completion": Format("a chat completion, or its streamed chunks", "import only: the answer"),
    "chat-completions": Format("any chat as the messages OpenAI's chat-completions API takes", "-"),
    "openai-responses": Format(
        "OpenAI Responses API input items, a Response, or its stream events", "JSON-equal"
    ),
    "anthropic": Format("an Anthropic Messages request, a response, or its stream events", "JSON-equal"),
    "gemini": Format("a Gemini generateContent request, or its contents", "JSON-equal"),
    "langchain": Format("LangChain messages (messages_to_dict or dumpd)", "JSON-equal"),
    "pydantic-ai": Format("Pydantic AI messages, as ModelMessagesTypeAdapter writes them", "JSON-equal"),
    "llama-index": Format("LlamaIndex ChatMessages, as model_dump writes them", "JSON-equal"),
    "chatgpt": Format("a conversation of ChatGPT's conversations.json", "exact, every branch"),
    "claude-ai": Format("a conversation of Claude.ai's conversations.json", "JSON-equal, every branch"),
    "open-webui": Format("a chat of Open WebUI's export", "JSON-equal, every branch"),
    "masterbrain": Format("an Airalogy Masterbrain ChatDoc", "exact"),
    "malevich": Format("a list of Malevich Brain messages", "exact (timestamps as instants)"),
    "sharegpt": Format('{"conversations": [{"from", "value"}]}', "exact"),
    "openai-finetune": Format("OpenAI fine-tuning JSONL", "exact (the keys fine-tuning knows)"),
    "openai-preference": Format("OpenAI preference fine-tuning JSONL", "-"),
    "dpo": Format("DPO JSONL, as TRL reads it", "-"),
}

#: The method of ``ChatArchive`` (and of the repositories) that appends one
#: response of a format's API to a chat.
RECORDERS = {
    "openai-completion": "record_completion",
    "openai-responses": "record_response",
    "anthropic": "record_message",
}


@dataclass(frozen=True)
class Support:
    """One row of the format matrix."""

    name: str
    what: str
    imports: bool
    exports: bool
    record: str | None
    converts: bool
    round_trip: str


def matrix() -> list[Support]:
    """What each format can do: read from the registries themselves, so that
    the documentation's matrix (checked against this by a test) cannot drift.

    Examples:
        >>> [row.record for row in matrix() if row.name == "anthropic"]
        ['record_message']
    """
    exported = EXPORT_FORMATS.keys() | DATASET_FORMATS.keys()
    return [
        Support(
            name=name,
            what=described.what,
            imports=name in IMPORT_FORMATS,
            exports=name in exported,
            record=RECORDERS.get(name),
            converts=name in IMPORT_FORMATS,  # any imported chat exports as chat-completions
            round_trip=described.round_trip,
        )
        for name, described in FORMATS.items()
    ]


def matrix_markdown() -> str:
    """The format matrix as a Markdown table (the documentation's)."""
    lines = [
        "| format | what | import | export | record | convert | round trip |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in matrix():
        cells = [
            f"`{row.name}`",
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
    for name, adapter in IMPORT_FORMATS.items():
        if adapter.looks_like(data):
            return name
    raise InvalidDocument(_not_a_chat(data))


#: Records that are not chats, or are in a format chatarchive does not import,
#: by their signature: what each one is.
_SIGNATURES: tuple[tuple[Callable[[dict[str, Any]], bool], str], ...] = (
    (
        lambda d: str(kind_of(d) or "").startswith("response."),
        "an OpenAI Responses API stream event: a stream's events import together, from response.created "
        "to response.completed (a JSON list of them, or their lines in one file)",
    ),
    (
        lambda d: kind_of(d) in anthropic.STREAM_EVENTS,
        "an Anthropic Messages stream event: a stream's events import together, from message_start to "
        "message_stop (a JSON list of them, or their lines in one file)",
    ),
    (
        lambda d: d.get("type") == "message" and "content" in d,
        "an Anthropic Messages response, but its content is not a list of blocks: use --format anthropic "
        "once it is",
    ),
    (
        lambda d: "conversations" in d,
        "a ShareGPT record, but its 'conversations' is not a list of turns (objects with 'from')",
    ),
    (
        lambda d: "main_messages" in d,
        "a Masterbrain ChatDoc, but its 'main_messages' is not a list, or is empty with no other ChatDoc key",
    ),
    (
        lambda d: "chat_messages" in d,
        "a conversation of a Claude.ai export, but it has no 'uuid' or its 'chat_messages' is not a list",
    ),
    (
        lambda d: isinstance(d.get("mapping"), dict),
        "a ChatGPT conversation, but it has no 'current_node' (the node its user saw last)",
    ),
    (
        lambda d: "contents" in d,
        "a Gemini request, but its 'contents' is not a list of {'role', 'parts'}",
    ),
)


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
        for matches, what in _SIGNATURES:
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
    adapter = IMPORT_FORMATS.get(name)
    if adapter is None:
        raise InvalidArgument(f"unknown import format {format!r}", argument="format")
    document: ChatDocument = adapter.to_document(data)
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
