"""Questions to the Lead through the SDK (both flavours, both transports): a holder asks
(`claim.ask`, or a `run_teammate` handler raising `NeedsInput`), its claim ends and the
task waits NEEDS_INPUT, unfinished and claimed by no one; the Lead answers
(`answer_question`) and the task's next claim carries every question and answer so far
(`claim.answers`)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import threading
from collections.abc import Callable
from pathlib import Path

import pytest

import corral
import corral.aio
from tests.support import TeammateThread, task_reached, watch_until

# Each test runs on both teammate transports (CORRAL_TRANSPORT=session, =idle).
pytestmark = pytest.mark.usefixtures("transport")

LONG_LEASE = datetime.timedelta(seconds=30)


def _asking_handler(flavour: str, seen: list[tuple[corral.QuestionAnswer, ...]]) -> Callable[[corral.Task], object]:
    """A handler that asks which branch to build on, then builds on the Lead's answer."""

    def decide(answers: tuple[corral.QuestionAnswer, ...]) -> str:
        seen.append(answers)
        if not answers:
            raise corral.NeedsInput("which branch?")
        return f"built on {answers[-1].answer}"

    if flavour == "sync":
        return lambda task: decide(corral.current_claim().answers)

    async def handle_async(task: corral.Task) -> str:
        return decide(corral.aio.current_claim().answers)

    return handle_async


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_a_handler_that_needs_input_asks_and_resumes_with_the_answer(lead: corral.Lead, flavour: str) -> None:
    # One attempt only: a question must use none of it.
    lead.create_tasks([corral.TaskSpec("t", max_attempts=1, lease_duration=LONG_LEASE)])
    seen: list[tuple[corral.QuestionAnswer, ...]] = []
    handler = _asking_handler(flavour, seen)
    new = lead.add_teammate("ann")
    summaries: list[corral.RunSummary] = []
    options = {"address": lead.address, "token": new.token, "max_idle_polls": 1000, "poll_interval": 0.05}

    def run() -> None:
        if flavour == "sync":
            summaries.append(corral.run_teammate(handler, **options))  # type: ignore[arg-type]
        else:
            summaries.append(asyncio.run(corral.aio.run_teammate(handler, **options)))  # type: ignore[arg-type]

    runner = threading.Thread(target=run, daemon=True)
    runner.start()

    asked = watch_until(lead, lambda e: isinstance(e, corral.QuestionAsked), timeout=20)
    assert asked == corral.QuestionAsked(asked.seq, asked.time, "t", "which branch?", "ann")
    waiting = lead.get_task("t")
    assert (waiting.state, waiting.question, waiting.owner) == (corral.TaskState.NEEDS_INPUT, "which branch?", "")
    assert waiting.attempts_used == 0 and [a.outcome for a in waiting.attempts] == [corral.AttemptOutcome.ASKED]
    assert [task.id for task in lead.list_tasks(states=[corral.TaskState.NEEDS_INPUT])] == ["t"]
    assert lead.get_stats().count(corral.TaskState.NEEDS_INPUT) == 1

    answered = lead.answer_question("t", "main")
    assert (answered.id, answered.state, answered.question) == ("t", corral.TaskState.PENDING, "")
    done = lead.wait_until_done(timeout=30)
    assert done.completed_ids == ("t",)
    event = watch_until(lead, lambda e: isinstance(e, corral.QuestionAnswered))
    assert event == corral.QuestionAnswered(event.seq, event.time, "t", "which branch?", "main")

    task = lead.get_task("t")
    assert task.result == b"built on main" and task.attempts_used == 1
    assert [a.outcome for a in task.attempts] == [corral.AttemptOutcome.ASKED, corral.AttemptOutcome.COMPLETED]
    first, second = seen
    assert first == ()
    (answer,) = second
    assert (answer.question, answer.answer, answer.asked_by) == ("which branch?", "main", "ann")
    assert answer.ask_time is not None and answer.answer_time is not None and answer.ask_time <= answer.answer_time

    lead.request_shutdown("ann", reason="done")
    runner.join(30)
    assert not runner.is_alive()
    (summary,) = summaries
    assert (summary.completed, summary.asked, summary.failed, summary.lost) == (1, 1, 0, 0)
    assert summary.exit_reason is corral.ExitReason.SHUTDOWN


@pytest.mark.timeout(60)
def test_claim_ask_ends_the_claim_and_each_reclaim_carries_every_answer(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE)])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        events = ann.idle()
        asked: list[str] = []
        for number in (1, 2):
            claim = next(events)
            assert isinstance(claim, corral.Claim) and claim.task.id == "t"
            assert [(qa.question, qa.answer) for qa in claim.answers] == [(f"q{n}", f"a{n}") for n in range(1, number)]
            with claim.keepalive():
                task = claim.ask(f"q{number}")
            asked.append(task.question)
            assert (task.state, task.owner) == (corral.TaskState.NEEDS_INPUT, "")
            assert claim not in ann.held_claims()
            with pytest.raises(corral.ClaimTokenMismatch):
                claim.ask("again?")  # the claim ended with the question: as after a release
            lead.answer_question("t", f"a{number}")
        last = next(events)  # the same stream: the question freed its slot
        assert isinstance(last, corral.Claim) and last.fence > claim.fence
        assert [qa.question for qa in last.answers] == asked == ["q1", "q2"]
        assert [qa.answer for qa in last.answers] == ["a1", "a2"]
        assert all(qa.asked_by == "ann" for qa in last.answers)
        assert last.complete("done").state is corral.TaskState.COMPLETED
        events.close()
    outcomes = [a.outcome for a in lead.get_task("t").attempts]
    assert outcomes == [corral.AttemptOutcome.ASKED, corral.AttemptOutcome.ASKED, corral.AttemptOutcome.COMPLETED]


@pytest.mark.timeout(60)
def test_aio_claim_ask_and_answer_question(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            await lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE)])
            new = await lead.add_teammate("ann")
            async with await corral.aio.Teammate.connect(lead.address, new.token) as ann:
                async with contextlib.aclosing(ann.idle()) as events:
                    claim = await anext(events)
                    assert isinstance(claim, corral.aio.Claim) and claim.answers == ()
                    waiting = await claim.ask("which branch?")
                    assert (waiting.state, waiting.question) == (corral.TaskState.NEEDS_INPUT, "which branch?")
                    listed = [task.id async for task in lead.list_tasks(states=[corral.TaskState.NEEDS_INPUT])]
                    assert listed == ["t"]
                    answered = await lead.answer_question("t", "main")
                    assert answered.state is corral.TaskState.PENDING
                    again = await asyncio.wait_for(anext(events), 10)
                    assert isinstance(again, corral.aio.Claim)
                    (answer,) = again.answers
                    assert (answer.question, answer.answer, answer.asked_by) == ("which branch?", "main", "ann")
                    await again.complete("built on main")
            kinds = []
            async with contextlib.aclosing(lead.watch(0, timeout=10)) as feed:
                async for event in feed:
                    if isinstance(event, (corral.QuestionAsked, corral.QuestionAnswered)):
                        kinds.append(event)
                    if isinstance(event, corral.QuestionAnswered):
                        break
            assert [type(event) for event in kinds] == [corral.QuestionAsked, corral.QuestionAnswered]
            assert (kinds[0].task_id, kinds[0].asked_by, kinds[1].answer) == ("t", "ann", "main")
            assert (await lead.wait_until_done(timeout=10)).completed_ids == ("t",)

    asyncio.run(scenario())


@pytest.mark.timeout(60)
def test_answering_a_task_with_no_question_waiting_is_refused(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("canceled"), corral.TaskSpec("held", lease_duration=LONG_LEASE)])
    lead.cancel_tasks(["canceled"])  # a final task has no question either
    lead.create_tasks([corral.TaskSpec("fresh")])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        events = ann.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim) and claim.task.id == "held"
        for task_id in ("canceled", "held", "fresh"):
            with pytest.raises(corral.FailedPrecondition) as refused:
                lead.answer_question(task_id, "main")
            assert "NEEDS_INPUT" in refused.value.details, refused.value
        with pytest.raises(corral.NotFound):
            lead.answer_question("nope", "main")
        claim.ask("which branch?")
        assert lead.answer_question("held", "").state is corral.TaskState.PENDING  # an empty answer is one
        with pytest.raises(corral.FailedPrecondition):
            lead.answer_question("held", "twice")  # nothing left to answer
        events.close()


@pytest.mark.timeout(60)
def test_a_waiting_question_keeps_the_board_unfinished_until_answered(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t"), corral.TaskSpec("after", depends_on=("t",))])

    def handle(task: corral.Task) -> str:
        if task.id == "t" and not corral.current_claim().answers:
            raise corral.NeedsInput("which branch?")
        return "done"

    mate = TeammateThread(lead, "ann", handle, max_idle_polls=10_000).start()
    watch_until(lead, task_reached("t", corral.TaskState.NEEDS_INPUT), timeout=20)

    with pytest.raises(TimeoutError, match=r"2 task\(s\) unfinished .*1 waiting for an answer"):
        lead.wait_until_done(timeout=1)
    after = lead.get_task("after")
    assert after.state is corral.TaskState.PENDING and after.waiting_for is not None
    assert after.waiting_for.dependencies == ("t",), "its dependents wait"

    # Answered while another thread's wait_until_done follows the board: it returns then.
    summaries: list[corral.DoneSummary] = []
    waiter = threading.Thread(target=lambda: summaries.append(lead.wait_until_done(timeout=30)), daemon=True)
    waiter.start()
    lead.answer_question("t", "main")
    waiter.join(30)
    (done,) = summaries
    assert done.completed_ids == ("t", "after") and done.stats.active_tasks == 0
    lead.request_shutdown("ann", reason="done")
    summary = mate.result()
    assert (summary.completed, summary.asked) == (2, 1)


@pytest.mark.timeout(60)
def test_an_empty_or_oversized_question_is_invalid_and_keeps_the_claim(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE)])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        events = ann.idle()
        claim = next(events)
        assert isinstance(claim, corral.Claim)
        for question in ("", "   \n", "x" * (64 * 1024 + 1)):
            with pytest.raises(corral.InvalidArgument) as refused:
                claim.ask(question)
            assert [v.field for v in refused.value.field_violations] == ["question"]
        # The daemon refuses one just the same, on either transport (the SDK's check is a courtesy).
        with pytest.raises(corral.InvalidArgument) as refused:
            claim._calls.ask("t", claim.token, " ")
        assert [v.field for v in refused.value.field_violations] == ["question"]
        assert claim in ann.held_claims() and lead.get_task("t").state is corral.TaskState.IN_PROGRESS
        assert claim.complete("fine").state is corral.TaskState.COMPLETED
        events.close()


@pytest.mark.timeout(60)
def test_a_handlers_refused_question_fails_the_task_for_good(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", max_attempts=3)])

    def handle(task: corral.Task) -> str:
        raise corral.NeedsInput("  ")

    mate = TeammateThread(lead, "ann", handle, max_idle_polls=10_000).start()
    done = lead.wait_until_done(timeout=30)
    assert done.failed_ids == ("t",)
    task = lead.get_task("t")
    assert task.attempts_used == 1 and "question was refused" in task.error and "must not be empty" in task.error
    lead.request_shutdown("ann", reason="done")
    summary = mate.result()
    assert (summary.failed, summary.asked) == (1, 0)


@pytest.mark.timeout(60)
def test_the_twenty_first_question_is_refused_and_leaves_the_claim_held(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("t", lease_duration=LONG_LEASE)])
    new = lead.add_teammate("ann")
    with corral.Teammate.connect(lead.address, new.token) as ann:
        events = ann.idle()
        for number in range(1, 21):
            claim = next(events)
            assert isinstance(claim, corral.Claim) and len(claim.answers) == number - 1
            claim.ask(f"q{number}")
            lead.answer_question("t", f"a{number}")
        claim = next(events)
        assert isinstance(claim, corral.Claim) and len(claim.answers) == 20
        with pytest.raises(corral.FailedPrecondition) as refused:
            claim.ask("q21")
        assert not isinstance(refused.value, corral.ClaimTokenMismatch)
        assert "complete or fail it" in refused.value.details
        assert claim in ann.held_claims()
        assert claim.complete("enough questions").state is corral.TaskState.COMPLETED
        events.close()
