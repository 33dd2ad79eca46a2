"""LlamaIndex's chat store, kept in the archive: one chat per key.

``ChatArchiveChatStore`` is a ``BaseChatStore`` of ``llama-index-core``
(what ``ChatMemoryBuffer`` and ``Memory`` keep their messages in). Each key
is a chat; each ``ChatMessage`` one of its messages, stored as the
``llama-index`` format stores it (see ``chatarchive.formats.llama_index``):
text, thinking and image blocks as parts, tool calls (``tool_call`` blocks,
or OpenAI-shaped ``tool_calls`` in ``additional_kwargs``) as tool calls,
``tool_call_id`` and ``name`` as the message's; the messages that come out
equal the messages that went in. Needs ``llama-index-core``
(``pip install 'chatarchive[llama-index]'``).

The store's chats are its ``user_id``'s: ``get_keys`` lists them (all chats
of the archive when the store has no user).

Examples:
    >>> from llama_index.core.llms import ChatMessage
    >>> from chatarchive import ChatArchive
    >>> archive = ChatArchive("sqlite://")
    >>> archive.upgrade()
    >>> store = ChatArchiveChatStore.from_archive(archive, user_id="alice")
    >>> store.add_message("lab-7", ChatMessage(role="user", content="Tm of ACGT?"))
    >>> store.get_messages("lab-7")[0].content
    'Tm of ACGT?'
    >>> store.get_keys()
    ['lab-7']
    >>> archive.close()
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import extra_missing

try:
    from llama_index.core.llms import ChatMessage
    from llama_index.core.storage.chat_store.base import BaseChatStore
except ImportError as exc:  # the extra is missing
    raise extra_missing(__name__, "LlamaIndex (llama-index-core)", "llama-index") from exc
from pydantic import PrivateAttr

from chatarchive._api import AsyncChatArchive, ChatArchive
from chatarchive._document import ChatDocument, ChatFilter, Message
from chatarchive._exceptions import ConflictError
from chatarchive.formats import llama_index as llama_index_format

from ._chats import SessionChat, Work, arun, call, find, require_archive, run

__all__ = ["ChatArchiveChatStore"]

#: Chat ids ``get_keys`` reads at a time.
_KEYS_PAGE = 1000
#: How often a change of a chat's message list is tried again when another
#: writer changed the chat between its read and its save.
_ATTEMPTS = 5


class ChatArchiveChatStore(BaseChatStore):
    """A ``BaseChatStore`` whose keys are chats of an archive, a
    ``ChatArchive`` or an ``AsyncChatArchive``: either serves the sync
    methods and the async ones. Make one with ``from_archive``."""

    user_id: str | None = None
    _archive: ChatArchive | AsyncChatArchive = PrivateAttr()

    @classmethod
    def from_archive(
        cls, archive: ChatArchive | AsyncChatArchive, *, user_id: str | None = None
    ) -> ChatArchiveChatStore:
        """The store on ``archive``; the chats it creates are ``user_id``'s."""
        require_archive(archive)
        store = cls(user_id=user_id)
        store._archive = archive
        return store

    @classmethod
    def class_name(cls) -> str:
        return "ChatArchiveChatStore"

    # -- sync --------------------------------------------------------------------------

    def set_messages(self, key: str, messages: list[ChatMessage]) -> None:
        """Replace the key's messages (the chat keeps its other fields)."""
        run(self._archive, self._rewrite(key, _replace(_stored(messages))))

    def get_messages(self, key: str) -> list[ChatMessage]:
        return run(self._archive, self._messages(key))

    def add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        """Append a message (or insert it at ``idx``)."""
        run(self._archive, self._add(key, message, idx))

    def delete_messages(self, key: str) -> list[ChatMessage] | None:
        """Delete the key's chat; returns its messages (``None``: no such key)."""
        return run(self._archive, self._delete(key))

    def delete_message(self, key: str, idx: int) -> ChatMessage | None:
        """Delete the key's message at ``idx``; returns it (``None``: none there)."""
        return _one(run(self._archive, self._rewrite(key, _pop(idx))))

    def delete_last_message(self, key: str) -> ChatMessage | None:
        """Delete the key's last message; returns it (``None``: there is none)."""
        return _popped(run(self._archive, SessionChat(self._archive, key).pop()))

    def get_keys(self) -> list[str]:
        """The chats of the store's user (every chat, for a store without one)."""
        return run(self._archive, self._keys())

    # -- async -------------------------------------------------------------------------

    async def aset_messages(self, key: str, messages: list[ChatMessage]) -> None:
        await arun(self._archive, self._rewrite(key, _replace(_stored(messages))))

    async def aget_messages(self, key: str) -> list[ChatMessage]:
        return await arun(self._archive, self._messages(key))

    async def async_add_message(self, key: str, message: ChatMessage, idx: int | None = None) -> None:
        await arun(self._archive, self._add(key, message, idx))

    async def adelete_messages(self, key: str) -> list[ChatMessage] | None:
        return await arun(self._archive, self._delete(key))

    async def adelete_message(self, key: str, idx: int) -> ChatMessage | None:
        return _one(await arun(self._archive, self._rewrite(key, _pop(idx))))

    async def adelete_last_message(self, key: str) -> ChatMessage | None:
        return _popped(await arun(self._archive, SessionChat(self._archive, key).pop()))

    async def aget_keys(self) -> list[str]:
        return await arun(self._archive, self._keys())

    # -- the work of both ----------------------------------------------------------------

    def _messages(self, key: str) -> Work[list[ChatMessage]]:
        return _messages((yield from find(key)))

    def _add(self, key: str, message: ChatMessage, idx: int | None) -> Work[None]:
        if idx is None:
            yield from SessionChat(self._archive, key, self.user_id).add(_stored([message]))
        else:
            yield from self._rewrite(key, _insert(idx, _stored([message])))

    def _delete(self, key: str) -> Work[list[ChatMessage] | None]:
        document = yield from find(key)
        if document is None:
            return None
        yield from SessionChat(self._archive, key).delete()
        return _messages(document)

    def _keys(self) -> Work[list[str]]:
        where = ChatFilter(user_id=self.user_id) if self.user_id is not None else None
        keys: list[str] = []
        while page := (
            yield from call("chat_ids", where, after=keys[-1] if keys else None, limit=_KEYS_PAGE)
        ):
            keys.extend(page)
        return keys

    def _rewrite(self, key: str, change: Change) -> Work[list[dict[str, Any]]]:
        """Save the key's chat with its messages changed by ``change`` (in
        place); returns what ``change`` returned."""
        for _ in range(_ATTEMPTS):
            document = yield from find(key)
            messages = _listed(document)
            result = change(messages)
            if result is None:
                return []
            chat, version = self._saved(key, document, messages)
            try:
                yield from call("save", chat, expected_version=version)
            except ConflictError:  # another writer changed the chat meanwhile: again
                continue
            return result
        raise ConflictError(f"chat {key!r} kept changing; it was not changed")

    def _saved(
        self, key: str, document: ChatDocument | None, messages: list[dict[str, Any]]
    ) -> tuple[dict[str, Any], int]:
        """The arguments of ``save`` that give the key's chat ``messages``:
        the stored chat with them in place of its own, at its version (a new
        chat of the store's user, at 0)."""
        if document is None:
            chat: dict[str, Any] = {"chat_id": key, "messages": messages}
            if self.user_id is not None:
                chat["user_id"] = self.user_id
            return chat, 0
        data = document.model_dump(mode="json")
        data["messages"] = messages
        data.pop("active_leaf", None)
        return data, document.version or 0


#: A change of a chat's message list, made in place: returns the messages it
#: took out ([] for none), or ``None`` when there is nothing to save.
Change = Callable[[list[dict[str, Any]]], list[dict[str, Any]] | None]


def _replace(new: list[dict[str, Any]]) -> Change:
    def change(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        messages[:] = new
        return []

    return change


def _insert(index: int, new: list[dict[str, Any]]) -> Change:
    def change(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        messages[index:index] = new
        return []

    return change


def _pop(index: int) -> Change:
    """Take out the message at ``index`` (as ``list.pop`` counts); nothing to save when there is none."""

    def change(messages: list[dict[str, Any]]) -> list[dict[str, Any]] | None:
        if not -len(messages) <= index < len(messages):
            return None
        return [messages.pop(index)]

    return change


def _listed(document: ChatDocument | None) -> list[dict[str, Any]]:
    return [] if document is None else [message.model_dump(mode="json") for message in document.messages]


def _one(removed: list[dict[str, Any]]) -> ChatMessage | None:
    return _messages(ChatDocument.parse({"messages": removed}))[0] if removed else None


def _popped(message: Message | None) -> ChatMessage | None:
    if message is None:
        return None
    (item,) = llama_index_format.from_messages([message])
    return ChatMessage.model_validate(item)


def _messages(document: ChatDocument | None) -> list[ChatMessage]:
    if document is None:
        return []
    return [ChatMessage.model_validate(item) for item in llama_index_format.from_document(document)]


def _stored(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    """LlamaIndex messages as the archive's messages (the ``llama-index`` format's)."""
    return llama_index_format.to_messages([message.model_dump(mode="json") for message in messages])
