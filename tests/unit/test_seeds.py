"""Every example in the seed document round-trips through the database."""

from __future__ import annotations

import json
from importlib import resources

from chatarchive import ChatDocument
from tests.support.seeds import EXAMPLES


def test_the_seed_has_its_three_examples() -> None:
    assert [len(example) for example in EXAMPLES] == [2, 1, 4]
    assert EXAMPLES[2][1]["tool_calls"][0]["id"] == "call_abc123"


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
