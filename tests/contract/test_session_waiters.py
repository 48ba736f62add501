"""Waiters first: a completion's handoff never starves a teammate that waits (issue #15).

Eight teammates share two chains of tasks, so two tasks are ready at a time
and six teammates are always waiting. A completion makes the next task of its
chain ready; the job that completed it claims that task for the teammate that
has waited longest, and the completing teammate waits in its turn. So:
- every teammate completes about the same number of tasks (max/min <= 2);
- no teammate's idle budget runs out while tasks remain (waiting for a
  dependency is not idle), although the budget is two 50 ms polls.

Run with Session teammates only, and with half of them on Idle + unary
CompleteTask (whose handoff goes out on their Idle stream).
"""

from __future__ import annotations

import collections
import random
import threading
import time

import grpc
import pytest
from google.rpc import code_pb2

from corral.v1 import corral_pb2 as pb

from .wire import Client, Daemon, spec

TEAM = 8
CHAINS = 2
CHAIN_LENGTH = 24
WORK_MS = (5, 20)
POLL_S = 0.05
IDLE_POLLS = 2

pytestmark = pytest.mark.timeout(90)


class Worker(threading.Thread):
    """One teammate: works each claim for a few ms, completes it, and stops at its idle timeout."""

    def __init__(self, client: Client, transport: str, seed: int) -> None:
        super().__init__(name=f"worker {client.name}", daemon=True)
        self.client = client
        self.transport = transport
        self.rng = random.Random(seed)
        self.completed: list[str] = []
        self.timed_out_at: float | None = None
        self.end: tuple | None = None
        self.error: BaseException | None = None
        if transport == "session":
            self.stream = client.session(max_idle_polls=IDLE_POLLS, poll_interval=POLL_S, timeout=60)
        else:
            self.stream = client.idle(max_idle_polls=IDLE_POLLS, poll_interval=POLL_S, timeout=60)

    def run(self) -> None:
        try:
            self._work()
        except BaseException as error:  # noqa: BLE001 (reported by the test)
            self.error = error

    def _work(self) -> None:
        claim = None
        while True:
            if claim is None:
                response = self.stream.next(30)
                which = response.WhichOneof("event")
                if which == "idle_timeout":
                    self.timed_out_at = time.monotonic()
                    self.end = self.stream.wait_end(10)
                    return
                assert which == "claim", f"{self.client.name}: unexpected {response}"
                claim = response.claim
            threading.Event().wait(self.rng.uniform(*WORK_MS) / 1000)  # the work itself
            claim = self._complete(claim)

    def _complete(self, claim: pb.Claim) -> pb.Claim | None:
        """Completes `claim`; returns the claim handed off with its answer, if any."""
        if self.transport == "session":
            response = self.stream.complete(claim)
            assert response.op_result.status.code == code_pb2.OK, response
            self.completed.append(claim.task.id)
            return response.claim if response.WhichOneof("event") == "claim" else None
        self.client.complete(claim)
        self.completed.append(claim.task.id)
        return None  # an Idle teammate's next claim comes on its stream


def _chains() -> list[pb.TaskSpec]:
    specs = []
    for chain in range(CHAINS):
        for link in range(CHAIN_LENGTH):
            deps = [f"c{chain}-{link - 1}"] if link else []
            specs.append(spec(f"c{chain}-{link}", *deps, lease=30))
    return specs


@pytest.mark.parametrize("mix", ["session", "session+idle"])
def test_waiters_are_served_first_and_never_time_out_while_work_remains(daemon: Daemon, mix: str):
    daemon.create_tasks(*_chains())
    seed = random.randrange(1 << 30)
    workers = []
    for i in range(TEAM):
        transport = "idle" if mix == "session+idle" and i % 2 else "session"
        workers.append(Worker(daemon.add_teammate(f"w{i}-{transport}"), transport, seed + i))
    started = time.monotonic()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join(60)
    took = time.monotonic() - started
    errors = [w.error for w in workers if w.error is not None]
    if errors:
        raise errors[0]
    assert not [w.name for w in workers if w.is_alive()], "workers still running"

    tasks = daemon.all_tasks()
    assert {t.state for t in tasks} == {pb.TASK_STATE_COMPLETED}
    last_done = max(t.finish_time.seconds + t.finish_time.nanos / 1e9 for t in tasks)
    counts = collections.Counter({w.client.name: len(w.completed) for w in workers})
    print(f"\n[figures] {mix}: completions per teammate {sorted(counts.values())}, {took:.2f}s, seed {seed}")
    assert sum(counts.values()) == CHAINS * CHAIN_LENGTH
    assert min(counts.values()) >= 1 and max(counts.values()) <= 2 * min(counts.values()), counts
    for worker in workers:
        assert worker.end is not None and worker.end[0] == grpc.StatusCode.OK, worker.end
        # Its idle budget ran out only once no task remained: after the last completion
        # (on the daemon's wall clock, which the tasks' finish times use).
        assert worker.timed_out_at is not None
        timed_out_wall = time.time() - (time.monotonic() - worker.timed_out_at)
        assert timed_out_wall >= last_done - 0.005, (
            f"{worker.client.name} timed out {last_done - timed_out_wall:.3f}s before the last task was done"
        )
