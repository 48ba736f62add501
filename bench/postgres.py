"""Section 8: the board in PostgreSQL (`corrald serve --store postgresql://… --pg-schema S`).

The PostgreSQL server runs on this same machine: it shares the cores with the
daemons and the client processes, so every figure here has the server's own
work on the same CPUs (`shared()` says so in the results, on every log line and
in every target).

* Cycles: Session claim → complete cycles/s (raw stubs, as in bench/paired.py)
  at each of `pg_teammates` teammates, for the SQLite store on one daemon, a
  PostgreSQL board on one daemon, and a PostgreSQL board served by two daemons
  with the teammates split evenly between them (each client process talks to
  one daemon). Each round measures the three back to back at each count (their
  order rotates from round to round), each on fresh daemons and a fresh
  schema; the ratios PG-1 / SQLite and PG-2 / PG-1 are taken within the round.
  CPU per cycle is the daemons' user+system time over the run, and beside it
  that of the PostgreSQL backends serving the bench's database.
* Cross-daemon ready → claim: a teammate waits on a Session stream of daemon B
  (30 s poll interval, so only a wake-up brings the claim in time), the Lead
  creates one task for it through daemon A; measured from just before the
  CreateTasks call (so A's commit is inside the sample) to B's claim arriving,
  and also from the call's return and from the moment a LISTEN connection of
  the bench's own heard A's notification. Interleaved with the same through
  one PostgreSQL daemon (a teammate waiting on A) and through a SQLite daemon,
  for what crossing daemons and what the store add.
* Claim latency with `pg_board_sizes` tasks on the board, one daemon: boards
  built with CreateTasks of 10,000 tasks, then section 4's loop (one teammate
  on Idle + unary) timing the next claim from just before CompleteTask is sent
  (the next claim is handed off inside the completion's transaction, so this
  is the figure with the claim's query in it) and, as section 4 does, from
  CompleteTask's return; rounds alternate the boards (one daemon each, the
  other idle).

Beside them, the server's commit floor: a one-row INSERT in a transaction of
its own from psycopg, round trip.

A database corral_bench_<random> is created on the server at the start (the
server: CORRAL_BENCH_PG_DSN, default postgresql://postgres@127.0.0.1:5432/postgres)
and dropped WITH (FORCE) at the end; every configuration has a schema of its
own in it. Without a server that answers, the section is recorded as
unavailable.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import secrets
import time
import urllib.parse
from typing import TYPE_CHECKING

import grpc.aio

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from . import e2e, latency, teamworker
from .daemon import CHANNEL_OPTIONS, Daemon, Lead, bearer, cpu_seconds, duration, run_async
from .stats import latency_fields, summarize, summary

if TYPE_CHECKING:
    import psycopg

SERVER_ENV = "CORRAL_BENCH_PG_DSN"
LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
CONFIGS = ("sqlite", "pg1", "pg2")
RATIOS = {"pg1_vs_sqlite": ("pg1", "sqlite"), "pg2_vs_pg1": ("pg2", "pg1")}
FIELDS = {
    "throughput": "cycles/s",
    "p50_ms": "ms",
    "p99_ms": "ms",
    "cpu_ms": "daemon CPU ms/cycle (all daemons)",
    "pg_cpu_ms": "PostgreSQL backend CPU ms/cycle",
    "jobs_per_cycle": "writer jobs/cycle (all daemons)",
    "mean_batch": "jobs/commit",
    "errors": "count",
}
LATENCY_FIELDS = {"p50_ms": "ms", "p99_ms": "ms", "max_ms": "ms"}
RETURNED_FIELDS = {f"returned_{field}": unit for field, unit in LATENCY_FIELDS.items()}
# The ready -> claim paths: the Lead on daemon A, the teammate waiting on B; both on A; both on a SQLite
# daemon. Each sample is timed from just before CreateTasks is sent; beside them, across daemons, the claim
# from CreateTasks' return and from the moment the bench's own LISTEN heard A's notification of the ready
# task (about A's commit), that notification from the send, and each path's CreateTasks round trip.
PATHS = ("cross", "same", "sqlite")
LATENCIES = (
    *PATHS,
    "cross_after_return",
    "cross_after_notify",
    "notify_after_send",
    *(f"{path}_create_rtt" for path in PATHS),
)
# unheard: cross samples whose notification the bench did not hear; missed: claims not received within
# CLAIM_TIMEOUT_S (each counted at that bound, and its run's sampling ends there).
SAMPLES = (*LATENCIES, "unheard", "missed")
BUILD_BATCH = 10_000  # the most tasks one CreateTasks may carry
SETTLE_S = latency.SETTLE_S
CLAIM_TIMEOUT_S = 10.0  # the longest wait for one claim (a waiting stream's poll interval is 30 s)


def shared(nproc: int | None = None) -> str:
    """The note every figure of this section carries."""
    return f"PostgreSQL shares the {nproc or os.cpu_count()} cores with the daemons and the clients"


# ---------------------------------------------------------------- the server and the bench's database


def _is_local(dsn: str) -> bool:
    """Whether the server runs on this machine (then its backends' CPU can be read from /proc)."""
    from psycopg import conninfo  # noqa: PLC0415

    host = str(conninfo.conninfo_to_dict(dsn).get("host") or "")
    return host in ("", "localhost", "127.0.0.1", "::1") or host.startswith("/")


class Store:
    """A database of the bench's own on the PostgreSQL server: created on enter, dropped WITH (FORCE) on exit."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.name = f"corral_bench_{secrets.token_hex(6)}"
        self.dsn = urllib.parse.urlsplit(server)._replace(path=f"/{self.name}").geturl()
        self.local = _is_local(server)
        self._conn: psycopg.Connection | None = None

    def __enter__(self) -> Store:
        import psycopg  # noqa: PLC0415 (only this section needs it)

        with psycopg.connect(self.server, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f"CREATE DATABASE {self.name}")
        try:
            self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
        except BaseException:
            self._drop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._conn is not None:
            self._conn.close()
        self._drop()

    def _drop(self) -> None:
        import psycopg  # noqa: PLC0415

        with psycopg.connect(self.server, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")

    def args(self, schema: str) -> tuple[str, ...]:
        return ("--store", self.dsn, "--pg-schema", schema)

    def settings(self) -> dict:
        assert self._conn is not None
        names = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "max_connections")
        return {name: (self._conn.execute(f"SHOW {name}").fetchone() or ("?",))[0] for name in names}

    def commit_floor(self, samples: int) -> dict:
        """A bare commit from Python: a one-row INSERT in a transaction of its own (autocommit), timed
        round trip; what any write of the board pays at least (WAL flush included)."""
        assert self._conn is not None
        self._conn.execute("CREATE TABLE bench_commit_floor (id bigserial PRIMARY KEY, at double precision)")
        took = []
        for _ in range(samples):
            started = time.perf_counter()
            self._conn.execute("INSERT INTO bench_commit_floor (at) VALUES (%s)", (started,))
            took.append(time.perf_counter() - started)
        return latency_fields(took)

    def backend_cpu(self) -> dict[int, float] | None:
        """CPU seconds so far of each backend serving this database (not this connection's); None
        when the server is not on this machine."""
        if not self.local or self._conn is None:
            return None
        rows = self._conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        return {pid: cpu_seconds(pid) for (pid,) in rows}


def _cpu_spent(before: dict[int, float] | None, after: dict[int, float] | None) -> float | None:
    """CPU seconds the backends used in between (those that ended in between are not counted)."""
    if before is None or after is None:
        return None
    return sum(now - before.get(pid, 0.0) for pid, now in after.items())


def _server() -> tuple[str | None, str]:
    """The server's DSN, or None and why not."""
    try:
        import psycopg  # noqa: PLC0415
    except ImportError:
        return None, "psycopg is not installed (pip install -e '.[postgres]')"
    server = os.environ.get(SERVER_ENV, LOCAL_SERVER)
    try:
        with psycopg.connect(server, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as error:
        detail = " ".join(str(error).split())[:120]
        return None, f"no PostgreSQL server answers at {SERVER_ENV} or {LOCAL_SERVER} ({detail})"
    return server, ""


@contextlib.contextmanager
def _daemons(store: Store, config: str, schema: str):
    """The config's daemons, started (the first creates the board), stopped on exit."""
    with contextlib.ExitStack() as stack:
        if config == "sqlite":
            yield [stack.enter_context(Daemon())]
            return
        first = stack.enter_context(Daemon(extra_args=store.args(schema)))
        daemons = [first]
        if config == "pg2":
            daemons.append(stack.enter_context(Daemon(extra_args=store.args(schema), lead_token=first.token)))
        yield daemons


# ---------------------------------------------------------------- cycles


def _writer(daemons: list[Daemon]) -> dict:
    stats = [e2e._writer_stats(daemon) for daemon in daemons]
    return {key: sum(s[key] for s in stats) for key in ("jobs", "commits")}


def _cycles(store: Store, config: str, count: int, tasks: int, schema: str, sizes) -> dict:
    with _daemons(store, config, schema) as daemons:
        members, refusal = e2e._setup(daemons[0], count, session=True)
        if refusal:
            return {"unavailable": refusal}
        e2e._create(daemons[0], "independent", tasks, prefix="t-")
        before, cpu = _writer(daemons), sum(d.cpu_seconds() for d in daemons)
        pg_before = store.backend_cpu() if config != "sqlite" else None
        # As many client processes for every config; with two daemons, each process talks to one.
        processes = len(daemons) * -(-sizes.client_processes // len(daemons))
        tally = teamworker.run_clients(
            "session",
            [d.address for d in daemons],
            members,
            target=tasks,
            deadline_s=sizes.run_deadline_s,
            processes=processes,
        )
        cpu = sum(d.cpu_seconds() for d in daemons) - cpu
        pg_cpu = _cpu_spent(pg_before, store.backend_cpu()) if config != "sqlite" else None
        after = _writer(daemons)
    done = max(tally["completed"], 1)
    commits = after["commits"] - before["commits"]
    return {
        "throughput": tally["throughput"],
        **latency_fields(tally["latencies"]),
        "cpu_ms": 1000 * cpu / done,
        "pg_cpu_ms": None if pg_cpu is None else 1000 * pg_cpu / done,
        "jobs_per_cycle": (after["jobs"] - before["jobs"]) / done,
        "mean_batch": (after["jobs"] - before["jobs"]) / commits if commits else 0.0,
        "daemons": len(daemons),
        "client_processes": processes,
        "completed": tally["completed"],
        "errors": tally["errors"],
        "refused": tally["refused"],
        "timed_out": tally["timed_out"],
        "error_samples": tally["error_samples"],
        **teamworker.spread(tally["per_teammate"]),
    }


def _round_ratios(measured: dict) -> dict:
    rate = {config: measured[config].get("throughput") for config in CONFIGS}
    return {
        name: rate[top] / rate[bottom] if rate[top] and rate[bottom] else None for name, (top, bottom) in RATIOS.items()
    }


def _figure(values: list, unit: str) -> dict | None:
    """The median round, or None when some round lacks the figure."""
    if not values or any(v is None for v in values):
        return None
    return summary(values, unit)


def cycles(store: Store, sizes, runs: int, log) -> dict:
    rounds: list[dict] = []
    for run in range(runs):
        order = CONFIGS[run % len(CONFIGS) :] + CONFIGS[: run % len(CONFIGS)]
        measured: dict = {}
        for count in sizes.pg_teammates:
            tasks = sizes.tasks(count)
            at = {config: _cycles(store, config, count, tasks, f"r{run}_{config}_{count}", sizes) for config in order}
            at["ratios"] = _round_ratios(at)
            measured[str(count)] = at
            log(_line(count, at))
        rounds.append(measured)
    by_count: dict = {}
    for count in sizes.pg_teammates:
        key = str(count)
        table: dict = {}
        for config in CONFIGS:
            runs_of = [r[key][config] for r in rounds]
            missing = [f["unavailable"] for f in runs_of if "unavailable" in f]
            if missing:
                table[config] = {"unavailable": missing[0]}
                continue
            table[config] = {field: _figure([f[field] for f in runs_of], unit) for field, unit in FIELDS.items()}
            table[config]["max_over_min"] = _figure([f["max_over_min"] for f in runs_of], "max/min")
            table[config]["per_teammate_min_max"] = [[f["min_completions"], f["max_completions"]] for f in runs_of]
            table[config]["timed_out"] = any(f["timed_out"] for f in runs_of)
            table[config]["error_samples"] = [s for f in runs_of for s in f["error_samples"]][:3]
        table["ratios"] = {name: _figure([r[key]["ratios"][name] for r in rounds], "ratio") for name in RATIOS}
        by_count[key] = table
    return {
        "teammates": list(sizes.pg_teammates),
        "tasks": {str(count): sizes.tasks(count) for count in sizes.pg_teammates},
        "client_processes": sizes.client_processes,
        "rounds": rounds,
        "by_count": by_count,
    }


def _line(count: int, at: dict) -> str:
    def rate(config: str) -> str:
        value = at[config].get("throughput")
        return f"{value:6.0f}" if value else "   n/a"

    def cpu(config: str) -> str:
        pg = at[config].get("pg_cpu_ms")
        daemon = at[config].get("cpu_ms")
        if daemon is None:
            return ""
        return f" ({daemon:.2f}" + ("" if pg is None else f" + PG {pg:.2f}") + " ms CPU/cycle)"

    ratios = ", ".join(f"{name} {value:.2f}" for name, value in at["ratios"].items() if value is not None)
    return (
        f"postgres    {count:>3} teammates, Session: SQLite {rate('sqlite')}{cpu('sqlite')}, PG 1 daemon"
        f" {rate('pg1')}{cpu('pg1')}, PG 2 daemons {rate('pg2')}{cpu('pg2')} cycles/s -> {ratios} [{shared()}]"
    )


# ---------------------------------------------------------------- cross-daemon ready -> claim


class _Heard:
    """The board's wake-up notifications as a listener of the bench's own hears them (LISTEN on the
    board's channel, as the daemons do): when a creation's commit reached the listeners."""

    def __init__(self, dsn: str, schema: str) -> None:
        from corrald.pg.storage import notify_channel  # noqa: PLC0415 (the channel the daemons LISTEN on)

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
    with _daemons(store, "pg2", "ready") as (a, b), _daemons(store, "sqlite", "") as (lite,):
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
                f" {r['sqlite_p99_ms']:.2f} ms ({unheard} unheard, {missed} missed) [{shared()}]"
            )
    fields = {f"{key}_{field}": unit for key in LATENCIES for field, unit in LATENCY_FIELDS.items()}
    out = summarize(results, {**fields, "unheard": "samples", "missed": "claims"})
    out["samples_per_run"] = sizes.pg_latency_samples
    return out


# ---------------------------------------------------------------- claim latency by board size


async def _build(daemon: Daemon, size: int) -> tuple[str, float]:
    """The teammate's token and the seconds CreateTasks took for `size` tasks, in batches of 10,000."""
    lead = Lead(daemon.address, daemon.token)
    try:
        token = (await lead.add_teammates(["solo"]))["solo"]
        specs = [pb.TaskSpec(id=f"b{i}", title=f"bench b{i}", payload=b"x" * 32) for i in range(size)]
        return token, await lead.create(specs, batch=BUILD_BATCH)
    finally:
        await lead.close()


async def _claim_latencies(daemon: Daemon, token: str, cycles: int) -> tuple[list[float], list[float]]:
    """One teammate cycling on Idle + unary (section 4's loop): the next claim's arrival from CompleteTask's
    return (section 4's figure) and from just before CompleteTask was sent.

    The next claim is handed off inside the completion's transaction, so its query runs before CompleteTask
    returns: only the second figure has the claim's own cost in it.
    """
    channel = grpc.aio.insecure_channel(daemon.address, options=CHANNEL_OPTIONS)
    stub, md = pb_grpc.TeammateServiceStub(channel), bearer(token)
    call = stub.Idle(pb.IdleRequest(max_idle_polls=10_000, poll_interval=duration(5)), metadata=md)
    after_return: list[float] = []
    after_send: list[float] = []
    sent = returned = None
    try:
        while len(after_send) < cycles:
            # Bounded: a board out of ready tasks (or a claim that never comes) ends the run short.
            response = await asyncio.wait_for(call.read(), CLAIM_TIMEOUT_S)
            if response is grpc.aio.EOF:
                break
            if response.WhichOneof("event") != "claim":
                continue
            arrived = time.monotonic()
            if sent is not None and returned is not None:
                after_return.append(arrived - returned)
                after_send.append(arrived - sent)
            if len(after_send) >= cycles:
                break
            claim = response.claim
            sent = time.monotonic()
            await stub.CompleteTask(
                pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token), metadata=md, timeout=60
            )
            returned = time.monotonic()
    finally:
        call.cancel()
        await channel.close()
    return after_return, after_send


def board_size(store: Store, sizes, runs: int, log) -> dict:
    boards = sizes.pg_board_sizes
    with contextlib.ExitStack() as stack:
        daemons, tokens, build_s = {}, {}, {}
        for size in boards:
            (daemons[size],) = stack.enter_context(_daemons(store, "pg1", f"board_{size}"))
            tokens[size], build_s[size] = run_async(_build(daemons[size], size))
            log(f"postgres    board of {size:,} tasks built with CreateTasks in {build_s[size]:.1f} s [{shared()}]")
        rounds = []
        for run in range(runs):
            order = boards if run % 2 == 0 else tuple(reversed(boards))
            measured: dict = {}
            for size in order:
                after_return, after_send = run_async(
                    _claim_latencies(daemons[size], tokens[size], sizes.pg_claim_samples)
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


# ---------------------------------------------------------------- the section


def run(sizes, runs: int, log) -> dict:
    server, why = _server()
    if server is None:
        log(f"postgres    not measured: {why}")
        return {"unavailable": why, "shared_cores": shared()}
    with Store(server) as store:
        settings = store.settings()
        log(
            f"postgres    PostgreSQL {settings['server_version']} (fsync {settings['fsync']}, synchronous_commit"
            f" {settings['synchronous_commit']}), database {store.name} [{shared()}]"
        )
        floor = store.commit_floor(sizes.pg_latency_samples)
        log(
            f"postgres    commit floor (one-row INSERT, autocommit, psycopg): p50 {floor['p50_ms']:.2f} ms"
            f" p99 {floor['p99_ms']:.2f} ms [{shared()}]"
        )
        out = {
            "shared_cores": shared(),
            "server": settings,
            "commit_floor": floor,
            "server_local": store.local,
            "database": store.name,
            "cycles": cycles(store, sizes, runs, log),
            "ready_to_claim": ready_to_claim(store, sizes, runs, log),
            "board_size": board_size(store, sizes, runs, log),
        }
    return out
