"""The store's statements, one module per driver (store/sqlite/queries.py,
store/postgres/queries.py): the same names in both, each in its own dialect, and
every statement a store function asks for defined by both drivers."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from corrald.store.postgres import fused
from corrald.store.postgres import queries as postgres
from corrald.store.sqlite import queries as sqlite

pytestmark = pytest.mark.timeout(30)

STORE = pathlib.Path(__file__).resolve().parents[2] / "server" / "corrald" / "store"


def _public(module) -> set[str]:
    return {name for name in vars(module) if not name.startswith("_") and name not in ("annotations", "functools")}


def test_the_drivers_name_the_same_statements():
    """Every SQLite statement has its PostgreSQL twin (PostgreSQL has a few fragments more,
    which its fused.py composes)."""
    assert _public(sqlite) - _public(postgres) == set()


def test_each_driver_writes_its_own_parameters():
    for name in _public(sqlite):
        value = getattr(sqlite, name)
        if isinstance(value, str):
            assert "%s" not in value, name
    for name in _public(postgres) | {f"fused.{n}" for n in _public(fused)}:
        value = getattr(fused, name[6:]) if name.startswith("fused.") else getattr(postgres, name)
        if isinstance(value, str):
            assert "?" not in re.sub(r"'(?:[^']|'')*'", "", value), name
            assert "INDEXED BY" not in value and "json_each(" not in value and "group_concat" not in value, name


def test_every_statement_the_store_asks_for_is_there():
    asked: dict[str, set[str]] = {"sql": set(), "fused": set()}
    for path in STORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.args:
                continue
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id in asked
            ):
                asked[node.value.func.id].add(node.attr)
    assert asked["sql"], "the store asks its statements of `sql(conn)`"
    assert asked["sql"] - _public(sqlite) == set()
    assert asked["sql"] - _public(postgres) == set()
    assert asked["fused"] <= _public(fused)


def test_the_statements_that_do_the_work_of_several_are_the_postgresql_drivers_alone():
    """Where they are asked for, a local name holds `fused(conn)`: they are checked by name."""
    names = {"claim_first_ready", "complete_claim", "complete_if_live", "complete_many"}
    names |= {"OPEN_GATES_AND_EARLIEST", "VIEW_WITH_CLAIMS", "VIEW_BESIDE_COMPLETION", "VIEW_BESIDE_COMPLETIONS"}
    assert names <= _public(fused)
    assert names & _public(sqlite) == set()
