"""What a daemon did not hear still reaches its streams: a claim that ended under a holder on
daemon A through daemon B while A's listening connection was down (cut with
`pg_terminate_backend`), or in a notification too big to say what it was about, is told to
the holder's stream on A from the claim history, with the reason the history records
(design §2 guarantee 3; docs/postgres.md, "Gaps in what a daemon heard").

A's listener waits GAP_S before each reconnection (the `listener_reconnect` failpoint, in a
thread of its own: A serves meanwhile), and each round checks that the gap held: B's commit
came while A had no listening connection (none in pg_stat_activity once B answered), so
its NOTIFY never reached A.
"""

from __future__ import annotations

import time

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.contract.wire import Stream, spec
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)

GAP_S = 1.0
HELD_OPEN = f"listener_reconnect=sleep:{int(GAP_S * 1000)}"
TOLD_WITHIN_S = GAP_S + 4.0  # the gap, the listener's first retry (0.1 s), a connection, one read
SLOW_POLL_S = 600.0  # the stream never looks by itself: only a wake-up or the history tells it
QUICK_POLL_S = 0.05  # the stream looks during the gap, and finds its claim gone without a notice
ROUNDS = 2


def _listener_pid(board, daemon) -> int | None:
    rows = board.sql(
        "SELECT pid FROM pg_stat_activity WHERE application_name LIKE %s",
        (f"corrald-listen %:{daemon.pid}:%",),
    )
    return rows[0][0] if rows else None


def _cut_listener(board, daemon) -> None:
    """Ends the daemon's listening backend and waits until it is gone (PostgreSQL 14+)."""
    pid = _listener_pid(board, daemon)
    assert pid is not None, "the daemon has no listening connection"
    assert board.sql("SELECT pg_terminate_backend(%s, 5000)", (pid,)) == [(True,)]


def _told(stream: Stream, claim: pb.Claim, claims: list[pb.Claim] | None = None) -> pb.ClaimEnded:
    """The stream's claim_ended for `claim`, within TOLD_WITHIN_S. Claims that come first go
    to `claims`: a stream that looked during the gap found a free slot and may have taken
    its next task before anyone could tell it why the slot was free."""
    deadline = time.monotonic() + TOLD_WITHIN_S
    while True:
        item = stream.next(max(0.0, deadline - time.monotonic()))
        if item.WhichOneof("event") == "claim" and claims is not None:
            claims.append(item.claim)
            continue
        assert item.WhichOneof("event") == "claim_ended", item
        ended = item.claim_ended
        assert (ended.task_id, ended.claim_token) == (claim.task.id, claim.claim_token)
        return ended


def _gap_rounds(shared_board, poll_interval: float, end_claim, reason: int, detail: str) -> None:
    a, b = shared_board.daemon("a", failpoints=HELD_OPEN), shared_board.daemon("b")
    mate = a.add_teammate("holder")
    stream = a.client(mate.token, "holder").idle(poll_interval=poll_interval, max_idle_polls=10_000)
    a.wait_open_streams(1)
    gaps = 0
    claims: list[pb.Claim] = []
    for round_no in range(ROUNDS):
        wait_until(lambda: a.stats().postgres.listener_connected, 10, "daemon a listening again")
        b.create_tasks(spec(f"t{round_no}"))  # or the task revoked before comes back: either will do
        claim = claims.pop(0) if claims else stream.next_event("claim")
        _cut_listener(shared_board, a)
        end_claim(b, claim.task.id)
        gaps += _listener_pid(shared_board, a) is None  # B committed before A listened again
        ended = _told(stream, claim, claims)
        assert (ended.reason, ended.detail) == (reason, detail), f"round {round_no}: {ended}"
    assert gaps == ROUNDS, f"daemon a listened again before b's commit in {ROUNDS - gaps} of {ROUNDS} rounds"
    stream.cancel()


def _revoke(daemon, task_id: str) -> None:
    daemon.lead.lead.RevokeClaim(pb.RevokeClaimRequest(task_id=task_id, reason="taken back in the gap"))


def _cancel(daemon, task_id: str) -> None:
    daemon.lead.lead.CancelTasks(pb.CancelTasksRequest(ids=[task_id]))


@pytest.mark.parametrize("poll_interval", [SLOW_POLL_S, QUICK_POLL_S], ids=["stream-waits", "stream-looks"])
def test_a_claim_revoked_while_the_holders_daemon_could_not_hear_is_told_to_its_holder(shared_board, poll_interval):
    _gap_rounds(shared_board, poll_interval, _revoke, pb.CLAIM_END_REASON_REVOKED, "taken back in the gap")


def test_a_claim_canceled_while_the_holders_daemon_could_not_hear_is_told_to_its_holder(shared_board):
    _gap_rounds(shared_board, SLOW_POLL_S, _cancel, pb.CLAIM_END_REASON_TASK_CANCELED, "canceled by the lead")


def test_a_teammate_removed_while_its_daemon_could_not_hear_is_told_and_loses_its_stream(shared_board):
    a, b = shared_board.daemon("a", failpoints=HELD_OPEN), shared_board.daemon("b")
    mate = a.add_teammate("leaver")
    stream = a.client(mate.token, "leaver").idle(poll_interval=SLOW_POLL_S)
    a.wait_open_streams(1)
    b.create_tasks(spec("held"))
    claim = stream.next_event("claim")
    _cut_listener(shared_board, a)
    b.lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="leaver"))
    assert _listener_pid(shared_board, a) is None, "daemon a listened again before the removal: no gap"
    ended = _told(stream, claim)
    assert (ended.reason, ended.detail) == (pb.CLAIM_END_REASON_TEAMMATE_REMOVED, "teammate 'leaver' was removed")
    code, _ = stream.wait_end(TOLD_WITHIN_S)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    with pytest.raises(grpc.RpcError) as refused:
        a.client(mate.token, "leaver").board.GetIdentity(pb.GetIdentityRequest())
    assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED


def test_a_notice_in_a_notification_too_big_to_send_is_told_from_the_history(shared_board):
    # A reason this long makes B's NOTIFY say only "everything changed" (storage.wake_payload).
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("holder")
    stream = a.client(mate.token, "holder").idle(poll_interval=SLOW_POLL_S)
    a.wait_open_streams(1)
    b.create_tasks(spec("big"))
    claim = stream.next_event("claim")
    reason = "r" * 8_000
    b.lead.lead.RevokeClaim(pb.RevokeClaimRequest(task_id="big", reason=reason))
    ended = _told(stream, claim)
    assert (ended.reason, ended.detail) == (pb.CLAIM_END_REASON_REVOKED, reason)
    stream.cancel()
