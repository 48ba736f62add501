"""Teammates in threads for the multi-daemon tests: each works through one daemon of the
board and, when that daemon goes away, goes on through the next one it knows.

Every claim received and every completion answered is recorded in the reliability
suite's history (tests/reliability/rel_history.py), whose checker then judges the
merged history of all daemons against the final board.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence

import grpc

from corral.v1 import corral_pb2 as pb
from tests.contract.wire import Client, Daemon, status_details
from tests.reliability.rel_history import Recorder

# Lost connections, a daemon stopping or paused, a stream ended for a newer one: go on
# through the next daemon.
_GONE = {
    grpc.StatusCode.UNAVAILABLE,
    grpc.StatusCode.CANCELLED,
    grpc.StatusCode.ABORTED,
    grpc.StatusCode.DEADLINE_EXCEEDED,
}
# A completion answered so may or may not have been applied.
_IN_DOUBT = {grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED}


class Worker(threading.Thread):
    """Claims and completes through `daemons[0]`, then the next one, until `stop` is set or
    `deadline` (time.monotonic) passes; records into `recorder`.

    A completion answered UNAVAILABLE (or not at all, past its deadline) was in flight when
    the daemon or its database went away, or the daemon was paused, and may or may not have
    been applied. By default the worker leaves it to the
    lease's end; with `resend` it sends the same request (the same claim token) again,
    through the next daemon, before it asks for new work, until it gets an answer."""

    def __init__(
        self,
        name: str,
        token: str,
        daemons: Sequence[Daemon],
        recorder: Recorder,
        stop: threading.Event,
        deadline: float,
        *,
        resend: bool = False,
    ) -> None:
        super().__init__(name=f"worker-{name}", daemon=True)
        self.mate, self.token = name, token
        self._daemons = list(daemons)
        self._recorder = recorder
        self._halt = stop
        self._deadline = deadline
        self._resend = resend
        self.unanswered: pb.CompleteTaskRequest | None = None  # a completion answered UNAVAILABLE
        self.completed = 0
        self.failovers = 0
        self.errors: list[str] = []

    def run(self) -> None:
        turn = 0
        while not self._halt.is_set() and time.monotonic() < self._deadline:
            daemon = self._daemons[turn % len(self._daemons)]
            try:
                self._work(daemon)
            except grpc.RpcError as error:
                if error.code() not in _GONE:
                    self.errors.append(f"{self.mate} on {daemon.state_dir.parent.name}: {error.code().name} {error}")
                    return
            except RuntimeError as error:
                self.errors.append(str(error))
                return
            turn += 1
            self.failovers += 1
            self._halt.wait(0.05)  # a pause before the next daemon, not a wait for anything

    def _work(self, daemon: Daemon) -> None:
        if not daemon.alive():
            return
        channel = grpc.insecure_channel(daemon.address)  # a connection of its own, as a real teammate has
        client = Client(channel, self.token, self.mate)
        try:
            if self.unanswered is not None:
                self._complete(client, self.unanswered)
            self._claim_and_complete(client)
        finally:
            channel.close()

    def _claim_and_complete(self, client: Client) -> None:
        stream = client.idle(poll_interval=0.5, timeout=max(1.0, self._deadline - time.monotonic()))
        idle_timed_out = False
        try:
            while not self._halt.is_set():
                try:
                    response = stream.try_next(0.2)
                except AssertionError:  # the stream ended: why decides what comes next
                    code, details = stream.end_status or (None, "")
                    if code in _GONE or (code == grpc.StatusCode.OK and idle_timed_out):
                        return  # (an Idle stream with nothing to hand out ends OK: open another)
                    raise RuntimeError(f"{self.mate}: stream ended with {code}: {details}") from None
                if response is None:
                    continue
                which = response.WhichOneof("event")
                idle_timed_out = which == "idle_timeout"
                if which != "claim":
                    continue
                claim = response.claim
                self._recorder.claim(self.mate, claim, stream=1)
                request = pb.CompleteTaskRequest(
                    task_id=claim.task.id, claim_token=claim.claim_token, result=claim.task.id.encode()
                )
                self._complete(client, request)
        finally:
            stream.cancel()

    def _complete(self, client: Client, request: pb.CompleteTaskRequest) -> None:
        record = self._recorder.begin("complete", self.mate, request.task_id, request.claim_token)
        try:
            done = client.teammate.CompleteTask(request, timeout=10)
        except grpc.RpcError as error:
            self._recorder.end(record, "error", code=error.code().name, reason=reason_of(error))
            if self._resend and error.code() in _IN_DOUBT:
                self.unanswered = request
            raise
        self._recorder.end(record, "ok", result=done.task.result.hex())
        self.unanswered = None
        self.completed += 1


def reason_of(error: grpc.RpcError) -> str:
    """The ErrorInfo reason of a daemon's error ("" for gRPC's own)."""
    info = status_details(error).get("error_info")
    return info.reason if info is not None else ""
