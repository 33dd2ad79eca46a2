"""A text's search terms and their ``tsvector`` input, in C (see ``_speedups.c``)."""

from collections.abc import Callable

import numpy as np
import numpy.typing as npt

def configure(
    kinds: npt.NDArray[np.uint8],
    known: npt.NDArray[np.bool_],
    folds: npt.NDArray[np.uint32],
    fold_strings: dict[int, str],
    max_terms: int,
    max_characters: int,
    max_positions: int,
    /,
) -> None: ...
def terms(
    text: str, pairs: bool, stems: dict[str, str] | None, stem: Callable[[list[str]], dict[str, str]], /
) -> list[str] | None: ...
def tsvector_literal(terms: list[str], /) -> str: ...
