"""Record the statements a block runs, for tests that count or inspect them."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from sqlalchemy import Connection, Engine, event

#: A statement as the driver got it, and its parameters.
Executed = tuple[str, Any]


@contextmanager
def recorded_statements(engine: Engine | Connection) -> Iterator[list[Executed]]:
    """Every statement run in the block on ``engine``'s connections: those
    SQLAlchemy runs, seen through its ``before_cursor_execute`` event, and those
    chatarchive runs on the psycopg connection directly, synchronous or
    asynchronous (its one-statement read on PostgreSQL, COPY), which no
    SQLAlchemy event sees."""
    executed: list[Executed] = []
    through_sqlalchemy = threading.local()

    def record(_conn: Any, _cursor: Any, statement: str, parameters: Any, _context: Any, _many: bool) -> None:
        executed.append((statement, parameters))
        through_sqlalchemy.pending = True  # the driver call that follows is this one

    def direct(method: Callable[..., Any]) -> Callable[..., Any]:
        def recording(
            self: psycopg.Cursor[Any], query: Any, params: Any = None, *args: Any, **kwargs: Any
        ) -> Any:
            if getattr(through_sqlalchemy, "pending", False):
                through_sqlalchemy.pending = False
            else:
                executed.append((str(query), params))
            return method(self, query, params, *args, **kwargs)

        return recording

    def direct_async(method: Callable[..., Any]) -> Callable[..., Any]:
        recording = direct(method)  # records, then returns the method's awaitable

        async def awaited(*args: Any, **kwargs: Any) -> Any:
            return await recording(*args, **kwargs)

        return awaited

    originals = {
        (cursor, name): getattr(cursor, name)
        for cursor in (psycopg.Cursor, psycopg.AsyncCursor)
        for name in ("execute", "executemany", "copy")
    }
    event.listen(engine, "before_cursor_execute", record)
    for (cursor, name), method in originals.items():
        # The asyncio API's COPY returns an async context manager, not a coroutine.
        wrap = direct_async if cursor is psycopg.AsyncCursor and name != "copy" else direct
        setattr(cursor, name, wrap(method))
    try:
        yield executed
    finally:
        for (cursor, name), method in originals.items():
            setattr(cursor, name, method)
        event.remove(engine, "before_cursor_execute", record)
