"""Bytes that do not parse, sent to the health and reflection services (whose request
types are not ours), answer INVALID_ARGUMENT with one log line, not UNKNOWN and a traceback;
well-formed calls to them still work."""

from __future__ import annotations

import grpc
import pytest
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

from tests.support import wait_until

from .wire import Stream, assert_status, bearer, rpc_error

GARBAGE = b"\xff\xff\xff"
HEALTH_CHECK = "/grpc.health.v1.Health/Check"
HEALTH_WATCH = "/grpc.health.v1.Health/Watch"
REFLECTION = "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo"


def _raw(channel: grpc.Channel, kind: str, path: str):
    return getattr(channel, kind)(path, request_serializer=None, response_deserializer=None)


def _call(daemon, kind: str) -> grpc.RpcError:
    channel = daemon.channel
    if kind == "health check":
        return rpc_error(_raw(channel, "unary_unary", HEALTH_CHECK), GARBAGE, timeout=5)
    if kind == "health watch":
        return rpc_error(lambda: list(_raw(channel, "unary_stream", HEALTH_WATCH)(GARBAGE, timeout=5)))
    if kind == "reflection, first message":
        requests = [GARBAGE]
    else:  # a good request, then garbage on the same stream
        requests = [reflection_pb2.ServerReflectionRequest(list_services="").SerializeToString(), GARBAGE]
    reflect = _raw(channel, "stream_stream", REFLECTION)
    return rpc_error(lambda: list(reflect(iter(requests), metadata=bearer(daemon.lead_token), timeout=5)))


def _lines_about_it(daemon) -> list[str]:
    return [line for line in daemon.all_logs().splitlines() if "not a valid message" in line]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("kind", ["health check", "health watch", "reflection, first message", "reflection, later"])
def test_undecodable_bytes_answer_invalid_argument_with_one_log_line(daemon, kind):
    error = _call(daemon, kind)
    assert_status(error, grpc.StatusCode.INVALID_ARGUMENT, reason="INVALID_ARGUMENT", field="(request)")
    lines = wait_until(lambda: _lines_about_it(daemon), 5, "the refusal's log line")
    assert len(lines) == 1, lines
    logs = daemon.all_logs()
    assert "Traceback" not in logs and "ERROR" not in logs, logs


@pytest.mark.timeout(30)
def test_health_watch_still_streams_the_serving_status(daemon):
    health = health_pb2_grpc.HealthStub(daemon.channel)
    watch = Stream(health.Watch(health_pb2.HealthCheckRequest(service=""), timeout=10), "Health.Watch")
    assert watch.next(5).status == health_pb2.HealthCheckResponse.SERVING
    watch.cancel()


@pytest.mark.timeout(30)
def test_reflection_answers_each_request_of_a_stream(daemon):
    stub = reflection_pb2_grpc.ServerReflectionStub(daemon.channel)
    requests = [
        reflection_pb2.ServerReflectionRequest(list_services=""),
        reflection_pb2.ServerReflectionRequest(file_containing_symbol="corral.v1.LeadService"),
    ]
    listed, described = stub.ServerReflectionInfo(iter(requests), metadata=bearer(daemon.lead_token), timeout=5)
    assert "corral.v1.LeadService" in {s.name for s in listed.list_services_response.service}
    assert described.file_descriptor_response.file_descriptor_proto
