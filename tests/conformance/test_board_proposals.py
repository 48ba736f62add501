"""Discovered work on both stores: a teammate proposes tasks (PROPOSED for the Lead, PENDING
where allowed, refused where denied), splits the task it holds on them, and the Lead
approves, rejects and adds dependencies. Tries to break it with dead claims, bad input,
cycles, rejections and restarts."""

from __future__ import annotations

import pytest

from corrald import errors
from corrald.model import ClaimOutcome, TaskCreation, TaskState
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
    with pytest.raises(errors.FailedPrecondition):
        team.propose("w1", spec("one-more"))
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
