"""Two daemons, one PostgreSQL board: a DAG worked by teammates on both, every task done
exactly once and none before its dependencies, by the reliability suite's history checker."""

from __future__ import annotations

import random
import threading
import time

import pytest

from corral.v1 import corral_pb2 as pb
from tests.contract.wire import spec
from tests.reliability.rel_history import Recorder, check
from tests.support import wait_until

from .team import Worker

TASKS = 2_000
TEAMMATES_PER_DAEMON = 25
RUN_S = 120.0


def _dag(count: int, seed: int) -> list[pb.TaskSpec]:
    """Tasks in batches of 500; each depends on up to three earlier ones."""
    rng = random.Random(seed)
    specs = []
    for i in range(count):
        deps = sorted({f"t{rng.randrange(i)}" for _ in range(rng.randint(0, 3))}) if i else []
        specs.append(spec(f"t{i}", *deps, lease=30))
    return specs


def _counts(daemon) -> dict[int, int]:
    stats = daemon.stats()
    return {pb.TaskState.Value(name): count for name, count in stats.tasks_by_state.items()}


# Kept beside the board-level run (tests/conformance/test_board_concurrency.py): this one is through two daemons.
@pytest.mark.timeout(RUN_S + 60)
def test_a_dag_worked_through_two_daemons_is_done_exactly_once_in_dependency_order(shared_board):
    first, second = shared_board.daemon("a"), shared_board.daemon("b")
    lead = first  # the Lead's calls go through the first daemon, on a connection of their own
    recorder = Recorder()
    stop = threading.Event()
    deadline = time.monotonic() + RUN_S
    workers = []
    for index in range(2 * TEAMMATES_PER_DAEMON):
        mate = lead.add_teammate(f"m{index}")
        home = [first, second] if index % 2 == 0 else [second, first]
        workers.append(Worker(mate.name, mate.token, home, recorder, stop, deadline))
    for worker in workers:
        worker.start()
    specs = _dag(TASKS, seed=19)
    for start in range(0, TASKS, 500):
        lead.create_tasks(*specs[start : start + 500])
    try:
        wait_until(
            lambda: _counts(second).get(pb.TASK_STATE_COMPLETED, 0) == TASKS, RUN_S, f"all {TASKS} tasks completed"
        )
    finally:
        stop.set()
        for worker in workers:
            worker.join(15)
    assert not [w.name for w in workers if w.is_alive()], "a worker did not stop"
    assert [error for worker in workers for error in worker.errors] == []
    # Both daemons served: each completed a good share of the work.
    done_by = {0: 0, 1: 0}
    for index, worker in enumerate(workers):
        done_by[index % 2] += worker.completed
    assert sum(done_by.values()) == TASKS and min(done_by.values()) > TASKS // 10, done_by
    with shared_board.connection() as conn:
        figures, violations = check(recorder.events, conn)
        tokens = conn.execute("SELECT count(*), count(DISTINCT token) FROM claims").fetchone()
    assert violations == [], violations[:10]
    assert tokens[0] == tokens[1] >= TASKS, f"claims {tokens[0]}, distinct tokens {tokens[1]}"
    assert figures, "the checker saw no history"
