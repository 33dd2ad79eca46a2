"""chatarchive.importing: the import that the CLI runs, called from Python."""

from __future__ import annotations

import base64
import json
import zipfile
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from chatarchive import ChatArchive, ChatArchiveError, ImportFailed, InvalidArgument, InvalidDocument, formats
from chatarchive.importing import Duplicate, import_chats, input_size
from tests.support.samples import FORMAT_SAMPLES

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


def _chatgpt_conversation(number: int) -> dict[str, Any]:
    record = json.loads((FORMAT_SAMPLES / "chatgpt" / "no-current-node.json").read_text(encoding="utf-8"))
    return {**record, "id": f"0f1e2d3c-4b5a-4968-8776-65544332{number:04d}", "title": f"chat {number}"}


def test_a_chatgpt_export_zip_imports_its_conversation_files_and_nothing_else(
    archive: ChatArchive, tmp_path: Path
) -> None:
    # The layout of ChatGPT's data export: conversations (in numbered parts, as newer exports split them)
    # beside the account's other files and the uploaded files.
    export = tmp_path / "chatgpt-export.zip"
    with zipfile.ZipFile(export, "w") as packed:
        packed.writestr("conversations-001.json", json.dumps([_chatgpt_conversation(n) for n in (3, 4, 5)]))
        packed.writestr("conversations-000.json", json.dumps([_chatgpt_conversation(n) for n in (1, 2)]))
        packed.writestr("user.json", json.dumps({"id": "user-1", "email": "a@example.org"}))
        packed.writestr("message_feedback.json", "[]")
        packed.writestr("chat.html", "<html></html>")
        packed.writestr("file-abc-cat.png", b"\x89PNG\r\n\x1a\n")
    places: list[str] = []
    report = import_chats(archive, [export], on_error=lambda place, _: places.append(place))
    assert (report.records, report.imported, report.failed, places) == (5, 5, 0, [])
    assert sorted(chat.title or "" for chat in archive.list_chats().items) == [
        f"chat {n}" for n in range(1, 6)
    ]
    assert input_size([export]) == sum(info.file_size for info in zipfile.ZipFile(export).infolist()[:2])


def test_a_directory_and_a_zip_of_other_files_import_every_json_file_and_name_each_place(
    archive: ChatArchive, tmp_path: Path
) -> None:
    folder = tmp_path / "unzipped"
    (folder / "more").mkdir(parents=True)
    lines(folder / "a.jsonl", {"chat_id": "a", "messages": CHAT})
    lines(folder / "more" / "b.json", {"chat_id": "b", "messages": CHAT}, {"not": "a chat"})
    (folder / "README.txt").write_text("not read")
    packed = tmp_path / "chats.zip"
    with zipfile.ZipFile(packed, "w") as writing:
        writing.writestr("c.jsonl", json.dumps({"chat_id": "c", "messages": CHAT}) + "\n")
    places: list[str] = []
    report = import_chats(archive, [folder, packed], on_error=lambda place, _: places.append(place))
    assert (report.imported, report.failed) == (3, 1)
    assert places == [f"{folder / 'more' / 'b.json'}:2"]
    assert {chat.chat_id for chat in archive.list_chats().items} == {"a", "b", "c"}


def test_the_files_of_a_chatgpt_export_zip_are_kept_with_the_parts_that_point_at_them(
    archive: ChatArchive, tmp_path: Path
) -> None:
    """A ChatGPT export's uploads and generated images are files beside its
    conversations (``file-ID-name`` at the top or in folders, ``file_ID...``
    in newer exports); each part that points at one (``file-service://ID``,
    ``sediment://ID``) gets its bytes, stored once, and the chat still
    exports to ChatGPT's format as it came."""
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 8
    webp = b"RIFF\x00\x00\x00\x00WEBPVP8 " + bytes(range(200)) * 10
    conversation = json.loads((FORMAT_SAMPLES / "chatgpt" / "tools-reasoning-branches.json").read_text())
    record = conversation[0] if isinstance(conversation, list) else conversation
    assert "file-service://file-cat1" in json.dumps(record)
    newer_id = "0f1e2d3c-4b5a-4968-8776-655443320099"
    newer = {**record, "id": newer_id, "conversation_id": newer_id, "title": "newer layout"}
    newer = json.loads(json.dumps(newer).replace("file-service://file-cat1", "sediment://file_0000abc"))
    export = tmp_path / "chatgpt-export.zip"
    with zipfile.ZipFile(export, "w") as packed:
        packed.writestr("conversations.json", json.dumps([record, newer]))
        packed.writestr("file-cat1-cat.png", png)
        packed.writestr("user-xyz/file_0000abc-4f6e.webp", webp)
        packed.writestr("file-cat10-other.png", b"not this one")
    archive.set_attachments_stored_once(True)
    report = import_chats(archive, [export])
    assert (report.imported, report.failed) == (2, 0)
    for chat_id, raw, name, media in (
        (record["id"], png, "file-cat1-cat.png", "image/png"),
        (newer["id"], webp, "file_0000abc-4f6e.webp", "image/webp"),
    ):
        document = archive.get_tree(chat_id).document
        files = [
            part.file
            for message in document.messages
            if isinstance(message.content, list)
            for part in message.content
            if part.file is not None
        ]
        assert files == [
            {"filename": name, "file_data": f"data:{media};base64," + base64.b64encode(raw).decode()}
        ]
        exported = formats.export(document, "chatgpt")
        assert exported == json.loads(json.dumps(record if chat_id == record["id"] else newer))
    with archive.engine.connect() as connection:
        assert connection.execute(text("SELECT count(*) FROM attachments")).scalar() == 2
    # The same export unpacked into a directory: the same parts, written again.
    unpacked = tmp_path / "unpacked"
    zipfile.ZipFile(export).extractall(unpacked)
    assert import_chats(archive, [unpacked]).imported == 2
    again = archive.get_tree(newer_id).document
    assert [
        part.file["filename"]
        for m in again.messages
        if isinstance(m.content, list)
        for part in m.content
        if part.file
    ] == ["file_0000abc-4f6e.webp"]
