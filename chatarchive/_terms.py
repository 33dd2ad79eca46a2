"""The words of a text, as search indexes and finds them, in every script.

Databases split text into words at spaces, and Chinese and Japanese have none
(Korean puts them between phrases, not words): a full-text index of
"为什么PCR会出现非特异性条带" holds one long word, and no query finds it. So
chatarchive splits text itself, the same way on every database and for the
index and the query alike, and the database only stores and matches the terms:

- Text is first put in Unicode's canonical composed form (NFC), so that the
  same text typed or pasted differently ("café" as one character or as "e"
  and a combining accent) gives the same terms.
- Runs of letters and digits of space-separated scripts are words, folded to
  lower case (``casefold``, after NFKC normalization, so that fullwidth "PCR" is "pcr"
  and "Straße" is "strasse") and stemmed in the archive's language
  ("running" is "run" in English; ``simple``: not stemmed) by Snowball's
  algorithms (PyStemmer, their C implementation).
- Runs of Han, kana and Hangul characters become their overlapping pairs of
  characters, as Lucene's CJK analyzer indexes them: "条带" is one term,
  "特异性" is "特异" next to "异性". Most Chinese words, and many Japanese and
  Korean ones, are two characters long; a longer one is found as its pairs in
  a row, a single character as the start of a pair or a run of its own. The
  ``unigram`` setting indexes each character instead.
- Each emoji and pictograph is a term of its own.

A term's place in the text (its position) is kept, so that a phrase matches
its terms in a row. Ranking and snippets come from the same terms, so they
agree between the databases.

A text's terms are found in one pass over it by C (``_speedups.c``, built
with the package where a C compiler is found), from tables of what each
character is and what normalization and case folding make of it (see
``_scan``); a text with a character those tables do not settle on its own,
and every text where the C part is not built, has its terms cut out by array
operations (``_scan.split``), not by steps per word either: indexing is most
of what a write with search on costs. ``Tokenizer.spans``, which snippets
use, splits piece by piece and gives the same terms. A tokenizer is
shared by every thread of a process: the stems it has seen are kept in a
dictionary that threads only add to, and each thread stems with a stemmer of
its own (a Snowball stemmer keeps its state while it works).
"""

from __future__ import annotations

import re
import threading
import unicodedata
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import islice
from types import ModuleType
from typing import Literal

import numpy as np
import Stemmer

from ._exceptions import InvalidArgument
from ._scan import CJK_RANGES, PICTOGRAPH_RANGES, learn_plane, split, tables

_speedups: ModuleType | None
try:
    from . import _speedups as _speedups
except ImportError:  # installed where it could not be compiled: the same terms, found in Python
    _speedups = None
#: Whether a text's terms are found in C (see the module's text).
TERMS_IN_C = _speedups is not None

__all__ = [
    "CJK_MODES",
    "INDEXING_MODES",
    "LANGUAGES",
    "MAX_TERMS",
    "MOST_VECTOR_SCAN",
    "TERMS_IN_C",
    "Indexing",
    "Phrase",
    "SearchSettings",
    "StoredTerms",
    "Tokenizer",
    "TsvectorText",
    "has_terms",
    "normalized",
]

Indexing = Literal["sync", "deferred", "off"]
CjkMode = Literal["bigram", "unigram"]

#: How messages become searchable: ``sync`` in the transaction that writes
#: them, ``deferred`` by ``index_pending`` (``chatarchive db index``) after it,
#: ``off`` not at all (search refuses).
INDEXING_MODES: tuple[Indexing, ...] = ("sync", "deferred", "off")
#: How runs of Chinese, Japanese and Korean characters are split.
CJK_MODES: tuple[CjkMode, ...] = ("bigram", "unigram")
#: The languages whose words can be stemmed (Snowball's), and ``simple``: none.
LANGUAGES: tuple[str, ...] = ("simple", *sorted(set(Stemmer.algorithms()) - {"porter"}))

#: At most this many terms of a text are indexed (and searched): PostgreSQL
#: keeps word positions up to 16,383. That is some 80,000 characters of
#: English, or 16,000 of Chinese.
MAX_TERMS = 16_383
#: A word longer than this many characters (a hash, a base64 blob) is not a
#: term: PostgreSQL refuses terms of more than 2 kB.
MAX_TERM_CHARACTERS = 128
#: The widest scan of an HNSW index (pgvector's largest ``hnsw.ef_search``).
MOST_VECTOR_SCAN = 1000
#: A term's positions counted for ranking (PostgreSQL keeps 256 per term).
_MAX_POSITIONS = 256
#: How many words' stems a tokenizer keeps at most (then it starts again).
_STEMS_KEPT = 200_000

if _speedups is not None:
    _speedups.configure(*tables(), MAX_TERMS, MAX_TERM_CHARACTERS, _MAX_POSITIONS)

# Letters and digits (``\w`` without the underscore), and pictographs.
_PIECE = re.compile(
    "[^\\W_]+|[" + "".join(f"{chr(low)}-{chr(high)}" for low, high in PICTOGRAPH_RANGES) + "]"
)
_CJK_CLASS = "".join(f"{chr(low)}-{chr(high)}" for low, high in CJK_RANGES)
_CJK_RUN = re.compile(f"[{_CJK_CLASS}]+")
_HAS_CJK = re.compile(f"[{_CJK_CLASS}]")
_NOT_WORD = re.compile(r"[\W_]+")
_ASCII_WORD = re.compile(r"[a-z0-9]+")
# Two characters in a row, at every position.
_PAIRS = re.compile(r"(?=(..))", re.DOTALL)


@dataclass(frozen=True)
class SearchSettings:
    """An archive's search configuration.

    Attributes:
        language: the language whose word endings are stemmed away in
            space-separated text (``simple``: none); a word always finds
            itself, whatever the language.
        cjk: how runs of Chinese, Japanese and Korean characters are indexed:
            ``bigram`` (each pair of characters in a row: a two-character word is
            one term; compact and fast) or ``unigram`` (each character: any
            sequence is found exactly, with a larger index).
        indexing: ``sync`` (a write makes its messages searchable before it
            commits), ``deferred`` (writes mark their chats, and
            ``index_pending`` indexes them after), or ``off``.
        embedder: the name of the model whose vectors of each message the
            archive keeps for search by meaning (``None``: none), written by
            the same ``indexing``; ``dimension``: how many numbers they have.
        vector_scan: how many candidates a search by meaning keeps as it
            scans the vectors' HNSW index on PostgreSQL (pgvector's
            ``hnsw.ef_search``, 1 to ``MOST_VECTOR_SCAN``); ``None``: four
            times the candidates the search ranks (400). A narrower scan is
            faster and finds fewer of the exact nearest vectors; how many it
            finds depends on the model's vectors (``chatarchive bench --search``
            measures it). SQLite compares every vector: there it changes nothing.
    """

    language: str = "english"
    cjk: CjkMode = "bigram"
    indexing: Indexing = "sync"
    embedder: str | None = None
    dimension: int | None = None
    vector_scan: int | None = None

    def __post_init__(self) -> None:
        if self.vector_scan is not None and (
            type(self.vector_scan) is not int or not 1 <= self.vector_scan <= MOST_VECTOR_SCAN
        ):
            raise InvalidArgument(
                f"vector_scan must be a whole number from 1 to {MOST_VECTOR_SCAN:,}, "
                f"not {self.vector_scan!r}",
                argument="vector_scan",
            )
        for name, value, allowed in (
            ("language", self.language, LANGUAGES),
            ("cjk", self.cjk, CJK_MODES),
            ("indexing", self.indexing, INDEXING_MODES),
        ):
            if value not in allowed:
                raise InvalidArgument(
                    f"{name} must be one of {', '.join(allowed)}, not {value!r}", argument=name
                )

    @property
    def tokenizer(self) -> Tokenizer:
        return Tokenizer.of(self.language, self.cjk)


@dataclass(frozen=True)
class Phrase:
    """A query term: terms that must follow one another; ``prefix``: the last
    matches any term it begins (a single CJK character, in ``bigram`` mode)."""

    terms: tuple[str, ...]
    prefix: bool = False


def has_terms(text: str) -> bool:
    """Whether ``text`` holds anything search indexes (a letter, a digit, a pictograph)."""
    return _PIECE.search(text) is not None


class Tokenizer:
    """Splits text into terms for one language and CJK mode; safe to share
    between threads."""

    def __init__(self, language: str, cjk: CjkMode) -> None:
        self.language = language
        self.cjk = cjk
        #: Stems of the words seen, most words of a language being few. Threads
        #: only add to it; when it is full, it is replaced, never emptied in place.
        self._stems: dict[str, str] = {}
        self._local = threading.local()

    @staticmethod
    @cache
    def of(language: str, cjk: CjkMode) -> Tokenizer:
        return Tokenizer(language, cjk)

    def terms(self, text: str) -> list[str]:
        """The terms of ``text``, in order (the terms of ``spans``)."""
        if _speedups is not None:
            learn_plane()
            found: list[str] | None = _speedups.terms(
                normalized(text),
                self.cjk == "bigram",
                None if self.language == "simple" else self._stems,
                self._stemmed,
            )
            if found is not None:
                return found
        return self._found_in_python(text)

    def _found_in_python(self, text: str) -> list[str]:
        """``terms``, by regular expressions and array operations."""
        if text.isascii():  # most text: words alone, found by one regular expression
            words = _ASCII_WORD.findall(text.lower())
            return self._stems_of(_short(words)[:MAX_TERMS])
        text = normalized(text)
        found = split(text, pairs=self.cjk == "bigram")
        if found is None:  # a character whose terms depend on its neighbours
            return [term for term, _, _ in self.spans(text)]
        words = found.words
        if found.is_word is None:
            return self._stems_of(_short(list(filter(None, words)))[:MAX_TERMS])
        terms = np.empty(len(found.is_word), object)
        terms[~found.is_word] = found.others
        if words and (min(map(len, words)) == 0 or max(map(len, words)) > MAX_TERM_CHARACTERS):
            # A word that normalization emptied, or too long to be a term: not one.
            valid = np.array([0 < len(word) <= MAX_TERM_CHARACTERS for word in words], np.bool_)
            terms[found.is_word] = self._stems_of(
                [w if ok else "" for w, ok in zip(words, valid, strict=True)]
            )
            keep = np.ones(len(terms), np.bool_)
            keep[np.flatnonzero(found.is_word)[~valid]] = False
            terms = terms[keep]
        else:
            terms[found.is_word] = self._stems_of(words)
        listed: list[str] = terms[:MAX_TERMS].tolist()
        return listed

    def spans(self, text: str) -> Iterator[tuple[str, int, int]]:
        """Each term of ``text`` (in NFC, as ``terms`` takes it: see
        ``normalized``) with where it is in it (start and end offsets), in order."""
        count = 0
        for match in _PIECE.finditer(text):
            piece, start = match.group(), match.start()
            if not piece[0].isalnum():  # a pictograph
                yield piece, start, start + 1
                count += 1
                if count == MAX_TERMS:
                    return
                continue
            if not _HAS_CJK.search(piece):
                pieces: Iterator[tuple[str, int, bool]] = iter(((piece, start, False),))
            else:
                pieces = _by_script(piece, start)
            for part, offset, cjk in pieces:
                for term, begin, end in self._terms_of(part, offset, cjk):
                    yield term, begin, end
                    count += 1
                    if count == MAX_TERMS:
                        return

    def _stems_of(self, words: list[str]) -> list[str]:
        stems = self._stems
        try:
            return list(map(stems.__getitem__, words))
        except KeyError:
            pass
        missing = list({word for word in words if word not in stems})
        found = dict(zip(missing, self._stem(missing), strict=True))
        # The stems of the words already seen are in ``stems``, which no thread empties.
        stemmed = [found[word] if word in found else stems[word] for word in words]
        if len(stems) + len(found) > _STEMS_KEPT:
            self._stems = found  # full: start again from these
        else:
            stems.update(found)
        return stemmed

    def _stemmed(self, words: list[str]) -> dict[str, str]:
        """The stems of ``words``, which the tokenizer then keeps."""
        return dict(zip(words, self._stems_of(words), strict=True))

    def _stem(self, words: list[str]) -> list[str]:
        """The stems of ``words``, by this thread's own stemmer."""
        if self.language == "simple":
            return words
        stemmer: Stemmer.Stemmer | None = getattr(self._local, "stemmer", None)
        if stemmer is None:
            # No cache of its own: the tokenizer keeps the stems.
            stemmer = self._local.stemmer = Stemmer.Stemmer(self.language, 0)
        stems: list[str] = stemmer.stemWords(words)
        return stems

    def _pairs(self, run: str) -> list[str]:
        """The terms of a run of CJK letters: its pairs (or characters)."""
        characters = unicodedata.normalize("NFKC", run).casefold()
        if len(characters) != len(run):  # normalization joined or split characters: index them as given
            characters = run.casefold()
        if self.cjk == "unigram" or len(characters) == 1:
            return list(characters)
        return _PAIRS.findall(characters)

    def phrase(self, words: str) -> Phrase | None:
        """A query's word or quoted phrase as terms in a row (``None``: no term in it)."""
        terms = tuple(self.terms(words))
        if not terms:
            return None
        last = list(_PIECE.finditer(normalized(words)))[-1].group()
        single = self.cjk == "bigram" and len(last) >= 1 and _CJK_RUN.fullmatch(last[-1]) is not None
        # A lone CJK character at the end of the query: also the first of a pair.
        alone = single and (len(last) == 1 or not _CJK_RUN.fullmatch(last[-2]))
        return Phrase(terms, prefix=alone)

    def _terms_of(self, part: str, offset: int, cjk: bool) -> Iterator[tuple[str, int, int]]:
        if not cjk:
            # NFKC may bring in other characters ("⑴" is "(1)"): only letters and digits stay.
            term = _NOT_WORD.sub("", unicodedata.normalize("NFKC", part).casefold())
            if term and len(term) <= MAX_TERM_CHARACTERS:
                yield self._stems_of([term])[0], offset, offset + len(part)
            return
        for index, term in enumerate(self._pairs(part)):
            yield term, offset + index, offset + index + len(term)


def normalized(text: str) -> str:
    """``text`` in Unicode's canonical composed form (NFC), as terms are taken from it."""
    return text if unicodedata.is_normalized("NFC", text) else unicodedata.normalize("NFC", text)


def _short(words: list[str]) -> list[str]:
    """``words`` but those too long to be terms (a hash, a base64 blob)."""
    if words and max(map(len, words)) > MAX_TERM_CHARACTERS:
        return [word for word in words if len(word) <= MAX_TERM_CHARACTERS]
    return words


def _by_script(piece: str, start: int) -> Iterator[tuple[str, int, bool]]:
    """The runs of CJK and of other characters of ``piece``, in order."""
    at = 0
    for run in _CJK_RUN.finditer(piece):
        if run.start() > at:
            yield piece[at : run.start()], start + at, False
        yield run.group(), start + run.start(), True
        at = run.end()
    if at < len(piece):
        yield piece[at:], start + at, False


# -- ranking and snippets --------------------------------------------------------------------

#: BM25's constants: how fast repeated terms stop counting, how much a long
#: text is penalized, and the length (in terms) of a typical message.
_K1, _B, _TYPICAL_LENGTH = 1.2, 0.75, 64.0


def occurrences(phrase: Phrase, terms: StoredTerms) -> list[int]:
    """Where ``phrase`` starts among a text's terms."""
    *head, last = phrase.terms
    lasts = terms.starting_with(last) if phrase.prefix else terms.at(last)
    if not head:
        return lasts[:_MAX_POSITIONS]
    starts = set(terms.at(head[0]))
    for offset, term in enumerate(head[1:], 1):
        starts &= {p - offset for p in terms.at(term)}
    ends = {p - len(head) for p in lasts}
    return sorted(starts & ends)[:_MAX_POSITIONS]


def positions_of(terms: Sequence[str], *, start: int = 0) -> dict[str, list[int]]:
    """Each term's positions among ``terms``, counted from ``start`` (at most
    the first 256 of each, as PostgreSQL keeps them)."""
    found: defaultdict[str, list[int]] = defaultdict(list)
    for position, term in enumerate(terms, start):
        found[term].append(position)
    if len(terms) > _MAX_POSITIONS:
        for term, places in found.items():
            if len(places) > _MAX_POSITIONS:
                found[term] = places[:_MAX_POSITIONS]
    return found


class StoredTerms:
    """A message's terms as the index holds them: where each one is, and how
    many different terms the text has (its length, for ranking)."""

    length: int

    def at(self, term: str) -> list[int]:
        """The positions of ``term``, ascending."""
        raise NotImplementedError

    def starting_with(self, prefix: str) -> list[int]:
        """The positions of the terms that begin with ``prefix``, ascending."""
        raise NotImplementedError

    @staticmethod
    def of(terms: Sequence[str]) -> StoredTerms:
        """The stored terms of a text whose terms are ``terms``, in order."""
        return _TermList(positions_of(terms))

    def matched(self, phrases: Sequence[Phrase]) -> set[int]:
        """The positions of the terms that ``phrases`` match."""
        found: set[int] = set()
        for phrase in phrases:
            for start in occurrences(phrase, self):
                found.update(range(start, start + len(phrase.terms)))
        return found


class _TermList(StoredTerms):
    def __init__(self, positions: dict[str, list[int]]) -> None:
        self.positions = positions
        self.length = len(positions)

    def at(self, term: str) -> list[int]:
        return self.positions.get(term, [])

    def starting_with(self, prefix: str) -> list[int]:
        return sorted(p for term, found in self.positions.items() if term.startswith(prefix) for p in found)


class TsvectorText(StoredTerms):
    """A ``tsvector`` as PostgreSQL writes it (``'term':1,3 'other':2``),
    read only where a query looks (positions from 1 there, from 0 here)."""

    def __init__(self, text: str, length: int) -> None:
        self.text = text
        self.length = length

    def at(self, term: str) -> list[int]:
        key = f"'{term}':"
        found = self.text.find(key)
        if found < 0 or (found and self.text[found - 1] != " "):
            return []
        start = found + len(key)
        stop = self.text.find(" ", start)
        return [int(p) - 1 for p in self.text[start : None if stop < 0 else stop].split(",")]

    def starting_with(self, prefix: str) -> list[int]:
        pattern = re.compile(f"(?:^| )'{re.escape(prefix)}[^']*':([0-9,]+)")
        return sorted(int(p) - 1 for places in pattern.findall(self.text) for p in places.split(","))


def rank(groups: Sequence[Sequence[Phrase]], terms: StoredTerms) -> float:
    """How well a text (its ``terms``) matches a query: BM25's saturation and
    length norm (the length: how many different terms the text has) of each
    group's best phrase, summed (without BM25's rarity weights, which need
    counts over the whole archive). Rounded, so that both databases order
    equal texts alike."""
    norm = _K1 * (1 - _B + _B * terms.length / _TYPICAL_LENGTH)
    score = 0.0
    for group in groups:
        frequency = max(len(occurrences(phrase, terms)) for phrase in group)
        score += frequency * (_K1 + 1) / (frequency + norm)
    return round(score, 9)


#: A snippet shows this many terms around the first match.
SNIPPET_TERMS = 24


def snippet(
    tokenizer: Tokenizer,
    text: str,
    matched: set[int],
    marks: tuple[str, str],
    *,
    before: int = 6,
) -> str:
    """The part of ``text`` around its first matched term (``matched``: their
    positions), with every matched term in it marked, and ``…`` where text is
    left out. Only the terms up to the end of the part shown are split. The
    text is shown in NFC, as its terms were taken."""
    text = normalized(text)
    first = min(matched, default=0)
    low = max(0, first - before)
    spans = list(islice(tokenizer.spans(text), low + SNIPPET_TERMS + 1))
    if not spans:
        return text[:200]
    more = len(spans) > low + SNIPPET_TERMS  # terms after the part shown
    high = min(len(spans), low + SNIPPET_TERMS)
    low = max(0, min(low, high - SNIPPET_TERMS))
    start = 0 if low == 0 else spans[low][1]
    end = spans[high - 1][2] if more else len(text)
    # The marked character ranges, overlapping pairs joined.
    ranges: list[list[int]] = []
    for index in sorted(matched):
        if not low <= index < high:
            continue
        begin, finish = spans[index][1], spans[index][2]
        if ranges and begin <= ranges[-1][1]:
            ranges[-1][1] = max(ranges[-1][1], finish)
        else:
            ranges.append([begin, finish])
    out = ["…" if start > 0 else ""]
    at = start
    for begin, finish in ranges:
        out += [text[at:begin], marks[0], text[begin:finish], marks[1]]
        at = finish
    out += [text[at:end], "…" if end < len(text) else ""]
    return "".join(out).strip()


def tsvector_literal(terms: Sequence[str]) -> str:
    """``terms`` (with their positions) as PostgreSQL's ``tsvector`` input."""
    if _speedups is not None:
        literal: str = _speedups.tsvector_literal(terms if isinstance(terms, list) else list(terms))
        return literal
    return _tsvector_literal_in_python(terms)


def _tsvector_literal_in_python(terms: Sequence[str]) -> str:
    # Terms hold letters and digits only: nothing to escape.
    places: dict[str, list[str]] = {}
    for position, term in zip(_POSITION_TEXTS, terms, strict=False):
        found = places.get(term)
        if found is None:
            places[term] = [position]
        elif len(found) < _MAX_POSITIONS:
            found.append(position)
    return " ".join([f"'{term}':{','.join(found)}" for term, found in places.items()])


# Positions from 1, as tsvector input writes them.
_POSITION_TEXTS = tuple(str(position) for position in range(1, MAX_TERMS + 1))
