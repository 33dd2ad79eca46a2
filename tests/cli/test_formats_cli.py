"""The command line imports and exports every format."""

from __future__ import annotations

import json
from typing import Any

from tests.support.samples import (
    CHATGPT,
    MALEVICH,
    MASTERBRAIN,
    SHAREGPT,
)


def test_the_cli_imports_and_exports_every_format(tmp_path: Any) -> None:
    from click.testing import CliRunner

    from chatarchive.cli import main

    url = f"sqlite:///{tmp_path / 'formats.db'}"
    runner = CliRunner()
    assert runner.invoke(main, ["--db", url, "db", "upgrade"]).exit_code == 0
    inputs = {
        "masterbrain.json": MASTERBRAIN,
        "malevich.json": MALEVICH,
        "sharegpt.jsonl": SHAREGPT,
        "conversations.json": [CHATGPT],
    }
    for name, data in inputs.items():
        path = tmp_path / name
        path.write_text(json.dumps(data) + ("\n" if name.endswith("jsonl") else ""), encoding="utf-8")
        result = runner.invoke(main, ["--db", url, "import", str(path)])
        assert result.exit_code == 0, result.output

    def exported(*options: str) -> list[Any]:
        # To a file: the runner's output mixes stderr ("wrote N chats") into stdout.
        path = tmp_path / "exported.jsonl"
        result = runner.invoke(main, ["--db", url, "export", *options, "-o", str(path)])
        assert result.exit_code == 0, result.output
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]

    assert exported("--format", "masterbrain", "--user", "u-7") == [MASTERBRAIN]
    assert SHAREGPT in exported("--format", "sharegpt")
    out = runner.invoke(
        main, ["--db", url, "export", "--format", "openai-finetune", "--exclude-role", "system"]
    )
    assert out.exit_code == 0
    assert "wrote" in out.output
    future = ["--format", "openai-finetune", "--created-since", "2100-01-01", "--model", "nobody's"]
    out = runner.invoke(main, ["--db", url, "export", *future])
    assert (out.exit_code, out.output) == (0, "wrote 0 chats\n")  # --model is applied by the query
    out = runner.invoke(main, ["--db", url, "export", *future[:4]])
    assert out.output.startswith("wrote 0 chats; skipped 4 (too old)")
    for fmt in ("malevich", "chatgpt", "openai", "canonical"):
        assert runner.invoke(main, ["--db", url, "export", "--format", fmt]).exit_code == 0
    forced = tmp_path / "forced.json"
    forced.write_text(json.dumps(SHAREGPT), encoding="utf-8")
    wrong = runner.invoke(main, ["--db", url, "import", "--format", "masterbrain", str(forced)])
    assert wrong.exit_code == 1
    assert "Masterbrain" in wrong.output


def test_stats_by_day_and_model_are_the_sources_own_after_an_import(tmp_path: Any) -> None:
    """ChatGPT's create_time and model_slug: stats showed the import's day and no model."""
    from click.testing import CliRunner

    from chatarchive.cli import main

    url = f"sqlite:///{tmp_path / 'stats.db'}"
    runner = CliRunner()
    assert runner.invoke(main, ["--db", url, "db", "upgrade"]).exit_code == 0
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([CHATGPT]), encoding="utf-8")
    assert runner.invoke(main, ["--db", url, "import", str(path)]).exit_code == 0

    def stats(by: str) -> list[dict[str, Any]]:
        result = runner.invoke(main, ["--db", url, "stats", "--by", by, "--format", "json"])
        assert result.exit_code == 0, result.output
        records: list[dict[str, Any]] = json.loads(result.stdout)
        return records

    assert [(row["day"], row["model"]) for row in stats("day")] == [("2026-01-01", "gpt-4o")]
    assert [row["model"] for row in stats("model")] == ["gpt-4o"]
