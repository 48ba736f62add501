"""Domain values ↔ corral.v1 wire messages; the only module that builds them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TypeVar

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf import message as pb_message

from corral.v1 import corral_pb2 as pb

from ..errors import InvalidArgument
from ..model import CanceledTask, ClaimGrant, CreatedTask, Event, InboxItem, TaskRecord, TaskSpec, TeammateRecord
from ..stream import StreamItem

TEAMMATE_REASONS: dict[str, pb.TeammateChangeReason] = {
    "added": pb.TEAMMATE_CHANGE_REASON_ADDED,
    "joined": pb.TEAMMATE_CHANGE_REASON_JOINED,
    "idle": pb.TEAMMATE_CHANGE_REASON_IDLE,
    "idle_timeout": pb.TEAMMATE_CHANGE_REASON_IDLE_TIMEOUT,
    "shutting_down": pb.TEAMMATE_CHANGE_REASON_SHUTTING_DOWN,
    "left": pb.TEAMMATE_CHANGE_REASON_LEFT,
    "removed": pb.TEAMMATE_CHANGE_REASON_REMOVED,
    "busy": pb.TEAMMATE_CHANGE_REASON_BUSY,
    "awaiting_plan": pb.TEAMMATE_CHANGE_REASON_AWAITING_PLAN,
    "waiting": pb.TEAMMATE_CHANGE_REASON_WAITING,
}


# What one reply or page may hold: under gRPC's default 4 MiB receive limit,
# the default of every standard gRPC library.
REPLY_BYTES = 3 * 1024 * 1024


M = TypeVar("M", bound=pb_message.Message)


def fitting(messages: Iterable[M], budget: int = REPLY_BYTES) -> list[M]:
    """The leading `messages` that fit `budget` bytes as repeated fields of one reply (always the first)."""
    kept: list[M] = []
    size = 0
    for message in messages:
        size += message.ByteSize() + 8  # the field's tag and length prefix
        if kept and size > budget:
            break
        kept.append(message)
    return kept


def timestamp(ms: int | None) -> timestamp_pb2.Timestamp | None:
    if ms is None:
        return None
    return timestamp_pb2.Timestamp(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration(ms: int) -> duration_pb2.Duration:
    return duration_pb2.Duration(seconds=ms // 1000, nanos=(ms % 1000) * 1_000_000)


def duration_ms(message: pb_message.Message, field: str, at: str = "") -> int:
    """A Duration field in whole ms, rounded up; unset or zero means "default" (0).

    Rounding up keeps a set value from ever turning into 0 ("default"); a
    negative value comes back as -1 so range checks refuse it.
    """
    if not message.HasField(field):
        return 0
    value: duration_pb2.Duration = getattr(message, field)
    # A Duration's nanos lie within ±999,999,999 and share the sign of its
    # seconds (google/protobuf/duration.proto); anything else is malformed,
    # not a longer span.
    if abs(value.nanos) > 999_999_999 or value.seconds * value.nanos < 0:
        path = f"{at}.{field}" if at else field
        raise InvalidArgument(path, f"not a valid Duration (seconds {value.seconds}, nanos {value.nanos})")
    nanos = value.seconds * 1_000_000_000 + value.nanos
    if nanos < 0:
        return -1
    return -(-nanos // 1_000_000)


def task_spec(message: pb.TaskSpec, at: str = "") -> TaskSpec:
    """The wire TaskSpec; `at` ("tasks[3]") names it in errors."""
    return TaskSpec(
        id=message.id,
        title=message.title,
        description=message.description,
        payload=message.payload,
        depends_on=tuple(message.depends_on),
        priority=message.priority,
        max_attempts=message.max_attempts,
        lease_ms=duration_ms(message, "lease_duration", at),
        required_role=message.required_role,
    )


def created_task(created: CreatedTask) -> pb.Task:
    """A task of a CreateTasks batch as the reply carries it: id, seq, state, times and the
    defaulted limits; the rest of the spec is the caller's own."""
    return pb.Task(
        id=created.id,
        seq=created.seq,
        state=int(created.state),  # type: ignore[arg-type]
        max_attempts=created.max_attempts,
        lease_duration=duration(created.lease_ms),
        create_time=timestamp(created.create_ms),
        finish_time=timestamp(created.finish_ms),
    )


def canceled_task(canceled: CanceledTask) -> pb.Task:
    """A task of a CancelTasks reply: id, seq, state, why and when."""
    return pb.Task(
        id=canceled.id,
        seq=canceled.seq,
        state=pb.TASK_STATE_CANCELED,
        error=canceled.error,
        finish_time=timestamp(canceled.finish_ms),
    )


# protoc's type stubs accept an enum field only as its wrapper type or its
# name; at run time it is an int, which is what the model holds, so the enum
# arguments below pass ints and say so to mypy.
def task(record: TaskRecord) -> pb.Task:
    return pb.Task(
        id=record.id,
        title=record.title,
        description=record.description,
        payload=record.payload,
        depends_on=record.depends_on,
        priority=record.priority,
        required_role=record.required_role,
        max_attempts=record.max_attempts,
        lease_duration=duration(record.lease_ms),
        state=int(record.state),  # type: ignore[arg-type]
        owner=record.owner,
        attempt=record.attempt,
        result=record.result,
        error=record.error,
        seq=record.seq,
        create_time=timestamp(record.create_ms),
        lease_expire_time=timestamp(record.lease_expire_ms),
        finish_time=timestamp(record.finish_ms),
    )


def teammate(record: TeammateRecord) -> pb.Teammate:
    return pb.Teammate(
        name=record.name,
        roles=record.roles,
        status=int(record.status),  # type: ignore[arg-type]
        require_plan_approval=record.require_plan_approval,
        held_task_ids=record.held_task_ids,
        waiting_for_task_ids=record.waiting_for_task_ids,
    )


def claim(grant: ClaimGrant) -> pb.Claim:
    return pb.Claim(
        task=task(grant.task),
        claim_token=grant.token,
        lease_expire_time=timestamp(grant.lease_expire_ms),
        attempt=grant.attempt,
        fence=grant.fence,
    )


def idle_response(item: StreamItem) -> pb.IdleResponse:
    if isinstance(item, ClaimGrant):
        return pb.IdleResponse(claim=claim(item))
    return _inbox_response(item)


def _inbox_response(item: InboxItem) -> pb.IdleResponse:
    sent = timestamp(item.send_ms)
    if item.kind == "shutdown_request":
        return pb.IdleResponse(
            shutdown_request=pb.ShutdownRequest(
                seq=item.seq,
                send_time=sent,
                request_id=item.ref,
                reason=item.body,
                deadline_time=timestamp(item.deadline_ms),
            )
        )
    if item.kind == "plan_decision":
        return pb.IdleResponse(
            plan_decision=pb.PlanDecision(
                seq=item.seq, send_time=sent, plan_id=item.ref, approve=item.approve, feedback=item.body
            )
        )
    return pb.IdleResponse(message=pb.Message(seq=item.seq, send_time=sent, sender=item.sender, body=item.body))


def watch_response(
    event: Event, task_record: TaskRecord | None, teammate_record: TeammateRecord | None
) -> pb.WatchResponse:
    """One event of the log; `task_record`/`teammate_record` supply the immutable parts."""
    response = pb.WatchResponse(seq=event.seq, time=timestamp(event.time_ms))
    data = event.data
    if event.kind == "task_changed" and task_record is not None:
        snapshot = task(task_record)
        snapshot.state = data["state"]
        snapshot.owner = data["owner"]
        snapshot.attempt = data["attempt"]
        snapshot.error = data["error"]
        _set_time(snapshot, "lease_expire_time", data["lease_expire_ms"])
        _set_time(snapshot, "finish_time", data["finish_ms"])
        if data["state"] != pb.TASK_STATE_COMPLETED:
            snapshot.result = b""
        response.task_changed.CopyFrom(snapshot)
    elif event.kind == "teammate_changed" and teammate_record is not None:
        response.teammate_changed.CopyFrom(
            pb.TeammateChanged(
                teammate=pb.Teammate(
                    name=teammate_record.name,
                    roles=teammate_record.roles,
                    status=data["status"],
                    require_plan_approval=teammate_record.require_plan_approval,
                ),
                status=data["status"],
                reason=TEAMMATE_REASONS.get(data["reason"], pb.TEAMMATE_CHANGE_REASON_UNSPECIFIED),
            )
        )
    elif event.kind == "message":
        response.message.CopyFrom(
            pb.Message(send_time=timestamp(event.time_ms), sender=data["sender"], body=data["body"])
        )
    elif event.kind == "plan_submitted":
        response.plan_submitted.CopyFrom(
            pb.PlanSubmitted(plan_id=data["plan_id"], author=data["author"], plan=data["plan"])
        )
    elif event.kind == "shutdown_answered":
        response.shutdown_answered.CopyFrom(
            pb.ShutdownAnswered(
                request_id=data["request_id"], teammate=data["teammate"], approve=data["approve"], reason=data["reason"]
            )
        )
    return response


def _set_time(message: pb.Task, field: str, ms: int | None) -> None:
    if ms is None:
        message.ClearField(field)
    else:
        getattr(message, field).CopyFrom(timestamp(ms))
