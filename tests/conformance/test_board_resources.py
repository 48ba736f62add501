"""Path leases on a real board with a fake clock: no two tasks with overlapping resources
(one of them exclusive) are ever IN_PROGRESS at once, whatever ends a claim; a freed
resource wakes its waiters; a task passed over for a resource keeps its place."""

from __future__ import annotations

import json
import random
import threading

import pytest

from corrald import errors, validate
from corrald.config import Limits
from corrald.leasepaths import overlap
from corrald.model import Completion, ResourceWait, TaskState
from corrald.store import tasks
from corrald.stream import StreamState
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(60)

LEASE = 10_000


@pytest.fixture
def team(board):
    for name in ("w1", "w2", "w3", "w4"):
        board.add(name)
    return board


def _freeing(team, end) -> dict[str, int]:
    """Runs `end(tx)` in one writer job; returns the roles it woke for ready tasks."""

    def job(tx):
        end(tx)
        return dict(tx.wakes.ready_roles)

    return team.call(job)


def _held(team) -> list[tuple]:
    return sorted(team.rows("SELECT path, task_seq, exclusive FROM held_resources"))


def test_a_claim_passes_over_a_conflicting_task_and_takes_the_next(team):
    team.create(
        spec("api", resources=["repo:web/src/api"], lease_ms=LEASE),
        spec("src", resources=["repo:web/src"], lease_ms=LEASE),
        spec("srcx", resources=["repo:web/srcx"], lease_ms=LEASE),
        spec("src-docs", shared_resources=["repo:web/src/docs"], lease_ms=LEASE),
        spec("docs", shared_resources=["repo:web/docs"], lease_ms=LEASE),
    )
    first = team.claim("w1")
    assert first.task.id == "api" and first.task.resources == ("repo:web/src/api",)
    second = team.claim("w2")
    assert second.task.id == "srcx", "repo:web/src waits for repo:web/src/api; repo:web/srcx overlaps neither"
    third = team.claim("w3")
    assert third.task.id == "docs", "repo:web/src/docs waits behind repo:web/src, which waits for its holder"
    assert team.claim("w4") is None
    assert team.state("src") is TaskState.PENDING and team.state("src-docs") is TaskState.PENDING
    assert _held(team) == sorted(
        [
            ("repo:web/docs", third.task.seq, 0),
            ("repo:web/src/api", first.task.seq, 1),
            ("repo:web/srcx", second.task.seq, 1),
        ]
    )


def test_shared_resources_never_conflict_with_each_other(team):
    team.create(
        spec("a", shared_resources=["db:staging"]),
        spec("b", shared_resources=["db:staging/users"]),
        spec("c", shared_resources=["db"]),
        spec("x", resources=["db:staging/users/1"]),
    )
    assert [team.claim(name).task.id for name in ("w1", "w2", "w3")] == ["a", "b", "c"]
    assert team.claim("w4") is None, "the exclusive one overlaps shared ones held"


def test_a_pending_task_says_which_resource_and_which_holder_it_waits_for(team):
    team.create(spec("holder", resources=["repo:web/src"]), spec("waiter", shared_resources=["repo:web/src/api", "x"]))
    team.claim("w1")
    _, _, waiting = team.run(team.board.task_history("waiter"))
    assert waiting is not None
    assert waiting.resources == (ResourceWait("repo:web/src/api", "holder", "repo:web/src", True),)


@pytest.mark.parametrize("how", ["complete", "fail", "final_fail", "release", "expire", "revoke", "cancel", "remove"])
def test_whatever_ends_a_claim_frees_its_resources_and_wakes_the_waiting(team, clock, how):
    """The holder needs a role only w1 has, so a holder back in PENDING is not w2's to take."""
    attempts = 1 if how == "final_fail" else 3
    team.run(team.board.remove_teammate("w1"))
    team.add("b1", roles=("builder",))
    team.create(
        spec("holder", resources=["repo:web"], lease_ms=LEASE, max_attempts=attempts, required_role="builder"),
        spec("waiter", shared_resources=["repo:web/src/api"], lease_ms=LEASE),
    )
    held = team.claim("b1")
    assert held.task.id == "holder"
    assert team.claim("w2") is None
    token = held.token
    ends = {
        "complete": lambda tx: tasks.complete(tx, Completion("b1", "holder", token, b"ok")),
        "fail": lambda tx: tasks.fail(tx, "b1", "holder", token, "flaky", True),
        "final_fail": lambda tx: tasks.fail(tx, "b1", "holder", token, "broken", False),
        "release": lambda tx: tasks.release(tx, "b1", "holder", token),
        "revoke": lambda tx: tasks.revoke(tx, "holder", "reassigned"),
        "cancel": lambda tx: tasks.cancel(tx, ["holder"]),
    }
    if how == "expire":
        clock.advance(LEASE)
        woke = _freeing(team, tasks.reclaim_expired)
    elif how == "remove":
        team.run(team.board.remove_teammate("b1"))
        woke = None
    else:
        woke = _freeing(team, ends[how])
    if woke is not None:
        assert woke.get("", 0) >= 1, "a stream of the waiting task's role is woken for the freed resource"
    assert _held(team) == []
    taken = team.claim("w2")
    assert taken is not None and taken.task.id == "waiter"


def test_a_completion_hands_the_freed_resource_to_a_waiting_stream_in_its_own_job(team):
    team.create(spec("holder", resources=["repo:web"], priority=1), spec("waiter", shared_resources=["repo:web/src"]))
    held = team.claim("w1")
    parked = StreamState("w2", ())
    assert team.next_for("w2", parked) == []  # w2 waits: its one ready task is held back

    from corrald import delivery

    def job(tx):
        done = tasks.complete_claim(tx, Completion("w1", "holder", held.token, b""), status_after=False)
        delivery.serve_waiters(tx, [parked.view()])
        return done, dict(tx.wakes.handed)

    _, handed = team.call(job)
    assert [claim.grant.task.id for claim in handed["w2"]] == ["waiter"]


def test_a_task_passed_over_keeps_its_place_against_a_stream_of_shared_tasks(team, board):
    """20 teammates, a stream of shared tasks on repo:web/src/*, one exclusive repo:web task:
    it is claimed once the shared tasks IN_PROGRESS when it was created have finished, and
    no shared task created after it starts before it."""
    names = [f"t{i}" for i in range(20)]
    for name in names:
        board.add(name)
    made = 0

    def shared() -> str:
        nonlocal made
        made += 1
        team.create(spec(f"s{made}", shared_resources=[f"repo:web/src/f{made % 7}"], lease_ms=LEASE))
        return f"s{made}"

    holding: dict[str, tuple[str, str]] = {}  # teammate -> (task, token)
    for name in names:
        shared()
        grant = team.claim(name)
        holding[name] = (grant.task.id, grant.token)
    team.create(spec("merge", resources=["repo:web"], lease_ms=LEASE))
    (merge_seq,) = team.rows("SELECT seq FROM tasks WHERE id = 'merge'")[0]
    in_progress_then = len(holding)
    completions_after = 0
    claimed_merge = False
    rng = random.Random(7)
    while not claimed_merge:
        name = rng.choice(sorted(holding))
        task_id, token = holding.pop(name)
        team.complete(name, task_id, token)
        completions_after += 1
        shared()
        shared()  # the stream outpaces the team: two new for each done
        for idle in [n for n in names if n not in holding]:
            grant = team.claim(idle)
            if grant is None:
                continue
            (seq,) = team.rows("SELECT seq FROM tasks WHERE id = ?", (grant.task.id,))[0]
            assert seq < merge_seq or grant.task.id == "merge", f"{grant.task.id} started ahead of the merge"
            holding[idle] = (grant.task.id, grant.token)
            if grant.task.id == "merge":
                claimed_merge = True
                break
        assert completions_after <= in_progress_then, "claimed within the bound: the holders when it was created"
    assert completions_after == in_progress_then  # every holder had to finish first (none could be skipped)


def test_a_restart_rebuilds_what_is_held_from_the_tasks_in_progress(team):
    team.create(spec("a", resources=["repo:web"], lease_ms=LEASE), spec("b", shared_resources=["repo:web/x"]))
    grant = team.claim("w1")
    before = _held(team)
    team.rows("DELETE FROM held_resources")  # lost, as if written by an older corrald
    team.restart()
    assert _held(team) == before
    assert team.claim("w2") is None, "still held after the restart"
    team.complete("w1", "a", grant.token)
    assert team.claim("w2").task.id == "b"


def test_a_task_without_resources_is_taken_first_and_holds_nothing(team):
    """A first ready task without resources is the pick, ahead of one with them, and holds nothing."""
    team.create(spec("plain"), spec("leased", resources=["repo:web"]))
    grant = team.claim("w1")
    assert grant.task.id == "plain" and grant.task.resources == ()
    assert _held(team) == []


@pytest.mark.sqlite_only  # counts statements through SQLite's trace callback
def test_a_claim_and_its_end_run_no_statement_of_held_resources_for_a_task_without_any(team):
    """A board without resources pays nothing for path leases: neither the claim nor the
    claim's end of a task without resources touches `held_resources`; one with them does."""
    team.create(spec("plain"), spec("leased", resources=["repo:web"]))
    with team.traced_statements() as statements:
        plain = team.claim("w1")
        team.complete("w1", "plain", plain.token)
        of_plain = [s for s in statements if "held_resources" in s]
        statements.clear()
        leased = team.claim("w1")
        team.complete("w1", "leased", leased.token)
    assert (plain.task.id, leased.task.id) == ("plain", "leased")
    assert of_plain == []
    of_leased = [s.split()[0] for s in statements if "held_resources" in s]
    assert "INSERT" in of_leased and "DELETE" in of_leased, statements
    assert _held(team) == []


def test_resources_are_part_of_the_spec(team):
    team.create(spec("t", resources=["a/b"], shared_resources=["c"]))
    record = team.task("t")
    assert (record.resources, record.shared_resources) == (("a/b",), ("c",))
    team.create(spec("t", resources=["a/b"], shared_resources=["c"]))  # the same spec again
    with pytest.raises(errors.AlreadyExists):
        team.create(spec("t", resources=["a/b"]))
    with pytest.raises(errors.AlreadyExists):
        team.create(spec("t"))


@pytest.mark.parametrize(
    ("resources", "shared", "field", "why"),
    [
        ([f"r{i}" for i in range(17)], [], "tasks[0].resources", "more than 16"),
        ([], ["x" * 201], "tasks[0].shared_resources[0]", "longer than 200"),
        (["a//b"], [], "tasks[0].resources[0]", "segment ''"),
        (["/a"], [], "tasks[0].resources[0]", "segment ''"),
        (["a/"], [], "tasks[0].resources[0]", "segment ''"),
        (["a/../b"], [], "tasks[0].resources[0]", "segment '..'"),
        (["a/./b"], [], "tasks[0].resources[0]", "segment '.'"),
        (["a b"], [], "tasks[0].resources[0]", "whitespace"),
        (["a\tb"], [], "tasks[0].resources[0]", "whitespace"),
        (["a\x07"], [], "tasks[0].resources[0]", "control"),
        ([""], [], "tasks[0].resources[0]", "empty"),
        (["repo:web"], ["repo:web"], "tasks[0].shared_resources[0]", "the same as tasks[0].resources[0]"),
        (["repo:web", "repo:web/src"], [], "tasks[0].resources[1]", "overlaps tasks[0].resources[0]"),
        ([], ["a", "a"], "tasks[0].shared_resources[1]", "the same as"),
    ],
)
def test_bad_resources_are_refused_naming_the_field_and_nothing_is_written(team, resources, shared, field, why):
    before = team.snapshot()
    with pytest.raises(errors.InvalidArgument) as refused:
        team.create(spec("bad", resources=resources, shared_resources=shared))
    assert refused.value.field == field
    assert why in str(refused.value)
    assert team.snapshot() == before


def test_a_resource_may_carry_a_scheme_and_be_200_characters():
    longest = "repo:web/" + "a" * 191
    checked = validate.normalize_spec(0, spec("t", resources=[longest], shared_resources=["db:x"]), Limits(), 0)
    assert (tuple(checked.resources), tuple(checked.shared_resources)) == ((longest,), ("db:x",))
    with pytest.raises(errors.InvalidArgument):
        validate.normalize_spec(0, spec("t", resources=[longest + "a"]), Limits(), 0)


def test_no_conflicting_tasks_are_ever_in_progress_at_once_under_20_teammates(board):
    """300 tasks on a tree of paths, exclusive and shared at several depths, 20 teammates
    (threads) claiming and completing at once: the event history never shows two
    overlapping tasks, one of them exclusive, IN_PROGRESS together; each completes once."""
    rng = random.Random(11)
    tree = ["repo:web"] + [f"repo:web/{a}" for a in "abc"] + [f"repo:web/{a}/{b}" for a in "abc" for b in "xyz"]
    tree += [f"repo:web/{a}/{b}/f{n}" for a in "abc" for b in "xyz" for n in range(3)] + ["db:staging"]
    specs = []
    for i in range(300):
        path = rng.choice(tree)
        if rng.random() < 0.4:
            specs.append(spec(f"j{i}", resources=[path], lease_ms=60_000))
        else:
            specs.append(spec(f"j{i}", shared_resources=[path], lease_ms=60_000))
    board.create(*specs)
    names = [f"m{i}" for i in range(20)]
    for name in names:
        board.add(name)
    failures: list[BaseException] = []
    progress = threading.Condition()
    completed = [0]

    def work(name: str) -> None:
        try:
            while completed[0] < len(specs):
                with progress:
                    seen = completed[0]
                grant = board.claim(name)
                if grant is None:  # what is left is held: the next completion may free some
                    with progress:
                        progress.wait_for(lambda s=seen: completed[0] != s, timeout=5)
                    continue
                board.call(lambda tx, g=grant: tasks.complete(tx, Completion(name, g.task.id, g.token, b"")))
                with progress:
                    completed[0] += 1
                    progress.notify_all()
        except BaseException as failure:  # noqa: BLE001 (reported by the test's thread)
            failures.append(failure)
            with progress:
                completed[0] = len(specs)  # the others stop too
                progress.notify_all()

    threads = [threading.Thread(target=work, args=(name,)) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=50)
    assert not failures, failures
    assert not any(thread.is_alive() for thread in threads)
    resources = {s.id: [(p, True) for p in s.resources] + [(p, False) for p in s.shared_resources] for s in specs}
    running: dict[str, list] = {}
    starts = together = 0
    for (data,) in board.rows("SELECT data FROM events WHERE kind = 'task_changed' ORDER BY seq"):
        event = json.loads(data)
        task_id, state = event["id"], event["state"]
        if state == int(TaskState.IN_PROGRESS):
            for other, held in running.items():
                for path, exclusive in resources[task_id]:
                    for other_path, other_exclusive in held:
                        conflict = overlap(path, other_path) and (exclusive or other_exclusive)
                        assert not conflict, f"{task_id} ({path}) started while {other} held {other_path}"
            together += bool(running)
            running[task_id] = resources[task_id]
            starts += 1
        else:
            running.pop(task_id, None)
    assert starts == 300, "each task was claimed once"
    assert together > 0, "no task ever started beside another: the check above saw no concurrency"
    ends = board.rows("SELECT count(*), count(DISTINCT task_seq) FROM claims WHERE outcome = 'completed'")
    assert ends == [(300, 300)]
    assert board.rows("SELECT count(*) FROM held_resources") == [(0,)]
