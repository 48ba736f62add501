"""Client processes: asyncio teammates, one channel per process (the SDK: one per teammate).

Seven loads share the driver; a *cycle* is "claim delivered" → "its completion
answered":

* `idle`: corral's Idle stream + unary CompleteTask (grpc.aio raw stubs).
* `session`: corral's Session stream (raw stubs): the claim arrives on the
  stream, the teammate writes a `complete` op on the same stream and the
  cycle ends at its op result (which may carry the next claim).
* `session_renew` and `session_rich`: the Session with one `renew` op before
  each `complete` op; `session_rich` also reports progress (text and fraction)
  and usage on the renew, and usage on the complete (bench/semantics.py).
* `echo`: the unary floor (one streamed message, then one unary call).
* `echo_bidi`: the bidirectional floor of the Session's shape (claim →
  complete op → op result + next claim in one message).
* `sdk`: the Python SDK's own loop (`corral.aio.Teammate.idle` and
  `Claim.complete`), with CORRAL_TRANSPORT set in the client process to the
  job's transport.

Processes are started with the `spawn` context (gRPC does not survive fork),
wait at a barrier, then run until a shared completion counter reaches the
target or the deadline passes. Each teammate's completions are counted, so the
driver can tell how evenly the work was shared.

A review's claim (`Claim.review`, a task with `TaskSpec.review`) is answered
like any claim, by the same loads (`idle`, `session`, `session_renew`,
`session_rich`): its completion carries `verdict=ReviewVerdict(approve=True)`
and no result. It counts as a cycle of its own (tallied as `reviews` besides),
so a reviewed task is two cycles: its work and its review (bench/reviews.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import itertools
import multiprocessing as mp
import os
import random
import secrets
import time
from collections.abc import Sequence

import grpc
import grpc.aio

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from .daemon import CHANNEL_OPTIONS, bearer, duration

ECHO_IDLE = "/bench.Echo/Idle"
ECHO_COMPLETE = "/bench.Echo/Complete"
ECHO_SESSION = "/bench.Echo/Session"
ATTEMPTS = 20
KINDS = ("idle", "session", "session_renew", "session_rich", "echo", "echo_bidi", "sdk")
# The floors' message sizes (bench/grpc_floor.py answers with the same).
CLAIM_BYTES = b"c" * 200  # about the size of a corral Claim message
COMPLETE_OP_BYTES = b"o" * 160  # a Session `complete` op, with its op id and claim token
REPLY_BYTES = b"r" * 160  # about the size of a CompleteTaskResponse / a complete's op result
RESOURCE_EXHAUSTED = grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]


def _identity(value: bytes) -> bytes:
    return value


@dataclasses.dataclass
class ClientJob:
    kind: str  # one of KINDS
    address: str
    members: list[tuple[str, str]]  # (teammate name, token)
    target: int  # completions across all processes that end the run
    deadline_s: float  # hard bound on the run, from the go signal
    transport: str = ""  # `sdk` only: CORRAL_TRANSPORT for the SDK in this process


@dataclasses.dataclass
class _Tally:
    latencies: list[float] = dataclasses.field(default_factory=list)
    completed: int = 0
    errors: int = 0
    refused: int = 0  # RESOURCE_EXHAUSTED answers, retried
    claims: int = 0  # claims received
    reviews: int = 0  # of `completed`: reviews' claims answered (approved)
    review_latencies: list[float] = dataclasses.field(default_factory=list)  # theirs, also in `latencies`
    first_claim: float = 0.0
    last_done: float = 0.0
    per_teammate: dict[str, int] = dataclasses.field(default_factory=dict)


def client_main(job: ClientJob, ready: mp.Queue, go, counter, results: mp.Queue) -> None:
    if job.kind == "sdk" and job.transport:
        os.environ["CORRAL_TRANSPORT"] = job.transport  # before the SDK opens anything
    try:
        results.put(asyncio.run(_main(job, ready, go, counter)))
    except BaseException as error:  # noqa: BLE001 (the driver must hear about it)
        ready.put(("error", repr(error)))
        results.put({"pid": os.getpid(), "error": repr(error)})


async def _main(job: ClientJob, ready: mp.Queue, go, counter) -> dict:
    channel = grpc.aio.insecure_channel(job.address, options=CHANNEL_OPTIONS)
    await asyncio.wait_for(channel.channel_ready(), 30)
    ready.put(("ready", os.getpid()))
    loop = asyncio.get_running_loop()
    if not await loop.run_in_executor(None, go.wait, 120):
        raise TimeoutError("no go signal")
    tally = _Tally()
    make = _TEAMMATES[job.kind]
    tasks = [
        asyncio.create_task(make(channel, job.address, name, token, tally, counter)) for name, token in job.members
    ]
    deadline = time.monotonic() + job.deadline_s
    while counter.value < job.target and time.monotonic() < deadline:
        if all(task.done() for task in tasks):
            break
        await asyncio.sleep(0.005)
    for task in tasks:
        task.cancel()
    outcomes = await asyncio.gather(*tasks, return_exceptions=True)
    failures = [repr(o) for o in outcomes if isinstance(o, BaseException) and not isinstance(o, asyncio.CancelledError)]
    await channel.close()
    return {
        "pid": os.getpid(),
        "latencies": tally.latencies,
        "completed": tally.completed,
        "errors": tally.errors + len(failures),
        "error_samples": failures[:3],
        "refused": tally.refused,
        "claims": tally.claims,
        "reviews": tally.reviews,
        "review_latencies": tally.review_latencies,
        "first_claim": tally.first_claim,
        "last_done": tally.last_done,
        "per_teammate": {name: tally.per_teammate.get(name, 0) for name, _ in job.members},
    }


def _claimed(tally: _Tally) -> float:
    started = time.monotonic()
    tally.first_claim = tally.first_claim or started
    tally.claims += 1
    return started


def _count(tally: _Tally, counter, name: str, started: float, review: bool = False) -> None:
    done = time.monotonic()
    tally.latencies.append(done - started)
    if review:
        tally.reviews += 1
        tally.review_latencies.append(done - started)
    tally.completed += 1
    tally.per_teammate[name] = tally.per_teammate.get(name, 0) + 1
    tally.last_done = max(tally.last_done, done)
    with counter.get_lock():
        counter.value += 1


APPROVE = pb.ReviewVerdict(approve=True)


def _completion(claim: pb.Claim, **fields) -> pb.CompleteTaskRequest:
    """The completion of `claim`: on a review's claim, an approving verdict and no result
    (a result there is INVALID_ARGUMENT); on any other, exactly the request it always was."""
    if claim.HasField("review"):
        fields["verdict"] = APPROVE
    return pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, **fields)


def _open_request() -> pb.IdleRequest:
    return pb.IdleRequest(slots=1, max_idle_polls=10_000, poll_interval=duration(5))


async def _backoff(tally: _Tally) -> None:
    tally.refused += 1
    await asyncio.sleep(random.uniform(0.05, 0.25))


# ---------------------------------------------------------------- corral: Idle + unary


async def _idle_teammate(channel, address: str, name: str, token: str, tally: _Tally, counter) -> None:
    stub = pb_grpc.TeammateServiceStub(channel)
    md = bearer(token)
    for _ in range(ATTEMPTS):  # reopen only when the daemon said "overloaded, retry"
        try:
            async for response in stub.Idle(_open_request(), metadata=md):
                if response.WhichOneof("event") != "claim":
                    continue
                started = _claimed(tally)
                claim = response.claim
                complete = _completion(claim)
                if await _retrying(stub.CompleteTask, complete, md, tally):
                    _count(tally, counter, name, started, review=complete.HasField("verdict"))
            return
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            await _backoff(tally)


async def _retrying(method, request, md, tally: _Tally) -> bool:
    """A unary call, retried while the daemon answers RESOURCE_EXHAUSTED (as RetryInfo asks)."""
    for _ in range(ATTEMPTS):
        try:
            await method(request, metadata=md, timeout=60)
            return True
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                tally.errors += 1
                return False
            await _backoff(tally)
    tally.errors += 1
    return False


# ---------------------------------------------------------------- corral: Session


class _SessionEnded(Exception):
    """The daemon ended the Session stream while an op waited for its result."""


async def _session_teammate(channel, address: str, name: str, token: str, tally: _Tally, counter) -> None:
    await _session_stream(
        channel, token, tally, lambda call, op_ids: _session_cycles(call, op_ids, name, tally, counter)
    )


async def _session_renew_teammate(channel, address: str, name: str, token: str, tally: _Tally, counter) -> None:
    await _session_stream(
        channel, token, tally, lambda call, op_ids: _renewing_cycles(call, op_ids, name, tally, counter, rich=False)
    )


async def _session_rich_teammate(channel, address: str, name: str, token: str, tally: _Tally, counter) -> None:
    await _session_stream(
        channel, token, tally, lambda call, op_ids: _renewing_cycles(call, op_ids, name, tally, counter, rich=True)
    )


async def _session_stream(channel, token: str, tally: _Tally, cycles) -> None:
    """Opens a Session and runs `await cycles(call, op_ids)` on it, reopening only when the
    daemon said "overloaded, retry"."""
    stub = pb_grpc.TeammateServiceStub(channel)
    md = bearer(token)
    # Op ids are unique per teammate for a day, across streams and runs on the same daemon.
    op_ids = (f"{secrets.token_hex(6)}-{n}" for n in itertools.count(1))
    for _ in range(ATTEMPTS):
        call = stub.Session(metadata=md)
        try:
            await call.write(pb.SessionRequest(open=_open_request()))
            await cycles(call, op_ids)
            return
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.RESOURCE_EXHAUSTED:
                raise
            await _backoff(tally)
        finally:
            call.cancel()


async def _first_claim(call):
    """The next claim the stream sends; None once it has ended."""
    while True:
        response = await call.read()
        if response is grpc.aio.EOF:
            return None
        if response.WhichOneof("event") == "claim":
            return response.claim


async def _session_cycles(call, op_ids, name: str, tally: _Tally, counter) -> None:
    """claim → `complete` op, whose result brings the next claim (a handoff)."""
    claim = None
    while True:
        if claim is None:
            claim = await _first_claim(call)
            if claim is None:
                return
        started = _claimed(tally)
        complete = _completion(claim)
        result, claim = await _op(call, op_ids, pb.SessionRequest(complete=complete), tally)
        if result.status.code == 0:
            _count(tally, counter, name, started, review=complete.HasField("verdict"))
        else:
            tally.errors += 1


RICH_USAGE = pb.Usage(input_tokens=1200, output_tokens=300, cost_micros=4500, model="bench-model")


async def _renewing_cycles(call, op_ids, name: str, tally: _Tally, counter, rich: bool) -> None:
    """claim → `renew` op → `complete` op; with `rich`, progress and usage ride on both."""
    claim = None
    while True:
        if claim is None:
            claim = await _first_claim(call)
            if claim is None:
                return
        started = _claimed(tally)
        task_id, claim_token = claim.task.id, claim.claim_token
        if rich:
            renew = pb.RenewLeaseRequest(
                task_id=task_id,
                claim_token=claim_token,
                progress="halfway there",
                progress_fraction=0.5,
                usage=RICH_USAGE,
            )
            complete = _completion(claim, usage=RICH_USAGE)
        else:
            renew = pb.RenewLeaseRequest(task_id=task_id, claim_token=claim_token)
            complete = _completion(claim)
        result, claim = await _op(call, op_ids, pb.SessionRequest(renew=renew), tally)
        if result.status.code != 0:
            tally.errors += 1
            continue
        result, claim = await _op(call, op_ids, pb.SessionRequest(complete=complete), tally, claim)
        if result.status.code == 0:
            _count(tally, counter, name, started, review=complete.HasField("verdict"))
        else:
            tally.errors += 1


async def _op(call, op_ids, request: pb.SessionRequest, tally: _Tally, claim=None):
    """Sends one op, again under a new id while it is refused as overloaded; its result
    and the claim that came with it (or `claim`, one that came before)."""
    for _ in range(ATTEMPTS):
        request.op_id = next(op_ids)
        await call.write(request)
        result, arrived = await _op_result(call, request.op_id)
        claim = arrived or claim
        if result.status.code != RESOURCE_EXHAUSTED:
            break
        await _backoff(tally)  # a refused op ran nothing
    return result, claim


async def _op_result(call, op_id: str):
    """Reads until the op result for `op_id`; returns it and the claim that came with it or before, if any."""
    claim = None
    while True:
        response = await call.read()
        if response is grpc.aio.EOF:
            raise _SessionEnded(f"stream ended before the result of op {op_id}")
        if response.WhichOneof("event") == "claim":
            claim = response.claim
        if response.HasField("op_result") and response.op_result.op_id == op_id:
            return response.op_result, claim


# ---------------------------------------------------------------- the echo floors


async def _echo_teammate(channel, address: str, name: str, token: str, tally: _Tally, counter) -> None:
    idle = channel.unary_stream(ECHO_IDLE, request_serializer=_identity, response_deserializer=_identity)
    complete = channel.unary_unary(ECHO_COMPLETE, request_serializer=_identity, response_deserializer=_identity)
    md = bearer(token)
    key = name.encode()
    async for message in idle(key, metadata=md):
        started = _claimed(tally)
        await complete(key + b"|" + message[:64], metadata=md, timeout=60)
        _count(tally, counter, name, started)


async def _echo_bidi_teammate(channel, address: str, name: str, token: str, tally: _Tally, counter) -> None:
    session = channel.stream_stream(ECHO_SESSION, request_serializer=_identity, response_deserializer=_identity)
    call = session(metadata=bearer(token))
    try:
        await call.write(b"open|" + name.encode())
        if await call.read() is grpc.aio.EOF:  # the first claim
            return
        while True:
            started = _claimed(tally)
            await call.write(COMPLETE_OP_BYTES)
            if await call.read() is grpc.aio.EOF:  # the op result with the next claim
                return
            _count(tally, counter, name, started)
    finally:
        call.cancel()


# ---------------------------------------------------------------- the SDK


async def _sdk_teammate(channel, address: str, name: str, token: str, tally: _Tally, counter) -> None:
    import corral.aio  # noqa: PLC0415 (only this load needs the SDK)

    async with await corral.aio.Teammate.connect(address, token) as teammate:
        async for event in teammate.idle(max_idle_polls=10_000, poll_interval=5.0, slots=1):
            if isinstance(event, corral.aio.Claim):
                started = _claimed(tally)
                await event.complete(b"")
                _count(tally, counter, name, started)


_TEAMMATES = {
    "idle": _idle_teammate,
    "session": _session_teammate,
    "session_renew": _session_renew_teammate,
    "session_rich": _session_rich_teammate,
    "echo": _echo_teammate,
    "echo_bidi": _echo_bidi_teammate,
    "sdk": _sdk_teammate,
}


# ---------------------------------------------------------------- the driver


def run_clients(
    kind: str,
    address: str | Sequence[str],
    members: list[tuple[str, str]],
    *,
    target: int,
    deadline_s: float,
    processes: int = 2,
    transport: str = "",
) -> dict:
    """Runs `members` as teammates spread over `processes` client processes; returns the merged tally.

    With several addresses (daemons serving one PostgreSQL board), client process i talks to
    address i mod their number: `processes` a multiple of it splits the teammates evenly.
    """
    if kind not in KINDS:
        raise ValueError(f"unknown load {kind!r}; choose from {', '.join(KINDS)}")
    addresses = [address] if isinstance(address, str) else list(address)
    ctx = mp.get_context("spawn")
    ready, results = ctx.Queue(), ctx.Queue()
    go, counter = ctx.Event(), ctx.Value("q", 0)
    groups = [members[i::processes] for i in range(processes)]
    groups = [g for g in groups if g]
    procs = [
        ctx.Process(
            target=client_main,
            daemon=True,
            args=(
                ClientJob(kind, addresses[i % len(addresses)], group, target, deadline_s, transport),
                ready,
                go,
                counter,
                results,
            ),
        )
        for i, group in enumerate(groups)
    ]
    for proc in procs:
        proc.start()
    try:
        for _ in procs:
            status, detail = ready.get(timeout=120)
            if status != "ready":
                raise RuntimeError(f"client process failed to start: {detail}")
        started = time.monotonic()
        go.set()
        outs = [results.get(timeout=deadline_s + 120) for _ in procs]
    finally:
        for proc in procs:
            proc.join(30)
            if proc.is_alive():
                proc.kill()
    broken = [o["error"] for o in outs if "error" in o]
    if broken:
        raise RuntimeError(f"client process failed: {broken[0]}")
    latencies = [x for o in outs for x in o["latencies"]]
    completed = sum(o["completed"] for o in outs)
    last = max((o["last_done"] for o in outs), default=started)
    wall = max(last - started, 1e-9)
    per_teammate = {name: n for o in outs for name, n in o["per_teammate"].items()}
    return {
        "completed": completed,
        "reviews": sum(o["reviews"] for o in outs),
        "review_latencies": [x for o in outs for x in o["review_latencies"]],
        "wall_s": wall,
        "throughput": completed / wall,
        "latencies": latencies,
        "errors": sum(o["errors"] for o in outs),
        "refused": sum(o["refused"] for o in outs),
        "claims": sum(o["claims"] for o in outs),
        "per_teammate": per_teammate,
        "error_samples": [e for o in outs for e in o["error_samples"]][:3],
        "timed_out": completed < target,
    }


def spread(per_teammate: dict[str, int]) -> dict:
    """How evenly the completions were shared: max/min over the teammates (None when one did none)."""
    counts = list(per_teammate.values()) or [0]
    low, high = min(counts), max(counts)
    return {"max_completions": high, "min_completions": low, "max_over_min": high / low if low else None}
