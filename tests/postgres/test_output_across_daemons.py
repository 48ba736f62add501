"""A task's live output on a PostgreSQL board served by two daemons: a tail following
through one daemon sees every append committed through the other as it commits (an
append logs no event: only the commit's notification names the claim), byte for byte
with its offsets, and ends when the claim ends there."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.contract.wire import STREAM_TIMEOUT_S, Stream, spec

pytestmark = pytest.mark.timeout(90)

WAKE_TIMEOUT_S = 5.0  # how long a committed append may take to reach the other daemon's follower


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
