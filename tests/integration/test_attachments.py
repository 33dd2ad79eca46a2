"""Attachments stored once: base64 payloads of parts become one row per user
and SHA-256, documents come back exactly as given, and the bytes go when
no part refers to them any more."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import psycopg
import pytest
from sqlalchemy import Engine, make_url, text

from chatarchive import AsyncChatArchive, ChatArchive, ChatDocument
from chatarchive._attachments import MIN_BYTES, cut_payload, restore_payload
from tests.support.commands import Run
from tests.support.databases import as_user
from tests.support.strategies import exact

#: A PNG's first bytes and enough more to be stored apart.
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 12
JPEG = b"\xff\xd8\xff\xe0" + bytes(reversed(range(256))) * 8
WAV = b"RIFF\x00\x00\x00\x00WAVEfmt " + b"\x01\x02" * 900
PDF = b"%PDF-1.7\n" + b"0123456789" * 300
IMAGE_URL = "data:image/png;base64," + base64.b64encode(PNG).decode()


def b64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def every_kind_of_payload(chat_id: str, user_id: str | None = "ada") -> dict[str, Any]:
    """A chat whose parts carry payloads as each API gives them."""
    return {
        "chat_id": chat_id,
        "user_id": user_id,
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is in these?"},
                    # Chat Completions: an image as a data URL, a file, audio as bare base64.
                    {"type": "image_url", "image_url": {"url": IMAGE_URL, "detail": "high"}},
                    {"type": "image_url", "image_url": {"detail": "low", "url": IMAGE_URL}},  # keys reordered
                    {
                        "type": "file",
                        "file": {"filename": "a.pdf", "file_data": f"data:application/pdf;base64,{b64(PDF)}"},
                    },
                    {"type": "input_audio", "input_audio": {"data": b64(WAV), "format": "wav"}},
                    # Anthropic: a base64 source beside its media type.
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(JPEG)},
                    },
                    # Responses: a data URL as the value itself; a parameter in the data URL.
                    {"type": "input_image", "image_url": f"data:image/png;name=x.png;base64,{b64(PNG)}"},
                    # A tool result with an image inside a list.
                    {
                        "type": "tool_result",
                        "content": [{"type": "text", "text": "shot"}, {"type": "image", "data": b64(PNG)}],
                    },
                ],
            },
            {"role": "assistant", "content": "a chart, a document, a sound and a photo"},
        ],
    }


def stored(engine: Engine, sql: str) -> list[Any]:
    with engine.connect() as connection:
        return list(connection.execute(text(sql)))


#: What a write adds to a document: its version and the times it did not give.
_WRITTEN: Any = {
    "version": True,
    "created_at": True,
    "updated_at": True,
    "messages": {"__all__": {"created_at"}},
}


def same(archive: ChatArchive, given: ChatDocument) -> bool:
    """Whether the stored chat is ``given``, exactly (key order and number types count)."""
    back = exact(archive.get(given.chat_id).model_dump(exclude=_WRITTEN))
    return bool(back == exact(given.model_dump(exclude=_WRITTEN)))


def content(message: Any) -> Any:
    return message.model_dump(mode="json", exclude_unset=True)["content"]


def contents(doc: ChatDocument) -> list[Any]:
    return [content(message) for message in doc.messages]


def given_contents(data: dict[str, Any]) -> list[Any]:
    return [message["content"] for message in data["messages"]]


@pytest.fixture
def once(archive: ChatArchive) -> ChatArchive:
    archive.set_attachments_stored_once(True)
    return archive


def test_the_switch_is_off_by_default_and_the_archive_s(archive: ChatArchive) -> None:
    assert archive.attachments_stored_once() is False
    archive.save(every_kind_of_payload("inline"))
    assert stored(archive.engine, "SELECT count(*) FROM attachments") == [(0,)]
    archive.set_attachments_stored_once(True)
    assert ChatArchive(engine=archive.engine).attachments_stored_once() is True
    archive.set_attachments_stored_once(False)
    assert archive.attachments_stored_once() is False


def test_every_payload_comes_back_exactly_and_is_stored_once(once: ChatArchive) -> None:
    given = ChatDocument.parse(every_kind_of_payload("c1"))
    once.save(given)
    assert same(once, given)
    rows = stored(
        once.engine, "SELECT user_id, sha256, media_type, size FROM attachments ORDER BY media_type"
    )
    assert sorted((user, sha, media, size) for user, sha, media, size in rows) == sorted(
        ("ada", hashlib.sha256(raw).hexdigest(), media, len(raw))
        for raw, media in (
            (PNG, "image/png"),
            (JPEG, "image/jpeg"),
            (WAV, "audio/wav"),
            (PDF, "application/pdf"),
        )
    )
    # Seven parts refer to the four attachments; no part's JSON holds a payload any more.
    parts = stored(
        once.engine, "SELECT data, ordered_json FROM content_parts WHERE attachment_sha256 IS NOT NULL"
    )
    assert len(parts) == 7
    assert all(b64(PNG)[:200] not in json.dumps(row, default=str) for row in parts)


def test_the_same_image_in_ten_turns_and_ten_chats_is_one_row_per_user(once: ChatArchive) -> None:
    turn = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": IMAGE_URL}}]}
    for n in range(10):
        once.save({"chat_id": f"ada-{n}", "user_id": "ada", "messages": [turn] * 10})
    once.save({"chat_id": "bob-1", "user_id": "bob", "messages": [turn]})
    once.save({"chat_id": "nobody-1", "messages": [turn, turn]})
    assert stored(once.engine, "SELECT user_id, size FROM attachments ORDER BY user_id") == [
        ("", len(PNG)),
        ("ada", len(PNG)),
        ("bob", len(PNG)),
    ]
    assert stored(once.engine, "SELECT count(*) FROM content_parts WHERE attachment_sha256 IS NOT NULL") == [
        (103,)
    ]
    assert content(once.get("ada-7").messages[9]) == turn["content"]
    assert content(once.get("nobody-1").messages[1]) == turn["content"]


def test_every_write_path_stores_once_and_reads_back_exactly(once: ChatArchive) -> None:
    image = {"type": "image_url", "image_url": {"url": IMAGE_URL}}
    once.save_many([every_kind_of_payload(f"many-{n}") for n in range(3)])
    once.append("many-0", [{"role": "user", "content": [image]}])
    once.regenerate("many-1", once.get("many-1").messages[1].uid, [{"role": "assistant", "content": [image]}])
    once.edit("many-0", once.get("many-0").messages[0].uid, [image, {"type": "text", "text": "edited"}])
    once.begin_message("many-2", uid="streamed", content=[image])
    once.append_chunk("many-2", "streamed", " and more")
    once.complete_message("many-2", "streamed")

    async def through_asyncio() -> ChatDocument:
        async with AsyncChatArchive(once.engine.url.render_as_string(hide_password=False)) as app:
            await app.save(every_kind_of_payload("async-1"))
            await app.append("async-1", [{"role": "user", "content": [image]}])
            return await app.get("async-1")

    assert content(asyncio.run(through_asyncio()).messages[-1]) == [image]
    assert content(once.get("many-0").messages[-1]) == [image, {"type": "text", "text": "edited"}]
    assert content(once.get("many-1").messages[-1]) == [image]
    assert content(once.get("many-2").messages[-1]) == [image, {"type": "text", "text": " and more"}]
    whole = once.get_tree("many-0").document
    assert [content(m) for m in whole.messages][:3] == [
        every_kind_of_payload("x")["messages"][0]["content"],
        "a chart, a document, a sound and a photo",
        [image],
    ]
    assert stored(once.engine, "SELECT user_id, count(*) FROM attachments GROUP BY user_id") == [("ada", 4)]
    held = stored(once.engine, "SELECT data FROM content_parts WHERE attachment_sha256 IS NOT NULL")
    assert len(held) == 3 * 7 + 7 + 5
    everything = json.dumps(stored(once.engine, "SELECT data, ordered_json FROM content_parts"), default=str)
    assert b64(PNG)[:64] not in everything


def test_the_import_command_stores_attachments_once(run: Run, empty_database: Any, tmp_path: Any) -> None:
    export = tmp_path / "chats.jsonl"
    export.write_text(
        "".join(json.dumps(every_kind_of_payload(f"imported-{n}", user_id="imp")) + "\n" for n in range(3))
    )
    assert run("db", "upgrade").returncode == 0
    assert run("db", "attachments").stdout.strip() == "off"
    assert run("db", "attachments", "on").stdout.strip() == "on"
    assert run("import", str(export)).returncode == 0
    with ChatArchive(empty_database) as archive:
        for n in range(3):
            expected = every_kind_of_payload(f"imported-{n}", user_id="imp")
            assert contents(archive.get(f"imported-{n}")) == given_contents(expected)
        assert stored(archive.engine, "SELECT count(*) FROM attachments") == [(4,)]


def test_payloads_that_would_not_come_back_the_same_stay_in_their_parts(once: ChatArchive) -> None:
    wrapped = "\n".join(b64(PNG)[i : i + 76] for i in range(0, len(b64(PNG)), 76))  # MIME-style lines
    loose_bits = b64(PNG[:1500])[:-2] + "B="  # padding bits that are not zero: decodes, encodes otherwise
    small = "data:image/png;base64," + b64(PNG[: MIN_BYTES - 1])
    doc = {
        "chat_id": "kept",
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": wrapped},
                    },
                    {
                        "type": "image",
                        "source": {"type": "base64", "media_type": "image/png", "data": loose_bits},
                    },
                    {"type": "image_url", "image_url": {"url": small}},
                    {"type": "image_url", "image_url": {"url": "https://example.com/" + "a" * 3000}},
                ],
            }
        ],
    }
    given = ChatDocument.parse(doc)
    once.save(given)
    assert same(once, given)
    assert stored(once.engine, "SELECT count(*) FROM attachments") == [(0,)]


def test_erasure_deletes_the_bytes_no_remaining_part_refers_to(once: ChatArchive) -> None:
    turn = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": IMAGE_URL}}]}
    source = {"type": "base64", "media_type": "image/jpeg", "data": b64(JPEG)}
    other = {"role": "user", "content": [{"type": "image", "source": source}]}
    answer = {"role": "assistant", "content": "seen"}
    once.save({"chat_id": "a", "user_id": "ada", "messages": [turn, answer, other, answer]})
    once.save({"chat_id": "b", "user_id": "ada", "messages": [turn, answer]})
    once.save({"chat_id": "c", "user_id": "cy", "messages": [turn]})

    def left() -> list[tuple[str, str]]:
        return [
            (user, media)
            for user, media in stored(
                once.engine, "SELECT user_id, media_type FROM attachments ORDER BY user_id, media_type"
            )
        ]

    assert left() == [("ada", "image/jpeg"), ("ada", "image/png"), ("cy", "image/png")]
    once.truncate("a", 2, delete=True)  # the JPEG's turn and after
    assert left() == [("ada", "image/png"), ("cy", "image/png")]
    once.delete("a")
    assert left() == [("ada", "image/png"), ("cy", "image/png")]  # chat b still shows it
    once.save({"chat_id": "b", "user_id": "ada", "messages": [answer]})  # written again without it
    assert left() == [("cy", "image/png")]
    once.save({"chat_id": "d", "user_id": "dee", "messages": [turn, turn]})
    once.delete_user("dee")
    assert left() == [("cy", "image/png")]
    once.delete_older_than(datetime.now(UTC) + timedelta(days=1))
    assert left() == []
    assert stored(once.engine, "SELECT count(*) FROM content_parts") == [(0,)]


def test_a_chat_given_to_another_user_takes_its_attachments_along(once: ChatArchive) -> None:
    moved = ChatDocument.parse(every_kind_of_payload("moved", user_id="ada"))
    once.save(moved)
    once.save(every_kind_of_payload("stays", user_id="ada"))
    once.update("moved", user_id="bea")
    assert same(once, moved.model_copy(update={"user_id": "bea"}))
    assert stored(
        once.engine, "SELECT user_id, count(*) FROM attachments GROUP BY user_id ORDER BY user_id"
    ) == [("ada", 4), ("bea", 4)]
    once.delete("stays")
    assert stored(once.engine, "SELECT user_id, count(*) FROM attachments GROUP BY user_id") == [("bea", 4)]


def test_a_branch_deleted_takes_its_attachments_along(once: ChatArchive) -> None:
    once.save({"chat_id": "t", "messages": [{"role": "user", "content": "draw"}]})
    root = once.get("t").messages[0].uid
    png = {"role": "assistant", "content": [{"type": "image_url", "image_url": {"url": IMAGE_URL}}]}
    jpeg = {
        "role": "assistant",
        "content": [
            {"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(JPEG)}}
        ],
    }
    once.append("t", [png])
    once.regenerate("t", once.get("t").messages[1].uid, [jpeg])
    assert len(once.get_tree("t").document.messages) == 3
    assert stored(once.engine, "SELECT count(*) FROM attachments") == [(2,)]
    once.truncate("t", 1, delete=True)  # the answer on the path; the other stays
    assert once.get_tree("t").document.messages[0].uid == root
    assert stored(once.engine, "SELECT media_type FROM attachments") == [("image/png",)]
    once.set_active_leaf("t", once.get_tree("t").document.messages[1].uid)
    once.truncate("t", 1, delete=True)
    assert stored(once.engine, "SELECT count(*) FROM attachments") == [(0,)]


def test_turning_the_switch_off_leaves_stored_chats_readable(once: ChatArchive) -> None:
    before, after = (ChatDocument.parse(every_kind_of_payload(chat_id)) for chat_id in ("before", "after"))
    once.save(before)
    once.set_attachments_stored_once(False)
    once.save(after)
    assert same(once, before)
    assert same(once, after)
    assert stored(once.engine, "SELECT count(*) FROM content_parts WHERE attachment_sha256 IS NOT NULL") == [
        (7,)
    ]


def test_cut_and_restore_are_inverse_and_leave_the_input_alone() -> None:
    data = {
        "source": {"type": "base64", "media_type": "image/jpeg", "data": b64(JPEG)},
        "cache": [1, {"k": "v"}],
    }
    copy = json.loads(json.dumps(data))
    cut = cut_payload(data)
    assert cut is not None
    assert data == copy
    assert cut.path == ["source", "data"]
    assert cut.data["source"]["data"] == ""
    assert cut.attachment.media_type == "image/jpeg"
    assert restore_payload(cut.data, cut.path, cut.attachment.data) == data
    assert cut_payload({"text": "word " * 1000}) is None


def test_a_write_and_a_sweep_racing_on_one_attachment_never_lose_it(
    server_archive: tuple[ChatArchive, str],
) -> None:
    """One thread deletes the only chat that shows an image while another
    saves a chat with the same image: whichever commits second, the saved
    chat's image is still there."""
    archive, _ = server_archive
    archive.set_attachments_stored_once(True)
    turn = {"role": "user", "content": [{"type": "image_url", "image_url": {"url": IMAGE_URL}}]}
    errors: list[BaseException] = []
    for round_ in range(40):
        archive.save({"chat_id": f"old-{round_}", "user_id": "ada", "messages": [turn]})
        start = threading.Barrier(2)

        def delete(round_: int = round_, start: threading.Barrier = start) -> None:
            try:
                start.wait()
                archive.delete(f"old-{round_}")
            except BaseException as error:
                errors.append(error)

        def save(round_: int = round_, start: threading.Barrier = start) -> None:
            try:
                start.wait()
                archive.save({"chat_id": f"new-{round_}", "user_id": "ada", "messages": [turn]})
            except BaseException as error:
                errors.append(error)

        threads = [threading.Thread(target=delete), threading.Thread(target=save)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert errors == []
        assert content(archive.get(f"new-{round_}").messages[0]) == turn["content"]
        archive.delete(f"new-{round_}")
    assert stored(archive.engine, "SELECT count(*) FROM attachments") == [(0,)]


def test_under_row_level_security_a_user_sees_only_their_attachments(
    server_archive: tuple[ChatArchive, str], app_role: str
) -> None:
    archive, url = server_archive
    archive.set_attachments_stored_once(True)
    archive.set_row_level_security(True)
    as_app = make_url(url).set(username=app_role).render_as_string(hide_password=False)
    with ChatArchive(as_app) as app:
        app.for_user("ada").save(every_kind_of_payload("ada-1", user_id="ada"))
        app.for_user("bob").save(every_kind_of_payload("bob-1", user_id="bob"))
        assert contents(app.for_user("ada").get("ada-1")) == given_contents(every_kind_of_payload("ada-1"))
        app.for_user("bob").delete("bob-1")
    raw_url = (
        make_url(url).set(drivername="postgresql", username=app_role).render_as_string(hide_password=False)
    )
    with psycopg.connect(raw_url) as raw:
        as_user(raw, "bob")
        assert raw.execute("SELECT count(*) FROM attachments").fetchone() == (0,)
    assert stored(archive.engine, "SELECT user_id, count(*) FROM attachments GROUP BY user_id") == [
        ("ada", 4)
    ]
