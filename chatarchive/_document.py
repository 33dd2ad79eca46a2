"""The chat document model: what goes into the archive and what comes back out.

The models follow the OpenAI chat-completions message shape and keep every key
they are given, known or not. Two rules make the round trip exact:

* unknown keys are kept (``extra="allow"``) at every level;
* an optional field that is ``None`` is written out only if the input named it,
  so ``{"content": null}`` and a message without ``content`` stay different.
"""

from __future__ import annotations

import builtins
import math
import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, ClassVar, Self, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    StrictBool,
    StrictFloat,
    StrictInt,
    ValidationError,
    ValidationInfo,
    model_serializer,
    model_validator,
)

from ._arguments import fits_utc, optional_moment, optional_text, require_at_least_one, require_many
from ._exceptions import LONGEST_ID, InvalidArgument, InvalidDocument

__all__ = [
    "ARCHIVE_MESSAGE_FIELDS",
    "DEFAULT_LIMITS",
    "ChatDocument",
    "ChatFilter",
    "ChatPage",
    "ChatSummary",
    "ChatTree",
    "ContentPart",
    "Feedback",
    "Limits",
    "Message",
    "Timestamp",
    "ToolCall",
    "ToolFunction",
    "Usage",
    "check_limits",
    "new_id",
    "parse_feedback",
    "parse_messages",
    "without_parent",
]

#: Message fields that belong to the archive, not to the OpenAI message shape;
#: ``to_openai()`` leaves them out.
ARCHIVE_MESSAGE_FIELDS = frozenset(
    {
        "uid",
        "parent",
        "created_at",
        "updated_at",
        "completed",
        "model",
        "finish_reason",
        "usage",
        "summarizes",
    }
)

_ID_LENGTH = {"min_length": 1, "max_length": LONGEST_ID}


def new_id() -> str:
    """A fresh random identifier: a version 4 UUID string, as ``str(uuid.uuid4())``
    gives, made from 16 bytes of ``os.urandom`` without the ``UUID`` object (a
    third of the time; messages without a uid get one each)."""
    digits = os.urandom(16).hex()
    variant = "89ab"[int(digits[16], 16) & 3]
    return f"{digits[:8]}-{digits[8:12]}-4{digits[13:16]}-{variant}{digits[17:20]}-{digits[20:]}"


def _aware(value: datetime) -> datetime:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    if not fits_utc(value):
        raise ValueError("timestamp is out of range once converted to UTC")
    return value


_M = TypeVar("_M", bound=BaseModel)

Timestamp = Annotated[datetime, AfterValidator(_aware)]
Identifier = Annotated[str, Field(**_ID_LENGTH)]


@dataclass(frozen=True)
class Limits:
    """What one document may hold; larger input is refused with InvalidDocument.

    Attributes:
        max_message_bytes: a message's size: the UTF-8 bytes of its strings
            (text, arguments, data URLs, unknown keys...), 8 MiB by default.
        max_parts: content parts in one message, 1,000 by default.
        max_tool_calls: tool calls in one message, 1,000 by default (also
            the bound of a streamed fragment's ``tool_call_index``).
        max_json_depth: nesting of free-form JSON (metadata, unknown keys,
            tool call data), 64 levels by default.
    """

    max_message_bytes: int = 8 * 2**20
    max_parts: int = 1000
    max_json_depth: int = 64
    max_tool_calls: int = 1000

    def __post_init__(self) -> None:
        for name in ("max_message_bytes", "max_parts", "max_json_depth", "max_tool_calls"):
            require_at_least_one(getattr(self, name), name)


DEFAULT_LIMITS = Limits()


def check_limits(limits: object) -> Limits | None:
    """Refuse a ``limits`` argument that is neither None nor a ``Limits``
    (a dict of them would be taken for none)."""
    if limits is not None and not isinstance(limits, Limits):
        raise InvalidArgument(f"limits must be a Limits, not {type(limits).__name__}", argument="limits")
    return limits


class _PathError(ValueError):
    """A validation failure below the field pydantic reports, at ``path``."""

    def __init__(self, reason: str, path: tuple[str | int, ...]) -> None:
        super().__init__(reason)
        self.reason = reason
        self.path = path


def _valid_unicode(text: str) -> bool:
    if text.isascii():
        return True
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


_PLAIN_SCALARS = frozenset({bool, type(None), datetime})
#: The most digits of an integer Python writes as text (its default
#: ``sys.get_int_max_str_digits()``): a longer one cannot be written as JSON.
_INT_DIGITS = 4300
_INT_BOUND = 10**_INT_DIGITS
_BAD_UNICODE = "string is not valid Unicode (lone surrogate)"


def _json_problem(value: object, depth: int = 0, limit: int = 64) -> _PathError | None:
    """What JSON (and so the archive) cannot hold: non-JSON types, non-string
    keys, NaN and infinities, integers too long to write as text, strings that
    are not valid Unicode, nesting deeper than ``limit``. The path is built only
    when something is wrong (innermost first, reversed at the end)."""
    kind = type(value)
    if depth > limit and kind in (dict, list):
        return _PathError(f"JSON nested deeper than {limit} levels", ())
    if kind is str:
        return None if _valid_unicode(value) else _PathError(_BAD_UNICODE, ())  # type: ignore[arg-type]
    if kind is int:
        if -_INT_BOUND < value < _INT_BOUND:
            return None
        return _PathError(f"integer of more than {_INT_DIGITS} digits", ())
    if kind is dict:
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str:
                if not isinstance(key, str):
                    return _PathError(f"object key {key!r} is not a string", ())
                key = str.__str__(key)  # a StrEnum, say: stored as its text, as a value would be
            if not _valid_unicode(key):
                return _PathError(_BAD_UNICODE, ())
            if type(item) not in _PLAIN_SCALARS and (problem := _json_problem(item, depth + 1, limit)):
                problem.path = (*problem.path, key)
                return problem
        return None
    if kind is list:
        for index, item in enumerate(value):  # type: ignore[arg-type]
            if type(item) not in _PLAIN_SCALARS and (problem := _json_problem(item, depth + 1, limit)):
                problem.path = (*problem.path, index)
                return problem
        return None
    if kind is float:
        return None if math.isfinite(value) else _PathError(f"{value} is not a JSON number", ())  # type: ignore[arg-type]
    if kind in _PLAIN_SCALARS or isinstance(value, (BaseModel, bool)):
        return None
    # Subclasses (a StrEnum, an IntEnum, an OrderedDict, ...) are checked as their base type.
    if isinstance(value, int):
        return _json_problem(int(value), depth, limit)
    if isinstance(value, str):
        return _json_problem(str.__str__(value), depth, limit)
    if isinstance(value, float):
        return _json_problem(float(value), depth, limit)
    if isinstance(value, dict):
        return _json_problem(dict(value), depth, limit)
    if isinstance(value, list):
        return _json_problem(list(value), depth, limit)
    return _PathError(f"a {kind.__name__} is not a JSON value", ())


def _check_json(value: object, name: str, limits: Limits) -> None:
    problem = _json_problem(value, 0, limits.max_json_depth)
    if problem is not None:
        problem.path = (name, *reversed(problem.path))
        raise problem


class _Record(BaseModel):
    """Shared behaviour: unknown keys kept, unset optional fields left out, and
    an instance given where one is expected validated again, as a mapping
    would be: a model changed after it was made (``doc.chat_id = ""``,
    ``message.role = "wizard"``) would otherwise be taken as it is."""

    model_config = ConfigDict(extra="allow", protected_namespaces=(), revalidate_instances="always")

    _optional_fields: ClassVar[frozenset[str]] = frozenset()

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        super().__pydantic_init_subclass__(**kwargs)
        cls._optional_fields = frozenset(
            name
            for name, info in cls.model_fields.items()
            if info.default is None and info.default_factory is None
        )

    @model_validator(mode="after")
    def _values_are_json(self, info: ValidationInfo) -> Self:
        context = info.context or {}
        if context.get("trusted"):
            return self  # read back from the archive, checked when it was written
        limits: Limits = context.get("limits", DEFAULT_LIMITS)
        # Only what the input gave can be wrong: defaults are fine. Typed lists of
        # records (messages, parts, tool calls) were checked record by record.
        values = self.__dict__
        extra = self.__pydantic_extra__ or {}
        for name in self.__pydantic_fields_set__:
            value = values[name] if name in values else extra.get(name)
            kind = type(value)
            if kind in _PLAIN_SCALARS or (kind is str and value.isascii()):  # type: ignore[union-attr]
                continue
            if kind is int and -_INT_BOUND < value < _INT_BOUND:
                continue
            if kind is list and value and isinstance(value[0], BaseModel):
                continue
            if not isinstance(value, BaseModel):
                _check_json(value, name, limits)
        return self

    @model_serializer(mode="wrap")
    def _leave_out_unset_nulls(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        data: dict[str, Any] = handler(self)
        given = self.model_fields_set
        for name in self._optional_fields:
            if name not in given and data.get(name, 0) is None:
                del data[name]
        return data


def _size(value: object, depth: int = 0) -> int:
    """About the UTF-8 size of a value's JSON: its strings count in full.
    (Nesting is bounded by the JSON check; past 200 levels this stops counting.)"""
    if isinstance(value, str):
        return len(value) if value.isascii() else len(value.encode("utf-8", "surrogatepass"))
    if depth > 200:
        return 8
    if isinstance(value, dict):
        return sum(_size(key) + _size(item, depth + 1) for key, item in value.items())
    if isinstance(value, list):
        return sum(_size(item, depth + 1) for item in value)
    if isinstance(value, BaseModel):
        fields = sum(_size(item, depth + 1) for item in value.__dict__.values() if item is not None)
        extra = value.__pydantic_extra__ or {}
        return fields + sum(_size(key) + _size(item, depth + 1) for key, item in extra.items())
    return 8


def _content_form(value: object) -> object:
    if value is None or isinstance(value, (str, list)):
        return value
    raise ValueError("content must be a string, a list of parts, or null")


class ContentPart(_Record):
    """One part of a multimodal message: ``text``, ``image_url``, ``input_audio``,
    ``file``, ``refusal`` or any other type, with all its fields kept.

    A field named after a known part type is checked only on parts of that type
    (a ``text`` part's ``text`` must be a string); parts of other types keep any
    shape.
    """

    type: str
    text: Any = None
    refusal: Any = None
    image_url: Any = None
    input_audio: Any = None
    file: Any = None

    _OWN_FIELD_TYPES: ClassVar[dict[str, tuple[builtins.type, ...]]] = {
        "text": (str,),
        "refusal": (str,),
        "image_url": (str, dict),
        "input_audio": (dict,),
        "file": (dict,),
    }

    @model_validator(mode="after")
    def _own_field_has_its_type(self) -> Self:
        expected = self._OWN_FIELD_TYPES.get(self.type)
        value = getattr(self, self.type, None) if expected else None
        if expected and value is not None and not isinstance(value, expected):
            kinds = " or ".join("a string" if kind is str else "an object" for kind in expected)
            raise _PathError(f"a {self.type!r} part's {self.type!r} must be {kinds}", (self.type,))
        return self


class ToolFunction(_Record):
    """The ``function`` of a tool call; ``arguments`` is kept as the exact string
    the model produced (or whatever shape the input had)."""

    name: str | None = None
    arguments: Any = None


def _function_shape(value: object) -> object:
    return ToolFunction.model_validate(value) if isinstance(value, (dict, ToolFunction)) else value


class ToolCall(_Record):
    """A tool call made by an assistant message: ``function``, ``custom`` or any
    other type. Shapes that break the spec (no ``id``, ``function`` not an
    object, ``arguments`` beside ``function``, ...) are kept verbatim."""

    id: Any = None
    type: Any = None
    function: Annotated[ToolFunction | Any, BeforeValidator(_function_shape)] = None
    custom: Any = None


#: A number of tokens: analytics sum them, so none is negative.
TokenCount = Annotated[StrictInt, Field(ge=0)]


class Usage(_Record):
    """Token usage of one model response; extra keys such as
    ``prompt_tokens_details`` are kept."""

    prompt_tokens: TokenCount | None = None
    completion_tokens: TokenCount | None = None
    total_tokens: TokenCount | None = None


class Message(_Record):
    """One chat message in the OpenAI chat-completions shape, plus archive fields.

    ``content`` may be a string (``""`` included), a list of ``ContentPart``,
    ``None``, or absent; each form is restored as it came. Archive fields: ``uid``
    (generated when absent), ``parent`` (see ``ChatDocument``), ``created_at``
    (set when saved, if absent), ``updated_at``, ``completed``, ``model``,
    ``finish_reason``, ``usage`` and ``summarizes`` (on the last message of a
    summary that ``compact`` wrote: the uid of the last message it stands for).
    """

    role: Annotated[str, Field(min_length=1)]
    content: Annotated[str | list[ContentPart] | None, BeforeValidator(_content_form)] = None
    name: str | None = None
    tool_calls: list[ToolCall] | None = None
    tool_call_id: str | None = None
    function_call: dict[str, Any] | None = None
    refusal: str | None = None
    audio: dict[str, Any] | None = None

    uid: Identifier = Field(default_factory=new_id)
    parent: Identifier | None = None
    created_at: Timestamp | None = None
    updated_at: Timestamp | None = None
    completed: StrictBool = True
    model: str | None = None
    finish_reason: str | None = None
    usage: Usage | None = None
    summarizes: Identifier | None = None

    @model_validator(mode="after")
    def _within_limits(self, info: ValidationInfo) -> Self:
        context = info.context or {}
        if context.get("trusted"):
            return self
        limits: Limits = context.get("limits", DEFAULT_LIMITS)
        if isinstance(self.content, list) and len(self.content) > limits.max_parts:
            raise _PathError(
                f"{len(self.content)} content parts; at most {limits.max_parts} are allowed", ("content",)
            )
        if self.tool_calls is not None and len(self.tool_calls) > limits.max_tool_calls:
            raise _PathError(
                f"{len(self.tool_calls)} tool calls; at most {limits.max_tool_calls} are allowed",
                ("tool_calls",),
            )
        size = self._approximate_size()
        if size > limits.max_message_bytes:
            raise _PathError(f"message of {size} bytes; at most {limits.max_message_bytes} are allowed", ())
        return self

    def _approximate_size(self) -> int:
        """The UTF-8 size of the parts that can be large (content, tool calls,
        function call, audio, unknown keys); the other fields are short."""
        content = self.content
        size = _size(content) if content else 0
        for field in (self.tool_calls, self.function_call, self.audio, self.__pydantic_extra__):
            if field:
                size += _size(field)
        return size

    def to_openai(self) -> dict[str, Any]:
        """This message as an OpenAI message dict, archive fields left out."""
        return self.model_dump(mode="json", exclude=set(ARCHIVE_MESSAGE_FIELDS))


class Feedback(_Record):
    """Human feedback on a whole chat, or on one message when ``message_uid`` is set."""

    id: Identifier = Field(default_factory=new_id)
    message_uid: Identifier | None = None
    user_id: str | None = None
    score: StrictInt | StrictFloat | None = None
    label: str | None = None
    comment: str | None = None
    created_at: Timestamp | None = None


class ChatDocument(_Record):
    """A whole conversation with its metadata: the unit the archive stores.

    A conversation is a tree: regenerating an answer, or editing a question,
    adds a sibling of that message, and the chat shows one path through the
    tree, from a root to its *active leaf*. ``messages`` lists the messages in
    the order they were added; each one follows the message before it, unless
    it names its ``parent`` (the uid of an earlier message, or ``None`` for a
    root). ``active_leaf`` is the uid of the active path's last message; when
    absent, the last message is. A linear chat names neither, and its
    ``messages`` are its path. ``get`` returns the active path as such a
    linear document; ``get_tree`` and ``export`` return the whole tree.
    Siblings are ordered as they come in ``messages``.

    ``version`` is filled in by the archive when a document is read back (the
    stored version, for ``save(doc, expected_version=doc.version)``); it is not
    part of the document's JSON.

    Examples:
        >>> doc = ChatDocument.parse({"chat_id": "c", "messages": [
        ...     {"role": "user", "content": "Hi", "uid": "q"},
        ...     {"role": "assistant", "content": "Hello!", "uid": "a1"},
        ...     {"role": "assistant", "content": "Hi there!", "uid": "a2", "parent": "q"},
        ... ]})
        >>> [message.uid for message in doc.path()]
        ['q', 'a2']
        >>> [message.uid for message in doc.path("a1")]
        ['q', 'a1']
    """

    chat_id: Identifier = Field(default_factory=new_id)
    user_id: Identifier | None = None
    title: str | None = None
    model: str | None = None
    model_settings: dict[str, Any] | None = None
    workflow: dict[str, Any] | None = None
    metadata: dict[str, Any] | None = None
    tags: list[Annotated[str, Field(**_ID_LENGTH)]] = Field(default_factory=list)
    created_at: Timestamp | None = None
    updated_at: Timestamp | None = None
    messages: list[Message] = Field(default_factory=list)
    active_leaf: Identifier | None = None
    feedback: list[Feedback] = Field(default_factory=list)
    version: int | None = Field(default=None, exclude=True)

    @model_validator(mode="after")
    def _consistent(self) -> Self:
        self.tags = list(dict.fromkeys(self.tags))
        uids: set[str] = set()
        previous: str | None = None
        for index, message in enumerate(self.messages):
            if message.uid in uids:
                raise _PathError(f"duplicate message uid {message.uid!r}", ("messages", index, "uid"))
            if "parent" in message.__pydantic_fields_set__:
                if message.parent == previous:  # what it would follow anyway: not kept
                    message.__dict__["parent"] = None
                    message.__pydantic_fields_set__.discard("parent")
                elif message.parent is not None and message.parent not in uids:
                    raise _PathError(
                        f"parent {message.parent!r} is not a message before this one",
                        ("messages", index, "parent"),
                    )
            uids.add(message.uid)
            previous = message.uid
        if "active_leaf" in self.__pydantic_fields_set__:
            if self.active_leaf == previous:  # the last message, or none in an empty chat
                self.__dict__["active_leaf"] = None
                self.__pydantic_fields_set__.discard("active_leaf")
            elif self.active_leaf is not None and self.active_leaf not in uids:
                raise _PathError(
                    f"active_leaf {self.active_leaf!r} is not a message of the chat", ("active_leaf",)
                )
        feedback_ids: set[str] = set()
        for index, item in enumerate(self.feedback):
            if item.id in feedback_ids:
                raise _PathError(f"duplicate feedback id {item.id!r}", ("feedback", index, "id"))
            feedback_ids.add(item.id)
            if item.message_uid is not None and item.message_uid not in uids:
                raise _PathError(
                    f"feedback on unknown message uid {item.message_uid!r}",
                    ("feedback", index, "message_uid"),
                )
        return self

    @classmethod
    def parse(cls, data: object, *, limits: Limits | None = None) -> ChatDocument:
        """Validate ``data`` (a mapping, or a ``ChatDocument``) into a document.

        Raises:
            InvalidDocument: naming the chat, message index and field at fault.
        """
        check_limits(limits)
        return _validated(cls, data, chat_id=_chat_id_of(data), limits=limits)

    @classmethod
    def from_openai(cls, messages: Iterable[Mapping[str, Any]], **chat_fields: Any) -> ChatDocument:
        """Build a document from an OpenAI message list and the chat's own fields.

        ``ChatDocument.from_openai(m).to_openai() == m`` for any valid message list.

        Raises:
            InvalidDocument: when a message (or a chat field) is not valid.
        """
        require_many(messages, "messages", "messages")
        return cls.parse({**chat_fields, "messages": list(messages)})

    def approximate_size(self) -> int:
        """About the UTF-8 size of the document's text: its messages' strings
        (content, tool calls, unknown keys...) and its own JSON fields."""
        own = sum(
            _size(value)
            for value in (self.model_settings, self.workflow, self.metadata, self.__pydantic_extra__)
        )
        return own + sum(message._approximate_size() + 64 for message in self.messages)

    def to_openai(self) -> list[dict[str, Any]]:
        """The active path's messages exactly as they came in, archive fields left out."""
        return [message.to_openai() for message in self.path()]

    @property
    def is_linear(self) -> bool:
        """Whether the chat is one path: no message names a parent other than
        the message before it, and the last message is the active leaf."""
        return "active_leaf" not in self.__pydantic_fields_set__ and not any(
            "parent" in message.__pydantic_fields_set__ for message in self.messages
        )

    def parent_indexes(self) -> list[int | None]:
        """For each message, the index in ``messages`` of its parent (``None``: a root)."""
        index_of: dict[str, int] = {}
        parents: list[int | None] = []
        for index, message in enumerate(self.messages):
            if "parent" in message.__pydantic_fields_set__:
                parents.append(None if message.parent is None else index_of[message.parent])
            else:
                parents.append(index - 1 if index else None)
            index_of[message.uid] = index
        return parents

    def active_index(self) -> int | None:
        """The index in ``messages`` of the active leaf (``None``: the path is empty)."""
        if "active_leaf" not in self.__pydantic_fields_set__:
            return len(self.messages) - 1 if self.messages else None
        return self._index_of(self.active_leaf, "active_leaf") if self.active_leaf is not None else None

    def path(self, leaf: str | None = None) -> list[Message]:
        """The messages from a root down to ``leaf`` (a message's uid; the
        active leaf when ``None``), in order.

        Raises:
            InvalidArgument: no message has the uid ``leaf``.
        """
        if self.is_linear and leaf is None:
            return list(self.messages)
        index = self.active_index() if leaf is None else self._index_of(leaf, "leaf")
        parents = self.parent_indexes()
        indexes = []
        while index is not None:
            indexes.append(index)
            index = parents[index]
        return [self.messages[index] for index in reversed(indexes)]

    def path_document(self, leaf: str | None = None) -> ChatDocument:
        """The linear document of one path (default: the active one), with the
        feedback on the chat and on that path's messages: what ``get``
        returns. A linear document's active path is the document itself.

        Raises:
            InvalidArgument: no message has the uid ``leaf``.
        """
        if self.is_linear and leaf is None:
            return self
        return self._linear(self.path(leaf))

    def history(self) -> list[Message]:
        """The conversation as it was written, before any compaction: the
        messages from a root down to the active leaf, where each summary that
        ``compact`` wrote (a chain of messages whose last one ``summarizes``
        another) gives way to the path it stands for. Without summaries on
        the active path, that path."""
        parents = self.parent_indexes()
        index_of = {message.uid: index for index, message in enumerate(self.messages)}
        found: list[Message] = []
        seen: set[int] = set()
        index = self.active_index()
        while index is not None and index not in seen:
            seen.add(index)
            message = self.messages[index]
            if message.summarizes is not None and message.summarizes in index_of:
                index = index_of[message.summarizes]  # what the summary stands for, not the summary
                continue
            found.append(message)
            index = parents[index]
        return found[::-1]

    def history_document(self) -> ChatDocument:
        """The linear document of ``history``, with the feedback on the chat
        and on its messages: the chat as it was written, whatever compacted it."""
        return self._linear(self.history())

    def _linear(self, path: list[Message]) -> ChatDocument:
        messages = [without_parent(message) for message in path]
        on_path = {message.uid for message in messages}
        feedback = [item for item in self.feedback if item.message_uid in on_path or item.message_uid is None]
        linear = self.model_copy(update={"messages": messages, "feedback": feedback, "active_leaf": None})
        linear.__pydantic_fields_set__.discard("active_leaf")
        return linear

    def _index_of(self, uid: object, argument: str) -> int:
        for index, message in enumerate(self.messages):
            if message.uid == uid:
                return index
        raise InvalidArgument(f"no message with uid {uid!r}", argument=argument, chat_id=self.chat_id)


def without_parent(message: Message) -> Message:
    """The message as a linear document holds it: following the one before."""
    if "parent" not in message.__pydantic_fields_set__:
        return message
    copy = message.model_copy(update={"parent": None})
    copy.__pydantic_fields_set__.discard("parent")
    return copy


@dataclass(frozen=True)
class ChatTree:
    """Every message of a chat, with its parent: the whole conversation tree
    that ``get_tree`` returns (``get`` returns one path of it).

    Examples:
        >>> tree = ChatTree(ChatDocument.parse({"messages": [
        ...     {"role": "user", "content": "Hi", "uid": "q"},
        ...     {"role": "assistant", "content": "Hello!", "uid": "a1"},
        ...     {"role": "assistant", "content": "Hi there!", "uid": "a2", "parent": "q"},
        ... ], "active_leaf": "a1"}))
        >>> [message.uid for message in tree.siblings("a1")]
        ['a1', 'a2']
        >>> tree.parent("a2"), tree.active_leaf
        ('q', 'a1')
        >>> [message.content for message in tree.path_document().messages]
        ['Hi', 'Hello!']
    """

    document: ChatDocument

    @property
    def chat_id(self) -> str:
        return self.document.chat_id

    @property
    def version(self) -> int | None:
        """The stored version (for ``expected_version``), when read from an archive."""
        return self.document.version

    @property
    def messages(self) -> list[Message]:
        """Every message, in the order they were added."""
        return self.document.messages

    @property
    def active_leaf(self) -> str | None:
        """The uid of the active path's last message (``None``: the path is empty)."""
        index = self.document.active_index()
        return None if index is None else self.messages[index].uid

    def parent(self, uid: str) -> str | None:
        """The uid of the message's parent (``None``: it is a root)."""
        parent = self.document.parent_indexes()[self.document._index_of(uid, "uid")]
        return None if parent is None else self.messages[parent].uid

    def children(self, uid: str | None) -> list[Message]:
        """The message's children, in order (``None``: the roots)."""
        parents = self.document.parent_indexes()
        wanted = None if uid is None else self.document._index_of(uid, "uid")
        return [message for message, parent in zip(self.messages, parents, strict=True) if parent == wanted]

    def siblings(self, uid: str) -> list[Message]:
        """The children of the message's parent, the message among them, in order."""
        return self.children(self.parent(uid))

    def leaves(self) -> list[Message]:
        """The messages without children: the ends of the paths."""
        parents = set(self.document.parent_indexes())
        return [message for index, message in enumerate(self.messages) if index not in parents]

    def path(self, leaf: str | None = None) -> list[Message]:
        """The messages from a root down to ``leaf`` (default: the active leaf)."""
        return self.document.path(leaf)

    def path_document(self, leaf: str | None = None) -> ChatDocument:
        """The linear document of one path (default: the active one), with the
        feedback on the chat and on that path's messages: what ``get``
        returns."""
        return self.document.path_document(leaf)

    def history_document(self) -> ChatDocument:
        """The chat as it was written, before any compaction: the linear
        document of its history (see ``ChatDocument.history``)."""
        return self.document.history_document()


@dataclass(frozen=True)
class ChatFilter:
    """Which chats a listing, count or export is about: those that pass every
    filter given (``None``: any).

    Attributes:
        user_id: the chats of this user.
        model: the chats whose chosen model is this one.
        tag: the chats tagged so.
        since: the chats last updated (``updated_at``) at this time or later;
            a naive datetime is UTC.
        until: the chats last updated before this time; ``until=cutoff``
            selects what ``delete_older_than(cutoff)`` deletes.

    Example:
        >>> from datetime import datetime
        >>> ChatFilter(user_id="alice", since=datetime(2026, 1, 1)).since.tzinfo
        datetime.timezone.utc
    """

    user_id: str | None = None
    model: str | None = None
    tag: str | None = None
    since: datetime | None = None
    until: datetime | None = None

    def __post_init__(self) -> None:
        for name in ("user_id", "model", "tag"):
            optional_text(getattr(self, name), name)
        for name in ("since", "until"):
            object.__setattr__(self, name, optional_moment(getattr(self, name), name))


class ChatSummary(BaseModel):
    """One row of a chat listing. ``message_count`` counts the messages of
    the active path, the ones :meth:`~chatarchive.ChatRepository.get`
    returns; the ``chats`` table's ``message_count`` column counts every
    branch's."""

    model_config = ConfigDict(protected_namespaces=(), frozen=True)

    chat_id: str
    user_id: str | None
    title: str | None
    model: str | None
    created_at: datetime
    updated_at: datetime
    message_count: int
    version: int


class ChatPage(BaseModel):
    """A page of chat summaries, newest first; pass ``next_cursor`` back as
    ``cursor`` to get the next page (``None`` on the last page)."""

    model_config = ConfigDict(frozen=True)

    items: list[ChatSummary]
    next_cursor: str | None


def _chat_id_of(data: object) -> str | None:
    chat_id = data.get("chat_id") if isinstance(data, Mapping) else getattr(data, "chat_id", None)
    return chat_id if isinstance(chat_id, str) else None


def parse_messages(
    messages: Iterable[Message | Mapping[str, Any]],
    *,
    chat_id: str | None,
    first_index: int = 0,
    limits: Limits | None = None,
) -> list[Message]:
    """Validate messages one by one, naming the chat and the message's index
    (counted from ``first_index``) in any error."""
    require_many(messages, "messages", "messages", chat_id=chat_id)
    parsed = []
    for offset, message in enumerate(messages):
        try:
            parsed.append(Message.model_validate(message, context=_context(limits)))
        except ValidationError as exc:
            raise _invalid(exc, message, chat_id=chat_id, prefix=("messages", first_index + offset)) from None
    return parsed


def parse_feedback(
    item: Feedback | Mapping[str, Any], *, chat_id: str | None, limits: Limits | None = None
) -> Feedback:
    """Validate one feedback item."""
    try:
        return Feedback.model_validate(item, context=_context(limits))
    except ValidationError as exc:
        raise _invalid(exc, item, chat_id=chat_id, prefix=("feedback",)) from None


def _context(limits: Limits | None) -> dict[str, Any] | None:
    return None if limits is None else {"limits": limits}


def _validated(model: type[_M], data: object, *, chat_id: str | None, limits: Limits | None = None) -> _M:
    try:
        return model.model_validate(data, context=_context(limits))
    except ValidationError as exc:
        raise _invalid(exc, data, chat_id=chat_id) from None


def _invalid(
    exc: ValidationError, data: object, *, chat_id: str | None, prefix: tuple[str | int, ...] = ()
) -> InvalidDocument:
    """Turn pydantic's report into one InvalidDocument about the deepest error."""
    best = max(exc.errors(include_url=False), key=lambda error: len(error["loc"]))
    node, path = _input_path(data, best["loc"], missing=best["type"] == "missing")
    reason = best["msg"]
    cause = best.get("ctx", {}).get("error")
    if isinstance(cause, _PathError):
        path = [*path, *cause.path]
        reason = cause.reason
    elif best["type"] in ("model_type", "model_attributes_type", "dict_type"):
        if prefix or path:
            reason = f"expected a JSON object, not {_json_type(node)}"
        else:
            reason = f"a chat document must be a JSON object, not {_json_type(node)}"
    else:
        reason = reason.removeprefix("Value error, ")
    full: list[str | int] = [*prefix, *path]
    message_index = None
    if len(full) >= 2 and full[0] == "messages" and isinstance(full[1], int):
        message_index = full[1]
        full = full[2:]
    return InvalidDocument(reason, chat_id=chat_id, message_index=message_index, field=_dotted(full))


def _input_path(data: object, loc: Sequence[str | int], *, missing: bool) -> tuple[object, list[str | int]]:
    """Follow pydantic's error location through the input, dropping the tags it
    adds for union members (``str``, ``list[ContentPart]``, ...)."""
    path: list[str | int] = []
    node = data
    for index, part in enumerate(loc):
        if isinstance(node, BaseModel):  # an instance given again: its fields and unknown keys
            node = {**node.__dict__, **(node.__pydantic_extra__ or {})}
        if isinstance(node, Mapping) and part in node:
            node = node[part]
        elif isinstance(node, list) and isinstance(part, int) and -len(node) <= part < len(node):
            node = node[part]
        elif not (missing and index == len(loc) - 1):
            continue
        path.append(part)
    return node, path


def _dotted(path: Sequence[str | int]) -> str | None:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else part)
    return text or None


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return f"a {type(value).__name__}"
