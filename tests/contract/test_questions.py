"""Questions to the Lead through the wire, on Idle + unary and on Session: AskQuestion ends
the claim and leaves the task NEEDS_INPUT, AnswerQuestion puts it back, the next claim
carries the answers, Watch tells both; bad input and stale claims are refused with the
right status and write nothing."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import STREAM_TIMEOUT_S, SessionStream, Stream, assert_status, rpc_error, spec

pytestmark = pytest.mark.timeout(40)

TRANSPORTS = ["idle", "session"]


def _open(mate, transport: str) -> Stream:
    if transport == "session":
        request = pb.SessionRequest(open=pb.IdleRequest())
        return SessionStream(mate.teammate, request, STREAM_TIMEOUT_S, f"Session({mate.name})")
    return Stream(mate.teammate.Idle(pb.IdleRequest(), timeout=STREAM_TIMEOUT_S), f"Idle({mate.name})")


def _ask(mate, stream: Stream, claim: pb.Claim, question: str) -> pb.Task:
    """AskQuestion as the transport says it: a Session op, else the unary call."""
    request = pb.AskQuestionRequest(task_id=claim.task.id, claim_token=claim.claim_token, question=question)
    if isinstance(stream, SessionStream):
        result = stream.op(ask=request).op_result
        assert result.status.code == grpc.StatusCode.OK.value[0], result.status
        return result.task
    return mate.teammate.AskQuestion(request).task


def _task(daemon, task_id: str) -> pb.Task:
    return daemon.lead.board.GetTask(pb.GetTaskRequest(task_id=task_id)).task


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_question_waits_for_the_answer_and_the_next_claim_carries_it(daemon, transport):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"), spec("b", "a"))
    watch = daemon.watch(0)
    stream = _open(ann, transport)
    first = stream.next_event("claim", timeout=5.0)
    asked = _ask(ann, stream, first, "which corpus?")
    assert (asked.state, asked.question, asked.owner) == (pb.TASK_STATE_NEEDS_INPUT, "which corpus?", "")
    counts = daemon.lead.board.GetStats(pb.GetStatsRequest()).tasks_by_state
    assert counts["TASK_STATE_NEEDS_INPUT"] == 1

    daemon.lead.lead.AnswerQuestion(pb.AnswerQuestionRequest(task_id="a", answer="the 2024 one"))
    again = stream.next_event("claim", timeout=5.0)  # the stream waited: the answer woke it
    assert again.task.id == "a" and again.attempt == first.attempt, "a question uses no attempt"
    assert [(qa.question, qa.answer, qa.asked_by) for qa in again.answers] == [("which corpus?", "the 2024 one", "ann")]
    assert again.answers[0].answer_time.ToMilliseconds() >= again.answers[0].ask_time.ToMilliseconds() > 0
    assert again.previous_attempt.outcome == pb.ATTEMPT_OUTCOME_ASKED
    assert _task(daemon, "a").question == ""

    kinds = []
    while "question_answered" not in kinds:
        kinds.append(watch.next(5).WhichOneof("event"))
    asked_at, answered_at = kinds.index("question_asked"), kinds.index("question_answered")
    assert asked_at < answered_at
    stream.cancel()


def test_the_answer_to_the_question_reaches_watch_whole(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"))
    watch = daemon.watch(0)
    stream = _open(ann, "idle")
    _ask(ann, stream, stream.next_event("claim", timeout=5.0), "which corpus?")
    daemon.lead.lead.AnswerQuestion(pb.AnswerQuestionRequest(task_id="a", answer="the 2024 one"))
    seen: dict[str, pb.WatchResponse] = {}
    while "question_answered" not in seen:
        event = watch.next(5)
        seen.setdefault(event.WhichOneof("event"), event)
    assert seen["question_asked"].question_asked == pb.QuestionAsked(
        task_id="a", question="which corpus?", asked_by="ann"
    )
    assert seen["question_answered"].question_answered == pb.QuestionAnswered(
        task_id="a", question="which corpus?", answer="the 2024 one"
    )
    stream.cancel()


@pytest.mark.parametrize(
    ("question", "field"),
    [("", "question"), ("x" * (64 * 1024 + 1), "question")],
)
def test_a_bad_question_is_invalid_argument_and_the_claim_stays(daemon, question, field):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"))
    stream = _open(ann, "idle")
    claim = stream.next_event("claim", timeout=5.0)
    request = pb.AskQuestionRequest(task_id="a", claim_token=claim.claim_token, question=question)
    assert_status(rpc_error(ann.teammate.AskQuestion, request), grpc.StatusCode.INVALID_ARGUMENT, field=field)
    task = _task(daemon, "a")
    assert (task.state, task.owner, task.question) == (pb.TASK_STATE_IN_PROGRESS, "ann", "")
    stream.cancel()


def test_a_question_on_a_claim_that_ended_is_refused_as_any_stale_write(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a", max_attempts=2))
    stream = _open(ann, "idle")
    claim = stream.next_event("claim", timeout=5.0)
    daemon.lead.lead.RevokeClaim(pb.RevokeClaimRequest(task_id="a", reason="plan changed"))
    request = pb.AskQuestionRequest(task_id="a", claim_token=claim.claim_token, question="too late?")
    assert_status(
        rpc_error(ann.teammate.AskQuestion, request), grpc.StatusCode.FAILED_PRECONDITION, reason="CLAIM_REVOKED"
    )
    assert _task(daemon, "a").state != pb.TASK_STATE_NEEDS_INPUT
    stream.cancel()


def test_an_answer_to_a_task_without_a_question_is_refused_and_writes_nothing(daemon):
    daemon.create_tasks(spec("a"))
    lead = daemon.lead.lead
    for request, code in (
        (pb.AnswerQuestionRequest(task_id="a", answer="unasked"), grpc.StatusCode.FAILED_PRECONDITION),
        (pb.AnswerQuestionRequest(task_id="nope", answer="x"), grpc.StatusCode.NOT_FOUND),
        (pb.AnswerQuestionRequest(task_id="a", answer="x" * (64 * 1024 + 1)), grpc.StatusCode.INVALID_ARGUMENT),
    ):
        assert_status(rpc_error(lead.AnswerQuestion, request), code)
    assert _task(daemon, "a").state == pb.TASK_STATE_PENDING
    # A teammate's credential may not answer.
    ann = daemon.add_teammate("ann")
    error = rpc_error(ann.lead.AnswerQuestion, pb.AnswerQuestionRequest(task_id="a"))
    assert_status(error, grpc.StatusCode.PERMISSION_DENIED, reason="PERMISSION_DENIED")
