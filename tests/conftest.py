"""Options for the whole suite: `--store` runs the board's tests on SQLite (the
default) or on PostgreSQL (tests/support/postgres.py says which server)."""

from __future__ import annotations

import os

import pytest

STORES = ("sqlite", "postgres")

# The files that take longest, about longest first. With --no-loadscope-reorder (pytest-xdist
# then hands out the files in the order collected, as `make test` runs it) they are collected
# first, so that no long file of one or two tests starts near the end of a run and holds it
# while the other workers have nothing left to do.
LONG_FILES = (
    "tests/bench/test_bench_smoke.py",
    "tests/contract/test_session_races.py",
    "tests/postgres/test_races_across_daemons.py",
    "tests/contract/test_session_hypothesis.py",
    "tests/reliability/test_rel_hostile.py",
    "tests/web/test_web_pages.py",
    "tests/reliability/test_rel_crash.py",
    "tests/contract/test_claim_ended.py",
    "tests/conformance/test_board_state_machine.py",
    "tests/contract/test_memory_artifacts.py",
    "tests/postgres/test_partial_failures.py",
    "tests/postgres/test_chaos_across_daemons.py",
    "tests/polyglot/test_node_teammates.py",
    "tests/postgres/test_across_daemons.py",
    "tests/web/test_web_proposals.py",
    "tests/conformance/test_board_concurrency.py",
    "tests/polyglot/test_node_session.py",
    "tests/contract/test_resources.py",
    "tests/contract/test_memory.py",
    "tests/web/test_web_views.py",
    "tests/web/test_web_reviews.py",
    "tests/mcp/test_mcp_teammate.py",
    "tests/web/test_web_http.py",
    "tests/postgres/test_gaps_across_daemons.py",
    "tests/e2e/test_sdk_runner.py",
    "tests/contract/test_silent_connections.py",
    "tests/contract/test_leases.py",
    "tests/web/test_web_live.py",
    "tests/reliability/test_rel_chaos.py",
    "tests/reliability/test_rel_security.py",
    "tests/postgres/test_two_daemons.py",
)


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--store",
        choices=STORES,
        default=os.environ.get("CORRAL_TEST_STORE", "sqlite"),
        help="which store the board's tests run on (default sqlite, or $CORRAL_TEST_STORE)",
    )


def pytest_configure(config: pytest.Config) -> None:
    # The daemons the tests start (tests/support/daemons.py) take the store from here.
    os.environ["CORRAL_TEST_STORE"] = config.getoption("--store")
    config.addinivalue_line("markers", "sqlite_only: tests of what only a SQLite board has (its file, WAL, pragmas)")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On PostgreSQL, the tests of SQLite's own machinery are not collected (deselected, and
    counted as such in pytest's summary): they have nothing to test there. The conformance
    suite picks its store by parametrisation instead (tests/conformance/conftest.py).
    With --no-loadscope-reorder, the LONG_FILES come first."""
    if not config.getoption("loadscopereorder", True):  # pytest-xdist's: the workers, which collect, have it
        rank = {path: place for place, path in enumerate(LONG_FILES)}
        # A stable sort: the other files stay in the order collected.
        items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))
    if config.getoption("--store") != "postgres":
        return
    kept, dropped = [], []
    for item in items:
        own_store = "store" in getattr(item, "callspec", None).params if hasattr(item, "callspec") else False
        (dropped if item.get_closest_marker("sqlite_only") and not own_store else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


@pytest.fixture(scope="session")
def store_kind(request: pytest.FixtureRequest) -> str:
    return request.config.getoption("--store")


@pytest.fixture(scope="session", autouse=True)
def _daemons_on_the_store(store_kind: str):
    """With `--store postgres`, every daemon a test launches through the SDK serves a
    PostgreSQL board of its own (tests/support/daemons.py's `launch_on_the_store`)."""
    if store_kind != "postgres":
        yield
        return
    import corral._launch
    import corral._lead
    import corral.aio._lead
    from tests.support import daemons

    with pytest.MonkeyPatch.context() as patch:
        for module in (corral._launch, corral._lead, corral.aio._lead):
            patch.setattr(module, "launch_daemon", daemons.launch_on_the_store)
        yield
