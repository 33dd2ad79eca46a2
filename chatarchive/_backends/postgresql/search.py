"""Search terms as ``tsvector`` values under a GIN index, and the statements that match them."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress

from sqlalchemy import Connection, bindparam, column, text
from sqlalchemy import table as light_table
from sqlalchemy.exc import DBAPIError
from sqlalchemy.sql.elements import TextClause

from chatarchive._backends.base import Executor
from chatarchive._exceptions import NotSupported
from chatarchive._schema import SEARCH_TERMS, VECTOR_INDEX
from chatarchive._search import SearchQuery
from chatarchive._terms import MOST_VECTOR_SCAN, Phrase
from chatarchive._types import ArchiveText

#: pgvector's default ``hnsw.ef_search``: how many vectors an HNSW index scan
#: keeps as candidates (its largest is ``MOST_VECTOR_SCAN``).
DEFAULT_EF_SEARCH = 40
#: A search scans the HNSW index keeping this many times the candidates it
#: ranks: with the index built as ``HNSW_BUILD`` says, recall@10 against exact
#: search stays at 0.95 or more at a million vectors (see the performance page).
EF_SEARCH_PER_CANDIDATE = 4
#: How the HNSW index is built: more links per vector (``m``, pgvector's default
#: 16) and a wider search while building (``ef_construction``, default 64) make
#: a graph that finds the true nearest vectors more often, at about twice the
#: build time.
HNSW_BUILD = "m = 24, ef_construction = 128"
#: What the HNSW index holds of each vector: the vector in half precision
#: (``halfvec``: half the memory a scan goes through, and up to 4,000
#: dimensions), compared by cosine distance. A search ranks the index's
#: candidates by the exact cosine distance of the stored 32-bit vectors.
HNSW_KEY = "halfvec"
HNSW_OPS = "halfvec_cosine_ops"


def hnsw_key(dimension: int, value: str = "embedding") -> str:
    """The expression the HNSW index orders by, of the vector ``value``."""
    return f"CAST({value} AS {HNSW_KEY}({dimension}))"


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
    """Sets ``gin_fuzzy_search_limit`` for the block."""
    with _settings(executor, {"gin_fuzzy_search_limit": (str(SAMPLED_MATCHES), "0")}):
        yield


@contextmanager
def _hnsw_scans(executor: Executor, candidates: int, scan: int | None = None) -> Iterator[None]:
    """HNSW index scans for the block that keep ``scan`` vectors (the
    archive's ``vector_scan``; ``None``: ``EF_SEARCH_PER_CANDIDATE`` times
    ``candidates``), or the connection's own ``hnsw.ef_search`` if an operator
    set it higher, and go on through the index until they have as many that
    the search's filters keep (``hnsw.iterative_scan``)."""
    wanted = EF_SEARCH_PER_CANDIDATE * candidates if scan is None else scan

    def breadth(own: str) -> str:
        return str(min(MOST_VECTOR_SCAN, max(int(own), wanted)))

    with _settings(
        executor,
        {
            "hnsw.ef_search": (breadth, str(DEFAULT_EF_SEARCH)),
            "hnsw.iterative_scan": ("relaxed_order", "off"),
        },
    ):
        yield


@contextmanager
def _settings(
    executor: Executor, settings: Mapping[str, tuple[str | Callable[[str], str], str]]
) -> Iterator[None]:
    """Sets each setting (name: its value, or a function of the connection's
    own value, and its default) for the block, then puts back the
    connection's own values (the default for a setting of an extension not
    loaded yet). After an error inside a transaction, the
    rollback undoes the settings; only then does the restore fail, and that
    is ignored."""
    names = list(settings)
    read = ", ".join(f"current_setting(:n{i}, true)" for i in range(len(names)))
    found = executor.execute(text(f"SELECT {read}"), {f"n{i}": name for i, name in enumerate(names)}).one()
    previous = {name: value or settings[name][1] for name, value in zip(names, found, strict=True)}
    assign = text("SELECT " + ", ".join(f"set_config(:n{i}, :v{i}, false)" for i in range(len(names))))

    def put(values: Mapping[str, str]) -> None:
        params = {f"n{i}": name for i, name in enumerate(names)} | {
            f"v{i}": values[name] for i, name in enumerate(names)
        }
        executor.execute(assign, params)

    put(
        {
            name: value(previous[name]) if callable(value) else value
            for name, (value, _default) in settings.items()
        }
    )
    try:
        yield
    except BaseException:
        with suppress(DBAPIError):
            put(previous)
        raise
    put(previous)


def vector_index(model: str, dimension: int) -> str:
    """The name of the HNSW index of ``model``'s vectors of ``dimension`` numbers."""
    digest = hashlib.sha256(f"{model}\x00{dimension}".encode()).hexdigest()[:16]
    return VECTOR_INDEX + digest


def index_vectors(connection: Connection, model: str | None, dimension: int | None) -> None:
    """Drop the HNSW indexes of other models; build ``model``'s, with
    pgvector (created in the database if it is installed on the server)."""
    kept = None if model is None or dimension is None else vector_index(model, dimension)
    found = connection.execute(
        text(
            "SELECT indexname FROM pg_indexes "
            "WHERE tablename = 'embeddings' AND starts_with(indexname, :prefix)"
        ),
        {"prefix": VECTOR_INDEX},
    ).scalars()
    for name in list(found):
        if name != kept:
            connection.execute(text(f"DROP INDEX {name}"))
    if model is None or dimension is None or kept is None:
        return
    extension = connection.execute(
        text("SELECT installed_version IS NOT NULL FROM pg_available_extensions WHERE name = 'vector'")
    ).first()
    if extension is None:
        raise NotSupported(
            "search by meaning on PostgreSQL needs the pgvector extension, which this server lacks: install "
            "it (Debian and Ubuntu: postgresql-NN-pgvector; or pgvector's Docker image, or a managed service "
            "that offers it), then configure the embedder again"
        )
    if not extension[0]:
        connection.execute(text("CREATE EXTENSION vector"))
    # The model's name is a literal: a partial index serves only queries whose plan knows the value.
    connection.execute(
        text(
            f"CREATE INDEX IF NOT EXISTS {kept} ON embeddings USING hnsw "
            f"(({hnsw_key(dimension)}) {HNSW_OPS}) WITH ({HNSW_BUILD}) WHERE model = '{model}'"
        )
    )


def _nearest_statement(model: str, dimension: int, where: str, *, candidates: int) -> TextClause:
    # The model is a literal, as the index's condition has it; the LIMIT too (see
    # _match_statement). The index orders the candidates; each one's distance
    # is the exact cosine distance of the stored vectors.
    vector = f"vector({dimension})"
    return text(
        f"""
        SELECT m.chat_id, m.position, m.uid, m.role, m.created_at,
               CAST(e.embedding AS {vector}) <=> CAST(:vector AS {vector}) AS distance
        FROM embeddings e
        JOIN messages m ON m.chat_id = e.chat_id AND m.position = e.message_position
        JOIN chats c ON c.chat_id = e.chat_id
        WHERE e.model = '{model}'{where}
        ORDER BY {hnsw_key(dimension, "e.embedding")} <=> {hnsw_key(dimension, ":vector")}
        LIMIT {candidates}
        """
    )


def vector_text(vector: Sequence[float]) -> str:
    """A vector as pgvector's text input."""
    return "[" + ",".join(map(repr, vector)) + "]"


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
        SELECT m.chat_id, m.position, m.uid, m.role, m.created_at,
               t.terms::text AS terms, length(t.terms) AS length
        FROM {SEARCH_TERMS} t
        JOIN messages m ON m.chat_id = t.chat_id AND m.position = t.message_position
        JOIN chats c ON c.chat_id = t.chat_id
        WHERE t.terms @@ CAST(:query AS tsquery){where}
        LIMIT {candidates}
        """
    )
