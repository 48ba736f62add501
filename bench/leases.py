"""Section 12: path leases: what resources cost a claim.

In-process claim latency, as section 10 measures it (bench.proposals' `_QuietBoard`: the
writer job of a claim through the real Writer, one teammate holding a window of claims
and completing the oldest before each claim; commits at synchronous=NORMAL) on two
boards built alike with the store's own functions before their writers start:

* (a) plain: `leases_held` tasks IN_PROGRESS (another teammate's, on day-long leases)
  and `leases_ready` ready tasks, none with resources;
* (b) leased: the same, every task with a resource: the held ones exclusive
  `repo:web/held/<n>` or shared `repo:web/docs/<n>`, the ready ones exclusive
  `repo:web/src/<n>` or shared `repo:web/src/<n>/docs` (so each claim's overlap check
  reads the ancestors repo:web and repo:web/src, which hold nothing themselves, and the
  range of its own descendants), none conflicting with a held one.

Each round alternates (a) and (b) ten times, a tenth of its claims each; the ratio b/a of
the claim p50 is taken per round. Target: ≤ 1.5×. Each figure is the median round.
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import time

from .daemon import scratch_dir
from .proposals import _QuietBoard, alternate_claims, claims_summary
from .semantics import BUILD_BATCH, TEAMMATE, WINDOW, _spec

HOLDER = "holder"


def _resourced(spec, index: int, *, held: bool):
    if held:
        exclusive, shared = ((f"repo:web/held/{index}",), ()) if index % 4 else ((), (f"repo:web/docs/{index}",))
    else:
        exclusive, shared = ((f"repo:web/src/{index}",), ()) if index % 4 else ((), (f"repo:web/src/{index}/docs",))
    return dataclasses.replace(spec, resources=exclusive, shared_resources=shared)


def _build(database: pathlib.Path, ready: int, held: int, *, leased: bool) -> float:
    """The board: `held` tasks claimed by HOLDER, then `ready` ready ones. Returns seconds."""
    from corrald import validate  # noqa: PLC0415 (server internals only for the build)
    from corrald.config import Limits  # noqa: PLC0415
    from corrald.store import tasks, team  # noqa: PLC0415
    from corrald.store.sqlite import storage  # noqa: PLC0415
    from corrald.store.tasks.create import create_batch  # noqa: PLC0415
    from corrald.txn import Txn  # noqa: PLC0415

    started = time.perf_counter()
    now_ms = time.time_ns() // 1_000_000
    limits = Limits()
    conn = storage.open_writer(database, synchronous="OFF")

    def made(prefix: str, count: int, *, holding: bool) -> list:
        specs = [dataclasses.replace(_spec(f"{prefix}{i}"), lease_ms=limits.lease_max_ms) for i in range(count)]
        return [_resourced(s, i, held=holding) for i, s in enumerate(specs)] if leased else specs

    try:
        conn.execute("BEGIN IMMEDIATE")
        tx = Txn(conn, now_ms)
        team.add_teammate(tx, TEAMMATE, (), False, b"h" * 32)
        team.add_teammate(tx, HOLDER, (), False, b"o" * 32)
        conn.execute("COMMIT")
        holding = made("h", held, holding=True)
        for low in range(0, held, BUILD_BATCH):
            batch = validate.prepare_batch(holding[low : low + BUILD_BATCH], limits, now_ms=now_ms)
            conn.execute("BEGIN IMMEDIATE")
            create_batch(Txn(conn, now_ms), batch)
            conn.execute("COMMIT")
        conn.execute("BEGIN IMMEDIATE")
        tx = Txn(conn, now_ms)
        for _ in range(held):
            if tasks.claim_next(tx, HOLDER, ()) is None:
                raise RuntimeError("the holder found nothing to claim while building")
        conn.execute("COMMIT")
        ready_specs = made("r", ready, holding=False)
        for low in range(0, ready, BUILD_BATCH):
            batch = validate.prepare_batch(ready_specs[low : low + BUILD_BATCH], limits, now_ms=now_ms)
            conn.execute("BEGIN IMMEDIATE")
            create_batch(Txn(conn, now_ms), batch)
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - started


def _held_count(board: _QuietBoard) -> int:
    query = "SELECT count(*) FROM held_resources"
    return int(board.writer.call(lambda tx: tx.conn.execute(query).fetchone()[0], 60))


def run(sizes, runs: int, log) -> dict:
    root = scratch_dir("leases")
    ready, held, count = sizes.leases_ready, sizes.leases_held, sizes.leases_claims
    if ready < runs * count + WINDOW:
        raise ValueError("leases_ready must exceed runs x leases_claims + the claim window")
    try:
        build = {
            "plain": _build(root / "plain.sqlite3", ready, held, leased=False),
            "leased": _build(root / "leased.sqlite3", ready, held, leased=True),
        }
        boards = {name: _QuietBoard(root / f"{name}.sqlite3") for name in build}
        rounds = []
        try:
            for measured in alternate_claims(boards, "leased", runs, count):
                measured["held_at_end"] = _held_count(boards["leased"])
                if measured["held_at_end"] < held:  # else the leased board measured a plain one
                    raise RuntimeError(f"the leased board holds {measured['held_at_end']} resources, not {held}+")
                rounds.append(measured)
                log(
                    f"leases      claim job p50 plain {measured['plain']['p50_ms']:.3f} ms, with resources"
                    f" {measured['leased']['p50_ms']:.3f} ms -> ratio {measured['ratio_p50']:.2f}"
                    f" (p99 {measured['plain']['p99_ms']:.3f} / {measured['leased']['p99_ms']:.3f} ms;"
                    f" {measured['held_at_end']:,} resources held)"
                )
        finally:
            for board in boards.values():
                board.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"ready": ready, "held": held, **claims_summary(rounds, "leased", count, build)}
