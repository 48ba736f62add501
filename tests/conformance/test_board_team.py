"""Teammates: add, remove, messages, acks, plans, shutdown requests."""

from __future__ import annotations

import json

import pytest

from corrald import errors
from corrald.config import Limits
from corrald.credentials import Identity
from corrald.model import TaskState, TeammateStatus
from corrald.stream import StreamState
from tests.support.boardkit import LEAD_TOKEN, spec

pytestmark = pytest.mark.timeout(30)


def teammates(board) -> dict:
    return {t.name: t for _, t in board.run(board.board.list_teammates())}


# ---------------------------------------------------------------- add / remove


def test_add_teammate_with_roles_and_plan_requirement(board):
    record, token = board.run(board.board.add_teammate("w1", ("build", "test"), True))
    assert (record.name, record.roles, record.require_plan_approval) == ("w1", ("build", "test"), True)
    assert record.status is TeammateStatus.OFFLINE and record.held_task_ids == ()
    assert board.board.credentials.authenticate(token) == Identity("w1", False)
    assert board.board.credentials.authenticate(LEAD_TOKEN) == Identity("lead", True)
    assert board.board.credentials.authenticate("corral-tm-" + "x" * 43) is None
    assert board.board.credentials.authenticate(token + "x") is None
    # Only a hash is stored, never the credential.
    assert board.rows("SELECT count(*) FROM teammates WHERE token_hash = ?", (token.encode(),)) == [(0,)]
    (event,) = board.events("teammate_changed")
    assert json.loads(event[2])["name"] == "w1"


def test_duplicate_name_is_already_exists(board):
    token = board.add("w1")
    before = board.dump()
    with pytest.raises(errors.AlreadyExists):
        board.add("w1", roles=["other"])
    assert board.dump() == before
    assert board.board.credentials.authenticate(token) == Identity("w1", False)


def test_credentials_survive_a_restart(board):
    token = board.add("w1")
    board.restart()
    assert board.board.credentials.authenticate(token) == Identity("w1", False)


def test_remove_releases_claims_and_revokes_the_credential(board):
    token = board.add("w1")
    other = board.add("w2")
    board.create(spec("a"), spec("b"))
    ga, gb = board.claim("w1"), board.claim("w1")
    removed = board.run(board.board.remove_teammate("w1"))
    assert removed.status is TeammateStatus.REMOVED and removed.held_task_ids == ()
    assert board.rows("SELECT id, state, owner FROM tasks ORDER BY seq") == [
        ("a", TaskState.PENDING, ""),
        ("b", TaskState.PENDING, ""),
    ]
    assert board.rows("SELECT outcome FROM claims ORDER BY fence") == [("revoked",), ("revoked",)]
    assert board.board.credentials.authenticate(token) is None
    with pytest.raises(errors.ClaimRevoked):  # its token is dead, and says why
        board.complete("w1", "a", ga.token)
    # The released tasks go to someone else, same attempt (a revoked claim uses none).
    regrant = board.claim("w2")
    assert regrant.task.id == "a" and regrant.attempt == 1
    with pytest.raises(errors.TeammateNotFound):
        board.send("lead", "w1", "hello?")
    # Removing twice is harmless; a restart does not bring the credential back.
    assert board.run(board.board.remove_teammate("w1")).status is TeammateStatus.REMOVED
    board.restart()
    assert board.board.credentials.authenticate(token) is None
    assert board.board.credentials.authenticate(other) == Identity("w2", False)
    assert regrant.token not in (ga.token, gb.token)


def test_remove_unknown_teammate(board):
    with pytest.raises(errors.TeammateNotFound):
        board.run(board.board.remove_teammate("ghost"))


# ---------------------------------------------------------------- messages and acks


def inbox(board, name):
    return board.rows("SELECT seq, kind, sender, body FROM inbox WHERE recipient = ? ORDER BY seq", (name,))


def test_send_to_a_name(board):
    board.add("w1")
    assert board.send("lead", "w1", "hi") == ["w1"]
    assert board.send("lead", "w1", "again") == ["w1"]
    assert inbox(board, "w1") == [(1, "message", "lead", "hi"), (2, "message", "lead", "again")]


def test_send_to_everyone(board):
    for name in ("w1", "w2", "w3"):
        board.add(name)
    board.run(board.board.remove_teammate("w3"))
    assert sorted(board.send("lead", "*", "all")) == ["w1", "w2"]
    assert sorted(board.send("w1", "*", "from w1")) == ["w2"]  # not to the sender itself
    assert inbox(board, "w1") == [(1, "message", "lead", "all")]
    assert inbox(board, "w2") == [(1, "message", "lead", "all"), (2, "message", "w1", "from w1")]
    assert inbox(board, "w3") == []


def test_send_to_lead_is_an_event(board):
    board.add("w1")
    assert board.send("w1", "lead", "done soon") == ["lead"]
    (event,) = board.events("message")
    assert json.loads(event[2]) == {"sender": "w1", "body": "done soon"}
    assert board.scalar("SELECT count(*) FROM inbox") == 0


def test_send_to_unknown_writes_nothing(board):
    board.add("w1")
    before = board.dump()
    with pytest.raises(errors.TeammateNotFound):
        board.send("lead", "ghost", "hi")
    assert board.dump() == before


def test_ack_through_seq(board):
    board.add("w1")
    for i in range(3):
        board.send("lead", "w1", f"m{i}")
    assert board.ack("w1", 2) == 2
    assert board.ack("w1", 1) == 2  # never moves back
    before = board.dump()
    for bad in (4, -1):
        with pytest.raises(errors.InvalidArgument) as caught:
            board.ack("w1", bad)
        assert caught.value.field == "through_seq"
    assert board.dump() == before
    assert board.ack("w1", 3) == 3
    assert board.ack("w1", 0) == 3


def test_unacked_inbox_limit_refuses_plain_messages(make_board):
    board = make_board(limits=Limits(unacked_inbox_max=3))
    board.add("w1")
    for i in range(3):
        board.send("lead", "w1", f"m{i}")
    with pytest.raises(errors.Overloaded):
        board.send("lead", "w1", "one too many")
    # Control is never refused for a full inbox.
    plan_id = board.run(board.board.submit_plan("w1", "plan"))
    board.run(board.board.decide_plan(plan_id, True, ""))
    board.ack("w1", 2)
    board.send("lead", "w1", "fits again")
    assert [row[0] for row in inbox(board, "w1")] == [1, 2, 3, 4, 5]


# ---------------------------------------------------------------- plans


def test_submit_and_decide_plan(board):
    board.add("w1", require_plan=True)
    plan_id = board.run(board.board.submit_plan("w1", "step 1, step 2"))
    (event,) = board.events("plan_submitted")
    assert json.loads(event[2]) == {"plan_id": plan_id, "author": "w1", "plan": "step 1, step 2"}
    seq = board.run(board.board.decide_plan(plan_id, False, "too vague"))
    assert board.rows("SELECT seq, kind, ref, approve, body FROM inbox WHERE recipient = 'w1'") == [
        (seq, "plan_decision", plan_id, 0, "too vague")
    ]
    with pytest.raises(errors.FailedPrecondition):
        board.run(board.board.decide_plan(plan_id, True, ""))
    for missing in ("999", "abc", ""):
        with pytest.raises(errors.PlanNotFound):
            board.run(board.board.decide_plan(missing, True, ""))


def test_teammate_status_follows_the_plan_gate(board):
    board.add("w1", require_plan=True)
    board.run(board.board.set_online("w1", True))
    assert teammates(board)["w1"].status is TeammateStatus.AWAITING_PLAN
    plan_id = board.run(board.board.submit_plan("w1", "p"))
    seq = board.run(board.board.decide_plan(plan_id, True, "go"))
    assert teammates(board)["w1"].status is TeammateStatus.AWAITING_PLAN  # decision not yet acknowledged
    board.ack("w1", seq)
    assert teammates(board)["w1"].status is TeammateStatus.IDLE


# ---------------------------------------------------------------- shutdown


def test_request_and_approve_shutdown(board, clock):
    board.add("w1")
    board.create(spec("a"), spec("b"))
    board.claim("w1")
    request_id, deadline = board.run(board.board.request_shutdown("w1", "wrap up", 60_000))
    assert deadline == clock.now_ms() + 60_000
    assert board.rows("SELECT kind, ref, body, deadline_ms FROM inbox WHERE recipient = 'w1'") == [
        ("shutdown_request", request_id, "wrap up", deadline)
    ]
    assert teammates(board)["w1"].status is TeammateStatus.SHUTTING_DOWN
    board.run(board.board.respond_shutdown("w1", request_id, True, "bye"))
    assert board.state("a") is TaskState.PENDING
    assert board.rows("SELECT outcome FROM claims") == [("released",)]
    (event,) = board.events("shutdown_answered")
    assert json.loads(event[2]) == {"request_id": request_id, "teammate": "w1", "approve": True, "reason": "bye"}
    with pytest.raises(errors.FailedPrecondition):
        board.run(board.board.respond_shutdown("w1", request_id, True, "again"))


def test_reject_shutdown_lets_the_teammate_work_again(board):
    board.add("w1")
    board.create(spec("a"))
    request_id, _ = board.run(board.board.request_shutdown("w1", "stop?", 0))
    board.run(board.board.respond_shutdown("w1", request_id, False, "busy"))
    board.ack("w1", 1)
    (grant,) = board.next_for("w1", StreamState(slots=1))
    assert grant.task.id == "a"


def test_shutdown_answer_by_the_wrong_teammate(board):
    board.add("w1")
    board.add("w2")
    request_id, _ = board.run(board.board.request_shutdown("w1", "", 0))
    for name, rid in (("w2", request_id), ("w1", "999"), ("w1", "x")):
        with pytest.raises(errors.ShutdownRequestNotFound):
            board.run(board.board.respond_shutdown(name, rid, True, ""))


def test_shutdown_grace_runs_out_and_the_teammate_is_removed(board, clock):
    token = board.add("w1")
    board.create(spec("a", lease_ms=3_600_000))
    board.claim("w1")
    _, deadline = board.run(board.board.request_shutdown("w1", "now", 1000))
    assert board.reap() == deadline
    clock.set(deadline - 1)
    board.reap()
    assert board.board.credentials.authenticate(token) is not None
    clock.set(deadline)
    board.reap()
    assert board.board.credentials.authenticate(token) is None
    assert teammates(board)["w1"].status is TeammateStatus.REMOVED
    assert board.state("a") is TaskState.PENDING
    assert board.rows("SELECT outcome FROM claims") == [("revoked",)]


def test_request_shutdown_for_unknown_teammate(board):
    with pytest.raises(errors.TeammateNotFound):
        board.run(board.board.request_shutdown("ghost", "", 0))
    assert board.scalar("SELECT count(*) FROM shutdowns") == 0
