"""One daemon per state directory; a crash loses nothing (design §2.7, §3 Durability)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import start_refused

from .wire import spec, ts_seconds

CLOCK_SLACK = 0.05
LEASE = 10.0  # long enough that a slow restart on a loaded machine still finds the leases live


@pytest.mark.timeout(60)
def test_a_second_daemon_on_the_same_state_dir_refuses_to_start(corrald):
    first = corrald()
    first.create_tasks(spec("kept"))
    code, stderr = start_refused(first.state_dir)
    assert code != 0, f"a second daemon served on a state dir in use: {stderr}"
    assert str(first.pid) in stderr, f"the refusal must name the running pid {first.pid}: {stderr!r}"
    # The first daemon is unharmed: still serving on its socket.
    assert (first.state_dir / "corral.sock").exists()
    assert first.get_task("kept").state == pb.TASK_STATE_PENDING
    assert first.stats().tasks_by_state["TASK_STATE_PENDING"] == 1


def _without_lease(task: pb.Task) -> pb.Task:
    """The task as stored, less what a restart may change: the lease end, and what
    it waits for (who is online is not stored across a crash)."""
    copy = pb.Task()
    copy.CopyFrom(task)
    copy.ClearField("lease_expire_time")
    copy.ClearField("waiting_for")
    return copy


def _events_through(daemon, last_seq: int) -> list[pb.WatchResponse]:
    watch = daemon.watch(0)
    events = []
    while not events or events[-1].seq < last_seq:
        events.append(watch.next(5))
    watch.cancel()
    return events


@pytest.mark.timeout(60)
def test_sigkill_with_claims_held_loses_nothing_and_extends_leases(corrald):
    before_crash = corrald()
    ann = before_crash.add_teammate("ann")
    bob = before_crash.add_teammate("bob", roles=["qa"])
    before_crash.create_tasks(
        spec("done", priority=20),
        spec("held-a", lease=LEASE, priority=10),
        spec("held-b", lease=LEASE, priority=9),
        spec("pending", priority=0),
        spec("needs-a", "held-a", payload=b"\x00\x01binary", description="d"),
        spec("qa-only", required_role="qa"),
    )
    stream = ann.idle(slots=2)
    first, second = stream.next_event("claim"), stream.next_event("claim")
    assert {first.task.id, second.task.id} == {"done", "held-a"}
    done_claim = first if first.task.id == "done" else second
    ann.complete(done_claim, b"finished before the crash")
    third = stream.next_event("claim")
    held = {c.task.id: c for c in (first, second, third) if c.task.id != "done"}
    assert set(held) == {"held-a", "held-b"}
    board = {t.id: t for t in before_crash.all_tasks()}
    teammates = before_crash.lead.board.ListTeammates(pb.ListTeammatesRequest()).teammates
    last_event = before_crash.watch(0)
    seen = [last_event.next(5)]
    while True:  # read the feed to its current end
        item = last_event.try_next(0.3)
        if item is None:
            break
        seen.append(item)
    last_event.cancel()
    lead_token = before_crash.lead_token

    before_crash.kill()
    code, _ = stream.wait_end(10)
    assert code == grpc.StatusCode.UNAVAILABLE

    restart_at = time.time()
    after = corrald(before_crash.state_dir)
    assert after.lead_token == lead_token, "the lead credential must survive a restart"
    for task_id, task in board.items():
        now = after.get_task(task_id)
        assert _without_lease(now) == _without_lease(task), f"task {task_id} changed across the crash"
        if task.state == pb.TASK_STATE_IN_PROGRESS:
            extended = ts_seconds(now.lease_expire_time)
            assert extended >= restart_at + LEASE - CLOCK_SLACK, (
                f"lease of {task_id} not extended by its duration at restart: ends {extended - restart_at:.3f}s "
                "after the restart began"
            )
    assert [t.id for t in after.all_tasks()] == list(board)
    assert {m.name for m in after.lead.board.ListTeammates(pb.ListTeammatesRequest()).teammates} == {
        m.name for m in teammates
    }
    replay = _events_through(after, seen[-1].seq)
    assert replay[: len(seen)] == seen, "the Watch feed changed across the crash"

    ann_again = after.client(ann.token, "ann")
    resumed = ann_again.idle(slots=2)
    resent = {c.task.id: c for c in (resumed.next_event("claim"), resumed.next_event("claim"))}
    assert set(resent) == {"held-a", "held-b"}
    for task_id, claim in resent.items():
        original = held[task_id]
        assert (claim.claim_token, claim.attempt, claim.fence) == (
            original.claim_token,
            original.attempt,
            original.fence,
        )
        assert ts_seconds(claim.lease_expire_time) >= restart_at + LEASE - CLOCK_SLACK
    both_busy = resumed.expect_quiet(0.3, then=lambda: after.get_task("pending"))
    assert both_busy.state == pb.TASK_STATE_PENDING
    remaining = {"held-a", "held-b", "pending", "needs-a"}
    claims = dict(resent)
    while remaining:
        task_id = next(iter(claims))
        claim = claims.pop(task_id)
        finished = ann_again.complete(claim, task_id.encode())
        assert finished.state == pb.TASK_STATE_COMPLETED
        remaining.discard(task_id)
        if remaining - set(claims):
            new = resumed.next_event("claim")
            assert new.fence > max(c.fence for c in held.values())
            claims[new.task.id] = new
    bob_stream = after.client(bob.token, "bob").idle()
    qa = bob_stream.next_event("claim")
    assert qa.task.id == "qa-only"
    states = {t.id: t.state for t in after.all_tasks()}
    assert states == {
        "done": pb.TASK_STATE_COMPLETED,
        "held-a": pb.TASK_STATE_COMPLETED,
        "held-b": pb.TASK_STATE_COMPLETED,
        "pending": pb.TASK_STATE_COMPLETED,
        "needs-a": pb.TASK_STATE_COMPLETED,
        "qa-only": pb.TASK_STATE_IN_PROGRESS,
    }
    assert after.get_task("done").result == b"finished before the crash"
    resumed.cancel()
    bob_stream.cancel()


@pytest.mark.timeout(60)
def test_revoked_credentials_stay_revoked_after_a_restart(corrald):
    first = corrald()
    gone = first.add_teammate("gone")
    kept = first.add_teammate("kept")
    first.lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="gone"))
    first.kill()
    second = corrald(first.state_dir)
    error = None
    try:
        second.client(gone.token).board.GetStats(pb.GetStatsRequest())
    except grpc.RpcError as caught:
        error = caught
    assert error is not None and error.code() == grpc.StatusCode.UNAUTHENTICATED
    assert second.client(kept.token).board.GetStats(pb.GetStatsRequest()).tasks_by_state is not None


@pytest.mark.timeout(60)
def test_a_crash_right_after_a_claim_is_sent_loses_no_claim(corrald):
    crashing = corrald(failpoints="after_claim_sent=kill:1")
    mate = crashing.add_teammate("mate")
    crashing.create_tasks(spec("sent-then-crash", lease=LEASE), spec("next"))
    stream = mate.idle()
    claim = stream.next_event("claim")  # the daemon SIGKILLs itself right after writing this
    code, _ = stream.wait_end(10)
    assert code == grpc.StatusCode.UNAVAILABLE
    assert crashing.wait_exit(10) == -signal.SIGKILL

    after = corrald(crashing.state_dir)
    resumed = after.client(mate.token, "mate").idle()
    resent = resumed.next_event("claim")
    assert (resent.task.id, resent.claim_token, resent.attempt, resent.fence) == (
        claim.task.id,
        claim.claim_token,
        claim.attempt,
        claim.fence,
    )
    after.client(mate.token, "mate").complete(resent)
    assert resumed.next_event("claim").task.id == "next"
    resumed.cancel()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_every_acknowledged_write_survives_a_stop_under_load(corrald, how):
    """Invariant 6: a write is reported successful only after it committed."""
    first = corrald()
    total, stop_after = 300, 60
    acknowledged = threading.Event()
    lock = threading.Lock()
    ok: list[str] = []
    failed: dict[str, grpc.StatusCode] = {}

    def record(task_id: str, future) -> None:
        try:
            future.result()
        except grpc.RpcError as error:
            with lock:
                failed[task_id] = error.code()
        else:
            with lock:
                ok.append(task_id)
                if len(ok) >= stop_after:
                    acknowledged.set()

    futures = []
    for i in range(total):
        task_id = f"w{i:03d}"
        future = first.lead.lead.CreateTasks.future(pb.CreateTasksRequest(tasks=[spec(task_id)]), timeout=20)
        future.add_done_callback(lambda f, task_id=task_id: record(task_id, f))
        futures.append(future)
    assert acknowledged.wait(20), f"only {len(ok)} writes acknowledged"
    if how == "sigterm":
        code, _ = first.terminate()
        assert code == 0, first.stderr_tail()
    else:
        first.kill()
    for future in futures:
        with contextlib.suppress(grpc.RpcError):
            future.result(timeout=20)
    with lock:
        acknowledged_ids, refused = list(ok), dict(failed)
    assert len(acknowledged_ids) + len(refused) == total
    odd = {k: v for k, v in refused.items() if v in (grpc.StatusCode.INTERNAL, grpc.StatusCode.UNKNOWN)}
    assert not odd, f"writes failed with INTERNAL/UNKNOWN during {how}: {odd}"

    after = corrald(first.state_dir)
    present = {t.id for t in after.all_tasks()}
    lost = sorted(set(acknowledged_ids) - present)
    assert not lost, f"{len(lost)} acknowledged writes lost after {how}: {lost[:10]}"
