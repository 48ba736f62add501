"""Mapping failed calls (sync and grpc.aio) and failed Session op results to
typed exceptions, using real google.rpc status details as the daemon sends them."""

import datetime

import grpc
import grpc.aio
import pytest
from google.protobuf import any_pb2, duration_pb2
from google.rpc import error_details_pb2, status_pb2

import corral
from corral._errors import error_from_rpc, error_from_status
from corral._retry import is_transient


class FakeRpcError(grpc.RpcError, grpc.Call):
    """What the sync stack raises: an RpcError that is also the finished call."""

    def __init__(self, code: grpc.StatusCode, details: str, trailing: tuple = ()) -> None:
        self._code, self._details, self._trailing = code, details, trailing

    def code(self) -> grpc.StatusCode:
        return self._code

    def details(self) -> str:
        return self._details

    def trailing_metadata(self) -> tuple:
        return self._trailing

    def initial_metadata(self) -> tuple:
        return ()

    def is_active(self) -> bool:
        return False

    def time_remaining(self) -> None:
        return None

    def cancel(self) -> bool:
        return False

    def add_callback(self, callback: object) -> bool:
        return False


def _packed(message: object) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def rich_status(code: grpc.StatusCode, message: str, *details: object) -> tuple[tuple[str, bytes], ...]:
    status = status_pb2.Status(code=code.value[0], message=message, details=[_packed(d) for d in details])
    return (("grpc-status-details-bin", status.SerializeToString()),)


def op_status(code: grpc.StatusCode, message: str, *details: object) -> status_pb2.Status:
    """The `status` of a failed Session op result."""
    return status_pb2.Status(code=code.value[0], message=message, details=[_packed(d) for d in details])


def error(code: grpc.StatusCode, message: str, *details: object) -> FakeRpcError:
    return FakeRpcError(code, message, rich_status(code, message, *details))


def info(reason: str, **metadata: str) -> error_details_pb2.ErrorInfo:
    return error_details_pb2.ErrorInfo(reason=reason, domain="corral", metadata=metadata)


FP = grpc.StatusCode.FAILED_PRECONDITION


REASON_CASES = [
    (FP, "LEASE_EXPIRED", corral.LeaseExpired),
    (FP, "CLAIM_TOKEN_MISMATCH", corral.ClaimTokenMismatch),
    (FP, "TASK_CANCELED", corral.TaskCanceled),
    (FP, "SOMETHING_NEW", corral.FailedPrecondition),
    (grpc.StatusCode.NOT_FOUND, "TASK_NOT_FOUND", corral.NotFound),
    (grpc.StatusCode.NOT_FOUND, "PLAN_NOT_FOUND", corral.NotFound),
    (grpc.StatusCode.ALREADY_EXISTS, "ALREADY_EXISTS", corral.AlreadyExists),
    (grpc.StatusCode.INVALID_ARGUMENT, "INVALID_ARGUMENT", corral.InvalidArgument),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "OVERLOADED", corral.Overloaded),
    (grpc.StatusCode.RESOURCE_EXHAUSTED, "OUTPUT_LIMIT", corral.LimitExceeded),
]


@pytest.mark.parametrize(("code", "reason", "expected"), REASON_CASES)
def test_reason_and_code_pick_the_class(code: grpc.StatusCode, reason: str, expected: type) -> None:
    mapped = error_from_rpc(error(code, "it broke", info(reason, task_id="t1")))
    assert type(mapped) is expected
    assert (mapped.code, mapped.reason, mapped.details) == (code, reason, "it broke")
    assert mapped.metadata == {"task_id": "t1"}
    assert isinstance(mapped, corral.CorralError)
    assert reason in str(mapped) and "it broke" in str(mapped)


def test_a_failed_op_result_maps_like_the_failed_call() -> None:
    for code, reason, expected in REASON_CASES:
        mapped = error_from_status(op_status(code, "it broke", info(reason, task_id="t1")))
        assert type(mapped) is expected
        assert (mapped.code, mapped.reason, mapped.details) == (code, reason, "it broke")
        assert mapped.metadata == {"task_id": "t1"}
    retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=2))
    overloaded = error_from_status(op_status(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy", info("OVERLOADED"), retry))
    assert isinstance(overloaded, corral.Overloaded) and overloaded.retry_after == datetime.timedelta(seconds=2)
    bad = error_details_pb2.BadRequest(
        field_violations=[error_details_pb2.BadRequest.FieldViolation(field="op_id", description="too long")]
    )
    invalid = error_from_status(op_status(grpc.StatusCode.INVALID_ARGUMENT, "bad op", info("INVALID_ARGUMENT"), bad))
    assert isinstance(invalid, corral.InvalidArgument)
    assert invalid.field_violations == (corral.FieldViolation("op_id", "too long"),)


def test_an_op_status_without_details_maps_by_code() -> None:
    mapped = error_from_status(status_pb2.Status(code=grpc.StatusCode.UNAUTHENTICATED.value[0]))
    assert type(mapped) is corral.Unauthenticated and mapped.details == "UNAUTHENTICATED"
    unknown = error_from_status(status_pb2.Status(code=99, message="from the future"))
    assert type(unknown) is corral.CorralError and unknown.code is grpc.StatusCode.UNKNOWN


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (grpc.StatusCode.UNAVAILABLE, corral.Unavailable),
        (grpc.StatusCode.UNAUTHENTICATED, corral.Unauthenticated),
        (grpc.StatusCode.PERMISSION_DENIED, corral.PermissionDenied),
        (grpc.StatusCode.FAILED_PRECONDITION, corral.FailedPrecondition),
        (grpc.StatusCode.ABORTED, corral.CorralError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, corral.CorralError),
    ],
)
def test_errors_without_details_map_by_code(code: grpc.StatusCode, expected: type) -> None:
    mapped = error_from_rpc(FakeRpcError(code, "no details"))
    assert type(mapped) is expected
    assert (mapped.code, mapped.reason) == (code, "")


def test_lease_errors_are_failed_preconditions() -> None:
    for cls in (corral.LeaseExpired, corral.ClaimTokenMismatch, corral.TaskCanceled):
        assert issubclass(cls, corral.FailedPrecondition)


def test_overloaded_carries_retry_after() -> None:
    retry = error_details_pb2.RetryInfo(retry_delay=duration_pb2.Duration(seconds=1, nanos=500_000_000))
    mapped = error_from_rpc(error(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy", info("OVERLOADED"), retry))
    assert isinstance(mapped, corral.Overloaded)
    assert mapped.retry_after == datetime.timedelta(seconds=1.5)


def test_overloaded_without_retry_info_has_no_hint() -> None:
    mapped = error_from_rpc(error(grpc.StatusCode.RESOURCE_EXHAUSTED, "busy", info("OVERLOADED")))
    assert isinstance(mapped, corral.Overloaded) and mapped.retry_after is None


def test_a_message_over_the_daemons_limit_is_invalid_not_an_overload() -> None:
    """gRPC's own refusal (no ErrorInfo): the same message would be refused again, so the
    SDK's retry policies must not take it for an overload and send it again."""
    refused = FakeRpcError(
        grpc.StatusCode.RESOURCE_EXHAUSTED, "SERVER: Received message larger than max (7340101 vs. 6291456)"
    )
    mapped = error_from_rpc(refused)
    assert isinstance(mapped, corral.InvalidArgument) and not is_transient(mapped)
    assert mapped.code is grpc.StatusCode.RESOURCE_EXHAUSTED and "larger than max" in str(mapped)


def test_invalid_argument_carries_field_violations() -> None:
    bad = error_details_pb2.BadRequest(
        field_violations=[
            error_details_pb2.BadRequest.FieldViolation(field="tasks[1].depends_on", description="cycle a→b→a"),
            error_details_pb2.BadRequest.FieldViolation(field="tasks[2].priority", description="out of range"),
        ]
    )
    mapped = error_from_rpc(error(grpc.StatusCode.INVALID_ARGUMENT, "bad batch", info("INVALID_ARGUMENT"), bad))
    assert isinstance(mapped, corral.InvalidArgument)
    assert mapped.field_violations == (
        corral.FieldViolation("tasks[1].depends_on", "cycle a→b→a"),
        corral.FieldViolation("tasks[2].priority", "out of range"),
    )


def test_reason_from_another_domain_is_ignored() -> None:
    foreign = error_details_pb2.ErrorInfo(reason="LEASE_EXPIRED", domain="example.com")
    mapped = error_from_rpc(error(FP, "proxy says no", foreign))
    assert type(mapped) is corral.FailedPrecondition and mapped.reason == ""


def test_details_survive_a_rewritten_status_message() -> None:
    # grpc_status.from_call would raise ValueError here; the mapping must not.
    trailing = rich_status(FP, "original message", info("LEASE_EXPIRED"))
    mapped = error_from_rpc(FakeRpcError(FP, "rewritten by a proxy", trailing))
    assert isinstance(mapped, corral.LeaseExpired) and mapped.details == "rewritten by a proxy"


def test_garbage_details_fall_back_to_the_code() -> None:
    mapped = error_from_rpc(FakeRpcError(FP, "bad bytes", (("grpc-status-details-bin", b"\xff\x00garbage"),)))
    assert type(mapped) is corral.FailedPrecondition


def test_bare_rpc_error_maps_to_unknown() -> None:
    mapped = error_from_rpc(grpc.RpcError())
    assert type(mapped) is corral.CorralError and mapped.code is grpc.StatusCode.UNKNOWN


def test_aio_errors_map_the_same_way() -> None:
    trailing = grpc.aio.Metadata(*rich_status(FP, "too late", info("LEASE_EXPIRED")))
    aio_error = grpc.aio.AioRpcError(FP, grpc.aio.Metadata(), trailing, details="too late")
    mapped = error_from_rpc(aio_error)
    assert isinstance(mapped, corral.LeaseExpired) and mapped.details == "too late"


def test_lease_lost_describes_its_cause() -> None:
    cause = error_from_rpc(error(FP, "token superseded", info("CLAIM_TOKEN_MISMATCH")))
    lost = corral.LeaseLost("t1", cause)
    assert lost.cause is cause and lost.task_id == "t1"
    assert lost.reason == "CLAIM_TOKEN_MISMATCH" and "t1" in str(lost)
    unconfirmed = corral.LeaseLost("t2", None)
    assert unconfirmed.cause is None and unconfirmed.code is None and "unreachable" in str(unconfirmed)
