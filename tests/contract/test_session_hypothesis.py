"""Random SessionRequest sequences against a model of what each op must answer (issue #15, design §2).

Each Hypothesis example opens a Session for a fresh teammate (its own role,
three tasks only it may take: `a`, `b` after `a`, `c`; for one in three, two
messages in its inbox) and, in three examples of four once its first claims
came, sends a drawn sequence of ops in chunks (a chunk goes out at once; the
next is made from what came back, so real claim tokens get used): acks in and
out of range, renew/complete/fail/release with live, ended, foreign, random
and empty tokens and with real, foreign and missing task ids, op ids fresh,
reused with another body, sent again unchanged, empty or too long, unknown
fields (at the top or in the op's body), bytes that do not parse, an op-less
message, and a second `open`. What must hold:

- every op gets exactly one op result, in order, carrying its op id (none for
  bytes that do not parse); its code and ErrorInfo reason are the model's
  (which follows the daemon's error table), never INTERNAL or UNKNOWN; the
  stream ends OK on half-close, INVALID_ARGUMENT after a second `open`;
- an op id sent again with the same body answers its recorded outcome, with
  another body INVALID_ARGUMENT;
- every claim is for a task of this teammate, whose dependencies completed,
  not held already, attempt = failures + 1, within its slots, with a token
  and a fence never seen, the fence above the stream's earlier ones;
- after the example, the board agrees with the model; after the module, the
  reliability history checker (tests/reliability/rel_history.py) finds no
  violation of design §2 over every claim delivered and op answered.

One daemon for the module (on SQLite `--synchronous NORMAL`: the invariants do
not depend on fsync, and the examples run faster), 2,000 examples in all
(CORRAL_SOAK=1: 10,000); on PostgreSQL (`--store postgres`), where each op is
round trips to the server, 400.
"""

from __future__ import annotations

import concurrent.futures
import dataclasses
import itertools
import queue
import secrets
import sqlite3
from collections.abc import Callable, Iterator

import grpc
import pytest
from google.rpc import code_pb2
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from corral.v1 import corral_pb2 as pb
from tests.reliability.rel_harness import SOAK
from tests.reliability.rel_history import Recorder
from tests.support.boards import on_postgres

from .session_board import board_db, board_history, reason_of
from .wire import Client, Daemon, Stream, spec, start_corrald

EXAMPLES = 10_000 if SOAK else 200 if on_postgres() else 2_000
SESSION_METHOD = "/corral.v1.TeammateService/Session"
READ_TIMEOUT_S = 10.0
MINT_BATCH = 50
MESSAGES = 2  # in the inbox of every third teammate before its example (the others' is empty)
FORBIDDEN = {code_pb2.INTERNAL, code_pb2.UNKNOWN}
# Bytes that are no SessionRequest: a truncated field, a string that is not UTF-8, wire type 7.
UNPARSABLE = (b"\x0a\x05ab", b"\x0a\x02\xff\xfe", b"\x0f\x01")
# A field no message of corral.v1 has (127), as a varint and as bytes.
UNKNOWN_FIELDS = (b"\xf8\x07\x01", b"\xfa\x07\x02hi")

OK = (code_pb2.OK, "")
INVALID = (code_pb2.INVALID_ARGUMENT, "INVALID_ARGUMENT")
MISMATCH = (code_pb2.FAILED_PRECONDITION, "CLAIM_TOKEN_MISMATCH")
NOT_FOUND = (code_pb2.NOT_FOUND, "TASK_NOT_FOUND")

pytestmark = pytest.mark.timeout(600 if SOAK else 300)


# ---------------------------------------------------------------- the daemon and its teammates


@dataclasses.dataclass
class Mate:
    client: Client
    role: str
    messages: int  # its inbox holds seq 1 to this

    @property
    def name(self) -> str:
        return self.client.name

    def task(self, short: str) -> str:
        return f"{self.role}-{short}"


class Pool:
    """Teammates made ready in batches (calls in flight together): names, roles, tasks, inbox
    messages; and for each number of slots one Session opened ahead, in the background, so an
    example does not wait for its open."""

    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self._numbers = itertools.count(1)
        self._ready: list[Mate] = []
        self._opener = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="session-opener")
        self._opening: dict[int, concurrent.futures.Future] = {}

    def take(self, slots: int) -> tuple[Mate, RawSession]:
        opening = self._opening.pop(slots, None) or self._opener.submit(self._open, slots)
        taken = opening.result(timeout=READ_TIMEOUT_S)
        self._opening[slots] = self._opener.submit(self._open, slots)
        return taken

    def close(self) -> None:
        for opening in self._opening.values():
            opening.result(timeout=READ_TIMEOUT_S)[1].cancel()
        self._opener.shutdown(wait=True)

    def _open(self, slots: int) -> tuple[Mate, RawSession]:
        if not self._ready:
            self._mint()
        mate = self._ready.pop(0)
        first = pb.SessionRequest(open=pb.IdleRequest(slots=slots, max_idle_polls=1000))
        return mate, RawSession(mate.client, first.SerializeToString())

    def _mint(self) -> None:
        lead = self.daemon.lead
        numbers = [next(self._numbers) for _ in range(MINT_BATCH)]
        futures = [
            (n, lead.lead.AddTeammate.future(pb.AddTeammateRequest(name=f"h{n}", roles=[f"r{n}"]))) for n in numbers
        ]
        mates = [
            Mate(self.daemon.client(f.result().token, f"h{n}"), f"r{n}", MESSAGES if n % 3 == 0 else 0)
            for n, f in futures
        ]
        specs = []
        for mate in mates:
            specs += [
                spec(mate.task("a"), lease=120, priority=2, max_attempts=2, required_role=mate.role),
                spec(mate.task("b"), mate.task("a"), lease=120, max_attempts=2, required_role=mate.role),
                spec(mate.task("c"), lease=120, priority=1, max_attempts=1, required_role=mate.role),
            ]
        self.daemon.create_tasks(*specs)
        sends = [
            lead.board.SendMessage.future(pb.SendMessageRequest(to=mate.name, body=f"note {i}"))
            for mate in mates
            for i in range(mate.messages)
        ]
        for sent in sends:
            sent.result()
        self._ready = mates


@dataclasses.dataclass
class Board:
    daemon: Daemon
    pool: Pool
    recorder: Recorder
    conn: sqlite3.Connection  # the daemon's database, read-only


@pytest.fixture(scope="module")
def board(tmp_path_factory) -> Iterator[Board]:
    root = tmp_path_factory.mktemp("session-hypothesis")
    daemon = start_corrald(root / "state", root, extra_args=[] if on_postgres() else ["--synchronous", "NORMAL"])
    try:
        with board_db(daemon) as conn:
            board = Board(daemon, Pool(daemon), Recorder(), conn)
            try:
                yield board
            finally:
                board.pool.close()
        figures, violations = board_history(board.recorder, daemon)
        print(f"\n[figures] session hypothesis history: {figures}")
        assert not violations, "history checker:\n" + "\n".join(violations[:30])
    finally:
        daemon.stop_and_check()


class RawSession(Stream):
    """A Session whose requests are raw bytes (so they may carry unknown fields, or not parse)."""

    _CLOSED = object()

    def __init__(self, client: Client, first: bytes) -> None:
        self._requests: queue.Queue = queue.Queue()
        self._requests.put(first)
        method = client.channel.stream_stream(
            SESSION_METHOD, request_serializer=lambda data: data, response_deserializer=pb.SessionResponse.FromString
        )
        super().__init__(method(iter(self._requests.get, self._CLOSED), timeout=60), f"Session({client.name})")

    def send(self, data: bytes) -> None:
        self._requests.put(data)

    def close_requests(self) -> None:
        self._requests.put(self._CLOSED)

    def next_or_end(self, timeout: float):
        """The next response, or None once the stream has ended; fails if neither comes in time."""
        try:
            return self._get(timeout)
        except queue.Empty:
            raise AssertionError(f"{self.label}: nothing arrived within {timeout}s") from None


# ---------------------------------------------------------------- what an example sends


@dataclasses.dataclass(frozen=True)
class Draw:
    """One op as drawn, before it is made concrete from what the example has seen."""

    kind: str  # ack renew complete fail release none open unparsable replay
    op_id: str  # fresh reuse empty long max
    task: str  # held mine foreign missing
    token: str  # live ended random foreign empty
    index: int
    through: str  # zero delivered last beyond negative huge
    result: bytes
    retryable: bool
    unknown: str  # "", top, body
    then_wait: bool  # read every answer before the next op is drawn


# Each op is drawn as OP_BYTES bytes (one Hypothesis draw for the whole example is much
# cheaper than one per field); a byte picks from a table, so repeats weight the choice,
# and 0 picks the first entry, what shrinking leads to.
KINDS = ("ack", "renew", "complete", "complete", "fail", "release", "none", "open", "unparsable", "replay", "replay")
OP_IDS = ("fresh",) * 6 + ("reuse", "empty", "long", "max")
TASKS = ("held",) * 6 + ("mine", "foreign", "missing")
TOKENS = ("live",) * 8 + ("ended", "random", "foreign", "empty")
THROUGH = ("zero", "delivered", "last", "beyond", "negative", "huge")
UNKNOWN = ("",) * 14 + ("top", "body")
OP_BYTES = 6
MAX_OPS = 8
EXAMPLE_BYTES = st.binary(min_size=1 + OP_BYTES * 2, max_size=1 + OP_BYTES * MAX_OPS)


def _decode(data: bytes) -> tuple[int, bool, list[Draw]]:
    """The Session's slots (0 = the default, 1), whether its first ops wait for its first claims
    (three examples in four), and its ops, from an example's bytes."""
    draws = []
    for at in range(1, len(data) - OP_BYTES + 1, OP_BYTES):
        kind, op_id, task, token, index, flags = data[at : at + OP_BYTES]
        draws.append(
            Draw(
                kind=KINDS[kind % len(KINDS)],
                op_id=OP_IDS[op_id % len(OP_IDS)],
                task=TASKS[task % len(TASKS)],
                token=TOKENS[token % len(TOKENS)],
                index=index % 8,
                through=THROUGH[flags % len(THROUGH)],
                result=bytes([index]) * (index % 4),
                retryable=bool(flags & 0x08),
                unknown=UNKNOWN[(flags >> 4) % len(UNKNOWN)],
                then_wait=index >= 192,  # a quarter of the ops: read every answer before the next is made
            )
        )
    return data[0] % 3, (data[0] // 3) % 4 != 3, draws


@dataclasses.dataclass
class Sent:
    """An op as sent, and what the model expects of it."""

    op_id: str | None  # None: bytes that do not parse (answered with op id "")
    kind: str | None
    body: bytes
    request: pb.SessionRequest | None
    unknown: bool
    replay: bool = False
    unknown_at: str = ""
    record: dict | None = None

    @property
    def ends_stream(self) -> bool:
        """A second open ends the stream, even one with an unknown field in it (its BadRequest field is
        then `open`); an unknown field at the top is answered like any other."""
        return self.kind == "open" and self.unknown_at != "top"


@dataclasses.dataclass
class Held:
    task: str
    token: str
    fence: int
    state: str = "live"  # live completed failed released


@dataclasses.dataclass
class TaskModel:
    deps: tuple[str, ...]
    max_attempts: int
    state: str = "pending"  # pending in_progress completed failed canceled
    failures: int = 0
    result: bytes | None = None


class Example:
    """One example: the model of one teammate's Session, checked at every response."""

    foreign_claims: list[tuple[str, str]] = []  # (task, token) of earlier examples' claims
    fences: set[int] = set()  # of every claim delivered in the module

    def __init__(self, daemon: Daemon, mate: Mate, stream: RawSession, recorder: Recorder, slots: int) -> None:
        self.daemon = daemon
        self.mate = mate
        self.recorder = recorder
        self.slots = slots or 1
        self.tasks = {
            mate.task("a"): TaskModel((), 2),
            mate.task("b"): TaskModel((mate.task("a"),), 2),
            mate.task("c"): TaskModel((), 1),
        }
        self.tokens: dict[str, Held] = {}
        self.recorded: dict[str, tuple[str | None, bytes, tuple[int, str], bytes | None]] = {}
        self.sent: list[Sent] = []
        self.answered = 0
        self.delivered_seq = 0
        self.fresh_ids = (f"op-{n}" for n in itertools.count(1))
        self.stream = stream
        self.max_fence = 0

    # ------------------------------------------------------------ making ops concrete

    def _op_id(self, draw: Draw) -> str:
        if draw.op_id == "reuse" and self.sent:
            used = [s.op_id for s in self.sent if s.op_id]
            if used:
                return used[draw.index % len(used)]
        if draw.op_id == "empty":
            return ""
        if draw.op_id == "long":
            return "L" * 65
        if draw.op_id == "max":
            return f"{next(self.fresh_ids)}-".ljust(64, "m")
        return next(self.fresh_ids)

    def live(self) -> list[Held]:
        return [held for held in self.tokens.values() if held.state == "live"]

    def _task_and_token(self, draw: Draw) -> tuple[str, str]:
        """(task id, claim token)."""
        live = self.live()
        mine = sorted(self.tasks)
        if draw.task == "held" and live:
            task = live[draw.index % len(live)].task
        elif draw.task == "foreign" and Example.foreign_claims:
            task = Example.foreign_claims[draw.index % len(Example.foreign_claims)][0]
        elif draw.task == "missing":
            task = f"nope-{draw.index}"
        else:
            task = mine[draw.index % len(mine)]
        ended = [held for held in self.tokens.values() if held.state != "live"]
        if draw.token == "live" and live:
            matching = [held for held in live if held.task == task] or live
            token = matching[draw.index % len(matching)].token
        elif draw.token == "ended" and ended:
            token = ended[draw.index % len(ended)].token
        elif draw.token == "foreign" and Example.foreign_claims:
            token = Example.foreign_claims[draw.index % len(Example.foreign_claims)][1]
        elif draw.token == "empty":
            token = ""
        else:
            token = secrets.token_urlsafe(24)
        return task, token

    def _through(self, draw: Draw) -> int:
        return {
            "zero": 0,
            "delivered": self.delivered_seq,
            "last": self.mate.messages,
            "beyond": self.mate.messages + 1,
            "negative": -1,
            "huge": 2**62,
        }[draw.through]

    def make(self, draw: Draw) -> Sent | None:
        """The bytes to send for `draw`, and their expectation; None when nothing is to be sent."""
        if draw.kind == "unparsable":
            return Sent(None, None, UNPARSABLE[draw.index % len(UNPARSABLE)], None, unknown=False)
        if draw.kind == "replay":
            earlier = [s for s in self.sent if s.request is not None and not s.unknown and s.kind != "open"]
            if not earlier:
                return None
            again = earlier[draw.index % len(earlier)]
            return Sent(again.op_id, again.kind, again.body, again.request, False, replay=True)
        op_id = self._op_id(draw)
        request = pb.SessionRequest(op_id=op_id)
        if draw.kind == "ack":
            request.ack.through_seq = self._through(draw)
        elif draw.kind in ("renew", "complete", "fail", "release"):
            task, token = self._task_and_token(draw)
            body = getattr(request, draw.kind)
            body.task_id, body.claim_token = task, token
            if draw.kind == "complete":
                request.complete.result = draw.result
            elif draw.kind == "fail":
                request.fail.error, request.fail.retryable = "drawn failure", draw.retryable
        elif draw.kind == "open":
            request.open.slots = 1
        kind = request.WhichOneof("op")
        data = request.SerializeToString()
        if draw.unknown == "top" or (draw.unknown == "body" and kind is None):
            data += UNKNOWN_FIELDS[draw.index % 2]
        elif draw.unknown == "body":
            # The op's own message gets the unknown field: rebuild it as a length-delimited field.
            body_bytes = getattr(request, kind).SerializeToString() + UNKNOWN_FIELDS[draw.index % 2]
            field = pb.SessionRequest.DESCRIPTOR.fields_by_name[kind].number
            data = pb.SessionRequest(op_id=op_id).SerializeToString() + _length_delimited(field, body_bytes)
        return Sent(op_id, kind, data, request, unknown=bool(draw.unknown), unknown_at=draw.unknown)

    # ------------------------------------------------------------ sending and reading

    def send(self, sent: Sent) -> None:
        if sent.kind in ("renew", "complete", "fail", "release") and not sent.unknown and not sent.replay:
            assert sent.request is not None
            body = getattr(sent.request, sent.kind)
            # For the history checker, an op is its holder's only with the token delivered for that
            # task; any other (a foreign, random or empty token, or one of another task) must fail.
            held = self.tokens.get(body.claim_token)
            kind = sent.kind if held is not None and held.task == body.task_id else f"foreign_{sent.kind}"
            sent.record = self.recorder.begin(kind, self.mate.name, body.task_id, body.claim_token)
        self.sent.append(sent)
        self.stream.send(sent.body)

    def read_answers(self) -> None:
        """Reads responses until every op sent is answered."""
        self.read_until(lambda: self.answered >= len(self.sent))

    def read_until(self, done: Callable[[], bool]) -> None:
        while not done():
            response = self.stream.next_or_end(READ_TIMEOUT_S)
            assert response is not None, (
                f"ended with {self.stream.end_status}, {len(self.sent) - self.answered} unanswered"
            )
            if response.HasField("op_result"):
                self._answer(response.op_result)
            which = response.WhichOneof("event")
            if which is not None:
                self._event(which, getattr(response, which))

    def finish(self) -> None:
        """Half-closes and reads to the end: every op answered once, the stream ends as it must."""
        opened_again = any(s.ends_stream for s in self.sent)
        if not opened_again:
            self.stream.close_requests()
        while (response := self.stream.next_or_end(READ_TIMEOUT_S)) is not None:
            if response.HasField("op_result"):
                self._answer(response.op_result)
            which = response.WhichOneof("event")
            if which is not None:
                self._event(which, getattr(response, which))
        code, details = self.stream.end_status
        if opened_again:
            assert code == grpc.StatusCode.INVALID_ARGUMENT, (code, details)
            assert self.answered == next(i for i, s in enumerate(self.sent) if s.ends_stream)
        else:
            assert code == grpc.StatusCode.OK, (code, details)
            assert self.answered == len(self.sent), f"{len(self.sent) - self.answered} ops never answered"

    # ------------------------------------------------------------ the model

    def _answer(self, result: pb.SessionOpResult) -> None:
        assert self.answered < len(self.sent), f"an op result nobody asked for: {result}"
        sent = self.sent[self.answered]
        self.answered += 1
        code, reason = result.status.code, reason_of(result.status)
        assert code not in FORBIDDEN, f"{sent}: {result}"
        assert result.op_id == (sent.op_id or ""), f"result for {result.op_id!r}, sent {sent.op_id!r}"
        expected, stored = self._expect(sent)
        assert (code, reason) == expected, f"{sent.kind} {sent.request}: got {code} {reason}, expected {expected}"
        if sent.kind == "complete" and code == code_pb2.OK:
            assert result.result == stored, f"{sent.request}: result {result.result!r}, stored {stored!r}"
        if sent.record is not None:
            outcome = "ok" if code == code_pb2.OK else "err"
            extra = {}
            if sent.kind == "renew" and code == code_pb2.OK:
                extra["lease_end"] = result.lease_expire_time.ToMilliseconds()
            if sent.kind == "complete" and code == code_pb2.OK:
                extra["result"] = result.result.hex()
            self.recorder.end(sent.record, outcome, code_pb2.Code.Name(code), reason, **extra)

    def _expect(self, sent: Sent) -> tuple[tuple[int, str], bytes | None]:
        """The (code, reason) the op must get, and a completion's stored result; applies its effect."""
        assert not sent.ends_stream, "a second open is never answered: it ends the stream"
        if sent.request is None or sent.unknown:
            return INVALID, None
        kind = sent.kind
        op_id = sent.op_id or ""
        if not op_id or len(op_id) > 64 or kind is None:
            return INVALID, None
        if op_id in self.recorded:
            recorded_kind, recorded_body, outcome, stored = self.recorded[op_id]
            same = recorded_kind == kind and recorded_body == getattr(sent.request, kind).SerializeToString(
                deterministic=True
            )
            return (outcome, stored) if same else (INVALID, None)
        outcome, stored = self._run(kind, getattr(sent.request, kind))
        self.recorded[op_id] = (
            kind,
            getattr(sent.request, kind).SerializeToString(deterministic=True),
            outcome,
            stored,
        )
        return outcome, stored

    def _run(self, kind: str, body) -> tuple[tuple[int, str], bytes | None]:
        if kind == "ack":
            return (INVALID if body.through_seq < 0 or body.through_seq > self.mate.messages else OK), None
        held = self.tokens.get(body.claim_token)
        if body.task_id.startswith("nope-"):  # every other task id drawn is on the board
            return NOT_FOUND, None
        if held is None or held.task != body.task_id:
            return MISMATCH, None
        task = self.tasks[held.task]
        if held.state == "completed" and kind == "complete":
            return OK, task.result
        if held.state != "live":
            return MISMATCH, None
        if kind == "complete":
            held.state, task.state, task.result = "completed", "completed", body.result
            return OK, body.result
        if kind == "fail":
            held.state = "failed"
            task.failures += 1
            if not body.retryable or task.failures >= task.max_attempts:
                task.state = "failed"
                for other in self.tasks.values():
                    if held.task in other.deps and other.state == "pending":
                        other.state = "canceled"
            else:
                task.state = "pending"
        elif kind == "release":
            held.state, task.state = "released", "pending"
        return OK, None

    def _event(self, which: str, item) -> None:
        if which == "message":
            assert self.delivered_seq < item.seq <= self.mate.messages, f"message {item.seq} after {self.delivered_seq}"
            self.delivered_seq = item.seq
            return
        assert which == "claim", f"{self.mate.name}: unexpected {which}: {item}"
        task_id = item.task.id
        assert task_id in self.tasks, f"{self.mate.name} got a claim on {task_id}, not its own"
        task = self.tasks[task_id]
        assert task.state == "pending", f"claim on {task_id}, which the model has {task.state}"
        for dep in task.deps:
            assert self.tasks[dep].state == "completed", f"{task_id} claimed before {dep} completed"
        assert item.attempt == task.failures + 1, f"{task_id}: attempt {item.attempt}, failures {task.failures}"
        assert item.claim_token not in self.tokens, "a claim token issued twice"
        assert len(self.live()) < self.slots, f"more claims than {self.slots} slots"
        assert item.fence > self.max_fence, f"fence {item.fence} after {self.max_fence} on one stream"
        assert item.fence not in Example.fences, f"fence {item.fence} issued twice"
        self.max_fence = item.fence
        Example.fences.add(item.fence)
        task.state = "in_progress"
        self.tokens[item.claim_token] = Held(task_id, item.claim_token, item.fence)
        self.recorder.claim(self.mate.name, item, stream=1)

    def check_board(self, conn: sqlite3.Connection) -> None:
        """The board (read from the daemon's database) agrees with the model; a claim made as the
        stream ended may be unsent, and is then still held."""
        states = {
            "pending": pb.TASK_STATE_PENDING,
            "in_progress": pb.TASK_STATE_IN_PROGRESS,
            "completed": pb.TASK_STATE_COMPLETED,
            "failed": pb.TASK_STATE_FAILED,
            "canceled": pb.TASK_STATE_CANCELED,
        }
        marks = ",".join("?" * len(self.tasks))
        rows = conn.execute(
            f"SELECT id, state, owner, attempt, result FROM tasks WHERE id IN ({marks})", list(self.tasks)
        )
        for task_id, state, owner, attempt, result in rows:
            model = self.tasks[task_id]
            if model.state == "pending" and state == pb.TASK_STATE_IN_PROGRESS:
                assert owner == self.mate.name and attempt == model.failures + 1, (task_id, owner, attempt)
                continue
            assert state == states[model.state], f"{task_id}: board {state}, model {model.state}"
            if model.state == "completed":
                assert result == model.result, task_id
        Example.foreign_claims.extend((held.task, held.token) for held in self.tokens.values())
        del Example.foreign_claims[:-64]


def _length_delimited(field: int, payload: bytes) -> bytes:
    return _varint(field << 3 | 2) + _varint(len(payload)) + payload


def _varint(value: int) -> bytes:
    out = bytearray()
    while True:
        low, value = value & 0x7F, value >> 7
        out.append(low | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _run_example(board: Board, slots: int, claims_first: bool, draws: list[Draw]) -> None:
    mate, stream = board.pool.take(slots)
    example = Example(board.daemon, mate, stream, board.recorder, slots)
    try:
        if claims_first:  # `a` and `c` are ready: the new teammate's first claims come at once
            example.read_until(lambda: len(example.live()) >= (slots or 1))
        for draw in draws:
            sent = example.make(draw)
            if sent is None:
                continue
            example.send(sent)
            if sent.ends_stream:
                break
            if draw.then_wait:
                example.read_answers()
        example.finish()
    finally:
        example.stream.cancel()
    example.check_board(board.conn)


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.data_too_large],
)
@given(data=EXAMPLE_BYTES)
def test_random_session_requests_keep_the_invariants(board: Board, data: bytes):
    slots, claims_first, draws = _decode(data)
    note(f"slots {slots}, claims first {claims_first}, ops {draws}")
    _run_example(board, slots, claims_first, draws)
