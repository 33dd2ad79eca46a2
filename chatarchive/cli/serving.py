"""``chatarchive mcp``: the archive as an MCP server, for agents."""

from __future__ import annotations

import click

from chatarchive._api import AsyncChatArchive
from chatarchive._arguments import require_user_id

from .app import database_option, fail, main

__all__ = ["mcp"]

#: The hosts the HTTP transport may listen on: the server has no
#: authentication of its own, so it answers this machine alone.
LOOPBACK = ("127.0.0.1", "::1", "localhost")


@main.command("mcp")
@click.option("--user", "user_id", help="Serve this user's chats alone (whatever a client asks).")
@click.option("--allow-writes", is_flag=True, help="Add the append and add_feedback tools.")
@click.option("--http", is_flag=True, help="Serve streamable HTTP (at /mcp) instead of stdio.")
@click.option("--host", default="127.0.0.1", show_default=True, help="With --http: a loopback address.")
@click.option("--port", default=8000, show_default=True, type=click.IntRange(1, 65535), help="With --http.")
def mcp(user_id: str | None, allow_writes: bool, http: bool, host: str, port: int) -> None:
    """Serve the archive to MCP clients (agents, desktop assistants): the
    tools search_chats, get_chat, list_chats and chat_stats, and a resource
    per chat (chat://CHAT_ID). Read-only unless --allow-writes. Needs the
    mcp extra: pip install 'chatarchive[mcp]'.
    """
    try:
        from chatarchive.integrations.mcp import chatarchive_server
    except ImportError as exc:
        fail(str(exc))
    if host not in LOOPBACK:
        fail(f"--host must be a loopback address ({', '.join(LOOPBACK)}): the server has no authentication")
    archive = AsyncChatArchive(database_option())
    served = archive if user_id is None else archive.for_user(require_user_id(user_id))
    server = chatarchive_server(served, allow_writes=allow_writes, close_archive=True)
    if http:
        server.run("streamable-http", host=host, port=port)
    else:
        server.run("stdio")
