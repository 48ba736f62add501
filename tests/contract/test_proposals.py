"""Discovered work through the wire, on Idle + unary and on Session: a teammate proposes tasks
(ProposeTasks, the Session op `propose`), splits the task it holds on them, the Lead decides
(DecideProposals), sets the policy (SetTaskCreation) and adds dependencies live
(AddDependencies). The proposer hears the decision ahead of any new claim and must ack it;
Watch tells tasks_proposed and proposals_decided; bad input is refused with the right status,
reason and field, and nothing is written."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support.boards import read_board

from .session_board import reason_of
from .wire import STREAM_TIMEOUT_S, SessionStream, Stream, assert_status, rpc_error, spec

pytestmark = pytest.mark.timeout(60)

TRANSPORTS = ["idle", "session"]
QUIET = 0.3


def _open(mate, transport: str, slots: int = 0) -> Stream:
    if transport == "session":
        request = pb.SessionRequest(open=pb.IdleRequest(slots=slots))
        return SessionStream(mate.teammate, request, STREAM_TIMEOUT_S, f"Session({mate.name})")
    return Stream(mate.teammate.Idle(pb.IdleRequest(slots=slots), timeout=STREAM_TIMEOUT_S), f"Idle({mate.name})")


def _op(stream: SessionStream, **op) -> pb.SessionOpResult:
    """A Session op's result; what the stream sent before it and what rides with it (a claim
    handed off) are kept for `_next`."""
    response = stream.op(**op)
    rides = [response] if response.WhichOneof("event") else []
    stream.backlog = [*getattr(stream, "backlog", []), *stream.events_before, *rides]
    return response.op_result


def _next(stream: Stream, kind: str):
    """The stream's next item, of oneof `kind`: one a Session op read first, else the next sent."""
    backlog = getattr(stream, "backlog", [])
    if backlog:
        item = backlog.pop(0)
        assert item.WhichOneof("event") == kind, (kind, item)
        return getattr(item, kind)
    return stream.next_event(kind, timeout=5.0)


def _propose(mate, stream: Stream, request: pb.ProposeTasksRequest) -> tuple[list[pb.Task], pb.Task | None]:
    """ProposeTasks as the transport says it: the tasks, and the split task (None unless split)."""
    if isinstance(stream, SessionStream):
        result = _op(stream, propose=request)
        assert result.status.code == grpc.StatusCode.OK.value[0], result.status
        return list(result.proposed_tasks), result.task if result.HasField("task") else None
    response = mate.teammate.ProposeTasks(request)
    return list(response.tasks), response.claimed_task if response.HasField("claimed_task") else None


def _ack(mate, stream: Stream, seq: int) -> None:
    if isinstance(stream, SessionStream):
        result = _op(stream, ack=pb.AckMessagesRequest(through_seq=seq))
        assert result.status.code == grpc.StatusCode.OK.value[0], result.status
        return
    mate.ack(seq)


def _complete(mate, stream: Stream, claim: pb.Claim, result: bytes) -> None:
    if isinstance(stream, SessionStream):
        request = pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, result=result)
        answer = _op(stream, complete=request)
        assert answer.status.code == grpc.StatusCode.OK.value[0], answer.status
        return
    mate.complete(claim, result)


def _task(daemon, task_id: str) -> pb.Task:
    return daemon.lead.board.GetTask(pb.GetTaskRequest(task_id=task_id)).task


def _board(daemon) -> dict[str, list[tuple]]:
    """Everything a refused call must leave as it was: tasks, edges, claims, inbox, events."""
    queries = {
        "tasks": "SELECT id, state, owner, live_fence, unmet_deps, error, proposed_by FROM tasks ORDER BY seq",
        "deps": "SELECT task_seq, dep_seq FROM deps ORDER BY task_seq, dep_seq",
        "claims": "SELECT fence, outcome FROM claims ORDER BY fence",
        "inbox": "SELECT recipient, seq, kind FROM inbox ORDER BY recipient, seq",
        "events": "SELECT count(*) FROM events",
        "policies": "SELECT name, task_creation FROM teammates ORDER BY name",
    }
    with read_board(daemon.state_dir) as conn:
        return {name: conn.execute(query).fetchall() for name, query in queries.items()}


def _watch_until(watch: Stream, kind: str, count: int = 1) -> list:
    """The next `count` Watch events of oneof `kind` (others skipped)."""
    found = []
    while len(found) < count:
        event = watch.next_matching(lambda e: e.WhichOneof("event") == kind, what=kind)
        found.append(getattr(event, kind))
    return found


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_split_waits_for_the_lead_then_for_its_parts_and_the_decision_comes_first(daemon, transport):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("big", priority=5, max_attempts=1))
    watch = daemon.watch(0)
    stream = _open(ann, transport)
    held = _next(stream, "claim")
    request = pb.ProposeTasksRequest(
        tasks=[spec("fix", priority=5), spec("test", "fix")],
        task_id="big",
        claim_token=held.claim_token,
        block_claimed_task=True,
    )
    proposed, split = _propose(ann, stream, request)
    assert [(t.id, t.state, t.proposed_by, t.discovered_from) for t in proposed] == [
        ("fix", pb.TASK_STATE_PROPOSED, "ann", "big"),
        ("test", pb.TASK_STATE_PROPOSED, "ann", "big"),
    ]
    assert split is not None and (split.id, split.state, split.owner) == ("big", pb.TASK_STATE_PENDING, "")
    assert list(split.depends_on) == ["fix", "test"]
    assert _watch_until(watch, "tasks_proposed")[0] == pb.TasksProposed(
        teammate="ann", task_ids=["fix", "test"], discovered_from="big", needs_decision=True, split=True
    )
    counts = daemon.stats().tasks_by_state
    assert counts["TASK_STATE_PROPOSED"] == 2
    # The slot is free, but nothing is ready: PROPOSED tasks are never claimed.
    assert stream.expect_quiet(QUIET, then=lambda: _task(daemon, "fix")).state == pb.TASK_STATE_PROPOSED

    decided = daemon.lead.lead.DecideProposals(pb.DecideProposalsRequest(task_ids=["fix", "test"], approve=True))
    assert [(t.id, t.state) for t in decided.tasks] == [("fix", pb.TASK_STATE_PENDING), ("test", pb.TASK_STATE_PENDING)]
    notice = _next(stream, "proposals_decided")  # control before work
    assert (list(notice.task_ids), notice.approve, notice.feedback) == (["fix", "test"], True, "")
    assert notice.seq > 0 and notice.send_time.ToMilliseconds() > 0
    assert _watch_until(watch, "proposals_decided")[0] == pb.ProposalsDecided(task_ids=["fix", "test"], approve=True)
    # Not acknowledged: no claim yet, although fix is ready.
    assert stream.expect_quiet(QUIET, then=lambda: _task(daemon, "fix")).state == pb.TASK_STATE_PENDING
    _ack(ann, stream, notice.seq)
    for part in ("fix", "test"):
        claim = _next(stream, "claim")
        assert claim.task.id == part
        _complete(ann, stream, claim, part.encode())
    again = _next(stream, "claim")
    assert again.task.id == "big" and again.attempt == held.attempt, "a split uses no attempt"
    assert dict(again.dependency_results) == {"fix": b"fix", "test": b"test"}
    assert again.previous_attempt.outcome == pb.ATTEMPT_OUTCOME_SPLIT
    _complete(ann, stream, again, b"whole")
    history = daemon.lead.board.GetTask(pb.GetTaskRequest(task_id="big")).attempts
    assert [h.outcome for h in history] == [pb.ATTEMPT_OUTCOME_SPLIT, pb.ATTEMPT_OUTCOME_COMPLETED]
    stream.cancel()
    watch.cancel()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_rejected_split_is_ready_again_and_its_next_claim_says_why(daemon, transport):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("big"))
    watch = daemon.watch(0)
    stream = _open(ann, transport)
    held = _next(stream, "claim")
    request = pb.ProposeTasksRequest(
        tasks=[spec("prep")], task_id="big", claim_token=held.claim_token, block_claimed_task=True
    )
    _propose(ann, stream, request)
    lead = daemon.lead.lead
    decided = lead.DecideProposals(pb.DecideProposalsRequest(task_ids=["prep"], approve=False, feedback="not needed"))
    assert [(t.id, t.state) for t in decided.tasks] == [
        ("prep", pb.TASK_STATE_CANCELED),
        ("big", pb.TASK_STATE_PENDING),
    ]
    assert decided.tasks[0].error == "proposal rejected: not needed"
    notice = _next(stream, "proposals_decided")
    assert (list(notice.task_ids), notice.approve, notice.feedback) == (["prep"], False, "not needed")
    assert _watch_until(watch, "proposals_decided")[0] == pb.ProposalsDecided(
        task_ids=["prep"], approve=False, feedback="not needed"
    )
    _ack(ann, stream, notice.seq)
    again = _next(stream, "claim")
    assert again.task.id == "big" and list(again.task.depends_on) == []
    assert again.previous_attempt.outcome == pb.ATTEMPT_OUTCOME_SPLIT
    assert again.previous_attempt.error == "split rejected: proposal rejected: not needed"
    stream.cancel()
    watch.cancel()


def test_an_unacknowledged_decision_is_sent_again_on_a_new_stream(daemon):
    ann = daemon.add_teammate("ann")
    ann.teammate.ProposeTasks(pb.ProposeTasksRequest(tasks=[spec("x")]))
    first = _open(ann, "idle")
    daemon.lead.lead.DecideProposals(pb.DecideProposalsRequest(task_ids=["x"], approve=True))
    notice = first.next_event("proposals_decided", timeout=5.0)
    first.cancel()
    second = _open(ann, "session")
    again = _next(second, "proposals_decided")
    assert (again.seq, list(again.task_ids)) == (notice.seq, ["x"])
    _ack(ann, second, again.seq)
    assert _next(second, "claim").task.id == "x"
    second.cancel()


def test_allow_adds_pending_tasks_and_the_policy_shows_in_list_teammates(daemon):
    ann, bob = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    lead = daemon.lead.lead
    assert daemon.teammate("ann").task_creation == pb.TASK_CREATION_POLICY_PROPOSE, "the default"
    allowed = lead.SetTaskCreation(pb.SetTaskCreationRequest(teammate="ann", policy=pb.TASK_CREATION_POLICY_ALLOW))
    assert allowed.policy == pb.TASK_CREATION_POLICY_ALLOW
    lead.SetTaskCreation(pb.SetTaskCreationRequest(teammate="*", policy=pb.TASK_CREATION_POLICY_DENY))
    assert (daemon.teammate("ann").task_creation, daemon.teammate("bob").task_creation) == (
        pb.TASK_CREATION_POLICY_ALLOW,
        pb.TASK_CREATION_POLICY_DENY,
    )
    (added,) = ann.teammate.ProposeTasks(pb.ProposeTasksRequest(tasks=[spec("x")])).tasks
    assert (added.state, added.proposed_by, added.discovered_from) == (pb.TASK_STATE_PENDING, "ann", "")
    before = _board(daemon)
    error = rpc_error(bob.teammate.ProposeTasks, pb.ProposeTasksRequest(tasks=[spec("y")]))
    assert_status(error, grpc.StatusCode.PERMISSION_DENIED, reason="PERMISSION_DENIED")
    assert _board(daemon) == before


def test_bad_proposals_are_refused_naming_the_field_and_nothing_is_written(daemon):
    ann, bob = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    daemon.create_tasks(spec("a", priority=1), spec("b"))
    stream = Stream(ann.teammate.Idle(pb.IdleRequest(slots=2), timeout=STREAM_TIMEOUT_S), "ann")
    held = {claim.task.id: claim for claim in (_next(stream, "claim") for _ in range(2))}
    ann.teammate.ReleaseTask(pb.ReleaseTaskRequest(task_id="b", claim_token=held["b"].claim_token))
    assert stream.next_event("claim", timeout=5.0).task.id == "b", "claimed again, with a new token"
    token = held["a"].claim_token
    invalid = grpc.StatusCode.INVALID_ARGUMENT
    cases = [
        (pb.ProposeTasksRequest(tasks=[spec(f"n{i}") for i in range(101)]), invalid, "INVALID_ARGUMENT", "tasks"),
        (pb.ProposeTasksRequest(), invalid, "INVALID_ARGUMENT", "tasks"),
        (pb.ProposeTasksRequest(tasks=[spec("n", "missing")]), invalid, "INVALID_ARGUMENT", "tasks[0].depends_on"),
        (pb.ProposeTasksRequest(tasks=[spec("")]), invalid, "INVALID_ARGUMENT", "tasks[0].id"),
        (pb.ProposeTasksRequest(tasks=[spec("n"), spec("n")]), invalid, "INVALID_ARGUMENT", "tasks[1].id"),
        (pb.ProposeTasksRequest(tasks=[spec("n", "n")]), invalid, "INVALID_ARGUMENT", "tasks[0].depends_on"),
        (
            pb.ProposeTasksRequest(tasks=[spec("n", priority=2)], task_id="a", claim_token=token),
            invalid,
            "INVALID_ARGUMENT",
            "tasks[0].priority",
        ),
        (pb.ProposeTasksRequest(tasks=[spec("a")]), grpc.StatusCode.ALREADY_EXISTS, "ALREADY_EXISTS", "tasks[0].id"),
        (
            pb.ProposeTasksRequest(tasks=[spec("n")], block_claimed_task=True),
            invalid,
            "INVALID_ARGUMENT",
            "block_claimed_task",
        ),
        (pb.ProposeTasksRequest(tasks=[spec("n")], task_id="a"), invalid, "INVALID_ARGUMENT", "claim_token"),
        (pb.ProposeTasksRequest(tasks=[spec("n")], claim_token=token), invalid, "INVALID_ARGUMENT", "task_id"),
    ]
    before = _board(daemon)
    for request, code, reason, field in cases:
        found = assert_status(rpc_error(ann.teammate.ProposeTasks, request), code, reason=reason)
        fields = [v.field for v in found["bad_request"].field_violations] if "bad_request" in found else []
        assert field in fields or field in str(found["error_info"].metadata), (field, found)
    # Without a live claim: a released one, another teammate's (the token is what is wrong);
    # a task not on the board.
    for request, who, code, reason, field in (
        (
            pb.ProposeTasksRequest(tasks=[spec("n")], task_id="b", claim_token=held["b"].claim_token),
            ann,
            grpc.StatusCode.FAILED_PRECONDITION,
            "CLAIM_TOKEN_MISMATCH",
            "claim_token",
        ),
        (
            pb.ProposeTasksRequest(
                tasks=[spec("n")], task_id="b", claim_token=held["b"].claim_token, block_claimed_task=True
            ),
            ann,
            grpc.StatusCode.FAILED_PRECONDITION,
            "CLAIM_TOKEN_MISMATCH",
            "claim_token",
        ),
        (
            pb.ProposeTasksRequest(tasks=[spec("n")], task_id="a", claim_token=token, block_claimed_task=True),
            bob,
            grpc.StatusCode.FAILED_PRECONDITION,
            "CLAIM_TOKEN_MISMATCH",
            "claim_token",
        ),
        (
            pb.ProposeTasksRequest(tasks=[spec("n")], task_id="nope", claim_token=token, block_claimed_task=True),
            ann,
            grpc.StatusCode.NOT_FOUND,
            "TASK_NOT_FOUND",
            "task_id",
        ),
    ):
        found = assert_status(rpc_error(who.teammate.ProposeTasks, request), code, reason=reason)
        assert found["error_info"].metadata["field"] == field, (request, found)
    assert _board(daemon) == before
    assert _task(daemon, "a").owner == "ann", "the claim is still live"
    stream.cancel()


def test_over_a_thousand_waiting_proposals_is_failed_precondition(daemon):
    ann, bob = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    for start in range(0, 1000, 100):
        ann.teammate.ProposeTasks(pb.ProposeTasksRequest(tasks=[spec(f"p{i}") for i in range(start, start + 100)]))
    before = _board(daemon)
    error = rpc_error(ann.teammate.ProposeTasks, pb.ProposeTasksRequest(tasks=[spec("one-more")]))
    found = assert_status(error, grpc.StatusCode.FAILED_PRECONDITION, reason="FAILED_PRECONDITION")
    assert found["error_info"].metadata["field"] == "tasks"
    assert "1000 proposed tasks waiting" in error.details()
    assert _board(daemon) == before
    assert bob.teammate.ProposeTasks(pb.ProposeTasksRequest(tasks=[spec("theirs")])).tasks[0].id == "theirs"
    # Deciding some makes room again.
    daemon.lead.lead.DecideProposals(pb.DecideProposalsRequest(task_ids=["p0"], approve=False))
    assert ann.teammate.ProposeTasks(pb.ProposeTasksRequest(tasks=[spec("one-more")])).tasks[0].id == "one-more"


def test_the_session_op_refuses_as_the_unary_call_and_the_stream_goes_on(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"))
    stream = _open(ann, "session")
    held = _next(stream, "claim")
    before = _board(daemon)
    refused = stream.op(
        propose=pb.ProposeTasksRequest(tasks=[spec("n", priority=1)], task_id="a", claim_token=held.claim_token)
    )
    assert refused.op_result.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert reason_of(refused.op_result.status) == "INVALID_ARGUMENT"
    daemon.lead.lead.SetTaskCreation(pb.SetTaskCreationRequest(teammate="ann", policy=pb.TASK_CREATION_POLICY_DENY))
    before = {**_board(daemon), "events": None}
    denied = stream.op(propose=pb.ProposeTasksRequest(tasks=[spec("n")], task_id="a", claim_token=held.claim_token))
    assert denied.op_result.status.code == grpc.StatusCode.PERMISSION_DENIED.value[0]
    assert reason_of(denied.op_result.status) == "PERMISSION_DENIED"
    assert {**_board(daemon), "events": None} == before
    daemon.lead.lead.SetTaskCreation(pb.SetTaskCreationRequest(teammate="ann", policy=pb.TASK_CREATION_POLICY_ALLOW))
    result = stream.op(propose=pb.ProposeTasksRequest(tasks=[spec("n")], task_id="a", claim_token=held.claim_token))
    assert result.op_result.status.code == grpc.StatusCode.OK.value[0]
    assert [t.state for t in result.op_result.proposed_tasks] == [pb.TASK_STATE_PENDING]
    assert not result.op_result.HasField("task"), "no split: the claim goes on"
    assert _task(daemon, "a").owner == "ann"
    stream.cancel()


def test_the_lead_calls_refuse_bad_input_and_a_teammate_may_not_call_them(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"), spec("b", "a"), spec("c", "b"), spec("held"))
    ann.teammate.ProposeTasks(pb.ProposeTasksRequest(tasks=[spec("p")]))
    stream = _open(ann, "idle")
    assert _next(stream, "claim").task.id == "a"
    lead = daemon.lead.lead
    before = _board(daemon)
    decide = pb.DecideProposalsRequest
    depend = pb.AddDependenciesRequest
    creation = pb.SetTaskCreationRequest
    cases = [
        (lead.DecideProposals, decide(task_ids=["nope"], approve=True), grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),
        (lead.DecideProposals, decide(task_ids=["p", "b"], approve=True), grpc.StatusCode.FAILED_PRECONDITION, None),
        (lead.DecideProposals, decide(task_ids=[], approve=True), grpc.StatusCode.INVALID_ARGUMENT, None),
        (
            lead.DecideProposals,
            decide(task_ids=["p"], feedback="x" * (64 * 1024 + 1)),
            grpc.StatusCode.INVALID_ARGUMENT,
            None,
        ),
        (lead.AddDependencies, depend(task_id="b", depends_on=["nope"]), grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),
        (lead.AddDependencies, depend(task_id="nope", depends_on=["b"]), grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND"),
        (lead.AddDependencies, depend(task_id="b", depends_on=[]), grpc.StatusCode.INVALID_ARGUMENT, None),
        (lead.AddDependencies, depend(task_id="a", depends_on=["held"]), grpc.StatusCode.FAILED_PRECONDITION, None),
        (lead.AddDependencies, depend(task_id="b", depends_on=["b"]), grpc.StatusCode.INVALID_ARGUMENT, None),
        (lead.SetTaskCreation, creation(teammate="ann"), grpc.StatusCode.INVALID_ARGUMENT, None),
        (
            lead.SetTaskCreation,
            creation(teammate="nobody", policy=pb.TASK_CREATION_POLICY_ALLOW),
            grpc.StatusCode.NOT_FOUND,
            None,
        ),
    ]
    for call, request, code, reason in cases:
        assert_status(rpc_error(call, request), code, reason=reason)
    # A cycle is refused naming it, on the field.
    error = rpc_error(lead.AddDependencies, depend(task_id="b", depends_on=["c"]))
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field="depends_on")
    assert "dependency cycle: b → c → b" in error.details()
    daemon.create_tasks(spec("x"), spec("y", "x"), spec("z", "y"))
    with_more = _board(daemon)
    error = rpc_error(lead.AddDependencies, depend(task_id="x", depends_on=["z"]))
    assert "dependency cycle: x → z → y → x" in error.details()
    assert _board(daemon) == with_more
    assert before["deps"] == with_more["deps"][: len(before["deps"])]
    # A teammate's credential may call none of them.
    for call, request in (
        (ann.lead.DecideProposals, decide(task_ids=["p"], approve=True)),
        (ann.lead.AddDependencies, depend(task_id="b", depends_on=["p"])),
        (ann.lead.SetTaskCreation, creation(teammate="ann", policy=pb.TASK_CREATION_POLICY_ALLOW)),
    ):
        assert_status(rpc_error(call, request), grpc.StatusCode.PERMISSION_DENIED, reason="PERMISSION_DENIED")
    assert _board(daemon) == with_more
    stream.cancel()


def test_the_lead_calls_retried_with_a_request_id_answer_as_before(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"), spec("b"))
    ann.teammate.ProposeTasks(pb.ProposeTasksRequest(tasks=[spec("p"), spec("q")]))
    lead = daemon.lead.lead
    calls = [
        (lead.DecideProposals, pb.DecideProposalsRequest(task_ids=["p"], approve=True, request_id="decide-1")),
        (lead.DecideProposals, pb.DecideProposalsRequest(task_ids=["q"], approve=False, request_id="decide-2")),
        (lead.AddDependencies, pb.AddDependenciesRequest(task_id="a", depends_on=["b"], request_id="depend-1")),
        (
            lead.SetTaskCreation,
            pb.SetTaskCreationRequest(teammate="ann", policy=pb.TASK_CREATION_POLICY_ALLOW, request_id="policy-1"),
        ),
    ]
    for call, request in calls:
        first = call(request)
        board = _board(daemon)
        assert call(request) == first, request
        assert _board(daemon) == board, "answered from the record, nothing written"
    # The same request ids with other requests are refused.
    error = rpc_error(
        lead.DecideProposals, pb.DecideProposalsRequest(task_ids=["a"], approve=True, request_id="decide-1")
    )
    assert error.code() in (
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.ALREADY_EXISTS,
    )


def _stored_tasks(daemon) -> dict[str, pb.Task]:
    """The board's tasks as stored: less what they wait for (who is online is not stored)."""
    tasks = {}
    for task in daemon.all_tasks():
        task.ClearField("waiting_for")
        tasks[task.id] = task
    return tasks


def test_policies_proposals_a_split_and_an_unacknowledged_decision_survive_a_restart(corrald):
    """Killed after a split was rejected and before its proposer acknowledged the decision:
    the restarted daemon has every policy, proposal and outcome, sends the decision again
    ahead of any claim, and the split task's next claim says why, on the same attempt."""
    first = corrald()
    ann, bob = first.add_teammate("ann"), first.add_teammate("bob")
    lead = first.lead.lead
    lead.SetTaskCreation(pb.SetTaskCreationRequest(teammate="*", policy=pb.TASK_CREATION_POLICY_ALLOW))
    lead.SetTaskCreation(pb.SetTaskCreationRequest(teammate="ann", policy=pb.TASK_CREATION_POLICY_PROPOSE))
    first.create_tasks(spec("big", priority=5, max_attempts=1))
    stream = _open(ann, "idle")
    held = _next(stream, "claim")
    split = pb.ProposeTasksRequest(
        tasks=[spec("prep", priority=5)], task_id="big", claim_token=held.claim_token, block_claimed_task=True
    )
    _propose(ann, stream, split)
    ann.teammate.ProposeTasks(pb.ProposeTasksRequest(tasks=[spec("later")]))
    lead.DecideProposals(pb.DecideProposalsRequest(task_ids=["prep"], approve=False, feedback="not needed"))
    notice = _next(stream, "proposals_decided")  # not acknowledged
    tasks_before = _stored_tasks(first)
    first.kill()
    stream.cancel()

    after = corrald(first.state_dir)
    assert _stored_tasks(after) == tasks_before
    later, prep, big = (after.get_task(i) for i in ("later", "prep", "big"))
    assert (later.state, later.proposed_by, later.discovered_from) == (pb.TASK_STATE_PROPOSED, "ann", "")
    assert (prep.state, prep.error, prep.discovered_from) == (
        pb.TASK_STATE_CANCELED,
        "proposal rejected: not needed",
        "big",
    )
    assert (big.state, list(big.depends_on)) == (pb.TASK_STATE_PENDING, [])
    assert (after.teammate("ann").task_creation, after.teammate("bob").task_creation) == (
        pb.TASK_CREATION_POLICY_PROPOSE,
        pb.TASK_CREATION_POLICY_ALLOW,
    ), "its own policy, and the '*' default"
    bob_again = after.client(bob.token, "bob")
    (added,) = bob_again.teammate.ProposeTasks(pb.ProposeTasksRequest(tasks=[spec("bobs")])).tasks
    assert added.state == pb.TASK_STATE_PENDING, "the '*' default still lets bob's in"

    ann_again = after.client(ann.token, "ann")
    resumed = _open(ann_again, "session")
    again = _next(resumed, "proposals_decided")
    assert (again.seq, list(again.task_ids), again.approve, again.feedback) == (
        notice.seq,
        ["prep"],
        False,
        "not needed",
    )
    _ack(ann_again, resumed, again.seq)
    claim = _next(resumed, "claim")
    assert claim.task.id == "big" and claim.attempt == held.attempt, "a split uses no attempt, restart or not"
    assert claim.previous_attempt.outcome == pb.ATTEMPT_OUTCOME_SPLIT
    assert claim.previous_attempt.error == "split rejected: proposal rejected: not needed"
    _complete(ann_again, resumed, claim, b"done")
    outcomes = [a.outcome for a in after.lead.board.GetTask(pb.GetTaskRequest(task_id="big")).attempts]
    assert outcomes == [pb.ATTEMPT_OUTCOME_SPLIT, pb.ATTEMPT_OUTCOME_COMPLETED]
    resumed.cancel()
