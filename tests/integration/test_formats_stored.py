"""Every format stored and read back through the archive, on both databases and both APIs."""

from __future__ import annotations

import copy
import json
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from openai.types.chat import ChatCompletion
from sqlalchemy.orm import Session

from chatarchive import ChatArchive, ChatRepository, ChatTree, InvalidDocument
from chatarchive.formats import chatgpt, malevich, masterbrain, sharegpt
from chatarchive.formats.openai_completions import assemble_chunks, message_from_completion
from tests.support.samples import (
    CHATGPT,
    COMPLETION,
    MALEVICH,
    MASTERBRAIN,
    SHAREGPT,
    completion_chunk,
    instants,
)
from tests.support.strategies import chatgpt_conversations


def test_masterbrain_round_trips(repo: ChatRepository) -> None:
    original = copy.deepcopy(MASTERBRAIN)
    doc = masterbrain.to_document(MASTERBRAIN)
    assert original == MASTERBRAIN  # input untouched
    assert (doc.model, doc.model_settings, doc.workflow) == (
        "qwen3-235b",
        {"enable_thinking": True, "temperature": 0.3},
        {"protocol_id": "pcr-basic", "step": 4},
    )
    assert doc.created_at == datetime(2026, 3, 1, tzinfo=UTC)
    assert [f.message_uid for f in doc.feedback] == [doc.messages[4].uid]
    assert masterbrain.from_document(doc) == MASTERBRAIN
    repo.save(doc)
    assert masterbrain.from_document(repo.get("mb-1")) == MASTERBRAIN
    # A message's keys named like the archive's own fields (left out by export)
    # or like the scenario mark were lost.
    crowded = {
        "chat_id": "mb-crowded",
        "scenario_messages": [{"role": "system", "content": "s", "masterbrain": "x", "uid": "u-1"}],
        "main_messages": [
            {"role": "user", "content": "q", "created_at": "yesterday", "model": None, "masterbrain_keys": 1},
            {"role": "assistant", "content": "a", "usage": {"tokens": 3}, "completed": "yes"},
        ],
        "human_feedback": [None, {"score": 1}],
    }
    doc = masterbrain.to_document(crowded)
    assert [(m.created_at, m.usage, m.completed) for m in doc.messages] == [(None, None, True)] * 3
    assert [f.message_uid for f in doc.feedback] == [doc.messages[2].uid]
    repo.save(doc)
    assert masterbrain.from_document(repo.get("mb-crowded")) == crowded


def test_malevich_round_trips(repo: ChatRepository) -> None:
    doc = malevich.to_document(MALEVICH)
    assert instants(malevich.from_document(doc)) == instants(MALEVICH)
    repo.save(doc)
    assert instants(malevich.from_document(repo.get(doc.chat_id))) == instants(MALEVICH)
    # Malevich's Message defaults completed to false; the archive took a message
    # without it as completed, and export said so.
    unsaid = [{k: v for k, v in message.items() if k != "completed"} for message in MALEVICH]
    assert [m.completed for m in malevich.to_document(unsaid).messages] == [False] * len(MALEVICH)
    assert all(m["completed"] is False for m in malevich.from_document(malevich.to_document(unsaid)))


def test_sharegpt_round_trips(repo: ChatRepository) -> None:
    doc = sharegpt.to_document(SHAREGPT)
    assert [m.role for m in doc.messages] == [
        "system",
        "user",
        "assistant",
        "function_call",
        "observation",
        "user",
    ]
    assert sharegpt.from_document(doc) == SHAREGPT
    repo.save(doc)
    assert sharegpt.from_document(repo.get(doc.chat_id)) == SHAREGPT
    # A turn's keys named like the message's role and content or the archive's
    # own fields were lost (overwritten by from and value, or left out by export).
    crowded = {
        "conversations": [
            {"from": "human", "value": "hi", "role": "student", "content": None, "sharegpt": 1},
            {"from": "gpt", "model": "m-7b", "created_at": "yesterday", "uid": 3, "usage": "n/a"},
        ]
    }
    doc = sharegpt.to_document(crowded)
    assert [(m.role, m.content, m.model, m.created_at) for m in doc.messages] == [
        ("user", "hi", None, None),
        ("assistant", None, None, None),
    ]
    repo.save(doc)
    assert sharegpt.from_document(repo.get(doc.chat_id)) == crowded


def test_chatgpt_round_trips_the_whole_tree(repo: ChatRepository) -> None:
    doc = chatgpt.to_document(CHATGPT)
    assert doc.chat_id == "conv-1"
    assert doc.title == "Gel question"
    # Every node that holds a message is a message, with its parent; the root holds none.
    tree = ChatTree(doc)
    assert [(m.uid, m.role, tree.parent(m.uid)) for m in doc.messages] == [
        ("sys", "system", None),
        ("u1", "user", "sys"),
        ("a1", "assistant", "u1"),
        ("a2", "assistant", "u1"),
        ("c2", "assistant", "a2"),
        ("u3", "user", "c2"),
    ]
    assert tree.active_leaf == "u3"
    assert [(m.role, m.content) for m in tree.path()] == [
        ("system", ""),
        ("user", "Why two bands?"),
        ("assistant", "Second answer."),
        ("assistant", "print(2)"),
        ("user", doc.messages[-1].content),
    ]
    last = doc.messages[-1].content
    assert isinstance(last, list)
    assert [(part.type, part.text) for part in last] == [("chatgpt_part", None), ("text", "This gel?")]
    assert doc.created_at == datetime.fromtimestamp(1767225600.5, UTC)
    kept = (doc.model_extra or {})["chatgpt"]
    assert set(kept["nodes"]) == {"root"}
    assert kept["root"] == "root"
    assert (doc.messages[3].model_extra or {})["chatgpt"]["metadata"]["model_slug"] == "gpt-4o"
    assert chatgpt.from_document(doc) == CHATGPT
    repo.save(doc)
    assert [m.uid for m in repo.get("conv-1").messages] == ["sys", "u1", "a2", "c2", "u3"]
    assert repo.list_chats().items[0].message_count == 5
    assert chatgpt.from_document(repo.get_tree("conv-1").document) == CHATGPT
    (exported,) = repo.export()
    assert chatgpt.from_document(exported) == CHATGPT
    # ChatGPT writes 'mapping' before 'current_node' and 'conversation_id'; export put it last.
    mapping_first = {"mapping": CHATGPT["mapping"], **CHATGPT}
    repo.save(chatgpt.to_document(mapping_first))
    assert json.dumps(chatgpt.from_document(repo.get_tree("conv-1").document)) == json.dumps(mapping_first)
    # The regenerated answer is a message: searched, and one call away.
    assert [hit.message_uid for hit in repo.search("regenerated")] == ["a1"]
    assert [m.content for m in repo.get("conv-1", leaf="a1").messages][-1] == "First answer (regenerated)."


def test_chatgpt_export_follows_what_the_archive_changed(repo: ChatRepository) -> None:
    repo.save(chatgpt.to_document(CHATGPT))
    repo.truncate("conv-1", 3)  # answer the question again: the code and the image turn stay, off the path
    repo.append("conv-1", [{"role": "assistant", "content": "Third answer.", "uid": "a3"}])
    exported = chatgpt.from_document(repo.get_tree("conv-1").document)
    mapping = exported["mapping"]
    assert exported["current_node"] == "a3"
    assert mapping["a2"]["children"] == ["c2", "a3"]
    assert mapping["a3"]["parent"] == "a2"
    assert mapping["a1"] == CHATGPT["mapping"]["a1"]
    assert mapping["u3"] == CHATGPT["mapping"]["u3"]
    updated_at = repo.get("conv-1").updated_at
    assert updated_at is not None
    assert exported["update_time"] == updated_at.timestamp()
    again = ChatTree(chatgpt.to_document(exported))
    assert [m.content for m in again.path()] == ["", "Why two bands?", "Second answer.", "Third answer."]
    # Cut with delete=True, the code and the image turn are gone from the export too.
    repo.set_active_leaf("conv-1", "u3")
    repo.truncate("conv-1", 3, delete=True)
    exported = chatgpt.from_document(repo.get_tree("conv-1").document)
    assert exported["current_node"] == "a2"
    assert exported["mapping"]["a2"]["children"] == ["a3"]
    assert not {"c2", "u3"} & exported["mapping"].keys()


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(conversation=chatgpt_conversations())
def test_chatgpt_conversations_round_trip(
    session: Session, make_repo: Any, conversation: dict[str, Any]
) -> None:
    doc = chatgpt.to_document(conversation)
    path: list[dict[str, Any]] = []
    node_id = conversation["current_node"]
    while node_id is not None:
        path.insert(0, conversation["mapping"][node_id])
        node_id = path[0]["parent"]
    # Every node with a message is a message; the active path is the current node's.
    assert {(m.model_extra or {})["chatgpt"]["node"] for m in doc.messages} == {
        node_id for node_id, node in conversation["mapping"].items() if isinstance(node["message"], dict)
    }
    assert [(m.model_extra or {})["chatgpt"]["node"] for m in doc.path()] == [
        node["id"] for node in path if isinstance(node["message"], dict)
    ]
    savepoint = session.begin_nested()
    try:
        make_repo().save(doc)
        exported = chatgpt.from_document(make_repo().get_tree(doc.chat_id).document)
        assert exported == conversation
        assert json.dumps(exported) == json.dumps(conversation)  # every key in its place
    finally:
        savepoint.rollback()


def test_record_completion_from_a_dict_and_from_openai_objects(archive: ChatArchive) -> None:
    archive.save({"chat_id": "c", "messages": [{"role": "user", "content": "Why?"}]})
    first = archive.record_completion("c", COMPLETION)
    second = archive.record_completion("c", ChatCompletion.model_validate(COMPLETION), choice=1)
    stored = archive.get("c").messages
    assert stored[1] == first
    assert (first.content, first.model, first.finish_reason) == (
        "Primer dimers.",
        "gpt-4o-2024-08-06",
        "stop",
    )
    assert first.usage is not None
    assert (first.usage.prompt_tokens, first.usage.total_tokens) == (20, 24)
    extra = first.model_extra or {}
    assert (
        extra["response_id"],
        extra["system_fingerprint"],
        extra["service_tier"],
        extra["choice_index"],
    ) == ("chatcmpl-1", "fp_1", "default", 0)
    assert first.created_at == datetime.fromtimestamp(1767225600, UTC)
    assert (second.content, second.finish_reason, (second.model_extra or {})["choice_index"]) == (
        "Contamination.",
        "length",
        1,
    )
    with pytest.raises(InvalidDocument, match="choice 5"):
        archive.record_completion("c", COMPLETION, choice=5)
    with pytest.raises(InvalidDocument, match="not a time") as caught:  # was an OverflowError
        archive.record_completion("c", {**COMPLETION, "created": 1e20})
    assert caught.value.field == "created"


def test_streamed_chunks_with_tool_call_fragments(archive: ChatArchive) -> None:
    chunks = [
        completion_chunk(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_a",
                        "type": "function",
                        "function": {"name": "search", "arguments": ""},
                    }
                ],
            }
        ),
        completion_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": '}}]}),
        completion_chunk(
            {
                "tool_calls": [
                    {
                        "index": 1,
                        "id": "call_b",
                        "type": "function",
                        "function": {"name": "calc", "arguments": "{}"},
                    }
                ]
            }
        ),
        completion_chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"pcr"}'}}]}),
        completion_chunk({}, finish="tool_calls"),
        completion_chunk(None, usage={"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}),  # type: ignore[arg-type]
    ]
    completion = assemble_chunks(chunks)
    message = completion["choices"][0]["message"]
    assert message["tool_calls"] == [
        {"id": "call_a", "type": "function", "function": {"name": "search", "arguments": '{"q": "pcr"}'}},
        {"id": "call_b", "type": "function", "function": {"name": "calc", "arguments": "{}"}},
    ]
    archive.save({"chat_id": "s", "messages": [{"role": "user", "content": "search"}]})
    stored = archive.record_completion("s", chunks)
    assert stored.finish_reason == "tool_calls"
    assert stored.usage is not None
    assert stored.usage.total_tokens == 16
    assert [call.function.arguments for call in stored.tool_calls or [] if call.function] == [
        '{"q": "pcr"}',
        "{}",
    ]
    text_chunks = [
        completion_chunk({"role": "assistant", "content": "Hel"}),
        completion_chunk({"content": "lo"}),
        completion_chunk({}, finish="stop"),
    ]
    assert message_from_completion(text_chunks)["content"] == "Hello"


def test_a_damaged_completion_is_named_with_its_chat(archive: ChatArchive) -> None:
    archive.save({"chat_id": "c", "messages": []})
    chunks = [{"choices": [{"index": 0, "delta": {"content": ["not", "text"]}}]}]
    with pytest.raises(InvalidDocument) as refused:
        archive.record_completion("c", chunks)
    assert (refused.value.chat_id, refused.value.field) == ("c", "chunks[0].choices[0].delta.content")
    assert archive.get("c").messages == []
