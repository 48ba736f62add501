"""A task's live output through the wire, on Idle + unary and on Session: AppendOutput from
the live claim, TailOutput following from before the first append agrees with it byte for
byte and offset for offset and ends when the attempt does; a tail resumed at an offset
neither skips nor repeats; the limits, bad input and dead claims are refused with the right
status and store nothing; who may tail which task; a follower is woken by its own claim's
appends and end alone."""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import STREAM_TIMEOUT_S, SessionStream, Stream, assert_op_status, assert_status, rpc_error, spec

pytestmark = pytest.mark.timeout(60)

TRANSPORTS = ["idle", "session"]


def _open(mate, transport: str) -> Stream:
    if transport == "session":
        return mate.session()
    return mate.idle()


def _append(mate, stream: Stream, claim: pb.Claim, data: bytes) -> pb.AppendOutputResponse:
    """AppendOutput as the transport says it: a Session op, else the unary call."""
    request = pb.AppendOutputRequest(task_id=claim.task.id, claim_token=claim.claim_token, data=data)
    if isinstance(stream, SessionStream):
        result = stream.op(output=request).op_result
        assert result.status.code == grpc.StatusCode.OK.value[0], result.status
        return result.output
    return mate.teammate.AppendOutput(request)


def _refused(mate, stream: Stream, request: pb.AppendOutputRequest):
    """The status an append is refused with (code, reason, field), on either transport."""
    if isinstance(stream, SessionStream):
        status = stream.op(output=request).op_result.status
        assert status.code != 0, "the append was taken"
        return status
    return rpc_error(mate.teammate.AppendOutput, request)


def _tail(client, task_id: str, attempt: int = 0, offset: int = 0, follow: bool = True) -> Stream:
    request = pb.TailOutputRequest(task_id=task_id, attempt=attempt, offset=offset, follow=follow)
    return Stream(client.board.TailOutput(request, timeout=STREAM_TIMEOUT_S), f"TailOutput({task_id})")


def _read_to_end(tail: Stream, start: int = 0) -> tuple[bytes, list[pb.OutputChunk]]:
    """Every chunk to the end chunk, checking each starts where the last one stopped."""
    chunks: list[pb.OutputChunk] = []
    at = start
    for _ in range(10_000):
        chunk = tail.next(10)
        chunks.append(chunk)
        assert chunk.offset == at, f"a gap or a repeat: chunk at {chunk.offset}, expected {at}"
        assert len(chunk.data) <= 64 * 1024
        at += len(chunk.data)
        if chunk.end:
            assert not chunk.data
            break
    assert tail.wait_end(5)[0] == grpc.StatusCode.OK
    return b"".join(chunk.data for chunk in chunks), chunks


def _stored(daemon, task_id: str, attempt: int = 0) -> bytes:
    """What a tail without follow reads now."""
    tail = _tail(daemon.lead, task_id, attempt, follow=False)
    assert tail.wait_end(5)[0] == grpc.StatusCode.OK
    return b"".join(chunk.data for chunk in tail.received)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_tail_from_before_the_first_append_follows_every_byte_and_ends_with_the_attempt(daemon, transport):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"))
    stream = _open(ann, transport)
    claim = stream.next_event("claim", timeout=5.0)
    tail = _tail(daemon.lead, "a")
    parts = [b"step 1\n", bytes(range(256)) * 200, b"", b"\x00\xff tail\n", b"x" * (64 * 1024)]
    sent, sizes = b"", []
    for part in filter(None, parts):
        answer = _append(ann, stream, claim, part)
        sent += part
        assert (answer.attempt, answer.size) == (claim.attempt, len(sent))
        sizes.append(answer.size)
    assert claim.attempt == 1
    if transport == "session":
        stream.complete(claim)
    else:
        ann.complete(claim)
    got, chunks = _read_to_end(tail)
    assert got == sent
    assert chunks[-1] == pb.OutputChunk(attempt=1, offset=len(sent), end=True)
    assert all(chunk.attempt == 1 for chunk in chunks)
    assert _stored(daemon, "a") == sent and _stored(daemon, "a", 1) == sent
    stream.cancel()


def test_a_tail_resumed_at_an_offset_neither_skips_nor_repeats(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"))
    stream = ann.idle()
    claim = stream.next_event("claim", timeout=5.0)
    sent = b""
    for n in range(20):
        part = f"line {n}: ".encode() + bytes([n]) * (n * 997)
        _append(ann, stream, claim, part)
        sent += part
    # A reader that stopped part-way (even inside a stored chunk) picks up where it was.
    for offset in (0, 1, 5, 1234, len(sent) // 2, len(sent) - 1, len(sent)):
        tail = _tail(daemon.lead, "a", offset=offset, follow=False)
        assert tail.wait_end(5)[0] == grpc.StatusCode.OK
        assert [c.offset for c in tail.received] == sorted({c.offset for c in tail.received})
        assert b"".join(c.data for c in tail.received) == sent[offset:]
        assert not any(c.end for c in tail.received), "the attempt has not ended"
    # Following from the middle, then more appends, then the end.
    middle = len(sent) // 3
    tail = _tail(daemon.lead, "a", offset=middle)
    more = b"and then some"
    _append(ann, stream, claim, more)
    ann.complete(claim)
    got, chunks = _read_to_end(tail, start=middle)
    assert got == (sent + more)[middle:]
    # At the end of an ended attempt: only the end chunk.
    tail = _tail(daemon.lead, "a", offset=len(sent + more), follow=False)
    assert tail.wait_end(5)[0] == grpc.StatusCode.OK
    assert list(tail.received) == [pb.OutputChunk(attempt=1, offset=len(sent + more), end=True)]
    stream.cancel()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_each_attempt_is_its_own_output_and_a_release_ends_a_following_tail(daemon, transport):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a", max_attempts=3))
    stream = _open(ann, transport)
    first = stream.next_event("claim", timeout=5.0)
    _append(ann, stream, first, b"first try")
    tail = _tail(daemon.lead, "a", attempt=1)
    fail = pb.FailTaskRequest(task_id="a", claim_token=first.claim_token, error="no", retryable=True)
    if transport == "session":
        assert stream.op(fail=fail).op_result.status.code == 0
    else:
        ann.teammate.FailTask(fail)
    assert _read_to_end(tail)[0] == b"first try"
    second = stream.next_event("claim", timeout=10.0)
    assert second.attempt == 2
    tail = _tail(daemon.lead, "a")  # the latest: attempt 2
    _append(ann, stream, second, b"second try")
    ann.teammate.ReleaseTask(pb.ReleaseTaskRequest(task_id="a", claim_token=second.claim_token))
    got, chunks = _read_to_end(tail)
    assert got == b"second try" and chunks[-1].attempt == 2 and chunks[-1].end
    assert _stored(daemon, "a", 1) == b"first try"
    for attempt in (3, 99):
        error = rpc_error(
            lambda attempt=attempt: list(
                daemon.lead.board.TailOutput(pb.TailOutputRequest(task_id="a", attempt=attempt), timeout=10)
            )
        )
        assert_status(error, grpc.StatusCode.NOT_FOUND, reason="ATTEMPT_NOT_FOUND")
    stream.cancel()


def test_unknown_tasks_unclaimed_tasks_and_bad_offsets_are_refused(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"), spec("b", "a"))
    stream = ann.idle()
    claim = stream.next_event("claim", timeout=5.0)
    _append(ann, stream, claim, b"12345")

    def tail_error(**fields):
        return rpc_error(lambda: list(daemon.lead.board.TailOutput(pb.TailOutputRequest(**fields), timeout=10)))

    assert_status(tail_error(task_id="nope"), grpc.StatusCode.NOT_FOUND)
    assert_status(tail_error(task_id="b"), grpc.StatusCode.NOT_FOUND, reason="ATTEMPT_NOT_FOUND")
    assert_status(tail_error(task_id="a", offset=6), grpc.StatusCode.INVALID_ARGUMENT, field="offset")
    assert_status(tail_error(task_id="a", offset=-1), grpc.StatusCode.INVALID_ARGUMENT, field="offset")
    assert_status(tail_error(task_id="a", attempt=-1), grpc.StatusCode.INVALID_ARGUMENT, field="attempt")
    assert_status(tail_error(task_id=""), grpc.StatusCode.INVALID_ARGUMENT, field="task_id")
    stream.cancel()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_bad_appends_are_refused_and_store_nothing(daemon, transport):
    ann = daemon.add_teammate("ann")
    bob = daemon.add_teammate("bob")
    daemon.create_tasks(spec("a"), spec("b"), spec("gone"))
    stream = _open(ann, transport)
    claim = stream.next_event("claim", timeout=5.0)
    bob_stream = bob.idle()
    bobs = bob_stream.next_event("claim", timeout=5.0)
    _append(ann, stream, claim, b"kept")

    def request(data: bytes = b"x", *, task_id: str = claim.task.id, token: str = claim.claim_token):
        return pb.AppendOutputRequest(task_id=task_id, claim_token=token, data=data)

    cases = [
        (request(b"x" * (64 * 1024 + 1)), grpc.StatusCode.INVALID_ARGUMENT, {"field": "data"}),
        (request(b""), grpc.StatusCode.INVALID_ARGUMENT, {"field": "data"}),
        (request(token=bobs.claim_token), grpc.StatusCode.FAILED_PRECONDITION, {"reason": "CLAIM_TOKEN_MISMATCH"}),
        (request(task_id=bobs.task.id), grpc.StatusCode.FAILED_PRECONDITION, {"reason": "CLAIM_TOKEN_MISMATCH"}),
        (request(task_id="nope"), grpc.StatusCode.NOT_FOUND, {}),
    ]
    for bad, code, details in cases:
        _check(_refused(ann, stream, bad), code, **details)
    # bob's append to ann's task: not the holder.
    _check(rpc_error(bob.teammate.AppendOutput, request()), grpc.StatusCode.FAILED_PRECONDITION)
    # A dead claim: completed (the conformance tests try every other way a claim ends).
    if isinstance(stream, SessionStream):
        stream.complete(claim)
    else:
        ann.complete(claim)
    _check(_refused(ann, stream, request()), grpc.StatusCode.FAILED_PRECONDITION, reason="CLAIM_TOKEN_MISMATCH")
    assert _stored(daemon, claim.task.id, claim.attempt) == b"kept"
    assert _stored(daemon, bobs.task.id) == b""
    stream.cancel()
    bob_stream.cancel()


def _check(error, code: grpc.StatusCode, **details) -> None:
    """`assert_status` for a unary call's error or a Session op's status."""
    if isinstance(error, grpc.RpcError):
        assert_status(error, code, **details)
    else:
        assert_op_status(error, code, **details)


def test_appends_past_the_output_limit_are_refused_whole(corrald):
    daemon = corrald(extra_args=["--max-output-bytes", "100"])
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"))
    for transport in TRANSPORTS:
        if transport == "session":
            daemon.create_tasks(spec("b"))
        stream = _open(ann, transport)
        claim = stream.next_event("claim", timeout=5.0)
        assert _append(ann, stream, claim, b"x" * 60).size == 60
        refused = _refused(
            ann, stream, pb.AppendOutputRequest(task_id=claim.task.id, claim_token=claim.claim_token, data=b"y" * 41)
        )
        _check(refused, grpc.StatusCode.RESOURCE_EXHAUSTED, reason="OUTPUT_LIMIT")
        assert _append(ann, stream, claim, b"z" * 40).size == 100
        assert _stored(daemon, claim.task.id) == b"x" * 60 + b"z" * 40
        ann.complete(claim)
        stream.cancel()


def test_who_may_tail_which_task(daemon):
    ann = daemon.add_teammate("ann", roles=["r-ann"])
    bob = daemon.add_teammate("bob", roles=["r-bob"])
    cat = daemon.add_teammate("cat", roles=["r-cat"])
    viewer = daemon.client(daemon.lead.lead.AddViewer(pb.AddViewerRequest(name="eve")).token, "eve")
    daemon.create_tasks(
        spec("dep", required_role="r-ann"),
        spec("mine", "dep", required_role="r-bob"),
        spec("other", required_role="r-cat"),
    )
    ann_stream = ann.idle()
    dep = ann_stream.next_event("claim", timeout=5.0)
    _append(ann, ann_stream, dep, b"dep log")
    ann.complete(dep)
    bob_stream = bob.idle()
    mine = bob_stream.next_event("claim", timeout=5.0)
    assert mine.task.id == "mine"
    cat_stream = cat.idle()
    other = cat_stream.next_event("claim", timeout=5.0)
    assert other.task.id == "other"

    def tail_of(client, task_id: str) -> bytes:
        tail = _tail(client, task_id, follow=False)
        code, details = tail.wait_end(5)
        assert code == grpc.StatusCode.OK, details
        return b"".join(chunk.data for chunk in tail.received)

    assert tail_of(bob, "mine") == b"", "its own task"
    assert tail_of(bob, "dep") == b"dep log", "a dependency of its task"
    assert tail_of(ann, "dep") == b"dep log", "a task it held"
    assert tail_of(viewer, "other") == b"" and tail_of(viewer, "dep") == b"dep log"
    assert tail_of(daemon.lead, "other") == b""
    for client, task_id in ((cat, "mine"), (cat, "dep"), (ann, "other"), (bob, "other")):
        tail = _tail(client, task_id, follow=False)
        assert tail.wait_end(5)[0] == grpc.StatusCode.PERMISSION_DENIED
    # A viewer writes no output.
    error = rpc_error(
        viewer.teammate.AppendOutput, pb.AppendOutputRequest(task_id="other", claim_token=other.claim_token, data=b"x")
    )
    assert_status(error, grpc.StatusCode.PERMISSION_DENIED)
    for stream in (ann_stream, bob_stream, cat_stream):
        stream.cancel()


def test_a_follower_waits_quietly_then_gets_the_next_append(daemon):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a"))
    stream = ann.idle()
    claim = stream.next_event("claim", timeout=5.0)
    _append(ann, stream, claim, b"one")
    tail = _tail(daemon.lead, "a", offset=3)
    assert tail.try_next(0.3) is None, "a follower sent something before any new append"
    _append(ann, stream, claim, b"two")
    chunk = tail.next(5)  # the append is the marker: whatever came first would be read here
    assert (chunk.offset, chunk.data, chunk.end) == (3, b"two", False)
    tail.cancel()
    stream.cancel()


def follower_wakeups(daemon) -> float:
    """How many times the daemon has woken a TailOutput follower."""
    return daemon.metrics()["corral_output_follower_wakeups_total"]


def test_a_follower_is_woken_by_its_own_claims_appends_and_end_alone(corrald):
    daemon = corrald(extra_args=["--metrics", "127.0.0.1:0"])
    ann, bob = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    daemon.create_tasks(spec("a"), spec("b"))
    ann_stream = ann.idle()
    mine = ann_stream.next_event("claim", timeout=5.0)
    bob_stream = bob.idle()  # once ann holds "a": bob's claim is the other one
    theirs = bob_stream.next_event("claim", timeout=5.0)
    assert (mine.task.id, theirs.task.id) == ("a", "b")
    tail = _tail(daemon.lead, "a")
    _append(ann, ann_stream, mine, b"a1")
    assert tail.next(5).data == b"a1"  # sent: from here on the follower holds its claim's event
    before = follower_wakeups(daemon)
    # The rest of the board works: another claim's appends and end, and other events.
    for n in range(20):
        _append(bob, bob_stream, theirs, f"b{n} ".encode())
    bob.teammate.RenewLease(pb.RenewLeaseRequest(task_id="b", claim_token=theirs.claim_token, progress="half"))
    daemon.create_tasks(spec("c", required_role="nobody"))
    bob.complete(theirs)
    _append(ann, ann_stream, mine, b"a2")
    assert tail.next(5) == pb.OutputChunk(attempt=1, offset=2, data=b"a2")
    assert follower_wakeups(daemon) - before == 1, "woken by another claim's work, or not by its own append"
    ann.complete(mine)
    assert tail.next(5) == pb.OutputChunk(attempt=1, offset=4, end=True)
    assert tail.wait_end(5)[0] == grpc.StatusCode.OK
    assert follower_wakeups(daemon) - before == 2, "its claim's end woke it once"
    ann_stream.cancel()
    bob_stream.cancel()
