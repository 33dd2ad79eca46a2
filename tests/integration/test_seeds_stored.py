"""The seed documents and the bundled samples come back out of the database as they went in."""

from __future__ import annotations

import json
from importlib import resources
from typing import Any

import pytest

from chatarchive import ChatDocument, ChatRepository
from tests.support.seeds import EXAMPLES, without_filled_timestamps


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


def test_bundled_samples_round_trip(repo: ChatRepository) -> None:
    samples = resources.files("chatarchive").joinpath("samples")
    for entry in samples.iterdir():
        if not entry.name.endswith(".json"):
            continue
        doc = ChatDocument.parse(json.loads(entry.read_text(encoding="utf-8")))
        repo.save(doc)
        back = repo.get(doc.chat_id)
        assert back.to_openai() == doc.to_openai()
        assert without_filled_timestamps(back.model_dump(), doc) == doc.model_dump()
