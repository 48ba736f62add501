"""Connections that never speak cannot lock the Lead out: the daemon raises its limit on
open files as far as the system allows, closes a connection that has not sent the HTTP/2
preface within 3 s, and keeps its connections below that limit (server/DESIGN.md,
"Connections and the calls gRPC core answers itself").

These start corrald themselves, because the limit on open files is set before it runs.
"""

from __future__ import annotations

import contextlib
import json
import pathlib
import resource
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import wait_until

from .wire import Client

SILENT = 300
CLOSED_WITHIN_S = 3.0 + 4.0  # the handshake timeout, and room for a loaded machine


class _Corrald:
    def __init__(self, process: subprocess.Popen, address: str, stderr: pathlib.Path, token: str) -> None:
        self.process, self.address, self.stderr, self.token = process, address, stderr, token

    def log(self) -> str:
        return self.stderr.read_text(errors="replace")


@contextlib.contextmanager
def _corrald(tmp_path: pathlib.Path, open_files: tuple[int, int]) -> Iterator[_Corrald]:
    """`corrald serve` started with `open_files` as its (soft, hard) limit on open files."""
    state = tmp_path / "state"
    stdout, stderr = tmp_path / "stdout", tmp_path / "stderr"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        process = subprocess.Popen(
            [sys.executable, "-m", "corrald", "serve", "--state-dir", str(state)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, open_files),
        )
    try:

        def ready_line() -> str:
            return stdout.read_text().partition("\n")[1] and stdout.read_text()

        try:
            line = wait_until(ready_line, 20, "the ready line")
        except AssertionError as missing:
            raise AssertionError(f"{missing}; exit status {process.poll()}; stderr:\n{stderr.read_text()}") from None
        ready = json.loads(str(line).splitlines()[0])
        yield _Corrald(process, ready["address"], stderr, (state / "lead.token").read_text().strip())
        process.send_signal(signal.SIGTERM)
        assert process.wait(5) == 0, stderr.read_text()
    finally:
        if process.poll() is None:
            process.kill()
            process.wait(5)


def _open_silent(address: str, count: int) -> list[socket.socket]:
    path = address.removeprefix("unix:")
    sockets = []
    for _ in range(count):
        silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        silent.settimeout(5)
        silent.connect(path)
        sockets.append(silent)
    return sockets


def _served_within(daemon: _Corrald, timeout: float) -> float:
    """Seconds until the Lead's GetStats succeeds on a fresh channel (polled, each try bounded)."""
    started = time.monotonic()
    with grpc.insecure_channel(daemon.address) as channel:
        lead = Client(channel, daemon.token, "lead")

        def served() -> bool:
            try:
                lead.board.GetStats(pb.GetStatsRequest(), timeout=1)
            except grpc.RpcError:
                return False
            return True

        wait_until(served, timeout, "the Lead served")
    return time.monotonic() - started


def _wait_all_closed(sockets: list[socket.socket], timeout: float) -> None:
    """Every socket is closed by the daemon (recv returns b'') before `timeout`."""
    open_ = list(sockets)
    deadline = time.monotonic() + timeout
    while open_ and time.monotonic() < deadline:
        readable, _, _ = select.select(open_, [], [], max(0.0, deadline - time.monotonic()))
        for each in readable:
            with contextlib.suppress(OSError):
                if each.recv(4096):
                    continue
            open_.remove(each)
    assert not open_, f"{len(open_)} of {len(sockets)} silent connections still open after {timeout}s"


@pytest.mark.timeout(60)
def test_the_daemon_raises_its_open_files_limit_and_closes_silent_connections(tmp_path):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 4 * SILENT:
        pytest.fail(
            f"the hard limit on open files ({hard}) is below the {4 * SILENT} this test needs: raise it"
            f" for the shell that runs the tests (`ulimit -Hn {4 * SILENT}` as root, a `nofile` line in"
            " /etc/security/limits.conf, LimitNOFILE= for a systemd unit, or --ulimit nofile= for a container)",
            pytrace=False,
        )
    with _corrald(tmp_path, (SILENT - 44, hard)) as daemon:
        assert f"open files limit raised from {SILENT - 44} to {hard}" in daemon.log()
        silent = _open_silent(daemon.address, SILENT)  # more than the limit it started with
        try:
            took = _served_within(daemon, 5)
            assert took < 2, f"the Lead waited {took:.1f}s beside {SILENT} silent connections"
            _wait_all_closed(silent, CLOSED_WITHIN_S)
        finally:
            for each in silent:
                each.close()


@pytest.mark.timeout(60)
def test_silent_connections_past_the_open_files_limit_keep_the_lead_out_only_until_they_are_closed(tmp_path):
    limit = 256  # a hard limit too: nothing to raise, and SILENT connections exceed it
    with _corrald(tmp_path, (limit, limit)) as daemon:
        silent = _open_silent(daemon.address, SILENT)
        try:
            took = _served_within(daemon, CLOSED_WITHIN_S + 3)
            _wait_all_closed(silent, CLOSED_WITHIN_S + 3)  # those kept waiting are closed as quickly once let in
        finally:
            for each in silent:
                each.close()
        assert _served_within(daemon, 5) < 2
        log = daemon.log()
        assert "File descriptor limit reached" not in log, log[-2000:]
        assert "Traceback" not in log, log[-2000:]
    print(f"the Lead was served {took:.1f}s after {SILENT} silent connections")


HTTP2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes.fromhex("000000040000000000")  # and an empty SETTINGS


@pytest.mark.timeout(60)
def test_connections_that_make_no_call_are_closed_and_an_idle_client_reconnects(tmp_path):
    _, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with _corrald(tmp_path, (hard, hard)) as daemon, grpc.insecure_channel(daemon.address) as channel:
        lead = Client(channel, daemon.token, "lead")
        lead.board.GetStats(pb.GetStatsRequest())
        greeted = _open_silent(daemon.address, 20)
        try:
            for each in greeted:
                each.sendall(HTTP2_PREFACE)  # past the handshake, then no call at all
            _wait_all_closed(greeted, 5.0 + 4.0)  # the idle limit, and room for a loaded machine
        finally:
            for each in greeted:
                each.close()
        # The Lead's connection was idle as long and was closed too; its next call reconnects.
        assert lead.board.GetStats(pb.GetStatsRequest(), timeout=5).writer is not None
