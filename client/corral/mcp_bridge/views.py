"""corral values as the plain data a tool result carries; text from other parties
goes through a TextBudget, labelled with its source. No claim token ever appears."""

from __future__ import annotations

import datetime
from typing import Any

import corral
from corral import aio
from corral._claimstate import seconds_until

from .rendering import TextBudget

__all__ = [
    "answer",
    "artifact_view",
    "claim",
    "review",
    "claim_ended",
    "event",
    "message",
    "plan_decision",
    "proposals_decided",
    "role_of",
    "shutdown_request",
    "task",
    "teammate",
    "waiting_for",
]


# A claim shows this many dependency results at most; the rest are named in *_omitted.
_DEPENDENCY_RESULTS_SHOWN = 50
# A task or a claim lists this many artifacts at most (references: a few hundred bytes each).
_ARTIFACTS_SHOWN = 50


def role_of(name: str) -> str:
    """The role of a sender, by name: the Lead's identity is "lead"."""
    return "lead" if name == "lead" else "teammate"


def iso(when: datetime.datetime | None) -> str | None:
    return when.isoformat() if when is not None else None


def _seconds(span: datetime.timedelta | None) -> float | None:
    return span.total_seconds() if span is not None else None


def task(found: corral.Task, budget: TextBudget, *, offset: int = 0, brief: bool = False) -> dict[str, Any]:
    """A task; `brief` leaves out its texts (for listings), else they are labelled and paged.
    A NEEDS_INPUT task carries its question, labelled as the asker's; a proposed task
    says who proposed it and from which task, and its texts are labelled as the proposer's."""
    out: dict[str, Any] = {
        "id": found.id,
        "state": found.state.name,
        "depends_on": list(found.depends_on),
        "priority": found.priority,
        "owner": found.owner,
        "attempt": found.attempt,
        "max_attempts": found.max_attempts,
        "required_role": found.required_role,
        "concurrency_key": found.concurrency_key,
        "progress": found.progress,
        "progress_fraction": found.progress_fraction,
        "lease_expire_time": iso(found.lease_expire_time),
        "finish_time": iso(found.finish_time),
    }
    if found.resources or found.shared_resources:
        # The paths the task may edit (exclusive) or read (shared) while it runs.
        out["resources"] = list(found.resources)
        out["shared_resources"] = list(found.shared_resources)
    if found.waiting_for is not None:
        out["waiting_for"] = waiting_for(found.waiting_for)
    if found.review is not None:
        # Who reviews the result before it is COMPLETED ("": the Lead), and the rejections so far.
        out["review"] = {"reviewer_role": found.review.reviewer_role, "max_rounds": found.review.max_rounds}
        out["review_rounds"] = found.review_rounds
    if found.proposed_by:
        out["proposed_by"] = found.proposed_by
        out["discovered_from"] = found.discovered_from
    author, role = (found.proposed_by, "teammate") if found.proposed_by else ("lead", "lead")
    out["title"] = budget.labelled(found.title, source=author, role=role)
    if found.question:
        out["question"] = budget.labelled(found.question, source="teammate", role="teammate")
    if brief:
        return out
    out["description"] = budget.labelled(found.description, source=author, role=role, offset=offset)
    out["payload"] = budget.labelled(found.payload, source=author, role=role, offset=offset)
    if found.result:
        out["result"] = budget.labelled(found.result, source=found.owner or "teammate", role="teammate", offset=offset)
    if found.error:
        out["error"] = budget.labelled(found.error, source=found.owner or "teammate", role="teammate")
    if found.attempts:
        out["attempts"] = [_attempt(a, budget) for a in found.attempts[-5:]]
    if found.artifacts:
        out["artifacts"] = [artifact_view(a) for a in found.artifacts[:_ARTIFACTS_SHOWN]]
        if len(found.artifacts) > _ARTIFACTS_SHOWN:
            out["artifacts_omitted"] = len(found.artifacts) - _ARTIFACTS_SHOWN  # `corral artifacts list` has all
    return out


def waiting_for(waiting: corral.WaitingFor) -> dict[str, Any]:
    """What holds a PENDING task back, only the reasons that hold."""
    out: dict[str, Any] = {}
    if waiting.dependencies:
        out["dependencies"] = list(waiting.dependencies)
    if waiting.ready_time is not None:
        out["ready_time"] = iso(waiting.ready_time)
    if waiting.concurrency_key:
        out["concurrency_key"] = waiting.concurrency_key
    if waiting.resources:
        out["resources"] = [
            {
                "resource": wait.resource,
                "held_by_task_id": wait.held_by_task_id,
                "held_resource": wait.held_resource,
                "held_exclusive": wait.held_exclusive,
            }
            for wait in waiting.resources
        ]
    if waiting.teammates is not corral.TeammateAvailability.SOME_ONLINE:
        out["teammates"] = waiting.teammates.name
    return out


def artifact_view(artifact: corral.Artifact) -> dict[str, Any]:
    """An artifact as the model sees it: a reference, never the bytes."""
    return {
        "name": artifact.name,
        "media_type": artifact.media_type,
        "size": artifact.size,
        "sha256": artifact.sha256,
        "attempt": artifact.attempt,
        "create_time": artifact.create_time.isoformat(),
    }


def _attempt(ended: corral.Attempt, budget: TextBudget) -> dict[str, Any]:
    """One claim of a task's history; a review's says its verdict, a rejection its feedback."""
    out: dict[str, Any] = {
        "attempt": ended.attempt,
        "owner": ended.owner,
        "outcome": ended.outcome.name,
        "error": ended.error[:500],
    }
    if ended.verdict is not None:
        out["verdict"] = "approve" if ended.verdict.approve else "reject"
    if ended.feedback:
        out["feedback"] = budget.labelled(ended.feedback, source=ended.owner, role=role_of(ended.owner))
    return out


def review(held: aio.Claim, budget: TextBudget, *, resumed: bool) -> dict[str, Any]:
    """A review's claim as the model sees it: the task, the result to judge (labelled as
    its author's), whose it is and which round; answered with submit_review."""
    item = held.review
    assert item is not None, "a work claim is shown with claim()"
    return {
        "task_id": held.task.id,
        "author": item.author,
        "round": item.round,
        "fence": held.fence,
        "lease_expire_time": iso(held.lease_expire_time),
        "lease_seconds_left": round(seconds_until(held.lease_expire_time), 3),
        "resumed": resumed,
        "task": task(held.task, budget, brief=True),
        "result": budget.labelled(item.result, source=item.author, role="teammate"),
    }


def claim(held: aio.Claim, budget: TextBudget, *, resumed: bool) -> dict[str, Any]:
    """A claim as the model sees it: the task, its lease, the Lead's answers to the
    questions asked on it, what its dependencies produced."""
    info = held.info
    out: dict[str, Any] = {
        "task_id": held.task.id,
        "attempt": held.attempt,
        "fence": held.fence,
        "lease_expire_time": iso(held.lease_expire_time),
        "lease_seconds_left": round(seconds_until(held.lease_expire_time), 3),
        "resumed": resumed,
        "task": task(held.task, budget),
    }
    if held.answers:
        out["answers"] = [answer(given, budget) for given in held.answers]
    if held.rejected_result:
        # A rework: the result a review rejected (the feedback is in previous_attempt).
        out["rejected_result"] = budget.labelled(held.rejected_result, source=f"task {held.task.id}", role="teammate")
    out["dependency_results"] = {}
    out["dependency_results_omitted"] = list(info.dependency_results_omitted)
    for dep, result in info.dependency_results.items():
        if len(out["dependency_results"]) >= _DEPENDENCY_RESULTS_SHOWN or budget.left <= 0:
            out["dependency_results_omitted"].append(dep)  # get_task(dep) has its result
            continue
        out["dependency_results"][dep] = budget.labelled(result, source=f"task {dep}", role="teammate")
    if held.dependency_artifacts:
        # References only: the Lead (get_artifact) or the SDK reads the bytes.
        shown = held.dependency_artifacts[:_ARTIFACTS_SHOWN]
        out["dependency_artifacts"] = [{"task_id": d.task_id, **artifact_view(d.artifact)} for d in shown]
        if len(held.dependency_artifacts) > _ARTIFACTS_SHOWN:
            out["dependency_artifacts_omitted"] = len(held.dependency_artifacts) - _ARTIFACTS_SHOWN
    previous = info.previous_attempt
    if previous is not None:
        out["previous_attempt"] = {
            "attempt": previous.attempt,
            "owner": previous.owner,
            "outcome": previous.outcome.name,
            "error": budget.labelled(previous.error, source=previous.owner, role="teammate"),
        }
        if previous.feedback:  # a review's rejection: what to change
            out["previous_attempt"]["feedback"] = budget.labelled(
                previous.feedback, source=previous.owner, role=role_of(previous.owner)
            )
    return out


def answer(given: corral.QuestionAnswer, budget: TextBudget) -> dict[str, Any]:
    """A question asked on a task and the Lead's answer to it."""
    return {
        "question": budget.labelled(given.question, source=given.asked_by, role="teammate"),
        "answer": budget.labelled(given.answer, source="lead", role="lead"),
        "ask_time": iso(given.ask_time),
        "answer_time": iso(given.answer_time),
    }


def message(item: corral.Message, budget: TextBudget) -> dict[str, Any]:
    return {
        "seq": item.seq,
        "send_time": iso(item.send_time),
        "body": budget.labelled(item.body, source=item.sender, role=role_of(item.sender)),
    }


def shutdown_request(item: corral.ShutdownRequest, budget: TextBudget) -> dict[str, Any]:
    return {
        "request_id": item.request_id,
        "deadline_time": iso(item.deadline_time),
        "reason": budget.labelled(item.reason, source="lead", role="lead"),
    }


def plan_decision(item: corral.PlanDecision, budget: TextBudget) -> dict[str, Any]:
    return {
        "plan_id": item.plan_id,
        "approve": item.approve,
        "feedback": budget.labelled(item.feedback, source="lead", role="lead"),
    }


def proposals_decided(item: corral.ProposalsDecided, budget: TextBudget) -> dict[str, Any]:
    """The Lead's decision on tasks this teammate proposed."""
    return {
        "task_ids": list(item.task_ids),
        "approve": item.approve,
        "feedback": budget.labelled(item.feedback, source="lead", role="lead"),
    }


def claim_ended(item: corral.ClaimEnded) -> dict[str, Any]:
    return {"task_id": item.task_id, "reason": item.reason.name, "detail": item.detail[:500]}


def teammate(mate: corral.TeammateInfo) -> dict[str, Any]:
    return {
        "name": mate.name,
        "roles": list(mate.roles),
        "status": mate.status.name,
        "require_plan_approval": mate.require_plan_approval,
        "held_task_ids": list(mate.held_task_ids),
        "task_creation": mate.task_creation.name,
    }


def event(item: corral.WatchEvent, budget: TextBudget) -> dict[str, Any]:
    """One Watch event, for the Lead's watch_events."""
    out: dict[str, Any] = {"seq": item.seq, "time": iso(item.time)}
    if isinstance(item, corral.QuestionAsked):
        out.update(kind="question_asked", task_id=item.task_id, asked_by=item.asked_by)
        out["question"] = budget.labelled(item.question, source=item.asked_by, role="teammate")
    elif isinstance(item, corral.QuestionAnswered):
        out.update(kind="question_answered", task_id=item.task_id)
        out["question"] = budget.labelled(item.question, source="teammate", role="teammate")
        out["answer"] = budget.labelled(item.answer, source="lead", role="lead")
    elif isinstance(item, corral.ReviewDecided):
        out.update(kind="review_decided", task_id=item.task_id, approve=item.approve, reviewer=item.reviewer)
        out["round"] = item.round
        out["feedback"] = budget.labelled(item.feedback, source=item.reviewer, role=role_of(item.reviewer))
    elif isinstance(item, corral.TaskChanged):
        t = item.task
        out.update(kind="task_changed", task_id=t.id, state=t.state.name, owner=t.owner, attempt=t.attempt)
        if t.error:
            out["error"] = budget.labelled(t.error, source=t.owner or "teammate", role="teammate")
        if t.progress:
            out["progress"] = budget.labelled(t.progress, source=t.owner or "teammate", role="teammate")
        if t.question:
            out["question"] = budget.labelled(t.question, source="teammate", role="teammate")
    elif isinstance(item, corral.TeammateChanged):
        out.update(kind="teammate_changed", teammate=item.teammate.name, status=item.status.name)
        out["reason"] = item.reason.name
    elif isinstance(item, corral.LeadMessage):
        out.update(kind="message", message=message(item.message, budget))
    elif isinstance(item, corral.PlanSubmitted):
        out.update(kind="plan_submitted", plan_id=item.plan_id, author=item.author)
        out["plan"] = budget.labelled(item.plan, source=item.author, role="teammate")
    elif isinstance(item, corral.PlanDecided):
        out.update(kind="plan_decided", plan_id=item.plan_id, author=item.author, approve=item.approve)
        out["feedback"] = budget.labelled(item.feedback, source="lead", role="lead")
    elif isinstance(item, corral.ShutdownAnswered):
        out.update(kind="shutdown_answered", request_id=item.request_id, teammate=item.teammate)
        out["approve"] = item.approve
        out["reason"] = budget.labelled(item.reason, source=item.teammate, role="teammate")
    elif isinstance(item, corral.TasksProposed):
        out.update(kind="tasks_proposed", teammate=item.teammate, task_ids=list(item.task_ids))
        out.update(discovered_from=item.discovered_from, needs_decision=item.needs_decision, split=item.split)
    elif isinstance(item, corral.ProposalsDecidedEvent):
        out.update(kind="proposals_decided", task_ids=list(item.task_ids), approve=item.approve)
        out["feedback"] = budget.labelled(item.feedback, source="lead", role="lead")
    elif isinstance(item, corral.ArtifactAdded):
        out.update(kind="artifact_added", task_id=item.task_id, teammate=item.teammate)
        out["artifact"] = artifact_view(item.artifact)
    elif isinstance(item, corral.BudgetExhaustedEvent):
        out.update(kind="budget_exhausted", teammate=item.exhausted.teammate)
    else:
        out["kind"] = type(item).__name__
    return out
