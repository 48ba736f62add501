"""Domain values ↔ corral.v1 wire messages; the only module that builds them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, TypeVar

from google.protobuf import duration_pb2, timestamp_pb2
from google.protobuf import message as pb_message

from corral.v1 import corral_pb2 as pb

from ..errors import InvalidArgument
from ..model import (
    AttemptRecord,
    Budget,
    BudgetExhausted,
    CanceledTask,
    ClaimEnd,
    ClaimGrant,
    ClaimOutcome,
    ConcurrencyLimit,
    CreatedTask,
    HeldResource,
    Proposed,
    ReviewPolicy,
    TaskCreation,
    TaskRecord,
    TaskSpec,
    TeammateRecord,
    Usage,
    Verdict,
    WaitingFor,
)
from ..stream import StreamItem
from ..validate import PROPOSAL_TASKS_MAX
from . import artifact_convert

if TYPE_CHECKING:
    from ..board import PostgresHealth

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
    """A Duration field in whole ms, rounded away from zero; unset or zero means "default" (0).

    Rounding away from zero keeps a set value from ever turning into 0
    ("default"): a positive one is rounded up, a negative one down, so range
    checks refuse it and report what was sent.
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
        return nanos // 1_000_000
    return -(-nanos // 1_000_000)


def optional_duration_ms(message: pb_message.Message, field: str, at: str = "") -> int | None:
    """Like `duration_ms`, but unset is None and zero stays zero."""
    if not message.HasField(field):
        return None
    value: duration_pb2.Duration = getattr(message, field)
    return duration_ms(message, field, at) if value.seconds or value.nanos else 0


def optional_timestamp_ms(message: pb_message.Message, field: str, at: str = "") -> int | None:
    """A Timestamp field in whole ms (rounded up: never earlier than asked); None when unset."""
    if not message.HasField(field):
        return None
    value: timestamp_pb2.Timestamp = getattr(message, field)
    # google/protobuf/timestamp.proto: nanos in [0, 999,999,999], years 1 to 9999.
    if not 0 <= value.nanos <= 999_999_999 or not -62_135_596_800 <= value.seconds <= 253_402_300_799:
        path = f"{at}.{field}" if at else field
        raise InvalidArgument(path, f"not a valid Timestamp (seconds {value.seconds}, nanos {value.nanos})")
    return value.seconds * 1000 - (-value.nanos // 1_000_000)


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
        not_before_ms=optional_timestamp_ms(message, "not_before_time", at),
        retry_backoff_ms=optional_duration_ms(message, "retry_backoff", at),
        retry_backoff_max_ms=optional_duration_ms(message, "retry_backoff_max", at),
        trace_parent=message.trace_parent,
        concurrency_key=message.concurrency_key,
        attempt_timeout_ms=optional_duration_ms(message, "attempt_timeout", at),
        review=ReviewPolicy(message.review.reviewer_role, message.review.max_rounds)
        if message.HasField("review")
        else None,
        resources=tuple(message.resources),
        shared_resources=tuple(message.shared_resources),
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


def proposal(request: pb.ProposeTasksRequest) -> tuple[list[TaskSpec], str, str, bool]:
    """A ProposeTasks request's specs (unchecked: `validate.proposal` checks them), the
    task and token of the claim it names, and whether it splits that task."""
    if len(request.tasks) > PROPOSAL_TASKS_MAX:  # refused before any is converted
        raise InvalidArgument("tasks", f"more than the {PROPOSAL_TASKS_MAX} tasks one proposal holds")
    specs = [task_spec(spec, f"tasks[{i}]") for i, spec in enumerate(request.tasks)]
    return specs, request.task_id, request.claim_token, request.block_claimed_task


def task_creation(policy: int) -> TaskCreation:
    """SetTaskCreation's policy; unset or unknown is INVALID_ARGUMENT."""
    try:
        return TaskCreation(policy)
    except ValueError:
        raise InvalidArgument("policy", "must be TASK_CREATION_POLICY_PROPOSE, _ALLOW or _DENY") from None


def proposed(answer: Proposed) -> pb.ProposeTasksResponse:
    response = pb.ProposeTasksResponse(tasks=[task(record) for record in answer.tasks])
    if answer.split_task is not None:
        fill_task(response.claimed_task, answer.split_task)
    return response


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
def task(record: TaskRecord, waiting: WaitingFor | None = None) -> pb.Task:
    """The wire Task; `waiting` (what holds a PENDING task back) only where the caller read it."""
    message = pb.Task()
    fill_task(message, record, waiting)
    return message


def fill_task(message: pb.Task, record: TaskRecord, waiting: WaitingFor | None = None) -> None:
    """Sets the fields of an empty wire Task in place, where it will be sent: every claim
    and every completion's answer carries one, and a Task built apart and then put in
    its response is copied whole, payload and result included. Times are set only when
    present; a zero backoff and no usage stay unset (they read as zero)."""
    message.id = record.id
    message.title = record.title
    message.description = record.description
    message.payload = record.payload
    message.depends_on.extend(record.depends_on)
    message.priority = record.priority
    message.required_role = record.required_role
    message.max_attempts = record.max_attempts
    message.state = int(record.state)  # type: ignore[assignment]
    message.owner = record.owner
    message.attempt = record.attempt
    message.attempts_used = record.attempts_used
    message.result = record.result
    message.error = record.error
    message.question = record.question
    if record.review is not None:
        message.review.reviewer_role = record.review.reviewer_role
        message.review.max_rounds = record.review.max_rounds
    message.review_rounds = record.review_rounds
    message.proposed_by = record.proposed_by
    message.discovered_from = record.discovered_from
    message.seq = record.seq
    message.progress = record.progress
    if record.progress_fraction is not None:
        message.progress_fraction = record.progress_fraction
    message.trace_parent = record.trace_parent
    message.concurrency_key = record.concurrency_key
    if record.resources:
        message.resources.extend(record.resources)
    if record.shared_resources:
        message.shared_resources.extend(record.shared_resources)
    _set_ms(message.lease_duration, record.lease_ms)
    for field, ms in (
        ("create_time", record.create_ms),
        ("lease_expire_time", record.lease_expire_ms),
        ("finish_time", record.finish_ms),
        ("not_before_time", record.not_before_ms),
        ("ready_time", record.ready_ms),
        ("progress_time", record.progress_ms),
        ("attempt_timeout", record.attempt_timeout_ms),
    ):
        if ms is not None:
            _set_ms(getattr(message, field), ms)
    if record.retry_backoff_ms:
        _set_ms(message.retry_backoff, record.retry_backoff_ms)
    if record.retry_backoff_max_ms:
        _set_ms(message.retry_backoff_max, record.retry_backoff_max_ms)
    spent = record.usage
    if spent.input_tokens or spent.output_tokens or spent.cost_micros or spent.model:
        _fill_usage(message.usage, spent)
    if waiting is not None:
        message.waiting_for.CopyFrom(waiting_for(waiting))
    if record.artifacts:
        message.artifacts.extend(map(artifact_convert.artifact, record.artifacts))


def _set_ms(field: timestamp_pb2.Timestamp | duration_pb2.Duration, ms: int) -> None:
    """A Timestamp (epoch ms) or a non-negative Duration (ms), set in place."""
    field.seconds, field.nanos = ms // 1000, (ms % 1000) * 1_000_000


def waiting_for(waiting: WaitingFor) -> pb.WaitingFor:
    return pb.WaitingFor(
        dependencies=waiting.dependencies,
        ready_time=timestamp(waiting.ready_ms),
        teammates=int(waiting.teammates),  # type: ignore[arg-type]
        concurrency_key=waiting.full_key,
        resources=[
            pb.ResourceWait(
                resource=wait.resource,
                held_by_task_id=wait.held_by_task_id,
                held_resource=wait.held_resource,
                held_exclusive=wait.held_exclusive,
            )
            for wait in waiting.resources
        ],
    )


def held_resource(held: HeldResource) -> pb.HeldResource:
    return pb.HeldResource(
        resource=held.resource, task_id=held.task_id, teammate=held.teammate, exclusive=held.exclusive
    )


def concurrency_limit(limit: ConcurrencyLimit) -> pb.ConcurrencyLimit:
    return pb.ConcurrencyLimit(key=limit.key, limit=limit.limit, in_progress=limit.in_progress)


def usage(record: Usage) -> pb.Usage:
    message = pb.Usage()
    _fill_usage(message, record)
    return message


def _fill_usage(message: pb.Usage, record: Usage) -> None:
    message.input_tokens = record.input_tokens
    message.output_tokens = record.output_tokens
    message.cost_micros = record.cost_micros
    message.model = record.model


def budget(record: Budget) -> pb.Budget:
    return pb.Budget(max_cost_micros=record.max_cost_micros, max_tokens=record.max_tokens)


def budget_exhausted(notice: BudgetExhausted) -> pb.BudgetExhausted:
    return pb.BudgetExhausted(teammate=notice.teammate, spent=usage(notice.spent), budget=budget(notice.budget))


def verdict(request: pb.CompleteTaskRequest) -> Verdict | None:
    """A review's verdict, unchecked (`validate.verdict` checks it); None when it sent none."""
    if not request.HasField("verdict"):
        return None
    return Verdict(request.verdict.approve, request.verdict.feedback)


def reported_usage(request: pb.CompleteTaskRequest | pb.FailTaskRequest | pb.RenewLeaseRequest) -> Usage | None:
    """The usage a call reported, unchecked (`validate.usage` checks it); None when it sent none."""
    if not request.HasField("usage"):
        return None
    sent = request.usage
    return Usage(sent.input_tokens, sent.output_tokens, sent.cost_micros, sent.model)


def renew_progress(request: pb.RenewLeaseRequest) -> tuple[str, float | None]:
    """A renewal's progress text and fraction (None when it sent no fraction)."""
    fraction = request.progress_fraction if request.HasField("progress_fraction") else None
    return request.progress, fraction


def postgres_health(health: PostgresHealth | None) -> pb.PostgresStats | None:
    if health is None:
        return None
    message = pb.PostgresStats(
        listener_connected=health.listener_connected,
        listener_reconnects=health.listener_reconnects,
        daemons=health.daemons,
        task_dead_tuples=health.task_dead_tuples,
        task_live_tuples=health.task_live_tuples,
        notifies_sent=health.notifies_sent,
        notifies_heard=health.notifies_heard,
        writers=health.writers,
        writers_in_transaction=health.writers_in_transaction,
        readers=health.readers,
        readers_in_use=health.readers_in_use,
        writable=health.writable,
        commit_outcomes_asked=health.commit_outcomes_asked,
        connections_cut=health.connections_cut,
    )
    message.oldest_transaction_age.FromMilliseconds(round(health.oldest_transaction_s * 1000))
    return message


def teammate(record: TeammateRecord) -> pb.Teammate:
    return pb.Teammate(
        name=record.name,
        roles=record.roles,
        status=int(record.status),  # type: ignore[arg-type]
        require_plan_approval=record.require_plan_approval,
        held_task_ids=record.held_task_ids,
        waiting_for_task_ids=record.waiting_for_task_ids,
        usage=usage(record.usage),
        budget=budget(record.budget),
        daemon=record.daemon,
        task_creation=int(record.task_creation),  # type: ignore[arg-type]
    )


def fill_claim(message: pb.Claim, grant: ClaimGrant) -> None:
    """Sets an empty wire Claim in place (see fill_task)."""
    fill_task(message.task, grant.task)
    message.claim_token = grant.token
    _set_ms(message.lease_expire_time, grant.lease_expire_ms)
    message.attempt = grant.attempt
    message.fence = grant.fence
    previous = grant.previous_attempt
    if previous is not None:
        message.previous_attempt.CopyFrom(attempt(previous))
    if grant.dependency_results:
        message.dependency_results.update(grant.dependency_results)
    message.dependency_results_omitted.extend(grant.dependency_results_omitted)
    if grant.dependency_artifacts:
        artifact_convert.fill_dependency_artifacts(message, grant.dependency_artifacts)
    if grant.review is not None:
        message.review.result = grant.review.result
        message.review.author = grant.review.author
        message.review.round = grant.review.round
    message.rejected_result = grant.rejected_result
    for asked in grant.answers:
        answer = message.answers.add(question=asked.question, answer=asked.answer or "", asked_by=asked.asked_by)
        _set_ms(answer.ask_time, asked.ask_ms)
        if asked.answer_ms is not None:
            _set_ms(answer.answer_time, asked.answer_ms)


ATTEMPT_OUTCOMES: dict[ClaimOutcome | None, pb.AttemptOutcome] = {
    None: pb.ATTEMPT_OUTCOME_IN_PROGRESS,
    ClaimOutcome.COMPLETED: pb.ATTEMPT_OUTCOME_COMPLETED,
    ClaimOutcome.FAILED: pb.ATTEMPT_OUTCOME_FAILED,
    ClaimOutcome.EXPIRED: pb.ATTEMPT_OUTCOME_EXPIRED,
    ClaimOutcome.RELEASED: pb.ATTEMPT_OUTCOME_RELEASED,
    ClaimOutcome.CANCELED: pb.ATTEMPT_OUTCOME_CANCELED,
    ClaimOutcome.REVOKED: pb.ATTEMPT_OUTCOME_REVOKED,
    ClaimOutcome.TIMED_OUT: pb.ATTEMPT_OUTCOME_FAILED,  # a failure; its error says it timed out
    ClaimOutcome.ASKED: pb.ATTEMPT_OUTCOME_ASKED,
    ClaimOutcome.APPROVED: pb.ATTEMPT_OUTCOME_COMPLETED,  # with its verdict
    ClaimOutcome.REJECTED: pb.ATTEMPT_OUTCOME_REJECTED,
    ClaimOutcome.SPLIT: pb.ATTEMPT_OUTCOME_SPLIT,
}


def attempt(record: AttemptRecord) -> pb.TaskAttempt:
    """One claim of a task's history; never its token. A review's shows its verdict."""
    message = pb.TaskAttempt(
        attempt=record.attempt,
        owner=record.owner,
        fence=record.fence,
        claim_time=timestamp(record.claim_ms),
        end_time=timestamp(record.end_ms),
        outcome=ATTEMPT_OUTCOMES[record.outcome],
        error=record.error,
        feedback=record.feedback,
    )
    if record.outcome in (ClaimOutcome.APPROVED, ClaimOutcome.REJECTED):
        message.verdict.approve = record.outcome is ClaimOutcome.APPROVED
        message.verdict.feedback = record.feedback
    return message


def recent_attempts(records: list[AttemptRecord], task_bytes: int) -> list[pb.TaskAttempt]:
    """A task's history (oldest first) as GetTask sends it beside a task of `task_bytes`:
    the newest attempts that fit the reply with it, still oldest first. A hundred
    64 KiB errors would not fit; the latest ones say the most."""
    newest_first = fitting((attempt(record) for record in reversed(records)), REPLY_BYTES - task_bytes)
    return newest_first[::-1]


def idle_response(item: StreamItem) -> pb.IdleResponse:
    response = pb.IdleResponse()
    fill_event(response, item)
    return response


def claim_ended(end: ClaimEnd) -> pb.ClaimEnded:
    return pb.ClaimEnded(
        task_id=end.task_id,
        claim_token=end.token,
        reason=int(end.reason),  # type: ignore[arg-type]
        detail=end.detail,
    )


def fill_event(response: pb.IdleResponse | pb.SessionResponse, item: StreamItem) -> None:
    """Sets the `event` of an Idle or Session response to `item`, in place."""
    if isinstance(item, ClaimGrant):
        fill_claim(response.claim, item)
    elif isinstance(item, BudgetExhausted):
        response.budget_exhausted.CopyFrom(budget_exhausted(item))
    elif item.kind == "shutdown_request":
        request = response.shutdown_request
        request.seq, request.request_id, request.reason = item.seq, item.ref, item.body
        _set_ms(request.send_time, item.send_ms)
        if item.deadline_ms is not None:
            _set_ms(request.deadline_time, item.deadline_ms)
    elif item.kind == "plan_decision":
        decision = response.plan_decision
        decision.seq, decision.plan_id, decision.approve = item.seq, item.ref, item.approve
        decision.feedback = item.body
        _set_ms(decision.send_time, item.send_ms)
    elif item.kind == "proposals_decided":
        proposals = response.proposals_decided
        proposals.seq, proposals.approve, proposals.feedback = item.seq, item.approve, item.body
        proposals.task_ids.extend(item.ref.split("\n"))
        _set_ms(proposals.send_time, item.send_ms)
    else:
        message = response.message
        message.seq, message.sender, message.body = item.seq, item.sender, item.body
        _set_ms(message.send_time, item.send_ms)
