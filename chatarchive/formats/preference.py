"""Preference data from a chat's branches (export only): OpenAI's preference
fine-tuning JSONL and the DPO JSONL that TRL reads.

A message answered more than once (an answer regenerated, so that the
assistant answers are siblings in the tree) holds a preference. An answer's
score is the mean of the scores of the feedback on it, when it has any. For
each message with two or more assistant answers, every two of its answers
make a pair when:

1. **feedback decides**: both are scored, and the scores differ (the higher
   one is preferred); or
2. **the active choice decides**: one is on the active path (the answer the
   user kept), at most one of the two is scored, and that score does not say
   otherwise (the kept answer scored above 0, or the other below 0). The kept
   answer is preferred.

Answers that begin the chat (no message before them) make no pair: they
have no prompt.

A pair's prompt is the path from the chat's first message down to the message
answered; each output is the one answer message. A pair whose prompt or
answers hold a message not completed (a stream still running, or cut short)
is left out. The chat filters are the fine-tuning export's
(:class:`~chatarchive.formats.finetune.Filters`): ``min_score`` is the mean
score of the feedback on the active path, and ``exclude_roles`` leaves roles
out of the prompt.

One line per pair, in chat order and, within a chat, in the order the
messages answered were added (siblings in their order). The OpenAI format::

    {"input": {"messages": [...], "tools": [...]},
     "preferred_output": [{"role": "assistant", ...}],
     "non_preferred_output": [{"role": "assistant", ...}]}

The DPO format, in TRL's conversational form::

    {"prompt": [...], "chosen": [{"role": "assistant", ...}], "rejected": [...]}
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from functools import partial
from itertools import combinations
from typing import Any

from chatarchive._document import ChatDocument, Message

from ._format import Format
from .finetune import Filters, Selection, chosen, tools_of, training_messages

__all__ = ["FORMATS", "Pair", "dpo", "openai_preference", "pairs", "select"]


@dataclass(frozen=True)
class Pair:
    """Two answers to the same prompt, one preferred."""

    prompt: list[Message]
    preferred: Message
    rejected: Message


def pairs(doc: ChatDocument) -> list[Pair]:
    """The preference pairs of a chat (a whole tree, as ``get_tree`` and
    ``export`` give it), by the rule of this module."""
    messages = doc.messages
    parents = doc.parent_indexes()
    answers: defaultdict[int | None, list[int]] = defaultdict(list)
    for index, (message, parent) in enumerate(zip(messages, parents, strict=True)):
        if message.role == "assistant":
            answers[parent].append(index)
    on_path = {message.uid for message in doc.path()}
    scores: defaultdict[str, list[float]] = defaultdict(list)
    for item in doc.feedback:
        if item.message_uid is not None and item.score is not None:
            scores[item.message_uid].append(item.score)
    found = []
    for parent, siblings in sorted((key, value) for key, value in answers.items() if key is not None):
        if len(siblings) < 2:
            continue
        prompt = doc.path(messages[parent].uid)
        candidates = [messages[index] for index in siblings]
        for first, second in combinations(candidates, 2):
            if (preferred := _preferred(first, second, scores, on_path)) is not None:
                rejected = second if preferred is first else first
                found.append(Pair(prompt, preferred, rejected))
    return found


def _preferred(
    first: Message, second: Message, scores: dict[str, list[float]], on_path: set[str]
) -> Message | None:
    """Which of two sibling answers is preferred, by the rule of this module (``None``: neither)."""
    score = {m.uid: sum(scores[m.uid]) / len(scores[m.uid]) for m in (first, second) if scores.get(m.uid)}
    if len(score) == 2:
        if score[first.uid] == score[second.uid]:
            return None
        return first if score[first.uid] > score[second.uid] else second
    kept = [m for m in (first, second) if m.uid in on_path]
    if len(kept) != 1:
        return None
    other = second if kept[0] is first else first
    if score.get(kept[0].uid, 1) <= 0 or score.get(other.uid, -1) >= 0:
        return None  # the feedback there is says otherwise
    return kept[0]


def openai_preference(doc: ChatDocument, pair: Pair, exclude_roles: Iterable[str] = ()) -> dict[str, Any]:
    """A line of OpenAI's preference fine-tuning JSONL."""
    given: dict[str, Any] = {"messages": training_messages(pair.prompt, exclude_roles)}
    if tools := tools_of(doc):
        given["tools"] = tools
    return {
        "input": given,
        "preferred_output": training_messages([pair.preferred]),
        "non_preferred_output": training_messages([pair.rejected]),
    }


def dpo(doc: ChatDocument, pair: Pair, exclude_roles: Iterable[str] = ()) -> dict[str, Any]:
    """A line of DPO JSONL, in the conversational form TRL's ``DPOTrainer`` reads."""
    return {
        "prompt": training_messages(pair.prompt, exclude_roles),
        "chosen": training_messages([pair.preferred]),
        "rejected": training_messages([pair.rejected]),
    }


Line = Callable[[ChatDocument, Pair, Iterable[str]], dict[str, Any]]


def select(
    docs: Iterable[ChatDocument], filters: Filters, selection: Selection, line: Line = openai_preference
) -> Iterator[dict[str, Any]]:
    """The lines (``line``: :func:`openai_preference` or :func:`dpo`) of the
    pairs of the chats that pass ``filters``; ``selection`` counts the lines
    written and the chats skipped, by reason."""
    for doc in docs:
        if not chosen(doc.path_document(), filters, selection):
            continue
        found = [
            pair
            for pair in pairs(doc)
            if all(message.completed for message in (*pair.prompt, pair.preferred, pair.rejected))
        ]
        if not found:
            selection.skip("no preference pairs")
            continue
        for pair in found:
            selection.written += 1
            yield line(doc, pair, filters.exclude_roles)


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="openai-preference",
        what="OpenAI preference fine-tuning JSONL",
        round_trip="-",
        family="dataset",
        dataset=partial(select, line=openai_preference),
    ),
    Format(
        name="dpo",
        what="DPO JSONL, as TRL reads it",
        round_trip="-",
        family="dataset",
        dataset=partial(select, line=dpo),
    ),
)
