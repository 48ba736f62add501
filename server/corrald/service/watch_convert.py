"""Watch's events as the wire carries them: one event of the board's log to a WatchResponse
(also what the web board's feed shows, through the same conversion)."""

from __future__ import annotations

from corral.v1 import corral_pb2 as pb

from ..model import TASK_EVENT_KINDS, BudgetExhausted, Event, TaskRecord, TeammateRecord, attempts_used
from . import artifact_convert, convert

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


def watch_response(
    event: Event, task_record: TaskRecord | None, teammate_record: TeammateRecord | None
) -> pb.WatchResponse:
    """One event of the log; `task_record`/`teammate_record` supply the immutable parts."""
    response = pb.WatchResponse(seq=event.seq, time=convert.timestamp(event.time_ms))
    data = event.data
    if event.kind in TASK_EVENT_KINDS and task_record is not None:
        snapshot = convert.task(task_record)
        snapshot.state = data["state"]
        snapshot.owner = data["owner"]
        snapshot.attempt = data["attempt"]
        # Events written before it was recorded have no `failures`: their attempt is the
        # nearest they tell (the same but after a release, a cancel or a reset).
        failures = data.get("failures")
        snapshot.attempts_used = data["attempt"] if failures is None else attempts_used(data["state"], failures)
        snapshot.error = data["error"]
        snapshot.question = data.get("question", "")  # events written before questions have none
        _set_time(snapshot, "lease_expire_time", data["lease_expire_ms"])
        _set_time(snapshot, "finish_time", data["finish_ms"])
        # Events written before progress existed have none of its keys.
        snapshot.progress = data.get("progress", "")
        if data.get("progress_fraction") is None:
            snapshot.ClearField("progress_fraction")
        else:
            snapshot.progress_fraction = data["progress_fraction"]
        _set_time(snapshot, "progress_time", data.get("progress_ms"))
        _set_time(snapshot, "ready_time", data.get("ready_ms"))  # a retry's backoff moves it
        if "cost_micros" in data:  # events written before usage existed show the task's usage now
            snapshot.usage.CopyFrom(
                pb.Usage(
                    input_tokens=data["input_tokens"],
                    output_tokens=data["output_tokens"],
                    cost_micros=data["cost_micros"],
                    model=data["model"],
                )
            )
        snapshot.review_rounds = data.get("review_rounds", 0)
        if data["state"] not in (pb.TASK_STATE_COMPLETED, pb.TASK_STATE_IN_REVIEW):  # in review: the result reviewed
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
    elif event.kind == "budget_exhausted":
        response.budget_exhausted.CopyFrom(convert.budget_exhausted(BudgetExhausted.of_event(data)))
    elif event.kind == "message":
        response.message.CopyFrom(
            pb.Message(send_time=convert.timestamp(event.time_ms), sender=data["sender"], body=data["body"])
        )
    elif event.kind == "plan_submitted":
        response.plan_submitted.CopyFrom(
            pb.PlanSubmitted(plan_id=data["plan_id"], author=data["author"], plan=data["plan"])
        )
    elif event.kind == "plan_decided":
        response.plan_decided.CopyFrom(
            pb.PlanDecided(
                plan_id=data["plan_id"], author=data["author"], approve=data["approve"], feedback=data["feedback"]
            )
        )
    elif event.kind == "shutdown_answered":
        response.shutdown_answered.CopyFrom(
            pb.ShutdownAnswered(
                request_id=data["request_id"], teammate=data["teammate"], approve=data["approve"], reason=data["reason"]
            )
        )
    elif event.kind == "question_asked":
        response.question_asked.CopyFrom(
            pb.QuestionAsked(task_id=data["task_id"], question=data["question"], asked_by=data["asked_by"])
        )
    elif event.kind == "review_decided":
        response.review_decided.CopyFrom(
            pb.ReviewDecided(
                task_id=data["task_id"],
                approve=data["approve"],
                feedback=data["feedback"],
                reviewer=data["reviewer"],
                round=data["round"],
            )
        )
    elif event.kind == "question_answered":
        response.question_answered.CopyFrom(
            pb.QuestionAnswered(task_id=data["task_id"], question=data["question"], answer=data["answer"])
        )
    elif event.kind == "tasks_proposed":
        response.tasks_proposed.CopyFrom(
            pb.TasksProposed(
                teammate=data["teammate"],
                task_ids=data["task_ids"],
                discovered_from=data["discovered_from"],
                needs_decision=data["needs_decision"],
                split=data["split"],
            )
        )
    elif event.kind == "artifact_added":
        response.artifact_added.CopyFrom(artifact_convert.artifact_added(data, event.time_ms))
    elif event.kind == "proposals_decided":
        response.proposals_decided.CopyFrom(
            pb.ProposalsDecided(task_ids=data["task_ids"], approve=data["approve"], feedback=data["feedback"])
        )
    return response


def _set_time(message: pb.Task, field: str, ms: int | None) -> None:
    if ms is None:
        message.ClearField(field)
    else:
        getattr(message, field).CopyFrom(convert.timestamp(ms))
