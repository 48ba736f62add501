"""Discovered work through the SDK (both flavours; claims on both transports): a holder
proposes tasks (`claim.propose_tasks`), PROPOSED until the Lead decides
(`decide_proposals`; the proposer's `idle()` yields `ProposalsDecided` before its next
claim), or splits its task on them (`block=True`: the claim ends SPLIT and the task comes
back with their results); the Lead sets each teammate's policy (`set_task_creation`) and
adds dependencies live (`add_dependencies`, refusing a cycle by name)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import corral
import corral.aio
from tests.support import FAST_POLL, watch_until

LONG_LEASE = datetime.timedelta(seconds=30)
State = corral.TaskState
Outcome = corral.AttemptOutcome
Policy = corral.TaskCreationPolicy
transports = pytest.mark.usefixtures("transport")


def _next_claim(events: Any) -> corral.Claim:
    item = next(events)
    assert isinstance(item, corral.Claim), item
    return item


@transports
@pytest.mark.timeout(60)
def test_proposed_tasks_wait_for_the_lead_and_the_decision_comes_before_the_next_claim(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", priority=5, lease_duration=LONG_LEASE)])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        events = ann.idle(max_idle_polls=1000, poll_interval=FAST_POLL)
        claim = _next_claim(events)
        with claim.keepalive():
            ids = claim.propose_tasks([corral.TaskSpec("p1", priority=5), corral.TaskSpec("p2", depends_on=("p1",))])
            assert ids == ["p1", "p2"]
            assert not claim.split and claim in ann.held_claims(), "a proposal alone leaves the claim held"
            p1 = lead.get_task("p1")
            assert (p1.state, p1.proposed_by, p1.discovered_from, p1.owner) == (State.PROPOSED, "ann", "t", "")
            assert [t.id for t in lead.list_tasks(states=[State.PROPOSED])] == ["p1", "p2"]
            assert lead.get_stats().active_tasks == 3, "proposed tasks are unfinished"
            assert claim.complete("done").state is State.COMPLETED

        proposed = watch_until(lead, lambda e: isinstance(e, corral.TasksProposed))
        assert proposed == corral.TasksProposed(
            proposed.seq, proposed.time, "ann", ("p1", "p2"), "t", needs_decision=True, split=False
        )
        decided = lead.decide_proposals(["p1", "p2"], True)
        assert [(t.id, t.state) for t in decided] == [("p1", State.PENDING), ("p2", State.PENDING)]

        notice = next(events)  # before any claim of what it approved
        assert isinstance(notice, corral.ProposalsDecided)
        assert (notice.task_ids, notice.approve, notice.feedback) == (("p1", "p2"), True, "")
        for task_id in ("p1", "p2"):
            claim = _next_claim(events)
            assert claim.task.id == task_id and claim.task.discovered_from == "t"
            claim.complete(task_id)
        events.close()
    event = watch_until(lead, lambda e: isinstance(e, corral.ProposalsDecidedEvent))
    assert event == corral.ProposalsDecidedEvent(event.seq, event.time, ("p1", "p2"), True, "")


def _splitting_handler(flavour: str) -> Callable[[corral.Task], Any]:
    """A handler whose task "t" needs "prep" first: it splits on it, then builds on its result."""

    def decide(claim: Any, task: corral.Task) -> Any:
        if task.id == "prep":
            return None, "prepared"
        if "prep" not in claim.dependency_results:
            return [corral.TaskSpec("prep", title="prepare")], "ignored: the task was split"
        previous = claim.previous_attempt
        return None, f"built on {claim.dependency_results['prep'].decode()} after {previous.outcome.name}"

    if flavour == "sync":

        def handle(task: corral.Task) -> str:
            claim = corral.current_claim()
            specs, result = decide(claim, task)
            if specs:
                claim.propose_tasks(specs, block=True)
                assert claim.split and not claim.ended
            return str(result)

        return handle

    async def handle_async(task: corral.Task) -> str:
        claim = corral.aio.current_claim()
        specs, result = decide(claim, task)
        if specs:
            await claim.propose_tasks(specs, block=True)
            assert claim.split and not claim.ended
        return str(result)

    return handle_async


@transports
@pytest.mark.timeout(60)
@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_a_handler_splits_its_task_and_gets_it_back_with_the_new_dependency_result(
    lead: corral.Lead, flavour: str
) -> None:
    # One attempt only: a split must use none of it.
    lead.create_tasks([corral.TaskSpec("t", max_attempts=1, lease_duration=LONG_LEASE)])
    new = lead.add_teammate("ann")
    summaries: list[corral.RunSummary] = []
    handler = _splitting_handler(flavour)
    options: dict[str, Any] = {
        "address": lead.address,
        "token": new.token,
        "max_idle_polls": 1000,
        "poll_interval": FAST_POLL,
    }

    def run() -> None:
        if flavour == "sync":
            summaries.append(corral.run_teammate(handler, **options))
        else:
            summaries.append(asyncio.run(corral.aio.run_teammate(handler, **options)))

    runner = threading.Thread(target=run, daemon=True)
    runner.start()

    proposed = watch_until(lead, lambda e: isinstance(e, corral.TasksProposed), timeout=20)
    assert isinstance(proposed, corral.TasksProposed) and (proposed.split, proposed.needs_decision) == (True, True)
    split = lead.get_task("t")
    assert (split.state, split.depends_on, split.attempts_used) == (State.PENDING, ("prep",), 0)
    assert [a.outcome for a in split.attempts] == [Outcome.SPLIT]
    lead.decide_proposals(["prep"], approve=True)
    done = lead.wait_until_done(timeout=30)
    assert set(done.completed_ids) == {"t", "prep"}

    task = lead.get_task("t")
    assert task.result == b"built on prepared after SPLIT" and task.attempts_used == 1
    assert [a.outcome for a in task.attempts] == [Outcome.SPLIT, Outcome.COMPLETED]
    lead.request_shutdown("ann", reason="done")
    runner.join(30)
    assert not runner.is_alive()
    (summary,) = summaries
    assert (summary.completed, summary.split, summary.failed, summary.lost) == (2, 1, 0, 0)


@transports
@pytest.mark.timeout(60)
def test_a_rejected_split_frees_the_task_and_its_next_claim_says_why(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE)])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        events = ann.idle(max_idle_polls=1000, poll_interval=FAST_POLL)
        claim = _next_claim(events)
        with claim.keepalive():
            assert claim.propose_tasks([corral.TaskSpec("prep")], block=True) == ["prep"]
        assert claim.split and claim not in ann.held_claims()
        with pytest.raises(corral.ClaimTokenMismatch):
            claim.complete("too late")  # the split ended the claim
        assert lead.get_task("t").state is State.PENDING

        rejected = lead.decide_proposals(["prep"], False, feedback="not needed")
        assert [(t.id, t.state) for t in rejected] == [("prep", State.CANCELED), ("t", State.PENDING)]
        assert lead.get_task("prep").error == "proposal rejected: not needed"

        notice = next(events)
        assert isinstance(notice, corral.ProposalsDecided)
        assert (notice.task_ids, notice.approve, notice.feedback) == (("prep",), False, "not needed")
        again = _next_claim(events)
        assert again.task.id == "t" and again.task.depends_on == ()
        previous = again.previous_attempt
        assert previous is not None and previous.outcome is Outcome.SPLIT
        assert previous.error == "split rejected: proposal rejected: not needed"
        again.complete("done without it")
        events.close()


@transports
@pytest.mark.timeout(60)
def test_a_refused_proposal_raises_and_leaves_the_claim_held(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", priority=1, lease_duration=LONG_LEASE), corral.TaskSpec("taken")])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        events = ann.idle(max_idle_polls=1000, poll_interval=FAST_POLL)
        claim = _next_claim(events)
        with pytest.raises(corral.InvalidArgument) as above:
            claim.propose_tasks([corral.TaskSpec("urgent", priority=2)], block=True)
        assert [v.field for v in above.value.field_violations] == ["tasks[0].priority"]
        with pytest.raises(corral.AlreadyExists):
            claim.propose_tasks([corral.TaskSpec("taken")])
        with pytest.raises(corral.InvalidArgument, match="1 to 100 tasks"):
            claim.propose_tasks([corral.TaskSpec(f"p{n}") for n in range(101)])  # refused before any call
        with pytest.raises(corral.InvalidArgument, match="1 to 100 tasks"):
            claim.propose_tasks([])
        assert not claim.split and claim in ann.held_claims()
        with pytest.raises(corral.NotFound):
            lead.get_task("urgent")

        lead.set_task_creation("ann", Policy.DENY)
        with pytest.raises(corral.PermissionDenied):
            claim.propose_tasks([corral.TaskSpec("denied")], block=True)
        with pytest.raises(corral.NotFound):
            lead.get_task("denied")
        assert claim.complete("done").state is State.COMPLETED, "the refused split left the claim live"
        events.close()


@transports
@pytest.mark.timeout(60)
def test_the_policy_lets_proposals_in_or_refuses_them(lead: corral.Lead) -> None:
    ann, bob = lead.add_teammate("ann"), lead.add_teammate("bob")
    assert lead.set_task_creation("ann", Policy.DENY) is Policy.DENY
    assert lead.set_task_creation("*", Policy.ALLOW) is Policy.ALLOW
    policies = {mate.name: mate.task_creation for mate in lead.list_teammates()}
    assert policies == {"ann": Policy.DENY, "bob": Policy.ALLOW}, "bob has no policy of his own: the '*' default"
    with pytest.raises(corral.NotFound):
        lead.set_task_creation("nobody", Policy.ALLOW)
    with pytest.raises(corral.InvalidArgument):
        lead.set_task_creation("ann", "allow")  # type: ignore[arg-type]

    with corral.Teammate.connect(lead.address, ann.token) as teammate:
        with pytest.raises(corral.PermissionDenied):
            teammate.propose_tasks([corral.TaskSpec("a1")])
    with corral.Teammate.connect(lead.address, bob.token) as teammate:
        assert teammate.propose_tasks([corral.TaskSpec("b1")]) == ["b1"]
    b1 = lead.get_task("b1")
    assert (b1.state, b1.proposed_by, b1.discovered_from) == (State.PENDING, "bob", "")
    event = watch_until(lead, lambda e: isinstance(e, corral.TasksProposed))
    assert isinstance(event, corral.TasksProposed)
    assert (event.teammate, event.task_ids, event.needs_decision) == ("bob", ("b1",), False)
    with pytest.raises(corral.NotFound):
        lead.get_task("a1")


@pytest.mark.timeout(60)
def test_the_lead_adds_dependencies_live_and_a_cycle_is_refused_by_name(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("a"), corral.TaskSpec("b", depends_on=("a",)), corral.TaskSpec("c")])
    assert lead.add_dependencies("a", ["c"]).depends_on == ("c",)
    assert lead.add_dependencies("a", ["c"]).depends_on == ("c",), "an edge it has is left alone"
    with pytest.raises(corral.InvalidArgument, match="dependency cycle: c → b → a → c") as cycle:
        lead.add_dependencies("c", ["b"])
    assert [v.field for v in cycle.value.field_violations] == ["depends_on"]
    with pytest.raises(corral.NotFound):
        lead.add_dependencies("a", ["nope"])
    lead.cancel_tasks(["c"])
    with pytest.raises(corral.FailedPrecondition):
        lead.add_dependencies("c", ["b"])
    with pytest.raises(corral.NotFound):
        lead.decide_proposals(["nope"], True)
    with pytest.raises(corral.FailedPrecondition):
        lead.decide_proposals(["b"], True)  # not PROPOSED
    with pytest.raises(corral.InvalidArgument):
        lead.decide_proposals(["b"], False, feedback="x" * (64 * 1024 + 1))  # refused before any call


@pytest.mark.timeout(60)
def test_aio_lead_and_teammate_propose_decide_and_depend(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            await lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE)])
            new = await lead.add_teammate("ann")
            async with await corral.aio.Teammate.connect(lead.address, new.token) as ann:
                async with contextlib.aclosing(ann.idle(max_idle_polls=1000, poll_interval=FAST_POLL)) as events:
                    claim = await anext(events)
                    assert isinstance(claim, corral.aio.Claim)
                    assert await claim.propose_tasks([corral.TaskSpec("p")]) == ["p"]
                    assert await ann.propose_tasks([corral.TaskSpec("q")]) == ["q"]
                    assert (await lead.add_dependencies("q", ["p"])).depends_on == ("p",)
                    assert await lead.set_task_creation("ann", Policy.ALLOW) is Policy.ALLOW
                    decided = await lead.decide_proposals(["p", "q"], True)
                    assert [t.state for t in decided] == [State.PENDING, State.PENDING]
                    await claim.complete("done")
                    notice = await anext(events)
                    assert isinstance(notice, corral.ProposalsDecided) and notice.task_ids == ("p", "q")
                    nxt = await anext(events)
                    assert isinstance(nxt, corral.aio.Claim) and nxt.task.id == "p"
                    await nxt.complete("p done")

    asyncio.run(scenario())
