"""Random input, thousands of times: only chatarchive's own errors come out."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from chatarchive import (
    ChatDocument,
    InvalidDocument,
)

pytestmark = pytest.mark.slow


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=20,
    )
)
def test_fuzz_the_parser_only_raises_its_own_errors(data: Any) -> None:
    for candidate in (data, {"chat_id": "fuzz", "messages": [data]}, {"chat_id": "fuzz", "messages": data}):
        with contextlib.suppress(InvalidDocument):
            ChatDocument.parse(candidate)
    with contextlib.suppress(InvalidDocument):
        ChatDocument.from_openai(data if isinstance(data, list) else [data])


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
        ),
        max_leaves=20,
    ),
    st.sampled_from(["json", "jsonl", "broken"]),
)
def test_fuzz_the_cli_import_reports_instead_of_crashing(tmp_path: Path, data: Any, shape: str) -> None:
    from click.testing import CliRunner

    from chatarchive.cli import main

    database = tmp_path / "fuzz.db"
    path = tmp_path / f"input.{'jsonl' if shape == 'jsonl' else 'json'}"
    text = json.dumps(data, allow_nan=True)
    if shape == "jsonl":
        text = text + "\n" + json.dumps([data]) + "\n"
    elif shape == "broken":
        text = text[: len(text) // 2]
    path.write_text(text, encoding="utf-8")
    runner = CliRunner()
    url = f"sqlite:///{database}"
    if not database.exists():
        assert runner.invoke(main, ["--db", url, "db", "upgrade"]).exit_code == 0
    result = runner.invoke(main, ["--db", url, "import", str(path)])
    assert result.exit_code in (0, 1), result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
