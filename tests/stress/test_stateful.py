"""The archive against a model: random sequences of every write, each followed
by reading every chat back and comparing it with what the calls promise."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from sqlalchemy import Engine
from sqlalchemy import text as sql_text

from chatarchive import ChatArchive, ChatDocument, ChatNotFound, ChatTree, ConflictError, InvalidDocument
from tests.support.chats import empty_archive
from tests.support.strategies import canonical_documents, openai_messages, text

CHAT_IDS = ("a", "b", "c")

pytestmark = pytest.mark.slow


def _dump(doc: ChatDocument) -> dict[str, Any]:
    """What a read is compared on: everything but the time of the last write."""
    data = doc.model_dump()
    del data["updated_at"]
    return data


def _filled(expected: Any, actual: Any) -> Any:
    """``expected``, with the timestamps it leaves to the archive (``None``
    ``created_at``) taken from ``actual``."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return {
            key: actual.get(key) if key == "created_at" and value is None else _filled(value, actual.get(key))
            for key, value in expected.items()
        }
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [_filled(e, a) for e, a in zip(expected, actual, strict=True)]
    return expected


class ArchiveModel(RuleBasedStateMachine):
    """Each chat as the calls made so far say it must read back: its whole
    tree (every message in the order added, each one's parent, the active
    leaf) and the feedback on it; ``get`` must give the active path."""

    archive: ChatArchive
    engine: Engine

    def __init__(self) -> None:
        super().__init__()
        self.chats: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, int] = {}
        self.chunks: dict[tuple[str, str], list[str]] = {}  # streamed, not completed yet
        self.feedback_made = 0

    def _wrote(self, chat_id: str) -> None:
        self.versions[chat_id] += 1

    def _chat_ids(self) -> st.SearchStrategy[str]:
        return st.sampled_from(sorted(self.chats))

    @staticmethod
    def _path(chat: dict[str, Any], leaf: int | None) -> list[int]:
        path = []
        while leaf is not None:
            path.append(leaf)
            leaf = chat["parents"][leaf]
        return path[::-1]

    @staticmethod
    def _index(chat: dict[str, Any], uid: str) -> int:
        return [message["uid"] for message in chat["messages"]].index(uid)

    def _add(self, chat_id: str, parent: int | None, stored: list[Any]) -> None:
        """The model of adding ``stored`` as a chain under ``parent``, the last the active leaf."""
        chat = self.chats[chat_id]
        for message in stored:
            chat["parents"].append(parent)
            chat["messages"].append(message.model_dump())
            parent = len(chat["messages"]) - 1
        chat["leaf"] = parent
        self._wrote(chat_id)

    # -- writes --------------------------------------------------------------

    @rule(data=canonical_documents(), chat_id=st.sampled_from(CHAT_IDS))
    def save(self, data: dict[str, Any], chat_id: str) -> None:
        doc = ChatDocument.parse({**data, "chat_id": chat_id, "user_id": None})
        chat = self.chats.get(chat_id)
        if chat is not None and len(self._path(chat, chat["leaf"])) < len(chat["messages"]):
            with pytest.raises(ConflictError, match="off its active path"):
                self.archive.save(doc)  # a linear document would delete the branches
            return
        version = self.archive.save(doc)
        assert version == self.versions.get(chat_id, 0) + 1
        stored = _dump(self.archive.get(chat_id))
        filled = _filled(_dump(doc), stored)
        self.chats[chat_id] = {
            "fields": {k: v for k, v in filled.items() if k not in ("messages", "feedback")},
            "messages": filled["messages"],
            "parents": [index - 1 if index else None for index in range(len(doc.messages))],
            "leaf": len(doc.messages) - 1 if doc.messages else None,
            "feedback": filled["feedback"],
        }
        self.versions[chat_id] = version
        self.chunks = {key: chunks for key, chunks in self.chunks.items() if key[0] != chat_id}

    @precondition(lambda self: self.chats)
    @rule(data=st.data(), messages=st.lists(openai_messages(), max_size=3), branch=st.booleans())
    def append(self, data: st.DataObject, messages: list[dict[str, Any]], branch: bool) -> None:
        chat_id = data.draw(self._chat_ids())
        chat = self.chats[chat_id]
        parent = chat["leaf"]
        uid = None
        if branch and chat["messages"]:
            parent = data.draw(st.integers(0, len(chat["messages"]) - 1))
            uid = chat["messages"][parent]["uid"]
        try:
            stored = self.archive.append(chat_id, messages, parent=uid)
        except InvalidDocument:
            return  # a message the archive refuses (an invalid role, say): nothing changed
        assert len(stored) == len(messages)
        for given, message in zip(messages, stored, strict=True):
            expected = ChatDocument.parse({"messages": [given]}).messages[0].model_dump()
            assert message.model_dump(exclude={"uid", "created_at"}) == {
                k: v for k, v in expected.items() if k not in ("uid", "created_at")
            }
        if messages:
            self._add(chat_id, parent, stored)

    @precondition(lambda self: any(chat["messages"] for chat in self.chats.values()))
    @rule(data=st.data(), messages=st.lists(openai_messages(), min_size=1, max_size=2))
    def regenerate(self, data: st.DataObject, messages: list[dict[str, Any]]) -> None:
        chat_id = data.draw(st.sampled_from(sorted(c for c, chat in self.chats.items() if chat["messages"])))
        chat = self.chats[chat_id]
        index = data.draw(st.integers(0, len(chat["messages"]) - 1))
        try:
            stored = self.archive.regenerate(chat_id, chat["messages"][index]["uid"], messages)
        except InvalidDocument:
            return
        self._add(chat_id, chat["parents"][index], stored)

    @precondition(lambda self: any(chat["messages"] for chat in self.chats.values()))
    @rule(data=st.data(), content=st.one_of(st.none(), text))
    def edit(self, data: st.DataObject, content: str | None) -> None:
        chat_id = data.draw(st.sampled_from(sorted(c for c, chat in self.chats.items() if chat["messages"])))
        chat = self.chats[chat_id]
        index = data.draw(st.integers(0, len(chat["messages"]) - 1))
        original = chat["messages"][index]
        edited = self.archive.edit(chat_id, original["uid"], content)
        assert (edited.role, edited.name, edited.content) == (original["role"], original.get("name"), content)
        self._add(chat_id, chat["parents"][index], [edited])

    @precondition(lambda self: any(chat["messages"] for chat in self.chats.values()))
    @rule(data=st.data())
    def set_active_leaf(self, data: st.DataObject) -> None:
        chat_id = data.draw(st.sampled_from(sorted(c for c, chat in self.chats.items() if chat["messages"])))
        chat = self.chats[chat_id]
        index = data.draw(st.integers(0, len(chat["messages"]) - 1))
        version = self.archive.set_active_leaf(chat_id, chat["messages"][index]["uid"])
        if index != chat["leaf"]:
            chat["leaf"] = index
            self._wrote(chat_id)
        assert version == self.versions[chat_id]

    @precondition(lambda self: self.chats)
    @rule(data=st.data(), keep=st.integers(0, 8), remove=st.booleans())
    def truncate(self, data: st.DataObject, keep: int, remove: bool) -> None:
        chat_id = data.draw(self._chat_ids())
        chat = self.chats[chat_id]
        path = self._path(chat, chat["leaf"])
        version = self.archive.truncate(chat_id, keep, delete=remove)
        if keep < len(path):
            chat["leaf"] = path[keep - 1] if keep else None
            if remove:  # the message after the kept ones goes, with everything below it
                gone = {path[keep]}
                for index, parent in enumerate(chat["parents"]):
                    if parent in gone:
                        gone.add(index)
                uids = {chat["messages"][index]["uid"] for index in gone}
                renumbered = {
                    old: new
                    for new, old in enumerate(i for i in range(len(chat["parents"])) if i not in gone)
                }
                chat["parents"] = [
                    None if parent is None else renumbered[parent]
                    for index, parent in enumerate(chat["parents"])
                    if index not in gone
                ]
                chat["messages"] = [m for m in chat["messages"] if m["uid"] not in uids]
                chat["leaf"] = None if chat["leaf"] is None else renumbered[chat["leaf"]]
                chat["feedback"] = [item for item in chat["feedback"] if item.get("message_uid") not in uids]
                self.chunks = {
                    key: c for key, c in self.chunks.items() if key not in {(chat_id, u) for u in uids}
                }
            self._wrote(chat_id)
        assert version == self.versions[chat_id]

    @precondition(lambda self: self.chats)
    @rule(data=st.data(), score=st.one_of(st.none(), st.integers(-1, 1)), label=st.one_of(st.none(), text))
    def add_feedback(self, data: st.DataObject, score: int | None, label: str | None) -> None:
        chat_id = data.draw(self._chat_ids())
        uids = [message["uid"] for message in self.chats[chat_id]["messages"]]  # any message of the tree
        on = data.draw(st.one_of(st.none(), st.sampled_from(uids))) if uids else None
        self.feedback_made += 1
        item = {"id": f"made-{self.feedback_made}", "message_uid": on, "score": score, "label": label}
        stored = self.archive.add_feedback(chat_id, item)
        assert (stored.id, stored.message_uid, stored.score, stored.label) == (
            f"made-{self.feedback_made}",
            on,
            score,
            label,
        )
        self.chats[chat_id]["feedback"].append(stored.model_dump())
        self._wrote(chat_id)

    @precondition(lambda self: any(chat["feedback"] for chat in self.chats.values()))
    @rule(data=st.data())
    def delete_feedback(self, data: st.DataObject) -> None:
        chat_id = data.draw(st.sampled_from(sorted(c for c, chat in self.chats.items() if chat["feedback"])))
        chat = self.chats[chat_id]
        index = data.draw(st.integers(0, len(chat["feedback"]) - 1))
        self.archive.delete_feedback(chat_id, chat["feedback"][index]["id"])
        del chat["feedback"][index]
        self._wrote(chat_id)

    @precondition(lambda self: self.chats)
    @rule(
        data=st.data(),
        title=st.one_of(st.none(), text),
        tags=st.lists(st.text(min_size=1, max_size=5), unique=True, max_size=3),
        metadata=st.one_of(st.none(), st.dictionaries(text, st.integers(), max_size=2)),
    )
    def update(
        self, data: st.DataObject, title: str | None, tags: list[str], metadata: dict[str, Any] | None
    ) -> None:
        chat_id = data.draw(self._chat_ids())
        version = self.archive.update(chat_id, title=title, tags=tags, metadata=metadata)
        fields = self.chats[chat_id]["fields"]
        for key, value in {"title": title, "metadata": metadata, "tags": tags}.items():
            if value is None:
                fields.pop(key, None)  # cleared: read back as never set
            else:
                fields[key] = value
        self._wrote(chat_id)
        assert version == self.versions[chat_id]

    @precondition(lambda self: any(chat["messages"] for chat in self.chats.values()))
    @rule(
        data=st.data(),
        model=st.one_of(st.none(), text),
        usage=st.one_of(
            st.none(),
            st.fixed_dictionaries(
                {"prompt_tokens": st.integers(0, 10**6)}, optional={"requests": st.integers(0, 9)}
            ),
        ),
    )
    def update_message(self, data: st.DataObject, model: str | None, usage: dict[str, Any] | None) -> None:
        chat_id = data.draw(st.sampled_from(sorted(k for k, chat in self.chats.items() if chat["messages"])))
        message = data.draw(st.sampled_from(self.chats[chat_id]["messages"]))
        self.archive.update_message(chat_id, message["uid"], model=model, usage=usage)
        for key, value in {"model": model, "usage": usage}.items():
            if value is None:
                message.pop(key, None)  # cleared: read back as never set
            else:
                message[key] = value
        self._wrote(chat_id)

    @precondition(lambda self: self.chats)
    @rule(data=st.data())
    def begin_message(self, data: st.DataObject) -> None:
        chat_id = data.draw(self._chat_ids())
        message = self.archive.begin_message(chat_id)
        assert (message.role, message.content, message.completed) == ("assistant", "", False)
        self._add(chat_id, self.chats[chat_id]["leaf"], [message])
        self.chunks[(chat_id, message.uid)] = []

    @precondition(lambda self: self.chunks)
    @rule(data=st.data(), chunk=text)
    def append_chunk(self, data: st.DataObject, chunk: str) -> None:
        chat_id, uid = data.draw(st.sampled_from(sorted(self.chunks)))
        self.archive.append_chunk(chat_id, uid, chunk)
        self.chunks[(chat_id, uid)].append(chunk)
        (message,) = [m for m in self.chats[chat_id]["messages"] if m["uid"] == uid]
        message["content"] = "".join(self.chunks[(chat_id, uid)])

    @precondition(lambda self: self.chunks)
    @rule(data=st.data(), finish_reason=st.sampled_from(["stop", "length"]))
    def complete_message(self, data: st.DataObject, finish_reason: str) -> None:
        chat_id, uid = data.draw(st.sampled_from(sorted(self.chunks)))
        completed = self.archive.complete_message(chat_id, uid, finish_reason=finish_reason)
        del self.chunks[(chat_id, uid)]
        (message,) = [m for m in self.chats[chat_id]["messages"] if m["uid"] == uid]
        message.update(completed=True, finish_reason=finish_reason)
        assert completed.model_dump(exclude={"parent"}) == {k: v for k, v in message.items() if k != "parent"}
        self._wrote(chat_id)

    @precondition(lambda self: self.chats)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        chat_id = data.draw(self._chat_ids())
        self.archive.delete(chat_id)
        del self.chats[chat_id], self.versions[chat_id]
        self.chunks = {key: chunks for key, chunks in self.chunks.items() if key[0] != chat_id}

    # -- what must hold after every step ---------------------------------------

    def _expected_path(self, chat_id: str) -> dict[str, Any]:
        chat = self.chats[chat_id]
        path = [chat["messages"][index] for index in self._path(chat, chat["leaf"])]
        uids = {message["uid"] for message in path}
        return {
            **chat["fields"],
            "messages": [{k: v for k, v in message.items() if k != "parent"} for message in path],
            "feedback": [item for item in chat["feedback"] if item.get("message_uid") in uids | {None}],
        }

    @invariant()
    def every_chat_reads_back_as_the_model_says(self) -> None:
        for chat_id in CHAT_IDS:
            if chat_id not in self.chats:
                with pytest.raises(ChatNotFound):
                    self.archive.get(chat_id)
                continue
            chat = self.chats[chat_id]
            stored = self.archive.get(chat_id)
            assert _dump(stored) == self._expected_path(chat_id), chat_id
            assert stored.version == self.versions[chat_id]
            tree = self.archive.get_tree(chat_id)
            uids = [message["uid"] for message in chat["messages"]]
            assert [message.uid for message in tree.messages] == uids
            assert [tree.parent(uid) for uid in uids] == [
                None if parent is None else uids[parent] for parent in chat["parents"]
            ]
            assert tree.active_leaf == (None if chat["leaf"] is None else uids[chat["leaf"]])
            assert [item.model_dump() for item in tree.document.feedback] == chat["feedback"]
            assert _dump(
                ChatTree(ChatDocument.parse(json.loads(tree.document.model_dump_json()))).path_document()
            ) == _dump(stored)
        assert [doc.chat_id for doc in self.archive.get_many(CHAT_IDS)] == sorted(self.chats)
        assert self.archive.count_chats() == len(self.chats)
        assert {chat.chat_id: chat.message_count for chat in self.archive.list_chats().items} == {
            chat_id: len(self._path(chat, chat["leaf"])) for chat_id, chat in self.chats.items()
        }

    @invariant()
    def the_rows_hold_the_tree(self) -> None:
        """What the tree's columns promise, read from the rows: gapless
        positions, parents before children, siblings numbered in order, and
        the active path flagged, counted and ended where the chat says."""
        with self.engine.connect() as connection:
            for chat_id, chat in self.chats.items():
                rows = connection.execute(
                    sql_text(
                        "SELECT position, parent_position, sibling_index, on_path FROM messages "
                        "WHERE chat_id = :chat_id ORDER BY position"
                    ),
                    {"chat_id": chat_id},
                ).all()
                count, leaf, length = connection.execute(
                    sql_text("SELECT message_count, active_leaf, path_length FROM chats WHERE chat_id = :c"),
                    {"c": chat_id},
                ).one()
                assert [row.position for row in rows] == list(range(len(rows))) == list(range(count))
                assert [row.parent_position for row in rows] == chat["parents"]
                seen: dict[int | None, int] = {}
                for row in rows:
                    assert row.sibling_index == seen.get(row.parent_position, 0)
                    seen[row.parent_position] = row.sibling_index + 1
                path = self._path(chat, chat["leaf"])
                assert [row.position for row in rows if row.on_path] == path
                assert (leaf, length) == (chat["leaf"], len(path))


def test_every_write_reads_back_as_promised(archive: ChatArchive, engine: Engine) -> None:
    def empty() -> None:
        with engine.begin() as connection:
            empty_archive(connection)

    class Machine(ArchiveModel):
        def __init__(self) -> None:
            empty()
            super().__init__()

    Machine.archive = archive
    Machine.engine = engine
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=25,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
