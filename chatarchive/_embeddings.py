"""Embedders: the models that turn messages' text into vectors, and how the
archive finds the one it was configured with.

chatarchive ships no model and downloads nothing. An application gives the
archive an ``Embedder`` (a name, a dimension and any callable from a list of
texts to a list of vectors: OpenAI's embeddings, sentence-transformers,
model2vec...), with ``configure_search(embedder=...)``, which records the name
and dimension in the archive, or ``register_embedder`` in each process that
writes or searches. A process that was given none looks the archive's embedder
up by name among the ``chatarchive.embedders`` entry points of the installed
packages.

What is embedded is a message's search text (its string content, or its text
parts one per line, as keyword search indexes it), cut to the embedder's
``max_chars``; tool calls' arguments and non-text parts are not. Vectors are
stored scaled to length 1, so that cosine distance is the same on every
database.
"""

from __future__ import annotations

import math
import re
import sys
import threading
from array import array
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from operator import mul
from typing import Any

from ._exceptions import EmbedderError, InvalidArgument

__all__ = [
    "ENTRY_POINT_GROUP",
    "MOST_DIMENSIONS",
    "Embedder",
    "cosine_distance",
    "embedder_named",
    "pack",
    "register_embedder",
    "required_embedder_named",
    "unpack",
]

#: The entry point group where installed packages offer embedders by name.
ENTRY_POINT_GROUP = "chatarchive.embedders"

#: The most dimensions a vector may have: what pgvector's HNSW index takes of
#: half-precision vectors (OpenAI's largest embedding model gives 3,072).
MOST_DIMENSIONS = 4000

EmbedFunction = Callable[[list[str]], Sequence[Sequence[float]]]

_SPACE = re.compile(r"\s")
#: What an embedder's name may hold: letters, digits and ``_ .:/@+-`` (as
#: model names have them), so that it can stand in SQL as it is.
_NAME = re.compile(r"[\w.:/@+-][\w .:/@+-]*")


@dataclass(frozen=True)
class Embedder:
    """A model that turns texts into vectors of ``dimension`` numbers.

    Attributes:
        name: the model's name, stored with each vector (``embeddings.model``):
            vectors of another name are never compared with this model's.
        dimension: how many numbers each vector has (at most 4,000).
        embed: any callable from a list of texts to one vector per text, in
            order. It is called from any thread the archive is used from.
        max_chars: a text longer than this is cut (at a space near the end,
            if there is one) before it is embedded.
        batch_size: at most this many texts per call of ``embed``.

    Example:
        >>> from chatarchive import Embedder
        >>> letters = Embedder("letters", 2, lambda texts: [[t.count("a"), t.count("b")] for t in texts])
        >>> letters.vectors(["aab"])
        [[0.894427..., 0.447213...]]
    """

    name: str
    dimension: int
    embed: EmbedFunction
    max_chars: int = 8000
    batch_size: int = 64

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or len(self.name) > 255 or not _NAME.fullmatch(self.name):
            raise InvalidArgument(
                "an embedder's name must be 1-255 letters, digits, spaces and _.:/@+- (not beginning with "
                f"a space), not {self.name!r}",
                argument="name",
            )
        for name, value, most in (
            ("dimension", self.dimension, MOST_DIMENSIONS),
            ("max_chars", self.max_chars, None),
            ("batch_size", self.batch_size, None),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise InvalidArgument(f"{name} must be a positive integer, not {value!r}", argument=name)
            if most is not None and value > most:
                raise InvalidArgument(f"{name} must be at most {most:,}, not {value:,}", argument=name)
        if not callable(self.embed):
            raise InvalidArgument(
                "embed must be a callable from a list of texts to vectors", argument="embed"
            )

    def cut(self, text: str) -> str:
        """``text`` as it is embedded: at most ``max_chars`` characters, cut at
        a space in its last tenth when there is one."""
        if len(text) <= self.max_chars:
            return text
        head = text[: self.max_chars]
        space = max(
            (m.start() for m in _SPACE.finditer(head, self.max_chars - self.max_chars // 10)), default=-1
        )
        return head[:space] if space > 0 else head

    def vectors(self, texts: Sequence[str]) -> list[list[float]]:
        """The vectors of ``texts`` (cut to ``max_chars``), each scaled to length 1.

        Raises:
            EmbedderError: the model failed, or gave a wrong number of vectors,
                vectors of another dimension, or numbers that are not finite.
        """
        found: list[list[float]] = []
        for start in range(0, len(texts), self.batch_size):
            batch = [self.cut(text) for text in texts[start : start + self.batch_size]]
            try:
                vectors = list(self.embed(batch))
            except Exception as exc:
                raise EmbedderError(f"embedder {self.name!r} failed: {type(exc).__name__}: {exc}") from exc
            if len(vectors) != len(batch):
                raise EmbedderError(
                    f"embedder {self.name!r} gave {len(vectors)} vectors for {len(batch)} texts"
                )
            found.extend(self._unit_length(vector) for vector in vectors)
        return found

    def _unit_length(self, vector: Sequence[float]) -> list[float]:
        try:
            numbers = [float(x) for x in vector]
        except (TypeError, ValueError) as exc:
            raise EmbedderError(f"embedder {self.name!r} gave a vector that is not numbers: {exc}") from None
        if len(numbers) != self.dimension:
            raise EmbedderError(
                f"embedder {self.name!r} gave a vector of {len(numbers)} numbers; "
                f"its dimension is {self.dimension}"
            )
        norm = math.sqrt(math.fsum(x * x for x in numbers))
        if not math.isfinite(norm):
            raise EmbedderError(f"embedder {self.name!r} gave a vector with numbers that are not finite")
        # A text without meaning to the model (empty, say) may come back as zeros: kept, it matches nothing.
        return numbers if norm == 0 else [x / norm for x in numbers]


_REGISTERED: dict[str, Embedder] = {}
_LOCK = threading.Lock()


def register_embedder(embedder: Embedder) -> None:
    """Make ``embedder`` the one this process uses for archives configured
    with its name (``configure_search(embedder=...)`` registers it too)."""
    if not isinstance(embedder, Embedder):
        raise InvalidArgument(
            f"embedder must be an Embedder, not {type(embedder).__name__}", argument="embedder"
        )
    with _LOCK:
        _REGISTERED[embedder.name] = embedder


def embedder_named(name: str) -> Embedder | None:
    """The embedder of ``name``: registered in this process, or offered by an
    installed package's entry point (an ``Embedder``, or a callable returning
    one); ``None`` if neither has it.

    Raises:
        EmbedderError: the entry point did not load, or is no embedder of that name.
    """
    with _LOCK:
        if name in _REGISTERED:
            return _REGISTERED[name]
        found = next((point for point in entry_points(group=ENTRY_POINT_GROUP) if point.name == name), None)
        if found is None:
            return None
        try:
            loaded: Any = found.load()
            embedder = loaded if isinstance(loaded, Embedder) else loaded()
        except Exception as exc:
            raise EmbedderError(
                f"the entry point of embedder {name!r} failed: {type(exc).__name__}: {exc}"
            ) from exc
        if not isinstance(embedder, Embedder) or embedder.name != name:
            raise EmbedderError(f"the entry point {found.value!r} gives no Embedder named {name!r}")
        _REGISTERED[name] = embedder
        return embedder


def required_embedder_named(name: str) -> Embedder:
    """The embedder of ``name`` (see ``embedder_named``).

    Raises:
        EmbedderError: neither this process nor an installed package has it,
            saying how to give it; or its entry point failed.
    """
    found = embedder_named(name)
    if found is None:
        raise EmbedderError(
            f"no embedder named {name!r}: register_embedder(Embedder({name!r}, ...)), "
            f"or install a package that offers it as a {ENTRY_POINT_GROUP!r} entry point"
        )
    return found


def pack(vector: Sequence[float]) -> bytes:
    """A vector as SQLite stores it: 32-bit floats, little-endian (as sqlite-vec reads them)."""
    packed = array("f", vector)
    if sys.byteorder != "little":
        packed.byteswap()
    return packed.tobytes()


def unpack(blob: bytes) -> array[float]:
    """The vector ``pack`` gave ``blob`` for."""
    vector = array("f")
    vector.frombytes(blob)
    if sys.byteorder != "little":
        vector.byteswap()
    return vector


def cosine_distance(a: bytes | None, b: bytes | None) -> float | None:
    """The cosine distance of two packed vectors (SQLite's ``vec_distance_cosine``
    where sqlite-vec cannot be loaded); ``None`` if either is missing or empty."""
    if not a or not b:
        return None
    x, y = unpack(a), unpack(b)
    if len(x) != len(y):
        return None
    norms = math.sqrt(sum(map(mul, x, x)) * sum(map(mul, y, y)))
    if norms == 0:
        return None
    distance: float = 1.0 - sum(map(mul, x, y)) / norms
    return distance
