"""The record each format module declares about itself: one per format name.

A format module ends with ``FORMATS = (Format(...), ...)``; the package
collects every module's records, and the import and export functions, the
CLI's choices, auto-detection, the refusal messages and the documentation's
format matrix all come from them. Adding a format is adding one module.

A training format's ``dataset`` takes the ``Filters`` that choose its chats
and a ``Selection`` that counts what it wrote and skipped, defined here with
the record (``chatarchive.formats.finetune`` gives them too).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from chatarchive._arguments import is_real_number, optional_moment, optional_text, require_many, require_text
from chatarchive._document import ChatDocument
from chatarchive._exceptions import InvalidArgument

__all__ = ["FAMILIES", "Filters", "Format", "NearMiss", "Selection", "role_names"]

#: The kinds of format, in the order the documentation lists them.
FAMILIES = ("chatarchive", "model API", "agent framework", "chat product", "dataset")

#: A test of a JSON object that no format imports, and what the object then
#: looks like: the reason a record is refused.
NearMiss = tuple[Callable[[dict[str, Any]], bool], str]


@dataclass(frozen=True)
class Format:
    """What a format is, how it is recognized, read and written.

    Attributes:
        name: the name ``import --format`` and ``export --format`` take.
        what: a record of the format, in a few words.
        round_trip: how exactly a record comes back from import and export.
        family: one of :data:`FAMILIES`.
        detection: the place of the format in auto-detection, lower first
            (the most specific formats first); ``None`` for a format that
            is not imported.
        looks_like: whether a parsed JSON value is in the format.
        to_document: import one record (raises ``InvalidDocument``).
        from_document: export one document to a JSON-ready value.
        whole_tree: ``from_document`` writes every branch; otherwise it is
            given the document's active path.
        dataset: a training dataset's lines from documents, filters and a
            selection (``chatarchive export`` of a training format).
        record: the method of ``ChatArchive`` that appends one response of
            the format's API to a chat.
        near_misses: objects that look like this format's records but are
            not ones it imports, each with what it then looks like.
    """

    name: str
    what: str
    round_trip: str
    family: str
    detection: int | None = None
    looks_like: Callable[[Any], bool] | None = None
    to_document: Callable[[Any], ChatDocument] | None = None
    from_document: Callable[[ChatDocument], Any] | None = None
    whole_tree: bool = False
    dataset: Callable[[Iterable[ChatDocument], Filters, Selection], Iterator[dict[str, Any]]] | None = None
    record: str | None = None
    near_misses: tuple[NearMiss, ...] = ()

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"format {self.name!r}: unknown family {self.family!r}")
        if (self.to_document is None) != (self.looks_like is None) or (self.to_document is None) != (
            self.detection is None
        ):
            raise ValueError(f"format {self.name!r}: an import needs looks_like, to_document and detection")

    @property
    def imports(self) -> bool:
        """Whether records in the format are imported."""
        return self.to_document is not None

    @property
    def exports(self) -> bool:
        """Whether chats are exported in the format (documents or a dataset)."""
        return self.from_document is not None or self.dataset is not None

    def exporter(self) -> Callable[[ChatDocument], Any] | None:
        """The function that exports one stored document: ``from_document``,
        given the active path when the format holds one path."""
        write = self.from_document
        if write is None or self.whole_tree:
            return write
        return lambda doc: write(doc.path_document())


@dataclass(frozen=True)
class Filters:
    """What a dataset keeps: chats with a mean feedback score of at least
    ``min_score`` (chats without scored feedback are left out when it is set),
    of ``model``, created since ``since``, without the roles in ``exclude_roles``."""

    min_score: float | None = None
    model: str | None = None
    since: datetime | None = None
    exclude_roles: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        score = self.min_score
        if score is not None and (not is_real_number(score) or not math.isfinite(score)):
            raise InvalidArgument(f"min_score must be a finite number, not {score!r}", argument="min_score")
        optional_text(self.model, "model")
        object.__setattr__(self, "since", optional_moment(self.since, "since"))
        object.__setattr__(self, "exclude_roles", role_names(self.exclude_roles))


def role_names(roles: Iterable[str]) -> tuple[str, ...]:
    """``exclude_roles`` as a tuple of role names: one name given alone would
    otherwise be read as its letters, and exclude nothing."""
    require_many(roles, "exclude_roles", "role names")
    return tuple(require_text(role, "exclude_roles") for role in roles)


@dataclass
class Selection:
    """The outcome of a dataset export: lines written and chats skipped, by reason."""

    written: int = 0
    skipped: dict[str, int] = field(default_factory=dict)

    def skip(self, reason: str) -> None:
        self.skipped[reason] = self.skipped.get(reason, 0) + 1
