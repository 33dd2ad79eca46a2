"""How chatarchive hands its hot statements to psycopg: constants that need no
escaping are written into the SQL, everything else is sent as a parameter."""

from __future__ import annotations

from sqlalchemy import literal, select
from sqlalchemy.dialects import postgresql

from chatarchive._backends.postgresql import _prepared

DIALECT = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]


def test_plain_constants_are_written_into_the_sql_and_the_rest_is_sent() -> None:
    statement = select(literal(7), literal("sync"), literal(-2) + 1, literal("it's"), literal("two words"))
    sql, fixed, _ = _prepared(statement, DIALECT)
    assert "7::INTEGER" in sql
    assert "'sync'::VARCHAR" in sql
    # A negative number after a minus would start a comment; a quote or a space needs escaping: sent instead.
    assert sorted(fixed.values(), key=str) == [-2, "it's", "two words"]
    assert sql.count("%(") == 3
