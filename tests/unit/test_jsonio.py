"""Reading import input: one document, a list of them, or JSON Lines, record by record."""

from __future__ import annotations

import gzip
import io
import json
import os
import stat
import tracemalloc
from pathlib import Path
from typing import Any
from unittest.mock import patch

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from chatarchive import _jsonio
from chatarchive._jsonio import open_text, read_records, written
from tests.support.strategies import json_values, text

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
    crlf = json.dumps(DOC) + "\r\n" + json.dumps(DOC) + "\r\n"
    assert records(crlf, source) == [(1, DOC, None), (2, DOC, None)]
    repeated = '{"chat_id": "first", ' + json.dumps(DOC)[1:]  # the last value of a repeated key wins
    assert records(repeated, source) == [(1, DOC, None)]


@pytest.mark.parametrize("indent", [None, 2])
def test_a_list_of_documents_is_read_a_document_at_a_time(indent: int | None) -> None:
    # ChatGPT's conversations.json: one line, hundreds of megabytes (here 10).
    listed = json.dumps(
        [{**DOC, "chat_id": f"c{n}", "pad": "x" * 10_000} for n in range(1000)], indent=indent
    )
    stream = io.StringIO(listed)
    read = read_records(stream, "conversations.json")
    assert [next(read).value["chat_id"] for _ in range(3)] == ["c0", "c1", "c2"]
    assert stream.tell() < len(listed) // 4
    assert len(list(read)) == 997


def test_memory_does_not_grow_with_a_large_list(tmp_path: Path) -> None:
    def peak(chats: int) -> int:
        path = tmp_path / f"{chats}.json"
        path.write_text(json.dumps([{**DOC, "chat_id": f"c{n}", "pad": "x" * 2000} for n in range(chats)]))
        with path.open(encoding="utf-8") as stream:
            tracemalloc.start()
            try:
                assert sum(1 for _ in read_records(stream, str(path))) == chats
                return tracemalloc.get_traced_memory()[1]
            finally:
                tracemalloc.stop()

    small, large = peak(500), peak(4000)  # 1 MB and 8 MB of text
    assert large < 2 * small, (small, large)  # reading it whole would be 8x


def test_values_one_after_another_are_read_in_turn() -> None:
    # What jq writes: pretty-printed values, one after another.
    docs = [{**DOC, "chat_id": name} for name in "abc"]
    jq = "\n".join(json.dumps(doc, indent=2) for doc in docs) + "\n"
    assert records(jq, "<stdin>") == [(1, docs[0], None), (10, docs[1], None), (19, docs[2], None)]
    glued = "".join(json.dumps(doc, indent=2) for doc in docs)
    assert [value for _, value, _ in records(glued, "chats.json")] == docs


def test_a_list_holding_one_chats_messages_is_one_record() -> None:
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    assert records(json.dumps(messages, indent=2), "chat.json") == [(1, messages, None)]
    # A list that starts like messages but holds documents gives its items.
    mixed = [{"role": "user", "content": "hi"}, DOC]
    assert records(json.dumps(mixed), "chats.json") == [(1, mixed[0], None), (1, DOC, None)]


def test_a_json_line_holding_a_list_of_documents_gives_its_documents() -> None:
    two = [DOC, {**DOC, "chat_id": "d"}]
    lines = json.dumps(two) + "\n" + json.dumps(two) + "\n"
    for source in ("chats.jsonl", "chats.json"):
        assert [(line, value) for line, value, _ in records(lines, source)] == [
            (1, DOC),
            (1, two[1]),
            (2, DOC),
            (2, two[1]),
        ]


def test_a_broken_list_gives_the_documents_before_the_break() -> None:
    listed = json.dumps([DOC, {**DOC, "chat_id": "d"}, {**DOC, "chat_id": "e"}], indent=2)
    cut = listed[: listed.index('"e"') + 2]
    assert records(cut, "chats.json") == [
        (2, DOC, None),
        (11, {**DOC, "chat_id": "d"}, None),
        (21, None, "invalid JSON: Unterminated string starting at (column 16)"),
    ]
    messages = json.dumps([{"role": "user", "content": "hi"}, {"role": "user", "content": "again"}])
    assert records(messages[:-3] + "\n", "chat.json") == [
        (1, None, "invalid JSON: Invalid control character at (column 71)")
    ]  # one chat: nothing of it is given
    assert records("[1 2]", "x.json") == [
        (1, 1, None),
        (1, None, "invalid JSON: Expecting ',' delimiter (column 4)"),
    ]
    assert records("[1,]", "x.json") == [(1, 1, None), (1, None, "invalid JSON: Expecting value (column 4)")]


def test_extra_text_after_a_one_line_value_is_reported_on_its_line() -> None:
    found = records('{"a": 1} x\n' + json.dumps(DOC) + "\n", "chats.json")
    assert found == [(1, None, "invalid JSON: Extra data (column 10)"), (2, DOC, None)]


documents = st.lists(
    st.dictionaries(text.filter(lambda key: key != "role"), json_values, max_size=3).map(
        lambda extra: {**extra, "chat_id": "c"}
    ),
    max_size=4,
)


@given(
    documents,
    st.sampled_from([None, 0, 2]),
    st.integers(min_value=1, max_value=24),
    st.integers(min_value=1, max_value=24),
    st.booleans(),
)
def test_any_list_is_read_the_same_in_any_pieces(
    docs: list[dict[str, Any]], indent: int | None, piece: int, read: int, ascii_only: bool
) -> None:
    # Values cut anywhere across reads (a string, an escape, a surrogate pair, a
    # number) are read as json.loads reads the whole text.
    listed = json.dumps(docs, indent=indent, ensure_ascii=ascii_only)
    with patch.object(_jsonio, "_PIECE", piece), patch.object(_jsonio, "_READ", read):
        assert [record.value for record in read_records(io.StringIO(listed), "chats.json")] == docs
        lines = [record.line for record in read_records(io.StringIO(listed + "\n" + listed), "chats.json")]
    assert len(lines) == 2 * len(docs)
    assert lines == sorted(lines)


@given(
    documents,
    st.sampled_from([None, 2]),
    st.integers(min_value=1, max_value=24),
    st.integers(min_value=1, max_value=24),
    st.floats(min_value=0, max_value=1, exclude_max=True),
)
# An item read to its end in a window that then moved to start at it: the
# reader's place was counted from the old window's start (column 39, not 37).
@example([{"chat_id": "c"}, {"chat_id": "c"}, {"": [None, None], "chat_id": "c"}], None, 7, 22, 0.5)
def test_a_cut_list_is_reported_where_json_loads_reports_it(
    docs: list[dict[str, Any]], indent: int | None, piece: int, read: int, where: float
) -> None:
    listed = json.dumps(docs, indent=indent, ensure_ascii=False)
    cut = listed[: 1 + int((len(listed) - 1) * where)]  # not empty, not whole
    with pytest.raises(json.JSONDecodeError) as whole:
        json.loads(cut)
    with patch.object(_jsonio, "_PIECE", piece), patch.object(_jsonio, "_READ", read):
        *values, last = [
            (record.line, record.value, record.error) for record in read_records(io.StringIO(cut), "c.json")
        ]
    error = whole.value
    assert last == (error.lineno, None, f"invalid JSON: {error.msg} (column {error.colno})")
    assert [value for _, value, _ in values] == docs[: len(values)]


@pytest.mark.parametrize("piece", [1, 2, 3, 4])
def test_a_number_cut_across_reads_is_read_whole(piece: int) -> None:
    with patch.object(_jsonio, "_PIECE", piece), patch.object(_jsonio, "_READ", 1):
        assert [value for _, value, _ in records("[12345, -6.5e3, true]", "x.json")] == [12345, -6500.0, True]
        assert records("12345", "x.json") == [(1, 12345, None)]


@pytest.mark.parametrize("name", ["chats.jsonl", "chats.jsonl.gz", "chats.json.bz2", "chats.jsonl.xz"])
def test_files_are_written_and_read_compressed_as_their_names_say(tmp_path: Path, name: str) -> None:
    path = str(tmp_path / name)
    with written(path) as stream:
        stream.write(
            json.dumps(DOC) + "\n" + json.dumps({**DOC, "chat_id": "é\u2028"}, ensure_ascii=False) + "\n"
        )
    with open(path, "rb") as raw, open_text(raw, path) as stream:
        assert [record.value for record in read_records(stream, path)] == [DOC, {**DOC, "chat_id": "é\u2028"}]
    assert os.listdir(tmp_path) == [name]
    if name.endswith(".gz"):
        with gzip.open(path) as unzipped:  # a gzip file as any tool reads it
            assert unzipped.read().startswith(b'{"chat_id"')
        header = Path(path).read_bytes()[10:30]  # the name gunzip -N restores: not the temporary one
        assert header.startswith(b"chats.jsonl\x00")


def test_a_file_appears_only_whole(tmp_path: Path) -> None:
    path = tmp_path / "export.jsonl"
    path.write_text("the last complete export\n")
    path.chmod(0o640)

    def interrupted() -> None:
        with written(str(path)) as stream:
            stream.write(json.dumps(DOC) + "\n")
            raise KeyboardInterrupt  # Ctrl-C half-way

    with pytest.raises(KeyboardInterrupt):
        interrupted()
    assert path.read_text() == "the last complete export\n"
    assert os.listdir(tmp_path) == ["export.jsonl"]  # no temporary file left
    with written(str(path)) as stream:
        stream.write("new\n")
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # as open() would have kept it
    new = tmp_path / "new.jsonl"
    with written(str(new)) as stream:
        stream.write("x\n")
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(new.stat().st_mode) == 0o666 & ~umask


def test_a_file_that_cannot_be_written_is_named_as_asked(tmp_path: Path) -> None:
    # The error named the temporary file: "/no/.x.jsonl.a3j5x49k.partial: No such file".
    missing = tmp_path / "no" / "x.jsonl"
    with pytest.raises(FileNotFoundError) as caught, written(str(missing)):
        pass
    assert caught.value.filename == str(missing)


def test_a_link_keeps_pointing_at_the_file_written(tmp_path: Path) -> None:
    (tmp_path / "real.jsonl").write_text("old\n")
    link = tmp_path / "latest.jsonl"
    link.symlink_to("real.jsonl")
    with written(str(link)) as stream:
        stream.write("new\n")
    assert link.is_symlink()
    assert (tmp_path / "real.jsonl").read_text() == "new\n"


def test_a_pipe_is_written_to_as_it_is(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)
    try:
        with written(str(fifo)) as stream:
            stream.write("through the pipe\n")
        assert os.read(reader, 100) == b"through the pipe\n"
    finally:
        os.close(reader)
    assert stat.S_ISFIFO(fifo.stat().st_mode)


def test_a_lists_items_are_named_by_their_place() -> None:
    # conversations.json is one line: the line alone does not say which chat failed.
    def where(text: str, source: str) -> list[str]:
        return [record.where for record in read_records(io.StringIO(text), source)]

    assert where(json.dumps([DOC, DOC]), "c.json") == ["c.json:1 .[0]", "c.json:1 .[1]"]
    assert where(json.dumps([DOC, DOC], indent=2), "c.json") == ["c.json:2 .[0]", "c.json:11 .[1]"]
    assert where(json.dumps(DOC) + "\n" + json.dumps([DOC]) + "\n", "c.jsonl") == [
        "c.jsonl:1",
        "c.jsonl:2 .[0]",
    ]
    assert where(json.dumps(DOC["messages"]), "chat.json") == ["chat.json:1"]  # one chat, not a list of them


@pytest.mark.parametrize("piece", [1, 2, 3, 7, 64])
def test_a_long_item_is_read_to_its_end_whatever_its_strings_hold(piece: int) -> None:
    """An item longer than a piece is read to its end by a scan (brackets,
    quotes and escapes inside strings, an escape cut between two pieces) and
    parsed once: the same values as json.loads."""
    tricky = ['a "quoted" [bracket] {brace}', "back\\slash\\", '\\"', "]}", "é\u2028\U0001f600", ""]
    items: list[Any] = [
        {"messages": [{"role": "user", "content": text, "n": [1, {"x": [text]}]} for text in tricky * 5]},
        'a string item ] } " \\ ',
        [[], {}, [[["deep"]]]],
        7,
    ]
    listed = json.dumps(items, ensure_ascii=False)
    with patch.object(_jsonio, "_PIECE", piece), patch.object(_jsonio, "_READ", 1):
        assert [record.value for record in read_records(io.StringIO(listed), "chats.json")] == items
        cut = listed[: len(listed) // 3]
        *read, last = read_records(io.StringIO(cut), "chats.json")
    assert read == []
    assert last.error is not None
    assert last.error.startswith("invalid JSON")


def test_a_string_longer_than_the_limit_is_refused_while_it_is_read() -> None:
    # A compressed file may hold a string of gigabytes: it is refused once it
    # passes the bound, never held whole.
    huge = "x" * (12 * 2**20)
    one = io.StringIO(json.dumps({"messages": [{"role": "user", "content": huge}]}) + "\n")
    tracemalloc.start()
    try:
        (record,) = read_records(one, "one.json", longest_string=2 * 2**20)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert record.error is not None
    assert "a string of more than 2,097,152 characters" in record.error
    assert peak < 8 * 2**20  # the bound and a few pieces, not the 12 MiB string

    lines = io.StringIO(
        json.dumps({"chat_id": "a", "messages": []})
        + "\n"
        + json.dumps({"messages": [{"role": "user", "content": huge}]})
        + "\n"
        + json.dumps({"chat_id": "b", "messages": [{"role": "user", "content": "short"}]})
        + "\n"
    )
    found = list(read_records(lines, "many.jsonl", longest_string=2 * 2**20))
    assert [record.line for record in found] == [1, 2, 3]
    assert found[1].error is not None
    assert "a string of more than" in found[1].error
    assert [found[0].value["chat_id"], found[2].value["chat_id"]] == ["a", "b"]
    # Within the bound, long strings are read as they are.
    fits = io.StringIO(json.dumps({"messages": [{"role": "user", "content": huge}]}))
    (kept,) = read_records(fits, "fits.json", longest_string=13 * 2**20)
    assert kept.value["messages"][0]["content"] == huge
