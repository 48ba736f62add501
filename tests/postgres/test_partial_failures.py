"""The faults a second daemon exists for, made for real: a COMMIT whose reply is lost (a TCP
proxy in front of PostgreSQL forwards it and drops the answer), a daemon SIGSTOPped while
it holds the board's write lock, a connection that stops forwarding without a reset, and
the server out of reach while a COMMIT is in doubt.

What must hold: a write is answered as what happened to it (committed, not applied, or
COMMIT_IN_DOUBT when the daemon cannot learn which, never "not applied" for a write that
is stored); a stopped or cut-off daemon holds the others up for at most the stall bound
(`--pg-stall-timeout`) plus a second; health says NOT_SERVING while a daemon cannot write,
and SERVING once it writes again; nothing acknowledged is lost.
"""

from __future__ import annotations

import concurrent.futures
import functools
import os
import signal
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc

import corral
from corral.v1 import corral_pb2 as pb
from tests.contract.wire import Daemon, assert_status, rpc_error, spec
from tests.support import wait_until
from tests.support.tcp_proxy import TcpProxy, proxy_in_front_of

from .conftest import SharedBoard

pytestmark = pytest.mark.timeout(90)

STALL_S = 1.0  # --pg-stall-timeout of the daemons here: the bound every wait below is measured against
STALL = ("--pg-stall-timeout", str(STALL_S))
SERVING = health_pb2.HealthCheckResponse.SERVING
NOT_SERVING = health_pb2.HealthCheckResponse.NOT_SERVING


@pytest.fixture
def proxy(shared_board: SharedBoard) -> Iterator[tuple[TcpProxy, str]]:
    with proxy_in_front_of(shared_board.dsn) as made:
        yield made


def _health(daemon: Daemon) -> int:
    return health_pb2_grpc.HealthStub(daemon.channel).Check(health_pb2.HealthCheckRequest(), timeout=5).status


def _serving(daemon: Daemon) -> bool:
    return _health(daemon) == SERVING


def _count(board: SharedBoard, query: str, *params: object) -> int:
    return board.sql(query, params)[0][0]


# ---------------------------------------------------------------- a COMMIT whose reply is lost


def test_writes_whose_commit_reply_is_lost_are_answered_as_committed_once(shared_board, proxy):
    """Each write's COMMIT reaches the server and its reply never comes back: the daemon asks
    the server what became of the transaction and answers OK, and the write is stored once;
    the teammate's credential, shown once, works."""
    tcp, via_proxy = proxy
    daemon = shared_board.daemon("a", dsn=via_proxy, extra_args=(*STALL, "--pg-writers", "1"))
    mate = daemon.add_teammate("ann")

    tcp.drop_commit_reply()
    added = daemon.lead.lead.AddTeammate(pb.AddTeammateRequest(name="bob"), timeout=20)
    assert _count(shared_board, "SELECT count(*) FROM teammates WHERE name = 'bob'") == 1
    bob = daemon.client(added.token, "bob")
    assert bob.board.GetIdentity(pb.GetIdentityRequest(), timeout=5).identity == "bob"

    tcp.drop_commit_reply()
    daemon.lead.board.SendMessage(pb.SendMessageRequest(to=mate.name, body="once"), timeout=20)
    assert _count(shared_board, "SELECT count(*) FROM inbox WHERE body = 'once'") == 1

    tcp.drop_commit_reply()
    created = daemon.create_tasks(*(spec(f"t{i}") for i in range(50)), request_id="fifty")
    assert len(created) == 50
    assert _count(shared_board, "SELECT count(*) FROM tasks") == 50

    assert tcp.dropped_commits == 3
    postgres = daemon.stats().postgres
    assert postgres.commit_outcomes_asked == 3  # each answer came from the server's record
    assert postgres.writable


def test_a_commit_still_in_progress_on_the_server_is_settled_and_run_again_once(shared_board, proxy):
    """The COMMIT never reaches the server and the daemon's side of the connection is closed:
    the server still holds the transaction, in progress. The daemon terminates that backend,
    which aborts it, and runs the batch again: the write is answered OK and stored once."""
    tcp, via_proxy = proxy
    daemon = shared_board.daemon("a", dsn=via_proxy, extra_args=("--pg-stall-timeout", "30", "--pg-writers", "1"))
    mate = daemon.add_teammate("ann")
    tcp.swallow_commit()
    started = time.monotonic()
    daemon.lead.board.SendMessage(pb.SendMessageRequest(to=mate.name, body="settled"), timeout=20)
    assert time.monotonic() - started < 10, "settled by terminating the backend, not by the server's idle timeout"
    assert _count(shared_board, "SELECT count(*) FROM inbox WHERE body = 'settled'") == 1
    assert daemon.stats().postgres.commit_outcomes_asked == 1


def test_a_lost_commit_reply_with_the_server_out_of_reach_is_in_doubt_not_failed(shared_board, proxy):
    """The COMMIT's reply is lost and no new connection can be made: the daemon cannot learn
    the outcome within the stall bound and says so (UNAVAILABLE, COMMIT_IN_DOUBT), though the
    write is stored; health is NOT_SERVING until the server is back and a write commits."""
    tcp, via_proxy = proxy
    daemon = shared_board.daemon("a", dsn=via_proxy, extra_args=(*STALL, "--pg-writers", "1"))
    mate = daemon.add_teammate("ann")

    tcp.drop_commit_reply()
    tcp.refuse_new(True)
    error = rpc_error(daemon.lead.board.SendMessage, pb.SendMessageRequest(to=mate.name, body="maybe"), timeout=20)
    assert_status(error, grpc.StatusCode.UNAVAILABLE, reason="COMMIT_IN_DOUBT")
    assert _count(shared_board, "SELECT count(*) FROM inbox WHERE body = 'maybe'") == 1
    wait_until(lambda: _health(daemon) == NOT_SERVING, 10, "health NOT_SERVING while the board cannot be written")

    tcp.refuse_new(False)
    daemon.lead.board.SendMessage(pb.SendMessageRequest(to=mate.name, body="after"), timeout=20)
    wait_until(lambda: _health(daemon) == SERVING, 10, "health SERVING once a write committed again")
    assert daemon.stats().postgres.writable


def test_the_sdk_sends_a_write_in_doubt_again_and_it_is_applied_once(shared_board, proxy):
    """The Lead's SDK sends each write with a request id: answered COMMIT_IN_DOUBT, then
    COMMIT_FAILED while the server is out of reach, it sends the write again with the
    same id until the daemon can answer, which is then the first call's outcome."""
    tcp, via_proxy = proxy
    daemon = shared_board.daemon("a", dsn=via_proxy, extra_args=(*STALL, "--pg-writers", "1"))
    daemon.add_teammate("ann")
    with corral.Lead.connect(daemon.address, daemon.lead_token) as lead:
        tcp.drop_commit_reply()
        tcp.refuse_new(True)
        back = threading.Timer(3 * STALL_S, tcp.refuse_new, args=(False,))  # the outage's length
        back.start()
        try:
            assert lead.send_message("ann", "exactly once") == ["ann"]
        finally:
            back.cancel()
    assert _count(shared_board, "SELECT count(*) FROM inbox WHERE body = 'exactly once'") == 1
    assert tcp.dropped_commits == 1


# ---------------------------------------------------------------- a daemon stopped holding the lock


def _hold_the_lock(board: SharedBoard, daemon: Daemon) -> concurrent.futures.Future:
    """A Lead write through `daemon` whose job (under the board's write lock) is paused by its
    failpoint; returns its future once the job is running."""
    pool = concurrent.futures.ThreadPoolExecutor(1)
    written = pool.submit(daemon.create_tasks, spec("held-write"), request_id="held")
    pool.shutdown(wait=False)
    wait_until(lambda: "failpoint: sleeping" in daemon.latest_log(), 10, "the write running under the lock")
    return written


def _writes_through(daemon: Daemon, label: str) -> float:
    """Seconds a Lead write through `daemon` took."""
    started = time.monotonic()
    daemon.create_tasks(spec(label), request_id=label)
    return time.monotonic() - started


def test_a_daemon_stopped_holding_the_write_lock_stalls_the_others_for_the_bound_only(shared_board):
    """B is SIGSTOPped while its transaction holds the board's lock: the server ends B's idle
    transaction after the stall bound, writes through A go on, and once B resumes its write is
    answered truthfully: it ran again on a new connection and is stored once."""
    a = shared_board.daemon("a", extra_args=STALL)
    b = shared_board.daemon("b", extra_args=STALL, failpoints="job:lead=sleep:3000:1")
    written = _hold_the_lock(shared_board, b)
    os.kill(b.pid, signal.SIGSTOP)
    try:
        took = _writes_through(a, "through-a")
        assert took < STALL_S + 1 + 2, f"a write through A waited {took:.1f}s behind the stopped daemon"
        assert not written.done()
    finally:
        os.kill(b.pid, signal.SIGCONT)
    assert [task.id for task in written.result(timeout=30)] == ["held-write"]
    assert _count(shared_board, "SELECT count(*) FROM tasks WHERE id = 'held-write'") == 1
    _writes_through(b, "through-b")  # and B writes again


def test_a_daemon_cut_off_mid_transaction_stalls_the_others_for_the_bound_only(shared_board, proxy):
    """B's connections stop forwarding (no reset) while its transaction holds the lock, and new
    ones cannot be made: writes through A go on within the bound; B cuts its silent
    connection, reports NOT_SERVING, and once the network is back answers its write, stored
    once, and serves again."""
    tcp, via_proxy = proxy
    a = shared_board.daemon("a", extra_args=STALL)
    b = shared_board.daemon("b", dsn=via_proxy, extra_args=STALL, failpoints="job:lead=sleep:3000:1")
    written = _hold_the_lock(shared_board, b)
    tcp.refuse_new(True)
    assert tcp.blackhole() > 0
    took = _writes_through(a, "through-a")
    assert took < STALL_S + 1 + 2, f"a write through A waited {took:.1f}s behind the cut-off daemon"
    wait_until(lambda: _health(b) == NOT_SERVING, 15, "B NOT_SERVING while cut off")
    tcp.refuse_new(False)
    try:
        tasks = written.result(timeout=30)
        assert [task.id for task in tasks] == ["held-write"]
    except grpc.RpcError as error:  # answered while the network was away: not applied, as it says
        assert_status(error, grpc.StatusCode.UNAVAILABLE, reason="COMMIT_FAILED")
        assert _count(shared_board, "SELECT count(*) FROM tasks WHERE id = 'held-write'") == 0
        b.create_tasks(spec("held-write"), request_id="held")  # the retry the answer invites
    assert _count(shared_board, "SELECT count(*) FROM tasks WHERE id = 'held-write'") == 1
    _writes_through(b, "through-b")
    wait_until(lambda: _health(b) == SERVING, 15, "B SERVING again")
    assert b.stats().postgres.connections_cut >= 1, b.latest_log()


# ---------------------------------------------------------------- backends terminated under load

FAULT_S = 4.0  # how long the daemons' backends keep being terminated
CHAIN = 60  # tasks in a batch, each but the first depending on the one before: rows sent in a pipeline


def _batch(label: str) -> list[pb.TaskSpec]:
    """A chain of tasks: their rows, and their dependencies', go in as statements of many rows."""
    return [spec(f"{label}-0"), *(spec(f"{label}-{i}", f"{label}-{i - 1}") for i in range(1, CHAIN))]


def _load(daemon: Daemon, name: str, until: float) -> list[str]:
    """Creates batches through `daemon` until `until`; the request ids of those answered OK."""
    answered = []
    number = 0
    while time.monotonic() < until:
        label = f"{name}{number}"
        number += 1
        try:
            daemon.create_tasks(*_batch(label), request_id=label)
            answered.append(label)
        except grpc.RpcError as error:
            assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
    return [*answered, *(f"{name}{n}" for n in range(number) if f"{name}{n}" not in answered)]


def _terminate_backends(board: SharedBoard, until: float) -> int:
    terminated = 0
    while time.monotonic() < until:
        terminated += len(
            board.sql(
                "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
                " WHERE datname = current_database() AND application_name = 'corrald' AND pid != pg_backend_pid()"
            )
        )
        time.sleep(0.02)  # the fault's rhythm, not a wait for something
    return terminated


def test_backends_terminated_mid_transaction_under_load_leave_no_daemon_wedged(shared_board):
    """The daemons' backends are terminated again and again while both write batches with
    dependency rows: each call is answered OK or UNAVAILABLE, and within 10 s of the last
    termination both daemons write again, SERVING; every batch, sent again with its
    request id, is stored exactly once."""
    a = shared_board.daemon("a", extra_args=STALL)
    b = shared_board.daemon("b", extra_args=STALL)
    until = time.monotonic() + FAULT_S
    with concurrent.futures.ThreadPoolExecutor(5) as pool:
        loads = [
            pool.submit(_load, daemon, f"{daemon_label}{n}-", until)
            for n in range(2)
            for daemon_label, daemon in (("a", a), ("b", b))
        ]
        terminated = pool.submit(_terminate_backends, shared_board, until)
        sent = [label for load in loads for label in load.result(timeout=60)]
        assert terminated.result(timeout=60) > 0
    for daemon, label in ((a, "after-a"), (b, "after-b")):
        wait_until(functools.partial(_writes_again, daemon, label), 10, f"{label}: the daemon writes again")
        wait_until(functools.partial(_serving, daemon), 10, f"{label}: SERVING again")
    for label in sent:  # what was answered UNAVAILABLE, sent again; what was answered OK, answered again
        a.create_tasks(*_batch(label), request_id=label)
    stored = _count(shared_board, "SELECT count(*) FROM tasks")
    assert stored == CHAIN * len(sent) + 2
    assert _count(shared_board, "SELECT count(*) FROM deps") == (CHAIN - 1) * len(sent)


def _writes_again(daemon: Daemon, label: str) -> bool:
    try:
        daemon.create_tasks(spec(label), request_id=label)
    except grpc.RpcError as error:
        assert error.code() == grpc.StatusCode.UNAVAILABLE, error.details()
        return False
    return True
