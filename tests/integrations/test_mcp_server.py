"""The MCP server, driven by the ``mcp`` SDK's own client: over stdio and
streamable HTTP from the ``chatarchive mcp`` command, and in process; the
user it serves is the server's choice, never the client's."""

from __future__ import annotations

import asyncio
import json
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mcp.client import Client
from mcp.client.stdio import StdioServerParameters
from mcp_types import TextResourceContents

from chatarchive import AsyncChatArchive, ChatArchive
from chatarchive.integrations.mcp import chatarchive_server
from tests.support.commands import CHATARCHIVE
from tests.support.embedders import meanings

CHATS: list[dict[str, Any]] = [
    {
        "chat_id": "garage",
        "user_id": "ann",
        "model": "gpt-4o",
        "tags": ["home"],
        "messages": [
            {"role": "user", "content": "My automobile will not start."},
            {"role": "assistant", "content": "Check the battery of the car first."},
        ],
    },
    {
        "chat_id": "pets",
        "user_id": "bob",
        "model": "claude",
        "messages": [
            {"role": "user", "content": "We adopted a puppy, and the car smells."},
            {"role": "assistant", "content": "Air the car out."},
        ],
    },
]

READS = ["search_chats", "get_chat", "list_chats", "chat_stats"]


@pytest.fixture
def stored(own_archive: tuple[ChatArchive, str]) -> str:
    archive, url = own_archive
    archive.save_many(CHATS)
    return url


def result(called: Any) -> Any:
    """What a tool call returned: its structured content, or its error text."""
    if called.is_error:
        return ("error", called.content[0].text)
    content = called.structured_content
    return content.get("result", content) if set(content) == {"result"} else content


async def _reads_as_ann(client: Client, *, writes: tuple[str, ...] = ()) -> None:
    assert [tool.name for tool in (await client.list_tools()).tools] == [*READS, *writes]
    found = result(await client.call_tool("search_chats", {"query": "car"}))
    assert (found["mode"], [hit["chat_id"] for hit in found["hits"]]) == ("keyword", ["garage"])
    assert found["hits"][0]["snippet"] == "Check the battery of the «car» first."
    chat = result(await client.call_tool("get_chat", {"chat_id": "garage"}))
    assert [m["content"] for m in chat["messages"]] == [m["content"] for m in CHATS[0]["messages"]]
    assert result(await client.call_tool("get_chat", {"chat_id": "pets"})) == (
        "error",
        "Error executing tool get_chat: chat 'pets' not found",
    )
    listed = result(await client.call_tool("list_chats", {}))
    assert ([c["chat_id"] for c in listed["chats"]], listed["next_cursor"]) == (["garage"], None)
    by_model = result(await client.call_tool("chat_stats", {"by": "model"}))
    assert [(row["model"], row["chats"]) for row in by_model] == [("gpt-4o", 1)]
    read = await client.read_resource("chat://garage")
    contents = read.contents[0]
    assert isinstance(contents, TextResourceContents)
    assert json.loads(contents.text)["chat_id"] == "garage"
    too_many = result(await client.call_tool("search_chats", {"query": "car", "limit": 500}))
    assert too_many[0] == "error"
    assert "limit must be from 1 to 50" in too_many[1]


def test_a_users_server_over_stdio_serves_that_users_chats_alone(stored: str, tmp_path: Path) -> None:
    params = StdioServerParameters(
        command=CHATARCHIVE, args=["--db", stored, "mcp", "--user", "ann"], cwd=tmp_path
    )

    async def main() -> None:
        async with Client(params) as client:
            await _reads_as_ann(client)
            refused = await client.call_tool("append", {"chat_id": "garage", "messages": []})
            assert refused.is_error  # read-only: there is no such tool

    asyncio.run(main())


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def http_server(stored: str, tmp_path: Path) -> Iterator[tuple[str, str]]:
    """``chatarchive mcp --http --allow-writes`` for ann, and its URL."""
    port = _free_port()
    log = tmp_path / "server.log"
    command = [
        CHATARCHIVE,
        "--db",
        stored,
        "mcp",
        "--user",
        "ann",
        "--allow-writes",
        "--http",
        "--port",
        str(port),
    ]
    with log.open("wb") as output:
        process = subprocess.Popen(command, cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=output)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise AssertionError(log.read_text()) from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp", stored
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_users_server_over_http_writes_only_to_that_users_chats(http_server: tuple[str, str]) -> None:
    url, stored = http_server

    async def main() -> None:
        async with Client(url) as client:
            await _reads_as_ann(client, writes=("append", "add_feedback"))
            added = result(
                await client.call_tool(
                    "append",
                    {"chat_id": "garage", "messages": [{"role": "user", "content": "It starts now."}]},
                )
            )
            uid = added["messages"][0]["uid"]
            feedback = result(
                await client.call_tool("add_feedback", {"chat_id": "garage", "score": 1, "message_uid": uid})
            )
            assert (feedback["score"], feedback["message_uid"]) == (1, uid)
            # Another user's chat cannot be written, nor a chat made for another user.
            assert result(await client.call_tool("add_feedback", {"chat_id": "pets", "score": -1})) == (
                "error",
                "Error executing tool add_feedback: chat 'pets' not found",
            )
            appended = await client.call_tool(
                "append", {"chat_id": "pets", "messages": [{"role": "user", "content": "planted"}]}
            )
            assert appended.is_error

    asyncio.run(main())
    with ChatArchive(stored) as archive:
        garage = archive.get("garage")
        assert [m.content for m in garage.messages][-1] == "It starts now."
        assert [f.score for f in garage.feedback] == [1]
        assert [m.content for m in archive.get("pets").messages] == [
            m["content"] for m in CHATS[1]["messages"]
        ]
        assert archive.get("pets").feedback == []


def test_search_by_meaning_is_the_default_when_the_archive_has_an_embedder(stored: str) -> None:
    with ChatArchive(stored) as archive:
        archive.configure_search(embedder=meanings())

    async def main() -> None:
        async with (
            AsyncChatArchive(stored) as archive,
            Client(chatarchive_server(archive.for_user("bob"))) as client,
        ):
            found = result(await client.call_tool("search_chats", {"query": "dog"}))
            assert (found["mode"], [(h["chat_id"], h["position"]) for h in found["hits"]]) == (
                "hybrid",
                [("pets", 0)],
            )
            words = result(await client.call_tool("search_chats", {"query": "dog", "mode": "keyword"}))
            assert words["hits"] == []
            tree = result(await client.call_tool("get_chat", {"chat_id": "pets", "tree": True}))
            assert len(tree["messages"]) == 2

    asyncio.run(main())


def test_the_http_server_listens_on_this_machine_alone(stored: str, tmp_path: Path) -> None:
    ran = subprocess.run(
        [CHATARCHIVE, "--db", stored, "mcp", "--http", "--host", "0.0.0.0"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert ran.returncode == 1
    assert "--host must be a loopback address" in ran.stderr
