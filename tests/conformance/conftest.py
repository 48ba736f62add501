"""The conformance suite: each test runs on a SQLite board and on a PostgreSQL one, by
parametrisation (`store`), whatever `--store` says; `make test` runs it once."""

from __future__ import annotations

import pytest

STORES = ("sqlite", "postgres")


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    return request.param
