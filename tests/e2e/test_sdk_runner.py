"""`run_teammate` against the real daemon: shutdown, failures, lost leases,
plans, removal, messages, and riding out a daemon restart."""

from __future__ import annotations

import asyncio
import datetime
import logging
import threading
from pathlib import Path

import pytest

import corral
import corral.aio
from tests.support import FAST_POLL, TeammateThread, task_reached, wait_until, watch_until

# Each test runs on both teammate transports (CORRAL_TRANSPORT=session, =idle).
pytestmark = pytest.mark.usefixtures("transport")

ONE_SECOND = datetime.timedelta(seconds=1)


@pytest.mark.timeout(30)
def test_shutdown_waits_for_the_running_handler(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("long")])
    started, finish = threading.Event(), threading.Event()

    def handler(task: corral.Task) -> str:
        started.set()
        assert finish.wait(20)
        return "finished"

    mate = TeammateThread(lead, "ann", handler, stop_on_idle_timeout=False).start()
    assert started.wait(10)
    request_id = lead.request_shutdown("ann", reason="wrap up")
    finish.set()
    summary = mate.result()
    assert summary.exit_reason is corral.ExitReason.SHUTDOWN and summary.completed == 1
    task = lead.get_task("long")
    assert task.state is corral.TaskState.COMPLETED and task.result == b"finished"
    answer = watch_until(lead, lambda e: isinstance(e, corral.ShutdownAnswered))
    assert (answer.request_id, answer.teammate, answer.approve) == (request_id, "ann", True)


@pytest.mark.timeout(30)
def test_failures_retry_unless_permanent(lead: corral.Lead, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="corral.runner")
    lead.create_tasks(
        [
            corral.TaskSpec("flaky", max_attempts=3),
            corral.TaskSpec("broken", max_attempts=3),
            corral.TaskSpec("after-broken", depends_on=("broken",)),
        ]
    )
    attempts: dict[str, int] = {}

    def handler(task: corral.Task) -> bytes:
        attempts[task.id] = attempts.get(task.id, 0) + 1
        if task.id == "flaky" and task.attempt == 1:
            raise ConnectionError("transient trouble")
        if task.id == "broken":
            raise corral.PermanentFailure("input is malformed")
        return b"ok"

    summary = TeammateThread(lead, "ann", handler, max_idle_polls=3).start().result()
    assert summary.exit_reason is corral.ExitReason.IDLE_TIMEOUT
    assert (summary.completed, summary.failed, summary.lost) == (1, 2, 0)
    assert attempts == {"flaky": 2, "broken": 1}
    flaky, broken, after = (lead.get_task(i) for i in ("flaky", "broken", "after-broken"))
    assert flaky.state is corral.TaskState.COMPLETED and flaky.attempt == 2
    assert broken.state is corral.TaskState.FAILED and broken.error == "input is malformed"  # no traceback
    assert after.state is corral.TaskState.CANCELED
    # One warning line each, saying what happens next; the traceback only at debug level.
    warned = [r for r in caplog.records if r.name == "corral.runner" and r.levelno == logging.WARNING]
    assert sorted(r.getMessage() for r in warned) == [
        "task broken failed (attempt 1 of 3): input is malformed; it will not be retried",
        "task flaky failed (attempt 1 of 3): ConnectionError: transient trouble; it will be retried",
    ]
    assert all(r.exc_info is None for r in warned)
    traced = [r for r in caplog.records if r.name == "corral.runner" and r.levelno == logging.DEBUG and r.exc_info]
    assert {r.getMessage() for r in traced} == {
        "task flaky: the handler's traceback",
        "task broken: the handler's traceback",
    }


@pytest.mark.timeout(30)
def test_lost_lease_drops_the_outcome(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("canceled-midway", lease_duration=ONE_SECOND)])
    started = threading.Event()

    def handler(task: corral.Task) -> str:
        started.set()
        claim = corral.current_claim()
        wait_until(lambda: claim.lost, timeout=15, what="lease loss")
        claim.check()  # raises LeaseLost
        return "never reported"

    mate = TeammateThread(lead, "ann", handler, max_idle_polls=3).start()
    assert started.wait(10)
    lead.cancel_tasks(["canceled-midway"])
    summary = mate.result()
    assert (summary.completed, summary.failed, summary.lost) == (0, 0, 1)
    task = lead.get_task("canceled-midway")
    assert task.state is corral.TaskState.CANCELED and task.result == b""


@pytest.mark.timeout(30)
def test_plan_rejection_ends_the_run_and_approval_unlocks_work(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("designed")])
    new = lead.add_teammate("planner", require_plan_approval=True)
    env = lead.teammate_env(new)

    def decide(approve: bool) -> None:
        for event in lead.watch(0, timeout=10):
            if isinstance(event, corral.PlanSubmitted) and event.plan == ("v2" if approve else "v1"):
                lead.decide_plan(event.plan_id, approve=approve, feedback="" if approve else "needs tests")
                return

    options = {"address": env["CORRAL_ADDRESS"], "token": env["CORRAL_TOKEN"], "poll_interval": FAST_POLL}
    decider = threading.Thread(target=decide, args=(False,))
    decider.start()
    rejected = corral.run_teammate(lambda task: b"", plan="v1", **options)
    decider.join()
    assert rejected.exit_reason is corral.ExitReason.PLAN_REJECTED
    assert rejected.plan_feedback == "needs tests" and rejected.plan_id

    decider = threading.Thread(target=decide, args=(True,))
    decider.start()
    approved = corral.run_teammate(lambda task: f"built {task.id}", plan="v2", max_idle_polls=3, **options)
    decider.join()
    assert approved.exit_reason is corral.ExitReason.IDLE_TIMEOUT and approved.completed == 1
    assert lead.get_task("designed").result == b"built designed"


@pytest.mark.timeout(30)
def test_removal_ends_the_run(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec("first")])
    done = threading.Event()

    def handler(task: corral.Task) -> str:
        done.set()
        return "ok"

    mate = TeammateThread(lead, "ann", handler, stop_on_idle_timeout=False).start()
    assert done.wait(10)
    watch_until(lead, task_reached("first", corral.TaskState.COMPLETED))
    lead.remove_teammate("ann")
    summary = mate.result()
    assert summary.exit_reason is corral.ExitReason.REMOVED and summary.completed == 1


@pytest.mark.timeout(30)
def test_messages_reach_on_message(lead: corral.Lead) -> None:
    received: list[corral.Message] = []
    mate = TeammateThread(lead, "ann", lambda task: None, on_message=received.append, max_idle_polls=3)
    assert lead.send_message("*", "hello team") == ["ann"]
    mate.start().result()
    assert [m.body for m in received] == ["hello team"]


@pytest.mark.timeout(60)
def test_run_survives_a_daemon_restart(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = corral.Lead.launch(state)
    try:
        first.create_tasks([corral.TaskSpec("before")])
        mate = TeammateThread(first, "ann", lambda task: task.id, stop_on_idle_timeout=False, reconnect_timeout=30)
        mate.start()
        watch_until(first, task_reached("before", corral.TaskState.COMPLETED))
    finally:
        first.close()  # SIGTERM: the teammate's stream breaks, it keeps retrying

    with corral.Lead.launch(state) as second:
        assert second.address == first.address
        second.create_tasks([corral.TaskSpec("after")])
        second.wait_until_done(timeout=30)
        second.request_shutdown("ann")
        summary = mate.result()
        assert summary.exit_reason is corral.ExitReason.SHUTDOWN and summary.completed == 2
        assert second.get_task("after").result == b"after"


@pytest.mark.timeout(30)
def test_aio_runner_with_sync_and_async_handlers(lead: corral.Lead) -> None:
    lead.create_tasks([corral.TaskSpec(f"job{i}") for i in range(6)])
    env_sync = lead.teammate_env(lead.add_teammate("sync-handler"))
    env_async = lead.teammate_env(lead.add_teammate("async-handler"))

    def blocking(task: corral.Task) -> str:
        assert corral.aio.current_claim().task.id == task.id
        return f"sync {task.id}"

    async def awaiting(task: corral.Task) -> str:
        await asyncio.sleep(0)
        return f"async {task.id}"

    async def scenario() -> list[corral.RunSummary]:
        return await asyncio.gather(
            *(
                corral.aio.run_teammate(
                    handler,
                    address=env["CORRAL_ADDRESS"],
                    token=env["CORRAL_TOKEN"],
                    slots=2,
                    max_idle_polls=4,
                    poll_interval=FAST_POLL,
                )
                for handler, env in ((blocking, env_sync), (awaiting, env_async))
            )
        )

    summaries = asyncio.run(scenario())
    assert sum(s.completed for s in summaries) == 6
    results = {task.result.decode().split()[0] for task in lead.list_tasks()}
    assert results <= {"sync", "async"}


@pytest.mark.timeout(60)
def test_a_reviewer_stays_while_its_task_waits_on_a_long_running_dependency(lead: corral.Lead) -> None:
    """run_teammate with a small idle budget does not quit mid-graph: 2 polls of 50 ms
    pass many times over while `fetch` runs, and the reviewer still takes `review`."""
    lead.create_tasks(
        [
            corral.TaskSpec("fetch", required_role="fetcher"),  # ann's alone, whichever thread asks first
            corral.TaskSpec("review", depends_on=("fetch",), required_role="reviewer"),
        ]
    )

    def fetch(task: corral.Task) -> bytes:
        threading.Event().wait(1.0)  # a second of work: ten times the reviewer's idle budget
        return b"fetched"

    budget = {"max_idle_polls": 2, "poll_interval": datetime.timedelta(milliseconds=50)}
    ann = TeammateThread(lead, "ann", fetch, roles=("fetcher",), **budget).start()
    bob = TeammateThread(lead, "bob", lambda task: b"reviewed", roles=("reviewer",), **budget).start()
    done = lead.wait_until_done(timeout=30)
    assert done.completed_ids == ("fetch", "review") and lead.get_task("review").owner == "bob"
    for mate in (ann, bob):  # with nothing left, each spends its budget and leaves
        summary = mate.result(timeout=10)
        assert summary.exit_reason is corral.ExitReason.IDLE_TIMEOUT and summary.completed == 1


@pytest.mark.timeout(30)
def test_a_spent_budget_pauses_the_run_until_the_lead_raises_it(
    lead: corral.Lead, caplog: pytest.LogCaptureFixture
) -> None:
    lead.create_tasks([corral.TaskSpec("first"), corral.TaskSpec("second", priority=-1)])

    def handler(task: corral.Task) -> str:
        corral.current_claim().renew(usage=corral.Usage(input_tokens=700, output_tokens=300))
        return f"did {task.id}"

    mate = TeammateThread(lead, "ann", handler, stop_on_idle_timeout=False)
    lead.set_budget("ann", max_tokens=1000)
    with caplog.at_level("WARNING", logger="corral.runner"):
        mate.start()
        wait_until(lambda: "budget spent (1000 tokens of 1000" in caplog.text, 10, "the budget warning")
        assert lead.get_task("second").state is corral.TaskState.PENDING, "no claim past a spent budget"
        lead.set_budget("ann", max_tokens=5000)
        watch_until(lead, task_reached("second", corral.TaskState.COMPLETED))
    lead.request_shutdown("ann", reason="done")
    summary = mate.result()
    assert summary.exit_reason is corral.ExitReason.SHUTDOWN and summary.completed == 2
    assert lead.get_task("first").usage.tokens == 1000
