"""Migrations on empty databases of both dialects: one head, up, down, up, no drift."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import subprocess
import sys
import threading
import time
import zipfile
from contextlib import closing
from pathlib import Path
from typing import Any

import psycopg
import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from click.testing import CliRunner
from sqlalchemy import URL, Column, Engine, Integer, MetaData, Table, Text, inspect
from sqlalchemy.orm import Session

from chatarchive import (
    AsyncChatArchive,
    ChatArchive,
    ConflictError,
    DatabaseError,
    InvalidArgument,
    SchemaNotReady,
    analytics,
    create_engine,
    is_archive_table,
)
from chatarchive._migrations import alembic_config
from chatarchive._schema import SCHEMA_REVISION, SEARCH_OBJECTS, VERSION_TABLE, metadata
from chatarchive.cli import main
from tests.support.databases import libpq, throwaway_database

ROOT = Path(__file__).resolve().parents[2]
VIEWS = {
    "message_texts",
    "tool_call_results",
    "chat_stats",
    "daily_usage",
    "feedback_summary",
    "active_path",
    "message_costs",
}


def upgrade(engine: Engine, revision: str = "head") -> None:
    ChatArchive(engine=engine).upgrade(revision)


def downgrade(engine: Engine, revision: str) -> None:
    ChatArchive(engine=engine).downgrade(revision)


def current_revision(engine: Engine) -> str | None:
    return ChatArchive(engine=engine).current_revision()


def check(engine: Engine) -> list[str]:
    return ChatArchive(engine=engine).check()


def revisions() -> list[str]:
    script = ScriptDirectory.from_config(alembic_config())
    return [revision.revision for revision in reversed(list(script.walk_revisions()))]


def archive_views(engine: Engine) -> set[str]:
    """The views in the archive's schema, but for the Citus extension's own
    (``citus_tables``, ``citus_schemas``), which it keeps there too."""
    return {name for name in inspect(engine).get_view_names() if not name.startswith("citus_")}


def test_single_head() -> None:
    assert len(ScriptDirectory.from_config(alembic_config()).get_heads()) == 1


def test_upgrade_from_empty_creates_the_models_tables(empty_database: URL) -> None:
    engine = create_engine(empty_database)
    try:
        assert current_revision(engine) is None
        upgrade(engine)
        tables = {name for name in inspect(engine).get_table_names() if not name.startswith(SEARCH_OBJECTS)}
        assert tables == set(metadata.tables) | {VERSION_TABLE}
        views = archive_views(engine)
        assert views == VIEWS
        assert check(engine) == []
    finally:
        engine.dispose()


def test_down_and_up_through_every_revision(empty_database: URL) -> None:
    engine = create_engine(empty_database)
    try:
        steps = revisions()
        for revision in steps:
            upgrade(engine, revision)
            assert current_revision(engine) == revision
        for revision in reversed(steps[:-1]):
            downgrade(engine, revision)
            assert current_revision(engine) == revision
        downgrade(engine, "base")
        assert current_revision(engine) is None
        assert set(inspect(engine).get_table_names()) <= {VERSION_TABLE}
        assert archive_views(engine) == set()
        upgrade(engine)
        assert check(engine) == []
    finally:
        engine.dispose()


def test_an_archive_without_its_search_index_migrates_down_and_up(empty_database: URL) -> None:
    """The revisions that create the search objects drop them on the way down
    only if they are there: an archive may have dropped them."""
    archive = ChatArchive(empty_database)
    try:
        archive.upgrade()
        archive.set_search_index(False)
        assert archive.check() == []  # a supported state, not drift
        archive.downgrade("base")
        assert set(inspect(archive.engine).get_table_names()) <= {VERSION_TABLE}
        archive.upgrade()
        assert archive.search_index()
        archive.save({"chat_id": "c", "messages": [{"role": "user", "content": "annealing"}]})
        assert [hit.chat_id for hit in archive.search("annealing")] == ["c"]
    finally:
        archive.close()


def test_check_reports_a_database_that_is_behind(empty_database: URL) -> None:
    engine = create_engine(empty_database)
    try:
        with engine.connect():  # an empty database (a SQLite file is made by connecting)
            pass
        assert "revision none" in check(engine)[0]
        with pytest.raises(SchemaNotReady, match="chatarchive db upgrade"):
            ChatArchive(engine=engine).get("x")
        # The analytics functions read the views: through the archive they ask
        # for its revision; through a session, a missing view is SchemaNotReady
        # on both databases (SQLite's "no such table" was a DatabaseError).
        with pytest.raises(SchemaNotReady, match="revision none"):
            analytics.tool_usage(ChatArchive(engine=engine))
        with Session(engine) as session, pytest.raises(SchemaNotReady, match="chatarchive db upgrade"):
            analytics.tool_usage(session)
    finally:
        engine.dispose()


def test_check_leaves_an_applications_own_tables_alone_and_sees_drift_in_ours(empty_database: URL) -> None:
    """An application's tables in the database the archive shares (what the
    version table's own name is for) were reported as tables to drop: ``db
    check`` failed on every shared database, and ``alembic revision
    --autogenerate`` from the checkout wrote a migration dropping them."""
    engine = create_engine(empty_database)
    try:
        upgrade(engine)
        with engine.begin() as connection:
            connection.exec_driver_sql("CREATE TABLE invoices (id integer PRIMARY KEY, chat_id text)")
            connection.exec_driver_sql("CREATE INDEX invoices_chat ON invoices (chat_id)")
        assert check(engine) == []
        alembic = Path(sys.executable).with_name("alembic")
        result = subprocess.run(
            [str(alembic), "check"],
            cwd=ROOT,
            env=_env_with_url(empty_database),
            capture_output=True,
            text=True,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        # Our own tables are still compared: an index of ours dropped by hand is drift.
        with engine.begin() as connection:
            connection.exec_driver_sql("DROP INDEX ix_chats_user_id_updated_at_chat_id")
        (problem,) = check(engine)
        assert "add_index" in problem
        assert "ix_chats_user_id_updated_at_chat_id" in problem
    finally:
        engine.dispose()


def test_an_applications_autogenerate_leaves_the_archives_tables_alone(empty_database: URL) -> None:
    """The other side of a shared database: an application's own Alembic
    autogenerate saw chatarchive's tables (SQLite's full-text shadow tables
    among them) as tables to drop. ``is_archive_table`` names every one."""
    application = MetaData()
    Table("invoices", application, Column("id", Integer, primary_key=True), Column("chat_id", Text))
    engine = create_engine(empty_database)
    try:
        upgrade(engine)
        with engine.connect() as connection:
            tables = inspect(connection).get_table_names()
            unhooked = compare_metadata(MigrationContext.configure(connection), application)

            def include_name(name: str | None, kind: str, parent_names: object) -> bool:
                return kind != "table" or name is None or not is_archive_table(name)

            hooked = MigrationContext.configure(connection, opts={"include_name": include_name})
            diff = compare_metadata(hooked, application)
        assert {table.name for _, table in (d for d in unhooked if d[0] == "remove_table")} == set(tables)
        assert [(kind, table.name) for kind, table in diff] == [("add_table", "invoices")]
        assert all(is_archive_table(name) for name in tables)
        assert not any(map(is_archive_table, ["invoices", "message_search_history", "alembic_version"]))
    finally:
        engine.dispose()


def test_an_archive_lives_in_the_schema_its_search_path_names(tmp_path: Path) -> None:
    """PostgreSQL: migrations, reads, search, analytics, row-level security and
    the drift check all work in a schema of the archive's own, and leave public empty."""
    from tests.support.databases import throwaway_database

    with throwaway_database("postgresql", tmp_path) as url:
        with psycopg.connect(libpq(url), autocommit=True) as admin:
            admin.execute("CREATE SCHEMA chat")
        archive = ChatArchive(url.update_query_dict({"options": "-csearch_path=chat"}))
        try:
            archive.upgrade()
            archive.save(
                {"chat_id": "c", "user_id": "u", "messages": [{"role": "user", "content": "annealing"}]}
            )
            assert archive.get("c").messages[0].content == "annealing"
            assert [hit.chat_id for hit in archive.search("annealing")] == ["c"]
            assert analytics.daily_usage(archive)[0].messages == 1
            archive.set_row_level_security(True)
            assert [c.chat_id for c in archive.for_user("u").list_chats().items] == ["c"]
            assert archive.check() == []
            with psycopg.connect(libpq(url)) as connection:
                placed = connection.execute(
                    "SELECT table_schema, count(*) FROM information_schema.tables "
                    "WHERE table_schema IN ('public', 'chat') GROUP BY 1"
                ).fetchall()
            assert dict(placed) == {
                "chat": len(metadata.tables) + 2 + len(VIEWS)
            }  # + version table, search terms
            archive.downgrade("base")
            assert set(inspect(archive.engine).get_table_names()) <= {VERSION_TABLE}
        finally:
            archive.close()


def test_an_unknown_revision_is_refused_and_changes_nothing(empty_database: URL) -> None:
    with ChatArchive(empty_database) as archive:
        archive.upgrade("0004")
        for migrate in (archive.upgrade, archive.downgrade):
            with pytest.raises(
                InvalidArgument, match=r"'0099' \(revisions: 0001, 0002, .*, head, base\)"
            ) as raised:
                migrate("0099")
            assert raised.value.argument == "revision"
        assert archive.current_revision() == "0004"


def test_a_failed_upgrade_of_a_new_sqlite_file_leaves_no_file(tmp_path: Path) -> None:
    path = tmp_path / "new.db"
    url = f"sqlite:///{path}"

    async def upgrade_through_asyncio(revision: str) -> None:
        async with AsyncChatArchive(url) as twin:
            await twin.upgrade(revision)

    with ChatArchive(url) as archive:
        for unreachable in ("0099", "+20", "0099:0001"):
            with pytest.raises(InvalidArgument, match="revisions: 0001") as raised:
                archive.upgrade(unreachable)
            assert raised.value.argument == "revision"
            with pytest.raises(InvalidArgument, match="revisions: 0001"):
                asyncio.run(upgrade_through_asyncio(unreachable))
            assert not path.exists()
        archive.upgrade("+2")  # reachable from an empty database
        assert archive.current_revision() == "0002"
    asyncio.run(upgrade_through_asyncio("head"))
    assert ChatArchive(url).current_revision() == SCHEMA_REVISION


def _env_with_url(url: URL) -> dict[str, str]:
    return {**os.environ, "CHATARCHIVE_DATABASE_URL": url.render_as_string(hide_password=False)}


def test_processes_that_upgrade_at_once_take_turns(empty_database: URL) -> None:
    # Replicas of an application that each run 'db upgrade' as they start. On
    # PostgreSQL all but one failed with a duplicate key in pg_type.
    chatarchive = Path(sys.executable).with_name("chatarchive")
    upgrading = [
        subprocess.Popen(
            [str(chatarchive), "db", "upgrade"],
            env=_env_with_url(empty_database),
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(4)
    ]
    errors = [process.communicate(timeout=300)[1] for process in upgrading]
    assert [process.returncode for process in upgrading] == [0] * 4, errors
    engine = create_engine(empty_database)
    try:
        assert check(engine) == []
    finally:
        engine.dispose()


def test_sql_printed_for_review_migrates_as_the_command_would(empty_database: URL) -> None:
    # A DBA reviews what 'db upgrade' would run, then runs it by hand.
    chatarchive = str(Path(sys.executable).with_name("chatarchive"))
    url = empty_database.render_as_string(hide_password=False)
    engine = create_engine(empty_database)

    def printed(*command: str, status: int = 0) -> str:
        done = subprocess.run([chatarchive, "--db", url, "db", *command], capture_output=True, text=True)
        assert done.returncode == status, done.stderr
        return done.stdout

    def run_by_hand(script: str) -> None:
        if engine.dialect.name == "sqlite":
            with closing(sqlite3.connect(str(empty_database.database))) as connection:
                connection.executescript(script)
        else:
            with psycopg.connect(libpq(empty_database), autocommit=True) as connection:
                connection.execute(script.encode())

    try:
        upgrade(engine, "0004")
        assert printed("upgrade", "0099", "--sql", status=1) == ""  # no half script
        script = printed("upgrade", "--sql")
        assert "Running upgrade 0004 -> 0005" in script
        assert "0003" not in script  # from where the database is
        assert current_revision(engine) == "0004"  # nothing run
        run_by_hand(script)
        assert current_revision(engine) == SCHEMA_REVISION
        assert check(engine) == []
        run_by_hand(printed("downgrade", "0004", "--sql"))
        assert current_revision(engine) == "0004"
        upgrade(engine)  # what the script left is what 0004 is
        assert check(engine) == []
    finally:
        engine.dispose()


def test_alembic_runs_from_the_checkout(empty_database: URL) -> None:
    alembic = Path(sys.executable).with_name("alembic")
    result = subprocess.run(
        [str(alembic), "upgrade", "head"],
        cwd=ROOT,
        env=_env_with_url(empty_database),
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stderr
    engine = create_engine(empty_database)
    try:
        assert check(engine) == []
    finally:
        engine.dispose()


def test_migrations_run_from_a_built_wheel(tmp_path: Path, empty_database: URL) -> None:
    """The wheel carries the scripts; an installed copy can migrate on its own."""
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-w",
            str(tmp_path),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = tmp_path.glob("chatarchive-*.whl")
    site = tmp_path / "site"
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        archive.extractall(site)
    assert "chatarchive/_alembic/env.py" in names
    assert any(name.startswith("chatarchive/_alembic/versions/") for name in names)
    code = "from chatarchive.cli import main; main()"
    env = _env_with_url(empty_database) | {"PYTHONPATH": str(site)}
    result = subprocess.run(
        [sys.executable, "-c", code, "db", "upgrade"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    located = subprocess.run(
        [
            sys.executable,
            "-c",
            "from chatarchive._migrations import script_location; print(script_location())",
        ],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert located.stdout.strip() == str(site / "chatarchive" / "_alembic")
    engine = create_engine(empty_database)
    try:
        assert check(engine) == []
    finally:
        engine.dispose()


def test_models_know_the_newest_revision() -> None:
    assert ScriptDirectory.from_config(alembic_config()).get_current_head() == SCHEMA_REVISION


def test_string_contents_move_onto_messages_and_back(empty_database: URL) -> None:
    """Revision 0005 moves string contents from content_parts to messages.text;
    its downgrade moves them back; documents, views and search read the same."""
    from sqlalchemy import text

    from tests.support.analytics_fixture import CHATS

    archive = ChatArchive(empty_database)
    try:
        archive.upgrade()
        archive.save_many(CHATS)
        streaming = archive.begin_message("alpha")  # a string content not written yet
        archive.append_chunk("alpha", streaming.uid, "still typing")
        chat_ids = [doc["chat_id"] for doc in CHATS]
        before = [archive.get(chat_id) for chat_id in chat_ids]
        texts_sql = text("SELECT chat_id, position, text FROM message_texts ORDER BY chat_id, position")
        string_parts = text(
            "SELECT count(*) FROM content_parts p JOIN messages m "
            "ON m.chat_id = p.chat_id AND m.position = p.message_position WHERE m.content_form = 'string'"
        )
        with archive.engine.connect() as connection:
            texts = connection.execute(texts_sql).all()
            strings = connection.execute(
                text("SELECT count(*) FROM messages WHERE text IS NOT NULL")
            ).scalar_one()
            assert connection.execute(string_parts).scalar_one() == 0
        assert strings > 10

        downgrade(archive.engine, "0004")
        with archive.engine.connect() as connection:
            assert "text" not in {column["name"] for column in inspect(connection).get_columns("messages")}
            assert connection.execute(string_parts).scalar_one() == strings
            assert connection.execute(texts_sql).all() == texts

        upgrade(archive.engine)
        assert [archive.get(chat_id) for chat_id in chat_ids] == before
        with archive.engine.connect() as connection:
            assert connection.execute(string_parts).scalar_one() == 0
            assert connection.execute(texts_sql).all() == texts
        assert [h.chat_id for h in archive.search("dimers")] == ["alpha", "alpha"]
        assert archive.complete_message("alpha", streaming.uid).content == "still typing"
    finally:
        archive.close()


def test_every_column_of_the_archive_explains_itself(pg_archive: tuple[ChatArchive, str]) -> None:
    """PostgreSQL: every table and every column of the tables and views carries a
    comment, so that ``\\d+`` explains the schema (the Alembic version table aside)."""
    archive, _ = pg_archive
    with archive.engine.connect() as connection:
        undescribed = connection.exec_driver_sql(
            "SELECT c.relname || '.' || a.attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
            "WHERE c.relnamespace = 'public'::regnamespace AND c.relkind IN ('r', 'v') AND a.attnum > 0 "
            "AND NOT a.attisdropped AND col_description(c.oid, a.attnum) IS NULL AND c.relname <> %(version)s",
            {"version": VERSION_TABLE},
        ).all()
        tables = connection.exec_driver_sql(
            "SELECT relname FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'r' "
            "AND obj_description(oid, 'pg_class') IS NULL AND relname <> %(version)s",
            {"version": VERSION_TABLE},
        ).all()
        views = connection.exec_driver_sql(
            "SELECT count(*) FROM pg_class WHERE relnamespace = 'public'::regnamespace AND relkind = 'v'"
        ).scalar_one()
    assert undescribed == []
    assert tables == []
    assert views == len(VIEWS)


def test_0009_lets_text_of_megabytes_of_distinct_words_in_and_keeps_it_on_the_way_down(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    """Migration 0009 indexes the first 100,000 characters of each text. An
    archive holding a text the old indexes cannot take refuses to go back below
    it, and is left as it was."""
    archive, url = pg_archive
    pasted = " ".join(f"w{n:07d}x" for n in range(240_000))  # 2.4 MB, every word different
    archive.save({"chat_id": "paste", "messages": [{"role": "user", "content": pasted}]})
    with pytest.raises(DatabaseError, match="too long for tsvector"):
        archive.downgrade("0008")
    assert archive.current_revision() == SCHEMA_REVISION
    assert [hit.chat_id for hit in archive.search("w0000000x")] == ["paste"]
    archive.delete("paste")
    # Building an index reads the row versions that a running transaction may still
    # see: wait for any that began before the delete (an autovacuum ANALYZE, say). In any
    # database: a transaction that holds an id, wherever it runs, holds the horizon back too.
    with psycopg.connect(url.replace("postgresql+psycopg", "postgresql"), autocommit=True) as watcher:
        deleted_at = watcher.execute("SELECT clock_timestamp()").fetchone()
        older: list[Any] = []
        for _ in range(1200):
            older = watcher.execute(
                "SELECT datname, backend_type, state, left(query, 80) FROM pg_stat_activity "
                "WHERE pid <> pg_backend_pid() AND (backend_xmin IS NOT NULL OR backend_xid IS NOT NULL) "
                "AND xact_start < %s",
                deleted_at,
            ).fetchall()
            if not older:
                break
            time.sleep(0.05)
        assert not older, f"transactions older than the delete still run: {older}"
    archive.downgrade("0008")
    archive.upgrade()
    assert archive.check() == []


def test_a_lock_timeout_bounds_each_wait_for_a_lock_but_not_the_turn(
    pg_archive: tuple[ChatArchive, str],
) -> None:
    """``db upgrade --lock-timeout`` on a live archive: a long query on a table
    the migration alters makes it give up, changing nothing, instead of waiting
    while every query piles up behind its lock request; waiting for another
    migration to finish (the advisory lock of 'take turns') is not bounded."""
    archive, url = pg_archive
    libpq = url.replace("postgresql+psycopg", "postgresql")
    archive.downgrade("0008")
    with psycopg.connect(libpq) as reader:
        reader.execute("SELECT count(*) FROM messages")  # holds its lock on messages until it ends
        result = CliRunner().invoke(main, ["--db", url, "db", "upgrade", "--lock-timeout", "0.2"])
        assert result.exit_code == 1, result.output
        assert "another transaction holds a lock this one needs; try again" in result.output
        assert archive.current_revision() == "0008"
        with pytest.raises(ConflictError):
            archive.upgrade(lock_timeout=0.2)

        async def upgrade_through_asyncio() -> None:
            async with AsyncChatArchive(url) as twin:
                await twin.upgrade(lock_timeout=0.2)

        with pytest.raises(ConflictError):
            asyncio.run(upgrade_through_asyncio())
        assert archive.current_revision() == "0008"
    outcome: list[BaseException] = []

    def upgrade_in_turn() -> None:
        try:
            archive.upgrade(lock_timeout=0.05)
        except BaseException as exc:
            outcome.append(exc)

    with psycopg.connect(libpq, autocommit=True) as other_migration:
        other_migration.execute("SELECT pg_advisory_lock(hashtext('chatarchive migrations'))")
        upgrading = threading.Thread(target=upgrade_in_turn)
        upgrading.start()
        for _ in range(1200):  # until it has waited far past its lock timeout, which must not apply
            waited = other_migration.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
                "AND wait_event = 'advisory' AND clock_timestamp() - query_start > interval '300 ms'"
            ).fetchone()
            if waited and waited[0]:
                break
            time.sleep(0.05)
        other_migration.execute("SELECT pg_advisory_unlock(hashtext('chatarchive migrations'))")
        upgrading.join(60)
    assert outcome == []
    assert archive.current_revision() == SCHEMA_REVISION
    script = CliRunner().invoke(
        main, ["--db", url, "db", "downgrade", "0008", "--sql", "--lock-timeout", "1.5"]
    )
    assert script.exit_code == 0, script.output
    assert "BEGIN;\n\nSET LOCAL lock_timeout = 1500;" in script.output


@pytest.mark.parametrize("seconds", [0, -1, 86_400, float("nan"), "5", True])
def test_an_unusable_lock_timeout_is_refused(archive: ChatArchive, seconds: object) -> None:
    with pytest.raises(InvalidArgument, match="lock_timeout must be") as raised:
        archive.upgrade(lock_timeout=seconds)  # type: ignore[arg-type]
    assert raised.value.argument == "lock_timeout"
    if not isinstance(seconds, (str, bool)):
        url = archive.url.render_as_string(hide_password=False)
        result = CliRunner().invoke(main, ["--db", url, "db", "upgrade", "--lock-timeout", str(seconds)])
        assert result.exit_code in (1, 2), result.output  # NaN passes click's range, not chatarchive's
        assert "lock" in result.output.replace("-", "_")


def test_0011_makes_chats_single_paths_and_its_downgrade_keeps_or_drops_branches_as_told(
    empty_database: URL,
) -> None:
    """Revision 0011 turns every stored chat into one path; going back below it
    refuses to lose the branches, naming them, unless told to drop them, and
    then drops only the messages off the active path and says which."""
    from sqlalchemy import text

    archive = ChatArchive(empty_database)
    url = empty_database.render_as_string(hide_password=False)
    try:
        archive.upgrade()
        archive.save({"chat_id": "linear", "messages": [{"role": "user", "content": "PCR?"}]})
        archive.append("linear", [{"role": "assistant", "content": "Primers."}])
        assert archive.downgrade("0010") == []  # linear chats: nothing to drop, nothing asked
        with archive.engine.connect() as connection:
            columns = {column["name"] for column in inspect(connection).get_columns("messages")}
            assert not {"parent_position", "sibling_index", "on_path"} & columns
        upgrade(archive.engine)
        assert archive.get("linear").messages[1].content == "Primers."
        with archive.engine.connect() as connection:
            rows = connection.execute(
                text(
                    "SELECT position, parent_position, sibling_index, on_path FROM messages ORDER BY position"
                )
            ).all()
            chat = connection.execute(
                text("SELECT active_leaf, path_length FROM chats WHERE chat_id = 'linear'")
            ).one()
        assert [tuple(row) for row in rows] == [(0, None, 0, True), (1, 0, 0, True)]
        assert tuple(chat) == (1, 2)

        # Branches: a regenerated answer with feedback, and a rejected follow-up below the old answer.
        archive.save(
            {
                "chat_id": "tree",
                "messages": [
                    {"role": "system", "content": "be brief", "uid": "s"},
                    {"role": "user", "content": "Why two bands?", "uid": "q"},
                    {"role": "assistant", "content": "Primer dimers.", "uid": "a1"},
                    {"role": "user", "content": "Sure?", "uid": "q2"},
                    {"role": "assistant", "content": "Contamination.", "uid": "a2", "parent": "q"},
                    {"role": "user", "content": "Thanks", "uid": "t"},
                ],
                "feedback": [{"id": "down", "message_uid": "a1", "score": -1}, {"id": "chat", "score": 1}],
            }
        )
        path = archive.get("tree")
        with pytest.raises(
            InvalidArgument, match=r"would lose 2 messages off the active path in 1 chats: 'tree' \(2\)"
        ) as caught:
            archive.downgrade("0010")
        assert caught.value.argument == "drop_branches"
        assert archive.current_revision() == SCHEMA_REVISION
        assert archive.get_tree("tree").messages[2].uid == "a1"
        refused = CliRunner().invoke(main, ["--db", url, "db", "downgrade", "0010"])
        assert refused.exit_code == 1
        assert "--drop-branches" in refused.output
        printed = CliRunner().invoke(main, ["--db", url, "db", "downgrade", "0010", "--sql"])
        assert "off the active path" in printed.output  # the refusal, in the script too

        dropped = CliRunner().invoke(main, ["--db", url, "db", "downgrade", "0010", "--drop-branches"])
        assert dropped.exit_code == 0, dropped.output
        assert dropped.stdout == "tree\ta1\ntree\tq2\n"
        assert "dropped 2 messages off the active path" in dropped.stderr
        assert archive.current_revision() == "0010"
        with archive.engine.connect() as connection:
            kept = connection.execute(
                text("SELECT position, uid FROM messages WHERE chat_id = 'tree' ORDER BY position")
            ).all()
            count = connection.execute(text("SELECT message_count FROM chats WHERE chat_id = 'tree'")).one()
        assert [tuple(row) for row in kept] == [(0, "s"), (1, "q"), (2, "a2"), (3, "t")]
        assert tuple(count) == (4,)

        upgrade(archive.engine)
        assert archive.get("tree") == path.model_copy(update={"version": path.version})
        assert archive.get_tree("tree").document.is_linear
        assert [hit.message_uid for hit in archive.search("Contamination")] == ["a2"]
        assert archive.search("dimers") == []
        assert archive.check() == []
        # Nothing off the path: the downgrade needs no permission, and drops nothing.
        assert archive.downgrade("0010") == []
        upgrade(archive.engine)
    finally:
        archive.close()


def test_0012_indexes_stored_chats_after_upgrading_and_builds_the_old_indexes_going_down(
    empty_database: URL,
) -> None:
    """Revision 0012 marks every chat, whose terms chatarchive then computes
    (``upgrade()`` at once; after a plain Alembic upgrade, ``index_pending``);
    its downgrade gives back the full-text indexes of 0011, filled."""
    from sqlalchemy import text

    archive = ChatArchive(empty_database)
    postgres = archive.engine.dialect.name == "postgresql"
    old_search = (
        "SELECT count(*) FROM messages WHERE to_tsvector('english', left(text, 100000)) "
        "@@ to_tsquery('english', 'annealing')"
        if postgres
        else "SELECT count(*) FROM message_text_search WHERE message_text_search MATCH 'annealing'"
    )
    try:
        archive.upgrade()
        archive.save_many(
            [
                {"chat_id": "en", "messages": [{"role": "user", "content": "Annealing at 55 degrees"}]},
                {
                    "chat_id": "zh",
                    "messages": [{"role": "user", "content": [{"type": "text", "text": "非特异性条带"}]}],
                },
            ]
        )
        downgrade(archive.engine, "0011")
        with archive.engine.connect() as connection:
            assert connection.execute(text(old_search)).scalar_one() == 1
        alembic = subprocess.run(  # Alembic alone: the chats are marked, not indexed
            [str(Path(sys.executable).with_name("alembic")), "upgrade", "head"],
            cwd=ROOT,
            env=_env_with_url(empty_database),
            capture_output=True,
            text=True,
        )
        assert alembic.returncode == 0, alembic.stderr
        waiting = archive.search("条带")
        assert waiting == []
        assert waiting.pending_chats == 2
        assert archive.index_pending() == 2
        assert [hit.chat_id for hit in archive.search("条带")] == ["zh"]
        downgrade(archive.engine, "0011")
        archive.upgrade()  # chatarchive's upgrade indexes them right after
        results = archive.search("annealing")
        assert [hit.chat_id for hit in results] == ["en"]
        assert results.fresh
        # Search off stays off, both ways.
        archive.set_search_index(False)
        downgrade(archive.engine, "0011")
        with archive.engine.connect() as connection:
            absent = (
                "SELECT to_regclass('ix_messages_text_search') IS NULL"
                if postgres
                else "SELECT count(*) = 0 FROM sqlite_master WHERE name = 'message_text_search'"
            )
            assert connection.execute(text(absent)).scalar_one()
        archive.upgrade()
        assert not archive.search_index()
    finally:
        archive.close()


def test_the_downgrade_below_0017_puts_every_payload_back(empty_database: URL) -> None:
    """Going below revision 0017 writes every payload held by an attachment
    back into its part (and its part's ordered JSON), then drops the table;
    going up again reads the chats as they were. The SQL printed for review
    refuses while parts refer to attachments."""
    import base64
    import json

    from sqlalchemy import text

    raw = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    url = "data:image/png;base64," + base64.b64encode(raw).decode()
    doc = {
        "chat_id": "pictures",
        "user_id": "ann",
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image_url",
                        "image_url": {"detail": "low", "url": url},
                    },  # keys in their own order
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": url[22:]},
                    },
                ],
            }
        ],
    }
    with ChatArchive(empty_database) as archive:
        archive.upgrade()
        archive.set_attachments_stored_once(True)
        archive.save(doc)
        before = archive.get("pictures").model_dump(mode="json")
        with archive.engine.connect() as connection:
            assert connection.execute(text("SELECT count(*) FROM attachments")).scalar() == 1
        link = empty_database.render_as_string(hide_password=False)
        printed = CliRunner().invoke(main, ["--db", link, "db", "downgrade", "0016", "--sql"]).output
        assert "only a downgrade run on the database puts back" in printed
        archive.downgrade("0016")
        with archive.engine.connect() as connection:
            data = [
                row[0] for row in connection.execute(text("SELECT data FROM content_parts ORDER BY position"))
            ]
            assert "attachments" not in inspect(connection).get_table_names()
        assert [json.loads(item) if isinstance(item, str) else item for item in data] == [
            {"image_url": {"url": url, "detail": "low"}},
            {"source": {"type": "base64", "media_type": "image/png", "data": url[22:]}},
        ]
        archive.upgrade()
        assert archive.get("pictures").model_dump(mode="json") == before


@pytest.mark.parametrize("kind", ["postgresql", "citus"])
def test_the_vector_index_is_built_again_in_half_precision_and_back(kind: str, tmp_path: Path) -> None:
    """Revision 0019 builds the archive embedder's HNSW index over half-precision
    vectors; its downgrade builds it over 32-bit ones again (or drops it for
    vectors wider than that index holds), and search by meaning finds the same
    hits at every step."""
    with throwaway_database(kind, tmp_path) as url, ChatArchive(url) as archive:
        archive.upgrade()
        _half_precision_and_back(archive)


def _half_precision_and_back(archive: ChatArchive) -> None:
    from sqlalchemy import text

    from chatarchive import Embedder
    from tests.support.embedders import DIMENSION, meanings, vector_of

    archive.configure_search(embedder=meanings())
    archive.save(
        {"chat_id": "garage", "messages": [{"role": "user", "content": "My automobile will not start."}]}
    )
    definition = text(
        "SELECT indexdef FROM pg_indexes WHERE starts_with(indexname, 'ix_embeddings_vectors_')"
    )

    def indexes() -> list[str]:
        with archive.engine.connect() as connection:
            return list(connection.execute(definition).scalars())

    def hits() -> list[str]:
        return [hit.chat_id for hit in archive.search("car", mode="vector")]

    [built] = indexes()
    assert "::halfvec(32)) halfvec_cosine_ops" in built
    archive.downgrade("0018")
    [older] = indexes()
    assert "::vector(32)) vector_cosine_ops" in older
    assert older.split(" USING ")[0] == built.split(" USING ")[0]  # the same name, on the same table
    archive.upgrade()
    assert indexes() == [built]
    assert hits() == ["garage"]

    wide = Embedder(
        "wide", 3072, lambda texts: [[*vector_of(t), *([0.0] * (3072 - DIMENSION))] for t in texts]
    )
    archive.configure_search(embedder=wide)
    archive.downgrade("0018")
    assert indexes() == []  # an index of 32-bit vectors holds at most 2,000 numbers
    archive.upgrade()
    assert indexes() == []
    assert hits() == ["garage"]  # every vector compared
