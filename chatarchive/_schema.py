"""The normalized schema: tables only, no behaviour.

Every child table leads its primary key and foreign keys with ``chat_id``, so
the schema can be distributed by chat (Citus) without changing any key.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import (
    CheckConstraint,
    Double,
    ForeignKey,
    ForeignKeyConstraint,
    Index,
    Integer,
    MetaData,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ._types import ArchiveText, JsonObject, UTCDateTime

__all__ = [
    "SCHEMA_REVISION",
    "VERSION_TABLE",
    "Base",
    "ChatRow",
    "ContentPartRow",
    "FeedbackRow",
    "MessageRow",
    "TagRow",
    "ToolCallRow",
    "metadata",
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
SCHEMA_REVISION = "0001"

#: chatarchive's own Alembic version table, so that an application using Alembic
#: for its own tables can share the database.
VERSION_TABLE = "chatarchive_version"

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

    __table_args__ = (
        Index(None, "user_id", "updated_at", "chat_id"),
        Index(None, "updated_at", "chat_id"),
        CheckConstraint("message_count >= 0", name="message_count_not_negative"),
        CheckConstraint("version >= 1", name="version_positive"),
    )


class TagRow(Base):
    """A chat's tags, in the order the document lists them."""

    __tablename__ = "chat_tags"

    chat_id: Mapped[str] = mapped_column(_chat_fk(), primary_key=True)
    tag: Mapped[str] = mapped_column(primary_key=True)
    position: Mapped[int]

    __table_args__ = (Index(None, "tag"),)


class MessageRow(Base):
    """One row per message; ``position`` is 0-based and gapless within a chat."""

    __tablename__ = "messages"

    chat_id: Mapped[str] = mapped_column(_chat_fk(), primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    uid: Mapped[str]
    role: Mapped[str]
    name: Mapped[str | None]
    tool_call_id: Mapped[str | None]
    content_form: Mapped[str]
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime | None]
    completed: Mapped[bool]
    model: Mapped[str | None]
    finish_reason: Mapped[str | None]
    prompt_tokens: Mapped[int | None]
    completion_tokens: Mapped[int | None]
    total_tokens: Mapped[int | None]
    extra: Mapped[dict[str, Any] | None]

    __table_args__ = (
        UniqueConstraint("chat_id", "uid"),
        CheckConstraint("position >= 0", name="position_not_negative"),
        CheckConstraint("content_form IN ('string', 'parts', 'null', 'absent')", name="content_form_known"),
    )


class ContentPartRow(Base):
    """One row per content part. A string content is one ``text`` part too (its
    message's ``content_form`` says so), so all text sits in one column."""

    __tablename__ = "content_parts"

    chat_id: Mapped[str] = mapped_column(primary_key=True)
    message_position: Mapped[int] = mapped_column(primary_key=True)
    position: Mapped[int] = mapped_column(primary_key=True)
    type: Mapped[str]
    text: Mapped[str | None]
    data: Mapped[dict[str, Any] | None]

    __table_args__ = (
        ForeignKeyConstraint(
            ["chat_id", "message_position"],
            ["messages.chat_id", "messages.position"],
            ondelete="CASCADE",
        ),
    )


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

    __table_args__ = (
        ForeignKeyConstraint(
            ["chat_id", "message_uid"], ["messages.chat_id", "messages.uid"], ondelete="CASCADE"
        ),
    )
