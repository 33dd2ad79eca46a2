"""Format adapters: round trips on realistic fixtures, detection, the CLI, completions."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from chatarchive import ChatDocument, ChatTree, InvalidArgument, InvalidDocument, formats
from chatarchive.formats import chatgpt, finetune, masterbrain
from chatarchive.formats.openai_completions import message_from_completion
from tests.support.samples import (
    CHATGPT,
    COMPLETION,
    MALEVICH,
    MASTERBRAIN,
    MODERATION,
    SHAREGPT,
    completion_chunk,
    format_sample,
)
from tests.support.strategies import json_values


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


# A turn the user saw after the answer: code, and an image beside text.


def test_chatgpt_chats_imported_without_their_tree_export_one_branch() -> None:
    doc = ChatTree(chatgpt.to_document(CHATGPT)).path_document()
    # What the first versions kept: the active path, no original nodes, no other branches whole.
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


def test_every_format_module_declares_its_formats_and_the_registry_collects_them_all() -> None:
    import importlib
    import pkgutil

    declared: list[str] = []
    for module in pkgutil.iter_modules(formats.__path__):
        if not module.name.startswith("_"):
            records = importlib.import_module(f"chatarchive.formats.{module.name}").FORMATS
            assert records, module.name
            declared.extend(record.name for record in records)
    assert sorted(declared) == sorted(formats.FORMATS)
    ranks = [record.detection or 0 for record in formats.IMPORT_FORMATS.values()]
    assert ranks == sorted(ranks)
    assert len(set(ranks)) == len(ranks)
    assert formats.RECORDERS == {
        "anthropic": "record_message",
        "openai-completion": "record_completion",
        "openai-responses": "record_response",
    }
    # The formats that keep a tree export every branch; the others are given the active path.
    branched = chatgpt.to_document(CHATGPT)
    assert len(branched.path()) < len(branched.messages)
    whole = {name for name, record in formats.FORMATS.items() if record.whole_tree}
    assert whole == {"canonical", "chatgpt", "claude-ai", "open-webui", "chat-completions"}
    assert formats.export(branched, "malevich") == formats.export(branched.path_document(), "malevich")
    assert len(formats.export(branched, "canonical")["messages"]) == len(branched.messages)


def test_a_format_record_that_cannot_import_what_it_detects_is_refused() -> None:
    from chatarchive.formats import Format

    with pytest.raises(ValueError, match="an import needs looks_like, to_document and detection"):
        Format("x", "x", "-", "dataset", looks_like=lambda data: True)
    with pytest.raises(ValueError, match="unknown family"):
        Format("x", "x", "-", "novel")


NOT_CHATS: list[tuple[Any, str]] = [
    ({}, "not a chat in any known format: {} has no messages"),
    ({"foo": "bar"}, "not a chat in any known format: an object with the keys 'foo' has no messages"),
    ([], r"\[\] has no messages"),
    ([1, 2], "a list that is not a message list"),
    (42, "a JSON number, not an object or a list"),
    (None, "a JSON null"),
    ({"object": "chat.completion", "choices": []}, "the completion has no choices"),
    ({"object": "chat.completion.chunk", "choices": []}, "the completion has no choices"),
    (
        {"type": "response.output_text.delta", "delta": "Hi"},
        "looks like an OpenAI Responses API stream event: a stream's events import together",
    ),
    (
        {"type": "message", "role": "assistant", "content": "Hi"},
        "looks like an Anthropic Messages response, but its content is not a list of blocks",
    ),
    (
        {"type": "content_block_delta", "index": 0},
        "looks like an Anthropic Messages stream event: a stream's events import together",
    ),
    (
        {"name": "n", "chat_messages": []},
        "looks like a conversation of a Claude.ai export, but it has no 'uuid'",
    ),
    ({"title": "t", "mapping": {}}, "looks like a ChatGPT conversation, but its 'mapping' holds no nodes"),
    ({"contents": "Hi"}, "looks like a Gemini request, but its 'contents' is not a list"),
    ({"conversations": []}, "looks like a ShareGPT record, but its 'conversations' is not a list of turns"),
    ({"conversations": [{"value": "hi"}]}, "looks like a ShareGPT record"),
    (
        {"main_messages": []},
        "looks like a Masterbrain ChatDoc, but its 'main_messages' is not a list, or is empty",
    ),
]


@pytest.mark.parametrize(("record", "reason"), NOT_CHATS)
def test_a_record_that_is_no_chat_is_refused_saying_what_it_looks_like(record: Any, reason: str) -> None:
    with pytest.raises(InvalidDocument, match=reason):
        formats.to_document(record)


def test_a_chat_with_no_messages_is_imported_only_when_it_says_so() -> None:
    assert formats.to_document({"chat_id": "c", "messages": []}).messages == []
    with pytest.raises(InvalidDocument, match="a chat document has a 'messages' list"):
        formats.to_document({"chat_id": "c"}, "canonical")


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
    unanswered = {  # a call in the middle that nothing answers
        **answered,
        "chat_id": "bad",
        "messages": [*answered["messages"][:3], {"role": "assistant", "content": "a"}],
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


def test_finetune_lines_end_with_a_tool_call_and_keep_tools_settings_and_weights() -> None:
    """A final assistant tool call is a function-calling example (it was
    skipped as an unanswered call); tools, parallel_tool_calls and weight
    are written; the line imports back as the same chat."""
    line = {
        "messages": [
            {"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": "Let me look.", "weight": 0},
            {
                "role": "assistant",
                "tool_calls": [{"id": "c", "type": "function", "function": {"name": "w", "arguments": "{}"}}],
            },
        ],
        "tools": [{"type": "function", "function": {"name": "w", "parameters": {}}}],
        "parallel_tool_calls": False,
    }
    assert formats.detect(line) == "openai-finetune"
    doc = formats.to_document(line)
    assert doc.workflow == {"tools": line["tools"]}
    assert doc.model_settings == {"parallel_tool_calls": False}
    selection = finetune.Selection()
    assert list(finetune.select([doc], finetune.Filters(), selection)) == [line]
    assert selection.written == 1
    # Only messages: the same chat read as canonical, and the same line written.
    bare = {"messages": line["messages"]}
    assert formats.detect(bare) == "canonical"
    assert formats.export(formats.to_document(bare), "openai-finetune") == bare


def test_finetune_lines_map_foreign_roles_or_skip_the_chat_saying_which() -> None:
    mapped = formats.to_document(
        {
            "chat_id": "m",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {"role": "human", "content": "q"},
                {"role": "model", "content": "a"},
            ],
        }
    )
    assert [m["role"] for m in formats.export(mapped, "openai-finetune")["messages"]] == [
        "system",
        "user",
        "assistant",
    ]
    foreign = formats.to_document(
        {
            "chat_id": "f",
            "messages": [
                {"role": "user", "content": "q"},
                {"role": "narrator", "content": "Meanwhile..."},
                {"role": "assistant", "content": "a"},
            ],
        }
    )
    with pytest.raises(
        InvalidDocument, match="role 'narrator' is not one OpenAI's fine-tuning accepts"
    ) as caught:
        formats.export(foreign, "openai-finetune")
    assert (caught.value.chat_id, caught.value.message_index, caught.value.field) == ("f", 1, "role")
    selection = finetune.Selection()
    assert list(finetune.select([foreign, mapped], finetune.Filters(), selection)) == [
        formats.export(mapped, "openai-finetune")
    ]
    assert selection.skipped == {"role 'narrator' not accepted": 1}
    # Excluded, the foreign role is no reason to skip.
    assert (
        len(list(finetune.select([foreign], finetune.Filters(exclude_roles=("narrator",)), selection))) == 1
    )


def test_finetune_lines_refuse_one_role_given_alone() -> None:
    doc = formats.to_document({"chat_id": "c", "messages": [{"role": "system", "content": "s"}]})
    assert finetune.from_document(doc, ["system"]) == {"messages": []}
    with pytest.raises(InvalidArgument, match="exclude_roles must be a list"):
        finetune.from_document(doc, "system")


def test_a_choice_without_an_index_is_the_one_at_its_place() -> None:
    """OpenAI-compatible servers that leave out a choice's index: a streamed
    chunk's choice was taken as choice 0, a whole completion's was 'no choice 0'."""
    answer = {"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    assert message_from_completion({"choices": [answer]})["content"] == "hi"
    second = {"message": {"role": "assistant", "content": "second"}}
    assert message_from_completion({"choices": [answer, second]}, choice=1)["content"] == "second"
    assert message_from_completion([{"choices": [{"delta": {"content": "hi"}}]}])["content"] == "hi"


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
        completion_chunk({"role": "assistant", "audio": {"id": "audio_1"}}),
        completion_chunk({"audio": {"data": "AAA", "transcript": "He"}}),
        completion_chunk({"audio": {"data": "BBB", "transcript": "llo"}}),
        completion_chunk({"refusal": "No"}),
        completion_chunk({"audio": {"expires_at": 1767229200}}, finish="stop"),
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
    fixture=st.sampled_from(
        [
            MASTERBRAIN,
            MALEVICH,
            SHAREGPT,
            CHATGPT,
            COMPLETION,
            format_sample("anthropic", "request-blocks"),
            format_sample("anthropic", "response-server-tools"),
            format_sample("openai-finetune", "tool-answered"),
            format_sample("openai-responses", "input-conversation"),
            format_sample("openai-responses", "response-built-in-tools"),
            format_sample("claude-ai", "branched-thinking-tools"),
            format_sample("open-webui", "branched-chat"),
            format_sample("langchain", "messages-to-dict"),
            format_sample("langchain", "dumpd"),
            format_sample("gemini", "request-tools"),
            format_sample("gemini", "contents-snake-case"),
            format_sample("pydantic-ai", "run-with-tools"),
            format_sample("llama-index", "agent-with-tools"),
        ]
    ),
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


@pytest.mark.parametrize(
    "record",
    [
        MASTERBRAIN,
        MALEVICH,
        SHAREGPT,
        CHATGPT,
        format_sample("anthropic", "request-blocks"),
        format_sample("anthropic", "request-mcp-code"),
    ],
    ids=["masterbrain", "malevich", "sharegpt", "chatgpt", "anthropic", "anthropic-mcp"],
)
def test_every_format_converts_to_chat_completions_messages_the_api_takes(record: Any) -> None:
    from tests.support.official import validate_chat_completions

    messages = formats.export(formats.to_document(record), "chat-completions")
    assert messages
    validate_chat_completions(messages)


def test_anthropic_blocks_convert_where_their_meanings_match() -> None:
    messages = formats.export(
        formats.to_document(format_sample("anthropic", "request-blocks")), "chat-completions"
    )
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "tool", "assistant"]
    assert messages[1]["content"] == [
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}},
        {"type": "image_url", "image_url": {"url": "https://example.com/gel.jpg"}},
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,JVBERi0xLjQK", "filename": "Protocol"},
        },
        {"type": "file", "file": {"file_id": "file_011CNha8iCJcU1wXNR6q4V8w"}},
        {"type": "text", "text": "The grass is green. The sky is blue."},
        {"type": "text", "text": "Why are there two bands on this gel?"},
    ]
    # Thinking is left out; the text and the calls are kept, with their ids and arguments.
    assert messages[2]["content"] == [
        {"type": "text", "text": "The lower band is likely primer dimers."},
        {"type": "text", "text": "Let me also check the protocol."},
    ]
    assert [json.loads(call["function"]["arguments"]) for call in messages[2]["tool_calls"]] == [
        {"pair": "P7"},
        {"step": "anneal", "repeat": 2},
    ]
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "toolu_01",
        "content": [{"type": "text", "text": '{"tm": 62}'}],
    }
    # Server tool calls run by the provider, and their results, are left out.
    mcp = formats.export(
        formats.to_document(format_sample("anthropic", "request-mcp-code")), "chat-completions"
    )
    assert mcp[1] == {
        "role": "assistant",
        "content": [{"type": "text", "text": "Done: the greeting is hello."}],
    }


def test_runs_keep_where_calls_came_and_a_damaged_mark_loses_no_block() -> None:
    from chatarchive.formats._shapes import interleaved, runs

    blocks: list[Any] = [
        ("part", {"type": "text", "text": "a"}),
        ("call", {"id": "c1"}),
        ("part", {"type": "text", "text": "b"}),
        ("result", {"role": "tool", "tool_call_id": "c1"}),
        ("call", {"id": "c2"}),
    ]
    first, result, last = runs("assistant", blocks, "k")
    assert first == {
        "role": "assistant",
        "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        "tool_calls": [{"id": "c1"}],
        "k": {"calls_at": [1]},
    }
    assert result["k"] == {"continues": True}
    assert last == {
        "role": "assistant",
        "content": [],
        "tool_calls": [{"id": "c2"}],
        "k": {"continues": True},
    }
    assert interleaved(first["content"], first["tool_calls"], [1]) == [value for _, value in blocks[:3]]
    assert runs("user", [], "k") == [{"role": "user", "content": []}]
    # A mark that no longer fits (edited in the archive): every block is kept, the calls after the parts.
    for mark in ([1, 1], [7], "1", None):
        assert interleaved(["p"], ["c1"], mark) == ["p", "c1"]
