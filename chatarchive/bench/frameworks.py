"""The framework integrations against each framework's own SQL store.

For each framework that has a PostgreSQL store of its own (LangChain's
``langchain-postgres``, the OpenAI Agents SDK's ``SQLAlchemySession``,
LlamaIndex's ``PostgresChatStore``), the same chats are played turn by turn
(a turn: a user message and what answers it) into chatarchive's integration
and into the framework's store, in the same database, the two taking turns on
each chat. Each turn is an add of its messages and a get of the whole history,
timed apart, as an application does them. At the end, each store's histories
are compared with what went in: how many chats come back equal. The chats
are played twice, each time against the peer anew: with the archive's search
terms written by each add (``sync`` indexing, the default), and with them left
to ``index_pending`` (``deferred``), as no peer indexes anything.

A framework whose packages are not installed is left out (its figures are
``None``); PostgreSQL only, as the peer stores are.
"""

from __future__ import annotations

import asyncio
import importlib.util
import statistics
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from sqlalchemy import create_engine
from sqlalchemy.engine import URL, Engine
from sqlalchemy.ext.asyncio import create_async_engine

from chatarchive import formats
from chatarchive._api import AsyncChatArchive, ChatArchive
from chatarchive._document import ChatDocument

__all__ = ["FRAMEWORKS", "INDEXING_PASSES", "measure_frameworks"]

#: Each framework: the peer store it is measured against, and the packages both need.
FRAMEWORKS = {
    "langchain": ("langchain-postgres PostgresChatMessageHistory", ("langchain_core", "langchain_postgres")),
    "openai_agents": ("openai-agents SQLAlchemySession", ("agents",)),
    "llama_index": (
        "llama-index PostgresChatStore",
        ("llama_index.core", "llama_index.storage.chat_store.postgres"),
    ),
}

Progress = Callable[[str, int, int], None]


@dataclass
class _Store:
    """One store's operations on one chat: add a turn's messages, get the history."""

    add: Callable[[list[Any]], object]
    get: Callable[[], list[Any]]


def available(framework: str) -> bool:
    _, packages = FRAMEWORKS[framework]
    try:
        return all(importlib.util.find_spec(package) is not None for package in packages)
    except ModuleNotFoundError:
        return False


#: The archive's indexing in each pass, and its figures' prefix after the
#: framework's name: ``sync`` (the default) and ``deferred`` (search terms
#: written by ``index_pending``, off the adds' path, as no peer indexes anything).
INDEXING_PASSES = {"sync": "", "deferred": "_deferred"}


def measure_frameworks(
    archive: ChatArchive, engine: Engine, url: URL, docs: Sequence[dict[str, Any]], progress: Progress
) -> dict[str, float | None]:
    """The figures of every framework (``None`` for one not installed, and
    for all on a database other than PostgreSQL): one pass with each of the
    archive's ways of indexing (``INDEXING_PASSES``), each against the peer anew."""
    figures: dict[str, float | None] = {}
    for framework in FRAMEWORKS:
        for indexing, suffix in INDEXING_PASSES.items():
            name = f"{framework}{suffix}"
            figures.update(dict.fromkeys(_figure_names(name)))
            if engine.dialect.name != "postgresql" or not available(framework):
                continue
            chats = [ChatDocument.parse({**doc, "chat_id": f"{name}-{doc['chat_id']}"}) for doc in docs]
            with _indexing(archive, indexing), _stores(framework, archive, url) as make:
                figures.update(_play(name, chats, make, progress))
    return figures


def _figure_names(name: str) -> list[str]:
    """The figures of one pass (``name``: the framework's, with its pass's suffix)."""
    return [
        f"{name}_{side}_{operation}_{statistic}_ms"
        for side in ("archive", "peer")
        for operation in ("add", "get")
        for statistic in ("median", "p95")
    ] + [f"{name}_archive_exact_chats", f"{name}_peer_exact_chats"]


@contextmanager
def _indexing(archive: ChatArchive, indexing: str) -> Iterator[None]:
    """The archive with ``indexing`` for the pass, and its own again after it."""
    own = archive.search_settings().indexing
    archive.configure_search(indexing=indexing)
    try:
        yield
    finally:
        archive.configure_search(indexing=own)


def _turns(items: list[Any], is_user: Callable[[Any], bool]) -> list[list[Any]]:
    """Items in turns: each user message begins one (and the first item, the first)."""
    turns: list[list[Any]] = []
    for item in items:
        if not turns or is_user(item):
            turns.append([])
        turns[-1].append(item)
    return turns


def _play(
    framework: str,
    chats: Sequence[ChatDocument],
    make: Callable[[ChatDocument], tuple[_Store, _Store, list[list[Any]]]],
    progress: Progress,
) -> dict[str, float | None]:
    timings: dict[str, list[float]] = {
        f"{side}_{op}": [] for side in ("archive", "peer") for op in ("add", "get")
    }
    exact = {"archive": 0, "peer": 0}
    for number, chat in enumerate(chats):
        progress(f"{framework}: a turn at a time", number, len(chats))
        ours, theirs, turns = make(chat)
        sides = [("archive", ours), ("peer", theirs)]
        for index, turn in enumerate(turns):
            for side, store in sides if index % 2 == 0 else reversed(sides):
                start = time.perf_counter()
                store.add(turn)
                timings[f"{side}_add"].append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                store.get()
                timings[f"{side}_get"].append((time.perf_counter() - start) * 1000)
        went_in = [item for turn in turns for item in turn]
        for side, store in sides:
            exact[side] += store.get() == went_in
    figures: dict[str, float | None] = {}
    for name, values in timings.items():
        figures[f"{framework}_{name}_median_ms"] = statistics.median(values)
        ordered = sorted(values)
        figures[f"{framework}_{name}_p95_ms"] = ordered[
            min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))
        ]
    for side, count in exact.items():
        figures[f"{framework}_{side}_exact_chats"] = count
    return figures


@contextmanager
def _stores(
    framework: str, archive: ChatArchive, url: URL
) -> Iterator[Callable[[ChatDocument], tuple[_Store, _Store, list[list[Any]]]]]:
    """For each chat: chatarchive's store, the peer's, and the chat's turns in
    the framework's types. Each peer connects as its framework's own
    constructor does (a connection or engines of its own), never through the
    archive's pool: the peers' transactions end in a rollback, and psycopg
    forgets the statements prepared on a connection at each rollback, so a
    shared pool would make the archive plan its statements again and again."""
    if framework == "langchain":
        yield from _langchain(archive, url)
    elif framework == "openai_agents":
        yield from _openai_agents(url)
    else:
        yield from _llama_index(archive, url)


def _langchain(archive: ChatArchive, url: URL) -> Iterator[Callable[[ChatDocument], Any]]:
    import psycopg
    from langchain_core.messages import HumanMessage, messages_from_dict
    from langchain_postgres import PostgresChatMessageHistory

    from chatarchive.integrations.langchain import ChatArchiveMessageHistory

    with psycopg.connect(
        url.set(drivername="postgresql").render_as_string(hide_password=False)
    ) as connection:
        PostgresChatMessageHistory.create_tables(connection, "langchain_bench")

        def make(chat: ChatDocument) -> tuple[_Store, _Store, list[list[Any]]]:
            messages = messages_from_dict(formats.export(chat, "langchain"))
            ours = ChatArchiveMessageHistory(archive, chat.chat_id)
            theirs = PostgresChatMessageHistory(
                "langchain_bench",
                str(uuid.uuid5(uuid.NAMESPACE_URL, chat.chat_id)),
                sync_connection=connection,
            )
            return (
                _Store(ours.add_messages, lambda: ours.messages),
                _Store(theirs.add_messages, lambda: theirs.messages),
                _turns(messages, lambda message: isinstance(message, HumanMessage)),
            )

        yield make


def _openai_agents(url: URL) -> Iterator[Callable[[ChatDocument], Any]]:
    """The Agents SDK's stores: chatarchive's on an asyncio archive of its own (which reads the
    indexing the pass set on the database)."""
    from agents.extensions.memory.sqlalchemy_session import SQLAlchemySession

    from chatarchive.integrations.openai_agents import ChatArchiveSession

    theirs_engine = create_async_engine(url.set(drivername="postgresql+psycopg"))
    runner = asyncio.Runner()
    async_archive = AsyncChatArchive(url)  # as an application makes it, on engines of its own
    try:

        def make(chat: ChatDocument) -> tuple[_Store, _Store, list[list[Any]]]:
            items = formats.export(chat, "openai-responses")
            ours = ChatArchiveSession(chat.chat_id, async_archive)
            theirs = SQLAlchemySession(chat.chat_id, engine=theirs_engine, create_tables=True)
            return (
                _Store(lambda turn: runner.run(ours.add_items(turn)), lambda: runner.run(ours.get_items())),
                _Store(
                    lambda turn: runner.run(theirs.add_items(turn)), lambda: runner.run(theirs.get_items())
                ),
                _turns(items, lambda item: item.get("role") == "user"),
            )

        yield make
    finally:
        runner.run(async_archive.close())
        runner.run(theirs_engine.dispose())
        runner.close()


def _llama_index(archive: ChatArchive, url: URL) -> Iterator[Callable[[ChatDocument], Any]]:
    from llama_index.core.llms import ChatMessage
    from llama_index.storage.chat_store.postgres import PostgresChatStore
    from sqlalchemy.ext.asyncio import AsyncSession
    from sqlalchemy.orm import sessionmaker

    from chatarchive.integrations.llama_index import ChatArchiveChatStore

    # The engines PostgresChatStore.from_uri would make (with psycopg, the driver installed here).
    theirs_url = url.set(drivername="postgresql+psycopg")
    theirs_sync = create_engine(theirs_url)
    theirs_async = create_async_engine(theirs_url)
    theirs = PostgresChatStore(
        session=sessionmaker(theirs_sync),
        async_session=sessionmaker(theirs_async, class_=AsyncSession),  # type: ignore[call-overload]
        table_name="llama_index_bench",
    )
    ours = ChatArchiveChatStore.from_archive(archive)
    try:

        def make(chat: ChatDocument) -> tuple[_Store, _Store, list[list[Any]]]:
            messages = [ChatMessage.model_validate(item) for item in formats.export(chat, "llama-index")]
            key = chat.chat_id

            def adder(store: Any) -> Callable[[list[Any]], None]:
                def add(turn: list[Any]) -> None:
                    for message in turn:  # the interface adds one message at a time
                        store.add_message(key, message)

                return add

            return (
                _Store(adder(ours), lambda: ours.get_messages(key)),
                _Store(adder(theirs), lambda: theirs.get_messages(key)),
                _turns(messages, lambda message: message.role.value == "user"),
            )

        yield make
    finally:
        theirs_sync.dispose()
        asyncio.run(theirs_async.dispose())
