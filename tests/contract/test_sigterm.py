"""SIGTERM: stop accepting, end streams, drain, checkpoint, exit 0 within 5 s (design §6)."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import STOP_TIMEOUT_S

from .wire import spec

STREAM_END_CODES = (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.OK)


@pytest.mark.timeout(60)
def test_sigterm_with_open_streams_exits_zero_and_leaves_a_clean_state_dir(corrald):
    daemon = corrald()
    holder = daemon.add_teammate("holder")
    daemon.create_tasks(spec("held"), spec("waiting", "held"))
    holder_stream = holder.idle()
    claim = holder_stream.next_event("claim")
    idlers = [daemon.add_teammate(f"idle{i}").idle() for i in range(8)]
    watch = daemon.watch(0)
    watch.next(5)
    daemon.wait_open_streams(9)
    socket = daemon.state_dir / "corral.sock"
    assert socket.exists()

    code, took = daemon.terminate()
    assert code is not None, f"corrald did not exit within {STOP_TIMEOUT_S}s of SIGTERM\n{daemon.stderr_tail()}"
    assert code == 0, f"exit code {code}\n{daemon.stderr_tail()}"
    assert took < STOP_TIMEOUT_S
    for stream in [holder_stream, *idlers, watch]:
        end, details = stream.wait_end(5)
        assert end in STREAM_END_CODES, f"{stream.label} ended with {end}: {details}"
    assert not socket.exists(), "the socket file must be removed on SIGTERM"
    wal = daemon.state_dir / "corral.sqlite3-wal"
    assert not wal.exists() or wal.stat().st_size == 0, f"WAL left with {wal.stat().st_size} bytes"

    # The next daemon finds everything, including the claim, which is re-sent unchanged.
    again = corrald(daemon.state_dir)
    assert again.get_task("held").state == pb.TASK_STATE_IN_PROGRESS
    assert again.get_task("waiting").state == pb.TASK_STATE_PENDING
    resumed = again.client(holder.token, "holder").idle()
    resent = resumed.next_event("claim")
    assert (resent.task.id, resent.claim_token, resent.attempt, resent.fence) == (
        claim.task.id,
        claim.claim_token,
        claim.attempt,
        claim.fence,
    )
    resumed.cancel()


@pytest.mark.timeout(30)
def test_sigterm_on_an_idle_daemon(corrald):
    daemon = corrald()
    code, took = daemon.terminate()
    assert code == 0 and took < STOP_TIMEOUT_S, (code, took, daemon.stderr_tail())
    assert not (daemon.state_dir / "corral.sock").exists()
    wal = daemon.state_dir / "corral.sqlite3-wal"
    assert not wal.exists() or wal.stat().st_size == 0
