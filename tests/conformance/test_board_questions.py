"""Questions to the Lead, on both stores: a holder's question ends its claim and leaves the
task NEEDS_INPUT, which nothing claims until the Lead's answer; the next claims carry every
answer. Tries to break it with stale claims, bad input, cancels and many teammates at once."""

from __future__ import annotations

import random
import threading

import pytest

from corrald import errors
from corrald.model import ClaimOutcome, Completion, TaskState
from corrald.store import boardclock, tasks
from corrald.store.tasks import QUESTIONS_PER_TASK_MAX
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(60)

LEASE = 10_000


@pytest.fixture
def team(board):
    board.add("w1")
    board.add("w2")
    return board


def _history(board, task_id: str):
    return board.run(board.board.task_history(task_id))[1]


def test_a_question_ends_the_claim_and_the_task_waits_for_the_lead(team):
    team.create(spec("a"), spec("b", "a"))
    grant = team.claim("w1")
    asked = team.ask("w1", "a", grant.token, "which corpus?")
    assert (asked.state, asked.question, asked.owner) == (TaskState.NEEDS_INPUT, "which corpus?", "")
    assert asked.attempts_used == 0, "a question uses no attempt"
    (attempt,) = _history(team, "a")
    assert attempt.outcome is ClaimOutcome.ASKED
    # Nobody gets it, nor its dependent, while it waits; the asker's slot is free again.
    assert team.claim("w1") is None and team.claim("w2") is None
    (event,) = team.events("question_asked")
    assert '"which corpus?"' in event[2] and '"w1"' in event[2]


def test_the_answer_puts_it_back_and_every_later_claim_carries_every_answer(team):
    team.create(spec("a"))
    first = team.claim("w1")
    team.ask("w1", "a", first.token, "which corpus?")
    answered = team.answer("a", "the 2024 one")
    assert (answered.state, answered.question) == (TaskState.PENDING, "")
    second = team.claim("w2")
    assert second is not None and second.task.id == "a"
    assert [(qa.question, qa.answer, qa.asked_by) for qa in second.answers] == [("which corpus?", "the 2024 one", "w1")]
    assert second.previous_attempt is not None and second.previous_attempt.outcome is ClaimOutcome.ASKED
    team.ask("w2", "a", second.token, "and the format?")
    team.answer("a", "parquet")
    third = team.claim("w1")
    assert [(qa.question, qa.answer) for qa in third.answers] == [
        ("which corpus?", "the 2024 one"),
        ("and the format?", "parquet"),
    ]
    done = team.complete("w1", "a", third.token, b"ok")
    assert (done.state, done.attempts_used) == (TaskState.COMPLETED, 1)
    assert team.rows("SELECT answer FROM questions ORDER BY seq") == [("the 2024 one",), ("parquet",)]
    assert len(team.events("question_answered")) == 2


def test_a_question_from_a_claim_that_is_not_live_changes_nothing(team, clock):
    team.create(spec("exp", lease_ms=LEASE), spec("rel"), spec("rev"), spec("done"))
    grants = {grant.task.id: grant for grant in (team.claim("w1") for _ in range(4))}
    team.release("w1", "rel", grants["rel"].token)
    team.revoke("rev")
    team.complete("w1", "done", grants["done"].token)
    clock.advance(LEASE)
    # A refusal for a dead claim notes the clock the writer reached (so a restart never
    # revives that lease): noted here first, the refusals change nothing more.
    team.call(lambda tx: boardclock.note_clock(tx.conn, tx.now_ms))
    before = team.dump()
    refused = {
        "exp": errors.LeaseExpired,
        "rel": errors.ClaimTokenMismatch,
        "rev": errors.ClaimRevoked,
        "done": errors.ClaimTokenMismatch,
    }
    for task_id, error in refused.items():
        with pytest.raises(error):
            team.ask("w1", task_id, grants[task_id].token)
    with pytest.raises(errors.ClaimTokenMismatch):  # another teammate's token
        team.ask("w2", "exp", grants["exp"].token)
    assert team.dump() == before


@pytest.mark.parametrize(
    ("question", "field"),
    [("", "question"), ("   ", "question"), ("x" * (64 * 1024 + 1), "question")],
)
def test_a_bad_question_is_refused_naming_the_field_and_nothing_is_written(team, question, field):
    team.create(spec("a"))
    grant = team.claim("w1")
    before = team.dump()
    with pytest.raises(errors.InvalidArgument) as refused:
        team.ask("w1", "a", grant.token, question)
    assert refused.value.field == field
    assert team.dump() == before


def test_an_answer_the_task_cannot_take_is_refused_and_nothing_is_written(team):
    team.create(spec("pending"), spec("held"))
    team.claim("w1")
    before = team.dump()
    for task_id in ("pending", "held"):
        with pytest.raises(errors.FailedPrecondition):
            team.answer(task_id, "an answer nobody asked for")
    with pytest.raises(errors.TaskNotFound):
        team.answer("nope", "x")
    with pytest.raises(errors.InvalidArgument) as refused:
        team.answer("pending", "x" * (64 * 1024 + 1))
    assert refused.value.field == "answer"
    with pytest.raises(errors.InvalidArgument):
        team.answer("", "x")
    assert team.dump() == before


def test_a_task_asks_at_most_twenty_questions(team):
    team.create(spec("a"))
    for _ in range(QUESTIONS_PER_TASK_MAX):
        grant = team.claim("w1")
        team.ask("w1", "a", grant.token)
        team.answer("a")
    grant = team.claim("w1")
    assert len(grant.answers) == QUESTIONS_PER_TASK_MAX
    before = team.dump()
    with pytest.raises(errors.FailedPrecondition):
        team.ask("w1", "a", grant.token)
    assert team.dump() == before
    assert team.complete("w1", "a", grant.token).state is TaskState.COMPLETED


def test_a_cancel_or_a_failed_dependency_still_ends_a_waiting_task(team):
    team.create(spec("a"), spec("b", "a"), spec("root", max_attempts=1), spec("leaf", "root"))
    grants = {grant.task.id: grant for grant in (team.claim("w1"), team.claim("w1"))}
    team.ask("w1", "a", grants["a"].token)
    team.cancel("a")
    assert (team.state("a"), team.task("a").question, team.state("b")) == (
        TaskState.CANCELED,
        "",
        TaskState.CANCELED,
    )
    leaf = team.claim("w2")
    assert leaf is None, "leaf waits for root"
    team.fail("w1", "root", grants["root"].token, "broken", retryable=False)
    assert team.state("leaf") is TaskState.CANCELED


def test_a_waiting_task_and_its_answers_survive_a_restart(team):
    team.create(spec("a"), spec("b"))
    team.ask("w1", "a", team.claim("w1").token, "which corpus?")
    team.restart()
    assert team.task("a").question == "which corpus?"
    assert team.claim("w2").task.id == "b", "still not claimable after the restart"
    team.answer("a", "the 2024 one")
    assert [qa.answer for qa in team.claim("w2").answers] == ["the 2024 one"]


THREADS = 16
TASKS = 60


def _completed(board) -> int:
    return board.scalar("SELECT count(*) FROM tasks WHERE state = 3")


@pytest.mark.timeout(90)
def test_many_teammates_ask_and_a_lead_answers_and_every_task_completes_once(board):
    """Teammates claim, ask on a task's first claim, and complete it once answered; a lead
    thread answers whatever waits (each call a writer job, as the daemon's would be). No
    task is claimed while it waits, none completes twice, and every question is answered
    before the claim that follows it."""
    board.create(*[spec(f"t{n}") for n in range(TASKS)])
    names = [f"w{n}" for n in range(THREADS)]
    for name in names:
        board.add(name)
    done = threading.Event()
    problems: list[str] = []
    completed: list[str] = []
    lock = threading.Lock()

    def teammate(name: str, seed: int) -> None:
        rng = random.Random(seed)
        try:
            while not done.is_set():
                grant = board.claim(name)
                if grant is None:
                    if _completed(board) == TASKS:
                        return
                    done.wait(0.01)  # nothing ready: the lead has answers to give
                    continue
                if grant.task.state is not TaskState.IN_PROGRESS:
                    problems.append(f"{name} got {grant.task.id} in {grant.task.state.name}")
                if any(qa.answer is None for qa in grant.answers):  # claimed while it waited
                    problems.append(f"{name} got {grant.task.id} with a question unanswered")
                task_id, token = grant.task.id, grant.token
                if not grant.answers or rng.random() < 0.2:
                    board.call(lambda tx, t=task_id, k=token: tasks.ask_question(tx, name, t, k, f"{name} on {t}?"))
                    continue
                board.call(lambda tx, t=task_id, k=token: tasks.complete(tx, Completion(name, t, k, name.encode())))
                with lock:
                    completed.append(grant.task.id)
        except Exception as error:  # noqa: BLE001 (reported below)
            problems.append(f"{name}: {error!r}")
            done.set()

    def lead() -> None:
        try:
            while not done.is_set():
                waiting = [task_id for (task_id,) in board.rows("SELECT id FROM tasks WHERE state = 6")]
                for task_id in waiting:
                    board.call(lambda tx, task_id=task_id: tasks.answer_question(tx, task_id, "go on"))
                if not waiting and _completed(board) == TASKS:
                    return
                done.wait(0.005)
        except Exception as error:  # noqa: BLE001
            problems.append(f"lead: {error!r}")
            done.set()

    threads = [threading.Thread(target=teammate, args=(name, n)) for n, name in enumerate(names)]
    threads.append(threading.Thread(target=lead))
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(80)
    done.set()
    assert not problems, problems[:5]
    assert sorted(completed) == sorted(f"t{n}" for n in range(TASKS)), "each task completed exactly once"
    # Every asked claim's question was answered before the task's next claim began.
    rows = board.rows(
        "SELECT q.task_seq, q.fence, q.answer_ms, (SELECT min(c.fence) FROM claims AS c"
        " WHERE c.task_seq = q.task_seq AND c.fence > q.fence) FROM questions AS q"
    )
    assert rows and all(answer_ms is not None and next_fence is not None for _, _, answer_ms, next_fence in rows)
    asked = board.scalar("SELECT count(*) FROM claims WHERE outcome = 'asked'")
    assert asked == len(rows)
    assert board.scalar("SELECT max(failures) FROM tasks") == 0, "questions use no attempt"
