"""The search index: each message's terms, written with it or after it, and searched.

Every write that adds or changes message text tells this module which
messages it wrote (``written``) or from which position a chat's text changed
(``changed``). With ``sync`` indexing their terms are written in the same
transaction; with ``deferred`` indexing (and while search is ``off``) the
chat is only marked (``chats.search_from``), and ``index_pending`` indexes the
marked chats later, a batch per transaction. Deleting a message deletes its
terms (a foreign key on PostgreSQL, a trigger on SQLite).

Search matches terms in the database; ranking and snippets are computed here,
from the same terms, so both databases give the same hits.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import replace
from datetime import datetime
from functools import cache
from typing import Any, Literal

from sqlalchemy import bindparam, case, func, select
from sqlalchemy import delete as delete_rows
from sqlalchemy import update as update_rows

from chatarchive._backends.base import TermsEntry
from chatarchive._embeddings import ENTRY_POINT_GROUP, Embedder, embedder_named, register_embedder
from chatarchive._exceptions import EmbedderError, SchemaNotReady
from chatarchive._schema import tables
from chatarchive._search import (
    HIGHLIGHT,
    SearchFilters,
    SearchHit,
    SearchMode,
    SearchResults,
    compile_query,
    parse_query,
    search_index_off,
)
from chatarchive._terms import SearchSettings, StoredTerms, rank, snippet

from .unit import Unit

__all__ = [
    "RANKED_CANDIDATES",
    "SETTING_FIELDS",
    "changed",
    "configure",
    "entries",
    "index_all_pending",
    "index_pending",
    "is_empty",
    "known_settings",
    "pending",
    "pending_mark",
    "required_embedder",
    "search",
    "settings",
    "settings_of",
    "stored_setting",
    "texts_of",
    "written",
]


#: At most this many matching messages (or ``limit``, if larger) are ranked:
#: all of them, for all but the most common words.
RANKED_CANDIDATES = 100

#: ``SearchSettings`` field -> its row in ``archive_settings``.
_SETTING_NAMES = {
    "language": "search_language",
    "cjk": "search_cjk",
    "indexing": "search_indexing",
    "embedder": "search_embedder",
    "dimension": "search_dimension",
    "vector_scan": "search_vector_scan",
}
SETTING_FIELDS = tuple(_SETTING_NAMES)


def settings(unit: Unit, /) -> SearchSettings:
    """The archive's search settings (read once per unit of work)."""
    if unit.search_settings is None:
        stored = dict(
            unit.execute(select(tables.archive_settings.c.name, tables.archive_settings.c.value)).all()
        )
        known_settings(unit, [stored.get(name) for name in _SETTING_NAMES.values()])
    assert unit.search_settings is not None
    return unit.search_settings


def stored_setting(field: str) -> Any:
    """The stored value of a ``SearchSettings`` field, as a scalar subquery (NULL: the default)."""
    name = _SETTING_NAMES[field]
    return (
        select(tables.archive_settings.c.value)
        .where(tables.archive_settings.c.name == name)
        .scalar_subquery()
    )


def known_settings(unit: Unit, /, values: Sequence[str | None]) -> None:
    """Tell the unit the archive's settings, read by another statement
    (each field's stored value, in ``SETTING_FIELDS`` order, or None)."""
    unit.search_settings = settings_of(values)


def settings_of(values: Sequence[str | None]) -> SearchSettings:
    """The settings whose stored values (in ``SETTING_FIELDS`` order, or None) are ``values``."""
    return _settings_of(tuple(values))


@cache
def _settings_of(values: tuple[str | None, ...]) -> SearchSettings:
    given: dict[str, Any] = {
        field: value for field, value in zip(SETTING_FIELDS, values, strict=True) if value is not None
    }
    for number in ("dimension", "vector_scan"):
        if number in given:
            given[number] = int(given[number])
    return SearchSettings(**given)


def pending_mark(unit: Unit, /) -> int | None:
    """What a new chat row's ``search_from`` is: ``0`` (marked) unless its
    messages are indexed as they are written."""
    return None if settings(unit).indexing == "sync" else 0


# -- writing terms -------------------------------------------------------------------------


def written(
    unit: Unit,
    /,
    message_rows: Sequence[Mapping[str, Any]],
    part_rows: Sequence[Mapping[str, Any]],
    *,
    marked: bool = False,
) -> None:
    """The rows of new messages are written: index them, or mark their chats
    (unless ``marked``: their chat rows were written with ``pending_mark``)."""
    sealed = {chat_id for chat_id, (is_sealed, _) in unit.seals.items() if is_sealed}
    if sealed:  # nothing of a sealed chat is indexed
        message_rows = [row for row in message_rows if row["chat_id"] not in sealed]
        part_rows = [row for row in part_rows if row["chat_id"] not in sealed]
    if not message_rows:
        return
    current = settings(unit)
    if current.indexing == "sync":
        texts = _texts(message_rows, part_rows)
        unit.backend.write_terms(unit.executor, _entries(current, texts))
        if _embedded(unit, current, texts):
            return
        # The archive's embedder is not at hand in this process: the chats
        # wait for an indexer that has it (their terms are written again then).
    elif marked:
        return
    first: dict[str, int] = {}
    for row in message_rows:
        first[row["chat_id"]] = min(first.get(row["chat_id"], row["position"]), row["position"])
    for chat_id, position in first.items():
        _mark(unit, chat_id, position)


def changed(unit: Unit, /, chat_id: str, from_position: int) -> None:
    """The chat's messages from ``from_position`` on changed (their text, or
    their positions): index them again, or mark the chat."""
    current = settings(unit)
    if current.indexing != "sync" or (current.embedder is not None and _embedder(current) is None):
        _mark(unit, chat_id, from_position)
        return
    _forget(unit, current, [(chat_id, from_position)])
    texts = _texts(*_stored_texts(unit, [chat_id], from_position=from_position))
    unit.backend.write_terms(unit.executor, _entries(current, texts))
    _embedded(unit, current, texts)


def _forget(unit: Unit, /, current: SearchSettings, starts: Sequence[tuple[str, int]]) -> None:
    """Delete the terms and vectors of each chat's messages from a position on."""
    unit.backend.delete_terms(unit.executor, starts)
    if current.embedder is None:  # no vectors are kept
        return
    if starts:  # one statement, run for every chat in one round trip
        unit.execute(
            _DELETE_VECTORS, [{"forgotten": chat_id, "from": position} for chat_id, position in starts]
        )


_DELETE_VECTORS = delete_rows(tables.embeddings).where(
    tables.embeddings.c.chat_id == bindparam("forgotten"),
    tables.embeddings.c.message_position >= bindparam("from"),
)


def _mark(unit: Unit, /, chat_id: str, position: int) -> None:
    """Mark the chat's messages from ``position`` on (and any marked before) as to be indexed."""
    unit.execute(
        update_rows(tables.chats)
        .where(tables.chats.c.chat_id == chat_id)
        .values(
            search_from=case(
                (tables.chats.c.search_from < position, tables.chats.c.search_from), else_=position
            )
        )
    )


# -- vectors -------------------------------------------------------------------------------


def _embedder(current: SearchSettings) -> Embedder | None:
    """The archive's embedder as this process has it (``None``: the archive
    has none, or this process was not given it)."""
    if current.embedder is None:
        return None
    embedder = embedder_named(current.embedder)
    if embedder is not None and embedder.dimension != current.dimension:
        raise EmbedderError(
            f"the embedder {current.embedder!r} of this process gives vectors of {embedder.dimension} "
            f"numbers; the archive keeps {current.dimension}: configure_search(embedder=...) to change it"
        )
    return embedder


def required_embedder(current: SearchSettings) -> Embedder:
    """The archive's embedder, which this operation needs.

    Raises:
        SchemaNotReady: the archive has no embedder.
        EmbedderError: this process was not given it.
    """
    if current.embedder is None:
        raise SchemaNotReady(
            "search by meaning needs an embedder: configure_search(embedder=Embedder(...)), "
            "or 'chatarchive db search-index --embedder NAME' for an installed one"
        )
    embedder = _embedder(current)
    if embedder is None:
        raise EmbedderError(
            f"this archive embeds with {current.embedder!r}, which this process was not given: "
            f"register_embedder(Embedder({current.embedder!r}, {current.dimension}, ...)), or install a "
            f"package that offers it as a {ENTRY_POINT_GROUP!r} entry point"
        )
    return embedder


def _embedded(
    unit: Unit, /, current: SearchSettings, texts: Mapping[tuple[str, int], tuple[str, str | None]]
) -> bool:
    """Write the vectors of ``texts`` (see ``_texts``), when the archive has an
    embedder; whether it could (``False``: this process lacks the embedder)."""
    if current.embedder is None:
        return True
    embedder = _embedder(current)
    if embedder is None:
        return False
    if texts:
        vectors = embedder.vectors([text for text, _user in texts.values()])
        unit.insert(
            tables.embeddings,
            [
                {
                    "chat_id": chat_id,
                    "message_position": position,
                    "model": embedder.name,
                    "dimension": embedder.dimension,
                    "embedding": vector,
                    "chat_user_id": user,
                }
                for ((chat_id, position), (_text, user)), vector in zip(texts.items(), vectors, strict=True)
            ],
        )
    return True


def entries(
    current: SearchSettings, message_rows: Iterable[Mapping[str, Any]], part_rows: Iterable[Mapping[str, Any]]
) -> Iterator[TermsEntry]:
    """The terms of messages' rows under the ``current`` settings: each
    message's (chat id, position, terms, chat's user), for those with any,
    found as they are taken (a backend sends each while the next is found)."""
    return _entries(current, _texts(message_rows, part_rows))


def _entries(
    current: SearchSettings, texts: Mapping[tuple[str, int], tuple[str, str | None]]
) -> Iterator[TermsEntry]:
    tokenizer = current.tokenizer
    for (chat_id, position), (text, user) in texts.items():
        terms = tokenizer.terms(text)
        if terms:
            yield chat_id, position, terms, user


def texts_of(
    message_rows: Iterable[Mapping[str, Any]], part_rows: Iterable[Mapping[str, Any]]
) -> Iterator[str]:
    """The texts that indexing takes the terms of: each message's that has one."""
    return (text for text, _ in _texts(message_rows, part_rows).values())


def _texts(
    message_rows: Iterable[Mapping[str, Any]], part_rows: Iterable[Mapping[str, Any]]
) -> dict[tuple[str, int], tuple[str, str | None]]:
    """The text of each message (its string content, or its text parts in
    order, one per line), and its chat's user."""
    parts: dict[tuple[str, int], list[str]] = {}
    for part in part_rows:
        if part["type"] == "text" and part["text"] is not None:
            parts.setdefault((part["chat_id"], part["message_position"]), []).append(part["text"])
    texts = {}
    for row in message_rows:
        key = (row["chat_id"], row["position"])
        text = row["text"] if row["text"] is not None else "\n".join(parts.get(key, ()))
        if text:
            texts[key] = (text, row.get("chat_user_id"))
    return texts


def _stored_texts(
    unit: Unit, /, chat_ids: Sequence[str], *, from_position: int | None = None
) -> tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]:
    """The message and text part rows of ``chat_ids`` (from ``from_position``
    on; without it, from each chat's ``search_from``) that search reads."""
    sealed = set(
        unit.execute(
            select(tables.chats.c.chat_id).where(tables.chats.c.chat_id.in_(chat_ids), tables.chats.c.sealed)
        ).scalars()
    )
    chat_ids = [chat_id for chat_id in chat_ids if chat_id not in sealed]  # nothing of them is indexed
    if from_position is None:
        start: Any = (
            select(tables.chats.c.search_from)
            .where(tables.chats.c.chat_id == tables.messages.c.chat_id)
            .scalar_subquery()
        )
        part_start: Any = (
            select(tables.chats.c.search_from)
            .where(tables.chats.c.chat_id == tables.content_parts.c.chat_id)
            .scalar_subquery()
        )
    else:
        start = part_start = from_position
    message_rows = (
        unit.execute(
            select(
                tables.messages.c.chat_id,
                tables.messages.c.position,
                tables.messages.c.text,
                tables.messages.c.chat_user_id,
            ).where(tables.messages.c.chat_id.in_(chat_ids), tables.messages.c.position >= start)
        )
        .mappings()
        .all()
    )
    part_rows = _text_parts(unit, tables.content_parts.c.message_position >= part_start, chat_ids=chat_ids)
    return [dict(row) for row in message_rows], part_rows


_MARKED_CHAT = (
    select(tables.chats.c.search_from)
    .where(tables.chats.c.chat_id == bindparam("chat"), tables.chats.c.search_from.is_not(None))
    .with_for_update(skip_locked=True)
)


def _text_parts(unit: Unit, /, *where: Any, chat_ids: Sequence[str]) -> list[Mapping[str, Any]]:
    """The text parts of ``chat_ids``'s messages (those ``where`` selects), in order."""
    query = (
        select(
            tables.content_parts.c.chat_id,
            tables.content_parts.c.message_position,
            tables.content_parts.c.type,
            tables.content_parts.c.text,
        )
        .where(tables.content_parts.c.chat_id.in_(chat_ids), tables.content_parts.c.type == "text", *where)
        .order_by(
            tables.content_parts.c.chat_id,
            tables.content_parts.c.message_position,
            tables.content_parts.c.position,
        )
    )
    return [dict(row) for row in unit.execute(query).mappings()]


# -- indexing marked chats -----------------------------------------------------------------


#: How many marked chats an indexer's batch looks at, per chat it takes:
#: chats that a writer or another indexer holds are passed over, so that up
#: to this many indexers share the oldest marked chats, each its own.
CANDIDATES_PER_CHAT = 4


def index_pending(unit: Unit, /, *, chats_per_batch: int) -> int:
    """Index the messages of up to ``chats_per_batch`` marked chats, the
    least recently written first, and clear their marks; returns how many
    chats. Chats that a writer or another indexer holds are left for the
    next batch."""
    current = settings(unit)
    if current.indexing == "off":
        return 0
    if current.embedder is not None:
        required_embedder(current)
    marked = (
        select(tables.chats.c.chat_id)
        .where(tables.chats.c.search_from.is_not(None))
        .order_by(tables.chats.c.updated_at, tables.chats.c.chat_id)
        .limit(chats_per_batch * CANDIDATES_PER_CHAT)
    )
    with unit.writing():
        # Each chat locked on its own (a distributed archive locks no rows of
        # several shards in one statement), skipping those held elsewhere.
        batch: dict[str, int] = {}
        for chat_id in unit.execute(marked).scalars().all():
            row = unit.execute(_MARKED_CHAT, {"chat": chat_id}).first()
            if row is not None:
                batch[chat_id] = row[0]
                if len(batch) == chats_per_batch:
                    break
        if not batch:
            return 0
        chat_ids = list(batch)
        _forget(unit, current, list(batch.items()))
        texts = _texts(*_stored_texts(unit, chat_ids))
        unit.backend.write_terms(unit.executor, _entries(current, texts))
        _embedded(unit, current, texts)
        unit.execute(
            update_rows(tables.chats).where(tables.chats.c.chat_id.in_(chat_ids)).values(search_from=None)
        )
    return len(batch)


def index_all_pending(unit: Unit, /) -> int:
    """Index every marked chat, in the unit's transaction; returns how many."""
    done = 0
    while indexed := index_pending(unit, chats_per_batch=500):
        done += indexed
    return done


def is_empty(unit: Unit, /) -> bool:
    """Whether the archive holds no chat."""
    return unit.execute(select(tables.chats.c.chat_id).limit(1)).first() is None


def pending(unit: Unit, /, user_id: str | None = None) -> tuple[int, datetime | None]:
    """How many chats (of ``user_id``'s) are marked, and when the oldest was written."""
    query = unit.only_chats_of(
        select(func.count(), func.min(tables.chats.c.updated_at)).where(
            tables.chats.c.search_from.is_not(None)
        ),
        user_id,
    )
    count, oldest = unit.execute(query).one()
    return int(count), oldest


def configure(
    unit: Unit,
    /,
    *,
    rebuild: bool = False,
    embedder: Embedder | Literal[False] | None = None,
    **changes: Any,
) -> SearchSettings:
    """Change the archive's search settings (``embedder``: a model to keep
    vectors of, ``False``: none; ``vector_scan=False``: the default scan). A
    change of language or CJK splitting, of the embedder, turning search on,
    or ``rebuild`` indexes every chat again: at once with ``sync`` indexing,
    by ``index_pending`` with ``deferred``."""
    before = settings(unit)
    given = {name: value for name, value in changes.items() if value is not None}
    if given.get("vector_scan") is False:
        given["vector_scan"] = None
    if embedder is False:
        given |= {"embedder": None, "dimension": None}
    elif embedder is not None:
        register_embedder(embedder)
        given |= {"embedder": embedder.name, "dimension": embedder.dimension}
    after = replace(before, **given)
    new_vectors = (before.embedder, before.dimension) != (after.embedder, after.dimension)
    with unit.writing():
        if new_vectors:  # first: Citus runs an extension's commands only before the transaction's others
            unit.backend.index_vectors(unit.connection, after.embedder, after.dimension)
        for field, name in _SETTING_NAMES.items():
            unit.execute(delete_rows(tables.archive_settings).where(tables.archive_settings.c.name == name))
            value = getattr(after, field)
            if value != getattr(SearchSettings(), field):
                unit.insert(tables.archive_settings, [{"name": name, "value": str(value)}])
        unit.search_settings = after
        reindex = after.indexing != "off" and (
            rebuild
            or before.indexing == "off"
            or (before.language, before.cjk) != (after.language, after.cjk)
            or (new_vectors and after.embedder is not None)
        )
        if after.indexing == "off" or reindex or new_vectors:
            unit.execute(delete_rows(tables.embeddings))
        if after.indexing == "off" or reindex:
            unit.backend.clear_terms(unit.connection)
        if reindex:
            unit.execute(
                update_rows(tables.chats).where(tables.chats.c.message_count > 0).values(search_from=0)
            )
        if after.indexing == "sync":
            index_all_pending(unit)
    return after


# -- searching -------------------------------------------------------------------------------


def _texts_of(unit: Unit, /, rows: Sequence[Any]) -> dict[tuple[str, int], str]:
    """The text of the messages of ``rows`` (their string content, or their
    text parts), read for the hits shown alone: candidates carry no text."""
    if not rows:
        return {}
    chat_ids = sorted({row.chat_id for row in rows})
    positions = sorted({row.position for row in rows})
    wanted = {(row.chat_id, row.position) for row in rows}
    found = unit.execute(
        select(tables.messages.c.chat_id, tables.messages.c.position, tables.messages.c.text).where(
            tables.messages.c.chat_id.in_(chat_ids), tables.messages.c.position.in_(positions)
        )
    ).mappings()
    message_rows = [dict(row) for row in found if (row["chat_id"], row["position"]) in wanted]
    missing = [row for row in message_rows if row["text"] is None]
    parts = []
    if missing:
        parts = _text_parts(
            unit,
            tables.content_parts.c.message_position.in_(sorted({row["position"] for row in missing})),
            chat_ids=sorted({row["chat_id"] for row in missing}),
        )
    return {key: text for key, (text, _user) in _texts(message_rows, parts).items()}


#: Reciprocal rank fusion's constant: in hybrid search a message scores
#: ``1 / (RRF_K + rank)`` in each list that has it (rank 1 the best), summed
#: (Cormack, Clarke and Büttcher's value, which most search engines keep).
RRF_K = 60


def search(
    unit: Unit, /, query: str, filters: SearchFilters, *, limit: int, mode: SearchMode = "keyword"
) -> SearchResults:
    """The messages matching ``query`` (see ``reads.search``), best first."""
    current = settings(unit)
    if current.indexing == "off":
        raise search_index_off()
    embedder = None if mode == "keyword" else required_embedder(current)
    count, oldest = pending(unit, filters.user_id)
    parsed = parse_query(query)
    compiled = None if parsed is None else compile_query(parsed, current.tokenizer)
    candidates = max(RANKED_CANDIDATES, limit)
    by_words: list[tuple[float, Any, StoredTerms | None]] = []
    if mode != "vector" and compiled is not None:
        matches = unit.backend.match(unit.executor, compiled, filters, candidates=candidates)
        by_words = sorted(
            ((rank(compiled.groups, terms), row, terms) for row, terms in matches),
            key=lambda item: (-item[0], item[1].chat_id, item[1].position),
        )
    by_meaning: list[tuple[float, Any, StoredTerms | None]] = []
    if embedder is not None:
        vector = embedder.vectors([query])[0]
        nearest = unit.backend.nearest(
            unit.executor, embedder, vector, filters, candidates=candidates, scan=current.vector_scan
        )
        # A message of nothing in common with the query (cosine similarity 0 or less, or none) is no hit.
        by_meaning = [
            (1.0 - row.distance, row, None)
            for row in nearest
            if row.distance is not None and row.distance < 1.0
        ]
    if mode == "hybrid":
        scored = _fused(by_words, by_meaning)[:limit]
    else:
        scored = (by_words if mode == "keyword" else by_meaning)[:limit]
    texts = _texts_of(unit, [row for _, row, _ in scored])
    phrases = [] if compiled is None else [phrase for group in compiled.groups for phrase in group]
    tokenizer = current.tokenizer
    hits = []
    for score, row, terms in scored:
        text = texts.get((row.chat_id, row.position), "")
        if terms is None and phrases:  # found by meaning: its words of the query are marked all the same
            terms = StoredTerms.of(tokenizer.terms(text))
        matched = set() if terms is None else terms.matched(phrases)
        hits.append(
            SearchHit(
                chat_id=row.chat_id,
                message_uid=row.uid,
                position=row.position,
                role=row.role,
                created_at=row.created_at,
                snippet=snippet(tokenizer, text, matched, HIGHLIGHT),
                rank=score,
            )
        )
    return SearchResults(hits, pending_chats=count, pending_since=oldest)


def _fused(
    *lists: Sequence[tuple[float, Any, StoredTerms | None]],
) -> list[tuple[float, Any, StoredTerms | None]]:
    """The hits of ``lists`` (each best first) by reciprocal rank fusion,
    best first; a message's terms kept from the list that has them."""
    fused: dict[tuple[str, int], list[Any]] = {}
    for hits in lists:
        for place, (_score, row, terms) in enumerate(hits, start=1):
            entry = fused.setdefault((row.chat_id, row.position), [0.0, row, None])
            entry[0] += 1.0 / (RRF_K + place)
            entry[2] = entry[2] or terms
    ordered = sorted(fused.values(), key=lambda entry: (-entry[0], entry[1].chat_id, entry[1].position))
    return [(score, row, terms) for score, row, terms in ordered]
