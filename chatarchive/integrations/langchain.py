"""LangChain's chat message history, kept in a chat of the archive.

``ChatArchiveMessageHistory`` is a ``BaseChatMessageHistory``: LangChain
messages (``messages``, ``add_messages``, ``clear`` and their async
variants) are stored as the ``langchain`` format stores them (see
``chatarchive.formats.langchain``): roles, content strings and lists, tool
calls valid and invalid, ``additional_kwargs``, ``response_metadata``,
``usage_metadata`` (in the token columns), ids and names, all coming back
equal. Needs ``langchain-core`` (``pip install 'chatarchive[langchain]'``).

Examples:
    >>> from langchain_core.messages import AIMessage, HumanMessage
    >>> from chatarchive import ChatArchive
    >>> archive = ChatArchive("sqlite://")
    >>> archive.upgrade()
    >>> history = ChatArchiveMessageHistory(archive, "chat-1", user_id="alice")
    >>> history.add_messages([HumanMessage("Hi"), AIMessage("Hello!", id="run-1")])
    >>> [message.type for message in history.messages]
    ['human', 'ai']
    >>> archive.get("chat-1").user_id
    'alice'
    >>> archive.close()
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from . import extra_missing

try:
    from langchain_core.chat_history import BaseChatMessageHistory
    from langchain_core.messages import BaseMessage, messages_from_dict, messages_to_dict
except ImportError as exc:  # the extra is missing
    raise extra_missing(__name__, "LangChain (langchain-core)", "langchain") from exc

from chatarchive._api import AsyncChatArchive, ChatArchive
from chatarchive._document import Message
from chatarchive.formats import langchain as langchain_format

from ._chats import SessionChat, Work, arun, find, run

__all__ = ["ChatArchiveMessageHistory", "archive_messages", "langchain_messages"]


class ChatArchiveMessageHistory(BaseChatMessageHistory):
    """The messages of chat ``chat_id`` (created, for ``user_id``, with the
    first message added) as LangChain's message history.

    Args:
        archive: a ``ChatArchive`` or an ``AsyncChatArchive``; either serves
            the sync methods (``messages``, ``add_messages``, ``clear``) and
            the async ones (``aget_messages``, ``aadd_messages``, ``aclear``).
        chat_id: the chat.
        user_id: the chat's user, when it is created.
    """

    def __init__(
        self, archive: ChatArchive | AsyncChatArchive, chat_id: str, *, user_id: str | None = None
    ) -> None:
        self._chat = SessionChat(archive, chat_id, user_id)
        self.archive = archive
        self.chat_id = chat_id
        self.user_id = user_id

    @property
    def messages(self) -> list[BaseMessage]:  # type: ignore[override]
        """The chat's active path, as LangChain messages."""
        return run(self.archive, self._messages())

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        run(self.archive, self._chat.add(archive_messages(messages)))

    def clear(self) -> None:
        run(self.archive, self._chat.delete())

    async def aget_messages(self) -> list[BaseMessage]:
        return await arun(self.archive, self._messages())

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        await arun(self.archive, self._chat.add(archive_messages(messages)))

    async def aclear(self) -> None:
        await arun(self.archive, self._chat.delete())

    def _messages(self) -> Work[list[BaseMessage]]:
        document = yield from find(self.chat_id)
        return [] if document is None else langchain_messages(document.messages)


def archive_messages(messages: Sequence[BaseMessage]) -> list[dict[str, Any]]:
    """LangChain messages as the archive's messages (the ``langchain`` format's)."""
    # Checked once, by the archive's write, which names the chat and the message in any error.
    return langchain_format.to_messages(messages_to_dict(list(messages)))


def langchain_messages(messages: Sequence[Message]) -> list[BaseMessage]:
    """The archive's messages as LangChain messages."""
    return messages_from_dict(langchain_format.from_messages(messages))
