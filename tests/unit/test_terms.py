"""How text becomes search terms, and how the terms rank and snippet."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import unicodedata
from concurrent.futures import ThreadPoolExecutor

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from chatarchive import SEARCH_LANGUAGES, SearchSettings, _scan, _terms
from chatarchive._backends.postgresql import tsquery
from chatarchive._backends.sqlite import fts5_query
from chatarchive._search import compile_query, parse_query
from chatarchive._terms import (
    MAX_TERMS,
    Phrase,
    StoredTerms,
    Tokenizer,
    TsvectorText,
    normalized,
    rank,
    snippet,
    tsvector_literal,
)
from chatarchive.bench.workload import generate_chats
from tests.support.reference_terms import reference_terms

ENGLISH = Tokenizer.of("english", "bigram")


def stored(text: str) -> StoredTerms:
    return StoredTerms.of(ENGLISH.terms(text))


def phrase(words: str) -> Phrase:
    found = ENGLISH.phrase(words)
    assert found is not None
    return found


@pytest.mark.parametrize(
    ("text", "terms"),
    [
        (
            "为什么PCR会出现非特异性条带？",
            ["为什", "什么", "pcr", "会出", "出现", "现非", "非特", "特异", "异性", "性条", "条带"],
        ),
        ("東京タワー", ["東京", "京タ", "タワ", "ワー"]),
        ("서울에서 만나요", ["서울", "울에", "에서", "만나", "나요"]),
        ("3个", ["3", "个"]),  # a run of one character is its own term
        ("Die Häuser, STRASSE und Straße", ["die", "häuser", "strass", "und", "strass"]),
        ("ＰＣＲ ①", ["pcr", "1"]),  # NFKC: fullwidth letters, circled digits
        ("gel 🧪🧬 ok", ["gel", "🧪", "🧬", "ok"]),
        ("running runs ran", ["run", "run", "ran"]),
        ("snake_case e-mail", ["snake", "case", "e", "mail"]),
        ("", []),
        ("¿?!", []),
    ],
)
def test_text_becomes_terms(text: str, terms: list[str]) -> None:
    assert ENGLISH.terms(text) == terms


def test_a_term_knows_where_it_is_in_the_text() -> None:
    text = "Die Straße 条带"
    assert [(term, text[start:end]) for term, start, end in ENGLISH.spans(text)] == [
        ("die", "Die"),
        ("strass", "Straße"),
        ("条带", "条带"),
    ]


@given(st.text(max_size=200))
@settings(max_examples=300)
def test_the_quick_path_for_plain_text_gives_the_same_terms(text: str) -> None:
    for candidate in (text, text.encode("ascii", "ignore").decode()):
        # spans takes text in NFC, as terms puts it ("A" and a combining grave accent are "À").
        assert ENGLISH.terms(candidate) == [term for term, _, _ in ENGLISH.spans(normalized(candidate))]


def test_terms_hold_only_letters_digits_and_pictographs() -> None:
    # So that neither database's query syntax nor tsvector input ever needs escaping.
    text = "it's a \\back'slash\\ ⑴ ⒜ ﬁ ℌ"
    for term in ENGLISH.terms(text):
        assert all(character.isalnum() for character in term), term


def test_a_text_gives_at_most_max_terms_terms() -> None:
    assert len(ENGLISH.terms("word " * (MAX_TERMS + 5))) == MAX_TERMS
    assert len(ENGLISH.terms("字" * (MAX_TERMS + 5))) == MAX_TERMS
    assert ENGLISH.terms("x" * 200) == []  # longer than any word: a blob, not a term


def test_unigrams_split_every_character() -> None:
    assert Tokenizer.of("simple", "unigram").terms("条带 Running") == ["条", "带", "running"]


@pytest.mark.parametrize(
    ("query", "terms"),
    [
        ("条带", Phrase(("条带",))),
        ("特异性", Phrase(("特异", "异性"))),
        ("带", Phrase(("带",), prefix=True)),
        ("PCR带", Phrase(("pcr", "带"), prefix=True)),
        ("primer dimers", Phrase(("primer", "dimer"))),
    ],
)
def test_a_query_word_is_a_phrase_of_terms(query: str, terms: Phrase) -> None:
    assert ENGLISH.phrase(query) == terms


def test_queries_become_each_databases_syntax() -> None:
    parsed = parse_query('条带 or "primer dimers" 带 -gel')
    assert parsed is not None
    query = compile_query(parsed, ENGLISH)
    assert query is not None
    assert tsquery(query) == "(('条带') | ('primer' <-> 'dimer')) & (('带':*)) & !(('gel'))"
    assert fts5_query(query) == '(("条带" OR "primer dimer") AND ("带" *)) NOT ("gel")'


def test_tsvector_input_lists_each_terms_positions() -> None:
    assert tsvector_literal(["a", "条带", "a"]) == "'a':1,3 '条带':2"
    assert tsvector_literal([]) == ""
    # At most 256 positions of a term, as PostgreSQL keeps them.
    assert tsvector_literal(["a"] * 300 + ["b"]) == "'a':" + ",".join(map(str, range(1, 257))) + " 'b':301"
    assert stored("a b a").length == 2  # different terms


def test_stored_tsvector_text_gives_the_positions_of_the_terms_asked_for() -> None:
    stored_text = TsvectorText("'ab':2 'b':1,4 'bc':3", length=3)
    assert stored_text.at("b") == [0, 3]
    assert stored_text.at("c") == []
    assert stored_text.starting_with("b") == [0, 2, 3]
    assert stored_text.matched([phrase("b")]) == {0, 3}


def test_a_snippet_at_the_end_of_a_text_shows_as_many_terms_before() -> None:
    text = " ".join(f"w{n}" for n in range(100)) + " target."
    cut = snippet(ENGLISH, text, stored(text).matched([phrase("target")]), ("«", "»"))
    assert cut == "…" + " ".join(f"w{n}" for n in range(77, 100)) + " «target»."


def test_rank_grows_with_matches_and_shrinks_with_length() -> None:
    group = [[phrase("gel")]]
    once, twice = rank(group, stored("gel ran")), rank(group, stored("gel ran gel"))
    longer = rank(group, stored("gel " + " ".join(f"word{n}" for n in range(200))))
    assert twice > once > longer > 0
    assert rank(group, stored("nothing here")) == 0


def test_a_snippet_marks_matches_in_the_text_as_written() -> None:
    text = "为什么非特异性条带 an der Straße"
    matched = stored(text).matched([phrase("特异性"), phrase("strasse")])
    assert snippet(ENGLISH, text, matched, ("«", "»")) == "为什么非«特异性»条带 an der «Straße»"
    long = " ".join(f"w{n}" for n in range(100)) + " target " + " ".join(f"v{n}" for n in range(100))
    cut = snippet(ENGLISH, long, stored(long).matched([phrase("target")]), ("«", "»"))
    assert cut.startswith("…w94 ")
    assert "«target»" in cut
    assert cut.endswith("…")


def test_every_language_stems() -> None:
    assert {"english", "german", "simple"} <= set(SEARCH_LANGUAGES)
    for language in SEARCH_LANGUAGES:
        assert SearchSettings(language=language).tokenizer.terms("Running 条带") == [
            *Tokenizer.of(language, "bigram").terms("Running"),
            "条带",
        ]


# -- the same terms as the piece-by-piece reference, from any number of threads ------------

# Characters whose terms need care: accents composed and not, letters that
# normalization or case folding change or expand, CJK that normalization
# changes (halfwidth katakana, Hangul jamo), pictographs in and out of the
# ranges, digits that are pictographs, separators of every kind.
_TRICKY = (
    "aZé\u0301\u0308ßİıﬁ½²µ™⑴➀①ＰＣＲｶﾞﾟ\u1100\u1161\u11a8가各豈\uf900\u3131"
    "条带東京タワー서울🧪😀✅🄐🆐\u00a0\u3000_-—’“.,，。、\x00\n\t\u0301\u0900हिन्दी\ufdfa"
)
tricky_text = st.text(
    alphabet=st.one_of(st.characters(codec="utf-8"), st.sampled_from(_TRICKY)), max_size=300
)


def workload_texts(chats: int) -> list[str]:
    """The texts of the bench's workload: long, in every script."""
    texts = []
    for doc in generate_chats(chats, 20, seed=11):
        for message in doc["messages"]:
            content = message["content"]
            if isinstance(content, str):
                texts.append(content)
            elif isinstance(content, list):
                texts.append("\n".join(part["text"] for part in content if part["type"] == "text"))
    return texts


@given(
    tricky_text,
    st.sampled_from(["english", "german", "russian", "simple"]),
    st.sampled_from(["bigram", "unigram"]),
)
@settings(max_examples=400)
def test_terms_are_the_piece_by_piece_references(text: str, language: str, cjk: str) -> None:
    expected = reference_terms(unicodedata.normalize("NFC", text), language, cjk)
    tokenizer = Tokenizer.of(language, cjk)
    assert tokenizer.terms(text) == expected
    assert tokenizer._found_in_python(text) == expected  # where the tokenizer in C is not built


def test_the_workloads_texts_have_the_references_terms() -> None:
    texts = workload_texts(40)
    assert sum(not text.isascii() for text in texts) > len(texts) // 2
    for text in texts:
        expected = reference_terms(unicodedata.normalize("NFC", text))
        assert ENGLISH.terms(text) == expected
        assert ENGLISH._found_in_python(text) == expected


def test_the_tokenizer_in_c_is_built() -> None:
    # A checkout installed as the README says compiles it (hatch_build.py).
    assert _terms._speedups is not None


def test_the_tokenizer_in_c_takes_the_workloads_texts() -> None:
    speedups = _terms._speedups
    assert speedups is not None
    texts = workload_texts(10)
    taken = [speedups.terms(normalized(text), True, {}, ENGLISH._stemmed) is not None for text in texts]
    assert sum(taken) >= 0.95 * len(texts)  # Python finds the terms of the rest


@pytest.mark.parametrize("plane", [0, 1])
def test_every_letter_and_digit_gives_the_references_terms_in_a_word(plane: int) -> None:
    # Each letter or digit of a plane, alone and inside words (as the tokenizer in C folds
    # them one at a time), and the CJK characters and pictographs between them: C finds
    # the terms of those it takes, and never wrong ones of the others.
    speedups = _terms._speedups
    assert speedups is not None
    simple = Tokenizer("simple", "bigram")
    _scan._learn(list(range(plane << 8, (plane + 1) << 8)))
    kinds, _, folds, _ = _scan.tables()
    codes = [
        code
        for code in range(plane << 16, (plane + 1) << 16)
        if not 0xD800 <= code <= 0xDFFF
        and (chr(code).isalnum() or _scan._within(code, _scan.PICTOGRAPH_RANGES))
    ]
    by_c = [code for code in codes if folds[code] or not kinds[code] & (_scan._WORD | _scan._UNUSUAL)]
    assert len(by_c) > 0.9 * len(codes)
    for chosen, in_c in ((by_c, True), (sorted(set(codes) - set(by_c)), False)):
        for start in range(0, len(chosen), 200):
            characters = [chr(code) for code in chosen[start : start + 200]]
            text = normalized(" ".join(f"{c} a{c}{c}b {c}a" for c in characters))
            expected = reference_terms(text, "simple", "bigram")
            found = speedups.terms(text, True, None, simple._stemmed)
            # What C does not take (a character that NFC does not change into one it takes) it leaves.
            assert found == expected if in_c else found in (None, expected), characters[0]
            assert simple.terms(text) == expected, characters[0]


def test_letters_that_compose_with_the_one_before_are_found_as_normalization_joins_them() -> None:
    # Halfwidth Hangul: a consonant and a vowel are one syllable once normalized.
    assert ENGLISH.terms("\uffa1\uffc2") == ["\uac00"] == reference_terms("\uffa1\uffc2")
    speedups = _terms._speedups
    assert speedups is not None
    assert speedups.terms("\uffa1\uffc2", True, {}, ENGLISH._stemmed) is None  # left to Python


@given(st.lists(st.sampled_from(["a", "b", "条带", "ü", "🧪", "𠀀x"]), max_size=600))
def test_tsvector_input_is_the_same_in_c_and_python(terms: list[str]) -> None:
    assert tsvector_literal(terms) == _terms._tsvector_literal_in_python(terms)


def test_canonically_equal_texts_have_the_same_terms() -> None:
    composed, decomposed = "café", unicodedata.normalize("NFD", "café")
    assert composed != decomposed
    assert ENGLISH.terms(decomposed) == ENGLISH.terms(composed) == ["café"]
    assert ENGLISH.phrase(decomposed) == ENGLISH.phrase(composed)
    matched = stored(decomposed).matched([phrase("café")])
    assert snippet(ENGLISH, decomposed, matched, ("«", "»")) == "«café»"


def test_a_tokenizer_shared_by_threads_gives_each_the_terms_one_thread_gets() -> None:
    texts = workload_texts(30)
    expected = [reference_terms(unicodedata.normalize("NFC", text), "german") for text in texts]
    for _ in range(3):  # a new tokenizer each time: its stems are found while the threads race
        shared = Tokenizer("german", "bigram")
        start = threading.Barrier(4)

        def tokenize(
            offset: int, tokenizer: Tokenizer = shared, start: threading.Barrier = start
        ) -> list[list[str]]:
            start.wait()
            order = texts[offset:] + texts[:offset]
            found = [tokenizer.terms(text) for text in order]
            return found[len(texts) - offset :] + found[: len(texts) - offset]

        with ThreadPoolExecutor(4) as pool:
            results = list(pool.map(tokenize, [0, 7, 13, 29]))
        assert all(result == expected for result in results)


def test_threads_that_tokenize_a_processs_first_texts_get_the_references_terms() -> None:
    # In a new interpreter: the first texts teach the tokenizer what each character is.
    script = textwrap.dedent(
        """
        import threading, unicodedata
        from concurrent.futures import ThreadPoolExecutor
        from chatarchive._terms import Tokenizer
        from tests.support.reference_terms import reference_terms
        from tests.unit.test_terms import workload_texts

        texts = workload_texts(8)
        shared = Tokenizer("english", "bigram")
        start = threading.Barrier(4)

        def tokenize(offset):
            start.wait()
            return [(text, shared.terms(text)) for text in texts[offset:] + texts[:offset]]

        with ThreadPoolExecutor(4) as pool:
            for found in pool.map(tokenize, [0, 3, 5, 9]):
                for text, terms in found:
                    assert terms == reference_terms(unicodedata.normalize("NFC", text)), text
        """
    )
    subprocess.run([sys.executable, "-c", script], check=True)


def test_a_tokenizer_whose_stems_fill_up_starts_again_and_gives_the_same_terms(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr("chatarchive._terms._STEMS_KEPT", 50)
    tokenizer = Tokenizer("english", "bigram")
    for text in workload_texts(3):
        assert tokenizer.terms(text) == reference_terms(unicodedata.normalize("NFC", text))
