"""The only module that converts between `corral.v1` messages and SDK types.

Requests are built here too, so the sync and async clients share one
definition of every call's wire shape. Zero or unset numbers and durations
mean "daemon default" on the wire; `None` means the same in the SDK.
"""

from __future__ import annotations

import dataclasses
import datetime
from collections.abc import Iterable, Sequence
from typing import Any

import grpc
from google.protobuf import duration_pb2, timestamp_pb2

from corral._errors import CorralError, FieldViolation, InvalidArgument
from corral._tracing import current_trace_parent
from corral._types import (
    Approve,
    Artifact,
    ArtifactAdded,
    Attempt,
    AttemptOutcome,
    Budget,
    BudgetExhausted,
    BudgetExhaustedEvent,
    ClaimEnded,
    ClaimEndReason,
    ClaimInfo,
    ConcurrencyLimit,
    DependencyArtifact,
    HeldResource,
    Identity,
    IdleTimeout,
    LeadMessage,
    Message,
    NewTeammate,
    OutputChunk,
    PlanDecided,
    PlanDecision,
    PlanSubmitted,
    PostgresStats,
    ProposalsDecided,
    ProposalsDecidedEvent,
    QuestionAnswer,
    QuestionAnswered,
    QuestionAsked,
    Reject,
    ResourceWait,
    ReviewDecided,
    ReviewItem,
    ReviewPolicy,
    ShutdownAnswered,
    ShutdownRequest,
    Stats,
    Task,
    TaskChanged,
    TaskCreationPolicy,
    TaskSpec,
    TasksProposed,
    TaskState,
    TeammateAvailability,
    TeammateChanged,
    TeammateChangeReason,
    TeammateInfo,
    TeammateStatus,
    Usage,
    Verdict,
    WaitingFor,
    WatchEvent,
    WriterStats,
)
from corral.v1 import corral_pb2 as pb

InboxItem = Message | ShutdownRequest | PlanDecision | ProposalsDecided
IdleItem = InboxItem | ClaimInfo | IdleTimeout | BudgetExhausted | ClaimEnded

_UTC = datetime.UTC

# ---------------------------------------------------------------- scalars


def time_from_pb(parent: Any, field_name: str) -> datetime.datetime | None:
    """A Timestamp field as an aware UTC datetime, or None when unset."""
    if not parent.HasField(field_name):
        return None
    stamp: timestamp_pb2.Timestamp = getattr(parent, field_name)
    return stamp.ToDatetime(tzinfo=_UTC)


def time_to_pb(value: datetime.datetime) -> timestamp_pb2.Timestamp:
    """An aware datetime as a Timestamp (naive datetimes are taken as UTC)."""
    stamp = timestamp_pb2.Timestamp()
    stamp.FromDatetime(value if value.tzinfo else value.replace(tzinfo=_UTC))
    return stamp


def duration_from_pb(parent: Any, field_name: str) -> datetime.timedelta | None:
    """A Duration field as a timedelta, or None when unset."""
    if not parent.HasField(field_name):
        return None
    duration: duration_pb2.Duration = getattr(parent, field_name)
    return duration.ToTimedelta()


def duration_to_pb(value: datetime.timedelta | float | None) -> duration_pb2.Duration | None:
    """A timedelta (or seconds) as a Duration; None stays None (= default)."""
    if value is None:
        return None
    if not isinstance(value, datetime.timedelta):
        value = datetime.timedelta(seconds=value)
    duration = duration_pb2.Duration()
    duration.FromTimedelta(value)
    return duration


# ---------------------------------------------------------------- board


def wire_state_name(state: TaskState) -> str:
    """The wire enum name of a TaskState (protobuf accepts names for enum fields)."""
    return f"TASK_STATE_{state.name}"


def task_spec_to_pb(spec: TaskSpec) -> pb.TaskSpec:
    """A TaskSpec as the wire message."""
    return pb.TaskSpec(
        id=spec.id,
        title=spec.title,
        description=spec.description,
        payload=spec.payload,
        depends_on=list(spec.depends_on),
        priority=spec.priority,
        max_attempts=spec.max_attempts or 0,
        lease_duration=duration_to_pb(spec.lease_duration),
        required_role=spec.required_role,
        not_before_time=time_to_pb(spec.not_before) if spec.not_before is not None else None,
        retry_backoff=duration_to_pb(spec.retry_backoff),
        retry_backoff_max=duration_to_pb(spec.retry_backoff_max),
        trace_parent=spec.trace_parent,
        concurrency_key=spec.concurrency_key,
        attempt_timeout=duration_to_pb(spec.attempt_timeout),
        review=review_policy_to_pb(spec.review),
        resources=list(spec.resources),
        shared_resources=list(spec.shared_resources),
    )


def review_policy_to_pb(policy: ReviewPolicy | None) -> pb.ReviewPolicy | None:
    """A ReviewPolicy as the wire message; None (no review) stays unset."""
    if policy is None:
        return None
    return pb.ReviewPolicy(reviewer_role=policy.reviewer_role, max_rounds=policy.max_rounds)


def review_policy_from_pb(message: Any) -> ReviewPolicy | None:
    """The `review` field of a wire TaskSpec or Task; None when unset (no review)."""
    if not message.HasField("review"):
        return None
    return ReviewPolicy(reviewer_role=message.review.reviewer_role, max_rounds=message.review.max_rounds)


def verdict_to_pb(verdict: Verdict) -> pb.ReviewVerdict:
    """An Approve or Reject as the wire ReviewVerdict."""
    return pb.ReviewVerdict(approve=verdict.approve, feedback=verdict.feedback)


def verdict_from_pb(message: pb.ReviewVerdict) -> Verdict:
    """A wire ReviewVerdict as Approve or Reject."""
    return Approve(message.feedback) if message.approve else Reject(message.feedback)


def task_spec_from_pb(message: pb.TaskSpec) -> TaskSpec:
    """The wire TaskSpec as an SDK TaskSpec (used by tests and tools)."""
    return TaskSpec(
        id=message.id,
        title=message.title,
        description=message.description,
        payload=message.payload,
        depends_on=tuple(message.depends_on),
        priority=message.priority,
        max_attempts=message.max_attempts or None,
        lease_duration=duration_from_pb(message, "lease_duration"),
        required_role=message.required_role,
        not_before=time_from_pb(message, "not_before_time"),
        retry_backoff=duration_from_pb(message, "retry_backoff"),
        retry_backoff_max=duration_from_pb(message, "retry_backoff_max"),
        trace_parent=message.trace_parent,
        concurrency_key=message.concurrency_key,
        attempt_timeout=duration_from_pb(message, "attempt_timeout"),
        review=review_policy_from_pb(message),
        resources=tuple(message.resources),
        shared_resources=tuple(message.shared_resources),
    )


def task_from_pb(message: pb.Task) -> Task:
    """The wire Task as an SDK Task."""
    return Task(
        id=message.id,
        state=TaskState(message.state),
        title=message.title,
        description=message.description,
        payload=message.payload,
        depends_on=tuple(message.depends_on),
        priority=message.priority,
        required_role=message.required_role,
        max_attempts=message.max_attempts,
        lease_duration=duration_from_pb(message, "lease_duration") or datetime.timedelta(0),
        owner=message.owner,
        attempt=message.attempt,
        attempts_used=message.attempts_used,
        result=message.result,
        error=message.error,
        seq=message.seq,
        create_time=time_from_pb(message, "create_time"),
        lease_expire_time=time_from_pb(message, "lease_expire_time"),
        finish_time=time_from_pb(message, "finish_time"),
        not_before_time=time_from_pb(message, "not_before_time"),
        retry_backoff=duration_from_pb(message, "retry_backoff") or datetime.timedelta(0),
        retry_backoff_max=duration_from_pb(message, "retry_backoff_max") or datetime.timedelta(0),
        ready_time=time_from_pb(message, "ready_time"),
        progress=message.progress,
        progress_fraction=fraction_from_pb(message),
        progress_time=time_from_pb(message, "progress_time"),
        waiting_for=waiting_for_from_pb(message.waiting_for) if message.HasField("waiting_for") else None,
        trace_parent=message.trace_parent,
        concurrency_key=message.concurrency_key,
        usage=usage_from_pb(message.usage),
        attempt_timeout=duration_from_pb(message, "attempt_timeout"),
        question=message.question,
        review=review_policy_from_pb(message),
        review_rounds=message.review_rounds,
        proposed_by=message.proposed_by,
        discovered_from=message.discovered_from,
        artifacts=tuple(artifact_from_pb(artifact) for artifact in message.artifacts),
        resources=tuple(message.resources),
        shared_resources=tuple(message.shared_resources),
    )


def artifact_from_pb(message: pb.Artifact) -> Artifact:
    """A wire Artifact (its create_time is always set; the epoch stands in if not)."""
    return Artifact(
        name=message.name,
        media_type=message.media_type,
        size=message.size,
        sha256=message.sha256,
        attempt=message.attempt,
        create_time=time_from_pb(message, "create_time") or _EPOCH,
    )


_EPOCH = datetime.datetime.fromtimestamp(0, datetime.UTC)


def artifact_to_pb(artifact: Artifact) -> pb.Artifact:
    """An SDK Artifact as the wire message (used by tests and tools)."""
    return pb.Artifact(
        name=artifact.name,
        media_type=artifact.media_type,
        size=artifact.size,
        sha256=artifact.sha256,
        attempt=artifact.attempt,
        create_time=time_to_pb(artifact.create_time),
    )


def waiting_for_from_pb(message: pb.WaitingFor) -> WaitingFor:
    return WaitingFor(
        dependencies=tuple(message.dependencies),
        ready_time=time_from_pb(message, "ready_time"),
        teammates=TeammateAvailability(message.teammates),
        concurrency_key=message.concurrency_key,
        resources=tuple(
            ResourceWait(
                resource=wait.resource,
                held_by_task_id=wait.held_by_task_id,
                held_resource=wait.held_resource,
                held_exclusive=wait.held_exclusive,
            )
            for wait in message.resources
        ),
    )


def held_resource_from_pb(message: pb.HeldResource) -> HeldResource:
    return HeldResource(
        resource=message.resource, task_id=message.task_id, teammate=message.teammate, exclusive=message.exclusive
    )


def concurrency_limit_from_pb(message: pb.ConcurrencyLimit) -> ConcurrencyLimit:
    return ConcurrencyLimit(key=message.key, limit=message.limit, in_progress=message.in_progress)


def usage_from_pb(message: pb.Usage) -> Usage:
    """A wire Usage."""
    return Usage(message.input_tokens, message.output_tokens, message.cost_micros, message.model)


_INT64 = range(-(2**63), 2**63)


def int64(field: str, value: int) -> int:
    """`value` for a wire int64 field, or InvalidArgument naming `field` (protobuf would
    raise a bare ValueError)."""
    if value not in _INT64:
        description = f"{value} does not fit in 64 bits"
        raise InvalidArgument(
            f"{field}: {description}",
            code=grpc.StatusCode.INVALID_ARGUMENT,
            field_violations=[FieldViolation(field, description)],
        )
    return value


def usage_to_pb(usage: Usage | None) -> pb.Usage | None:
    """A usage report for the wire; None (nothing to report) stays unset."""
    if usage is None:
        return None
    return pb.Usage(
        input_tokens=int64("usage.input_tokens", usage.input_tokens),
        output_tokens=int64("usage.output_tokens", usage.output_tokens),
        cost_micros=int64("usage.cost_micros", usage.cost_micros),
        model=usage.model,
    )


def budget_from_pb(message: pb.Budget) -> Budget:
    """A wire Budget."""
    return Budget(message.max_cost_micros, message.max_tokens)


def budget_exhausted_from_pb(message: pb.BudgetExhausted) -> BudgetExhausted:
    """A wire BudgetExhausted."""
    return BudgetExhausted(message.teammate, usage_from_pb(message.spent), budget_from_pb(message.budget))


def attempt_from_pb(message: pb.TaskAttempt) -> Attempt:
    """A wire TaskAttempt as an SDK Attempt."""
    return Attempt(
        attempt=message.attempt,
        owner=message.owner,
        fence=message.fence,
        claim_time=time_from_pb(message, "claim_time"),
        end_time=time_from_pb(message, "end_time"),
        outcome=AttemptOutcome(message.outcome),
        error=message.error,
        verdict=verdict_from_pb(message.verdict) if message.HasField("verdict") else None,
        feedback=message.feedback,
    )


def task_with_attempts_from_pb(response: pb.GetTaskResponse) -> Task:
    """A GetTask reply as an SDK Task, its claim history included."""
    return dataclasses.replace(
        task_from_pb(response.task), attempts=tuple(attempt_from_pb(message) for message in response.attempts)
    )


def fraction_from_pb(message: pb.Task) -> float | None:
    """The task's progress fraction, or None when unset. The wire carries a
    32-bit float; 7 significant digits give back the value the holder sent
    (0.6, not 0.6000000238418579)."""
    if not message.HasField("progress_fraction"):
        return None
    return float(f"{message.progress_fraction:.7g}")


def task_to_pb(task: Task) -> pb.Task:
    """An SDK Task as the wire message (used by tests and tools)."""
    message = pb.Task(
        id=task.id,
        state=wire_state_name(task.state),
        title=task.title,
        description=task.description,
        payload=task.payload,
        depends_on=list(task.depends_on),
        priority=task.priority,
        required_role=task.required_role,
        max_attempts=task.max_attempts,
        lease_duration=duration_to_pb(task.lease_duration),
        owner=task.owner,
        attempt=task.attempt,
        attempts_used=task.attempts_used,
        result=task.result,
        error=task.error,
        seq=task.seq,
        progress=task.progress,
        progress_fraction=task.progress_fraction,
        usage=usage_to_pb(task.usage),
        question=task.question,
        review=review_policy_to_pb(task.review),
        review_rounds=task.review_rounds,
        proposed_by=task.proposed_by,
        discovered_from=task.discovered_from,
        artifacts=[artifact_to_pb(artifact) for artifact in task.artifacts],
    )
    for name in ("create_time", "lease_expire_time", "finish_time", "progress_time"):
        value = getattr(task, name)
        if value is not None:
            getattr(message, name).CopyFrom(time_to_pb(value))
    return message


def created_tasks_from_pb(request: pb.CreateTasksRequest, response: pb.CreateTasksResponse) -> list[Task]:
    """The batch as created: each spec sent, with where the reply says it stands."""
    if len(response.tasks) != len(request.tasks):
        raise CorralError(f"CreateTasks answered {len(response.tasks)} tasks for a batch of {len(request.tasks)}")
    return [
        Task(
            id=sent.id,
            state=TaskState(stored.state),
            title=sent.title,
            description=sent.description,
            payload=sent.payload,
            depends_on=tuple(sent.depends_on),
            priority=sent.priority,
            required_role=sent.required_role,
            max_attempts=stored.max_attempts,
            lease_duration=duration_from_pb(stored, "lease_duration") or datetime.timedelta(0),
            seq=stored.seq,
            create_time=time_from_pb(stored, "create_time"),
            finish_time=time_from_pb(stored, "finish_time"),
            not_before_time=time_from_pb(sent, "not_before_time"),
            trace_parent=sent.trace_parent,
            review=review_policy_from_pb(stored) or review_policy_from_pb(sent),
        )
        for sent, stored in zip(request.tasks, response.tasks, strict=True)
    ]


def tasks_from_pb(messages: Iterable[pb.Task]) -> list[Task]:
    """Several wire Tasks as SDK Tasks."""
    return [task_from_pb(message) for message in messages]


def identity_from_pb(message: pb.GetIdentityResponse) -> Identity:
    """GetIdentity's answer as Identity."""
    return Identity(name=message.identity, role=message.role, roles=tuple(message.roles))


def teammate_from_pb(message: pb.Teammate) -> TeammateInfo:
    """The wire Teammate as TeammateInfo."""
    return TeammateInfo(
        name=message.name,
        roles=tuple(message.roles),
        status=TeammateStatus(message.status) if message.status else TeammateStatus.OFFLINE,
        require_plan_approval=message.require_plan_approval,
        held_task_ids=tuple(message.held_task_ids),
        waiting_for_task_ids=tuple(message.waiting_for_task_ids),
        usage=usage_from_pb(message.usage),
        budget=budget_from_pb(message.budget),
        daemon=message.daemon,
        task_creation=task_creation_from_pb(message.task_creation),
    )


def task_creation_from_pb(value: int) -> TaskCreationPolicy:
    """A wire TaskCreationPolicy; unset (an older daemon) is the default, PROPOSE."""
    try:
        return TaskCreationPolicy(value)
    except ValueError:
        return TaskCreationPolicy.PROPOSE


def task_creation_to_pb(policy: TaskCreationPolicy) -> str:
    """The wire enum name of a TaskCreationPolicy (protobuf accepts names for enum fields)."""
    if not isinstance(policy, TaskCreationPolicy):
        description = f"expected corral.TaskCreationPolicy, got {type(policy).__name__}"
        raise InvalidArgument(f"policy: {description}", field_violations=[FieldViolation("policy", description)])
    return f"TASK_CREATION_POLICY_{policy.name}"


def new_teammate_from_pb(response: pb.AddTeammateResponse) -> NewTeammate:
    """AddTeammate's answer as NewTeammate."""
    return NewTeammate(info=teammate_from_pb(response.teammate), token=response.token)


def stats_from_pb(response: pb.GetStatsResponse) -> Stats:
    """GetStats' answer as Stats; state names the SDK does not know are skipped."""
    return Stats(
        tasks_by_state=_enum_counts(TaskState, "TASK_STATE_", response.tasks_by_state),
        teammates_by_status=_enum_counts(TeammateStatus, "TEAMMATE_STATUS_", response.teammates_by_status),
        writer=WriterStats(**{name: getattr(response.writer, name) for name in WriterStats.__dataclass_fields__}),
        open_streams=response.open_streams,
        refused_calls=response.refused_calls,
        loop_lag_p99_ms=response.loop_lag_p99_ms,
        loop_lag_max_ms=response.loop_lag_max_ms,
        usage=usage_from_pb(response.usage),
        store=response.store or "sqlite",
        postgres=_postgres_from_pb(response.postgres) if response.HasField("postgres") else None,
        held_resources=tuple(held_resource_from_pb(held) for held in response.held_resources),
        held_resources_total=response.held_resources_total,
    )


def _postgres_from_pb(message: pb.PostgresStats) -> PostgresStats:
    return PostgresStats(
        listener_connected=message.listener_connected,
        listener_reconnects=message.listener_reconnects,
        daemons=message.daemons,
        oldest_transaction_age_s=message.oldest_transaction_age.ToMilliseconds() / 1000,
        task_dead_tuples=message.task_dead_tuples,
        task_live_tuples=message.task_live_tuples,
        notifies_sent=message.notifies_sent,
        notifies_heard=message.notifies_heard,
    )


def _enum_counts(enum_type: Any, prefix: str, counts: Any) -> dict[Any, int]:
    result = {}
    for key, count in counts.items():
        member = enum_type.__members__.get(key.removeprefix(prefix))
        if member is not None:
            result[member] = count
    return result


# ---------------------------------------------------------------- inbox and idle


def message_from_pb(message: pb.Message) -> Message:
    """A wire Message."""
    return Message(
        seq=message.seq, send_time=time_from_pb(message, "send_time"), sender=message.sender, body=message.body
    )


def idle_item_from_pb(response: pb.IdleResponse | pb.SessionResponse) -> IdleItem | None:
    """One event of an Idle or Session stream; None for an event kind this SDK does not know."""
    kind = response.WhichOneof("event")
    if kind == "message":
        return message_from_pb(response.message)
    if kind == "shutdown_request":
        request = response.shutdown_request
        return ShutdownRequest(
            seq=request.seq,
            send_time=time_from_pb(request, "send_time"),
            request_id=request.request_id,
            reason=request.reason,
            deadline_time=time_from_pb(request, "deadline_time"),
        )
    if kind == "plan_decision":
        decision = response.plan_decision
        return PlanDecision(
            seq=decision.seq,
            send_time=time_from_pb(decision, "send_time"),
            plan_id=decision.plan_id,
            approve=decision.approve,
            feedback=decision.feedback,
        )
    if kind == "proposals_decided":
        notice = response.proposals_decided
        return ProposalsDecided(
            seq=notice.seq,
            send_time=time_from_pb(notice, "send_time"),
            task_ids=tuple(notice.task_ids),
            approve=notice.approve,
            feedback=notice.feedback,
        )
    if kind == "claim":
        return claim_from_pb(response.claim)
    if kind == "idle_timeout":
        return IdleTimeout(idle_polls=response.idle_timeout.idle_polls)
    if kind == "budget_exhausted":
        return budget_exhausted_from_pb(response.budget_exhausted)
    if kind == "claim_ended":
        ended = response.claim_ended
        if ended.reason not in _CLAIM_END_REASONS:
            return None  # a reason this SDK does not know
        return ClaimEnded(
            task_id=ended.task_id,
            claim_token=ended.claim_token,
            reason=ClaimEndReason(ended.reason),
            detail=ended.detail,
        )
    return None


_CLAIM_END_REASONS = frozenset(reason.value for reason in ClaimEndReason)


def claim_from_pb(claim: pb.Claim) -> ClaimInfo:
    """A wire Claim as ClaimInfo."""
    return ClaimInfo(
        task=task_from_pb(claim.task),
        token=claim.claim_token,
        lease_expire_time=time_from_pb(claim, "lease_expire_time"),
        attempt=claim.attempt,
        fence=claim.fence,
        previous_attempt=attempt_from_pb(claim.previous_attempt) if claim.HasField("previous_attempt") else None,
        # In depends_on order, as the daemon chose them.
        dependency_results={
            dep: claim.dependency_results[dep] for dep in claim.task.depends_on if dep in claim.dependency_results
        },
        dependency_results_omitted=tuple(claim.dependency_results_omitted),
        answers=tuple(question_answer_from_pb(answer) for answer in claim.answers),
        review=review_item_from_pb(claim.review) if claim.HasField("review") else None,
        rejected_result=claim.rejected_result,
        dependency_artifacts=tuple(
            DependencyArtifact(task_id=dep.task_id, artifact=artifact_from_pb(dep.artifact))
            for dep in claim.dependency_artifacts
        ),
    )


def review_item_from_pb(message: pb.ReviewItem) -> ReviewItem:
    """A wire ReviewItem: the result a review's claim decides on."""
    return ReviewItem(result=message.result, author=message.author, round=message.round)


def question_answer_from_pb(message: pb.QuestionAnswer) -> QuestionAnswer:
    """A wire QuestionAnswer."""
    return QuestionAnswer(
        question=message.question,
        answer=message.answer,
        asked_by=message.asked_by,
        ask_time=time_from_pb(message, "ask_time"),
        answer_time=time_from_pb(message, "answer_time"),
    )


def idle_request(
    *,
    max_idle_polls: int | None,
    poll_interval: datetime.timedelta | float | None,
    slots: int | None,
    hold_slots_until_freed: bool = False,
    busy_claim_tokens: Sequence[str] = (),
) -> pb.IdleRequest:
    """The Idle request; None for any option means the daemon's default."""
    return pb.IdleRequest(
        max_idle_polls=max_idle_polls or 0,
        poll_interval=duration_to_pb(poll_interval),
        slots=slots or 0,
        hold_slots_until_freed=hold_slots_until_freed,
        busy_claim_tokens=list(busy_claim_tokens)[: max(slots or 0, 1)] if hold_slots_until_freed else [],
    )


# ---------------------------------------------------------------- watch


def watch_event_from_pb(response: pb.WatchResponse) -> WatchEvent | None:
    """One Watch stream item; None for an event kind this SDK does not know."""
    seq, time = response.seq, time_from_pb(response, "time")
    kind = response.WhichOneof("event")
    if kind == "task_changed":
        return TaskChanged(seq=seq, time=time, task=task_from_pb(response.task_changed))
    if kind == "teammate_changed":
        changed = response.teammate_changed
        return TeammateChanged(
            seq=seq,
            time=time,
            teammate=teammate_from_pb(changed.teammate),
            status=TeammateStatus(changed.status) if changed.status else TeammateStatus.OFFLINE,
            reason=_change_reason(changed.reason),
        )
    if kind == "message":
        return LeadMessage(seq=seq, time=time, message=message_from_pb(response.message))
    if kind == "plan_submitted":
        plan = response.plan_submitted
        return PlanSubmitted(seq=seq, time=time, plan_id=plan.plan_id, author=plan.author, plan=plan.plan)
    if kind == "plan_decided":
        decided = response.plan_decided
        return PlanDecided(
            seq=seq,
            time=time,
            plan_id=decided.plan_id,
            author=decided.author,
            approve=decided.approve,
            feedback=decided.feedback,
        )
    if kind == "shutdown_answered":
        answer = response.shutdown_answered
        return ShutdownAnswered(
            seq=seq,
            time=time,
            request_id=answer.request_id,
            teammate=answer.teammate,
            approve=answer.approve,
            reason=answer.reason,
        )
    if kind == "budget_exhausted":
        return BudgetExhaustedEvent(seq=seq, time=time, exhausted=budget_exhausted_from_pb(response.budget_exhausted))
    if kind == "question_asked":
        asked = response.question_asked
        return QuestionAsked(
            seq=seq, time=time, task_id=asked.task_id, question=asked.question, asked_by=asked.asked_by
        )
    if kind == "question_answered":
        answered = response.question_answered
        return QuestionAnswered(
            seq=seq, time=time, task_id=answered.task_id, question=answered.question, answer=answered.answer
        )
    if kind == "review_decided":
        review = response.review_decided
        return ReviewDecided(
            seq=seq,
            time=time,
            task_id=review.task_id,
            approve=review.approve,
            feedback=review.feedback,
            reviewer=review.reviewer,
            round=review.round,
        )
    if kind == "tasks_proposed":
        proposed = response.tasks_proposed
        return TasksProposed(
            seq=seq,
            time=time,
            teammate=proposed.teammate,
            task_ids=tuple(proposed.task_ids),
            discovered_from=proposed.discovered_from,
            needs_decision=proposed.needs_decision,
            split=proposed.split,
        )
    if kind == "proposals_decided":
        verdict = response.proposals_decided
        return ProposalsDecidedEvent(
            seq=seq, time=time, task_ids=tuple(verdict.task_ids), approve=verdict.approve, feedback=verdict.feedback
        )
    if kind == "artifact_added":
        added = response.artifact_added
        return ArtifactAdded(
            seq=seq,
            time=time,
            task_id=added.task_id,
            teammate=added.teammate,
            artifact=artifact_from_pb(added.artifact),
        )
    return None


def _change_reason(value: int) -> TeammateChangeReason:
    try:
        return TeammateChangeReason(value)
    except ValueError:  # a newer daemon's reason: report it as unspecified
        return TeammateChangeReason.UNSPECIFIED


# ---------------------------------------------------------------- requests


def create_tasks_request(specs: Iterable[TaskSpec], request_id: str | None) -> pb.CreateTasksRequest:
    """The CreateTasks request for a batch; specs without a trace_parent get the
    caller's current span (with OpenTelemetry installed)."""
    return pb.CreateTasksRequest(tasks=_specs_to_pb(specs), request_id=request_id or "")


# The daemon takes 1 to this many tasks in one ProposeTasks.
PROPOSE_MAX_TASKS = 100


def propose_tasks_request(
    specs: Iterable[TaskSpec], task_id: str = "", claim_token: str = "", *, block: bool = False
) -> pb.ProposeTasksRequest:
    """The ProposeTasks request: `task_id` and `claim_token` name the claim the tasks
    were discovered from (both empty: none). Refuses, before any call, an empty
    proposal or one over PROPOSE_MAX_TASKS tasks (InvalidArgument, as the daemon would)."""
    tasks = _specs_to_pb(specs)
    if not 1 <= len(tasks) <= PROPOSE_MAX_TASKS:
        description = f"a proposal holds 1 to {PROPOSE_MAX_TASKS} tasks, not {len(tasks)}"
        raise InvalidArgument(f"tasks: {description}", field_violations=[FieldViolation("tasks", description)])
    return pb.ProposeTasksRequest(tasks=tasks, task_id=task_id, claim_token=claim_token, block_claimed_task=block)


def _specs_to_pb(specs: Iterable[TaskSpec]) -> list[pb.TaskSpec]:
    """Specs for the wire; those without a trace_parent get the caller's current span
    (with OpenTelemetry installed)."""
    messages = [task_spec_to_pb(spec) for spec in specs]
    trace_parent = current_trace_parent()
    if trace_parent:
        for message in messages:
            message.trace_parent = message.trace_parent or trace_parent
    return messages


def request_shutdown_request(
    name: str, reason: str, grace: datetime.timedelta | float | None
) -> pb.RequestShutdownRequest:
    """The RequestShutdown request; grace None means the daemon's default."""
    return pb.RequestShutdownRequest(name=name, reason=reason, grace=duration_to_pb(grace))


def list_tasks_request(
    states: Iterable[TaskState], owner: str, page_size: int | None, page_token: str
) -> pb.ListTasksRequest:
    """One page request of ListTasks."""
    return pb.ListTasksRequest(
        states=[wire_state_name(state) for state in states],
        owner=owner,
        page_size=page_size or 0,
        page_token=page_token,
    )


def output_chunk_from_pb(message: pb.OutputChunk) -> OutputChunk:
    """A TailOutput chunk."""
    return OutputChunk(attempt=message.attempt, offset=message.offset, data=message.data, end=message.end)
