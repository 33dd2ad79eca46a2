"""Every line of every training export (openai-finetune, openai-preference, dpo),
for chats imported from every format, is one OpenAI's fine-tuning accepts: the
official types, and its written rules for a chat example."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from openai.types.chat import ChatCompletionMessageParam

from chatarchive import ChatDocument, formats
from chatarchive.formats import DATASET_FORMATS
from chatarchive.formats.finetune import Filters, Selection
from tests.support.official import validate
from tests.support.samples import CHATGPT, FORMAT_SAMPLES

PACKAGED = Path(__file__).parents[2] / "chatarchive" / "samples"


def _documents() -> list[Any]:
    found = [
        pytest.param(formats.to_document(json.loads(path.read_text(encoding="utf-8"))), id=path.stem)
        for path in sorted([*FORMAT_SAMPLES.glob("*/*.json"), *PACKAGED.glob("*.json")])
    ]
    found.append(pytest.param(formats.to_document(CHATGPT), id="chatgpt-code-and-images"))
    return found


ROLES = {"system", "user", "assistant", "tool", "function"}


def check_messages(messages: list[dict[str, Any]], *, final_answer: bool) -> None:
    """OpenAI's rules for a chat example's messages."""
    assert messages, "no messages"
    calls: set[str] = set()
    for message in messages:
        validate(ChatCompletionMessageParam, message, allowed=frozenset({"weight"}))
        assert message["role"] in ROLES
        if message["role"] == "assistant":
            assert (
                message.get("content") is not None
                or message.get("tool_calls")
                or message.get("function_call")
            )
            calls |= {call["id"] for call in message.get("tool_calls") or []}
            assert message.get("weight", 1) in (0, 1)
        else:
            assert message.get("content") is not None, message
            assert "weight" not in message
        if message["role"] == "tool":
            assert message["tool_call_id"] in calls, "a tool message answers a call before it"
    if final_answer:
        assert messages[-1]["role"] == "assistant"


@pytest.mark.parametrize("document", _documents())
def test_every_training_line_of_a_chat_of_any_format_is_one_openai_accepts(document: ChatDocument) -> None:
    for name, select in DATASET_FORMATS.items():
        selection = Selection()
        lines = list(select([document], Filters(), selection))
        for line in lines:
            if name == "openai-finetune":
                check_messages(line["messages"], final_answer=True)
            elif name == "openai-preference":
                check_messages(line["input"]["messages"], final_answer=False)
                for output in (line["preferred_output"], line["non_preferred_output"]):
                    check_messages(output, final_answer=True)
            else:
                check_messages(line["prompt"], final_answer=False)
                check_messages(line["chosen"], final_answer=True)
                check_messages(line["rejected"], final_answer=True)
        if name == "openai-finetune":  # each chat is written, or skipped with its reason
            assert len(lines) + sum(selection.skipped.values()) == 1


def test_a_chatgpt_chat_with_tools_and_reasoning_is_a_training_line_with_its_calls_paired() -> None:
    document = formats.to_document(
        json.loads((FORMAT_SAMPLES / "chatgpt" / "tools-reasoning-branches.json").read_text())
    )
    (line,) = DATASET_FORMATS["openai-finetune"]([document], Filters(), Selection())
    roles = [message["role"] for message in line["messages"]]
    assert roles == [
        "user",
        "assistant",
        "tool",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert line["messages"][1]["tool_calls"][0]["function"]["name"] == "web"
    assert line["messages"][2]["tool_call_id"] == line["messages"][1]["tool_calls"][0]["id"]
