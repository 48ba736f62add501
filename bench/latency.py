"""Section 3: the latencies a poll loop cannot match, on both transports.

* dependency → claim: teammate A completes X; its dependent Y (a role only
  teammate B may take) is pushed to B, whose stream is open and waiting.
  Measured from just before A's completion is sent (CompleteTask on Idle +
  unary, a `complete` op on Session) to B receiving the claim.
* shutdown → teammate: the Lead's RequestShutdown is sent → teammate C's
  stream delivers the shutdown_request. C rejects and acknowledges after each
  (AckMessages on Idle + unary, an `ack` op on Session).
* revoke → holder: the Lead's RevokeClaim is sent → teammate D's stream, which
  holds the claim, delivers claim_ended (#16 item 10; the contract tests check
  only that it comes, after the commit and before D's next claim).
* lease expiry → holder: a claim of a 1 s lease is left to expire; from the
  lease's end (the daemon's clock, this host's) to claim_ended on D's stream: the
  reaper's timer firing at the deadline, its job and the push. A few samples
  (each waits out a lease).

Against a poll loop with a 5 s interval: detection waits for the next poll,
so latency is uniform on [0, 5 s): mean 2.5 s, p99 4.95 s. A short simulated
poll loop (a thread polling a SQLite table) is measured alongside, bounded.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import secrets
import shutil
import sqlite3
import threading
import time

import grpc
import grpc.aio

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from . import grpc_floor, teamworker
from .daemon import Daemon, Lead, bearer, duration, run_async, scratch_dir, session_refusal
from .stats import latency_fields, ms, summarize

FIELDS = {"p50_ms": "ms", "p99_ms": "ms", "max_ms": "ms"}
SETTLE_S = 0.02  # let the waiting stream finish its check and park before each sample


class _Stream:
    """An Idle stream whose events land on a queue with their arrival time; completions and acks are unary."""

    def __init__(self, channel, token: str) -> None:
        self.stub = pb_grpc.TeammateServiceStub(channel)
        self.md = bearer(token)
        self.events: asyncio.Queue = asyncio.Queue()
        self.call = self._open()
        self.reader = asyncio.create_task(self._read())

    def _open(self):
        return self.stub.Idle(_open_request(), metadata=self.md)

    async def _read(self) -> None:
        async for response in self.call:
            await self.events.put((time.monotonic(), response))

    async def next(self, kind: str, timeout: float = 10.0):
        while True:
            arrived, response = await asyncio.wait_for(self.events.get(), timeout)
            if response.WhichOneof("event") == kind:
                return arrived, response

    async def complete(self, claim: pb.Claim) -> None:
        request = pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token)
        await self.stub.CompleteTask(request, metadata=self.md, timeout=30)

    async def ack(self, seq: int) -> None:
        await self.stub.AckMessages(pb.AckMessagesRequest(through_seq=seq), metadata=self.md, timeout=30)

    def close(self) -> None:
        self.reader.cancel()
        self.call.cancel()


class _SessionStream(_Stream):
    """A Session stream: the same events; completions and acks are ops on the stream itself."""

    def _open(self):
        self.results: dict[str, asyncio.Future] = {}
        self.op_ids = (f"{secrets.token_hex(6)}-{n}" for n in itertools.count(1))
        return self.stub.Session(metadata=self.md)

    async def _read(self) -> None:
        await self.call.write(pb.SessionRequest(open=_open_request()))
        while (response := await self.call.read()) is not grpc.aio.EOF:
            arrived = time.monotonic()
            if response.HasField("op_result"):
                self.results.pop(response.op_result.op_id).set_result(response.op_result)
            if response.WhichOneof("event"):
                await self.events.put((arrived, response))

    async def _op(self, **op) -> None:
        op_id = next(self.op_ids)
        # Held here: the answer may arrive (and the reader pop it) before the write returns.
        answered = self.results[op_id] = asyncio.get_running_loop().create_future()
        await self.call.write(pb.SessionRequest(op_id=op_id, **op))
        result = await asyncio.wait_for(answered, 30)
        if result.status.code != 0:
            raise RuntimeError(f"{next(iter(op))} op answered {result.status.code}: {result.status.message}")

    async def complete(self, claim: pb.Claim) -> None:
        await self._op(complete=pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token))

    async def ack(self, seq: int) -> None:
        await self._op(ack=pb.AckMessagesRequest(through_seq=seq))


STREAMS = {"idle": _Stream, "session": _SessionStream}


def _open_request() -> pb.IdleRequest:
    return pb.IdleRequest(max_idle_polls=10_000, poll_interval=duration(30))


async def _dependency_samples(lead: Lead, tokens: dict, samples: int, prefix: str, stream) -> list[float]:
    specs = []
    for i in range(samples):
        specs.append(pb.TaskSpec(id=f"{prefix}x{i}", title="x", required_role="a"))
        specs.append(pb.TaskSpec(id=f"{prefix}y{i}", title="y", required_role="b", depends_on=[f"{prefix}x{i}"]))
    await lead.create(specs)
    a, b = stream(lead.channel, tokens["alpha"]), stream(lead.channel, tokens["beta"])
    out = []
    try:
        for _ in range(samples):
            _, x = await a.next("claim")
            await asyncio.sleep(SETTLE_S)
            started = time.monotonic()
            await a.complete(x.claim)
            arrived, y = await b.next("claim")
            out.append(arrived - started)
            await b.complete(y.claim)
    finally:
        a.close()
        b.close()
    return out


async def shutdown_sample(lead: Lead, stream: _Stream, name: str, timeout: float = 10.0) -> float:
    """Seconds from just before the Lead's RequestShutdown for `name` is sent to the
    shutdown_request on `name`'s open `stream`, which then declines and acknowledges it
    (a pending one would hold back its claims); TimeoutError past `timeout`."""
    await asyncio.sleep(SETTLE_S)
    started = time.monotonic()
    ask = pb.RequestShutdownRequest(name=name, reason="bench", grace=duration(600))
    await lead.lead.RequestShutdown(ask, metadata=lead.md, timeout=30)
    arrived, event = await stream.next("shutdown_request", timeout)
    request = event.shutdown_request
    answer = pb.RespondShutdownRequest(request_id=request.request_id, approve=False, reason="keep working")
    await stream.stub.RespondShutdown(answer, metadata=stream.md, timeout=30)
    await stream.ack(request.seq)
    return arrived - started


async def _shutdown_samples(lead: Lead, tokens: dict, samples: int, stream) -> list[float]:
    c = stream(lead.channel, tokens["gamma"])
    try:
        await asyncio.sleep(0.2)  # the stream is open and parked
        return [await shutdown_sample(lead, c, "gamma") for _ in range(samples)]
    finally:
        c.close()


EXPIRY_LEASE_S = 1.0
EXPIRY_SAMPLES = 4


async def _revoke_samples(lead: Lead, tokens: dict, samples: int, prefix: str, stream) -> list[float]:
    """Seconds from just before the Lead's RevokeClaim to claim_ended on the holder's stream."""
    await lead.create([pb.TaskSpec(id=f"{prefix}r{i}", title="r", required_role="d") for i in range(samples)])
    d = stream(lead.channel, tokens["delta"])
    out = []
    try:
        for _ in range(samples):
            _, held = await d.next("claim")
            await asyncio.sleep(SETTLE_S)
            started = time.monotonic()
            revoke = pb.RevokeClaimRequest(task_id=held.claim.task.id, reason="bench")
            await lead.lead.RevokeClaim(revoke, metadata=lead.md, timeout=30)
            arrived, _ = await d.next("claim_ended")
            out.append(arrived - started)
            _, again = await d.next("claim")  # the revoked task, ready again at once
            await d.complete(again.claim)
    finally:
        d.close()
    return out


async def _expiry_samples(lead: Lead, tokens: dict, samples: int, prefix: str, stream) -> list[float]:
    """Seconds from a claim's lease end to claim_ended on the holder's stream."""
    lease, at_once = duration(EXPIRY_LEASE_S), duration(0)
    specs = [
        pb.TaskSpec(id=f"{prefix}e{i}", title="e", required_role="d", lease_duration=lease, retry_backoff=at_once)
        for i in range(samples)
    ]
    await lead.create(specs)
    d = stream(lead.channel, tokens["delta"])
    out = []
    try:
        for _ in range(samples):
            _, held = await d.next("claim")
            end = held.claim.lease_expire_time.seconds + held.claim.lease_expire_time.nanos / 1e9
            await d.next("claim_ended", timeout=10 * EXPIRY_LEASE_S)
            out.append(time.time() - end)
            try:  # late: refused, and a sign of life, after which claims flow again
                await d.complete(held.claim)
            except (grpc.aio.AioRpcError, RuntimeError):
                pass
            _, again = await d.next("claim")  # the expired task, ready again (its next attempt)
            await d.complete(again.claim)
    finally:
        d.close()
    return out


async def _corral(daemon: Daemon, samples: int, runs: int, transport: str = "idle") -> list[dict] | str:
    """Per-run figures, or (Session on a daemon that does not serve it) how it refused."""
    lead = Lead(daemon.address, daemon.token)
    try:
        tokens = await lead.add_teammates(["alpha"], roles=("a",))
        tokens |= await lead.add_teammates(["beta"], roles=("b",))
        tokens |= await lead.add_teammates(["gamma"], roles=("c",))
        tokens |= await lead.add_teammates(["delta"], roles=("d",))
        if transport == "session" and (refusal := await session_refusal(daemon.address, tokens["alpha"])):
            return refusal
        stream = STREAMS[transport]
        results = []
        for run in range(runs):
            dependency = await _dependency_samples(lead, tokens, samples, f"r{run}-", stream)
            shutdown = await _shutdown_samples(lead, tokens, samples, stream)
            revoke = await _revoke_samples(lead, tokens, samples, f"r{run}-", stream)
            expiry = await _expiry_samples(lead, tokens, min(samples, EXPIRY_SAMPLES), f"r{run}-", stream)
            writer = (await lead.stats()).writer
            results.append(
                {
                    **{f"dependency_{k}": v for k, v in latency_fields(dependency).items()},
                    **{f"shutdown_{k}": v for k, v in latency_fields(shutdown).items()},
                    **{f"revoke_{k}": v for k, v in latency_fields(revoke).items()},
                    **{f"expiry_{k}": v for k, v in latency_fields(expiry).items()},
                    "commit_p50_ms": writer.commit_latency_p50_ms,
                    "commit_p99_ms": writer.commit_latency_p99_ms,
                }
            )
        return results
    finally:
        await lead.close()


async def _echo_push_samples(address: str, samples: int) -> list[float]:
    """The gRPC floor for the same path: a unary call releases a message on a waiting stream."""
    channel = grpc.aio.insecure_channel(address)
    idle = channel.unary_stream(teamworker.ECHO_IDLE, request_serializer=_identity, response_deserializer=_identity)
    complete = channel.unary_unary(
        teamworker.ECHO_COMPLETE, request_serializer=_identity, response_deserializer=_identity
    )
    stream = idle(b"probe")
    messages = stream.__aiter__()
    out = []
    try:
        await asyncio.wait_for(messages.__anext__(), 10)
        for _ in range(samples):
            await asyncio.sleep(SETTLE_S)
            started = time.monotonic()
            await complete(b"probe|x", timeout=30)
            await asyncio.wait_for(messages.__anext__(), 10)
            out.append(time.monotonic() - started)
    finally:
        stream.cancel()
        await channel.close()
    return out


def _identity(value: bytes) -> bytes:
    return value


def poll_loop(interval_s: float, samples: int) -> list[float]:
    """A real poll loop on SQLite: an event lands at a random moment, the poller sees it at its next poll."""
    root = scratch_dir("poll")
    path = str(root / "poll.sqlite3")
    setup = sqlite3.connect(path, isolation_level=None)
    setup.execute("PRAGMA journal_mode = WAL")
    setup.execute("CREATE TABLE ready (id INTEGER PRIMARY KEY, at REAL NOT NULL, seen REAL)")
    setup.close()
    stop = threading.Event()

    def poller() -> None:
        conn = sqlite3.connect(path, isolation_level=None)
        while not stop.wait(interval_s):
            conn.execute("UPDATE ready SET seen = ? WHERE seen IS NULL", (time.monotonic(),))
        conn.close()

    thread = threading.Thread(target=poller, daemon=True)
    thread.start()
    conn = sqlite3.connect(path, isolation_level=None)
    rng = random.Random(7)
    try:
        for _ in range(samples):
            time.sleep(rng.uniform(0, interval_s))
            conn.execute("INSERT INTO ready (at) VALUES (?)", (time.monotonic(),))
            bound = time.monotonic() + 2 * interval_s + 1
            while conn.execute("SELECT 1 FROM ready WHERE seen IS NULL").fetchone() and time.monotonic() < bound:
                time.sleep(interval_s / 50)
        latencies = [seen - at for at, seen in conn.execute("SELECT at, seen FROM ready WHERE seen IS NOT NULL")]
    finally:
        stop.set()
        thread.join(interval_s + 1)
        conn.close()
        shutil.rmtree(root, ignore_errors=True)
    return latencies


def run(sizes, runs: int, log) -> dict:
    polled: list[float] = []
    poll_thread = threading.Thread(
        target=lambda: polled.extend(poll_loop(sizes.poll_interval_s, sizes.poll_samples)), daemon=True
    )
    poll_thread.start()
    kinds = ("dependency", "shutdown", "revoke", "expiry")
    fields = {f"{what}_{k}": unit for what in kinds for k, unit in FIELDS.items()}
    fields |= {"commit_p50_ms": "ms", "commit_p99_ms": "ms"}
    with Daemon() as daemon:
        out = summarize(run_async(_corral(daemon, sizes.latency_samples, runs)), fields)
    with Daemon() as daemon:
        session = run_async(_corral(daemon, sizes.latency_samples, runs, "session"))
    out["session"] = {"unavailable": session} if isinstance(session, str) else summarize(session, fields)
    with grpc_floor.EchoServer() as echo:
        floor = [
            latency_fields(run_async(_echo_push_samples(echo.address, sizes.latency_samples))) for _ in range(runs)
        ]
    out["grpc_floor"] = summarize(floor, FIELDS)
    if sizes.normal:  # diagnostic, not a target: the same paths without an fsync per commit
        with Daemon(synchronous="NORMAL") as daemon:
            out["NORMAL"] = summarize(run_async(_corral(daemon, sizes.latency_samples, runs)), fields)
    poll_thread.join(sizes.poll_samples * 3 * sizes.poll_interval_s + 10)
    out["samples_per_run"] = sizes.latency_samples
    interval = sizes.poll_interval_s
    out["poll_loop"] = {
        "interval_s": interval,
        "analytic": {"mean_ms": ms(interval / 2), "p50_ms": ms(interval / 2), "p99_ms": ms(0.99 * interval)},
        "simulated_ms": [ms(x) for x in polled],
    }
    for name, figures in (("idle", out), ("session", out["session"])):
        if "unavailable" in figures:
            log(f"latency     {name}: {figures['unavailable']}")
            continue
        log(
            f"latency     {name:<7} dependency→claim p50 {figures['dependency_p50_ms']['median']:.2f} ms p99"
            f" {figures['dependency_p99_ms']['median']:.2f} ms; shutdown→teammate p50"
            f" {figures['shutdown_p50_ms']['median']:.2f} ms p99 {figures['shutdown_p99_ms']['median']:.2f} ms;"
            f" revoke→claim_ended p99 {figures['revoke_p99_ms']['median']:.2f} ms;"
            f" lease end→claim_ended max {figures['expiry_max_ms']['median']:.0f} ms"
        )
    normal = ""
    if sizes.normal:
        normal = f"at NORMAL, Idle: dependency p99 {out['NORMAL']['dependency_p99_ms']['median']:.2f} ms; "
    log(
        f"latency     ({normal}gRPC echo floor for one unary → stream push: "
        f"p50 {out['grpc_floor']['p50_ms']['median']:.2f} ms p99 {out['grpc_floor']['p99_ms']['median']:.2f} ms);"
        f" {interval:g} s poll loop simulated "
        f"{', '.join(f'{x:.0f}' for x in out['poll_loop']['simulated_ms'])} ms"
    )
    return out
