"""The ``chatarchive`` command against both databases: in this process through
click's test runner, and, for what only a real process shows, as a subprocess."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from sqlalchemy import URL

from chatarchive import create_engine, register_embedder
from chatarchive._schema import SCHEMA_REVISION, metadata
from chatarchive.bench.workload import generate_chats
from chatarchive.cli import main
from tests.support.commands import CHATARCHIVE, Ran, Run, invoke
from tests.support.embedders import meanings


def write(path: Path, content: str) -> str:
    path.write_text(content, encoding="utf-8")
    return str(path)


DOC = {
    "chat_id": "doc-1",
    "user_id": "alice",
    "title": "PCR",
    "messages": [
        {"role": "user", "content": "Why?"},
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "search", "arguments": "{}"}}
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "primer dimers"},
        {"role": "assistant", "content": "Primer dimers."},
    ],
    "feedback": [{"score": 1, "comment": "thanks"}],
}


def test_the_version_says_where_search_terms_are_found(run: Run) -> None:
    assert run("--version").stdout.endswith("(search terms found in C)\n")


def test_db_commands(run: Run, dialect: str) -> None:
    assert run("db", "current").stdout.strip() == "none"
    not_yet = "(no such file)" if dialect == "sqlite" else "revision none"
    assert not_yet in run("db", "check", expect=1).stderr
    for unreachable in ("0099", "+20"):
        assert "revisions: 0001" in run("db", "upgrade", unreachable, expect=1).stderr
        assert not_yet in run("db", "check", expect=1).stderr  # no empty file left behind
    run("db", "upgrade")
    assert run("db", "current").stdout.strip() == SCHEMA_REVISION
    assert run("db", "check").stdout.strip() == "ok"
    run("db", "downgrade", "base")  # no chats in it: nothing to ask
    assert run("db", "current").stdout.strip() == "none"
    run("db", "upgrade")
    run("import", "-", stdin=json.dumps(DOC))
    asked = run("db", "downgrade", "base", stdin="n\n", expect=1)
    assert "with the 1 chat in them?" in asked.stderr
    assert run("db", "current").stdout.strip() == SCHEMA_REVISION
    assert run("show", DOC["chat_id"]).stdout
    run("db", "downgrade", "base", "--yes")
    assert run("db", "current").stdout.strip() == "none"


def test_commands_on_a_sqlite_file_that_does_not_exist_leave_no_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A mistyped path left an empty database file behind, and the command
    said the database was 'at revision none'."""
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "typo.db"
    seed = write(tmp_path / "chat.json", json.dumps(DOC))

    def run(*args: str) -> Ran:
        return invoke(f"sqlite:///{path}", *args, expect=None)

    for command in (
        ["ls"],
        ["show", "x"],
        ["export"],
        ["search", "primer"],
        ["stats"],
        ["rm", "x", "--yes"],
        ["rm", "--user", "alice", "--yes"],
        ["import", seed],
        ["db", "check"],
        ["db", "reindex"],
        ["db", "search-index"],
        ["db", "search"],
        ["db", "index"],
        ["db", "downgrade", "base", "--yes"],
        ["db", "downgrade", "base"],  # counting the chats it would drop made the file
    ):
        result = run(*command)
        assert result.returncode == 1, command
        assert f"no archive at {path} (no such file)" in result.stderr, command
        assert not path.exists(), command
    assert run("db", "current").stdout.strip() == "none"
    assert "CREATE TABLE chats" in run("db", "upgrade", "--sql").stdout  # printed, not run
    assert not path.exists()
    assert run("db", "upgrade").returncode == 0
    assert run("import", seed).returncode == 0
    assert "doc-1" in run("ls").stdout


def test_import_show_export_rm(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    doc_2 = {
        **DOC,
        "chat_id": "doc-2",
        "user_id": "bob",
        "model": "m2",
        "tags": ["t"],
        "updated_at": "2026-02-01",
    }
    documents = write(tmp_path / "docs.json", json.dumps([DOC, doc_2], indent=2))
    bare = write(tmp_path / "bare.json", json.dumps(DOC["messages"]))
    result = run("import", documents, bare)
    assert "imported 3 chats" in result.stderr

    listing = run("ls").stdout
    assert "doc-1" in listing
    assert "doc-2" in listing
    assert "doc-2" not in run("ls", "--user", "alice").stdout

    transcript = run("show", "doc-1").stdout
    for expected in ("user", "Why?", "search({})", "← primer dimers", "score 1", "thanks"):
        assert expected in transcript
    shown = json.loads(run("show", "doc-1", "--json").stdout)
    assert shown["messages"][1]["tool_calls"] == DOC["messages"][1]["tool_calls"]  # type: ignore[index]

    lines = run("export").stdout.splitlines()
    assert len(lines) == 3
    exported = {json.loads(line)["chat_id"]: json.loads(line) for line in lines}
    assert exported["doc-1"]["title"] == "PCR"
    openai = [
        json.loads(line) for line in run("export", "--format", "openai", "--user", "bob").stdout.splitlines()
    ]
    assert openai == [DOC["messages"]]
    # The filters of ls, for every format; the fine-tuning ones are refused elsewhere, not ignored.
    by_model = run("export", "--model", "m2", "--format", "openai").stdout.splitlines()
    assert [json.loads(line) for line in by_model] == openai
    assert run("export", "--tag", "t", "--before", "2026-03-01").stdout.count("\n") == 1
    since = [
        json.loads(line)["chat_id"] for line in run("export", "--since", "2026-03-01").stdout.splitlines()
    ]
    assert len(since) == 2
    assert "doc-1" in since  # and the bare message list's chat, both saved now
    assert "doc-2" not in since
    refused = run("export", "--min-score", "1", "--exclude-role", "system", expect=2).stderr
    assert (
        "--min-score, --exclude-role: only with a dataset --format (dpo, openai-finetune, openai-preference)"
        in refused
    )

    out = tmp_path / "out.jsonl"
    assert run("export", "-o", str(out)).stderr == "wrote 3 chats\n"
    assert run("export", "--user", "nobody").stderr == "wrote 0 chats\n"
    run("rm", "doc-1")
    assert run("show", "doc-1", expect=1).stderr.strip() == "Error: chat 'doc-1' not found"
    # Re-importing the export restores the chat exactly, and replaces the others.
    assert "imported 3 chats" in run("import", str(out)).stderr
    assert json.loads(run("show", "doc-1", "--json").stdout) == shown | {"messages": shown["messages"]}
    assert len(run("export").stdout.splitlines()) == 3


TREE = {
    "chat_id": "tree",
    "messages": [
        {"role": "user", "content": "Why two bands?", "uid": "q"},
        {"role": "assistant", "content": "Primer dimers.", "uid": "a1"},
        {"role": "assistant", "content": "Contamination.", "uid": "a2", "parent": "q"},
    ],
    "feedback": [{"id": "down", "message_uid": "a1", "score": -1}],
}


def _tree_shape(doc: dict[str, Any]) -> list[Any]:
    """What a tree document says of its tree (its messages and where they hang), and its feedback."""
    messages = [(m["uid"], m.get("parent"), m["content"]) for m in doc["messages"]]
    return [messages, doc.get("active_leaf"), [(f["id"], f["message_uid"]) for f in doc["feedback"]]]


def test_a_tree_shows_its_paths_and_exports_whole_and_as_preference_pairs(run: Run) -> None:
    run("db", "upgrade")
    run("import", "-", stdin=json.dumps(TREE))
    assert "Contamination." in run("show", "tree").stdout
    assert "Primer dimers." not in run("show", "tree").stdout
    assert "Primer dimers." in run("show", "tree", "--leaf", "a1").stdout
    assert _tree_shape(json.loads(run("show", "tree", "--json", "--tree").stdout)) == _tree_shape(TREE)
    drawn = run("show", "tree", "--tree").stdout.splitlines()
    rows = [line for line in drawn if "] " in line and ("●" in line or "○" in line)]
    assert [row.split("] ")[1].split()[0:2] for row in rows] == [
        ["user", "q"],
        ["assistant", "a1"],
        ["assistant", "a2"],
    ]
    assert rows[0].startswith("● [0]")  # the root, on the active path
    assert rows[1].startswith("├─ ○ [1]")
    assert "Primer dimers." in rows[1]
    assert rows[2].startswith("└─ ● [2]")
    assert rows[2].endswith("◀ active")
    assert (
        "--tree shows every branch: not with --leaf"
        in run("show", "tree", "--tree", "--leaf", "a1", expect=2).stderr
    )
    assert "no message with uid 'nope'" in run("show", "tree", "--leaf", "nope", expect=1).stderr
    listed = run("ls").stdout
    assert re.search(r"tree\s.*\b2\b", listed)  # two messages on the active path
    # The canonical export holds every branch: importing it gives back the tree.
    (whole,) = run("export").stdout.splitlines()
    assert _tree_shape(json.loads(whole)) == _tree_shape(TREE)
    assert json.loads(run("export", "--format", "openai").stdout) == [
        {"role": "user", "content": "Why two bands?"},
        {"role": "assistant", "content": "Contamination."},
    ]
    preference = run("export", "--format", "openai-preference")
    assert [json.loads(line) for line in preference.stdout.splitlines()] == [
        {
            "input": {"messages": [{"role": "user", "content": "Why two bands?"}]},
            "preferred_output": [{"role": "assistant", "content": "Contamination."}],
            "non_preferred_output": [{"role": "assistant", "content": "Primer dimers."}],
        }
    ]
    assert preference.stderr == "wrote 1 preference pair\n"
    (line,) = run("export", "--format", "dpo", "--exclude-role", "user").stdout.splitlines()
    assert json.loads(line) == {
        "prompt": [],
        "chosen": [{"role": "assistant", "content": "Contamination."}],
        "rejected": [{"role": "assistant", "content": "Primer dimers."}],
    }
    skipped = run("export", "--format", "dpo", "--min-score", "1")
    assert skipped.stderr == "wrote 0 preference pairs; skipped 1 (score below the minimum)\n"


def test_reimporting_records_without_chat_ids_replaces_their_chats(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    records = [
        {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "hello"}]},
        [{"role": "user", "content": "Why?"}],
        {"messages": [{"role": "user", "content": "no chat id"}]},
    ]
    path = write(tmp_path / "records.jsonl", "".join(json.dumps(record) + "\n" for record in records))

    def stored() -> list[tuple[str, list[tuple[str, str]]]]:
        docs = [json.loads(line) for line in run("export").stdout.splitlines()]
        return sorted((d["chat_id"], [(m["uid"], m["content"]) for m in d["messages"]]) for d in docs)

    assert "imported 3 chats" in run("import", path).stderr
    first = stored()
    assert "imported 3 chats" in run("import", path).stderr
    assert stored() == first
    assert len(first) == 3


def test_records_that_name_a_chat_again_are_reported_and_the_later_kept(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    bare = [{"role": "user", "content": "Why?"}]  # no chat id: one made from its content, the same both times
    renamed = {**DOC, "title": "PCR again"}
    lines = [DOC, bare, {**DOC, "chat_id": "other"}, renamed, bare]
    path = write(tmp_path / "twice.jsonl", "".join(json.dumps(line) + "\n" for line in lines))
    result = run("import", path)
    assert (
        f"2 records named a chat an earlier record of the input named, and replaced it: "
        f"'doc-1' at {path}:1 and {path}:4; "
    ) in result.stderr.replace("\n", "")
    assert f"at {path}:2 and {path}:5" in result.stderr.replace("\n", "")
    chats = {json.loads(line)["chat_id"]: json.loads(line) for line in run("export").stdout.splitlines()}
    assert len(chats) == 3
    assert chats["doc-1"]["title"] == "PCR again"
    assert "named a chat" not in run("import", write(tmp_path / "once.json", json.dumps(DOC))).stderr


def test_import_reports_bad_records_and_keeps_good_ones(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    lines = [
        json.dumps(DOC),
        json.dumps({"chat_id": "bad-role", "messages": [{"content": "x"}]}),
        "{not json",
        "",
        json.dumps(DOC["messages"]),
        '{"chat_id": "huge", "messages": [], "n": ' + "9" * 5000 + "}",  # json raised a ValueError
        "{}",
        json.dumps({"object": "chat.completion.chunk", "choices": []}),
        json.dumps({"chat_id": "truncated", "messages": [{"role": "user"}]})[:-5],
    ]
    path = write(tmp_path / "mixed.jsonl", "\n".join(lines))
    result = run("import", path, expect=1)
    errors = result.stderr.splitlines()
    assert any(
        line.startswith(f"{path}:7: not a chat in any known format: {{}} has no messages") for line in errors
    )
    assert f"{path}:8: field 'choices': the completion has no choices" in errors  # a stream of one chunk
    assert any(line.startswith(f"{path}:2: chat 'bad-role', message 0, field 'role'") for line in errors)
    assert any(line.startswith(f"{path}:3: invalid JSON") for line in errors)
    assert f"{path}:6: invalid JSON: integer of more than 4300 digits" in errors
    assert any(line.startswith(f"{path}:9: invalid JSON: truncated line") for line in errors)
    assert "imported 2 chats, 6 failed" in result.stderr
    assert len(run("export").stdout.splitlines()) == 2


def test_import_of_a_cut_list_keeps_the_chats_before_the_cut(run: Run, tmp_path: Path) -> None:
    # A conversations.json whose download stopped short: read a chat at a time.
    run("db", "upgrade")
    chats = [{**DOC, "chat_id": f"chat-{n}"} for n in range(3)]
    text = json.dumps(chats)
    path = write(tmp_path / "conversations.json", text[: text.index('"chat-2"') + 5])
    result = run("import", "--strict", path, expect=1)
    assert f"{path}:1: invalid JSON: Unterminated string" in result.stderr
    assert run("export").stdout == ""
    result = run("import", path, expect=1)
    assert "imported 2 chats, 1 failed" in result.stderr
    assert sorted(json.loads(line)["chat_id"] for line in run("export").stdout.splitlines()) == [
        "chat-0",
        "chat-1",
    ]


def test_import_of_a_list_reports_a_number_too_long_to_read(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    first = json.dumps({**DOC, "chat_id": "first"})
    path = write(tmp_path / "chats.json", f'[{first}, {{"chat_id": "huge", "n": {"9" * 5000}}}]')
    result = run("import", path, expect=1)
    assert (
        f"{path}:1: invalid JSON: integer of more than 4300 digits (column {len(first) + 4})" in result.stderr
    )
    assert "imported 1 chat, 1 failed" in result.stderr


def test_export_and_import_compressed_files(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    run("import", "-", stdin=json.dumps(DOC))
    run("export", "-o", str(tmp_path / "chats.jsonl.gz"))
    run("rm", "doc-1")
    run("import", str(tmp_path / "chats.jsonl.gz"))
    assert json.loads(run("export").stdout)["chat_id"] == "doc-1"
    not_gzip = write(tmp_path / "plain.json.gz", json.dumps(DOC))
    result = run("import", not_gzip, expect=1)
    assert f"{not_gzip}:0: cannot be read: Not a gzipped file" in result.stderr
    assert "Traceback" not in result.stderr


def test_what_export_writes_imports_back_whatever_its_unknown_keys(run: Run) -> None:
    """A chat whose unknown keys are named like another format's (ShareGPT's
    conversations): its export was imported as that format, without its messages."""
    run("db", "upgrade")
    run("import", "-", stdin=json.dumps({**DOC, "conversations": [], "main_messages": []}))
    exported = run("export").stdout
    run("rm", "doc-1", "--yes")
    run("import", "-", stdin=exported)
    assert run("export").stdout == exported
    assert json.loads(exported)["messages"]


def test_a_missing_file_stops_the_import_before_it_writes(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    good = write(tmp_path / "good.json", json.dumps(DOC))
    result = run("import", good, str(tmp_path / "typo.json"), expect=1)
    assert "typo.json: No such file or directory" in result.stderr
    assert run("export").stdout == ""


def test_strict_import_is_all_or_nothing(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    path = write(
        tmp_path / "two.jsonl", json.dumps(DOC) + "\n" + json.dumps({"chat_id": "x", "messages": [{}]}) + "\n"
    )
    result = run("import", "--strict", path, expect=1)
    assert f"{path}:2:" in result.stderr
    assert "nothing imported" in result.stderr
    assert "Traceback" not in result.stderr
    assert run("export").stdout == ""


def test_import_from_stdin(run: Run) -> None:
    run("db", "upgrade")
    run("import", "-", stdin=json.dumps(DOC))
    assert json.loads(run("export").stdout)["chat_id"] == "doc-1"


def test_text_is_utf8_in_and_out_whatever_the_locales_encoding(run_process: Run) -> None:
    """Standard input was decoded, and output encoded, with the locale's encoding
    (a Windows pipe's is cp1252): piped UTF-8 was stored as mojibake ("cafÃ©"),
    and a character the encoding lacks crashed ls and export."""
    run_process("db", "upgrade")
    latin = {"PYTHONIOENCODING": "latin-1"}
    run_process(
        "import", "-", stdin=json.dumps({**DOC, "title": "café ✓"}, ensure_ascii=False), environment=latin
    )
    assert json.loads(run_process("export").stdout)["title"] == "café ✓"
    ascii_only = {"PYTHONIOENCODING": "ascii"}
    assert json.loads(run_process("export", environment=ascii_only).stdout)["title"] == "café ✓"
    assert "café ✓" in run_process("ls", environment=ascii_only).stdout
    assert "café ✓" in run_process("show", "doc-1", environment=ascii_only).stdout
    missing = run_process("show", "✓", expect=1, environment=ascii_only)
    assert "chat '✓' not found" in missing.stderr
    bad = run_process("import", "-", stdin=b'{"chat_id": "\xe9"}', expect=1)  # not UTF-8: named as a file is
    assert "<stdin>:0: not UTF-8 text" in bad.stderr


def test_import_from_a_closed_standard_input_says_so(run: Run, empty_database: URL, tmp_path: Path) -> None:
    """Started with standard input closed ('<&-'), import - ended in an AttributeError traceback."""
    run("db", "upgrade")
    url = empty_database.render_as_string(hide_password=False)
    env = {key: value for key, value in os.environ.items() if key != "CHATARCHIVE_DATABASE_URL"}
    result = subprocess.run(
        ["sh", "-c", '"$0" --db "$1" import - <&-', CHATARCHIVE, url],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env=env,
    )
    assert result.returncode == 1, result.stderr
    assert "Error: -: standard input is closed" in result.stderr
    assert "Traceback" not in result.stderr


def test_import_skips_a_byte_order_mark(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    bom = "\ufeff"
    run("import", write(tmp_path / "one.json", bom + json.dumps(DOC)))
    lines = [json.dumps({**DOC, "chat_id": f"line-{n}"}) for n in range(2)]
    run("import", write(tmp_path / "lines.jsonl", bom + "\n".join(lines) + "\n"))
    run("import", "-", stdin=bom + json.dumps({**DOC, "chat_id": "piped"}))
    exported = [json.loads(line)["chat_id"] for line in run("export").stdout.splitlines()]
    assert sorted(exported) == ["doc-1", "line-0", "line-1", "piped"]


def test_rm_user_asks_first(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    run("import", "-", stdin=json.dumps([DOC, {**DOC, "chat_id": "doc-2"}]))
    assert "Delete 2 chats of user 'alice'?" in run("rm", "--user", "alice", stdin="n\n", expect=1).stderr
    assert len(run("export").stdout.splitlines()) == 2
    assert "deleted 2 chats" in run("rm", "--user", "alice", "--yes").stderr
    assert run("export").stdout == ""


def test_rm_old_chats_by_date_or_age(run: Run) -> None:
    run("db", "upgrade")
    now = datetime.now(UTC)
    chats = [
        {**DOC, "chat_id": chat_id, "user_id": user, "updated_at": (now - age).isoformat()}
        for chat_id, user, age in [
            ("year-old", "alice", timedelta(days=365)),
            ("month-old", "alice", timedelta(days=30)),
            ("bobs-month-old", "bob", timedelta(days=30)),
            ("fresh", "alice", timedelta(hours=1)),
        ]
    ]
    chats[0] |= {"model": "m-old", "tags": ["archived"]}
    run("import", "-", stdin=json.dumps(chats))

    def left() -> list[str]:
        return sorted(json.loads(line)["chat_id"] for line in run("export").stdout.splitlines())

    def listed(*options: str) -> list[str]:
        table = run("ls", *options).stdout
        names = [str(chat["chat_id"]) for chat in chats]
        return [name for name in names if f" {name} " in table]

    # ls takes the same options, to see first what rm would delete.
    assert listed("--older-than", "4w") == ["year-old", "month-old", "bobs-month-old"]
    newest_old = run("ls", "--older-than", "4w", "--limit", "2", "--json")
    summaries = json.loads(newest_old.stdout)  # newest first (a tie: chat_id descending)
    assert [(s["chat_id"], s["user_id"], s["message_count"]) for s in summaries] == [
        ("month-old", "alice", 4),
        ("bobs-month-old", "bob", 4),
    ]
    more = re.fullmatch(r"\(showing the 2 most recent of 3; next page: --cursor (\S+)\)\n", newest_old.stderr)
    assert more, newest_old.stderr
    rest = run("ls", "--older-than", "4w", "--limit", "2", "--json", "--cursor", more[1])
    assert [s["chat_id"] for s in json.loads(rest.stdout)] == ["year-old"]
    assert not rest.stderr  # the last page
    first = run("ls", "--limit", "1", "--json").stderr  # "(... next page: --cursor C)"
    second = run("ls", "--limit", "1", "--cursor", first.split()[-1].rstrip(")"))
    assert " month-old " in second.stdout
    assert re.search(r"\(1 shown of 4; next page: --cursor \S+\)", second.stdout)
    assert "not a cursor" in run("ls", "--cursor", "nonsense", expect=1).stderr
    assert listed("--older-than", "4w", "--since", f"{now - timedelta(days=60):%Y-%m-%d}") == [
        "month-old",
        "bobs-month-old",
    ]
    assert listed("--model", "m-old") == listed("--tag", "archived") == ["year-old"]
    cold = [json.loads(line)["chat_id"] for line in run("export", "--older-than", "4w").stdout.splitlines()]
    assert cold == ["bobs-month-old", "month-old", "year-old"]  # what rm --older-than 4w deletes
    asked = run("rm", "--before", f"{now - timedelta(days=100):%Y-%m-%d}", stdin="n\n", expect=1)
    assert "Delete 1 chat last updated before" in asked.stderr
    asked = run("rm", "--older-than", "4w", stdin="n\n", expect=1)
    assert "Delete 3 chats last updated before" in asked.stderr
    nothing = run("rm", "--older-than", "4w", "--user", "nobody")  # nothing to ask about
    assert nothing.stderr.startswith("no chats of user 'nobody' last updated before")
    assert len(left()) == 4
    assert (
        "deleted 1 chat last updated before"
        in run("rm", "--before", f"{now - timedelta(days=100):%Y-%m-%d}", "--yes").stderr
    )
    assert (
        "deleted 1 chat of user 'bob' last updated"
        in run("rm", "--older-than", "4w", "--user", "bob", "--yes").stderr
    )
    assert left() == ["fresh", "month-old"]
    run("rm", "--older-than", "2d", "--yes")
    assert left() == ["fresh"]
    for wrong in (
        ["--older-than", "4"],
        ["--older-than", "0d"],
        ["--older-than", "-4d"],
        ["--older-than", "4 d"],
        ["--older-than", "²d"],
    ):
        assert "not an age: a whole number above 0 and h, d or w" in run("rm", *wrong, expect=2).stderr
    assert "reaches back before the year 1" in run("rm", "--older-than", "9999999w", expect=2).stderr
    assert "not both" in run("rm", "--before", "2026-01-01", "--older-than", "1d", expect=2).stderr
    assert "not both" in run("ls", "--before", "2026-01-01", "--older-than", "1d", expect=2).stderr
    run("rm", "fresh", "--older-than", "1d", expect=2)
    assert left() == ["fresh"]


def test_errors_exit_1_and_usage_exits_2(run: Run) -> None:
    missing = run("ls", expect=1)
    assert "chatarchive db upgrade" in missing.stderr
    assert "Traceback" not in missing.stderr
    run("db", "upgrade")
    assert "No such file" in run("import", "/nonexistent.json", expect=1).stderr
    run("frobnicate", expect=2)
    run("rm", expect=2)
    run("export", "--format", "yaml", expect=2)


def test_quickstart(tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("CHATARCHIVE_DATABASE_URL", None)
    for _ in range(2):  # running it again is harmless
        result = subprocess.run(
            [CHATARCHIVE, "quickstart"], capture_output=True, text=True, cwd=tmp_path, env=env
        )
        assert result.returncode == 0, result.stderr
    assert (tmp_path / "chatarchive.db").exists()
    assert "seed-tool-calling" in result.stdout
    assert "airalogy_search" in result.stdout
    assert "imported 4 sample chats" in result.stderr


@pytest.mark.parametrize("url", ["sqlite://", "sqlite:///:memory:"])
def test_an_in_memory_database_runs_only_the_quickstart(url: str) -> None:
    # 'db upgrade' then 'import' each met a new, empty database: the import
    # failed with "run 'chatarchive db upgrade'", which had just been run.
    for command in (["db", "upgrade"], ["import", "-"], ["ls"], ["rm", "c", "--yes"]):
        result = CliRunner().invoke(main, ["--db", url, *command], input="{}")
        assert result.exit_code == 1, command
        assert f"{url} is an in-memory database, which lasts one command" in result.output
    result = CliRunner().invoke(main, ["--db", url, "quickstart"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    assert "seed-tool-calling" in result.output
    result = CliRunner().invoke(main, ["--db", url, "db", "upgrade", "--sql"])  # SQLite's schema, printed
    assert result.exit_code == 0, result.output
    assert "CREATE TABLE chats" in result.output


def test_bulk_import(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    lines = [json.dumps({**DOC, "chat_id": f"doc-{i}"}) for i in range(30)]
    path = write(tmp_path / "many.jsonl", "\n".join(lines) + "\n")
    assert "imported 30 chats" in run("import", "--bulk", "--batch-size", "7", path).stderr
    assert "imported 30 chats" in run("import", "--bulk", "--strict", path).stderr
    assert len(run("export").stdout.splitlines()) == 30
    assert "Locks the archive's tables" in " ".join(run("import", "--help").stdout.split())


def test_bench_reports_every_figure(run: Run, dialect: str) -> None:
    report = json.loads(run("bench", "--chats", "30", "--messages", "6", "--runs", "1", "--json").stdout)
    assert report["chats"] == 30
    assert report["messages"] >= 180
    figures = report["figures"]
    for name in (
        "ingest_save_many",
        "ingest_bulk",
        "ingest_save_many_asyncio",
        "ingest_validate_and_convert",
        "get_median_ms",
        "append_1000_median_ms",
        "append_1000_branched_median_ms",
        "regenerate_1000_median_ms",
        "get_branched_1000_median_ms",
        *(f"tokenizer{way}_{kind}_texts_per_s" for way in ("", "_in_python") for kind in ("new", "known")),
    ):
        assert figures[name] > 0
    assert report["ratios"]["tokenizer / its path in Python, words known"] > 0
    assert report["ratios"]["save_many, asyncio / sync"] > 0
    assert report["ratios"]["append at 1,000 / at 10 messages, 100 sibling branches"] > 0
    if dialect == "postgresql":
        assert figures["ingest_raw_copy_own"] > 0
        assert figures["ingest_save_many_2_writers"] > 0
        assert report["ratios"]["save_many / raw COPY (own schema)"] > 0
        assert report["ratios"]["save_many, 2 writers / 1 writer"] > 0
        for name in ("save_many", "save_many_2_writers", "save_many_asyncio", "bulk", "raw_copy_own"):
            assert figures[f"ingest_{name}_no_search_index"] > 0
        assert figures["ingest_2_writers_then_search_index"] > 0
        assert figures["ingest_index_catch_up"] > 0
        assert figures["ingest_langchain_postgres"] > 0
        assert report["ratios"]["save_many / langchain-postgres add_messages"] > 0
        assert report["ratios"]["index catch-up / save_many"] > 0
        assert 0 < figures["bytes_per_message_no_search_index"] < figures["bytes_per_message"]
    assert run("db", "current").stdout.strip() == "none"  # ran in a throwaway database


def test_bench_keep_asks_before_deleting_the_chats_and_leaves_no_tables_of_its_own(run: Run) -> None:
    """--keep emptied a populated archive without a word, and left its reference
    tables in the database (on PostgreSQL), where db check saw drift."""
    run("db", "upgrade")
    run("import", "-", stdin=json.dumps(DOC))
    bench = ("bench", "--chats", "3", "--messages", "4", "--runs", "1", "--keep", "--json")
    asked = run(*bench, stdin="n\n", expect=1)
    assert "Delete the 1 chat of" in asked.stderr
    assert run("show", DOC["chat_id"]).stdout  # still there
    report = json.loads(run(*bench, "--yes").stdout)
    assert report["figures"]["get_median_ms"] > 0
    assert run("db", "check").stdout.strip() == "ok"
    assert str(DOC["chat_id"]) not in run("ls").stdout
    # It leaves its workload in the database; running again asks about those chats, and no answer is no.
    assert "Delete the 3 chats of" in run(*bench, stdin="", expect=1).stderr


def test_bench_keep_runs_in_an_archive_outside_the_public_schema(tmp_path: Path) -> None:
    """An archive in a schema of its own (the search path names it) ran every
    command but bench --keep, which named public's tables: a traceback."""
    from tests.support.databases import throwaway_database

    with throwaway_database("postgresql", tmp_path) as url:
        engine = create_engine(url)
        try:
            with engine.begin() as connection:
                connection.exec_driver_sql('CREATE SCHEMA "Chats"')
        finally:
            engine.dispose()
        in_schema = url.update_query_dict({"options": '-csearch_path="Chats"'})
        database = in_schema.render_as_string(hide_password=False)
        args = [
            "--db",
            database,
            "bench",
            "--keep",
            "--chats",
            "3",
            "--messages",
            "4",
            "--runs",
            "1",
            "--json",
        ]
        figures = json.loads(invoke(database, *args[2:]).stdout)["figures"]
        assert figures["ingest_raw_copy_own"] > 0
        assert figures["bytes_per_message"] > 0
        assert invoke(database, "db", "check").stdout.strip() == "ok"
        engine = create_engine(url)
        try:
            with engine.connect() as connection:
                tables = connection.exec_driver_sql(
                    "SELECT table_schema, count(*) FROM information_schema.tables "
                    "WHERE table_type = 'BASE TABLE' AND table_schema NOT IN ('pg_catalog', 'information_schema') "
                    "GROUP BY 1"
                ).all()
        finally:
            engine.dispose()
        # The archive's tables, its search terms and its version table.
        assert dict(tables) == {"Chats": len(metadata.tables) + 2}


def test_stats_and_search(run: Run, tmp_path: Path) -> None:
    from tests.support.analytics_fixture import CHATS

    run("db", "upgrade")
    run("import", write(tmp_path / "fixture.json", json.dumps(CHATS)))
    table = run("stats").stdout
    assert "2026-03-02" in table
    assert "messages per day" in table
    assert "█" in table
    by_tool = json.loads(run("stats", "--by", "tool", "--format", "json").stdout)
    assert [(row["tool_name"], row["calls"]) for row in by_tool] == [
        ("search", 3),
        ("calc", 1),
        ("lookup", 1),
    ]
    csv_lines = run("stats", "--by", "user", "--format", "csv", "--since", "2026-03-10").stdout.splitlines()
    assert csv_lines[0].startswith("user_id,chats,messages")
    assert csv_lines[1].startswith("u2,2,9")
    for by in ("model", "workflow", "feedback"):
        assert run("stats", "--by", by, "--model", "m1").stdout.strip()
    hits = json.loads(run("search", "primer dimers", "--json").stdout)
    assert [(hit["chat_id"], hit["position"]) for hit in hits] == [("alpha", 3), ("alpha", 4)]
    assert "alpha [3] tool" in run("search", "primer").stdout
    assert "search index rebuilt" in run("db", "reindex").stderr
    assert json.loads(run("search", "primer dimers", "--json").stdout) == hits
    assert run("db", "search-index").stdout == "on\n"
    assert run("db", "search-index", "off").stdout == "off\n"
    assert "search-index on" in run("search", "primer", expect=1).stderr
    assert run("db", "search-index", "on").stdout == "on\n"
    assert json.loads(run("search", "primer dimers", "--json").stdout) == hits
    assert "no matches" in run("search", "'&:*").stderr
    run("stats", "--by", "planet", expect=2)


def test_search_configuration_and_deferred_indexing(run: Run, tmp_path: Path) -> None:
    settings = run("db", "upgrade", "--indexing", "deferred", "--language", "german").stdout
    assert settings == (
        "language\tgerman\ncjk\tbigram\nindexing\tdeferred\nembedder\tnone\ndimension\tnone\n"
        "vector_scan\tdefault\n"
    )
    assert run("db", "search").stdout == settings
    chat = {
        "chat_id": "zh",
        "messages": [{"role": "user", "content": "为什么PCR会出现非特异性条带？ Die Häuser"}],
    }
    run("import", write(tmp_path / "zh.json", json.dumps(chat)))
    waiting = run("search", "条带")
    assert "1 chats have writes not searchable yet" in waiting.stderr
    assert "no matches" in waiting.stderr
    assert "indexed 1 chats; up to date" in run("db", "index").stderr
    found = run("search", "条带 haus", "--json")
    assert [hit["snippet"] for hit in json.loads(found.stdout)] == [
        "为什么PCR会出现非特异性«条带»？ Die «Häuser»"
    ]
    assert "not searchable yet" not in found.stderr
    assert "indexing\tsync\n" in run("db", "search", "--cjk", "unigram", "--indexing", "sync").stdout
    assert "«性条»" in json.loads(run("search", "性条", "--json").stdout)[0]["snippet"]
    run("db", "search", "--language", "klingon", expect=2)
    run("db", "search-index", "off")
    assert "search is off" in run("db", "index", expect=1).stderr


# Stored text is whatever users and models wrote: console markup, emoji codes,
# terminal escape sequences (clear the screen, set the window title, CSI as one
# C1 byte), a carriage return that would let later text overwrite earlier text.
HOSTILE = "[/x] [red]red[/red] :smile: \x1b[2J\x1b]0;title\x07 \x9b31m back\rspace"


def test_terminal_output_shows_stored_text_literally(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    doc = {
        "chat_id": "hostile\x1b[1m",
        "user_id": HOSTILE,
        "title": HOSTILE,
        "model": HOSTILE,
        "messages": [
            {"role": "user", "name": HOSTILE, "content": f"zebrafish {HOSTILE}"},
            {"role": "assistant", "content": [{"type": "text", "text": f"zebrafish {HOSTILE}"}]},
        ],
        "feedback": [{"score": 1, "comment": HOSTILE}],
    }
    run("import", write(tmp_path / "hostile.json", json.dumps(doc)))
    shown = "[/x] [red]red[/red] :smile: \\x1b[2J\\x1b]0;title\\x07 \\x9b31m back\\x0dspace"
    outputs = {
        "ls": run("ls").stdout,
        "show": run("show", doc["chat_id"]).stdout,
        "stats": run("stats", "--by", "user").stdout,
        "search": run("search", "zebrafish").stdout,
    }
    for command, output in outputs.items():
        assert not {"\x1b", "\x9b", "\x07", "\r"} & set(output), command
        # Tables wrap cells between words.
        for word in shown.split():
            assert word in output, (command, word)
    assert shown in outputs["search"]
    # title, user, model, name, the two contents, feedback
    assert outputs["show"].count(shown) == 7
    assert "hostile\\x1b[1m" in outputs["ls"]
    # The JSON outputs keep the exact text.
    assert run("show", doc["chat_id"], "--json").stdout.count("\\u001b[2J") == 7
    assert json.loads(run("export").stdout)["title"] == HOSTILE


def test_show_renders_shapes_that_break_the_spec(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    doc = {
        "chat_id": "odd",
        "messages": [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "a", "function": ["not", "an", "object"]},
                    {"id": "b", "type": "custom", "custom": "raw input"},
                    {"id": {"not": "a string"}, "type": "function", "function": {"name": "f"}},
                    {"id": "c", "type": "custom", "custom": {"name": "grep", "input": "-rn x"}},
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "a",
                "content": [{"type": "image_url", "image_url": "u", "text": 5}],
            },
        ],
    }
    run("import", write(tmp_path / "odd.json", json.dumps(doc)))
    shown = run("show", "odd").stdout
    for expected in ('call None(["not", "an", "object"])', "call None(raw input)", "call grep(-rn x)"):
        assert expected in shown


def test_ls_folds_rather_than_cuts_ids_in_a_narrow_terminal(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    chat_id = "session-2026-11-30-0001-lab"
    doc = {
        "chat_id": chat_id,
        "title": "a title of many words " * 4,
        "messages": [{"role": "user", "content": "hi"}],
    }
    run("import", write(tmp_path / "doc.json", json.dumps(doc)))
    assert chat_id in run("ls", columns=80).stdout  # the other columns fold first
    for columns in (60, 30):
        narrow = run("ls", columns=columns).stdout
        assert chat_id in first_column(narrow), narrow
        assert re.search(r" \d{4}-\d\d-\d\d ", narrow)  # nor splits a day
        assert "…" not in narrow


def first_column(table: str) -> str:
    """The text of a table's first column, its folded lines joined."""
    return "".join(line.split("│")[1].strip() for line in table.splitlines() if line.startswith("│"))


def test_tables_never_lose_or_split_a_value(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    model = "a-model-with-a-long-name-" + "x" * 20
    doc = {
        "chat_id": "c1",
        "model": model,
        "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "hello", "usage": {"prompt_tokens": 123456789}},
        ],
        "feedback": [{"score": 0.5}],
    }
    run("import", write(tmp_path / "doc.json", json.dumps(doc)))
    for columns in (30, 50, 80):
        narrow = run("stats", "--by", "model", columns=columns).stdout
        # A number is never folded ("0.500" over two lines would read as two
        # values), and no column is dropped to fit; text folds.
        for number in ("123456789", "0.500"):
            assert re.search(rf"\b{re.escape(number)}\b", narrow), (columns, narrow)
        assert model in first_column(narrow), (columns, narrow)
        assert "…" not in narrow
    # Written to a file (no terminal, no $COLUMNS), a table has its natural
    # width: every cell and header on one line.
    whole = run("stats", "--by", "model", columns=None).stdout
    assert re.search(rf"│ {model} +│ +1 │ +2 │ .*│ +123456789 │ .*│ +0\.500 │", whole), whole
    assert "completion_tokens" in whole
    assert "c1" in run("ls", columns=None).stdout


def test_output_closed_by_its_reader_ends_quietly(run: Run, tmp_path: Path, empty_database: URL) -> None:
    run("db", "upgrade")
    docs = [{"chat_id": f"c{n}", "messages": [{"role": "user", "content": "x" * 10_000}]} for n in range(40)]
    run("import", write(tmp_path / "docs.json", json.dumps(docs)))
    # More than a pipe holds: the command is still writing when the reader leaves.
    url = empty_database.render_as_string(hide_password=False)
    with subprocess.Popen(
        [CHATARCHIVE, "--db", url, "export"], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    ) as export:
        assert export.stdout is not None
        assert export.stderr is not None
        assert json.loads(export.stdout.readline())["chat_id"]
        export.stdout.close()
        assert export.wait() == 1
        assert export.stderr.read() == b""


def test_import_with_writers_traces_a_refused_chat_to_its_line(
    run: Run, tmp_path: Path, empty_database: URL
) -> None:
    run("db", "upgrade")
    engine = create_engine(empty_database)
    with engine.begin() as connection:  # the database refuses one chat, valid as it is
        if engine.dialect.name == "sqlite":
            connection.exec_driver_sql(
                "CREATE TRIGGER refuse BEFORE INSERT ON chats WHEN NEW.chat_id = 'refused' "
                "BEGIN SELECT RAISE(ABORT, 'refused by a trigger'); END"
            )
        else:
            connection.exec_driver_sql(
                "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                "IF NEW.chat_id = 'refused' THEN RAISE EXCEPTION 'refused by a trigger'; END IF; "
                "RETURN NEW; END $$"
            )
            connection.exec_driver_sql(
                "CREATE TRIGGER refuse BEFORE INSERT ON chats FOR EACH ROW EXECUTE FUNCTION refuse()"
            )
    engine.dispose()
    lines = [json.dumps({**DOC, "chat_id": f"doc-{n}"}) for n in range(30)]
    lines[17] = json.dumps({**DOC, "chat_id": "refused"})
    path = write(tmp_path / "many.jsonl", "\n".join(lines))
    result = run("import", "--writers", "3", "--batch-size", "4", path, expect=1)
    assert f"{path}:18: " in result.stderr
    assert "refused by a trigger" in result.stderr
    assert "imported 29 chats, 1 failed" in result.stderr
    assert len(run("export").stdout.splitlines()) == 29
    assert "not with --strict" in run("import", "--writers", "2", "--strict", path, expect=2).stderr


def test_import_with_writers_indexes_text_in_every_script(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    docs = list(generate_chats(120, 8, seed=4))
    path = write(tmp_path / "chats.jsonl", "\n".join(json.dumps(doc, default=str) for doc in docs))
    result = run("import", "--writers", "2", "--batch-size", "10", path)
    assert "Traceback" not in result.stderr
    first = docs[0]["messages"][1]["content"]
    word = first if isinstance(first, str) else first[0]["text"]
    query = word.split()[0].strip(".,，。、")[:2]
    hits = json.loads(run("search", "--json", query).stdout)
    assert hits


def test_an_import_into_a_read_only_database_stops_at_the_first_error_and_says_it_once(
    run: Run, tmp_path: Path, empty_database: URL
) -> None:
    """No retry mends a database that refuses every write (read-only, a full
    disk, no privilege): the import stops there, in one line, instead of
    trying and reporting every chat on its own."""
    run("db", "upgrade")
    path = write(
        tmp_path / "chats.jsonl", "\n".join(json.dumps(doc, default=str) for doc in generate_chats(40, 4))
    )
    if empty_database.get_backend_name() == "sqlite":
        read_only = f"sqlite:///file:{empty_database.database}?mode=ro&uri=true"
    else:
        engine = create_engine(empty_database)
        with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
            connection.exec_driver_sql(
                f'ALTER DATABASE "{empty_database.database}" SET default_transaction_read_only = on'
            )
        engine.dispose()
        read_only = empty_database.render_as_string(hide_password=False)
    result = invoke(read_only, "import", "--batch-size", "5", path, expect=1)
    assert "Traceback" not in result.stderr
    errors = [line for line in result.stderr.splitlines() if "read-only" in line or "readonly" in line]
    assert len(errors) == 1, result.stderr
    assert "chats.jsonl:" not in result.stderr  # no chat is at fault


@pytest.mark.parametrize("strict", [False, True], ids=["batches", "strict"])
def test_an_interrupted_import_says_what_it_kept(run: Run, empty_database: URL, strict: bool) -> None:
    run("db", "upgrade")
    engine = create_engine(empty_database)

    def write_lock_held() -> bool:
        with closing(sqlite3.connect(str(empty_database.database), timeout=0)) as connection:
            try:
                connection.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError:
                return True
            return False

    def started() -> bool:
        if strict and engine.dialect.name == "sqlite":  # its one transaction holds the write lock
            for _ in range(5):  # for a while: not a moment of its start-up
                if not write_lock_held():
                    return False
                time.sleep(0.05)
            return True
        with engine.connect() as connection:
            if strict:  # its one transaction has written the first batch and waits for more input
                query = "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND state = 'idle in transaction'"
            else:
                query = "SELECT count(*) FROM chats"
            return bool(connection.exec_driver_sql(query).scalar_one())

    url = empty_database.render_as_string(hide_password=False)
    command = [
        CHATARCHIVE,
        "--db",
        url,
        "import",
        "--batch-size",
        "2",
        "-",
        *(["--strict"] if strict else []),
    ]

    def interruptible() -> None:
        # Ctrl-C as in a terminal, even when this test runs where SIGINT is
        # ignored (a background job), which its children would inherit.
        signal.signal(signal.SIGINT, signal.SIG_DFL)

    with subprocess.Popen(
        command, stdin=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=interruptible
    ) as importing:
        assert importing.stdin is not None
        importing.stdin.write("".join(json.dumps({**DOC, "chat_id": f"c{n}"}) + "\n" for n in range(3)))
        importing.stdin.flush()  # and the pipe stays open, as a long input's would
        for _ in range(600):
            if started() or importing.poll() is not None:
                break
            time.sleep(0.05)
        importing.send_signal(signal.SIGINT)  # with the input still open: it waits for more
        try:
            importing.wait(60)  # it needs no more input to stop
        finally:
            importing.stdin.close()
        assert importing.stderr is not None
        stderr = importing.stderr.read()
    engine.dispose()
    assert importing.returncode == 130, stderr
    assert "Traceback" not in stderr
    if strict:
        assert "interrupted: nothing imported" in stderr
        assert run("export").stdout == ""
    else:
        assert "interrupted: the batches written until then are kept" in stderr
        assert [json.loads(line)["chat_id"] for line in run("export").stdout.splitlines()] == ["c0", "c1"]


def test_db_rls_switches_row_level_security(run: Run, dialect: str) -> None:
    run("db", "upgrade")
    assert run("db", "rls").stdout == "off\n"
    if dialect == "sqlite":
        assert "needs PostgreSQL" in run("db", "rls", "on", expect=1).stderr
        return
    assert run("db", "rls", "on").stdout == "on\n"
    assert run("db", "rls", "status").stdout == "on\n"
    assert run("db", "rls", "off").stdout == "off\n"


def test_alembic_loads_only_for_schema_commands() -> None:
    # Every command starts by importing chatarchive: Alembic (and Mako) would add
    # a third of a second to each.
    check = "import sys, chatarchive, chatarchive.cli; print(sorted({m.split('.')[0] for m in sys.modules}))"
    loaded = subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stdout
    assert "'sqlalchemy'" in loaded
    assert "'alembic'" not in loaded
    assert "'mako'" not in loaded
    check = "import sys, chatarchive.cli; print('chatarchive.bench' in sys.modules)"
    assert (
        subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stdout
        == "False\n"
    )


def test_import_progress_counts_the_bytes_read(tmp_path: Path) -> None:
    from chatarchive.importing import records as _records

    chats = [{**DOC, "chat_id": f"chat-{n}", "pad": "x" * 400_000} for n in range(30)]
    plain = write(tmp_path / "chats.json", json.dumps(chats))
    packed = tmp_path / "more.jsonl.gz"
    with gzip.open(packed, "wt", encoding="utf-8") as stream:
        stream.write("".join(json.dumps(chat) + "\n" for chat in chats))
    total = Path(plain).stat().st_size + packed.stat().st_size
    moves: list[tuple[int, int]] = []
    records = list(_records((plain, str(packed)), lambda count, position: moves.append((count, position))))
    assert len(records) == len(moves) == 60
    assert [count for count, _ in moves] == list(range(1, 61))
    positions = [position for _, position in moves]
    assert positions == sorted(positions)
    assert positions[0] < total / 4  # read as it goes, not whole first
    assert Path(plain).stat().st_size <= positions[30] <= total


def test_import_of_an_empty_file_says_it_held_no_records(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    result = run("import", str(empty))
    assert f"{empty}: no records (the input is empty)" in result.stderr
    assert "imported 0 chats" in result.stderr


def test_search_by_meaning_from_the_command_line(run: Run, tmp_path: Path) -> None:
    register_embedder(meanings("cli-meanings"))
    run("db", "upgrade")
    chats = [
        {
            "chat_id": "garage",
            "tags": ["home"],
            "messages": [{"role": "user", "content": "My automobile broke."}],
        },
        {"chat_id": "pets", "messages": [{"role": "user", "content": "A puppy and a car."}]},
    ]
    run("import", write(tmp_path / "chats.jsonl", "\n".join(json.dumps(chat) for chat in chats)))
    assert "needs an embedder" in run("search", "car", "--mode", "vector", expect=1).stderr
    settings = run("db", "search", "--embedder", "cli-meanings").stdout
    assert "embedder\tcli-meanings\ndimension\t32\n" in settings
    found = json.loads(run("search", "car", "--mode", "vector", "--json").stdout)
    assert [hit["chat_id"] for hit in found] == ["garage", "pets"]
    hybrid = json.loads(run("search", "car", "--mode", "hybrid", "--json").stdout)
    assert [hit["chat_id"] for hit in hybrid] == ["pets", "garage"]
    assert hybrid[0]["snippet"] == "A puppy and a «car»."
    tagged = json.loads(run("search", "car", "--mode", "vector", "--tag", "home", "--json").stdout)
    assert [hit["chat_id"] for hit in tagged] == ["garage"]
    assert "vector_scan\t120\n" in run("db", "search", "--vector-scan", "120").stdout
    assert json.loads(run("search", "car", "--mode", "vector", "--json").stdout) == found
    assert "vector_scan\tdefault\n" in run("db", "search", "--vector-scan", "default").stdout
    for wrong in ("0", "1001", "wide"):
        assert "1 to 1,000, or 'default'" in run("db", "search", "--vector-scan", wrong, expect=2).stderr
    assert "embedder\tnone" in run("db", "search", "--embedder", "none").stdout
    assert "no embedder named 'missing'" in run("db", "search", "--embedder", "missing", expect=1).stderr
    run("search", "car", "--mode", "semantic", expect=2)
