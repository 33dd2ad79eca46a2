"""The archive as an MCP server, so that agents can look up past conversations.

``chatarchive mcp`` serves an archive over stdio or streamable HTTP, built on
the official ``mcp`` SDK (``pip install 'chatarchive[mcp]'``). Its tools:

- ``search_chats``: search by words, by meaning or both (``hybrid``, the
  default when the archive has an embedder this process can use);
- ``get_chat``: a chat's active path, or its whole tree;
- ``list_chats``: chats, most recently updated first, a page at a time;
- ``chat_stats``: usage by day, model, workflow, user or tool, and feedback;

and, only when the server is started with ``allow_writes``, ``append`` and
``add_feedback``. Each chat is also a resource, ``chat://{chat_id}``.

The server sees what its archive sees: given a user's archive
(``archive.for_user(user_id)``, ``chatarchive mcp --user ID``), every tool
reads and writes that user's chats alone, and no argument a client sends can
name another user; on PostgreSQL with row-level security on, the database
holds it too.

Example:
    >>> from chatarchive import AsyncChatArchive
    >>> from chatarchive.integrations.mcp import chatarchive_server
    >>> server = chatarchive_server(AsyncChatArchive("sqlite://").for_user("ann"))
    >>> server.name
    'chatarchive'
"""

from __future__ import annotations

import functools
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from datetime import datetime
from typing import Any, Literal, TypeVar

from . import extra_missing

try:
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ResourceError, ToolError
except ImportError as exc:  # the extra is missing
    raise extra_missing(__name__, "the MCP SDK (mcp)", "mcp") from exc

from chatarchive._api import AsyncChatArchive
from chatarchive._document import ChatFilter
from chatarchive._embeddings import embedder_named
from chatarchive._exceptions import ChatArchiveError, InvalidArgument

__all__ = ["MOST_HITS", "STATS", "chatarchive_server"]

R = TypeVar("R")

#: The most hits or chats one call returns.
MOST_HITS = 50

#: What ``chat_stats`` counts by, and the archive operation that counts it.
STATS: dict[str, str] = {
    "day": "daily_usage",
    "model": "model_usage",
    "workflow": "workflow_usage",
    "user": "user_activity",
    "tool": "tool_usage",
    "feedback": "feedback_summary",
}

_INSTRUCTIONS = (
    "A searchable archive of past chat conversations. Use search_chats to find messages by words or by "
    "meaning, get_chat to read a conversation (chat_id from a hit), list_chats for the most recent chats, "
    "chat_stats for usage."
)


def chatarchive_server(
    archive: AsyncChatArchive,
    *,
    allow_writes: bool = False,
    close_archive: bool = False,
    name: str = "chatarchive",
) -> MCPServer:
    """An MCP server over ``archive`` (a user's archive keeps it to that
    user's chats). ``allow_writes`` adds the ``append`` and ``add_feedback``
    tools; ``close_archive`` closes the archive when the server stops."""
    if not isinstance(archive, AsyncChatArchive):
        raise InvalidArgument(
            f"archive must be an AsyncChatArchive, not {type(archive).__name__}", argument="archive"
        )

    @asynccontextmanager
    async def lifespan(_server: MCPServer) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if close_archive:
                await archive.close()

    server = MCPServer(name, instructions=_INSTRUCTIONS, lifespan=lifespan)
    for tool in [*_reads(archive), *(_writes(archive) if allow_writes else [])]:
        server.tool()(_told(tool, ToolError))

    async def chat(chat_id: str) -> str:
        """A chat's active path, as its canonical JSON document."""
        return (await archive.get(chat_id)).model_dump_json()

    server.resource("chat://{chat_id}", name="chat", mime_type="application/json")(_told(chat, ResourceError))

    return server


def _told(call: Callable[..., Awaitable[R]], error: type[Exception]) -> Callable[..., Awaitable[R]]:
    """``call``, its chatarchive errors (a chat not found, an argument refused)
    told to the client as ``error``: the SDK passes only those on to the model."""

    @functools.wraps(call)
    async def told(*args: Any, **kwargs: Any) -> R:
        try:
            return await call(*args, **kwargs)
        except ChatArchiveError as exc:
            raise error(str(exc)) from exc

    return told


def _json(model: Any) -> Any:
    """A pydantic model (or a list of them) as JSON values."""
    if isinstance(model, list):
        return [_json(item) for item in model]
    return json.loads(model.model_dump_json())


def _reads(archive: AsyncChatArchive) -> list[Callable[..., Any]]:
    async def search_chats(
        query: str,
        mode: Literal["auto", "hybrid", "keyword", "vector"] = "auto",
        role: str | None = None,
        tag: str | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        active_path_only: bool = False,
        limit: int = 10,
    ) -> dict[str, Any]:
        """Search the messages of past chats, best first. ``query``: words
        (all must match), "quoted phrases", -word to exclude, or; ``mode``:
        keyword (by words), vector (by meaning), hybrid (both), or auto
        (hybrid when the archive can search by meaning, else keyword). Each
        hit names its chat_id (for get_chat) and has a snippet with the
        matched words in «»."""
        chosen = await _mode(archive, mode)
        hits = await archive.search(
            query,
            mode=chosen,
            role=role,
            tag=tag,
            since=since,
            until=until,
            branches="active" if active_path_only else "all",
            limit=_bounded(limit),
        )
        return {"mode": chosen, "hits": _json(list(hits)), "pending_chats": hits.pending_chats}

    async def get_chat(chat_id: str, tree: bool = False) -> dict[str, Any]:
        """A chat: its messages on the active path, or with ``tree`` every
        message of every branch (each with its parent) and the active leaf."""
        if tree:
            return _json((await archive.get_tree(chat_id)).document)  # type: ignore[no-any-return]
        return _json(await archive.get(chat_id))  # type: ignore[no-any-return]

    async def list_chats(
        limit: int = 20,
        cursor: str | None = None,
        model: str | None = None,
        tag: str | None = None,
        since: datetime | None = None,
    ) -> dict[str, Any]:
        """Chats, most recently updated first (``since``: updated from then
        on), a page at a time: pass the returned next_cursor for the next."""
        page = await archive.list_chats(
            ChatFilter(model=model, tag=tag, since=since), limit=_bounded(limit), cursor=cursor
        )
        return {"chats": _json(page.items), "next_cursor": page.next_cursor}

    async def chat_stats(
        by: Literal["day", "model", "workflow", "user", "tool", "feedback"] = "day",
        since: datetime | None = None,
        until: datetime | None = None,
        model: str | None = None,
    ) -> list[dict[str, Any]]:
        """Usage of the archive: messages, tokens and chats by day, model,
        workflow or user; calls by tool; or feedback by rating."""
        if by not in STATS:
            raise InvalidArgument(f"by must be one of {', '.join(STATS)}, not {by!r}", argument="by")
        counted = await getattr(archive, STATS[by])(since=since, until=until, model=model)
        return _json(list(counted))  # type: ignore[no-any-return]

    return [search_chats, get_chat, list_chats, chat_stats]


def _writes(archive: AsyncChatArchive) -> list[Callable[..., Any]]:
    async def append(chat_id: str, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """Add messages (each {"role": ..., "content": ...}) to the end of a
        chat's active path, creating the chat if there is none."""
        added = await archive.append(chat_id, messages)
        return {"chat_id": chat_id, "messages": _json(list(added))}

    async def add_feedback(
        chat_id: str,
        score: float | None = None,
        label: str | None = None,
        comment: str | None = None,
        message_uid: str | None = None,
    ) -> dict[str, Any]:
        """Record feedback on a chat, or on one of its messages (its uid): a
        score (1 / -1 for thumbs up / down, or a rating), a label, a comment."""
        if isinstance(score, float) and score.is_integer():
            score = int(score)
        feedback = {"score": score, "label": label, "comment": comment, "message_uid": message_uid}
        stored = await archive.add_feedback(chat_id, {k: v for k, v in feedback.items() if v is not None})
        return _json(stored)  # type: ignore[no-any-return]

    return [append, add_feedback]


def _bounded(limit: int) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MOST_HITS:
        raise InvalidArgument(f"limit must be from 1 to {MOST_HITS}, not {limit!r}", argument="limit")
    return limit


async def _mode(archive: AsyncChatArchive, mode: str) -> Literal["hybrid", "keyword", "vector"]:
    if mode == "auto":
        settings = await archive.search_settings()
        usable = settings.embedder is not None and embedder_named(settings.embedder) is not None
        return "hybrid" if usable else "keyword"
    if mode not in ("hybrid", "keyword", "vector"):
        raise InvalidArgument(f"mode must be auto, hybrid, keyword or vector, not {mode!r}", argument="mode")
    return mode  # type: ignore[return-value]
