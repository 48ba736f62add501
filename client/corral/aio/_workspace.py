"""The worktree per claim around `run_teammate`'s handler
(`run_teammate(handler, workspace=corral.GitWorktree(repo))`): prune at the start,
open before the handler, commit and clean up after it. The git work itself is in
`corral._worktree`; it blocks, so it runs in a thread on `corral.aio`."""

from __future__ import annotations

import logging

from corral._errors import CorralError, GitError, NotFound
from corral._primitives import async_run_blocking
from corral._worktree import (
    WORKSPACE_ARTIFACT,
    WORKSPACE_MEDIA_TYPE,
    ClaimWorktree,
    GitWorktree,
    WorkspaceReport,
    Worktrees,
    workspace_json,
)
from corral.aio._claim import Claim
from corral.aio._teammate import Teammate

__all__ = ["Workspaces"]

_log = logging.getLogger("corral.workspace")


class Workspaces:
    """One `run_teammate`'s worktrees; does nothing without a GitWorktree."""

    def __init__(self, spec: GitWorktree | None) -> None:
        self._spec = spec
        self._worktrees: Worktrees | None = None
        self._open: dict[str, ClaimWorktree] = {}  # by claim token

    async def start(self, teammate: Teammate) -> None:
        """Check the repository (GitError when it is none) and remove this teammate's
        worktrees whose claims are over; a claim still held (to be re-sent on the new
        stream) keeps its worktree, and takes it over when it comes."""
        if self._spec is None:
            return
        me = (await teammate.get_identity()).name
        worktrees = Worktrees(self._spec, me)
        for left in await async_run_blocking(worktrees.prepare):
            if not await _still_held(teammate, me, left):
                await async_run_blocking(worktrees.prune, left)
        self._worktrees = worktrees

    async def enter(self, claim: Claim) -> None:
        """Open the claim's worktree and show it as `claim.workspace`; raises GitError."""
        if self._worktrees is None:
            return
        worktree = await async_run_blocking(self._worktrees.open, claim.task, claim.attempt, claim.fence)
        self._open[claim.token] = worktree
        claim._set_workspace(worktree.path)

    async def leave(self, claim: Claim, error: Exception | None) -> Exception | None:
        """Commit the claim's work and keep or remove its worktree; returns the error to
        report: `error`, or the GitError that kept finished work from being committed
        (the task fails, to be retried; the worktree stays)."""
        worktree = self._open.pop(claim.token, None)
        if worktree is None or self._worktrees is None:
            return error
        done = error is None and not claim.split
        if done:
            outcome = "completed"
        elif claim.split:
            outcome = "split (the task waits for the tasks it proposed)"
        else:
            outcome = f"unfinished ({type(error).__name__})"
        try:
            report = await async_run_blocking(self._worktrees.finish, worktree, done=done, outcome=outcome)
        except GitError as exc:
            _log.warning("task %s: the work in %s could not be committed: %s", claim.task.id, worktree.path, exc)
            return exc if done else error
        _announce(report)
        await _attach(claim, report)
        return error


def _announce(report: WorkspaceReport) -> None:
    """Say where the claim's work is: in the log, with the report for log handlers
    (`record.corral_workspace`)."""
    worktree = report.worktree
    what = (
        f"committed as {report.commit[:12]}"
        if report.changed
        else f"nothing to commit; it stays at {report.commit[:12]}"
    )
    where = f"; worktree kept at {worktree.path}" if report.kept else ""
    _log.info(
        "task %s: branch %s %s%s",
        worktree.task_id,
        worktree.branch,
        what,
        where,
        extra={"corral_workspace": report},
    )


async def _attach(claim: Claim, report: WorkspaceReport) -> None:
    """Attach the report to the task as its `corral/workspace.json` artifact, so the Lead
    and the dependent tasks find the branch and commit. Only a live claim may attach
    (a split or lost one has ended: nothing is sent); a refusal is logged, and never
    fails the task: the work is committed whether or not the report is attached."""
    if claim.split or claim.lost:
        _log.debug("task %s: the claim has ended; %s not attached", claim.task.id, WORKSPACE_ARTIFACT)
        return
    try:
        await claim.put_artifact(WORKSPACE_ARTIFACT, workspace_json(report), WORKSPACE_MEDIA_TYPE)
    except CorralError as exc:
        _log.warning("task %s: %s not attached: %s", claim.task.id, WORKSPACE_ARTIFACT, exc)


async def _still_held(teammate: Teammate, me: str, worktree: ClaimWorktree) -> bool:
    """Whether the claim that left `worktree` is still this teammate's live claim (its
    fence is the task's claim in progress). When the daemon cannot say, it counts as
    held: a worktree is never removed on a guess."""
    try:
        task = await teammate.get_task(worktree.task_id)
    except NotFound:
        return False
    except CorralError as exc:
        _log.warning("kept the worktree %s: could not look up task %s (%s)", worktree.path, worktree.task_id, exc)
        return True
    return task.owner == me and any(a.fence == worktree.fence and a.end_time is None for a in task.attempts)
