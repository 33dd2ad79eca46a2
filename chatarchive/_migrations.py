"""Running chatarchive's Alembic migrations from code, a checkout or a wheel.

The scripts live in the checkout's top-level ``alembic/`` directory; a wheel
carries the same files as ``chatarchive/_alembic/`` (see pyproject.toml).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TextIO

from alembic.autogenerate import compare_metadata
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from alembic.script.revision import RevisionError
from alembic.util import CommandError
from sqlalchemy import URL, Connection, Engine

from alembic import command

from ._engine import missing_archive
from ._exceptions import ChatArchiveError, InvalidDocument, database_errors, is_real_number, require_text
from ._schema import VERSION_TABLE, described_by_models, metadata, one_of_ours

__all__ = [
    "alembic_config",
    "check",
    "current_revision",
    "downgrade",
    "head_revision",
    "migrate",
    "problems_of",
    "render",
    "require_reachable",
    "revision_of",
    "script_location",
    "upgrade",
]


def script_location() -> Path:
    here = Path(__file__).resolve().parent
    for candidate in (here / "_alembic", here.parent / "alembic"):
        if (candidate / "env.py").is_file():
            return candidate
    raise ChatArchiveError(f"chatarchive's migration scripts are missing (looked beside {here})")


def alembic_config() -> Config:
    config = Config()
    config.set_main_option("script_location", str(script_location()))
    return config


def migrate(connection: Connection, revision: str, *, up: bool, lock_timeout: float | None = None) -> None:
    """Run the migrations on ``connection`` (not in a transaction yet) to ``revision``.

    ``lock_timeout`` (seconds; PostgreSQL): how long the migration may wait for
    each lock it needs (a table a long query reads, say) before it fails with
    :class:`ConflictError` and changes nothing, instead of holding up, behind
    its own wait, every query that comes after it."""
    require_text(revision, "revision")
    config = alembic_config()
    config.attributes["connection"] = connection
    config.attributes["lock_timeout"] = _lock_timeout_ms(lock_timeout)
    with _revision_errors(config):
        _direction(up)(config, revision)


def render(
    engine: Engine, revision: str, *, up: bool, output: TextIO, lock_timeout: float | None = None
) -> None:
    """Write to ``output`` the SQL that migrating the database from its current
    revision to ``revision`` would run, without running it (Alembic's offline
    mode), for review or to be run by hand."""
    start = current_revision(engine) or "base"
    config = alembic_config()
    config.attributes["url"] = engine.url
    config.attributes["lock_timeout"] = _lock_timeout_ms(lock_timeout)
    config.output_buffer = output
    with _revision_errors(config):
        _direction(up)(config, f"{start}:{revision}", sql=True)


def _direction(up: bool) -> Callable[..., None]:
    return command.upgrade if up else command.downgrade


@contextmanager
def _revision_errors(config: Config) -> Iterator[None]:
    """An unknown revision, or one on the wrong side, is bad input."""
    try:
        yield
    except (CommandError, RevisionError) as exc:
        known = [script.revision for script in ScriptDirectory.from_config(config).walk_revisions()]
        raise InvalidDocument(
            f"{exc} (revisions: {', '.join(reversed(known))}, head, base)", field="revision"
        ) from exc


def require_reachable(url: URL, revision: str) -> None:
    """Refuse, before anything connects, an upgrade of a SQLite file that does
    not exist yet to a revision an empty database cannot reach ('0099',
    '+20'): connecting creates the file, which the failed upgrade left behind
    as an empty archive at revision none."""
    if missing_archive(url) is None:
        return
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
        raise InvalidDocument(
            f"lock_timeout must be a number of seconds above 0 and below a day, not {seconds!r}",
            field="lock_timeout",
        )
    return max(1, round(seconds * 1000))


def upgrade(engine: Engine, revision: str = "head", *, lock_timeout: float | None = None) -> None:
    """Migrate the database up to ``revision`` (default: the newest)."""
    require_reachable(engine.url, revision)
    with database_errors(), engine.connect() as connection:
        migrate(connection, revision, up=True, lock_timeout=lock_timeout)


def downgrade(engine: Engine, revision: str, *, lock_timeout: float | None = None) -> None:
    """Migrate the database down to ``revision`` (``base``: remove everything)."""
    with database_errors(), engine.connect() as connection:
        migrate(connection, revision, up=False, lock_timeout=lock_timeout)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config()).get_current_head()


def revision_of(connection: Connection) -> str | None:
    context = MigrationContext.configure(connection, opts={"version_table": VERSION_TABLE})
    return context.get_current_revision()


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at (``None``: not migrated, or a SQLite
    file that does not exist yet, which looking would create)."""
    if missing_archive(engine.url) is not None:
        return None
    with database_errors(), engine.connect() as connection:
        return revision_of(connection)


def problems_of(connection: Connection) -> list[str]:
    """What keeps the database from matching this version of chatarchive:
    an empty list when it is at the newest revision and its tables match."""
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


def check(engine: Engine) -> list[str]:
    """See :func:`problems_of`."""
    with database_errors(), engine.connect() as connection:
        return problems_of(connection)
