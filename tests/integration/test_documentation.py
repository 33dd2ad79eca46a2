"""Every code example of the README, the documentation and the public docstrings
runs as written, and every test the documentation names exists."""

from __future__ import annotations

import doctest
import re
from pathlib import Path

import pytest

import chatarchive
import chatarchive.encryption
import chatarchive.formats
import chatarchive.importing

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def examples() -> list[tuple[str, str]]:
    """Each page's Python examples, named by the page and their place on it."""
    found = []
    for page in PAGES:
        blocks = re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.DOTALL)
        found += [(f"{page.relative_to(ROOT)}#{number}", code) for number, code in enumerate(blocks)]
    return found


EXAMPLES = examples()


def test_the_documentation_has_examples() -> None:
    pages = {name.partition("#")[0] for name, _ in EXAMPLES}
    assert "README.md" in pages
    assert len(pages) >= 10


@pytest.mark.parametrize("code", [code for _, code in EXAMPLES], ids=[name for name, _ in EXAMPLES])
def test_a_documented_example_runs(code: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("CHATARCHIVE_DATABASE_URL", raising=False)
    exec(compile(code, "example", "exec"), {"__name__": "documentation_example"})


def docstring_examples() -> list[doctest.DocTest]:
    finder = doctest.DocTestFinder(exclude_empty=True)
    tests = []
    for name in chatarchive.__all__:
        tests += [test for test in finder.find(getattr(chatarchive, name), name) if test.examples]
    for module in (chatarchive.formats, chatarchive.importing, chatarchive.encryption):  # the public modules
        tests += [test for test in finder.find(module) if test.examples]
    return tests


DOCTESTS = docstring_examples()


def test_the_public_api_has_docstring_examples() -> None:
    assert {test.name.partition(".")[0] for test in DOCTESTS} >= {"ChatArchive", "ChatFilter", "chatarchive"}
    assert {"chatarchive.importing", "chatarchive.formats.matrix"} <= {test.name for test in DOCTESTS}


@pytest.mark.parametrize("test", DOCTESTS, ids=[test.name for test in DOCTESTS])
def test_a_docstring_example_runs(test: doctest.DocTest) -> None:
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS)
    runner.run(test)
    assert runner.summarize(verbose=False).failed == 0


def test_the_tests_the_documentation_names_exist() -> None:
    # The guarantees page (and any other) names the tests that check each
    # promise: a renamed or removed test must not leave a claim behind.
    defined = {
        path.name: set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(encoding="utf-8"), re.M))
        for path in (ROOT / "tests").rglob("test_*.py")
    }
    everywhere = set().union(*defined.values())
    named = [
        reference
        for page in PAGES
        for reference in re.findall(
            r"`(?:(test_\w+\.py)::)?(test_\w+)(?!\w|\.py)", page.read_text(encoding="utf-8")
        )
    ]
    assert len(named) > 20
    missing = [
        f"{file}::{name}" if file else name
        for file, name in named
        if name not in (defined.get(file, set()) if file else everywhere)
    ]
    assert missing == []


def test_the_format_matrix_is_the_codes() -> None:
    """The formats guide's matrix is what chatarchive.formats.matrix() says,
    and each format's record method exists on the archive and repositories."""
    from chatarchive import AsyncChatArchive, AsyncChatRepository, ChatArchive, ChatRepository, formats

    guide = (ROOT / "docs" / "guide" / "formats.md").read_text(encoding="utf-8")
    start = guide.index("\n", guide.index("<!-- format-matrix")) + 1
    assert guide[start : guide.index("<!-- /format-matrix -->")] == formats.matrix_markdown()
    assert {row.name for row in formats.matrix()} == (
        formats.IMPORT_FORMATS.keys() | formats.EXPORT_FORMATS.keys() | formats.DATASET_FORMATS.keys()
    )
    for method in formats.RECORDERS.values():
        for face in (ChatArchive, ChatRepository, AsyncChatArchive, AsyncChatRepository):
            assert callable(getattr(face, method)), (face, method)
