"""Running chatarchive's Alembic migrations from code, a checkout or a wheel,
and telling whether a database is at the revision this version needs.

The scripts live in the checkout's top-level ``alembic/`` directory; a wheel
carries the same files as ``chatarchive/_alembic/`` (see pyproject.toml).
Alembic is imported by the functions that run it, not with chatarchive: most
programs never migrate, and it is a tenth of chatarchive's import time. Whether
a database is ready is read without it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO

from sqlalchemy import URL, Connection, Engine, inspect, text

from ._arguments import is_real_number, require_flag, require_text
from ._backends import database_errors
from ._engine import in_memory, missing_archive, shown_url
from ._exceptions import InvalidArgument, SchemaNotReady
from ._schema import SCHEMA_REVISION, VERSION_TABLE, described_by_models, metadata, one_of_ours

if TYPE_CHECKING:
    from alembic.config import Config

__all__ = [
    "alembic_config",
    "head_revision",
    "migrate",
    "problems_of",
    "render",
    "require_archive_file",
    "require_reachable",
    "require_revision",
    "revision_of",
    "script_location",
    "stored_chats",
    "stored_revision",
]


def script_location() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "_alembic", here.parent / "alembic"):
        if (candidate / "env.py").is_file():
            return candidate
    raise SchemaNotReady(f"chatarchive's migration scripts are missing (looked beside {here})")


def alembic_config() -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(script_location()))
    return config


def migrate(
    connection: Connection,
    revision: str,
    *,
    up: bool,
    lock_timeout: float | None = None,
    drop_branches: bool = False,
) -> list[tuple[str, str]]:
    """Run the migrations on ``connection`` (not in a transaction yet) to
    ``revision``; returns the messages (chat id, uid) a downgrade dropped.

    ``lock_timeout`` (seconds; PostgreSQL): how long the migration may wait for
    each lock it needs (a table a long query reads, say) before it fails with
    ``ConflictError`` and changes nothing, instead of holding up, behind
    its own wait, every query that comes after it.

    ``drop_branches``: let a downgrade below revision 0011 drop the messages
    off each chat's active path, which it otherwise refuses to lose."""
    require_text(revision, "revision")
    config = alembic_config()
    config.attributes["connection"] = connection
    config.attributes["lock_timeout"] = _lock_timeout_ms(lock_timeout)
    config.attributes["drop_branches"] = require_flag(drop_branches, "drop_branches")
    config.attributes["refuse_data_loss"] = _refuse_data_loss
    with _revision_errors(config):
        _direction(up)(config, revision)
    dropped: list[tuple[str, str]] = config.attributes.get("dropped_messages", [])
    return dropped


def _refuse_data_loss(reason: str, argument: str) -> NoReturn:
    """How a revision refuses a downgrade that would lose data it was not told to drop."""
    raise InvalidArgument(reason, argument=argument)


def render(
    engine: Engine,
    revision: str,
    *,
    up: bool,
    output: TextIO,
    lock_timeout: float | None = None,
    drop_branches: bool = False,
) -> None:
    """Write to ``output`` the SQL that migrating the database from its current
    revision to ``revision`` would run, without running it (Alembic's offline
    mode), for review or to be run by hand."""
    start = "base"
    if missing_archive(engine.url) is None:
        with database_errors(), engine.connect() as connection:
            start = revision_of(connection) or "base"
    config = alembic_config()
    config.attributes["url"] = engine.url
    config.attributes["lock_timeout"] = _lock_timeout_ms(lock_timeout)
    config.attributes["drop_branches"] = require_flag(drop_branches, "drop_branches")
    config.output_buffer = output
    with _revision_errors(config):
        _direction(up)(config, f"{start}:{revision}", sql=True)


def _direction(up: bool) -> Callable[..., None]:
    from alembic import command

    run = command.upgrade if up else command.downgrade

    def one_at_a_time(*args: Any, **kwargs: Any) -> None:
        with _ALEMBIC:
            run(*args, **kwargs)

    return one_at_a_time


#: Alembic runs a migration through module-level proxies (``alembic.context``,
#: ``alembic.op``) that name the one migration under way: two at once in a
#: process (archives upgraded from two threads, or two event loops) took each
#: other's, and failed with a KeyError.
_ALEMBIC = threading.Lock()


@contextmanager
def _revision_errors(config: Config) -> Iterator[None]:
    """An unknown revision, or one on the wrong side, is bad input."""
    from alembic.script import ScriptDirectory
    from alembic.script.revision import RevisionError
    from alembic.util import CommandError

    try:
        yield
    except (CommandError, RevisionError) as exc:
        known = [script.revision for script in ScriptDirectory.from_config(config).walk_revisions()]
        raise InvalidArgument(
            f"{exc} (revisions: {', '.join(reversed(known))}, head, base)", argument="revision"
        ) from exc


def require_reachable(url: URL | None, revision: str) -> None:
    """Refuse, before anything connects, an upgrade of a SQLite file that does
    not exist yet to a revision an empty database cannot reach ('0099',
    '+20'): connecting creates the file, which the failed upgrade left behind
    as an empty archive at revision none."""
    if url is None or missing_archive(url) is None:
        return
    from alembic.script import ScriptDirectory

    require_text(revision, "revision")
    config = alembic_config()
    with _revision_errors(config):
        list(ScriptDirectory.from_config(config).iterate_revisions(revision, "base"))


def _lock_timeout_ms(seconds: object) -> int | None:
    """A migration's ``lock_timeout`` in whole milliseconds (at least 1), or
    ``None`` for none; anything but a positive number of seconds is refused."""
    if seconds is None:
        return None
    if not is_real_number(seconds) or not 0 < seconds < 86_400:
        raise InvalidArgument(
            f"lock_timeout must be a number of seconds above 0 and below a day, not {seconds!r}",
            argument="lock_timeout",
        )
    return max(1, round(seconds * 1000))


def head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def revision_of(connection: Connection) -> str | None:
    from alembic.runtime.migration import MigrationContext

    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def problems_of(connection: Connection) -> list[str]:
    """What keeps the database from matching this version of chatarchive:
    an empty list when it is at the newest revision and its tables match."""
    from alembic.autogenerate import compare_metadata
    from alembic.runtime.migration import MigrationContext

    current, head = revision_of(connection), head_revision()
    if current != head:
        return [f"database is at revision {current or 'none'}, chatarchive needs {head}"]
    context = MigrationContext.configure(
        connection,
        opts={
            "version_table": VERSION_TABLE,
            "compare_type": True,
            "include_name": one_of_ours,
            "include_object": lambda obj, name, kind, reflected, other: described_by_models(
                name, kind, reflected
            ),
        },
    )
    return [
        f"schema differs from chatarchive's models: {diff}" for diff in compare_metadata(context, metadata)
    ]


def require_archive_file(url: URL | None) -> None:
    """Refuse, before connecting, an archive that does not exist yet and that
    connecting would create (a SQLite file)."""
    if url is not None and (missing := missing_archive(url)) is not None:
        raise SchemaNotReady(f"{missing}: run 'chatarchive db upgrade' to create it")


def stored_revision(connection: Connection) -> str | None:
    """The revision in chatarchive's version table, read without Alembic (``None``: not migrated)."""
    if not inspect(connection).has_table(VERSION_TABLE):
        return None
    revision = connection.execute(text(f"SELECT version_num FROM {VERSION_TABLE}")).scalar()
    return None if revision is None else str(revision)


def require_revision(url: URL, current: str | None) -> None:
    """Refuse a database that is not at the revision this version's models describe."""
    if current != SCHEMA_REVISION:
        raise SchemaNotReady(
            f"database {shown_url(url)} is at revision {current or 'none'}, "
            f"chatarchive needs {SCHEMA_REVISION}: "
            + (
                "an in-memory database starts empty: call the archive's upgrade() first"
                if in_memory(url)
                else "run 'chatarchive db upgrade'"
            )
        )


def stored_chats(engine: Engine) -> int:
    """How many chats the archive's tables hold, at whatever revision they are
    (0 for a SQLite file that does not exist, which looking would create)."""
    if missing_archive(engine.url) is not None:
        return 0
    with database_errors(), engine.connect() as connection:
        if not inspect(connection).has_table("chats"):
            return 0
        return int(connection.execute(text("SELECT count(*) FROM chats")).scalar_one())
