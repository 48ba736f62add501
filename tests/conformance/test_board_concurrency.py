"""Fifty teammates race through a 2,000-task DAG via the writer (invariants 1, 2, 4, 9)."""

from __future__ import annotations

import collections
import json
import random
import threading

import pytest

from corrald import delivery
from corrald.model import ClaimGrant, Completion, TaskState
from corrald.store import tasks
from corrald.stream import StreamState
from tests.support.boardkit import spec

THREADS = 50
LAYERS, WIDTH = 20, 100  # 2,000 tasks
SEED = 20240607


def layered_dag(seed: int) -> list:
    """Each task depends on 0–3 tasks of earlier layers (mostly the previous one)."""
    rng = random.Random(seed)
    layers = [[f"L{layer}-{i}" for i in range(WIDTH)] for layer in range(LAYERS)]
    specs = []
    for layer, ids in enumerate(layers):
        for task_id in ids:
            deps: set[str] = set()
            if layer:
                for _ in range(rng.randint(0, 3)):
                    source = layers[layer - 1] if rng.random() < 0.7 else layers[rng.randrange(layer)]
                    deps.add(rng.choice(source))
            specs.append(spec(task_id, *sorted(deps), priority=rng.randint(0, 3)))
    rng.shuffle(specs)  # batch order is not topological order
    return specs


class Progress:
    """Completions so far; a thread that found nothing waits for the next one."""

    def __init__(self, total: int) -> None:
        self.cond = threading.Condition()
        self.generation = 0
        self.completed = 0
        self.total = total
        self.done = threading.Event()

    def completed_one(self, newly_ready: int) -> None:
        with self.cond:
            self.generation += 1
            self.completed += 1
            if self.completed == self.total:
                self.done.set()
                self.cond.notify_all()
            elif newly_ready:
                self.cond.notify(newly_ready)

    def wait_after(self, generation: int, timeout: float) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: self.generation != generation or self.done.is_set(), timeout)


@pytest.mark.timeout(90)
def test_fifty_threads_complete_a_dag_exactly_once_in_dependency_order(board):
    specs = layered_dag(SEED)
    board.create(*specs)
    names = [f"w{n}" for n in range(THREADS)]
    for name in names:
        board.add(name)
    writer = board.board.writer
    progress = Progress(len(specs))
    grants: list[tuple[str, ClaimGrant]] = []
    completions: list[tuple[str, str]] = []
    problems: list[str] = []
    record = threading.Lock()
    start = threading.Barrier(THREADS)

    def complete_job(name: str, grant: ClaimGrant):
        def job(tx):
            tasks.complete(tx, Completion(name, grant.task.id, grant.token, f"{name}:{grant.task.id}".encode()))
            return sum(tx.wakes.ready_roles.values())  # how many tasks this made ready

        return job

    def teammate(name: str) -> None:
        cursor = StreamState(slots=1)
        start.wait(30)
        try:
            while not progress.done.is_set():
                generation = progress.generation
                found = writer.call(lambda tx: delivery.next_for_teammate(tx, name, cursor), 30)
                cursor.learned(found)
                items = found.items
                cursor.mark_sent(items)
                claims = [item for item in items if isinstance(item, ClaimGrant)]
                if not claims:
                    if not progress.wait_after(generation, 60):
                        problems.append(f"{name}: no progress for 60 s")
                        return
                    continue
                for grant in claims:
                    with record:
                        grants.append((name, grant))
                    newly_ready = writer.call(complete_job(name, grant), 30)
                    with record:
                        completions.append((name, grant.task.id))
                    progress.completed_one(newly_ready)
        except Exception as error:  # noqa: BLE001 (reported below)
            problems.append(f"{name}: {error!r}")
            with progress.cond:
                progress.done.set()
                progress.cond.notify_all()

    threads = [threading.Thread(target=teammate, args=(name,), name=name) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(80)
    assert not [t.name for t in threads if t.is_alive()]
    assert problems == []

    ids = {s.id for s in specs}
    # Every task completed exactly once, by exactly one claim.
    assert board.rows("SELECT state, count(*) FROM tasks GROUP BY state") == [(TaskState.COMPLETED, len(ids))]
    completed_ids = collections.Counter(task_id for _, task_id in completions)
    assert set(completed_ids) == ids and max(completed_ids.values()) == 1
    assert board.rows("SELECT outcome, count(*) FROM claims GROUP BY outcome") == [("completed", len(ids))]
    assert board.scalar("SELECT max(n) FROM (SELECT count(*) AS n FROM claims GROUP BY task_seq) AS per_task") == 1
    # Each result was written by the teammate that held the claim.
    owners = {task_id: name for name, task_id in completions}
    results = dict(board.rows("SELECT id, result FROM tasks"))
    assert all(results[t] == f"{owners[t]}:{t}".encode() for t in ids)
    # No token issued twice: in the history table and as seen by the threads.
    tokens = [grant.token for _, grant in grants]
    assert len(tokens) == len(set(tokens)) == len(ids)
    assert board.scalar("SELECT count(DISTINCT token) FROM claims") == len(ids)
    assert set(tokens) == {t for (t,) in board.rows("SELECT token FROM claims")}
    fences = sorted(grant.fence for _, grant in grants)
    assert len(set(fences)) == len(fences)
    # Never claimed before every dependency completed: order in the event log.
    claimed_at, completed_at = {}, {}
    for seq, _, data in board.events("task_changed"):
        change = json.loads(data)
        if change["state"] == TaskState.IN_PROGRESS:
            assert change["id"] not in claimed_at
            claimed_at[change["id"]] = seq
        elif change["state"] == TaskState.COMPLETED:
            completed_at[change["id"]] = seq
    early = [(s.id, dep) for s in specs for dep in s.depends_on if not completed_at[dep] < claimed_at[s.id]]
    assert early == []
    # The writer batched under this load.
    stats = board.board.writer.stats()
    assert stats.failed_commits == 0 and stats.mean_batch_size > 1.0
