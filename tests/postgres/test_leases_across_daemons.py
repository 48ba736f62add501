"""Two daemons, one PostgreSQL board: path leases hold across daemons. Teammates on both
claim and complete tasks whose resources overlap; the event log (in commit order, the
board's write lock orders every daemon's transactions) never shows two tasks with
overlapping resources, one of them exclusive, IN_PROGRESS at once, and each completes once."""

from __future__ import annotations

import json
import random
import threading
import time

import pytest

from corral.v1 import corral_pb2 as pb
from tests.contract.wire import spec
from tests.reliability.rel_history import Recorder
from tests.support import wait_until

from .team import Worker

TASKS = 300
TEAMMATES_PER_DAEMON = 10
RUN_S = 90.0
TREE = (
    ["repo:web"]
    + [f"repo:web/{a}" for a in "abc"]
    + [f"repo:web/{a}/{b}" for a in "abc" for b in "xyz"]
    + [f"repo:web/{a}/{b}/f{n}" for a in "abc" for b in "xyz" for n in range(3)]
)


def _leased(count: int, seed: int) -> list[pb.TaskSpec]:
    rng = random.Random(seed)
    specs = []
    for i in range(count):
        path = rng.choice(TREE)
        kind = "resources" if rng.random() < 0.4 else "shared_resources"
        specs.append(spec(f"t{i}", lease=30, **{kind: [path]}))
    return specs


def _conflict(a: tuple[str, bool], b: tuple[str, bool]) -> bool:
    (pa, xa), (pb_, xb) = a, b
    return (pa == pb_ or pa.startswith(pb_ + "/") or pb_.startswith(pa + "/")) and (xa or xb)


@pytest.mark.timeout(RUN_S + 60)
def test_overlapping_tasks_never_run_at_once_across_two_daemons(shared_board):
    first, second = shared_board.daemon("a"), shared_board.daemon("b")
    recorder = Recorder()
    stop = threading.Event()
    deadline = time.monotonic() + RUN_S
    workers = []
    for index in range(2 * TEAMMATES_PER_DAEMON):
        mate = first.add_teammate(f"m{index}")
        home = [first, second] if index % 2 == 0 else [second, first]
        workers.append(Worker(mate.name, mate.token, home, recorder, stop, deadline))
    for worker in workers:
        worker.start()
    specs = _leased(TASKS, seed=36)
    first.create_tasks(*specs)
    try:
        wait_until(
            lambda: dict(second.stats().tasks_by_state).get("TASK_STATE_COMPLETED", 0) == TASKS,
            RUN_S,
            f"all {TASKS} tasks completed",
        )
    finally:
        stop.set()
        for worker in workers:
            worker.join(15)
    assert not [w.name for w in workers if w.is_alive()], "a worker did not stop"
    assert [error for worker in workers for error in worker.errors] == []
    leases = {s.id: [(p, True) for p in s.resources] + [(p, False) for p in s.shared_resources] for s in specs}
    with shared_board.connection() as conn:
        rows = conn.execute("SELECT data FROM events WHERE kind = 'task_changed' ORDER BY seq").fetchall()
        held = conn.execute("SELECT count(*) FROM held_resources").fetchone()
        completed = conn.execute(
            "SELECT count(*), count(DISTINCT task_seq) FROM claims WHERE outcome = 'completed'"
        ).fetchone()
    running: dict[str, list] = {}
    overlapping_starts = 0
    for (data,) in rows:
        event = json.loads(data) if isinstance(data, str) else data
        task_id, state = event["id"], event["state"]
        if state == pb.TASK_STATE_IN_PROGRESS:
            for other, other_leases in running.items():
                for lease in leases[task_id]:
                    for other_lease in other_leases:
                        assert not _conflict(lease, other_lease), f"{task_id} {lease} ran beside {other} {other_lease}"
            overlapping_starts += bool(running)
            running[task_id] = leases[task_id]
        else:
            running.pop(task_id, None)
    assert tuple(completed) == (TASKS, TASKS)
    assert tuple(held) == (0,)
    assert overlapping_starts > 0, "tasks ran side by side (shared, or apart in the tree): the check saw concurrency"
