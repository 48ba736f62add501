"""Discovered work on both stores: a teammate proposes tasks (PROPOSED for the Lead, PENDING
where allowed, refused where denied), splits the task it holds on them, and the Lead
approves, rejects and adds dependencies. Tries to break it with dead claims, bad input,
cycles, rejections and restarts."""

from __future__ import annotations

import pytest

from corrald import errors
from corrald.model import ClaimOutcome, TaskCreation, TaskState
from corrald.store import boardclock
from corrald.store.proposals import PROPOSALS_WAITING_MAX
from tests.support.boardkit import spec

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
    team.call(lambda tx: boardclock.note_clock(tx.conn, tx.now_ms))
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


def test_a_board_from_before_undecided_proposals_were_stored_keeps_its_waiting_ones_waiting(team, store):
    """A board whose schema predates the column: its PROPOSED tasks are undecided after the
    migration, so a retry after their dependency was canceled brings them back PROPOSED."""
    from corrald.store.postgres import schema as pg_schema
    from corrald.store.sqlite import schema as lite_schema

    team.create(spec("x"))
    team.propose("w1", spec("q", "x"))
    on_sqlite = store == "sqlite"
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
