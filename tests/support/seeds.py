"""The examples of the seed document the project was made from."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from chatarchive import ChatDocument

SEED = Path(__file__).parent.parent / "data" / "seed_chat_data_structure.txt"


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


def without_filled_timestamps(dumped: dict[str, Any], original: ChatDocument) -> dict[str, Any]:
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
