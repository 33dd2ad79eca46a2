"""ChatGPT's export: tool use and o3's reasoning as rows, conversations without current_node."""

# ruff: noqa: RUF001  (Chinese text holds full-width punctuation)

from __future__ import annotations

import json
from typing import Any

from chatarchive import ChatArchive, ChatRepository, formats
from tests.support.official import validate_chat_completions
from tests.support.samples import format_sample


def test_chatgpt_tool_use_is_tool_calls_answered_by_tool_messages(archive: ChatArchive) -> None:
    record = format_sample("chatgpt", "tools-reasoning-branches")
    document = formats.to_document(record)
    by_uid = {message.uid: message for message in document.messages}
    web = by_uid["call-web"]
    assert web.role == "assistant"
    assert web.content is None
    assert web.tool_calls is not None
    assert [
        (call.id, call.function.name, call.function.arguments) for call in web.tool_calls if call.function
    ] == [("call-web", "web", 'search("北京明天的天气怎么样？")')]
    assert (by_uid["tool-web"].role, by_uid["tool-web"].name, by_uid["tool-web"].tool_call_id) == (
        "tool",
        "web",
        "call-web",
    )
    assert by_uid["tool-py"].tool_call_id == "call-py"
    assert by_uid["tool-py"].content == "289"
    # Two tool messages of one DALL-E call both answer it.
    assert by_uid["tool-dalle"].tool_call_id == by_uid["tool-dalle-2"].tool_call_id == "call-dalle"

    archive.save(document)
    tools = {row.tool_name: (row.calls, row.answered) for row in archive.tool_usage()}
    assert tools == {"web": (1, 1), "python": (1, 1), "dalle.text2im": (1, 1)}
    exported = formats.export(archive.get_tree(document.chat_id).document, "chatgpt")
    assert json.dumps(exported, ensure_ascii=False) == json.dumps(record, ensure_ascii=False)


def test_o3_reasoning_is_reasoning_messages_with_text(repo: ChatRepository) -> None:
    record = format_sample("chatgpt", "tools-reasoning-branches")
    document = formats.to_document(record)
    repo.save(document)
    stored = {message.uid: message for message in repo.get_tree(document.chat_id).messages}
    thoughts, recap = stored["th-1"], stored["rr-1"]
    assert (thoughts.role, recap.role) == ("reasoning", "reasoning")
    assert recap.content == "Thought for 4 seconds"
    assert isinstance(thoughts.content, list)
    assert thoughts.content[0].text is not None
    assert thoughts.content[0].text.startswith("The user asks for tomorrow's weather")
    assert [hit.message_uid for hit in repo.search("weather Beijing compute")] == ["th-1"]


def test_chat_completions_of_a_chatgpt_chat_keep_the_tool_outputs_apart_from_the_answer() -> None:
    document = formats.to_document(format_sample("chatgpt", "tools-reasoning-branches"))
    messages = formats.export(document, "chat-completions")
    validate_chat_completions(messages)
    shape = [
        (message["role"], message.get("tool_call_id"), bool(message.get("tool_calls")))
        for message in messages
    ]
    assert shape == [
        ("user", None, False),
        ("assistant", None, True),
        ("tool", "call-web", False),
        ("assistant", None, True),
        ("tool", "call-py", False),
        ("assistant", None, False),
        ("user", None, False),
        ("assistant", None, True),
        ("tool", "call-dalle", False),
        ("assistant", None, False),
    ]
    assert messages[5]["content"] == "明天北京天气晴朗（12°C / -1°C）。17² = 289。"  # the answer alone
    assert messages[7]["tool_calls"][0]["function"]["name"] == "dalle_text2im"  # a name the API takes
    assert messages[8]["content"].startswith("DALL·E displayed 1 images")  # the image left out, the text kept


def test_a_chatgpt_conversation_without_current_node_shows_its_latest_leaf_and_comes_back_as_it_came(
    repo: ChatRepository,
) -> None:
    record = format_sample("chatgpt", "no-current-node")
    document = formats.to_document(record)
    assert [message.uid for message in document.path()] == ["q", "b2"]  # the later of the two answers
    repo.save(document)
    assert [message.uid for message in repo.get(document.chat_id).messages] == ["q", "b2"]
    exported: Any = formats.export(repo.get_tree(document.chat_id).document, "chatgpt")
    assert "current_node" not in exported
    assert exported == record
    repo.set_active_leaf(document.chat_id, "b1")
    moved = formats.export(repo.get_tree(document.chat_id).document, "chatgpt")
    assert moved["current_node"] == "b1"
