"""Section: one big CreateTasks beside a teammate that renews its lease.

The largest batch the limits admit (10,000 tasks, 50,000 dependencies,
120-character ids) is sent while one teammate renews a 2 s lease every
100 ms. Measured per run, from the daemon's GetStats and the renewer:
the longest writer job and the job time p99, the event loop's lag (how late
a 10 ms timer fired) p99 and max, and the longest renewal. The baseline is
the same daemon setup in the same run with the renewer alone, no batch.
A batch past the limits (as many tasks, each but 200 roots with 200
dependencies) is sent too, to time its refusal.
"""

from __future__ import annotations

import threading
import time

import grpc

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from .daemon import CHANNEL_OPTIONS, Daemon, bearer, duration
from .stats import ms, summarize

RENEW_EVERY_S = 0.1
LEASE_S = 2.0
BASELINE_S = 3.0


def _chain(count: int, deps_each: int) -> list[pb.TaskSpec]:
    ids = [f"t{i}".ljust(120, "x") for i in range(count)]
    return [
        pb.TaskSpec(id=task_id, title="t", depends_on=ids[max(0, i - deps_each) : i]) for i, task_id in enumerate(ids)
    ]


class _Renewer(threading.Thread):
    def __init__(self, stub, claim: pb.Claim, metadata) -> None:
        super().__init__(name="bench-renewer", daemon=True)
        self._stub, self._claim, self._metadata = stub, claim, metadata
        self.stop = threading.Event()
        self.waits: list[float] = []
        self.failures = 0

    def run(self) -> None:
        deadline = time.monotonic() + 120
        while not self.stop.is_set() and time.monotonic() < deadline:
            sent = time.monotonic()
            try:
                self._stub.RenewLease(
                    pb.RenewLeaseRequest(task_id=self._claim.task.id, claim_token=self._claim.claim_token),
                    metadata=self._metadata,
                    timeout=30,
                )
            except grpc.RpcError:
                self.failures += 1
            self.waits.append(time.monotonic() - sent)
            self.stop.wait(RENEW_EVERY_S)


def _one_run(sizes, with_batch: bool) -> dict:
    with Daemon() as daemon:
        channel = grpc.insecure_channel(daemon.address, options=CHANNEL_OPTIONS)
        lead_md = bearer(daemon.token)
        lead, board = pb_grpc.LeadServiceStub(channel), pb_grpc.BoardServiceStub(channel)
        mate = lead.AddTeammate(pb.AddTeammateRequest(name="holder"), metadata=lead_md)
        lead.CreateTasks(
            pb.CreateTasksRequest(tasks=[pb.TaskSpec(id="held", title="held", lease_duration=duration(LEASE_S))]),
            metadata=lead_md,
        )
        mate_md = bearer(mate.token)
        teammate = pb_grpc.TeammateServiceStub(channel)
        idle = teammate.Idle(pb.IdleRequest(), metadata=mate_md)
        claim = next(item.claim for item in idle if item.WhichOneof("event") == "claim")
        renewer = _Renewer(teammate, claim, mate_md)
        renewer.start()
        result: dict = {}
        try:
            if with_batch:
                batch = _chain(sizes.big_batch_tasks, sizes.big_batch_deps_each)
                started = time.monotonic()
                lead.CreateTasks(pb.CreateTasksRequest(tasks=batch), metadata=lead_md, timeout=120)
                result["create_s"] = time.monotonic() - started
                roots = [pb.TaskSpec(id=f"r{i}", title="r") for i in range(200)]
                refused = roots + [
                    pb.TaskSpec(id=f"x{i}", title="x", depends_on=[r.id for r in roots])
                    for i in range(sizes.big_batch_tasks - 200)
                ]
                started = time.monotonic()
                try:
                    lead.CreateTasks(pb.CreateTasksRequest(tasks=refused), metadata=lead_md, timeout=120)
                except grpc.RpcError as error:
                    result["refused_with"] = error.code().name
                result["refuse_s"] = time.monotonic() - started
            else:
                renewer.stop.wait(BASELINE_S)
        finally:
            renewer.stop.set()
            renewer.join(30)
        stats = board.GetStats(pb.GetStatsRequest(), metadata=lead_md)
        idle.cancel()
        channel.close()
    return {
        **result,
        "job_time_p99_ms": stats.writer.job_time_p99_ms,
        "job_time_max_ms": stats.writer.job_time_max_ms,
        "loop_lag_p99_ms": stats.loop_lag_p99_ms,
        "loop_lag_max_ms": stats.loop_lag_max_ms,
        "renew_max_ms": ms(max(renewer.waits, default=0.0)),
        "renewals": len(renewer.waits),
        "renew_failures": renewer.failures,
    }


FIELDS = {
    "job_time_p99_ms": "ms",
    "job_time_max_ms": "ms",
    "loop_lag_p99_ms": "ms",
    "loop_lag_max_ms": "ms",
    "renew_max_ms": "ms",
    "renew_failures": "calls",
}


def run(sizes, runs: int, log) -> dict:
    baseline, loaded = [], []
    for index in range(runs):
        baseline.append(_one_run(sizes, with_batch=False))
        loaded.append(_one_run(sizes, with_batch=True))
        log(
            f"  big batch run {index + 1}: job max {loaded[-1]['job_time_max_ms']:.0f} ms,"
            f" loop lag p99 {loaded[-1]['loop_lag_p99_ms']:.1f} ms (at rest {baseline[-1]['loop_lag_p99_ms']:.1f}),"
            f" longest renewal {loaded[-1]['renew_max_ms']:.0f} ms, CreateTasks {loaded[-1]['create_s']:.2f} s,"
            f" refusal {loaded[-1]['refuse_s']:.2f} s ({loaded[-1].get('refused_with', 'not refused')})"
        )
    return {
        "tasks": sizes.big_batch_tasks,
        "dependencies": sum(min(i, sizes.big_batch_deps_each) for i in range(sizes.big_batch_tasks)),
        "at_rest": summarize(baseline, FIELDS),
        "with_batch": summarize(loaded, {**FIELDS, "create_s": "s", "refuse_s": "s"}),
        "refused_with": sorted({run.get("refused_with", "not refused") for run in loaded}),
    }
