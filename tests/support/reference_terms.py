"""The search terms of a text as the piece-by-piece tokenizer found them: the reference.

A frozen copy of the tokenizer that stored archives were indexed with: each run of
letters and digits (``[^\\W_]+``) or pictograph taken in turn, split into its CJK
and other runs, each normalized (NFKC), case-folded and stemmed by Snowball's
pure-Python stemmers, one word at a time. The archive's tokenizer must give the
same terms for every text in NFC (it puts every text in NFC first), so that
what was indexed before is found as it was.
"""

from __future__ import annotations

import importlib
import re
import unicodedata
from collections.abc import Callable, Iterator
from functools import cache

__all__ = ["reference_terms"]

MAX_TERMS = 16_383
MAX_TERM_CHARACTERS = 128

_PIECE = re.compile(r"[^\W_]+|[\u2600-\u27bf\U0001f000-\U0001faff]")
_CJK_CLASS = (
    "\u1100-\u11ff\u3040-\u30ff\u3130-\u318f\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff"
    "\ua960-\ua97f\uac00-\ud7ff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
)
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")
_HAS_CJK = re.compile(f"[{_CJK_CLASS}]")
_NOT_WORD = re.compile(r"[\W_]+")


@cache
def _stemmer(language: str) -> Callable[[str], str]:
    """Snowball's pure-Python stemmer (not the C one that ``snowballstemmer.stemmer`` prefers)."""
    if language == "simple":
        return lambda word: word
    module = importlib.import_module(f"snowballstemmer.{language}_stemmer")
    name = "".join(part.capitalize() for part in language.split("_")) + "Stemmer"
    stem: Callable[[str], str] = getattr(module, name)().stemWord
    return stem


def reference_terms(text: str, language: str = "english", cjk: str = "bigram") -> list[str]:
    """The terms of ``text``, found piece by piece."""
    found: list[str] = []
    for term in _terms(text, _stemmer(language), cjk):
        found.append(term)
        if len(found) == MAX_TERMS:
            break
    return found


def _terms(text: str, stem: Callable[[str], str], cjk: str) -> Iterator[str]:
    for match in _PIECE.finditer(text):
        piece = match.group()
        if not piece[0].isalnum():  # a pictograph
            yield piece
            continue
        if not _HAS_CJK.search(piece):
            yield from _word(piece, stem)
            continue
        at = 0
        for run in _CJK_RUN.finditer(piece):
            if run.start() > at:
                yield from _word(piece[at : run.start()], stem)
            yield from _characters(run.group(), cjk)
            at = run.end()
        if at < len(piece):
            yield from _word(piece[at:], stem)


def _word(part: str, stem: Callable[[str], str]) -> Iterator[str]:
    term = _NOT_WORD.sub("", unicodedata.normalize("NFKC", part).casefold())
    if term and len(term) <= MAX_TERM_CHARACTERS:
        yield stem(term)


def _characters(part: str, cjk: str) -> Iterator[str]:
    characters = unicodedata.normalize("NFKC", part).casefold()
    if len(characters) != len(part):
        characters = part.casefold()
    if cjk == "unigram" or len(characters) == 1:
        yield from characters
        return
    for index in range(len(characters) - 1):
        yield characters[index : index + 2]
