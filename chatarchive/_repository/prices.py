"""Models' prices, and what the archive's messages cost at them.

A price (``ModelPrice``) is a model's price per million tokens of input,
output, and optionally cached input and reasoning, valid from a moment until
the model's next price. ``load_prices`` adds or replaces prices (a price of
the same model and moment is replaced) and keeps each price's end
(``valid_until``, the model's next ``valid_from``); ``prices`` lists them.
chatarchive ships no prices: providers change them, and what an application
pays is its own business.

``cost`` sums the view ``message_costs`` per user, model, day or chat: each
message with token counts priced at the price of its model (its own, else the
chat's chosen model) valid when the message was created. Cached prompt
tokens and reasoning tokens come from the usage details of OpenAI's APIs and
are part of the prompt and completion tokens, as those APIs count them:

    cost = ((prompt - cached) x input + cached x cached_input
            + (completion - reasoning) x output + reasoning x reasoning) / 1,000,000

(a missing cached or reasoning price is the input or output price).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import UTC, date, datetime
from typing import Annotated, Any, Literal, Unpack

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from sqlalchemy import bindparam, case, column, delete, func, select, table, tuple_, update

from chatarchive._arguments import require_choice, require_many
from chatarchive._document import Timestamp
from chatarchive._exceptions import InvalidArgument, NotSupported
from chatarchive._schema import tables
from chatarchive._types import ArchiveText, UTCDateTime

from .analytics import Filters, _chats, _filtered, _rows, _Stats, _workflow_of_chat
from .unit import Unit

__all__ = ["COST_GROUPS", "Cost", "CostGroup", "ModelPrice", "cost", "load_prices", "prices"]

CostGroup = Literal["user", "model", "day", "chat"]
#: What ``cost`` groups by.
COST_GROUPS: tuple[CostGroup, ...] = ("user", "model", "day", "chat")

#: A price per million tokens: a finite number, not negative.
Price = Annotated[float, Field(ge=0, allow_inf_nan=False)]


class ModelPrice(BaseModel):
    """A model's prices per million tokens, from ``valid_from`` on (until the
    model's next price).

    Example:
        >>> price = ModelPrice(model="gpt-4o", valid_from="2024-08-06", input_per_million=2.5,
        ...                    output_per_million=10, cached_input_per_million=1.25)
        >>> price.valid_from
        datetime.datetime(2024, 8, 6, 0, 0, tzinfo=datetime.timezone.utc)
    """

    model_config = ConfigDict(frozen=True, extra="forbid", protected_namespaces=())

    #: The model's name, as messages (or chats) name it: it picks the price.
    model: str = Field(min_length=1, max_length=255)
    #: From when the price applies (a date or a naive time: UTC).
    valid_from: Timestamp
    #: Price of a million prompt (input) tokens.
    input_per_million: Price
    #: Price of a million completion (output) tokens.
    output_per_million: Price
    #: Price of a million cached prompt tokens (``None``: the input price).
    cached_input_per_million: Price | None = None
    #: Price of a million reasoning tokens (``None``: the output price).
    reasoning_per_million: Price | None = None
    #: Who sells the model (for people; the model's name picks the price).
    provider: str | None = None
    #: The prices' currency: one for the whole archive.
    currency: str = Field(default="USD", min_length=1, max_length=16)

    @field_validator("valid_from", mode="before")
    @classmethod
    def _day_is_its_midnight(cls, value: object) -> object:
        if isinstance(value, date) and not isinstance(value, datetime):
            return datetime(value.year, value.month, value.day, tzinfo=UTC)
        return value


class Cost(_Stats):
    """What the messages of one user, model, UTC day or chat cost."""

    #: The user id, the model, the day (``YYYY-MM-DD``) or the chat id.
    group: str | None
    #: The prices' currency (``None``: no message of the group had a price).
    currency: str | None
    #: Messages with token counts.
    messages: int
    #: Of those, the ones whose model had a price when they were created.
    priced_messages: int
    prompt_tokens: int
    cached_tokens: int
    completion_tokens: int
    reasoning_tokens: int
    #: The priced messages' cost (``None``: none was priced).
    cost: float | None


def _price_of(record: object, index: int) -> ModelPrice:
    if isinstance(record, ModelPrice):
        return record
    if not isinstance(record, Mapping):
        raise InvalidArgument(
            f"price {index} must be a ModelPrice or a mapping, not {type(record).__name__}", argument="prices"
        )
    try:
        return ModelPrice.model_validate(dict(record))
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "price"
        raise InvalidArgument(f"price {index} ({where}): {first['msg']}", argument="prices") from None


def load_prices(unit: Unit, /, prices: Iterable[ModelPrice | Mapping[str, Any]]) -> int:
    """Add the ``prices`` (``ModelPrice`` objects or mappings of their fields),
    replacing those of the same model and ``valid_from``; returns how many.

    All or nothing: a price that is not one (a negative or missing price, a
    field that no price has) raises ``InvalidArgument`` naming it, and
    nothing is loaded. One archive keeps one currency.

    Raises:
        InvalidArgument: a price is not one, or its currency is not the
            archive's.
        NotSupported: the archive is a user's (``for_user``): prices are the
            whole archive's.
    """
    require_many(prices, "prices", "prices")
    if unit.user_id is not None:
        raise NotSupported(
            "prices are the whole archive's: load them through an archive not scoped to a user"
        )
    loaded = {
        (price.model, price.valid_from): price
        for price in (_price_of(record, index) for index, record in enumerate(prices))
    }
    if not loaded:
        return 0
    priced = tables.model_prices
    with unit.writing():
        currencies = {price.currency for price in loaded.values()}
        stored = unit.execute(select(priced.c.currency).distinct()).scalars().all()
        every = currencies | set(stored)
        if len(every) > 1:
            raise InvalidArgument(
                f"one archive keeps prices in one currency, not {', '.join(sorted(every))}: "
                "convert them before loading",
                argument="prices",
            )
        keys = [(model, moment) for model, moment in loaded]
        for start in range(0, len(keys), 500):
            unit.execute(
                delete(priced).where(
                    tuple_(priced.c.model, priced.c.valid_from).in_(keys[start : start + 500])
                )
            )
        unit.insert(priced, [price.model_dump() | {"valid_until": None} for price in loaded.values()])
        _keep_ends(unit, sorted({model for model, _ in loaded}))
    return len(loaded)


def _keep_ends(unit: Unit, models: list[str]) -> None:
    """Each price of ``models`` ends where the model's next one begins."""
    priced = tables.model_prices
    rows = unit.execute(
        select(priced.c.model, priced.c.valid_from, priced.c.valid_until)
        .where(priced.c.model.in_(models))
        .order_by(priced.c.model, priced.c.valid_from)
    ).all()
    changed = []
    for row, following in zip(rows, [*rows[1:], None], strict=True):
        end = following.valid_from if following is not None and following.model == row.model else None
        if end != row.valid_until:
            changed.append({"m": row.model, "f": row.valid_from, "u": end})
    if changed:
        unit.execute(
            update(priced)
            .where(priced.c.model == bindparam("m", type_=ArchiveText()))
            .where(priced.c.valid_from == bindparam("f", type_=UTCDateTime()))
            .values(valid_until=bindparam("u", type_=UTCDateTime())),
            changed,
        )


def prices(unit: Unit, /, model: str | None = None) -> list[ModelPrice]:
    """The archive's prices (of ``model``, if given), by model and time."""
    priced = tables.model_prices
    query = select(*(priced.c[name] for name in ModelPrice.model_fields)).order_by(
        priced.c.model, priced.c.valid_from
    )
    if model is not None:
        query = query.where(priced.c.model == model)
    with unit.reading():
        rows = unit.execute(query).mappings().all()
    return [ModelPrice.model_validate(dict(row)) for row in rows]


_costs = table(
    "message_costs",
    column("chat_id", ArchiveText()),
    column("user_id", ArchiveText()),
    column("model", ArchiveText()),
    column("created_at", UTCDateTime()),
    column("prompt_tokens"),
    column("cached_tokens"),
    column("completion_tokens"),
    column("reasoning_tokens"),
    column("currency", ArchiveText()),
    column("cost"),
)


def cost(unit: Unit, /, by: CostGroup = "model", **filters: Unpack[Filters]) -> list[Cost]:
    """What messages cost, per ``by``: ``"user"``, ``"model"`` (the model
    priced), ``"day"`` (UTC, of the message) or ``"chat"``; the most costly
    first (days in order). ``since`` and ``until`` bound the messages' times;
    ``model`` is the chats' chosen model, as in the other questions."""
    require_choice(by, "by", COST_GROUPS)
    costs = _costs
    key: Any = {
        "user": costs.c.user_id,
        "model": costs.c.model,
        "day": unit.backend.utc_day(costs.c.created_at),
        "chat": costs.c.chat_id,
    }[by]
    key = key.label("group")
    total = func.sum(costs.c.cost)
    query = (
        select(
            key,
            func.max(costs.c.currency).label("currency"),
            func.count().label("messages"),
            func.count(costs.c.cost).label("priced_messages"),
            *(
                func.coalesce(func.sum(costs.c[name]), 0).label(name)
                for name in ("prompt_tokens", "cached_tokens", "completion_tokens", "reasoning_tokens")
            ),
            total.label("cost"),
        )
        .select_from(costs)
        .join(_chats, _chats.c.chat_id == costs.c.chat_id)
        .group_by(key)
    )
    if by == "day":
        query = query.order_by(key)
    else:
        query = query.order_by(case((total.is_(None), 1), else_=0), total.desc(), key)
    query = _filtered(
        query, unit, filters, chat=_chats, time=costs.c.created_at, workflow=_workflow_of_chat(unit)
    )
    return _rows(unit, query, Cost)
