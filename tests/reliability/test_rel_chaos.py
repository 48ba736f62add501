"""Chaos on the teammate side: holders SIGKILLed or SIGSTOPped mid-task, Idle streams dropped
right after a claim or a protocol message, and races between the Lead's control messages and
claims (design §2 invariants 1, 3, 5; §5 steps 1-3).
"""

from __future__ import annotations

import asyncio
import json
import random
import signal
import subprocess
import time

import grpc
import grpc.aio
import pytest

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc
from tests.support import percentile

from .rel_harness import (
    CHANNEL_OPTIONS,
    IN_DOUBT,
    Lead,
    child_process,
    dur,
    md,
    now_ms,
    pick,
    read_line,
    specs_for,
)
from .rel_history import Recorder, check

# ---------------------------------------------------------------- killed and stopped holders


def _spawn_holder(tmp_path, name: str, address: str, token: str, keep_stream_open: bool = False) -> subprocess.Popen:
    config = tmp_path / f"hold-{name}.json"
    config.write_text(json.dumps({"address": address, "token": token, "keep_stream_open": keep_stream_open}))
    log = open(tmp_path / f"hold-{name}.log", "wb")  # noqa: SIM115
    proc = child_process(
        "rel_team",
        "hold",
        str(config),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=log,
        start_new_session=True,
    )
    log.close()
    return proc


@pytest.mark.timeout(pick(60, 300))
def test_killed_and_stopped_holders_reclaimed_at_lease_end(daemons, tmp_path, figures):
    """Holders in child processes are SIGKILLed or SIGSTOPped right after their claim; the task is
    re-delivered to another teammate no earlier than the holder's lease end and within 1 s after;
    a resumed (SIGCONT) holder's stale token is refused with LEASE_EXPIRED."""
    n_holders, n_rounds = pick(10, 10), pick(1, 4)
    d = daemons().start()
    lead = Lead(d)
    standby_token = lead.add_teammate("standby")
    rng = random.Random(3)
    lateness_ms: list[float] = []
    stale_answers: dict[str, int] = {}
    attempts_ok = 0
    for r in range(n_rounds):
        tokens = {f"h{r}-{i}": lead.add_teammate(f"h{r}-{i}") for i in range(n_holders)}
        lead.create(
            [
                # No retry backoff: what is measured is how soon after the lease's end the
                # task is handed out again.
                pb.TaskSpec(
                    id=f"k{r}-{i}", title="held", lease_duration=dur(rng.randint(1000, 2000)), retry_backoff=dur(0)
                )
                for i in range(n_holders)
            ],
            f"round-{r}",
        )
        procs = {name: _spawn_holder(tmp_path, name, d.address, token) for name, token in tokens.items()}
        holds = {}
        try:
            for i, (name, proc) in enumerate(procs.items()):
                line = read_line(proc, 30)
                assert line, (tmp_path / f"hold-{name}.log").read_text()
                holds[name] = json.loads(line)
                proc.send_signal(signal.SIGKILL if i % 2 else signal.SIGSTOP)
            by_task = {h["task"]: (name, h) for name, h in holds.items()}
            # The standby teammate waits on its Idle stream for the re-deliveries.
            call = pb_grpc.TeammateServiceStub(lead.channel).Idle(
                pb.IdleRequest(slots=64, poll_interval=dur(1000), max_idle_polls=100),
                metadata=md(standby_token),
                timeout=30,
            )
            redelivered = {}
            mate = pb_grpc.TeammateServiceStub(lead.channel)
            for response in call:
                if response.HasField("claim"):
                    received = now_ms()
                    claim = response.claim
                    redelivered[claim.task.id] = claim
                    lateness_ms.append(received - by_task[claim.task.id][1]["lease_end"])
                    attempts_ok += claim.attempt == by_task[claim.task.id][1]["attempt"] + 1
                    mate.CompleteTask(
                        pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token),
                        metadata=md(standby_token),
                        timeout=10,
                    )
                    if len(redelivered) == len(holds):
                        break
            call.cancel()
            # Resume the stopped holders: their old token must be refused.
            for i, proc in enumerate(procs.values()):
                if i % 2 == 0:
                    proc.send_signal(signal.SIGCONT)
                    proc.stdin.write(b"complete\n")
                    proc.stdin.flush()
                    answer = json.loads(read_line(proc, 20) or b'{"complete": "NO_ANSWER"}')
                    key = f"{answer['complete']}/{answer.get('reason', '')}"
                    stale_answers[key] = stale_answers.get(key, 0) + 1
        finally:
            for proc in procs.values():
                if proc.poll() is None:
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                proc.wait(10)
    lead.close()
    samples = len(lateness_ms)
    figures(
        holders=samples,
        killed=samples // 2,
        stopped=samples - samples // 2,
        lateness_p50_ms=percentile(lateness_ms, 0.5),
        lateness_p99_ms=percentile(lateness_ms, 0.99),
        lateness_min_ms=min(lateness_ms),
        lateness_max_ms=max(lateness_ms),
        stale_holder_answers=stale_answers,
        attempt_incremented=f"{attempts_ok}/{samples}",
    )
    assert samples == n_holders * n_rounds
    assert min(lateness_ms) >= 0, "a task was re-delivered before its holder's lease ended"
    assert max(lateness_ms) <= 1000, "a task was re-delivered more than 1 s after its holder's lease ended"
    assert stale_answers == {"FAILED_PRECONDITION/LEASE_EXPIRED": samples - samples // 2}
    assert attempts_ok == samples


@pytest.mark.timeout(60)
def test_frozen_holder_with_open_stream_does_not_get_the_task_back(daemon, tmp_path, figures):
    """A holder SIGSTOPped with its Idle stream open: once its lease expires, the task goes to a
    teammate that is alive (here one that becomes free right after the expiry), not back to the
    frozen holder, and it does not fail because of the frozen holder."""
    lead = Lead(daemon)
    frozen = lead.add_teammate("frozen")
    standby = lead.add_teammate("standby")
    stub = pb_grpc.TeammateServiceStub(lead.channel)
    lead.create([pb.TaskSpec(id="busy", title="keeps the standby busy", lease_duration=dur(60_000))], "busy")
    standby_call = stub.Idle(
        pb.IdleRequest(poll_interval=dur(1000), max_idle_polls=60), metadata=md(standby), timeout=30
    )
    busy = next(standby_call).claim
    lead.create([pb.TaskSpec(id="t", title="held", lease_duration=dur(1000))], "t")
    proc = _spawn_holder(tmp_path, "frozen", daemon.address, frozen, keep_stream_open=True)
    try:
        held = json.loads(read_line(proc, 30))
        proc.send_signal(signal.SIGSTOP)
        feed = lead.lead.Watch(pb.WatchRequest(after_seq=0), metadata=lead.md, timeout=20)
        owners, expired_seen = [], False
        for event in feed:
            if not event.HasField("task_changed") or event.task_changed.id != "t":
                continue
            state = event.task_changed.state
            if state == pb.TASK_STATE_PENDING and event.task_changed.attempt >= 1:
                if not expired_seen:  # the frozen holder's lease ended: the standby becomes free now
                    expired_seen = True
                    stub.CompleteTask(
                        pb.CompleteTaskRequest(task_id="busy", claim_token=busy.claim_token),
                        metadata=md(standby),
                        timeout=10,
                    )
            elif state == pb.TASK_STATE_IN_PROGRESS and expired_seen:
                owners.append(event.task_changed.owner)
                break
            elif state in (pb.TASK_STATE_FAILED, pb.TASK_STATE_CANCELED):
                owners.append(pb.TaskState.Name(state))
                break
        feed.cancel()
        standby_call.cancel()
        task = lead.get_task("t")
    finally:
        proc.send_signal(signal.SIGCONT)
        proc.kill()
        proc.wait(10)
    with daemon.board() as conn:
        frozen_claims = conn.execute("SELECT count(*) FROM claims WHERE teammate = 'frozen'").fetchone()[0]
    lead.close()
    figures(
        holder_lease_end=held["lease_end"],
        next_owner=owners,
        claims_handed_to_frozen=frozen_claims,
        task_state=pb.TaskState.Name(task.state),
        attempt=task.attempt,
    )
    assert owners == ["standby"]
    assert frozen_claims == 1


# ---------------------------------------------------------------- streams dropped after a claim


@pytest.mark.timeout(60)
@pytest.mark.parametrize("action", ["error", "kill"])
def test_daemon_drops_stream_right_after_claim_sent(daemons, figures, action):
    """Failpoint `after_claim_sent`: the stream breaks (or the daemon dies) just after a claim is
    written to it. The next stream re-sends the same claim (token, fence, attempt)."""
    d = daemons().start(f"after_claim_sent={action}:1")
    lead = Lead(d)
    token = lead.add_teammate("a")
    lead.create(specs_for([("t1", []), ("t2", [])]), "r")
    stub = pb_grpc.TeammateServiceStub(lead.channel)
    first = []
    with pytest.raises(grpc.RpcError) as raised:
        for response in stub.Idle(pb.IdleRequest(), metadata=md(token), timeout=10):
            first.append(response.claim)
    if action == "kill":
        assert d.wait_exit(10) == -signal.SIGKILL
        d.start()
    again = None
    for response in stub.Idle(pb.IdleRequest(), metadata=md(token), timeout=10):
        again = response.claim
        break
    with d.board() as conn:
        rows = conn.execute("SELECT token, fence, attempt FROM claims").fetchall()
    lead.close()
    figures(
        action=action,
        stream_status=raised.value.code().name,
        claims_seen_before_drop=len(first),
        resent_same_token=bool(first) and again.claim_token == first[0].claim_token,
        claims_in_db=len(rows),
    )
    assert rows == [(again.claim_token, again.fence, again.attempt)]
    assert len(first) <= 1
    if first:
        assert (first[0].claim_token, first[0].fence, first[0].attempt) == (
            again.claim_token,
            again.fence,
            again.attempt,
        )


@pytest.mark.timeout(60)
def test_protocol_message_redelivered_after_drop_and_gates_claims(daemon, figures):
    """A stream dropped right after a shutdown_request / plan_decision: the message is re-delivered
    on the next stream, and no claim arrives until it is acknowledged (and answered)."""
    lead = Lead(daemon)
    stub = pb_grpc.TeammateServiceStub(lead.channel)
    token = lead.add_teammate("s")
    planner = lead.add_teammate("p", require_plan=True)
    lead.create([pb.TaskSpec(id=f"t{i}", title="t") for i in range(4)], "r")
    results = {}

    def next_event(call):
        response = next(call)
        return response.WhichOneof("event"), response

    def quiet(call, seconds: float) -> list[str]:
        """What a stream delivers within `seconds` (expected: nothing)."""
        seen = []
        try:
            for response in call:
                seen.append(response.WhichOneof("event"))
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.DEADLINE_EXCEEDED, error
        return seen

    # Shutdown request: drop, re-delivery, gate until answered.
    request = lead.lead.RequestShutdown(
        pb.RequestShutdownRequest(name="s", reason="r", grace=dur(60_000)), metadata=lead.md
    )
    call = stub.Idle(pb.IdleRequest(poll_interval=dur(100)), metadata=md(token))
    kind, first = next_event(call)
    call.cancel()  # dropped right after the protocol message, before the ack
    call = stub.Idle(pb.IdleRequest(poll_interval=dur(100)), metadata=md(token), timeout=0.6)
    kind2, second = next_event(call)
    results["shutdown_redelivered"] = (
        kind == kind2 == "shutdown_request"
        and first.shutdown_request.seq == second.shutdown_request.seq
        and first.shutdown_request.request_id == request.request_id
    )
    results["delivered_while_unacked"] = quiet(call, 0.6)
    stub.AckMessages(pb.AckMessagesRequest(through_seq=second.shutdown_request.seq), metadata=md(token))
    call = stub.Idle(pb.IdleRequest(poll_interval=dur(100)), metadata=md(token), timeout=0.6)
    results["delivered_while_shutdown_pending"] = quiet(call, 0.6)
    stub.RespondShutdown(pb.RespondShutdownRequest(request_id=request.request_id, approve=False), metadata=md(token))
    call = stub.Idle(pb.IdleRequest(poll_interval=dur(100)), metadata=md(token), timeout=10)
    results["after_answer"] = next_event(call)[0]
    call.cancel()

    # Plan decision: drop, re-delivery, gate until acknowledged.
    plan_id = stub.SubmitPlan(pb.SubmitPlanRequest(plan="do it"), metadata=md(planner)).plan_id
    lead.lead.DecidePlan(pb.DecidePlanRequest(plan_id=plan_id, approve=True), metadata=lead.md)
    call = stub.Idle(pb.IdleRequest(poll_interval=dur(100)), metadata=md(planner))
    kind, first = next_event(call)
    call.cancel()
    call = stub.Idle(pb.IdleRequest(poll_interval=dur(100)), metadata=md(planner), timeout=0.6)
    kind2, second = next_event(call)
    results["decision_redelivered"] = (
        kind == kind2 == "plan_decision" and first.plan_decision.seq == second.plan_decision.seq
    )
    results["delivered_while_decision_unacked"] = quiet(call, 0.6)
    stub.AckMessages(pb.AckMessagesRequest(through_seq=second.plan_decision.seq), metadata=md(planner))
    call = stub.Idle(pb.IdleRequest(poll_interval=dur(100)), metadata=md(planner), timeout=10)
    results["after_ack"] = next_event(call)[0]
    call.cancel()
    lead.close()
    figures(**results)
    assert results["shutdown_redelivered"] and results["decision_redelivered"]
    assert results["delivered_while_unacked"] == [] and results["delivered_while_shutdown_pending"] == []
    assert results["delivered_while_decision_unacked"] == []
    assert results["after_answer"] == "claim" and results["after_ack"] == "claim"


# ---------------------------------------------------------------- control messages racing claims


class RaceMate:
    """One teammate of the race test: a stream reader that checks every delivery at the moment
    it arrives, and a processor that acts on deliveries (and sometimes drops the stream)."""

    def __init__(
        self, name: str, token: str, kind: str, channel, lead_stub, lead_md, rng: random.Random, recorder: Recorder
    ) -> None:
        self.name, self.kind, self.rng, self.rec = name, kind, rng, recorder
        self.md = md(token)
        self.stub = pb_grpc.TeammateServiceStub(channel)
        self.lead, self.lead_md = lead_stub, lead_md
        self.queue: asyncio.Queue = asyncio.Queue()
        self.closed: set = {("plan",)} if kind == "plan" else set()  # why a new claim may not arrive now
        self.seen_tokens: set[str] = set()
        self.violations: list[str] = []
        self.stream_no = 0
        self.call = None
        self.reader: asyncio.Task | None = None
        self.expect_claim: str | None = None  # a dropped claim: must be re-sent first on the next stream
        self.expect_seq: int | None = None  # a dropped protocol message: must be re-delivered
        self.newest_plan: str | None = None
        self.round_task: str | None = None
        self.round_control_first = False
        self.round_control_seen = False
        self.task_done = asyncio.Event()
        self.answered = asyncio.Event()
        self.stats = {
            "claim_before_control": 0,
            "control_before_claim": 0,
            "drops_after_claim": 0,
            "drops_after_protocol": 0,
            "stale_plan_approvals": 0,
            "rejections": 0,
            "streams": 0,
        }

    # ------------------------------------------------------------ the stream

    def open_stream(self) -> None:
        self.stream_no += 1
        self.stats["streams"] += 1
        self.call = self.stub.Idle(pb.IdleRequest(poll_interval=dur(1000), max_idle_polls=10_000), metadata=self.md)
        self.reader = asyncio.ensure_future(self.read(self.call, self.stream_no))

    async def read(self, call, stream_no: int) -> None:
        first = True
        try:
            async for response in call:
                kind = response.WhichOneof("event")
                if kind == "claim":
                    self.rec.claim(self.name, response.claim, stream_no)
                    self.on_claim_arrival(response.claim, first)
                elif kind in ("shutdown_request", "plan_decision"):
                    item = getattr(response, kind)
                    self.closed.add(("proto", item.seq))
                    if kind == "shutdown_request":
                        self.closed.add(("shutdown", item.request_id))
                    if self.expect_seq == item.seq:
                        self.expect_seq = None
                    if self.round_task is not None:
                        self.round_control_seen = True
                if first and self.expect_claim is not None:
                    if kind != "claim" or response.claim.claim_token != self.expect_claim:
                        self.violations.append(f"{self.name}: held claim not re-sent first on a new stream ({kind})")
                    self.expect_claim = None
                first = False
                await self.queue.put((stream_no, kind, response))
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.CANCELLED:
                self.violations.append(f"{self.name}: stream ended {error.code().name}")

    def on_claim_arrival(self, claim, first: bool) -> None:
        token = claim.claim_token
        if claim.task.required_role and claim.task.required_role != self.name:
            self.violations.append(f"{self.name}: got {claim.task.id} which requires role {claim.task.required_role}")
        if token in self.seen_tokens:
            return  # a re-send of a claim we hold: allowed while gated
        self.seen_tokens.add(token)
        if self.closed:
            self.violations.append(f"{self.name}: new claim {claim.task.id} delivered while gated by {self.closed}")
        if self.expect_seq is not None:
            self.violations.append(f"{self.name}: new claim before the dropped protocol message was re-delivered")
        if claim.task.id == self.round_task:
            if self.round_control_first and not self.round_control_seen:
                self.violations.append(f"{self.name}: claim delivered before a control message sent earlier")
            key = "control_before_claim" if self.round_control_seen else "claim_before_control"
            self.stats[key] += 1

    def drop(self) -> None:
        self.call.cancel()
        self.open_stream()

    # ------------------------------------------------------------ the processor

    async def process(self) -> None:
        while True:
            stream_no, kind, response = await self.queue.get()
            if stream_no != self.stream_no:
                continue  # lost with a dropped stream
            if kind == "claim":
                claim = response.claim
                if self.rng.random() < 0.1:
                    self.stats["drops_after_claim"] += 1
                    self.expect_claim = claim.claim_token
                    self.drop()
                    continue
                record = self.rec.begin("complete", self.name, claim.task.id, claim.claim_token, result="")
                await self.rpc(
                    self.stub.CompleteTask,
                    pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token),
                    self.md,
                )
                self.rec.end(record, "ok")
                if claim.task.id == self.round_task:
                    self.task_done.set()
            elif kind in ("shutdown_request", "plan_decision"):
                item = getattr(response, kind)
                if self.rng.random() < 0.1:
                    self.stats["drops_after_protocol"] += 1
                    self.expect_seq = item.seq
                    self.drop()
                    continue
                if kind == "plan_decision" and item.approve and item.plan_id == self.newest_plan:
                    self.closed.discard(("plan",))
                self.closed.discard(("proto", item.seq))
                await self.rpc(self.stub.AckMessages, pb.AckMessagesRequest(through_seq=item.seq), self.md)
                if kind == "shutdown_request":
                    self.closed.discard(("shutdown", item.request_id))
                    await self.rpc(
                        self.stub.RespondShutdown,
                        pb.RespondShutdownRequest(request_id=item.request_id, approve=False, reason="busy"),
                        self.md,
                    )
                    self.answered.set()

    async def rpc(self, method, request, metadata):
        for _ in range(100):
            try:
                return await method(request, metadata=metadata, timeout=10)
            except grpc.aio.AioRpcError as error:
                if error.code() not in IN_DOUBT | {grpc.StatusCode.RESOURCE_EXHAUSTED}:
                    raise
                await asyncio.sleep(0.02)
        raise AssertionError("call never answered")

    # ------------------------------------------------------------ the rounds (the Lead's side)

    async def round(self, number: int) -> None:
        task_id = f"{self.name}-r{number}"
        spec = pb.TaskSpec(id=task_id, title="race", required_role=self.name)
        create = self.rpc(self.lead.CreateTasks, pb.CreateTasksRequest(tasks=[spec], request_id=task_id), self.lead_md)
        self.task_done.clear()
        self.answered.clear()
        self.round_control_seen = False
        self.round_control_first = False
        if self.kind == "shutdown":
            shutdown = self.rpc(
                self.lead.RequestShutdown,
                pb.RequestShutdownRequest(name=self.name, reason=f"round {number}", grace=dur(600_000)),
                self.lead_md,
            )
            order = self.rng.choice(["concurrent", "control_first", "task_first"])
            self.round_task = task_id
            if order == "concurrent":
                await asyncio.gather(shutdown, create)
            elif order == "control_first":
                self.round_control_first = True
                await shutdown
                await create
            else:
                await create
                await shutdown
            waits = [self.task_done.wait(), self.answered.wait()]
        else:
            self.closed.add(("plan",))
            first = (await self.rpc(self.stub.SubmitPlan, pb.SubmitPlanRequest(plan=f"p{number}"), self.md)).plan_id
            self.newest_plan = first
            second = None
            if self.rng.random() < 0.3:
                second = (
                    await self.rpc(self.stub.SubmitPlan, pb.SubmitPlanRequest(plan=f"q{number}"), self.md)
                ).plan_id
                self.newest_plan = second
            approve = second is not None or self.rng.random() > 0.15
            self.round_task = task_id
            await asyncio.gather(
                self.rpc(self.lead.DecidePlan, pb.DecidePlanRequest(plan_id=first, approve=approve), self.lead_md),
                create,
            )
            if second is not None:  # an approval of an older plan must not open the gate
                self.stats["stale_plan_approvals"] += 1
                await asyncio.sleep(self.rng.uniform(0, 0.03))  # a random moment for the newer decision
                await self.rpc(self.lead.DecidePlan, pb.DecidePlanRequest(plan_id=second, approve=True), self.lead_md)
            elif not approve:
                self.stats["rejections"] += 1
                third = (await self.rpc(self.stub.SubmitPlan, pb.SubmitPlanRequest(plan=f"r{number}"), self.md)).plan_id
                self.newest_plan = third
                await self.rpc(self.lead.DecidePlan, pb.DecidePlanRequest(plan_id=third, approve=True), self.lead_md)
            waits = [self.task_done.wait()]
        try:
            await asyncio.wait_for(asyncio.gather(*waits), 20)
        except TimeoutError:
            self.violations.append(f"{self.name}: round {number} did not finish (gate never opened?)")
            raise
        if self.expect_claim or self.expect_seq:
            self.violations.append(f"{self.name}: round {number} ended with a dropped item never re-delivered")


@pytest.mark.timeout(pick(90, 600))
def test_control_messages_race_claims(daemon, figures):
    """RequestShutdown / DecidePlan racing task creation, with streams dropped right after a claim
    or a protocol message: no new claim is ever delivered while a protocol message is unacknowledged,
    a shutdown is pending, or the newest plan is unapproved; dropped items are re-delivered."""
    n_mates, n_rounds = pick(6, 10), pick(17, 100)
    lead = Lead(daemon)
    tokens = {}
    for i in range(n_mates):
        kind = "plan" if i % 2 else "shutdown"
        name = f"{kind}{i}"
        tokens[name] = (
            lead.lead.AddTeammate(
                pb.AddTeammateRequest(name=name, roles=[name], require_plan_approval=kind == "plan"), metadata=lead.md
            ).token,
            kind,
        )
    lead.close()

    async def main():
        channel = grpc.aio.insecure_channel(daemon.address, options=CHANNEL_OPTIONS)
        lead_stub = pb_grpc.LeadServiceStub(channel)
        rng = random.Random(11)
        mates = [
            RaceMate(
                name, token, kind, channel, lead_stub, md(daemon.lead_token()), random.Random(rng.random()), recorder
            )
            for name, (token, kind) in tokens.items()
        ]
        processors = []
        for mate in mates:
            mate.open_stream()
            processors.append(asyncio.ensure_future(mate.process()))

        async def drive(mate):
            for number in range(n_rounds):
                await mate.round(number)

        started = time.monotonic()
        try:
            await asyncio.gather(*(drive(m) for m in mates))
        finally:
            for task in processors:
                task.cancel()
            for mate in mates:
                mate.call.cancel()
            await asyncio.gather(*processors, *(m.reader for m in mates), return_exceptions=True)
            await channel.close()
        return mates, time.monotonic() - started

    recorder = Recorder()
    mates, elapsed = asyncio.run(main())
    with daemon.board() as conn:
        history, history_violations = check(recorder.events, conn)
    totals = {}
    for mate in mates:
        for key, value in mate.stats.items():
            totals[key] = totals.get(key, 0) + value
    violations = [v for m in mates for v in m.violations]
    figures(
        races=n_mates * n_rounds,
        seconds=elapsed,
        violations=len(violations),
        **totals,
        history_claims=history["claims"],
        history_violations=len(history_violations),
    )
    assert not violations, "\n".join(violations[:20])
    assert not history_violations, "\n".join(history_violations[:20])
