"""LangChain messages (messages_to_dict and dumpd) on the archive's rows."""

from __future__ import annotations

import json
from typing import Any

from langchain_core.messages import AIMessage, messages_from_dict
from sqlalchemy import Engine, text

from chatarchive import ChatArchive, formats
from tests.support.samples import format_sample


def sample(name: str) -> Any:
    return format_sample("langchain", name)


def test_messages_are_stored_on_the_archives_rows(archive: ChatArchive, engine: Engine) -> None:
    document = formats.to_document(sample("messages-to-dict"))
    archive.save(document)
    with engine.connect() as connection:
        messages = connection.execute(
            text(
                "SELECT role, name, tool_call_id, model, finish_reason, prompt_tokens, completion_tokens "
                "FROM messages WHERE chat_id = :c ORDER BY position"
            ),
            {"c": document.chat_id},
        ).all()
        calls = connection.execute(
            text("SELECT call_id, name, arguments FROM tool_calls WHERE chat_id = :c ORDER BY position"),
            {"c": document.chat_id},
        ).all()
    assert [tuple(row) for row in messages] == [
        ("system", None, None, None, None, None, None),
        ("user", "alice", None, None, None, None, None),
        ("assistant", None, None, "gpt-4o-2024-08-06", "tool_calls", 85, 31),
        ("tool", "lookup_primer", "call_1", None, None, None, None),
        ("tool", None, "call_2", None, None, None, None),
        ("function", "legacy_tm", None, None, None, None, None),
        ("critic", None, None, None, None, None, None),
        ("assistant", None, None, "gpt-4o-2024-08-06", "stop", 130, 12),
    ]
    # Valid and invalid tool calls are both tool calls; the valid one's args are JSON text.
    assert [(row.call_id, row.name) for row in calls] == [
        ("call_1", "lookup_primer"),
        ("call_2", "lookup_protocol"),
    ]
    assert json.loads(calls[0].arguments) == {"pair": "P7", "strict": True}
    assert calls[1].arguments == '{"step": anneal'
    stored = archive.get(document.chat_id)
    assert formats.export(stored, "langchain") == sample("messages-to-dict")
    restored = messages_from_dict(formats.export(stored, "langchain"))
    answer = restored[2]
    assert isinstance(answer, AIMessage)
    assert answer.tool_calls[0]["args"] == {"pair": "P7", "strict": True}
    assert answer.invalid_tool_calls[0]["error"] == "Function lookup_protocol arguments are not valid JSON"


def test_a_chat_of_another_format_exports_as_messages_langchain_reads() -> None:
    line = format_sample("openai-finetune", "tool-answered")
    exported = formats.export(formats.to_document({"messages": line["messages"]}, "canonical"), "langchain")
    restored = messages_from_dict(exported)
    assert [message.type for message in restored] == ["system", "human", "ai", "tool", "tool", "ai"]
    call = restored[2]
    assert isinstance(call, AIMessage)
    assert [(c["id"], c["name"], c["args"]) for c in call.tool_calls] == [
        ("call_1", "lookup_primer", {"pair": "P7"}),
        ("call_2", "lookup_protocol", {"step": "anneal"}),
    ]
