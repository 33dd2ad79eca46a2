"""Search terms as ``tsvector`` values under a GIN index, and the statements that match them."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager, suppress

from sqlalchemy import bindparam, column, text
from sqlalchemy import table as light_table
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import TextClause

from chatarchive._backends.base import Executor
from chatarchive._schema import SEARCH_TERMS
from chatarchive._search import SearchQuery
from chatarchive._terms import Phrase
from chatarchive._types import ArchiveText

#: A first search samples about this many of the index entries of each of its
#: terms (``gin_fuzzy_search_limit``), so that a word found in half the
#: archive is not read whole to pick a page of candidates. If the sample yields
#: fewer candidates than asked for, the search runs again over every match.
SAMPLED_MATCHES = 5000

_TERMS_INDEX = "ix_message_terms_terms"
#: From this many messages' terms on, ``write_terms`` copies them (COPY's own
#: round trips cost more than an INSERT's for a few rows).
_COPIED_TERMS = 20
_COPY_TERMS = f"COPY {SEARCH_TERMS} (chat_id, message_position, terms, chat_user_id) FROM STDIN"
_WRITE_TERMS = text(
    f"INSERT INTO {SEARCH_TERMS} (chat_id, message_position, terms, chat_user_id) "
    "VALUES (:chat_id, :position, CAST(:terms AS tsvector), :chat_user_id)"
).bindparams(bindparam("chat_id", type_=ArchiveText()), bindparam("chat_user_id", type_=ArchiveText()))
_TERMS = light_table(
    SEARCH_TERMS, column("chat_id"), column("message_position"), column("terms"), column("chat_user_id")
)
_DELETE_TERMS = text(
    f"DELETE FROM {SEARCH_TERMS} WHERE chat_id = :chat_id AND message_position >= :position"
).bindparams(bindparam("chat_id", type_=ArchiveText()))


@contextmanager
def _sampled_index_scans(executor: Executor) -> Iterator[None]:
    """Sets ``gin_fuzzy_search_limit`` for the block, then puts back the
    connection's own value. (After an error inside a transaction, the rollback
    undoes the setting; only then does the restore fail, and that is ignored.)"""
    setting = text("SELECT set_config('gin_fuzzy_search_limit', :value, false)")
    previous = executor.execute(text("SELECT current_setting('gin_fuzzy_search_limit')")).scalar_one()
    executor.execute(setting, {"value": str(SAMPLED_MATCHES)})
    try:
        yield
    except BaseException:
        with suppress(DBAPIError):
            executor.execute(setting, {"value": previous})
        raise
    executor.execute(setting, {"value": previous})


def tsquery(query: SearchQuery) -> str:
    """A search query as ``tsquery`` input: the terms quoted (they hold only
    letters and digits), phrases as ``<->``, a prefix as ``:*``."""

    def phrase(item: Phrase) -> str:
        quoted = [f"'{term}'" for term in item.terms]
        if item.prefix:
            quoted[-1] += ":*"
        return "(" + " <-> ".join(quoted) + ")"

    expression = " & ".join("(" + " | ".join(map(phrase, group)) + ")" for group in query.groups)
    if query.excluded:
        expression += " & !(" + " | ".join(map(phrase, query.excluded)) + ")"
    return expression


def _match_statement(where: str, *, candidates: int) -> TextClause:
    # The LIMIT is a literal: as a parameter, the plan that PostgreSQL caches
    # for the prepared statement (after five runs) cannot know it, and scans
    # every match.
    return text(
        f"""
        SELECT m.chat_id, m.position, m.uid, m.role, m.created_at, m.text,
               t.terms::text AS terms, length(t.terms) AS length
        FROM {SEARCH_TERMS} t
        JOIN messages m ON m.chat_id = t.chat_id AND m.position = t.message_position
        JOIN chats c ON c.chat_id = t.chat_id
        WHERE t.terms @@ CAST(:query AS tsquery){where}
        LIMIT {candidates}
        """
    )
