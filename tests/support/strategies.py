"""Hypothesis strategies for OpenAI message lists and chat documents, and
:func:`exact` to compare what comes back."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from hypothesis import strategies as st

from chatarchive._document import ARCHIVE_MESSAGE_FIELDS

# Any text JSON can carry: NUL, the private-use escape character, emoji, ...
text = st.text(
    alphabet=st.one_of(
        st.characters(codec="utf-8"),
        st.sampled_from(["\x00", "\ue000", "\ue001", "\ue002", "\\", '"', "'", "\n", "😀"]),
    ),
    max_size=20,
)
json_numbers = st.one_of(
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=False, allow_infinity=False),
)
json_scalars = st.one_of(st.none(), st.booleans(), json_numbers, text)
json_values = st.recursive(
    json_scalars,
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(text, children, max_size=3)),
    max_leaves=8,
)


def extras(known: set[str] | frozenset[str]) -> st.SearchStrategy[dict[str, Any]]:
    """Unknown keys for an object whose own fields are ``known``."""
    return st.dictionaries(
        text.filter(lambda key: key not in known and not key.startswith("model_")),
        json_values,
        max_size=2,
    )


def _with_extras(
    base: st.SearchStrategy[dict[str, Any]], known: set[str]
) -> st.SearchStrategy[dict[str, Any]]:
    return st.builds(lambda fixed, more: {**more, **fixed}, base, extras(known))


PART_FIELDS = {"type", "text", "refusal", "image_url", "input_audio", "file"}
parts = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, text),
    st.builds(lambda u: {"type": "image_url", "image_url": u}, text),
    st.builds(
        lambda u, d: {"type": "image_url", "image_url": {"url": u, "detail": d}},
        text,
        st.sampled_from(["auto", "low", "high"]),
    ),
    st.builds(lambda d: {"type": "input_audio", "input_audio": {"data": d, "format": "wav"}}, text),
    st.builds(lambda f: {"type": "file", "file": {"file_id": f}}, text),
    st.builds(lambda r: {"type": "refusal", "refusal": r}, text),
    st.builds(lambda t, v: {"type": t, "value": v}, text, json_values),
    st.builds(lambda t: {"type": "text", "text": None, "note": t}, text),
).flatmap(lambda part: _with_extras(st.just(part), PART_FIELDS))

CALL_FIELDS = {"id", "type", "function", "custom"}
tool_calls = st.one_of(
    st.builds(
        lambda i, n, a: {"id": i, "type": "function", "function": {"name": n, "arguments": a}},
        text,
        text,
        text,
    ),
    st.builds(
        lambda i, n, a: {"id": i, "type": "custom", "custom": {"name": n, "input": a}}, text, text, text
    ),
    # A custom call's body is free-form: its keys come back in the order given.
    st.builds(
        lambda i, body: {"id": i, "type": "custom", "custom": dict(body)},
        text,
        st.builds(
            lambda n, a, more: [*more.items(), ("name", n), ("input", a)],
            text,
            text,
            extras({"name", "input"}),
        ).flatmap(st.permutations),
    ),
    # Shapes that break the spec, kept verbatim.
    st.builds(lambda n, a: {"function": {"name": n}, "arguments": a}, text, json_values),
    st.builds(lambda a: {"type": "function", "function": {"arguments": a}}, json_values),
    st.builds(lambda i: {"id": i, "function": {}}, text),
    st.builds(lambda i, t: {"id": i, "type": t}, text, st.one_of(st.none(), text)),
).flatmap(lambda call: _with_extras(st.just(call), CALL_FIELDS))

MESSAGE_FIELDS = {
    "role",
    "content",
    "name",
    "tool_calls",
    "tool_call_id",
    "function_call",
    "refusal",
    "audio",
} | set(ARCHIVE_MESSAGE_FIELDS)
_ABSENT = object()
contents = st.one_of(st.just(_ABSENT), st.none(), text, st.lists(parts, max_size=4))
roles = st.one_of(
    st.sampled_from(["system", "developer", "user", "assistant", "tool", "function"]), text.filter(bool)
)


@st.composite
def openai_messages(draw: st.DrawFn) -> dict[str, Any]:
    message: dict[str, Any] = {"role": draw(roles)}
    content = draw(contents)
    if content is not _ABSENT:
        message["content"] = content
    optional = {
        "name": st.one_of(st.none(), text),
        "tool_call_id": st.one_of(st.none(), text),
        "tool_calls": st.one_of(st.none(), st.lists(tool_calls, max_size=3)),
        "function_call": st.one_of(st.none(), st.fixed_dictionaries({"name": text, "arguments": text})),
        "refusal": st.one_of(st.none(), text),
        "audio": st.one_of(st.none(), st.fixed_dictionaries({"id": text})),
    }
    for key, strategy in optional.items():
        if draw(st.booleans()):
            message[key] = draw(strategy)
    flags = st.dictionaries(
        st.sampled_from(["is_intent", "is_tool_extra_message", "is_helper_message", "is_reasoning"]),
        st.booleans(),
    )
    return {**draw(extras(MESSAGE_FIELDS)), **draw(flags), **message}


message_lists = st.lists(openai_messages(), max_size=6)

timestamps = st.builds(
    lambda moment, offset: moment.replace(tzinfo=UTC).astimezone(timezone(timedelta(minutes=offset))),
    st.datetimes(min_value=datetime(1970, 1, 2), max_value=datetime(2200, 1, 1)),
    st.integers(min_value=-12 * 60, max_value=12 * 60),
)
identifiers = st.text(min_size=1, max_size=40)


@st.composite
def canonical_documents(draw: st.DrawFn) -> dict[str, Any]:
    """Documents in canonical form, archive fields included."""
    messages = draw(message_lists)
    uids = draw(st.lists(identifiers, min_size=len(messages), max_size=len(messages), unique=True))
    for message, uid in zip(messages, uids, strict=True):
        message["uid"] = uid
        message["created_at"] = draw(timestamps)
        message["completed"] = draw(st.booleans())
        if draw(st.booleans()):
            message["updated_at"] = draw(timestamps)
        if draw(st.booleans()):
            message["model"] = draw(text)
            message["finish_reason"] = draw(st.sampled_from(["stop", "length", "tool_calls"]))
        if draw(st.booleans()):
            message["usage"] = draw(
                st.one_of(
                    st.none(),
                    st.fixed_dictionaries(
                        {},
                        optional={
                            "prompt_tokens": st.integers(0, 2**40),
                            "completion_tokens": st.integers(0, 10**6),
                            "total_tokens": st.integers(0, 10**6),
                            "completion_tokens_details": st.fixed_dictionaries(
                                {"reasoning_tokens": st.integers(0, 99)}
                            ),
                        },
                    ),
                )
            )
    feedback = []
    for index in range(draw(st.integers(0, 3))):
        item: dict[str, Any] = {"id": f"fb-{index}", "created_at": draw(timestamps)}
        if draw(st.booleans()) and messages:
            item["message_uid"] = draw(st.sampled_from(uids))
        if draw(st.booleans()):
            item["score"] = draw(
                st.one_of(
                    st.integers(-5, 5),
                    st.sampled_from([0.5, -1.25, 4.0, -0.0, 2**60]),
                    json_numbers,
                )
            )
        for key in ("user_id", "label", "comment"):
            if draw(st.booleans()):
                item[key] = draw(st.one_of(st.none(), text))
        feedback.append(
            {
                **draw(extras({"id", "message_uid", "user_id", "score", "label", "comment", "created_at"})),
                **item,
            }
        )
    document: dict[str, Any] = {
        "chat_id": draw(identifiers),
        "tags": draw(st.lists(st.text(min_size=1, max_size=10), unique=True, max_size=3)),
        "created_at": draw(timestamps),
        "updated_at": draw(timestamps),
        "messages": messages,
        "feedback": feedback,
    }
    for key in ("user_id", "title", "model"):
        if draw(st.booleans()):
            document[key] = draw(st.one_of(st.none(), identifiers))
    for key in ("model_settings", "workflow", "metadata"):
        if draw(st.booleans()):
            document[key] = draw(st.one_of(st.none(), st.dictionaries(text, json_values, max_size=3)))
    known = {"chat_id", "user_id", "title", "model", "model_settings", "workflow", "metadata", "tags"}
    known |= {"created_at", "updated_at", "messages", "feedback", "version"}
    return {**draw(extras(known)), **document}


@st.composite
def tree_documents(draw: st.DrawFn) -> dict[str, Any]:
    """Canonical documents whose messages form a tree: each one follows the
    message before it, or names another earlier message (or none: a root) as
    its ``parent``; ``active_leaf`` is any message when given."""
    document = draw(canonical_documents())
    messages = document["messages"]
    for index, message in enumerate(messages[1:], start=1):
        choice = draw(st.integers(0, 3))
        if choice == 1:
            message["parent"] = None
        elif choice >= 2:
            message["parent"] = messages[draw(st.integers(0, index - 2))]["uid"] if index > 1 else None
    if messages and draw(st.booleans()):
        document["active_leaf"] = draw(st.sampled_from([None, *[m["uid"] for m in messages[:-1]]]))
    return document


def _maybe(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """A value for an optional key: ``_ABSENT`` leaves the key out."""
    return st.one_of(st.just(_ABSENT), strategy)


def _present(fields: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in fields.items() if value is not _ABSENT}


_seconds = st.floats(min_value=1e9, max_value=2e9)
_chatgpt_parts = st.lists(st.one_of(text, st.dictionaries(text, json_values, max_size=2)), max_size=3)


@st.composite
def _chatgpt_messages(draw: st.DrawFn) -> dict[str, Any]:
    content = draw(
        st.one_of(
            st.builds(lambda kind, parts: {"content_type": kind, "parts": parts}, text, _chatgpt_parts),
            st.builds(
                lambda kind, code: {"content_type": kind, "language": "python", "text": code}, text, text
            ),
            st.dictionaries(text, json_values, max_size=2),
            json_values,
        )
    )
    author = draw(
        st.one_of(
            st.builds(
                lambda role, name: _present({"role": role, "name": name, "metadata": {}}),
                _maybe(st.one_of(st.sampled_from(["user", "assistant", "system", "tool"]), text, st.none())),
                _maybe(st.one_of(st.none(), text)),
            ),
            json_values,
        )
    )
    fields = {
        "id": draw(_maybe(text)),
        "author": author,
        "create_time": draw(_maybe(st.one_of(st.none(), _seconds))),
        "content": content,
        "metadata": draw(_maybe(st.one_of(st.dictionaries(text, json_values, max_size=2), json_values))),
    }
    return {**draw(extras(set(fields))), **_present(fields)}


@st.composite
def chatgpt_conversations(draw: st.DrawFn) -> dict[str, Any]:
    """A conversation of ChatGPT's export: a random tree, a random current node."""
    size = draw(st.integers(min_value=1, max_value=6))
    ids = draw(st.lists(text, min_size=size, max_size=size, unique=True))
    parents: list[str | None] = [None] + [ids[draw(st.integers(0, index - 1))] for index in range(1, size)]
    mapping = {
        node_id: {
            "id": node_id,
            "message": draw(st.one_of(st.none(), _chatgpt_messages())),
            "parent": parent,
            "children": [
                child for child, its_parent in zip(ids, parents, strict=True) if its_parent == node_id
            ],
            **draw(extras({"id", "message", "parent", "children"})),
        }
        for node_id, parent in zip(ids, parents, strict=True)
    }
    fields = {
        "title": draw(_maybe(st.one_of(st.none(), text))),
        "create_time": draw(_maybe(_seconds)),
        "update_time": draw(_maybe(_seconds)),
        "conversation_id": draw(_maybe(identifiers)),
        "current_node": draw(st.sampled_from(ids)),
        "mapping": mapping,
    }
    return {**draw(extras(set(fields) | {"id"})), **_present(fields)}


def exact(value: Any) -> Any:
    """``value`` with its objects as lists of pairs and its numbers with their
    type: compared, key order, ``1`` vs ``1.0`` vs ``True`` and ``-0.0`` vs
    ``0.0`` count."""
    if isinstance(value, dict):
        return [(key, exact(item)) for key, item in value.items()]
    if isinstance(value, list):
        return [exact(item) for item in value]
    if isinstance(value, (int, float)):
        return (type(value).__name__, repr(value))
    return value
