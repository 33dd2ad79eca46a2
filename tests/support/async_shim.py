"""Run the asyncio API through the synchronous tests.

The repository tests are written against the synchronous API; with these shims
the same tests drive AsyncChatRepository on an AsyncSession (every call awaited
on one event loop), so the whole suite checks both APIs.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any

from sqlalchemy import Engine
from sqlalchemy.ext.asyncio import AsyncSession, AsyncSessionTransaction
from sqlalchemy.orm import Session

from chatarchive import AsyncChatRepository


class SavepointShim:
    def __init__(self, transaction: AsyncSessionTransaction, runner: asyncio.Runner) -> None:
        self._transaction = transaction
        self._runner = runner

    def rollback(self) -> None:
        self._runner.run(self._transaction.rollback())


class SessionShim:
    """The parts of a Session the tests use, over an AsyncSession."""

    def __init__(self, session: AsyncSession, runner: asyncio.Runner) -> None:
        self.async_session = session
        self.runner = runner

    def execute(self, statement: Any, *args: Any, **kwargs: Any) -> Any:
        return self.runner.run(self.async_session.execute(statement, *args, **kwargs))

    def begin_nested(self) -> SavepointShim:
        async def begin() -> AsyncSessionTransaction:
            return await self.async_session.begin_nested()

        return SavepointShim(self.runner.run(begin()), self.runner)

    def get_bind(self) -> Engine:
        bind = self.async_session.bind
        assert bind is not None
        return bind.sync_engine

    def run_sync(self, call: Callable[[Session], Any]) -> Any:
        return self.runner.run(self.async_session.run_sync(call))


class RepositoryShim:
    """AsyncChatRepository's calls, run to completion one by one."""

    def __init__(self, repository: AsyncChatRepository, session: SessionShim) -> None:
        self._repository = repository
        self._session = session

    def __getattr__(self, name: str) -> Any:
        method = getattr(self._repository, name)
        runner = self._session.runner

        def call(*args: Any, **kwargs: Any) -> Any:
            result = method(*args, **kwargs)
            if inspect.isasyncgen(result):
                return iter(runner.run(_collect(result)))
            return runner.run(result)

        return call


async def _collect(generator: Any) -> list[Any]:
    return [item async for item in generator]


def in_sync_session(session: Session | SessionShim, call: Callable[[Session], Any]) -> Any:
    """``call(session)`` on a real Session, also behind the async shim."""
    if isinstance(session, SessionShim):
        return session.run_sync(call)
    return call(session)
