"""Discovered work under many callers at once, on both stores: teammates propose, split
and complete while a lead decides and adds dependencies and another caller creates tasks;
AddDependencies racing to close rings; proposals racing past the limit of waiting ones; a
split racing an edge that would close its cycle. Afterwards, from the claims table and the
event log: no PROPOSED task claimed, no task claimed before its dependencies completed, no
cycle, outcomes as the callers saw them."""

from __future__ import annotations

import collections
import json
import random
import threading
import time

import pytest

from corrald import errors, validate
from corrald.model import ClaimGrant, Completion, Proposed, TaskCreation, TaskState
from corrald.store import proposals, tasks
from corrald.store.proposals import PROPOSALS_WAITING_MAX
from tests.support.boardkit import spec
from tests.support.graphs import a_cycle
from tests.support.races import race

pytestmark = pytest.mark.timeout(60)

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
def test_proposals_racing_past_the_limit_of_waiting_ones_leave_at_most_that_many(board):
    """With 900 of a teammate's proposals waiting, several of its proposals of 100 at once
    (on PostgreSQL, from several writers): one is let in, the others see it and are
    refused, and never more than 1,000 wait."""
    board.add("w1")
    for start in range(0, PROPOSALS_WAITING_MAX - 100, 100):
        _propose_job(board, "w1", [spec(f"p{i}") for i in range(start, start + 100)])
    for round_ in range(5):
        batches = [[spec(f"r{round_}.{n}.{i}") for i in range(100)] for n in range(4)]
        outcomes = race([lambda b=b: _propose_job(board, "w1", b) for b in batches], (errors.FailedPrecondition,))
        assert sum(not isinstance(o, errors.FailedPrecondition) for o in outcomes) == 1, outcomes
        assert board.scalar("SELECT count(*) FROM tasks WHERE state = 8") == PROPOSALS_WAITING_MAX
        added = next(o for o in outcomes if not isinstance(o, errors.FailedPrecondition))
        _decide_job(board, [t.id for t in added.tasks], approve=False)


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
