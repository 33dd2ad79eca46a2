"""Pydantic AI's message history, kept in a chat of the archive.

``ChatArchiveHistory`` stores the ``ModelMessage`` list of an agent's runs
(``result.new_messages()``) in a chat, as the ``pydantic-ai`` format stores
it (see ``chatarchive.formats.pydantic_ai``): user prompts, system prompts,
text, thinking, tool calls and their returns as rows, usage in the token
columns; and gives it back (for ``message_history=``) equal to what went
in. Needs ``pydantic-ai-slim`` (``pip install 'chatarchive[pydantic-ai]'``).

Examples:
    >>> from pydantic_ai.messages import ModelRequest, ModelResponse, TextPart, UserPromptPart
    >>> from chatarchive import ChatArchive
    >>> archive = ChatArchive("sqlite://")
    >>> archive.upgrade()
    >>> history = ChatArchiveHistory(archive, "chat-1", user_id="alice")
    >>> run = [ModelRequest(parts=[UserPromptPart("Hi")]), ModelResponse(parts=[TextPart("Hello!")])]
    >>> history.add(run)
    >>> history.load() == run
    True
    >>> [message.role for message in archive.get("chat-1").messages]
    ['user', 'assistant']
    >>> archive.close()
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from . import extra_missing

try:
    from pydantic_ai.messages import ModelMessage, ModelMessagesTypeAdapter
except ImportError as exc:  # the extra is missing
    raise extra_missing(__name__, "Pydantic AI (pydantic-ai-slim)", "pydantic-ai") from exc

from chatarchive._api import AsyncChatArchive, ChatArchive
from chatarchive._document import ChatDocument
from chatarchive.formats import pydantic_ai as pydantic_ai_format

from ._chats import SessionChat, Work, arun, find, run

__all__ = ["ChatArchiveHistory"]


class ChatArchiveHistory:
    """The Pydantic AI messages of chat ``chat_id`` (created, for ``user_id``
    with ``metadata``, with the first messages added).

    Args:
        archive: a ``ChatArchive`` or an ``AsyncChatArchive``; either serves
            the sync methods and the async ones (``aload``, ``aadd``, ``aclear``).
        chat_id: the chat.
        user_id: the chat's user, when it is created.
        metadata: the chat's metadata, when it is created.
    """

    def __init__(
        self,
        archive: ChatArchive | AsyncChatArchive,
        chat_id: str,
        *,
        user_id: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> None:
        self._chat = SessionChat(archive, chat_id, user_id, metadata)
        self.chat_id = chat_id

    def load(self) -> list[ModelMessage]:
        """The chat's active path as Pydantic AI messages ([] for no chat)."""
        return run(self._chat.archive, self._load())

    def add(self, messages: Sequence[ModelMessage]) -> None:
        """Append messages (``result.new_messages()``) to the chat."""
        run(self._chat.archive, self._chat.add(_stored(messages)))

    def clear(self) -> None:
        """Delete the chat."""
        run(self._chat.archive, self._chat.delete())

    async def aload(self) -> list[ModelMessage]:
        return await arun(self._chat.archive, self._load())

    async def aadd(self, messages: Sequence[ModelMessage]) -> None:
        await arun(self._chat.archive, self._chat.add(_stored(messages)))

    async def aclear(self) -> None:
        await arun(self._chat.archive, self._chat.delete())

    def _load(self) -> Work[list[ModelMessage]]:
        document = yield from find(self.chat_id)
        return [] if document is None else _messages(document)


def _messages(document: ChatDocument) -> list[ModelMessage]:
    return ModelMessagesTypeAdapter.validate_python(pydantic_ai_format.from_document(document))


def _stored(messages: Sequence[ModelMessage]) -> list[dict[str, Any]]:
    """Pydantic AI messages as the archive's messages (the ``pydantic-ai`` format's)."""
    if not messages:
        return []
    data = ModelMessagesTypeAdapter.dump_python(list(messages), mode="json")
    document = pydantic_ai_format.to_document(data)
    return [message.model_dump(mode="json", exclude_unset=True) for message in document.messages]
