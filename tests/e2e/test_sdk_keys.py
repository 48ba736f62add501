"""Concurrency keys through a real daemon and the SDK: a team of 20 on 200 tasks
of one key limited to 2 never runs more than 2 of them at once, by the event
log, and finishes them all (issue: concurrency keys)."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from pathlib import Path

import pytest

import corral
import corral.aio

TEAM = 20
TASKS = 200
LIMIT = 2
KEY = "openai"
IN_PROGRESS, COMPLETED = corral.TaskState.IN_PROGRESS, corral.TaskState.COMPLETED


def _most_in_progress_at_once(lead: corral.Lead, keyed: set[str]) -> int:
    """The most keyed tasks IN_PROGRESS at once, replaying the event log (commit order) to the end of the run."""
    running: set[str] = set()
    done: set[str] = set()
    most = 0
    with contextlib.closing(lead.watch(0, timeout=60)) as events:
        for event in events:
            if not isinstance(event, corral.TaskChanged) or event.task.id not in keyed:
                continue
            task = event.task
            assert task.concurrency_key == KEY
            if task.state is IN_PROGRESS:
                running.add(task.id)
            else:
                running.discard(task.id)
            if task.state is COMPLETED:
                done.add(task.id)
            most = max(most, len(running))
            if done == keyed:
                return most
    raise AssertionError("the event log ended before every task completed")


@pytest.mark.usefixtures("transport")
@pytest.mark.timeout(180)
def test_twenty_teammates_never_run_more_of_a_key_than_its_limit(lead: corral.Lead) -> None:
    stored = lead.set_concurrency_limit(KEY, LIMIT)
    assert stored == corral.ConcurrencyLimit(KEY, LIMIT, 0)
    specs = [corral.TaskSpec(f"call{i:03d}", concurrency_key=KEY) for i in range(TASKS)]
    specs += [corral.TaskSpec(f"free{i}") for i in range(10)]  # no key: no limit
    lead.create_tasks(specs)
    assert lead.get_task("call000").concurrency_key == KEY

    lock = threading.Lock()
    running: list[int] = [0, 0]  # keyed handlers running now, the most at once

    def handler(task: corral.Task) -> bytes:
        keyed = task.concurrency_key == KEY
        if keyed:
            with lock:
                running[0] += 1
                running[1] = max(running[1], running[0])
        try:
            return task.id.encode()
        finally:
            if keyed:
                with lock:
                    running[0] -= 1

    names = [f"mate{i:02d}" for i in range(TEAM)]
    summaries: dict[str, corral.RunSummary] = {}

    def run(name: str, env: dict[str, str]) -> None:
        summaries[name] = corral.run_teammate(
            handler, address=env["CORRAL_ADDRESS"], token=env["CORRAL_TOKEN"], stop_on_idle_timeout=False
        )

    threads = [
        threading.Thread(target=run, args=(name, lead.teammate_env(lead.add_teammate(name))), name=name)
        for name in names
    ]
    for thread in threads:
        thread.start()
    try:
        done = lead.wait_until_done(timeout=120)
        assert done.completed == len(specs)
    finally:
        for name in names:
            lead.request_shutdown(name)
        for thread in threads:
            thread.join(60)
    assert not [thread.name for thread in threads if thread.is_alive()]
    assert sum(summary.completed for summary in summaries.values()) == len(specs)
    assert running[1] <= LIMIT
    assert _most_in_progress_at_once(lead, {spec.id for spec in specs[:TASKS]}) == LIMIT
    assert lead.list_concurrency_limits() == [corral.ConcurrencyLimit(KEY, LIMIT, 0)]


@pytest.mark.timeout(60)
def test_the_asyncio_lead_sets_lists_and_removes_limits(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            assert await lead.list_concurrency_limits() == []
            await lead.create_tasks([corral.TaskSpec("w", concurrency_key="repo:web")])
            assert (await lead.get_task("w")).concurrency_key == "repo:web"
            assert await lead.set_concurrency_limit("repo:web", 1) == corral.ConcurrencyLimit("repo:web", 1, 0)
            assert await lead.list_concurrency_limits() == [corral.ConcurrencyLimit("repo:web", 1, 0)]
            with pytest.raises(corral.InvalidArgument) as refused:
                await lead.set_concurrency_limit("repo:web", 10_001)
            assert [violation.field for violation in refused.value.field_violations] == ["limit"]
            assert await lead.set_concurrency_limit("repo:web", 0) == corral.ConcurrencyLimit("repo:web", 0, 0)
            assert await lead.list_concurrency_limits() == []

    asyncio.run(scenario())
