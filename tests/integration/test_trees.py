"""Conversation trees against real databases, on every face: branches added
by ``append(parent=)``, ``regenerate`` and ``edit``, the active path moved and
cut, the whole tree read and saved back."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from sqlalchemy import text
from sqlalchemy.orm import Session

from chatarchive import (
    ChatDocument,
    ChatNotFound,
    ChatRepository,
    ChatTree,
    ConflictError,
    InvalidArgument,
    InvalidDocument,
)
from chatarchive._repository import reads
from chatarchive._repository.plans import Kind, Step
from tests.support.chats import counts, snapshot
from tests.support.strategies import exact, tree_documents


def _contents(doc: ChatDocument) -> list[Any]:
    return [message.content for message in doc.messages]


def _question(repo: ChatRepository, chat_id: str = "t") -> ChatDocument:
    repo.save(
        ChatDocument.parse(
            {
                "chat_id": chat_id,
                "messages": [
                    {"role": "system", "content": "be brief", "uid": "s"},
                    {"role": "user", "content": "Why is the sky blue?", "uid": "q"},
                    {"role": "assistant", "content": "Rayleigh scattering.", "uid": "a1"},
                ],
            }
        )
    )
    return repo.get(chat_id)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(data=tree_documents())
def test_a_saved_tree_reads_back_whole_and_as_its_active_path(
    session: Session, make_repo: Any, data: dict[str, Any]
) -> None:
    repo = make_repo()
    doc = ChatDocument.parse(data)
    savepoint = session.begin_nested()
    try:
        repo.save(doc)
        tree = repo.get_tree(doc.chat_id)
        assert exact(tree.document.model_dump()) == exact(doc.model_dump())
        path = ChatTree(doc).path_document()
        assert exact(repo.get(doc.chat_id).model_dump()) == exact(path.model_dump())
        assert repo.list_chats().items[0].message_count == len(path.messages)
        for message in doc.messages:  # every other path, by its leaf
            other = repo.get(doc.chat_id, leaf=message.uid)
            assert other.messages == ChatTree(doc).path_document(message.uid).messages
        for count in range(1, len(path.messages) + 2):  # the tail of the active path, read alone
            tail = repo._run_step(
                Step(Kind.READ, partial(reads.last_messages, chat_id=doc.chat_id, count=count))
            )
            kept = path.messages[-count:]
            assert exact(tail.model_dump()) == exact(
                path.model_copy(
                    update={
                        "messages": kept,
                        "feedback": [
                            f for f in path.feedback if f.message_uid in {None, *(m.uid for m in kept)}
                        ],
                    }
                ).model_dump()
            )
        (exported,) = list(repo.export())
        assert exported.model_dump() == tree.document.model_dump()
    finally:
        savepoint.rollback()


def test_regenerate_keeps_the_rejected_answer_as_a_sibling(repo: ChatRepository) -> None:
    _question(repo)
    repo.add_feedback("t", {"id": "down", "message_uid": "a1", "score": -1})
    (again,) = repo.regenerate("t", "a1", [{"role": "assistant", "content": "Blue light scatters most."}])
    back = repo.get("t")
    assert _contents(back) == ["be brief", "Why is the sky blue?", "Blue light scatters most."]
    assert back.feedback == []  # the feedback is on the other branch
    assert back.version == 3

    tree = repo.get_tree("t")
    assert [m.uid for m in tree.siblings(again.uid)] == ["a1", again.uid]
    assert tree.parent(again.uid) == tree.parent("a1") == "q"
    assert tree.active_leaf == again.uid
    assert [m.uid for m in tree.leaves()] == ["a1", again.uid]
    assert [item.id for item in tree.document.feedback] == ["down"]
    # The rejected answer, with the feedback on it, is one call away.
    old = repo.get("t", leaf="a1")
    assert _contents(old)[-1] == "Rayleigh scattering."
    assert [item.id for item in old.feedback] == ["down"]
    assert repo.get("t").version == 3  # reading another path changes nothing


def test_append_branches_off_any_message_and_the_new_branch_becomes_the_path(
    repo: ChatRepository,
) -> None:
    _question(repo)
    repo.append("t", [{"role": "user", "content": "And at sunset?", "uid": "q2"}])
    repo.append("t", [{"role": "assistant", "content": "Longer path.", "uid": "a2"}])
    # A new question instead of the first one, with its answer: a branch off the system prompt.
    repo.append(
        "t",
        [
            {"role": "user", "content": "Why is grass green?"},
            {"role": "assistant", "content": "Chlorophyll."},
        ],
        parent="s",
    )
    assert _contents(repo.get("t")) == ["be brief", "Why is grass green?", "Chlorophyll."]
    # The default parent is the active leaf.
    repo.append("t", [{"role": "user", "content": "Thanks"}])
    assert _contents(repo.get("t"))[-1] == "Thanks"
    assert _contents(repo.get("t", leaf="a2")) == [
        "be brief",
        "Why is the sky blue?",
        "Rayleigh scattering.",
        "And at sunset?",
        "Longer path.",
    ]
    tree = repo.get_tree("t")
    assert [m.content for m in tree.children("s")] == ["Why is the sky blue?", "Why is grass green?"]
    assert tree.children(None)[0].uid == "s"
    # A new root: parent None is not "the active leaf", so it is named as a uid, never as None.
    with pytest.raises(InvalidArgument, match="no message with uid") as caught:
        repo.append("t", [{"role": "user"}], parent="nope")
    assert caught.value.argument == "parent"


def test_edit_adds_a_sibling_question_that_awaits_its_answer(repo: ChatRepository) -> None:
    _question(repo)
    edited = repo.edit("t", "q", "Why is the sky blue at noon?")
    assert (edited.role, edited.content) == ("user", "Why is the sky blue at noon?")
    assert _contents(repo.get("t")) == ["be brief", "Why is the sky blue at noon?"]
    repo.append("t", [{"role": "assistant", "content": "The sun is high."}])
    assert _contents(repo.get("t"))[1:] == ["Why is the sky blue at noon?", "The sun is high."]
    assert _contents(repo.get("t", leaf="a1"))[1:] == ["Why is the sky blue?", "Rayleigh scattering."]
    named = repo.get_tree("t")
    assert [m.uid for m in named.siblings("q")] == ["q", edited.uid]
    with pytest.raises(InvalidArgument) as caught:
        repo.edit("t", "nope", "x")
    assert caught.value.argument == "message_uid"


def test_set_active_leaf_moves_the_path_and_is_serialized_by_version(repo: ChatRepository) -> None:
    _question(repo)
    (again,) = repo.regenerate("t", "a1", [{"role": "assistant", "content": "Blue scatters."}])
    version = repo.get("t").version
    assert version is not None
    assert repo.set_active_leaf("t", "a1", expected_version=version) == version + 1
    assert _contents(repo.get("t"))[-1] == "Rayleigh scattering."
    assert repo.set_active_leaf("t", "a1") == version + 1  # already there: no new version
    with pytest.raises(ConflictError):  # the version read before the move is stale
        repo.set_active_leaf("t", again.uid, expected_version=version)
    assert _contents(repo.get("t"))[-1] == "Rayleigh scattering."
    # A path may end early: on the question, ready for a third answer.
    repo.set_active_leaf("t", "q")
    assert _contents(repo.get("t")) == ["be brief", "Why is the sky blue?"]
    (third,) = repo.append("t", [{"role": "assistant", "content": "Air."}])
    assert [m.uid for m in repo.get_tree("t").siblings(third.uid)] == ["a1", again.uid, third.uid]
    with pytest.raises(InvalidArgument) as caught:
        repo.set_active_leaf("t", "nope")
    assert caught.value.argument == "leaf"
    with pytest.raises(ChatNotFound):
        repo.set_active_leaf("missing", "a1")


def test_truncate_keeps_the_cut_messages_as_a_branch_by_default(
    repo: ChatRepository, session: Session
) -> None:
    _question(repo)
    repo.add_feedback("t", {"id": "down", "message_uid": "a1", "score": -1})
    before = counts(session)
    repo.truncate("t", 2)
    assert _contents(repo.get("t")) == ["be brief", "Why is the sky blue?"]
    assert repo.list_chats().items[0].message_count == 2
    assert counts(session) == before  # nothing deleted
    (again,) = repo.append("t", [{"role": "assistant", "content": "Blue scatters."}])
    tree = repo.get_tree("t")
    assert [m.uid for m in tree.siblings(again.uid)] == ["a1", again.uid]
    assert [item.id for item in repo.get("t", leaf="a1").feedback] == ["down"]
    # Searching looks at every branch.
    assert {hit.message_uid for hit in repo.search("Rayleigh")} == {"a1"}

    # delete=True deletes the cut messages and everything that grew from them.
    repo.set_active_leaf("t", "a1")
    repo.append("t", [{"role": "user", "content": "More?"}])
    repo.truncate("t", 2, delete=True)
    tree = repo.get_tree("t")
    assert [m.uid for m in tree.messages] == ["s", "q", again.uid]
    assert tree.active_leaf == "q"
    assert tree.document.feedback == []
    assert repo.search("Rayleigh") == []
    with pytest.raises(InvalidArgument, match="delete must be True or False"):
        repo.truncate("t", 1, delete=1)  # type: ignore[arg-type]


def test_feedback_attaches_to_messages_off_the_active_path(repo: ChatRepository) -> None:
    _question(repo)
    repo.regenerate("t", "a1", [{"role": "assistant", "content": "Blue scatters."}])
    stored = repo.add_feedback("t", {"message_uid": "a1", "score": -1, "label": "vague"})
    assert repo.get_tree("t").document.feedback == [stored]
    assert repo.get("t").feedback == []
    assert repo.get("t", leaf="a1").feedback == [stored]
    repo.delete_feedback("t", stored.id)
    assert repo.get_tree("t").document.feedback == []


def test_saving_a_linear_document_over_branches_is_refused(repo: ChatRepository, session: Session) -> None:
    _question(repo)
    repo.regenerate("t", "a1", [{"role": "assistant", "content": "Blue scatters."}])
    path = repo.get("t")
    before = snapshot(session)
    with pytest.raises(ConflictError, match="1 messages off its active path"):
        repo.save(path.model_copy(update={"title": "renamed"}))
    assert snapshot(session) == before
    # The whole tree, changed, saves; so does a linear document once the branch is gone.
    tree = repo.get_tree("t").document
    assert repo.save(tree.model_copy(update={"title": "renamed"}), expected_version=tree.version) == 3
    assert repo.get_tree("t").document.title == "renamed"
    repo.truncate("t", 2, delete=True)
    repo.truncate("t", 1, delete=True)
    assert repo.save(repo.get("t").model_copy(update={"title": "again"})) == 6


def test_a_document_naming_an_unknown_parent_or_leaf_is_refused() -> None:
    messages = [{"role": "user", "uid": "a"}, {"role": "assistant", "uid": "b", "parent": "c"}]
    with pytest.raises(InvalidDocument, match="parent 'c' is not a message before this one") as caught:
        ChatDocument.parse({"chat_id": "x", "messages": messages})
    assert (caught.value.chat_id, caught.value.message_index, caught.value.field) == ("x", 1, "parent")
    with pytest.raises(InvalidDocument, match="active_leaf 'z' is not a message"):
        ChatDocument.parse({"chat_id": "x", "messages": messages[:1], "active_leaf": "z"})
    # A parent that is the message before is what it would follow anyway: the document is linear.
    linear = ChatDocument.parse({"messages": [messages[0], {**messages[1], "parent": "a"}]})
    assert linear.is_linear
    assert "parent" not in json.loads(linear.model_dump_json())["messages"][1]


def test_the_tree_columns_stay_out_of_a_linear_chat(repo: ChatRepository, session: Session) -> None:
    """A linear chat reads and writes as before: the same document and JSON,
    its messages each the child of the one before, all on the path."""
    doc = _question(repo)
    assert "active_leaf" not in json.loads(doc.model_dump_json())
    rows = session.execute(
        text(
            "SELECT parent_position, sibling_index, on_path FROM messages WHERE chat_id = 't' ORDER BY position"
        )
    ).all()
    assert [tuple(row) for row in rows] == [(None, 0, True), (0, 0, True), (1, 0, True)]


@pytest.mark.parametrize("bulk", [False, True])
def test_save_many_refuses_a_linear_document_over_branches_as_save_does(
    repo: ChatRepository, session: Session, bulk: bool
) -> None:
    _question(repo)
    repo.regenerate("t", "a1", [{"role": "assistant", "content": "Blue scatters."}])
    path = repo.get("t").model_copy(update={"title": "renamed"})
    before = snapshot(session)
    with pytest.raises(ConflictError, match="off its active path"):
        repo.save_many([path], bulk=bulk)
    assert snapshot(session) == before
    errors: list[tuple[int, Exception]] = []
    other = {"chat_id": "other", "messages": [{"role": "user", "content": "hi"}]}
    assert repo.save_many([other, path], bulk=bulk, on_error=lambda i, e: errors.append((i, e))) == 1
    assert [(index, type(error)) for index, error in errors] == [(1, ConflictError)]
    assert repo.get("t").title is None
    # The whole tree replaces it.
    assert (
        repo.save_many([repo.get_tree("t").document.model_copy(update={"title": "renamed"})], bulk=bulk) == 1
    )
    assert repo.get("t").title == "renamed"
    assert len(repo.get_tree("t").messages) == 4
