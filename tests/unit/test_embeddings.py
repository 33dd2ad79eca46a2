"""Embedders: what the archive asks of a model and checks of what it gives."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from chatarchive import Embedder, EmbedderError, InvalidArgument
from chatarchive._embeddings import cosine_distance, pack, unpack


def constant(texts: list[str]) -> list[list[float]]:
    return [[3.0, 4.0] for _ in texts]


@pytest.mark.parametrize("name", ["", " leading space", "quote'", "semi;colon", "x" * 256, "nul\x00"])
def test_a_name_that_cannot_stand_in_sql_as_it_is_is_refused(name: str) -> None:
    with pytest.raises(InvalidArgument, match="an embedder's name must be"):
        Embedder(name, 2, constant)


@pytest.mark.parametrize(
    "name", ["all-MiniLM-L6-v2", "BAAI/bge-small-en-v1.5", "text-embedding-3-small", "m:1 @x+"]
)
def test_model_names_as_providers_write_them_are_taken(name: str) -> None:
    assert Embedder(name, 2, constant).name == name


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"dimension": 0}, "dimension must be a positive integer"),
        ({"dimension": 4001}, "dimension must be at most 4,000"),
        ({"dimension": True}, "dimension must be a positive integer"),
        ({"max_chars": 0}, "max_chars must be a positive integer"),
        ({"batch_size": 1.5}, "batch_size must be a positive integer"),
        ({"embed": "not callable"}, "embed must be a callable"),
    ],
)
def test_unusable_settings_are_refused(options: dict[str, object], message: str) -> None:
    arguments: dict[str, object] = {"name": "m", "dimension": 2, "embed": constant, **options}
    with pytest.raises(InvalidArgument, match=message):
        Embedder(**arguments)  # type: ignore[arg-type]


def test_vectors_are_scaled_to_length_one_and_asked_for_in_batches() -> None:
    batches: list[int] = []

    def embed(texts: list[str]) -> list[list[float]]:
        batches.append(len(texts))
        return constant(texts)

    vectors = Embedder("m", 2, embed, batch_size=3).vectors(["a"] * 7)
    assert batches == [3, 3, 1]
    assert vectors == [[0.6, 0.8]] * 7


def test_a_zero_vector_is_kept_as_it_is() -> None:
    assert Embedder("m", 2, lambda texts: [[0, 0] for _ in texts]).vectors(["x"]) == [[0.0, 0.0]]


def test_numpy_arrays_are_vectors() -> None:
    numpy = pytest.importorskip("numpy")
    embedder = Embedder("m", 2, lambda texts: numpy.ones((len(texts), 2), dtype=numpy.float32))
    assert embedder.vectors(["a", "b"]) == [[pytest.approx(math.sqrt(0.5))] * 2] * 2


def test_an_infinite_number_is_refused() -> None:
    with pytest.raises(EmbedderError, match="not finite"):
        Embedder("m", 2, lambda texts: [[math.inf, 1.0] for _ in texts]).vectors(["x"])


@pytest.mark.parametrize(
    ("text", "cut"),
    [
        ("short", "short"),
        ("word " * 30, ("word " * 20).rstrip()),  # at the last space within the last tenth
        ("x" * 150, "x" * 100),  # no space near the end: at the limit
    ],
)
def test_long_texts_are_cut_at_a_space_near_the_limit(text: str, cut: str) -> None:
    assert Embedder("m", 2, constant, max_chars=100).cut(text) == cut


@given(st.lists(st.floats(width=32, allow_nan=False, allow_infinity=False), min_size=1, max_size=50))
def test_packed_vectors_come_back_as_32_bit_floats(vector: list[float]) -> None:
    assert list(unpack(pack(vector))) == vector


def test_the_fallback_distance_is_cosine_distance() -> None:
    assert cosine_distance(pack([1.0, 0.0]), pack([0.0, 2.0])) == pytest.approx(1.0)
    assert cosine_distance(pack([1.0, 1.0]), pack([2.0, 2.0])) == pytest.approx(0.0, abs=1e-7)
    assert cosine_distance(pack([1.0, 0.0]), pack([-1.0, 0.0])) == pytest.approx(2.0)
    assert cosine_distance(pack([0.0, 0.0]), pack([1.0, 0.0])) is None
    assert cosine_distance(pack([1.0]), pack([1.0, 0.0])) is None
    assert cosine_distance(None, pack([1.0])) is None
