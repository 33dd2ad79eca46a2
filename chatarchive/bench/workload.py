"""A deterministic synthetic workload of chat documents, for benchmarks and tests.

The shape follows production chat archives: about 20 messages a chat, a system
prompt, user/assistant turns, one tool call for every ~8 messages (each answered
by a tool message), ~10% multimodal user messages, ~30% of chats with feedback.

The text is as long as users' and models' is (a user's turn 20-400
characters, an answer 100-2,000, a tool's result a few hundred), and each chat
is in one of a dozen languages in their own scripts, weighted as a
multilingual product sees them: English (with the typographic apostrophes,
dashes and symbols that models write) for about half, then Chinese, Japanese,
Korean, German, French, Spanish, Russian, Arabic, Hindi and Greek. Words are
pseudo-words drawn from each script's letters (a Zipf distribution over a
vocabulary per language), so that text compresses and tokenizes about as real
prose does, not better.
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import accumulate
from typing import Any

__all__ = ["chatgpt_conversation", "chatgpt_export", "generate_chats", "search_terms"]

_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"


def _vocabulary(rng: random.Random, size: int = 6000) -> list[str]:
    """Pseudo-words with English-like letter frequencies and lengths, so that
    text compresses about as well as real prose does (not better)."""
    weights = [26 - rank for rank in range(26)]
    return [
        "".join(rng.choices(_LETTERS, weights, k=rng.choice((2, 3, 3, 4, 4, 5, 5, 6, 7, 8, 9, 11))))
        for _ in range(size)
    ]


_TOOLS = ("airalogy_search", "read_csv", "run_protocol", "calculator", "fetch_paper", "plot")
_MODELS = ("gpt-4o", "gpt-4o-mini", "claude-sonnet", "masterbrain-chat")
_WORKFLOWS = ("protocol-qa", "data-cleanup", "literature", "chat")
_EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


def _text(rng: random.Random, words: int) -> str:
    """About ``words`` words of prose: Zipf-distributed words in sentences."""
    picks = rng.choices(_VOCABULARY, cum_weights=_ZIPF, k=words)
    sentences, start = [], 0
    while start < len(picks):
        end = start + rng.randrange(6, 18)
        sentences.append(" ".join(picks[start:end]).capitalize() + ".")
        start = end
    return " ".join(sentences)


_VOCABULARY = _vocabulary(random.Random(20260101))
_ZIPF = list(accumulate(1 / rank for rank in range(1, len(_VOCABULARY) + 1)))


@dataclass(frozen=True)
class _Language:
    """How a language's prose is made: its letters (the first the most
    frequent), its word lengths, whether words are spaced, its punctuation."""

    letters: str
    lengths: tuple[int, ...]
    spaced: bool = True
    stop: str = ". "
    comma: str = ", "
    extras: tuple[str, ...] = ()  # words of other scripts or symbols that turn up in it

    def vocabulary(self, rng: random.Random, size: int = 4000) -> list[str]:
        weights = [len(self.letters) - rank for rank in range(len(self.letters))]
        return ["".join(rng.choices(self.letters, weights, k=rng.choice(self.lengths))) for _ in range(size)]


_HAN = "".join(chr(code) for code in range(0x4E00, 0x4E00 + 20902, 7))  # every 7th of the basic block
_LANGUAGES: dict[str, tuple[float, _Language]] = {
    "english": (
        0.46,
        _Language(
            _LETTERS,
            (2, 3, 3, 4, 4, 5, 5, 6, 7, 8, 9, 11),
            extras=("’s", "—", "“", "”", "°C", "×", "…", "café", "naïve", "µL", "→", "✅", "e.g."),
        ),
    ),
    "german": (
        0.06,
        _Language("enisratdhulcgmobwfkzäüpvößjyxq", (2, 3, 4, 5, 6, 7, 8, 10, 12, 14), extras=("„", "“")),
    ),
    "french": (
        0.05,
        _Language("esaitnrulodcpméqvgfbhxèyjàêçzôûkîëw", (2, 2, 3, 4, 5, 6, 7, 9), extras=("«", "»", "’")),
    ),
    "spanish": (
        0.05,
        _Language("eaosrnidlctumpbgvyqóhfíjzéáñxúk", (2, 2, 3, 4, 5, 6, 7, 9), extras=("¿", "¡")),
    ),
    "russian": (0.06, _Language("оеаинтсрвлкмдпуяыьгзбчйхжшюцщэфъё", (2, 3, 4, 5, 6, 7, 8, 10))),
    "greek": (0.02, _Language("αοιετσνηυρπκμλωδγχθφβξζψάέήίόύώ", (2, 3, 4, 5, 6, 7, 9))),
    "arabic": (0.03, _Language("اليمونربتةعدسفهكقأجحشصإطىغثخضزآظذئؤ", (2, 3, 4, 5, 6, 7), comma="، ")),
    "hindi": (
        0.03,
        _Language("कसरनमतलदपहयवजबगखचशभडटअइएओउआथधफ", (2, 3, 4, 5), stop="। ", extras=("है", "में", "की")),
    ),
    "chinese": (
        0.12,
        _Language(
            _HAN[:1500],
            (1, 2, 2, 2, 2, 3, 4),
            spaced=False,
            stop="。",
            comma="，",
            extras=("PCR", "DNA", "2026"),
        ),
    ),
    "japanese": (
        0.07,
        _Language(
            "のにはをたがでてとしれさあいうかくけこすせそなまもよらりるろわん" + _HAN[:600],
            (1, 2, 2, 3, 3, 4, 5),
            spaced=False,
            stop="。",
            comma="、",
            extras=("データ", "サンプル", "PCR"),
        ),
    ),
    "korean": (
        0.05,
        _Language(
            "".join(chr(code) for code in range(0xAC00, 0xAC00 + 11172, 29)),
            (1, 2, 2, 3, 3, 4),
            extras=("PCR", "데이터"),
        ),
    ),
}
_LANGUAGE_NAMES = tuple(_LANGUAGES)
_LANGUAGE_WEIGHTS = tuple(accumulate(weight for weight, _ in _LANGUAGES.values()))
_VOCABULARIES = {
    name: (_VOCABULARY, _ZIPF)
    if name == "english"
    else (words := language.vocabulary(random.Random(f"{name}-20260101")), _ZIPF[: len(words)])
    for name, (_, language) in _LANGUAGES.items()
}


def _prose(rng: random.Random, language: str, characters: int) -> str:
    """About ``characters`` characters of prose in ``language``: Zipf-distributed
    words in sentences, now and then a symbol or a word of another script."""
    spec = _LANGUAGES[language][1]
    vocabulary, zipf = _VOCABULARIES[language]
    out: list[str] = []
    length = 0
    while length < characters:
        words = rng.choices(vocabulary, cum_weights=zipf, k=rng.randrange(5, 16))
        if spec.extras and rng.random() < 0.5:
            words[rng.randrange(len(words))] = rng.choice(spec.extras)
        if rng.random() < 0.3:
            words.insert(rng.randrange(len(words)), f"{spec.comma.strip()}")
        sentence = (" " if spec.spaced else "").join(words)
        if spec.spaced:
            sentence = sentence.replace(f" {spec.comma.strip()}", spec.comma.rstrip())
        sentence = sentence[:1].upper() + sentence[1:] + spec.stop.rstrip()
        out.append(sentence)
        length += len(sentence) + 1
    return (" " if spec.spaced else "").join(out)[: max(characters, 1)]


def generate_chats(chats: int, messages: int = 20, seed: int = 0) -> Iterator[dict[str, Any]]:
    """``chats`` canonical chat documents of about ``messages`` messages each.

    The same arguments always give the same documents (ids and timestamps included).
    """
    rng = random.Random(seed)
    users = max(1, chats // 10)
    for number in range(chats):
        yield _chat(rng, number, messages, users)


def _chat(rng: random.Random, number: int, size: int, users: int) -> dict[str, Any]:
    chat_id = f"chat-{number:08d}"
    model = rng.choice(_MODELS)
    language = rng.choices(_LANGUAGE_NAMES, cum_weights=_LANGUAGE_WEIGHTS)[0]
    start = _EPOCH + timedelta(seconds=number * 37 + rng.randrange(30))
    clock = iter(start + timedelta(seconds=4 * step) for step in range(10 * size + 10))
    messages: list[dict[str, Any]] = [
        {
            "role": "system",
            "content": _prose(rng, "english", rng.randrange(100, 800)),
            "uid": f"{chat_id}-0",
            "created_at": next(clock),
        }
    ]
    call_number = 0
    while len(messages) < size:
        user: dict[str, Any] = {"role": "user", "created_at": next(clock)}
        if rng.random() < 0.10:
            user["content"] = [
                {"type": "text", "text": _prose(rng, language, rng.randrange(20, 300))},
                {
                    "type": "image_url",
                    "image_url": {"url": f"https://example.com/{chat_id}/{len(messages)}.png"},
                },
            ]
        else:
            user["content"] = _prose(rng, language, rng.randrange(20, 400))
        messages.append(user)
        if rng.random() < 0.42 and len(messages) + 3 <= size:
            call_id = f"call_{chat_id}_{call_number}"
            call_number += 1
            tool = rng.choice(_TOOLS)
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "created_at": next(clock),
                    "tool_calls": [
                        {
                            "id": call_id,
                            "type": "function",
                            "function": {
                                "name": tool,
                                "arguments": json.dumps(
                                    {"query": _prose(rng, language, rng.randrange(10, 60))}
                                ),
                            },
                        }
                    ],
                }
            )
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": json.dumps(
                        {"result": _prose(rng, language, rng.randrange(100, 800)), "score": rng.random()},
                        ensure_ascii=False,
                    ),
                    "created_at": next(clock),
                }
            )
        prompt = rng.randrange(200, 4000)
        completion = rng.randrange(20, 400)
        messages.append(
            {
                "role": "assistant",
                "content": _prose(rng, language, rng.randrange(100, 2000)),
                "created_at": next(clock),
                "model": model,
                "finish_reason": "stop",
                "usage": {
                    "prompt_tokens": prompt,
                    "completion_tokens": completion,
                    "total_tokens": prompt + completion,
                },
            }
        )
    for position, message in enumerate(messages):
        message.setdefault("uid", f"{chat_id}-{position}")
    document: dict[str, Any] = {
        "chat_id": chat_id,
        "user_id": f"user-{rng.randrange(users):05d}",
        "title": _prose(rng, language, rng.randrange(10, 50)),
        "model": model,
        "model_settings": {"temperature": round(rng.random(), 2)},
        "workflow": {"name": rng.choice(_WORKFLOWS)},
        "tags": rng.sample(("lab", "pcr", "urgent", "review", "demo"), rng.randrange(3)),
        "created_at": start,
        "updated_at": messages[-1]["created_at"],
        "messages": messages,
        "feedback": [],
    }
    if rng.random() < 0.30:
        target = rng.choice([m for m in messages if m["role"] == "assistant"])
        document["feedback"].append(
            {
                "id": f"{chat_id}-fb",
                "message_uid": target["uid"],
                "user_id": document["user_id"],
                "score": rng.choice((1, 1, 1, -1, 0)),
                "created_at": target["created_at"] + timedelta(minutes=2),
            }
        )
    return document


def search_terms() -> list[str]:
    """Searches over the workload's text: common and rare words, phrases, exclusions."""
    words = _VOCABULARY
    return [
        words[5],
        words[60],
        words[800],
        words[4000],
        f"{words[20]} {words[300]}",
        f'"{words[2]} {words[3]}"',
        f"{words[50]} -{words[0]}",
        f"{words[700]} or {words[900]}",
    ]


def chatgpt_export(megabytes: float, seed: int = 0) -> Iterator[dict[str, Any]]:
    """Conversations of ChatGPT's data export (``conversations.json``), about
    ``megabytes`` MB of JSON in all: trees with a regenerated answer now and
    then, a model on each answer, times, and sizes spread as real exports'
    are (most conversations a few kB to a few tens of kB, one in fifty a long
    working session of a megabyte or more).

    The same arguments always give the same conversations.
    """
    rng = random.Random(seed)
    budget = int(megabytes * 1_000_000)
    number = 0
    while budget > 0:
        turns = rng.choice((2, 4, 6, 10, 16, 30)) if rng.random() > 0.02 else rng.randrange(300, 900)
        conversation = chatgpt_conversation(rng, number, turns)
        budget -= len(json.dumps(conversation))
        number += 1
        yield conversation


def chatgpt_conversation(rng: random.Random, number: int, turns: int) -> dict[str, Any]:
    """One conversation of ChatGPT's export, of ``turns`` messages (and a
    regenerated answer for one in ten), numbered ``number``."""
    start = (_EPOCH + timedelta(minutes=37 * number)).timestamp()
    mapping: dict[str, Any] = {"root": _node("root", None, None)}
    parent = "root"
    for turn in range(turns):
        role = "user" if turn % 2 == 0 else "assistant"
        words = rng.randrange(10, 60) if role == "user" else rng.randrange(80, 700)
        node_id = f"c{number}-n{turn}"
        message = {
            "id": f"m-{node_id}",
            "author": {"role": role, "name": None, "metadata": {}},
            "create_time": start + 20 * turn,
            "update_time": None,
            "content": {"content_type": "text", "parts": [_text(rng, words)]},
            "status": "finished_successfully",
            "end_turn": role == "assistant",
            "weight": 1.0,
            "metadata": {"model_slug": rng.choice(("gpt-4o", "o3", "gpt-4o-mini"))}
            if role == "assistant"
            else {},
            "recipient": "all",
        }
        mapping[node_id] = _node(node_id, message, parent)
        mapping[parent]["children"].append(node_id)
        if role == "assistant" and rng.random() < 0.1:  # a regenerated answer: a sibling
            other = f"{node_id}-r"
            mapping[other] = _node(other, {**message, "id": f"m-{other}"}, parent)
            mapping[parent]["children"].append(other)
        parent = node_id
    return {
        "title": _text(rng, 5)[:60],
        "create_time": start,
        "update_time": start + 20 * turns,
        "mapping": mapping,
        "moderation_results": [],
        "current_node": parent,
        "conversation_id": f"conv-{number:08d}",
        "id": f"conv-{number:08d}",
        "default_model_slug": "gpt-4o",
        "is_archived": False,
    }


def _node(node_id: str, message: dict[str, Any] | None, parent: str | None) -> dict[str, Any]:
    return {"id": node_id, "message": message, "parent": parent, "children": []}
