"""Turning SDK values into JSON-ready dicts, tables and short lines.

JSON shapes (documented in docs/dag-format.md, "Output of --json"):
states and statuses are lower-case names, times ISO 8601 UTC strings or null,
durations seconds; payload and result are UTF-8 text, or base64 with a
`*_base64: true` marker when the bytes are not UTF-8.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import json
import sys
from collections.abc import Iterable
from typing import Any

import click
from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

import corral

from .artifacts import artifact_json

STATE_STYLES = {
    corral.TaskState.PENDING: "yellow",
    corral.TaskState.IN_PROGRESS: "cyan",
    corral.TaskState.COMPLETED: "green",
    corral.TaskState.FAILED: "bold red",
    corral.TaskState.CANCELED: "magenta",
    corral.TaskState.NEEDS_INPUT: "bold yellow",
    corral.TaskState.IN_REVIEW: "bold blue",
    corral.TaskState.PROPOSED: "italic dim yellow",
}
STATUS_STYLES = {
    corral.TeammateStatus.OFFLINE: "dim",
    corral.TeammateStatus.IDLE: "yellow",
    corral.TeammateStatus.BUSY: "cyan",
    corral.TeammateStatus.AWAITING_PLAN: "magenta",
    corral.TeammateStatus.SHUTTING_DOWN: "blue",
    corral.TeammateStatus.REMOVED: "dim red",
    corral.TeammateStatus.WAITING: "yellow",
}


# ---------------------------------------------------------------- JSON


def emit_json(value: Any) -> None:
    """Print `value` as indented JSON on stdout."""
    click.echo(json.dumps(value, indent=2, ensure_ascii=False))


def emit_json_line(value: Any) -> None:
    """Print `value` as one JSON line (for streams of events)."""
    click.echo(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def iso(value: datetime.datetime | None) -> str | None:
    return value.isoformat().replace("+00:00", "Z") if value is not None else None


def state_name(state: corral.TaskState | corral.TeammateStatus | corral.TeammateChangeReason) -> str:
    return state.name.lower()


def _blob(data: dict[str, Any], key: str, value: bytes) -> None:
    try:
        data[key] = value.decode("utf-8")
    except UnicodeDecodeError:
        data[key] = base64.b64encode(value).decode("ascii")
        data[f"{key}_base64"] = True


def task_json(task: corral.Task) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": task.id,
        "state": state_name(task.state),
        "title": task.title,
        "description": task.description,
        "depends_on": list(task.depends_on),
        "priority": task.priority,
        "required_role": task.required_role,
        "max_attempts": task.max_attempts,
        "lease_seconds": task.lease_duration.total_seconds(),
        "owner": task.owner,
        "attempt": task.attempt,
        "attempts_used": task.attempts_used,
        "error": task.error,
        "seq": task.seq,
        "create_time": iso(task.create_time),
        "lease_expire_time": iso(task.lease_expire_time),
        "finish_time": iso(task.finish_time),
        "not_before_time": iso(task.not_before_time),
        "retry_backoff_seconds": task.retry_backoff.total_seconds(),
        "retry_backoff_max_seconds": task.retry_backoff_max.total_seconds(),
        "attempt_timeout_seconds": None if task.attempt_timeout is None else task.attempt_timeout.total_seconds(),
        "ready_time": iso(task.ready_time),
        "waiting_for": _waiting_json(task.waiting_for),
        "progress": task.progress,
        "progress_fraction": task.progress_fraction,
        "progress_time": iso(task.progress_time),
        "concurrency_key": task.concurrency_key,
        "usage": usage_json(task.usage),
        "question": task.question,
        "review": None if task.review is None else dataclasses.asdict(task.review),
        "review_rounds": task.review_rounds,
        "proposed_by": task.proposed_by,
        "discovered_from": task.discovered_from,
        "artifacts": [artifact_json(artifact) for artifact in task.artifacts],
        "resources": list(task.resources),
        "shared_resources": list(task.shared_resources),
    }
    _blob(data, "payload", task.payload)
    _blob(data, "result", task.result)
    return data


def usage_json(usage: corral.Usage) -> dict[str, Any]:
    return dataclasses.asdict(usage)


def budget_json(budget: corral.Budget) -> dict[str, Any]:
    return dataclasses.asdict(budget)


def usage_label(usage: corral.Usage) -> str:
    """`1234 tok, 56 micros` style text for tables; empty for no usage."""
    if not (usage.tokens or usage.cost_micros):
        return ""
    return f"{usage.tokens} tok, {usage.cost_micros} micros"


def budget_label(budget: corral.Budget) -> str:
    """The limits of a budget for tables; empty for none."""
    parts = []
    if budget.max_tokens:
        parts.append(f"{budget.max_tokens} tok")
    if budget.max_cost_micros:
        parts.append(f"{budget.max_cost_micros} micros")
    return ", ".join(parts)


def attempt_json(attempt: corral.Attempt) -> dict[str, Any]:
    return {
        "attempt": attempt.attempt,
        "owner": attempt.owner,
        "fence": attempt.fence,
        "claim_time": iso(attempt.claim_time),
        "end_time": iso(attempt.end_time),
        "outcome": attempt.outcome.name.lower(),
        "error": attempt.error,
        "verdict": None if attempt.verdict is None else verdict_json(attempt.verdict),
        "feedback": attempt.feedback,
    }


def verdict_json(verdict: corral.Verdict) -> dict[str, Any]:
    return {"approve": verdict.approve, "feedback": verdict.feedback}


def task_with_attempts_json(task: corral.Task) -> dict[str, Any]:
    """A task as `tasks show --json` prints it: its claim history under `attempts`."""
    return {**task_json(task), "attempts": [attempt_json(attempt) for attempt in task.attempts]}


def limit_json(limit: corral.ConcurrencyLimit) -> dict[str, Any]:
    return {"key": limit.key, "limit": limit.limit, "in_progress": limit.in_progress}


def held_resource_json(held: corral.HeldResource) -> dict[str, Any]:
    return {"resource": held.resource, "exclusive": held.exclusive, "task_id": held.task_id, "teammate": held.teammate}


def teammate_json(mate: corral.TeammateInfo) -> dict[str, Any]:
    return {
        "name": mate.name,
        "status": state_name(mate.status),
        "roles": list(mate.roles),
        "require_plan_approval": mate.require_plan_approval,
        "held_task_ids": list(mate.held_task_ids),
        "waiting_for_task_ids": list(mate.waiting_for_task_ids),
        "usage": usage_json(mate.usage),
        "budget": budget_json(mate.budget),
        "task_creation": mate.task_creation.name.lower(),
        **({"daemon": mate.daemon} if mate.daemon else {}),
    }


def stats_json(stats: corral.Stats) -> dict[str, Any]:
    return {
        "tasks_by_state": {state_name(s): stats.tasks_by_state.get(s, 0) for s in corral.TaskState},
        "teammates_by_status": {state_name(s): stats.teammates_by_status.get(s, 0) for s in corral.TeammateStatus},
        "active_tasks": stats.active_tasks,
        "writer": dataclasses.asdict(stats.writer),
        "open_streams": stats.open_streams,
        "usage": usage_json(stats.usage),
        "store": stats.store,
        **({"postgres": dataclasses.asdict(stats.postgres)} if stats.postgres is not None else {}),
    }


def event_json(event: corral.WatchEvent) -> dict[str, Any]:
    base: dict[str, Any] = {"seq": event.seq, "time": iso(event.time)}
    if isinstance(event, corral.TaskChanged):
        return {**base, "type": "task_changed", "task": task_json(event.task)}
    if isinstance(event, corral.TeammateChanged):
        return {
            **base,
            "type": "teammate_changed",
            "teammate": teammate_json(event.teammate),
            "status": state_name(event.status),
            "reason": state_name(event.reason),
        }
    if isinstance(event, corral.LeadMessage):
        message = event.message
        return {**base, "type": "message", "sender": message.sender, "body": message.body, "message_seq": message.seq}
    if isinstance(event, corral.PlanSubmitted):
        return {**base, "type": "plan_submitted", "plan_id": event.plan_id, "author": event.author, "plan": event.plan}
    if isinstance(event, corral.PlanDecided):
        return {
            **base,
            "type": "plan_decided",
            "plan_id": event.plan_id,
            "author": event.author,
            "approve": event.approve,
            "feedback": event.feedback,
        }
    if isinstance(event, corral.BudgetExhaustedEvent):
        exhausted = event.exhausted
        return {
            **base,
            "type": "budget_exhausted",
            "teammate": exhausted.teammate,
            "spent": usage_json(exhausted.spent),
            "budget": budget_json(exhausted.budget),
        }
    if isinstance(event, corral.QuestionAsked):
        return {
            **base,
            "type": "question_asked",
            "task_id": event.task_id,
            "question": event.question,
            "asked_by": event.asked_by,
        }
    if isinstance(event, corral.QuestionAnswered):
        return {
            **base,
            "type": "question_answered",
            "task_id": event.task_id,
            "question": event.question,
            "answer": event.answer,
        }
    if isinstance(event, corral.ReviewDecided):
        return {
            **base,
            "type": "review_decided",
            "task_id": event.task_id,
            "approve": event.approve,
            "feedback": event.feedback,
            "reviewer": event.reviewer,
            "round": event.round,
        }
    if isinstance(event, corral.TasksProposed):
        return {
            **base,
            "type": "tasks_proposed",
            "teammate": event.teammate,
            "task_ids": list(event.task_ids),
            "discovered_from": event.discovered_from,
            "needs_decision": event.needs_decision,
            "split": event.split,
        }
    if isinstance(event, corral.ArtifactAdded):
        return {
            **base,
            "type": "artifact_added",
            "task_id": event.task_id,
            "teammate": event.teammate,
            "artifact": artifact_json(event.artifact),
        }
    if isinstance(event, corral.ProposalsDecidedEvent):
        return {
            **base,
            "type": "proposals_decided",
            "task_ids": list(event.task_ids),
            "approve": event.approve,
            "feedback": event.feedback,
        }
    return {
        **base,
        "type": "shutdown_answered",
        "request_id": event.request_id,
        "teammate": event.teammate,
        "approve": event.approve,
        "reason": event.reason,
    }


# ---------------------------------------------------------------- text


def console() -> Console:
    """A console on the current stdout (so CliRunner captures it); no colour when piped."""
    return Console(file=sys.stdout, highlight=False, soft_wrap=False)


def table(*columns: str, title: str | None = None) -> Table:
    return Table(*columns, box=box.SIMPLE_HEAD, title=title, title_justify="left", pad_edge=False)


def styled(state: corral.TaskState | corral.TeammateStatus) -> str:
    styles: dict[Any, str] = {**STATE_STYLES, **STATUS_STYLES}
    return f"[{styles.get(state, '')}]{state_name(state)}[/]"


def short(text: str, limit: int = 60) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


def progress_label(task: corral.Task, limit: int = 60) -> str:
    """`60% running tests, 3/5`: the holder's progress on one line ("" when none)."""
    parts = [] if task.progress_fraction is None else [f"{task.progress_fraction:.0%}"]
    if task.progress:
        parts.append(short(task.progress, limit))
    return " ".join(parts)


def tasks_proposed_line(event: corral.TasksProposed) -> str:
    """`ann proposed tasks a, b from t (split; waiting for the lead)`."""
    origin = f" from {event.discovered_from}" if event.discovered_from else ""
    notes = [note for note, on in (("split", event.split), ("waiting for the lead", event.needs_decision)) if on]
    return f"{event.teammate} proposed tasks {', '.join(event.task_ids)}{origin}" + (
        f" ({'; '.join(notes)})" if notes else " (added)"
    )


def first_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    # A traceback's cause is its last line.
    return lines[-1] if lines and lines[0].startswith("Traceback") else (lines[0] if lines else "")


def blob_text(value: bytes) -> str:
    try:
        return value.decode("utf-8")
    except UnicodeDecodeError:
        return f"<{len(value)} bytes, not UTF-8; base64 {base64.b64encode(value).decode('ascii')}>"


def _progress_detail(task: corral.Task) -> str:
    label = progress_label(task, 1024)
    return f"{label} (at {iso(task.progress_time)})" if label and task.progress_time else label


def tasks_table(tasks: Iterable[corral.Task], title: str | None = None) -> Table:
    result = table("id", "state", "prio", "owner", "att", "role", "depends on", "title", title=title)
    for task in tasks:
        result.add_row(
            escape(task.id),
            styled(task.state),
            str(task.priority),
            escape(task.owner or "-"),
            f"{task.attempt}/{task.max_attempts}",
            escape(task.required_role or "-"),
            escape(", ".join(task.depends_on) or "-"),
            escape(short(task.title, 40)),
        )
    return result


def proposals_table(tasks: Iterable[corral.Task]) -> Table:
    """Proposed tasks: who proposed each, and the task it was discovered from."""
    result = table("id", "proposed by", "discovered from", "prio", "depends on", "title")
    for task in tasks:
        result.add_row(
            escape(task.id),
            escape(task.proposed_by or "-"),
            escape(task.discovered_from or "-"),
            str(task.priority),
            escape(", ".join(task.depends_on) or "-"),
            escape(short(task.title, 40)),
        )
    return result


def attempts_table(attempts: Iterable[corral.Attempt]) -> Table:
    """A task's claim history, oldest first, narrow enough to leave the error room
    (folded, never cut); `--json` has the claim times too."""
    result = table("att", "owner", "fence", "ended (UTC)", "outcome", "error", title="attempts")
    result.columns[-1].overflow = "fold"
    for attempt in attempts:
        ended = attempt.end_time
        result.add_row(
            str(attempt.attempt),
            escape(attempt.owner),
            str(attempt.fence),
            ended.strftime("%Y-%m-%d %H:%M:%S") if ended is not None else "-",
            attempt.outcome.name.lower().replace("_", " "),
            escape(attempt.error or _verdict_label(attempt.verdict) or "-"),
        )
    return result


def _verdict_label(verdict: corral.Verdict | None) -> str:
    """A review's verdict for the attempts table: `approved`, or `rejected: why`."""
    if verdict is None:
        return ""
    decided = "approved" if verdict.approve else "rejected"
    return f"{decided}: {verdict.feedback}" if verdict.feedback else decided


def teammates_table(mates: Iterable[corral.TeammateInfo]) -> Table:
    result = table("name", "status", "roles", "plan", "holds", "spent", "budget")
    for mate in mates:
        result.add_row(
            escape(mate.name),
            styled(mate.status),
            escape(", ".join(mate.roles) or "-"),
            "required" if mate.require_plan_approval else "-",
            escape(", ".join(mate.held_task_ids) or _waiting_for(mate)),
            usage_label(mate.usage) or "-",
            budget_label(mate.budget) or "-",
        )
    return result


def _waiting_for(mate: corral.TeammateInfo) -> str:
    # A waiting teammate holds nothing; what it waits for fills the column instead.
    return f"(waits for {', '.join(mate.waiting_for_task_ids)})" if mate.waiting_for_task_ids else "-"


def _waiting_json(waiting: corral.WaitingFor | None) -> dict[str, Any] | None:
    if waiting is None:
        return None
    return {
        "dependencies": list(waiting.dependencies),
        "ready_time": iso(waiting.ready_time),
        "teammates": waiting.teammates.name.lower(),
        "concurrency_key": waiting.concurrency_key,
        "resources": [dataclasses.asdict(wait) for wait in waiting.resources],
    }


def waiting_text(task: corral.Task) -> str:
    """`dependencies a, b; its time (2026-...Z); no teammate with role 'reviewer'` ('' when nothing holds it)."""
    waiting = task.waiting_for
    if waiting is None:
        return ""
    parts = []
    if waiting.dependencies:
        parts.append(f"dependencies {', '.join(waiting.dependencies)}")
    if waiting.ready_time is not None:
        parts.append(f"its time ({iso(waiting.ready_time)})")
    if waiting.concurrency_key:
        parts.append(f"a free slot of {waiting.concurrency_key!r}")
    parts.extend(_resource_wait_text(wait) for wait in waiting.resources)
    role = f" with role {task.required_role!r}" if task.required_role else ""
    if waiting.teammates is corral.TeammateAvailability.NONE_REGISTERED:
        parts.append(f"no teammate{role}" if role else "no teammate (none is registered)")
    elif waiting.teammates is corral.TeammateAvailability.NONE_ONLINE:
        parts.append(f"a teammate{role} online")
    return "; ".join(parts)


def _resource_wait_text(wait: corral.ResourceWait) -> str:
    """`'repo:web/src' (task t1 holds 'repo:web' exclusively)`."""
    how = "exclusively" if wait.held_exclusive else "shared"
    held = wait.held_resource if wait.held_resource != wait.resource else ""
    holds = f"holds {held!r} {how}" if held else f"holds it {how}"
    return f"{wait.resource!r} (task {wait.held_by_task_id} {holds})"


def resources_text(task: corral.Task) -> str:
    """`repo:web/src (exclusive), repo:web/docs (shared)`; '' for none."""
    listed = [f"{path} (exclusive)" for path in task.resources]
    listed += [f"{path} (shared)" for path in task.shared_resources]
    return ", ".join(listed)


def _backoff(task: corral.Task) -> str:
    first, most = task.retry_backoff.total_seconds(), task.retry_backoff_max.total_seconds()
    return f"{first:g}s, doubling to {most:g}s" if first else "none"


def task_detail(task: corral.Task) -> Table:
    result = Table.grid(padding=(0, 2))
    result.add_column(style="bold")
    result.add_column(overflow="fold")
    rows = [
        ("id", task.id),
        ("state", styled(task.state)),
        ("title", task.title),
        ("description", task.description),
        ("depends on", ", ".join(task.depends_on)),
        ("priority", str(task.priority)),
        ("required role", task.required_role),
        ("concurrency key", task.concurrency_key),
        ("resources", resources_text(task)),
        ("owner", task.owner),
        ("attempts used", f"{task.attempts_used} of {task.max_attempts}"),
        ("lease", f"{task.lease_duration.total_seconds():g}s"),
        ("retry backoff", _backoff(task)),
        ("created", iso(task.create_time) or ""),
        ("not before", iso(task.not_before_time) or ""),
        ("ready at", iso(task.ready_time) or ""),
        ("waiting for", waiting_text(task)),
        ("lease expires", iso(task.lease_expire_time) or ""),
        ("finished", iso(task.finish_time) or ""),
        ("progress", _progress_detail(task)),
        ("question", task.question),
        ("review", _review_detail(task)),
        ("proposed by", task.proposed_by),
        ("discovered from", task.discovered_from),
        ("payload", blob_text(task.payload)),
        ("result", blob_text(task.result)),
        ("error", task.error),
    ]
    for label, value in rows:
        if value:
            result.add_row(label, value if label == "state" else escape(value))
    return result


def _review_detail(task: corral.Task) -> str:
    """Who reviews the task's result, and the rejections so far of its max_rounds."""
    if task.review is None:
        return ""
    who = f"role {task.review.reviewer_role}" if task.review.reviewer_role else "the lead"
    return f"by {who}; {task.review_rounds} of {task.review.max_rounds} rounds rejected"
