"""The one table from domain errors to gRPC status codes, with rich details.

Every domain error carries a `google.rpc.ErrorInfo` (domain "corral") with its
reason; OVERLOADED adds `RetryInfo`, INVALID_ARGUMENT adds `BadRequest`.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2, duration_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from .. import errors

DOMAIN = "corral"

# Most specific first: the first matching class decides.
STATUS_TABLE: tuple[tuple[type[BaseException], grpc.StatusCode], ...] = (
    (errors.InvalidArgument, grpc.StatusCode.INVALID_ARGUMENT),
    (errors.NotFound, grpc.StatusCode.NOT_FOUND),
    (errors.ClaimError, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.FailedPrecondition, grpc.StatusCode.FAILED_PRECONDITION),
    (errors.Unauthenticated, grpc.StatusCode.UNAUTHENTICATED),
    (errors.PermissionDenied, grpc.StatusCode.PERMISSION_DENIED),
    (errors.Overloaded, grpc.StatusCode.RESOURCE_EXHAUSTED),
    (errors.ResourceExhausted, grpc.StatusCode.RESOURCE_EXHAUSTED),
    # Draining, or the transaction did not commit (writer.CommitFailed, reason
    # COMMIT_FAILED): nothing happened, the caller may retry.
    (errors.Unavailable, grpc.StatusCode.UNAVAILABLE),
    (errors.AlreadyExists, grpc.StatusCode.ALREADY_EXISTS),
    (errors.Aborted, grpc.StatusCode.ABORTED),
)


def code_for(error: BaseException) -> grpc.StatusCode:
    for kind, code in STATUS_TABLE:
        if isinstance(error, kind):
            return code
    return grpc.StatusCode.INTERNAL


# Errors quote what the caller sent (an id, a name), and a caller may send a
# megabyte: the whole status travels in trailing metadata, which gRPC caps at
# 8-16 KiB, so an unbounded echo turns NOT_FOUND into RESOURCE_EXHAUSTED.
# These bounds keep every status far below the cap (the message appears in
# grpc-message and again, base64-encoded, in the details).
MESSAGE_MAX_CHARS = 1000
DETAIL_MAX_CHARS = 200


def bounded(text: str, limit: int) -> str:
    """`text`, cut to `limit` characters with an ellipsis when it is longer."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _pack(message) -> any_pb2.Any:
    packed = any_pb2.Any()
    packed.Pack(message)
    return packed


def to_status(error: BaseException) -> grpc.Status:
    """The status a call ends with, details in `grpc-status-details-bin`."""
    return rpc_status.to_status(rpc_status_of(error))


OK = status_pb2.Status(code=code_pb2.OK)


def rpc_status_of(error: BaseException) -> status_pb2.Status:
    """The `google.rpc.Status` of `error`: its code, message and details (a Session op result's)."""
    code = code_for(error)
    if isinstance(error, errors.CorralError):
        message, reason, metadata = error.message, error.reason, error.metadata
    else:
        message, reason, metadata = "internal error", "INTERNAL", {}
    message = bounded(message, MESSAGE_MAX_CHARS)
    metadata = {bounded(k, DETAIL_MAX_CHARS): bounded(str(v), DETAIL_MAX_CHARS) for k, v in metadata.items()}
    details = [_pack(error_details_pb2.ErrorInfo(reason=reason, domain=DOMAIN, metadata=metadata))]
    if isinstance(error, errors.InvalidArgument):
        details.append(
            _pack(
                error_details_pb2.BadRequest(
                    field_violations=[
                        error_details_pb2.BadRequest.FieldViolation(
                            field=bounded(error.field, DETAIL_MAX_CHARS),
                            description=bounded(error.description, MESSAGE_MAX_CHARS),
                        )
                    ]
                )
            )
        )
    if isinstance(error, errors.Overloaded):
        delay = duration_pb2.Duration(
            seconds=error.retry_after_ms // 1000, nanos=(error.retry_after_ms % 1000) * 1_000_000
        )
        details.append(_pack(error_details_pb2.RetryInfo(retry_delay=delay)))
    return status_pb2.Status(code=getattr(code_pb2, code.name), message=message, details=details)
