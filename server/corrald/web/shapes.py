"""The JSON the page reads: tasks, teammates, events and stats, small and flat.

A task here has the keys of `store.overview`'s rows, whether it came from the
snapshot or from an event, so the page has one shape to apply. Long texts are
cut to previews; the detail (`/api/tasks/{id}`) has the rest, itself cut at
16 KiB per field and marked truncated.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import json_format

from corral.v1 import corral_pb2 as pb

from ..model import ReviewPolicy, TaskState, TeammateRecord
from ..stats import BoardStats

PREVIEW_BYTES = 16 * 1024
ERROR_CHARS = 1024
EVENT_TEXT_CHARS = 4096
# A proposal names at most 100 tasks, a decision up to 1,000: an event lists this many
# of them and counts the rest.
EVENT_IDS_MAX = 100
# The held resources the stats carry to every page each second (GetStats caps them at
# 1,000): enough for every teammate's claims on a busy team, and a bounded message.
HELD_RESOURCES_SHOWN = 300


def _ms(parent: Any, field: str) -> int | None:
    if not parent.HasField(field):
        return None
    stamp = getattr(parent, field)
    return stamp.seconds * 1000 + stamp.nanos // 1_000_000


def cut(text: str, chars: int) -> str:
    return text if len(text) <= chars else text[:chars] + "…"


def preview(data: bytes | str) -> dict[str, object]:
    """At most 16 KiB of a text or blob, as text, with whether it was cut and its full size."""
    raw = data.encode() if isinstance(data, str) else data
    shown = raw[:PREVIEW_BYTES].decode("utf-8", errors="replace")
    return {"text": shown, "truncated": len(raw) > PREVIEW_BYTES, "bytes": len(raw)}


def review_policy(policy: ReviewPolicy | None) -> dict[str, object] | None:
    """A task's review policy for its detail; None when it needs no review ('' : the Lead reviews)."""
    if policy is None:
        return None
    return {"reviewer_role": policy.reviewer_role, "max_rounds": policy.max_rounds}


def task(t: pb.Task) -> dict[str, object]:
    return {
        "seq": t.seq,
        "id": t.id,
        "title": t.title,
        "state": pb.TaskState.Name(t.state).removeprefix("TASK_STATE_"),
        "owner": t.owner,
        "attempt": t.attempt,
        "max_attempts": t.max_attempts,
        "priority": t.priority,
        "required_role": t.required_role,
        "lease_expire_ms": _ms(t, "lease_expire_time"),
        "finish_ms": _ms(t, "finish_time"),
        "ready_ms": _ms(t, "ready_time"),
        "create_ms": _ms(t, "create_time"),
        "error": cut(t.error, ERROR_CHARS),
        "progress": t.progress,
        "progress_fraction": t.progress_fraction if t.HasField("progress_fraction") else None,
        "depends_on": list(t.depends_on),
        "resources": list(t.resources),
        "shared_resources": list(t.shared_resources),
    }


def waiting_for(t: pb.Task) -> dict[str, object] | None:
    """What holds a PENDING task back, for its detail; None when nothing does."""
    if not t.HasField("waiting_for"):
        return None
    waiting = t.waiting_for
    return {
        "dependencies": list(waiting.dependencies),
        "ready_ms": _ms(waiting, "ready_time"),
        "concurrency_key": waiting.concurrency_key,
        "teammates": pb.TeammateAvailability.Name(waiting.teammates).removeprefix("TEAMMATE_AVAILABILITY_"),
        "resources": [
            {
                "resource": wait.resource,
                "held_by_task_id": wait.held_by_task_id,
                "held_resource": wait.held_resource,
                "held_exclusive": wait.held_exclusive,
            }
            for wait in waiting.resources
        ],
    }


def artifact(a: pb.Artifact) -> dict[str, object]:
    """An artifact as the drawer lists it; its bytes are at /api/tasks/{id}/artifacts/{name}."""
    return {
        "name": a.name,
        "media_type": a.media_type,
        "size": a.size,
        "sha256": a.sha256,
        "attempt": a.attempt,
        "create_ms": _ms(a, "create_time"),
    }


def teammate(record: TeammateRecord, last_activity_ms: int | None = None) -> dict[str, object]:
    usage, budget = record.usage, record.budget
    return {
        "name": record.name,
        "roles": list(record.roles),
        "status": record.status.name,
        "held": list(record.held_task_ids),
        "last_activity_ms": last_activity_ms,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "cost_micros": usage.cost_micros,
        },
        "budget": {"max_cost_micros": budget.max_cost_micros, "max_tokens": budget.max_tokens},
    }


def event(response: pb.WatchResponse) -> dict[str, object]:
    """One Watch event for the page; its `seq` is also the SSE id."""
    shaped: dict[str, object] = {"seq": response.seq, "time_ms": _ms(response, "time")}
    kind = response.WhichOneof("event")
    if kind == "task_changed":
        shaped.update(kind="task", task=task(response.task_changed))
    elif kind == "teammate_changed":
        changed = response.teammate_changed
        shaped.update(
            kind="teammate",
            name=changed.teammate.name,
            roles=list(changed.teammate.roles),
            status=pb.TeammateStatus.Name(changed.status).removeprefix("TEAMMATE_STATUS_"),
            reason=pb.TeammateChangeReason.Name(changed.reason).removeprefix("TEAMMATE_CHANGE_REASON_").lower(),
        )
    elif kind == "message":
        message = response.message
        shaped.update(kind="message", sender=message.sender, body=cut(message.body, EVENT_TEXT_CHARS))
    elif kind == "plan_submitted":
        plan = response.plan_submitted
        shaped.update(kind="plan", plan_id=plan.plan_id, author=plan.author, plan=cut(plan.plan, PREVIEW_BYTES))
    elif kind == "plan_decided":
        decided = response.plan_decided
        shaped.update(
            kind="plan_decided",
            plan_id=decided.plan_id,
            author=decided.author,
            approve=decided.approve,
            feedback=cut(decided.feedback, EVENT_TEXT_CHARS),
        )
    elif kind == "question_asked":
        asked = response.question_asked
        shaped.update(
            kind="question",
            task_id=asked.task_id,
            asked_by=asked.asked_by,
            question=cut(asked.question, EVENT_TEXT_CHARS),
        )
    elif kind == "question_answered":
        answered = response.question_answered
        shaped.update(
            kind="question_answered",
            task_id=answered.task_id,
            question=cut(answered.question, EVENT_TEXT_CHARS),
            answer=cut(answered.answer, EVENT_TEXT_CHARS),
        )
    elif kind == "review_decided":
        decided_review = response.review_decided
        shaped.update(
            kind="review_decided",
            task_id=decided_review.task_id,
            approve=decided_review.approve,
            feedback=cut(decided_review.feedback, EVENT_TEXT_CHARS),
            reviewer=decided_review.reviewer,
            round=decided_review.round,
        )
    elif kind == "artifact_added":
        added = response.artifact_added
        shaped.update(
            kind="artifact_added", task_id=added.task_id, teammate=added.teammate, artifact=artifact(added.artifact)
        )
    elif kind == "tasks_proposed":
        proposed = response.tasks_proposed
        shaped.update(
            kind="tasks_proposed",
            teammate=proposed.teammate,
            task_ids=list(proposed.task_ids[:EVENT_IDS_MAX]),
            task_count=len(proposed.task_ids),
            discovered_from=proposed.discovered_from,
            needs_decision=proposed.needs_decision,
            split=proposed.split,
        )
    elif kind == "proposals_decided":
        decided_proposals = response.proposals_decided
        shaped.update(
            kind="proposals_decided",
            task_ids=list(decided_proposals.task_ids[:EVENT_IDS_MAX]),
            task_count=len(decided_proposals.task_ids),
            approve=decided_proposals.approve,
            feedback=cut(decided_proposals.feedback, EVENT_TEXT_CHARS),
        )
    else:
        detail = json_format.MessageToDict(getattr(response, kind), preserving_proto_field_name=True) if kind else {}
        shaped.update(kind=kind or "unknown", detail=detail)
    return shaped


def stats(board: BoardStats, open_streams: int, feed_clients: int, outputs_open: int) -> dict[str, object]:
    writer = board.writer
    return {
        "tasks_by_state": {TaskState(s).name: n for s, n in board.tasks_by_state.items()},
        "teammates_by_status": {s.name: n for s, n in board.teammates_by_status.items()},
        "queue_depth": writer.queue_depth,
        "queue_depth_p99": writer.queue_depth_p99,
        "commits": writer.commits,
        "mean_batch_size": writer.mean_batch_size,
        "busy_retries": writer.busy_retries,
        "commit_latency_p99_ms": writer.commit_latency_p99_ms,
        "level": writer.level,
        "open_streams": open_streams,
        "boards_open": feed_clients,
        "outputs_open": outputs_open,  # task drawers following output
        "held_resources": [
            {"resource": h.resource, "task_id": h.task_id, "teammate": h.teammate, "exclusive": h.exclusive}
            for h in board.held_resources[:HELD_RESOURCES_SHOWN]
        ],
        "held_resources_total": board.held_resources_total,
    }
