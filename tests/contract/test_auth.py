"""Identity comes from the credential alone (design §2.8, §4 errors, strict requests).

Every RPC is found by walking the service descriptors of corral.v1, so an RPC
added to the proto is covered without touching this file.
"""

from __future__ import annotations

import dataclasses

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from corral.v1 import corral_pb2 as pb

from .wire import assert_status, bearer, module_daemon, rpc_error, spec, ts_seconds

SERVICES = list(pb.DESCRIPTOR.services_by_name.values())
METHODS = [method for service in SERVICES for method in service.methods]
LEAD_METHODS = [m for m in METHODS if m.containing_service.name == "LeadService"]
TEAMMATE_METHODS = [m for m in METHODS if m.containing_service.name == "TeammateService"]


def _path(method) -> str:
    return f"/{method.containing_service.full_name}/{method.name}"


def _input_class(method):
    return getattr(pb, method.input_type.name)


def _output_class(method):
    return getattr(pb, method.output_type.name)


def call_raw(channel: grpc.Channel, method, payload: bytes, metadata, timeout: float = 5.0):
    """Sends raw request bytes; for a server stream, returns its first response (or None at its end).
    A client stream (bidirectional or not) sends the bytes as its one message and then half-closes."""
    if method.client_streaming and not method.server_streaming:
        upload = channel.stream_unary(
            _path(method), request_serializer=lambda b: b, response_deserializer=_output_class(method).FromString
        )
        return upload(iter([payload]), metadata=metadata, timeout=timeout)
    if method.client_streaming:
        stub = channel.stream_stream(
            _path(method), request_serializer=lambda b: b, response_deserializer=_output_class(method).FromString
        )
        call = stub(iter([payload]), metadata=metadata, timeout=timeout)
        try:
            for response in call:
                return response
            return None
        finally:
            call.cancel()
    if method.server_streaming:
        stub = channel.unary_stream(
            _path(method), request_serializer=lambda b: b, response_deserializer=_output_class(method).FromString
        )
        call = stub(payload, metadata=metadata, timeout=timeout)
        try:
            for response in call:
                return response
            return None
        finally:
            call.cancel()
    stub = channel.unary_unary(
        _path(method), request_serializer=lambda b: b, response_deserializer=_output_class(method).FromString
    )
    return stub(payload, metadata=metadata, timeout=timeout)


def _code_of(channel, method, payload: bytes, metadata, timeout: float = 5.0) -> grpc.StatusCode:
    try:
        call_raw(channel, method, payload, metadata, timeout)
    except grpc.RpcError as error:
        return error.code()
    return grpc.StatusCode.OK


def _empty(method) -> bytes:
    return _input_class(method)().SerializeToString()


@dataclasses.dataclass
class AuthWorld:
    daemon: object
    teammate_token: str
    revoked_token: str


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    with module_daemon(tmp_path_factory, "auth") as running:
        teammate = running.add_teammate("member")
        revoked = running.add_teammate("gone")
        running.lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="gone"))
        yield AuthWorld(running, teammate.token, revoked.token)


def test_the_descriptor_walk_finds_the_services():
    names = {s.name for s in SERVICES}
    assert {"LeadService", "TeammateService", "BoardService"} <= names
    assert len(METHODS) >= 20


BAD_CREDENTIALS = {
    "none": lambda w: [],
    "bearer_without_token": lambda w: [("authorization", "Bearer")],
    "bearer_blank": lambda w: [("authorization", "Bearer  ")],
    "basic_scheme": lambda w: [("authorization", "Basic xyz")],
    "basic_with_lead_secret": lambda w: [("authorization", f"Basic {w.daemon.lead_token}")],
    "token_without_scheme": lambda w: [("authorization", w.daemon.lead_token)],
    "wrong_token": lambda w: bearer("corral-lead-not-the-token"),
    "lead_token_prefix": lambda w: bearer(w.daemon.lead_token[:-1]),
    "lead_token_extended": lambda w: bearer(w.daemon.lead_token + "x"),
    "revoked_teammate": lambda w: bearer(w.revoked_token),
    "other_header": lambda w: [("x-authorization", f"Bearer {w.daemon.lead_token}")],
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(BAD_CREDENTIALS))
def test_every_rpc_refuses_a_missing_or_invalid_credential(world, case):
    metadata = BAD_CREDENTIALS[case](world)
    wrong = {}
    for method in METHODS:
        code = _code_of(world.daemon.channel, method, _empty(method), metadata)
        if code != grpc.StatusCode.UNAUTHENTICATED:
            wrong[_path(method)] = code.name
    assert not wrong, f"expected UNAUTHENTICATED for {case}, got {wrong}"


@pytest.mark.timeout(60)
def test_a_teammate_may_not_call_lead_rpcs(world):
    metadata = bearer(world.teammate_token)
    wrong = {}
    for method in LEAD_METHODS:
        try:
            call_raw(world.daemon.channel, method, _empty(method), metadata)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.PERMISSION_DENIED:
                wrong[_path(method)] = error.code().name
            else:
                assert_status(error, grpc.StatusCode.PERMISSION_DENIED, reason="PERMISSION_DENIED")
        else:
            wrong[_path(method)] = "OK"
    assert not wrong, f"expected PERMISSION_DENIED, got {wrong}"


@pytest.mark.timeout(60)
def test_the_lead_may_not_call_teammate_rpcs(world):
    metadata = bearer(world.daemon.lead_token)
    wrong = {}
    for method in TEAMMATE_METHODS:
        code = _code_of(world.daemon.channel, method, _empty(method), metadata)
        if code != grpc.StatusCode.PERMISSION_DENIED:
            wrong[_path(method)] = code.name
    assert not wrong, f"expected PERMISSION_DENIED, got {wrong}"


def _allowed_token(world, method) -> str:
    return world.teammate_token if method in TEAMMATE_METHODS else world.daemon.lead_token


GARBAGE = {
    "bad_varint_tag": b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",
    "truncated_length": b"\x0a\x64abc",
    "wire_type_7": b"\x0f",
    "unknown_field": b"\xf8\x07\x01",  # field 127 = 1: no corral request has it
    "unknown_string_field": b"\xa2\x06\x07mallory",  # field 100, length-delimited
}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("case", sorted(GARBAGE))
def test_garbage_or_unknown_fields_are_invalid_argument_for_every_rpc(world, case):
    wrong = {}
    for method in METHODS:
        metadata = bearer(_allowed_token(world, method))
        try:
            call_raw(world.daemon.channel, method, GARBAGE[case], metadata, timeout=3.0)
        except grpc.RpcError as error:
            if error.code() != grpc.StatusCode.INVALID_ARGUMENT:
                wrong[_path(method)] = f"{error.code().name}: {error.details()}"
        else:
            wrong[_path(method)] = "OK"
    assert not wrong, f"expected INVALID_ARGUMENT, got {wrong}"


@pytest.mark.timeout(60)
def test_empty_requests_with_the_right_role_never_fail_internally(daemon):
    lead_md = daemon.lead.metadata
    teammate_md = daemon.add_teammate("empty-caller").metadata
    wrong = {}
    for method in METHODS:
        metadata = teammate_md if method in TEAMMATE_METHODS else lead_md
        code = _code_of(daemon.channel, method, _empty(method), metadata, timeout=1.0)
        if code in (
            grpc.StatusCode.INTERNAL,
            grpc.StatusCode.UNKNOWN,
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.PERMISSION_DENIED,
            grpc.StatusCode.UNIMPLEMENTED,
        ):
            wrong[_path(method)] = code.name
    assert not wrong, wrong
    # The teammate role may use the board service too.
    for method in pb.DESCRIPTOR.services_by_name["BoardService"].methods:
        code = _code_of(daemon.channel, method, _empty(method), teammate_md, timeout=1.0)
        assert code not in (
            grpc.StatusCode.UNAUTHENTICATED,
            grpc.StatusCode.PERMISSION_DENIED,
            grpc.StatusCode.INTERNAL,
            grpc.StatusCode.UNKNOWN,
        ), (_path(method), code)


def _unknown_string_field(number: int, value: str) -> bytes:
    """The wire bytes of a length-delimited field `number` the schema does not have."""
    data = value.encode()
    key = (number << 3) | 2
    out = bytearray()
    for part in (key, len(data)):
        while True:
            byte = part & 0x7F
            part >>= 7
            if part:
                out.append(byte | 0x80)
            else:
                out.append(byte)
                break
    return bytes(out) + data


@pytest.mark.timeout(30)
@pytest.mark.parametrize("number", [4, 11, 99])
def test_a_forged_owner_field_is_refused_and_changes_nothing(daemon, number):
    thief, holder = daemon.add_teammate("thief"), daemon.add_teammate("holder")
    daemon.create_tasks(spec("valuable"))
    stream = holder.idle()
    claim = stream.next_event("claim")
    forged = _unknown_string_field(number, "holder")

    complete = daemon.channel.unary_unary(
        "/corral.v1.TeammateService/CompleteTask",
        request_serializer=lambda b: b,
        response_deserializer=pb.CompleteTaskResponse.FromString,
    )
    renew = daemon.channel.unary_unary(
        "/corral.v1.TeammateService/RenewLease",
        request_serializer=lambda b: b,
        response_deserializer=pb.RenewLeaseResponse.FromString,
    )
    complete_bytes = pb.CompleteTaskRequest(
        task_id="valuable", claim_token=claim.claim_token, result=b"stolen"
    ).SerializeToString()
    renew_bytes = pb.RenewLeaseRequest(task_id="valuable", claim_token=claim.claim_token).SerializeToString()
    before = daemon.get_task("valuable")
    for client in (thief, holder):  # even the true holder may not send fields the schema lacks
        for stub, payload in ((complete, complete_bytes), (renew, renew_bytes)):
            error = rpc_error(stub, payload + forged, metadata=client.metadata, timeout=5)
            found = assert_status(error, grpc.StatusCode.INVALID_ARGUMENT)
            assert "bad_request" in found, "INVALID_ARGUMENT without BadRequest"
    after = daemon.get_task("valuable")
    assert after == before, "a refused request changed the task"
    assert after.state == pb.TASK_STATE_IN_PROGRESS and after.owner == "holder"
    # Without the forged field the holder's own request works.
    assert complete(complete_bytes, metadata=holder.metadata, timeout=5).task.state == pb.TASK_STATE_COMPLETED
    stream.cancel()


@pytest.mark.timeout(30)
def test_unknown_field_nested_in_a_task_spec_is_refused(daemon):
    create = daemon.channel.unary_unary(
        "/corral.v1.LeadService/CreateTasks",
        request_serializer=lambda b: b,
        response_deserializer=pb.CreateTasksResponse.FromString,
    )
    spec_bytes = spec("nested").SerializeToString() + _unknown_string_field(1000, "mallory")
    # tasks = field 1, length-delimited, holding the tampered TaskSpec (field 1000 is no field of it)
    payload = _unknown_string_field(1, "")[:-1] + bytes([len(spec_bytes)]) + spec_bytes
    assert len(spec_bytes) < 128
    error = rpc_error(create, payload, metadata=daemon.lead.metadata, timeout=5)
    found = assert_status(error, grpc.StatusCode.INVALID_ARGUMENT)
    fields = [v.field for v in found["bad_request"].field_violations]
    assert any(f.startswith("tasks") for f in fields), fields
    assert daemon.all_tasks() == []


@pytest.mark.timeout(30)
def test_health_answers_serving_without_a_credential(world):
    health = health_pb2_grpc.HealthStub(world.daemon.channel)
    for service in ("", "corral.v1.LeadService", "corral.v1.TeammateService", "corral.v1.BoardService"):
        response = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=5)
        assert response.status == health_pb2.HealthCheckResponse.SERVING, service


def _list_services(channel, metadata) -> list[str]:
    stub = reflection_pb2_grpc.ServerReflectionStub(channel)
    responses = stub.ServerReflectionInfo(
        iter([reflection_pb2.ServerReflectionRequest(list_services="")]), metadata=metadata, timeout=5
    )
    for response in responses:
        return [s.name for s in response.list_services_response.service]
    return []


@pytest.mark.timeout(30)
def test_reflection_requires_a_valid_credential(world):
    for metadata in ([], bearer("not-a-token"), bearer(world.revoked_token), [("authorization", "Basic x")]):
        error = rpc_error(_list_services, world.daemon.channel, metadata)
        assert error.code() == grpc.StatusCode.UNAUTHENTICATED, (metadata, error.code(), error.details())
    for token in (world.daemon.lead_token, world.teammate_token):
        names = _list_services(world.daemon.channel, bearer(token))
        assert {"corral.v1.LeadService", "corral.v1.TeammateService", "corral.v1.BoardService"} <= set(names)


@pytest.mark.timeout(30)
def test_removing_a_teammate_revokes_it_ends_its_stream_and_frees_its_claims(daemon):
    mate = daemon.add_teammate("leaver")
    daemon.create_tasks(spec("held"))
    stream = mate.idle()
    claim = stream.next_event("claim")
    removed = daemon.lead.lead.RemoveTeammate(pb.RemoveTeammateRequest(name="leaver")).teammate
    assert removed.status == pb.TEAMMATE_STATUS_REMOVED
    stream.wait_end(5)  # design §4: "its streams end" (the status is not fixed)
    task = daemon.get_task("held")
    assert task.state == pb.TASK_STATE_PENDING and task.owner == ""
    assert_status(rpc_error(mate.renew, claim), grpc.StatusCode.UNAUTHENTICATED)
    assert_status(rpc_error(mate.board.GetTask, pb.GetTaskRequest(id="held")), grpc.StatusCode.UNAUTHENTICATED)
    code, _ = mate.idle().wait_end(5)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    # The next teammate gets the task with a fresh claim.
    other_stream = daemon.add_teammate("stayer").idle()
    fresh = other_stream.next_event("claim")
    assert fresh.task.id == "held" and fresh.claim_token != claim.claim_token and fresh.fence > claim.fence
    assert ts_seconds(fresh.lease_expire_time) > 0
    other_stream.cancel()
