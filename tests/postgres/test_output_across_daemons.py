"""A task's live output on a PostgreSQL board served by two daemons: a tail following
through one daemon sees every append committed through the other as it commits (an
append logs no event: only the commit's notification names the claim), byte for byte
with its offsets, and ends when the claim ends there; the rest of the board's work there
(another claim's appends and end, other events) wakes it not at all."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.contract.wire import STREAM_TIMEOUT_S, Stream, spec

pytestmark = pytest.mark.timeout(90)

WAKE_TIMEOUT_S = 5.0  # how long a committed append may take to reach the other daemon's follower


def follower_wakeups(daemon) -> float:
    """How many times the daemon has woken a TailOutput follower."""
    return daemon.metrics()["corral_output_follower_wakeups_total"]


def _tail(client, task_id: str, offset: int = 0) -> Stream:
    request = pb.TailOutputRequest(task_id=task_id, offset=offset, follow=True)
    return Stream(client.board.TailOutput(request, timeout=STREAM_TIMEOUT_S), f"TailOutput({task_id})")


def test_a_tail_through_one_daemon_follows_appends_made_through_another(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("writer")
    a.create_tasks(spec("t", lease=60))
    stream = mate.idle()
    claim = stream.next_event("claim", timeout=5.0)
    on_b = _tail(b.lead, "t")  # before the first append
    on_a = _tail(a.lead, "t")
    sent = b""
    for n in range(30):
        part = f"[{n}] ".encode() + bytes([n % 256]) * (n * 311)
        answer = mate.teammate.AppendOutput(
            pb.AppendOutputRequest(task_id="t", claim_token=claim.claim_token, data=part)
        )
        assert answer.size == len(sent) + len(part)
        # Each append reaches the follower on the other daemon before the next is made.
        got = b""
        for _ in range(100):
            chunk = on_b.next(WAKE_TIMEOUT_S)
            assert chunk.offset == len(sent) + len(got) and not chunk.end
            got += chunk.data
            if len(got) >= len(part):
                break
        assert got == part
        sent += part
    mate.complete(claim)
    last = on_b.next(WAKE_TIMEOUT_S)
    assert last == pb.OutputChunk(attempt=1, offset=len(sent), end=True)
    assert on_b.wait_end(5)[0] == grpc.StatusCode.OK
    assert on_a.wait_end(WAKE_TIMEOUT_S)[0] == grpc.StatusCode.OK
    assert b"".join(chunk.data for chunk in on_a.received) == sent and on_a.received[-1].end
    stream.cancel()


def test_a_follower_through_one_daemon_is_woken_by_its_own_claim_alone(shared_board):
    a = shared_board.daemon("a")
    b = shared_board.daemon("b", extra_args=("--metrics", "127.0.0.1:0"))
    ann, bob = a.add_teammate("ann"), a.add_teammate("bob")
    a.create_tasks(spec("t", lease=60), spec("u", lease=60))
    ann_stream = ann.idle()
    mine = ann_stream.next_event("claim", timeout=5.0)
    bob_stream = bob.idle()  # once ann holds "t": bob's claim is the other one
    theirs = bob_stream.next_event("claim", timeout=5.0)
    assert (mine.task.id, theirs.task.id) == ("t", "u")
    on_b = _tail(b.lead, "t")

    def append(mate, claim: pb.Claim, data: bytes) -> None:
        request = pb.AppendOutputRequest(task_id=claim.task.id, claim_token=claim.claim_token, data=data)
        mate.teammate.AppendOutput(request)

    append(ann, mine, b"t1")
    assert on_b.next(WAKE_TIMEOUT_S).data == b"t1"  # from here on the follower holds its claim's event
    before = follower_wakeups(b)
    for n in range(20):  # each its own commit and notification
        append(bob, theirs, f"u{n} ".encode())
    a.create_tasks(spec("v", required_role="nobody"))
    bob.complete(theirs)
    append(ann, mine, b"t2")  # notified after all of those: b has applied them when this arrives
    assert on_b.next(WAKE_TIMEOUT_S) == pb.OutputChunk(attempt=1, offset=2, data=b"t2")
    assert follower_wakeups(b) - before == 1, "woken by another claim's work, or not by its own append"
    ann.complete(mine)
    assert on_b.next(WAKE_TIMEOUT_S) == pb.OutputChunk(attempt=1, offset=4, end=True)
    assert on_b.wait_end(5)[0] == grpc.StatusCode.OK
    assert follower_wakeups(b) - before == 2, "its claim's end, committed through the other daemon, woke it once"
    ann_stream.cancel()
    bob_stream.cancel()
