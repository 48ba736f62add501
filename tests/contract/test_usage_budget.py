"""Usage and budgets through the generated stubs: usage on CompleteTask, FailTask and
RenewLease (unary and Session ops) is summed on GetTask, ListTeammates, GetStats,
Watch and /metrics; SetBudget closes the gate before the next claim (the
completion's handoff included), budget_exhausted reaches the stream and Watch,
and raising the budget reopens it; bad input writes nothing; a restart keeps it all."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2

from corral.v1 import corral_pb2 as pb

from .wire import assert_status, rpc_error, spec

pytestmark = pytest.mark.timeout(60)


def _usage(input_tokens: int = 0, output_tokens: int = 0, cost_micros: int = 0, model: str = "") -> pb.Usage:
    return pb.Usage(input_tokens=input_tokens, output_tokens=output_tokens, cost_micros=cost_micros, model=model)


def _complete(claim: pb.Claim, usage: pb.Usage | None = None) -> pb.CompleteTaskRequest:
    return pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, result=b"ok", usage=usage)


def _fail(claim: pb.Claim, usage: pb.Usage | None = None) -> pb.FailTaskRequest:
    return pb.FailTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, error="no", usage=usage)


def _renew(claim: pb.Claim, usage: pb.Usage | None = None) -> pb.RenewLeaseRequest:
    return pb.RenewLeaseRequest(task_id=claim.task.id, claim_token=claim.claim_token, usage=usage)


def _set_budget(daemon, teammate: str, cost: int = 0, tokens: int = 0) -> pb.SetBudgetResponse:
    return daemon.lead.lead.SetBudget(pb.SetBudgetRequest(teammate=teammate, max_cost_micros=cost, max_tokens=tokens))


def test_unary_usage_is_summed_per_task_teammate_and_board(daemon):
    daemon.create_tasks(spec("a"), spec("b", max_attempts=1))
    ann = daemon.add_teammate("ann")
    idle = ann.idle(slots=2)
    first, second = idle.next_event("claim"), idle.next_event("claim")
    ann.teammate.RenewLease(_renew(first, _usage(10, 2, 30, "small")))
    done = ann.teammate.CompleteTask(_complete(first, _usage(5, 1, 20))).task
    assert done.usage == _usage(15, 3, 50, "small")
    failed = ann.teammate.FailTask(_fail(second, _usage(1, 1, 1, "big"))).task
    assert failed.usage == _usage(1, 1, 1, "big")
    assert daemon.get_task("a").usage == _usage(15, 3, 50, "small")
    assert daemon.teammate("ann").usage == _usage(16, 4, 51, "big")
    assert daemon.teammate("ann").budget == pb.Budget()
    assert daemon.stats().usage == _usage(16, 4, 51)
    idle.cancel()


def test_session_ops_carry_usage(daemon):
    daemon.create_tasks(spec("a"), spec("b", max_attempts=1))
    bob = daemon.add_teammate("bob")
    session = bob.session()
    claim = session.next_event("claim")
    assert session.op(renew=_renew(claim, _usage(3, 4, 5, "m"))).op_result.status.code == code_pb2.OK
    done = session.op(complete=_complete(claim, _usage(1, 0, 1)))
    assert done.op_result.task.usage == _usage(4, 4, 6, "m")
    claim = done.claim if done.WhichOneof("event") == "claim" else session.next_event("claim")
    session.op(fail=_fail(claim, _usage(cost_micros=10)))
    assert daemon.get_task("b").usage == _usage(cost_micros=10)
    assert daemon.teammate("bob").usage == _usage(4, 4, 16, "m")
    session.cancel()


def test_a_spent_budget_closes_the_gate_on_the_idle_stream_and_watch_hears_it(daemon):
    daemon.create_tasks(spec("a"), spec("b"))
    ann = daemon.add_teammate("ann")
    assert _set_budget(daemon, "ann", cost=100).budget == pb.Budget(max_cost_micros=100)
    assert daemon.teammate("ann").budget == pb.Budget(max_cost_micros=100)
    watch = daemon.watch(0)
    idle = ann.idle()
    claim = idle.next_event("claim")
    ann.teammate.CompleteTask(_complete(claim, _usage(cost_micros=100)))
    notice = idle.next_event("budget_exhausted")
    assert notice.teammate == "ann" and notice.spent.cost_micros == 100
    assert notice.budget == pb.Budget(max_cost_micros=100)
    event = watch.next_matching(lambda r: r.WhichOneof("event") == "budget_exhausted", what="budget_exhausted")
    assert event.budget_exhausted == notice
    assert idle.expect_quiet(0.5, then=lambda: daemon.get_task("b")).state == pb.TASK_STATE_PENDING  # no claim of b
    _set_budget(daemon, "ann", cost=200)  # raised: the stream is woken and claims
    assert idle.next_event("claim").task.id == "b"
    watch.cancel()
    idle.cancel()


def test_the_session_completion_that_spends_the_budget_hands_off_nothing(daemon):
    daemon.create_tasks(spec("a"), spec("b"))
    bob = daemon.add_teammate("bob")
    _set_budget(daemon, "*", tokens=10)
    session = bob.session()
    claim = session.next_event("claim")
    done = session.op(complete=_complete(claim, _usage(input_tokens=7, output_tokens=3)))
    assert done.op_result.status.code == code_pb2.OK
    assert done.WhichOneof("event") != "claim"
    if done.WhichOneof("event") != "budget_exhausted":
        session.next_event("budget_exhausted")
    assert session.expect_quiet(0.5, then=lambda: daemon.get_task("b")).state == pb.TASK_STATE_PENDING
    _set_budget(daemon, "bob", tokens=11)  # its own budget beats the default
    assert session.next_event("claim").task.id == "b"
    session.cancel()


MOST = 2**63 - 1  # the largest int64: Usage's fields and the stores' columns


def test_sums_near_the_largest_int64_stop_there_and_the_gate_still_closes_and_opens(daemon):
    """input_tokens + output_tokens past int64 would overflow the gate's SQL (PostgreSQL
    refuses it): the completion, its handoff and every SetBudget after it must still work."""
    daemon.create_tasks(spec("a"), spec("b"))
    bob = daemon.add_teammate("bob")
    _set_budget(daemon, "*", tokens=1000)
    session = bob.session()
    claim = session.next_event("claim")
    assert session.op(renew=_renew(claim, _usage(MOST - 1, MOST - 1))).op_result.status.code == code_pb2.OK
    done = session.op(complete=_complete(claim, _usage(MOST, MOST, MOST)))
    assert done.op_result.status.code == code_pb2.OK, done.op_result.status
    assert done.WhichOneof("event") != "claim"  # the gate is closed: no handoff of b
    assert done.op_result.task.state == pb.TASK_STATE_COMPLETED
    assert done.op_result.task.usage == _usage(MOST, MOST, MOST)
    assert daemon.teammate("bob").usage == _usage(MOST, MOST, MOST)
    assert daemon.stats().usage == _usage(MOST, MOST, MOST)
    daemon.add_teammate("ann")
    for name, tokens in (("ann", 5), ("*", 2000), ("bob", MOST)):  # MOST: still spent, the sum stops there
        assert _set_budget(daemon, name, tokens=tokens).budget == pb.Budget(max_tokens=tokens)
    assert daemon.get_task("b").state == pb.TASK_STATE_PENDING
    _set_budget(daemon, "bob")  # no limit of its own: the gate opens
    assert session.next_matching(lambda r: r.WhichOneof("event") == "claim", what="a claim").claim.task.id == "b"
    session.cancel()


def test_held_claims_stay_when_the_budget_is_spent(daemon):
    daemon.create_tasks(spec("a"), spec("b"), spec("c"))
    ann = daemon.add_teammate("ann")
    _set_budget(daemon, "ann", cost=5)
    idle = ann.idle(slots=3)
    first, second = idle.next_event("claim"), idle.next_event("claim")
    third = idle.next_event("claim")
    ann.teammate.RenewLease(_renew(first, _usage(cost_micros=5)))
    idle.next_event("budget_exhausted")
    for held in (second, third):
        ann.renew(held)
        ann.complete(held)
    ann.complete(first)
    assert {t.id: t.state for t in daemon.all_tasks()} == dict.fromkeys("abc", pb.TASK_STATE_COMPLETED)
    idle.cancel()


BAD_USAGE = [
    (_usage(input_tokens=-1), "usage.input_tokens"),
    (_usage(output_tokens=-1), "usage.output_tokens"),
    (_usage(cost_micros=-1), "usage.cost_micros"),
    (_usage(model="m" * 201), "usage.model"),
]


@pytest.mark.parametrize(("usage", "field"), BAD_USAGE)
def test_bad_usage_on_unary_calls_is_refused_and_nothing_is_written(daemon, usage, field):
    daemon.create_tasks(spec("a"))
    ann = daemon.add_teammate("ann")
    idle = ann.idle()
    claim = idle.next_event("claim")
    before = daemon.get_task("a")
    for call, request in (
        (ann.teammate.CompleteTask, _complete(claim, usage)),
        (ann.teammate.FailTask, _fail(claim, usage)),
        (ann.teammate.RenewLease, _renew(claim, usage)),
    ):
        assert_status(rpc_error(call, request), grpc.StatusCode.INVALID_ARGUMENT, field=field)
    assert daemon.get_task("a") == before
    assert daemon.teammate("ann").usage == pb.Usage()
    idle.cancel()


@pytest.mark.parametrize(("usage", "field"), BAD_USAGE)
def test_bad_usage_on_session_ops_is_refused_and_nothing_is_written(daemon, usage, field):
    daemon.create_tasks(spec("a"))
    bob = daemon.add_teammate("bob")
    session = bob.session()
    claim = session.next_event("claim")
    before = daemon.get_task("a")
    for op in ({"complete": _complete(claim, usage)}, {"fail": _fail(claim, usage)}, {"renew": _renew(claim, usage)}):
        status = session.op(**op).op_result.status
        assert status.code == code_pb2.INVALID_ARGUMENT
        assert _violations(status) == [field]
    assert daemon.get_task("a") == before
    session.cancel()


def _violations(status) -> list[str]:
    fields = []
    for detail in status.details:
        if detail.Is(error_details_pb2.BadRequest.DESCRIPTOR):
            bad = error_details_pb2.BadRequest()
            detail.Unpack(bad)
            fields.extend(violation.field for violation in bad.field_violations)
    return fields


def test_set_budget_refuses_bad_input_and_teammates(daemon):
    ann = daemon.add_teammate("ann")
    error = rpc_error(daemon.lead.lead.SetBudget, pb.SetBudgetRequest(teammate="nobody", max_cost_micros=1))
    assert_status(error, grpc.StatusCode.NOT_FOUND)
    for request, field in (
        (pb.SetBudgetRequest(teammate="ann", max_cost_micros=-1), "max_cost_micros"),
        (pb.SetBudgetRequest(teammate="*", max_tokens=-1), "max_tokens"),
        (pb.SetBudgetRequest(max_tokens=1), "teammate"),
    ):
        assert_status(rpc_error(daemon.lead.lead.SetBudget, request), grpc.StatusCode.INVALID_ARGUMENT, field=field)
    error = rpc_error(ann.lead.SetBudget, pb.SetBudgetRequest(teammate="ann", max_cost_micros=1_000_000))
    assert_status(error, grpc.StatusCode.PERMISSION_DENIED)
    assert daemon.teammate("ann").budget == pb.Budget()


def test_sums_and_budgets_survive_a_restart_and_show_in_metrics(corrald):
    first = corrald(extra_args=["--metrics", "127.0.0.1:0"])
    first.create_tasks(spec("a"), spec("b"))
    ann = first.add_teammate("ann")
    _set_budget(first, "ann", cost=50)
    _set_budget(first, "*", tokens=1000)
    idle = ann.idle()
    claim = idle.next_event("claim")
    ann.teammate.CompleteTask(_complete(claim, _usage(20, 10, 50, "m")))
    idle.next_event("budget_exhausted")
    idle.cancel()
    first.kill()
    second = corrald(first.state_dir, extra_args=["--metrics", "127.0.0.1:0"])
    assert second.get_task("a").usage == _usage(20, 10, 50, "m")
    mate = second.teammate("ann")
    assert (mate.usage, mate.budget) == (_usage(20, 10, 50, "m"), pb.Budget(max_cost_micros=50))
    assert second.stats().usage == _usage(20, 10, 50)
    second.add_teammate("bob")
    assert second.teammate("bob").budget == pb.Budget(max_tokens=1000)
    ann = second.client(ann.token, "ann")
    idle = ann.idle()
    # Still spent after the restart: the new stream is told so first, and gets no claim of b.
    notice = idle.next_event("budget_exhausted")
    assert (notice.spent, notice.budget) == (_usage(20, 10, 50, "m"), pb.Budget(max_cost_micros=50))
    # Raised, the budget lets b be claimed: the claim is the next item.
    assert idle.expect_quiet(0.5, then=lambda: _set_budget(second, "ann", cost=100), arrives="claim").task.id == "b"
    idle.cancel()
    samples = second.metrics()
    assert samples["corral_usage_input_tokens_total"] == 20
    assert samples["corral_usage_output_tokens_total"] == 10
    assert samples["corral_usage_cost_micros_total"] == 50
