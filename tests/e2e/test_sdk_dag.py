"""A DAG worked by a whole team at once: every task exactly once, in dependency
order, with results readable from the board. Sync threads and asyncio."""

from __future__ import annotations

import asyncio
import collections
import hashlib
import random
import threading
from pathlib import Path

import pytest

import corral
import corral.aio
from tests.support import FAST_POLL, TeammateThread

COMPLETED = corral.TaskState.COMPLETED


def make_dag(size: int, seed: int) -> list[corral.TaskSpec]:
    """Tasks t000.. each depending on up to 3 earlier ones, with mixed priorities."""
    rng = random.Random(seed)
    specs = []
    for i in range(size):
        deps = rng.sample(range(i), k=min(i, rng.randint(0, 3)))
        specs.append(
            corral.TaskSpec(
                id=f"t{i:03d}",
                title=f"task {i}",
                payload=str(i).encode(),
                depends_on=tuple(f"t{d:03d}" for d in sorted(deps)),
                priority=rng.randint(0, 5),
            )
        )
    return specs


def expected_result(task_id: str, dep_results: list[bytes]) -> bytes:
    """Each result folds in its dependencies' results, so it proves they were readable."""
    digest = hashlib.sha256(task_id.encode())
    for result in sorted(dep_results):
        digest.update(result)
    return digest.hexdigest().encode()


def check_board(lead: corral.Lead, specs: list[corral.TaskSpec]) -> None:
    """Final state, results, and daemon-side ordering (from the Watch replay)."""
    tasks = {task.id: task for task in lead.list_tasks(page_size=37)}
    assert set(tasks) == {spec.id for spec in specs}
    for spec in specs:
        task = tasks[spec.id]
        assert task.state is COMPLETED and task.attempt == 1, task
        assert task.result == expected_result(spec.id, [tasks[d].result for d in spec.depends_on])
        for dep in spec.depends_on:
            assert tasks[dep].finish_time is not None and task.finish_time is not None
            assert tasks[dep].finish_time <= task.finish_time

    claimed_at: dict[str, list[int]] = collections.defaultdict(list)
    completed_at: dict[str, list[int]] = collections.defaultdict(list)
    last_seq = 0
    for event in lead.watch(0, timeout=30):
        last_seq = event.seq
        if isinstance(event, corral.TaskChanged):
            if event.task.state is corral.TaskState.IN_PROGRESS:
                claimed_at[event.task.id].append(event.seq)
            elif event.task.state is COMPLETED:
                completed_at[event.task.id].append(event.seq)
        if len(completed_at) == len(specs) and all(len(v) == 1 for v in completed_at.values()):
            break
    assert last_seq > 0
    for spec in specs:
        assert len(claimed_at[spec.id]) == 1, f"{spec.id} claimed {claimed_at[spec.id]}"
        assert len(completed_at[spec.id]) == 1, f"{spec.id} completed {completed_at[spec.id]}"
        for dep in spec.depends_on:
            assert completed_at[dep][0] < claimed_at[spec.id][0], f"{spec.id} claimed before {dep} completed"


# Kept beside the board-level run (tests/conformance/test_board_concurrency.py): this one is through the SDK.
@pytest.mark.timeout(120)
@pytest.mark.usefixtures("transport")
def test_200_task_dag_with_20_threaded_teammates(lead: corral.Lead) -> None:
    specs = make_dag(200, seed=7)
    lead.create_tasks(specs, request_id="dag-1")
    calls: collections.Counter[str] = collections.Counter()
    violations: list[tuple[str, str, corral.TaskState]] = []
    lock = threading.Lock()

    def handler(task: corral.Task) -> bytes:
        with lock:
            calls[task.id] += 1
        dep_results = []
        for dep in task.depends_on:
            dep_task = lead.get_task(dep)
            if dep_task.state is not COMPLETED:
                with lock:
                    violations.append((task.id, dep, dep_task.state))
            dep_results.append(dep_task.result)
        assert corral.current_claim().task.id == task.id
        return expected_result(task.id, dep_results)

    team = [
        TeammateThread(lead, f"mate{i:02d}", handler, stop_on_idle_timeout=False, max_idle_polls=20).start()
        for i in range(20)
    ]
    done = lead.wait_until_done(timeout=90)
    assert done.completed == 200 and done.stats.count(COMPLETED) == 200 and done.stats.active_tasks == 0

    for mate in team:
        lead.request_shutdown(mate.name, reason="board done")
    summaries = [mate.result(timeout=30) for mate in team]

    assert {s.exit_reason for s in summaries} == {corral.ExitReason.SHUTDOWN}
    assert sum(s.completed for s in summaries) == 200
    assert sum(s.failed + s.lost for s in summaries) == 0
    assert violations == []
    assert set(calls) == {spec.id for spec in specs} and set(calls.values()) == {1}
    assert sum(1 for s in summaries if s.completed) > 1, "work was spread over the team"
    check_board(lead, specs)


@pytest.mark.timeout(120)
def test_dag_with_asyncio_teammates(tmp_path: Path) -> None:
    specs = make_dag(120, seed=11)

    async def scenario() -> list[corral.RunSummary]:
        async with await corral.aio.Lead.launch(tmp_path / "state") as lead:
            await lead.create_tasks(specs)
            calls: collections.Counter[str] = collections.Counter()

            async def handler(task: corral.Task) -> bytes:
                calls[task.id] += 1
                deps = [await lead.get_task(dep) for dep in task.depends_on]
                assert all(dep.state is COMPLETED for dep in deps), task.id
                assert corral.aio.current_claim().task.id == task.id
                return expected_result(task.id, [dep.result for dep in deps])

            names = [f"async{i:02d}" for i in range(12)]
            envs = [lead.teammate_env(await lead.add_teammate(name)) for name in names]
            runs = [
                asyncio.create_task(
                    corral.aio.run_teammate(
                        handler,
                        address=env["CORRAL_ADDRESS"],
                        token=env["CORRAL_TOKEN"],
                        poll_interval=FAST_POLL,
                        stop_on_idle_timeout=False,
                    )
                )
                for env in envs
            ]
            done = await lead.wait_until_done(timeout=90)
            assert done.completed == len(specs) and done.stats.count(COMPLETED) == len(specs)
            for name in names:
                await lead.request_shutdown(name)
            async with asyncio.timeout(30):
                summaries = await asyncio.gather(*runs)
            assert set(calls.values()) == {1} and len(calls) == len(specs)
            sync_lead = corral.Lead.connect(lead.address, lead.token)
            try:
                await asyncio.to_thread(check_board, sync_lead, specs)
            finally:
                sync_lead.close()
            return summaries

    summaries = asyncio.run(scenario())
    assert {s.exit_reason for s in summaries} == {corral.ExitReason.SHUTDOWN}
    assert sum(s.completed for s in summaries) == len(specs)
