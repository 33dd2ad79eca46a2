"""A small deterministic embedder for the tests: words of one meaning (a
hand-made list of synonyms) share a dimension, every other word lands in
one of the rest by its hash. Texts of the same meaning come out near each
other although they share no word, which keyword search cannot see."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from threading import Lock

from chatarchive import Embedder

#: Words of one meaning, by dimension.
MEANINGS = (
    ("car", "cars", "automobile", "automobiles", "vehicle", "sedan"),
    ("dog", "dogs", "puppy", "puppies", "hound"),
    ("cat", "cats", "kitten", "kittens"),
    ("pizza", "pasta", "lasagna"),
    ("pcr", "primer", "primers", "annealing", "polymerase"),
)
DIMENSION = 32
_WORD = re.compile(r"\w+")
_MEANING = {word: index for index, words in enumerate(MEANINGS) for word in words}


def vector_of(text: str) -> list[float]:
    vector = [0.0] * DIMENSION
    for word in _WORD.findall(text.lower()):
        if word in _MEANING:
            vector[_MEANING[word]] += 1.0
        else:
            bucket = len(MEANINGS) + int(hashlib.sha256(word.encode()).hexdigest(), 16) % (
                DIMENSION - len(MEANINGS)
            )
            vector[bucket] += 0.05
    return vector


class CountingEmbedder:
    """The embedding function, counting the texts it was given (from any thread)."""

    def __init__(self) -> None:
        self.texts: list[str] = []
        self._lock = Lock()

    def __call__(self, texts: list[str]) -> Sequence[Sequence[float]]:
        with self._lock:
            self.texts.extend(texts)
        return [vector_of(text) for text in texts]


def meanings(name: str = "meanings", *, function: CountingEmbedder | None = None, **options: int) -> Embedder:
    """The test embedder, under ``name``."""
    return Embedder(name, DIMENSION, function or CountingEmbedder(), **options)
