"""Tasks: create, claim, renew, complete, fail, release, ask, cancel, reclaim.

Modules, each importing only those before it: `rows` (reads and events),
`timegates`, `create`, `ends` (how a claim is checked and ended: complete, a
review's verdict, fail, release; and where its task goes), `reclaim` (leases run
out, revoke), `claims`, `questions` (to the Lead), `reviews` (offered to a
reviewer, the Lead's decision), `cancel` (and retry), `graph`
(AddDependencies and the cycle check; store/proposals.py, above this package, holds
the rest of discovered work). The rest of the daemon
uses the names below (`store.tasks.claim_next`, ...).
"""

from __future__ import annotations

from .cancel import cancel, retry
from .claims import (
    PROGRESS_EVENT_SPACING_MS,
    ClaimRef,
    any_lease_ended,
    any_ready,
    claim_next,
    delivery_view,
    delivery_view_with_claims,
    dependency_results,
    grant,
    held_claim_refs,
    ready_query,
    renew,
    stored_roles,
    view_for_delivery,
    work_waited_for,
)
from .create import create_batch
from .ends import (
    RETRY_JITTER,
    ClaimCompleted,
    complete,
    complete_claim,
    fail,
    release,
    release_all,
    retry_wait_ms,
)
from .graph import add_dependencies
from .questions import QUESTIONS_PER_TASK_MAX, answer_question, ask_question
from .reclaim import extend_live_leases, reclaim_expired, revoke
from .reviews import lead_decides as review_task
from .rows import (
    ATTEMPTS_SHOWN,
    COMPLETED,
    IN_PROGRESS,
    PENDING,
    WAITING_DEPENDENCIES_SHOWN,
    count_by_state,
    get_task,
    list_tasks,
    next_deadline,
    records_by_seq,
    task_attempts,
    task_by_seq,
    task_changed,
    task_history,
    waiting_for,
    wire_bytes_by_id,
)
from .timegates import any_gate_due, open_due_gates

__all__ = [
    "add_dependencies",
    "review_task",
    "QUESTIONS_PER_TASK_MAX",
    "answer_question",
    "ask_question",
    "ATTEMPTS_SHOWN",
    "COMPLETED",
    "IN_PROGRESS",
    "PENDING",
    "WAITING_DEPENDENCIES_SHOWN",
    "count_by_state",
    "get_task",
    "list_tasks",
    "next_deadline",
    "records_by_seq",
    "task_attempts",
    "task_by_seq",
    "task_changed",
    "task_history",
    "waiting_for",
    "wire_bytes_by_id",
    "any_gate_due",
    "open_due_gates",
    "create_batch",
    "RETRY_JITTER",
    "retry_wait_ms",
    "extend_live_leases",
    "reclaim_expired",
    "ClaimCompleted",
    "ClaimRef",
    "PROGRESS_EVENT_SPACING_MS",
    "any_lease_ended",
    "any_ready",
    "claim_next",
    "dependency_results",
    "grant",
    "held_claim_refs",
    "delivery_view",
    "delivery_view_with_claims",
    "stored_roles",
    "view_for_delivery",
    "ready_query",
    "renew",
    "work_waited_for",
    "complete",
    "complete_claim",
    "fail",
    "release",
    "release_all",
    "revoke",
    "cancel",
    "retry",
]
