"""SQL the migrations share so that each revision runs on a distributed
archive (Citus) as on one PostgreSQL server.

A revision that makes a table distributes it in the same step, before its
foreign keys (Citus takes a foreign key to a distributed table only from a
table colocated with it); a policy that reads ``chats`` is made only where
the tables are not distributed (Citus refuses a subquery in a policy). Each
statement decides on the server, when it runs, whether the archive is
distributed, so the SQL that ``db upgrade --sql`` prints is right for either.

Released revisions call these functions: what one returns may gain cases,
never change for the ones it had.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["distribute_new_table", "if_distributed", "unless_distributed"]

#: Sets ``distributed``: whether Citus is in the database and ``chats`` is one of its distributed tables.
_DECIDE = (
    "IF to_regclass('pg_catalog.pg_dist_partition') IS NOT NULL THEN "
    "EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition "
    "WHERE logicalrelid = to_regclass(''chats'') AND partmethod = ''h'')' INTO distributed; "
    "END IF;"
)


def _do(statements: Sequence[str], *, when: str) -> str:
    body = " ".join(f"{statement};" for statement in statements)
    return f"DO $$ DECLARE distributed boolean := false; BEGIN {_DECIDE} IF {when} THEN {body} END IF; END $$"


def if_distributed(statements: Sequence[str]) -> str:
    """A statement that runs ``statements`` (PL/pgSQL) only on a distributed archive."""
    return _do(statements, when="distributed")


def unless_distributed(statements: Sequence[str]) -> str:
    """A statement that runs ``statements`` (PL/pgSQL) only where ``chats`` is not distributed."""
    return _do(statements, when="NOT distributed")


def distribute_new_table(table: str, *, reference: bool = False, by: str | None = None) -> str:
    """On a distributed archive: distribute the revision's new ``table`` by
    ``chat_id``, colocated with ``chats`` (``reference``: a copy on every
    node instead; ``by``: by that column of its own, in as many shards as
    ``chats``, colocated with no table), while it is empty and before any
    foreign key of its."""
    if reference:
        call = f"PERFORM create_reference_table('{table}')"
    elif by is not None:
        call = (
            f"PERFORM create_distributed_table('{table}', '{by}', shard_count => "
            "(SELECT shard_count::int FROM citus_tables WHERE table_name = 'chats'::regclass), "
            "colocate_with => 'none')"
        )
    else:
        call = f"PERFORM create_distributed_table('{table}', 'chat_id', colocate_with => 'chats')"
    return if_distributed([call])
