"""RetryTasks and `waiting_for` on a real board with a fake clock: a FAILED or
CANCELED task back to PENDING with the dependents canceled because of it, and
why a PENDING task is not being worked."""

from __future__ import annotations

import pytest

from corrald import errors
from corrald.model import TaskState, TeammateAvailability
from corrald.store import tasks
from corrald.stream import StreamState
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)

PENDING, FAILED, CANCELED = TaskState.PENDING, TaskState.FAILED, TaskState.CANCELED


@pytest.fixture
def team(board):
    board.add("w1")
    board.add("w2")
    return board


def _retry(team, *task_ids: str, reset: bool = False) -> list[str]:
    records, count = team.run(team.board.retry_tasks(list(task_ids), reset))
    assert count == len(records)
    return [record.id for record in records]


def _fail_for_good(team, task_id: str, error: str = "broken") -> None:
    grant = team.claim("w1")
    assert grant is not None and grant.task.id == task_id, grant
    team.fail("w1", task_id, grant.token, error=error, retryable=False)


def _waiting(team, task_id: str):
    _, _, waiting = team.run(team.board.task_history(task_id))
    return waiting


# ---------------------------------------------------------------- retry


def test_a_failed_task_and_the_dependents_canceled_because_of_it_come_back(team):
    team.create(spec("a"), spec("b", "a"), spec("c", "b"))
    _fail_for_good(team, "a")
    assert [team.state(t) for t in "abc"] == [FAILED, CANCELED, CANCELED]
    assert _retry(team, "a") == ["a", "b", "c"]
    for task_id, unmet in (("a", 0), ("b", 1), ("c", 1)):
        task = team.task(task_id)
        assert task.state is PENDING and task.error == "" and task.finish_ms is None and task.owner == ""
        assert team.scalar("SELECT unmet_deps FROM tasks WHERE id = ?", (task_id,)) == unmet
    again = team.claim("w2")
    assert again.task.id == "a" and again.attempt == 2  # one attempt more: its count is kept
    team.complete("w2", "a", again.token)
    assert team.claim("w2").task.id == "b"


def test_reset_attempts_starts_the_count_again(team):
    team.create(spec("a", max_attempts=2))
    for _ in range(2):
        grant = team.claim("w1")
        team.fail("w1", "a", grant.token, retryable=True)
    assert team.state("a") is FAILED
    assert _retry(team, "a", reset=True) == ["a"]
    grant = team.claim("w1")
    assert grant.attempt == 1
    team.fail("w1", "a", grant.token, retryable=True)
    assert team.state("a") is PENDING, "a reset count allows max_attempts again"


def test_without_reset_a_retried_task_has_exactly_one_attempt_more(team):
    team.create(spec("a", max_attempts=1))
    _fail_for_good(team, "a")
    _retry(team, "a")
    grant = team.claim("w1")
    team.fail("w1", "a", grant.token, retryable=True)
    assert team.state("a") is FAILED


def test_a_dependent_that_still_needs_a_failed_task_stays_canceled(team):
    team.create(spec("a"), spec("x"), spec("d", "a", "x"))
    _fail_for_good(team, "a")
    assert team.state("d") is CANCELED and team.state("x") is PENDING
    _fail_for_good(team, "x")
    assert _retry(team, "a") == ["a"], "d still needs x, which failed"
    assert team.state("d") is CANCELED
    assert _retry(team, "x") == ["x", "d"]
    assert team.scalar("SELECT unmet_deps FROM tasks WHERE id = 'd'") == 2


def test_retrying_both_causes_at_once_brings_their_dependent_back(team):
    team.create(spec("a"), spec("x"), spec("d", "a", "x"))
    _fail_for_good(team, "a")
    _fail_for_good(team, "x")
    assert _retry(team, "x", "a") == ["x", "a", "d"]


def test_a_dependent_the_lead_canceled_itself_stays_canceled(team):
    team.create(spec("a"), spec("b", "a"))
    team.cancel("b")
    _fail_for_good(team, "a")
    assert _retry(team, "a") == ["a"]
    assert team.state("b") is CANCELED
    assert _retry(team, "b") == ["b"]  # named, it comes back


def test_a_retried_task_wakes_a_waiting_stream(team):
    team.create(spec("a"))
    _fail_for_good(team, "a")
    assert team.next_for("w2", StreamState(slots=1)) == []
    _retry(team, "a")
    (grant,) = team.next_for("w2", StreamState(slots=1))
    assert grant.task.id == "a"


def test_a_retried_task_still_before_its_time_waits_for_it(team, clock):
    at = clock.now_ms() + 5000
    team.create(spec("later", not_before_ms=at))
    team.cancel("later")
    _retry(team, "later")
    assert team.claim("w1") is None
    clock.set(at)
    assert team.claim("w1").task.id == "later"


@pytest.mark.parametrize(
    ("names", "error", "words"),
    [
        (["nope"], errors.TaskNotFound, "no task 'nope'"),
        (["done", "pending"], errors.FailedPrecondition, "'pending' is PENDING"),
        (["done", "completed"], errors.FailedPrecondition, "'completed' is COMPLETED"),
        ([], errors.InvalidArgument, "ids: must not be empty"),
    ],
)
def test_a_bad_name_refuses_the_whole_call_and_writes_nothing(team, names, error, words):
    team.create(spec("done"))
    _fail_for_good(team, "done")
    team.create(spec("completed"))
    grant = team.claim("w1")
    team.complete("w1", "completed", grant.token)
    team.create(spec("pending"))
    before = team.dump()
    with pytest.raises(error, match=words):
        _retry(team, *names)
    assert team.dump() == before


@pytest.mark.parametrize("how", ["canceled by the lead", "canceled by a cascade", "failed"])
def test_a_named_task_whose_dependency_stays_dead_is_refused_naming_it(team, how):
    team.create(spec("root"), spec("c", "root"), spec("d", "c"))
    if how == "canceled by the lead":
        team.cancel("c")  # d is canceled along, because of c
    elif how == "canceled by a cascade":
        _fail_for_good(team, "root")  # c and d are canceled because of it
    else:
        team.complete("w1", "root", team.claim("w1").token)
        _fail_for_good(team, "c")
    dead = team.state("c").name
    before = team.dump()
    with pytest.raises(errors.FailedPrecondition, match=f"'d' depends on 'c', which is {dead}") as refused:
        _retry(team, "d")
    assert refused.value.metadata == {"id": "d", "dependency": "c"}
    assert team.dump() == before, "a refused retry wrote something"
    named = ["root", "d"] if how == "canceled by a cascade" else ["c", "d"]
    assert set(_retry(team, *named)) >= set(named)  # brought back in the same call, it is not refused
    assert team.state("c") is not CANCELED and team.state("c") is not FAILED
    assert team.state("d") is PENDING


def test_a_dependency_brought_back_along_by_the_same_call_is_no_refusal(team):
    team.create(spec("a"), spec("b", "a"), spec("c", "b"))
    _fail_for_good(team, "a")  # b and c canceled because of a
    assert _retry(team, "c", "a") == ["c", "a", "b"]  # b comes back with a, so c's dependency lives
    assert [team.state(t) for t in "abc"] == [PENDING] * 3


def test_retry_survives_a_restart(team):
    team.create(spec("a"), spec("b", "a"))
    _fail_for_good(team, "a")
    _retry(team, "a")
    team.restart()
    assert [team.state(t) for t in "ab"] == [PENDING, PENDING]
    assert team.claim("w1").task.id == "a"


# ---------------------------------------------------------------- waiting_for


def test_waiting_for_names_the_unmet_dependencies_in_order(team):
    team.create(spec("z"), spec("y"), spec("x"), spec("t", "x", "y", "z"))
    team.run(team.board.set_online("w1", True))
    grant = team.claim("w1")  # z, the first created
    team.complete("w1", grant.task.id, grant.token)
    waiting = _waiting(team, "t")
    assert waiting.dependencies == ("x", "y") and waiting.ready_ms is None
    assert waiting.teammates is TeammateAvailability.SOME_ONLINE
    assert _waiting(team, "x") is None, "ready, with a teammate online: nothing holds it"


def test_waiting_for_shows_a_shut_time_gate(team, clock):
    team.run(team.board.set_online("w1", True))
    at = clock.now_ms() + 5000
    team.create(spec("later", not_before_ms=at))
    assert _waiting(team, "later").ready_ms == at
    clock.set(at)
    team.reap()
    assert _waiting(team, "later") is None


def test_waiting_for_says_when_nobody_can_take_a_task(team):
    team.create(spec("review", required_role="reviewer"), spec("any"))
    assert _waiting(team, "review").teammates is TeammateAvailability.NONE_REGISTERED
    assert _waiting(team, "any").teammates is TeammateAvailability.NONE_ONLINE
    team.add("rita", roles=("reviewer",))
    assert _waiting(team, "review").teammates is TeammateAvailability.NONE_ONLINE
    team.run(team.board.set_online("rita", True))
    assert _waiting(team, "review") is None and _waiting(team, "any") is None


def test_a_task_listing_carries_waiting_for_its_pending_tasks(team):
    team.create(spec("a"), spec("b", "a"))
    page = team.run(team.board.list_tasks(states=(), owner="", after_seq=0, limit=10, max_bytes=1 << 20))
    by_id = {record.id: page.waiting.get(record.seq) for record in page.tasks}
    assert by_id["b"].dependencies == ("a",)
    assert by_id["a"].dependencies == () and by_id["a"].teammates is TeammateAvailability.NONE_ONLINE


def test_waiting_for_lists_at_most_a_hundred_dependencies(team):
    deps = [spec(f"d{i}") for i in range(150)]
    team.create(*deps, spec("wide", *(d.id for d in deps)))
    assert len(_waiting(team, "wide").dependencies) == tasks.WAITING_DEPENDENCIES_SHOWN


def test_a_task_canceled_during_its_backoff_is_retried_at_once(team, clock):
    team.create(spec("a", max_attempts=3, retry_backoff_ms=60_000))
    grant = team.claim("w1")
    team.fail("w1", "a", grant.token, retryable=True)
    assert team.task("a").ready_ms > clock.now_ms()
    team.cancel("a")
    _retry(team, "a")
    task = team.task("a")
    assert task.ready_ms is None and team.scalar("SELECT gate_shut FROM tasks WHERE id = 'a'") == 0
    assert team.claim("w2").task.id == "a"


def test_waiting_for_names_a_concurrency_key_at_its_limit(team):
    team.run(team.board.set_online("w1", True))
    team.set_limit("repo:web", 1)
    team.create(spec("first", concurrency_key="repo:web"), spec("second", concurrency_key="repo:web"))
    grant = team.claim("w1")
    assert grant.task.id == "first"
    assert _waiting(team, "second").full_key == "repo:web"
    team.complete("w1", "first", grant.token)
    assert _waiting(team, "second") is None
