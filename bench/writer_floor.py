"""The floor for SQLite: claim + complete in-process through corrald's own Board and Writer.

No gRPC and no second process: N coroutines on one event loop call the same
writer jobs the daemon runs per cycle, with group commit and the same
pragmas: a completion that hands off (`Board.complete` given the stream, with the
teammate's stream snapshot: the completion and the next claim in one job), and the stream's
own check (`delivery.next_for_teammate`) only when nothing was handed over.
The gap between this and the end-to-end figure is what the RPC layer costs.
At one teammate count the same cycles also run with every job in a
transaction of its own (`max_batch=1`: what group commit buys) and without
the handoff (a check job, then a completion job: what the handoff buys).
"Before" is the floor at ec3c11e, through that commit's own
bench/writer_floor.py and corrald (bench.baseline), in the same run.
"""

from __future__ import annotations

import asyncio
import shutil
import time

from corrald.board import Board
from corrald.clock import SystemClock
from corrald.config import WriterConfig
from corrald.model import ClaimGrant, TaskSpec
from corrald.stream import StreamState

from . import baseline, dags
from .daemon import scratch_dir
from .stats import latency_fields, summarize

FIELDS = {
    "throughput": "cycles/s",
    "p50_ms": "ms",
    "p99_ms": "ms",
    "mean_batch": "jobs/commit",
    "cpu_ms": "process CPU ms/cycle",
}


def _specs(count: int, prefix: str) -> list[TaskSpec]:
    return [
        TaskSpec(
            id=prefix + task_id,
            title=f"bench {task_id}",
            description="",
            payload=b"x" * 32,
            depends_on=tuple(prefix + d for d in deps),
            priority=0,
            max_attempts=0,
            lease_ms=0,
            required_role="",
        )
        for task_id, deps in dags.graph("independent", count)
    ]


def _first_claim(stream: StreamState, items: list) -> ClaimGrant | None:
    stream.mark_sent(items)
    return next((item for item in items if isinstance(item, ClaimGrant)), None)


async def _teammate(
    board: Board,
    name: str,
    goal: int,
    done: list[int],
    latencies: list[float],
    deadline: float,
    handoff: bool = True,
) -> None:
    stream = StreamState(name, slots=1)
    grant = None
    while done[0] < goal and time.monotonic() < deadline:
        if grant is None:
            found = await board.next_for(name, stream.view())
            stream.learned(found)
            grant = _first_claim(stream, found.items)
            if grant is None:
                await asyncio.sleep(0.001)
                continue
        started = time.monotonic()
        if handoff:
            handed = (await board.complete(name, grant.task.id, grant.token, b"", stream=stream.view())).handoff
            stream.hand(handed)
        else:
            await board.complete(name, grant.task.id, grant.token, b"")
        latencies.append(time.monotonic() - started)
        done[0] += 1
        grant = _first_claim(stream, stream.take_handed())


async def _measure(
    teammates: int,
    count: int,
    synchronous: str,
    deadline_s: float,
    runs: int,
    max_batch: int = WriterConfig.max_batch,
    handoff: bool = True,
) -> list[dict]:
    root = scratch_dir("floor")
    board = Board(
        root / "floor.sqlite3",
        clock=SystemClock(),
        lead_token="bench-floor",
        writer_config=WriterConfig(synchronous=synchronous, max_batch=max_batch),
    )
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(None, board.open)
    results = []
    try:
        names = [f"mate{i}" for i in range(teammates)]
        for name in names:
            await board.add_teammate(name, (), False)
        for run in range(runs):
            specs = _specs(count, f"r{run}-")
            for start in range(0, len(specs), 10_000):
                await board.create_batch(specs[start : start + 10_000])
            before = board.writer.stats()
            done, latencies = [0], []
            cpu = time.process_time()
            started = time.monotonic()
            await asyncio.gather(
                *(_teammate(board, name, count, done, latencies, started + deadline_s, handoff) for name in names)
            )
            wall = time.monotonic() - started
            after = board.writer.stats()
            commits = max(after.commits - before.commits, 1)
            results.append(
                {
                    "throughput": done[0] / wall,
                    **latency_fields(latencies),
                    "mean_batch": (after.jobs - before.jobs) / commits,
                    "cpu_ms": 1000 * (time.process_time() - cpu) / max(done[0], 1),
                }
            )
    finally:
        await loop.run_in_executor(None, board.close)
        shutil.rmtree(root, ignore_errors=True)
    return results


def run(sizes, runs: int, log) -> dict:
    out: dict = {"FULL": {}}
    for teammates in sizes.teammates:
        results = asyncio.run(_measure(teammates, sizes.floor_tasks, "FULL", sizes.run_deadline_s, runs))
        out["FULL"][str(teammates)] = summarize(results, FIELDS)
        log(
            f"writer floor FULL  {teammates:>4} teammates: {out['FULL'][str(teammates)]['throughput']['median']:8.0f}"
            f" cycles/s"
        )
    try:
        with baseline.checkout() as root:
            out["before"] = {}
            for teammates in sizes.teammates:
                old = baseline.writer_floor(root, teammates, sizes.floor_tasks, sizes.run_deadline_s, runs)
                out["before"][str(teammates)] = summarize(old, FIELDS)
                log(
                    f"writer floor FULL  {teammates:>4} teammates at {baseline.COMMIT}:"
                    f" {out['before'][str(teammates)]['throughput']['median']:8.0f} cycles/s"
                )
    except baseline.Unavailable as error:
        out["before_missing"] = str(error)
        log(f"writer floor: none at {baseline.COMMIT} in this run: {error}")
    teammates = sizes.normal_at
    for key, label, options in (
        ("one_job_per_commit", "one job per commit", {"max_batch": 1}),
        ("no_handoff", "no handoff (two jobs per cycle)", {"handoff": False}),
    ):
        alone = asyncio.run(_measure(teammates, sizes.floor_tasks, "FULL", sizes.run_deadline_s, runs, **options))
        out[key] = {str(teammates): summarize(alone, FIELDS)}
        log(
            f"writer floor FULL  {teammates:>4} teammates, {label}:"
            f" {out[key][str(teammates)]['throughput']['median']:8.0f} cycles/s"
        )
    return out
