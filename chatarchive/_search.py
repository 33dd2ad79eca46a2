"""Full-text search over message text: what a search asks and what it finds.

A message's text is its string content (``messages.text``) or its text parts
(``content_parts.text``) in order. chatarchive splits it into terms
(``_terms``) and each backend stores and matches them its own way
(PostgreSQL: ``tsvector`` under a GIN index; SQLite: an FTS5 table); this
module holds what is the same on both: the query syntax, its limits, the
filters, the hits and how fresh they are.

Both databases take the same query syntax (words, all of which must match,
``"quoted phrases"``, ``-word`` to exclude, ``or`` between alternatives), never
treat input as SQL, and give one hit per message, best first, ranked and
snippeted by chatarchive from the same terms.

Search by meaning compares the vector of the query, by the archive's embedder
(``_embeddings``), with each message's (``embeddings``), under the same
filters; hybrid search fuses both lists by reciprocal rank.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Double, Integer, TextClause, bindparam
from sqlalchemy.sql.selectable import TextualSelect
from sqlalchemy.types import TypeEngine

from ._exceptions import InvalidArgument, SchemaNotReady
from ._terms import Phrase, Tokenizer, has_terms
from ._types import ArchiveText, UTCDateTime

__all__ = [
    "BRANCHES",
    "HIGHLIGHT",
    "MAX_QUERY_WORDS",
    "SEARCH_MODES",
    "Branches",
    "SearchFilters",
    "SearchHit",
    "SearchMode",
    "SearchQuery",
    "SearchResults",
    "SearchWords",
    "check_query",
    "compile_query",
    "parse_query",
    "search_index_off",
    "typed_candidates",
    "typed_nearest",
]

#: Marks around matched words in snippets.
HIGHLIGHT = ("«", "»")

#: A search takes at most this many words (runs of letters and digits, as
#: ``\w+`` counts them). PostgreSQL's snippets (``ts_headline``) cost more than
#: the square of a query's words for each hit: a query of thousands of words
#: would hold a connection for minutes. Web search engines cap queries alike.
MAX_QUERY_WORDS = 64
_WORD = re.compile(r"\w+")


class SearchHit(BaseModel):
    """One message that matches a search, with a highlighted snippet."""

    model_config = ConfigDict(frozen=True)

    chat_id: str
    message_uid: str
    position: int
    role: str
    created_at: datetime
    snippet: str
    rank: float


class SearchResults(list[SearchHit]):
    """The hits of a search, best first, and how fresh they are.

    Attributes:
        pending_chats: how many chats (of those the search may see) have
            writes that are not searchable yet (``deferred`` indexing, or
            after an upgrade, until ``chatarchive db index`` has run).
        pending_since: when the oldest of them was written (``None``: none
            pending): every write before it is searchable.
    """

    def __init__(
        self, hits: Iterable[SearchHit] = (), *, pending_chats: int = 0, pending_since: datetime | None = None
    ) -> None:
        super().__init__(hits)
        self.pending_chats = pending_chats
        self.pending_since = pending_since

    @property
    def fresh(self) -> bool:
        """Whether every write is searchable."""
        return self.pending_chats == 0


#: How a search finds messages: by their words (``keyword``), by the meaning
#: of their text (``vector``: the archive's embedder), or both, fused by
#: reciprocal rank (``hybrid``).
SearchMode = Literal["hybrid", "keyword", "vector"]
SEARCH_MODES: tuple[SearchMode, ...] = ("hybrid", "keyword", "vector")
#: Which messages of a chat's tree a search looks at: every one, or those on the active path.
Branches = Literal["all", "active"]
BRANCHES: tuple[Branches, ...] = ("all", "active")


@dataclass(frozen=True)
class SearchFilters:
    """Which messages a search looks at (each filter that is not None):
    ``user_id``'s chats, messages of ``role``, chats or messages of ``model``,
    messages created from ``since`` on and before ``until``, chats tagged
    ``tag``; of every branch, or of the active paths alone (``active_path``)."""

    user_id: str | None = None
    role: str | None = None
    model: str | None = None
    since: datetime | None = None
    until: datetime | None = None
    tag: str | None = None
    active_path: bool = False

    def sql(self) -> tuple[str, dict[str, Any]]:
        """The filters as ``AND ...`` conditions on ``c`` (chats) and ``m``
        (messages), and their parameters."""
        conditions = ["m.on_path"] if self.active_path else []
        params: dict[str, Any] = {}
        for name, value, condition in (
            ("user_id", self.user_id, "c.user_id = :user_id"),
            ("role", self.role, "m.role = :role"),
            ("model", self.model, "(c.model = :model OR m.model = :model)"),
            ("since", self.since, "m.created_at >= :since"),
            ("until", self.until, "m.created_at < :until"),
            (
                "tag",
                self.tag,
                "EXISTS (SELECT 1 FROM chat_tags g WHERE g.chat_id = c.chat_id AND g.tag = :tag)",
            ),
        ):
            if value is not None:
                conditions.append(condition)
                params[name] = value
        return "".join(f" AND {condition}" for condition in conditions), params


@dataclass(frozen=True)
class SearchWords:
    """A query, parsed: every group must match (a group matches if any of
    its terms does), and no excluded term may."""

    groups: list[list[str]] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)


def check_query(query: str) -> None:
    """Refuse a search query of more than ``MAX_QUERY_WORDS`` words."""
    words = sum(1 for _ in _WORD.finditer(query))
    if words > MAX_QUERY_WORDS:
        raise InvalidArgument(
            f"query has {words} words; a search takes at most {MAX_QUERY_WORDS}", argument="query"
        )


_TOKEN = re.compile(r'(-?)"([^"]*)"?|(\S+)')


def parse_query(query: str) -> SearchWords | None:
    """The terms of a query in PostgreSQL's ``websearch_to_tsquery`` syntax
    (words, ``"phrases"``, ``-term``, ``or``); ``None`` when nothing is left to
    find (no searchable term, or only excluded ones, which would otherwise
    match every other message)."""
    words = SearchWords()
    join_next = False
    for match in _TOKEN.finditer(query):
        negated, phrase, word = match.group(1), match.group(2), match.group(3)
        if word is not None and word.lower() == "or":
            join_next = bool(words.groups)
            continue
        if word is not None and word.startswith("-") and len(word) > 1:
            negated, word = "-", word[1:]
        term = phrase if phrase is not None else word
        if not has_terms(term):
            continue
        if negated:
            words.excluded.append(term)
        elif join_next:
            words.groups[-1].append(term)
        else:
            words.groups.append([term])
        join_next = False
    return words if words.groups else None


@dataclass(frozen=True)
class SearchQuery:
    """A query as terms: every group must match (a group matches if any of its
    phrases does), and no excluded phrase may."""

    groups: list[list[Phrase]]
    excluded: list[Phrase]


def compile_query(words: SearchWords, tokenizer: Tokenizer) -> SearchQuery | None:
    """``words`` as the archive's terms (``None``: nothing left to find)."""
    groups = []
    for group in words.groups:
        phrases = [phrase for term in group if (phrase := tokenizer.phrase(term)) is not None]
        if phrases:
            groups.append(phrases)
    excluded = [phrase for term in words.excluded if (phrase := tokenizer.phrase(term)) is not None]
    return SearchQuery(groups, excluded) if groups else None


def _typed_filters(statement: TextClause, params: dict[str, Any]) -> TextClause:
    """``statement`` with its filters' types (text and times as the archive stores them)."""
    return statement.bindparams(
        *(
            bindparam(name, type_=ArchiveText())
            for name in ("user_id", "role", "model", "tag")
            if name in params
        ),
        *(bindparam(name, type_=UTCDateTime()) for name in ("since", "until") if name in params),
    )


_FOUND_COLUMNS: dict[str, TypeEngine[Any]] = {
    "chat_id": ArchiveText(),
    "position": Integer(),
    "uid": ArchiveText(),
    "role": ArchiveText(),
    "created_at": UTCDateTime(),
}


def typed_candidates(statement: TextClause, params: dict[str, Any]) -> TextualSelect:
    """A keyword search's candidates statement with its filters' and its
    result columns' types: the message's ``chat_id``, ``position``, ``uid``,
    ``role`` and ``created_at``, its ``terms`` and their ``length`` (the
    text of the hits shown is read after ranking)."""
    return _typed_filters(statement, params).columns(**_FOUND_COLUMNS, terms=ArchiveText(), length=Integer())


def typed_nearest(statement: TextClause, params: dict[str, Any]) -> TextualSelect:
    """A vector search's statement with its filters' and its result columns'
    types: the message's columns as ``typed_candidates`` has them, and the
    ``distance`` of its vector from the query's."""
    return _typed_filters(statement, params).columns(**_FOUND_COLUMNS, distance=Double())


def search_index_off() -> SchemaNotReady:
    """The error of a search in an archive whose search index is off."""
    return SchemaNotReady(
        "full-text search is off for this archive (its index has been dropped); "
        "turn it on with 'chatarchive db search-index on' or set_search_index(True)"
    )
