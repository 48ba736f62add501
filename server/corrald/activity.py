"""The daemon's activity log: one info line for each thing that happened on the board.

Store functions note what they did on the job's `Wakes` (`note("claimed", ...)`);
the writer hands a batch's notes to the wake hub only after its COMMIT, and
the hub writes them on the event loop, off the writer's path. The log never
tells of a claim or a completion that was rolled back. Lines carry names, task
ids, attempts and fences, never a token. With `--log-format json` each line is
one JSON object whose `activity` field holds the event and its fields.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

log = logging.getLogger("corrald.activity")

_LINES = {
    "added": "teammate {teammate} added (roles {roles})",
    "joined": "teammate {teammate} joined",
    "left": "teammate {teammate} left ({why})",
    "removed": "teammate {teammate} removed ({why})",
    "claimed": "task {task} claimed by {teammate} (attempt {attempt}, fence {fence})",
    "completed": "task {task} completed by {teammate}",
    "failed": "task {task} failed under {teammate} ({outcome}): {error}",
    "released": "task {task} released by {teammate}",
    "lease_expired": "task {task}: the lease of {teammate} expired (attempt {attempt})",
    "attempt_timed_out": "task {task}: the attempt of {teammate} timed out (attempt {attempt})",
    "revoked": "task {task}: the claim of {teammate} was revoked ({reason})",
    "asked": "task {task}: {teammate} asked the lead: {question}",
    "answered": "task {task}: the lead answered; it is pending again",
    "submitted_for_review": "task {task}: {teammate}'s result waits for a review by {reviewer}",
    "review_claimed": "task {task}: review round {round} claimed by {teammate} (fence {fence})",
    "review_decided": "task {task}: {reviewer} {verdict} the result of {author}",
    "proposed": "{teammate} proposed {tasks} task(s) (split its task: {split})",
    "proposals_decided": "the lead decided {tasks} proposed task(s) (approved: {approve})",
    "task_creation": "task creation of {teammate} set to {policy}",
    "dependencies_added": "task {task}: the lead added {added} dependencies",
    "credential_replaced": "teammate {teammate}: credential replaced (AddTeammate retried)",
    "viewer_added": "viewer {viewer} added",
    "viewer_credential_replaced": "viewer {viewer}: credential replaced (AddViewer retried)",
    "viewer_removed": "viewer {viewer} removed",
    "budget_set": "budget of {teammate} set (cost {cost_micros} micros, {tokens} tokens; 0: no limit)",
    "budget_exhausted": "teammate {teammate} spent its budget (cost {cost_micros} micros, {tokens} tokens)",
}


def write(notes: Iterable[tuple[str, dict[str, object]]]) -> None:
    """Logs each committed note at info (a no-op unless info is enabled)."""
    if not log.isEnabledFor(logging.INFO):
        return
    for event, fields in notes:
        shown = dict(fields)
        if event == "failed":
            shown["outcome"] = "final" if fields.get("final") else "will retry"
        log.info(_LINES[event].format(**shown), extra={"activity": {"event": event, **fields}})
