"""The store's statements, one module per driver (store/sqlite/queries.py,
store/postgres/queries.py): the same names in both, each in its own dialect, and
every statement a store function asks for defined by both drivers."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from corrald.store.postgres import queries as postgres
from corrald.store.sqlite import queries as sqlite

pytestmark = pytest.mark.timeout(30)

STORE = pathlib.Path(__file__).resolve().parents[2] / "server" / "corrald" / "store"


def _public(module) -> set[str]:
    return {name for name in vars(module) if not name.startswith("_") and name not in ("annotations", "functools")}


def test_the_drivers_name_the_same_statements():
    """PostgreSQL has a few more (the statements that do the work of several, which only
    it runs); every SQLite statement has its PostgreSQL twin."""
    assert _public(sqlite) - _public(postgres) == set()


def test_each_driver_writes_its_own_parameters():
    for name in _public(sqlite):
        value = getattr(sqlite, name)
        if isinstance(value, str):
            assert "%s" not in value, name
    for name in _public(postgres):
        value = getattr(postgres, name)
        if isinstance(value, str):
            assert "?" not in re.sub(r"'(?:[^']|'')*'", "", value), name
            assert "INDEXED BY" not in value and "json_each(" not in value and "group_concat" not in value, name


def test_every_statement_the_store_asks_for_is_there():
    asked = set()
    for path in STORE.glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == "sql"
            ):
                asked.add(node.attr)
    assert asked, "the store asks its statements of `sql(conn)`"
    assert asked - _public(postgres) == set()
    only_fused = {name for name in asked - _public(sqlite)}
    # Asked only where a statement does the work of several (`dialect.fuses_statements`).
    assert only_fused <= {
        "claim_first_ready",
        "complete_claim",
        "complete_if_live",
        "complete_many",
        "OPEN_GATES_AND_EARLIEST",
        "VIEW_WITH_CLAIMS",
        "VIEW_BESIDE_COMPLETION",
        "VIEW_BESIDE_COMPLETIONS",
    }
