"""A distributed archive on a real Citus cluster: ``distribute`` and back,
and the same results as on one PostgreSQL server."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import URL, text

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    ConflictError,
    NotSupported,
    SchemaNotReady,
    analytics,
)
from chatarchive._backends import database_errors
from tests.support.commands import invoke
from tests.support.databases import citus_database, libpq, require_citus, throwaway_database
from tests.support.statements import recorded_statements

MOMENT = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)


@pytest.fixture
def citus_url() -> Iterator[URL]:
    with citus_database() as url:
        yield url


@pytest.fixture
def distributed(citus_url: URL) -> Iterator[ChatArchive]:
    with ChatArchive(citus_url) as archive:
        archive.upgrade()
        archive.distribute(shard_count=4)
        yield archive


def chat(chat_id: str, user_id: str, words: str) -> dict[str, Any]:
    return {
        "chat_id": chat_id,
        "user_id": user_id,
        "model": "gpt-5",
        "messages": [
            {
                "role": "user",
                "content": f"{words} 为什么PCR会出现非特异性条带",
                "uid": f"{chat_id}-q",
                "created_at": MOMENT,
            },
            {
                "role": "assistant",
                "content": None,
                "uid": f"{chat_id}-call",
                "created_at": MOMENT,
                "tool_calls": [
                    {"id": "t1", "type": "function", "function": {"name": "gel", "arguments": "{}"}}
                ],
                "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
            },
            {
                "role": "tool",
                "tool_call_id": "t1",
                "content": "two bands",
                "uid": f"{chat_id}-tool",
                "created_at": MOMENT,
            },
        ],
        "feedback": [{"id": f"{chat_id}-f", "score": 0.30000000000000004, "created_at": MOMENT}],
    }


def _workload(archive: ChatArchive) -> dict[str, Any]:
    """Every kind of operation, and what reads then give back, without the times the writes took."""
    archive.save(chat("one", "ann", "primer dimers"))
    archive.save(chat("one", "ann", "primer dimers again"))  # over a stored chat
    archive.save_many([chat(f"many-{index}", "bob", f"batch {index}") for index in range(30)])
    archive.save_many(
        [chat(f"many-{index}", "bob", f"batch again {index}") for index in range(30)], writers=2
    )
    archive.save_many([chat(f"bulk-{index}", "cy", "bulk annealing") for index in range(20)], bulk=True)
    archive.append("one", [{"role": "assistant", "content": "Raise the annealing temperature.", "uid": "a1"}])
    archive.append("one", [{"role": "user", "content": "Which one?", "uid": "q2"}], expected_version=3)
    archive.regenerate("one", "q2", [{"role": "user", "content": "Which temperature?", "uid": "q2b"}])
    streamed = archive.begin_message("one", uid="s1")
    archive.append_chunk("one", streamed.uid, "Try 62 ")
    archive.append_chunk("one", streamed.uid, "degrees.")
    archive.complete_message("one", streamed.uid)
    archive.add_feedback("one", {"id": "f2", "message_uid": "a1", "score": 1, "created_at": MOMENT})
    archive.update("many-3", title="Gel", tags=["lab"])
    archive.truncate("many-4", 1)
    archive.delete("many-5")
    archive.configure_search(indexing="deferred")
    archive.append("many-6", [{"role": "user", "content": "deferred zebra", "uid": "z1"}])
    deferred = archive.search("zebra")
    archive.index_pending()
    archive.configure_search(indexing="sync")
    deleted = archive.delete_older_than(datetime.now(UTC) + timedelta(days=1), user_id="cy", batch_size=7)

    def timeless(value: Any) -> Any:
        if isinstance(value, dict):
            return {
                key: timeless(item) for key, item in value.items() if key not in ("created_at", "updated_at")
            }
        if isinstance(value, list):
            return [timeless(item) for item in value]
        return value

    return {
        "documents": [timeless(doc.model_dump(mode="json")) for doc in archive.export(batch_size=7)],
        "tree": timeless(archive.get_tree("one").document.model_dump(mode="json")),
        "chats": [(s.chat_id, s.message_count) for s in archive.list_chats(limit=100).items],
        "count": archive.count_chats(),
        "ids": archive.chat_ids(limit=100),
        "deferred": (len(deferred), deferred.pending_chats),
        "search": [
            (hit.chat_id, hit.message_uid, hit.snippet, round(hit.rank, 9))
            for hit in archive.search("条带 primer")
        ],
        "zebra": [hit.message_uid for hit in archive.search("zebra")],
        "deleted": deleted,
        "tools": [(row.tool_name, row.calls) for row in analytics.tool_usage(archive)],
        "models": [(row.model, row.chats, row.prompt_tokens) for row in analytics.model_usage(archive)],
        "users": [(row.user_id, row.chats, row.messages) for row in analytics.user_activity(archive)],
        "feedback": [(row.feedback_count, row.mean_score) for row in analytics.feedback_summary(archive)],
    }


def test_every_operation_gives_on_a_distributed_archive_what_it_gives_on_one_server(
    distributed: ChatArchive, tmp_path: Path
) -> None:
    with throwaway_database("postgresql", tmp_path) as url, ChatArchive(url) as single:
        single.upgrade()
        expected = _workload(single)
    assert _workload(distributed) == expected
    assert expected["documents"]
    assert expected["search"]
    assert expected["deferred"] == (0, 1)
    assert distributed.check() == []


def test_distribute_moves_stored_chats_records_it_and_is_idempotent(citus_url: URL) -> None:
    with ChatArchive(citus_url) as archive:
        archive.upgrade()
        archive.save(chat("before", "ann", "stored first"))
        assert archive.distribution().distributed is False
        reached = archive.distribute(shard_count=6)
        assert (reached.distributed, reached.shard_count, reached.workers, reached.problems) == (
            True,
            6,
            2,
            (),
        )
        assert archive.distribute(shard_count=6) == reached
        assert archive.get("before").messages[0].uid == "before-q"
        with psycopg.connect(libpq(citus_url)) as connection:
            shards = connection.execute(
                "SELECT count(DISTINCT nodeport) FROM citus_shards WHERE table_name = 'messages'::regclass"
            ).fetchone()
            placed = connection.execute(
                "SELECT table_name::text, citus_table_type, colocation_id FROM citus_tables ORDER BY 1"
            ).fetchall()
        assert shards == (2,)  # on both workers
        kinds = {name: kind for name, kind, _ in placed}
        reference = {"archive_settings", "model_prices"}  # the archive's own, on every node
        assert {kinds.pop(name) for name in reference} == {"reference"}
        assert set(kinds.values()) == {"distributed"}
        # Every table with the chats' shards, but the attachments (by SHA-256) and the keys (by user), apart.
        apart = {"attachments", "user_keys"}
        by_chat = {colocation for name, _, colocation in placed if name not in {*reference, *apart}}
        assert len(by_chat) == 1
        assert not {colocation for name, _, colocation in placed if name in apart} & by_chat
        assert set(kinds) == {
            "chats",
            "chat_tags",
            "messages",
            "content_parts",
            "feedback",
            "message_chunks",
            "tool_calls",
            "message_terms",
            "checkpoints",
            "checkpoint_blobs",
            "checkpoint_writes",
            "embeddings",
            "attachments",
            "user_keys",
        }


def test_undistribute_gives_back_one_server_as_the_migrations_made_it(distributed: ChatArchive) -> None:
    distributed.save(chat("kept", "ann", "kept whole"))
    distributed.set_row_level_security(True)  # on while distributed, and kept
    back = distributed.undistribute()
    assert (back.distributed, back.shard_count, back.problems) == (False, None, ())
    assert distributed.undistribute() == back
    assert distributed.check() == []  # comments and all
    assert distributed.get("kept").feedback[0].score == 0.30000000000000004
    assert distributed.row_level_security() is True
    assert distributed.for_user("bob").list_chats().items == []
    assert [s.chat_id for s in distributed.for_user("ann").list_chats().items] == ["kept"]


def test_db_check_says_where_the_rows_are_and_what_is_not_as_distribute_left_it(
    citus_url: URL, distributed: ChatArchive
) -> None:
    database = citus_url.render_as_string(hide_password=False)
    checked = invoke(database, "db", "check")
    assert (checked.returncode, checked.stdout.strip()) == (0, "ok")
    assert "distributed over 2 Citus" in checked.stderr
    assert "4 shards per table" in checked.stderr
    with distributed.engine.begin() as connection:
        connection.execute(text("DELETE FROM archive_settings WHERE name = 'distribution'"))
    failed = invoke(database, "db", "check", expect=1)
    assert failed.returncode == 1
    assert "chats is distributed but the archive does not record it" in failed.stderr
    undone = invoke(database, "db", "undistribute")
    assert undone.stdout.strip().startswith("on one server")
    redone = invoke(database, "db", "distribute", "--shards", "3")
    assert "3 shards per table" in redone.stdout


def test_distribute_refuses_what_is_not_a_citus_coordinator_at_the_newest_revision(
    citus_url: URL, pg_archive: tuple[ChatArchive, str]
) -> None:
    archive, _ = pg_archive
    with pytest.raises(NotSupported, match="distribute needs"):
        archive.distribute()
    with ChatArchive(citus_url) as empty:
        with pytest.raises(SchemaNotReady, match="newest revision"):
            empty.distribute()
        empty.upgrade()
        assert empty.distribution().distributed is False
        # Row-level security on before distributing stays on, with its policies, which Citus takes.
        empty.set_row_level_security(True)
        assert empty.distribute(shard_count=2).problems == ()
        assert empty.row_level_security() is True


def test_a_unique_violation_names_the_constraint_not_the_shard(distributed: ChatArchive) -> None:
    distributed.save(chat("dup", "ann", "one"))
    with pytest.raises(ConflictError) as caught, database_errors(), distributed.engine.begin() as connection:
        connection.execute(text("INSERT INTO chats SELECT * FROM chats WHERE chat_id = 'dup'"))
    assert caught.value.constraint == "pk_chats"


def test_floats_reach_the_workers_exactly_whatever_the_session_prints(citus_url: URL) -> None:
    with psycopg.connect(libpq(citus_url), autocommit=True) as connection:
        connection.execute(f'ALTER DATABASE "{citus_url.database}" SET extra_float_digits = 0')
    with ChatArchive(citus_url) as archive:
        archive.upgrade()
        archive.distribute(shard_count=2)
        archive.save(chat("f", "ann", "floats"))
        archive.add_feedback("f", {"id": "g", "score": 1 / 3})
        assert [item.score for item in archive.get("f").feedback] == [0.30000000000000004, 1 / 3]


def test_the_asyncio_archive_works_on_a_distributed_archive(citus_url: URL, distributed: ChatArchive) -> None:
    async def work() -> list[dict[str, Any]]:
        async with AsyncChatArchive(citus_url.render_as_string(hide_password=False)) as archive:
            await archive.save_many([chat(f"a{index}", "ann", "async") for index in range(5)])
            await archive.append("a1", [{"role": "assistant", "content": "async answer"}])
            return (await archive.get("a1")).to_openai()

    assert asyncio.run(work())[-1] == {"role": "assistant", "content": "async answer"}
    assert distributed.count_chats() == 5


def test_a_read_of_one_chat_goes_to_the_one_worker_that_holds_it(distributed: ChatArchive) -> None:
    distributed.save(chat("routed", "ann", "one shard"))
    distributed.regenerate(
        "routed", "routed-tool", [{"role": "tool", "tool_call_id": "t1", "content": "one band"}]
    )
    with recorded_statements(distributed.engine) as statements:
        document = distributed.get("routed")
    assert document.messages[-1].content == "one band"
    (sql, params), *_ = [(sql, params) for sql, params in statements if "json_build_array" in sql]
    with psycopg.connect(libpq(distributed.url)) as connection:
        plan = [row[0] for row in connection.execute(f"EXPLAIN {sql}", params).fetchall()]
    assert "  Task Count: 1" in plan


def test_each_statement_of_an_append_goes_to_the_chat_s_worker_alone(distributed: ChatArchive) -> None:
    distributed.save(chat("turns", "ann", "routed writes"))
    distributed.append("turns", [{"role": "user", "content": "warm"}])
    with recorded_statements(distributed.engine) as statements:
        distributed.append("turns", [{"role": "user", "content": "which worker?"}])
        distributed.append(
            "turns", [{"role": "assistant", "content": "that one", "uid": "given"}], expected_version=3
        )
    assert distributed.get("turns").messages[-1].uid == "given"
    with psycopg.connect(libpq(distributed.url)) as connection:
        for sql, params in statements:
            plan = [row[0].strip() for row in connection.execute(f"EXPLAIN {sql}", params).fetchall()]
            tasks = [line for line in plan if line.startswith("Task Count")]
            assert tasks == ["Task Count: 1"], (sql, plan)


def _revisions() -> list[str]:
    from alembic.script import ScriptDirectory

    from chatarchive._migrations import alembic_config

    script = ScriptDirectory.from_config(alembic_config())
    return [revision.revision for revision in reversed(list(script.walk_revisions()))]


def test_every_revision_migrates_down_and_up_on_a_distributed_archive(distributed: ChatArchive) -> None:
    """Each revision's downgrade and upgrade run on the distributed tables (a
    table a revision makes is distributed as it is made) and keep the chats."""
    distributed.save(chat("kept", "ann", "primer dimers"))
    before = distributed.get("kept")
    revisions = _revisions()
    for revision in reversed(revisions[:-1]):  # down to the first, one at a time
        distributed.downgrade(revision, lock_timeout=5)
        assert distributed.distribution().problems == (), revision
    for revision in revisions[1:]:
        distributed.upgrade(revision, lock_timeout=5)
        assert distributed.distribution().problems == (), revision
    assert distributed.distribution().distributed
    assert distributed.check() == []
    assert distributed.get("kept") == before
    assert [hit.message_uid for hit in distributed.search("条带")] == ["kept-q"]


def test_a_migration_s_lock_timeout_holds_on_the_workers(distributed: ChatArchive, citus_url: URL) -> None:
    """Shards locked on a worker stop the migration after its lock timeout
    instead of letting it wait there without end."""
    distributed.save(chat("kept", "ann", "primer dimers"))
    revisions = _revisions()
    host, port = require_citus()[1][0]
    with psycopg.connect(libpq(citus_url.set(host=host, port=port))) as worker:
        # Were the timeout lost on the way, the locks go after 30 s and the test fails, not hangs.
        worker.execute("SET idle_in_transaction_session_timeout = '30s'")
        worker.execute("SET citus.override_table_visibility TO off")  # show the shards
        worker.execute("SET citus.enable_manual_changes_to_shards TO on")  # and lock them
        shards = worker.execute(
            "SELECT relname FROM pg_class WHERE relkind = 'r' AND relname ~ '^(chats|messages|message_terms|model_prices)_[0-9]+$'"
        ).fetchall()
        assert shards
        for (shard,) in shards:
            worker.execute(f"LOCK TABLE {shard} IN ACCESS EXCLUSIVE MODE")
        with pytest.raises(ConflictError):
            # Down past the last revision (which, without an embedder, touches no table) to one that alters chats.
            distributed.downgrade(revisions[-3], lock_timeout=0.5)
    assert distributed.current_revision() == revisions[-1]  # the whole downgrade rolled back
