"""What the integrations share: a framework's session is one chat of the
archive, created with its first messages for the session's user."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from chatarchive._api import AsyncChatArchive, ChatArchive
from chatarchive._arguments import require_text
from chatarchive._document import ChatDocument, Message
from chatarchive._exceptions import ChatNotFound, ConflictError, InvalidArgument

__all__ = ["SessionChat", "async_archive", "require_archive", "sync_archive"]

#: How often ``pop`` reads the last message again when another writer changed
#: the chat between its read and its cut.
_POP_ATTEMPTS = 5


def require_archive(archive: object) -> None:
    if not isinstance(archive, (ChatArchive, AsyncChatArchive)):
        raise InvalidArgument(
            f"archive must be a ChatArchive or an AsyncChatArchive, not {type(archive).__name__}",
            argument="archive",
        )


def sync_archive(archive: ChatArchive | AsyncChatArchive) -> ChatArchive:
    """The archive, for the sync methods."""
    if not isinstance(archive, ChatArchive):
        raise InvalidArgument("an AsyncChatArchive takes the async methods", argument="archive")
    return archive


def async_archive(archive: ChatArchive | AsyncChatArchive) -> AsyncChatArchive:
    """The archive, for the async methods."""
    if not isinstance(archive, AsyncChatArchive):
        raise InvalidArgument("a ChatArchive takes the sync methods", argument="archive")
    return archive


@dataclass(frozen=True)
class SessionChat:
    """The chat ``chat_id`` of ``archive``, created for ``user_id`` (with
    ``metadata``) when its first messages are added."""

    archive: ChatArchive | AsyncChatArchive
    chat_id: str
    user_id: str | None = None
    metadata: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        require_archive(self.archive)
        require_text(self.chat_id, "chat_id")

    def sync(self) -> ChatArchive:
        return sync_archive(self.archive)

    def asynchronous(self) -> AsyncChatArchive:
        return async_archive(self.archive)

    def add(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """Append ``messages`` to the chat, creating it if it does not exist
        (no messages: nothing to do, no chat made)."""
        archive = self.sync()
        if not messages:
            return
        try:
            archive.append(self.chat_id, messages)
        except ChatNotFound:
            try:
                archive.save(self._new(messages), expected_version=0)
            except ConflictError:  # created meanwhile: append after what it holds
                archive.append(self.chat_id, messages)

    async def aadd(self, messages: Sequence[Mapping[str, Any]]) -> None:
        """``add``, on an ``AsyncChatArchive``."""
        archive = self.asynchronous()
        if not messages:
            return
        try:
            await archive.append(self.chat_id, messages)
        except ChatNotFound:
            try:
                await archive.save(self._new(messages), expected_version=0)
            except ConflictError:
                await archive.append(self.chat_id, messages)

    def _new(self, messages: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
        chat: dict[str, Any] = {"chat_id": self.chat_id, "messages": list(messages)}
        if self.user_id is not None:
            chat["user_id"] = self.user_id
        if self.metadata is not None:
            chat["metadata"] = dict(self.metadata)
        return chat

    def pop(self) -> Message | None:
        """Delete the chat's last message and return it (``None``: there is
        none). The read and the cut are one version apart, so that of two
        callers popping at once each gets a message of its own."""
        archive = self.sync()
        for _ in range(_POP_ATTEMPTS):
            try:
                popped = _last(archive.get(self.chat_id))
                if popped is None:
                    return None
                archive.truncate(self.chat_id, popped[0], expected_version=popped[1], delete=True)
            except ChatNotFound:
                return None
            except ConflictError:  # another writer came first: read the last message again
                continue
            return popped[2]
        raise ConflictError(f"chat {self.chat_id!r} kept changing; no message was popped")

    async def apop(self) -> Message | None:
        """``pop``, on an ``AsyncChatArchive``."""
        archive = self.asynchronous()
        for _ in range(_POP_ATTEMPTS):
            try:
                popped = _last(await archive.get(self.chat_id))
                if popped is None:
                    return None
                await archive.truncate(self.chat_id, popped[0], expected_version=popped[1], delete=True)
            except ChatNotFound:
                return None
            except ConflictError:
                continue
            return popped[2]
        raise ConflictError(f"chat {self.chat_id!r} kept changing; no message was popped")


def _last(document: ChatDocument) -> tuple[int, int | None, Message] | None:
    """What popping the document's last message takes: how many messages stay,
    the version read, and the message (``None``: no messages)."""
    if not document.messages:
        return None
    return len(document.messages) - 1, document.version, document.messages[-1]
