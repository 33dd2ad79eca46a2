"""The document model on its own: shapes kept, conversions exact, bad input refused."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from chatarchive import ChatDocument, InvalidArgument, InvalidDocument, Message
from chatarchive._exceptions import quoted
from chatarchive._rows import document_from_rows, document_to_rows
from tests.support.samples import OPENAI_VARIANTS
from tests.support.strategies import canonical_documents, exact, message_lists

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def roundtrip_openai(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return ChatDocument.from_openai(messages).to_openai()


def as_json(value: Any) -> Any:
    return json.loads(json.dumps(value))


@pytest.mark.parametrize("message", OPENAI_VARIANTS)
def test_openai_message_variants_round_trip(message: dict[str, Any]) -> None:
    assert roundtrip_openai([message]) == [message]


def test_content_forms_stay_distinct() -> None:
    forms: list[dict[str, Any]] = [{"role": "user", "content": "x"}, {"role": "user", "content": ""}]
    forms += [{"role": "user", "content": None}, {"role": "user"}, {"role": "user", "content": []}]
    assert roundtrip_openai(forms) == forms


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(message_lists)
def test_any_openai_message_list_round_trips(messages: list[dict[str, Any]]) -> None:
    assert as_json(roundtrip_openai(messages)) == as_json(messages)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(canonical_documents())
def test_canonical_documents_survive_the_rows(data: dict[str, Any]) -> None:
    doc = ChatDocument.parse(data)
    back = _through_rows(doc)
    assert exact(back.model_dump()) == exact(doc.model_dump())


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(canonical_documents())
def test_a_document_validated_again_is_the_same_document(data: dict[str, Any]) -> None:
    # save() validates a ChatDocument it is given again: that must change
    # nothing, not the unset fields (content absent vs null) nor the rows.
    doc = ChatDocument.parse(data)
    again = ChatDocument.parse(doc)
    assert again is not doc
    assert exact(again.model_dump()) == exact(doc.model_dump())
    assert again.model_fields_set == doc.model_fields_set
    assert [m.model_fields_set for m in again.messages] == [m.model_fields_set for m in doc.messages]
    rows, rows_again = (document_to_rows(d, now=NOW, version=1) for d in (doc, again))
    assert exact(rows_again) == exact(rows)


def _through_rows(doc: ChatDocument) -> ChatDocument:
    rows = document_to_rows(doc, now=NOW, version=1)
    return document_from_rows(
        rows.chat,
        [tag["tag"] for tag in rows.tags],
        rows.messages,
        rows.parts,
        rows.tool_calls,
        rows.feedback,
    )


def test_generated_fields() -> None:
    doc = ChatDocument.from_openai([{"role": "user", "content": "hi"}])
    assert len(doc.chat_id) == 36
    assert doc.messages[0].uid
    assert doc.messages[0].created_at is None
    assert doc.to_openai() == [{"role": "user", "content": "hi"}]
    dumped = doc.model_dump(mode="json")
    assert dumped["messages"][0]["uid"] == doc.messages[0].uid
    assert "version" not in dumped


def test_naive_timestamps_are_utc_and_offsets_are_kept() -> None:
    doc = ChatDocument.parse({"created_at": "2026-03-01T12:00:00", "updated_at": "2026-03-01T12:00:00+02:00"})
    assert doc.created_at == datetime(2026, 3, 1, 12, tzinfo=UTC)
    assert doc.updated_at == datetime(2026, 3, 1, 12, tzinfo=timezone(timedelta(hours=2)))


def test_tags_keep_order_without_duplicates() -> None:
    assert ChatDocument.parse({"tags": ["b", "a", "b"]}).tags == ["b", "a"]


def test_rows_keep_a_string_content_on_its_message_and_parts_in_order() -> None:
    doc = ChatDocument.from_openai(
        [
            {"role": "user", "content": "plain"},
            {
                "role": "user",
                "content": [{"type": "text", "text": "part"}, {"type": "refusal", "refusal": "no"}],
            },
        ],
        chat_id="c",
    )
    rows = document_to_rows(doc, now=NOW, version=1)
    assert [(p["message_position"], p["type"], p["text"], p["data"]) for p in rows.parts] == [
        (1, "text", "part", None),
        (1, "refusal", "no", None),
    ]
    assert [(m["content_form"], m["text"]) for m in rows.messages] == [("string", "plain"), ("parts", None)]


def test_tool_call_rows_hold_name_and_exact_arguments() -> None:
    doc = ChatDocument.from_openai(
        [
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "f", "arguments": ' {"a": 1}'}}
                ],
            }
        ]
    )
    (row,) = document_to_rows(doc, now=NOW, version=1).tool_calls
    assert (row["call_id"], row["type"], row["name"], row["arguments"], row["data"]) == (
        "c",
        "function",
        "f",
        ' {"a": 1}',
        None,
    )


BAD_DOCUMENTS: list[tuple[Any, dict[str, Any], str]] = [
    (42, {"field": None}, "must be a JSON object"),
    ([1, 2], {"field": None}, "must be a JSON object"),
    (
        {"chat_id": "c", "messages": [{"content": "x"}]},
        {"message_index": 0, "field": "role"},
        "Field required",
    ),
    ({"chat_id": "c", "messages": [{"role": 7}]}, {"message_index": 0, "field": "role"}, "valid string"),
    (
        {"chat_id": "c", "messages": [{"role": "user", "content": 5}]},
        {"message_index": 0, "field": "content"},
        "content must be",
    ),
    (
        {"chat_id": "c", "messages": [{"role": "user", "content": {"text": "x"}}]},
        {"message_index": 0, "field": "content"},
        "content must be",
    ),
    (
        {"chat_id": "c", "messages": [{"role": "u"}, {"role": "user", "content": [{"text": "x"}]}]},
        {"message_index": 1, "field": "content[0].type"},
        "Field required",
    ),
    ({"chat_id": "c", "messages": ["hello"]}, {"message_index": 0, "field": None}, "JSON object"),
    ({"chat_id": ""}, {"field": "chat_id"}, "at least 1"),
    ({"chat_id": "x" * 256}, {"field": "chat_id"}, "at most 255"),
    ({"chat_id": 5}, {"field": "chat_id"}, "valid string"),
    (
        {"chat_id": "c", "messages": [{"role": "u", "uid": "a"}, {"role": "u", "uid": "a"}]},
        {"message_index": 1, "field": "uid"},
        "duplicate message uid",
    ),
    ({"chat_id": "c", "created_at": "yesterday"}, {"field": "created_at"}, "datetime"),
    (
        {"chat_id": "c", "messages": [{"role": "u", "created_at": "2026-13-01T00:00:00Z"}]},
        {"message_index": 0, "field": "created_at"},
        "datetime",
    ),
    ({"chat_id": "c", "created_at": "0001-01-01T00:00:00+01:00"}, {"field": "created_at"}, "out of range"),
    (
        {"chat_id": "c", "feedback": [{"message_uid": "nope"}]},
        {"field": "feedback[0].message_uid"},
        "unknown message",
    ),
    ({"chat_id": "c", "feedback": [{"score": "high"}]}, {"field": "feedback[0].score"}, "valid"),
    ({"chat_id": "c", "feedback": [{"score": True}]}, {"field": "feedback[0].score"}, "valid"),
    (
        {"chat_id": "c", "messages": [{"role": "user", "completed": "yes"}]},
        {"message_index": 0, "field": "completed"},
        "boolean",
    ),
    (
        {"chat_id": "c", "messages": [{"role": "user", "content": "\ud800"}]},
        {"message_index": 0, "field": "content"},
        "Unicode",
    ),
    ({"chat_id": "c", "metadata": {"deep": ["\udfff"]}}, {"field": "metadata.deep[0]"}, "Unicode"),
    ({"chat_id": "c", "workflow": {"x": float("nan")}}, {"field": "workflow.x"}, "JSON number"),
    # Integers Python will not write as text (nor json read): the save failed with a ValueError.
    ({"chat_id": "c", "metadata": {"n": [1, 10**4300]}}, {"field": "metadata.n[1]"}, "more than 4300 digits"),
    (
        {"chat_id": "c", "messages": [{"role": "user", "n": -(10**4300)}]},
        {"message_index": 0, "field": "n"},
        "more than 4300 digits",
    ),
    (
        {"chat_id": "c", "messages": [{"role": "user", "usage": {"total_tokens": 10**5000}}]},
        {"message_index": 0, "field": "usage.total_tokens"},
        "more than 4300 digits",
    ),
    (
        {"chat_id": "c", "feedback": [{"score": 10**4300}]},
        {"field": "feedback[0].score"},
        "more than 4300 digits",
    ),
    ({"chat_id": "c", "metadata": {"x": {1: "int key"}}}, {"field": "metadata.x"}, "not a string"),
    # Token counts are summed by analytics: a negative one would make a sum lie.
    (
        {"chat_id": "c", "messages": [{"role": "assistant", "usage": {"prompt_tokens": -5}}]},
        {"message_index": 0, "field": "usage.prompt_tokens"},
        "greater than or equal to 0",
    ),
    (
        {"chat_id": "c", "messages": [{"role": "user", "extra": object()}]},
        {"message_index": 0, "field": "extra"},
        "not a JSON value",
    ),
    ({"chat_id": "c", "tags": ["ok", 3]}, {"field": "tags[1]"}, "valid string"),
    (
        {"chat_id": "c", "messages": [{"role": "assistant", "tool_calls": ["f"]}]},
        {"message_index": 0, "field": "tool_calls[0]"},
        "JSON object",
    ),
    (
        {"chat_id": "c", "messages": [{"role": "assistant", "tool_calls": "f"}]},
        {"message_index": 0, "field": "tool_calls"},
        "valid list",
    ),
    (
        {"chat_id": "c", "messages": [{"role": "user", "content": [{"type": "text", "text": 3}]}]},
        {"message_index": 0, "field": "content[0].text"},
        "must be a string",
    ),
]


@pytest.mark.parametrize(("data", "where", "reason"), BAD_DOCUMENTS)
def test_bad_documents_are_named_precisely(data: Any, where: dict[str, Any], reason: str) -> None:
    with pytest.raises(InvalidDocument) as caught:
        ChatDocument.parse(data)
    error = caught.value
    assert reason in str(error)
    for attribute, expected in where.items():
        assert getattr(error, attribute) == expected, str(error)
    if isinstance(data, dict) and isinstance(data.get("chat_id"), str):
        assert error.chat_id == data["chat_id"]
        assert quoted(data["chat_id"]) in str(error)


@pytest.mark.parametrize("not_a_list", [{"role": "user"}, "user", 5, None, True])
def test_from_openai_refuses_a_non_list(not_a_list: Any) -> None:
    with pytest.raises(InvalidArgument, match="list"):
        ChatDocument.from_openai(not_a_list)


def test_message_to_openai_leaves_archive_fields_out() -> None:
    message = Message.model_validate(
        {
            "role": "assistant",
            "content": "x",
            "uid": "u",
            "model": "m",
            "finish_reason": "stop",
            "usage": {"total_tokens": 3},
        }
    )
    assert message.to_openai() == {"role": "assistant", "content": "x"}


def test_generated_ids_are_distinct_version_4_uuids() -> None:
    doc = ChatDocument.parse({"messages": [{"role": "user", "content": "hi"}] * 2000, "feedback": [{}]})
    ids = [doc.chat_id, doc.feedback[0].id, *(message.uid for message in doc.messages)]
    assert len(set(ids)) == len(ids)
    for value in ids:
        parsed = uuid.UUID(value)
        assert (str(parsed), parsed.version, parsed.variant) == (value, 4, uuid.RFC_4122)
    variants = {value[19] for value in ids}
    assert variants == set("89ab")  # every variant digit occurs (2,002 draws)
