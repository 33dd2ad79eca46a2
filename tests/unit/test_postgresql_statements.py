"""How chatarchive hands its hot statements to psycopg: constants that need no
escaping are written into the SQL, everything else is sent as a parameter."""

from __future__ import annotations

import psycopg
import pytest
from sqlalchemy import Integer, Text, bindparam, func, literal, literal_column, select
from sqlalchemy.dialects import postgresql
from sqlalchemy.exc import DBAPIError

from chatarchive import DatabaseError
from chatarchive._backends import database_errors
from chatarchive._backends.postgresql.engine import _prepared

DIALECT = postgresql.psycopg.dialect()  # type: ignore[no-untyped-call]


def test_plain_constants_are_written_into_the_sql_and_the_rest_is_sent() -> None:
    statement = select(literal(7), literal("sync"), literal(-2) + 1, literal("it's"), literal("two words"))
    prepared = _prepared(statement, DIALECT)
    assert "7::INTEGER" in prepared.sql
    assert "'sync'::VARCHAR" in prepared.sql
    # A negative number after a minus would start a comment; a quote or a space needs escaping: sent instead.
    assert sorted(prepared.fixed.values(), key=str) == [-2, "it's", "two words"]
    assert prepared.sql.count("$") == 3
    assert "%(" not in prepared.sql
    assert sorted(prepared.values({}), key=str) == [-2, "it's", "two words"]


def test_parameters_are_positional_each_named_once_and_percent_signs_unescaped() -> None:
    first, second = bindparam("first", type_=Text()), bindparam("second", type_=Integer())
    statement = select(first, second, func.upper(first), literal_column("'100%'"))
    prepared = _prepared(statement, DIALECT)
    assert prepared.names == ("first", "second")
    assert "$1" in prepared.sql
    assert "$2" in prepared.sql
    assert "$3" not in prepared.sql
    assert "'100%'" in prepared.sql
    assert "%%" not in prepared.sql
    assert prepared.values({"second": 2, "first": "a"}) == ["a", 2]


def test_a_full_disk_a_read_only_database_or_no_privilege_is_a_lasting_failure() -> None:
    def raised(error: Exception) -> DatabaseError:
        with pytest.raises(DatabaseError) as caught, database_errors():
            raise DBAPIError("INSERT", {}, error)
        return caught.value

    for lasting in (
        psycopg.errors.DiskFull("could not extend file: No space left on device"),
        psycopg.errors.ReadOnlySqlTransaction("cannot execute INSERT in a read-only transaction"),
        psycopg.errors.InsufficientPrivilege("permission denied for table chats"),
    ):
        assert raised(lasting).lasting, lasting
    assert not raised(psycopg.errors.QueryCanceled("canceling statement due to statement timeout")).lasting
