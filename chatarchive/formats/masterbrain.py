"""Airalogy Masterbrain's full chat document (``ChatDoc``).

Mapping (and back, exactly):

==========================  ==========================================================
ChatDoc                     ChatDocument
==========================  ==========================================================
``chat_id``, ``user_id``,   the same fields
``title``
``model.name``              ``model``; the rest of ``model`` (``enable_thinking``...)
                            is ``model_settings``
``scenario``                ``workflow``
``scenario_messages``       the first messages, each marked ``"masterbrain": "scenario"``
``main_messages``           the messages after them
``human_feedback[i]``       feedback on ``main_messages[i]``: ``score``, ``additional``
                            as ``comment`` (an empty slot, ``null``, is no feedback;
                            feedback on the chat or a scenario message has no slot)
message keys named like     kept as given under the message's ``masterbrain_keys`` key
the archive's own fields    (export leaves those fields out, so they would be lost)
(``uid``, ``created_at``,
``model``...) or
``masterbrain``
``start_time``,             kept as given under the document's ``masterbrain`` key, with
``end_time``, ``active``,   every other ChatDoc key (and ``created_at`` / ``updated_at``
``deleted``,                are set from the two times when they parse)
``system_message_name``,
``function_names``
==========================  ==========================================================
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from chatarchive._document import ARCHIVE_MESSAGE_FIELDS, ChatDocument
from chatarchive._exceptions import InvalidDocument

from ._format import Format

__all__ = [
    "ASIDE",
    "FORMATS",
    "KEY",
    "from_document",
    "looks_like",
    "to_document",
]

#: Where ChatDoc keys without an archive field are kept, in the document and on
#: scenario messages.
KEY = "masterbrain"
#: Where a ChatDoc message keeps its keys named like the archive's own fields
#: (or like KEY, or ASIDE itself), as given.
ASIDE = "masterbrain_keys"
_SET_ASIDE = frozenset({KEY, ASIDE, *ARCHIVE_MESSAGE_FIELDS})
_MAPPED = frozenset(
    {
        "chat_id",
        "user_id",
        "title",
        "model",
        "scenario",
        "scenario_messages",
        "main_messages",
        "human_feedback",
    }
)


#: The ChatDoc keys besides ``main_messages`` that only a ChatDoc has.
_OWN_KEYS = frozenset(
    {"scenario_messages", "human_feedback", "system_message_name", "function_names", "scenario"}
)


def looks_like(data: Any) -> bool:
    """A ``main_messages`` list with messages in it, or beside another key
    only a ChatDoc has (``scenario_messages``, ``human_feedback``...): an
    object with an empty ``main_messages`` and nothing else is no chat."""
    return (
        isinstance(data, dict)
        and isinstance(data.get("main_messages"), list)
        and (bool(data["main_messages"]) or bool(_OWN_KEYS & data.keys()))
    )


def _time(value: Any) -> datetime | None:
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value)
        except ValueError:
            return None
    return None


def to_document(data: Any) -> ChatDocument:
    if not looks_like(data):
        raise InvalidDocument("a Masterbrain ChatDoc is an object with 'main_messages'")
    scenario = data.get("scenario_messages") or []
    main = data.get("main_messages") or []
    if not isinstance(scenario, list) or not isinstance(main, list):
        raise InvalidDocument("scenario_messages and main_messages must be lists")
    messages = [_message(message, scenario=True) for message in scenario]
    messages += [_message(message, scenario=False) for message in main]
    feedback = []
    slots = data.get("human_feedback")
    document: dict[str, Any] = {
        "chat_id": data.get("chat_id"),
        "messages": messages,
        KEY: {key: value for key, value in data.items() if key not in _MAPPED},
    }
    if document["chat_id"] is None:
        del document["chat_id"]
    for key in ("user_id", "title"):
        if key in data:
            document[key] = data[key]
    model = data.get("model")
    if isinstance(model, dict):
        settings = {key: value for key, value in model.items() if key != "name"}
        document["model"] = model.get("name")
        document["model_settings"] = settings
    elif model is not None or "model" in data:
        document[KEY]["model"] = model
    if "scenario" in data:
        if isinstance(data["scenario"], dict) or data["scenario"] is None:
            document["workflow"] = data["scenario"]
        else:
            document[KEY]["scenario"] = data["scenario"]
    created, updated = _time(data.get("start_time")), _time(data.get("end_time"))
    if created is not None:
        document["created_at"] = created
    if updated is not None:
        document["updated_at"] = updated
    if slots is None and "human_feedback" in data:
        document[KEY]["human_feedback"] = None
    doc = ChatDocument.parse(document)
    if slots is not None:
        if not isinstance(slots, list):
            raise InvalidDocument(
                "human_feedback must be a list", chat_id=doc.chat_id, field="human_feedback"
            )
        document[KEY]["human_feedback_slots"] = len(slots)
        first_main = len(scenario)
        for index, slot in enumerate(slots):
            if slot is None:
                continue
            if not isinstance(slot, dict) or index >= len(main):
                raise InvalidDocument(
                    "human_feedback must hold an object (or null) per main message",
                    chat_id=doc.chat_id,
                    field=f"human_feedback[{index}]",
                )
            item = {key: value for key, value in slot.items() if key != "additional"}
            if "additional" in slot:
                item["comment"] = slot["additional"]
            item["message_uid"] = doc.messages[first_main + index].uid
            feedback.append(item)
        document["feedback"] = feedback
        document["messages"] = doc.messages  # validated already: their uids stay generated ones
        doc = ChatDocument.parse(document)
    return doc


def _message(message: Any, *, scenario: bool) -> Any:
    """A ChatDoc message as an archive message: marked if it is a scenario
    message, its keys the message cannot keep as they are set aside."""
    if not isinstance(message, dict):
        return message  # refused by validation, naming it
    result = {key: value for key, value in message.items() if key not in _SET_ASIDE}
    aside = {key: value for key, value in message.items() if key in _SET_ASIDE}
    if aside:
        result[ASIDE] = aside
    if scenario:
        result[KEY] = "scenario"
    return result


def from_document(doc: ChatDocument) -> Any:
    own: dict[str, Any] = dict((doc.model_extra or {}).get(KEY) or {})
    slots = own.pop("human_feedback_slots", None)
    chat: dict[str, Any] = {"chat_id": doc.chat_id}
    for key in ("user_id", "title"):
        if key in doc.model_fields_set:
            chat[key] = getattr(doc, key)
    if doc.model is not None or doc.model_settings is not None:
        chat["model"] = {"name": doc.model, **(doc.model_settings or {})}
    if "workflow" in doc.model_fields_set:
        chat["scenario"] = doc.workflow
    scenario, main = [], []
    for message in doc.messages:
        data = message.to_openai()
        part = data.pop(KEY, None)
        if isinstance(data.get(ASIDE), dict):
            data.update(data.pop(ASIDE))
        if part == "scenario":
            scenario.append(data)
        else:
            main.append((message.uid, data))
    chat["scenario_messages"] = scenario
    chat["main_messages"] = [data for _, data in main]
    position = {uid: index for index, (uid, _) in enumerate(main)}
    if slots is None and any(item.message_uid in position for item in doc.feedback):
        slots = len(main)  # feedback given in the archive, on a chat that came without human_feedback
    if slots is not None:
        feedback: list[Any] = [None] * slots
        for item in doc.feedback:
            index = position.get(item.message_uid or "")
            if index is None or index >= slots:
                continue
            data = item.model_dump(mode="json", exclude={"id", "message_uid", "created_at"})
            if "comment" in data:
                data["additional"] = data.pop("comment")
            feedback[index] = data
        chat["human_feedback"] = feedback
    return {**chat, **own}


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="masterbrain",
        what="an Airalogy Masterbrain ChatDoc",
        round_trip="exact",
        family="chat product",
        detection=60,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
        near_misses=(
            (
                lambda d: "main_messages" in d,
                "a Masterbrain ChatDoc, but its 'main_messages' is not a list, or is empty with no other "
                "ChatDoc key",
            ),
        ),
    ),
)
