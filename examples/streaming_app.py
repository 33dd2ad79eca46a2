"""A FastAPI app that streams a model's answer to the client while the archive
keeps every chunk: if the process dies mid-answer, the text sent so far is in
the archive, in a message marked incomplete.

Run it from this directory (with ``pip install fastapi uvicorn``)::

    CHATARCHIVE_DATABASE_URL=sqlite:///chatarchive.db \\
        uvicorn --factory streaming_app:app_from_environment
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI, HTTPException
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from chatarchive import AsyncChatArchive, ChatNotFound, ConflictError

__all__ = ["Question", "app_from_environment", "create_app", "fake_model"]

Model = Callable[[str], AsyncIterator[str]]


async def fake_model(question: str) -> AsyncIterator[str]:
    """A stand-in for an LLM: a long answer, a word at a time."""
    delay = float(os.environ.get("FAKE_MODEL_DELAY", "0.01"))
    for number in range(int(os.environ.get("FAKE_MODEL_WORDS", "50"))):
        await asyncio.sleep(delay)
        yield f"word{number} "


class Question(BaseModel):
    text: str


def create_app(archive: AsyncChatArchive, model: Model = fake_model) -> FastAPI:
    app = FastAPI()

    @app.post("/chats/{chat_id}/messages")
    async def ask(chat_id: str, question: Question) -> StreamingResponse:
        user_message = {"role": "user", "content": question.text}
        try:
            await archive.append(chat_id, [user_message])
        except ChatNotFound:
            try:  # create the chat, unless another request has created it meanwhile
                await archive.save({"chat_id": chat_id, "messages": [user_message]}, expected_version=0)
            except ConflictError:  # a plain save would have replaced that request's messages
                await archive.append(chat_id, [user_message])
        answer = await archive.begin_message(chat_id, model="fake-model")

        async def tokens() -> AsyncIterator[str]:
            async for token in model(question.text):
                await archive.append_chunk(chat_id, answer.uid, token)  # stored before it is sent
                yield token
            await archive.complete_message(chat_id, answer.uid, finish_reason="stop")

        return StreamingResponse(tokens(), media_type="text/plain")

    @app.get("/chats/{chat_id}")
    async def show(chat_id: str) -> dict[str, Any]:
        try:
            return (await archive.get(chat_id)).model_dump(mode="json")
        except ChatNotFound as missing:
            raise HTTPException(status_code=404, detail=str(missing)) from None

    return app


def app_from_environment() -> FastAPI:
    """The app on the archive named by ``CHATARCHIVE_DATABASE_URL``."""
    return create_app(AsyncChatArchive(os.environ.get("CHATARCHIVE_DATABASE_URL")))
