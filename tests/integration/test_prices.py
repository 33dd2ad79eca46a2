"""Models' prices and what messages cost at them: the price valid when each
message was written, cached and reasoning tokens, every face, the scope of a
user, and the command line."""

from __future__ import annotations

import asyncio
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
import pytest
from sqlalchemy import make_url, select, text

from chatarchive import AsyncChatArchive, ChatArchive, InvalidArgument, ModelPrice, NotSupported, analytics
from chatarchive._schema import tables
from tests.support.commands import Run
from tests.support.databases import as_user


def moment(day: str) -> datetime:
    return datetime.fromisoformat(day).replace(tzinfo=UTC)


def answer(day: str, prompt: int, completion: int, **usage: Any) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": f"answered on {day}",
        "created_at": moment(day),
        "usage": {"prompt_tokens": prompt, "completion_tokens": completion, **usage},
    }


CHATS: list[dict[str, Any]] = [
    {
        "chat_id": "before-and-after",
        "user_id": "ann",
        "model": "gpt-4o",
        "messages": [
            {"role": "user", "content": "a question", "created_at": moment("2024-01-10")},
            answer("2024-01-10", 1000, 100),  # before any price: unpriced
            answer("2024-03-01", 1000, 100),  # the first price
            answer("2024-09-01", 1000, 100),  # the second price
        ],
    },
    {
        "chat_id": "details",
        "user_id": "bob",
        "model": "gpt-4o",
        "messages": [
            # Chat Completions' details, then the Responses API's (as the Agents SDK reports them).
            answer(
                "2024-09-02",
                1000,
                500,
                prompt_tokens_details={"cached_tokens": 400},
                completion_tokens_details={"reasoning_tokens": 200},
            ),
            answer(
                "2024-09-02",
                1000,
                500,
                input_tokens_details={"cached_tokens": 400},
                output_tokens_details={"reasoning_tokens": 200},
            ),
            # Details that are no counts of tokens count as none.
            answer(
                "2024-09-02",
                1000,
                500,
                prompt_tokens_details={"cached_tokens": "many"},
                completion_tokens_details={"reasoning_tokens": -5},
            ),
            answer("2024-09-02", 1000, 500, prompt_tokens_details={"cached_tokens": 10**30}),
        ],
    },
    {
        "chat_id": "own-model",
        "user_id": "ann",
        "model": "gpt-4o",
        "messages": [{**answer("2024-09-03", 2000, 1000), "model": "o3"}],
    },
]

PRICES: list[dict[str, Any]] = [
    {"model": "gpt-4o", "valid_from": "2024-02-01", "input_per_million": 5, "output_per_million": 15},
    {
        "model": "gpt-4o",
        "valid_from": "2024-08-06T00:00:00Z",
        "input_per_million": 2.5,
        "output_per_million": 10,
        "cached_input_per_million": 1.25,
        "provider": "openai",
    },
    {
        "model": "o3",
        "valid_from": "2024-01-01",
        "input_per_million": 2,
        "output_per_million": 8,
        "reasoning_per_million": 8,
    },
]


def per_million(*tokens_and_prices: float) -> float:
    return sum(a * b for a, b in zip(tokens_and_prices[::2], tokens_and_prices[1::2], strict=True)) / 1e6


@pytest.fixture
def priced(archive: ChatArchive) -> ChatArchive:
    archive.save_many(CHATS)
    assert archive.load_prices(PRICES) == 3
    return archive


def test_each_message_costs_the_price_valid_when_it_was_written(priced: ChatArchive) -> None:
    by_chat = {row.group: row for row in priced.cost(by="chat")}
    first = by_chat["before-and-after"]
    assert (first.messages, first.priced_messages) == (3, 2)
    assert first.cost == pytest.approx(per_million(1000, 5, 100, 15) + per_million(1000, 2.5, 100, 10))
    assert first.currency == "USD"
    # The message's own model is priced before the chat's.
    assert by_chat["own-model"].cost == pytest.approx(per_million(2000, 2, 1000, 8))


def test_cached_and_reasoning_tokens_are_priced_as_part_of_the_prompt_and_the_completion(
    priced: ChatArchive,
) -> None:
    [details] = [row for row in priced.cost(by="chat") if row.group == "details"]
    assert (details.cached_tokens, details.reasoning_tokens) == (800, 400)
    assert (details.prompt_tokens, details.completion_tokens) == (4000, 2000)
    with_details = per_million(600, 2.5, 400, 1.25, 300, 10, 200, 10)
    without = per_million(1000, 2.5, 500, 10)
    assert details.cost == pytest.approx(2 * with_details + 2 * without)


def test_cost_per_model_user_and_day(priced: ChatArchive) -> None:
    models = {row.group: (row.messages, row.priced_messages) for row in priced.cost(by="model")}
    assert models == {"gpt-4o": (7, 6), "o3": (1, 1)}
    users = {row.group: row.messages for row in priced.cost(by="user")}
    assert users == {"ann": 4, "bob": 4}
    days = [row.group for row in priced.cost(by="day")]
    assert days == ["2024-01-10", "2024-03-01", "2024-09-01", "2024-09-02", "2024-09-03"]
    unpriced = [row for row in priced.cost(by="day") if row.group == "2024-01-10"]
    assert [(row.cost, row.currency) for row in unpriced] == [(None, None)]
    # Filters as every question has them: the messages' times, the chats' user and model.
    september = priced.cost(by="model", since=moment("2024-09-01"), until=moment("2024-09-03"))
    assert {row.group: row.messages for row in september} == {"gpt-4o": 5}
    assert {row.group for row in priced.cost(by="chat", user_id="bob")} == {"details"}
    with pytest.raises(InvalidArgument, match="by must be one of user, model, day, chat"):
        priced.cost(by="tool")  # type: ignore[arg-type]


def test_a_new_price_ends_the_one_before_it_and_a_price_of_the_same_moment_replaces_it(
    priced: ChatArchive,
) -> None:
    def ends() -> list[tuple[str, datetime, datetime | None]]:
        with priced.engine.connect() as connection:
            prices = tables.model_prices
            query = select(prices.c.model, prices.c.valid_from, prices.c.valid_until).order_by(
                prices.c.model, prices.c.valid_from
            )
            return [tuple(row) for row in connection.execute(query)]

    assert ends() == [
        ("gpt-4o", moment("2024-02-01"), moment("2024-08-06")),
        ("gpt-4o", moment("2024-08-06"), None),
        ("o3", moment("2024-01-01"), None),
    ]
    priced.load_prices([{**PRICES[0], "valid_from": "2024-05-01"}, {**PRICES[0], "input_per_million": 4}])
    assert ends()[:3] == [
        ("gpt-4o", moment("2024-02-01"), moment("2024-05-01")),
        ("gpt-4o", moment("2024-05-01"), moment("2024-08-06")),
        ("gpt-4o", moment("2024-08-06"), None),
    ]
    assert [price.input_per_million for price in priced.prices("gpt-4o")] == [4, 5, 2.5]
    first = next(row for row in priced.cost(by="chat") if row.group == "before-and-after")
    assert first.cost == pytest.approx(per_million(1000, 4, 100, 15) + per_million(1000, 2.5, 100, 10))


@pytest.mark.parametrize(
    ("price", "message"),
    [
        ({"input_per_million": -1}, r"price 1 \(input_per_million\): Input should be greater than or equal"),
        ({"output_per_million": float("nan")}, r"price 1 \(output_per_million\): .*finite"),
        ({"model": ""}, r"price 1 \(model\)"),
        ({"valid_from": "soon"}, r"price 1 \(valid_from\)"),
        ({"per_token": 1}, r"price 1 \(per_token\): Extra inputs are not permitted"),
        ({"currency": "EUR"}, "one archive keeps prices in one currency, not EUR, USD"),
    ],
)
def test_a_price_that_is_not_one_is_refused_and_nothing_is_loaded(
    archive: ChatArchive, price: dict[str, Any], message: str
) -> None:
    with pytest.raises(InvalidArgument, match=message):
        archive.load_prices([PRICES[1], {**PRICES[0], **price}])
    assert archive.prices() == []


def test_prices_are_the_archive_s_and_a_user_sees_only_the_cost_of_their_chats(priced: ChatArchive) -> None:
    ann = priced.for_user("ann")
    assert {row.group for row in ann.cost(by="chat")} == {"before-and-after", "own-model"}
    assert ann.cost(by="chat", user_id="bob") == []
    assert len(ann.prices()) == 3
    with pytest.raises(NotSupported, match="prices are the whole archive's"):
        ann.load_prices(PRICES)
    assert [row.group for row in analytics.cost(priced, "user")] == ["bob", "ann"]


def test_cost_and_prices_through_asyncio(priced: ChatArchive) -> None:
    async def main() -> tuple[list[Any], list[ModelPrice]]:
        async with AsyncChatArchive(priced.engine.url) as archive:
            await archive.load_prices([PRICES[2]])
            return await archive.cost(by="model"), await archive.prices("o3")

    if priced.engine.dialect.name == "sqlite" and priced.engine.url.database in (None, "", ":memory:"):
        pytest.skip("an in-memory SQLite database is not shared with another engine")
    costs, prices = asyncio.run(main())
    assert {row.group for row in costs} == {"gpt-4o", "o3"}
    assert [price.model for price in prices] == ["o3"]


def test_the_view_prices_each_message_for_plain_sql(priced: ChatArchive) -> None:
    with priced.engine.connect() as connection:
        found = connection.execute(
            text(
                "SELECT chat_id, position, model, prompt_tokens, cached_tokens, cost FROM message_costs "
                "WHERE chat_id = 'own-model'"
            )
        ).all()
    assert [tuple(row[:5]) for row in found] == [("own-model", 0, "o3", 2000, 0)]
    assert float(found[0].cost) == pytest.approx(per_million(2000, 2, 1000, 8))


def test_prices_load_list_and_stats_cost_from_the_command_line(run: Run, tmp_path: Path) -> None:
    run("db", "upgrade")
    chats = tmp_path / "chats.jsonl"
    chats.write_text("\n".join(json.dumps(chat, default=str) for chat in CHATS) + "\n", encoding="utf-8")
    run("import", str(chats))
    prices_csv = tmp_path / "prices.csv"
    prices_csv.write_text(
        "model,valid_from,input_per_million,output_per_million,cached_input_per_million,provider\n"
        "gpt-4o,2024-08-06,2.5,10,1.25,openai\n"
        "o3,2024-01-01,2,8,,openai\n",
        encoding="utf-8",
    )
    assert "loaded 2 prices" in run("prices", "load", str(prices_csv)).stderr
    listed = json.loads(run("prices", "list", "--format", "json").stdout)
    assert [(price["model"], price["cached_input_per_million"]) for price in listed] == [
        ("gpt-4o", 1.25),
        ("o3", None),
    ]
    prices_json = tmp_path / "prices.json"
    prices_json.write_text(json.dumps(listed), encoding="utf-8")  # what list writes, load reads
    assert "loaded 2 prices" in run("prices", "load", str(prices_json)).stderr
    costs = json.loads(run("stats", "--cost", "--by", "model", "--format", "json").stdout)
    assert [row["group"] for row in costs] == ["gpt-4o", "o3"]
    table = run("stats", "--cost", "--by", "chat").stdout
    assert "own-model" in table
    assert f"{per_million(2000, 2, 1000, 8):.6f}" in table
    assert "needs --cost" in run("stats", "--by", "chat", expect=1).stderr
    assert (
        "--cost groups by user, model, day, chat, not tool"
        in run("stats", "--cost", "--by", "tool", expect=1).stderr
    )
    bad = tmp_path / "bad.json"
    bad.write_text('[{"model": "x", "valid_from": "2024-01-01", "input_per_million": -1}]', encoding="utf-8")
    failed = run("prices", "load", str(bad), expect=1)
    assert "price 0 (input_per_million)" in failed.stderr
    assert "Traceback" not in failed.stderr
    empty = tmp_path / "empty.json"
    empty.write_text("[]", encoding="utf-8")
    assert "holds no prices" in run("prices", "load", str(empty), expect=1).stderr


def test_under_row_level_security_an_ordinary_role_reads_prices_and_settings_and_changes_neither(
    server_archive: tuple[ChatArchive, str], app_role: str
) -> None:
    """With row-level security on, a table without a policy shows an ordinary
    role no row: prices, like the archive's settings, are read by every role
    and changed by no user's transaction."""
    archive, url = server_archive
    archive.save_many(CHATS)
    archive.load_prices(PRICES)
    archive.set_row_level_security(True)
    as_app = make_url(url).set(username=app_role).render_as_string(hide_password=False)
    with ChatArchive(as_app) as app:
        ann = app.for_user("ann")
        assert len(ann.prices()) == 3
        costs = ann.cost(by="chat")
        assert costs
        assert all(row.cost is not None for row in costs)
    raw_url = (
        make_url(url).set(drivername="postgresql", username=app_role).render_as_string(hide_password=False)
    )
    with psycopg.connect(raw_url) as raw:
        as_user(raw, "ann")
        assert raw.execute("SELECT count(*) FROM model_prices").fetchone() == (3,)
        assert raw.execute("DELETE FROM model_prices WHERE model = 'o3'").rowcount == 0
        assert raw.execute("DELETE FROM archive_settings").rowcount == 0  # the archive's, as prices are
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            raw.execute(
                "INSERT INTO model_prices (model, valid_from, currency, input_per_million, output_per_million) "
                "VALUES ('x', now(), 'USD', 1, 1)"
            )
