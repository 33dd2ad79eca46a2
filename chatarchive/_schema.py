"""The normalized schema: tables only, no behaviour.

Every child table leads its primary key and foreign keys with ``chat_id``, so
the schema can be distributed by chat (Citus) without changing any key.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, fields
from datetime import datetime
from typing import Any

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    Table,
    UniqueConstraint,
)
from sqlalchemy import (
    text as sql_text,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ._types import ArchiveText, JsonObject, OrderedJson, UTCDateTime, Vector

__all__ = [
    "DOCUMENT_ORDER",
    "IDS_PER_STATEMENT",
    "ON_ACTIVE_PATH",
    "SCHEMA_REVISION",
    "SEARCH_OBJECTS",
    "SEARCH_TERMS",
    "TAIL_START",
    "VECTOR_INDEX",
    "VERSION_TABLE",
    "AttachmentRow",
    "Base",
    "ChatRow",
    "CheckpointBlobRow",
    "CheckpointRow",
    "CheckpointWriteRow",
    "ChunkRow",
    "ContentPartRow",
    "FeedbackRow",
    "MessageRow",
    "ModelPriceRow",
    "SettingRow",
    "Tables",
    "TagRow",
    "ToolCallRow",
    "UserKeyRow",
    "active_path_filter",
    "described_by_models",
    "in_pieces",
    "is_archive_table",
    "metadata",
    "one_of_ours",
    "tables",
    "tail_filter",
]

NAMING_CONVENTION = {
    "ix": "ix_%(table_name)s_%(column_0_N_name)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_N_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}

#: The Alembic revision these models correspond to (a test keeps it equal to
#: the newest migration).
SCHEMA_REVISION = "0019"

#: chatarchive's own Alembic version table, so that an application using Alembic
#: for its own tables can share the database.
VERSION_TABLE = "chatarchive_version"

#: Objects that migrations create in SQL the models do not describe: the
#: search terms of each message, a table of ``tsvector`` on PostgreSQL and an
#: FTS5 table on SQLite (which keeps its index in shadow tables named after
#: it), with their index and trigger; and the vector indexes of embedding
#: models. The drift check leaves them alone.
SEARCH_TERMS = "message_terms"
_FTS5_SHADOWS = ("", "_config", "_content", "_data", "_docsize", "_idx")
#: The HNSW index of each embedding model's vectors (PostgreSQL with
#: pgvector), which ``configure_search`` builds: its name begins with this.
VECTOR_INDEX = "ix_embeddings_vectors_"
SEARCH_OBJECTS = (SEARCH_TERMS, VECTOR_INDEX)


def described_by_models(name: str | None, kind: str, reflected: bool) -> bool:
    """Alembic ``include_object`` hook: skip the full-text search objects."""
    return not (
        reflected and name is not None and name.startswith(SEARCH_OBJECTS) and kind in ("table", "index")
    )


def one_of_ours(name: str | None, kind: str, parent_names: object) -> bool:
    """Alembic ``include_name`` hook: compare chatarchive's own tables only. The
    other tables of a database the archive shares with an application are not
    drift (the drift check called them tables to drop)."""
    return kind != "table" or name in metadata.tables


def is_archive_table(name: str) -> bool:
    """Whether the table ``name`` is one that chatarchive's migrations create:
    the archive's tables, its version table and SQLite's full-text tables.

    An application whose own Alembic migrations share the database leaves
    them out of its autogenerate (``include_name``), which otherwise writes a
    migration that drops them.
    """
    return (
        name in metadata.tables
        or name == VERSION_TABLE
        or any(name == SEARCH_TERMS + shadow for shadow in _FTS5_SHADOWS)
    )


#: The four forms a message's ``content`` can take.
CONTENT_FORMS = ("string", "parts", "null", "absent")


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {  # noqa: RUF012 - SQLAlchemy reads it as a ClassVar
        str: ArchiveText(),
        int: Integer(),
        float: Double(),
        datetime: UTCDateTime(),
        dict[str, Any]: JsonObject(),
    }


metadata = Base.metadata


def _chat_fk() -> Any:
    return ForeignKey("chats.chat_id", ondelete="CASCADE")


class ChatRow(Base):
    """One row per chat; ``extra`` holds the document's unknown keys."""

    __tablename__ = "chats"

    chat_id: Mapped[str] = mapped_column(primary_key=True)
    user_id: Mapped[str | None]
    title: Mapped[str | None]
    model: Mapped[str | None]
    model_settings: Mapped[dict[str, Any] | None]
    workflow: Mapped[dict[str, Any] | None]
    metadata_: Mapped[dict[str, Any] | None] = mapped_column("metadata")
    extra: Mapped[dict[str, Any] | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    message_count: Mapped[int]
    version: Mapped[int]
    ordered_json: Mapped[dict[str, Any] | None] = mapped_column(OrderedJson())
    active_leaf: Mapped[int | None]
    path_length: Mapped[int] = mapped_column(server_default=sql_text("0"))
    search_from: Mapped[int | None]
    sealed: Mapped[bool] = mapped_column(Boolean(), server_default=sql_text("false"))

    __table_args__ = (
        Index(None, "user_id", "updated_at", "chat_id"),
        Index(None, "updated_at", "chat_id"),
        Index(
            "ix_chats_search_pending",
            "updated_at",
            "chat_id",
            postgresql_where=sql_text("search_from IS NOT NULL"),
            sqlite_where=sql_text("search_from IS NOT NULL"),
        ),
        CheckConstraint("message_count >= 0", name="message_count_not_negative"),
        CheckConstraint("version >= 1", name="version_positive"),
        CheckConstraint("path_length >= 0 AND path_length <= message_count", name="path_length_in_range"),
    )


class TagRow(Base):
    """A chat's tags, in the order the document lists them."""

    __tablename__ = "chat_tags"

    chat_id: Mapped[str] = mapped_column(_chat_fk(), primary_key=True)
    tag: Mapped[str] = mapped_column(primary_key=True)
    position: Mapped[int]

    chat_user_id: Mapped[str | None]

    __table_args__ = (Index(None, "tag"),)


class MessageRow(Base):
    """One row per message of a chat's tree; ``position`` is 0-based and
    gapless within a chat, in the order the messages were added, so a parent
    always comes before its children (``parent_position < position``, which
    also makes a cycle impossible). ``parent_position`` is no foreign key: a
    check per inserted row would slow every ingest, and the archive's writes,
    which add and remove messages in one module, keep it right. A string
    content is ``text``; the parts of a list content are rows of content_parts."""

    __tablename__ = "messages"

    chat_id: Mapped[str] = mapped_column(_chat_fk(), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    uid: Mapped[str]
    role: Mapped[str]
    name: Mapped[str | None]
    tool_call_id: Mapped[str | None]
    content_form: Mapped[str]
    text: Mapped[str | None]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime | None]
    completed: Mapped[bool]
    model: Mapped[str | None]
    finish_reason: Mapped[str | None]
    prompt_tokens: Mapped[int | None]
    completion_tokens: Mapped[int | None]
    total_tokens: Mapped[int | None]
    extra: Mapped[dict[str, Any] | None]
    ordered_json: Mapped[dict[str, Any] | None] = mapped_column(OrderedJson())
    parent_position: Mapped[int | None]
    sibling_index: Mapped[int] = mapped_column(server_default=sql_text("0"))
    on_path: Mapped[bool] = mapped_column(Boolean(), server_default=sql_text("true"))

    chat_user_id: Mapped[str | None]

    __table_args__ = (
        UniqueConstraint("chat_id", "uid"),
        # Time ranges of message analytics (daily_usage since/until) read only that range.
        Index(None, "created_at"),
        # Finds the tool message answering a call (the tool_call_results view).
        Index(
            "ix_messages_tool_results",
            "chat_id",
            "tool_call_id",
            "position",
            postgresql_where=sql_text("role = 'tool'"),
            sqlite_where=sql_text("role = 'tool'"),
        ),
        # Finds legacy function calls without reading every message (tool_call_results).
        Index(
            "ix_messages_function_calls",
            "chat_id",
            "position",
            postgresql_where=sql_text(
                "extra IS NOT NULL AND jsonb_typeof(extra->'function_call') = 'object'"
            ),
            sqlite_where=sql_text("extra IS NOT NULL AND json_type(extra, '$.function_call') = 'object'"),
        ),
        CheckConstraint("position >= 0", name="position_not_negative"),
        CheckConstraint("parent_position < position", name="parent_comes_first"),
        CheckConstraint("sibling_index >= 0", name="sibling_index_not_negative"),
        CheckConstraint("content_form IN ('string', 'parts', 'null', 'absent')", name="content_form_known"),
    )


class ContentPartRow(Base):
    """One row per part of a list content."""

    __tablename__ = "content_parts"

    chat_id: Mapped[str] = mapped_column(primary_key=True)
    message_position: Mapped[int] = mapped_column(primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    type: Mapped[str]
    text: Mapped[str | None]
    data: Mapped[dict[str, Any] | None]
    ordered_json: Mapped[dict[str, Any] | None] = mapped_column(OrderedJson())
    attachment_sha256: Mapped[str | None]
    attachment_path: Mapped[list[str | int] | None] = mapped_column(JsonObject())

    chat_user_id: Mapped[str | None]

    __table_args__ = (
        ForeignKeyConstraint(
            ["chat_id", "message_position"],
            ["messages.chat_id", "messages.position"],
            ondelete="CASCADE",
        ),
        Index(
            "ix_content_parts_attachments",
            "attachment_sha256",
            postgresql_where=sql_text("attachment_sha256 IS NOT NULL"),
            sqlite_where=sql_text("attachment_sha256 IS NOT NULL"),
        ),
    )


class AttachmentRow(Base):
    """The bytes of an attachment of a user's content parts, stored once by
    their SHA-256 (``chatarchive._attachments``)."""

    __tablename__ = "attachments"

    user_id: Mapped[str] = mapped_column(primary_key=True)
    sha256: Mapped[str] = mapped_column(primary_key=True)
    media_type: Mapped[str]
    size: Mapped[int] = mapped_column(BigInteger())
    data: Mapped[bytes] = mapped_column(LargeBinary())

    __table_args__ = (CheckConstraint("size >= 0", name="size_not_negative"),)


class UserKeyRow(Base):
    """A user's data key, wrapped (``chatarchive.encryption``)."""

    __tablename__ = "user_keys"

    user_id: Mapped[str] = mapped_column(primary_key=True)
    wrapped: Mapped[bytes] = mapped_column(LargeBinary())
    created_at: Mapped[datetime]


class ToolCallRow(Base):
    """One row per tool call of an assistant message."""

    __tablename__ = "tool_calls"

    chat_id: Mapped[str] = mapped_column(primary_key=True)
    message_position: Mapped[int] = mapped_column(primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    call_id: Mapped[str | None]
    type: Mapped[str | None]
    name: Mapped[str | None]
    arguments: Mapped[str | None]
    data: Mapped[dict[str, Any] | None]
    ordered_json: Mapped[dict[str, Any] | None] = mapped_column(OrderedJson())

    chat_user_id: Mapped[str | None]

    __table_args__ = (
        ForeignKeyConstraint(
            ["chat_id", "message_position"],
            ["messages.chat_id", "messages.position"],
            ondelete="CASCADE",
        ),
        Index(None, "chat_id", "call_id"),
    )


class FeedbackRow(Base):
    """Human feedback on a chat, or on one of its messages (``message_uid``)."""

    __tablename__ = "feedback"

    chat_id: Mapped[str] = mapped_column(_chat_fk(), primary_key=True)
    id: Mapped[str] = mapped_column(primary_key=True)
    position: Mapped[int]
    message_uid: Mapped[str | None]
    user_id: Mapped[str | None]
    score: Mapped[float | None]
    label: Mapped[str | None]
    comment: Mapped[str | None]
    created_at: Mapped[datetime]
    extra: Mapped[dict[str, Any] | None]
    ordered_json: Mapped[dict[str, Any] | None] = mapped_column(OrderedJson())

    chat_user_id: Mapped[str | None]

    __table_args__ = (
        ForeignKeyConstraint(
            ["chat_id", "message_uid"], ["messages.chat_id", "messages.uid"], ondelete="CASCADE"
        ),
    )


class ChunkRow(Base):
    """A streamed piece of a message still being written (``completed`` false):
    text for its content, or argument text for one of its tool calls."""

    __tablename__ = "message_chunks"

    chat_id: Mapped[str] = mapped_column(primary_key=True)
    message_position: Mapped[int] = mapped_column(primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    tool_call_index: Mapped[int | None]
    text: Mapped[str]

    chat_user_id: Mapped[str | None]

    __table_args__ = (
        ForeignKeyConstraint(
            ["chat_id", "message_position"],
            ["messages.chat_id", "messages.position"],
            ondelete="CASCADE",
        ),
    )


class CheckpointRow(Base):
    """A checkpoint of a graph's thread (the chat ``chat_id``): the state of
    the graph at one step, serialized by the graph's serializer without its
    channels' values, which are rows of ``checkpoint_blobs``."""

    __tablename__ = "checkpoints"

    chat_id: Mapped[str] = mapped_column(_chat_fk(), primary_key=True)
    checkpoint_ns: Mapped[str] = mapped_column(primary_key=True)
    checkpoint_id: Mapped[str] = mapped_column(primary_key=True)
    parent_checkpoint_id: Mapped[str | None]
    run_id: Mapped[str | None]
    type: Mapped[str]
    checkpoint: Mapped[bytes] = mapped_column(LargeBinary())
    metadata_type: Mapped[str]
    metadata_: Mapped[bytes] = mapped_column("metadata", LargeBinary())
    channel_versions: Mapped[dict[str, Any]]
    created_at: Mapped[datetime]

    chat_user_id: Mapped[str | None]

    __table_args__ = (Index(None, "run_id"),)


class CheckpointBlobRow(Base):
    """The value of one channel of a thread at one version: serialized, or,
    for a channel of messages, the message ending its path in the chat."""

    __tablename__ = "checkpoint_blobs"

    chat_id: Mapped[str] = mapped_column(_chat_fk(), primary_key=True)
    checkpoint_ns: Mapped[str] = mapped_column(primary_key=True)
    channel: Mapped[str] = mapped_column(primary_key=True)
    version: Mapped[str] = mapped_column(primary_key=True)
    type: Mapped[str]
    blob: Mapped[bytes | None] = mapped_column(LargeBinary())
    message_uid: Mapped[str | None]

    chat_user_id: Mapped[str | None]

    __table_args__ = (
        # A message a checkpoint holds is not deleted from under it.
        ForeignKeyConstraint(["chat_id", "message_uid"], ["messages.chat_id", "messages.uid"]),
    )


class CheckpointWriteRow(Base):
    """A write of a task to a channel, pending at a checkpoint."""

    __tablename__ = "checkpoint_writes"

    chat_id: Mapped[str] = mapped_column(_chat_fk(), primary_key=True)
    checkpoint_ns: Mapped[str] = mapped_column(primary_key=True)
    checkpoint_id: Mapped[str] = mapped_column(primary_key=True)
    task_id: Mapped[str] = mapped_column(primary_key=True)
    idx: Mapped[int] = mapped_column(primary_key=True)
    channel: Mapped[str]
    type: Mapped[str]
    blob: Mapped[bytes] = mapped_column(LargeBinary())
    task_path: Mapped[str]

    chat_user_id: Mapped[str | None]


class EmbeddingRow(Base):
    """The vector of a message's text by an embedding model, for search by meaning."""

    __tablename__ = "embeddings"

    chat_id: Mapped[str] = mapped_column(primary_key=True)
    message_position: Mapped[int] = mapped_column(primary_key=True)
    model: Mapped[str] = mapped_column(primary_key=True)
    dimension: Mapped[int]
    embedding: Mapped[list[float]] = mapped_column(Vector())

    chat_user_id: Mapped[str | None]

    __table_args__ = (
        ForeignKeyConstraint(
            ["chat_id", "message_position"],
            ["messages.chat_id", "messages.position"],
            ondelete="CASCADE",
        ),
    )


class ModelPriceRow(Base):
    """A model's prices per million tokens from ``valid_from`` on, until the
    model's next price (``valid_until``, which the archive keeps)."""

    __tablename__ = "model_prices"

    model: Mapped[str] = mapped_column(primary_key=True)
    valid_from: Mapped[datetime] = mapped_column(primary_key=True)
    valid_until: Mapped[datetime | None]
    provider: Mapped[str | None]
    currency: Mapped[str]
    input_per_million: Mapped[float]
    output_per_million: Mapped[float]
    cached_input_per_million: Mapped[float | None]
    reasoning_per_million: Mapped[float | None]

    __table_args__ = (
        CheckConstraint(
            "input_per_million >= 0 AND output_per_million >= 0 "
            "AND (cached_input_per_million IS NULL OR cached_input_per_million >= 0) "
            "AND (reasoning_per_million IS NULL OR reasoning_per_million >= 0)",
            name="prices_not_negative",
        ),
        CheckConstraint("valid_until IS NULL OR valid_until > valid_from", name="valid_until_after_from"),
    )


class SettingRow(Base):
    """The archive's settings, by name (its search configuration)."""

    __tablename__ = "archive_settings"

    name: Mapped[str] = mapped_column(primary_key=True)
    value: Mapped[str]


SEALED_COMMENT = (
    "Whether the chat's text (messages.text, content_parts.text and data, tool_calls.arguments, "
    "message_chunks.text) is sealed with its user's key (user_keys): AES-256-GCM, base64."
)
USER_KEYS_COMMENT = (
    "Each user's data key, wrapped by the application's master key: deleting it leaves the user's "
    "sealed chats unreadable."
)

ATTACHMENTS_COMMENT = (
    "The bytes of images, audio and files that content parts gave as base64, stored once per user "
    "by their SHA-256 (with attachments stored once); the parts refer to them."
)
ATTACHMENT_SHA256_COMMENT = "The attachment holding the part's base64 payload (null: the part holds it)."
ATTACHMENT_PATH_COMMENT = (
    "Where in data the payload was (a JSON array of keys and indexes); the value there keeps what came "
    "before it (a data URL's prefix)."
)

EMBEDDINGS_COMMENT = (
    "The vector of each message's text by the archive's embedding model, for search by meaning "
    "(written with the search terms, or by chatarchive db index)."
)

MODEL_PRICES_COMMENT = (
    "Models' prices per million tokens, each valid from a moment until the model's next price "
    "(chatarchive prices load); the view message_costs prices each message by them."
)

#: What every table and column means; on PostgreSQL these are the COMMENTs that
#: ``\d+`` shows (set by migration 0002).
TABLE_COMMENTS = {
    "chats": "One row per chat document.",
    "chat_tags": "A chat's tags, in the document's order.",
    "messages": (
        "One row per message of the chat's tree; position is 0-based and gapless, in the order "
        "the messages were added. on_path marks the active path."
    ),
    "content_parts": "Ordered content parts of messages whose content is a list of parts.",
    "tool_calls": "Tool calls made by assistant messages.",
    "attachments": ATTACHMENTS_COMMENT,
    "user_keys": USER_KEYS_COMMENT,
    "feedback": "Human feedback on a chat, or on one of its messages.",
    "message_chunks": "Streamed pieces of messages still being written; folded in when complete.",
    "archive_settings": "The archive's settings (its search configuration), by name.",
    "checkpoints": (
        "Checkpoints of graphs' threads (LangGraph): the graph's state at a step, serialized without its "
        "channels' values."
    ),
    "checkpoint_blobs": (
        "Values of a thread's channels by version: serialized, or the last message of a path for a "
        "channel of messages."
    ),
    "checkpoint_writes": "Writes of tasks to channels, pending at a checkpoint.",
    "embeddings": EMBEDDINGS_COMMENT,
    "model_prices": MODEL_PRICES_COMMENT,
}
CHAT_USER_COMMENT = (
    "The chat's user (chats.user_id), kept in step with it: what row-level security reads "
    "(a policy cannot look the chat up on a distributed archive)."
)
ORDERED_JSON_COMMENT = (
    "The row's JSON values whose key order jsonb would not keep, as given, by column name "
    "(JSON text); null when jsonb keeps every order."
)
COLUMN_COMMENTS = {
    "chats": {
        "chat_id": "The chat's id (1-255 characters).",
        "user_id": "The user the chat belongs to.",
        "title": "The chat's title.",
        "model": "The chosen model's name.",
        "model_settings": "The chosen model's settings (JSON object).",
        "workflow": "The workflow context (JSON object); its name is workflow->>'name'.",
        "metadata": "Application metadata (JSON object).",
        "extra": "The document's unknown keys, and explicit nulls of known fields (JSON object).",
        "created_at": "When the chat was created.",
        "updated_at": "When the chat was last written.",
        "message_count": "Number of messages, every branch's (also the next message's position).",
        "version": "Incremented by every write; for optimistic concurrency.",
        "ordered_json": ORDERED_JSON_COMMENT,
        "active_leaf": "Position of the last message of the active path (null: the path is empty).",
        "path_length": "Number of messages on the active path (message_count when the chat has no branches).",
        "search_from": (
            "Position of the first message whose search terms are still to be indexed "
            "(null: the chat is searchable as written)."
        ),
        "sealed": SEALED_COMMENT,
    },
    "user_keys": {
        "user_id": "The user.",
        "wrapped": "The user's data key, wrapped (encrypted) by the application's master key or its KMS.",
        "created_at": "When the key was made.",
    },
    "archive_settings": {
        "name": "The setting's name (search_language, search_cjk, search_indexing).",
        "value": "The setting's value.",
    },
    "chat_tags": {
        "chat_id": "The chat.",
        "tag": "The tag.",
        "position": "The tag's place in the document's list.",
        "chat_user_id": CHAT_USER_COMMENT,
    },
    "messages": {
        "chat_id": "The chat.",
        "position": "0-based place in the chat, gapless, in the order the messages were added.",
        "uid": "Stable message id, unique within the chat.",
        "role": "system, developer, user, assistant, tool, function, or any other role.",
        "name": "The participant's name (OpenAI 'name').",
        "tool_call_id": "The tool call this message answers (tool messages).",
        "content_form": "How content was given: string, parts, null or absent.",
        "text": "A string content (content_form 'string'); list contents are in content_parts.",
        "created_at": "When the message was created (the time of saving if not given).",
        "updated_at": "When the message was last changed, if given.",
        "completed": "Whether the message is complete (false while streaming).",
        "model": "The model that produced this message.",
        "finish_reason": "Why the model stopped (stop, length, tool_calls, ...).",
        "prompt_tokens": "Prompt tokens of the response that produced this message.",
        "completion_tokens": "Completion tokens of the response that produced this message.",
        "total_tokens": "Total tokens of the response that produced this message.",
        "extra": "Everything else: unknown keys, refusal, audio, function_call, other usage keys (JSON).",
        "ordered_json": ORDERED_JSON_COMMENT,
        "parent_position": "Position of the message this one answers or follows (null: a root).",
        "sibling_index": (
            "0-based place among the messages with the same parent; above 0: a regeneration or edit."
        ),
        "on_path": "Whether the message is on the chat's active path (the root-to-active_leaf path).",
        "chat_user_id": CHAT_USER_COMMENT,
    },
    "content_parts": {
        "chat_id": "The chat.",
        "message_position": "The message's position.",
        "position": "0-based place in the message's content.",
        "type": "text, image_url, input_audio, file, refusal, or any other type.",
        "text": "The text of text and refusal parts.",
        "data": "The rest of the part (JSON object).",
        "ordered_json": ORDERED_JSON_COMMENT,
        "attachment_sha256": ATTACHMENT_SHA256_COMMENT,
        "attachment_path": ATTACHMENT_PATH_COMMENT,
        "chat_user_id": CHAT_USER_COMMENT,
    },
    "attachments": {
        "user_id": (
            "Whose attachment it is: the user of the chats whose parts hold it ('' for chats of no user)."
        ),
        "sha256": "The SHA-256 of the bytes (hex): the attachment's name.",
        "media_type": "Its media type, as the part gave it (else from its first bytes).",
        "size": "Its size in bytes.",
        "data": "The bytes.",
    },
    "tool_calls": {
        "chat_id": "The chat.",
        "message_position": "The assistant message's position.",
        "position": "0-based place in the message's tool_calls.",
        "call_id": "The call's id, matched by the answering message's tool_call_id.",
        "type": "function, custom, or any other type.",
        "name": "The tool's name.",
        "arguments": "The arguments exactly as the model wrote them (custom calls: their input).",
        "data": "Anything else in the call (JSON object).",
        "ordered_json": ORDERED_JSON_COMMENT,
        "chat_user_id": CHAT_USER_COMMENT,
    },
    "message_chunks": {
        "chat_id": "The chat.",
        "message_position": "The message's position.",
        "position": "Order of the chunks.",
        "tool_call_index": "Null for content text; else the tool call whose arguments this continues.",
        "text": "The chunk's text.",
        "chat_user_id": CHAT_USER_COMMENT,
    },
    "checkpoints": {
        "chat_id": "The thread's chat.",
        "checkpoint_ns": "The graph's namespace ('' for the root graph).",
        "checkpoint_id": "The checkpoint's id, increasing with time.",
        "parent_checkpoint_id": "The checkpoint this one follows (null: the thread's first).",
        "run_id": "The run that made the checkpoint.",
        "type": "How checkpoint is serialized (the graph serializer's type).",
        "checkpoint": "The checkpoint without its channels' values, serialized.",
        "metadata_type": "How metadata is serialized.",
        "metadata": "The checkpoint's metadata (source, step, ...), serialized.",
        "channel_versions": "The version of each channel at the checkpoint (JSON object of text).",
        "created_at": "When the checkpoint was stored.",
        "chat_user_id": CHAT_USER_COMMENT,
    },
    "checkpoint_blobs": {
        "chat_id": "The thread's chat.",
        "checkpoint_ns": "The graph's namespace.",
        "channel": "The channel.",
        "version": "The channel's version (as text).",
        "type": "How blob is serialized; 'chatarchive:messages' for messages kept as the chat's rows.",
        "blob": "The serialized value (null for messages kept as rows, or an empty channel).",
        "message_uid": "For messages kept as rows: the uid of their path's last message (null: none).",
        "chat_user_id": CHAT_USER_COMMENT,
    },
    "embeddings": {
        "chat_id": "The chat.",
        "message_position": "The message's position.",
        "model": "The embedding model's name (the archive's embedder).",
        "dimension": "How many numbers the vector has.",
        "embedding": (
            "The vector of the message's text, scaled to length 1 (real[]; 32-bit floats on SQLite)."
        ),
        "chat_user_id": CHAT_USER_COMMENT,
    },
    "model_prices": {
        "model": "The model's name, as messages.model (or chats.model) has it.",
        "valid_from": "From when the price applies (to messages created then or later).",
        "valid_until": "Until when it applies (exclusive): the model's next valid_from; null: still.",
        "provider": "Who sells the model (for people; the model's name picks the price).",
        "currency": "The prices' currency (one for the whole archive).",
        "input_per_million": "Price of a million prompt (input) tokens.",
        "output_per_million": "Price of a million completion (output) tokens.",
        "cached_input_per_million": "Price of a million cached prompt tokens (null: as input).",
        "reasoning_per_million": "Price of a million reasoning tokens (null: as output).",
    },
    "checkpoint_writes": {
        "chat_id": "The thread's chat.",
        "checkpoint_ns": "The graph's namespace.",
        "checkpoint_id": "The checkpoint the write is pending at.",
        "task_id": "The task that wrote.",
        "idx": "The write's place among the task's writes (negative for special channels).",
        "channel": "The channel written.",
        "type": "How blob is serialized.",
        "blob": "The value written, serialized.",
        "task_path": "The task's path in the graph.",
        "chat_user_id": CHAT_USER_COMMENT,
    },
    "feedback": {
        "chat_id": "The chat.",
        "id": "The feedback item's id.",
        "position": "Order of the feedback items.",
        "message_uid": "The message the feedback is about; null for the whole chat.",
        "user_id": "Who gave the feedback.",
        "score": "The score: thumbs up/down as 1/-1, 0, stars, ...",
        "label": "A label such as helpful, wrong, unsafe.",
        "comment": "Free-text comment.",
        "created_at": "When the feedback was given.",
        "extra": "The feedback item's unknown keys (JSON object).",
        "ordered_json": ORDERED_JSON_COMMENT,
        "chat_user_id": CHAT_USER_COMMENT,
    },
}

for _table_name, _comment in TABLE_COMMENTS.items():
    metadata.tables[_table_name].comment = _comment
    for _column_name, _column_comment in COLUMN_COMMENTS[_table_name].items():
        metadata.tables[_table_name].c[_column_name].comment = _column_comment


@dataclass(frozen=True)
class Tables:
    """The archive's tables: the one place the code looks them up by name."""

    chats: Table
    chat_tags: Table
    messages: Table
    content_parts: Table
    tool_calls: Table
    feedback: Table
    message_chunks: Table
    archive_settings: Table
    checkpoints: Table
    checkpoint_blobs: Table
    checkpoint_writes: Table
    embeddings: Table
    model_prices: Table
    attachments: Table
    user_keys: Table


#: The archive's tables (``tables.chats``, ``tables.messages``...).
tables = Tables(**{column.name: metadata.tables[column.name] for column in fields(Tables)})


def _ordered(table: str, *columns: str) -> tuple[Table, tuple[Column[Any], ...]]:
    return metadata.tables[table], tuple(metadata.tables[table].c[name] for name in columns)


#: The child tables of a chat, each with the columns that put its rows in the
#: document's order (``chat_id`` first).
DOCUMENT_ORDER: dict[Table, tuple[Column[Any], ...]] = dict(
    (
        _ordered("chat_tags", "chat_id", "position"),
        _ordered("messages", "chat_id", "position"),
        _ordered("content_parts", "chat_id", "message_position", "position"),
        _ordered("tool_calls", "chat_id", "message_position", "position"),
        _ordered("feedback", "chat_id", "position"),
        _ordered("message_chunks", "chat_id", "message_position", "position"),
    )
)

#: Which rows of each child table (alias ``x``) belong to the chat's active
#: path: the messages on it, and what belongs to them. A chat without branches
#: (``path_length = message_count``) needs no filter. ``{chat}`` is the chat's
#: id (``active_path_filter``).
_ON_PATH_MESSAGE = (
    "EXISTS (SELECT 1 FROM messages m WHERE m.chat_id = {chat} AND m.position = x.message_position "
    "AND m.on_path)"
)
_ON_ACTIVE_PATH: dict[str, str] = {
    "messages": "x.on_path",
    "content_parts": _ON_PATH_MESSAGE,
    "tool_calls": _ON_PATH_MESSAGE,
    "message_chunks": _ON_PATH_MESSAGE,
    "feedback": (
        "(x.message_uid IS NULL OR EXISTS (SELECT 1 FROM messages m WHERE m.chat_id = {chat} "
        "AND m.uid = x.message_uid AND m.on_path))"
    ),
}
#: The tables whose rows ``active_path_filter`` picks.
ON_ACTIVE_PATH = frozenset(_ON_ACTIVE_PATH)


def active_path_filter(table: str, chat: str = "x.chat_id") -> str:
    """The SQL condition of the rows of ``table`` (alias ``x``) on the chat's
    active path; ``chat``: the chat's id (a parameter, for a read that names
    the chat in every part)."""
    return _ON_ACTIVE_PATH[table].format(chat=chat)


#: Which rows of each child table (alias ``x``) belong to the messages from
#: position ``{cut}`` on: the tail of a path (``tail_filter``).
_FROM_POSITION: dict[str, str] = {
    "messages": "x.position >= {cut}",
    "content_parts": "x.message_position >= {cut}",
    "tool_calls": "x.message_position >= {cut}",
    "message_chunks": "x.message_position >= {cut}",
    "feedback": (
        "(x.message_uid IS NULL OR EXISTS (SELECT 1 FROM messages m WHERE m.chat_id = {chat} "
        "AND m.uid = x.message_uid AND m.position >= {cut}))"
    ),
}


def tail_filter(table: str, cut: str, chat: str = "x.chat_id") -> str:
    """The SQL condition of the rows of ``table`` (alias ``x``, one of
    ``ON_ACTIVE_PATH``) that belong to the messages from position ``cut`` (an
    SQL expression) on."""
    return _FROM_POSITION[table].format(chat=chat, cut=cut)


#: The position of the first of the last ``:last`` messages of the active path
#: of the chat ``{chat}`` (0 when it has fewer); ``{row}`` is the chat's row.
TAIL_START = (
    "(SELECT coalesce(min(t.position), 0) FROM (SELECT m.position FROM messages m WHERE m.chat_id = {chat} "
    "AND ({row}.path_length = {row}.message_count OR m.on_path) ORDER BY m.position DESC LIMIT :last) t)"
)


#: Ids looked up per statement (see ``in_pieces``).
IDS_PER_STATEMENT = 10_000


def in_pieces(ids: Sequence[str]) -> Iterator[Sequence[str]]:
    """``ids`` in pieces small enough for one ``IN (...)`` (PostgreSQL takes at
    most 65,535 parameters, SQLite 32,766 or 250,000 as built)."""
    for start in range(0, len(ids), IDS_PER_STATEMENT):
        yield ids[start : start + IDS_PER_STATEMENT]
