"""model_prices and message_costs: what each message cost, at the price of its day.

``model_prices`` holds models' prices per million tokens (input, output, and
optionally cached input and reasoning), each valid from a moment until the
model's next price; ``chatarchive prices load`` fills it, and the archive
keeps ``valid_until``. It belongs to no user: a copy on every node of a
distributed archive (a reference table), without row-level security.

The view ``message_costs`` has a row per message with token counts (its
``prompt_tokens`` or ``completion_tokens`` given), priced by the price of
its model (the message's own, else the chat's) valid when it was created.
Cached prompt tokens and reasoning tokens are read from the usage details
that OpenAI's APIs report (``prompt_tokens_details.cached_tokens`` or
``input_tokens_details.cached_tokens``, ``completion_tokens_details.
reasoning_tokens`` or ``output_tokens_details.reasoning_tokens``), which the
archive keeps in ``messages.extra``; they are part of the prompt and
completion tokens, as those APIs count them.

The downgrade drops the view and the table (and the prices in it).

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-07
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa

from alembic import op
from chatarchive._revision_sql import distribute_new_table

revision: str = "0016"
down_revision: str | Sequence[str] | None = "0015"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

TEXT = sa.Text()
MOMENT = sa.DateTime(timezone=True)
PRICE = sa.Double()
COMMENT = (
    "Models' prices per million tokens, each valid from a moment until the model's next price "
    "(chatarchive prices load); the view message_costs prices each message by them."
)
COLUMN_COMMENTS = {
    "model": "The model's name, as messages.model (or chats.model) has it.",
    "valid_from": "From when the price applies (to messages created then or later).",
    "valid_until": "Until when it applies (exclusive): the model's next valid_from; null: still.",
    "provider": "Who sells the model (for people; the model's name picks the price).",
    "currency": "The prices' currency (one for the whole archive).",
    "input_per_million": "Price of a million prompt (input) tokens.",
    "output_per_million": "Price of a million completion (output) tokens.",
    "cached_input_per_million": "Price of a million cached prompt tokens (null: as input).",
    "reasoning_per_million": "Price of a million reasoning tokens (null: as output).",
}
VIEW_COMMENTS = {
    "chat_id": "The chat.",
    "position": "The message's position.",
    "user_id": "The chat's user.",
    "model": "The model priced: the message's, else the chat's chosen model.",
    "created_at": "When the message was created (which price applies).",
    "prompt_tokens": "Prompt tokens (0 when not given).",
    "cached_tokens": "Of the prompt tokens, those read from the provider's cache (0 when not given).",
    "completion_tokens": "Completion tokens (0 when not given).",
    "reasoning_tokens": "Of the completion tokens, those spent reasoning (0 when not given).",
    "currency": "The price's currency (null: no price of the model for that moment).",
    "cost": "What the message cost (null: no price of the model for that moment).",
}
#: Usage details (paths in messages.extra) of the cached prompt tokens and the reasoning tokens.
CACHED = (
    ("usage", "prompt_tokens_details", "cached_tokens"),
    ("usage", "input_tokens_details", "cached_tokens"),
)
REASONING = (
    ("usage", "completion_tokens_details", "reasoning_tokens"),
    ("usage", "output_tokens_details", "reasoning_tokens"),
)
#: A count above this (or below 0) in the usage details is not one: it counts as 0.
MOST_TOKENS = 10**15


def _count(dialect: str, paths: Sequence[Sequence[str]]) -> str:
    """The first of the JSON numbers at ``paths`` of ``m.extra`` that is a
    count of tokens, as an integer; 0 if none is."""
    found = []
    for path in paths:
        if dialect == "postgresql":
            kind = f"jsonb_typeof(m.extra #> '{{{','.join(path)}}}')"
            number = f"(m.extra #>> '{{{','.join(path)}}}')::numeric"
            found.append(
                f"CASE WHEN {kind} = 'number' AND {number} BETWEEN 0 AND {MOST_TOKENS} "
                f"THEN round({number})::bigint END"
            )
        else:
            where = "'$." + ".".join(path) + "'"
            number = f"json_extract(m.extra, {where})"
            found.append(
                f"CASE WHEN json_type(m.extra, {where}) IN ('integer', 'real') "
                f"AND {number} BETWEEN 0 AND {MOST_TOKENS} THEN CAST(round({number}) AS INTEGER) END"
            )
    return f"COALESCE({', '.join(found)}, 0)"


def _view(dialect: str) -> str:
    cached, reasoning = _count(dialect, CACHED), _count(dialect, REASONING)
    prompt, completion = "COALESCE(m.prompt_tokens, 0)", "COALESCE(m.completion_tokens, 0)"
    return f"""
SELECT m.chat_id, m.position, c.user_id, COALESCE(m.model, c.model) AS model, m.created_at,
       {prompt} AS prompt_tokens, {cached} AS cached_tokens,
       {completion} AS completion_tokens, {reasoning} AS reasoning_tokens,
       p.currency,
       (({prompt} - {cached}) * p.input_per_million
        + {cached} * COALESCE(p.cached_input_per_million, p.input_per_million)
        + ({completion} - {reasoning}) * p.output_per_million
        + {reasoning} * COALESCE(p.reasoning_per_million, p.output_per_million)) / 1000000.0 AS cost
FROM messages m
JOIN chats c ON c.chat_id = m.chat_id
LEFT JOIN model_prices p ON p.model = COALESCE(m.model, c.model)
     AND p.valid_from <= m.created_at AND (p.valid_until IS NULL OR m.created_at < p.valid_until)
WHERE m.prompt_tokens IS NOT NULL OR m.completion_tokens IS NOT NULL
"""


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def upgrade() -> None:
    dialect = op.get_bind().dialect.name
    op.create_table(
        "model_prices",
        sa.Column("model", TEXT, nullable=False, comment=COLUMN_COMMENTS["model"]),
        sa.Column("valid_from", MOMENT, nullable=False, comment=COLUMN_COMMENTS["valid_from"]),
        sa.Column("valid_until", MOMENT, nullable=True, comment=COLUMN_COMMENTS["valid_until"]),
        sa.Column("provider", TEXT, nullable=True, comment=COLUMN_COMMENTS["provider"]),
        sa.Column("currency", TEXT, nullable=False, comment=COLUMN_COMMENTS["currency"]),
        *(
            sa.Column(
                name,
                PRICE,
                nullable=name in ("cached_input_per_million", "reasoning_per_million"),
                comment=COLUMN_COMMENTS[name],
            )
            for name in (
                "input_per_million",
                "output_per_million",
                "cached_input_per_million",
                "reasoning_per_million",
            )
        ),
        sa.CheckConstraint(
            "input_per_million >= 0 AND output_per_million >= 0 "
            "AND (cached_input_per_million IS NULL OR cached_input_per_million >= 0) "
            "AND (reasoning_per_million IS NULL OR reasoning_per_million >= 0)",
            name="ck_model_prices_prices_not_negative",
        ),
        sa.CheckConstraint(
            "valid_until IS NULL OR valid_until > valid_from", name="ck_model_prices_valid_until_after_from"
        ),
        sa.PrimaryKeyConstraint("model", "valid_from", name="pk_model_prices"),
        comment=COMMENT,
    )
    if dialect == "postgresql":
        op.execute(distribute_new_table("model_prices", reference=True))
    op.execute(f"CREATE VIEW message_costs AS {_view(dialect)}")
    if dialect == "postgresql":
        op.execute(
            "DO $$ BEGIN IF current_setting('server_version_num')::int >= 150000 THEN "
            "ALTER VIEW message_costs SET (security_invoker = true); END IF; END $$"
        )
        for column, comment in VIEW_COMMENTS.items():
            op.execute(f"COMMENT ON COLUMN message_costs.{column} IS {_quote(comment)}")


def downgrade() -> None:
    op.execute("DROP VIEW message_costs")
    op.drop_table("model_prices")
