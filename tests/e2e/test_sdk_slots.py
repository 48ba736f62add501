"""A claim revoked under a handler that blocks does not free its worker's slot
(both flavours, both transports): `run_teammate` opens its stream with
hold_slots_until_freed and frees the slot only when the handler returns, so the
task behind goes to the teammate that is free, and no task loses an attempt to a
lease that ran out while its claim waited for a worker."""

from __future__ import annotations

import asyncio
import datetime
import threading

import pytest

import corral
import corral.aio

pytestmark = pytest.mark.usefixtures("transport")

SHORT_LEASE = datetime.timedelta(seconds=2)  # a claim no worker starts would lose its attempt in 2 s


@pytest.mark.timeout(90)
@pytest.mark.parametrize("flavour", ["sync", "aio"])
def test_a_revoke_under_a_blocking_handler_sends_the_next_task_to_the_free_teammate(
    lead: corral.Lead, flavour: str
) -> None:
    bob_new, ann_new = lead.add_teammate("bob"), lead.add_teammate("ann")
    started, heard_ended, unblock = threading.Event(), threading.Event(), threading.Event()
    bob_handled: list[str] = []

    def bob(task: corral.Task) -> str:
        """Blocks on its first task (a long model call) until the test lets it go."""
        bob_handled.append(task.id)
        if len(bob_handled) > 1:
            return "bob"  # never: bob has no free worker until the first call returns
        claim = corral.aio.current_claim() if flavour == "aio" else corral.current_claim()
        started.set()
        if claim.ended.wait(30):
            heard_ended.set()
        unblock.wait(60)
        return "late"  # dropped: the claim was revoked

    def ann(task: corral.Task) -> str:
        return f"ann did {task.id}"

    summaries: dict[str, corral.RunSummary] = {}

    def run(name: str, handler: object, token: str) -> threading.Thread:
        options = {"address": lead.address, "token": token, "max_idle_polls": 1000, "slots": 1}

        def target() -> None:
            if flavour == "sync":
                summaries[name] = corral.run_teammate(handler, **options)  # type: ignore[arg-type]
            else:
                summaries[name] = asyncio.run(corral.aio.run_teammate(handler, **options))  # type: ignore[arg-type]

        thread = threading.Thread(target=target, daemon=True, name=f"teammate-{name}")
        thread.start()
        return thread

    lead.create_tasks([corral.TaskSpec("web-docs", priority=2, max_attempts=2, lease_duration=SHORT_LEASE)])
    bob_runner = run("bob", bob, bob_new.token)
    assert started.wait(20)
    lead.create_tasks([corral.TaskSpec("web-deploy", priority=1, max_attempts=2, lease_duration=SHORT_LEASE)])
    lead.revoke_claim("web-docs", "plan changed")
    assert heard_ended.wait(20)  # bob's stream told it; a claim sent after would be on its way

    ann_runner = run("ann", ann, ann_new.token)
    done = lead.wait_until_done(timeout=30)
    assert (done.completed, done.failed) == (2, 0)
    assert bob_handled == ["web-docs"]

    deploy = lead.get_task("web-deploy")
    assert (deploy.owner, deploy.attempt, deploy.result) == ("ann", 1, b"ann did web-deploy")
    assert [(a.owner, a.outcome) for a in deploy.attempts] == [("ann", corral.AttemptOutcome.COMPLETED)]
    docs = lead.get_task("web-docs")
    assert [(a.owner, a.outcome) for a in docs.attempts] == [
        ("bob", corral.AttemptOutcome.REVOKED),
        ("ann", corral.AttemptOutcome.COMPLETED),
    ]

    unblock.set()
    for name, runner in (("bob", bob_runner), ("ann", ann_runner)):
        lead.request_shutdown(name, reason="done")
        runner.join(30)
        assert not runner.is_alive()
    assert (summaries["bob"].completed, summaries["bob"].lost) == (0, 1)
    assert summaries["ann"].completed == 2
