"""Time gates on a real board with a fake clock: `not_before`, and the backoff
before a retry after a retryable failure or an expired lease (issue: delays
and retry backoff)."""

from __future__ import annotations

import pytest

from corrald import errors
from corrald.config import Limits
from corrald.model import TaskState
from corrald.store import tasks
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)

LEASE = 10_000
SECOND = 1000


@pytest.fixture
def team(board):
    board.add("w1")
    board.add("w2")
    return board


def _gate(team, task_id: str) -> tuple[int, int, int | None]:
    """(gate_shut, unmet_deps, ready_ms) as stored."""
    (row,) = team.rows("SELECT gate_shut, unmet_deps, ready_ms FROM tasks WHERE id = ?", (task_id,))
    return row


# ---------------------------------------------------------------- not_before


def test_a_delayed_task_is_claimed_at_its_time_and_not_a_millisecond_before(team, clock):
    at = clock.now_ms() + 5 * SECOND
    (created,) = team.create(spec("later", not_before_ms=at))
    assert created.state is TaskState.PENDING and created.ready_ms == at and created.not_before_ms == at
    assert team.claim("w1") is None
    clock.set(at - 1)
    assert team.claim("w1") is None
    clock.set(at)
    grant = team.claim("w1")
    assert grant is not None and grant.task.id == "later" and grant.task.ready_ms == at
    assert _gate(team, "later") == (0, 0, at)


def test_the_reaper_opens_the_gate_at_its_time_and_reports_it_as_a_deadline(team, clock):
    at = clock.now_ms() + 5 * SECOND
    team.create(spec("later", not_before_ms=at))
    assert team.reap() == at  # the timer is armed for the gate, not a poll
    clock.set(at - 1)
    team.reap()
    assert _gate(team, "later")[0] == 1
    clock.set(at)
    assert team.reap() is None
    assert _gate(team, "later") == (0, 0, at)
    assert team.claim("w1").task.id == "later"


def test_a_past_not_before_gates_nothing(team, clock):
    (created,) = team.create(spec("now", not_before_ms=clock.now_ms() - 1))
    assert _gate(team, "now")[0] == 0
    assert team.claim("w1").task.id == created.id


def test_time_and_dependencies_both_hold_a_task(team, clock):
    at = clock.now_ms() + 5 * SECOND
    team.create(spec("dep"), spec("both", "dep", not_before_ms=at))
    dep = team.claim("w1")
    assert dep.task.id == "dep"
    team.complete("w1", "dep", dep.token)
    assert team.claim("w2") is None, "its dependency is done, its time has not come"
    clock.set(at)
    assert team.claim("w2").task.id == "both"


def test_the_gate_opens_before_the_dependency_completes(team, clock):
    at = clock.now_ms() + SECOND
    team.create(spec("dep"), spec("both", "dep", not_before_ms=at))
    dep = team.claim("w1")
    clock.set(at)
    team.reap()
    assert _gate(team, "both") == (0, 1, at)  # the time has come; the dependency has not
    assert team.claim("w2") is None
    team.complete("w1", "dep", dep.token)
    assert team.claim("w2").task.id == "both"


def test_a_delayed_task_canceled_while_it_waits_stays_canceled(team, clock):
    at = clock.now_ms() + SECOND
    team.create(spec("later", not_before_ms=at))
    team.cancel("later")
    clock.set(at)
    team.reap()
    assert team.state("later") is TaskState.CANCELED
    assert team.claim("w1") is None


@pytest.mark.sqlite_only  # reads SQLite's query plan
def test_many_delayed_tasks_leave_the_claim_query_on_its_index(team, clock):
    at = clock.now_ms() + 60 * SECOND
    team.create(*(spec(f"d{i}", not_before_ms=at) for i in range(200)), spec("ready", priority=-1))
    plan = team.rows(
        "EXPLAIN QUERY PLAN SELECT seq FROM tasks WHERE state = 1 AND unmet_deps = 0 AND required_role IN ('')"
        " ORDER BY priority DESC, seq LIMIT 1"
    )
    assert any("tasks_ready" in str(row) for row in plan), plan
    assert team.claim("w1").task.id == "ready"  # the 200 waiting ones rank higher and are passed over


def test_the_gate_survives_a_restart(team, clock):
    at = clock.now_ms() + 5 * SECOND
    team.create(spec("later", not_before_ms=at))
    team.restart()
    assert team.claim("w1") is None
    clock.set(at)
    assert team.claim("w1").task.id == "later"


# ---------------------------------------------------------------- backoff


def test_a_retryable_failure_waits_its_backoff_doubling_to_the_cap(team, clock):
    team.create(spec("flaky", max_attempts=10, retry_backoff_ms=SECOND, retry_backoff_max_ms=5 * SECOND))
    waits = []
    for _ in range(5):
        grant = None
        while grant is None:  # the gate opens at its instant: find it by stepping to it
            gate = team.task("flaky").ready_ms
            if gate is not None and gate > clock.now_ms():
                assert team.claim("w1") is None
                clock.set(gate - 1)
                assert team.claim("w1") is None
                clock.set(gate)
            grant = team.claim("w1")
        failed_at = clock.now_ms()
        task = team.fail("w1", "flaky", grant.token, retryable=True)
        assert task.state is TaskState.PENDING and task.ready_ms is not None
        waits.append(task.ready_ms - failed_at)
    full = [1000, 2000, 4000, 5000, 5000]
    for wait, cap in zip(waits, full, strict=True):
        assert cap * (1 - tasks.RETRY_JITTER) <= wait <= cap, waits


def test_an_expired_lease_waits_the_backoff_too(team, clock):
    team.create(spec("slow", lease_ms=LEASE, retry_backoff_ms=2 * SECOND))
    grant = team.claim("w1")
    clock.set(grant.lease_expire_ms)
    team.reap()
    task = team.task("slow")
    assert task.state is TaskState.PENDING
    assert grant.lease_expire_ms + 1600 <= task.ready_ms <= grant.lease_expire_ms + 2000
    assert team.claim("w2") is None
    clock.set(task.ready_ms)
    assert team.claim("w2").attempt == 2


def test_zero_backoff_retries_at_once_and_release_never_waits(team, clock):
    team.create(spec("eager", retry_backoff_ms=0), spec("given-back", retry_backoff_ms=SECOND))
    eager = team.claim("w1")
    team.fail("w1", "eager", eager.token, retryable=True)
    assert team.task("eager").ready_ms is None
    again = team.claim("w2")
    assert again.task.id == "eager" and again.attempt == 2
    back = team.claim("w1")
    team.release("w1", "given-back", back.token)
    assert team.task("given-back").ready_ms is None and team.claim("w1").task.id == "given-back"


def test_the_default_backoff_is_one_second_capped_at_a_hundred(make_board, clock):
    board = make_board()
    (task,) = board.create(spec("t", retry_backoff_ms=None))
    limits = Limits()
    assert task.retry_backoff_ms == limits.retry_backoff_default_ms == SECOND
    assert task.retry_backoff_max_ms == 100 * SECOND


def test_a_final_failure_has_no_gate(team, clock):
    team.create(spec("once", max_attempts=1, retry_backoff_ms=SECOND))
    grant = team.claim("w1")
    assert team.fail("w1", "once", grant.token, retryable=True).state is TaskState.FAILED
    assert _gate(team, "once")[0] == 0


def test_retry_waits_never_exceed_the_cap_for_any_failure_count():
    for failures in (1, 2, 10, 63, 64, 1000):
        for draw in (0.0, 0.5, 0.999):
            wait = tasks.retry_wait_ms(failures, 1000, 100_000, draw)
            assert 1 <= wait <= 100_000
    assert tasks.retry_wait_ms(1, 1000, 100_000, 0.0) == 1000
    assert tasks.retry_wait_ms(3, 1000, 100_000, 0.0) == 4000
    assert tasks.retry_wait_ms(5, 0, 0, 0.5) == 0


# ---------------------------------------------------------------- refused, nothing written


@pytest.mark.parametrize(
    ("changes", "field", "words"),
    [
        ({"not_before_ms": 366 * 24 * 3600 * 1000}, "tasks[0].not_before_time", "year"),
        ({"retry_backoff_ms": -1}, "tasks[0].retry_backoff", "outside"),
        ({"retry_backoff_ms": 3600 * 1000 + 1}, "tasks[0].retry_backoff", "outside"),
        ({"retry_backoff_ms": 2000, "retry_backoff_max_ms": 1000}, "tasks[0].retry_backoff_max", "outside"),
        ({"retry_backoff_max_ms": 100 * 3600 * 1000 + 1}, "tasks[0].retry_backoff_max", "outside"),
    ],
)
def test_out_of_range_gates_are_refused_and_nothing_is_written(team, clock, changes, field, words):
    if "not_before_ms" in changes:
        changes = {"not_before_ms": clock.now_ms() + changes["not_before_ms"]}
    with pytest.raises(errors.InvalidArgument) as refused:
        team.create(spec("bad", **changes))
    assert refused.value.field == field and words in str(refused.value)
    assert team.scalar("SELECT count(*) FROM tasks") == 0


def test_a_spec_sent_again_is_the_same_task_and_a_changed_gate_is_not(team, clock):
    at = clock.now_ms() + SECOND
    team.create(spec("t", not_before_ms=at, retry_backoff_ms=None))
    team.create(spec("t", not_before_ms=at, retry_backoff_ms=None))  # unchanged: accepted
    with pytest.raises(errors.AlreadyExists):
        team.create(spec("t", not_before_ms=at + 1, retry_backoff_ms=None))
