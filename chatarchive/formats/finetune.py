"""OpenAI fine-tuning JSONL: one ``{"messages", "tools", "parallel_tool_calls"}`` line per chat.

Import: a line's ``messages`` are the chat's messages (``weight`` kept on
each), its ``tools`` the chat's ``workflow["tools"]`` and its
``parallel_tool_calls`` the chat's ``model_settings["parallel_tool_calls"]``;
any other key of the line is kept on the document under its own name.

Export writes the lines OpenAI's fine-tuning accepts: messages keep only the
keys it knows (``role``, ``content``, ``name``, ``tool_calls``,
``tool_call_id``, ``function_call``, ``weight``); ``tools`` is written when the
chat's ``workflow["tools"]`` holds tool definitions (objects), and
``parallel_tool_calls`` when its ``model_settings`` has it (a boolean). A role
the API does not accept is mapped when its meaning is one it does
(``developer`` is ``system``; ShareGPT's ``human`` and ``gpt``, Gemini's
``model``, LangChain's ``human`` and ``ai``), and otherwise the chat is
skipped with the role named. ``select`` applies the filters that matter for
datasets and skips, with a reason, chats with a tool call that no later
message answers (one in the last message is a function-calling example: the
model learns to make that call), chats with a message not completed (a stream
still running, or one that stopped: its text is cut short) and chats with no
assistant message (none is left to train on; OpenAI's fine-tuning refuses such
an example).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from chatarchive._document import ChatDocument, Message
from chatarchive._exceptions import InvalidDocument

from ._format import Filters, Format, Selection, role_names
from .canonical import has_messages
from .chat_completions import ROLE_ALIASES, messages_of

__all__ = [
    "FORMATS",
    "ROLES",
    "ROLE_ALIASES",
    "Filters",
    "Selection",
    "chosen",
    "from_document",
    "looks_like",
    "problem",
    "select",
    "to_document",
    "tools_of",
    "training_messages",
    "unanswered_tool_calls",
]

_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "function_call", "weight")
#: The roles OpenAI's fine-tuning accepts.
ROLES = frozenset({"system", "user", "assistant", "tool", "function"})
#: Roles whose messages a training line leaves out: reasoning is no turn of the conversation.
_LEFT_OUT = frozenset({"reasoning"})
#: A line's keys besides ``messages``: the chat's tool definitions and settings.
_DEFINITIONS = ("tools", "functions")
_SETTINGS = ("parallel_tool_calls",)


def looks_like(data: Any) -> bool:
    """A line with ``messages`` and tool definitions or settings, and nothing
    else (a document with only ``messages`` is read as canonical, the same
    chat; one with a ``chat_id`` is chatarchive's own)."""
    return (
        has_messages(data)
        and data.keys() <= {"messages", *_DEFINITIONS, *_SETTINGS}
        and any(key in data for key in (*_DEFINITIONS, *_SETTINGS))
    )


def to_document(data: Any) -> ChatDocument:
    if not has_messages(data):
        raise InvalidDocument("a fine-tuning line has a 'messages' list")
    document = {key: value for key, value in data.items() if key not in (*_DEFINITIONS, *_SETTINGS)}
    for target, keys in (("workflow", _DEFINITIONS), ("model_settings", _SETTINGS)):
        given = {key: data[key] for key in keys if key in data}
        if given:
            own = document.get(target)
            document[target] = {**(own if isinstance(own, dict) else {}), **given}
    return ChatDocument.parse(document)


def from_document(doc: ChatDocument, exclude_roles: Iterable[str] = ()) -> dict[str, Any]:
    """The chat's training line.

    Raises:
        InvalidDocument: a message has a role fine-tuning does not accept.
    """
    line: dict[str, Any] = {"messages": training_messages(doc.messages, exclude_roles, chat_id=doc.chat_id)}
    for key in _DEFINITIONS:
        if definitions := tools_of(doc, key):
            line[key] = definitions
    for key in _SETTINGS:
        setting = (doc.model_settings or {}).get(key)
        if isinstance(setting, bool):
            line[key] = setting
    return line


def training_messages(
    messages: Iterable[Message], exclude_roles: Iterable[str] = (), *, chat_id: str | None = None
) -> list[dict[str, Any]]:
    """The messages as fine-tuning takes them: converted as the
    ``chat-completions`` export converts them (foreign roles mapped, see
    ``ROLE_ALIASES``; tool calls and their answers paired; parts, keys and
    empty messages the API would not read left out), ``developer`` as
    ``system``, each message's ``weight`` kept, the roles in
    ``exclude_roles`` and reasoning left out.

    Raises:
        InvalidDocument: a message has a role fine-tuning does not accept.
    """
    excluded = set(role_names(exclude_roles))
    kept = []
    for index, message in enumerate(messages):
        if message.role in excluded or message.role in _LEFT_OUT:
            continue
        if ROLE_ALIASES.get(message.role, message.role) not in ROLES:
            raise InvalidDocument(
                f"role {message.role!r} is not one OpenAI's fine-tuning accepts ({', '.join(sorted(ROLES))})",
                chat_id=chat_id,
                message_index=index,
                field="role",
            )
        kept.append(message)
    lines = messages_of(kept, keeping=("weight",), merging=False)  # each answer keeps its weight
    for line in lines:
        if line["role"] == "developer":
            line["role"] = "system"
    return lines


def problem(line: dict[str, Any]) -> str | None:
    """Why OpenAI's fine-tuning would refuse ``line``, or ``None``: its
    rules for a chat example (roles it knows, content where it is required,
    each tool message answering a call of an assistant message before it, an
    assistant message to learn from, ``weight`` 0 or 1 on assistant messages
    only)."""
    messages = line.get("messages")
    if not isinstance(messages, list) or not messages:
        return "no messages"
    calls: set[str] = set()
    for message in messages:
        role = message.get("role")
        if role not in ROLES:
            return f"role {role!r} not accepted"
        if role == "assistant":
            if (
                message.get("content") is None
                and not message.get("tool_calls")
                and not message.get("function_call")
            ):
                return "an assistant message with no content and no call"
            calls.update(call["id"] for call in message.get("tool_calls") or [])
        elif message.get("content") is None:
            return f"a {role} message with no content"
        if role == "tool" and message.get("tool_call_id") not in calls:
            return "a tool message that answers no call before it"
        if "weight" in message and (role != "assistant" or message["weight"] not in (0, 1)):
            return "a weight other than 0 or 1 on an assistant message"
    if not any(message["role"] == "assistant" for message in messages):
        return "no assistant message"
    if messages[-1]["role"] != "assistant":
        return "no assistant message at the end"
    return None


def tools_of(doc: ChatDocument, key: str = "tools") -> list[dict[str, Any]] | None:
    """The chat's ``workflow[key]`` (``tools``, or the older ``functions``),
    when it is a list of tool definitions."""
    tools = (doc.workflow or {}).get(key)
    if isinstance(tools, list) and tools and all(isinstance(tool, dict) for tool in tools):
        return tools
    return None


def unanswered_tool_calls(doc: ChatDocument) -> list[str]:
    """Ids of tool calls that no later tool message answers."""
    answered: set[str] = set()
    missing: list[str] = []
    for message in reversed(doc.messages):
        if message.role == "tool" and message.tool_call_id:
            answered.add(message.tool_call_id)
        for call in message.tool_calls or []:
            if not (isinstance(call.id, str) and call.id in answered):
                missing.append(str(call.id))
    return missing


def _unanswered_before_the_end(doc: ChatDocument) -> bool:
    """Whether a tool call that no later message answers is in a message
    other than the last: a call in the last one is what the example teaches."""
    last = doc.messages[-1] if doc.messages else None
    final = {str(call.id) for call in (last.tool_calls or [])} if last and last.role == "assistant" else set()
    return any(call not in final for call in unanswered_tool_calls(doc))


def chosen(doc: ChatDocument, filters: Filters, selection: Selection) -> bool:
    """Whether the chat passes the filters on chats (model, time, the mean
    score of the feedback on its active path); ``selection`` counts it as
    skipped when not."""
    if filters.model is not None and doc.model != filters.model:
        selection.skip("other model")
        return False
    if filters.since is not None and (doc.created_at is None or doc.created_at < filters.since):
        selection.skip("too old")
        return False
    if filters.min_score is not None:
        scores = [item.score for item in doc.feedback if item.score is not None]
        if not scores or sum(scores) / len(scores) < filters.min_score:
            selection.skip("score below the minimum")
            return False
    return True


def select(docs: Iterable[ChatDocument], filters: Filters, selection: Selection) -> Iterator[dict[str, Any]]:
    """The fine-tuning lines of the chats that pass ``filters``; ``selection``
    counts what is written and what is skipped."""
    for whole in docs:
        doc = whole.path_document()  # the path the user kept
        if not chosen(doc, filters, selection):
            continue
        if _unanswered_before_the_end(doc):
            selection.skip("unanswered tool calls")
            continue
        if not all(message.completed for message in doc.messages):
            selection.skip("incomplete messages")
            continue
        try:
            line = from_document(doc, filters.exclude_roles)
        except InvalidDocument as exc:
            selection.skip(f"role {doc.messages[exc.message_index or 0].role!r} not accepted")
            continue
        messages = line["messages"]
        if not messages:  # none, or none left once the excluded roles are out
            selection.skip("no messages")
            continue
        while messages and messages[-1]["role"] != "assistant":  # nothing after the last answer to learn
            messages.pop()
        if not messages:
            selection.skip("no assistant message")  # nothing to train on: OpenAI refuses the example
            continue
        if (refused := problem(line)) is not None:
            selection.skip(refused)  # OpenAI would refuse the example
            continue
        selection.written += 1
        yield line


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="openai-finetune",
        what="OpenAI fine-tuning JSONL",
        round_trip="exact (the keys fine-tuning knows)",
        family="dataset",
        detection=10,
        looks_like=looks_like,
        to_document=to_document,
        from_document=from_document,
        dataset=select,
    ),
)
