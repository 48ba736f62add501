"""Durability at the board: restart recovery (live leases extended, dead ones stay
dead), commit failures reported as failures (invariant 6), and the read path.
"""

from __future__ import annotations

import pytest

from corrald import errors, failpoints
from corrald.model import TaskState
from corrald.stream import StreamState
from corrald.writer import CommitFailed
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)

LEASE = 10_000

PENDING, IN_PROGRESS, COMPLETED = TaskState.PENDING, TaskState.IN_PROGRESS, TaskState.COMPLETED


@pytest.fixture
def team(board):
    board.add("w1")
    board.add("w2")
    return board


# ---------------------------------------------------------------- restart


def test_restart_extends_live_leases(board, clock):
    board.add("w1")
    board.create(spec("a", lease_ms=LEASE), spec("b", lease_ms=2 * LEASE))
    ga, gb = board.claim("w1"), board.claim("w1")
    clock.advance(LEASE - 1)  # "a" has 1 ms left
    board.restart()
    now = clock.now_ms()
    assert board.task("a").lease_expire_ms == now + LEASE
    assert board.task("b").lease_expire_ms == now + 2 * LEASE
    clock.advance(LEASE - 1)
    board.reap()
    assert board.state("a") is IN_PROGRESS
    end, _ = board.renew("w1", "a", ga.token)
    assert end == clock.now_ms() + LEASE
    board.complete("w1", "b", gb.token)
    # Claims survive with the same token, attempt and fence.
    assert board.rows("SELECT fence, outcome FROM claims ORDER BY fence") == [(ga.fence, None), (gb.fence, "completed")]


def test_restart_keeps_the_board(board, clock):
    board.add("w1")
    board.create(spec("a"), spec("b", "a"), request_id="r")
    grant = board.claim("w1")
    board.complete("w1", "a", grant.token, b"x")
    before = board.rows("SELECT id, state, unmet_deps, result FROM tasks ORDER BY seq")
    board.restart()
    assert board.rows("SELECT id, state, unmet_deps, result FROM tasks ORDER BY seq") == before
    assert [t.id for t in board.create(spec("a"), spec("b", "a"), request_id="r")] == ["a", "b"]
    assert board.complete("w1", "a", grant.token, b"y").result == b"x"
    assert board.claim("w1").task.id == "b"


def test_restart_does_not_revive_a_lease_that_ended_before_it(board, clock):
    board.add("w1")
    board.create(spec("a", lease_ms=1000))
    grant = board.claim("w1")
    clock.advance(5000)  # the lease ended 4 s ago; no claim or reaper ran yet
    with pytest.raises(errors.LeaseExpired):
        board.renew("w1", "a", grant.token)
    board.restart()
    # A token that was told LEASE_EXPIRED must never succeed later (invariant 3);
    # recovery ends the dead claim by expiry, which uses an attempt.
    with pytest.raises(errors.LeaseExpired):
        board.renew("w1", "a", grant.token)
    task = board.task("a")
    assert task.state is PENDING and task.owner == "" and task.lease_expire_ms is None
    assert board.rows("SELECT outcome FROM claims") == [("expired",)]
    assert board.claim("w1").attempt == 2


def test_restart_keeps_a_lease_that_ran_out_during_the_downtime(board, clock):
    board.add("w1")
    board.create(spec("a", lease_ms=LEASE), spec("b", lease_ms=LEASE))
    ga = board.claim("w1")
    clock.advance(1)
    gb = board.claim("w1")
    clock.set(ga.lease_expire_ms)
    with pytest.raises(errors.LeaseExpired):  # the daemon saw "a" end and said so
        board.renew("w1", "a", ga.token)
    board.close()
    clock.advance(10 * LEASE)  # downtime: "b" ran out while nobody could renew it
    board.open()
    with pytest.raises(errors.LeaseExpired):
        board.complete("w1", "a", ga.token)
    assert board.state("a") is PENDING
    assert board.task("b").lease_expire_ms == clock.now_ms() + LEASE
    assert board.complete("w1", "b", gb.token).state is COMPLETED


# ---------------------------------------------------------------- commit failures at the board (invariant 6)


def test_a_claim_whose_commit_fails_was_never_made(team):
    team.create(spec("a"))
    cursor = StreamState(slots=1)
    failpoints.enable("before_commit", "error")
    assert team.next_for("w1", cursor) == []  # a read answers instead, and a read never claims
    failpoints.disable()
    assert team.scalar("SELECT count(*) FROM claims") == 0
    assert team.task("a").state is PENDING and cursor.sent_tokens == set()
    (grant,) = team.next_for("w1", cursor)
    assert grant.attempt == 1 and grant.task.id == "a"


def test_while_commits_fail_a_stream_gets_what_is_stored_and_no_new_claim(team):
    """A full disk keeps neither a held claim nor the inbox from a new stream, nor lets a read
    hand out a claim; a stream that could not record its teammate online does so at the next commit."""
    team.create(spec("held"))
    held = team.claim("w1")
    team.send("lead", "w1", "hello")
    team.create(spec("free"))
    request_id, _ = team.run(team.board.request_shutdown("w2", "stop", 0))
    holder, told, fresh = StreamState(slots=2), StreamState(slots=1), StreamState(slots=1)
    fresh.online_pending = True
    failpoints.enable("before_commit", "error")
    (resent,) = team.next_for("w1", holder)
    (message,) = team.next_for("w1", holder)
    (shutdown,) = team.next_for("w2", told)
    assert team.next_for("w1", holder) == []  # it has a free slot and "free" is ready: no claim
    assert team.next_for("w2", told) == []
    failpoints.disable()
    assert (resent.token, resent.task.id) == (held.token, "held")
    assert (message.kind, message.body) == ("message", "hello")
    assert (shutdown.kind, shutdown.ref) == ("shutdown_request", request_id)
    assert team.state("free") is PENDING
    assert team.scalar("SELECT online FROM teammates WHERE name = 'w1'") == 0
    assert fresh.online_pending
    assert team.next_for("w1", fresh)[0].token == held.token  # a new stream re-sends the held claim
    assert not fresh.online_pending and team.scalar("SELECT online FROM teammates WHERE name = 'w1'") == 1


def test_a_complete_whose_commit_fails_can_be_retried(team):
    team.create(spec("a"), spec("b", "a"))
    grant = team.claim("w1")
    failpoints.enable("before_commit", "error")
    with pytest.raises(CommitFailed):
        team.complete("w1", "a", grant.token, b"lost")
    failpoints.disable()
    assert team.task("a").state is IN_PROGRESS
    assert team.scalar("SELECT unmet_deps FROM tasks WHERE id = 'b'") == 1
    assert team.complete("w1", "a", grant.token, b"kept").result == b"kept"
    assert team.complete("w1", "a", grant.token, b"again").result == b"kept"


# ---------------------------------------------------------------- reads


def test_readers_see_commits_and_cannot_write(team):
    team.create(spec("a"), spec("b", "a"))
    grant = team.claim("w1")
    task = team.run(team.board.get_task("a"))
    assert task.state is IN_PROGRESS and task.owner == "w1"
    listed = team.run(team.board.list_tasks(states=[PENDING], owner="", after_seq=0, limit=10, max_bytes=2**20))
    assert [t.id for t in listed.tasks] == ["b"] and not listed.more
    mine = team.run(team.board.list_tasks(states=[], owner="w1", after_seq=0, limit=10, max_bytes=2**20))
    assert [t.id for t in mine.tasks] == ["a"] and not mine.more
    with pytest.raises(errors.TaskNotFound):
        team.run(team.board.get_task("nope"))
    with pytest.raises(Exception, match="readonly|read-only"):  # SQLite's and PostgreSQL's refusals
        team.run(team.board.read(lambda conn: conn.execute("DELETE FROM tasks")))
    team.complete("w1", "a", grant.token)
    assert team.run(team.board.get_task("a")).state is COMPLETED
    stats = team.run(team.board.stats())
    assert stats.tasks_by_state == {COMPLETED: 1, PENDING: 1}
    assert stats.writer.commits > 0
