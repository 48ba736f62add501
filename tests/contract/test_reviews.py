"""Review and rework through the wire, on Idle + unary and on Session: a completion of a
reviewed task leaves it IN_REVIEW, a reviewer's stream is handed the review (Claim.review),
a verdict approves or sends it back with the feedback and the rejected result; the Lead's
ReviewTask; Watch's review_decided; bad input refused with nothing written."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import STREAM_TIMEOUT_S, SessionStream, Stream, assert_status, rpc_error, spec

pytestmark = pytest.mark.timeout(40)

TRANSPORTS = ["idle", "session"]


def _reviewed(task_id: str, *deps: str, role: str = "rev", rounds: int = 0) -> pb.TaskSpec:
    message = spec(task_id, *deps)
    message.review.CopyFrom(pb.ReviewPolicy(reviewer_role=role, max_rounds=rounds))
    return message


def _open(mate, transport: str) -> Stream:
    if transport == "session":
        return SessionStream(mate.teammate, pb.SessionRequest(open=pb.IdleRequest()), STREAM_TIMEOUT_S, mate.name)
    return Stream(mate.teammate.Idle(pb.IdleRequest(), timeout=STREAM_TIMEOUT_S), mate.name)


def _complete(mate, stream: Stream, claim: pb.Claim, result: bytes = b"", verdict=None) -> pb.Task:
    request = pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, result=result)
    if verdict is not None:
        request.verdict.CopyFrom(verdict)
    if isinstance(stream, SessionStream):
        answer = stream.op(complete=request).op_result
        assert answer.status.code == grpc.StatusCode.OK.value[0], answer.status
        return answer.task
    return mate.teammate.CompleteTask(request).task


def _task(daemon, task_id: str) -> pb.Task:
    return daemon.lead.board.GetTask(pb.GetTaskRequest(task_id=task_id)).task


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_review_is_handed_to_a_waiting_reviewer_and_a_rejection_comes_back_as_rework(daemon, transport):
    ann, rita = daemon.add_teammate("ann"), daemon.add_teammate("rita", roles=["rev"])
    daemon.create_tasks(_reviewed("a"), spec("b", "a"))
    watch = daemon.watch(0)
    author = _open(ann, transport)
    work = author.next_event("claim", timeout=5.0)  # before rita's stream opens: she may take work too
    reviewer = _open(rita, transport)
    assert work.task.review == pb.ReviewPolicy(reviewer_role="rev", max_rounds=3)
    submitted = _complete(ann, author, work, b"draft 1")
    assert (submitted.state, submitted.result) == (pb.TASK_STATE_IN_REVIEW, b"draft 1")

    review = reviewer.next_event("claim", timeout=5.0)  # the waiting reviewer was handed it
    assert review.review == pb.ReviewItem(result=b"draft 1", author="ann", round=1)
    assert review.task.state == pb.TASK_STATE_IN_REVIEW
    rejected = _complete(rita, reviewer, review, verdict=pb.ReviewVerdict(approve=False, feedback="cite sources"))
    assert (rejected.state, rejected.review_rounds) == (pb.TASK_STATE_PENDING, 1)

    rework = author.next_event("claim", timeout=5.0)
    assert rework.rejected_result == b"draft 1" and rework.attempt == work.attempt
    assert rework.previous_attempt.outcome == pb.ATTEMPT_OUTCOME_REJECTED
    assert (rework.previous_attempt.owner, rework.previous_attempt.feedback) == ("rita", "cite sources")
    _complete(ann, author, rework, b"draft 2")
    second = reviewer.next_event("claim", timeout=5.0)
    assert second.review.round == 2
    approved = _complete(rita, reviewer, second, verdict=pb.ReviewVerdict(approve=True))
    assert (approved.state, approved.result) == (pb.TASK_STATE_COMPLETED, b"draft 2")
    dependent = author.next_event("claim", timeout=5.0)
    assert dependent.task.id == "b" and dependent.dependency_results["a"] == b"draft 2"

    decided = []
    while len(decided) < 2:
        event = watch.next(5)
        if event.WhichOneof("event") == "review_decided":
            decided.append(event.review_decided)
    assert [(d.approve, d.reviewer, d.round, d.feedback) for d in decided] == [
        (False, "rita", 1, "cite sources"),
        (True, "rita", 2, ""),
    ]
    history = daemon.lead.board.GetTask(pb.GetTaskRequest(task_id="a")).attempts
    assert [(h.owner, h.outcome, h.verdict.approve) for h in history] == [
        ("ann", pb.ATTEMPT_OUTCOME_COMPLETED, False),
        ("rita", pb.ATTEMPT_OUTCOME_REJECTED, False),
        ("ann", pb.ATTEMPT_OUTCOME_COMPLETED, False),
        ("rita", pb.ATTEMPT_OUTCOME_COMPLETED, True),
    ]
    author.cancel()
    reviewer.cancel()


def test_the_lead_reviews_and_takes_a_held_review_away(daemon):
    ann, rita = daemon.add_teammate("ann"), daemon.add_teammate("rita", roles=["rev"])
    daemon.create_tasks(_reviewed("mine", role=""), _reviewed("theirs"))
    author = Stream(ann.teammate.Idle(pb.IdleRequest(slots=2), timeout=STREAM_TIMEOUT_S), ann.name)
    claims = [author.next_event("claim", timeout=5.0) for _ in range(2)]  # both, before rita may take one
    for claim in claims:
        _complete(ann, author, claim, b"done")
    reviewer = _open(rita, "idle")
    held = reviewer.next_event("claim", timeout=5.0)
    assert held.task.id == "theirs", "a Lead's review goes to no teammate"
    lead = daemon.lead.lead
    assert lead.ReviewTask(pb.ReviewTaskRequest(task_id="mine", approve=True)).task.state == pb.TASK_STATE_COMPLETED
    decided = lead.ReviewTask(pb.ReviewTaskRequest(task_id="theirs", approve=False, feedback="no"))
    assert decided.task.state == pb.TASK_STATE_PENDING
    ended = reviewer.next_event("claim_ended", timeout=5.0)
    assert (ended.task_id, ended.reason) == ("theirs", pb.CLAIM_END_REASON_REVOKED)
    error = rpc_error(
        rita.teammate.CompleteTask,
        pb.CompleteTaskRequest(task_id="theirs", claim_token=held.claim_token, verdict=pb.ReviewVerdict(approve=True)),
    )
    assert_status(error, grpc.StatusCode.FAILED_PRECONDITION, reason="CLAIM_REVOKED")
    author.cancel()
    reviewer.cancel()


def test_bad_reviews_are_refused_with_the_field_and_nothing_is_written(daemon):
    ann = daemon.add_teammate("ann")
    lead = daemon.lead.lead
    for policy, field in (
        (pb.ReviewPolicy(reviewer_role="x" * 201), "tasks[0].review.reviewer_role"),
        (pb.ReviewPolicy(reviewer_role="rev", max_rounds=21), "tasks[0].review.max_rounds"),
    ):
        task = spec("bad")
        task.review.CopyFrom(policy)
        error = rpc_error(lead.CreateTasks, pb.CreateTasksRequest(tasks=[task]))
        assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field=field)
    assert daemon.lead.board.ListTasks(pb.ListTasksRequest()).tasks == []

    daemon.create_tasks(spec("plain"))
    stream = _open(ann, "idle")
    claim = stream.next_event("claim", timeout=5.0)
    error = rpc_error(
        ann.teammate.CompleteTask,
        pb.CompleteTaskRequest(task_id="plain", claim_token=claim.claim_token, verdict=pb.ReviewVerdict(approve=True)),
    )
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field="verdict")
    assert _task(daemon, "plain").state == pb.TASK_STATE_IN_PROGRESS
    for request, code in (
        (pb.ReviewTaskRequest(task_id="plain", approve=True), grpc.StatusCode.FAILED_PRECONDITION),
        (pb.ReviewTaskRequest(task_id="nope", approve=True), grpc.StatusCode.NOT_FOUND),
        (pb.ReviewTaskRequest(task_id="plain", approve=False), grpc.StatusCode.INVALID_ARGUMENT),
    ):
        assert_status(rpc_error(lead.ReviewTask, request), code)
    assert _task(daemon, "plain").state == pb.TASK_STATE_IN_PROGRESS
    error = rpc_error(ann.lead.ReviewTask, pb.ReviewTaskRequest(task_id="plain", approve=True))
    assert_status(error, grpc.StatusCode.PERMISSION_DENIED, reason="PERMISSION_DENIED")
    stream.cancel()


def test_a_waiting_reviewer_is_handed_the_review_in_the_completing_job(daemon):
    """No writer job of its own: the completion's job claims the review for the parked
    reviewer, as it would a ready task (GetStats counts the jobs and the handoffs)."""
    ann, rita = daemon.add_teammate("ann"), daemon.add_teammate("rita", roles=["rev"])
    daemon.create_tasks(_reviewed("a"))
    author = _open(ann, "session")
    work = author.next_event("claim", timeout=5.0)
    reviewer = _open(rita, "session")
    reviewer.expect_quiet(0.3, then=lambda: _task(daemon, "a"))  # parked: nothing for rita yet
    before = daemon.lead.board.GetStats(pb.GetStatsRequest())
    _complete(ann, author, work, b"draft")
    review = reviewer.next_event("claim", timeout=5.0)
    after = daemon.lead.board.GetStats(pb.GetStatsRequest())
    assert review.review.author == "ann"
    assert after.writer.jobs - before.writer.jobs == 1, "the completion's job, and none for the review"
    assert after.claims_handed_off - before.claims_handed_off == 1
    author.cancel()
    reviewer.cancel()


def test_a_reviewer_that_connects_after_the_review_waits_gets_it(daemon):
    ann = daemon.add_teammate("ann")
    reviewers = {
        "idle": daemon.add_teammate("rita", roles=["rev"]),
        "session": daemon.add_teammate("ravi", roles=["rev"]),
    }
    daemon.create_tasks(_reviewed("a"), _reviewed("b"))
    author = Stream(ann.teammate.Idle(pb.IdleRequest(slots=2), timeout=STREAM_TIMEOUT_S), ann.name)
    for claim in [author.next_event("claim", timeout=5.0) for _ in range(2)]:
        _complete(ann, author, claim, claim.task.id.encode())
    got = set()
    for transport, mate in reviewers.items():
        reviewer = _open(mate, transport)  # its first check finds the review waiting
        review = reviewer.next_event("claim", timeout=5.0)
        assert review.review.author == "ann" and review.review.result == review.task.id.encode()
        got.add(review.task.id)
        reviewer.cancel()
    assert got == {"a", "b"}
    author.cancel()
