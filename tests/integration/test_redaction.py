"""Redaction before storage: every write path replaces what the redactor
finds before any row is written, with placeholders stable within a chat;
no row, and no search, holds the originals."""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterable
from pathlib import Path

import pytest
from sqlalchemy import text
from sqlalchemy.orm import Session

from chatarchive import AsyncChatArchive, ChatArchive, InvalidArgument
from chatarchive.redaction import Finding, PatternRedactor, Redactor
from tests.support.chats import snapshot
from tests.support.commands import Run

EMAIL = "zyxwvut@quokka-mail.example"
CARD = "4111 1111 1111 1111"
IBAN = "DE89 3704 0044 0532 0130 00"
PHONE = "+49 30 1234567"
API_KEY = "sk-proj-Qw3rtyUi0pAsDfGhJkLzXcVbNm12"
SECRETS = (EMAIL, CARD, IBAN, PHONE, API_KEY)
#: What must appear in no row: each secret, and its digits or its words without separators.
TRACES = (EMAIL, "quokka", "4111111111111111", "4111 1111", "DE89", "1234567", "Qw3rtyUi0p")
PLACEHOLDER = re.compile(r"\[(EMAIL|CARD|IBAN|PHONE|API_KEY)_[0-9a-f]{8}\]")


@pytest.fixture
def redacting(archive: ChatArchive) -> ChatArchive:
    """The shared archive's database, written through a redacting archive."""
    return ChatArchive(engine=archive.engine, redactor=PatternRedactor(key=b"the application's key"))


def leaked(archive: ChatArchive) -> list[str]:
    """Every trace of a secret found in any row of any table (search terms included)."""
    with archive.engine.connect() as connection, Session(bind=connection) as session:
        rows = json.dumps(snapshot(session), ensure_ascii=False)
    return [trace for trace in TRACES if trace in rows]


def test_every_write_path_redacts_before_anything_is_stored(redacting: ChatArchive) -> None:
    redactor = redacting._redactor
    assert redactor is not None
    redacting.save(
        {
            "chat_id": "saved",
            "title": f"Refund to {EMAIL}",
            "messages": [
                {"role": "user", "content": f"My card is {CARD}, mail {EMAIL}"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "text", "text": f"Sending to {IBAN}"},
                        {"type": "reasoning", "text": f"the key {API_KEY} is in the prompt"},
                    ],
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "mail", "arguments": json.dumps({"to": EMAIL, "n": 2})},
                        },
                        {
                            "id": "call_2",
                            "type": "custom",
                            "custom": {"name": "sh", "input": f"dial {PHONE}"},
                        },
                    ],
                },
            ],
            "feedback": [{"score": 1, "comment": f"call me at {PHONE}"}],
        }
    )
    redacting.save_many([{"chat_id": "many", "messages": [{"role": "user", "content": f"iban {IBAN}"}]}])
    question = redacting.append("many", [{"role": "user", "content": f"phone {PHONE}"}])[0]
    redacting.append("many", [{"role": "assistant", "content": "ok", "refusal": f"not {EMAIL}"}])
    # A chat created by its first append: its title too.
    redacting.append(
        "created", [{"role": "user", "content": f"mail {EMAIL}"}], create={"title": f"for {PHONE}"}
    )
    redacting.regenerate(
        "many", redacting.get("many").messages[-1].uid, [{"role": "assistant", "content": CARD}]
    )
    redacting.edit("many", question.uid, f"my key is {API_KEY}")
    redacting.update("many", title=f"about {EMAIL}")
    redacting.add_feedback("many", {"comment": f"mail {EMAIL}"})
    redacting.record_completion(
        "many",
        {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "gpt-4o",
            "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": f"{IBAN}"}}
            ],
        },
    )
    # Streamed: each chunk, and the completed message whole (the address is split between chunks).
    streamed = redacting.begin_message("many")
    for piece in ("write to zyxwvut@quo", "kka-mail.example and ", CARD):
        redacting.append_chunk("many", streamed.uid, piece)
    redacting.complete_message("many", streamed.uid)

    assert leaked(redacting) == []
    saved = redacting.get("saved")
    assert saved.title is not None
    assert PLACEHOLDER.fullmatch(saved.title.removeprefix("Refund to "))
    arguments = saved.messages[1].tool_calls[0].function.arguments  # type: ignore[index]
    assert json.loads(arguments)["n"] == 2  # still JSON
    assert redactor.counts() == {"api_key": 2, "card": 3, "email": 8, "iban": 3, "phone": 4}
    for secret in ("quokka", "4111111111111111", "Qw3rtyUi0pAsDfGhJkLzXcVbNm12"):
        assert list(redacting.search(secret)) == []


def test_a_placeholder_is_the_same_within_a_chat_and_differs_between_chats(redacting: ChatArchive) -> None:
    for chat_id in ("one", "two"):
        redacting.save(
            {
                "chat_id": chat_id,
                "messages": [
                    {"role": "user", "content": f"mail {EMAIL}"},
                    {"role": "assistant", "content": f"I wrote to {EMAIL.upper()}... no, to {EMAIL}"},
                ],
            }
        )
    one, two = (
        [PLACEHOLDER.search(str(message.content)) for message in redacting.get(chat_id).messages]
        for chat_id in ("one", "two")
    )
    assert one[0] is not None
    assert two[0] is not None
    assert one[0].group() == one[1].group()  # type: ignore[union-attr]
    assert one[0].group() != two[0].group()
    # A redacted chat saved again is as it was: placeholders find nothing more.
    stored = redacting.get("one")
    redacting.save(stored)
    assert redacting.get("one").messages == stored.messages


def test_the_same_key_gives_the_same_placeholders_in_another_process(archive: ChatArchive) -> None:
    first = PatternRedactor(key="shared").redact(EMAIL, "c")
    assert PatternRedactor(key="shared").redact(EMAIL, "c") == first
    assert PatternRedactor(key="other").redact(EMAIL, "c") != first
    assert PatternRedactor().redact(EMAIL, "c") != PatternRedactor().redact(EMAIL, "c")  # random keys


class Names(Redactor):
    """A redactor of one's own: finds the names it is told."""

    def __init__(self, names: Iterable[str]) -> None:
        super().__init__(key=b"names")
        self.pattern = re.compile("|".join(map(re.escape, names)))

    def find(self, text: str) -> list[Finding]:
        return [Finding(match.start(), match.end(), "person") for match in self.pattern.finditer(text)]


def test_a_redactor_of_ones_own_and_what_is_not_one(archive: ChatArchive) -> None:
    own = ChatArchive(engine=archive.engine, redactor=Names(["Rosalind Franklin"]))
    own.save({"chat_id": "names", "messages": [{"role": "user", "content": "Ask Rosalind Franklin."}]})
    assert re.fullmatch(r"Ask \[PERSON_[0-9a-f]{8}\]\.", str(own.get("names").messages[0].content))
    assert own.for_user("ann")._redactor is own._redactor
    with pytest.raises(InvalidArgument, match="redactor must be a Redactor"):
        ChatArchive(engine=archive.engine, redactor=lambda text: text)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgument, match="kinds must be some of"):
        PatternRedactor(kinds=["email", "postcode"])


def test_only_the_kinds_asked_for_are_redacted(archive: ChatArchive) -> None:
    emails = PatternRedactor(key="k", kinds=["email"])
    assert emails.redact(f"{EMAIL} {CARD}", "c").endswith(CARD)


def test_an_async_archive_redacts_as_well(redacting: ChatArchive) -> None:
    async def main() -> None:
        async with AsyncChatArchive(redacting.url, redactor=PatternRedactor()) as archive:
            await archive.save({"chat_id": "async", "messages": [{"role": "user", "content": EMAIL}]})
            await archive.append("async", [{"role": "assistant", "content": CARD}])

    if redacting.url.database in (None, "", ":memory:"):
        pytest.skip("an in-memory SQLite database is not shared with another engine")
    asyncio.run(main())
    assert leaked(redacting) == []
    with redacting.engine.connect() as connection:
        stored = connection.execute(text("SELECT text FROM messages WHERE chat_id = 'async'")).scalars().all()
    assert all(PLACEHOLDER.fullmatch(value) for value in stored)


def test_import_redacts_when_asked_with_the_key_of_the_environment(
    run: Run, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run("db", "upgrade")
    source = tmp_path / "chats.jsonl"
    source.write_text(
        json.dumps({"chat_id": "imported", "messages": [{"role": "user", "content": f"{EMAIL} {CARD}"}]})
        + "\n",
        encoding="utf-8",
    )
    monkeypatch.setenv("CHATARCHIVE_REDACTION_KEY", "the operator's key")
    ran = run("import", "--redact", str(source))
    assert "redacted 1 card, 1 email" in ran.stderr
    shown = run("show", "imported", "--json").stdout
    assert EMAIL not in shown
    expected = PatternRedactor(key="the operator's key").redact(f"{EMAIL} {CARD}", "imported")
    assert json.loads(shown)["messages"][0]["content"] == expected


def test_presidio_as_a_redactor_redacts_every_write_and_search_finds_no_original(
    archive: ChatArchive,
) -> None:
    """Presidio's analyzer (its pattern recognizers, no language model) as the
    archive's redactor: what it finds is replaced before anything is stored."""
    from chatarchive.integrations.presidio import PresidioRedactor

    mail = "quokka.ann@example.org"  # Presidio takes only domains of the public suffix list
    redactor = PresidioRedactor(
        key=b"the application's key", entities=["EMAIL_ADDRESS", "CREDIT_CARD", "IBAN_CODE"]
    )
    presidio = ChatArchive(engine=archive.engine, redactor=redactor)
    presidio.save(
        {"chat_id": "p", "messages": [{"role": "user", "content": f"Refund {CARD} to {IBAN}, mail {mail}"}]}
    )
    presidio.append("p", [{"role": "assistant", "content": [{"type": "text", "text": f"Done, {mail}."}]}])
    messages = presidio.get("p").messages
    question = str(messages[0].content)
    assert re.fullmatch(
        r"Refund \[CREDIT_CARD_[0-9a-f]{8}\] to \[IBAN_CODE_[0-9a-f]{8}\], mail (\[EMAIL_ADDRESS_[0-9a-f]{8}\])",
        question,
    )
    first = re.search(r"\[EMAIL_ADDRESS_[0-9a-f]{8}\]", question)
    assert first is not None
    assert messages[1].model_dump(mode="json")["content"][0]["text"] == f"Done, {first.group()}."
    assert redactor.counts() == {"credit_card": 1, "email_address": 2, "iban_code": 1}
    assert list(presidio.search("quokka")) == []
    assert leaked(archive) == []
