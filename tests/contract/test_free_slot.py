"""A slot freed under a running handler stays taken until the teammate frees it
(IdleRequest.hold_slots_until_freed, FreeSlot, the Session op free_slot).

A claim that ends under its holder (revoked here) frees its slot on the daemon at once,
while the holder's worker may still be on it: with the opt-in, no claim comes on that
slot until the teammate says FreeSlot, so the next task goes to a teammate that can
start it. Without it, a raw client keeps the old behaviour. Every wait here is for an
event: the order of a stream's events shows what it was not sent.
"""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb

from .wire import STREAM_TIMEOUT_S, SessionStream, Stream, assert_status, rpc_error, spec

pytestmark = pytest.mark.timeout(40)

TRANSPORTS = ["idle", "session"]


def _open(mate, transport: str, *, slots: int = 1, hold: bool = True, busy: tuple[str, ...] = ()) -> Stream:
    request = pb.IdleRequest(slots=slots, hold_slots_until_freed=hold, busy_claim_tokens=list(busy))
    if transport == "session":
        return SessionStream(mate.teammate, pb.SessionRequest(open=request), STREAM_TIMEOUT_S, f"Session({mate.name})")
    return Stream(mate.teammate.Idle(request, timeout=STREAM_TIMEOUT_S), f"Idle({mate.name})")


def _free(mate, stream: Stream, token: str) -> None:
    """FreeSlot as the transport says it: a Session op, else the unary call."""
    if isinstance(stream, SessionStream):
        result = stream.op(free_slot=pb.FreeSlotRequest(claim_token=token)).op_result
        assert result.status.code == grpc.StatusCode.OK.value[0], result.status
    else:
        mate.teammate.FreeSlot(pb.FreeSlotRequest(claim_token=token))


def _revoke(daemon, task_id: str) -> None:
    daemon.lead.lead.RevokeClaim(pb.RevokeClaimRequest(task_id=task_id, reason="plan changed"))


def _next_claim(stream: Stream) -> pb.Claim:
    return stream.next_event("claim", timeout=5.0)


def _status(daemon, name: str) -> int:
    teammates = daemon.lead.board.ListTeammates(pb.ListTeammatesRequest()).teammates
    return next(mate.status for mate in teammates if mate.name == name)


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_revoked_claim_keeps_its_slot_until_the_holder_frees_it(daemon, transport):
    ann, bob = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    daemon.create_tasks(spec("first", lease=30.0, max_attempts=2))
    held = _open(ann, transport)
    first = _next_claim(held)
    _revoke(daemon, "first")
    ended = held.next_event("claim_ended")
    assert ended.claim_token == first.claim_token

    # Ann's worker is still on `first`: the task goes to bob, who can start it.
    daemon.create_tasks(spec("second", lease=30.0, max_attempts=2))
    plain = _open(bob, "idle", hold=False)
    again = _next_claim(plain)
    assert (again.task.id, again.attempt) == ("first", 1)  # a revoke uses up no attempt

    # Ann's worker stops and says so: the slot takes a claim again.
    _free(ann, held, first.claim_token)
    second = _next_claim(held)
    assert (second.task.id, second.attempt) == ("second", 1)
    assert [r.WhichOneof("event") for r in held.received if r.WhichOneof("event")] == [
        "claim",
        "claim_ended",
        "claim",
    ]
    held.cancel()
    plain.cancel()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_completing_frees_the_slot_and_hands_off_the_next_claim(daemon, transport):
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("a", lease=30.0, priority=2), spec("b", lease=30.0, priority=1))
    stream = _open(ann, transport)
    a = _next_claim(stream)
    if isinstance(stream, SessionStream):
        answered = stream.complete(a)
        assert answered.op_result.status.code == 0
        b = answered.claim if answered.HasField("claim") else _next_claim(stream)
    else:
        ann.complete(a)
        b = _next_claim(stream)
    assert b.task.id == "b"
    stream.cancel()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_busy_claim_tokens_take_slots_on_a_new_stream_until_freed(daemon, transport):
    ann, bob = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    stream = _open(ann, transport, slots=1, busy=("work-of-a-broken-stream",))
    daemon.create_tasks(spec("t", lease=30.0))
    plain = _open(bob, "idle", hold=False)
    assert _next_claim(plain).task.id == "t"

    _free(ann, stream, "a-token-ann-never-held")  # changes nothing
    _free(ann, stream, "work-of-a-broken-stream")
    daemon.create_tasks(spec("u", lease=30.0))
    assert _next_claim(stream).task.id == "u"
    stream.cancel()
    plain.cancel()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_without_the_opt_in_a_revoke_frees_the_slot_at_once(daemon, transport):
    """A raw client that never says hold_slots_until_freed keeps the old behaviour, and
    its FreeSlot changes nothing."""
    ann = daemon.add_teammate("ann")
    daemon.create_tasks(spec("first", lease=30.0))
    stream = _open(ann, transport, hold=False)
    first = _next_claim(stream)
    _revoke(daemon, "first")
    assert stream.next_event("claim_ended").claim_token == first.claim_token
    again = _next_claim(stream)  # the slot is free at once: the revoked task comes back
    assert again.task.id == "first" and again.claim_token != first.claim_token
    _free(ann, stream, first.claim_token)
    stream.cancel()


@pytest.mark.parametrize("transport", TRANSPORTS)
def test_a_bad_free_slot_is_refused_and_frees_nothing(daemon, transport):
    ann, bob = daemon.add_teammate("ann"), daemon.add_teammate("bob")
    daemon.create_tasks(spec("first", lease=30.0))
    stream = _open(ann, transport)
    first = _next_claim(stream)
    _revoke(daemon, "first")
    stream.next_event("claim_ended")

    for token in ("", "x" * 129):
        if isinstance(stream, SessionStream):
            result = stream.op(free_slot=pb.FreeSlotRequest(claim_token=token)).op_result
            assert result.status.code == grpc.StatusCode.INVALID_ARGUMENT.value[0], result.status
            assert "claim_token" in result.status.message
        else:
            error = rpc_error(ann.teammate.FreeSlot, pb.FreeSlotRequest(claim_token=token))
            assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, field="claim_token")

    # The slot is still taken: the revoked task goes to bob, not back to ann.
    plain = _open(bob, "idle", hold=False)
    assert _next_claim(plain).task.id == "first"
    _free(ann, stream, first.claim_token)
    daemon.create_tasks(spec("next", lease=30.0))
    assert _next_claim(stream).task.id == "next"
    stream.cancel()
    plain.cancel()


@pytest.mark.parametrize("transport", TRANSPORTS)
@pytest.mark.parametrize(
    ("slots", "hold", "busy"),
    [
        (1, False, ("tok",)),  # busy tokens without the opt-in
        (1, True, ("a", "b")),  # more than slots
        (2, True, ("",)),  # an empty token
        (1, True, ("x" * 129,)),  # too long
    ],
)
def test_bad_busy_claim_tokens_refuse_the_opening_and_write_nothing(daemon, transport, slots, hold, busy):
    ann = daemon.add_teammate("ann")
    stream = _open(ann, transport, slots=slots, hold=hold, busy=busy)
    code, details = stream.wait_end()
    assert code == grpc.StatusCode.INVALID_ARGUMENT, details
    assert "busy_claim_tokens" in details
    assert _status(daemon, "ann") == pb.TEAMMATE_STATUS_OFFLINE  # never recorded online
