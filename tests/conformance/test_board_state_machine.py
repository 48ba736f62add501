"""A hypothesis state machine: the real board against a small reference model.

Rules: create (with time gates: not_before and retry backoff), claim (through
the delivery function), renew, complete, fail, release, cancel, retry (FAILED
or CANCELED tasks back, with the dependents canceled because of them), advance
the clock (also to exactly a lease end or time gate, or 1 ms before), reap,
restart (close the Board, open a new one on the file), set a concurrency key's
limit, revoke a claim, and set a teammate's (or the "*" default) budget; renew,
complete and fail report small usage. Discovered work: set a teammate's (or the
"*") task creation policy, propose tasks (from no claim or a live one, splitting
it or not; DENY and a split closing a cycle refused), decide proposals (approve,
or reject: a split waiting on one is freed) and add dependencies (refused for a
task not PENDING or PROPOSED, a FAILED or CANCELED dependency, a cycle).
Artifacts (board_machine_artifacts.py): attach one from a claim (mostly a live one:
a dead or wrong claim's is refused and writes nothing), and every task shows the
latest artifact of each name the model was given.
After every step the database is checked for invariants 1, 2 (no live claim
before a dependency completes, a split's or one added live too), 4 and 9, for no
PROPOSED task ever claimed, for the graph the model holds (acyclic), for no
key over the limit it had when its tasks were claimed, and compared with the
model (usage sums and key counts too); invariant 3 is checked by each rule's
expected outcome (success only with the owner's live token strictly before
lease end).
"""

from __future__ import annotations

import contextlib
import dataclasses
import pathlib
import shutil
import tempfile

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.internal.conjecture import engine as hypothesis_engine
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from corrald import errors
from corrald.clock import FakeClock
from corrald.config import WriterConfig
from corrald.model import Budget, BudgetExhausted, ClaimGrant, ReviewPolicy, TaskCreation, TaskState, Usage, Verdict
from corrald.store import tasks as store_tasks
from corrald.stream import StreamState
from tests.support.boardkit import SyncBoard, spec

from .board_machine_artifacts import ArtifactRules

PENDING, IN_PROGRESS, COMPLETED, FAILED, CANCELED, NEEDS_INPUT, IN_REVIEW = (
    TaskState.PENDING,
    TaskState.IN_PROGRESS,
    TaskState.COMPLETED,
    TaskState.FAILED,
    TaskState.CANCELED,
    TaskState.NEEDS_INPUT,
    TaskState.IN_REVIEW,
)
PROPOSED = TaskState.PROPOSED
ROLES = {"w1": (), "w2": ("r",), "w3": ()}
SLOTS = 64
KEYS = ("", "k1", "k2")  # "" is no key
# Path leases drawn from a small tree, so overlaps are common: (exclusive, shared).
LEASES = (
    ((), ()),
    ((), ()),
    (("repo:web",), ()),
    (("repo:web/src",), ()),
    ((), ("repo:web/src",)),
    ((), ("repo:web/src/api",)),
    (("repo:web/docs",), ("db:x",)),
    ((), ("db:x",)),
)
NO_LIMIT = 1 << 30


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
    backoff: int = 0
    backoff_max: int = 0
    not_before: int | None = None
    gate: int | None = None  # the latest time gate (ready_ms): shut while it lies ahead
    canceled_by_lead: bool = False
    key: str = ""
    questions: int = 0  # asked so far
    review_role: str | None = None  # None: no review; "r": w2 reviews; "": the Lead
    review_max: int = 0
    rounds: int = 0  # rejections so far
    author: str = ""  # whose result is IN_REVIEW
    unanswered: bool = False  # the last one has no answer (NEEDS_INPUT, or canceled while it was)
    discovered_from: str = ""  # a proposed task's: the task whose claim it came from
    undecided: bool = False  # a proposal the Lead has not decided (PROPOSED, or canceled before)
    resources: tuple[str, ...] = ()  # exclusive path leases
    shared_resources: tuple[str, ...] = ()

    def leases(self) -> list[tuple[str, bool]]:
        return [(p, True) for p in self.resources] + [(p, False) for p in self.shared_resources]


@dataclasses.dataclass
class MClaim:
    token: str
    task_id: str
    teammate: str
    attempt: int
    fence: int
    outcome: str | None = None
    review: bool = False  # a review's claim
    round: int = 0  # a review's: its round


def _conflict(a: tuple[str, bool], b: tuple[str, bool]) -> bool:
    """Two path leases conflict: they overlap and one is exclusive (written apart from corrald's)."""
    (pa, xa), (pb, xb) = a, b
    overlapping = pa == pb or pa.startswith(pb + "/") or pb.startswith(pa + "/")
    return overlapping and (xa or xb)


class Model:
    """What the board should hold; deliberately naive (whole-graph scans)."""

    def __init__(self) -> None:
        self.tasks: dict[str, MTask] = {}
        self.claims: dict[str, MClaim] = {}
        self.sent: dict[str, set[str]] = {name: set() for name in ROLES}  # per stream cursor
        # Whether the stream was told its teammate's budget is spent (by a check; reset per stream).
        self.told_spent: dict[str, bool] = {name: False for name in ROLES}
        self.limits: dict[str, int] = {}  # key -> limit, for keys that have one
        # key -> the most of its tasks IN_PROGRESS allowed now: its limit, or more while
        # claims made under a higher limit (or none) are still held after it was lowered
        self.allowed: dict[str, int] = {}
        self.spent: dict[str, Usage] = {name: Usage() for name in ROLES}
        self.budgets: dict[str, Budget] = {}  # a teammate's own; "*" the default
        self.creation: dict[str, TaskCreation] = {}  # a teammate's own policy; "*" the default

    def creation_of(self, name: str) -> TaskCreation:
        return self.creation.get(name, self.creation.get("*", TaskCreation.PROPOSE))

    def reaches(self, start: str, target: str) -> bool:
        """Whether `start` waits for `target`, directly or through others (or is it)."""
        seen, frontier = set(), [start]
        while frontier:
            task_id = frontier.pop()
            if task_id == target:
                return True
            if task_id not in seen:
                seen.add(task_id)
                frontier.extend(self.tasks[task_id].deps)
        return False

    def reject(self, named: list[str]) -> set[str]:
        """DecideProposals(reject): a split task waiting on a rejected proposal (or on a dependent
        of one, reached before any other split) drops that dependency; then the named ones are
        canceled with their dependents. Returns the split tasks freed."""
        freed: set[str] = set()
        seen, frontier = set(named), list(named)
        while frontier:
            following = []
            for task_id in frontier:
                for dependent in self.dependents(task_id):
                    split = self.tasks[dependent]
                    if self.tasks[task_id].discovered_from == dependent and split.state is PENDING:
                        split.deps = tuple(d for d in split.deps if d != task_id)
                        freed.add(dependent)
                    elif split.state is not COMPLETED and dependent not in seen:
                        seen.add(dependent)
                        following.append(dependent)
            frontier = following
        self.cancel(list(named), by_lead=True)
        return freed

    def dependents(self, task_id: str) -> list[str]:
        return [t.id for t in self.tasks.values() if task_id in t.deps]

    def ready(self, task: MTask, now: int) -> bool:
        return (
            task.state is PENDING
            and all(self.tasks[d].state is COMPLETED for d in task.deps)
            and (task.gate is None or task.gate <= now)
        )

    def held(self, name: str, now: int) -> list[MClaim]:
        """The teammate's claims whose lease has not ended (a dead one awaits a reclaim)."""
        live = [
            self.claims[t.token]
            for t in self.tasks.values()
            if t.token is not None and t.owner == name and t.lease_end > now
        ]
        return sorted(live, key=lambda c: c.fence)

    def end_claim(self, task: MTask, outcome: str) -> None:
        self.claims[task.token].outcome = outcome
        task.token, task.lease_end = None, None

    def back_to_pending(self, task: MTask) -> None:
        """A claim given back: a work claim's task is PENDING again, a review's IN_REVIEW."""
        state = IN_REVIEW if task.state is IN_REVIEW else PENDING
        task.state, task.owner, task.token, task.lease_end = state, "", None, None

    def cancel(self, frontier: list[str], by_lead: bool = False) -> set[str]:
        changed: set[str] = set()
        seen: set[str] = set()
        named = set(frontier) if by_lead else set()
        while frontier:
            task = self.tasks[frontier.pop()]
            if task.id in seen:
                continue
            seen.add(task.id)
            if task.state.is_final:
                continue
            if task.token is not None:
                self.end_claim(task, "canceled")
            task.state, task.canceled_by_lead = CANCELED, task.id in named
            changed.add(task.id)
            frontier.extend(self.dependents(task.id))
        return changed

    def count_failure(self, task: MTask, final: bool, now: int, gate_of) -> None:
        """`gate_of(id)` is the board's ready_ms after the failure: the backoff's jitter is
        random, so the model checks it lies where the backoff says and takes it."""
        task.failures += 1
        if final or task.failures >= task.max_attempts:
            task.state, task.token, task.lease_end = FAILED, None, None
            self.cancel(self.dependents(task.id))
            return
        self.back_to_pending(task)
        if task.backoff:
            full = min(task.backoff << (task.failures - 1), task.backoff_max)
            gate = gate_of(task.id)
            low = max(1, round(full * (1 - store_tasks.RETRY_JITTER)))
            assert gate is not None and low <= gate - now <= full, (gate, now, full)
            task.gate = gate

    def reclaim(self, now: int, gate_of) -> None:
        for task in list(self.tasks.values()):
            if task.token is not None and task.lease_end <= now:
                reviewing = task.state is IN_REVIEW
                self.end_claim(task, "expired")
                if reviewing:
                    self.back_to_pending(task)  # offered again, at no cost
                else:
                    self.count_failure(task, False, now, gate_of)

    def strands(self, roots: list[str]) -> bool:
        """Whether RetryTasks(roots) is refused: a root needs a FAILED or CANCELED task
        that the call does not bring back, so it would wait forever."""
        revived = self._revived(roots)
        return any(
            self.tasks[d].state in (FAILED, CANCELED) and d not in revived for r in roots for d in self.tasks[r].deps
        )

    def retry(self, roots: list[str], reset: bool, now: int) -> list[str]:
        """RetryTasks: the roots, then their dependents canceled because of a dependency,
        each once nothing it needs is FAILED or CANCELED (in board order)."""
        revived = self._revived(roots)
        ordered = list(dict.fromkeys(roots)) + sorted(revived - set(roots), key=lambda t: self.tasks[t].order)
        for task_id in ordered:
            task = self.tasks[task_id]
            back = PROPOSED if task.undecided else PENDING  # only the Lead's decision makes a proposal claimable
            task.state, task.owner, task.result, task.canceled_by_lead = back, "", None, False
            task.failures = 0 if reset else task.failures
            if task.not_before is not None and task.not_before > now:
                task.gate = task.not_before
            elif task.gate is not None and task.gate > now:
                task.gate = None  # what was left of a backoff is skipped
        return ordered

    def _revived(self, roots: list[str]) -> set[str]:
        reachable: set[str] = set()
        frontier = list(roots)
        while frontier:
            for dependent in self.dependents(frontier.pop()):
                task = self.tasks[dependent]
                if task.state is CANCELED and not task.canceled_by_lead and dependent not in reachable:
                    reachable.add(dependent)
                    frontier.append(dependent)
        revived = set(roots)
        grown = True
        while grown:
            more = {
                t
                for t in reachable - revived
                if all(
                    self.tasks[d].state in (PENDING, IN_PROGRESS, COMPLETED, NEEDS_INPUT, IN_REVIEW, PROPOSED)
                    or d in revived
                    for d in self.tasks[t].deps
                )
            }
            revived |= more
            grown = bool(more)
        return revived

    def decide(self, task: MTask, approve: bool) -> None:
        """A review's verdict: COMPLETED with the author as owner, or a rejection: rework,
        or FAILED (and its dependents canceled) at the policy's rounds."""
        if approve:
            task.state, task.owner = COMPLETED, task.author
            return
        task.rounds += 1
        task.owner = ""
        if task.rounds >= task.review_max:
            task.state = FAILED
            self.cancel(self.dependents(task.id))
        else:
            task.state, task.result = PENDING, None

    def shut_gates(self, now: int) -> list[int]:
        return [t.gate for t in self.tasks.values() if t.gate is not None and t.gate > now]

    def in_progress(self, key: str) -> int:
        return sum(1 for t in self.tasks.values() if t.key == key and t.token is not None)

    def key_full(self, key: str) -> bool:
        return key in self.limits and self.in_progress(key) >= self.limits[key]

    def budget_of(self, name: str) -> Budget:
        return self.budgets.get(name, self.budgets.get("*", Budget()))

    def budget_spent(self, name: str) -> bool:
        return self.budget_of(name).spent_by(self.spent[name])

    def charge(self, name: str, usage: Usage | None) -> None:
        if usage is not None:
            s = self.spent[name]
            self.spent[name] = Usage(
                s.input_tokens + usage.input_tokens,
                s.output_tokens + usage.output_tokens,
                s.cost_micros + usage.cost_micros,
            )

    def gave_back(self, task: MTask, name: str) -> bool:
        """Whether `name` released this round's review of `task` (never offered to it again)."""
        return any(
            c.review and c.task_id == task.id and c.teammate == name and c.round == task.rounds + 1
            for c in self.claims.values()
            if c.outcome == "released"
        )

    def pick(self, name: str, now: int) -> MTask | None:
        """A review first (a teammate with the role, never the author), then new work."""
        reviews = [
            t
            for t in self.tasks.values()
            if t.state is IN_REVIEW
            and t.token is None
            and t.review_role in ROLES[name]
            and t.author != name
            and not self.key_full(t.key)
            and not self.gave_back(t, name)
        ]
        if reviews:
            return min(reviews, key=lambda t: (-t.priority, t.order))
        allowed = {"", *ROLES[name]}
        ready = [
            t for t in self.tasks.values() if self.ready(t, now) and t.role in allowed and not self.key_full(t.key)
        ]
        # Path leases: in claim order, a task conflicting with one held or with one passed over
        # before it is passed over too (the model's tasks are far fewer than the scan's bound).
        held = [lease for t in self.tasks.values() if t.state is IN_PROGRESS for lease in t.leases()]
        reserved: list[tuple[str, bool]] = []
        for task in sorted(ready, key=lambda t: (-t.priority, t.order)):
            wanted = task.leases()
            if any(_conflict(w, other) for w in wanted for other in held + reserved):
                reserved += wanted
                continue
            return task
        return None

    def expected_error(self, op: str, name: str, task_id: str, token: str, now: int):
        """None for success, "stored" for an idempotent complete, else the error class."""
        claim = self.claims.get(token)
        if claim is None or claim.task_id != task_id or claim.teammate != name:
            return errors.ClaimTokenMismatch
        if claim.outcome is None:
            if now >= self.tasks[task_id].lease_end:
                return errors.LeaseExpired
            if claim.review != (op == "verdict") and op in ("complete", "verdict") or op == "ask" and claim.review:
                return errors.InvalidArgument  # a review's claim takes a verdict, and only it
            return None
        if claim.outcome == "expired":
            return errors.LeaseExpired
        if claim.outcome == "canceled":
            return errors.TaskCanceled
        if claim.outcome == "revoked":
            return errors.ClaimRevoked
        if op in ("complete", "verdict") and claim.outcome in ("completed", "approved", "rejected"):
            return "stored"
        return errors.ClaimTokenMismatch


class BoardMachine(ArtifactRules, RuleBasedStateMachine):
    def __init__(self, store: str = "sqlite") -> None:
        super().__init__()
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix="corral-sm-"))
        self.clock = FakeClock()
        where: object = self.dir / "corral.sqlite3"
        self.schema = contextlib.ExitStack()
        if store == "postgres":  # a schema of the run's database of its own per example
            from corrald.store.postgres.target import PgTarget
            from tests.support.postgres import board_schema, run_database_dsn

            where = PgTarget.parse(run_database_dsn(), schema=self.schema.enter_context(board_schema()))
        self.board = SyncBoard(where, self.clock, writer_config=WriterConfig(synchronous="NORMAL")).open()
        self.model = Model()
        self.cursors: dict[str, StreamState] = {}
        self.next_id = 0
        self.results = 0

    def teardown(self) -> None:
        self.board.dispose()
        self.schema.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    @property
    def now(self) -> int:
        return self.clock.now_ms()

    def gate_of(self, task_id: str) -> int | None:
        return self.board.task(task_id).ready_ms

    @initialize(
        limits=st.tuples(*(st.sampled_from([0, 1, 1, 2]) for _ in KEYS[1:])),
        default_budget=st.sampled_from([(0, 0), (1, 0), (0, 3), (2, 5)]),
        w3_budget=st.sampled_from([(1, 0), (0, 3), (3, 6)]),
    )
    def add_teammates(
        self, limits: tuple[int, ...], default_budget: tuple[int, int], w3_budget: tuple[int, int]
    ) -> None:
        """The teammates, and from the start a small budget for w3 (w1 takes the same
        tasks), most runs a limit on the keys and some a "*" budget: set only by their
        rules, full keys and spent budgets are too rare in a run of 30 steps."""
        for name, roles in ROLES.items():
            self.board.add(name, roles)
            self.cursors[name] = StreamState(slots=SLOTS)
        for key, limit in zip(KEYS[1:], limits, strict=True):
            self.set_limit(key, limit)
        if default_budget != (0, 0):
            self.set_budget("*", *default_budget)
        self.set_budget("w3", *w3_budget)

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
            exclusive, shared = data.draw(st.sampled_from(LEASES), label="resources")
            specs.append(
                spec(
                    task_id,
                    *deps,
                    resources=exclusive,
                    shared_resources=shared,
                    priority=data.draw(st.integers(0, 2), label="priority"),
                    required_role=data.draw(st.sampled_from(["", "r"]), label="role"),
                    max_attempts=data.draw(st.integers(1, 3), label="max_attempts"),
                    lease_ms=data.draw(st.sampled_from([1000, 2000]), label="lease"),
                    not_before_ms=self.draw_not_before(data),
                    retry_backoff_ms=data.draw(st.sampled_from([0, 0, 1000]), label="backoff"),
                    retry_backoff_max_ms=data.draw(st.sampled_from([None, 1500]), label="backoff max"),
                    concurrency_key=data.draw(st.sampled_from(KEYS), label="key"),
                    review=data.draw(
                        st.sampled_from([None, None, ReviewPolicy("r", 2), ReviewPolicy("", 1)]), label="review"
                    ),
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
        for s, record in zip(specs, records, strict=True):
            backoff = s.retry_backoff_ms or 0
            self.model.tasks[s.id] = MTask(
                s.id,
                len(self.model.tasks),
                s.depends_on,
                s.priority,
                s.required_role,
                s.max_attempts,
                s.lease_ms,
                backoff=backoff,
                backoff_max=s.retry_backoff_max_ms if s.retry_backoff_max_ms is not None else 100 * backoff,
                not_before=s.not_before_ms,
                gate=s.not_before_ms,
                key=s.concurrency_key,
                resources=s.resources,
                shared_resources=s.shared_resources,
                review_role=None if s.review is None else s.review.reviewer_role,
                review_max=0 if s.review is None else s.review.max_rounds,
            )
            assert (record.retry_backoff_ms, record.retry_backoff_max_ms) == (
                backoff,
                self.model.tasks[s.id].backoff_max,
            )

    @rule(data=st.data())
    def create_overlapping(self, data) -> None:
        """Tasks ready at once whose path leases overlap: claims pass over some of them."""
        specs = []
        for _ in range(data.draw(st.integers(2, 4), label="overlapping")):
            exclusive, shared = data.draw(st.sampled_from(LEASES[2:]), label="resources")
            task_id = f"t{self.next_id}"
            self.next_id += 1
            specs.append(
                spec(
                    task_id,
                    priority=data.draw(st.integers(0, 2), label="priority"),
                    lease_ms=1000,
                    resources=exclusive,
                    shared_resources=shared,
                )
            )
        self.board.create(*specs)
        for s in specs:
            self.model.tasks[s.id] = MTask(
                s.id,
                len(self.model.tasks),
                (),
                s.priority,
                "",
                3,
                s.lease_ms,
                resources=s.resources,
                shared_resources=s.shared_resources,
            )

    def draw_not_before(self, data) -> int | None:
        ahead = data.draw(st.sampled_from([None, None, None, 0, 500, 1000]), label="not before")
        return None if ahead is None else self.now + ahead

    # ------------------------------------------------------------ claim (delivery steps 1 and 4)

    def deliver(self, name: str, look_first: bool = False) -> None:
        """One Idle check; `look_first` takes the read-only path a stream uses when no
        ready-task wake-up sent it (it must answer exactly as the writer would)."""
        cursor = self.cursors[name]
        held = self.model.held(name, self.now)
        self.model.sent[name] &= {c.token for c in held}
        resend = [c for c in held if c.token not in self.model.sent[name]]
        items = self.board.next_for(name, cursor, look_first=look_first)
        notices = [i for i in items if isinstance(i, BudgetExhausted)]
        assert all(isinstance(i, ClaimGrant) for i in items if i not in notices)
        if resend:
            assert [(g.token, g.attempt, g.fence, g.task.id, g.lease_expire_ms) for g in items] == [
                (c.token, c.attempt, c.fence, c.task_id, self.model.tasks[c.task_id].lease_end) for c in resend
            ]
            self.model.sent[name] |= {c.token for c in resend}
            return
        if self.model.budget_spent(name):  # the gate sits before the reclaim and the claim
            if self.model.told_spent[name]:
                assert items == []
            else:  # a stream that has not heard is told why, once
                (notice,) = items
                spent = notice.spent
                assert notice.teammate == name and notice.budget == self.model.budget_of(name)
                assert (spent.input_tokens, spent.output_tokens, spent.cost_micros) == (
                    self.model.spent[name].input_tokens,
                    self.model.spent[name].output_tokens,
                    self.model.spent[name].cost_micros,
                )
                self.model.told_spent[name] = True
            return
        self.model.reclaim(self.now, self.gate_of)
        task = self.model.pick(name, self.now)
        if task is None:
            assert items == []
            return
        (grant,) = items
        assert grant.task.id == task.id, (grant.task.id, task.id)
        assert grant.token not in self.model.claims  # invariant 4
        assert all(grant.fence > c.fence for c in self.model.claims.values())
        assert grant.attempt == task.failures + 1
        assert grant.lease_expire_ms == self.now + task.lease_ms
        reviewing = task.state is IN_REVIEW
        assert (grant.review is not None) == reviewing
        if reviewing:  # the author never gets its own round
            assert grant.review.author == task.author != name and grant.review.round == task.rounds + 1
        task.state = IN_REVIEW if reviewing else IN_PROGRESS
        task.owner, task.token, task.lease_end = name, grant.token, grant.lease_expire_ms
        self.model.claims[grant.token] = MClaim(
            grant.token, task.id, name, grant.attempt, grant.fence, review=reviewing, round=task.rounds + 1
        )
        self.model.sent[name].add(grant.token)
        if task.key in self.model.limits:  # claimed under its limit: within it
            assert self.model.in_progress(task.key) <= self.model.limits[task.key]

    @rule(names=st.lists(st.sampled_from(sorted(ROLES)), min_size=1, max_size=3), look_first=st.booleans())
    def claim(self, names: list[str], look_first: bool) -> None:
        # Up to three checks in one step: enough claims at once to fill a key's limit.
        for name in names:
            self.deliver(name, look_first)

    # ------------------------------------------------------------ operations on a claim

    def pick_call(self, data) -> tuple[str, str, str]:
        """Mostly the owner's own token for its task; sometimes a wrong teammate, task or token."""
        # Tokens are random: order them by fence so a replayed example picks the same claim.
        tokens = [c.token for c in sorted(self.model.claims.values(), key=lambda c: c.fence)]
        # Mostly a claim not ended yet: ended ones pile up, and usage counts only on success.
        live = [t for t in tokens if self.model.claims[t].outcome is None]
        if live and data.draw(st.integers(0, 3), label="an ended claim") > 0:
            tokens = live
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

    def draw_usage(self, data) -> Usage | None:
        """Mostly nothing; else a few tokens and micro-dollars (budgets are small too)."""
        if data.draw(st.integers(0, 2), label="reports usage") == 0:
            return None
        return Usage(
            data.draw(st.integers(0, 3), label="input tokens"),
            data.draw(st.integers(0, 3), label="output tokens"),
            data.draw(st.integers(0, 3), label="cost"),
        )

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
        usage = self.draw_usage(data)
        value, expected = self.attempt(
            "renew", lambda: self.board.renew(name, task_id, token, usage=usage), name, task_id, token
        )
        if expected is None:
            self.model.charge(name, usage)
            task = self.model.tasks[task_id]
            task.lease_end = self.now + task.lease_ms
            assert value == (task.lease_end, False)

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data())
    def complete(self, data) -> None:
        name, task_id, token = self.pick_call(data)
        self.results += 1
        result = f"result-{self.results}".encode()
        usage = self.draw_usage(data)
        value, expected = self.attempt(
            "complete", lambda: self.board.complete(name, task_id, token, result, usage=usage), name, task_id, token
        )
        task = self.model.tasks[task_id]
        if expected == "stored":  # the task as it stands (a reviewed one may have moved on)
            assert value.state is task.state
            if task.review_role is None:
                assert value.result == task.result
        elif expected is None:  # a stored completion counts its usage no second time
            self.model.charge(name, usage)
            self.model.end_claim(task, "completed")
            task.result = result
            if task.review_role is None:
                task.state = COMPLETED
            else:  # the result waits for its review
                task.state, task.owner, task.author = IN_REVIEW, "", name
            assert value.state is task.state and value.result == result

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data(), approve=st.booleans())
    def verdict(self, data, approve: bool) -> None:
        """A review's claim answered (mostly a live review's, else any claim: refused)."""
        reviews = sorted(
            (c for c in self.model.claims.values() if c.review and c.outcome is None), key=lambda c: c.fence
        )
        if reviews and data.draw(st.integers(0, 3), label="a review's claim"):
            claim = data.draw(st.sampled_from(reviews), label="review")
            name, task_id, token = claim.teammate, claim.task_id, claim.token
        else:
            name, task_id, token = self.pick_call(data)
        verdict = Verdict(approve, "" if approve else "again")
        value, expected = self.attempt(
            "verdict", lambda: self.board.complete(name, task_id, token, b"", verdict=verdict), name, task_id, token
        )
        task = self.model.tasks[task_id]
        if expected == "stored":
            assert value.state is task.state
        elif expected is None:
            self.model.end_claim(task, "approved" if approve else "rejected")
            self.model.decide(task, approve)
            assert value.state is task.state

    @precondition(lambda self: any(t.token is not None and t.lease_end > self.now for t in self.model.tasks.values()))
    @rule(data=st.data(), approve=st.booleans())
    def finish(self, data, approve: bool) -> None:
        """A holder finishes its live claim as the SDK would: a result for work, a verdict for
        a review (by chance the other rules rarely hold a live claim's own token)."""
        live = sorted(
            (t for t in self.model.tasks.values() if t.token is not None and t.lease_end > self.now),
            key=lambda t: t.order,
        )
        task = data.draw(st.sampled_from(live), label="finisher")
        name, token = task.owner, task.token
        if self.model.claims[token].review:
            value = self.board.complete(name, task.id, token, b"", verdict=Verdict(approve, "" if approve else "redo"))
            self.model.end_claim(task, "approved" if approve else "rejected")
            self.model.decide(task, approve)
        else:
            self.results += 1
            result = f"result-{self.results}".encode()
            value = self.board.complete(name, task.id, token, result)
            self.model.end_claim(task, "completed")
            task.result = result
            if task.review_role is None:
                task.state = COMPLETED
            else:
                task.state, task.owner, task.author = IN_REVIEW, "", name
        assert value.state is task.state

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data(), approve=st.booleans())
    def lead_review(self, data, approve: bool) -> None:
        """The Lead's ReviewTask: mostly a task IN_REVIEW (a teammate's review taken away
        first); else any task, refused with nothing written."""
        waiting = sorted(t for t, task in self.model.tasks.items() if task.state is IN_REVIEW)
        pool = waiting if waiting and data.draw(st.integers(0, 3), label="a wrong one") else sorted(self.model.tasks)
        task = self.model.tasks[data.draw(st.sampled_from(pool), label="review id")]
        feedback = "" if approve else "no"
        if task.state is not IN_REVIEW:
            before = self.dump_but_clock()
            with pytest.raises(errors.FailedPrecondition):
                self.board.review(task.id, approve, feedback)
            assert self.dump_but_clock() == before
            return
        record = self.board.review(task.id, approve, feedback)
        self.model.reclaim(self.now, self.gate_of)
        if task.token is not None:
            self.model.end_claim(task, "revoked")
        # The Lead's decision is a claim's row of its own, ended with its verdict.
        token, fence = self.board.rows("SELECT token, fence FROM claims ORDER BY fence DESC LIMIT 1")[0]
        self.model.claims[token] = MClaim(
            token, task.id, "lead", task.failures + 1, fence, "approved" if approve else "rejected"
        )
        self.model.decide(task, approve)
        assert record.state is task.state

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data(), retryable=st.booleans())
    def fail(self, data, retryable: bool) -> None:
        name, task_id, token = self.pick_call(data)
        usage = self.draw_usage(data)
        value, expected = self.attempt(
            "fail", lambda: self.board.fail(name, task_id, token, "x", retryable, usage=usage), name, task_id, token
        )
        if expected is None:
            self.model.charge(name, usage)
            task = self.model.tasks[task_id]
            reviewing = task.state is IN_REVIEW
            self.model.end_claim(task, "failed")
            if reviewing:  # a review that fails costs nothing: offered again
                self.model.back_to_pending(task)
            else:
                self.model.count_failure(task, not retryable, self.now, self.gate_of)
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
            assert value.state is task.state

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data())
    def ask(self, data) -> None:
        name, task_id, token = self.pick_call(data)
        value, expected = self.attempt(
            "ask", lambda: self.board.ask(name, task_id, token, f"q{self.results}"), name, task_id, token
        )
        if expected is None:
            task = self.model.tasks[task_id]
            self.model.end_claim(task, "asked")
            task.state, task.owner, task.questions, task.unanswered = NEEDS_INPUT, "", task.questions + 1, True
            assert (value.state, value.question) == (NEEDS_INPUT, f"q{self.results}")

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data())
    def answer(self, data) -> None:
        waiting = sorted(t for t, task in self.model.tasks.items() if task.state is NEEDS_INPUT)
        pool = waiting if waiting and data.draw(st.integers(0, 3), label="a wrong one") else sorted(self.model.tasks)
        task_id = data.draw(st.sampled_from(pool), label="answer id")
        task = self.model.tasks[task_id]
        if task.state is not NEEDS_INPUT:
            before = self.board.dump()
            with pytest.raises(errors.FailedPrecondition):
                self.board.answer(task_id)
            assert self.board.dump() == before
            return
        assert self.board.answer(task_id).state is PENDING
        task.state, task.unanswered = PENDING, False

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data())
    def cancel(self, data) -> None:
        ids = data.draw(
            st.lists(st.sampled_from(sorted(self.model.tasks)), min_size=1, max_size=2, unique=True), label="cancel ids"
        )
        changed = self.board.cancel(*ids)
        assert {t.id for t in changed} == self.model.cancel(list(ids), by_lead=True)
        assert all(self.board.task(t.id).state is CANCELED and t.error for t in changed)

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data(), reset=st.booleans())
    def retry(self, data, reset: bool) -> None:
        ended = sorted(t for t, task in self.model.tasks.items() if task.state in (FAILED, CANCELED))
        pool = ended if ended and data.draw(st.integers(0, 4), label="a wrong one") else sorted(self.model.tasks)
        ids = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True), label="retry ids")
        if any(self.model.tasks[t].state not in (FAILED, CANCELED) for t in ids) or self.model.strands(ids):
            before = self.board.dump()
            with pytest.raises(errors.FailedPrecondition):
                self.board.run(self.board.board.retry_tasks(ids, reset))
            assert self.board.dump() == before
            return
        records, count = self.board.run(self.board.board.retry_tasks(ids, reset))
        assert [r.id for r in records] == self.model.retry(ids, reset, self.now) and count == len(records)

    @precondition(lambda self: any(t.token is not None and t.lease_end > self.now for t in self.model.tasks.values()))
    @rule(data=st.data())
    def spend(self, data) -> None:
        """A holder renews reporting what it spent (renewals succeed too rarely by chance
        for budgets to be spent otherwise)."""
        live = sorted(
            (t for t in self.model.tasks.values() if t.token is not None and t.lease_end > self.now),
            key=lambda t: t.order,
        )
        task = data.draw(st.sampled_from(live), label="spender")
        usage = Usage(data.draw(st.integers(0, 3), label="tokens"), 0, data.draw(st.integers(1, 3), label="cost"))
        assert self.board.renew(task.owner, task.id, task.token, usage=usage) == (self.now + task.lease_ms, False)
        task.lease_end = self.now + task.lease_ms
        self.model.charge(task.owner, usage)

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data())
    def revoke(self, data) -> None:
        """Mostly a task with a live claim; else any (no live claim: refused, nothing written)."""
        live = sorted(t.id for t in self.model.tasks.values() if t.token is not None and t.lease_end > self.now)
        pool = live if live and data.draw(st.integers(0, 3), label="a wrong one") else sorted(self.model.tasks)
        task = self.model.tasks[data.draw(st.sampled_from(pool), label="revoke id")]
        if task.id not in live:
            before = self.dump_but_clock()
            with pytest.raises(errors.FailedPrecondition):
                self.board.revoke(task.id)
            assert self.dump_but_clock() == before
            return
        record = self.board.revoke(task.id)
        self.model.reclaim(self.now, self.gate_of)  # the revoke reclaims ended leases first
        self.model.end_claim(task, "revoked")
        self.model.back_to_pending(task)  # ready again (a review: offered again); no attempt used up
        assert record.state is task.state  # its failures are compared after the step

    def dump_but_clock(self) -> list[str]:
        """The database less the daemon's clock stamp (how far its clock got, kept by any call)."""
        return [line for line in self.board.dump().splitlines() if "'clock_ms'" not in line]

    # ------------------------------------------------------------ discovered work

    @rule(name=st.sampled_from([*sorted(ROLES), "*"]), policy=st.sampled_from(list(TaskCreation)[1:]))
    def set_task_creation(self, name: str, policy: TaskCreation) -> None:
        assert self.board.set_creation(name, policy) is policy
        self.model.creation[name] = policy

    def live_work(self) -> list[MTask]:
        return sorted(
            (
                t
                for t in self.model.tasks.values()
                if t.token is not None and t.lease_end > self.now and t.state is IN_PROGRESS
            ),
            key=lambda t: t.order,
        )

    @rule(data=st.data())
    def propose(self, data) -> None:
        """A teammate proposes one or two tasks: from no claim, or from a live work claim of
        its own, maybe splitting it (refused: DENY, or a split that would close a cycle)."""
        live = self.live_work()
        source = None  # mostly a live claim's, when there is one
        if live and data.draw(st.integers(0, 3), label="from no claim"):
            source = data.draw(st.sampled_from(live), label="source")
        self.proposal(data, source, source is not None and data.draw(st.booleans(), label="block"))

    @precondition(lambda self: self.live_work())
    @rule(data=st.data())
    def split(self, data) -> None:
        """A holder splits its task on tasks it proposes (live claims are too rare at random)."""
        self.proposal(data, data.draw(st.sampled_from(self.live_work()), label="split source"), True)

    def proposal(self, data, source: MTask | None, block: bool) -> None:
        name = source.owner if source else data.draw(st.sampled_from(sorted(ROLES)), label="proposer")
        open_ = sorted(t for t, task in self.model.tasks.items() if task.state not in (FAILED, CANCELED))
        ids, specs = [], []
        for _ in range(data.draw(st.integers(1, 2), label="proposed")):
            task_id = f"t{self.next_id}"
            self.next_id += 1
            pool = open_ + ids
            deps = data.draw(st.lists(st.sampled_from(pool), max_size=2, unique=True), label="deps") if pool else []
            ceiling = source.priority if source else 2
            priority = data.draw(st.integers(0, ceiling), label="priority")
            specs.append(
                spec(task_id, *deps, priority=priority, max_attempts=data.draw(st.integers(1, 3)), lease_ms=1000)
            )
            ids.append(task_id)
        policy = self.model.creation_of(name)
        outside = {d for s in specs for d in s.depends_on if d not in ids}
        cycle = block and any(self.model.reaches(d, source.id) for d in outside)
        token, from_id = (source.token, source.id) if source else ("", "")
        if policy is TaskCreation.DENY or cycle:
            before = self.dump_but_clock()
            with pytest.raises(errors.PermissionDenied if policy is TaskCreation.DENY else errors.InvalidArgument):
                self.board.propose(name, *specs, task_id=from_id, token=token, block=block)
            assert self.dump_but_clock() == before
            return
        proposed = self.board.propose(name, *specs, task_id=from_id, token=token, block=block)
        state = PROPOSED if policy is TaskCreation.PROPOSE else PENDING
        assert [(t.id, t.state, t.proposed_by, t.discovered_from) for t in proposed.tasks] == [
            (i, state, name, from_id) for i in ids
        ]
        for s_ in specs:
            self.model.tasks[s_.id] = MTask(
                s_.id,
                len(self.model.tasks),
                s_.depends_on,
                s_.priority,
                "",
                s_.max_attempts,
                1000,
                state=state,
                discovered_from=from_id,
                undecided=state is PROPOSED,
            )
        if block:
            self.model.end_claim(source, "split")
            source.state, source.owner, source.deps = PENDING, "", source.deps + tuple(ids)
            assert (proposed.split_task.state, proposed.split_task.depends_on) == (PENDING, source.deps)
        else:
            assert proposed.split_task is None

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data(), approve=st.booleans())
    def decide_proposals(self, data, approve: bool) -> None:
        """The Lead decides proposals: mostly PROPOSED ones; else any (refused, nothing written)."""
        waiting = sorted(t for t, task in self.model.tasks.items() if task.state is PROPOSED)
        pool = waiting if waiting and data.draw(st.integers(0, 3), label="a wrong one") else sorted(self.model.tasks)
        ids = data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=2, unique=True), label="decide ids")
        if any(self.model.tasks[t].state is not PROPOSED for t in ids):
            before = self.dump_but_clock()
            with pytest.raises(errors.FailedPrecondition):
                self.board.decide(*ids, approve=approve)
            assert self.dump_but_clock() == before
            return
        decided = self.board.decide(*ids, approve=approve, feedback="" if approve else "no")
        # Each proposer acks its notice at once (no claim reaches it before it does: tests of
        # their own say so); the checks that follow see claims only.
        for name, seq in self.board.rows("SELECT recipient, max(seq) FROM inbox GROUP BY recipient"):
            self.board.ack(name, seq)
        for task_id in ids:
            self.model.tasks[task_id].undecided = False
        if approve:
            for task_id in ids:
                self.model.tasks[task_id].state = PENDING
            assert [t.id for t in decided] == ids
            return
        freed = self.model.reject(ids)
        assert {t.id for t in decided} >= set(ids) | freed

    @precondition(lambda self: self.model.tasks)
    @rule(data=st.data())
    def add_dependencies(self, data) -> None:
        """The Lead makes a task wait for another: mostly a PENDING or PROPOSED one on any
        task; refused for a task in another state, a FAILED or CANCELED dependency, a cycle."""
        editable = sorted(t for t, task in self.model.tasks.items() if task.state in (PENDING, PROPOSED))
        pool = editable if editable and data.draw(st.integers(0, 3), label="a wrong one") else sorted(self.model.tasks)
        task = self.model.tasks[data.draw(st.sampled_from(pool), label="depend id")]
        dep = self.model.tasks[data.draw(st.sampled_from(sorted(self.model.tasks)), label="on")]
        if task.state not in (PENDING, PROPOSED):
            expected: type[errors.CorralError] | None = errors.FailedPrecondition
        elif dep.state in (FAILED, CANCELED) or (dep.id not in task.deps and self.model.reaches(dep.id, task.id)):
            expected = errors.InvalidArgument
        else:
            expected = None
        if expected is not None:
            before = self.dump_but_clock()
            with pytest.raises(expected):
                self.board.depend(task.id, dep.id)
            assert self.dump_but_clock() == before
            return
        if dep.id not in task.deps:
            task.deps = task.deps + (dep.id,)
        assert self.board.depend(task.id, dep.id).depends_on == task.deps

    # ------------------------------------------------------------ keys and budgets

    @rule(key=st.sampled_from(KEYS[1:]), limit=st.sampled_from([0, 1, 1, 2]))
    def set_limit(self, key: str, limit: int) -> None:
        record = self.board.set_limit(key, limit)
        count = self.model.in_progress(key)
        assert (record.key, record.limit, record.in_progress) == (key, limit, count)
        if limit:
            self.model.limits[key] = limit
            self.model.allowed[key] = max(limit, count)
        else:
            self.model.limits.pop(key, None)
            self.model.allowed.pop(key, None)

    @rule(
        name=st.sampled_from([*sorted(ROLES), "*"]),
        max_cost=st.sampled_from([0, 1, 3, 8]),
        max_tokens=st.sampled_from([0, 2, 6, 16]),
    )
    def set_budget(self, name: str, max_cost: int, max_tokens: int) -> None:
        assert self.board.set_budget(name, max_cost, max_tokens) == Budget(max_cost, max_tokens)
        self.model.budgets[name] = Budget(max_cost, max_tokens)

    # ------------------------------------------------------------ time, reaper, restart

    @rule(ms=st.sampled_from([1, 500, 999, 1000, 1001, 2500]))
    def advance(self, ms: int) -> None:
        self.clock.advance(ms)

    @precondition(lambda self: any(t.token is not None and t.lease_end > self.now for t in self.model.tasks.values()))
    @rule(data=st.data(), exactly=st.booleans())
    def advance_to_lease_end(self, data, exactly: bool) -> None:
        ends = sorted(
            {t.lease_end for t in self.model.tasks.values() if t.token is not None and t.lease_end > self.now}
        )
        end = data.draw(st.sampled_from(ends), label="lease end")
        self.clock.set(end if exactly else end - 1)

    @precondition(lambda self: self.model.shut_gates(self.now))
    @rule(data=st.data(), exactly=st.booleans())
    def advance_to_gate(self, data, exactly: bool) -> None:
        gate = data.draw(st.sampled_from(sorted(set(self.model.shut_gates(self.now)))), label="gate")
        self.clock.set(gate if exactly else gate - 1)

    @rule()
    def reap(self) -> None:
        deadline = self.board.reap()
        self.model.reclaim(self.now, self.gate_of)
        ends = [t.lease_end for t in self.model.tasks.values() if t.token is not None]
        ends += self.model.shut_gates(self.now)
        assert deadline == (min(ends) if ends else None)

    @rule()
    def restart(self) -> None:
        # A running daemon's reaper ends leases on time, so reap first: then the
        # restart happens at an instant the daemon already saw, and recovery
        # (in Board.open) must only extend live leases. Leases that run out
        # during a downtime are covered by test_board_tasks (restart tests).
        self.reap()
        self.board.restart()
        self.model.reclaim(self.now, self.gate_of)
        for task in self.model.tasks.values():
            if task.token is not None:
                task.lease_end = self.now + task.lease_ms
        # Every teammate reconnects with a new stream: held claims are re-sent first.
        for name in ROLES:
            self.cursors[name] = StreamState(slots=SLOTS)
            self.model.sent[name] = set()
            self.model.told_spent[name] = False
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
                # 2. never a live claim on a task whose dependency is not COMPLETED (a split task's
                # new dependencies, or the Lead's added live, included: those come after its claims)
                "early": q(
                    "SELECT c.fence FROM claims c JOIN deps d ON d.task_seq = c.task_seq"
                    " JOIN tasks t ON t.seq = d.dep_seq WHERE t.state != 3 AND c.outcome IS NULL"
                ),
                # a PROPOSED task has never been claimed
                "proposed_claimed": q(
                    "SELECT c.fence FROM claims c JOIN tasks t ON t.seq = c.task_seq WHERE t.state = 8"
                ),
                "edges": q(
                    "SELECT t.id, d.id FROM deps e JOIN tasks t ON t.seq = e.task_seq JOIN tasks d ON d.seq = e.dep_seq"
                ),
                # 4. tokens unique
                "tokens": q("SELECT count(*), count(DISTINCT token) FROM claims")[0],
                # 9. completed once
                # (a reviewed task: one approval, whatever the rounds of work before it)
                "twice": q(
                    "SELECT c.task_seq FROM claims c JOIN tasks t ON t.seq = c.task_seq"
                    " WHERE c.outcome = 'completed' AND t.review_role IS NULL OR c.outcome = 'approved'"
                    " GROUP BY c.task_seq HAVING count(*) > 1"
                ),
                "tasks": q(
                    "SELECT t.id, t.state, t.owner, t.lease_expire_ms, t.failures, t.result, c.token,"
                    " c.teammate, c.outcome, t.ready_ms FROM tasks t LEFT JOIN claims c ON c.fence = t.live_fence"
                ),
                "claims": q("SELECT token, outcome FROM claims"),
                # a question is never left open but on a NEEDS_INPUT task, and no claim carries one
                "questions": q(
                    "SELECT t.id, count(q.seq), count(q.answer) FROM tasks t LEFT JOIN questions q"
                    " ON q.task_seq = t.seq GROUP BY t.id"
                ),
                "keys": q(
                    "SELECT concurrency_key, count(*) FROM tasks WHERE state IN (2, 7) AND live_fence IS NOT NULL"
                    " AND concurrency_key != ''"
                    " GROUP BY concurrency_key"
                ),
                "limits": q("SELECT key, max_in_progress, in_progress FROM concurrency_keys"),
                "held": q("SELECT t.id, h.path, h.exclusive FROM held_resources h JOIN tasks t ON t.seq = h.task_seq"),
                "spent": q("SELECT name, input_tokens + output_tokens, cost_micros FROM teammates"),
            }

        db = self.board.call(snapshot)
        assert db["double"] == [] and db["early"] == [] and db["twice"] == [] and db["proposed_claimed"] == []
        # The graph is the model's (so acyclic, as the model's edges only ever are).
        assert sorted(db["edges"]) == sorted((t.id, d) for t in self.model.tasks.values() for d in t.deps)
        for task in self.model.tasks.values():
            assert not any(self.model.reaches(d, task.id) for d in task.deps), task.id
        assert db["tokens"][0] == db["tokens"][1] == len(self.model.claims)
        assert dict(db["claims"]) == {c.token: c.outcome for c in self.model.claims.values()}
        for task_id, asked, answered in db["questions"]:
            task = self.model.tasks[task_id]
            assert (asked, answered) == (task.questions, task.questions - int(task.unanswered)), task_id
        for task_id, state, owner, lease_end, failures, result, token, holder, outcome, ready_ms in db["tasks"]:
            task = self.model.tasks[task_id]
            if task.token is not None:  # exactly the owner's one live claim (work, or a review)
                assert (token, holder, outcome) == (task.token, owner, None)
            else:
                assert token is None
            expected_owner = "" if task.state is PENDING else task.owner
            assert (state, owner, lease_end, failures) == (task.state, expected_owner, task.lease_end, task.failures)
            assert ready_ms == task.gate, (task_id, ready_ms, task.gate)
            if task.state is COMPLETED:
                assert result == task.result
        # A key never holds more IN_PROGRESS than the limit it had when they were
        # claimed: a lowered limit may leave more, and then none is claimed until below.
        in_progress = dict(db["keys"])
        for key, allowed in list(self.model.allowed.items()):
            count = in_progress.get(key, 0)
            assert count <= allowed, (key, count, allowed)
            self.model.allowed[key] = max(self.model.limits[key], count)
        assert sorted(db["limits"]) == sorted(
            (key, limit, in_progress.get(key, 0)) for key, limit in self.model.limits.items()
        )
        # What is held is what the tasks IN_PROGRESS hold, and no two of them conflict.
        working = [t for t in self.model.tasks.values() if t.state is IN_PROGRESS]
        assert sorted(db["held"]) == sorted((t.id, p, int(x)) for t in working for p, x in t.leases())
        for i, one in enumerate(working):
            for other in working[i + 1 :]:
                assert not any(_conflict(a, b) for a in one.leases() for b in other.leases()), (one.id, other.id)
        assert {name: (tokens, cost) for name, tokens, cost in db["spent"]} == {
            name: (s.tokens, s.cost_micros) for name, s in self.model.spent.items()
        }


SETTINGS = settings(
    max_examples=100,
    stateful_step_count=40,
    deadline=None,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
# A PostgreSQL example costs several times a SQLite one: fewer of them.
POSTGRES_EXAMPLES = 25


@pytest.fixture(autouse=True)
def _bounded_shrinking(monkeypatch):
    """Keep a failing run (generation + shrinking) inside the test's timeout.

    Hypothesis shrinks for up to 5 minutes by default, and it catches the
    exception pytest-timeout raises in the test thread, so the timeout below
    uses the thread method as a hard backstop and shrinking gets 40 s.
    """
    monkeypatch.setattr(hypothesis_engine, "MAX_SHRINKING_SECONDS", 40, raising=False)


@pytest.mark.timeout(110, method="thread")
def test_board_state_machine(store):
    examples = POSTGRES_EXAMPLES if store == "postgres" else SETTINGS.max_examples
    run_state_machine_as_test(lambda: BoardMachine(store), settings=settings(SETTINGS, max_examples=examples))
