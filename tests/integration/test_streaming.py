"""Streaming messages and the asyncio API, on both databases."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from sqlalchemy import URL, func, select, text
from sqlalchemy.orm import Session

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    ChatFilter,
    ChatNotFound,
    ChatRepository,
    ConflictError,
    InvalidArgument,
    InvalidDocument,
    Limits,
)
from chatarchive._schema import metadata
from tests.support.statements import recorded_statements

chunks_table = metadata.tables["message_chunks"]

#: The example applications, beside the package.
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def chunk_count(session: Session) -> int:
    return session.execute(select(func.count()).select_from(chunks_table)).scalar_one()


def test_a_streamed_message_shows_its_text_so_far_then_completes(
    repo: ChatRepository, session: Session
) -> None:
    repo.save({"chat_id": "s", "messages": [{"role": "user", "content": "Count to three."}]})
    begun = repo.begin_message("s", uid="answer", model="fake")
    assert (begun.completed, begun.content) == (False, "")
    for piece in ("one, ", "two, ", "three"):
        repo.append_chunk("s", "answer", piece)
    partial = repo.get("s").messages[1]
    assert (partial.content, partial.completed) == ("one, two, three", False)
    assert chunk_count(session) == 3
    done = repo.complete_message(
        "s",
        "answer",
        finish_reason="stop",
        usage={"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8},
    )
    assert (done.content, done.completed, done.finish_reason, done.model) == (
        "one, two, three",
        True,
        "stop",
        "fake",
    )
    assert chunk_count(session) == 0
    stored = repo.get("s").messages[1]
    assert stored.model_dump() == done.model_dump()
    assert stored.usage is not None
    assert stored.usage.total_tokens == 8


def test_tool_call_argument_fragments(repo: ChatRepository) -> None:
    repo.save({"chat_id": "t", "messages": [{"role": "user", "content": "search"}]})
    repo.begin_message(
        "t",
        uid="call",
        content=None,
        tool_calls=[{"id": "c1", "type": "function", "function": {"name": "search", "arguments": ""}}],
    )
    for fragment in ('{"q": ', '"pcr', '"}'):
        repo.append_chunk("t", "call", fragment, tool_call_index=0)
    repo.append_chunk("t", "call", "{}", tool_call_index=1)
    partial = repo.get("t").messages[1]
    assert partial.tool_calls is not None
    assert partial.tool_calls[0].function is not None
    assert partial.tool_calls[0].function.arguments == '{"q": "pcr"}'
    done = repo.complete_message("t", "call", finish_reason="tool_calls")
    assert done.content is None
    assert [
        (call.id, call.function.arguments if call.function else None) for call in done.tool_calls or []
    ] == [
        ("c1", '{"q": "pcr"}'),
        (None, "{}"),
    ]


def test_custom_tool_call_fragments_go_to_its_input(repo: ChatRepository) -> None:
    repo.save({"chat_id": "t", "messages": [{"role": "user", "content": "grep it"}]})
    repo.begin_message(
        "t",
        uid="call",
        content=None,
        tool_calls=[
            {"id": "c1", "type": "custom", "custom": {"name": "grep", "input": ""}},
            {"id": "c2", "type": "custom", "custom": {"name": "sed"}},
        ],
    )
    for fragment in ("-rn ", "pcr ."):
        repo.append_chunk("t", "call", fragment, tool_call_index=0)
    repo.append_chunk("t", "call", "s/a/b/", tool_call_index=1)
    expected = [
        {"id": "c1", "type": "custom", "custom": {"name": "grep", "input": "-rn pcr ."}},
        {"id": "c2", "type": "custom", "custom": {"name": "sed", "input": "s/a/b/"}},
    ]
    assert repo.get("t").messages[1].to_openai()["tool_calls"] == expected
    done = repo.complete_message("t", "call", finish_reason="tool_calls")
    assert done.to_openai()["tool_calls"] == expected
    assert repo.get("t").messages[1].to_openai()["tool_calls"] == expected


def test_fragments_for_a_call_that_cannot_take_text_are_refused_at_completion(
    repo: ChatRepository, session: Session
) -> None:
    repo.save({"chat_id": "t", "messages": [{"role": "user", "content": "go"}]})
    odd_calls = [
        {"id": "c1", "type": "function", "function": ["not", "an", "object"]},
        {"id": "c2", "type": "function", "function": {"name": "f", "arguments": 5}},
    ]
    repo.begin_message("t", uid="call", tool_calls=odd_calls)
    repo.append_chunk("t", "call", "{}", tool_call_index=0)
    repo.append_chunk("t", "call", "{}", tool_call_index=1)
    # The chat still reads; the fragments that fit nowhere stay stored as chunks.
    partial = repo.get("t").messages[1]
    assert (partial.completed, partial.to_openai()["tool_calls"]) == (False, odd_calls)
    with pytest.raises(InvalidDocument) as refused:
        repo.complete_message("t", "call")
    assert (refused.value.chat_id, refused.value.message_index, refused.value.field) == (
        "t",
        1,
        "tool_calls[0].function",
    )
    assert repo.get("t").messages[1].model_dump() == partial.model_dump()
    assert chunk_count(session) == 2
    replaced = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]
    done = repo.complete_message("t", "call", tool_calls=replaced)
    assert (done.completed, done.to_openai()["tool_calls"]) == (True, replaced)
    assert chunk_count(session) == 0


def test_chunks_are_refused_where_they_do_not_belong(repo: ChatRepository, make_repo: Any) -> None:
    repo.save(
        {"chat_id": "r", "user_id": "alice", "messages": [{"role": "user", "content": "hi", "uid": "done"}]}
    )
    with pytest.raises(InvalidArgument, match="already complete"):
        repo.append_chunk("r", "done", "more")
    with pytest.raises(InvalidArgument, match="no message"):
        repo.append_chunk("r", "ghost", "more")
    with pytest.raises(ChatNotFound):
        repo.append_chunk("nope", "done", "more")
    begun = repo.begin_message("r")
    with pytest.raises(InvalidDocument, match="Unicode") as refused:
        repo.append_chunk("r", begun.uid, "\ud800")
    assert (refused.value.field, refused.value.message_index) == ("chunk", None)
    with pytest.raises(InvalidDocument) as refused:
        repo.complete_message("r", begun.uid, role=5)
    assert (refused.value.field, refused.value.message_index) == ("role", 1)  # its place in the chat
    with pytest.raises(InvalidArgument, match="tool_call_index"):
        repo.append_chunk("r", begun.uid, "x", tool_call_index=-1)
    # A fragment for call 10**9 made reading the message build a billion calls
    # (every index up to it): the index is bounded by the limit on tool calls.
    with pytest.raises(InvalidArgument, match="past the last of the 1000 tool calls") as caught:
        repo.append_chunk("r", begun.uid, "x", tool_call_index=10**9)
    assert caught.value.argument == "tool_call_index"
    repo.append_chunk("r", begun.uid, "{}", tool_call_index=999)
    assert len(repo.get("r").messages[1].tool_calls or []) == 1000
    with pytest.raises(InvalidArgument, match="already complete"):
        repo.complete_message("r", "done")
    scoped = make_repo(user_id="bob")
    with pytest.raises(ChatNotFound):
        scoped.append_chunk("r", begun.uid, "sneaky")


def test_a_stream_past_the_size_limit_is_refused_at_completion_until_given_less(
    make_repo: Any, session: Session
) -> None:
    repo = make_repo(limits=Limits(max_message_bytes=100))
    repo.save({"chat_id": "long", "messages": [{"role": "user", "content": "q"}]})
    begun = repo.begin_message("long")
    for _ in range(3):
        repo.append_chunk("long", begun.uid, "x" * 60)  # each within the limit
    with pytest.raises(InvalidDocument, match="message of 180 bytes; at most 100") as refused:
        repo.complete_message("long", begun.uid)
    assert refused.value.message_index == 1
    assert repo.get("long").messages[1].completed is False
    assert chunk_count(session) == 3  # nothing changed
    done = repo.complete_message("long", begun.uid, content="x" * 60, finish_reason="length")
    assert (done.content, done.completed, chunk_count(session)) == ("x" * 60, True, 0)


def test_append_chunk_is_one_statement_whatever_came_before(repo: ChatRepository, session: Session) -> None:
    repo.save({"chat_id": "long", "messages": [{"role": "user", "content": "go"}]})
    answer = repo.begin_message("long")
    for number in range(300):
        repo.append_chunk("long", answer.uid, f"{number} ")
    with recorded_statements(session.get_bind()) as executed:
        repo.append_chunk("long", answer.uid, "last")
    inserts = [statement for statement, _ in executed if "message_chunks" in statement]
    assert len(inserts) == 1
    assert inserts[0].lstrip().upper().startswith("INSERT")
    assert repo.get("long").messages[1].content == "".join(f"{n} " for n in range(300)) + "last"


# -- the asyncio API --------------------------------------------------------------------


@pytest.fixture
def async_url(migrated_url: URL) -> str:
    return migrated_url.render_as_string(hide_password=False)


def test_the_async_api_mirrors_the_sync_one(async_url: str, archive: ChatArchive) -> None:
    async def scenario() -> None:
        async with AsyncChatArchive(async_url) as aarchive:
            assert (
                await aarchive.save(
                    {"chat_id": "a", "user_id": "u", "messages": [{"role": "user", "content": "hi"}]}
                )
                == 1
            )
            await aarchive.append("a", [{"role": "assistant", "content": "hello there"}])
            await aarchive.add_feedback("a", {"score": 1})
            assert await aarchive.update("a", title="greeting") == 4
            doc = await aarchive.get("a")
            assert (doc.title, [m.content for m in doc.messages], doc.version) == (
                "greeting",
                ["hi", "hello there"],
                4,
            )
            assert [c.chat_id for c in (await aarchive.list_chats(ChatFilter(user_id="u"))).items] == ["a"]
            assert [h.chat_id for h in await aarchive.search("hello")] == ["a"]
            assert await aarchive.count_chats(ChatFilter(user_id="u")) == 1
            assert (
                await aarchive.save_many(
                    [{"chat_id": f"m{n}", "messages": []} for n in range(7)], batch_size=3
                )
                == 7
            )
            assert [d.chat_id async for d in aarchive.export(batch_size=3)] == [
                "a",
                *(f"m{n}" for n in range(7)),
            ]
            with pytest.raises(ConflictError):
                await aarchive.save({"chat_id": "a"}, expected_version=1)
            with pytest.raises(ChatNotFound):
                await aarchive.for_user("someone else").get("a")
            async with aarchive.transaction() as repo:
                await repo.save({"chat_id": "tx"})
                await repo.append("tx", [{"role": "user", "content": "in one transaction"}])
            answer = await aarchive.begin_message("tx")
            await aarchive.append_chunk("tx", answer.uid, "streamed ")
            await aarchive.append_chunk("tx", answer.uid, "text")
            assert (await aarchive.get("tx")).messages[1].content == "streamed text"
            done = await aarchive.complete_message("tx", answer.uid, finish_reason="stop")
            assert (done.content, done.completed) == ("streamed text", True)
            assert await aarchive.truncate("a", 1, expected_version=4) == 5
            assert [m.content for m in (await aarchive.get("a")).messages] == ["hi"]
            assert await aarchive.delete_user("u") == 1

    asyncio.run(scenario())
    assert archive.get("tx").messages[1].content == "streamed text"  # the sync API sees the same rows


# -- the FastAPI example: a crash mid-stream keeps what was sent ------------------------------


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.fixture
def server(async_url: str, tmp_path: Path) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    port = _free_port()
    env = {
        **os.environ,
        "CHATARCHIVE_DATABASE_URL": async_url,
        "FAKE_MODEL_DELAY": "0.02",
        "FAKE_MODEL_WORDS": "500",
    }
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "--factory",
            "--app-dir",
            str(EXAMPLES),
            "streaming_app:app_from_environment",
            "--port",
            str(port),
        ],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    for _ in range(100):
        try:
            httpx.get(f"{base}/chats/none", timeout=1)
            break
        except httpx.TransportError:
            time.sleep(0.1)
    try:
        yield process, base
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def test_a_crash_mid_stream_keeps_every_chunk_sent(
    server: tuple[subprocess.Popen[bytes], str], archive: ChatArchive
) -> None:
    process, base = server
    received = ""
    with httpx.stream(
        "POST", f"{base}/chats/crash/messages", json={"text": "tell me a long story"}, timeout=10
    ) as response:
        for piece in response.iter_text():
            received += piece
            if received.count(" ") >= 25:
                os.kill(process.pid, signal.SIGKILL)  # the process dies mid-answer
                break
    process.wait(10)
    answer = archive.get("crash").messages[1]
    assert answer.completed is False
    assert isinstance(answer.content, str)
    assert answer.content.startswith(received)  # every chunk the client got was stored first
    assert len(answer.content.split()) >= 25
    # The streaming guide's recipe finds it, and completes it with what was received.
    with archive.engine.connect() as connection:
        unfinished = connection.execute(
            text("SELECT chat_id, uid, created_at FROM messages WHERE NOT completed ORDER BY created_at")
        ).all()
    assert [(row.chat_id, row.uid) for row in unfinished] == [("crash", answer.uid)]
    done = archive.complete_message("crash", answer.uid, finish_reason="interrupted")
    assert (done.content, done.completed, done.finish_reason) == (answer.content, True, "interrupted")


def test_the_example_app_completes_a_whole_answer(
    server: tuple[subprocess.Popen[bytes], str], archive: ChatArchive
) -> None:
    _, base = server
    with httpx.Client(timeout=60) as client:
        text = client.post(f"{base}/chats/whole/messages", json={"text": "short"}).text
        shown = client.get(f"{base}/chats/whole").json()
    assert len(text.split()) == 500
    assert shown["messages"][1]["content"] == text
    assert shown["messages"][1]["completed"] is True
    assert archive.get("whole").messages[1].finish_reason == "stop"
    missing = httpx.get(f"{base}/chats/none", timeout=10)  # was a 500, ChatNotFound's traceback in the log
    assert (missing.status_code, missing.json()) == (404, {"detail": "chat 'none' not found"})


def test_the_example_app_keeps_both_first_questions_of_a_new_chat(
    async_url: str, archive: ChatArchive
) -> None:
    """Two first questions to a new chat at once: both appends find no chat, and
    the second request's save replaced the chat the first had just created (its
    question was lost, as two concurrent requests on PostgreSQL showed). The
    other request is made to win the race here, between the append and the save."""
    from examples.streaming_app import create_app

    class Raced(AsyncChatArchive):
        async def append(self, chat_id: str, messages: Any, **fields: Any) -> Any:
            try:
                return await super().append(chat_id, messages, **fields)
            except ChatNotFound:
                other = {"role": "user", "content": "the other request's question"}
                await self.save({"chat_id": chat_id, "messages": [other]})
                raise

    async def words(question: str) -> Any:
        yield "an answer"

    async def scenario() -> list[Any]:
        async with Raced(async_url) as raced:
            transport = httpx.ASGITransport(app=create_app(raced, words))
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
                response = await client.post("/chats/new/messages", json={"text": "my question"})
                assert response.text == "an answer"
        return archive.get("new").to_openai()

    assert [(m["role"], m["content"]) for m in asyncio.run(scenario())] == [
        ("user", "the other request's question"),
        ("user", "my question"),
        ("assistant", "an answer"),
    ]


def test_the_async_archive_migrates_and_toggles_security(empty_database: URL, dialect: str) -> None:
    async def scenario() -> None:
        async with AsyncChatArchive(empty_database) as aarchive:
            assert aarchive.url.database == empty_database.database
            assert await aarchive.current_revision() is None
            await aarchive.upgrade()
            assert await aarchive.check() == []
            assert await aarchive.row_level_security() is False
            if dialect == "postgresql":
                await aarchive.set_row_level_security(True)
                assert await aarchive.row_level_security() is True
                await aarchive.set_row_level_security(False)
            await aarchive.save({"chat_id": "migrated"})
            await aarchive.downgrade("base")
            assert await aarchive.current_revision() is None

    asyncio.run(scenario())


def test_a_chunk_lands_on_the_message_it_names_while_that_message_is_deleted(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    """A chunk whose insert is slow (a trigger sleeps) while the message it
    names is deleted and a new message begun at its position lands on its own
    message (and goes with it), or is refused: never on the new message."""
    archive, _ = pg_archive
    archive.save({"chat_id": "c", "messages": [{"role": "user", "content": "Why?"}]})
    named = archive.begin_message("c", uid="X")
    with archive.engine.begin() as connection:
        connection.execute(
            text(
                "CREATE FUNCTION slow_chunk() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.text = 'late' THEN PERFORM pg_sleep(1); END IF; RETURN NEW; END $$"
            )
        )
        connection.execute(
            text(
                "CREATE TRIGGER slow BEFORE INSERT ON message_chunks FOR EACH ROW EXECUTE FUNCTION slow_chunk()"
            )
        )
    outcome: list[object] = []

    def late_chunk() -> None:
        try:
            archive.append_chunk("c", named.uid, "late")
            outcome.append("stored")
        except InvalidArgument as exc:
            outcome.append(exc)

    writer = threading.Thread(target=late_chunk)
    writer.start()
    time.sleep(0.3)  # the chunk's insert is in the trigger's sleep
    archive.truncate("c", 1, delete=True)
    began = archive.begin_message("c", uid="Y")
    writer.join()
    archive.append_chunk("c", began.uid, "own")
    assert outcome == ["stored"] or isinstance(outcome[0], InvalidArgument)
    assert [message.content for message in archive.get("c").messages] == ["Why?", "own"]
