"""The store's statements and steps, one module of each per driver: the statements
(store/sqlite/queries.py, store/postgres/queries.py, and the groups kept apart from them:
`artifacts`, `graph`, `leases`, `output`, `usage`) by the same names in both, each in its own dialect, every statement a
store function asks for defined by both; and the steps (`store.driver.DriverSteps`)
taken by both drivers, the store asking for no other."""

from __future__ import annotations

import ast
import pathlib
import re

import pytest

from corrald.store.driver import DriverSteps
from corrald.store.postgres import fused
from corrald.store.postgres import queries as postgres
from corrald.store.postgres import steps as postgres_steps
from corrald.store.sqlite import queries as sqlite
from corrald.store.sqlite import steps as sqlite_steps

pytestmark = pytest.mark.timeout(30)

STORE = pathlib.Path(__file__).resolve().parents[2] / "server" / "corrald" / "store"


# The statements kept apart from queries.py, by the name queries.py gives each group.
GROUPS = ("artifacts", "graph", "leases", "output", "usage")
# Each driver's statement modules: queries.py and its groups.
PAIRS = [(sqlite, postgres), *((getattr(sqlite, group), getattr(postgres, group)) for group in GROUPS)]


def _public(module) -> set[str]:
    return {name for name in vars(module) if not name.startswith("_") and name not in ("annotations", "functools")}


def test_the_drivers_name_the_same_statements():
    """Every SQLite statement has its PostgreSQL twin (PostgreSQL has a few fragments more,
    which its fused.py composes)."""
    for lite, pg in PAIRS:
        assert _public(lite) - _public(pg) == set(), lite.__name__


def test_each_driver_writes_its_own_parameters():
    for lite, _ in PAIRS:
        for name in _public(lite):
            value = getattr(lite, name)
            if isinstance(value, str):
                assert "%s" not in value, name
    named = [(pg, name) for _, pg in PAIRS for name in _public(pg)] + [(fused, name) for name in _public(fused)]
    for module, name in named:
        value = getattr(module, name)
        if isinstance(value, str):
            assert "?" not in re.sub(r"'(?:[^']|'')*'", "", value), name
            assert "INDEXED BY" not in value and "json_each(" not in value and "group_concat" not in value, name


def _asked(of: str) -> set[str]:
    """The names the store's modules read off `of(conn)` (`sql(conn).NAME`, `steps(conn).NAME`)."""
    asked: set[str] = set()
    for path in STORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Call)
                and isinstance(node.value.func, ast.Name)
                and node.value.func.id == of
            ):
                asked.add(node.attr)
    return asked


def test_every_statement_the_store_asks_for_is_there():
    asked = _asked("sql")
    assert asked, "the store asks its statements of `sql(conn)`"
    assert asked - _public(sqlite) == set()
    assert asked - _public(postgres) == set()
    for group in GROUPS:
        wanted = _asked_of_group(group)
        assert wanted, group
        assert wanted - _public(getattr(sqlite, group)) == set(), group
        assert wanted - _public(getattr(postgres, group)) == set(), group


def _asked_of_group(group: str) -> set[str]:
    """The names the store's modules read as `sql(conn).GROUP.NAME` or `statements.GROUP.NAME`."""
    asked: set[str] = set()
    for path in STORE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute) and node.value.attr == group:
                inner = node.value.value
                by_call = isinstance(inner, ast.Call) and isinstance(inner.func, ast.Name) and inner.func.id == "sql"
                if by_call or (isinstance(inner, ast.Name) and inner.id == "statements"):
                    asked.add(node.attr)
    return asked


def _functions(module) -> set[str]:
    return {name for name, value in vars(module).items() if callable(value) and value.__module__ == module.__name__}


def test_both_drivers_take_every_step_and_the_store_asks_for_no_other():
    """A driver's steps are the protocol's, and nothing else shared (PostgreSQL's run of
    completions, with what it reads for each, is its writer's batching strategy, which its
    board offers)."""
    protocol = {name for name in vars(DriverSteps) if not name.startswith("_")}
    assert {name for name in _functions(sqlite_steps) if not name.startswith("_")} == protocol
    run_of_completions = {"complete_many", "CompletionRead"}
    assert {name for name in _functions(postgres_steps) if not name.startswith("_")} == protocol | run_of_completions
    asked = _asked("steps")
    assert asked and asked <= protocol


def test_the_statements_that_do_the_work_of_several_are_the_postgresql_drivers_alone():
    """fused.py is read by this driver's steps alone."""
    names = {"claim_first_ready", "complete_claim", "complete_if_live", "complete_many"}
    names |= {"OPEN_GATES_AND_EARLIEST", "VIEW_WITH_CLAIMS", "VIEW_BESIDE_COMPLETION", "VIEW_BESIDE_COMPLETIONS"}
    assert names <= _public(fused)
    assert names & _public(sqlite) == set()
    readers = [path.relative_to(STORE).as_posix() for path in STORE.rglob("*.py") if "fused" in _imported(path)]
    assert readers == ["postgres/steps.py"]


def _imported(path: pathlib.Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            names |= {alias.name for alias in node.names} | set((node.module or "").split("."))
        elif isinstance(node, ast.Import):
            names |= {part for alias in node.names for part in alias.name.split(".")}
    return names
