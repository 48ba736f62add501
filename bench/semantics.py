"""Section 5: what the task semantics (time gates, concurrency keys, progress, usage) cost (#16).

* In-process claim latency: the writer job of a claim (`store.tasks.claim_next`
  through the real Writer) on (a) a plain board of N ready tasks and (b) the
  same N ready tasks spread over 1,000 concurrency keys with limit 2, plus
  100,000 delayed tasks behind a shut time gate (`not_before_ms` a month
  ahead; created first, so they precede the ready tasks in board order). One
  teammate holds a window of claims and completes the oldest before each
  claim, so consecutive tasks of a key fill it and the claims pass over full
  keys. The boards are built with the store's own functions before their
  writers start. Rounds alternate (a) and (b); the ratio b/a is taken per round.
* End to end on the Session: cycles/s of teammates doing claim → `renew` op →
  `complete` op ("plain"), against the same with every task carrying one of 64
  concurrency keys whose limit is the team's size (keys never block: the cost
  of the machinery, not of waiting), progress text and fraction plus usage on
  the renew, and usage on the complete ("semantics"). Variants alternate
  within each round, on a fresh daemon each; the ratio semantics/plain is
  taken per round.

Each figure is the median round.
"""

from __future__ import annotations

import asyncio
import pathlib
import shutil
import time
from collections import deque

from corral.v1 import corral_pb2 as pb

from . import dags, e2e, teamworker
from .daemon import Daemon, Lead, run_async, scratch_dir
from .stats import latency_fields, summary

BUILD_BATCH = 10_000
DELAY_MS = 30 * 24 * 3600 * 1000  # the delayed tasks' gate: far past any run
TEAMMATE = "bench"
KEY_RUN = 4  # consecutive ready tasks share a key, so a window of claims fills keys
WINDOW = 8  # claims the teammate holds at once
TIMEOUT_S = 120.0
VARIANTS = {"plain": "session_renew", "semantics": "session_rich"}


# ---------------------------------------------------------------- in-process claims


def _spec(task_id: str, *, key: str = "", not_before_ms: int | None = None):
    from corrald.model import TaskSpec  # noqa: PLC0415 (server internals only for the build)

    return TaskSpec(
        id=task_id,
        title=f"bench {task_id}",
        description="",
        payload=b"x" * 32,
        depends_on=(),
        priority=0,
        max_attempts=0,
        lease_ms=0,
        required_role="",
        not_before_ms=not_before_ms,
        concurrency_key=key,
    )


def _build(database: pathlib.Path, ready: int, delayed: int, keys: int, key_limit: int) -> float:
    """A board of `ready` ready tasks; with `keys`, spread over that many limited keys, and
    `delayed` gated tasks before them. Returns seconds."""
    from corrald import validate  # noqa: PLC0415
    from corrald.config import Limits  # noqa: PLC0415
    from corrald.store import keys as store_keys  # noqa: PLC0415
    from corrald.store import tasks, team  # noqa: PLC0415
    from corrald.store.sqlite import storage  # noqa: PLC0415
    from corrald.txn import Txn

    started = time.perf_counter()
    now_ms = time.time_ns() // 1_000_000
    # The delayed tasks come first: ahead of every ready task in board order.
    specs = [_spec(f"d{i}", not_before_ms=now_ms + DELAY_MS) for i in range(delayed)]
    specs += [_spec(f"r{i}", key=f"k{(i // KEY_RUN) % keys}" if keys else "") for i in range(ready)]
    conn = storage.open_writer(database, synchronous="OFF")
    try:
        conn.execute("BEGIN IMMEDIATE")
        tx = Txn(conn, now_ms)
        team.add_teammate(tx, TEAMMATE, (), False, b"h" * 32)
        for i in range(keys):
            store_keys.set_limit(tx, f"k{i}", key_limit)
        conn.execute("COMMIT")
        for low in range(0, len(specs), BUILD_BATCH):
            batch = validate.prepare_batch(specs[low : low + BUILD_BATCH], Limits(), now_ms=now_ms)
            conn.execute("BEGIN IMMEDIATE")
            tasks.create_batch(Txn(conn, now_ms), batch)
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - started


class _Board:
    """One built board behind the real Writer, and the claims its teammate holds."""

    def __init__(self, database: pathlib.Path) -> None:
        from corrald.clock import SystemClock  # noqa: PLC0415
        from corrald.store.sqlite.storage import open_writer  # noqa: PLC0415
        from corrald.writer import Writer, WriterConfig  # noqa: PLC0415

        config = WriterConfig()
        self.writer = Writer(
            lambda: open_writer(database, synchronous=config.synchronous, busy_timeout_ms=config.busy_timeout_ms),
            SystemClock(),
            config,
        )
        self.writer.start()
        self.held: deque[tuple[str, str]] = deque()  # (task id, claim token), oldest first

    def claim(self) -> float:
        """Claims the next task; returns the seconds the claim job took, queue to answer."""
        from corrald.store import tasks  # noqa: PLC0415

        started = time.perf_counter()
        grant = self.writer.call(lambda tx: tasks.claim_next(tx, TEAMMATE, ()), TIMEOUT_S)
        took = time.perf_counter() - started
        if grant is None:
            raise RuntimeError("the bench board ran out of ready tasks (sizes: more ready tasks than claims)")
        if not grant.task.id.startswith("r"):
            raise RuntimeError(f"claimed {grant.task.id}, a task behind a shut time gate")
        self.held.append((grant.task.id, grant.token))
        return took

    def complete_oldest(self) -> None:
        from corrald.model import Completion  # noqa: PLC0415
        from corrald.store import tasks  # noqa: PLC0415

        task_id, token = self.held.popleft()
        self.writer.call(lambda tx: tasks.complete(tx, Completion(TEAMMATE, task_id, token, b"")), TIMEOUT_S)

    def cycles(self, count: int) -> list[float]:
        while len(self.held) < WINDOW:
            self.claim()
        out = []
        for _ in range(count):
            self.complete_oldest()
            out.append(self.claim())
        return out

    def full_keys(self) -> int:
        """Keys at their limit now: the claims do pass over full keys."""
        query = "SELECT count(*) FROM concurrency_keys WHERE in_progress >= max_in_progress"
        return int(self.writer.call(lambda tx: tx.conn.execute(query).fetchone()[0], TIMEOUT_S))

    def close(self) -> None:
        self.writer.close()


def claims(sizes, runs: int, log) -> dict:
    root = scratch_dir("semantics")
    ready = sizes.semantics_ready
    if ready < runs * sizes.semantics_claims + WINDOW:
        raise ValueError("semantics_ready must exceed runs x semantics_claims + the claim window")
    try:
        build = {
            "plain": _build(root / "plain.sqlite3", ready, 0, 0, 0),
            "semantics": _build(
                root / "semantics.sqlite3", ready, sizes.semantics_delayed, sizes.semantics_keys, sizes.semantics_limit
            ),
        }
        boards = {name: _Board(root / f"{name}.sqlite3") for name in build}
        rounds = []
        try:
            for run in range(runs):
                order = ("plain", "semantics") if run % 2 == 0 else ("semantics", "plain")
                measured = {name: latency_fields(boards[name].cycles(sizes.semantics_claims)) for name in order}
                measured["full_keys_at_end"] = boards["semantics"].full_keys()
                measured["ratio_p50"] = measured["semantics"]["p50_ms"] / measured["plain"]["p50_ms"]
                measured["ratio_p99"] = measured["semantics"]["p99_ms"] / measured["plain"]["p99_ms"]
                rounds.append(measured)
                log(
                    f"semantics   claim job p50 plain {measured['plain']['p50_ms']:.3f} ms, with"
                    f" {sizes.semantics_delayed:,} delayed + {sizes.semantics_keys:,} keys"
                    f" {measured['semantics']['p50_ms']:.3f} ms -> ratio {measured['ratio_p50']:.2f}"
                    f" (p99 {measured['plain']['p99_ms']:.3f} / {measured['semantics']['p99_ms']:.3f} ms)"
                )
        finally:
            for board in boards.values():
                board.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    out: dict = {
        "ready": ready,
        "delayed": sizes.semantics_delayed,
        "keys": sizes.semantics_keys,
        "key_limit": sizes.semantics_limit,
        "claims_per_round": sizes.semantics_claims,
        "window": WINDOW,
        "key_run": KEY_RUN,
        "build_s": build,
        "rounds": rounds,
        "full_keys_at_end": [r["full_keys_at_end"] for r in rounds],
        "ratio_p50": summary([r["ratio_p50"] for r in rounds], "ratio"),
        "ratio_p99": summary([r["ratio_p99"] for r in rounds], "ratio"),
    }
    for name in ("plain", "semantics"):
        out[name] = {field: summary([r[name][field] for r in rounds], "ms") for field in ("p50_ms", "p99_ms")}
    return out


# ---------------------------------------------------------------- end to end


def _specs(variant: str, count: int, keys: int, prefix: str) -> list[pb.TaskSpec]:
    specs = dags.specs("independent", count, prefix=prefix)
    if variant == "semantics":
        for i, spec in enumerate(specs):
            spec.concurrency_key = f"k{i % keys}"
    return specs


def _e2e_run(variant: str, teammates: int, tasks: int, sizes) -> dict:
    with Daemon() as daemon:
        members, refusal = e2e._setup(daemon, teammates, session=True)  # noqa: SLF001 (the grid's own setup)
        if refusal:
            return {"unavailable": refusal}

        async def prepare() -> None:
            lead = Lead(daemon.address, daemon.token)
            try:
                if variant == "semantics":
                    await asyncio.gather(
                        *(
                            lead.lead.SetConcurrencyLimit(
                                pb.SetConcurrencyLimitRequest(key=f"k{i}", limit=teammates),
                                metadata=lead.md,
                                timeout=60,
                            )
                            for i in range(sizes.semantics_e2e_keys)
                        )
                    )
                await lead.create(_specs(variant, tasks, sizes.semantics_e2e_keys, prefix="t-"))
            finally:
                await lead.close()

        run_async(prepare())
        cpu = daemon.cpu_seconds()
        tally = teamworker.run_clients(
            VARIANTS[variant],
            daemon.address,
            members,
            target=tasks,
            deadline_s=sizes.run_deadline_s,
            processes=sizes.client_processes,
        )
        cpu = daemon.cpu_seconds() - cpu
    done = max(tally["completed"], 1)
    return {
        "throughput": tally["throughput"],
        **latency_fields(tally["latencies"]),
        "server_cpu_ms": 1000 * cpu / done,
        "completed": tally["completed"],
        "errors": tally["errors"],
        "refused": tally["refused"],
        "timed_out": tally["timed_out"],
        "error_samples": tally["error_samples"],
    }


def cycles(sizes, runs: int, log) -> dict:
    count = sizes.paired_teammates
    tasks = sizes.tasks(count)
    rounds = []
    for run in range(runs):
        order = ("plain", "semantics") if run % 2 == 0 else ("semantics", "plain")
        measured = {name: _e2e_run(name, count, tasks, sizes) for name in order}
        missing = [m["unavailable"] for m in measured.values() if "unavailable" in m]
        if missing:
            log(f"semantics   no Session in this daemon: {missing[0]}")
            return {"teammates": count, "tasks": tasks, "unavailable": missing[0], "rounds": []}
        measured["ratio"] = measured["semantics"]["throughput"] / measured["plain"]["throughput"]
        rounds.append(measured)
        log(
            f"semantics   {count} teammates on Session: plain {measured['plain']['throughput']:6.0f},"
            f" semantics {measured['semantics']['throughput']:6.0f} cycles/s -> ratio {measured['ratio']:.2f}"
            f" (errors {measured['plain']['errors']} / {measured['semantics']['errors']})"
        )
    out: dict = {
        "teammates": count,
        "tasks": tasks,
        "keys": sizes.semantics_e2e_keys,
        "key_limit": count,
        "rounds": rounds,
        "ratio": summary([r["ratio"] for r in rounds], "ratio"),
    }
    for name in VARIANTS:
        out[name] = {
            field: summary([r[name][field] for r in rounds], unit)
            for field, unit in (("throughput", "cycles/s"), ("p99_ms", "ms"), ("server_cpu_ms", "daemon CPU ms/cycle"))
        }
        out[name]["errors"] = sum(r[name]["errors"] for r in rounds)
    return out


def run(sizes, runs: int, log) -> dict:
    return {"claims": claims(sizes, runs, log), "cycles": cycles(sizes, runs, log)}
