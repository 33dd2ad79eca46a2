"""A chat rendered as a readable transcript for the terminal."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Group
from rich.text import Text

from chatarchive._document import ChatDocument, ChatTree, ContentPart, Message, ToolCall, ToolFunction

from .rendering import literal, printable

__all__ = ["render_transcript", "render_tree"]

_ROLE_STYLES = {
    "system": "magenta",
    "developer": "magenta",
    "user": "bold green",
    "assistant": "bold cyan",
    "tool": "yellow",
    "function": "yellow",
}
_PREVIEW = 300


def render_transcript(doc: ChatDocument) -> Group:
    """Roles, content parts, tool calls with their results, and feedback.

    All text is rendered literally (see ``literal``)."""
    lines: list[Text] = [_header(doc)]
    results = {
        message.tool_call_id: message
        for message in doc.messages
        if message.role == "tool" and message.tool_call_id
    }
    position_of = {message.uid: index for index, message in enumerate(doc.messages)}
    for index, message in enumerate(doc.messages):
        lines.append(Text())
        lines.extend(_message(index, message, results))
    if doc.feedback:
        lines.append(Text())
        lines.append(Text("feedback", style="bold"))
        for item in doc.feedback:
            target = f"message {position_of[item.message_uid]}" if item.message_uid in position_of else "chat"
            fields = [f"score {item.score}" if item.score is not None else None, item.label, item.comment]
            text = ", ".join(field for field in fields if field)
            lines.append(literal(f"  on {target}: {text}"))
    return Group(*lines)


#: How long a message's one-line preview in a tree is, at most.
_LINE = 72


def render_tree(tree: ChatTree) -> Group:
    """Every message of every branch, a line each: a branch point's children
    indented under it with guides (``├─``, ``└─``), a message with one child
    followed by it at the same depth, the active path marked ``●`` (the others
    ``○``) and its leaf ``◀ active``."""
    doc = tree.document
    parents = doc.parent_indexes()
    children: dict[int | None, list[int]] = {}
    for index, parent in enumerate(parents):
        children.setdefault(parent, []).append(index)
    on_path: set[int] = set()
    leaf = doc.active_index()
    walked = leaf
    while walked is not None:
        on_path.add(walked)
        walked = parents[walked]
    lines: list[Text] = [_header(doc), Text()]
    stack: list[tuple[int, str, str, str]] = []  # index, prefix, its guide, its children's guide

    def push(kids: list[int], prefix: str) -> None:
        if len(kids) == 1:
            stack.append((kids[0], prefix, "", ""))
            return
        for position in reversed(range(len(kids))):
            last = position == len(kids) - 1
            stack.append((kids[position], prefix, "└─ " if last else "├─ ", "   " if last else "│  "))

    push(children.get(None, []), "")
    while stack:
        index, prefix, guide, below = stack.pop()
        message = doc.messages[index]
        line = Text(prefix + guide, style="dim")
        line.append("● " if index in on_path else "○ ", style="bold" if index in on_path else "dim")
        line.append(f"[{index}] ", style="dim")
        line.append(printable(message.role), style=_ROLE_STYLES.get(message.role, "bold"))
        line.append(f"  {printable(message.uid)}", style="dim")
        line.append("  ")
        line.append_text(literal(_preview(message)))
        if index == leaf:
            line.append("  ◀ active", style="bold")
        lines.append(line)
        push(children.get(index, []), prefix + below)
    return Group(*lines)


def _preview(message: Message) -> str:
    """A message in one short line: its text, or its calls."""
    text = _plain(message.content)
    if not isinstance(text, str) or not text.strip():
        calls = [
            f"{call.function.name or '?'}({call.function.arguments or ''})"
            for call in message.tool_calls or []
            if call.function is not None
        ]
        text = "→ " + ", ".join(calls) if calls else ""
    text = " ".join(text.split())
    return text if len(text) <= _LINE else text[: _LINE - 1] + "…"


def _header(doc: ChatDocument) -> Text:
    header = literal(f"chat {doc.chat_id}", style="bold")
    details = {
        "title": doc.title,
        "user": doc.user_id,
        "model": doc.model,
        "tags": ", ".join(doc.tags) if doc.tags else None,
        "workflow": _short(doc.workflow) if doc.workflow else None,
        "created": doc.created_at.isoformat() if doc.created_at else None,
        "updated": doc.updated_at.isoformat() if doc.updated_at else None,
        "version": str(doc.version) if doc.version is not None else None,
    }
    for name, value in details.items():
        if value:
            header.append(f"\n  {name}: ", style="dim")
            header.append(printable(value))
    return header


def _message(index: int, message: Message, results: dict[str, Message]) -> list[Text]:
    title = Text(f"[{index}] ", style="dim")
    title.append(printable(message.role), style=_ROLE_STYLES.get(message.role, "bold"))
    if message.name:
        title.append(printable(f" ({message.name})"))
    if message.tool_call_id:
        title.append(printable(f"  answers {message.tool_call_id}"), style="dim")
    if not message.completed:
        title.append("  (incomplete)", style="red")
    lines = [title]
    content = message.content
    if isinstance(content, str):
        lines.append(_indented(content if content else '""'))
    elif isinstance(content, list):
        lines.extend(_part(part) for part in content)
    elif "content" in message.model_fields_set:
        lines.append(_indented("(null content)", style="dim"))
    if message.refusal:
        lines.append(_indented(f"refusal: {message.refusal}", style="red"))
    for call in message.tool_calls or []:
        name, arguments = _called(call)
        lines.append(
            _indented(f"→ {call.type or 'tool'} call {name}({_short(arguments)})  id={call.id}", style="cyan")
        )
        answer = results.get(call.id) if isinstance(call.id, str) else None
        if answer is not None:
            lines.append(_indented(f"  ← {_short(_plain(answer.content))}", style="yellow"))
        else:
            lines.append(_indented("  ← (no result)", style="red"))
    if message.function_call:
        lines.append(_indented(f"→ function call {_short(message.function_call)}", style="cyan"))
    return lines


def _called(call: ToolCall) -> tuple[Any, Any]:
    """A tool call's name and arguments, whatever shape it was kept in."""
    if isinstance(call.function, ToolFunction):
        return call.function.name, call.function.arguments
    if isinstance(call.custom, dict):
        return call.custom.get("name"), call.custom.get("input")
    return None, call.function if call.function is not None else call.custom


def _part(part: ContentPart) -> Text:
    if part.type in ("text", "refusal"):
        text = part.text if part.type == "text" else part.refusal
        return _indented(text or "", style="red" if part.type == "refusal" else "")
    if part.type == "image_url":
        url = part.image_url.get("url") if isinstance(part.image_url, dict) else part.image_url
        return _indented(f"[image] {_short(url)}", style="blue")
    if part.type == "input_audio":
        audio = part.input_audio or {}
        return _indented(f"[audio] {audio.get('format', '')}".rstrip(), style="blue")
    if part.type == "file":
        file = part.file or {}
        label = file.get("filename") or file.get("file_id") or ""
        return _indented(f"[file] {label}".rstrip(), style="blue")
    return _indented(f"[{part.type}] {_short(part.model_dump(mode='json', exclude={'type'}))}", style="blue")


def _plain(content: Any) -> Any:
    if isinstance(content, list):
        return " ".join(part.text for part in content if isinstance(part.text, str))
    return content


def _short(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 1] + "…"


def _indented(text: str, *, style: str = "") -> Text:
    return literal("    " + text.replace("\n", "\n    "), style=style)
