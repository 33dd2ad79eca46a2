"""The command line imports and exports every format."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.support.samples import (
    CHATGPT,
    MALEVICH,
    MASTERBRAIN,
    SHAREGPT,
    format_sample,
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


@pytest.mark.parametrize(
    ("record", "days", "models"),
    [
        (CHATGPT, [("2026-01-01", "gpt-4o")], ["gpt-4o"]),
        (
            format_sample("claude-ai", "branched-thinking-tools"),
            [("2025-09-01", "claude-sonnet-4-5-20250929")],
            ["claude-sonnet-4-5-20250929"],
        ),
        (format_sample("open-webui", "branched-chat"), [("2024-06-10", "llama3.1:8b")], ["llama3.1:8b"]),
        (
            format_sample("openai-responses", "response-built-in-tools"),
            [("2025-03-08", "gpt-5-2025-08-07")],
            ["gpt-5-2025-08-07"],
        ),
        (format_sample("anthropic", "response-tool-use"), None, ["claude-sonnet-4-5-20250929"]),
    ],
    ids=["chatgpt", "claude-ai", "open-webui", "openai-responses", "anthropic"],
)
def test_stats_by_day_and_model_are_the_sources_own_after_an_import(
    tmp_path: Any, record: Any, days: list[tuple[str, str]] | None, models: list[str]
) -> None:
    """The source's times and models (ChatGPT's create_time and model_slug,
    Claude.ai's and Open WebUI's times and models, a response's): stats showed
    the import's day and no model. (An Anthropic response has no time.)"""
    from click.testing import CliRunner

    from chatarchive.cli import main

    url = f"sqlite:///{tmp_path / 'stats.db'}"
    runner = CliRunner()
    assert runner.invoke(main, ["--db", url, "db", "upgrade"]).exit_code == 0
    path = tmp_path / "conversations.json"
    path.write_text(json.dumps([record]), encoding="utf-8")
    assert runner.invoke(main, ["--db", url, "import", str(path)]).exit_code == 0

    def stats(by: str) -> list[dict[str, Any]]:
        result = runner.invoke(main, ["--db", url, "stats", "--by", by, "--format", "json"])
        assert result.exit_code == 0, result.output
        records: list[dict[str, Any]] = json.loads(result.stdout)
        return records

    if days is not None:
        assert [(row["day"], row["model"]) for row in stats("day")] == days
    assert [row["model"] for row in stats("model")] == models


def test_streams_written_as_json_lines_import_as_the_message_they_amount_to(tmp_path: Any) -> None:
    """Chunks of a chat completion, an Anthropic Messages stream and a
    Responses API stream, each event a line: one chat each, its one answer
    assembled (they imported as one empty chat per event)."""
    from click.testing import CliRunner

    from chatarchive import ChatArchive
    from chatarchive.cli import main
    from tests.integration.test_anthropic import events_of as anthropic_events
    from tests.integration.test_openai_responses import events_of as responses_events
    from tests.support.samples import completion_chunk, format_sample

    chunks = [
        completion_chunk({"role": "assistant", "content": "Primer "}).model_dump(mode="json"),
        completion_chunk({"content": "dimers."}, finish="stop").model_dump(mode="json"),
    ]
    anthropic = anthropic_events(format_sample("anthropic", "response-tool-use"))
    responses = responses_events(format_sample("openai-responses", "response-built-in-tools"))
    lines = [
        *chunks,
        *anthropic,
        *responses,
        {"messages": [{"role": "user", "content": "hi"}], "chat_id": "plain"},
    ]
    path = tmp_path / "streams.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    url = f"sqlite:///{tmp_path / 'streams.db'}"
    runner = CliRunner()
    assert runner.invoke(main, ["--db", url, "db", "upgrade"]).exit_code == 0
    result = runner.invoke(main, ["--db", url, "import", str(path)])
    assert result.exit_code == 0, result.output
    assert "imported 4 chats" in result.output
    with ChatArchive(url) as archive:
        chats = [archive.get(chat_id) for chat_id in archive.chat_ids()]
    by_model = {chat.model: chat for chat in chats}
    assert by_model["gpt-4o"].messages[0].content == "Primer dimers."
    assert by_model["claude-sonnet-4-5-20250929"].messages[0].finish_reason == "tool_use"
    assert len(by_model["gpt-5-2025-08-07"].messages) == 5
    assert by_model[None].chat_id == "plain"
