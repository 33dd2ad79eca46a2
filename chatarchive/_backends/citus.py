"""Citus: one archive over a cluster of PostgreSQL servers.

Every table of the archive is distributed by ``chat_id`` and colocated with
``chats``: a chat's rows, in every table, live in shards of one worker, so
that a chat's reads and writes go to that worker alone and joins on
``chat_id`` run where the rows are. ``archive_settings`` is a reference table
(a copy on every node), which writes read; the migrations' version table
stays on the coordinator. ``archive_settings`` also records that the archive
is distributed (``distribution``), which ``db check`` holds against what Citus
reports. ``attachments`` is distributed by ``sha256`` and ``user_keys`` by
``user_id``, each colocated with no table: read and written by their keys,
apart from the rows that use them.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import Connection, text

from chatarchive._exceptions import NotSupported
from chatarchive._schema import SEARCH_TERMS, metadata

__all__ = [
    "DEFAULT_SHARD_COUNT",
    "DISTRIBUTION_SETTING",
    "Distribution",
    "distribute",
    "distribution",
    "is_distributed",
    "prepare_migration",
    "undistribute",
]

#: Shards per distributed table when ``distribute`` is not told otherwise:
#: Citus' own default, room for a few workers of a few cores each.
DEFAULT_SHARD_COUNT = 32

#: Distributed by a column of their own, each table apart (colocated with none).
BY_OWN_KEY = {"attachments": "sha256", "user_keys": "user_id"}
#: Distributed by chat_id, colocated with chats (in the order their foreign keys need).
BY_CHAT = [table.name for table in metadata.sorted_tables if "chat_id" in table.c] + [SEARCH_TERMS]
DISTRIBUTED = [*BY_CHAT, *BY_OWN_KEY]
#: Copied to every node.
REFERENCE = [
    table.name
    for table in metadata.sorted_tables
    if "chat_id" not in table.c and table.name not in BY_OWN_KEY
]
#: The ``archive_settings`` row that records a distributed archive.
DISTRIBUTION_SETTING = "distribution"


@dataclass(frozen=True)
class Distribution:
    """Where an archive's rows are: on one PostgreSQL server, or distributed over Citus workers."""

    #: The Citus extension's version in the database (``None``: plain PostgreSQL or SQLite).
    citus: str | None = None
    #: Active worker nodes (Citus only).
    workers: int = 0
    #: Whether the archive's tables are distributed.
    distributed: bool = False
    #: Shards of each distributed table.
    shard_count: int | None = None
    #: Where the tables are not as a distributed (or an undistributed) archive
    #: has them: each a sentence (empty: consistent).
    problems: tuple[str, ...] = ()


def distribution(connection: Connection) -> Distribution:
    """The archive's distribution, as Citus reports it and as recorded."""
    version = connection.execute(text("SELECT extversion FROM pg_extension WHERE extname = 'citus'")).scalar()
    if version is None:
        return Distribution()
    workers = int(
        connection.execute(text("SELECT count(*) FROM citus_get_active_worker_nodes()")).scalar_one()
    )
    kinds = _kinds(connection)
    existing = _existing(connection)
    recorded = (
        connection.execute(
            text("SELECT value FROM archive_settings WHERE name = :name"), {"name": DISTRIBUTION_SETTING}
        ).scalar()
        if "archive_settings" in existing
        else None
    )
    distributed = kinds.get("chats") == "h"
    shards = None
    if distributed:
        shards = connection.execute(
            text("SELECT shard_count FROM citus_tables WHERE table_name = 'chats'::regclass")
        ).scalar()
    problems = []
    for table in existing:  # those of the archive's revision
        wanted = ("h" if table in DISTRIBUTED else "n") if distributed else None
        if kinds.get(table) != wanted:
            state = {"h": "distributed", "n": "a reference table", None: "local"}.get(
                kinds.get(table), "other"
            )
            problems.append(f"table {table} is {state}, unlike chats")
    if distributed != (recorded is not None) and "archive_settings" in existing:  # where it can be recorded
        problems.append(
            "the archive is recorded as distributed but chats is not"
            if recorded is not None
            else "chats is distributed but the archive does not record it (run 'chatarchive db distribute')"
        )
    return Distribution(
        citus=str(version),
        workers=workers,
        distributed=distributed,
        shard_count=None if shards is None else int(shards),
        problems=tuple(problems),
    )


def prepare_migration(connection: Connection) -> None:
    """At the start of a migration's transaction on a distributed archive:
    statements over all shards one shard at a time (a revision's DDL and its
    updates in one transaction; Citus refuses parallel ones after DDL), and
    the ``SET LOCAL`` that follows (the lock timeout) carried to the workers,
    where the shards' locks are taken."""
    if is_distributed(connection):
        connection.execute(text("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"))
        connection.execute(text("SET LOCAL citus.propagate_set_commands TO 'local'"))


def is_distributed(connection: Connection) -> bool:
    """Whether Citus is in the database and ``chats`` is one of its distributed tables."""
    if connection.execute(text("SELECT to_regclass('pg_catalog.pg_dist_partition')")).scalar() is None:
        return False
    return bool(
        connection.execute(
            text(
                "SELECT EXISTS (SELECT 1 FROM pg_dist_partition "
                "WHERE logicalrelid = to_regclass('chats') AND partmethod = 'h')"
            )
        ).scalar()
    )


def distribute(connection: Connection, shard_count: int) -> Distribution:
    """Distribute every table not distributed yet (moving its rows to the
    workers), and record it; in the caller's transaction."""
    current = distribution(connection)
    if current.citus is None:
        raise NotSupported(
            "distribute needs a Citus coordinator: the citus extension is not in this database"
        )
    if current.workers == 0:
        raise NotSupported(
            "distribute needs a Citus coordinator with workers: none is active (citus_add_node)"
        )
    # Rows are copied to the shards one table after another, in this transaction.
    connection.execute(text("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"))
    kinds = _kinds(connection)
    for table in REFERENCE:
        if table not in kinds:
            connection.execute(text("SELECT create_reference_table(:table)"), {"table": table})
    for table in DISTRIBUTED:
        if table in kinds:
            continue
        column = BY_OWN_KEY.get(table, "chat_id")
        if table == "chats":  # the others take its shards
            call, params = "shard_count => :shards", {"shards": shard_count}
        elif table in BY_OWN_KEY:
            call, params = "shard_count => :shards, colocate_with => 'none'", {"shards": shard_count}
        else:
            call, params = "colocate_with => 'chats'", {}
        connection.execute(
            text(f"SELECT create_distributed_table(:table, :column, {call})"),
            {"table": table, "column": column, **params},
        )
    connection.execute(
        text(
            "INSERT INTO archive_settings (name, value) VALUES (:name, 'citus') "
            "ON CONFLICT (name) DO UPDATE SET value = excluded.value"
        ),
        {"name": DISTRIBUTION_SETTING},
    )
    return distribution(connection)


def undistribute(connection: Connection) -> Distribution:
    """Bring every table's rows back to the coordinator as plain tables."""
    current = distribution(connection)
    if current.citus is None:
        return current
    connection.execute(text("SET LOCAL citus.multi_shard_modify_mode TO 'sequential'"))
    connection.execute(
        text("DELETE FROM archive_settings WHERE name = :name"), {"name": DISTRIBUTION_SETTING}
    )
    kinds = _kinds(connection)
    # Citus makes the tables anew, without their comments (the data dictionary): keep them.
    comments = connection.execute(_COMMENTS, {"tables": DISTRIBUTED + REFERENCE}).scalars().all()
    if "chats" in kinds:
        connection.execute(text("SELECT undistribute_table('chats', cascade_via_foreign_keys => true)"))
    for table in DISTRIBUTED + REFERENCE:
        if table in _kinds(connection):
            connection.execute(text("SELECT undistribute_table(:table)"), {"table": table})
    for comment in comments:
        connection.exec_driver_sql(comment)
    return distribution(connection)


#: The statements that give the tables' and columns' comments back.
_COMMENTS = text(
    "SELECT CASE WHEN d.objsubid = 0 THEN format('COMMENT ON TABLE %I IS %L', c.relname, d.description) "
    "ELSE format('COMMENT ON COLUMN %I.%I IS %L', c.relname, a.attname, d.description) END "
    "FROM pg_description d JOIN pg_class c ON c.oid = d.objoid "
    "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = d.objsubid "
    "WHERE d.classoid = 'pg_class'::regclass AND c.relname = ANY(:tables) "
    "AND c.relnamespace = to_regnamespace(current_schema())"
)


def _existing(connection: Connection) -> list[str]:
    """The archive's tables that the database has (an older revision has fewer)."""
    return [
        table
        for table in DISTRIBUTED + REFERENCE
        if connection.execute(text("SELECT to_regclass(:table)"), {"table": table}).scalar() is not None
    ]


def _kinds(connection: Connection) -> dict[str, str]:
    rows = connection.execute(
        text(
            "SELECT logicalrelid::regclass::text, partmethod FROM pg_dist_partition "
            "WHERE logicalrelid::regclass::text = ANY(:tables)"
        ),
        {"tables": DISTRIBUTED + REFERENCE},
    ).all()
    return {str(name): str(kind) for name, kind in rows}
