"""A hypothesis state machine: the real board against a small reference model.

Rules: create, claim (through the delivery function), renew, complete, fail,
release, cancel, advance the clock (also to exactly a lease end or 1 ms
before), reap, and restart (close the Board, open a new one on the file).
After every step the database is checked for invariants 1, 2, 4 and 9 and
compared with the model; invariant 3 is checked by each rule's expected
outcome (success only with the owner's live token strictly before lease end).
"""

from __future__ import annotations

import dataclasses
import pathlib
import shutil
import tempfile

import pytest
from boardkit import SyncBoard, spec
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine as hypothesis_engine
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from corrald import errors
from corrald.clock import FakeClock
from corrald.config import WriterConfig
from corrald.model import ClaimGrant, TaskState
from corrald.stream import StreamState

PENDING, IN_PROGRESS, COMPLETED, FAILED, CANCELED = (
    TaskState.PENDING,
    TaskState.IN_PROGRESS,
    TaskState.COMPLETED,
    TaskState.FAILED,
    TaskState.CANCELED,
)
ROLES = {"w1": (), "w2": ("r",), "w3": ()}
SLOTS = 64


@dataclasses.dataclass
class MTask:
    id: str
    order: int
    deps: tuple[str, ...]
    priority: int
    role: str
    max_attempts: int
    lease_ms: int
    state: TaskState = PENDING
    owner: str = ""
    token: str | None = None
    lease_end: int | None = None
    failures: int = 0
    result: bytes | None = None


@dataclasses.dataclass
class MClaim:
    token: str
    task_id: str
    teammate: str
    attempt: int
    fence: int
    outcome: str | None = None


class Model:
    """What the board should hold; deliberately naive (whole-graph scans)."""

    def __init__(self) -> None:
        self.tasks: dict[str, MTask] = {}
        self.claims: dict[str, MClaim] = {}
        self.sent: dict[str, set[str]] = {name: set() for name in ROLES}  # per stream cursor

    def dependents(self, task_id: str) -> list[str]:
        return [t.id for t in self.tasks.values() if task_id in t.deps]

    def ready(self, task: MTask) -> bool:
        return task.state is PENDING and all(self.tasks[d].state is COMPLETED for d in task.deps)

    def held(self, name: str, now: int) -> list[MClaim]:
        """The teammate's claims whose lease has not ended (a dead one awaits a reclaim)."""
        live = [
            self.claims[t.token]
            for t in self.tasks.values()
            if t.state is IN_PROGRESS and t.owner == name and t.lease_end > now
        ]
        return sorted(live, key=lambda c: c.fence)

    def end_claim(self, task: MTask, outcome: str) -> None:
        self.claims[task.token].outcome = outcome
        task.token, task.lease_end = None, None

    def back_to_pending(self, task: MTask) -> None:
        task.state, task.owner, task.token, task.lease_end = PENDING, "", None, None

    def cancel(self, frontier: list[str]) -> set[str]:
        changed: set[str] = set()
        seen: set[str] = set()
        while frontier:
            task = self.tasks[frontier.pop()]
            if task.id in seen:
                continue
            seen.add(task.id)
            if task.state.is_final:
                continue
            if task.token is not None:
                self.end_claim(task, "canceled")
            task.state = CANCELED
            changed.add(task.id)
            frontier.extend(self.dependents(task.id))
        return changed

    def count_failure(self, task: MTask, final: bool) -> None:
        task.failures += 1
        if final or task.failures >= task.max_attempts:
            task.state, task.token, task.lease_end = FAILED, None, None
            self.cancel(self.dependents(task.id))
        else:
            self.back_to_pending(task)

    def reclaim(self, now: int) -> None:
        for task in list(self.tasks.values()):
            if task.state is IN_PROGRESS and task.lease_end <= now:
                self.end_claim(task, "expired")
                self.count_failure(task, final=False)

    def pick(self, name: str) -> MTask | None:
        allowed = {"", *ROLES[name]}
        ready = [t for t in self.tasks.values() if self.ready(t) and t.role in allowed]
        return min(ready, key=lambda t: (-t.priority, t.order), default=None)

    def expected_error(self, op: str, name: str, task_id: str, token: str, now: int):
        """None for success, "stored" for an idempotent complete, else the error class."""
        claim = self.claims.get(token)
        if claim is None or claim.task_id != task_id or claim.teammate != name:
            return errors.ClaimTokenMismatch
        if claim.outcome is None:
            return errors.LeaseExpired if now >= self.tasks[task_id].lease_end else None
        if claim.outcome == "expired":
            return errors.LeaseExpired
        if claim.outcome == "canceled":
            return errors.TaskCanceled
        if op == "complete" and claim.outcome == "completed":
            return "stored"
        return errors.ClaimTokenMismatch


class BoardMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="corral-sm-"))
        self.clock = FakeClock()
        self.board = SyncBoard(
            self.dir / "corral.sqlite3", self.clock, writer_config=WriterConfig(synchronous="NORMAL")
        ).open()
        self.model = Model()
        self.cursors: dict[str, StreamState] = {}
        self.next_id = 0
        self.results = 0

    def teardown(self) -> None:
        self.board.dispose()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    @initialize()
    def add_teammates(self) -> None:
        for name, roles in ROLES.items():
            self.board.add(name, roles)
            self.cursors[name] = StreamState(slots=SLOTS)

    # ------------------------------------------------------------ create

    @rule(data=st.data())
    def create(self, data) -> None:
        existing = sorted(self.model.tasks)
        specs, new_ids = [], []
        for _ in range(data.draw(st.integers(1, 3), label="batch size")):
            task_id = f"t{self.next_id}"
            self.next_id += 1
            pool = existing + new_ids
            deps = data.draw(st.lists(st.sampled_from(pool), max_size=3, unique=True), label="deps") if pool else []
            specs.append(
                spec(
                    task_id,
                    *deps,
                    priority=data.draw(st.integers(0, 2), label="priority"),
                    required_role=data.draw(st.sampled_from(["", "r"]), label="role"),
                    max_attempts=data.draw(st.integers(1, 3), label="max_attempts"),
                    lease_ms=data.draw(st.sampled_from([1000, 2000]), label="lease"),
                )
            )
            new_ids.append(task_id)
        doomed = [
            d
            for s in specs
            for d in s.depends_on
            if d in self.model.tasks and self.model.tasks[d].state in (FAILED, CANCELED)
        ]
        if doomed:
            before = self.board.counts()
            with pytest.raises(errors.InvalidArgument):
                self.board.create(*specs)
            assert self.board.counts() == before
            return
        records = self.board.create(*specs)
        assert [r.id for r in records] == new_ids
        for s in specs:
            self.model.tasks[s.id] = MTask(
                s.id, len(self.model.tasks), s.depends_on, s.priority, s.required_role, s.max_attempts, s.lease_ms
            )

    # ------------------------------------------------------------ claim (delivery steps 1 and 4)

    def deliver(self, name: str, look_first: bool = False) -> None:
        """One Idle check; `look_first` takes the read-only path a stream uses when no
        ready-task wake-up sent it (it must answer exactly as the writer would)."""
        cursor = self.cursors[name]
        held = self.model.held(name, self.now)
        self.model.sent[name] &= {c.token for c in held}
        resend = [c for c in held if c.token not in self.model.sent[name]]
        items = self.board.next_for(name, cursor, look_first=look_first)
        assert all(isinstance(i, ClaimGrant) for i in items)
        if resend:
            assert [(g.token, g.attempt, g.fence, g.task.id, g.lease_expire_ms) for g in items] == [
                (c.token, c.attempt, c.fence, c.task_id, self.model.tasks[c.task_id].lease_end) for c in resend
            ]
            self.model.sent[name] |= {c.token for c in resend}
            return
        self.model.reclaim(self.now)
        task = self.model.pick(name)
        if task is None:
            assert items == []
            return
        (grant,) = items
        assert grant.task.id == task.id, (grant.task.id, task.id)
        assert grant.token not in self.model.claims  # invariant 4
        assert all(grant.fence > c.fence for c in self.model.claims.values())
        assert grant.attempt == task.failures + 1
        assert grant.lease_expire_ms == self.now + task.lease_ms
        task.state, task.owner, task.token, task.lease_end = IN_PROGRESS, name, grant.token, grant.lease_expire_ms
        self.model.claims[grant.token] = MClaim(grant.token, task.id, name, grant.attempt, grant.fence)
        self.model.sent[name].add(grant.token)

    @rule(name=st.sampled_from(sorted(ROLES)), look_first=st.booleans())
    def claim(self, name: str, look_first: bool) -> None:
        self.deliver(name, look_first)

    # ------------------------------------------------------------ operations on a claim

    def pick_call(self, data) -> tuple[str, str, str]:
        """Mostly the owner's own token for its task; sometimes a wrong teammate, task or token."""
        # Tokens are random: order them by fence so a replayed example picks the same claim.
        tokens = [c.token for c in sorted(self.model.claims.values(), key=lambda c: c.fence)]
        token = data.draw(st.sampled_from(tokens), label="token") if tokens else "no-such-token"
        claim = self.model.claims.get(token)
        name, task_id = (claim.teammate, claim.task_id) if claim else ("w1", sorted(self.model.tasks)[0])
        if data.draw(st.integers(0, 9), label="wrong teammate") == 9:
            name = data.draw(st.sampled_from(sorted(ROLES)), label="teammate")
        if data.draw(st.integers(0, 9), label="wrong task") == 9:
            task_id = data.draw(st.sampled_from(sorted(self.model.tasks)), label="task")
        if data.draw(st.integers(0, 19), label="forged token") == 19:
            token = "forged-" + token
        return name, task_id, token

    def attempt(self, op: str, call, name: str, task_id: str, token: str):
        expected = self.model.expected_error(op, name, task_id, token, self.now)
        if isinstance(expected, type):
            with pytest.raises(expected):
                call()
            return None, expected
        return call(), expected

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data())
    def renew(self, data) -> None:
        name, task_id, token = self.pick_call(data)
        value, expected = self.attempt("renew", lambda: self.board.renew(name, task_id, token), name, task_id, token)
        if expected is None:
            task = self.model.tasks[task_id]
            task.lease_end = self.now + task.lease_ms
            assert value == (task.lease_end, False)

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data())
    def complete(self, data) -> None:
        name, task_id, token = self.pick_call(data)
        self.results += 1
        result = f"result-{self.results}".encode()
        value, expected = self.attempt(
            "complete", lambda: self.board.complete(name, task_id, token, result), name, task_id, token
        )
        task = self.model.tasks[task_id]
        if expected == "stored":
            assert value.state is COMPLETED and value.result == task.result
        elif expected is None:
            self.model.end_claim(task, "completed")
            task.state, task.result = COMPLETED, result
            assert value.state is COMPLETED and value.result == result

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data(), retryable=st.booleans())
    def fail(self, data, retryable: bool) -> None:
        name, task_id, token = self.pick_call(data)
        value, expected = self.attempt(
            "fail", lambda: self.board.fail(name, task_id, token, "x", retryable), name, task_id, token
        )
        if expected is None:
            task = self.model.tasks[task_id]
            self.model.end_claim(task, "failed")
            self.model.count_failure(task, final=not retryable)
            assert value.state is task.state

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data())
    def release(self, data) -> None:
        name, task_id, token = self.pick_call(data)
        value, expected = self.attempt(
            "release", lambda: self.board.release(name, task_id, token), name, task_id, token
        )
        if expected is None:
            task = self.model.tasks[task_id]
            self.model.end_claim(task, "released")
            self.model.back_to_pending(task)
            assert value.state is PENDING

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data())
    def cancel(self, data) -> None:
        ids = data.draw(
            st.lists(st.sampled_from(sorted(self.model.tasks)), min_size=1, max_size=2, unique=True), label="cancel ids"
        )
        changed = self.board.cancel(*ids)
        assert {t.id for t in changed} == self.model.cancel(list(ids))
        assert all(self.board.task(t.id).state is CANCELED and t.error for t in changed)

    # ------------------------------------------------------------ time, reaper, restart

    @rule(ms=st.sampled_from([1, 500, 999, 1000, 1001, 2500]))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @precondition(
        lambda self: any(t.state is IN_PROGRESS and t.lease_end > self.now for t in self.model.tasks.values())
    )
    @rule(data=st.data(), exactly=st.booleans())
    def advance_to_lease_end(self, data, exactly: bool) -> None:
        ends = sorted(
            {t.lease_end for t in self.model.tasks.values() if t.state is IN_PROGRESS and t.lease_end > self.now}
        )
        end = data.draw(st.sampled_from(ends), label="lease end")
        self.clock.set(end if exactly else end - 1)

    @rule()
    def reap(self) -> None:
        deadline = self.board.reap()
        self.model.reclaim(self.now)
        ends = [t.lease_end for t in self.model.tasks.values() if t.state is IN_PROGRESS]
        assert deadline == (min(ends) if ends else None)

    @rule()
    def restart(self) -> None:
        # A running daemon's reaper ends leases on time, so reap first: then the
        # restart happens at an instant the daemon already saw, and recovery
        # (in Board.open) must only extend live leases. Leases that run out
        # during a downtime are covered by test_board_tasks (restart tests).
        self.reap()
        self.board.restart()
        self.model.reclaim(self.now)
        for task in self.model.tasks.values():
            if task.state is IN_PROGRESS:
                task.lease_end = self.now + task.lease_ms
        # Every teammate reconnects with a new stream: held claims are re-sent first.
        for name in ROLES:
            self.cursors[name] = StreamState(slots=SLOTS)
            self.model.sent[name] = set()
            self.deliver(name)

    # ------------------------------------------------------------ invariants

    @invariant()
    def database_matches_model_and_invariants_hold(self) -> None:
        def snapshot(tx):
            q = lambda sql: tx.conn.execute(sql).fetchall()  # noqa: E731
            return {
                # 1. at most one live claim per task
                "double": q(
                    "SELECT task_seq, count(*) FROM claims WHERE outcome IS NULL GROUP BY task_seq HAVING count(*) > 1"
                ),
                # 2. never a claim on a task whose dependency is not COMPLETED
                "early": q(
                    "SELECT c.fence FROM claims c JOIN deps d ON d.task_seq = c.task_seq"
                    " JOIN tasks t ON t.seq = d.dep_seq WHERE t.state != 3"
                ),
                # 4. tokens unique
                "tokens": q("SELECT count(*), count(DISTINCT token) FROM claims")[0],
                # 9. completed once
                "twice": q(
                    "SELECT task_seq FROM claims WHERE outcome = 'completed' GROUP BY task_seq HAVING count(*) > 1"
                ),
                "tasks": q(
                    "SELECT t.id, t.state, t.owner, t.lease_expire_ms, t.failures, t.result, c.token,"
                    " c.teammate, c.outcome FROM tasks t LEFT JOIN claims c ON c.fence = t.live_fence"
                ),
                "claims": q("SELECT token, outcome FROM claims"),
            }

        db = self.board.call(snapshot)
        assert db["double"] == [] and db["early"] == [] and db["twice"] == []
        assert db["tokens"][0] == db["tokens"][1] == len(self.model.claims)
        assert dict(db["claims"]) == {c.token: c.outcome for c in self.model.claims.values()}
        for task_id, state, owner, lease_end, failures, result, token, holder, outcome in db["tasks"]:
            task = self.model.tasks[task_id]
            if state == IN_PROGRESS:  # exactly the owner's one live claim
                assert (token, holder, outcome) == (task.token, owner, None)
            else:
                assert token is None
            expected_owner = "" if task.state is PENDING else task.owner
            assert (state, owner, lease_end, failures) == (task.state, expected_owner, task.lease_end, task.failures)
            if task.state is COMPLETED:
                assert result == task.result


BoardMachine.TestCase.settings = settings(
    max_examples=60,
    stateful_step_count=30,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


@pytest.fixture(autouse=True)
def _bounded_shrinking(monkeypatch):
    """Keep a failing run (generation + shrinking) inside the test's timeout.

    Hypothesis shrinks for up to 5 minutes by default, and it catches the
    exception pytest-timeout raises in the test thread, so the timeout below
    uses the thread method as a hard backstop and shrinking gets 40 s.
    """
    monkeypatch.setattr(hypothesis_engine, "MAX_SHRINKING_SECONDS", 40, raising=False)


@pytest.mark.timeout(110, method="thread")
class TestBoardStateMachine(BoardMachine.TestCase):
    pass
