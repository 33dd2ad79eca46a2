"""A text's words, CJK terms and pictographs, cut out of the whole text at once.

Python's regular expressions look up the Unicode category of each character
they try (some 30 ns a character), and splitting a text piece by piece costs
a few calls per word: together most of what indexing a long message cost.
Here each character's kind comes from a table (one numpy lookup for the whole
text); the words, the pairs of CJK characters and the pictographs are cut
out by array operations; and the words are normalized (NFKC) and case-folded
by one call each for the whole text, with a separator between them that
normalization never joins across.

``split`` gives the same terms as ``Tokenizer.spans`` (a property test holds
them to it), except that stemming is left to the tokenizer. A text with a
character whose handling depends on its neighbours (a CJK character that
normalization changes, as halfwidth katakana and Hangul jamo) is left to
``spans``: ``split`` returns ``None``.
"""

from __future__ import annotations

import re
import threading
import unicodedata
from dataclasses import dataclass
from functools import cache

import numpy as np
import numpy.typing as npt

__all__ = ["CJK_RANGES", "PICTOGRAPH_RANGES", "Split", "learn_plane", "split", "tables"]

#: Han (with its extensions and compatibility forms), kana, Hangul.
CJK_RANGES = (
    (0x1100, 0x11FF),
    (0x3040, 0x30FF),
    (0x3130, 0x318F),
    (0x31F0, 0x31FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xA960, 0xA97F),
    (0xAC00, 0xD7FF),
    (0xF900, 0xFAFF),
    (0xFF66, 0xFF9F),
    (0x20000, 0x3134F),
)
#: Emoji and other pictographs: each (but those that are letters or digits) a term.
PICTOGRAPH_RANGES = ((0x2600, 0x27BF), (0x1F000, 0x1FAFF))

# A character's kind, and what else is known of it, as bits.
_WORD, _CJK, _PICTOGRAPH = 1, 2, 4
#: A letter or digit whose case folding brings in a character that is not one.
_FOLDS_ODDLY = 8
#: A CJK character that normalization or case folding changes.
_UNUSUAL = 16

_BMP = 0x10000
_BLOCK_BITS = 8
_kinds = np.zeros(0x110000, np.uint8)
# Which blocks of 256 characters have their kinds filled in: the Basic
# Multilingual Plane all at once when the first text comes, the others as
# texts bring their characters.
_known = np.zeros(0x110000 >> _BLOCK_BITS, np.bool_)
_learning = threading.Lock()

# What each letter or digit becomes in a term on its own (normalized, case
# folded, only letters and digits kept), for the tokenizer written in C
# (``_speedups``): one character (``FOLD_ONE`` and its code), a string of
# ``FOLD_STRINGS`` (``FOLD_STRING``), or 0 where a word's term is not the
# terms of its characters one by one (a character whose decomposition begins
# with a combining mark, or with a character that composes with the one
# before it, as Hangul vowels do), which Python then finds.
FOLD_ONE, FOLD_STRING = 1 << 24, 1 << 25
_folds = np.zeros(0x110000, np.uint32)
FOLD_STRINGS: dict[int, str] = {}

_SEPARATOR_CHARACTER = "\x00"
_NOT_WORD_NOR_SEPARATOR = re.compile(r"[^\w\x00]+|_+")


def _within(code: int, ranges: tuple[tuple[int, int], ...]) -> bool:
    return any(low <= code <= high for low, high in ranges)


def _kind_of(code: int) -> int:
    character = chr(code)
    if character.isalnum():
        if _within(code, CJK_RANGES):
            same = unicodedata.normalize("NFKC", character) == character == character.casefold()
            return _CJK if same else _CJK | _UNUSUAL
        folds_oddly = not all(folded.isalnum() for folded in character.casefold())
        return _WORD | _FOLDS_ODDLY if folds_oddly else _WORD
    return _PICTOGRAPH if _within(code, PICTOGRAPH_RANGES) else 0


@cache
def _composing() -> frozenset[str]:
    """The characters that compose with a character before them (the second
    of a canonical decomposition in two, Hangul's vowels and final consonants)."""
    found = {chr(code) for code in (*range(0x1161, 0x1176), *range(0x11A8, 0x11C3))}
    # Every canonical decomposition in two is of a character below U+20000
    # (above it are ideographs and their compatibility forms, singletons).
    for code in range(0x20000):
        decomposition = unicodedata.decomposition(chr(code))
        if decomposition and decomposition[0] != "<":
            parts = decomposition.split()
            if len(parts) == 2:
                found.add(chr(int(parts[1], 16)))
    return frozenset(found)


def _fold_of(code: int) -> tuple[int, str | None]:
    """A letter's or digit's entry in ``_folds`` (and its string, if not one character)."""
    character = chr(code)
    start = unicodedata.normalize("NFKD", character)[0]
    if unicodedata.combining(start) or start in _composing():
        return 0, None
    folded = "".join(c for c in unicodedata.normalize("NFKC", character).casefold() if c.isalnum())
    return (FOLD_ONE | ord(folded), None) if len(folded) == 1 else (FOLD_STRING, folded)


def _learn(blocks: list[int]) -> None:
    """Fill in the kinds of the characters of ``blocks`` (of 256 characters).
    Readers look only at blocks marked known, and a block is marked after
    its kinds are written."""
    with _learning:
        for block in blocks:
            if _known[block]:
                continue
            start = block << _BLOCK_BITS
            codes = range(start, start + (1 << _BLOCK_BITS))
            kinds = [_kind_of(code) for code in codes]
            for code, kind in zip(codes, kinds, strict=True):
                if kind & _WORD:
                    _folds[code], folded = _fold_of(code)
                    if folded is not None:
                        FOLD_STRINGS[code] = folded
            _kinds[start : start + (1 << _BLOCK_BITS)] = kinds
            _known[block] = True


_BMP_BLOCKS = _BMP >> _BLOCK_BITS


def learn_plane() -> None:
    """Fill in the kinds of the Basic Multilingual Plane's characters, if not yet."""
    # The plane's last block is marked last: once it is known, all of the plane is.
    if not _known[_BMP_BLOCKS - 1]:
        _learn(list(range(_BMP_BLOCKS)))


def tables() -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.bool_], npt.NDArray[np.uint32], dict[int, str]]:
    """The tables the tokenizer in C reads: each character's kind, which blocks
    of 256 characters are filled in, and the folds of letters and digits."""
    return _kinds, _known, _folds, FOLD_STRINGS


def _kinds_of(codes: npt.NDArray[np.uint32]) -> npt.NDArray[np.uint8]:
    learn_plane()
    if codes.max() >= _BMP:
        blocks = codes[codes >= _BMP] >> _BLOCK_BITS
        unknown = blocks[~_known[blocks]]
        if len(unknown):
            _learn(np.unique(unknown).tolist())
    return _kinds.take(codes)


@dataclass(frozen=True)
class Split:
    """A text's terms before stemming: ``words`` (normalized and folded, one
    per run of letters and digits: empty or too long ones not taken out),
    ``others`` (CJK pairs or characters, and pictographs), and for each term
    in the text's order whether it is a word (``None``: all are)."""

    words: list[str]
    others: list[str]
    is_word: npt.NDArray[np.bool_] | None


def split(text: str, *, pairs: bool) -> Split | None:
    """The terms of ``text`` (in NFC), CJK runs as their pairs of characters
    (``pairs``) or as characters; ``None`` for a text that holds a character
    that only ``Tokenizer.spans`` handles."""
    codes = np.frombuffer(text.encode("utf-32-le"), np.uint32)
    flags = _kinds_of(codes)
    present = int(np.bitwise_or.reduce(flags))
    if present & _UNUSUAL:
        return None
    if not present & (_CJK | _PICTOGRAPH):
        # Words alone: every character but letters and digits a separator
        # (runs of them make empty words, left out).
        words = _words(np.where(flags & _WORD, codes, 0), present)
        return Split(list(filter(None, words)), [], None)
    word = (flags & _WORD).astype(np.bool_)
    after_word = np.empty_like(word)
    after_word[0] = False
    after_word[1:] = word[:-1]
    starts = word & ~after_word
    runs = int(np.count_nonzero(starts))
    # Each run of letters and digits, and one separator after it: a word per run.
    words = _words(np.where(word, codes, 0)[word | after_word], present)[:runs] if runs else []
    cjk = (flags & _CJK).astype(np.bool_)
    picture = (flags & _PICTOGRAPH).astype(np.bool_)
    if pairs:
        next_cjk = np.empty_like(cjk)
        next_cjk[-1] = False
        next_cjk[:-1] = cjk[1:]
        after_cjk = np.empty_like(cjk)
        after_cjk[0] = False
        after_cjk[1:] = cjk[:-1]
        pair = cjk & next_cjk
        single = (cjk & ~after_cjk & ~next_cjk) | picture
    else:
        pair = np.zeros_like(cjk)
        single = cjk | picture
    # Each pair as its two characters and a separator, each single character and a separator.
    width = pair * 3 + single * 2
    ends = np.cumsum(width)
    offsets = ends - width
    buffer = np.zeros(int(ends[-1]), np.uint32)
    taken = pair | single
    buffer[offsets[taken]] = codes[taken]
    second = np.flatnonzero(pair)
    buffer[offsets[second] + 1] = codes[second + 1]
    others = buffer.tobytes().decode("utf-32-le").split(_SEPARATOR_CHARACTER)[:-1]
    return Split(words, others, word[starts | taken])


def _words(kept: npt.NDArray[np.uint32], present: int) -> list[str]:
    """The words of ``kept``: letters and digits with separators (0) between
    them, normalized (NFKC) and case-folded, split at the separators."""
    joined = kept.tobytes().decode("utf-32-le")
    clean = unicodedata.is_normalized("NFKC", joined)
    if not clean:  # NFKC changes no separator, and joins nothing across one
        joined = unicodedata.normalize("NFKC", joined)
    folded = joined.casefold()
    if not clean or present & _FOLDS_ODDLY:
        # Only letters and digits stay in a word ("⑴" is "(1)", "İ" is "i̇").
        folded = _NOT_WORD_NOR_SEPARATOR.sub("", folded)
    return folded.split(_SEPARATOR_CHARACTER)
