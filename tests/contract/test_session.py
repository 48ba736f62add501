"""The Session stream through the generated stubs: ops, op ids, handoff and what is refused."""

from __future__ import annotations

import grpc
import pytest
from google.rpc import code_pb2, error_details_pb2

from corral.v1 import corral_pb2 as pb

from .wire import spec

pytestmark = pytest.mark.timeout(60)


def _reason(status) -> str:
    for detail in status.details:
        info = error_details_pb2.ErrorInfo()
        if detail.Unpack(info):
            return info.reason
    return ""


def _first_claim(session) -> pb.Claim:
    return session.next_event("claim")


def test_a_completion_carries_the_next_claim_in_the_same_response(daemon):
    daemon.create_tasks(spec("a"), spec("b"))
    ada = daemon.client(daemon.add_teammate("ada").token, "ada")
    session = ada.session()
    first = _first_claim(session)
    response = session.complete(first, b"first result")
    assert response.op_result.status.code == code_pb2.OK
    assert response.op_result.result == b"first result"
    assert response.op_result.task.state == pb.TASK_STATE_COMPLETED
    assert response.WhichOneof("event") == "claim", "the handoff rides with the op result"
    second = response.claim
    assert {first.task.id, second.task.id} == {"a", "b"}
    assert second.fence > first.fence
    done = session.complete(second)
    assert done.op_result.status.code == code_pb2.OK
    assert done.WhichOneof("event") is None  # nothing left to claim
    assert {task.state for task in daemon.all_tasks()} == {pb.TASK_STATE_COMPLETED}
    stats = daemon.stats()
    assert (stats.claims, stats.claims_handed_off) == (2, 1), "the second claim cost no commit of its own"
    session.cancel()


def test_an_op_sent_again_is_answered_from_its_record_and_runs_once(daemon):
    daemon.create_tasks(spec("a"), spec("b"))
    ada = daemon.client(daemon.add_teammate("ada").token, "ada")
    session = ada.session()
    claim = _first_claim(session)
    renewed = session.op("renew-1", renew=pb.RenewLeaseRequest(task_id=claim.task.id, claim_token=claim.claim_token))
    assert renewed.op_result.status.code == code_pb2.OK
    again = session.op("renew-1", renew=pb.RenewLeaseRequest(task_id=claim.task.id, claim_token=claim.claim_token))
    assert again.op_result.lease_expire_time == renewed.op_result.lease_expire_time, "the recorded lease end"
    first = session.complete(claim, b"r", op_id="done-1")
    repeat = session.complete(claim, b"r", op_id="done-1")
    assert repeat.op_result.status.code == code_pb2.OK
    assert repeat.op_result.result == b"r"
    assert repeat.WhichOneof("event") is None, "a repeated op hands nothing off twice"
    assert first.WhichOneof("event") == "claim"
    other = session.complete(claim, b"different", op_id="done-1")
    assert other.op_result.status.code == code_pb2.INVALID_ARGUMENT, "same op id, different body"
    assert daemon.get_task(claim.task.id).result == b"r"
    session.cancel()


def test_claim_errors_come_back_in_op_results_and_the_stream_goes_on(daemon):
    daemon.create_tasks(spec("a"))
    ada = daemon.client(daemon.add_teammate("ada").token, "ada")
    bob = daemon.client(daemon.add_teammate("bob").token, "bob")
    session = ada.session()
    claim = _first_claim(session)
    bob_session = bob.session()
    stolen = bob_session.complete(claim)
    assert stolen.op_result.status.code == code_pb2.FAILED_PRECONDITION
    assert _reason(stolen.op_result.status) == "CLAIM_TOKEN_MISMATCH"
    missing = bob_session.op(renew=pb.RenewLeaseRequest(task_id="nope", claim_token="x"))
    assert missing.op_result.status.code == code_pb2.NOT_FOUND
    no_op_id = bob_session.op(op_id="", ack=pb.AckMessagesRequest(through_seq=0))
    assert no_op_id.op_result.status.code == code_pb2.INVALID_ARGUMENT
    long_op_id = bob_session.op(op_id="x" * 65, ack=pb.AckMessagesRequest(through_seq=0))
    assert long_op_id.op_result.status.code == code_pb2.INVALID_ARGUMENT
    beyond = bob_session.op(ack=pb.AckMessagesRequest(through_seq=99))
    assert beyond.op_result.status.code == code_pb2.INVALID_ARGUMENT
    empty = bob_session.op()
    assert empty.op_result.status.code == code_pb2.INVALID_ARGUMENT, "no op at all"
    assert daemon.get_task("a").state == pb.TASK_STATE_IN_PROGRESS
    assert session.complete(claim).op_result.status.code == code_pb2.OK
    session.cancel()
    bob_session.cancel()


def test_the_first_message_must_be_open_and_only_the_first(daemon):
    ada = daemon.client(daemon.add_teammate("ada").token, "ada")
    not_open = ada.session(first=pb.SessionRequest(op_id="1", ack=pb.AckMessagesRequest(through_seq=0)))
    assert not_open.wait_end()[0] == grpc.StatusCode.INVALID_ARGUMENT
    session = ada.session()
    session.send(pb.SessionRequest(op_id="2", open=pb.IdleRequest()))
    assert session.wait_end()[0] == grpc.StatusCode.INVALID_ARGUMENT


def test_a_second_stream_supersedes_the_session(daemon):
    ada = daemon.client(daemon.add_teammate("ada").token, "ada")
    session = ada.session()
    daemon.wait_open_streams(1)
    idle = ada.idle()
    assert session.wait_end()[0] == grpc.StatusCode.ABORTED
    idle.cancel()


def test_removing_the_teammate_ends_its_session(daemon):
    ada = daemon.client(daemon.add_teammate("ada").token, "ada")
    session = ada.session()
    daemon.wait_open_streams(1)
    daemon.lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="ada"))
    assert session.wait_end(2.0)[0] == grpc.StatusCode.UNAUTHENTICATED


def test_protocol_messages_come_before_a_claim_on_a_session(daemon):
    daemon.create_tasks(spec("a"), spec("b"))
    ada = daemon.client(daemon.add_teammate("ada").token, "ada")
    session = ada.session()
    claim = _first_claim(session)
    daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name="ada", reason="done for today"))
    shutdown = session.next_event("shutdown_request")
    response = session.complete(claim)
    assert response.op_result.status.code == code_pb2.OK
    assert response.WhichOneof("event") is None, "no claim while a shutdown request is pending"
    assert session.expect_quiet(0.3, then=lambda: daemon.get_task("b")).state == pb.TASK_STATE_PENDING
    ada.teammate.RespondShutdown(pb.RespondShutdownRequest(request_id=shutdown.request_id, approve=False))
    ack = session.op(ack=pb.AckMessagesRequest(through_seq=shutdown.seq))
    assert ack.op_result.status.code == code_pb2.OK
    assert session.next_event("claim").task.id == "b"
    session.cancel()


def test_unknown_fields_in_an_op_answer_invalid_argument_and_the_stream_goes_on(daemon):
    daemon.create_tasks(spec("a"))
    ada = daemon.client(daemon.add_teammate("ada").token, "ada")
    session = ada.session()
    claim = _first_claim(session)
    request = pb.SessionRequest(op_id="odd", ack=pb.AckMessagesRequest(through_seq=0))
    odd = pb.SessionRequest.FromString(request.SerializeToString() + b"\xf8\x07\x01")  # field 127, varint 1
    session.send(odd)
    response = session.next()
    assert response.op_result.op_id == "odd"
    assert response.op_result.status.code == code_pb2.INVALID_ARGUMENT
    assert session.complete(claim).op_result.status.code == code_pb2.OK
    session.cancel()
