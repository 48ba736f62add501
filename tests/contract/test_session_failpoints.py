"""A daemon killed between a Session op's commit and its answer, or right after it sent a
handed-off claim, loses nothing and runs nothing twice (issue #15; design §2.6, §2.9, §5 step 1).

Each scenario SIGKILLs the daemon at a failpoint (server/corrald/failpoints.py),
and the next daemon on the same state directory checks its recovery:
- the teammate's held claim comes back first, with the same token, attempt and fence;
- the unanswered op sent again with the same op id returns the outcome that
  committed (same status, same stored result), hands nothing off again, and
  does not run again;
- the claims table, the task (its attempt) and the event log show every task
  completed once.

To start fewer daemons (startup dominates these tests), the scenarios run as a
chain on one state directory: the daemon that checks one scenario's recovery
is the one the next scenario kills. Each scenario has a role of its own, so
its tasks go to its own teammate only; a failpoint's count is armed as the
hits the previous recovery makes at that point plus the hits of the crash.
Sessions are left open until their daemon dies, because a Session's end is
itself answered at `before_op_result` and would shift the count.
"""

from __future__ import annotations

import dataclasses
import json
import signal
from collections.abc import Callable

import grpc
import pytest
from google.rpc import code_pb2

from corral.v1 import corral_pb2 as pb

from .session_board import board_db, claims_of, completions_per_task
from .wire import Client, Daemon, spec

LEASE = 10.0  # long enough that a slow restart on a loaded machine finds the leases live
OP_RESULT, CLAIM_SENT = "before_op_result", "after_claim_sent"

pytestmark = pytest.mark.timeout(120)


# ---------------------------------------------------------------- checks


def _killed(daemon: Daemon, stream) -> None:
    """The daemon SIGKILLed itself at its failpoint; the stream broke with it."""
    assert daemon.wait_exit(10) == -signal.SIGKILL, f"not killed at its failpoint: {daemon.stderr_tail()}"
    code, _ = stream.wait_end(10)
    assert code == grpc.StatusCode.UNAVAILABLE


def _completed_events(daemon: Daemon, task_id: str) -> int:
    """How many times the event log says `task_id` became COMPLETED."""
    with board_db(daemon) as conn:
        rows = [json.loads(data) for (data,) in conn.execute("SELECT data FROM events WHERE kind = 'task_changed'")]
    return sum(1 for row in rows if row["id"] == task_id and row["state"] == pb.TASK_STATE_COMPLETED)


def _live_claim(daemon: Daemon, task_id: str):
    with board_db(daemon) as conn:
        live = [row for row in claims_of(conn).values() if row.task == task_id and row.outcome is None]
    assert len(live) == 1, f"{task_id}: {len(live)} live claims"
    return live[0]


def _completed_once(daemon: Daemon, *task_ids: str) -> None:
    with board_db(daemon) as conn:
        completions = completions_per_task(conn)
        claimed = [row.task for row in claims_of(conn).values()]
    for task_id in task_ids:
        assert completions.get(task_id) == 1, f"{task_id} completed {completions.get(task_id, 0)} times"
        assert claimed.count(task_id) == 1, f"{task_id} claimed {claimed.count(task_id)} times"
        assert _completed_events(daemon, task_id) == 1, f"{task_id}: completion events"
        assert daemon.get_task(task_id).attempt == 1


def _same_claim(resent: pb.Claim, row, task_id: str) -> None:
    assert (resent.task.id, resent.claim_token, resent.attempt, resent.fence) == (task_id, row.token, 1, row.fence), (
        "the held claim comes back first, as it committed"
    )


def _complete_op(claim: pb.Claim, result: bytes, op_id: str) -> pb.SessionRequest:
    request = pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, result=result)
    return pb.SessionRequest(op_id=op_id, complete=request)


# ---------------------------------------------------------------- scenarios


@dataclasses.dataclass
class Scenario:
    """One crash and its recovery; `recovery_hits` are the failpoint hits `recover` makes."""

    role: str
    point: str
    crash_hits: int
    recovery_hits: dict[str, int]
    tasks: list[pb.TaskSpec]
    crash: Callable[[Scenario, Daemon], None]
    recover: Callable[[Scenario, Daemon], None]
    mate: Client | None = None
    kept: dict = dataclasses.field(default_factory=dict)

    def client(self, daemon: Daemon) -> Client:
        assert self.mate is not None
        return daemon.client(self.mate.token, self.role)


def _tasks(role: str, *ids: str) -> list[pb.TaskSpec]:
    # The first is claimed first; roles keep each scenario's tasks to its own teammate.
    return [
        spec(f"{role}-{name}", lease=LEASE, priority=len(ids) - i, required_role=role) for i, name in enumerate(ids)
    ]


# A completion committed, its answer not sent, nothing to hand off.


def crash_plain_completion(s: Scenario, daemon: Daemon) -> None:
    session = s.client(daemon).session()
    claim = session.next_event("claim")
    s.kept["claim"] = claim
    session.send(_complete_op(claim, b"kept", "done-1"))
    _killed(daemon, session)


def recover_plain_completion(s: Scenario, daemon: Daemon) -> None:
    claim, task_id = s.kept["claim"], f"{s.role}-only"
    assert daemon.get_task(task_id).state == pb.TASK_STATE_COMPLETED, "the completion had committed"
    session = s.client(daemon).session()
    again = session.complete(claim, b"kept", op_id="done-1")
    assert again.op_result.status.code == code_pb2.OK
    assert (again.op_result.result, again.op_result.task.state) == (b"kept", pb.TASK_STATE_COMPLETED)
    assert again.WhichOneof("event") is None and not session.events_before, "no claim held, none handed off"
    other = session.complete(claim, b"other", op_id="done-1")
    assert other.op_result.status.code == code_pb2.INVALID_ARGUMENT, "the same op id with another body"
    assert daemon.get_task(task_id).result == b"kept"
    _completed_once(daemon, task_id)


# A completion and its handoff committed in one job, the answer (carrying the claim) not sent.


def crash_completion_with_handoff(s: Scenario, daemon: Daemon) -> None:
    session = s.client(daemon).session()
    first = session.next_event("claim")
    assert first.task.id == f"{s.role}-first"
    s.kept["first"] = first
    session.send(_complete_op(first, b"one", "done-first"))
    _killed(daemon, session)  # the claim of "second" committed with the completion and was never sent


def recover_handed_off_claim(s: Scenario, daemon: Daemon) -> None:
    """For both Session scenarios with a handoff: the claim of "second" is held, re-sent, and
    the completion of "first" answered from its record."""
    second = f"{s.role}-second"
    held = _live_claim(daemon, second)
    handed = s.kept.get("handed")
    if handed is not None:  # the response reached the client before the kill
        assert handed.op_result.status.code == code_pb2.OK
        assert handed.claim.claim_token == held.token
    session = s.client(daemon).session()
    resent = session.next_event("claim")
    _same_claim(resent, held, second)
    again = session.complete(s.kept["first"], b"one", op_id="done-first")
    assert (again.op_result.status.code, again.op_result.result) == (code_pb2.OK, b"one")
    assert again.WhichOneof("event") is None, "a repeated op hands nothing off twice"
    done = session.complete(resent, b"two", op_id="done-second")
    assert done.op_result.status.code == code_pb2.OK
    assert done.WhichOneof("event") is None
    _completed_once(daemon, f"{s.role}-first", second)


# The daemon killed right after it sent a response carrying a handed-off claim.


def crash_after_handed_off_claim(s: Scenario, daemon: Daemon) -> None:
    session = s.client(daemon).session()
    first = session.next_event("claim")
    s.kept["first"] = first
    session.send(_complete_op(first, b"one", "done-first"))
    s.kept["handed"] = session.try_next(10)  # written before the kill, yet it may be lost with the connection
    _killed(daemon, session)


# The same on an Idle stream, the completion a unary CompleteTask.


def crash_idle_after_handed_off_claim(s: Scenario, daemon: Daemon) -> None:
    mate = s.client(daemon)
    stream = mate.idle()
    first = stream.next_event("claim")
    s.kept["first"] = first
    request = pb.CompleteTaskRequest(task_id=first.task.id, claim_token=first.claim_token, result=b"one")
    reply = mate.teammate.CompleteTask.future(request)
    s.kept["handed"] = stream.try_next(10)  # the handoff goes out on the Idle stream, never in the reply
    _killed(daemon, stream)
    try:
        assert reply.result(timeout=10).task.state == pb.TASK_STATE_COMPLETED
    except grpc.RpcError as error:  # the reply may have been lost with the connection
        assert error.code() == grpc.StatusCode.UNAVAILABLE


def recover_idle_handed_off_claim(s: Scenario, daemon: Daemon) -> None:
    second = f"{s.role}-second"
    held = _live_claim(daemon, second)
    handed = s.kept.get("handed")
    if handed is not None:
        assert handed.claim.claim_token == held.token
    mate = s.client(daemon)
    stream = mate.idle()
    resent = stream.next_event("claim")
    _same_claim(resent, held, second)
    again = mate.complete(s.kept["first"], b"one")  # the same token again: the stored result (invariant 9)
    assert (again.state, again.result) == (pb.TASK_STATE_COMPLETED, b"one")
    assert stream.expect_quiet(0.3, then=lambda: _live_claim(daemon, second)).token == held.token  # no second handoff
    mate.complete(resent, b"two")
    _completed_once(daemon, f"{s.role}-first", second)
    stream.cancel()


# A retryable failure committed, its answer not sent.


def crash_failure(s: Scenario, daemon: Daemon) -> None:
    session = s.client(daemon).session()
    claim = session.next_event("claim")
    failing = pb.FailTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, error="boom", retryable=True)
    s.kept["failing"] = failing
    session.send(pb.SessionRequest(op_id="fail-1", fail=failing))
    _killed(daemon, session)


def recover_failure(s: Scenario, daemon: Daemon) -> None:
    task_id = f"{s.role}-flaky"
    session = s.client(daemon).session()
    retry = session.next_event("claim")  # the failure committed: the task came back for attempt 2
    assert (retry.task.id, retry.attempt) == (task_id, 2)
    again = session.op("fail-1", fail=s.kept["failing"])
    assert again.op_result.status.code == code_pb2.OK, "the recorded outcome, not a stale-token error"
    assert again.WhichOneof("event") is None
    task = daemon.get_task(task_id)
    assert (task.state, task.attempt, task.owner) == (pb.TASK_STATE_IN_PROGRESS, 2, s.role), "the retry is untouched"
    assert session.complete(retry).op_result.status.code == code_pb2.OK
    with board_db(daemon) as conn:
        outcomes = sorted(row.outcome or "" for row in claims_of(conn).values() if row.task == task_id)
    assert outcomes == ["completed", "failed"], "failed once, completed once"


def _scenarios() -> list[Scenario]:
    return [
        Scenario(
            "plain",
            OP_RESULT,
            crash_hits=1,  # the completion
            recovery_hits={OP_RESULT: 2, CLAIM_SENT: 0},  # the op sent again, then with another body
            tasks=_tasks("plain", "only"),
            crash=crash_plain_completion,
            recover=recover_plain_completion,
        ),
        Scenario(
            "sent",
            CLAIM_SENT,
            crash_hits=2,  # the first claim, then the one riding with the completion's result
            recovery_hits={OP_RESULT: 2, CLAIM_SENT: 1},  # the claim re-sent; two completions
            tasks=_tasks("sent", "first", "second"),
            crash=crash_after_handed_off_claim,
            recover=recover_handed_off_claim,
        ),
        Scenario(
            "handoff",
            OP_RESULT,
            crash_hits=1,
            recovery_hits={OP_RESULT: 2, CLAIM_SENT: 1},
            tasks=_tasks("handoff", "first", "second"),
            crash=crash_completion_with_handoff,
            recover=recover_handed_off_claim,
        ),
        Scenario(
            "idle",
            CLAIM_SENT,
            crash_hits=2,
            recovery_hits={OP_RESULT: 0, CLAIM_SENT: 1},  # unary calls and an Idle stream: no Session op
            tasks=_tasks("idle", "first", "second"),
            crash=crash_idle_after_handed_off_claim,
            recover=recover_idle_handed_off_claim,
        ),
        Scenario(
            "flaky",
            OP_RESULT,
            crash_hits=1,
            recovery_hits={OP_RESULT: 2, CLAIM_SENT: 1},
            tasks=[spec("flaky-flaky", lease=LEASE, max_attempts=3, required_role="flaky")],
            crash=crash_failure,
            recover=recover_failure,
        ),
    ]


def test_each_crash_between_commit_and_answer_recovers_without_running_twice(corrald):
    scenarios = _scenarios()
    previous: Scenario | None = None
    daemon: Daemon | None = None
    state_dir = None
    for scenario in scenarios:
        hits = scenario.crash_hits + (previous.recovery_hits[scenario.point] if previous is not None else 0)
        daemon = corrald(state_dir, failpoints=f"{scenario.point}=kill:{hits}")
        state_dir = daemon.state_dir
        if previous is None:  # every teammate and task up front: neither reaches a failpoint
            for each in scenarios:
                each.mate = daemon.add_teammate(each.role, roles=[each.role])
                daemon.create_tasks(*each.tasks)
        else:
            previous.recover(previous, daemon)
        scenario.crash(scenario, daemon)
        previous = scenario
    assert previous is not None
    final = corrald(state_dir)
    previous.recover(previous, final)
    with board_db(final) as conn:
        twice = {task: n for task, n in completions_per_task(conn).items() if n > 1}
    assert not twice, f"completed more than once: {twice}"
