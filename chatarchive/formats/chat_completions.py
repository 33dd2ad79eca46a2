"""Any chat as OpenAI chat-completions messages that the API takes (export only).

``openai`` exports the messages as they are stored, every key kept, so that
a chat imported from an OpenAI message list comes back exact. This format
converts instead: it writes the active path of a chat of any format as the
messages a chat-completions request takes, where the meanings match, and
leaves out what has no meaning there.

- Roles: ``system``, ``developer``, ``user``, ``assistant``, ``tool`` and
  ``function`` as they are; ``human``, ``gpt``, ``ai`` and ``model`` as
  ``user`` and ``assistant``; messages of other roles are left out.
- Content: a string as it is; parts as the parts the role takes (``user``:
  text, images, audio, files; ``assistant``: text and refusals; the others:
  text). Anthropic's ``image`` and ``document`` blocks, the Responses API's
  ``input_text``, ``output_text``, ``input_image``, ``input_file`` and
  ``input_audio``, and Gemini's ``inlineData`` and ``fileData`` (images) become
  OpenAI's parts; reasoning (``thinking``, ``redacted_thinking``,
  ``reasoning``) and parts with no chat-completions meaning are left out.
- Tool calls: ``function`` and ``custom`` calls with their ids, a name the
  API does not take (``dalle.text2im``: letters, digits, ``_`` and ``-``, at
  most 64) with ``_`` for each other character; calls run by the provider
  (``server_tool_use``, ``mcp_tool_use``, built-in tools) are left out, and so
  are the tool messages that answer them. Several tool messages answering one
  call (a ChatGPT browsing session) are one, their texts joined.
- Messages with nothing the API would read (an empty system or user message,
  an assistant message with no text, call or refusal) are left out; an
  assistant message that follows another is merged into it.
- Keys: only those the message type has (``name``, ``tool_call_id``,
  ``refusal``, ``function_call``...); unknown keys and archive fields are
  left out.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from chatarchive._document import ChatDocument, ContentPart, Message, ToolCall

from ._format import Format

__all__ = [
    "FORMATS",
    "ROLE_ALIASES",
    "Calls",
    "from_document",
    "function_name",
    "message",
    "messages_of",
    "part",
]

_ROLES = frozenset({"system", "developer", "user", "assistant", "tool", "function"})
#: Roles of other formats whose meaning is one the API takes.
ROLE_ALIASES = {
    "developer": "system",
    "human": "user",
    "gpt": "assistant",
    "ai": "assistant",
    "model": "assistant",
}
#: The part types each role's content takes.
_PARTS = {
    "user": frozenset({"text", "image_url", "input_audio", "file"}),
    "assistant": frozenset({"text", "refusal"}),
}
_TEXT_ONLY = frozenset({"text"})


def from_document(doc: ChatDocument) -> list[dict[str, Any]]:
    """The chat's active path as chat-completions messages (see the module)."""
    return messages_of(doc.path())


def messages_of(
    stored_messages: Iterable[Message],
    calls: Calls | None = None,
    *,
    keeping: tuple[str, ...] = (),
    merging: bool = True,
) -> list[dict[str, Any]]:
    """Messages as chat-completions has them (see the module); ``keeping``:
    keys of the stored messages written too (fine-tuning's ``weight``);
    ``merging``: an assistant message that follows another is merged into it."""
    messages: list[dict[str, Any]] = []
    calls = Calls() if calls is None else calls
    answers: dict[str, dict[str, Any]] = {}  # a call's id: the tool message that answers it
    for stored in stored_messages:
        converted = message(stored, calls)
        if converted is None:
            continue
        extra = stored.model_extra or {}
        converted.update({key: extra[key] for key in keeping if key in extra})
        if converted["role"] == "tool" and (first := answers.get(converted["tool_call_id"])) is not None:
            _join_answers(first, converted)
        elif (
            merging and converted["role"] == "assistant" and messages and _mergeable(messages[-1], converted)
        ):
            _merge(messages[-1], converted)
        else:
            messages.append(converted)
            if converted["role"] == "tool":
                answers[converted["tool_call_id"]] = converted
    return messages


def _join_answers(first: dict[str, Any], more: dict[str, Any]) -> None:
    """A second answer to one call, joined to the first."""
    if isinstance(first["content"], str) and isinstance(more["content"], str):
        first["content"] = "\n\n".join(text for text in (first["content"], more["content"]) if text)
    else:
        first["content"] = [*_as_parts(first["content"]), *_as_parts(more["content"])]


def _mergeable(previous: dict[str, Any], current: dict[str, Any]) -> bool:
    """Whether ``current`` (an assistant message) continues ``previous``:
    formats that hold one item per message (the Responses API: a message,
    then each function call) make several assistant messages of one turn,
    and a tool message must follow the one message that holds its call."""
    return (
        previous["role"] == "assistant" and "function_call" not in previous and "function_call" not in current
    )


def _merge(previous: dict[str, Any], current: dict[str, Any]) -> None:
    content = [*_as_parts(previous.get("content")), *_as_parts(current.get("content"))]
    previous["content"] = content or None
    if "refusal" in current and "refusal" not in previous:
        previous["refusal"] = current["refusal"]
    calls = [*previous.get("tool_calls", []), *current.get("tool_calls", [])]
    if calls:
        previous["tool_calls"] = calls


def _as_parts(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    return list(content or [])


@dataclass
class Calls:
    """The tool calls of a conversation as it is converted: the ids of those
    left out (whose answers are left out too), and those not answered yet, by
    name, for formats whose answers name the function and not the call
    (Gemini's); calls without an id get one (``call_1``...)."""

    dropped: set[str] = field(default_factory=set)
    pending: list[tuple[str, str]] = field(default_factory=list)
    made: int = 0


def message(stored: Message, calls: Calls | None = None) -> dict[str, Any] | None:
    """One message as chat-completions has it, or ``None`` when it has no
    meaning there (see ``Calls``)."""
    calls = Calls() if calls is None else calls
    role = ROLE_ALIASES.get(stored.role, stored.role) if stored.role != "developer" else "developer"
    if role not in _ROLES:
        return None
    answered = stored.tool_call_id
    if role == "tool":
        answered = _answered(stored, calls)
        if answered is None:
            return None
    result: dict[str, Any] = {"role": role}
    content = _content(stored.content, _PARTS.get(role, _TEXT_ONLY))
    if role == "assistant":
        made = [converted for call in stored.tool_calls or [] if (converted := _call(call, calls))]
        if made:
            result["tool_calls"] = made
        if isinstance(stored.refusal, str):
            result["refusal"] = stored.refusal
        function_call = stored.function_call
        if isinstance(function_call, dict) and all(
            isinstance(function_call.get(key), str) for key in ("name", "arguments")
        ):
            result["function_call"] = {key: function_call[key] for key in ("name", "arguments")}
        has_answer = made or "refusal" in result or "function_call" in result
        if not content and not has_answer:
            return None  # nothing the API would read
        if content:
            result["content"] = content
        elif "content" in stored.to_openai():  # null where the message gave it (it may be left out)
            result["content"] = None
    elif role != "tool" and not content:
        return None  # an empty system or user message
    else:
        result["content"] = content if content is not None else ""
    if role == "tool":
        result["tool_call_id"] = answered
    if isinstance(stored.name, str) and role in ("system", "developer", "user", "assistant", "function"):
        result["name"] = stored.name
    if role == "function" and "name" not in result:
        return None
    return result


def _content(content: str | list[ContentPart] | None, allowed: frozenset[str]) -> str | list[Any] | None:
    if content is None or isinstance(content, str):
        return content
    converted = (part(item) for item in content)
    taken = (item if item["type"] in allowed else _as_text(item) for item in converted if item is not None)
    kept = [item for item in taken if item is not None]
    return kept or None


def _as_text(converted: dict[str, Any]) -> dict[str, Any] | None:
    """A refusal where only text is taken: its text; anything else: left out."""
    if converted["type"] == "refusal":
        return {"type": "text", "text": converted["refusal"]}
    return None


def part(item: ContentPart) -> dict[str, Any] | None:
    """A content part of any format as an OpenAI part, or ``None`` when it
    has no chat-completions meaning."""
    data = item.model_dump(mode="json")
    convert = _PART_CONVERTERS.get(item.type)
    return None if convert is None else convert(data)


def _text(data: dict[str, Any]) -> dict[str, Any] | None:
    text = data.get("text")
    return {"type": "text", "text": text} if isinstance(text, str) else None


def _refusal(data: dict[str, Any]) -> dict[str, Any] | None:
    refusal = data.get("refusal")
    return {"type": "refusal", "refusal": refusal} if isinstance(refusal, str) else None


def _image(url: Any, detail: Any = None) -> dict[str, Any] | None:
    if not isinstance(url, str):
        return None
    image: dict[str, Any] = {"url": url}
    if detail in ("auto", "low", "high"):
        image["detail"] = detail
    return {"type": "image_url", "image_url": image}


def _image_url(data: dict[str, Any]) -> dict[str, Any] | None:
    image = data.get("image_url")
    if isinstance(image, dict):
        return _image(image.get("url"), image.get("detail"))
    return _image(image)


def _file(file: Any) -> dict[str, Any] | None:
    if not isinstance(file, dict):
        return None
    kept = {key: file[key] for key in ("file_id", "file_data", "filename") if isinstance(file.get(key), str)}
    return {"type": "file", "file": kept} if "file_id" in kept or "file_data" in kept else None


def _audio(audio: Any) -> dict[str, Any] | None:
    if (
        isinstance(audio, dict)
        and isinstance(audio.get("data"), str)
        and audio.get("format") in ("wav", "mp3")
    ):
        return {"type": "input_audio", "input_audio": {"data": audio["data"], "format": audio["format"]}}
    return None


def _data_url(media_type: Any, data: Any) -> str | None:
    if isinstance(media_type, str) and isinstance(data, str):
        return f"data:{media_type};base64,{data}"
    return None


def _anthropic_source(data: dict[str, Any], *, image: bool) -> dict[str, Any] | None:
    """Anthropic's ``image`` and ``document`` blocks, by their source."""
    source = data.get("source")
    if not isinstance(source, dict):
        return None
    kind = source.get("type")
    if kind == "file" and isinstance(source.get("file_id"), str):
        return {"type": "file", "file": {"file_id": source["file_id"]}}
    if kind == "text" and isinstance(source.get("data"), str):
        return {"type": "text", "text": source["data"]}
    if kind == "url":
        return _image(source.get("url")) if image else None
    if kind == "base64":
        url = _data_url(source.get("media_type"), source.get("data"))
        if image:
            return _image(url)
        title = data.get("title")
        return _file({"file_data": url, **({"filename": title} if isinstance(title, str) else {})})
    return None


def _gemini_data(data: dict[str, Any]) -> dict[str, Any] | None:
    """Gemini's ``inlineData`` (bytes) and ``fileData`` (a URI) parts."""
    inline = data.get("inlineData", data.get("inline_data"))
    if isinstance(inline, dict):
        media_type = inline.get("mimeType", inline.get("mime_type"))
        url = _data_url(media_type, inline.get("data"))
        return _image(url) if str(media_type).startswith("image/") else _file({"file_data": url})
    file = data.get("fileData", data.get("file_data"))
    if isinstance(file, dict) and str(file.get("mimeType", file.get("mime_type"))).startswith("image/"):
        return _image(file.get("fileUri", file.get("file_uri")))
    return None


_PART_CONVERTERS: dict[str, Callable[[dict[str, Any]], dict[str, Any] | None]] = {
    "text": _text,
    "input_text": _text,
    "output_text": _text,
    "refusal": _refusal,
    "image_url": _image_url,
    "file": lambda data: _file(data.get("file")),
    "input_audio": lambda data: _audio(data.get("input_audio")),
    "image": lambda data: _anthropic_source(data, image=True),
    "document": lambda data: _anthropic_source(data, image=False),
    "input_image": lambda data: (
        _image(data.get("image_url"), data.get("detail"))
        if isinstance(data.get("image_url"), str)
        else _file({"file_id": data.get("file_id")})
    ),
    "input_file": lambda data: _file(data),
    "inlineData": _gemini_data,
    "inline_data": _gemini_data,
    "fileData": _gemini_data,
    "file_data": _gemini_data,
}


#: What a tool's name may hold in the API.
_NOT_IN_A_NAME = re.compile(r"[^a-zA-Z0-9_-]")


def function_name(name: str) -> str:
    """``name`` as the API takes a tool's: ``_`` for each character it does
    not take, at most 64 characters."""
    return _NOT_IN_A_NAME.sub("_", name)[:64] or "_"


def _answered(stored: Message, calls: Calls) -> str | None:
    """The id of the call a tool message answers: its ``tool_call_id``, or
    the first call not answered yet of the function it names; ``None`` when
    that call was left out."""
    answered = stored.tool_call_id
    if not isinstance(answered, str):
        name = None if stored.name is None else function_name(stored.name)
        found = next((call for call in calls.pending if call[1] == name), None)
        found = found or (calls.pending[0] if calls.pending and stored.name is None else None)
        answered = None if found is None else found[0]
    if answered is None or answered in calls.dropped:
        return None
    calls.pending = [call for call in calls.pending if call[0] != answered]
    return answered


def _call(call: ToolCall, calls: Calls) -> dict[str, Any] | None:
    function = call.function
    call_id = call.id
    if not isinstance(call_id, str) and call.type in ("function", "custom"):
        calls.made += 1
        call_id = f"call_{calls.made}"
    converted: dict[str, Any] | None = None
    if call.type == "function" and isinstance(call_id, str):
        name = getattr(function, "name", None)
        arguments = getattr(function, "arguments", None)
        if isinstance(name, str) and name and isinstance(arguments, str):
            converted = {
                "id": call_id,
                "type": "function",
                "function": {"name": function_name(name), "arguments": arguments},
            }
    custom = call.custom
    if (
        call.type == "custom"
        and isinstance(call_id, str)
        and isinstance(custom, dict)
        and isinstance(custom.get("name"), str)
        and isinstance(custom.get("input"), str)
    ):
        converted = {
            "id": call_id,
            "type": "custom",
            "custom": {"name": function_name(custom["name"]), "input": custom["input"]},
        }
    if converted is None:
        if isinstance(call_id, str):
            calls.dropped.add(call_id)
        return None
    name = converted[converted["type"]]["name"]
    calls.pending.append((call_id, name))
    return converted


#: This module's formats, as the registry in ``chatarchive.formats`` collects them.
FORMATS = (
    Format(
        name="chat-completions",
        what="any chat as the messages OpenAI's chat-completions API takes",
        round_trip="-",
        family="model API",
        from_document=from_document,
        whole_tree=True,  # it walks the active path itself
    ),
)
