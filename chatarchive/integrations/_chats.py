"""What the integrations share: one piece of work for both APIs, and a
framework's session as one chat of the archive.

A framework's store serves sync and async methods from one object, whichever
archive it was given. Each thing an adapter does is written once, as *work*:
a generator that yields the archive calls it needs (``yield from
find(chat_id)``) and receives their results (or their errors, raised where it
yielded). ``run`` carries work out and returns its result; ``arun`` awaits it.
On a ``ChatArchive`` the sync methods call the archive directly and the async
ones call it in a worker thread (as the SDKs' SQLite stores do); on an
``AsyncChatArchive`` the async methods await it and the sync ones wait for its
calls on an event loop of the integrations' own, in a thread of its own, so
that they work inside a running loop too (which they then hold up, as any
blocking call does).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

from chatarchive._api import AsyncChatArchive, ChatArchive
from chatarchive._arguments import require_text
from chatarchive._document import ChatDocument, ChatTree, Message
from chatarchive._exceptions import ChatNotFound, ConflictError, InvalidArgument
from chatarchive._repository.plans import Kind, Step

__all__ = ["Call", "SessionChat", "Work", "arun", "call", "find", "require_archive", "run", "step"]

T = TypeVar("T")

#: How often ``pop`` reads the last message again when another writer changed
#: the chat between its read and its cut.
_POP_ATTEMPTS = 5


def require_archive(archive: object) -> None:
    if not isinstance(archive, (ChatArchive, AsyncChatArchive)):
        raise InvalidArgument(
            f"archive must be a ChatArchive or an AsyncChatArchive, not {type(archive).__name__}",
            argument="archive",
        )


# -- work, carried out on either archive ------------------------------------------------------


@dataclass(frozen=True)
class Call:
    """One call of an archive operation (``name`` with its arguments); with
    ``together``, several calls in one transaction (their results, a list)."""

    name: str
    args: tuple[Any, ...] = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    together: tuple[Call, ...] = ()


#: Work that ends with a ``T``: a generator of the calls it needs.
Work = Generator[Call, Any, T]


def call(name: str, *args: Any, **kwargs: Any) -> Work[Any]:
    """The result of the archive operation ``name(*args, **kwargs)``."""
    return (yield Call(name, args, kwargs))


def together(*calls: Call) -> Work[list[Any]]:
    """The results of ``calls``, made in one transaction."""
    return cast(list[Any], (yield Call("transaction", together=calls)))


def step(kind: Kind, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Work[Any]:
    """The result of ``function(unit, *args, **kwargs)``, a function of a unit
    of work of the archive's repository, run as one step of the archive (a
    read or a write, in a transaction of its own)."""
    return (yield Call("_run_step", (Step(kind, lambda unit: function(unit, *args, **kwargs)),)))


def find(chat_id: str) -> Work[ChatDocument | None]:
    """The chat's active path (``None``: no such chat)."""
    return cast(ChatDocument | None, (yield from call("find", chat_id)))


def get_tree(chat_id: str) -> Work[ChatTree | None]:
    """The chat's whole tree (``None``: no such chat)."""
    try:
        return cast(ChatTree, (yield from call("get_tree", chat_id)))
    except ChatNotFound:
        return None


def run(archive: ChatArchive | AsyncChatArchive, work: Work[T]) -> T:
    """Carry ``work`` out on ``archive``; its result."""
    sent: Any = None
    error: Exception | None = None
    while isinstance(request := _resumed(work, sent, error), Call):
        try:
            sent, error = _called(archive, request), None
        except Exception as exc:  # raised in the work, where it made the call
            sent, error = None, exc
    return cast(T, request.value)


async def arun(archive: ChatArchive | AsyncChatArchive, work: Work[T]) -> T:
    """``run``, awaited."""
    sent: Any = None
    error: Exception | None = None
    while isinstance(request := _resumed(work, sent, error), Call):
        try:
            sent, error = await _awaited(archive, request), None
        except Exception as exc:
            sent, error = None, exc
    return cast(T, request.value)


@dataclass(frozen=True)
class _Done:
    """What work returned."""

    value: Any


def _resumed(work: Work[Any], sent: Any, error: Exception | None) -> Call | _Done:
    """The work's next call, given the last one's result (or its error, raised
    where it made the call); ``_Done`` when it returned."""
    try:
        return work.send(sent) if error is None else work.throw(error)
    except StopIteration as done:
        return _Done(done.value)


def _called(archive: ChatArchive | AsyncChatArchive, request: Call) -> Any:
    if isinstance(archive, AsyncChatArchive):
        return _on_own_loop(_awaited(archive, request))
    if not request.together:
        return getattr(archive, request.name)(*request.args, **request.kwargs)
    with archive.transaction() as repository:
        return [getattr(repository, one.name)(*one.args, **one.kwargs) for one in request.together]


async def _awaited(archive: ChatArchive | AsyncChatArchive, request: Call) -> Any:
    if isinstance(archive, ChatArchive):
        return await asyncio.to_thread(_called, archive, request)
    if not request.together:
        return await getattr(archive, request.name)(*request.args, **request.kwargs)
    async with archive.transaction() as repository:
        return [await getattr(repository, one.name)(*one.args, **one.kwargs) for one in request.together]


# The sync methods' event loop for an AsyncChatArchive: one for the process,
# started with the first such call, in a daemon thread.
_LOOP: asyncio.AbstractEventLoop | None = None
_LOOP_LOCK = threading.Lock()


def _on_own_loop(coroutine: Any) -> Any:
    """Wait for ``coroutine`` to run on the integrations' event loop."""
    global _LOOP
    with _LOOP_LOCK:
        if _LOOP is None:
            loop = asyncio.new_event_loop()
            threading.Thread(
                target=loop.run_forever, name="chatarchive.integrations event loop", daemon=True
            ).start()
            _LOOP = loop
        loop = _LOOP
    return asyncio.run_coroutine_threadsafe(coroutine, loop).result()


def _forget_loop() -> None:
    """In a forked child the loop's thread is gone: the next call starts another."""
    global _LOOP
    _LOOP = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_loop)


# -- a session's chat ----------------------------------------------------------------------------


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

    def add(self, messages: Sequence[Mapping[str, Any]]) -> Work[None]:
        """Append ``messages`` to the chat, creating it if it does not exist
        (no messages: nothing to do, no chat made)."""
        if not messages:
            return
        yield from call("append", self.chat_id, messages, create=self._new())

    def _new(self) -> dict[str, Any]:
        """The chat's fields, for the first add to create it with."""
        chat: dict[str, Any] = {}
        if self.user_id is not None:
            chat["user_id"] = self.user_id
        if self.metadata is not None:
            chat["metadata"] = dict(self.metadata)
        return chat

    def pop(self) -> Work[Message | None]:
        """Delete the chat's last message and return it (``None``: there is
        none). The read and the cut are one version apart, so that of two
        callers popping at once each gets a message of its own."""
        for _ in range(_POP_ATTEMPTS):
            document = yield from find(self.chat_id)
            if document is None or not document.messages:
                return None
            try:
                yield from call(
                    "truncate",
                    self.chat_id,
                    len(document.messages) - 1,
                    expected_version=document.version,
                    delete=True,
                )
            except ChatNotFound:
                return None
            except ConflictError:  # another writer came first: read the last message again
                continue
            return document.messages[-1]
        raise ConflictError(f"chat {self.chat_id!r} kept changing; no message was popped")

    def delete(self) -> Work[None]:
        """Delete the chat, if there is one."""
        with contextlib.suppress(ChatNotFound):
            yield from call("delete", self.chat_id)
