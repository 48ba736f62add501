"""The daemon's memory grows with what it sends, not with what it stores.

A board of 120 tasks with 1 MiB payloads; the daemon's resident memory
(VmRSS of its process) is sampled while clients list it or watch it. A
listing holds one page (3 MiB) at a time, and a Watch stream one feed page
and one message in flight, so four of either stay well under 64 MiB of
growth; before that, each held every payload it had read (over 120 MiB).
"""

from __future__ import annotations

import concurrent.futures
import pathlib
import shutil

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import wait_until
from tests.support.daemons import store_args
from tests.support.memory import peak_rss, rss_mib

from .wire import Client, Daemon, assert_status, module_daemon, spec

MIB = 1024 * 1024
TASKS = 120
GROWTH_LIMIT_MIB = 64
SEND_TIMEOUT_S = 1.5
# A client that reads nothing: its HTTP/2 window stays at 64 KiB, so it
# cannot take in a 1 MiB event on its own (by default the window grows). Each
# such channel has a connection of its own, as separate clients would
# (channels with the same target and options share one).
NON_READING = [
    ("grpc.http2.lookahead_bytes", 64 * 1024),
    ("grpc.http2.bdp_probe", 0),
    ("grpc.use_local_subchannel_pool", 1),
]


@pytest.fixture(scope="module")
def big_board(tmp_path_factory) -> pathlib.Path:
    """A state directory holding TASKS tasks of 1 MiB each, filled once for the module."""
    with module_daemon(tmp_path_factory, "big-board") as daemon:
        for first in range(0, TASKS, 4):  # four 1 MiB payloads to a request, within the daemon's 6 MiB
            daemon.create_tasks(*(spec(f"big-{i:03}", payload=bytes([i]) * MIB) for i in range(first, first + 4)))
        state_dir = daemon.state_dir
    return state_dir


def serve_copy(corrald, big_board: pathlib.Path, tmp_path: pathlib.Path, *extra_args: str) -> Daemon:
    """A fresh daemon on a copy of the big board, so each test measures a process of its own."""
    state_dir = tmp_path / "state"
    shutil.copytree(big_board, state_dir, ignore=shutil.ignore_patterns("*.sock", "*.lock"))
    # On PostgreSQL the board is not in the directory: the copy serves the same schema.
    return corrald(state_dir, extra_args=[*store_args(big_board), *extra_args])


@pytest.mark.timeout(90)
def test_four_concurrent_listings_hold_one_page_each(corrald, big_board, tmp_path):
    daemon = serve_copy(corrald, big_board, tmp_path)
    daemon.lead.board.ListTasks(pb.ListTasksRequest(page_size=1))  # the call path, warmed up

    def list_pages(pages: int) -> list[str]:
        with grpc.insecure_channel(daemon.address) as channel:  # gRPC's default 4 MiB receive limit
            lead = Client(channel, daemon.lead_token, "lead")
            ids: list[str] = []
            token = ""
            for _ in range(pages):
                page = lead.board.ListTasks(pb.ListTasksRequest(page_size=1000, page_token=token))
                assert page.tasks and page.next_page_token, "a page of a larger board is never empty or last"
                ids.extend(t.id for t in page.tasks)
                token = page.next_page_token
            return ids

    with peak_rss(daemon.pid) as memory, concurrent.futures.ThreadPoolExecutor(4) as pool:
        listings = [pool.submit(list_pages, 3) for _ in range(4)]
        lists = [listing.result(timeout=60) for listing in listings]

    growth = memory["peak"] - memory["start"]
    assert growth < GROWTH_LIMIT_MIB, f"RSS grew {growth:.0f} MiB ({memory['start']:.0f} -> {memory['peak']:.0f})"
    # Each page of 1 MiB tasks within 3 MiB holds two, and the pages follow on in order.
    assert all(ids == [f"big-{i:03}" for i in range(6)] for ids in lists), lists[0]


@pytest.mark.timeout(90)
def test_watch_clients_that_do_not_read_hold_little_and_are_ended(corrald, big_board, tmp_path):
    # The lead's stream lane has room for the reader and the four that do not read.
    daemon = serve_copy(
        corrald, big_board, tmp_path, "--stream-send-timeout", str(SEND_TIMEOUT_S), "--streams-per-identity", "5"
    )
    last = f"big-{TASKS - 1:03}"
    channels = [grpc.insecure_channel(daemon.address, options=NON_READING) for _ in range(4)]
    try:
        with peak_rss(daemon.pid) as memory:
            silent = [Client(c, daemon.lead_token, "lead").lead.Watch(pb.WatchRequest(after_seq=0)) for c in channels]
            for call in silent:
                call.initial_metadata()  # the stream is open: its headers go out before it waits for its place
            reader = daemon.watch(0)
            final = reader.next_matching(lambda r: r.task_changed.id == last, timeout=30, what=f"{last}'s event")
            # One of them reads an event now, then stops again: if its stream was
            # not ended yet, its send timeout starts again from here.
            assert next(silent[-1]).task_changed.id == "big-000"
            # Places in the lead's stream lane come free only when the silent
            # streams have ended: each new Watch waits in line until then. With
            # the reader, the four fill the lane, so the last is served only once
            # every silent stream has ended. That may take two send timeouts: the
            # one that read an event, and, under load, one whose first write
            # completed just as the others ended (seen on separate connections
            # too), has a timeout of its own from then.
            late = [daemon.watch(final.seq - 1) for _ in range(4)]
            for stream in late:
                assert stream.next(timeout=2 * SEND_TIMEOUT_S + 8).task_changed.id == last
            for stream in late:
                stream.cancel()

        growth = memory["peak"] - memory["start"]
        assert growth < GROWTH_LIMIT_MIB, f"RSS grew {growth:.0f} MiB ({memory['start']:.0f} -> {memory['peak']:.0f})"

        # The client that reads is not ended: it sees what happens next.
        daemon.create_tasks(spec("after"))
        assert reader.next_matching(lambda r: r.task_changed.id == "after", timeout=5).seq > final.seq
        reader.cancel()

        # Each silent stream was ended, not sent the board: reading it now gives what it
        # had taken in, then the end. Its reason may be gone by now: a connection whose
        # only call has ended is closed as idle after 5 s, and the status with it (the
        # test below reads the reason in time).
        for call in silent:
            taken = 0
            with pytest.raises(grpc.RpcError):
                for _ in call:
                    taken += 1
            assert taken < TASKS, f"the stream sent all {taken} events to a client that was not reading"
    finally:
        for channel in channels:
            channel.close()


@pytest.mark.timeout(60)
def test_a_watch_client_that_reads_again_soon_after_its_end_learns_the_reason(corrald, big_board, tmp_path):
    daemon = serve_copy(
        corrald, big_board, tmp_path, "--stream-send-timeout", str(SEND_TIMEOUT_S), "--streams-per-identity", "1"
    )
    with grpc.insecure_channel(daemon.address, options=NON_READING) as channel:
        silent = Client(channel, daemon.lead_token, "lead").lead.Watch(pb.WatchRequest(after_seq=0))
        silent.initial_metadata()  # in the lead's only stream place, and sending
        # The next Watch waits in line for that place: its first event says the silent one has ended.
        late = daemon.watch(0)
        assert late.next(timeout=SEND_TIMEOUT_S + 8).task_changed.id == "big-000"
        late.cancel()
        taken = 0
        with pytest.raises(grpc.RpcError) as ended:
            for _ in silent:
                taken += 1
        assert_status(ended.value, grpc.StatusCode.UNAVAILABLE, reason="SLOW_CONSUMER")
        assert taken < TASKS, f"the stream sent all {taken} events to a client that was not reading"


@pytest.mark.timeout(60)
def test_an_idle_client_that_does_not_read_is_ended_and_gets_its_claim_on_reopening(corrald):
    daemon = corrald(extra_args=["--stream-send-timeout", str(SEND_TIMEOUT_S)])
    silent_mate, reading_mate = daemon.add_teammate("silent", roles=["heavy"]), daemon.add_teammate("reading")
    daemon.create_tasks(spec("big", payload=b"\x07" * MIB, required_role="heavy"))  # for the silent one only
    reading = reading_mate.idle()
    daemon.wait_open_streams(1)
    with grpc.insecure_channel(daemon.address, options=NON_READING) as channel:
        silent = Client(channel, silent_mate.token, "silent").teammate.Idle(pb.IdleRequest())
        wait_until(lambda: daemon.get_task("big").owner == "silent", 5, "the silent teammate's claim")
        # Its claim (1 MiB) is more than its window takes in: the stream ends on the daemon's side.
        daemon.wait_open_streams(1, timeout=SEND_TIMEOUT_S + 5)
        received: list[str | None] = []
        with pytest.raises(grpc.RpcError) as ended:
            for item in silent:
                received.append(item.WhichOneof("event"))
        assert_status(ended.value, grpc.StatusCode.UNAVAILABLE, reason="SLOW_CONSUMER")
        assert received == ["claim"], "what was handed to gRPC before the end still arrives, then the end"
    # The teammate that reads is neither ended nor sent the claim: its next item is a task of its own.
    light = reading.expect_quiet(0.5, then=lambda: daemon.create_tasks(spec("light")), arrives="claim")
    assert light.task.id == "light"
    # Reopened, and reading now, the teammate gets the claim it holds again.
    again = silent_mate.idle()
    claim = again.next_event("claim")
    assert claim.task.id == "big" and claim.task.payload == b"\x07" * MIB
    again.cancel()
    reading.cancel()


# ---------------------------------------------------------------- what clients send

MESSAGE_MAX_BYTES = 6 * MIB  # the daemon's receive limit (corrald.config)
COMPLETE_TASK = "/corral.v1.TeammateService/CompleteTask"
SETTLE_S = 5.0  # how long the daemon may take to give memory back once the calls are answered


def complete_task_bytes(size: int) -> bytes:
    """A CompleteTask request of `size` bytes on the wire (its result too big for §7: refused)."""
    request = pb.CompleteTaskRequest(task_id="t", claim_token="x" * 32)
    request.result = b"\0" * (size - request.ByteSize() - 5)  # tag and length of a result that size
    data = request.SerializeToString()
    assert len(data) == size
    return data


class RawCaller:
    """CompleteTask calls of prepared bytes, sent as they are (serialized once, not per call)."""

    def __init__(self, daemon: Daemon) -> None:
        self.channel = grpc.insecure_channel(daemon.address, options=[("grpc.max_send_message_length", -1)])
        self.call = self.channel.unary_unary(COMPLETE_TASK, request_serializer=None, response_deserializer=None)

    def send(self, data: bytes, token: str) -> grpc.StatusCode:
        try:
            self.call(data, metadata=[("authorization", f"Bearer {token}")], timeout=60)
        except grpc.RpcError as error:
            return error.code()
        return grpc.StatusCode.OK

    def concurrently(self, data: bytes, token: str, calls: int) -> list[grpc.StatusCode]:
        with concurrent.futures.ThreadPoolExecutor(calls) as pool:
            return [f.result(timeout=60) for f in [pool.submit(self.send, data, token) for _ in range(calls)]]

    def close(self) -> None:
        self.channel.close()


def settles_near(pid: int, start: float, within: float) -> float:
    """Waits until the process's RSS is within `within` MiB above `start`; returns it."""
    try:
        wait_until(lambda: rss_mib(pid) - start < within, SETTLE_S, f"RSS back within {within} MiB of {start:.0f}")
    except AssertionError:
        pass  # the caller's assertion says by how much
    return rss_mib(pid)


@pytest.mark.timeout(90)
def test_sequential_refused_requests_just_under_the_limit_are_let_go_one_by_one(corrald):
    """A refused call's request is freed when the call ends, not left in a reference cycle
    for the cyclic collector (which runs a full pass only every few seconds of load)."""
    daemon = corrald()
    mate = daemon.add_teammate()
    caller = RawCaller(daemon)
    try:
        data = complete_task_bytes(MESSAGE_MAX_BYTES - 1024)
        assert caller.send(data, mate.token) == grpc.StatusCode.INVALID_ARGUMENT  # result over 1 MiB
        assert caller.send(data, "bogus") == grpc.StatusCode.UNAUTHENTICATED
        start = rss_mib(daemon.pid)
        with peak_rss(daemon.pid) as memory:
            for _ in range(12):
                assert caller.send(data, mate.token) == grpc.StatusCode.INVALID_ARGUMENT
                assert caller.send(data, "bogus") == grpc.StatusCode.UNAUTHENTICATED
        after = settles_near(daemon.pid, start, GROWTH_LIMIT_MIB)
    finally:
        caller.close()
    growth = memory["peak"] - start
    assert growth < GROWTH_LIMIT_MIB, f"24 refused 6 MiB requests, one at a time, grew RSS by {growth:.0f} MiB"
    assert after - start < GROWTH_LIMIT_MIB, f"RSS {start:.0f} -> {after:.0f} MiB after the calls"


# The target: 24 concurrent 40 MiB requests, twice with a teammate's
# credential and twice with a bogus one, grow the daemon by less than 256 MiB
# at their peak and leave it within 64 MiB of where it started.
CONCURRENT = 24
ROUNDS = 2
PEAK_LIMIT_MIB = 256


def refused_rounds(daemon: Daemon, data: bytes, expected: dict[str, grpc.StatusCode]) -> tuple[float, float, float]:
    """ROUNDS rounds of CONCURRENT calls of `data` per credential ("mate" or "bogus");
    returns (RSS at the start, the peak, RSS once settled), in MiB."""
    tokens = {"mate": daemon.add_teammate().token, "bogus": "corral-tm-bogus"}
    caller = RawCaller(daemon)
    try:
        start = rss_mib(daemon.pid)
        with peak_rss(daemon.pid) as memory:
            for _ in range(ROUNDS):
                for who, code in expected.items():
                    codes = caller.concurrently(data, tokens[who], CONCURRENT)
                    assert set(codes) == {code}, f"{who}: {codes}"
        return start, memory["peak"], settles_near(daemon.pid, start, GROWTH_LIMIT_MIB)
    finally:
        caller.close()


def assert_bounded(start: float, peak: float, after: float, peak_limit: float = PEAK_LIMIT_MIB) -> None:
    assert peak - start < peak_limit, f"RSS grew {peak - start:.0f} MiB at its peak ({start:.0f} -> {peak:.0f})"
    assert after - start < GROWTH_LIMIT_MIB, f"RSS {start:.0f} -> {after:.0f} MiB once the calls were answered"


@pytest.mark.timeout(120)
def test_concurrent_requests_over_the_limit_are_refused_unread(corrald):
    daemon = corrald()
    too_big = complete_task_bytes(40 * MIB)
    refused = grpc.StatusCode.RESOURCE_EXHAUSTED  # by gRPC, from the length prefix: credential or not
    assert_bounded(*refused_rounds(daemon, too_big, {"mate": refused, "bogus": refused}))


@pytest.mark.timeout(120)
def test_concurrent_requests_just_under_the_limit_are_given_back_once_answered(corrald):
    """These are read: 24 of 6 MiB are 144 MiB, held by gRPC core as they arrive and then
    as the bytes each handler gets, and the teammate's, eight at a time (its lane), are
    parsed too: at most three copies of each (measured 150-300 MiB above the start, on
    either store). Once they are answered the heap is trimmed back (glibc would keep the
    freed memory: the peak grew past 256 MiB round after round, and stayed)."""
    daemon = corrald()
    data = complete_task_bytes(MESSAGE_MAX_BYTES - 1024)
    expected = {"mate": grpc.StatusCode.INVALID_ARGUMENT, "bogus": grpc.StatusCode.UNAUTHENTICATED}
    assert_bounded(*refused_rounds(daemon, data, expected), peak_limit=3 * CONCURRENT * MESSAGE_MAX_BYTES / MIB)
