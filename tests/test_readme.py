"""The README's Python examples run as written, and the tests it names exist."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
EXAMPLES = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)


def test_the_readme_has_examples() -> None:
    assert len(EXAMPLES) >= 3


@pytest.mark.parametrize("code", EXAMPLES, ids=[f"example-{i}" for i in range(len(EXAMPLES))])
def test_readme_example_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHATARCHIVE_DATABASE_URL", raising=False)
    exec(compile(code, str(README), "exec"), {"__name__": "readme_example"})


def test_the_tests_the_readme_names_exist() -> None:
    # The Guarantees table (and the rest of the README) names the tests that
    # check each promise: a renamed or removed test must not leave a claim behind.
    tests = Path(__file__).resolve().parent
    defined = {
        path.name: set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
        for path in tests.rglob("test_*.py")
    }
    everywhere = set().union(*defined.values())
    named = re.findall(r"`(?:(test_\w+\.py)::)?(test_\w+)(?!\w|\.py)", README.read_text(encoding="utf-8"))
    assert len(named) > 20
    missing = [
        f"{file}::{name}" if file else name
        for file, name in named
        if name not in (defined.get(file, set()) if file else everywhere)
    ]
    assert missing == []
