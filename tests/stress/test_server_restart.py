"""The pool recovers from a restarted server (only with CHATARCHIVE_TEST_RESTART_SERVER=1)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from chatarchive import (
    ChatArchive,
)
from tests.support.chats import tool_chat

#: Set to 1 to let a test restart the local PostgreSQL server (every other
#: connection to it is dropped, other tests' included).
RESTART_OPT_IN = "CHATARCHIVE_TEST_RESTART_SERVER"

pytestmark = pytest.mark.slow


def _restart_local_server() -> None:
    import shutil
    import subprocess

    if os.environ.get(RESTART_OPT_IN) != "1":
        pytest.skip(f"restarts the shared PostgreSQL server: set {RESTART_OPT_IN}=1 to run it")
    clusters = sorted(Path("/etc/postgresql").glob("*/main")) if Path("/etc/postgresql").exists() else []
    if not shutil.which("pg_ctlcluster") or not clusters:
        pytest.skip("no local PostgreSQL cluster this test may restart (pg_ctlcluster)")
    version = clusters[-1].parent.name
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, "main", "restart"], check=True, timeout=120
    )


def test_pooled_connections_recover_after_a_server_restart(pg_archive: tuple[ChatArchive, str]) -> None:
    archive, _ = pg_archive
    archive.save(tool_chat("before"))
    assert archive.get("before").chat_id == "before"  # the pool now holds a connection
    _restart_local_server()
    # Reads recover on their own (a lost connection is retried once); writes too,
    # since every connection that sat idle through the restart is pinged first.
    assert archive.get("before").chat_id == "before"
    archive.save(tool_chat("after"))
    assert [c.chat_id for c in archive.list_chats().items] == ["after", "before"]
