"""Full-text search over message text: what a search asks and what it finds.

Text is in two places: a string content in ``messages.text``, the text parts of
a list content in ``content_parts.text``. Each backend indexes both its own
way (PostgreSQL: GIN indexes over ``to_tsvector``; SQLite: FTS5 tables) and
runs the search; this module holds what is the same on both: the query
syntax, its limits, the filters and the hits.

Both databases take the same query syntax (words, all of which must match,
``"quoted phrases"``, ``-word`` to exclude, ``or`` between alternatives), never
treat input as SQL, and give one hit per message, best first.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Double, Integer, TextClause, bindparam
from sqlalchemy.sql.selectable import TextualSelect

from ._exceptions import InvalidArgument, SchemaNotReady
from ._types import ArchiveText, UTCDateTime

__all__ = [
    "HIGHLIGHT",
    "MAX_QUERY_WORDS",
    "SearchFilters",
    "SearchHit",
    "SearchWords",
    "check_query",
    "hits",
    "parse_query",
    "search_index_off",
    "typed_search",
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


@dataclass(frozen=True)
class SearchFilters:
    """Which messages a search looks at (each filter that is not None):
    ``user_id``'s chats, messages of ``role``, chats or messages of ``model``,
    messages created from ``since`` on."""

    user_id: str | None = None
    role: str | None = None
    model: str | None = None
    since: datetime | None = None

    def sql(self) -> tuple[str, dict[str, Any]]:
        """The filters as ``AND ...`` conditions on ``c`` (chats) and ``m``
        (messages), and their parameters."""
        conditions = []
        params: dict[str, Any] = {}
        for name, value, condition in (
            ("user_id", self.user_id, "c.user_id = :user_id"),
            ("role", self.role, "m.role = :role"),
            ("model", self.model, "(c.model = :model OR m.model = :model)"),
            ("since", self.since, "m.created_at >= :since"),
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
        if not term or not any(character.isalnum() for character in term):
            continue
        if negated:
            words.excluded.append(term)
        elif join_next:
            words.groups[-1].append(term)
        else:
            words.groups.append([term])
        join_next = False
    return words if words.groups else None


def typed_search(statement: TextClause, params: dict[str, Any]) -> TextualSelect:
    """A search statement with its filters' and its result columns' types (text
    and times as the archive stores them)."""
    return statement.bindparams(
        *(bindparam(name, type_=ArchiveText()) for name in ("user_id", "role", "model") if name in params),
        *([bindparam("since", type_=UTCDateTime())] if "since" in params else []),
    ).columns(
        chat_id=ArchiveText(),
        uid=ArchiveText(),
        position=Integer(),
        role=ArchiveText(),
        created_at=UTCDateTime(),
        rank=Double(),
        snippet=ArchiveText(),
    )


def hits(rows: Any) -> list[SearchHit]:
    """The hits of a search statement's rows (see ``typed_search``)."""
    return [
        SearchHit(
            chat_id=row.chat_id,
            message_uid=row.uid,
            position=row.position,
            role=row.role,
            created_at=row.created_at,
            snippet=row.snippet,
            rank=row.rank,
        )
        for row in rows
    ]


def search_index_off() -> SchemaNotReady:
    """The error of a search in an archive whose search index is off."""
    return SchemaNotReady(
        "full-text search is off for this archive (its index has been dropped); "
        "turn it on with 'chatarchive db search-index on' or set_search_index(True)"
    )
