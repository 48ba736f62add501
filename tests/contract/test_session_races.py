"""Races between the Lead's control messages and completions that hand off (issue #15, design §2.5, §5).

A team of Session teammates (and Idle teammates completing with the unary
CompleteTask, whose handoff goes out on their Idle stream) each hold one claim
with plenty of tasks ready. In every round all of them, released together by a
barrier, complete their claim while the Lead sends each one a shutdown request,
a plan decision, a plain message or nothing, in a schedule drawn at random:
the Lead's call answered before the completion is sent, both in flight at
once, or the completion first. Each (teammate, round) is one race.

What must hold, for every claim a teammate receives:
- every inbox item committed before the claim arrived on the stream before it;
- no protocol message committed before the claim is still unacknowledged
  (on a Session: the ack's op result came before the claim);
- no claim at all committed while a shutdown request is unanswered.

"Committed before" is known three ways, each sound on its own: the Lead's reply
was received before the completion was sent (the next claim of a teammate with
one slot cannot commit before its completion did); the daemon clock of the
inbox item is before the claim's (one writer, a clock that never goes back);
and, for shutdown requests, the event log's order, which is exact for every
race. The races where the order is known are counted, and must be many.

Sizes: 40 teammates (28 Session, 12 Idle) x 26 rounds = 1,040 races (CORRAL_SOAK=1: x 5).
"""

from __future__ import annotations

import collections
import dataclasses
import random
import threading
import time
from typing import Any

import grpc
import pytest
from google.rpc import code_pb2

from corral.v1 import corral_pb2 as pb
from tests.reliability.rel_harness import SOAK
from tests.reliability.rel_history import Recorder

from .session_board import board_db, board_history, claims_of, inbox_send_ms, shutdown_gate_breaches
from .wire import Client, Daemon, spec

SESSION_MATES = 28
IDLE_MATES = 12
ROUNDS = 26 * (5 if SOAK else 1)
READ_TIMEOUT_S = 15.0
CONTROLS = ("shutdown", "plan", "message", "none")
CONTROL_WEIGHTS = (3, 3, 3, 1)
SCHEDULES = ("lead_first", "together", "completion_first")
PROTOCOL = {"shutdown_request", "plan_decision"}

pytestmark = pytest.mark.timeout(240 if SOAK else 120)


@dataclasses.dataclass
class Seen:
    """One thing a teammate's stream delivered, in stream order."""

    pos: int
    t: float
    kind: str  # claim, message, shutdown_request, plan_decision, result
    value: Any


@dataclasses.dataclass
class Control:
    """One control message the Lead sent in a race."""

    round: int
    kind: str  # shutdown, plan, message
    schedule: str
    key: str  # request id, plan id or message body: how its item is recognised on the stream
    t_reply: float | None = None  # when its reply was seen (after the commit)
    seq: int | None = None
    pos: int | None = None  # where it arrived on the stream
    ack_pos: int | None = None  # Session: where the op result of the ack covering it arrived
    t_ack_sent: float | None = None  # when that ack was sent

    @property
    def protocol(self) -> bool:
        return self.kind != "message"


@dataclasses.dataclass
class ClaimSeen:
    claim: pb.Claim
    pos: int
    t: float
    not_before: float  # the completion that freed the slot was sent then: the claim committed later
    handed_off: bool  # it came in the same response as that completion's op result


class Racer:
    """One teammate in the races: its stream, what it saw and what it sent."""

    def __init__(self, daemon: Daemon, client: Client, transport: str, seed: int, recorder: Recorder) -> None:
        self.daemon = daemon
        self.client = client
        self.name = client.name
        self.transport = transport
        self.rng = random.Random(seed)
        self.recorder = recorder
        self.seen: list[Seen] = []
        self.claims: list[ClaimSeen] = []
        self.controls: list[Control] = []
        self.claim: pb.Claim | None = None
        self.last_complete_sent = 0.0
        self.pending_ops: collections.deque[tuple[str, str, Any]] = collections.deque()
        self.op_numbers = iter(range(1, 1 << 30))
        self.completes_pending = 0
        self.complete_future: grpc.Future | None = None
        self.unhandled: list[Control] = []
        self.plan_id = ""
        self.handoffs = 0
        self.withheld = 0  # Session completions whose response carried no claim
        if transport == "session":
            self.stream: Any = client.session(timeout=300)
        else:
            self.stream = client.idle(timeout=300)

    # ------------------------------------------------------------ the stream

    def _note(self, kind: str, value: Any, t: float) -> Seen:
        seen = Seen(len(self.seen), t, kind, value)
        self.seen.append(seen)
        return seen

    def read_one(self) -> None:
        response = self.stream.next(READ_TIMEOUT_S)
        t = time.monotonic()
        result_kind = None
        if self.transport == "session" and response.HasField("op_result"):
            result_kind = self._result(response.op_result, t)
        which = response.WhichOneof("event")
        if which is not None:
            self._event(which, getattr(response, which), t, with_completion=result_kind == "complete")
        elif result_kind == "complete":
            self.withheld += 1

    def _result(self, result: pb.SessionOpResult, t: float) -> str:
        op_id, kind, detail = self.pending_ops.popleft()
        assert result.op_id == op_id, f"{self.name}: op result for {result.op_id!r}, expected {op_id!r}"
        assert result.status.code == code_pb2.OK, f"{self.name}: {kind} {op_id} failed: {result.status}"
        seen = self._note("result", (kind, op_id), t)
        if kind == "complete":
            self.completes_pending -= 1
            record = detail
            self.recorder.end(record, "ok", result=result.result.hex())
        elif kind == "ack":
            for control in self.controls:
                if control.seq is not None and control.seq <= detail and control.ack_pos is None:
                    control.ack_pos = seen.pos
        return kind

    def _event(self, which: str, item: Any, t: float, *, with_completion: bool) -> None:
        if which == "claim":
            seen = self._note("claim", item, t)
            self.claims.append(ClaimSeen(item, seen.pos, t, self.last_complete_sent, with_completion))
            self.recorder.claim(self.name, item, stream=1)
            self.claim = item
            if with_completion:
                self.handoffs += 1
            return
        if with_completion:
            self.withheld += 1
        seen = self._note(which, item, t)
        if which == "message":
            key = item.body
        elif which == "shutdown_request":
            key = item.request_id
        else:
            key = item.plan_id
        control = next((c for c in self.controls if c.key == key and c.pos is None), None)
        assert control is not None, f"{self.name}: an item nobody sent: {which} {item}"
        control.pos, control.seq = seen.pos, item.seq
        self.unhandled.append(control)

    def handle_inbox(self) -> None:
        """Answers and acknowledges what arrived, in a random order of answer and ack."""
        while self.unhandled:
            control = self.unhandled.pop(0)
            answer_first = self.rng.random() < 0.5
            if control.kind == "shutdown" and answer_first:
                self._answer_shutdown(control)
            self._ack(control)
            if control.kind == "shutdown" and not answer_first:
                self._answer_shutdown(control)

    def _answer_shutdown(self, control: Control) -> None:
        self.client.teammate.RespondShutdown(
            pb.RespondShutdownRequest(request_id=control.key, approve=False, reason="still working")
        )

    def _ack(self, control: Control) -> None:
        assert control.seq is not None
        control.t_ack_sent = time.monotonic()
        if self.transport == "session":
            op_id = f"ack-{next(self.op_numbers)}"
            self.pending_ops.append((op_id, "ack", control.seq))
            self.stream.send(pb.SessionRequest(op_id=op_id, ack=pb.AckMessagesRequest(through_seq=control.seq)))
        else:
            self.client.ack(control.seq)

    # ------------------------------------------------------------ the race

    def complete(self) -> None:
        claim = self.claim
        assert claim is not None
        self.claim = None
        request = pb.CompleteTaskRequest(task_id=claim.task.id, claim_token=claim.claim_token, result=b"r")
        record = self.recorder.begin("complete", self.name, claim.task.id, claim.claim_token)
        self.last_complete_sent = time.monotonic()
        if self.transport == "session":
            op_id = f"done-{next(self.op_numbers)}"
            self.pending_ops.append((op_id, "complete", record))
            self.completes_pending += 1
            self.stream.send(pb.SessionRequest(op_id=op_id, complete=request))
        else:
            future = self.client.teammate.CompleteTask.future(request)
            self.complete_future = future
            self.completes_pending += 1

            def done(future: grpc.Future, record=record) -> None:
                self.recorder.end(record, "ok", result=future.result().task.result.hex())

            future.add_done_callback(done)

    def prepare(self, round_no: int) -> tuple[str, str]:
        """Draws this round's control and schedule; a plan decision needs a plan first."""
        kind = self.rng.choices(CONTROLS, CONTROL_WEIGHTS)[0]
        schedule = self.rng.choice(SCHEDULES)
        if kind == "plan":
            self.plan_id = self.client.teammate.SubmitPlan(pb.SubmitPlanRequest(plan=f"plan {round_no}")).plan_id
        return kind, schedule

    def send_control(self, round_no: int, kind: str, schedule: str) -> grpc.Future:
        lead = self.daemon.lead.lead
        board = self.daemon.lead.board
        if kind == "shutdown":
            future = lead.RequestShutdown.future(pb.RequestShutdownRequest(name=self.name, reason=f"r{round_no}"))
            control = Control(round_no, kind, schedule, key="")
        elif kind == "plan":
            approve = self.rng.random() < 0.5
            future = lead.DecidePlan.future(pb.DecidePlanRequest(plan_id=self.plan_id, approve=approve))
            control = Control(round_no, kind, schedule, key=self.plan_id)
        else:
            body = f"race {self.name} {round_no}"
            future = board.SendMessage.future(pb.SendMessageRequest(to=self.name, body=body))
            control = Control(round_no, kind, schedule, key=body)

        def replied(future: grpc.Future) -> None:
            control.t_reply = control.t_reply or time.monotonic()

        self.controls.append(control)
        future.add_done_callback(replied)
        return future

    def race(self, round_no: int, kind: str, schedule: str) -> None:
        future = None
        if kind == "none":
            self.complete()
        elif schedule == "lead_first":
            future = self.send_control(round_no, kind, schedule)
            self._replied(future)
            self.complete()
        elif schedule == "together":
            if self.rng.random() < 0.5:
                future = self.send_control(round_no, kind, schedule)
                self.complete()
            else:
                self.complete()
                future = self.send_control(round_no, kind, schedule)
        else:
            self.complete()
            future = self.send_control(round_no, kind, schedule)
        if future is not None:
            self._replied(future)
        self.settle(round_no)

    def _replied(self, future: grpc.Future) -> None:
        """Waits for the Lead's reply; a shutdown's request id (how its item is known) is in it."""
        reply = future.result(timeout=READ_TIMEOUT_S)
        control = self.controls[-1]
        # The done callback, on gRPC's thread, may not have run yet: now is later still.
        control.t_reply = control.t_reply or time.monotonic()
        if control.kind == "shutdown":
            control.key = reply.request_id

    def settle(self, round_no: int) -> None:
        """Reads until the completion is answered, this round's control arrived and was handled,
        and the next claim is held."""
        while True:
            control = self.controls[-1] if self.controls and self.controls[-1].round == round_no else None
            self.handle_inbox()
            future = self.complete_future
            if future is not None and future.done():
                future.result()  # an Idle teammate's CompleteTask: it must have succeeded
                self.complete_future, self.completes_pending = None, 0
            control_done = control is None or (
                control.pos is not None
                and (control.ack_pos is not None if self.transport == "session" else control.t_ack_sent is not None)
            )
            acks_done = not any(kind == "ack" for _, kind, _ in self.pending_ops)
            if control_done and acks_done and self.claim is not None:
                if self.completes_pending == 0:
                    return
                if future is not None:  # its handoff came on the stream before the unary reply
                    future.result(timeout=READ_TIMEOUT_S)
                    continue
            try:
                self.read_one()
            except AssertionError as error:
                raise AssertionError(f"{error}; {self.state(round_no)}") from None

    def state(self, round_no: int) -> str:
        control = self.controls[-1] if self.controls else None
        return (
            f"{self.name} round {round_no}: control {control}, holding {self.claim is not None},"
            f" completions pending {self.completes_pending}, ops pending {list(self.pending_ops)[:3]},"
            f" last seen {[(s.kind, s.pos, getattr(getattr(s.value, 'task', None), 'id', '')) for s in self.seen[-4:]]}"
            f" future {self.complete_future!r}"
        )


def _run_team(daemon: Daemon, racers: list[Racer], rounds: int) -> None:
    barrier = threading.Barrier(len(racers), timeout=60)
    errors: list[BaseException] = []

    def work(racer: Racer) -> None:
        try:
            while racer.claim is None:
                racer.read_one()
            for round_no in range(rounds):
                kind, schedule = racer.prepare(round_no)
                barrier.wait()
                racer.race(round_no, kind, schedule)
        except BaseException as error:  # noqa: BLE001 (reported by the test thread)
            errors.append(error)
            barrier.abort()

    threads = [threading.Thread(target=work, args=(r,), name=f"racer {r.name}", daemon=True) for r in racers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=200)
    alive = [t.name for t in threads if t.is_alive()]
    assert not alive, f"racers still running: {alive}"
    real = [e for e in errors if not isinstance(e, threading.BrokenBarrierError)]
    if real or errors:
        raise (real or errors)[0]


@dataclasses.dataclass
class Verdict:
    controls: int = 0
    known_before: int = 0  # the control committed before the completion it raced, known by reply or clock
    known_after: int = 0  # it arrived after the claim that completion led to
    violations: list[str] = dataclasses.field(default_factory=list)


def _judge(racer: Racer, claim_ms: dict[str, int], send_ms: dict[tuple[str, int], int], verdict: Verdict) -> None:
    """Every claim against every control message of the same teammate (see the module's rules)."""
    for control in racer.controls:
        verdict.controls += 1
        where = f"{racer.name} round {control.round} ({control.schedule}): {control.kind} seq {control.seq}"
        if control.pos is None or control.seq is None or control.t_reply is None:
            verdict.violations.append(f"lost control message: {where} never arrived")
            continue
        committed_ms = send_ms[(racer.name, control.seq)]
        for seen in racer.claims:
            by_reply = control.t_reply < seen.not_before
            by_clock = committed_ms < claim_ms[seen.claim.claim_token]
            if not (by_reply or by_clock):
                continue  # not known to have committed before this claim
            claim = f"the claim of {seen.claim.task.id} (fence {seen.claim.fence}, handed off: {seen.handed_off})"
            if control.pos > seen.pos:
                verdict.violations.append(
                    f"arrived after a later claim ({control.kind}): {where} committed before {claim} but arrived "
                    f"after it (positions {control.pos} > {seen.pos})"
                )
            if not control.protocol:
                continue
            if racer.transport == "session":
                if control.ack_pos is None or control.ack_pos > seen.pos:
                    verdict.violations.append(
                        f"claim past an unacknowledged {control.kind}: {where} unacknowledged when {claim} was "
                        f"delivered (ack result at {control.ack_pos}, claim at {seen.pos})"
                    )
            elif control.t_ack_sent is None or control.t_ack_sent > seen.t:
                verdict.violations.append(
                    f"claim past an unacknowledged {control.kind}: {where} unacknowledged when {claim} arrived on "
                    "the Idle stream"
                )
        # Which side of its race is known: the claim that followed this round's completion.
        if control.round + 1 < len(racer.claims):
            after = racer.claims[control.round + 1]  # claims[0] is the first; round r completes claims[r]
            if control.t_reply < after.not_before or committed_ms < claim_ms[after.claim.claim_token]:
                verdict.known_before += 1
            elif control.pos > after.pos:
                verdict.known_after += 1


def test_no_claim_passes_a_control_message_committed_before_the_completion(daemon: Daemon):
    total = SESSION_MATES + IDLE_MATES
    daemon.create_tasks(*(spec(f"t{i:05d}", lease=120) for i in range(total * (ROUNDS + 2))))
    recorder = Recorder()
    seed = random.randrange(1 << 30)
    racers = []
    for i in range(total):
        transport = "session" if i < SESSION_MATES else "idle"
        client = daemon.add_teammate(f"{transport}{i:02d}")
        racers.append(Racer(daemon, client, transport, seed + i, recorder))
    started = time.monotonic()
    _run_team(daemon, racers, ROUNDS)
    took = time.monotonic() - started
    for racer in racers:
        racer.stream.cancel()

    verdict = Verdict()
    with board_db(daemon) as conn:
        claim_ms = {token: row.claim_ms for token, row in claims_of(conn).items()}
        send_ms = inbox_send_ms(conn)
        breaches = shutdown_gate_breaches(conn)
    for racer in racers:
        _judge(racer, claim_ms, send_ms, verdict)
    figures, history = board_history(recorder, daemon)
    handoffs = sum(r.handoffs for r in racers)
    withheld = sum(r.withheld for r in racers)
    print(
        f"\n[figures] races={total * ROUNDS} with_control={verdict.controls} known_before={verdict.known_before}"
        f" arrived_after={verdict.known_after} session_handoffs={handoffs} session_completions_without_claim="
        f"{withheld} seconds={took:.1f} seed={seed}"
    )
    problems = [f"claim inside a shutdown window: {b}" for b in breaches] + verdict.violations
    problems += [f"history checker: {h}" for h in history]
    kinds = collections.Counter(p.split(":")[0] for p in problems)
    assert not problems, f"{len(problems)} violations {dict(kinds)} (seed {seed}):\n" + "\n".join(problems[:30])
    assert figures["claims"] >= total * (ROUNDS + 1)
    # The test means something only if both orders happened often, and handoffs too.
    assert verdict.known_before >= verdict.controls // 5, verdict
    assert handoffs >= ROUNDS * SESSION_MATES // 10, handoffs
