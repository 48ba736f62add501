"""Discovered work on both stores: a teammate proposes tasks (PROPOSED for the Lead, PENDING
where allowed, refused where denied), splits the task it holds on them, and the Lead
approves, rejects and adds dependencies. Tries to break it with dead claims, bad input,
cycles, rejections and restarts."""

from __future__ import annotations

import collections
import json
import pathlib
import random
import threading
import time

import pytest

from corrald import errors, validate
from corrald.model import ClaimGrant, ClaimOutcome, Completion, Proposed, TaskCreation, TaskState
from corrald.store import proposals, tasks
from corrald.store.proposals import PROPOSALS_WAITING_MAX
from tests.support.boardkit import spec
from tests.support.graphs import a_cycle
from tests.support.races import race

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def team(board):
    board.add("w1")
    board.add("w2")
    return board


def _history(board, task_id: str):
    return board.run(board.board.task_history(task_id))[1]


def _inbox(board, name: str):
    from corrald.store import inbox

    return board.run(board.board.read(lambda conn: inbox.inbox_after(conn, name, 0)))


def test_a_proposal_waits_for_the_lead_and_is_never_claimed(team):
    team.create(spec("a", priority=5))
    grant = team.claim("w1")
    proposed = team.propose("w1", spec("fix", priority=5), spec("test", "fix"), task_id="a", token=grant.token)
    assert [(t.id, t.state, t.proposed_by, t.discovered_from) for t in proposed.tasks] == [
        ("fix", TaskState.PROPOSED, "w1", "a"),
        ("test", TaskState.PROPOSED, "w1", "a"),
    ]
    assert proposed.split_task is None
    assert team.claim("w2") is None, "a PROPOSED task is never claimed"
    (event,) = team.events("tasks_proposed")
    assert '"fix"' in event[2] and '"w1"' in event[2]
    approved = team.decide("fix", "test")
    assert [(t.id, t.state) for t in approved] == [("fix", TaskState.PENDING), ("test", TaskState.PENDING)]
    assert team.claim("w2").task.id == "fix"
    (notice,) = [item for item in _inbox(team, "w1") if item.kind == "proposals_decided"]
    assert (notice.ref.split("\n"), notice.approve) == (["fix", "test"], True)


def test_allow_adds_pending_tasks_and_deny_writes_nothing(team):
    team.set_creation("w1", TaskCreation.ALLOW)
    (added,) = team.propose("w1", spec("x")).tasks
    assert added.state is TaskState.PENDING
    assert team.claim("w2").task.id == "x"
    team.set_creation("*", TaskCreation.DENY)
    before = team.snapshot()
    with pytest.raises(errors.PermissionDenied):
        team.propose("w2", spec("y"))
    assert team.snapshot() == before
    assert team.propose("w1", spec("z")).tasks[0].state is TaskState.PENDING, "its own policy wins over '*'"


def test_a_split_ends_the_claim_and_the_task_waits_for_its_new_dependencies(team):
    team.set_creation("*", TaskCreation.ALLOW)
    team.create(spec("big", max_attempts=1))
    grant = team.claim("w1")
    proposed = team.propose("w1", spec("part1"), spec("part2"), task_id="big", token=grant.token, block=True)
    split = proposed.split_task
    assert (split.state, split.owner, split.depends_on) == (TaskState.PENDING, "", ("part1", "part2"))
    assert split.attempts_used == 0, "a split uses no attempt"
    assert _history(team, "big")[-1].outcome is ClaimOutcome.SPLIT
    with pytest.raises(errors.ClaimError):
        team.complete("w1", "big", grant.token)
    parts = [team.claim("w1"), team.claim("w2")]
    assert sorted(p.task.id for p in parts) == ["part1", "part2"]
    assert team.claim("w1") is None, "the split task waits for its parts"
    for part in parts:
        team.complete(part.task.owner, part.task.id, part.token, b"r")
    again = team.claim("w1")
    assert again.task.id == "big"
    assert dict(again.dependency_results) == {"part1": b"r", "part2": b"r"}
    assert again.previous_attempt.outcome is ClaimOutcome.SPLIT
    assert team.complete("w1", "big", again.token).state is TaskState.COMPLETED


def test_a_rejected_split_drops_the_dependency_and_says_why(team):
    team.create(spec("big"))
    grant = team.claim("w1")
    team.propose("w1", spec("prep"), spec("prep2", "prep"), task_id="big", token=grant.token, block=True)
    assert team.claim("w2") is None
    decided = team.decide("prep", approve=False, feedback="not needed")
    assert {t.id: t.state for t in decided} == {
        "prep": TaskState.CANCELED,
        "prep2": TaskState.CANCELED,
        "big": TaskState.PENDING,
    }
    assert team.task("prep").error == "proposal rejected: not needed"
    assert team.task("big").depends_on == ()
    again = team.claim("w2")
    assert again.task.id == "big"
    assert again.previous_attempt.outcome is ClaimOutcome.SPLIT
    assert "proposal rejected: not needed" in again.previous_attempt.error


def test_a_rejection_cancels_what_depends_on_it_proposed_or_not(team):
    """A rejected proposal will never complete: as a cancel does, it takes its unfinished
    dependents with it, a teammate's proposal on it and the Lead's own tasks that wait for it
    (created on it, or given it with AddDependencies); only a split's edge is dropped instead."""
    team.propose("w1", spec("p"))
    team.propose("w2", spec("q", "p"))
    team.create(spec("uses", "p"), spec("later"), spec("free"))
    team.depend("later", "p")
    decided = team.decide("p", approve=False, feedback="no")
    assert [(t.id, t.state) for t in decided] == [
        ("p", TaskState.CANCELED),
        ("q", TaskState.CANCELED),
        ("uses", TaskState.CANCELED),
        ("later", TaskState.CANCELED),
    ]
    assert team.task("p").error == "proposal rejected: no"
    assert {team.task(t).error for t in ("q", "uses", "later")} == {"dependency 'p' was canceled"}
    assert team.claim("w1").task.id == "free"


def test_a_rejection_frees_only_the_split_it_reaches_first(team):
    """b's split waits for pb, which waits for a; a's split waits for pa. Rejecting pa frees
    a (its split's edge goes), and with it pb's dependency is a task ready again: b keeps
    waiting for pb, its own split's proposal, still PROPOSED."""
    team.create(spec("a", priority=1), spec("b", priority=1))
    held = {grant.task.id: grant for grant in (team.claim("w1"), team.claim("w2"))}
    team.propose("w1", spec("pa"), task_id="a", token=held["a"].token, block=True)
    team.propose("w2", spec("pb", "a"), task_id="b", token=held["b"].token, block=True)
    decided = team.decide("pa", approve=False)
    assert {t.id: t.state for t in decided} == {"pa": TaskState.CANCELED, "a": TaskState.PENDING}
    assert (team.task("a").depends_on, team.task("b").depends_on) == ((), ("pb",))
    assert (team.state("b"), team.state("pb")) == (TaskState.PENDING, TaskState.PROPOSED)
    again = team.claim("w1")
    assert again.task.id == "a" and "split rejected" in again.previous_attempt.error
    assert team.claim("w2") is None, "b still waits for pb"
    assert "split rejected" not in _history(team, "b")[-1].error


def test_proposals_are_refused_with_nothing_written(team):
    team.create(spec("a", priority=1), spec("done"))
    grant = team.claim("w1")
    other = team.claim("w2")
    team.complete("w2", other.task.id, other.token)
    before = team.snapshot()
    cases = [
        (lambda: team.propose("w1", spec("hi", priority=2), task_id="a", token=grant.token), "tasks[0].priority"),
        (lambda: team.propose("w1", spec("a")), "tasks[0].id"),
        (lambda: team.propose("w1", *[spec(f"n{i}") for i in range(101)]), "tasks"),
        (lambda: team.propose("w1", spec("n", "missing")), "tasks[0].depends_on"),
        (lambda: team.propose("w1", spec("n"), block=True), "block_claimed_task"),
        (lambda: team.propose("w1", spec("n"), task_id="a"), "claim_token"),
    ]
    for call, field in cases:
        with pytest.raises(errors.CorralError) as refused:
            call()
        assert refused.value.metadata.get("field") == field, (field, refused.value)
    with pytest.raises(errors.ClaimError):
        team.propose("w2", spec("n"), task_id="done", token=other.token, block=True)
    assert team.snapshot() == before


def test_at_most_so_many_proposals_wait_from_one_teammate(team):
    for start in range(0, PROPOSALS_WAITING_MAX, 100):
        team.propose("w1", *[spec(f"p{i}") for i in range(start, start + 100)])
    before = team.snapshot()
    with pytest.raises(errors.FailedPrecondition) as full:
        team.propose("w1", spec("one-more"))
    assert full.value.metadata["field"] == "tasks"
    assert team.snapshot() == before
    assert team.propose("w2", spec("theirs")).tasks[0].state is TaskState.PROPOSED


def test_a_proposal_sent_again_answers_as_before(team):
    team.create(spec("a"))
    grant = team.claim("w1")
    first = team.propose("w1", spec("x"), task_id="a", token=grant.token, block=True)
    again = team.propose("w1", spec("x"), task_id="a", token=grant.token, block=True)
    assert [t.id for t in again.tasks] == ["x"] and again.split_task.id == "a"
    assert first.tasks[0].seq == again.tasks[0].seq
    with pytest.raises(errors.AlreadyExists):
        team.propose("w2", spec("x"))


def test_add_dependencies_checks_state_ids_and_cycles(team):
    team.create(spec("a"), spec("b", "a"), spec("c", "b"), spec("d"))
    assert team.depend("a", "d").depends_on == ("d",)
    with pytest.raises(errors.InvalidArgument) as cycle:
        team.depend("d", "c")
    assert "d → c → b → a → d" in str(cycle.value)
    with pytest.raises(errors.InvalidArgument):
        team.depend("a", "a")
    with pytest.raises(errors.TaskNotFound):
        team.depend("a", "nope")
    grant = team.claim("w1")
    assert grant.task.id == "d"
    with pytest.raises(errors.FailedPrecondition):
        team.depend("d", "b")
    team.complete("w1", "d", grant.token)
    with pytest.raises(errors.FailedPrecondition):
        team.depend("d", "b")
    assert team.depend("a", "d").depends_on == ("d",), "an edge it has is left as it is"
    assert team.claim("w1").task.id == "a"


def test_a_task_waits_for_a_dependency_added_live(team):
    team.create(spec("late"), spec("first"))
    team.depend("late", "first")
    grant = team.claim("w1")
    assert grant.task.id == "first"
    assert team.claim("w2") is None
    team.complete("w1", "first", grant.token, b"1")
    late = team.claim("w2")
    assert late.task.id == "late" and dict(late.dependency_results) == {"first": b"1"}


def test_proposals_and_decisions_survive_a_restart(team):
    team.create(spec("big"))
    grant = team.claim("w1")
    team.propose("w1", spec("p1"), task_id="big", token=grant.token, block=True)
    team.restart()
    assert team.state("p1") is TaskState.PROPOSED and team.state("big") is TaskState.PENDING
    team.decide("p1")
    part = team.claim("w2")
    assert part.task.id == "p1"
    team.complete("w2", "p1", part.token)
    assert team.claim("w1").task.id == "big"


def test_a_proposal_with_some_ids_taken_names_the_first_and_writes_nothing(team):
    team.propose("w1", spec("x"))
    before = team.snapshot()
    for sender in ("w1", "w2"):
        with pytest.raises(errors.AlreadyExists) as taken:
            team.propose(sender, spec("y"), spec("x"))
        assert taken.value.metadata["field"] == "tasks[1].id"
    assert team.snapshot() == before


# ---------------------------------------------------------------- dead claims, DENY


def test_a_proposal_from_a_claim_that_is_not_live_writes_nothing(team, clock):
    team.create(spec("exp", lease_ms=10_000), spec("rel"), spec("rev"), spec("done"))
    grants = {grant.task.id: grant for grant in (team.claim("w1") for _ in range(4))}
    team.release("w1", "rel", grants["rel"].token)
    team.revoke("rev")
    team.complete("w1", "done", grants["done"].token)
    clock.advance(10_000)
    # A refusal for a dead claim notes the clock the writer reached: noted here first.
    team.call(lambda tx: tasks.note_clock(tx.conn, tx.now_ms))
    before = team.snapshot()
    refused = {
        "exp": errors.LeaseExpired,
        "rel": errors.ClaimTokenMismatch,
        "rev": errors.ClaimRevoked,
        "done": errors.ClaimTokenMismatch,
    }
    for task_id, error in refused.items():
        for block in (False, True):
            with pytest.raises(error) as dead:
                team.propose("w1", spec(f"from-{task_id}"), task_id=task_id, token=grants[task_id].token, block=block)
            assert dead.value.metadata["field"] == "claim_token", (task_id, block)
    with pytest.raises(errors.ClaimTokenMismatch) as stolen:  # another teammate's token
        team.propose("w2", spec("stolen"), task_id="exp", token=grants["exp"].token)
    assert stolen.value.metadata["field"] == "claim_token"
    with pytest.raises(errors.TaskNotFound) as unknown:
        team.propose("w1", spec("from-nowhere"), task_id="nowhere", token=grants["exp"].token, block=True)
    assert unknown.value.metadata["field"] == "task_id"
    assert team.snapshot() == before


def test_deny_writes_nothing_and_leaves_the_claim_live(team):
    team.create(spec("a"))
    grant = team.claim("w1")
    team.set_creation("w1", TaskCreation.DENY)
    before = team.snapshot()
    for block in (False, True):
        with pytest.raises(errors.PermissionDenied):
            team.propose("w1", spec("x"), spec("y", "x"), task_id="a", token=grant.token, block=block)
    with pytest.raises(errors.PermissionDenied):
        team.propose("w1", spec("z"))
    assert team.snapshot() == before
    assert team.complete("w1", "a", grant.token).state is TaskState.COMPLETED


# ---------------------------------------------------------------- many callers at once
#
# Each call below is one writer job from its own thread, as the daemon's would be (the
# SyncBoard's own calls run its event loop and are for one thread only). On PostgreSQL
# the board has several writers, so the jobs really run side by side.


def _propose_job(board, name: str, specs, task_id: str = "", token: str = "", block: bool = False) -> Proposed:
    batch = validate.proposal(specs, task_id, token, block, board.limits, board.clock.now_ms())
    return board.call(lambda tx: proposals.propose(tx, name, batch, task_id, token, block=block))


def _depend_job(board, task_id: str, *depends_on: str):
    return board.call(lambda tx: tasks.add_dependencies(tx, task_id, list(depends_on)))


def _decide_job(board, task_ids: list[str], approve: bool, feedback: str = ""):
    return board.call(lambda tx: proposals.decide(tx, task_ids, approve, feedback))


def _create_job(board, specs):
    batch = validate.prepare_batch(specs, board.limits, board.clock.now_ms())
    return board.call(lambda tx: tasks.create_batch(tx, batch))


def _edges(board) -> dict[str, set[str]]:
    rows = board.rows(
        "SELECT t.id, d.id FROM deps AS e JOIN tasks AS t ON t.seq = e.task_seq JOIN tasks AS d ON d.seq = e.dep_seq"
    )
    graph: dict[str, set[str]] = {}
    for task_id, dep in rows:
        graph.setdefault(task_id, set()).add(dep)
    return graph


def _run_threads(targets, timeout: float) -> None:
    threads = [threading.Thread(target=target, name=name) for name, target in targets]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + timeout
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    assert not [t.name for t in threads if t.is_alive()], "threads still running past the deadline"


def _state_changes(board) -> dict[str, list[tuple[int, int]]]:
    """Each task's states as the event log says, in commit order: id -> [(event seq, state)]."""
    changes: dict[str, list[tuple[int, int]]] = {}
    for seq, _, data in board.events("task_changed"):
        change = json.loads(data)
        changes.setdefault(change["id"], []).append((seq, change["state"]))
    return changes


TEAMMATES = 14
SEEDED = 48
STEPS_MAX = 400  # a teammate's loop, bounded
PROPOSALS_EACH = 4  # the proposals a teammate makes at most
EDGES_MAX = 40  # the lead's AddDependencies that succeed, at most
CREATED_BATCHES = 24  # CreateTasks calls from a caller of its own, each on tasks of the board
UNFINISHED = "SELECT count(*) FROM tasks WHERE state NOT IN (3, 4, 5)"


@pytest.mark.timeout(120)
def test_many_teammates_propose_and_split_while_the_lead_decides_and_adds_dependencies(board):
    """Teammates claim, propose (some from their claim, some splitting it, some on tasks of
    the board) and complete; a lead thread approves or rejects what waits and adds
    dependencies between tasks as it goes, while another caller creates tasks on tasks of
    the board (CreateTasks). Afterwards, from the claims table and the event
    log: no PROPOSED task was ever claimed, no task (a split one either) was claimed before
    its dependencies completed, the graph is acyclic, and the attempts and outcomes are those
    the threads saw."""
    rng = random.Random(34)
    seeded = [spec(f"s{n}", *(f"s{d}" for d in rng.sample(range(n), min(n, rng.randint(0, 2))))) for n in range(SEEDED)]
    board.create(*seeded)
    names = [f"w{n}" for n in range(TEAMMATES)]
    for name in names:
        board.add(name)
    for name in names[:3]:  # some add PENDING tasks at once
        board.set_creation(name, TaskCreation.ALLOW)
    done = threading.Event()
    problems: list[str] = []
    lock = threading.Lock()
    grants: list[ClaimGrant] = []
    completed: list[str] = []
    splits: list[str] = []
    rejected: set[str] = set()
    created_all = threading.Event()  # until then, no unfinished task is no reason to stop
    created: list[str] = []

    def unfinished() -> int:
        return board.scalar(UNFINISHED)

    def teammate(name: str, seed: int) -> None:
        local = random.Random(seed)
        made = 0
        try:
            for _ in range(STEPS_MAX):
                if done.is_set():
                    return
                grant = board.claim(name)
                if grant is None:
                    if created_all.is_set() and unfinished() == 0:
                        return
                    done.wait(0.005)  # nothing ready: the lead has proposals to decide
                    continue
                with lock:
                    grants.append(grant)
                    if grant.task.id in rejected:
                        problems.append(f"{name} claimed {grant.task.id}, a rejected proposal")
                task_id, token = grant.task.id, grant.token
                if made < PROPOSALS_EACH and local.random() < 0.4:
                    made += 1
                    ids = [f"{name}.{made}.{k}" for k in range(local.randint(1, 2))]
                    outside = [t for (t,) in board.rows("SELECT id FROM tasks WHERE state NOT IN (4, 5)")]
                    first_deps = local.sample(outside, 1) if outside and local.random() < 0.5 else []
                    specs = [spec(ids[0], *first_deps), *(spec(i, ids[0]) for i in ids[1:])]
                    block = local.random() < 0.5
                    try:
                        proposed = _propose_job(board, name, specs, task_id, token, block)
                    except (errors.InvalidArgument, errors.TaskNotFound):
                        pass  # a dependency canceled meanwhile, or a split that would close a cycle
                    else:
                        if proposed.split_task is not None:
                            with lock:
                                splits.append(task_id)
                            continue
                board.call(lambda tx, t=task_id, k=token: tasks.complete(tx, Completion(name, t, k, name.encode())))
                with lock:
                    completed.append(task_id)
        except Exception as error:  # noqa: BLE001 (reported below)
            problems.append(f"{name}: {error!r}")
            done.set()

    def lead() -> None:
        local = random.Random(7)
        added = 0
        try:
            for _ in range(20 * STEPS_MAX):
                if done.is_set():
                    return
                waiting = [t for (t,) in board.rows("SELECT id FROM tasks WHERE state = 8 ORDER BY seq")]
                if waiting:
                    approve = local.random() < 0.75
                    chosen = local.sample(waiting, min(len(waiting), local.randint(1, 3)))
                    if not approve:
                        with lock:  # before the call: a claim may follow its commit at once
                            rejected.update(chosen)
                    _decide_job(board, chosen, approve, "" if approve else "not now")
                if added < EDGES_MAX:
                    pending = [t for (t,) in board.rows("SELECT id FROM tasks WHERE state IN (0, 8)")]
                    alive = [t for (t,) in board.rows("SELECT id FROM tasks WHERE state NOT IN (4, 5)")]
                    if pending and alive:
                        try:
                            _depend_job(board, local.choice(pending), local.choice(alive))
                            added += 1
                        except (errors.FailedPrecondition, errors.InvalidArgument):
                            pass  # claimed meanwhile, a cycle, or a dependency canceled meanwhile
                if not waiting and created_all.is_set() and unfinished() == 0:
                    return
                done.wait(0.002)
        except Exception as error:  # noqa: BLE001
            problems.append(f"lead: {error!r}")
            done.set()

    def creator() -> None:
        local = random.Random(11)
        try:
            for n in range(CREATED_BATCHES):
                if done.is_set():
                    return
                alive = [t for (t,) in board.rows("SELECT id FROM tasks WHERE state NOT IN (4, 5)")]
                ids = [f"c{n}.{k}" for k in range(local.randint(1, 2))]
                on_board = local.sample(alive, min(len(alive), local.randint(1, 2)))
                try:
                    _create_job(board, [spec(ids[0], *on_board), *(spec(i, ids[0]) for i in ids[1:])])
                except errors.InvalidArgument:
                    continue  # a dependency canceled meanwhile
                created.extend(ids)
                done.wait(0.01)
        except Exception as error:  # noqa: BLE001
            problems.append(f"creator: {error!r}")
            done.set()
        finally:
            created_all.set()

    targets = [(name, lambda name=name, n=n: teammate(name, n)) for n, name in enumerate(names)]
    _run_threads([*targets, ("lead", lead), ("creator", creator)], timeout=100)
    done.set()
    assert not problems, problems[:5]
    assert unfinished() == 0, "every task ended"
    proposed_ids = {t for (t,) in board.rows("SELECT id FROM tasks WHERE proposed_by != ''")}
    assert proposed_ids and splits, "the run proposed and split"
    assert created, "the run created tasks as it went"

    changes = _state_changes(board)
    # A PROPOSED task is never claimed: a claim always follows PENDING, and a rejected one has none.
    for task_id, seen in changes.items():
        for (_, before), (_, after) in zip(seen, seen[1:], strict=False):
            assert not (after == TaskState.IN_PROGRESS and before != TaskState.PENDING), (task_id, seen)
    rejected_rows = board.rows("SELECT id FROM tasks WHERE error LIKE ?", ("proposal rejected%",))
    assert {t for (t,) in rejected_rows} <= rejected
    claimed = {t for (t,) in board.rows("SELECT DISTINCT t.id FROM claims c JOIN tasks t ON t.seq = c.task_seq")}
    assert not claimed & {t for (t,) in rejected_rows}
    # No task claimed before its dependencies completed: the completing claim of each task
    # came after every dependency it has; a split task's next claim after what the split added.
    done_at = {t: s for t, seen in changes.items() for s, state in seen if state == TaskState.COMPLETED}
    ended_at = {t: s for t, seen in changes.items() for s, state in seen if state in (3, 4, 5)}
    claims_at = {t: [s for s, state in seen if state == TaskState.IN_PROGRESS] for t, seen in changes.items()}
    graph = _edges(board)
    for task_id, deps in graph.items():
        if task_id in done_at:
            last_claim = claims_at[task_id][-1]
            assert all(done_at[d] < last_claim for d in deps), (task_id, deps)
    for seq, _, data in board.events("tasks_proposed"):
        event = json.loads(data)
        if not event["split"]:
            continue
        later = [s for s in claims_at.get(event["discovered_from"], []) if s > seq]
        if later:
            assert all(ended_at[p] < later[0] for p in event["task_ids"]), (event, later[0])
    # Acyclic.
    assert a_cycle(graph) is None
    # Attempts and outcomes match the history the threads saw.
    outcomes = dict(board.rows("SELECT outcome, count(*) FROM claims GROUP BY outcome"))
    assert outcomes == {"completed": len(completed), "split": len(splits)}
    assert sorted(completed) == sorted(t for (t,) in board.rows("SELECT id FROM tasks WHERE state = 3"))
    assert len(set(completed)) == len(completed), "each task completed once"
    assert board.scalar("SELECT count(*) FROM claims") == len(grants)
    assert {g.token for g in grants} == {t for (t,) in board.rows("SELECT token FROM claims")}
    assert all(g.attempt == 1 for g in grants), "a split uses no attempt"
    assert board.scalar("SELECT max(failures) FROM tasks") == 0
    split_rows = board.rows(
        "SELECT t.id, count(*) FROM claims c JOIN tasks t ON t.seq = c.task_seq WHERE c.outcome = 'split' GROUP BY t.id"
    )
    assert sorted(split_rows) == sorted(collections.Counter(splits).items())


ROUNDS = 6


@pytest.mark.timeout(90)
@pytest.mark.parametrize("ring", [2, 3, 5])
def test_concurrent_add_dependencies_closing_a_ring_leave_no_cycle(board, ring):
    """Each round, `ring` tasks and threads adding the edges r0→r1→…→r0 (each edge by two
    threads), all let go at once: every edge but the last to commit is added, that one is
    refused naming the cycle."""
    for round_ in range(ROUNDS):
        ids = [f"r{round_}.{k}" for k in range(ring)]
        board.create(*[spec(i) for i in ids])
        edges = [(ids[k], ids[(k + 1) % ring]) for k in range(ring)] * 2
        outcomes = race([lambda e=e: _depend_job(board, *e) for e in edges], (errors.CorralError,))
        refused = [o for o in outcomes if isinstance(o, errors.CorralError)]
        assert all(isinstance(o, errors.InvalidArgument) and "dependency cycle: " in str(o) for o in refused), refused
        added = {edge for edge, o in zip(edges, outcomes, strict=True) if not isinstance(o, errors.CorralError)}
        assert len(added) == ring - 1, (added, refused)
        assert a_cycle(_edges(board)) is None


@pytest.mark.timeout(90)
def test_a_split_and_an_add_dependencies_racing_to_close_a_cycle_leave_none(board):
    """s (claimed) splits on p, which depends on x, while the lead makes x depend on s:
    s → p → x → s. Exactly one of the two commits, every round."""
    board.add("w1")
    for round_ in range(10):
        s, x, p = f"s{round_}", f"x{round_}", f"p{round_}"
        board.create(spec(s, priority=1), spec(x))
        grant = board.claim("w1")
        assert grant.task.id == s
        split, depend = race(
            [
                lambda s=s, x=x, p=p, k=grant.token: _propose_job(board, "w1", [spec(p, x)], s, k, block=True),
                lambda s=s, x=x: _depend_job(board, x, s),
            ],
            (errors.CorralError,),
        )
        failed = [o for o in (split, depend) if isinstance(o, errors.CorralError)]
        assert len(failed) == 1, (split, depend)
        assert isinstance(failed[0], errors.InvalidArgument)
        assert failed[0].metadata.get("field") == ("block_claimed_task" if failed[0] is split else "depends_on")
        cycle = f"{s} → {p} → {x} → {s}" if failed[0] is split else f"{x} → {s} → {p} → {x}"
        assert f"dependency cycle: {cycle}" in str(failed[0]), failed[0]
        assert a_cycle(_edges(board)) is None
        if failed[0] is split:  # the claim is still live: end it, so the next round claims its own task
            board.complete("w1", s, grant.token)
        board.cancel(s, x)


def test_retrying_a_dependency_does_not_bring_back_a_rejected_proposal(team):
    """A rejection is the Lead's decision, as a cancel is: RetryTasks of the task a rejected
    proposal depended on brings back that task alone."""
    team.create(spec("base"))
    team.propose("w1", spec("extra", "base"))
    team.decide("extra", approve=False, feedback="not now")
    team.cancel("base")
    retried, count = team.run(team.board.retry_tasks(["base"], False))
    assert ([t.id for t in retried], count) == (["base"], 1)
    assert team.state("extra") is TaskState.CANCELED


def test_only_the_leads_decision_makes_a_proposal_claimable_a_retry_does_not(team):
    """A proposal canceled before the Lead decided it (with its dependency, or by the Lead)
    comes back PROPOSED when it is retried, still waiting for a decision; one the Lead
    approved comes back PENDING, and so does one it rejected and now retries by name."""
    team.create(spec("x"))
    team.propose("w1", spec("q", "x"))
    team.propose("w1", spec("ok", "x"))
    team.decide("ok")
    team.propose("w2", spec("lone"))
    team.cancel("x", "lone")
    assert {t: team.state(t) for t in ("q", "ok", "lone")} == dict.fromkeys(("q", "ok", "lone"), TaskState.CANCELED)
    team.restart()  # what is undecided is stored
    retried, count = team.run(team.board.retry_tasks(["x", "lone"], False))
    assert [(t.id, t.state) for t in retried] == [
        ("x", TaskState.PENDING),
        ("lone", TaskState.PROPOSED),
        ("q", TaskState.PROPOSED),
        ("ok", TaskState.PENDING),
    ]
    grant = team.claim("w1")
    assert grant.task.id == "x"
    team.complete("w1", "x", grant.token)
    assert team.claim("w2").task.id == "ok"
    assert team.claim("w2") is None, "q and lone wait for the Lead"
    assert [t.id for t in team.decide("q", "lone")] == ["q", "lone"]
    assert {team.claim("w1").task.id, team.claim("w2").task.id} == {"q", "lone"}

    team.propose("w1", spec("no"))
    team.decide("no", approve=False, feedback="not now")
    retried, _ = team.run(team.board.retry_tasks(["no"], False))
    assert [(t.id, t.state) for t in retried] == [("no", TaskState.PENDING)], "the Lead takes its rejection back"


def test_a_board_from_before_undecided_proposals_were_stored_keeps_its_waiting_ones_waiting(team):
    """A board whose schema predates the column: its PROPOSED tasks are undecided after the
    migration, so a retry after their dependency was canceled brings them back PROPOSED."""
    from corrald.store.postgres import schema as pg_schema
    from corrald.store.sqlite import schema as lite_schema

    team.create(spec("x"))
    team.propose("w1", spec("q", "x"))
    on_sqlite = isinstance(team.path, pathlib.Path)
    older = (lite_schema if on_sqlite else pg_schema).SCHEMA_VERSION - 1
    to_older = (
        ["ALTER TABLE tasks DROP COLUMN undecided", f"PRAGMA user_version = {older}"]
        if on_sqlite
        else ["ALTER TABLE tasks DROP COLUMN undecided", f"UPDATE schema_version SET version = {older}"]
    )
    team.call(lambda tx: [tx.conn.execute(statement) for statement in to_older])
    team.restart()
    team.cancel("x")
    retried, _ = team.run(team.board.retry_tasks(["x"], False))
    assert [(t.id, t.state) for t in retried] == [("x", TaskState.PENDING), ("q", TaskState.PROPOSED)]
