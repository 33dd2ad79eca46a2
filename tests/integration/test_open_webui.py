"""Open WebUI's chat export: the history tree, models and times."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from chatarchive import ChatRepository, formats
from tests.support.samples import format_sample


def sample() -> Any:
    return format_sample("open-webui", "branched-chat")


def test_the_history_is_the_chats_tree_with_its_models_and_times(repo: ChatRepository) -> None:
    record = sample()
    repo.save(formats.to_document(record))
    chat = repo.get(record["id"])
    assert [m.uid for m in chat.messages] == ["m-user-1", "m-asst-2", "m-user-2"]
    assert [m.model for m in chat.messages] == [None, "qwen2.5:14b", None]
    assert chat.messages[1].created_at == datetime.fromtimestamp(1718000030, UTC)
    assert (chat.model, chat.user_id, chat.created_at) == (
        "llama3.1:8b",
        "8d5e6f70-1a2b-4c3d-9e8f-0a1b2c3d4e5f",
        datetime.fromtimestamp(1718000000, UTC),
    )
    # The question's image is a part after its text.
    question = chat.messages[0].content
    assert isinstance(question, list)
    assert [part.type for part in question] == ["text", "image_url"]
    tree = repo.get_tree(record["id"])
    assert [m.uid for m in tree.siblings("m-asst-2")] == ["m-asst-1", "m-asst-2"]
    # A branch made in the archive: a child of its parent, the current message.
    repo.regenerate(
        record["id"],
        "m-asst-2",
        [{"role": "assistant", "content": "Run a control.", "uid": "m-new", "model": "llama3.1:8b"}],
    )
    exported = formats.export(repo.get_tree(record["id"]).document, "open-webui")
    history = exported["chat"]["history"]
    assert history["currentId"] == "m-new"
    assert history["messages"]["m-user-1"]["childrenIds"] == ["m-asst-1", "m-asst-2", "m-new"]
    assert history["messages"]["m-new"]["parentId"] == "m-user-1"
    assert [m["id"] for m in exported["chat"]["messages"]] == ["m-user-1", "m-new"]
