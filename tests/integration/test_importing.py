"""chatarchive.importing: the import that the CLI runs, called from Python."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from chatarchive import ChatArchive, ChatArchiveError, ImportFailed, InvalidArgument, InvalidDocument
from chatarchive.importing import Duplicate, import_chats, input_size

CHAT = [{"role": "user", "content": "Wie spät ist es?"}, {"role": "assistant", "content": "Drei Uhr."}]


def lines(path: Path, *records: Any) -> Path:
    path.write_text("".join(json.dumps(record, ensure_ascii=False) + "\n" for record in records), "utf-8")
    return path


def test_an_import_reports_each_bad_record_with_its_place_and_keeps_the_good_ones(
    archive: ChatArchive, tmp_path: Path
) -> None:
    source = lines(
        tmp_path / "mixed.jsonl",
        {"chat_id": "a", "messages": CHAT},
        {"no": "chat"},
        {"chat_id": "b", "messages": [{"role": "user", "content": "Hi", "uid": "m", "parent": "nowhere"}]},
        {"chat_id": "a", "messages": CHAT[:1]},
    )
    told: list[tuple[str, ChatArchiveError]] = []
    report = import_chats(archive, [source], on_error=lambda place, error: told.append((place, error)))
    assert report.records == 4
    assert report.imported == 1  # "a", saved once from its later record
    assert report.failed == 2
    assert [place for place, _ in told] == [f"{source}:2", f"{source}:3"]
    assert all(isinstance(error, InvalidDocument) for _, error in told)
    assert report.errors == told
    assert report.duplicates == [Duplicate("a", f"{source}:1", f"{source}:4")]
    assert [message.content for message in archive.get("a").messages] == ["Wie spät ist es?"]
    assert {chat.chat_id for chat in archive.list_chats().items} == {"a"}


def test_a_strict_import_stops_at_the_first_bad_record_and_keeps_nothing(
    archive: ChatArchive, tmp_path: Path
) -> None:
    source = lines(tmp_path / "strict.jsonl", {"chat_id": "a", "messages": CHAT}, "no chat")
    with pytest.raises(ImportFailed) as raised:
        import_chats(archive, [source], strict=True)
    assert raised.value.place == f"{source}:2"
    assert isinstance(raised.value.error, InvalidDocument)
    assert str(raised.value).startswith(f"{source}:2: not a chat in any known format")
    assert archive.list_chats().items == []


def test_an_import_checks_its_arguments_and_sources_before_it_writes(
    archive: ChatArchive, tmp_path: Path
) -> None:
    source = lines(tmp_path / "one.jsonl", {"chat_id": "a", "messages": CHAT})
    with pytest.raises(InvalidArgument, match="unknown import format 'nope'"):
        import_chats(archive, [source], format="nope")
    with pytest.raises(InvalidArgument, match="one writer"):
        import_chats(archive, [source], strict=True, writers=2)
    with pytest.raises(FileNotFoundError):
        import_chats(archive, [source, tmp_path / "missing.json"])
    assert archive.list_chats().items == []
    assert input_size([source]) == source.stat().st_size
    assert input_size(["-", source]) is None


def test_an_import_in_a_named_format_reads_every_record_as_that_format(
    archive: ChatArchive, tmp_path: Path
) -> None:
    source = lines(tmp_path / "sharegpt.jsonl", {"conversations": [{"from": "human", "value": "Hi"}]}, CHAT)
    places: list[str] = []
    report = import_chats(
        archive, [source], format="sharegpt", on_error=lambda place, _: places.append(place)
    )
    assert (report.imported, report.failed, places) == (1, 1, [f"{source}:2"])


def test_an_empty_input_is_named_as_holding_no_records(archive: ChatArchive, tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    blank = tmp_path / "blank.json"
    blank.write_text("\n  \n")
    full = lines(tmp_path / "one.jsonl", {"chat_id": "a", "messages": CHAT})
    report = import_chats(archive, [empty, full, blank])
    assert report.empty == [str(empty), str(blank)]
    assert (report.records, report.imported) == (1, 1)
