"""Redaction before storage: what must never reach the database is replaced
before any row is written.

An archive made with a redactor (``ChatArchive(url, redactor=...)``, and
``AsyncChatArchive`` and the repositories alike) applies it on every write
path: ``save``, ``save_many`` and ``import``, ``append`` and the
``record_*`` calls, ``regenerate``, ``edit``, ``update`` (the title),
``update_message``, ``add_feedback`` (the comment), streaming (each chunk, and
the completed message again, whole), and the framework adapters, which write
through these. It redacts the text people and models wrote: string contents,
the ``text`` and ``refusal`` of parts (reasoning parts included), a
message's ``refusal``, tool calls' arguments (inside the JSON strings, so
that arguments stay JSON) and custom calls' input, legacy function calls'
arguments, the chat's title and feedback comments. Ids, names, metadata,
unknown keys and binary payloads are stored as given.

Each finding becomes a placeholder such as ``[EMAIL_5f0c2a9e]``: its kind and
eight hex digits of an HMAC-SHA256, under the redactor's key, of the chat's
id, the kind and the value. The same value in one chat always gets the same
placeholder (so a reader still sees that two turns name the same address),
the same value in two chats gets two (so placeholders link no chats), and
the value itself is stored nowhere. Give the redactor a key of your own
(``PatternRedactor(key=...)``) for placeholders that stay the same across
processes and restarts; without one, each redactor draws a random key.
A redactor counts what it replaced, by kind (``counts()``); only those
numbers are kept.

``PatternRedactor`` finds e-mail addresses, phone numbers (international
``+`` numbers and common national forms), payment card numbers (13 to 19
digits passing the Luhn check), IBANs (passing the ISO 13616 check) and API
keys of the major providers (OpenAI, Anthropic, Google, AWS, GitHub, Hugging
Face, Stripe, Slack, Groq, xAI). Any other detector is a ``Redactor``
subclass whose ``find`` returns ``Finding`` spans.

Example:
    >>> from chatarchive.redaction import PatternRedactor
    >>> redactor = PatternRedactor(key=b"a key of the application")
    >>> redactor.redact("Mail ann@example.org, card 4111 1111 1111 1111", chat_id="c1")
    'Mail [EMAIL_...], card [CARD_...]'
    >>> redactor.counts()
    {'card': 1, 'email': 1}
"""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import re
import threading
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from ._document import ChatDocument, ContentPart, Feedback, Message, ToolCall, ToolFunction
from ._exceptions import InvalidArgument

__all__ = [
    "PATTERN_KINDS",
    "REDACTION_KEY_ENV",
    "Finding",
    "PatternRedactor",
    "Redactor",
    "check_redactor",
    "redact_document",
    "redact_feedback",
    "redact_messages",
]


#: Where ``chatarchive import --redact`` reads the key of its placeholders.
REDACTION_KEY_ENV = "CHATARCHIVE_REDACTION_KEY"


@dataclass(frozen=True)
class Finding:
    """What a redactor found in a text: ``text[start:end]``, of ``kind``
    (letters, digits and ``_``: it names the placeholder)."""

    start: int
    end: int
    kind: str


_KIND = re.compile(r"[A-Za-z][A-Za-z0-9_]*")


class Redactor:
    """Replaces what ``find`` finds in a text with placeholders stable within
    a chat (see the module's documentation). Subclasses implement ``find``.
    A redactor is used from any thread the archive is used from.

    Args:
        key: the key of the placeholders' HMAC (bytes, or text as UTF-8);
            ``None``: a random key of this redactor's own.
    """

    def __init__(self, key: bytes | str | None = None) -> None:
        if isinstance(key, str):
            key = key.encode()
        if key is not None and not isinstance(key, bytes):
            raise InvalidArgument(f"key must be bytes or a string, not {type(key).__name__}", argument="key")
        self._key = key if key else os.urandom(32)
        self._counts: Counter[str] = Counter()
        self._lock = threading.Lock()

    def find(self, text: str) -> Iterable[Finding]:
        """The spans of ``text`` to redact (overlapping ones: the first, then the longest, wins)."""
        raise NotImplementedError

    def normalized(self, kind: str, value: str) -> str:
        """``value`` of ``kind`` as the placeholder's HMAC reads it: two ways
        of writing one value (``Ann@Example.org``, ``ann@example.org``) get
        one placeholder. As written, unless a subclass says otherwise."""
        return value

    def placeholder(self, kind: str, value: str, chat_id: str) -> str:
        """What stands for ``value`` of ``kind`` in the chat ``chat_id``."""
        value = self.normalized(kind, value)
        message = "\x00".join((chat_id, kind, value)).encode("utf-8", "surrogatepass")
        digest = hmac.new(self._key, message, hashlib.sha256).hexdigest()[:8]
        return f"[{kind.upper()}_{digest}]"

    def redact(self, text: str, chat_id: str) -> str:
        """``text`` with every finding replaced by its placeholder."""
        findings = sorted(self.find(text), key=lambda found: (found.start, found.start - found.end))
        if not findings:
            return text
        pieces: list[str] = []
        done = 0
        counted: Counter[str] = Counter()
        for found in findings:
            if found.start < done or found.end <= found.start:
                continue  # inside (or overlapping) a span already replaced
            if not _KIND.fullmatch(found.kind) or not 0 <= found.start < found.end <= len(text):
                raise InvalidArgument(f"a redactor found {found!r} in a text of {len(text)} characters")
            pieces += [
                text[done : found.start],
                self.placeholder(found.kind, text[found.start : found.end], chat_id),
            ]
            done = found.end
            counted[found.kind] += 1
        pieces.append(text[done:])
        with self._lock:
            self._counts.update(counted)
        return "".join(pieces)

    def counts(self) -> dict[str, int]:
        """How many values of each kind this redactor replaced, by kind."""
        with self._lock:
            return dict(sorted(self._counts.items()))


def check_redactor(redactor: object) -> Redactor | None:
    """Refuse a ``redactor`` argument that is no ``Redactor`` (a function, say:
    it would fail at the first write, after the archive was made)."""
    if redactor is not None and not isinstance(redactor, Redactor):
        raise InvalidArgument(
            f"redactor must be a Redactor (chatarchive.redaction), not {type(redactor).__name__}",
            argument="redactor",
        )
    return redactor


# -- the patterns ----------------------------------------------------------------------------


def _luhn(digits: str) -> bool:
    total = 0
    for index, digit in enumerate(reversed(digits)):
        value = int(digit) * (2 if index % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def _iban(value: str) -> bool:
    compact = value.replace(" ", "").upper()
    moved = compact[4:] + compact[:4]
    return int("".join(str(int(char, 36)) for char in moved)) % 97 == 1


_API_KEYS = (
    r"sk-ant-(?:api|admin)\d\d-[A-Za-z0-9_-]{20,}",  # Anthropic
    r"sk-(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,}",  # OpenAI
    r"AIza[0-9A-Za-z_-]{35}",  # Google
    r"(?:AKIA|ASIA)[0-9A-Z]{16}",  # AWS access key ids
    r"gh[pousr]_[A-Za-z0-9]{36,}",  # GitHub tokens
    r"github_pat_[A-Za-z0-9_]{22,}",
    r"hf_[A-Za-z0-9]{30,}",  # Hugging Face
    r"(?:sk|rk)_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
    r"xox[abprs]-[A-Za-z0-9-]{10,}",  # Slack
    r"gsk_[A-Za-z0-9]{40,}",  # Groq
    r"xai-[A-Za-z0-9]{40,}",  # xAI
)

#: Each kind the built-in redactor finds, its pattern, and the check a match must pass.
_PATTERNS: dict[str, tuple[re.Pattern[str], Any]] = {
    "api_key": (re.compile(r"(?<![\w-])(?:" + "|".join(_API_KEYS) + r")(?![\w-])"), None),
    "email": (
        re.compile(
            r"(?<![\w.+-])[\w.+-]+@[A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?(?:\.[A-Za-z0-9-]+)*\.[A-Za-z]{2,}(?![\w-])"
        ),
        None,
    ),
    "iban": (re.compile(r"(?<![\w])[A-Z]{2}\d{2}(?: ?[A-Z0-9]){11,30}(?![\w])"), _iban),
    "card": (
        re.compile(r"(?<![\w.])\d(?:[ -]?\d){12,18}(?![\w.])"),
        lambda value: _luhn(re.sub(r"\D", "", value)),
    ),
    "phone": (
        re.compile(
            r"(?<![\w+])(?:"
            r"\+\d{1,3}(?:[ .-]?\(?\d{1,4}\)?)(?:[ .-]?\d{2,4}){2,4}"  # +49 30 1234567, +1 (415) 555-2671
            r"|\(\d{3}\) ?\d{3}[ .-]\d{4}"  # (415) 555-2671
            r"|\d{3}[.-]\d{3}[.-]\d{4}"  # 415-555-2671
            r"|0\d{2,4}[ /-]\d{3,8}(?:[ -]\d{2,5})?"  # 030 1234567, 0151-12345678
            r")(?![\w])"
        ),
        lambda value: 7 <= len(re.sub(r"\D", "", value)) <= 15,
    ),
}
#: The kinds ``PatternRedactor`` finds, in the order it looks for them.
PATTERN_KINDS: tuple[str, ...] = tuple(_PATTERNS)


class PatternRedactor(Redactor):
    """The built-in redactor: e-mail addresses, phone numbers, card numbers
    (Luhn-checked), IBANs (checked) and API keys of the major providers.

    Args:
        key: see ``Redactor``.
        kinds: which of ``PATTERN_KINDS`` to find (default: all).
    """

    def __init__(self, key: bytes | str | None = None, kinds: Sequence[str] = PATTERN_KINDS) -> None:
        super().__init__(key)
        unknown = [kind for kind in kinds if kind not in _PATTERNS]
        if unknown or isinstance(kinds, str):
            raise InvalidArgument(
                f"kinds must be some of {', '.join(PATTERN_KINDS)}, not {unknown or kinds!r}",
                argument="kinds",
            )
        self._patterns = [(kind, *_PATTERNS[kind]) for kind in PATTERN_KINDS if kind in kinds]

    def normalized(self, kind: str, value: str) -> str:
        """E-mail addresses in lower case; numbers (phone, card, IBAN) without
        their spaces, dashes, dots and brackets."""
        if kind == "email":
            return value.lower()
        if kind in ("phone", "card", "iban"):
            return re.sub(r"[^0-9A-Za-z+]", "", value).upper()
        return value

    def find(self, text: str) -> list[Finding]:
        found: list[Finding] = []
        for kind, pattern, check in self._patterns:
            for match in pattern.finditer(text):
                if check is None or check(match.group()):
                    found.append(Finding(match.start(), match.end(), kind))
        return found


# -- what a write redacts --------------------------------------------------------------------

_JSON_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.DOTALL)


def _arguments(redactor: Redactor, value: object, chat_id: str) -> object:
    """Tool call arguments redacted: inside the JSON strings of arguments
    that are JSON (so that they stay JSON), else as text."""
    if not isinstance(value, str):
        return value
    try:
        json.loads(value)
    except ValueError:
        return redactor.redact(value, chat_id)
    return _JSON_STRING.sub(lambda match: '"' + redactor.redact(match.group()[1:-1], chat_id) + '"', value)


_Model = TypeVar("_Model", ContentPart, ToolCall, Message, Feedback, ChatDocument)


def _changed(model: _Model, **values: object) -> _Model:
    """``model`` with the fields ``values`` that differ from its own replaced."""
    changes = {name: value for name, value in values.items() if value is not getattr(model, name)}
    return model.model_copy(update=changes) if changes else model


_Item = TypeVar("_Item")


def _kept(redacted: list[_Item], given: list[_Item]) -> list[_Item]:
    """``given`` itself when redaction changed none of its items, else ``redacted``."""
    return redacted if any(a is not b for a, b in zip(redacted, given, strict=True)) else given


def _text(redactor: Redactor, value: object, chat_id: str) -> object:
    return redactor.redact(value, chat_id) if isinstance(value, str) else value


def _part(redactor: Redactor, part: ContentPart, chat_id: str) -> ContentPart:
    return _changed(
        part, text=_text(redactor, part.text, chat_id), refusal=_text(redactor, part.refusal, chat_id)
    )


def _call(redactor: Redactor, call: ToolCall, chat_id: str) -> ToolCall:
    function, custom = call.function, call.custom
    if isinstance(function, ToolFunction):
        function = _changed(function, arguments=_arguments(redactor, function.arguments, chat_id))  # type: ignore[type-var]
    if isinstance(custom, dict) and isinstance(custom.get("input"), str):
        custom = {**custom, "input": redactor.redact(custom["input"], chat_id)}
    return _changed(call, function=function, custom=custom)


def _message(redactor: Redactor, message: Message, chat_id: str) -> Message:
    content = message.content
    if isinstance(content, str):
        content = redactor.redact(content, chat_id)
    elif isinstance(content, list):
        parts = [_part(redactor, part, chat_id) for part in content]
        content = _kept(parts, content)
    calls = message.tool_calls
    if calls:
        redacted = [_call(redactor, call, chat_id) for call in calls]
        calls = _kept(redacted, calls)
    function_call = message.function_call
    if function_call and isinstance(function_call.get("arguments"), str):
        arguments = _arguments(redactor, function_call["arguments"], chat_id)
        if arguments != function_call["arguments"]:
            function_call = {**function_call, "arguments": arguments}
    return _changed(
        message,
        content=content,
        tool_calls=calls,
        function_call=function_call,
        refusal=_text(redactor, message.refusal, chat_id),
    )


def redact_messages(redactor: Redactor | None, chat_id: str, messages: list[Message]) -> list[Message]:
    """``messages`` of the chat ``chat_id`` as ``redactor`` leaves them."""
    if redactor is None:
        return messages
    return [_message(redactor, message, chat_id) for message in messages]


def redact_feedback(redactor: Redactor | None, chat_id: str, feedback: Feedback) -> Feedback:
    """``feedback`` on the chat ``chat_id`` with its comment redacted."""
    if redactor is None:
        return feedback
    return _changed(feedback, comment=_text(redactor, feedback.comment, chat_id))


def redact_document(redactor: Redactor | None, doc: ChatDocument) -> ChatDocument:
    """``doc`` with its title, messages and feedback comments redacted."""
    if redactor is None:
        return doc
    chat_id = doc.chat_id
    messages = redact_messages(redactor, chat_id, doc.messages)
    feedback = [redact_feedback(redactor, chat_id, item) for item in doc.feedback]
    return _changed(
        doc,
        title=_text(redactor, doc.title, chat_id),
        messages=_kept(messages, doc.messages),
        feedback=_kept(feedback, doc.feedback),
    )
