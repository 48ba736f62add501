"""Progress on renewals through the generated stubs: RenewLease and the Session
renew op store it on the task, GetTask, ListTasks and Watch show it, bad input
is refused with nothing written, and a restart keeps it."""

from __future__ import annotations

import math

import grpc
import pytest
from google.protobuf import timestamp_pb2
from google.rpc import code_pb2, error_details_pb2

from corral.v1 import corral_pb2 as pb

from .wire import assert_status, rpc_error, spec

pytestmark = pytest.mark.timeout(60)


def _renewal(claim: pb.Claim, progress: str = "", fraction: float | None = None) -> pb.RenewLeaseRequest:
    return pb.RenewLeaseRequest(
        task_id=claim.task.id, claim_token=claim.claim_token, progress=progress, progress_fraction=fraction
    )


def _progress(task: pb.Task) -> tuple[str, float | None]:
    return task.progress, task.progress_fraction if task.HasField("progress_fraction") else None


def _listed(daemon, task_id: str) -> pb.Task:
    (task,) = [task for task in daemon.all_tasks() if task.id == task_id]
    return task


def test_renew_lease_with_progress_shows_on_get_task_list_tasks_and_watch(daemon):
    daemon.create_tasks(spec("t1"))
    ann = daemon.add_teammate("ann")
    idle = ann.idle()
    claim = idle.next_event("claim")
    assert claim.task.progress == "" and not claim.task.HasField("progress_time")
    watch = daemon.watch(0)
    answer = ann.teammate.RenewLease(_renewal(claim, "running tests, 3/5", 0.5))
    assert answer.lease_expire_time.ToMilliseconds() > claim.lease_expire_time.ToMilliseconds() - 1
    for task in (daemon.get_task("t1"), _listed(daemon, "t1")):
        assert _progress(task) == ("running tests, 3/5", 0.5)
        assert task.HasField("progress_time") and task.progress_time.ToMilliseconds() > 0
    event = watch.next_matching(
        lambda r: r.WhichOneof("event") == "task_changed" and r.task_changed.progress != "", what="progress event"
    )
    assert _progress(event.task_changed) == ("running tests, 3/5", 0.5)
    assert event.task_changed.progress_time == daemon.get_task("t1").progress_time
    assert event.task_changed.state == pb.TASK_STATE_IN_PROGRESS and event.task_changed.owner == "ann"
    ann.teammate.RenewLease(_renewal(claim))  # a plain keepalive
    assert _progress(daemon.get_task("t1")) == ("running tests, 3/5", 0.5)
    watch.cancel()
    idle.cancel()


def test_the_session_renew_op_carries_progress(daemon):
    daemon.create_tasks(spec("t1"))
    bob = daemon.add_teammate("bob")
    session = bob.session()
    claim = session.next_event("claim")
    renewed = session.op(renew=_renewal(claim, "compiling", 0.25))
    assert renewed.op_result.status.code == code_pb2.OK
    assert renewed.op_result.HasField("lease_expire_time")
    assert _progress(daemon.get_task("t1")) == ("compiling", 0.25)
    session.op(renew=_renewal(claim, "linking"))
    assert _progress(_listed(daemon, "t1")) == ("linking", None)
    done = session.complete(claim)
    assert _progress(done.op_result.task) == ("linking", None)  # completion keeps the last note
    assert _progress(daemon.get_task("t1")) == ("linking", None)
    session.cancel()


BAD_PROGRESS = [
    ("x" * 1025, None, "progress"),
    ("ok", 1.5, "progress_fraction"),
    ("ok", -0.1, "progress_fraction"),
    ("ok", math.nan, "progress_fraction"),
]


@pytest.mark.parametrize(("text", "fraction", "field"), BAD_PROGRESS)
def test_bad_progress_on_renew_lease_is_refused_and_nothing_is_written(daemon, text, fraction, field):
    daemon.create_tasks(spec("t1"))
    ann = daemon.add_teammate("ann")
    idle = ann.idle()
    claim = idle.next_event("claim")
    ann.teammate.RenewLease(_renewal(claim, "before", 0.75))
    before = daemon.get_task("t1")
    error = rpc_error(ann.teammate.RenewLease, _renewal(claim, text, fraction))
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field=field)
    after = daemon.get_task("t1")
    assert after.lease_expire_time == before.lease_expire_time, "the lease was not extended"
    assert (_progress(after), after.progress_time) == (("before", 0.75), before.progress_time)
    idle.cancel()


@pytest.mark.parametrize(("text", "fraction", "field"), BAD_PROGRESS)
def test_bad_progress_on_the_session_renew_op_is_refused_and_nothing_is_written(daemon, text, fraction, field):
    daemon.create_tasks(spec("t1"))
    bob = daemon.add_teammate("bob")
    session = bob.session()
    claim = session.next_event("claim")
    session.op(renew=_renewal(claim, "before", 0.75))
    before = daemon.get_task("t1")
    refused = session.op(renew=_renewal(claim, text, fraction))
    status = refused.op_result.status
    assert status.code == code_pb2.INVALID_ARGUMENT
    violations = [
        violation.field
        for detail in status.details
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR)
        for violation in _bad_request(detail).field_violations
    ]
    assert violations == [field]
    after = daemon.get_task("t1")
    assert after.lease_expire_time == before.lease_expire_time, "the lease was not extended"
    assert (_progress(after), after.progress_time) == (("before", 0.75), before.progress_time)
    session.cancel()


def _bad_request(detail) -> error_details_pb2.BadRequest:
    bad = error_details_pb2.BadRequest()
    detail.Unpack(bad)
    return bad


def test_a_reclaim_after_expiry_clears_the_progress(daemon):
    daemon.create_tasks(spec("t1", lease=1))
    ann = daemon.add_teammate("ann")
    idle = ann.idle()
    first = idle.next_event("claim")
    ann.teammate.RenewLease(_renewal(first, "first attempt", 0.9))
    idle.cancel()  # ann goes quiet; the lease runs out
    bob = daemon.add_teammate("bob")
    second = bob.idle().next_event("claim", timeout=10)
    assert second.task.id == "t1" and second.attempt == 2
    assert _progress(second.task) == ("", None) and not second.task.HasField("progress_time")
    task = daemon.get_task("t1")
    assert _progress(task) == ("", None) and not task.HasField("progress_time")


def test_progress_survives_a_restart(corrald):
    first = corrald()
    first.create_tasks(spec("t1", lease=30))
    ann = first.add_teammate("ann")
    claim = ann.idle().next_event("claim")
    ann.teammate.RenewLease(_renewal(claim, "half way", 0.5))
    stored = first.get_task("t1").progress_time
    first.kill()
    second = corrald(first.state_dir)
    task = second.get_task("t1")
    assert _progress(task) == ("half way", 0.5)
    assert task.progress_time == stored and isinstance(stored, timestamp_pb2.Timestamp)
