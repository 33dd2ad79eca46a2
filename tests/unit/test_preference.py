"""Preference pairs from a chat's branches, and the two JSONL shapes they are written in."""

from __future__ import annotations

from typing import Any

from chatarchive import ChatDocument
from chatarchive.formats import DATASET_FORMATS
from chatarchive.formats.finetune import Filters, Selection
from chatarchive.formats.preference import dpo, openai_preference, pairs

TOOLS = [{"type": "function", "function": {"name": "search", "parameters": {}}}]


def _chat(feedback: list[dict[str, Any]], **fields: Any) -> ChatDocument:
    """A question answered three times, then a follow-up answered twice; the
    active path goes through the second answer and the follow-up's second."""
    return ChatDocument.parse(
        {
            "chat_id": "c",
            "workflow": {"tools": TOOLS},
            "messages": [
                {"role": "system", "content": "Be brief.", "uid": "s"},
                {"role": "user", "content": "Why two bands?", "uid": "q"},
                {"role": "assistant", "content": "Primer dimers.", "uid": "a1"},
                {"role": "assistant", "content": "Contamination.", "uid": "a2", "parent": "q"},
                {"role": "assistant", "content": "No idea.", "uid": "a3", "parent": "q"},
                {"role": "user", "content": "How to check?", "uid": "q2", "parent": "a2"},
                {"role": "assistant", "content": "Run a blank.", "uid": "b1"},
                {"role": "assistant", "content": "Run a no-template control.", "uid": "b2", "parent": "q2"},
            ],
            "feedback": feedback,
            **fields,
        }
    )


def _named(found: list[Any]) -> list[tuple[str, str, str]]:
    return [(pair.prompt[-1].uid, pair.preferred.uid, pair.rejected.uid) for pair in found]


def test_feedback_decides_between_scored_answers_and_the_active_choice_where_none_is_scored() -> None:
    doc = _chat([{"message_uid": "a1", "score": -1}, {"message_uid": "a2", "score": 1}])
    # q: a2 (+1) over a1 (-1) by their scores; a2, kept and scored above 0, over a3 (unscored);
    # a1 and a3: neither is kept. q2: no score: the answer kept, b2, over b1.
    assert _named(pairs(doc)) == [("q", "a2", "a1"), ("q", "a2", "a3"), ("q2", "b2", "b1")]
    assert [m.uid for m in pairs(doc)[2].prompt] == ["s", "q", "a2", "q2"]


def test_scores_are_averaged_and_equal_scores_make_no_pair() -> None:
    doc = _chat(
        [
            {"message_uid": "a1", "score": 1},
            {"message_uid": "a1", "score": -1},
            {"message_uid": "a2", "score": 0},
            {"message_uid": "a3", "score": 2},
            {"message_uid": "q", "score": -5},  # on the question: not an answer's
        ]
    )
    assert _named(pairs(doc))[:2] == [("q", "a3", "a1"), ("q", "a3", "a2")]


def test_feedback_against_the_kept_answer_stops_the_active_choice() -> None:
    doc = _chat([{"message_uid": "b2", "score": -1}, {"message_uid": "a3", "score": 1}])
    # a2 is kept but a3 was liked; b2 is kept but was disliked: no pair says a2 or b2 is better.
    assert _named(pairs(doc)) == [("q", "a2", "a1")]


def test_without_an_answer_on_the_active_path_the_active_choice_says_nothing() -> None:
    doc = _chat([], active_leaf="q")
    assert _named(pairs(doc)) == []  # neither the q answers nor q2's are on the path now
    assert pairs(_chat([], messages=[{"role": "user", "content": "hi"}])) == []


def test_the_lines_are_openai_preference_and_trl_dpo_shaped() -> None:
    doc = _chat([{"message_uid": "a1", "score": -1}, {"message_uid": "a2", "score": 1}])
    first = pairs(doc)[0]
    assert openai_preference(doc, first, ["system"]) == {
        "input": {"messages": [{"role": "user", "content": "Why two bands?"}], "tools": TOOLS},
        "preferred_output": [{"role": "assistant", "content": "Contamination."}],
        "non_preferred_output": [{"role": "assistant", "content": "Primer dimers."}],
    }
    assert dpo(doc, first) == {
        "prompt": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "Why two bands?"},
        ],
        "chosen": [{"role": "assistant", "content": "Contamination."}],
        "rejected": [{"role": "assistant", "content": "Primer dimers."}],
    }


def test_the_fine_tuning_filters_select_the_chats() -> None:
    scored = _chat([{"score": 1}], chat_id="scored", model="m")
    unscored = _chat([], chat_id="unscored", model="m")
    linear = ChatDocument.parse({"chat_id": "linear", "messages": [{"role": "user", "content": "hi"}]})
    streaming = _chat([], chat_id="streaming")
    streaming.messages[-1].completed = False  # b2 is still being written: its pair is left out
    selection = Selection()
    lines = list(
        DATASET_FORMATS["dpo"]([scored, unscored, linear, streaming], Filters(min_score=0.5), selection)
    )
    assert len(lines) == selection.written == 3  # scored: all three by the active choice
    assert lines[0]["chosen"][0]["content"] == "Contamination."
    assert selection.skipped == {"score below the minimum": 3}
    selection = Selection()
    lines = list(DATASET_FORMATS["openai-preference"]([linear, streaming], Filters(), selection))
    assert [line["non_preferred_output"][0]["content"] for line in lines] == ["Primer dimers.", "No idea."]
    assert selection.skipped == {"no preference pairs": 1}
    selection = Selection()
    assert len(list(DATASET_FORMATS["openai-preference"]([scored], Filters(model="other"), selection))) == 0
    assert selection.skipped == {"other model": 1}
