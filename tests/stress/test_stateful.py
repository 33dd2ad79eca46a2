"""The archive against a model: random sequences of every write, each followed
by reading every chat back and comparing it with what the calls promise."""

from __future__ import annotations

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
from sqlalchemy import Engine, delete

from chatarchive import ChatArchive, ChatDocument, ChatNotFound, InvalidDocument
from chatarchive._schema import metadata
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
    """Each chat as the calls made so far say it must read back."""

    archive: ChatArchive

    def __init__(self) -> None:
        super().__init__()
        self.chats: dict[str, dict[str, Any]] = {}
        self.versions: dict[str, int] = {}
        self.chunks: dict[tuple[str, str], list[str]] = {}  # streamed, not completed yet
        self.feedback_made = 0

    def _stored(self, chat_id: str) -> dict[str, Any]:
        return _dump(self.archive.get(chat_id))

    def _wrote(self, chat_id: str) -> None:
        self.versions[chat_id] += 1

    # -- writes --------------------------------------------------------------

    @rule(data=canonical_documents(), chat_id=st.sampled_from(CHAT_IDS))
    def save(self, data: dict[str, Any], chat_id: str) -> None:
        doc = ChatDocument.parse({**data, "chat_id": chat_id, "user_id": None})
        version = self.archive.save(doc)
        assert version == self.versions.get(chat_id, 0) + 1
        self.chats[chat_id] = _filled(_dump(doc), self._stored(chat_id))
        self.versions[chat_id] = version
        self.chunks = {key: chunks for key, chunks in self.chunks.items() if key[0] != chat_id}

    @precondition(lambda self: self.chats)
    @rule(data=st.data(), messages=st.lists(openai_messages(), max_size=3))
    def append(self, data: st.DataObject, messages: list[dict[str, Any]]) -> None:
        chat_id = data.draw(st.sampled_from(sorted(self.chats)))
        try:
            stored = self.archive.append(chat_id, messages)
        except InvalidDocument:
            return  # a message the archive refuses (an invalid role, say): nothing changed
        assert len(stored) == len(messages)
        for given, message in zip(messages, stored, strict=True):
            expected = ChatDocument.parse({"messages": [given]}).messages[0].model_dump()
            assert message.model_dump(exclude={"uid", "created_at"}) == {
                k: v for k, v in expected.items() if k not in ("uid", "created_at")
            }
        self.chats[chat_id]["messages"] += [message.model_dump() for message in stored]
        if messages:
            self._wrote(chat_id)

    @precondition(lambda self: self.chats)
    @rule(data=st.data(), keep=st.integers(0, 8))
    def truncate(self, data: st.DataObject, keep: int) -> None:
        chat_id = data.draw(st.sampled_from(sorted(self.chats)))
        chat = self.chats[chat_id]
        removed = {message["uid"] for message in chat["messages"][keep:]}
        version = self.archive.truncate(chat_id, keep)
        if removed:
            chat["messages"] = chat["messages"][:keep]
            chat["feedback"] = [item for item in chat["feedback"] if item.get("message_uid") not in removed]
            self.chunks = {
                key: c for key, c in self.chunks.items() if key not in {(chat_id, u) for u in removed}
            }
            self._wrote(chat_id)
        assert version == self.versions[chat_id]

    @precondition(lambda self: self.chats)
    @rule(data=st.data(), score=st.one_of(st.none(), st.integers(-1, 1)), label=st.one_of(st.none(), text))
    def add_feedback(self, data: st.DataObject, score: int | None, label: str | None) -> None:
        chat_id = data.draw(st.sampled_from(sorted(self.chats)))
        uids = [message["uid"] for message in self.chats[chat_id]["messages"]]
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
        chat_id = data.draw(st.sampled_from(sorted(self.chats)))
        version = self.archive.update(chat_id, title=title, tags=tags, metadata=metadata)
        chat = self.chats[chat_id]
        for key, value in {"title": title, "metadata": metadata, "tags": tags}.items():
            if value is None:
                chat.pop(key, None)  # cleared: read back as never set
            else:
                chat[key] = value
        self._wrote(chat_id)
        assert version == self.versions[chat_id]

    @precondition(lambda self: self.chats)
    @rule(data=st.data())
    def begin_message(self, data: st.DataObject) -> None:
        chat_id = data.draw(st.sampled_from(sorted(self.chats)))
        message = self.archive.begin_message(chat_id)
        assert (message.role, message.content, message.completed) == ("assistant", "", False)
        self.chats[chat_id]["messages"].append(message.model_dump())
        self.chunks[(chat_id, message.uid)] = []
        self._wrote(chat_id)

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
        assert completed.model_dump() == message
        self._wrote(chat_id)

    @precondition(lambda self: self.chats)
    @rule(data=st.data())
    def delete(self, data: st.DataObject) -> None:
        chat_id = data.draw(st.sampled_from(sorted(self.chats)))
        self.archive.delete(chat_id)
        del self.chats[chat_id], self.versions[chat_id]
        self.chunks = {key: chunks for key, chunks in self.chunks.items() if key[0] != chat_id}

    # -- what must hold after every step ---------------------------------------

    @invariant()
    def every_chat_reads_back_as_the_model_says(self) -> None:
        for chat_id in CHAT_IDS:
            if chat_id in self.chats:
                stored = self.archive.get(chat_id)
                assert _dump(stored) == self.chats[chat_id], chat_id
                assert stored.version == self.versions[chat_id]
            else:
                with pytest.raises(ChatNotFound):
                    self.archive.get(chat_id)
        assert [doc.chat_id for doc in self.archive.get_many(CHAT_IDS)] == sorted(self.chats)
        assert self.archive.count_chats() == len(self.chats)


def test_every_write_reads_back_as_promised(archive: ChatArchive, engine: Engine) -> None:
    def empty() -> None:
        with engine.begin() as connection:
            for table in reversed(metadata.sorted_tables):
                connection.execute(delete(table))

    class Machine(ArchiveModel):
        def __init__(self) -> None:
            empty()
            super().__init__()

    Machine.archive = archive
    run_state_machine_as_test(
        Machine,
        settings=settings(
            max_examples=25,
            stateful_step_count=20,
            deadline=None,
            suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
        ),
    )
