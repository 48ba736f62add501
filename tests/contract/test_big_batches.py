"""The biggest CreateTasks batches: one is one bounded writer job, refused by a named
limit past it, answered within a default client's 4 MiB, and never costs a diligent
holder its lease."""

from __future__ import annotations

import threading
import time

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from corrald.config import MESSAGE_MAX_BYTES

from .wire import assert_status, rpc_error, spec, ts_seconds

LEASE_S = 4.0
RENEW_EVERY_S = 0.1
# A renewal answered within half the lease keeps the claim of a holder that renews twice a
# lease or more; a batch made one job of several seconds would fail this, a slow machine not.
RENEWAL_BOUND_S = LEASE_S / 2


class Renewer:
    """Renews one claim every RENEW_EVERY_S on its own thread, recording every answer."""

    def __init__(self, mate, claim: pb.Claim) -> None:
        self._mate, self._claim = mate, claim
        self._stop = threading.Event()
        self.waits: list[float] = []  # seconds each renewal took
        self.ends_ahead: list[float] = []  # new lease end minus the time the answer came
        self.errors: list[grpc.RpcError] = []
        self._thread = threading.Thread(target=self._run, name="renewer", daemon=True)

    def __enter__(self) -> Renewer:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(10)

    def _run(self) -> None:
        deadline = time.monotonic() + 60  # bounded, whatever the batch does
        while not self._stop.is_set() and time.monotonic() < deadline and len(self.waits) < 2_000:
            sent = time.monotonic()
            try:
                response = self._mate.renew(self._claim)
            except grpc.RpcError as error:
                self.errors.append(error)
                return
            answered = time.time()
            self.waits.append(time.monotonic() - sent)
            self.ends_ahead.append(ts_seconds(response.lease_expire_time) - answered)
            self._stop.wait(RENEW_EVERY_S)

    def check(self, min_renewals: int = 3, seen: str = "") -> None:
        assert not self.errors, f"a diligent holder's renewal failed: {self.errors[0].code().name}"
        assert len(self.waits) >= min_renewals, "the renewer hardly ran"
        assert min(self.ends_ahead) > 0, f"a renewal answered OK with a lease end in the past: {min(self.ends_ahead)}"
        assert max(self.waits) < RENEWAL_BOUND_S, f"a renewal waited {max(self.waits):.2f} s behind the batch ({seen})"


def _holder(daemon):
    mate = daemon.add_teammate("holder")
    daemon.create_tasks(spec("held", lease=LEASE_S))
    stream = mate.idle()
    return mate, stream, stream.next_event("claim")


def _chain(count: int, deps_each: int, id_chars: int = 0) -> list[pb.TaskSpec]:
    """`count` tasks, each depending on the `deps_each` before it; ids padded to `id_chars`."""
    ids = [f"t{i}".ljust(id_chars, "x") for i in range(count)]
    return [
        pb.TaskSpec(id=task_id, title="t", depends_on=ids[max(0, i - deps_each) : i]) for i, task_id in enumerate(ids)
    ]


@pytest.mark.timeout(90)
def test_a_batch_past_the_dependency_limit_is_refused_by_name_at_once_beside_a_renewing_holder(daemon):
    mate, stream, claim = _holder(daemon)
    # 480,000 dependencies, ten times the limit, in one message of under 6 MiB.
    roots = [pb.TaskSpec(id=f"r{i}", title="r") for i in range(200)]
    batch = roots + [pb.TaskSpec(id=f"t{i}", title="t", depends_on=[r.id for r in roots]) for i in range(2_400)]
    request = pb.CreateTasksRequest(tasks=batch)
    assert request.ByteSize() < MESSAGE_MAX_BYTES
    with Renewer(mate, claim) as renewer:
        started = time.monotonic()
        error = rpc_error(daemon.lead.lead.CreateTasks, request)
        took = time.monotonic() - started
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field="tasks")
    assert "480000 dependencies" in error.details() and "50000" in error.details(), error.details()
    assert took < 5, f"refusing took {took:.1f} s"
    assert [t.id for t in daemon.all_tasks()] == ["held"], "a refused batch wrote something"
    renewer.check(min_renewals=1)
    assert daemon.get_task("held").owner == "holder"
    stream.cancel()


@pytest.mark.timeout(120)
def test_the_largest_batch_the_limits_admit_leaves_a_renewing_holder_its_lease(daemon):
    mate, stream, claim = _holder(daemon)
    # 10,000 tasks with 50,000 dependencies and 88-character ids, as much as one message
    # of 6 MiB carries: echoing the specs would make a reply of about 5.5 MB, past a
    # default client's 4 MiB.
    batch = _chain(10_000, 5, id_chars=88)
    assert sum(len(s.depends_on) for s in batch) == 50_000 - 15
    request = pb.CreateTasksRequest(tasks=batch)
    assert MESSAGE_MAX_BYTES * 0.85 < request.ByteSize() < MESSAGE_MAX_BYTES
    with Renewer(mate, claim) as renewer:
        response = daemon.lead.lead.CreateTasks(request)  # a default-settings channel
    stats = daemon.stats()
    renewer.check(
        seen=f"daemon: longest job {stats.writer.job_time_max_ms:.0f} ms, loop lag {stats.loop_lag_max_ms:.0f} ms"
    )
    assert response.ByteSize() < 3 * 1024 * 1024
    assert [t.id for t in response.tasks] == [s.id for s in batch]
    assert len({t.seq for t in response.tasks}) == len(batch)
    assert {t.state for t in response.tasks} == {pb.TASK_STATE_PENDING}
    last = daemon.get_task(batch[-1].id)
    assert list(last.depends_on) == list(batch[-1].depends_on) and last.seq == response.tasks[-1].seq
    assert daemon.get_task("held").owner == "holder"
    stream.cancel()


@pytest.mark.timeout(30)
def test_a_batch_whose_ids_would_overflow_the_reply_is_refused_by_name(daemon):
    # 10,000 ids of 128 four-byte characters: 5 MiB of ids.
    batch = [pb.TaskSpec(id=f"{i:05d}".ljust(128, "\U0001f600"), title="t") for i in range(10_000)]
    error = rpc_error(daemon.lead.lead.CreateTasks, pb.CreateTasksRequest(tasks=batch))
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field="tasks")
    assert "2097152" in error.details(), error.details()
    assert daemon.all_tasks() == []


@pytest.mark.timeout(30)
def test_dependencies_across_batches_are_how_a_bigger_dag_is_sent(daemon):
    first = _chain(300, 5)
    daemon.create_tasks(*first)
    second = [pb.TaskSpec(id=f"u{i}", title="u", depends_on=[s.id for s in first[-5:]]) for i in range(10)]
    created = daemon.create_tasks(*second)
    assert [t.state for t in created] == [pb.TASK_STATE_PENDING] * 10
    assert list(daemon.get_task("u9").depends_on) == [s.id for s in first[-5:]]
