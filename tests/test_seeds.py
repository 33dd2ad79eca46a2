"""Every example in the seed document round-trips through the database."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path
from typing import Any

import pytest

from chatarchive import ChatDocument, ChatRepository

SEED = Path(__file__).parent / "data" / "seed_chat_data_structure.txt"


def seed_examples() -> list[list[dict[str, Any]]]:
    """The JSON message lists printed in the seed document, in order."""
    text = SEED.read_text(encoding="utf-8")
    decoder = json.JSONDecoder()
    examples = []
    index = text.find("[")
    while index != -1:
        try:
            value, end = decoder.raw_decode(text, index)
        except json.JSONDecodeError:
            index = text.find("[", index + 1)
            continue
        examples.append(value)
        index = text.find("[", end)
    return examples


EXAMPLES = seed_examples()


def test_the_seed_has_its_three_examples() -> None:
    assert [len(example) for example in EXAMPLES] == [2, 1, 4]
    assert EXAMPLES[2][1]["tool_calls"][0]["id"] == "call_abc123"


@pytest.mark.parametrize("example", EXAMPLES, ids=["simple-text", "multimodal", "tool-calling"])
def test_seed_example_round_trips_through_the_database(
    repo: ChatRepository, example: list[dict[str, Any]]
) -> None:
    original = json.dumps(example)
    doc = ChatDocument.from_openai(example, chat_id="seed", user_id="u")
    repo.save(doc)
    back = repo.get("seed")
    assert back.to_openai() == json.loads(original)
    assert json.loads(json.dumps(back.to_openai())) == json.loads(original)


def test_bundled_samples_contain_the_seed_examples() -> None:
    samples = resources.files("chatarchive").joinpath("samples")
    by_id = {
        doc.chat_id: doc
        for doc in (
            ChatDocument.parse(json.loads(entry.read_text(encoding="utf-8")))
            for entry in samples.iterdir()
            if entry.name.endswith(".json")
        )
    }
    assert by_id["seed-simple-text"].to_openai() == EXAMPLES[0]
    assert by_id["seed-multimodal"].to_openai() == EXAMPLES[1]
    assert by_id["seed-tool-calling"].to_openai() == EXAMPLES[2]


def test_bundled_samples_round_trip(repo: ChatRepository) -> None:
    samples = resources.files("chatarchive").joinpath("samples")
    for entry in samples.iterdir():
        if not entry.name.endswith(".json"):
            continue
        doc = ChatDocument.parse(json.loads(entry.read_text(encoding="utf-8")))
        repo.save(doc)
        back = repo.get(doc.chat_id)
        assert back.to_openai() == doc.to_openai()
        assert _without_filled_timestamps(back.model_dump(), doc) == doc.model_dump()


def _without_filled_timestamps(dumped: dict[str, Any], original: ChatDocument) -> dict[str, Any]:
    for message, given in zip(dumped["messages"], original.messages, strict=True):
        if given.created_at is None:
            del message["created_at"]
    for item, given_item in zip(dumped["feedback"], original.feedback, strict=True):
        if given_item.created_at is None:
            del item["created_at"]
    for key in ("created_at", "updated_at"):
        if getattr(original, key) is None:
            dumped.pop(key)
    return dumped
