"""The daemon's receive limit (config.MESSAGE_MAX_BYTES) holds the largest request the
limits admit, and not much more: each request below is built at every limit of
design §7 and `Limits` (ids of the most characters, each four UTF-8 bytes)."""

from __future__ import annotations

import pytest
from google.protobuf import duration_pb2, timestamp_pb2

from corral.v1 import corral_pb2 as pb
from corrald.config import MESSAGE_MAX_BYTES, Limits
from corrald.validate import TRACE_PARENT_MAX_CHARS

pytestmark = pytest.mark.timeout(30)

LIMITS = Limits()
WIDE = "\U0001d11e"  # four bytes in UTF-8, like every character below


def wide_id(number: int) -> str:
    """An id of the most characters allowed, each four bytes; the first, a CJK ideograph
    of Extension B (U+20000 on), tells them apart."""
    return chr(0x20000 + number) + WIDE * (LIMITS.name_max_chars - 1)


def largest_spec() -> pb.TaskSpec:
    longest = duration_pb2.Duration(seconds=10**9, nanos=999_999_999)
    head = "00-" + "a" * 32 + "-" + "b" * 16 + "-01-"
    spec = pb.TaskSpec(
        id=wide_id(0),
        title=WIDE * LIMITS.title_max_chars,
        description="d" * LIMITS.text_max_bytes,
        payload=b"p" * LIMITS.blob_max_bytes,
        depends_on=[wide_id(i) for i in range(1, LIMITS.deps_per_task_max + 1)],
        priority=LIMITS.priority_min,
        max_attempts=LIMITS.max_attempts_max,
        required_role=wide_id(0),
        concurrency_key=WIDE * LIMITS.concurrency_key_max_chars,
        trace_parent=head + WIDE * (TRACE_PARENT_MAX_CHARS - len(head)),
        not_before_time=timestamp_pb2.Timestamp(seconds=10**11, nanos=999_999_999),
    )
    for field in ("lease_duration", "retry_backoff", "retry_backoff_max", "attempt_timeout"):
        getattr(spec, field).CopyFrom(longest)
    return spec


def largest_completion() -> pb.CompleteTaskRequest:
    usage = pb.Usage(input_tokens=2**63 - 1, output_tokens=2**63 - 1, cost_micros=2**63 - 1)
    usage.model = WIDE * LIMITS.model_max_chars
    return pb.CompleteTaskRequest(
        task_id=wide_id(0), claim_token="t" * 64, result=b"r" * LIMITS.blob_max_bytes, usage=usage
    )


def largest_requests() -> dict[str, pb.Message]:
    many_ids = [wide_id(i) for i in range(LIMITS.batch_max)]
    text = "x" * LIMITS.text_max_bytes
    return {
        "CancelTasks": pb.CancelTasksRequest(ids=many_ids),
        "RetryTasks": pb.RetryTasksRequest(ids=many_ids, reset_attempts=True),
        "CreateTasks of one spec": pb.CreateTasksRequest(tasks=[largest_spec()], request_id=wide_id(0)),
        "CompleteTask": largest_completion(),
        "Session complete": pb.SessionRequest(op_id=wide_id(0), complete=largest_completion()),
        "FailTask": pb.FailTaskRequest(task_id=wide_id(0), claim_token="t" * 64, error=text, retryable=True),
        "SubmitPlan": pb.SubmitPlanRequest(plan=text),
        "SendMessage": pb.SendMessageRequest(to=wide_id(0), body=text),
    }


@pytest.mark.parametrize("name", list(largest_requests()))
def test_the_largest_request_of_each_kind_is_within_the_limit(name):
    size = largest_requests()[name].ByteSize()
    assert size <= MESSAGE_MAX_BYTES, f"the largest {name} is {size} bytes, over {MESSAGE_MAX_BYTES}"


def test_the_limit_is_the_largest_request_with_room_not_a_multiple_of_it():
    largest = max(request.ByteSize() for request in largest_requests().values())
    assert largest == LIMITS.batch_max * (4 * LIMITS.name_max_chars + 3) + 2  # RetryTasks: ids, reset_attempts
    assert MESSAGE_MAX_BYTES < 1.5 * largest, "the limit has drifted far above what any request needs"


def test_a_batch_of_specs_at_every_limit_does_not_fit_in_one_message():
    """Why the SDK splits a big CreateTasks: four specs at every limit already do not fit."""
    batch = pb.CreateTasksRequest(tasks=[largest_spec()] * 4)
    assert batch.ByteSize() > MESSAGE_MAX_BYTES
