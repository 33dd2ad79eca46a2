"""Alembic environment for chatarchive.

The database comes from, in order: a connection handed over by chatarchive
(``config.attributes["connection"]``), ``-x url=...``, the ``sqlalchemy.url``
option, ``$CHATARCHIVE_DATABASE_URL``, and the SQLite default.
"""

from __future__ import annotations

import logging.config
from typing import Any, Literal

from alembic.autogenerate.api import AutogenContext
from sqlalchemy import Connection

from alembic import context
from chatarchive._backends import backend_named, backend_of
from chatarchive._engine import create_engine, database_url
from chatarchive._schema import VERSION_TABLE, described_by_models, metadata, one_of_ours
from chatarchive._types import ArchiveText, JsonObject, UTCDateTime

config = context.config
if config.config_file_name is not None and config.attributes.get("configure_logger", True):
    logging.config.fileConfig(config.config_file_name, disable_existing_loggers=False)


def _url() -> str:
    url = (
        config.attributes.get("url")  # chatarchive's own offline rendering ('db upgrade --sql')
        or context.get_x_argument(as_dictionary=True).get("url")
        or config.get_main_option("sqlalchemy.url")
    )
    return database_url(url).render_as_string(hide_password=False)


def _lock_timeout() -> str | None:
    """The statement that bounds each wait for a lock (``lock_timeout``, in
    milliseconds, given by chatarchive), for this transaction only."""
    milliseconds = config.attributes.get("lock_timeout")
    return None if milliseconds is None else f"SET LOCAL lock_timeout = {int(milliseconds)}"


# Revisions spell out plain SQLAlchemy types, never chatarchive's own classes,
# so that an old revision keeps working whatever later code does.
_PLAIN_TYPES = {
    ArchiveText: "sa.Text()",
    JsonObject: 'sa.JSON().with_variant(postgresql.JSONB(), "postgresql")',
    UTCDateTime: "sa.DateTime(timezone=True)",
}


def _render_item(kind: str, obj: Any, autogen_context: AutogenContext) -> str | Literal[False]:
    if kind == "type" and type(obj) in _PLAIN_TYPES:
        autogen_context.imports.add("from sqlalchemy.dialects import postgresql")
        return _PLAIN_TYPES[type(obj)]
    return False


def _include_object(obj: Any, name: str | None, kind: str, reflected: bool, compare_to: Any) -> bool:
    return described_by_models(name, kind, reflected)


def run_migrations(connection: Connection) -> None:
    backend = backend_of(connection)
    with backend.migrating(connection):
        context.configure(
            connection=connection,
            target_metadata=metadata,
            version_table=VERSION_TABLE,
            render_as_batch=backend.alters_by_copying,
            # SQLite runs DDL in transactions too (chatarchive's engines let
            # SQLAlchemy, not the driver, begin them): one transaction for the
            # whole migration, as on PostgreSQL, rather than one per statement.
            transactional_ddl=True,
            compare_type=True,
            render_item=_render_item,
            include_object=_include_object,
            include_name=one_of_ours,
        )
        with context.begin_transaction():
            backend.lock_migrations(connection, _lock_timeout())
            context.run_migrations()


def run_offline() -> None:
    url = database_url(_url())
    backend = backend_named(url.get_backend_name())
    context.configure(
        url=url,
        target_metadata=metadata,
        version_table=VERSION_TABLE,
        literal_binds=True,
        render_as_batch=backend.alters_by_copying,
    )
    with context.begin_transaction():
        if (setting := backend.offline_lock_timeout(_lock_timeout())) is not None:
            context.execute(setting)
        context.run_migrations()


def run_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        run_migrations(connection)
        return
    engine = create_engine(_url())
    try:
        with engine.connect() as new_connection:
            run_migrations(new_connection)
    finally:
        engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
