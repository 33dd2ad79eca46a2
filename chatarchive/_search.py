"""Full-text search over message text.

Text is in two places: a string content in ``messages.text``, the text parts of
a list content in ``content_parts.text``. PostgreSQL: ``websearch_to_tsquery``
against a GIN index on ``to_tsvector('english', left(text, 100000))`` of each
(``to_tsvector`` refuses more than a megabyte of distinct words; the first
100,000 characters of any text stay under that), ranked with ``ts_rank``,
snippets from ``ts_headline``. SQLite: the FTS5 tables
``message_text_search`` and ``message_search`` (porter stemming), ranked with
bm25, snippets from ``snippet()``. An archive may drop these indexes to write
faster and build them again later (:func:`set_search_index_on`). Both take the
same query syntax (words, "quoted phrases", ``-word``, ``or``), never treat
input as SQL, and give one hit per message, best first.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict
from sqlalchemy import Connection, Double, Integer, TextClause, bindparam, text
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from ._exceptions import InvalidDocument, SchemaNotReady, require_flag
from ._schema import PG_SEARCH_INDEXES
from ._types import ArchiveText, UTCDateTime

__all__ = [
    "MAX_QUERY_WORDS",
    "SearchHit",
    "check_query",
    "fts5_query",
    "rebuild_search_index",
    "require_search_index",
    "search_index_of",
    "search_messages",
    "set_search_index_on",
]

#: Marks around matched words in snippets.
HIGHLIGHT = ("«", "»")
TEXT_SEARCH_CONFIG = "english"
#: PostgreSQL indexes (and searches) the first this many characters of each text.
SEARCHED_CHARACTERS = 100_000


#: A search takes at most this many words (runs of letters and digits, as
#: ``\w+`` counts them). PostgreSQL's snippets (``ts_headline``) cost more than
#: the square of a query's words for each hit: 1,000 of them take ~1.7 s a hit,
#: 3,000 ~15 s, 64 a few milliseconds. Web search engines cap queries alike.
MAX_QUERY_WORDS = 64
_WORD = re.compile(r"\w+")


def check_query(query: str) -> None:
    """Refuse a search query of more than :data:`MAX_QUERY_WORDS` words."""
    words = sum(1 for _ in _WORD.finditer(query))
    if words > MAX_QUERY_WORDS:
        raise InvalidDocument(
            f"query has {words} words; a search takes at most {MAX_QUERY_WORDS}", field="query"
        )


def _searched(column: str) -> str:
    """What PostgreSQL indexes of a text column: the same expression in the
    indexes and in the queries, so that the queries use the indexes."""
    return f"to_tsvector('{TEXT_SEARCH_CONFIG}', left({column}, {SEARCHED_CHARACTERS}))"


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


def search_messages(
    session: Session,
    query: str,
    *,
    user_id: str | None,
    role: str | None,
    model: str | None,
    since: datetime | None,
    limit: int,
) -> list[SearchHit]:
    filters = []
    params: dict[str, object] = {"limit": limit}
    for name, value, condition in (
        ("user_id", user_id, "c.user_id = :user_id"),
        ("role", role, "m.role = :role"),
        ("model", model, "(c.model = :model OR m.model = :model)"),
        ("since", since, "m.created_at >= :since"),
    ):
        if value is not None:
            filters.append(condition)
            params[name] = value
    where = "".join(f" AND {condition}" for condition in filters)
    require_search_index(session.connection())
    fts_query = fts5_query(query)
    if fts_query is None:
        # No word to find: nothing searchable, or only excluded words, which
        # PostgreSQL would answer with every other message, read from all of them.
        return []
    postgres = session.get_bind().dialect.name == "postgresql"
    if postgres:
        params["query"] = query
        statement = _postgres_statement(where, candidates=max(RANKED_CANDIDATES, limit))
    else:
        params["query"] = fts_query
        statement = _sqlite_statement(where)
    typed = statement.bindparams(
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
    if postgres:
        with _sampled_index_scans(session):
            rows = session.execute(typed, params).all()
        if len(rows) < limit:  # the sample may have missed matches: look at them all
            rows = session.execute(typed, params).all()
    else:
        rows = session.execute(typed, params).all()
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


#: PostgreSQL ranks at most this many matching text parts (or ``limit``, if
#: larger): all of them, for all but the most common words. Ranking re-reads
#: each part's text.
RANKED_CANDIDATES = 100

#: A first PostgreSQL search samples about this many of the index entries of
#: each of its words (``gin_fuzzy_search_limit``): a word found in half a
#: million parts then costs a few milliseconds instead of ~60. If the sample
#: yields fewer hits than asked for, the search runs again over every match.
SAMPLED_MATCHES = 5000


@contextmanager
def _sampled_index_scans(session: Session) -> Iterator[None]:
    """Sets ``gin_fuzzy_search_limit`` for the block, then puts back the
    connection's own value. (After an error inside a transaction, the rollback
    undoes the setting; only then does the restore fail, and that is ignored.)"""
    setting = text("SELECT set_config('gin_fuzzy_search_limit', :value, false)")
    previous = session.execute(text("SELECT current_setting('gin_fuzzy_search_limit')")).scalar_one()
    session.execute(setting, {"value": str(SAMPLED_MATCHES)})
    try:
        yield
    except BaseException:
        with suppress(DBAPIError):
            session.execute(setting, {"value": previous})
        raise
    session.execute(setting, {"value": previous})


def _postgres_statement(where: str, *, candidates: int) -> TextClause:
    # The candidates' LIMIT is a literal: as a parameter, the plan that
    # PostgreSQL caches for the prepared statement (after five runs) cannot
    # know it, and scans every match.
    config = TEXT_SEARCH_CONFIG
    searched = f"left(best.text, {SEARCHED_CHARACTERS})"
    options = f"StartSel={HIGHLIGHT[0]}, StopSel={HIGHLIGHT[1]}, MaxWords=30, MinWords=10, MaxFragments=2"
    return text(
        f"""
        WITH q AS (SELECT websearch_to_tsquery('{config}', :query) AS query),
        candidates AS (
            (SELECT m.chat_id, m.position AS message_position, m.text
             FROM messages m
             CROSS JOIN q
             JOIN chats c ON c.chat_id = m.chat_id
             WHERE m.text IS NOT NULL AND {_searched("m.text")} @@ q.query{where})
            UNION ALL
            (SELECT p.chat_id, p.message_position, p.text
             FROM content_parts p
             CROSS JOIN q
             JOIN messages m ON m.chat_id = p.chat_id AND m.position = p.message_position
             JOIN chats c ON c.chat_id = p.chat_id
             WHERE p.type = 'text' AND {_searched("p.text")} @@ q.query{where})
            LIMIT {candidates}
        ),
        ranked AS (
            SELECT DISTINCT ON (chat_id, message_position)
                   chat_id, message_position, text, ts_rank({_searched("text")}, q.query) AS rank
            FROM candidates CROSS JOIN q
            ORDER BY chat_id, message_position, rank DESC
        ),
        best AS (
            SELECT * FROM ranked ORDER BY rank DESC, chat_id, message_position LIMIT :limit
        )
        SELECT best.chat_id, m.uid, m.position, m.role, m.created_at, best.rank,
               ts_headline('{config}', {searched}, q.query, '{options}') AS snippet
        FROM best
        JOIN messages m ON m.chat_id = best.chat_id AND m.position = best.message_position
        CROSS JOIN q
        ORDER BY best.rank DESC, best.chat_id, best.message_position
        """
    )


def _sqlite_statement(where: str) -> TextClause:
    start, stop = HIGHLIGHT
    # FTS5's rank is computed for every match inside the FTS5 module (cheap);
    # snippets only for the hits returned.
    return text(
        f"""
        WITH matched AS MATERIALIZED (
            SELECT 0 AS source, rowid AS row, -rank AS rank
            FROM message_text_search WHERE message_text_search MATCH :query
            UNION ALL
            SELECT 1, rowid, -rank FROM message_search WHERE message_search MATCH :query
        ),
        located AS (
            SELECT m.chat_id, m.position AS message_position, matched.source, matched.row, matched.rank
            FROM matched JOIN messages m ON m.rowid = matched.row WHERE matched.source = 0
            UNION ALL
            SELECT p.chat_id, p.message_position, matched.source, matched.row, matched.rank
            FROM matched JOIN content_parts p ON p.rowid = matched.row WHERE matched.source = 1
        ),
        hits AS (
            SELECT located.*,
                   row_number() OVER (
                       PARTITION BY located.chat_id, located.message_position ORDER BY located.rank DESC
                   ) AS nth
            FROM located
            JOIN messages m ON m.chat_id = located.chat_id AND m.position = located.message_position
            JOIN chats c ON c.chat_id = located.chat_id
            WHERE true{where}
        ),
        best AS (
            SELECT * FROM hits WHERE nth = 1 ORDER BY rank DESC, chat_id, message_position LIMIT :limit
        )
        SELECT best.chat_id, m.uid, m.position, m.role, m.created_at, best.rank,
               CASE best.source
                   WHEN 0 THEN (SELECT snippet(message_text_search, 0, '{start}', '{stop}', '…', 24)
                                FROM message_text_search
                                WHERE message_text_search MATCH :query AND rowid = best.row)
                   ELSE (SELECT snippet(message_search, 0, '{start}', '{stop}', '…', 24)
                         FROM message_search WHERE message_search MATCH :query AND rowid = best.row)
               END AS snippet
        FROM best
        JOIN messages m ON m.chat_id = best.chat_id AND m.position = best.message_position
        ORDER BY best.rank DESC, best.chat_id, best.message_position
        """
    )


_TOKEN = re.compile(r'(-?)"([^"]*)"?|(\S+)')


def fts5_query(query: str) -> str | None:
    """The user's search, in PostgreSQL's ``websearch_to_tsquery`` syntax,
    translated to an FTS5 query in which every word is a quoted string (so no
    input is ever FTS5 syntax). ``None`` when nothing searchable is left."""
    groups: list[list[str]] = []
    excluded: list[str] = []
    join_next = False
    for match in _TOKEN.finditer(query):
        negated, phrase, word = match.group(1), match.group(2), match.group(3)
        if word is not None and word.lower() == "or":
            join_next = bool(groups)
            continue
        if word is not None and word.startswith("-") and len(word) > 1:
            negated, word = "-", word[1:]
        term = phrase if phrase is not None else word
        if not term or not any(character.isalnum() for character in term):
            continue
        quoted = '"' + term.replace('"', '""') + '"'
        if negated:
            excluded.append(quoted)
        elif join_next:
            groups[-1].append(quoted)
        else:
            groups.append([quoted])
        join_next = False
    if not groups:
        return None
    expression = " AND ".join("(" + " OR ".join(group) + ")" for group in groups)
    if excluded:
        expression = f"({expression}) NOT ({' OR '.join(excluded)})"
    return expression


#: The full-text search objects as the migrations leave them at head, to drop
#: and create again (:func:`set_search_index_on`); a test keeps them equal to
#: what the migrations create. PostgreSQL: one GIN index over each table's text.
_MESSAGES_INDEX, _PARTS_INDEX = PG_SEARCH_INDEXES
_GIN = f"USING gin ({_searched('text')})"
_PG_SEARCH_INDEX_DEFINITIONS = {
    _MESSAGES_INDEX: f"ON messages {_GIN} WHERE text IS NOT NULL",
    _PARTS_INDEX: f"ON content_parts {_GIN} WHERE type = 'text'",
}


_TRIGGER_EVENTS = ("insert", "delete", "update")


class _SqliteFullText(NamedTuple):
    """An FTS5 table over one table's text, keyed by its rowids, and the
    triggers that keep it in step."""

    name: str
    table: str
    indexed: str  # which rows of ``table`` it holds
    triggers: tuple[str, str, str]  # named {name}_{event}, for each of _TRIGGER_EVENTS

    def create(self) -> list[str]:
        return [
            f"CREATE VIRTUAL TABLE {self.name} USING fts5("
            f"text, content='{self.table}', content_rowid='rowid', tokenize='porter unicode61')",
            *self.triggers,
        ]

    def drop(self) -> list[str]:
        return [
            *(f"DROP TRIGGER IF EXISTS {self.name}_{event}" for event in _TRIGGER_EVENTS),
            f"DROP TABLE IF EXISTS {self.name}",
        ]

    def fill(self) -> str:
        return (
            f"INSERT INTO {self.name} (rowid, text) SELECT rowid, text FROM {self.table} WHERE {self.indexed}"
        )

    def object_names(self) -> list[str]:
        return [self.name, *(f"{self.name}_{event}" for event in _TRIGGER_EVENTS)]


#: SQLite's full-text tables, as migrations 0005 (string contents) and 0002
#: (text parts) define them.
_SQLITE_FULL_TEXT = (
    _SqliteFullText(
        "message_text_search",
        "messages",
        "text IS NOT NULL",
        (
            "CREATE TRIGGER message_text_search_insert AFTER INSERT ON messages "
            "WHEN new.text IS NOT NULL BEGIN "
            "INSERT INTO message_text_search (rowid, text) VALUES (new.rowid, new.text); END",
            "CREATE TRIGGER message_text_search_delete AFTER DELETE ON messages "
            "WHEN old.text IS NOT NULL BEGIN "
            "INSERT INTO message_text_search (message_text_search, rowid, text) "
            "VALUES ('delete', old.rowid, old.text); END",
            "CREATE TRIGGER message_text_search_update AFTER UPDATE OF text ON messages BEGIN "
            "INSERT INTO message_text_search (message_text_search, rowid, text) "
            "SELECT 'delete', old.rowid, old.text WHERE old.text IS NOT NULL; "
            "INSERT INTO message_text_search (rowid, text) "
            "SELECT new.rowid, new.text WHERE new.text IS NOT NULL; END",
        ),
    ),
    _SqliteFullText(
        "message_search",
        "content_parts",
        "type = 'text'",
        (
            "CREATE TRIGGER message_search_insert AFTER INSERT ON content_parts WHEN new.type = 'text' BEGIN "
            "INSERT INTO message_search (rowid, text) VALUES (new.rowid, new.text); END",
            "CREATE TRIGGER message_search_delete AFTER DELETE ON content_parts WHEN old.type = 'text' BEGIN "
            "INSERT INTO message_search (message_search, rowid, text) "
            "VALUES ('delete', old.rowid, old.text); END",
            "CREATE TRIGGER message_search_update AFTER UPDATE ON content_parts BEGIN "
            "INSERT INTO message_search (message_search, rowid, text) "
            "SELECT 'delete', old.rowid, old.text WHERE old.type = 'text'; "
            "INSERT INTO message_search (rowid, text) "
            "SELECT new.rowid, new.text WHERE new.type = 'text'; END",
        ),
    ),
)

_SEARCH_INDEX_OFF = (
    "full-text search is off for this archive (its index has been dropped); "
    "turn it on with 'chatarchive db search-index on' or set_search_index(True)"
)


def search_index_of(connection: Connection) -> bool:
    """Whether the archive has its full-text search index (every object of it)."""
    if connection.dialect.name == "postgresql":
        present = text("SELECT count(to_regclass(name)) FROM unnest(CAST(:names AS text[])) AS name")
        names = list(PG_SEARCH_INDEXES)
    else:
        present = text("SELECT count(*) FROM sqlite_master WHERE name IN :names").bindparams(
            bindparam("names", expanding=True)
        )
        names = [name for table in _SQLITE_FULL_TEXT for name in table.object_names()]
    return bool(connection.execute(present, {"names": names}).scalar_one() == len(names))


def require_search_index(connection: Connection) -> None:
    if not search_index_of(connection):
        raise SchemaNotReady(_SEARCH_INDEX_OFF)


def set_search_index_on(connection: Connection, enabled: bool) -> None:
    """Create the full-text search index from the stored text, or drop it, in
    the caller's transaction. Without it, writes skip indexing each message's
    text (the largest part of their cost on PostgreSQL) and searches raise
    :class:`SchemaNotReady`. Creating it when it is there changes nothing."""
    require_flag(enabled, "enabled")
    if connection.dialect.name == "postgresql":
        for name, definition in _PG_SEARCH_INDEX_DEFINITIONS.items():
            if enabled:
                connection.exec_driver_sql(f"CREATE INDEX IF NOT EXISTS {name} {definition}")
            else:
                connection.exec_driver_sql(f"DROP INDEX IF EXISTS {name}")
        return
    if enabled and search_index_of(connection):
        return
    for table in _SQLITE_FULL_TEXT:
        for statement in table.drop() + ([*table.create(), table.fill()] if enabled else []):
            connection.exec_driver_sql(statement)


def rebuild_search_index(connection: Connection) -> None:
    """Rebuild the full-text index from the stored text, in the caller's transaction.

    SQLite's FTS5 tables point at rows by rowid, which a dump and reload (or a
    VACUUM, which SQLite allows to renumber rows) may change; PostgreSQL's GIN
    indexes follow their tables but may need a rebuild after a change of the
    text search dictionaries.

    Raises:
        SchemaNotReady: the index is off (:func:`set_search_index_on`).
    """
    require_search_index(connection)
    if connection.dialect.name == "postgresql":
        for name in PG_SEARCH_INDEXES:
            connection.exec_driver_sql(f"REINDEX INDEX {name}")
        return
    for table in _SQLITE_FULL_TEXT:
        connection.exec_driver_sql(f"INSERT INTO {table.name} ({table.name}) VALUES ('delete-all')")
        connection.exec_driver_sql(table.fill())
