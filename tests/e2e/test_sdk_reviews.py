"""Review and rework through the SDK (both flavours, both transports): a task created with
a `ReviewPolicy` waits IN_REVIEW once completed; a reviewer (`run_teammate(...,
reviewer=)`, or `claim.decide` by hand) or the Lead (`review_task`) approves it
(COMPLETED, dependents get the result) or rejects it (PENDING again: the rework's claim
carries `rejected_result` and the feedback in `previous_attempt`), and the rejection that
reaches `max_rounds` fails it."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import corral
import corral.aio
from tests.support import TeammateThread, task_reached, wait_until, watch_until

# Each test runs on both teammate transports (CORRAL_TRANSPORT=session, =idle).
pytestmark = pytest.mark.usefixtures("transport")

LONG_LEASE = datetime.timedelta(seconds=30)
Outcome = corral.AttemptOutcome


class _Run:
    """`run_teammate` of either flavour in a thread, keeping its summary."""

    def __init__(self, lead: corral.Lead, name: str, flavour: str, handler: Any, **options: Any) -> None:
        new = lead.add_teammate(name, roles=options.pop("roles", ()))
        self.summaries: list[corral.RunSummary] = []
        options = {
            "address": lead.address,
            "token": new.token,
            "max_idle_polls": 10_000,
            "poll_interval": 0.05,
            **options,
        }

        def run() -> None:
            if flavour == "sync":
                self.summaries.append(corral.run_teammate(handler, **options))
            else:
                self.summaries.append(asyncio.run(corral.aio.run_teammate(handler, **options)))

        self._thread = threading.Thread(target=run, name=f"teammate-{name}", daemon=True)
        self._thread.start()

    def result(self, timeout: float = 30) -> corral.RunSummary:
        self._thread.join(timeout)
        assert not self._thread.is_alive()
        (summary,) = self.summaries
        return summary


def _flavoured(flavour: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as a plain function (sync) or a coroutine function (aio), reading the claim
    through the flavour's own `current_claim()`."""
    if flavour == "sync":
        return lambda *args: fn(corral.current_claim(), *args)

    async def run_async(*args: Any) -> Any:
        return fn(corral.aio.current_claim(), *args)

    return run_async


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_a_reviewer_rejects_then_approves_and_the_dependent_gets_the_approved_result(
    lead: corral.Lead, flavour: str
) -> None:
    lead.create_tasks(
        [
            corral.TaskSpec("t", max_attempts=1, required_role="worker", review=corral.ReviewPolicy("reviewer")),
            corral.TaskSpec("after", depends_on=("t",), required_role="worker"),
        ]
    )
    created = lead.get_task("t")
    assert created.review == corral.ReviewPolicy("reviewer", max_rounds=3), "the daemon fills max_rounds in"
    reworks: list[tuple[bytes, corral.Attempt | None]] = []
    reviewed: list[tuple[str, bytes, str, int]] = []

    def work(claim: Any, task: corral.Task) -> str:
        if task.id == "after":
            return "after saw " + claim.dependency_results["t"].decode()
        assert claim.review is None
        reworks.append((claim.rejected_result, claim.previous_attempt))
        if not claim.rejected_result:
            return "draft 1"
        return f"draft 2 ({claim.previous_attempt.feedback})"

    def review(claim: Any, task: corral.Task, result: bytes) -> corral.Verdict:
        assert claim.review is not None and claim.review.result == result
        reviewed.append((task.id, result, claim.review.author, claim.review.round))
        assert task.state is corral.TaskState.IN_REVIEW
        return corral.Reject("add tests") if result == b"draft 1" else corral.Approve()

    ann = _Run(lead, "ann", flavour, _flavoured(flavour, work), roles=("worker",))
    rev = _Run(lead, "rev", flavour, lambda task: "never", roles=("reviewer",), reviewer=_flavoured(flavour, review))
    done = lead.wait_until_done(timeout=40)
    assert done.completed_ids == ("t", "after")

    task = lead.get_task("t")
    assert task.result == b"draft 2 (add tests)" and task.review_rounds == 1
    assert task.attempts_used == 1, "a rework uses no attempt"
    assert lead.get_task("after").result == b"after saw draft 2 (add tests)"
    assert reviewed == [("t", b"draft 1", "ann", 1), ("t", b"draft 2 (add tests)", "ann", 2)]
    assert [(a.owner, a.outcome) for a in task.attempts] == [
        ("ann", Outcome.COMPLETED),
        ("rev", Outcome.REJECTED),
        ("ann", Outcome.COMPLETED),
        ("rev", Outcome.COMPLETED),
    ]
    rejected, approved = task.attempts[1], task.attempts[3]
    assert (rejected.verdict, rejected.feedback) == (corral.Reject("add tests"), "add tests")
    assert approved.verdict == corral.Approve() and task.attempts[0].verdict is None
    (first, _), (rejected_result, previous) = reworks
    assert first == b"" and rejected_result == b"draft 1"
    assert previous is not None and (previous.owner, previous.outcome) == ("rev", Outcome.REJECTED)
    assert previous.feedback == "add tests"

    events: list[corral.ReviewDecided] = []
    for event in lead.watch(0, timeout=10):
        if isinstance(event, corral.ReviewDecided):
            events.append(event)
            if event.approve:
                break
    assert [(e.task_id, e.approve, e.feedback, e.reviewer, e.round) for e in events] == [
        ("t", False, "add tests", "rev", 1),
        ("t", True, "", "rev", 2),
    ]
    for mate in ("ann", "rev"):
        lead.request_shutdown(mate, reason="done")
    assert (ann.result().completed, ann.result().reviewed) == (3, 0)
    assert (rev.result().completed, rev.result().reviewed) == (0, 2)


@pytest.mark.timeout(60)
def test_the_author_never_gets_its_own_review(lead: corral.Lead) -> None:
    ids = [f"t{n}" for n in range(6)]
    lead.create_tasks([corral.TaskSpec(i, review=corral.ReviewPolicy("r")) for i in ids])
    decisions: list[tuple[str, str, str]] = []

    def reviewer_named(name: str) -> Callable[[corral.Task, bytes], corral.Verdict]:
        def review(task: corral.Task, result: bytes) -> corral.Verdict:
            item = corral.current_claim().review
            assert item is not None
            decisions.append((task.id, item.author, name))
            return corral.Approve()

        return review

    mates = [
        TeammateThread(
            lead, name, lambda task: "work", roles=("r",), reviewer=reviewer_named(name), max_idle_polls=10_000
        )
        for name in ("ann", "bob")
    ]
    for mate in mates:
        mate.start()
    assert lead.wait_until_done(timeout=40).completed_ids == tuple(ids)
    assert sorted(d[0] for d in decisions) == ids
    assert all(author != reviewer for _, author, reviewer in decisions), decisions
    for task_id in ids:
        work, review = lead.get_task(task_id).attempts
        assert work.owner != review.owner and review.verdict == corral.Approve()
    for mate in mates:
        lead.request_shutdown(mate.name, reason="done")
    assert sum(mate.result().reviewed for mate in mates) == len(ids)


@pytest.mark.timeout(60)
def test_the_lead_reviews_approves_and_rejects_for_rework(lead: corral.Lead) -> None:
    lead.create_tasks(
        [
            corral.TaskSpec("t", lease_duration=LONG_LEASE, review=corral.ReviewPolicy()),
            corral.TaskSpec("plain", lease_duration=LONG_LEASE),
        ]
    )
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        events = ann.idle(slots=2)
        claims = {claim.task.id: claim for claim in (next(events), next(events)) if isinstance(claim, corral.Claim)}
        claim, plain = claims["t"], claims["plain"]
        assert claim.review is None and claim.rejected_result == b""
        with pytest.raises(corral.InvalidArgument) as refused:
            claim.decide(corral.Approve())  # a work claim is completed, not decided
        assert [v.field for v in refused.value.field_violations] == ["verdict"]
        with pytest.raises(corral.InvalidArgument):
            claim.decide("approve")  # type: ignore[arg-type]
        in_review = claim.complete("v1")
        assert (in_review.state, in_review.result, in_review.owner) == (corral.TaskState.IN_REVIEW, b"v1", "")
        assert [t.id for t in lead.list_tasks(states=[corral.TaskState.IN_REVIEW])] == ["t"]
        assert lead.get_stats().count(corral.TaskState.IN_REVIEW) == 1

        # Only a task IN_REVIEW is decided.
        with pytest.raises(corral.FailedPrecondition):
            lead.review_task("plain", corral.Approve())
        with pytest.raises(corral.NotFound):
            lead.review_task("nope", corral.Approve())
        with pytest.raises(corral.InvalidArgument):
            lead.review_task("t", corral.Reject(""))  # refused before any call: Reject needs feedback

        back = lead.review_task("t", corral.Reject("needs a changelog"))
        assert (back.state, back.review_rounds) == (corral.TaskState.PENDING, 1)
        rework = next(events)
        assert isinstance(rework, corral.Claim) and rework.task.id == "t"
        assert rework.rejected_result == b"v1" and rework.review is None
        previous = rework.previous_attempt
        assert previous is not None and (previous.owner, previous.outcome) == ("lead", Outcome.REJECTED)
        assert previous.feedback == "needs a changelog"
        assert rework.complete("v2").state is corral.TaskState.IN_REVIEW
        done = lead.review_task("t", corral.Approve())
        assert (done.state, done.result, done.review_rounds) == (corral.TaskState.COMPLETED, b"v2", 1)
        with pytest.raises(corral.FailedPrecondition):
            lead.review_task("t", corral.Approve())  # decided already
        plain.complete("p")
        events.close()
    outcomes = [(a.owner, a.outcome, a.verdict) for a in lead.get_task("t").attempts]
    assert outcomes == [
        ("ann", Outcome.COMPLETED, None),
        ("lead", Outcome.REJECTED, corral.Reject("needs a changelog")),
        ("ann", Outcome.COMPLETED, None),
        ("lead", Outcome.COMPLETED, corral.Approve()),
    ]
    event = watch_until(lead, lambda e: isinstance(e, corral.ReviewDecided) and e.approve)
    assert (event.reviewer, event.round) == ("lead", 2)


@pytest.mark.timeout(60)
def test_a_held_review_decided_by_the_lead_ends_under_its_reviewer(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE, review=corral.ReviewPolicy("rev"))])
    ann, rev = lead.add_teammate("ann"), lead.add_teammate("rev", roles=("rev",))
    with corral.Teammate.connect(lead.address, ann.token) as author:
        work_events = author.idle()
        work = next(work_events)
        assert isinstance(work, corral.Claim)
        work.complete("v1")
        work_events.close()
    with corral.Teammate.connect(lead.address, rev.token) as reviewer:
        events = reviewer.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim) and claim.review == corral.ReviewItem(b"v1", "ann", 1)
        assert claim.task.state is corral.TaskState.IN_REVIEW
        with pytest.raises(corral.InvalidArgument) as refused:
            claim.complete("a result")  # a review's claim is decided, not completed
        assert [v.field for v in refused.value.field_violations] == ["result"]
        assert lead.review_task("t", corral.Approve()).state is corral.TaskState.COMPLETED
        ended = next(events)
        assert isinstance(ended, corral.ClaimEnded) and ended.reason is corral.ClaimEndReason.REVOKED
        assert claim.ended.is_set()
        events.close()


@pytest.mark.timeout(60)
def test_aio_claim_decide_and_review_task(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            spec = corral.TaskSpec("t", lease_duration=LONG_LEASE, review=corral.ReviewPolicy("rev", max_rounds=5))
            await lead.create_tasks([spec])
            ann, rev = await lead.add_teammate("ann"), await lead.add_teammate("rev", roles=("rev",))
            async with (
                await corral.aio.Teammate.connect(lead.address, ann.token) as author,
                await corral.aio.Teammate.connect(lead.address, rev.token) as reviewer,
                contextlib.aclosing(author.idle()) as work_events,
                contextlib.aclosing(reviewer.idle()) as review_events,
            ):
                work = await anext(work_events)
                assert isinstance(work, corral.aio.Claim)
                assert (await work.complete("v1")).state is corral.TaskState.IN_REVIEW
                claim = await asyncio.wait_for(anext(review_events), 10)
                assert isinstance(claim, corral.aio.Claim) and claim.review == corral.ReviewItem(b"v1", "ann", 1)
                back = await claim.decide(corral.Reject("shorter"))
                assert (back.state, back.review_rounds) == (corral.TaskState.PENDING, 1)
                rework = await asyncio.wait_for(anext(work_events), 10)
                assert isinstance(rework, corral.aio.Claim) and rework.rejected_result == b"v1"
                assert rework.previous_attempt is not None and rework.previous_attempt.feedback == "shorter"
                await rework.complete("v")
                again = await asyncio.wait_for(anext(review_events), 10)
                assert isinstance(again, corral.aio.Claim) and again.review == corral.ReviewItem(b"v", "ann", 2)
                await again.release()  # offered again, to whoever reviews
            listed = [task.id async for task in lead.list_tasks(states=[corral.TaskState.IN_REVIEW])]
            assert listed == ["t"]
            done = await lead.review_task("t", corral.Approve("fine"))
            assert (done.state, done.result) == (corral.TaskState.COMPLETED, b"v")
            assert (await lead.get_task("t")).attempts[-1].verdict == corral.Approve("fine")
            assert (await lead.wait_until_done(timeout=10)).completed_ids == ("t",)

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_a_review_with_no_reviewer_handler_is_released_for_one_that_reviews(
    lead: corral.Lead, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="corral.runner")
    lead.create_tasks([corral.TaskSpec("t", required_role="worker", review=corral.ReviewPolicy("reviewer"))])
    TeammateThread(lead, "ann", lambda task: "v1", roles=("worker",), max_idle_polls=10_000).start()
    lazy = TeammateThread(lead, "lazy", lambda task: "never", roles=("reviewer",), max_idle_polls=10_000).start()

    def released_by_lazy() -> bool:
        return any(a.owner == "lazy" and a.outcome is Outcome.RELEASED for a in lead.get_task("t").attempts)

    wait_until(released_by_lazy, timeout=20, what="lazy to release the review")
    assert lead.get_task("t").state is corral.TaskState.IN_REVIEW
    approve = lambda task, result: corral.Approve()  # noqa: E731
    rev = TeammateThread(lead, "rev", lambda task: "", roles=("reviewer",), reviewer=approve, max_idle_polls=10_000)
    rev.start()
    assert lead.wait_until_done(timeout=30).completed_ids == ("t",)
    task = lead.get_task("t")
    assert task.result == b"v1" and task.attempts[-1].owner == "rev" and task.attempts_used == 1
    for name in ("ann", "lazy", "rev"):
        lead.request_shutdown(name, reason="done")
    assert lazy.result().reviewed == 0 and rev.result().reviewed == 1
    said = [r for r in caplog.records if "has no reviewer=" in r.getMessage()]
    assert len(said) == 1 and "lazy" not in said[0].getMessage(), "said once, however often it is offered"


@pytest.mark.timeout(60)
def test_a_reviewer_that_raises_gives_the_review_back(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", required_role="worker", review=corral.ReviewPolicy("reviewer"))])
    calls: list[bytes] = []

    def review(task: corral.Task, result: bytes) -> corral.Verdict:
        calls.append(result)
        if len(calls) == 1:
            raise RuntimeError("the review model is down")
        return corral.Approve()

    TeammateThread(lead, "ann", lambda task: "v1", roles=("worker",), max_idle_polls=10_000).start()
    rev = TeammateThread(lead, "rev", lambda task: "", roles=("reviewer",), reviewer=review, max_idle_polls=10_000)
    rev.start()
    assert lead.wait_until_done(timeout=30).completed_ids == ("t",)
    task = lead.get_task("t")
    assert calls == [b"v1", b"v1"] and task.result == b"v1" and task.review_rounds == 0
    assert [(a.owner, a.outcome) for a in task.attempts] == [
        ("ann", Outcome.COMPLETED),
        ("rev", Outcome.RELEASED),
        ("rev", Outcome.COMPLETED),
    ]
    for name in ("ann", "rev"):
        lead.request_shutdown(name, reason="done")
    assert rev.result().reviewed == 1


@pytest.mark.timeout(60)
def test_the_rejection_that_reaches_max_rounds_fails_the_task(lead: corral.Lead) -> None:
    lead.create_tasks(
        [
            corral.TaskSpec("t", required_role="worker", review=corral.ReviewPolicy("reviewer", max_rounds=2)),
            corral.TaskSpec("after", depends_on=("t",), required_role="worker"),
        ]
    )
    TeammateThread(lead, "ann", lambda task: "same again", roles=("worker",), max_idle_polls=10_000).start()
    TeammateThread(
        lead,
        "rev",
        lambda task: "",
        roles=("reviewer",),
        reviewer=lambda task, result: corral.Reject("still wrong"),
        max_idle_polls=10_000,
    ).start()
    done = lead.wait_until_done(timeout=30)
    assert (done.failed_ids, done.canceled_ids) == (("t",), ("after",))
    task = lead.get_task("t")
    assert task.state is corral.TaskState.FAILED and task.review_rounds == 2
    assert task.error.startswith("review rejected 2 times") and "still wrong" in task.error
    for name in ("ann", "rev"):
        lead.request_shutdown(name, reason="done")


@pytest.mark.timeout(60)
def test_a_rejection_without_feedback_is_refused_before_any_call(
    lead: corral.Lead, monkeypatch: pytest.MonkeyPatch
) -> None:
    lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE, review=corral.ReviewPolicy("rev"))])
    ann, rev = lead.add_teammate("ann"), lead.add_teammate("rev", roles=("rev",))
    with corral.Teammate.connect(lead.address, ann.token) as author:
        work_events = author.idle()
        work = next(work_events)
        assert isinstance(work, corral.Claim)
        work.complete("v1")
        work_events.close()

    def no_call(*args: object, **kwargs: object) -> None:
        raise AssertionError("the SDK called the daemon")

    bad = [corral.Reject(""), corral.Reject("  \n"), corral.Reject("x" * (64 * 1024 + 1))]
    with corral.Teammate.connect(lead.address, rev.token) as reviewer:
        events = reviewer.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim) and claim.review is not None
        with monkeypatch.context() as patched:
            patched.setattr(claim._calls, "complete", no_call)
            patched.setattr(lead, "_write", no_call)
            for verdict in bad:
                with pytest.raises(corral.InvalidArgument) as refused:
                    claim.decide(verdict)
                assert [v.field for v in refused.value.field_violations] == ["verdict.feedback"]
                with pytest.raises(corral.InvalidArgument) as refused:
                    lead.review_task("t", verdict)
                assert [v.field for v in refused.value.field_violations] == ["feedback"]
            with pytest.raises(corral.InvalidArgument):
                lead.review_task("t", corral.Approve("x" * (64 * 1024 + 1)))
        # The daemon refuses one just the same, on either transport (the SDK's check is a courtesy).
        with pytest.raises(corral.InvalidArgument) as refused:
            claim._calls.complete("t", claim.token, b"", None, corral.Reject(" "))
        assert [v.field for v in refused.value.field_violations] == ["verdict.feedback"]
        assert claim in reviewer.held_claims() and lead.get_task("t").state is corral.TaskState.IN_REVIEW
        assert claim.decide(corral.Reject("why")).state is corral.TaskState.PENDING
        events.close()
    assert corral.Approve() == corral.Approve("") and corral.Approve().approve
    assert corral.Reject("why").approve is False and corral.Reject("why") == corral.Reject("why")
    with pytest.raises(AttributeError):
        corral.Reject("why").feedback = "other"  # type: ignore[misc]


@pytest.mark.timeout(60)
def test_wait_until_done_waits_while_a_task_is_in_review(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", review=corral.ReviewPolicy()), corral.TaskSpec("after", depends_on=("t",))])
    mate = TeammateThread(lead, "ann", lambda task: f"did {task.id}", max_idle_polls=10_000).start()
    watch_until(lead, task_reached("t", corral.TaskState.IN_REVIEW), timeout=20)
    with pytest.raises(TimeoutError, match=r"2 task\(s\) unfinished .*1 in review"):
        lead.wait_until_done(timeout=1)
    after = lead.get_task("after")
    assert after.waiting_for is not None and after.waiting_for.dependencies == ("t",), "its dependents wait"

    summaries: list[corral.DoneSummary] = []
    waiter = threading.Thread(target=lambda: summaries.append(lead.wait_until_done(timeout=30)), daemon=True)
    waiter.start()
    lead.review_task("t", corral.Approve())
    waiter.join(30)
    (done,) = summaries
    assert done.completed_ids == ("t", "after") and done.stats.active_tasks == 0
    assert lead.get_task("after").result == b"did after"
    lead.request_shutdown("ann", reason="done")
    assert mate.result().completed == 2
