"""Attachments stored once: finding a content part's base64 payload, cutting
it out of the part's JSON, and putting it back.

A part (an image, an audio clip, a file) carries its bytes as base64: a data
URL (``data:image/png;base64,...``, as the Chat Completions and Responses APIs
take images and files) or a bare base64 string beside its media type (as
Anthropic's and Gemini's sources have it). With attachments stored once, the
largest such payload of a part, when it decodes to at least ``MIN_BYTES``, is
kept as bytes in the ``attachments`` table under its SHA-256; the part keeps
everything else: the value where the payload was holds what came before it
(the data URL's ``data:...;base64,`` prefix, or an empty string), and the
part's row names the attachment and the path to that value. Reading appends
the payload again, encoded as it was given: only a payload that standard
base64 encodes back to the same text is moved, so what comes back is the same
string, character for character.

This module is pure (no database): the repository's ``attachments`` stores
and sweeps the rows.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "MIN_BYTES",
    "UNKNOWN_MEDIA_TYPE",
    "Attachment",
    "Cut",
    "cut_at",
    "cut_payload",
    "may_hold_payload",
    "owner_of",
    "restore_payload",
]

#: The smallest payload (decoded) moved to the attachments table: a smaller one
#: costs less inline than as a row of its own.
MIN_BYTES = 1024
#: The fewest base64 characters of a payload of ``MIN_BYTES``.
_MIN_CHARS = (MIN_BYTES + 2) // 3 * 4
#: Keys beside a bare base64 payload that name its media type (Anthropic, Gemini, MCP).
_MEDIA_TYPE_KEYS = ("media_type", "mime_type", "mimeType", "mediaType")
#: The media types that a payload's first bytes show, for payloads given without one.
_MAGIC = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
    (b"ID3", "audio/mpeg"),
    (b"OggS", "audio/ogg"),
    (b"fLaC", "audio/flac"),
)
UNKNOWN_MEDIA_TYPE = "application/octet-stream"

Path = tuple[str | int, ...]


@dataclass(frozen=True)
class Attachment:
    """The bytes of one payload, named by their SHA-256 (hex)."""

    sha256: str
    media_type: str
    data: bytes


@dataclass(frozen=True)
class Cut:
    """A part's JSON with its payload cut out: ``data`` (the value at ``path``
    now only ``prefix``, what came before the payload), and the attachment
    that holds it."""

    data: Any
    path: list[str | int]
    prefix: str
    attachment: Attachment


def owner_of(chat_user_id: str | None) -> str:
    """Whose attachments a part's are: its chat's user ('' for a chat of no user)."""
    return chat_user_id or ""


def may_hold_payload(data: Any) -> bool:
    """Whether the part's JSON ``data`` has a string long enough to be a payload."""
    return next(_strings(data), None) is not None


def _strings(value: Any, path: Path = ()) -> Iterator[tuple[Path, str, Mapping[str, Any] | None]]:
    """Every string in ``value`` long enough to be a payload, with its path and
    the object that holds it (``None``: a list does)."""
    if isinstance(value, dict):
        for key, item in value.items():
            if type(item) is str:
                if len(item) >= _MIN_CHARS:
                    yield (*path, key), item, value
            elif isinstance(item, dict | list):
                yield from _strings(item, (*path, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            if type(item) is str:
                if len(item) >= _MIN_CHARS:
                    yield (*path, index), item, None
            elif isinstance(item, dict | list):
                yield from _strings(item, (*path, index))


def _payload(text: str) -> tuple[str, bytes] | None:
    """The prefix and the decoded bytes of ``text`` if it is base64 (bare, or
    a data URL's) that encodes back to the same characters."""
    prefix = ""
    if text.startswith("data:"):
        comma = text.find(",")
        if comma < 0 or not text[:comma].lower().endswith(";base64"):
            return None
        prefix = text[: comma + 1]
    encoded = text[len(prefix) :]
    if len(encoded) < _MIN_CHARS or len(encoded) % 4:
        return None
    try:
        raw = base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        return None
    if len(raw) < MIN_BYTES or base64.b64encode(raw).decode("ascii") != encoded:
        return None
    return prefix, raw


def _media_type(prefix: str, holder: Mapping[str, Any] | None, raw: bytes) -> str:
    if prefix:
        named = prefix[len("data:") :].split(";", 1)[0].strip()
        if named:
            return named.lower()
    if holder is not None:
        for key in _MEDIA_TYPE_KEYS:
            value = holder.get(key)
            if type(value) is str and value:
                return value
    for magic, media_type in _MAGIC:
        if raw.startswith(magic):
            return media_type
    if raw[:4] == b"RIFF" and raw[8:12] in (b"WEBP", b"WAVE"):
        return "image/webp" if raw[8:12] == b"WEBP" else "audio/wav"
    return UNKNOWN_MEDIA_TYPE


def cut_payload(data: Any) -> Cut | None:
    """The part's JSON ``data`` with its largest payload cut out (``None``:
    it has none). ``data`` itself is left as it was: the containers on the
    path are copied."""
    found = None
    for path, text, holder in _strings(data):
        if found is not None and len(text) <= len(found[1]):
            continue
        payload = _payload(text)
        if payload is not None:
            found = (path, text, holder, payload)
    if found is None:
        return None
    path, _, holder, (prefix, raw) = found
    attachment = Attachment(hashlib.sha256(raw).hexdigest(), _media_type(prefix, holder, raw), raw)
    return Cut(_replaced(data, path, prefix), list(path), prefix, attachment)


def cut_at(data: Any, cut: Cut) -> Any:
    """Another copy of the same part's JSON (its keys in another order) cut as ``cut`` is."""
    return _replaced(data, tuple(cut.path), cut.prefix)


def restore_payload(data: Any, path: Sequence[str | int], raw: bytes) -> Any:
    """``data`` (a part's stored JSON) with the payload at ``path`` put back
    after its prefix, as base64; ``data`` itself is left as it was."""
    prefix = _at(data, path)
    if type(prefix) is not str:
        raise ValueError(f"no payload prefix at {list(path)}")
    return _replaced(data, tuple(path), prefix + base64.b64encode(raw).decode("ascii"))


def _at(data: Any, path: Sequence[str | int]) -> Any:
    for step in path:
        data = data[step]
    return data


def _replaced(data: Any, path: Path, value: str) -> Any:
    """A copy of ``data`` with ``value`` at ``path`` (copying only the containers on it)."""
    if not path:
        return value
    step, rest = path[0], path[1:]
    if isinstance(data, dict):
        return {**data, step: _replaced(data[step], rest, value)}
    copied = list(data)
    assert isinstance(step, int)
    copied[step] = _replaced(copied[step], rest, value)
    return copied
