"""Claude.ai's data export: conversations as trees, attachments searchable."""

from __future__ import annotations

from typing import Any

from chatarchive import ChatRepository, formats
from tests.support.samples import format_sample


def sample(name: str) -> Any:
    return format_sample("claude-ai", name)


def test_a_branched_conversation_is_the_chats_tree(repo: ChatRepository) -> None:
    record = sample("branched-thinking-tools")
    document = formats.to_document(record)
    repo.save(document)
    chat = repo.get(record["uuid"])
    # The active path: the question, the second answer (its text, the search, the rest), the follow-up.
    assert [m.role for m in chat.messages] == ["user", "assistant", "tool", "assistant", "user"]
    assert chat.messages[0].uid == "aaaa0000-0000-4000-8000-000000000001"
    assert chat.messages[1].uid == "aaaa0000-0000-4000-8000-000000000003"
    assert [call.function.name for call in chat.messages[1].tool_calls or []] == ["web_search"]
    assert (chat.model, chat.user_id, chat.title) == (
        "claude-sonnet-4-5-20250929",
        "b2f1e0c4-7d3a-4f8e-9c21-3e4d5f6a7b8c",
        "Why two bands?",
    )
    assert chat.messages[0].created_at is not None
    assert chat.messages[0].created_at.isoformat() == "2025-09-01T08:00:01+00:00"
    tree = repo.get_tree(record["uuid"])
    assert [m.uid for m in tree.siblings("aaaa0000-0000-4000-8000-000000000002")] == [
        "aaaa0000-0000-4000-8000-000000000002",
        "aaaa0000-0000-4000-8000-000000000003",
    ]
    # A branch made in the archive exports as a message under its parent.
    repo.regenerate(
        record["uuid"],
        "aaaa0000-0000-4000-8000-000000000003",
        [{"role": "assistant", "content": "Primer dimers or a second product.", "uid": "new-answer"}],
    )
    exported = formats.export(repo.get_tree(record["uuid"]).document, "claude-ai")
    added = exported["chat_messages"][-1]
    assert (added["uuid"], added["sender"], added["parent_message_uuid"]) == (
        "new-answer",
        "assistant",
        "aaaa0000-0000-4000-8000-000000000001",
    )
    assert exported["current_leaf_message_uuid"] == "new-answer"
    assert exported["chat_messages"][:4] == record["chat_messages"]


def test_attachments_are_parts_and_their_text_is_searchable(repo: ChatRepository) -> None:
    record = sample("linear-attachments")
    repo.save(formats.to_document(record))
    question = repo.get(record["uuid"]).messages[0]
    assert isinstance(question.content, list)
    assert [part.type for part in question.content] == ["text", "claude_attachment", "claude_file"]
    (hit,) = repo.search("primer")
    assert hit.chat_id == record["uuid"]
    assert formats.export(repo.get(record["uuid"]), "claude-ai") == record
