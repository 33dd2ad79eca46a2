"""The chatarchive command, run by the tests: in this process through click's
test runner, or in a process of its own for what only a real process shows."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from click.testing import CliRunner

from chatarchive.cli import main

CHATARCHIVE = str(Path(sys.executable).with_name("chatarchive"))


@dataclass
class Ran:
    """What a command did: its exit status, and what it wrote."""

    returncode: int
    stdout: str
    stderr: str


Run = Callable[..., Ran]


def invoke(
    url: str,
    *args: str,
    stdin: str | bytes | None = None,
    expect: int | None = 0,
    columns: int | None = 200,
) -> Ran:
    """The command run in this process, through click's test runner."""
    env = {"CHATARCHIVE_DATABASE_URL": None, "COLUMNS": None if columns is None else str(columns)}
    result = CliRunner().invoke(main, ["--db", url, *args], input=stdin, env=env)
    # An exception other than the exit the command chose would have been a traceback.
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    ran = Ran(result.exit_code, result.stdout, result.stderr)
    if expect is not None:
        assert ran.returncode == expect, ran.stdout + ran.stderr
    return ran


def spawn(
    url: str,
    *args: str,
    cwd: Path,
    stdin: str | bytes | None = None,
    expect: int | None = 0,
    columns: int | None = 200,
    environment: dict[str, str] | None = None,
) -> Ran:
    """The real ``chatarchive`` command, in a process of its own."""
    env = {**os.environ, "COLUMNS": str(columns), **(environment or {})}
    env.pop("CHATARCHIVE_DATABASE_URL", None)
    if columns is None:  # output to a file, no terminal width given
        env.pop("COLUMNS")
    raw = subprocess.run(
        [CHATARCHIVE, "--db", url, *args],
        input=stdin.encode("utf-8") if isinstance(stdin, str) else stdin,
        capture_output=True,
        cwd=cwd,
        env=env,
    )
    # The output is UTF-8 whatever the locale's encoding (see test_text_is_utf8...).
    ran = Ran(raw.returncode, raw.stdout.decode("utf-8"), raw.stderr.decode("utf-8"))
    if expect is not None:
        assert ran.returncode == expect, ran.stdout + ran.stderr
    return ran
