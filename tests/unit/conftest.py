"""The unit tier needs no database: a test here that opens one fails."""

from __future__ import annotations

from typing import Any

import pytest
import sqlalchemy
import sqlalchemy.ext.asyncio


@pytest.fixture(autouse=True)
def no_database(monkeypatch: pytest.MonkeyPatch) -> None:
    def refused(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError("a unit test opened a database: it belongs in tests/integration")

    monkeypatch.setattr(sqlalchemy, "create_engine", refused)
    monkeypatch.setattr(sqlalchemy.ext.asyncio, "create_async_engine", refused)
