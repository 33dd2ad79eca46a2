"""Reading import input: one document, a list of them, or JSON Lines, record by record."""

from __future__ import annotations

import io
import json

import pytest

from chatarchive._jsonio import read_records

DOC = {"chat_id": "c", "messages": [{"role": "user", "content": "hi"}]}


def records(text: str, source: str) -> list[tuple[int, object, str | None]]:
    return [(record.line, record.value, record.error) for record in read_records(io.StringIO(text), source)]


@pytest.mark.parametrize("source", ["<stdin>", "chats.json", "chats.jsonl"])
@pytest.mark.parametrize("separator", ["\u2028", "\u2029", "\x85"])
def test_json_lines_break_at_newlines_only(source: str, separator: str) -> None:
    # JSON strings may hold these unescaped (json.dumps(..., ensure_ascii=False)
    # writes them so); str.splitlines() ends lines at them, which broke both records
    # (control characters, which splitlines() also splits at, are always escaped).
    text_with_it = {"chat_id": "a", "messages": [{"role": "user", "content": f"one{separator}two"}]}
    text = json.dumps(text_with_it, ensure_ascii=False) + "\n" + json.dumps(DOC) + "\n"
    assert records(text, source) == [(1, text_with_it, None), (2, DOC, None)]


@pytest.mark.parametrize("source", ["<stdin>", "chats.json"])
def test_json_lines_are_read_a_line_at_a_time_whatever_the_name(source: str) -> None:
    text = "".join(json.dumps({**DOC, "chat_id": f"c{n}"}) + "\n" for n in range(1000))
    stream = io.StringIO(text)
    read = read_records(stream, source)
    assert [next(read).value["chat_id"] for _ in range(3)] == ["c0", "c1", "c2"]
    assert stream.tell() < len(text) // 100  # not read whole into memory first


@pytest.mark.parametrize("source", ["<stdin>", "chats.json"])
def test_what_is_not_json_lines_is_one_document(source: str) -> None:
    pretty = json.dumps(DOC, indent=2)
    assert records(pretty, source) == [(1, DOC, None)]
    assert records("\n\n" + json.dumps(DOC) + "\n\n", source) == [(3, DOC, None)]
    listed = json.dumps([DOC, {**DOC, "chat_id": "d"}], indent=2)
    assert records(listed, source) == [(2, DOC, None), (11, {**DOC, "chat_id": "d"}, None)]
    one_line_list = json.dumps([DOC, DOC])
    assert [line for line, _, _ in records(one_line_list, source)] == [1, 1]
    message_list = json.dumps(DOC["messages"])  # a bare message list is one chat
    assert records(message_list, source) == [(1, DOC["messages"], None)]
    assert records("", source) == records("  \n\n", source) == []


@pytest.mark.parametrize("source", ["<stdin>", "chats.json"])
def test_broken_input_is_reported_where_it_breaks(source: str) -> None:
    broken_document = json.dumps(DOC, indent=2)[:-10]
    ((line, value, error),) = records(broken_document, source)
    assert value is None
    assert error is not None
    assert error.startswith("invalid JSON")
    assert line > 1
    broken_first_line = "{not json\n" + json.dumps(DOC) + "\n"
    found = records(broken_first_line, source)
    assert [(line, value) for line, value, _ in found] == [(1, None), (2, DOC)]
    assert records("\ufeff" + json.dumps(DOC) + "\n" + json.dumps(DOC), source) == [
        (1, DOC, None),
        (2, DOC, None),
    ]
