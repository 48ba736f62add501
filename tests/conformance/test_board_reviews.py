"""Review and rework, on both stores: a task with a review is never COMPLETED, nor any of
its dependents claimable, before an approval; at most one live review's claim per task;
the author of a round never gets its review; a verdict from a dead claim changes nothing;
rounds and attempts match the history after expiries, releases, revokes and restarts.
Tried with stale claims, bad input and many teammates at once."""

from __future__ import annotations

import random
import threading

import pytest

from corrald import errors
from corrald.model import ClaimOutcome, Completion, ReviewPolicy, TaskState, Verdict
from corrald.store import tasks
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(60)

LEASE = 10_000
APPROVE, REJECT = Verdict(True, "good"), Verdict(False, "too short")


def _reviewed(task_id: str, *deps: str, role: str = "rev", rounds: int = 0, **fields):
    return spec(task_id, *deps, review=ReviewPolicy(role, rounds), **fields)


@pytest.fixture
def team_(board):
    board.add("ann")
    board.add("bob")
    board.add("rita", roles=("rev",))
    board.add("ravi", roles=("rev",))
    return board


def _history(board, task_id: str):
    return board.run(board.board.task_history(task_id))[1]


def test_a_result_waits_in_review_and_its_dependents_wait_with_it(team_):
    team_.create(_reviewed("a"), spec("b", "a"))
    grant = team_.claim("ann")
    done = team_.complete("ann", "a", grant.token, b"draft")
    assert (done.state, done.result, done.attempts_used) == (TaskState.IN_REVIEW, b"draft", 1)
    assert team_.claim("bob") is None, "b waits for the approval, and bob holds no reviewer role"
    review = team_.claim("rita")
    assert review.review is not None and (review.review.result, review.review.author, review.review.round) == (
        b"draft",
        "ann",
        1,
    )
    assert review.task.state is TaskState.IN_REVIEW and review.task.id == "a"
    assert team_.claim("ravi") is None, "at most one live review's claim per task"
    approved = team_.complete("rita", "a", review.token, b"", verdict=APPROVE)
    assert (approved.state, approved.result, approved.owner) == (TaskState.COMPLETED, b"draft", "ann")
    b = team_.claim("bob")
    assert b.task.id == "b" and dict(b.dependency_results) == {"a": b"draft"}
    (decided,) = team_.events("review_decided")
    assert '"approve":true' in decided[2].replace(" ", "") and '"rita"' in decided[2]


def test_a_rejection_sends_the_result_back_for_rework_with_the_feedback(team_):
    team_.create(_reviewed("a"))
    first = team_.claim("ann")
    team_.complete("ann", "a", first.token, b"draft 1")
    review = team_.claim("rita")
    rejected = team_.complete("rita", "a", review.token, b"", verdict=REJECT)
    assert (rejected.state, rejected.review_rounds, rejected.attempts_used) == (TaskState.PENDING, 1, 0)
    rework = team_.claim("ann")
    assert rework.rejected_result == b"draft 1"
    previous = rework.previous_attempt
    assert (previous.outcome, previous.owner, previous.feedback) == (ClaimOutcome.REJECTED, "rita", "too short")
    assert rework.attempt == first.attempt, "rework uses no attempt"
    team_.complete("ann", "a", rework.token, b"draft 2")
    second = team_.claim("ravi")
    assert second.review.round == 2 and second.review.result == b"draft 2"
    assert team_.complete("ravi", "a", second.token, b"", verdict=APPROVE).result == b"draft 2"
    outcomes = [(a.owner, a.outcome) for a in _history(team_, "a")]
    assert outcomes == [
        ("ann", ClaimOutcome.COMPLETED),
        ("rita", ClaimOutcome.REJECTED),
        ("ann", ClaimOutcome.COMPLETED),
        ("ravi", ClaimOutcome.APPROVED),
    ]


def test_the_author_of_a_round_never_gets_its_review(board):
    board.add("rita", roles=("rev",))
    board.add("ravi", roles=("rev",))
    board.create(_reviewed("a"))
    grant = board.claim("rita")
    board.complete("rita", "a", grant.token)
    assert board.claim("rita") is None
    assert board.claim("ravi").review.author == "rita"


def test_the_rejection_that_reaches_max_rounds_fails_the_task_and_its_dependents(team_):
    team_.create(_reviewed("a", rounds=2), spec("b", "a"))
    for round_number in (1, 2):
        work = team_.claim("ann")
        team_.complete("ann", "a", work.token, f"draft {round_number}".encode())
        review = team_.claim("rita")
        team_.complete("rita", "a", review.token, b"", verdict=Verdict(False, f"no {round_number}"))
    failed = team_.task("a")
    assert (failed.state, failed.review_rounds, failed.error) == (TaskState.FAILED, 2, "review rejected 2 times: no 2")
    assert team_.state("b") is TaskState.CANCELED


def test_a_review_released_expired_failed_or_revoked_is_offered_again_at_no_cost(team_, clock):
    team_.create(_reviewed("a", lease_ms=LEASE))
    team_.complete("ann", "a", team_.claim("ann").token)
    review = team_.claim("rita")
    team_.release("rita", "a", review.token)
    review = team_.claim("ravi")
    team_.fail("ravi", "a", review.token, "my model is down", retryable=False)
    review = team_.claim("rita")
    team_.revoke("a")
    review = team_.claim("ravi")
    clock.advance(LEASE)
    team_.reap()
    task = team_.task("a")
    assert (task.state, task.owner, task.attempts_used, task.review_rounds) == (TaskState.IN_REVIEW, "", 1, 0)
    again = team_.claim("rita")
    assert again.review.round == 1, "no verdict was given: still the first round"
    assert team_.complete("rita", "a", again.token, b"", verdict=APPROVE).state is TaskState.COMPLETED
    ends = [a.outcome for a in _history(team_, "a")]
    assert ends == [
        ClaimOutcome.COMPLETED,
        ClaimOutcome.RELEASED,
        ClaimOutcome.FAILED,
        ClaimOutcome.REVOKED,
        ClaimOutcome.EXPIRED,
        ClaimOutcome.APPROVED,
    ]


def test_the_lead_reviews_and_may_decide_a_review_a_teammate_holds(team_):
    team_.create(_reviewed("lead-only", role=""))
    team_.complete("ann", "lead-only", team_.claim("ann").token, b"mine")
    assert team_.claim("rita") is None, "the Lead reviews it: no teammate's review"
    assert team_.review("lead-only", False, "redo it").state is TaskState.PENDING
    assert team_.task("lead-only").review_rounds == 1
    assert team_.claim("ann").rejected_result == b"mine"
    team_.create(_reviewed("held"))
    held = team_.claim("bob")
    team_.complete("bob", "held", held.token)
    review = team_.claim("rita")
    assert review is not None and review.task.id == "held"
    ended = team_.call(lambda tx: (tasks.review_task(tx, "held", Verdict(True)), tx.wakes.claims_ended)[1])
    assert [(end.task_id, end.reason.name) for end in ended["rita"]] == [("held", "REVOKED")]
    assert team_.task("held").state is TaskState.COMPLETED
    with pytest.raises(errors.ClaimRevoked):
        team_.complete("rita", "held", review.token, b"", verdict=APPROVE)
    assert [(a.owner, a.outcome) for a in _history(team_, "held")][-2:] == [
        ("rita", ClaimOutcome.REVOKED),
        ("lead", ClaimOutcome.APPROVED),
    ]


def test_a_verdict_where_none_belongs_or_none_where_one_does_is_refused_and_nothing_is_written(team_):
    team_.create(spec("plain"), _reviewed("a"))
    plain = team_.claim("bob")
    work = team_.claim("ann")
    before = team_.dump()
    with pytest.raises(errors.InvalidArgument) as refused:
        team_.complete("bob", plain.task.id, plain.token, b"", verdict=APPROVE)
    assert refused.value.field == "verdict"
    assert team_.dump() == before
    team_.complete("ann", work.task.id, work.token)
    review = team_.claim("rita")
    before = team_.dump()
    for verdict, result, field in (
        (None, b"", "verdict"),
        (Verdict(False, ""), b"", "verdict.feedback"),
        (Verdict(False, "x" * (64 * 1024 + 1)), b"", "verdict.feedback"),
        (APPROVE, b"another result", "result"),
    ):
        with pytest.raises(errors.InvalidArgument) as refused:
            team_.complete("rita", "a", review.token, result, verdict=verdict)
        assert refused.value.field == field
    with pytest.raises(errors.FailedPrecondition):
        team_.review("plain", True)
    with pytest.raises(errors.InvalidArgument) as refused:
        team_.review("a", False, "")
    assert refused.value.field == "feedback"
    assert team_.dump() == before


@pytest.mark.parametrize(
    ("policy", "field"),
    [
        (ReviewPolicy("x" * 129, 0), "tasks[0].review.reviewer_role"),
        (ReviewPolicy("has space", 0), "tasks[0].review.reviewer_role"),
        (ReviewPolicy("rev", 21), "tasks[0].review.max_rounds"),
        (ReviewPolicy("rev", -1), "tasks[0].review.max_rounds"),
    ],
)
def test_a_bad_review_policy_is_refused_naming_the_field(board, policy, field):
    before = board.dump()
    with pytest.raises(errors.InvalidArgument) as refused:
        board.create(spec("a", review=policy))
    assert refused.value.field == field
    assert board.dump() == before


def test_a_retry_with_reset_attempts_gives_a_failed_review_its_rounds_again(team_):
    team_.create(_reviewed("a", rounds=1))
    team_.complete("ann", "a", team_.claim("ann").token)
    team_.complete("rita", "a", team_.claim("rita").token, b"", verdict=REJECT)
    assert team_.task("a").state is TaskState.FAILED
    team_.run(team_.board.retry_tasks(["a"], False))
    team_.complete("ann", "a", team_.claim("ann").token)
    team_.complete("rita", "a", team_.claim("rita").token, b"", verdict=REJECT)
    assert (team_.state("a"), team_.task("a").review_rounds) == (TaskState.FAILED, 2), "kept: one rejection fails it"
    team_.run(team_.board.retry_tasks(["a"], True))
    assert team_.task("a").review_rounds == 0
    team_.complete("ann", "a", team_.claim("ann").token)
    assert team_.complete("ravi", "a", team_.claim("ravi").token, b"", verdict=APPROVE).state is TaskState.COMPLETED


def test_the_same_spec_with_another_review_is_another_task(board):
    board.create(_reviewed("a"))
    board.create(_reviewed("a"))  # the same: idempotent
    with pytest.raises(errors.AlreadyExists):
        board.create(_reviewed("a", rounds=5))
    assert board.task("a").review == ReviewPolicy("rev", 3)


def test_a_review_in_progress_and_the_rounds_survive_a_restart(team_):
    team_.create(_reviewed("a", lease_ms=LEASE))
    team_.complete("ann", "a", team_.claim("ann").token)
    review = team_.claim("rita")
    team_.complete("rita", "a", review.token, b"", verdict=REJECT)
    team_.complete("ann", "a", team_.claim("ann").token, b"v2")
    held = team_.claim("ravi")
    team_.restart()
    task = team_.task("a")
    assert (task.state, task.owner, task.review_rounds) == (TaskState.IN_REVIEW, "ravi", 1)
    assert team_.complete("ravi", "a", held.token, b"", verdict=APPROVE).state is TaskState.COMPLETED


THREADS = 12
TASKS = 40


@pytest.mark.timeout(90)
def test_many_authors_and_reviewers_at_once_keep_every_invariant(board):
    """Authors and reviewers race through reviewed tasks (half with a dependent); each
    reviewer rejects at random. Every task ends COMPLETED once, no dependent is claimed
    before its dependency's approval, no review ever has two live claims, and no author
    reviews its own round."""
    specs = []
    for n in range(TASKS):
        specs.append(_reviewed(f"t{n}", rounds=20))
        if n % 2:
            specs.append(spec(f"d{n}", f"t{n}"))
    board.create(*specs)
    names = [f"w{n}" for n in range(THREADS)]
    for n, name in enumerate(names):
        board.add(name, roles=("rev",) if n % 2 else ())
    done = threading.Event()
    problems: list[str] = []
    total = len(specs)

    def completed() -> int:
        return board.scalar("SELECT count(*) FROM tasks WHERE state = 3")

    def worker(name: str, seed: int) -> None:
        rng = random.Random(seed)
        roles = ("rev",) if int(name[1:]) % 2 else ()
        try:
            while not done.is_set():
                grant = board.call(lambda tx: tasks.claim_next(tx, name, roles))
                if grant is None:
                    if completed() == total:
                        return
                    done.wait(0.005)
                    continue
                if grant.review is not None:
                    if grant.review.author == name:
                        problems.append(f"{name} got its own review of {grant.task.id}")
                    verdict = Verdict(True) if rng.random() < 0.6 else Verdict(False, "again")
                    completion = Completion(name, grant.task.id, grant.token, b"", verdict)
                else:
                    if grant.task.depends_on and board.scalar(
                        "SELECT state FROM tasks WHERE id = ?", (grant.task.depends_on[0],)
                    ) != int(TaskState.COMPLETED):
                        problems.append(f"{grant.task.id} claimed before its dependency's approval")
                    completion = Completion(name, grant.task.id, grant.token, name.encode())
                board.call(lambda tx, c=completion: tasks.complete(tx, c))
        except Exception as error:  # noqa: BLE001 (reported below)
            problems.append(f"{name}: {error!r}")
            done.set()

    threads = [threading.Thread(target=worker, args=(name, n)) for n, name in enumerate(names)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(80)
    done.set()
    assert not problems, problems[:5]
    assert completed() == total
    # Never two live claims on a task, and each task COMPLETED through one approval.
    approvals = board.rows("SELECT task_seq, count(*) FROM claims WHERE outcome = 'approved' GROUP BY task_seq")
    assert len(approvals) == TASKS and all(count == 1 for _, count in approvals)
    rejections = board.scalar("SELECT count(*) FROM claims WHERE outcome = 'rejected'")
    assert board.scalar("SELECT sum(review_rounds) FROM tasks") == rejections
    assert board.scalar("SELECT max(failures) FROM tasks") == 0, "rework uses no attempt"
