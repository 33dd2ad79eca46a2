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
    chatarchive runs on the psycopg connection directly (its one-statement read
    on PostgreSQL, COPY), which no SQLAlchemy event sees."""
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

    originals = {name: getattr(psycopg.Cursor, name) for name in ("execute", "executemany", "copy")}
    event.listen(engine, "before_cursor_execute", record)
    for name, method in originals.items():
        setattr(psycopg.Cursor, name, direct(method))
    try:
        yield executed
    finally:
        for name, method in originals.items():
            setattr(psycopg.Cursor, name, method)
        event.remove(engine, "before_cursor_execute", record)
