"""Section 8, when something goes wrong around a PostgreSQL board: a daemon killed, a snapshot held open.

* Reclaim after SIGKILL (target p99 < 1 s): daemon B serves a board; for each
  of `pg_reclaim_samples` samples a fresh daemon A joins it, a teammate on A
  claims a task with a 2 s lease (retry_backoff 0: retried at once), another
  teammate waits on a Session stream of B, and A is SIGKILLed (about 1.8 s
  before the lease ends, so nothing renews it). Lateness: from the lease's end
  (the claim's lease_expire_time; the daemon clock is the host's wall clock)
  to the waiting teammate receiving the task. B's reaper must find the expiry
  by itself (its timer, armed by A's notification of the claim).
* The MVCC trap: one daemon, board_size's claim loop (`pg_claim_samples`
  claims) before, with a REPEATABLE READ transaction of the bench's holding a
  snapshot (its first SELECT reads the board's tasks) for `pg_mvcc_hold_s`
  while `pg_mvcc_churn` Session cycles churn, after its release, and after a
  VACUUM of the tasks table. Beside each: n_dead_tup of the tasks table
  (pg_stat_user_tables, a second late at most) and the daemon's own claim
  query under EXPLAIN ANALYZE (its time and buffers). Once per section.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc.aio

from corral.v1 import corral_pb2 as pb

from . import latency, teamworker
from .daemon import CHANNEL_OPTIONS, Daemon, Lead, duration, run_async
from .pg_latency import CLAIM_TIMEOUT_S, build_board
from .pg_server import Store, daemons_for, pg_daemon, shared
from .scale import claim_latencies
from .stats import latency_fields

RECLAIM_LEASE_S = 2.0  # the lease of the claim whose daemon is killed
RECLAIM_TARGET_MS = 1000.0  # reclaim lateness p99
MVCC_PHASES = ("before", "held", "released", "vacuumed")
MVCC_LEASE_S = 3600.0  # the probe's claims outlive any phase (it holds its last one into the next)


# ---------------------------------------------------------------- reclaim after SIGKILL


async def _reclaim_sample(a: Daemon, b: Daemon, i: int) -> dict | None:
    """One claim held through daemon A, A SIGKILLed, the task reclaimed through B: the waiting teammate's
    claim from the lease's end, and from the kill; None when a claim did not come within its bound."""
    lead = Lead(b.address, b.token)
    channel_a = grpc.aio.insecure_channel(a.address, options=CHANNEL_OPTIONS)
    stream = latency.STREAMS["session"]
    opened = []
    try:
        role = f"k{i}"  # this sample's own: no task of another sample comes in the way
        tokens = await lead.add_teammates([f"hold{i}", f"wait{i}"], roles=(role,))
        lease, at_once = duration(RECLAIM_LEASE_S), duration(0)  # a zero backoff: retried as soon as reclaimed
        one = pb.TaskSpec(
            id=f"lease{i}", title="reclaim", required_role=role, lease_duration=lease, retry_backoff=at_once
        )
        await lead.lead.CreateTasks(pb.CreateTasksRequest(tasks=[one]), metadata=lead.md, timeout=30)
        opened.append(holder := stream(channel_a, tokens[f"hold{i}"]))
        try:
            _, held = await holder.next("claim", CLAIM_TIMEOUT_S)
            lease_end = held.claim.lease_expire_time.ToNanoseconds() / 1e9  # the daemon clock: the host's wall time
            opened.append(waiter := stream(lead.channel, tokens[f"wait{i}"]))
            await asyncio.sleep(0.2)  # the waiting stream is open and parked
            a.kill()
            killed, wall = time.monotonic(), time.time() - time.monotonic()
            arrived, got = await waiter.next("claim", RECLAIM_LEASE_S + CLAIM_TIMEOUT_S)
        except TimeoutError:
            return None
        await waiter.complete(got.claim)
        return {
            "late": arrived + wall - lease_end,
            "after_kill": arrived - killed,
            "kill_before_end": lease_end - (killed + wall),
            "attempt": got.claim.attempt,
        }
    finally:
        for each in opened:
            each.close()
            await asyncio.gather(each.reader, return_exceptions=True)  # the holder's ended with its daemon
        await channel_a.close()
        await lead.close()


def reclaim(store: Store, sizes, log) -> dict:
    """Each sample: a fresh daemon A joins the board daemon B serves, a teammate on A claims a task with a
    short lease, A is SIGKILLed; B's reaper (armed by A's notification of the claim) reclaims it."""
    samples: list[dict] = []
    missed = 0
    with daemons_for(store, "pg1", "reclaim") as (b,):
        for i in range(sizes.pg_reclaim_samples):
            with pg_daemon(store, "reclaim", b.token) as a:
                got = run_async(_reclaim_sample(a, b, i))
            if got is None:
                missed += 1
            else:
                samples.append(got)
    out = {
        "lease_s": RECLAIM_LEASE_S,
        **latency_fields([s["late"] for s in samples]),
        "min_ms": 1000 * min((s["late"] for s in samples), default=0.0),
        **latency_fields([s["after_kill"] for s in samples], "after_kill_"),
        "kill_before_end_min_ms": 1000 * min((s["kill_before_end"] for s in samples), default=0.0),
        "attempts": sorted({s["attempt"] for s in samples}),
        "missed": missed,
        "target_p99_ms": RECLAIM_TARGET_MS,
        "samples_ms": [round(1000 * s["late"], 1) for s in samples],
    }
    out["met"] = bool(samples) and not missed and out["p99_ms"] < RECLAIM_TARGET_MS
    log(
        f"postgres    reclaim after SIGKILL of the holder's daemon ({RECLAIM_LEASE_S:.0f} s lease, the other"
        f" daemon reclaims): late after the lease's end p50 {out['p50_ms']:.1f} ms p99 {out['p99_ms']:.1f} ms"
        f" max {out['max_ms']:.1f} ms ({len(samples)} samples, {missed} missed; target p99 < 1 s:"
        f" {'met' if out['met'] else 'NOT met'}) [{shared()}]"
    )
    return out


# ---------------------------------------------------------------- the MVCC trap: a snapshot held open


@contextlib.contextmanager
def _snapshot_held(store: Store, schema: str):
    """A REPEATABLE READ transaction on a connection of the bench's own, its snapshot taken by a first
    SELECT on the board's tasks, open until exit (then rolled back)."""
    import psycopg  # noqa: PLC0415
    from psycopg import sql  # noqa: PLC0415

    with psycopg.connect(store.dsn, autocommit=True, connect_timeout=10) as conn:
        conn.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        conn.execute(sql.SQL("SELECT count(*) FROM {}.tasks").format(sql.Identifier(schema)))
        try:
            yield
        finally:
            conn.execute("ROLLBACK")


def _claim_query(store: Store, schema: str) -> dict:
    """The daemon's own query for the next claim (the store's `_ready_query`, no roles) under EXPLAIN
    ANALYZE on a connection of the bench's: its time and the buffers it touched, apart from the rest of
    a claim's path."""
    import psycopg  # noqa: PLC0415

    from corrald.store import tasks  # noqa: PLC0415
    from corrald.store.postgres.sql import PgConnection  # noqa: PLC0415 (its statements, as the daemon sends them)

    query, params = tasks.ready_query(PgConnection.__new__(PgConnection), ())
    explain = f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {query}"
    with psycopg.connect(store.dsn, autocommit=True, options=f"-c search_path={schema}") as conn:
        ((plans,),) = psycopg.ClientCursor(conn).execute(explain, params).fetchall()
    top = plans[0]
    blocks = top["Plan"].get("Shared Hit Blocks", 0) + top["Plan"].get("Shared Read Blocks", 0)
    return {"query_ms": top["Execution Time"], "query_buffers": blocks}


async def _churners(daemon: Daemon, count: int) -> list[tuple[str, str]]:
    lead = Lead(daemon.address, daemon.token)
    try:
        return list((await lead.add_teammates([f"churn{i}" for i in range(count)])).items())
    finally:
        await lead.close()


async def _oldest_transaction_s(daemon: Daemon) -> float:
    """The oldest open transaction on the server, as the daemon's GetStats tells the operator."""
    lead = Lead(daemon.address, daemon.token)
    try:
        return (await lead.stats()).postgres.oldest_transaction_age.ToNanoseconds() / 1e9
    finally:
        await lead.close()


def mvcc(store: Store, sizes, log) -> dict:
    """Claim latency (board_size's loop) before, while a snapshot is held and cycles churn, after its
    release, and after a VACUUM; with the tasks table's dead rows as the statistics count them."""
    schema, claims, churn = "mvcc", sizes.pg_claim_samples, sizes.pg_mvcc_churn
    board = churn + (len(MVCC_PHASES) + 1) * (claims + 2)  # in board order: each phase claims past the churn's
    phases: dict[str, dict] = {}
    with daemons_for(store, "pg1", schema) as (daemon,):
        token, build_s = run_async(build_board(daemon, board, lease_s=MVCC_LEASE_S))
        members = run_async(_churners(daemon, max(sizes.pg_teammates)))

        def phase(name: str) -> None:
            after_return, after_send = run_async(claim_latencies(daemon, token, claims, CLAIM_TIMEOUT_S))
            # Read after the phase's claims: the writer's backend has reported what came before them by then
            # (at most a second's work is missing, see Store.task_rows), and they added a few rows of their own.
            rows = {**store.task_rows(schema), **_claim_query(store, schema)}
            phases[name] = {**latency_fields(after_send), **latency_fields(after_return, "returned_"), **rows}

        phase("before")
        with _snapshot_held(store, schema):
            held_from = time.monotonic()
            tally = teamworker.run_clients(
                "session",
                daemon.address,
                members,
                target=churn,
                deadline_s=sizes.pg_mvcc_hold_s + sizes.run_deadline_s,
                processes=sizes.client_processes,
            )
            time.sleep(max(0.0, sizes.pg_mvcc_hold_s - (time.monotonic() - held_from)))
            oldest_s = run_async(_oldest_transaction_s(daemon))
            phase("held")
            held_s = time.monotonic() - held_from
        phase("released")
        store.vacuum(schema)
        phase("vacuumed")
    out = {
        "board_tasks": board,
        "build_s": build_s,
        "claims_per_phase": claims,
        "hold_s": held_s,
        "oldest_transaction_s": oldest_s,
        "autovacuum": store.setting("autovacuum"),
        "churn": {
            "target": churn,
            "teammates": len(members),
            **{key: tally[key] for key in ("completed", "throughput", "errors", "timed_out")},
        },
        "phases": phases,
        "ratio_p50": {name: phases[name]["p50_ms"] / phases["before"]["p50_ms"] for name in MVCC_PHASES[1:]},
    }
    log(_mvcc_line(out))
    return out


def _mvcc_line(out: dict) -> str:
    phases, churn = out["phases"], out["churn"]

    def at(name: str) -> str:
        p = phases[name]
        return (
            f"p50 {p['p50_ms']:.2f} ms p99 {p['p99_ms']:.2f} ms ({p['n_dead_tup']:,} dead rows; the claim's query"
            f" {p['query_ms']:.2f} ms, {p['query_buffers']} buffers)"
        )

    ratios = out["ratio_p50"]
    return (
        f"postgres    MVCC trap, CompleteTask sent -> next claim: before {at('before')}; a REPEATABLE READ"
        f" snapshot held {out['hold_s']:.0f} s while {churn['completed']:,} cycles churned"
        f" ({churn['throughput']:.0f}/s{', timed out' if churn['timed_out'] else ''}): {at('held')}"
        f" -> x{ratios['held']:.1f}; released: {at('released')} -> x{ratios['released']:.1f}; after VACUUM:"
        f" {at('vacuumed')} -> x{ratios['vacuumed']:.1f} (autovacuum {out['autovacuum']}) [{shared()}]"
    )
