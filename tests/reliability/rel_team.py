"""Teammates for the reliability suite, on the generated stubs only (grpc.aio).

Used in-process (`run_team`) and as a child process:

    python -m tests.reliability.rel_team work CONFIG.json   # a team of working teammates; SIGTERM ends it
    python -m tests.reliability.rel_team hold CONFIG.json   # claim one task, report it, then wait
                                                            # (for SIGKILL/SIGSTOP); "keep_stream_open": true
                                                            # keeps its Idle stream open meanwhile

Every claim delivery and every renew/complete/fail/release is recorded (rel_history),
in-doubt calls are retried with the same claim token until a definite answer.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import pathlib
import random
import signal
import sys
import time

import grpc
import grpc.aio

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from .rel_harness import CHANNEL_OPTIONS, IN_DOUBT, dur, md, status_details, ts_ms
from .rel_history import Recorder


@dataclasses.dataclass
class Behaviour:
    work_ms: tuple[int, int] = (20, 200)
    p_renew: float = 0.3
    p_fail: float = 0.03
    p_release: float = 0.03
    p_foreign: float = 0.05
    p_stall: float = 0.0  # stop renewing and finish around the lease end (expiry, reclaim, stale token)
    poll_ms: int = 200
    op_deadline_s: float = 60.0
    seed: int = 0


class Team:
    """Several teammates sharing one channel and one recorder (and a pool of claim tokens
    that other teammates may try to misuse: foreign-token attempts)."""

    def __init__(self, address: str, recorder: Recorder, behaviour: Behaviour) -> None:
        self.channel = grpc.aio.insecure_channel(address, options=CHANNEL_OPTIONS)
        self.stub = pb_grpc.TeammateServiceStub(self.channel)
        self.rec = recorder
        self.behaviour = behaviour
        self.current: dict[str, tuple[str, str]] = {}  # teammate -> (task, token) being worked on
        self.stop = asyncio.Event()
        self.stream_errors: dict[str, int] = {}
        self.streams = 0
        self.finished_tasks: set[str] = set()

    async def close(self) -> None:
        await self.channel.close()

    # ------------------------------------------------------------ calls

    async def op(self, kind: str, name: str, token_md, task: str, claim_token: str, call, request, **extra):
        """Runs one claim operation, retrying while its outcome is in doubt.

        Returns (reply or None, final record)."""
        deadline = time.monotonic() + self.behaviour.op_deadline_s
        backoff = 0.02
        while True:
            record = self.rec.begin(kind, name, task, claim_token, **extra)
            try:
                reply = await call(request, metadata=token_md, timeout=5)
            except asyncio.CancelledError:
                self.rec.end(record, "indoubt", "CANCELLED_LOCALLY")
                raise
            except grpc.aio.AioRpcError as error:
                code = error.code()
                reason, _ = status_details(error)
                if code in IN_DOUBT or code == grpc.StatusCode.RESOURCE_EXHAUSTED:
                    self.rec.end(record, "indoubt" if code in IN_DOUBT else "err", code.name, reason)
                    if time.monotonic() > deadline:
                        return None, record
                    await asyncio.sleep(backoff * (0.5 + random.random()))
                    backoff = min(backoff * 2, 0.3)
                    continue
                return None, self.rec.end(record, "err", code.name, reason)
            fields = {}
            if kind.endswith("renew"):
                fields["lease_end"] = ts_ms(reply.lease_expire_time)
            return reply, self.rec.end(record, "ok", **fields)

    # ------------------------------------------------------------ one teammate

    async def teammate(self, name: str, token: str) -> None:
        rng = random.Random(f"{self.behaviour.seed}:{name}")
        token_md = md(token)
        request = pb.IdleRequest(poll_interval=dur(self.behaviour.poll_ms), max_idle_polls=10_000, slots=1)
        backoff = 0.02
        while not self.stop.is_set():
            self.streams += 1
            stream_id = self.streams
            call = self.stub.Idle(request, metadata=token_md)
            try:
                async for response in call:
                    backoff = 0.02
                    kind = response.WhichOneof("event")
                    if kind == "claim":
                        self.rec.claim(name, response.claim, stream_id)
                        await self.work(name, token_md, response.claim, rng)
                    elif kind in ("message", "plan_decision", "shutdown_request"):
                        item = getattr(response, kind)
                        await self.ack(token_md, item.seq)
                        if kind == "shutdown_request":
                            await self.stub.RespondShutdown(
                                pb.RespondShutdownRequest(request_id=item.request_id, approve=True),
                                metadata=token_md,
                                timeout=5,
                            )
                            self.rec.note("shutdown", tm=name)
                            return
                    elif kind == "idle_timeout":
                        break
            except grpc.aio.AioRpcError as error:
                code = error.code().name
                self.stream_errors[code] = self.stream_errors.get(code, 0) + 1
                if error.code() == grpc.StatusCode.UNAUTHENTICATED:
                    return
                await asyncio.sleep(backoff * (0.5 + rng.random()))
                backoff = min(backoff * 2, 0.3)
            finally:
                call.cancel()

    async def ack(self, token_md, seq: int) -> None:
        for _ in range(50):
            try:
                await self.stub.AckMessages(pb.AckMessagesRequest(through_seq=seq), metadata=token_md, timeout=5)
                return
            except grpc.aio.AioRpcError as error:
                if error.code() not in IN_DOUBT | {grpc.StatusCode.RESOURCE_EXHAUSTED}:
                    raise
                await asyncio.sleep(0.05)

    async def work(self, name: str, token_md, claim: pb.Claim, rng: random.Random) -> None:
        b = self.behaviour
        task, claim_token = claim.task.id, claim.claim_token
        self.current[name] = (task, claim_token)
        try:
            lease_ms = claim.task.lease_duration.seconds * 1000 + claim.task.lease_duration.nanos // 1_000_000
            if rng.random() < b.p_stall:
                # A stalled teammate: no renewal; it wakes up just before or after its lease end.
                lease_end = ts_ms(claim.lease_expire_time)
                await asyncio.sleep(max(0.0, (lease_end - time.time_ns() / 1e6) / 1000 + rng.uniform(-0.2, 0.3)))
                result = f"{task}|{claim_token}".encode()
                await self.op(
                    "complete",
                    name,
                    token_md,
                    task,
                    claim_token,
                    self.stub.CompleteTask,
                    pb.CompleteTaskRequest(task_id=task, claim_token=claim_token, result=result),
                    result=result.hex(),
                    stalled=True,
                )
                return
            remaining = rng.uniform(*b.work_ms) / 1000
            renew_every = max(0.05, lease_ms / 3000)
            renewed = False
            while remaining > 0:
                step = min(remaining, renew_every)
                await asyncio.sleep(step)  # the "work"
                remaining -= step
                if remaining > 0 or rng.random() < b.p_renew:
                    renewed = True
                    reply, record = await self.op(
                        "renew",
                        name,
                        token_md,
                        task,
                        claim_token,
                        self.stub.RenewLease,
                        pb.RenewLeaseRequest(task_id=task, claim_token=claim_token),
                    )
                    if reply is None:
                        return  # lost the claim (a definite refusal) or gave up
            if not renewed and rng.random() < b.p_renew:
                reply, _ = await self.op(
                    "renew",
                    name,
                    token_md,
                    task,
                    claim_token,
                    self.stub.RenewLease,
                    pb.RenewLeaseRequest(task_id=task, claim_token=claim_token),
                )
                if reply is None:
                    return
            if rng.random() < b.p_foreign:
                await self.foreign(name, token_md, rng)
            roll = rng.random()
            if roll < b.p_fail:
                await self.op(
                    "fail",
                    name,
                    token_md,
                    task,
                    claim_token,
                    self.stub.FailTask,
                    pb.FailTaskRequest(task_id=task, claim_token=claim_token, error="injected", retryable=True),
                )
            elif roll < b.p_fail + b.p_release:
                await self.op(
                    "release",
                    name,
                    token_md,
                    task,
                    claim_token,
                    self.stub.ReleaseTask,
                    pb.ReleaseTaskRequest(task_id=task, claim_token=claim_token),
                )
            else:
                result = f"{task}|{claim_token}".encode()
                reply, _ = await self.op(
                    "complete",
                    name,
                    token_md,
                    task,
                    claim_token,
                    self.stub.CompleteTask,
                    pb.CompleteTaskRequest(task_id=task, claim_token=claim_token, result=result),
                    result=result.hex(),
                )
                if reply is not None:
                    self.finished_tasks.add(task)
        finally:
            self.current.pop(name, None)

    async def foreign(self, name: str, token_md, rng: random.Random) -> None:
        """Use another teammate's live claim token with our own credential: must be refused."""
        others = [(tm, held) for tm, held in self.current.items() if tm != name]
        if not others:
            return
        _, (task, claim_token) = rng.choice(others)
        kind = rng.choice(["renew", "complete", "release", "fail"])
        call, request = {
            "renew": (self.stub.RenewLease, pb.RenewLeaseRequest(task_id=task, claim_token=claim_token)),
            "complete": (
                self.stub.CompleteTask,
                pb.CompleteTaskRequest(task_id=task, claim_token=claim_token, result=b"forged"),
            ),
            "release": (self.stub.ReleaseTask, pb.ReleaseTaskRequest(task_id=task, claim_token=claim_token)),
            "fail": (
                self.stub.FailTask,
                pb.FailTaskRequest(task_id=task, claim_token=claim_token, error="forged", retryable=False),
            ),
        }[kind]
        await self.op("foreign_" + kind, name, token_md, task, claim_token, call, request)


async def run_team(
    address: str, teammates: dict[str, str], recorder: Recorder, behaviour: Behaviour, stop: asyncio.Event | None = None
) -> Team:
    """Runs the teammates until `stop` is set (then cancels them, recording in-flight calls)."""
    team = Team(address, recorder, behaviour)
    if stop is not None:
        team.stop = stop
    tasks = [asyncio.ensure_future(team.teammate(name, token)) for name, token in teammates.items()]
    await team.stop.wait()
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    await team.close()
    return team


# ---------------------------------------------------------------- child process modes


async def _work_main(config: dict) -> None:
    recorder = Recorder(pathlib.Path(config["history"]))
    behaviour = Behaviour(**{k: tuple(v) if k == "work_ms" else v for k, v in config["behaviour"].items()})
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, stop.set)
    print(json.dumps({"event": "started"}), flush=True)
    team = await run_team(config["address"], config["teammates"], recorder, behaviour, stop)
    recorder.note("team_exit", stream_errors=team.stream_errors, streams=team.streams)
    recorder.close()


async def _hold_main(config: dict) -> None:
    """Claim one task, print it, drop the stream (so no other claim lands here), then wait
    for commands on stdin: 'complete' tries to complete with the held token."""
    token_md = md(config["token"])
    # The Idle stream gets a connection of its own, closed once the claim is here: a stream left
    # open in a process that is then SIGSTOPped would take the task again when it is reclaimed.
    idle_channel = grpc.aio.insecure_channel(config["address"], options=CHANNEL_OPTIONS)
    call = pb_grpc.TeammateServiceStub(idle_channel).Idle(
        pb.IdleRequest(poll_interval=dur(1000), max_idle_polls=60, slots=1), metadata=token_md
    )
    claim = None
    async for response in call:
        if response.WhichOneof("event") == "claim":
            claim = response.claim
            break
    if not config.get("keep_stream_open"):
        call.cancel()
        await idle_channel.close()
    channel = grpc.aio.insecure_channel(config["address"], options=CHANNEL_OPTIONS)
    stub = pb_grpc.TeammateServiceStub(channel)
    print(
        json.dumps(
            {
                "task": claim.task.id,
                "token": claim.claim_token,
                "lease_end": ts_ms(claim.lease_expire_time),
                "fence": claim.fence,
                "attempt": claim.attempt,
                "w_recv": time.time_ns() / 1e6,
            }
        ),
        flush=True,
    )
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
    while True:
        line = (await reader.readline()).decode().strip()
        if not line:
            break
        if line == "complete":
            try:
                await stub.CompleteTask(
                    pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, result=b"stale"),
                    metadata=token_md,
                    timeout=10,
                )
                print(json.dumps({"complete": "OK", "reason": ""}), flush=True)
            except grpc.aio.AioRpcError as error:
                print(json.dumps({"complete": error.code().name, "reason": status_details(error)[0]}), flush=True)
    await channel.close()


def main() -> None:
    mode, config_path = sys.argv[1], sys.argv[2]
    config = json.loads(pathlib.Path(config_path).read_text())
    asyncio.run(_work_main(config) if mode == "work" else _hold_main(config))


if __name__ == "__main__":
    main()
