"""ShareGPT: ``{"conversations": [{"from": "human" | "gpt" | "system" | ..., "value": ...}]}``.

``human`` and ``gpt`` become the roles ``user`` and ``assistant``; any other
``from`` (``system``, ``tool``, ``function_call``, ``observation``...) is kept as
the role itself. A turn's other keys and the record's other keys (``id``,
``system``, ``tools``...) are kept, so export gives back exactly the input: a
turn's keys that its message cannot hold as they are (``role``, ``content``,
and the archive's own fields ``uid``, ``created_at``, ``model``...) are kept
under the message's ``sharegpt`` key.
"""

from __future__ import annotations

from typing import Any

from chatarchive._document import ARCHIVE_MESSAGE_FIELDS, ChatDocument
from chatarchive._exceptions import InvalidDocument

from ._format import Format

__all__ = ["FORMATS", "from_document", "looks_like", "to_document"]

_ROLES = {"human": "user", "gpt": "assistant"}
_SPEAKERS = {role: speaker for speaker, role in _ROLES.items()}
#: Where the record's own keys are kept in the document, and a turn's keys
#: that its message cannot hold as they are.
KEY = "sharegpt"
#: Turn keys set aside under KEY: the message's role and content (from
#: ``from`` and ``value``), and the archive's own fields, which export leaves out.
_SET_ASIDE = frozenset({"role", "content", KEY, *ARCHIVE_MESSAGE_FIELDS})


def looks_like(data: Any) -> bool:
    """A ``conversations`` list of turns, each with ``from``; an empty one is
    no chat (ShareGPT has no record of an empty conversation)."""
    turns = data.get("conversations") if isinstance(data, dict) else None
    return (
        isinstance(turns, list)
        and bool(turns)
        and all(isinstance(turn, dict) and "from" in turn for turn in turns)
    )


def to_document(data: Any) -> ChatDocument:
    if not looks_like(data):
        raise InvalidDocument("a ShareGPT record is an object with a 'conversations' list of {from, value}")
    messages = []
    for index, turn in enumerate(data["conversations"]):
        speaker = turn.get("from")
        if not isinstance(speaker, str):
            raise InvalidDocument("'from' must be a string", message_index=index, field="from")
        rest = {key: value for key, value in turn.items() if key not in ("from", "value", *_SET_ASIDE)}
        aside = {key: value for key, value in turn.items() if key in _SET_ASIDE}
        role = _ROLES.get(speaker, speaker)
        if _SPEAKERS.get(role, role) != speaker:
            rest["from"] = speaker  # e.g. "user": export would otherwise say "human"
        message: dict[str, Any] = {**rest, "role": role}
        if "value" in turn:
            message["content"] = turn["value"]
        if aside:
            message[KEY] = aside
        messages.append(message)
    own = {key: value for key, value in data.items() if key != "conversations"}
    return ChatDocument.parse({"messages": messages, KEY: own})


def from_document(doc: ChatDocument) -> Any:
    turns = []
    for message in doc.to_openai():
        role = message.pop("role")
        turn: dict[str, Any] = {"from": message.pop("from", None) or _SPEAKERS.get(role, role)}
        if "content" in message:
            turn["value"] = message.pop("content")
        aside = message.pop(KEY) if isinstance(message.get(KEY), dict) else {}
        turns.append({**turn, **message, **aside})
    own = (doc.model_extra or {}).get(KEY) or {}
    return {**own, "conversations": turns}


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="sharegpt",
        what='{"conversations": [{"from", "value"}]}',
        round_trip="exact",
        family="dataset",
        detection=140,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
        near_misses=(
            (
                lambda d: "conversations" in d,
                "a ShareGPT record, but its 'conversations' is not a list of turns (objects with 'from')",
            ),
        ),
    ),
)
