"""Format adapters: round trips on realistic fixtures, detection, the CLI, completions."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from sqlalchemy.orm import Session

from chatarchive import ChatArchive, ChatDocument, ChatRepository, InvalidArgument, InvalidDocument, formats
from chatarchive.formats import chatgpt, finetune, malevich, masterbrain, sharegpt
from chatarchive.formats.openai_completions import assemble_chunks, message_from_completion

from .strategies import chatgpt_conversations, json_values

MASTERBRAIN: dict[str, Any] = {
    "chat_id": "mb-1",
    "user_id": "u-7",
    "title": "PCR troubleshooting",
    "start_time": "2026-03-01T08:00:00+08:00",
    "end_time": None,
    "active": True,
    "deleted": False,
    "model": {"name": "qwen3-235b", "enable_thinking": True, "temperature": 0.3},
    "system_message_name": "lab_assistant_v2",
    "function_names": ["airalogy_search"],
    "scenario": {"protocol_id": "pcr-basic", "step": 4},
    "scenario_messages": [{"role": "system", "content": "You help with protocol pcr-basic."}],
    "main_messages": [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Bands?"},
                {"type": "image_url", "image_url": "https://x/gel.png"},
            ],
        },
        {
            "role": "assistant",
            "content": "",
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "airalogy_search"},
                    "arguments": '{"q": "bands"}',
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": '{"r": "primer dimers"}'},
        {"role": "assistant", "content": "Primer dimers, probably."},
    ],
    "human_feedback": [None, None, None, {"score": 1, "additional": "spot on"}],
}


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


@pytest.mark.parametrize(
    "variant",
    [
        {"main_messages": [], "human_feedback": []},
        {"main_messages": [{"role": "user", "content": "hi"}], "human_feedback": []},
        {"main_messages": [{"role": "user", "content": "hi"}], "human_feedback": [{}]},
        {"main_messages": [{"role": "user", "content": "hi"}]},
        {"main_messages": [{"role": "user", "content": "hi"}], "human_feedback": None, "model": None},
    ],
)
def test_masterbrain_awkward_feedback(variant: dict[str, Any]) -> None:
    chat = {"chat_id": "mb-2", "scenario_messages": [], **variant}
    assert masterbrain.from_document(masterbrain.to_document(chat)) == chat


def test_masterbrain_export_carries_feedback_given_in_the_archive() -> None:
    doc = ChatDocument.parse(
        {
            "chat_id": "x",
            "messages": [
                {"role": "user", "content": "q", "uid": "a"},
                {"role": "assistant", "content": "r", "uid": "b"},
            ],
            "feedback": [{"message_uid": "b", "score": 1, "comment": "good"}, {"score": -1}],
        }
    )
    exported = masterbrain.from_document(doc)
    assert exported["human_feedback"] == [None, {"score": 1, "additional": "good"}]  # no slot for the chat's
    again = masterbrain.to_document(exported)
    assert [(item.message_uid, item.score, item.comment) for item in again.feedback] == [
        (again.messages[1].uid, 1, "good")
    ]


def test_masterbrain_feedback_must_align() -> None:
    with pytest.raises(InvalidDocument, match=r"human_feedback\[1\]"):
        masterbrain.to_document(
            {"chat_id": "x", "main_messages": [{"role": "user"}], "human_feedback": [None, {"score": 1}]}
        )


MALEVICH: list[dict[str, Any]] = [
    {
        "uid": "m-1",
        "created_at": "2026-02-01T10:00:00+00:00",
        "updated_at": None,
        "role": "user",
        "content": [{"type": "text", "text": "Plan the assay."}],
        "completed": True,
        "is_intent": True,
        "is_tool_extra_message": False,
        "is_helper_message": False,
        "is_reasoning": False,
        "tool_call_id": None,
        "channel": "web",
    },
    {
        "uid": "m-2",
        "created_at": "2026-02-01T10:00:02+00:00",
        "updated_at": "2026-02-01T10:00:03+00:00",
        "role": "assistant",
        "content": [{"type": "text", "text": "Thinking"}, {"type": "reasoning", "summary": ["step 1"]}],
        "completed": False,
        "is_intent": False,
        "is_tool_extra_message": False,
        "is_helper_message": True,
        "is_reasoning": True,
        "tool_call_id": "call-9",
        "trace": {"spans": [1, 2]},
    },
]


def _instants(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            k: datetime.fromisoformat(v.replace("Z", "+00:00"))
            if k in ("created_at", "updated_at") and v
            else v
            for k, v in m.items()
        }
        for m in messages
    ]


def test_malevich_round_trips(repo: ChatRepository) -> None:
    doc = malevich.to_document(MALEVICH)
    assert _instants(malevich.from_document(doc)) == _instants(MALEVICH)
    repo.save(doc)
    assert _instants(malevich.from_document(repo.get(doc.chat_id))) == _instants(MALEVICH)
    # Malevich's Message defaults completed to false; the archive took a message
    # without it as completed, and export said so.
    unsaid = [{k: v for k, v in message.items() if k != "completed"} for message in MALEVICH]
    assert [m.completed for m in malevich.to_document(unsaid).messages] == [False] * len(MALEVICH)
    assert all(m["completed"] is False for m in malevich.from_document(malevich.to_document(unsaid)))


SHAREGPT: dict[str, Any] = {
    "id": "sg-1",
    "system": "Be kind.",
    "conversations": [
        {"from": "system", "value": "You are a lab assistant."},
        {"from": "human", "value": "What is a ladder?"},
        {"from": "gpt", "value": "A set of DNA fragments of known sizes.", "weight": 1},
        {"from": "function_call", "value": '{"name": "search"}'},
        {"from": "observation", "value": "results"},
        {"from": "user", "value": "Thanks"},
    ],
}


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


def _node(
    node_id: str,
    parent: str | None,
    children: list[str],
    role: str | None,
    text: str | None,
    at: float = 0,
    **message_fields: Any,
) -> dict[str, Any]:
    message = None
    if role is not None:
        message = {
            "id": f"msg-{node_id}",
            "author": {"role": role, "name": None, "metadata": {}},
            "create_time": at,
            "content": {"content_type": "text", "parts": [text]},
            "metadata": {},
            **message_fields,
        }
    return {"id": node_id, "message": message, "parent": parent, "children": children}


CHATGPT: dict[str, Any] = {
    "title": "Gel question",
    "create_time": 1767225600.5,
    "update_time": 1767225700.25,
    "conversation_id": "conv-1",
    "id": "conv-1",
    "is_archived": False,
    "moderation_results": [],
    "current_node": "a2",
    "mapping": {
        "root": _node("root", None, ["sys"], None, None),
        "sys": _node(
            "sys",
            "root",
            ["u1"],
            "system",
            "",
            metadata={"is_visually_hidden_from_conversation": True},
            create_time=None,
        ),
        "u1": {
            **_node("u1", "sys", ["a1", "a2"], "user", "Why two bands?", 1767225601.1234567),
            "node_note": "kept",
        },
        "a1": _node(
            "a1",
            "u1",
            [],
            "assistant",
            "First answer (regenerated).",
            1767225602,
            status="finished_successfully",
        ),
        "a2": _node(
            "a2",
            "u1",
            ["c2"],
            "assistant",
            "Second answer.",
            1767225603,
            metadata={"model_slug": "gpt-4o", "citations": [{"start_ix": 0}]},
            end_turn=True,
            weight=1.0,
            recipient="all",
        ),
    },
}
# A turn the user saw after the answer: code, and an image beside text.
CHATGPT["mapping"]["c2"] = {
    "id": "c2",
    "message": {
        "id": "msg-c2",
        "author": {"role": "assistant", "name": None, "metadata": {"x": 1}},
        "create_time": 1767225604.0,
        "content": {"content_type": "code", "language": "python", "text": "print(2)"},
        "metadata": {},
    },
    "parent": "a2",
    "children": ["u3"],
}
CHATGPT["mapping"]["u3"] = {
    "id": "u3",
    "message": {
        "id": "msg-u3",
        "author": {"role": "user"},
        "content": {
            "content_type": "multimodal_text",
            "parts": [
                {"content_type": "image_asset_pointer", "asset_pointer": "file-service://f1"},
                "This gel?",
            ],
        },
    },
    "parent": "c2",
    "children": [],
}
CHATGPT["current_node"] = "u3"


def test_chatgpt_round_trips_the_whole_tree(repo: ChatRepository) -> None:
    doc = chatgpt.to_document(CHATGPT)
    assert doc.chat_id == "conv-1"
    assert doc.title == "Gel question"
    assert [(m.role, m.content) for m in doc.messages] == [
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
    assert kept["other_nodes"] == {"a1": "u1"}
    assert set(kept["nodes"]) == {"root", "a1"}
    assert kept["root"] == "root"
    assert (doc.messages[2].model_extra or {})["chatgpt"]["metadata"]["model_slug"] == "gpt-4o"
    assert chatgpt.from_document(doc) == CHATGPT
    repo.save(doc)
    assert chatgpt.from_document(repo.get("conv-1")) == CHATGPT
    # ChatGPT writes 'mapping' before 'current_node' and 'conversation_id'; export put it last.
    mapping_first = {"mapping": CHATGPT["mapping"], **CHATGPT}
    repo.save(chatgpt.to_document(mapping_first))
    assert json.dumps(chatgpt.from_document(repo.get("conv-1"))) == json.dumps(mapping_first)
    assert [hit.message_uid for hit in repo.search("regenerated")] == []  # other branches are not messages


def test_chatgpt_export_follows_what_the_archive_changed(repo: ChatRepository) -> None:
    repo.save(chatgpt.to_document(CHATGPT))
    repo.truncate("conv-1", 3)  # drop the code and the image turn: answer again
    repo.append("conv-1", [{"role": "assistant", "content": "Third answer.", "uid": "a3"}])
    exported = chatgpt.from_document(repo.get("conv-1"))
    mapping = exported["mapping"]
    assert exported["current_node"] == "a3"
    assert not {"c2", "u3"} & mapping.keys()
    assert mapping["a2"]["children"] == ["a3"]
    assert mapping["a3"]["parent"] == "a2"
    assert mapping["a1"] == CHATGPT["mapping"]["a1"]
    updated_at = repo.get("conv-1").updated_at
    assert updated_at is not None
    assert exported["update_time"] == updated_at.timestamp()
    again = chatgpt.to_document(exported)
    assert [m.content for m in again.messages] == ["", "Why two bands?", "Second answer.", "Third answer."]


def test_chatgpt_chats_imported_without_their_tree_export_one_branch() -> None:
    doc = chatgpt.to_document(CHATGPT)
    # What versions before 0.x kept: no original nodes, no other branches whole.
    own = {
        key: value
        for key, value in (doc.model_extra or {})["chatgpt"].items()
        if key not in ("nodes", "conversation")
    }
    messages = [
        {
            **m.model_dump(mode="json"),
            "chatgpt": {
                k: v for k, v in (m.model_extra or {})["chatgpt"].items() if k not in ("original", "text_in")
            },
        }
        for m in doc.messages
    ]
    old = ChatDocument.parse({**doc.model_dump(mode="json"), "chatgpt": own, "messages": messages})
    exported = chatgpt.from_document(old)
    assert exported["current_node"] == "u3"
    assert list(exported["mapping"]) == ["sys", "u1", "a2", "c2", "u3"]
    assert exported["mapping"]["u1"]["children"] == ["a2"]
    again = chatgpt.to_document(exported)
    assert [(m.role, m.content) for m in again.messages] == [(m.role, m.content) for m in doc.messages]


def test_chatgpt_chats_imported_before_key_order_was_kept_export_the_same_conversation() -> None:
    # What chatarchive kept before the order of keys: the original message without
    # its metadata and its content without the text, the conversation without 'mapping'.
    doc = chatgpt.to_document(CHATGPT)
    own = (doc.model_extra or {})["chatgpt"]
    conversation = {key: value for key, value in own["conversation"].items() if key != "mapping"}
    messages = []
    for message in doc.messages:
        kept = (message.model_extra or {})["chatgpt"]
        node = kept["original"]
        original = dict(node["message"])
        if kept["metadata"]:  # held by the message alone
            del original["metadata"]
        if "text_in" in kept:
            content = original["content"]
            original["content"] = {key: value for key, value in content.items() if key != kept["text_in"]}
        messages.append(
            {
                **message.model_dump(mode="json"),
                "chatgpt": {**kept, "original": {**node, "message": original}},
            }
        )
    old = ChatDocument.parse(
        {
            **doc.model_dump(mode="json"),
            "chatgpt": {**own, "conversation": conversation},
            "messages": messages,
        }
    )
    assert old != doc
    assert chatgpt.from_document(old) == CHATGPT


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
    assert [(m.model_extra or {})["chatgpt"]["node"] for m in doc.messages] == [
        node["id"] for node in path if isinstance(node["message"], dict)
    ]
    savepoint = session.begin_nested()
    try:
        make_repo().save(doc)
        exported = chatgpt.from_document(make_repo().get(doc.chat_id))
        assert exported == conversation
        assert json.dumps(exported) == json.dumps(conversation)  # every key in its place
    finally:
        savepoint.rollback()


def test_chatgpt_refuses_times_out_of_range() -> None:
    # datetime.fromtimestamp raised OverflowError / ValueError out of the import.
    with pytest.raises(InvalidDocument, match=r"1e\+20 seconds since 1970 is not a time") as caught:
        chatgpt.to_document({**CHATGPT, "create_time": 1e20})
    assert caught.value.field == "create_time"
    mapping = copy.deepcopy(CHATGPT["mapping"])
    mapping["u1"]["message"]["create_time"] = -1e15
    with pytest.raises(InvalidDocument, match="not a time") as caught:
        chatgpt.to_document({**CHATGPT, "mapping": mapping})
    assert caught.value.field == "mapping['u1'].message.create_time"


def test_chatgpt_refuses_a_broken_tree() -> None:
    broken = {**CHATGPT, "current_node": "ghost"}
    with pytest.raises(InvalidDocument, match="ghost"):
        chatgpt.to_document(broken)
    for node_id in ([1], {"x": 1}):  # were a TypeError (unhashable)
        with pytest.raises(InvalidDocument, match="broken"):
            chatgpt.to_document({**CHATGPT, "current_node": node_id})
        mapping = {**CHATGPT["mapping"], "u1": {**CHATGPT["mapping"]["u1"], "parent": node_id}}
        with pytest.raises(InvalidDocument, match="broken"):
            chatgpt.to_document({**CHATGPT, "mapping": mapping})


def _keys_reversed(value: Any) -> Any:
    if isinstance(value, dict):
        return {key: _keys_reversed(value[key]) for key in reversed(value)}
    if isinstance(value, list):
        return [_keys_reversed(item) for item in value]
    return value


_BARE = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
_UNNAMED_MASTERBRAIN = {key: value for key, value in MASTERBRAIN.items() if key != "chat_id"}
_CANONICAL = {"messages": [{"role": "user", "content": "hi"}], "feedback": [{"score": 1}]}


@pytest.mark.parametrize(
    ("record", "another"),
    [
        (SHAREGPT, {**SHAREGPT, "system": "Be brief."}),
        (_BARE, _BARE[:1]),
        (MALEVICH, MALEVICH[:1]),
        (_UNNAMED_MASTERBRAIN, {**_UNNAMED_MASTERBRAIN, "title": "PCR"}),
        (_CANONICAL, {**_CANONICAL, "title": "t"}),
    ],
    ids=["sharegpt", "openai", "malevich", "masterbrain", "canonical"],
)
def test_a_record_without_a_chat_id_is_named_by_its_content(record: Any, another: Any) -> None:
    first = formats.to_document(copy.deepcopy(record))
    again = formats.to_document(_keys_reversed(record))  # the order of its keys does not count
    assert first.chat_id == again.chat_id
    assert first.model_dump() == again.model_dump()
    uids = [message.uid for message in first.messages]
    assert len(set(uids)) == len(uids)
    assert all(item.message_uid in (None, *uids) for item in first.feedback)
    assert formats.to_document(another).chat_id != first.chat_id
    # A record that names its chat keeps its id; the archive's own API still makes random ones.
    assert formats.to_document({"chat_id": "named", "messages": []}).chat_id == "named"
    assert ChatDocument.parse({"messages": []}).chat_id != ChatDocument.parse({"messages": []}).chat_id


def test_detection() -> None:
    assert formats.detect(MASTERBRAIN) == "masterbrain"
    assert formats.detect(MALEVICH) == "malevich"
    assert formats.detect(SHAREGPT) == "sharegpt"
    assert formats.detect(CHATGPT) == "chatgpt"
    assert formats.detect([{"role": "user", "content": "hi"}]) == "openai"
    assert formats.detect({"chat_id": "c", "messages": []}) == "canonical"
    # A document's unknown keys named like another format's: its messages were
    # lost, read as a ShareGPT record with no turns, a ChatDoc or a ChatGPT tree.
    extras: list[dict[str, Any]] = [
        {"conversations": []},
        {"main_messages": []},
        {"mapping": {}, "current_node": None},
    ]
    for extra in extras:
        message = {"role": "user", "content": "hi", "uid": "m", "created_at": "2026-01-01T00:00:00Z"}
        document = {"chat_id": "c", "created_at": "2026-01-01T00:00:00Z", "messages": [message], **extra}
        document["updated_at"] = document["created_at"]
        assert formats.detect(document) == "canonical"
        imported = formats.to_document(document)
        assert imported.chat_id == "c"
        assert imported.model_dump(mode="json") == formats.export(document, "canonical")
    with pytest.raises(InvalidDocument):
        formats.detect(42)


def test_export_and_import_check_their_arguments() -> None:
    # A mapping is validated into a document, as save takes one (it raised AttributeError).
    record = {"chat_id": "c", "messages": [{"role": "user", "content": "hi", "uid": "m"}]}
    assert formats.export(record, "openai") == [{"role": "user", "content": "hi"}]
    assert formats.export(ChatDocument.parse(record), "canonical") == formats.export(record, "canonical")
    with pytest.raises(InvalidDocument, match="must be a JSON object"):
        formats.export(None, "openai")  # type: ignore[arg-type]
    with pytest.raises(InvalidDocument, match="message 0"):
        formats.export({"messages": [{"role": 5}]}, "openai")
    # A format name that is not a string (TypeError: unhashable type) or unknown.
    with pytest.raises(InvalidArgument, match="format must be a string") as caught:
        formats.export(record, ["openai"])  # type: ignore[arg-type]
    assert caught.value.argument == "format"
    with pytest.raises(InvalidArgument, match="format must be a string"):
        formats.to_document(record, ["auto"])  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="unknown export format 'yaml'"):
        formats.export(record, "yaml")
    with pytest.raises(InvalidArgument, match="unknown import format 'yaml'"):
        formats.to_document(record, "yaml")


def test_finetune_selection() -> None:
    answered: dict[str, Any] = {
        "chat_id": "ok",
        "model": "m1",
        "workflow": {"tools": [{"type": "function", "function": {"name": "search", "parameters": {}}}]},
        "created_at": "2026-03-01T00:00:00Z",
        "messages": [
            {"role": "system", "content": "s"},
            {"role": "user", "content": "q", "is_intent": True},
            {
                "role": "assistant",
                "tool_calls": [
                    {"id": "c", "type": "function", "function": {"name": "search", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c", "content": "r"},
            {"role": "assistant", "content": "a", "uid": "last"},
        ],
        "feedback": [{"message_uid": "last", "score": 1}],
    }
    unanswered = {
        **answered,
        "chat_id": "bad",
        "messages": answered["messages"][:3],
        "feedback": [{"score": 1}],
    }
    low = {**answered, "chat_id": "low", "feedback": [{"score": -1}]}
    other = {**answered, "chat_id": "other", "model": "m2"}
    selection = finetune.Selection()
    docs = [formats.to_document(d) for d in (answered, unanswered, low, other)]
    lines = list(
        finetune.select(
            docs, finetune.Filters(min_score=0.5, model="m1", exclude_roles=("system",)), selection
        )
    )
    assert selection.written == 1
    assert selection.skipped == {"other model": 1, "score below the minimum": 1, "unanswered tool calls": 1}
    (line,) = lines
    assert line["tools"] == answered["workflow"]["tools"]
    assert [m["role"] for m in line["messages"]] == ["user", "assistant", "tool", "assistant"]
    assert line["messages"][0] == {"role": "user", "content": "q"}  # only the keys fine-tuning knows
    # since: a naive datetime is UTC (it was compared with aware ones and raised TypeError); a string is refused.
    naive = finetune.Filters(since=datetime(2026, 3, 1, 0, 0, 1))
    assert list(finetune.select(docs[:1], naive, finetune.Selection())) == []
    with pytest.raises(InvalidArgument, match="since must be a datetime"):
        finetune.Filters(since="2026-03-01")  # type: ignore[arg-type]
    # A chat left without messages once roles are excluded, or without an assistant
    # message, gave a line OpenAI's fine-tuning refuses ({"messages": []}).
    only_system = formats.to_document({"chat_id": "s", "messages": [{"role": "system", "content": "s"}]})
    no_answer = formats.to_document({"chat_id": "u", "messages": [{"role": "user", "content": "q"}]})
    counted = finetune.Selection()
    kept = list(
        finetune.select([only_system, no_answer], finetune.Filters(exclude_roles=("system",)), counted)
    )
    assert kept == []
    assert counted.skipped == {"no messages": 1, "no assistant message": 1}
    # A message whose stream stopped (its text cut short) went into the training data.
    cut = formats.to_document(
        {
            "chat_id": "cut",
            "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "Th"}],
        }
    )
    cut.messages[1].completed = False
    stopped = finetune.Selection()
    assert list(finetune.select([cut], finetune.Filters(), stopped)) == []
    assert stopped.skipped == {"incomplete messages": 1}


@pytest.mark.parametrize(
    ("arguments", "field"),
    [
        ({"exclude_roles": "system"}, "exclude_roles"),  # read as its letters: it excluded nothing
        ({"exclude_roles": [5]}, "exclude_roles"),
        ({"min_score": "0.5"}, "min_score"),  # compared with scores: TypeError in the middle of an export
        ({"min_score": float("nan")}, "min_score"),  # no score is at least NaN: every chat skipped
        ({"min_score": True}, "min_score"),
        ({"model": 5}, "model"),  # no model equals 5: every chat skipped as "other model"
    ],
)
def test_finetune_filters_refuse_arguments_of_the_wrong_kind(arguments: dict[str, Any], field: str) -> None:
    with pytest.raises(InvalidArgument) as caught:
        finetune.Filters(**arguments)
    assert caught.value.argument == field


def test_finetune_lines_refuse_one_role_given_alone() -> None:
    doc = formats.to_document({"chat_id": "c", "messages": [{"role": "system", "content": "s"}]})
    assert finetune.from_document(doc, ["system"]) == {"messages": []}
    with pytest.raises(InvalidArgument, match="exclude_roles must be a list"):
        finetune.from_document(doc, "system")


COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1767225600,
    "model": "gpt-4o-2024-08-06",
    "system_fingerprint": "fp_1",
    "service_tier": "default",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Primer dimers.", "refusal": None},
            "finish_reason": "stop",
            "logprobs": None,
        },
        {
            "index": 1,
            "message": {"role": "assistant", "content": "Contamination.", "refusal": None},
            "finish_reason": "length",
            "logprobs": None,
        },
    ],
    "usage": {
        "prompt_tokens": 20,
        "completion_tokens": 4,
        "total_tokens": 24,
        "prompt_tokens_details": {"cached_tokens": 0},
    },
}


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


def _chunk(
    delta: dict[str, Any], finish: str | None = None, usage: dict[str, Any] | None = None
) -> ChatCompletionChunk:
    return ChatCompletionChunk.model_validate(
        {
            "id": "chatcmpl-2",
            "object": "chat.completion.chunk",
            "created": 1767225601,
            "model": "gpt-4o",
            "system_fingerprint": "fp_2",
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}] if delta is not None else [],
            "usage": usage,
        }
    )


def test_streamed_chunks_with_tool_call_fragments(archive: ChatArchive) -> None:
    chunks = [
        _chunk(
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
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"q": '}}]}),
        _chunk(
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
        _chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"pcr"}'}}]}),
        _chunk({}, finish="tool_calls"),
        _chunk(None, usage={"prompt_tokens": 9, "completion_tokens": 7, "total_tokens": 16}),  # type: ignore[arg-type]
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
        _chunk({"role": "assistant", "content": "Hel"}),
        _chunk({"content": "lo"}),
        _chunk({}, finish="stop"),
    ]
    assert message_from_completion(text_chunks)["content"] == "Hello"


def test_a_choice_without_an_index_is_the_one_at_its_place() -> None:
    """OpenAI-compatible servers that leave out a choice's index: a streamed
    chunk's choice was taken as choice 0, a whole completion's was 'no choice 0'."""
    answer = {"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    assert message_from_completion({"choices": [answer]})["content"] == "hi"
    second = {"message": {"role": "assistant", "content": "second"}}
    assert message_from_completion({"choices": [answer, second]}, choice=1)["content"] == "second"
    assert message_from_completion([{"choices": [{"delta": {"content": "hi"}}]}])["content"] == "hi"


MODERATION = {
    "input": {"type": "moderation_results", "model": "omni-moderation", "results": []},
    "output": {"type": "moderation_results", "model": "omni-moderation", "results": []},
}


def test_every_key_of_a_completion_is_kept_on_its_message() -> None:
    completion = {
        **COMPLETION,
        "moderation": MODERATION,
        "metadata": {"session": "s-1"},
        "provider": "a-gateway",  # a key the openai package does not know
    }
    completion["choices"] = [{**COMPLETION["choices"][0], "stop_reason": 42}]
    for form in (completion, ChatCompletion.model_validate(completion)):
        message = message_from_completion(form)
        kept = {key: message.get(key) for key in ("moderation", "metadata", "service_tier")}
        assert kept == {"moderation": MODERATION, "metadata": {"session": "s-1"}, "service_tier": "default"}
    assert (
        message_from_completion(completion)["provider"],
        message_from_completion(completion)["stop_reason"],
    ) == (
        "a-gateway",
        42,
    )
    assert "object" not in message_from_completion(completion)


def test_streamed_audio_logprobs_and_moderation_are_assembled_as_openai_does() -> None:
    token = {"token": "He", "logprob": -0.1, "bytes": [72, 101], "top_logprobs": []}
    chunks = [
        _chunk({"role": "assistant", "audio": {"id": "audio_1"}}),
        _chunk({"audio": {"data": "AAA", "transcript": "He"}}),
        _chunk({"audio": {"data": "BBB", "transcript": "llo"}}),
        _chunk({"refusal": "No"}),
        _chunk({"audio": {"expires_at": 1767229200}}, finish="stop"),
    ]
    chunks[3] = ChatCompletionChunk.model_validate(
        {
            **chunks[3].model_dump(),
            "obfuscation": "xyz",
            "choices": [
                {"index": 0, "delta": {"refusal": "No"}, "logprobs": {"content": [token], "refusal": [token]}}
            ],
        }
    )
    moderated = ChatCompletionChunk.model_validate(
        {**chunks[0].model_dump(), "choices": [], "moderation": MODERATION}
    )
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for chunk in chunks:
        state.handle_chunk(chunk)
    theirs = state.get_final_completion().choices[0].message.model_dump(exclude_none=True)
    message = message_from_completion([moderated, *chunks])
    assert (
        message["audio"]
        == theirs["audio"]
        == {
            "id": "audio_1",
            "data": "AAABBB",
            "expires_at": 1767229200,
            "transcript": "Hello",
        }
    )
    assert message["refusal"] == theirs["refusal"] == "No"
    assert message["logprobs"] == {"content": [token], "refusal": [token]}
    assert message["moderation"] == MODERATION
    assert "obfuscation" not in message


def _anything_or(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    return st.one_of(json_values, strategy)


_fragments = st.lists(
    _anything_or(
        st.fixed_dictionaries(
            {},
            optional={
                "index": _anything_or(st.integers(0, 2)),
                "id": json_values,
                "type": json_values,
                "function": _anything_or(
                    st.fixed_dictionaries({}, optional={"name": json_values, "arguments": json_values})
                ),
            },
        )
    ),
    max_size=2,
)
_deltas = st.fixed_dictionaries(
    {},
    optional=dict.fromkeys(("role", "content", "refusal", "function_call", "audio"), json_values)
    | {"tool_calls": _anything_or(_fragments)},
)
_completion_choices = st.fixed_dictionaries(
    {},
    optional={
        "index": _anything_or(st.just(0)),
        "delta": _anything_or(_deltas),
        "message": _anything_or(st.fixed_dictionaries({"role": json_values, "content": json_values})),
        "finish_reason": json_values,
        "logprobs": json_values,
    },
)
_completions = st.fixed_dictionaries(
    {},
    optional={
        "choices": _anything_or(st.lists(_anything_or(_completion_choices), max_size=2)),
        **dict.fromkeys(("id", "created", "model", "usage", "service_tier"), json_values),
    },
)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(_completions, st.lists(_anything_or(_completions), max_size=4)))
def test_damaged_completions_raise_only_invalid_document(completion: Any) -> None:
    with contextlib.suppress(InvalidDocument):
        ChatDocument.parse({"messages": [message_from_completion(completion)]})


def test_a_damaged_completion_is_named_with_its_chat(archive: ChatArchive) -> None:
    archive.save({"chat_id": "c", "messages": []})
    chunks = [{"choices": [{"index": 0, "delta": {"content": ["not", "text"]}}]}]
    with pytest.raises(InvalidDocument) as refused:
        archive.record_completion("c", chunks)
    assert (refused.value.chat_id, refused.value.field) == ("c", "chunks[0].choices[0].delta.content")
    assert archive.get("c").messages == []


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


def _paths(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Where a value can be replaced: the whole, and every member at any depth."""
    yield path
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        yield from _paths(item, (*path, key))


def _replaced(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copied = copy.deepcopy(value)
    parent = copied
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = new
    return copied


@settings(max_examples=300, deadline=None)
@given(
    fixture=st.sampled_from([MASTERBRAIN, MALEVICH, SHAREGPT, CHATGPT, COMPLETION]),
    data=st.data(),
    changes=st.lists(json_values, min_size=1, max_size=3),
)
def test_damaged_records_of_every_format_raise_only_invalid_document(
    fixture: Any, data: st.DataObject, changes: list[Any]
) -> None:
    # Found: an unhashable current_node or child id, a time out of range.
    record = fixture
    for new in changes:
        record = _replaced(record, data.draw(st.sampled_from(list(_paths(record)))), new)
    with contextlib.suppress(InvalidDocument):
        if fixture is COMPLETION:
            message_from_completion(record)
            return
        doc = formats.to_document(record, "auto")
        for name in formats.EXPORT_FORMATS:
            with contextlib.suppress(InvalidDocument):
                json.dumps(formats.export(doc, name), allow_nan=False)
