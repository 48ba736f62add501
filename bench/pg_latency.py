"""Section 8, claim latency on PostgreSQL boards: ready → claim across daemons, and the claim as the board grows.

* Cross-daemon ready → claim: a teammate waits on a Session stream of daemon B
  (30 s poll interval, so only a wake-up brings the claim in time), the Lead
  creates one task for it through daemon A; measured from just before the
  CreateTasks call (so A's commit is inside the sample) to B's claim arriving,
  and also from the call's return and from the moment a LISTEN connection of
  the bench's own heard A's notification. Interleaved with the same through
  one PostgreSQL daemon (a teammate waiting on A) and through a SQLite daemon,
  for what crossing daemons and what the store add. Beside each, shutdown
  delivery: the Lead's RequestShutdown through A → the shutdown_request on the
  teammate's stream, on B ("shutdown_cross") and on A ("shutdown_same"); the
  teammate declines and acknowledges it before the next sample.
* Claim latency with `pg_board_sizes` tasks on the board, one daemon: boards
  built with CreateTasks of 10,000 tasks, then section 4's loop (one teammate
  on Idle + unary) timing the next claim from just before CompleteTask is sent
  (the next claim is handed off inside the completion's transaction, so this
  is the figure with the claim's query in it) and, as section 4 does, from
  CompleteTask's return; rounds alternate the boards (one daemon each, the
  other idle).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import TYPE_CHECKING

import grpc.aio

from corral.v1 import corral_pb2 as pb

from . import latency
from .daemon import CHANNEL_OPTIONS, Daemon, Lead, duration, run_async
from .pg_server import Store, daemons_for, shared
from .scale import claim_latencies
from .stats import latency_fields, summarize, summary

if TYPE_CHECKING:
    import psycopg

LATENCY_FIELDS = {"p50_ms": "ms", "p99_ms": "ms", "max_ms": "ms"}
RETURNED_FIELDS = {f"returned_{field}": unit for field, unit in LATENCY_FIELDS.items()}
# The ready -> claim paths: the Lead on daemon A, the teammate waiting on B; both on A; both on a SQLite
# daemon. Each sample is timed from just before CreateTasks is sent; beside them, across daemons, the claim
# from CreateTasks' return and from the moment the bench's own LISTEN heard A's notification of the ready
# task (about A's commit), that notification from the send, and each path's CreateTasks round trip.
PATHS = ("cross", "same", "sqlite")
# RequestShutdown sent through A → the teammate's stream (B's, or A's) delivers it.
SHUTDOWNS = {"shutdown_cross": "cross", "shutdown_same": "same"}
LATENCIES = (
    *PATHS,
    *SHUTDOWNS,
    "cross_after_return",
    "cross_after_notify",
    "notify_after_send",
    *(f"{path}_create_rtt" for path in PATHS),
)
# unheard: cross samples whose notification the bench did not hear; missed: claims or shutdown requests not
# received within CLAIM_TIMEOUT_S (each counted at that bound, and its run's sampling ends there).
SAMPLES = (*LATENCIES, "unheard", "missed")
BUILD_BATCH = 10_000  # the most tasks one CreateTasks may carry
SETTLE_S = latency.SETTLE_S
CLAIM_TIMEOUT_S = 10.0  # the longest wait for one claim (a waiting stream's poll interval is 30 s)


# ---------------------------------------------------------------- cross-daemon ready -> claim


class _Heard:
    """The board's wake-up notifications as a listener of the bench's own hears them (LISTEN on the
    board's channel, as the daemons do): when a creation's commit reached the listeners."""

    def __init__(self, dsn: str, schema: str) -> None:
        from corrald.store.postgres.storage import notify_channel  # noqa: PLC0415 (the channel the daemons LISTEN on)

        self.dsn, self.channel = dsn, notify_channel(schema)
        self.heard: list[tuple[float, dict]] = []
        self._conn: psycopg.AsyncConnection | None = None
        self._reader: asyncio.Task | None = None

    async def __aenter__(self) -> _Heard:
        import psycopg  # noqa: PLC0415

        self._conn = await psycopg.AsyncConnection.connect(self.dsn, autocommit=True, connect_timeout=10)
        await self._conn.execute(f"LISTEN {self.channel}")
        self._reader = asyncio.create_task(self._read())
        return self

    async def _read(self) -> None:
        assert self._conn is not None
        async for notice in self._conn.notifies():
            self.heard.append((time.monotonic(), json.loads(notice.payload)))

    def ready(self, role: str, since: float) -> float | None:
        """When the first notification since `since` telling of a task ready for `role` arrived."""
        return next((at for at, told in self.heard if at >= since and told.get("r", {}).get(role)), None)

    async def __aexit__(self, *exc) -> None:
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)
        if self._conn is not None:
            await self._conn.close()


async def _ready_samples(
    a: Daemon, b: Daemon, lite: Daemon, store: Store, schema: str, samples: int, prefix: str
) -> dict[str, list[float]]:
    """The three paths, one task at a time, in an order that rotates: the Lead on A and a teammate waiting
    on B ("cross"), both on A ("same"), and both on a SQLite daemon ("sqlite")."""
    lead, lite_lead = Lead(a.address, a.token), Lead(lite.address, lite.token)
    channel_b = grpc.aio.insecure_channel(b.address, options=CHANNEL_OPTIONS)
    stream = latency.STREAMS["session"]
    out: dict[str, list[float]] = {key: [] for key in SAMPLES}
    waiting = {}
    try:
        tokens = await lead.add_teammates([f"{prefix}far"], roles=("far",))
        tokens |= await lead.add_teammates([f"{prefix}near"], roles=("near",))
        lite_token = (await lite_lead.add_teammates([f"{prefix}lite"], roles=("lite",)))[f"{prefix}lite"]
        waiting = {
            "cross": stream(channel_b, tokens[f"{prefix}far"]),
            "same": stream(lead.channel, tokens[f"{prefix}near"]),
            "sqlite": stream(lite_lead.channel, lite_token),
        }
        paths = {"cross": (lead, "far"), "same": (lead, "near"), "sqlite": (lite_lead, "lite")}
        await asyncio.sleep(0.2)  # the streams are open and parked
        async with _Heard(store.dsn, schema) as heard:
            for i in range(samples):
                names = PATHS[i % len(PATHS) :] + PATHS[: i % len(PATHS)]
                for name in names:
                    creator, role = paths[name]
                    if not await _one_sample(creator, waiting[name], name, role, f"{prefix}{name}{i}", heard, out):
                        return out
                for kind, path in sorted(SHUTDOWNS.items(), reverse=bool(i % 2)):
                    try:
                        teammate = f"{prefix}{paths[path][1]}"
                        out[kind].append(await latency.shutdown_sample(lead, waiting[path], teammate, CLAIM_TIMEOUT_S))
                    except TimeoutError:  # counted as for a claim
                        out[kind].append(CLAIM_TIMEOUT_S)
                        out["missed"].append(1.0)
                        return out
    finally:
        for opened in waiting.values():
            opened.close()
        await channel_b.close()
        await lead.close()
        await lite_lead.close()
    return out


async def _one_sample(lead: Lead, waiting, name: str, role: str, task_id: str, heard: _Heard, out: dict) -> bool:
    """One task created for `role`, timed to its claim at the waiting stream; False when no claim came."""
    await asyncio.sleep(SETTLE_S)
    one = pb.TaskSpec(id=task_id, title=name, required_role=role)
    started = time.monotonic()
    await lead.lead.CreateTasks(pb.CreateTasksRequest(tasks=[one]), metadata=lead.md, timeout=30)
    returned = time.monotonic()
    try:
        arrived, event = await waiting.next("claim", CLAIM_TIMEOUT_S)
    except TimeoutError:
        # Counted at the bound, and this run's sampling ends (the task still pending would be the next claim).
        out[name].append(CLAIM_TIMEOUT_S)
        out["missed"].append(1.0)
        return False
    await waiting.complete(event.claim)
    out[name].append(arrived - started)
    out[f"{name}_create_rtt"].append(returned - started)
    if name == "cross":
        out["cross_after_return"].append(arrived - returned)
        told = heard.ready(role, started)
        if told is None:
            out["unheard"].append(1.0)
        else:
            out["cross_after_notify"].append(arrived - told)
            out["notify_after_send"].append(told - started)
    return True


def ready_to_claim(store: Store, sizes, runs: int, log) -> dict:
    results = []
    with daemons_for(store, "pg2", "ready") as (a, b), daemons_for(store, "sqlite", "") as (lite,):
        for run in range(runs):
            got = run_async(_ready_samples(a, b, lite, store, "ready", sizes.pg_latency_samples, f"r{run}"))
            unheard, missed = len(got.pop("unheard")), len(got.pop("missed"))
            results.append(
                {
                    **{
                        f"{key}_{field}": value
                        for key, values in got.items()
                        for field, value in latency_fields(values).items()
                    },
                    "unheard": unheard,
                    "missed": missed,
                }
            )
            r = results[-1]
            log(
                f"postgres    ready -> claim (Session waits, CreateTasks of one task): across PG daemons p50"
                f" {r['cross_p50_ms']:.2f} ms p99 {r['cross_p99_ms']:.2f} ms (from the notification heard p50"
                f" {r['cross_after_notify_p50_ms']:.2f} p99 {r['cross_after_notify_p99_ms']:.2f}); one PG daemon p50"
                f" {r['same_p50_ms']:.2f} p99 {r['same_p99_ms']:.2f}; SQLite p50 {r['sqlite_p50_ms']:.2f} p99"
                f" {r['sqlite_p99_ms']:.2f} ms; RequestShutdown -> its teammate across PG daemons p50"
                f" {r['shutdown_cross_p50_ms']:.2f} p99 {r['shutdown_cross_p99_ms']:.2f}, one PG daemon p50"
                f" {r['shutdown_same_p50_ms']:.2f} p99 {r['shutdown_same_p99_ms']:.2f} ms"
                f" ({unheard} unheard, {missed} missed) [{shared()}]"
            )
    fields = {f"{key}_{field}": unit for key in LATENCIES for field, unit in LATENCY_FIELDS.items()}
    out = summarize(results, {**fields, "unheard": "samples", "missed": "claims or shutdown requests"})
    out["samples_per_run"] = sizes.pg_latency_samples
    return out


# ---------------------------------------------------------------- claim latency by board size


async def build_board(daemon: Daemon, size: int, lease_s: float | None = None) -> tuple[str, float]:
    """The teammate's token and the seconds CreateTasks took for `size` tasks, in batches of 10,000
    (with `lease_s`, the tasks' lease; else the default)."""
    lead = Lead(daemon.address, daemon.token)
    lease = None if lease_s is None else duration(lease_s)
    try:
        token = (await lead.add_teammates(["solo"]))["solo"]
        specs = [
            pb.TaskSpec(id=f"b{i}", title=f"bench b{i}", payload=b"x" * 32, lease_duration=lease) for i in range(size)
        ]
        return token, await lead.create(specs, batch=BUILD_BATCH)
    finally:
        await lead.close()


def board_size(store: Store, sizes, runs: int, log) -> dict:
    boards = sizes.pg_board_sizes
    with contextlib.ExitStack() as stack:
        daemons, tokens, build_s = {}, {}, {}
        for size in boards:
            (daemons[size],) = stack.enter_context(daemons_for(store, "pg1", f"board_{size}"))
            tokens[size], build_s[size] = run_async(build_board(daemons[size], size))
            log(f"postgres    board of {size:,} tasks built with CreateTasks in {build_s[size]:.1f} s [{shared()}]")
        rounds = []
        for run in range(runs):
            order = boards if run % 2 == 0 else tuple(reversed(boards))
            measured: dict = {}
            for size in order:
                after_return, after_send = run_async(
                    claim_latencies(daemons[size], tokens[size], sizes.pg_claim_samples, CLAIM_TIMEOUT_S)
                )
                measured[str(size)] = {**latency_fields(after_send), **latency_fields(after_return, "returned_")}
            small, large = str(min(boards)), str(max(boards))
            measured["ratio_p50"] = measured[large]["p50_ms"] / measured[small]["p50_ms"]
            measured["returned_ratio_p50"] = measured[large]["returned_p50_ms"] / measured[small]["returned_p50_ms"]
            rounds.append(measured)
            log(
                "postgres    CompleteTask sent -> next claim p50 "
                + ", ".join(f"{int(size):,} tasks {measured[size]['p50_ms']:.2f} ms" for size in map(str, boards))
                + f" -> ratio {measured['ratio_p50']:.2f}; from its return (section 4's measure)"
                f" {measured['returned_ratio_p50']:.2f} [{shared()}]"
            )
    return {
        "build": "CreateTasks through the daemon, 10,000 tasks per call",
        "claims_per_round": sizes.pg_claim_samples,
        "rounds": rounds,
        "sizes": {
            str(size): {
                **summarize([r[str(size)] for r in rounds], {**LATENCY_FIELDS, **RETURNED_FIELDS}),
                "build_s": build_s[size],
            }
            for size in boards
        },
        "ratio_p50": summary([r["ratio_p50"] for r in rounds], "ratio"),
        "returned_ratio_p50": summary([r["returned_ratio_p50"] for r in rounds], "ratio"),
    }
