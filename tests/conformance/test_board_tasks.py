"""Task operations on a real board: create, claim, renew, complete, fail, release,
cancel, reclaim, restart — including the half-open lease boundary (design §1–3).
"""

from __future__ import annotations

import json

import pytest

from corrald import errors, failpoints
from corrald.model import TaskState, attempts_used
from corrald.store import tasks
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)

LEASE = 10_000

PENDING, IN_PROGRESS, COMPLETED, FAILED, CANCELED = (
    TaskState.PENDING,
    TaskState.IN_PROGRESS,
    TaskState.COMPLETED,
    TaskState.FAILED,
    TaskState.CANCELED,
)


@pytest.fixture
def team(board):
    board.add("w1")
    board.add("w2")
    return board


# ---------------------------------------------------------------- create


def test_create_batch_with_deps_in_batch_and_on_board(board):
    first = board.create(spec("a"))
    assert [t.id for t in first] == ["a"]
    created = board.create(spec("c", "b", "a", priority=3, payload=b"\x00\x01"), spec("b", "a"))
    # Returned in request order, with defaults applied (0 = default).
    assert [t.id for t in created] == ["c", "b"]
    c, b = created
    assert c.state is PENDING and b.state is PENDING
    assert set(c.depends_on) == {"a", "b"} and b.depends_on == ("a",)
    assert (c.max_attempts, c.lease_ms, c.priority, c.payload) == (3, 60_000, 3, b"\x00\x01")
    # Incremental readiness: unmet dependency counts, not a DAG scan.
    unmet = dict(board.rows("SELECT id, unmet_deps FROM tasks"))
    assert unmet == {"a": 0, "b": 1, "c": 2}
    assert board.scalar("SELECT count(*) FROM deps") == 3
    assert len(board.events("task_changed")) == 3


def test_same_request_id_and_identical_batch_returns_the_same_tasks(board):
    first = board.create(spec("a"), spec("b", "a"), request_id="r1")
    before = board.counts()
    again = board.create(spec("a"), spec("b", "a"), request_id="r1")
    assert [(t.seq, t.id) for t in again] == [(t.seq, t.id) for t in first]
    assert board.counts() == before


def test_same_request_id_with_different_batch_is_already_exists(board):
    board.create(spec("a"), request_id="r1")
    before = board.dump()
    with pytest.raises(errors.AlreadyExists) as caught:
        board.create(spec("a", priority=1), request_id="r1")
    assert caught.value.metadata["field"] == "request_id"
    with pytest.raises(errors.AlreadyExists):
        board.create(spec("zzz"), request_id="r1")
    assert board.dump() == before


def test_retried_request_returns_current_records_after_progress(team):
    team.create(spec("a"), request_id="r")
    grant = team.claim("w1")
    team.complete("w1", "a", grant.token)
    again = team.create(spec("a"), request_id="r")
    assert again[0].state is COMPLETED and again[0].seq == grant.task.seq


def test_identical_resend_without_request_id_returns_the_same_tasks(board):
    first = board.create(spec("a"), spec("b", "a"))
    before = board.counts()
    again = board.create(spec("a"), spec("b", "a"))
    assert [t.seq for t in again] == [t.seq for t in first]
    assert board.counts() == before


def test_same_id_with_different_spec_is_already_exists_and_writes_nothing(board):
    board.create(spec("a", title="one"))
    before = board.dump()
    with pytest.raises(errors.AlreadyExists) as caught:
        board.create(spec("new"), spec("a", title="two"))
    assert caught.value.metadata["field"] == "tasks[1].id"
    assert board.dump() == before
    assert board.scalar("SELECT count(*) FROM tasks WHERE id = 'new'") == 0


def test_batch_mixing_existing_and_new_tasks_adds_only_the_new_ones(board):
    board.create(spec("a"))
    out = board.create(spec("a"), spec("b", "a"))
    assert [t.id for t in out] == ["a", "b"]
    assert board.scalar("SELECT count(*) FROM tasks") == 2


def test_dependency_on_a_completed_board_task_is_met_at_once(team):
    team.create(spec("a"))
    grant = team.claim("w1")
    team.complete("w1", "a", grant.token)
    team.create(spec("b", "a"))
    assert team.scalar("SELECT unmet_deps FROM tasks WHERE id = 'b'") == 0
    assert team.claim("w2").task.id == "b"


# ---------------------------------------------------------------- claim


def test_claim_order_is_priority_desc_then_board_sequence(team):
    team.create(spec("low"), spec("hi1", priority=5), spec("neg", priority=-1), spec("hi2", priority=5))
    order = []
    for _ in range(4):
        grant = team.claim("w1")
        order.append(grant.task.id)
    assert order == ["hi1", "hi2", "low", "neg"]
    assert team.claim("w1") is None


def test_claim_grant_fields(team, clock):
    team.create(spec("a", lease_ms=LEASE))
    grant = team.claim("w1")
    assert grant.task.state is IN_PROGRESS and grant.task.owner == "w1"
    assert grant.attempt == 1 and grant.task.attempt == 1
    assert grant.lease_expire_ms == clock.now_ms() + LEASE == grant.task.lease_expire_ms
    assert len(grant.token) >= 22  # >= 128 bits of url-safe base64
    row = team.rows("SELECT token, teammate, attempt, claim_ms, outcome FROM claims WHERE fence = ?", (grant.fence,))
    assert row == [(grant.token, "w1", 1, clock.now_ms(), None)]


def test_required_role_is_honoured(board):
    board.add("plain")
    board.add("builder", roles=["build"])
    board.create(spec("b", required_role="build", priority=9), spec("x"))
    assert board.claim("plain").task.id == "x"
    assert board.claim("plain") is None  # "b" needs the role
    assert board.claim("builder").task.id == "b"


def test_a_task_is_not_claimed_before_its_dependencies_complete(team):
    team.create(spec("a"), spec("b", "a"), spec("c", "a", "b"))
    ga = team.claim("w1")
    assert ga.task.id == "a"
    assert team.claim("w2") is None
    team.complete("w1", "a", ga.token)
    gb = team.claim("w2")
    assert gb.task.id == "b"
    assert team.claim("w1") is None
    team.complete("w2", "b", gb.token)
    assert team.claim("w1").task.id == "c"


@pytest.mark.sqlite_only  # counts statements through SQLite's trace callback
def test_a_leaf_tasks_completion_runs_no_statement_for_dependents(team):
    """Most tasks are leaves: on SQLite, where each statement is a step of its own,
    completing one runs no statement for dependents, while completing a task others wait
    on frees each of them (and only them). (PostgreSQL frees them inside the completion's
    one statement.)"""
    team.create(spec("leaf"), spec("a"), spec("b", "a"), spec("c", "a"))
    with team.traced_statements() as statements:
        for _ in range(2):
            grant = team.claim("w1")
            statements.clear()
            team.complete("w1", grant.task.id, grant.token)
            frees = [s for s in statements if "unmet_deps = unmet_deps - 1" in s]
            if grant.task.id == "a":
                assert len(frees) == 1, statements
            else:
                assert grant.task.id == "leaf"
                assert frees == [], statements
    assert sorted(g.task.id for g in (team.claim("w1"), team.claim("w2"))) == ["b", "c"]


def test_fences_strictly_increase_and_tokens_never_repeat(team):
    team.create(*[spec(f"t{i}", max_attempts=100) for i in range(5)])
    fences, tokens = [], set()
    for _i in range(30):
        grant = team.claim("w1")
        fences.append(grant.fence)
        tokens.add(grant.token)
        team.release("w1", grant.task.id, grant.token)
    assert fences == sorted(fences) and len(set(fences)) == 30
    assert len(tokens) == 30
    assert team.scalar("SELECT count(DISTINCT token) FROM claims") == 30


def test_claim_reclaims_expired_leases_first(team, clock):
    team.create(spec("hi", priority=10, lease_ms=1000), spec("lo"))
    first = team.claim("w1")
    assert first.task.id == "hi"
    clock.advance(1000)
    second = team.claim("w2")  # the expired "hi" outranks "lo"
    assert second.task.id == "hi" and second.attempt == 2 and second.fence > first.fence
    assert team.rows("SELECT outcome FROM claims WHERE fence = ?", (first.fence,)) == [("expired",)]


# ---------------------------------------------------------------- the half-open lease


@pytest.mark.parametrize("op", ["renew", "complete", "fail", "release"])
def test_one_ms_before_lease_end_the_claim_is_alive(team, clock, op):
    team.create(spec("a", lease_ms=LEASE))
    grant = team.claim("w1")
    clock.set(grant.lease_expire_ms - 1)
    # Neither the reaper nor a claim reclaims it.
    assert team.reap() == grant.lease_expire_ms
    assert team.claim("w2") is None
    assert team.task("a").owner == "w1"
    if op == "renew":
        end, protocol = team.renew("w1", "a", grant.token)
        assert end == clock.now_ms() + LEASE and protocol is False
        assert team.task("a").lease_expire_ms == end
    elif op == "complete":
        assert team.complete("w1", "a", grant.token, b"r").state is COMPLETED
    elif op == "fail":
        assert team.fail("w1", "a", grant.token).state is PENDING
    else:
        assert team.release("w1", "a", grant.token).state is PENDING


@pytest.mark.parametrize("op", ["renew", "complete", "fail", "release"])
def test_at_lease_end_the_claim_is_dead_and_reclaimed(team, clock, op):
    team.create(spec("a", lease_ms=LEASE))
    grant = team.claim("w1")
    clock.set(grant.lease_expire_ms)
    calls = {
        "renew": lambda: team.renew("w1", "a", grant.token),
        "complete": lambda: team.complete("w1", "a", grant.token),
        "fail": lambda: team.fail("w1", "a", grant.token),
        "release": lambda: team.release("w1", "a", grant.token),
    }
    with pytest.raises(errors.LeaseExpired):
        calls[op]()
    # The refused call changed nothing; the next claim reclaims.
    assert team.task("a").state is IN_PROGRESS
    again = team.claim("w2")
    assert again.task.id == "a" and again.attempt == 2 and again.task.owner == "w2"
    with pytest.raises(errors.LeaseExpired):  # and stays dead
        calls[op]()


def test_reaper_reclaims_exactly_at_lease_end(team, clock):
    team.create(spec("a", lease_ms=LEASE))
    grant = team.claim("w1")
    clock.set(grant.lease_expire_ms - 1)
    team.reap()
    assert team.task("a").state is IN_PROGRESS
    clock.advance(1)
    assert team.reap() is None
    task = team.task("a")
    assert task.state is PENDING and task.owner == "" and task.lease_expire_ms is None
    assert team.rows("SELECT outcome, end_ms FROM claims") == [("expired", grant.lease_expire_ms)]


def test_renew_moves_the_boundary(team, clock):
    team.create(spec("a", lease_ms=LEASE))
    grant = team.claim("w1")
    clock.advance(LEASE - 1)
    end, _ = team.renew("w1", "a", grant.token)
    clock.set(end - 1)
    team.renew("w1", "a", grant.token)  # still alive, moves the end again
    clock.advance(LEASE)
    with pytest.raises(errors.LeaseExpired):
        team.renew("w1", "a", grant.token)


def test_a_renewal_whose_commit_outlasts_the_lease_is_refused_not_ok(team, clock):
    team.create(spec("a", lease_ms=LEASE))
    grant = team.claim("w1")
    # The renewal is applied at once, then its commit waits out the whole new lease.
    failpoints.enable("before_commit", lambda: clock.advance(LEASE), after=1)
    with pytest.raises(errors.LeaseExpired):
        team.renew("w1", "a", grant.token)
    failpoints.disable()
    assert team.reap() is None  # the lease it wrote is over: the reaper ends the claim
    assert team.task("a").state is PENDING


# ---------------------------------------------------------------- complete


def test_complete_is_idempotent_for_the_same_token(team):
    team.create(spec("a"), spec("b", "a"))
    grant = team.claim("w1")
    done = team.complete("w1", "a", grant.token, b"first")
    assert done.state is COMPLETED and done.result == b"first"
    events = len(team.events())
    again = team.complete("w1", "a", grant.token, b"second")
    assert again.result == b"first" and again.state is COMPLETED
    assert len(team.events()) == events  # nothing written the second time
    assert team.scalar("SELECT unmet_deps FROM tasks WHERE id = 'b'") == 0  # decremented once
    assert team.scalar("SELECT count(*) FROM claims WHERE outcome = 'completed'") == 1


def test_complete_with_any_other_token_fails(team):
    team.create(spec("a"), spec("b"))
    grant_a = team.claim("w1")
    grant_b = team.claim("w2")
    with pytest.raises(errors.ClaimTokenMismatch):  # someone else's token for another task
        team.complete("w1", "a", grant_b.token)
    with pytest.raises(errors.ClaimTokenMismatch):  # right task, foreign teammate
        team.complete("w2", "a", grant_a.token)
    with pytest.raises(errors.ClaimTokenMismatch):
        team.complete("w1", "a", "made-up-token")
    team.complete("w1", "a", grant_a.token, b"ok")
    with pytest.raises(errors.ClaimTokenMismatch):  # completed: still only the one token
        team.complete("w2", "a", grant_b.token)
    with pytest.raises(errors.ClaimTokenMismatch):  # the completing token, presented by another
        team.complete("w2", "a", grant_a.token)
    assert team.task("a").result == b"ok"


def test_complete_unknown_task_is_not_found(team):
    with pytest.raises(errors.TaskNotFound):
        team.complete("w1", "nope", "x")


# ---------------------------------------------------------------- fail


def test_fail_retries_while_attempts_remain(team):
    team.create(spec("a", max_attempts=3))
    g1 = team.claim("w1")
    after = team.fail("w1", "a", g1.token, "oops", retryable=True)
    assert after.state is PENDING and after.error == "oops" and after.owner == ""
    g2 = team.claim("w2")
    assert g2.attempt == 2
    team.fail("w2", "a", g2.token)
    g3 = team.claim("w1")
    assert g3.attempt == 3
    final = team.fail("w1", "a", g3.token, "last")
    assert final.state is FAILED and final.error == "last"
    assert team.claim("w1") is None


def test_final_failure_cancels_dependents_transitively(team):
    team.create(spec("a", max_attempts=1), spec("b", "a"), spec("c", "b"), spec("d"), spec("e", "d", "c"))
    grant = team.claim("w1")
    assert grant.task.id == "a"
    team.fail("w1", "a", grant.token, "broken")
    states = dict(team.rows("SELECT id, state FROM tasks"))
    assert states == {"a": FAILED, "b": CANCELED, "c": CANCELED, "d": PENDING, "e": CANCELED}
    # Each canceled task names the dependency whose end canceled it.
    errors = dict(team.rows("SELECT id, error FROM tasks WHERE state = 5"))
    assert errors == {
        "b": "dependency 'a' failed",
        "c": "dependency 'b' was canceled",
        "e": "dependency 'c' was canceled",
    }


def test_cancel_names_the_lead_and_then_the_dependency(team):
    team.create(spec("a"), spec("b", "a"))
    team.cancel("a")
    errors = dict(team.rows("SELECT id, error FROM tasks"))
    assert errors == {"a": "canceled by the lead", "b": "dependency 'a' was canceled"}


def test_fail_not_retryable_is_final_at_once(team):
    team.create(spec("a", max_attempts=5), spec("b", "a"))
    grant = team.claim("w1")
    assert team.fail("w1", "a", grant.token, "fatal", retryable=False).state is FAILED
    assert team.state("b") is CANCELED


# ---------------------------------------------------------------- release


def test_release_uses_no_attempt(team):
    team.create(spec("a", max_attempts=1))
    grant = team.claim("w1")
    for _ in range(3):
        back = team.release("w1", "a", grant.token)
        assert back.state is PENDING and back.owner == ""
        again = team.claim("w2")
        assert again.attempt == grant.attempt == 1
        assert again.token != grant.token and again.fence > grant.fence
        grant = again
        team.release("w2", "a", grant.token)
        grant = team.claim("w1")
    assert team.rows("SELECT DISTINCT attempt FROM claims") == [(1,)]


def test_release_after_a_failure_keeps_the_attempt_number(team):
    team.create(spec("a", max_attempts=3))
    team.fail("w1", "a", team.claim("w1").token)
    g2 = team.claim("w1")
    team.release("w1", "a", g2.token)
    assert team.claim("w2").attempt == 2


# ---------------------------------------------------------------- cancel


def test_cancel_is_transitive_and_the_holder_gets_task_canceled(team):
    team.create(spec("a"), spec("b", "a"), spec("c", "b"), spec("x"))
    grant = team.claim("w1")
    assert grant.task.id == "a"
    changed = team.cancel("a")
    assert [(t.id, t.error) for t in changed] == [
        ("a", "canceled by the lead"),
        ("b", "dependency 'a' was canceled"),
        ("c", "dependency 'b' was canceled"),
    ]
    assert all(team.state(t.id) is CANCELED and team.task(t.id).error == t.error for t in changed)
    assert team.state("x") is PENDING
    for op in (
        lambda: team.renew("w1", "a", grant.token),
        lambda: team.complete("w1", "a", grant.token),
        lambda: team.fail("w1", "a", grant.token),
        lambda: team.release("w1", "a", grant.token),
    ):
        with pytest.raises(errors.TaskCanceled):
            op()
    assert team.rows("SELECT outcome FROM claims") == [("canceled",)]
    assert team.claim("w2").task.id == "x"


def test_a_dependent_is_canceled_once_naming_its_first_canceled_dependency(team):
    # d depends on x (left alone) and on c and b, both canceled through a.
    team.create(spec("a"), spec("b", "a"), spec("c", "a"), spec("x"), spec("d", "x", "c", "b"), spec("e", "d"))
    changed = team.cancel("a")
    assert [(t.id, t.error) for t in changed] == [
        ("a", "canceled by the lead"),
        ("b", "dependency 'a' was canceled"),
        ("c", "dependency 'a' was canceled"),
        ("d", "dependency 'c' was canceled"),
        ("e", "dependency 'd' was canceled"),
    ]
    assert team.state("x") is PENDING
    changes = [json.loads(data) for (data,) in team.rows("SELECT data FROM events WHERE kind = 'task_changed'")]
    assert [c["id"] for c in changes if c["state"] == int(CANCELED)] == ["a", "b", "c", "d", "e"]


@pytest.mark.parametrize("how", ["claim", "complete", "cascade", "backoff", "ask"])
def test_a_task_changed_event_carries_the_task_as_it_stands(team, how):
    team.create(spec("a", retry_backoff_ms=1000), spec("b", "a"))
    if how == "cascade":
        team.cancel("a")
    elif how == "backoff":
        team.fail("w1", "a", team.claim("w1").token, retryable=True)
        assert team.task("a").ready_ms is not None
    else:
        grant = team.claim("w1")
        if how == "complete":
            team.complete("w1", "a", grant.token)
        elif how == "ask":
            team.ask("w1", "a", grant.token, "which corpus?")
    (data,) = team.rows("SELECT data FROM events WHERE kind = 'task_changed' ORDER BY seq DESC LIMIT 1")[0]
    event = json.loads(data)
    task = team.task(event["id"])
    # The raw count, from which a Watch event's Task gets its attempts_used.
    assert attempts_used(event["state"], event.pop("failures")) == task.attempts_used
    assert event == {
        "id": task.id,
        "state": int(task.state),
        "owner": task.owner,
        "attempt": task.attempt,
        "error": task.error,
        "lease_expire_ms": task.lease_expire_ms,
        "finish_ms": task.finish_ms,
        "progress": task.progress,
        "progress_fraction": task.progress_fraction,
        "progress_ms": task.progress_ms,
        "ready_ms": task.ready_ms,
        "input_tokens": task.usage.input_tokens,
        "output_tokens": task.usage.output_tokens,
        "cost_micros": task.usage.cost_micros,
        "model": task.usage.model,
        "question": task.question,
        "review_rounds": task.review_rounds,
    }


def test_cancel_unknown_id_writes_nothing(team):
    team.create(spec("a"))
    before = team.dump()
    with pytest.raises(errors.TaskNotFound):
        team.cancel("a", "missing")
    assert team.dump() == before


def test_cancel_leaves_finished_tasks_alone(team):
    team.create(spec("a"))
    grant = team.claim("w1")
    team.complete("w1", "a", grant.token)
    assert team.cancel("a") == []
    assert team.state("a") is COMPLETED


def test_cancel_empty_list_is_invalid(team):
    with pytest.raises(errors.InvalidArgument):
        team.cancel()


# ---------------------------------------------------------------- reclaim


def test_reclaim_counts_attempts_and_max_attempts_fails(team, clock):
    team.create(spec("a", max_attempts=2, lease_ms=1000), spec("b", "a"))
    g1 = team.claim("w1")
    clock.advance(1000)
    g2 = team.claim("w2")
    assert (g2.task.id, g2.attempt) == ("a", 2)
    clock.advance(1000)
    assert team.claim("w1") is None
    a = team.task("a")
    assert a.state is FAILED and "expired" in a.error
    assert team.state("b") is CANCELED
    assert team.rows("SELECT fence, outcome FROM claims ORDER BY fence") == [
        (g1.fence, "expired"),
        (g2.fence, "expired"),
    ]


def test_reclaim_keeps_released_claims_out_of_the_count(team, clock):
    team.create(spec("a", max_attempts=2, lease_ms=1000))
    g = team.claim("w1")
    team.release("w1", "a", g.token)
    team.claim("w1")
    clock.advance(1000)
    g3 = team.claim("w2")
    assert g3.attempt == 2 and g3.task.state is IN_PROGRESS


# ---------------------------------------------------------------- dead tokens


def test_dead_token_errors(team, clock):
    team.create(spec("exp", lease_ms=1000), spec("can"), spec("done"), spec("rel"))
    g_exp = team.claim("w1")
    g_can, g_done, g_rel = team.claim("w1"), team.claim("w1"), team.claim("w1")
    assert [g.task.id for g in (g_exp, g_can, g_done, g_rel)] == ["exp", "can", "done", "rel"]
    team.cancel("can")
    team.complete("w1", "done", g_done.token, b"R")
    team.release("w1", "rel", g_rel.token)
    clock.advance(1000)
    g_exp2 = team.claim("w2")  # reclaims "exp" (the old claim ended by expiry)
    assert g_exp2.task.id == "exp"

    with pytest.raises(errors.LeaseExpired):
        team.complete("w1", "exp", g_exp.token)
    with pytest.raises(errors.LeaseExpired):
        team.renew("w1", "exp", g_exp.token)
    with pytest.raises(errors.TaskCanceled):
        team.complete("w1", "can", g_can.token)
    assert team.complete("w1", "done", g_done.token, b"other").result == b"R"
    with pytest.raises(errors.ClaimTokenMismatch):  # released
        team.complete("w1", "rel", g_rel.token)
    with pytest.raises(errors.ClaimTokenMismatch):  # foreign teammate's live token
        team.renew("w1", "exp", g_exp2.token)
    with pytest.raises(errors.ClaimTokenMismatch):  # random
        team.renew("w1", "exp", "x" * 32)
    with pytest.raises(errors.ClaimTokenMismatch):  # a real token, but for another task
        team.renew("w2", "rel", g_exp2.token)
    with pytest.raises(errors.ClaimTokenMismatch):  # completed token on renew is not the live claim
        team.renew("w1", "done", g_done.token)
    # The live claim is untouched by all of that.
    assert team.renew("w2", "exp", g_exp2.token)[0] == clock.now_ms() + 1000


def test_events_record_each_state_change_in_order(team):
    team.create(spec("a"))
    grant = team.claim("w1")
    team.complete("w1", "a", grant.token)
    changes = [json.loads(data)["state"] for _, _, data in team.events("task_changed")]
    assert changes == [PENDING, IN_PROGRESS, COMPLETED]


# ---------------------------------------------------------------- work still to come (the idle budget)


def waited_for(board, name: str, roles: tuple[str, ...] = ()) -> list[str]:
    return board.call(lambda tx: tasks.work_waited_for(tx.conn, name, roles))


def test_work_still_to_come_is_what_a_teammate_could_yet_take(team, clock):
    team.create(
        spec("a"),
        spec("b", "a"),  # pending, not ready: a may complete
        spec("r", "a", required_role="reviewer"),  # not for w1's roles
        spec("gone"),
    )
    team.cancel("gone")
    assert waited_for(team, "w1") == ["a", "b"]
    grant = team.claim("w2")
    assert grant.task.id == "a"
    # a is held by another teammate: it may come back, so it still counts for w1;
    # for its holder it does not (a claim held is not work to wait for).
    assert waited_for(team, "w1") == ["a", "b"]
    assert waited_for(team, "w2") == ["b"]
    assert waited_for(team, "w1", ("reviewer",)) == ["a", "b", "r"]
    clock.advance(grant.lease_expire_ms - clock.now_ms())  # a's lease ends; the reaper takes it back
    team.reap()
    assert team.state("a") is PENDING and waited_for(team, "w2") == ["a", "b"]
    grant = team.claim("w1")
    team.complete("w1", grant.task.id, grant.token)
    ready = team.claim("w1")
    team.complete("w1", ready.task.id, ready.token)
    # Only the reviewer's task is left: nothing for w1, which may now spend its idle budget.
    assert waited_for(team, "w1") == [] and waited_for(team, "w1", ("reviewer",)) == ["r"]


@pytest.mark.timeout(10)
def test_a_task_row_maps_to_its_record_field_by_field(board):
    # Every settable column with a value of its own, read back through the store's one
    # statement (records are built positionally, so a column out of place shows here).
    board.create(spec("every", title="t", description="d", payload=b"p", priority=5, required_role="r", max_attempts=4))
    board.call(
        lambda tx: tx.conn.execute(
            "UPDATE tasks SET owner = 'o', error = 'e', progress = 'pr', progress_fraction = 0.5, progress_ms = 9,"
            " trace_parent = 'tp', concurrency_key = 'k', input_tokens = 1, output_tokens = 2, cost_micros = 3,"
            " model = 'm', attempt_timeout_ms = 42, finish_ms = 7, not_before_ms = 8 WHERE id = 'every'"
        )
    )
    record = board.task("every")
    assert (record.id, record.title, record.description, record.payload) == ("every", "t", "d", b"p")
    assert (record.priority, record.required_role, record.max_attempts) == (5, "r", 4)
    assert (record.state, record.owner, record.error, record.result) == (TaskState.PENDING, "o", "e", b"")
    assert (record.progress, record.progress_fraction, record.progress_ms) == ("pr", 0.5, 9)
    assert (record.trace_parent, record.concurrency_key, record.attempt_timeout_ms) == ("tp", "k", 42)
    assert (record.finish_ms, record.not_before_ms) == (7, 8)
    assert tuple(record.usage) == (1, 2, 3, "m")
