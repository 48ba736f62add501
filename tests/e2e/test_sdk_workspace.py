"""A git worktree per claim (`run_teammate(..., workspace=corral.GitWorktree(repo))`)
against the real daemon and a real git repository: branches and commits, a retry that
starts from the previous attempt's branch, what a failure keeps, pruning at the start,
two teammates on one repository at once, and bad input. Both SDK flavours."""

from __future__ import annotations

import asyncio
import datetime
import json
import logging
import os
import subprocess
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import corral
import corral.aio
from corral._worktree import worktree_name
from tests.support import FAST_POLL, wait_until

FLAVOURS = pytest.mark.parametrize("flavour", ["sync", "aio"])
NO_BACKOFF = datetime.timedelta(0)
# An id git would refuse as a ref or path as it stands: the runner must map it.
ODD_ID = "a:c/..x*~^[?]\\@{.lock"
State = corral.TaskState


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A git repository with one commit on `main`."""
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "--quiet", "--initial-branch=main")
    (path / "README").write_text("hello\n")
    _git(path, "add", "README")
    _git(path, "-c", "user.name=setup", "-c", "user.email=setup@example.invalid", "commit", "--quiet", "-m", "start")
    return path


def _branch_exists(repo: Path, branch: str) -> bool:
    done = subprocess.run(["git", "show-ref", "--verify", "--quiet", f"refs/heads/{branch}"], cwd=repo, check=False)
    return done.returncode == 0


WorkspaceHandler = Callable[[corral.Task, Path], Any]


def _in_flavour(flavour: str, handler: WorkspaceHandler) -> Callable[[corral.Task], Any]:
    """A run_teammate handler calling `handler(task, current_claim().workspace)`: a plain
    function (sync), or a coroutine function run on the loop (aio)."""
    if flavour == "sync":

        def handle(task: corral.Task) -> Any:
            workspace = corral.current_claim().workspace
            assert workspace is not None
            return handler(task, workspace)

        return handle

    async def handle_async(task: corral.Task) -> Any:
        workspace = corral.aio.current_claim().workspace
        assert workspace is not None
        return await asyncio.to_thread(handler, task, workspace)  # it may block: off the loop

    return handle_async


class Running:
    """`run_teammate` of one flavour in a thread, stopped by a shutdown request."""

    def __init__(
        self,
        lead: corral.Lead,
        flavour: str,
        name: str,
        handler: WorkspaceHandler,
        *,
        token: str | None = None,
        **options: Any,
    ) -> None:
        self._lead, self.name = lead, name
        self.token = token or lead.add_teammate(name).token
        options = {"address": lead.address, "token": self.token, "poll_interval": FAST_POLL, **options}
        self.summary: corral.RunSummary | None = None
        self.error: BaseException | None = None
        wrapped = _in_flavour(flavour, handler)

        def run() -> None:
            try:
                if flavour == "sync":
                    self.summary = corral.run_teammate(wrapped, **options)
                else:
                    self.summary = asyncio.run(corral.aio.run_teammate(wrapped, **options))
            except BaseException as exc:  # noqa: BLE001 (result() raises it)
                self.error = exc

        self._thread = threading.Thread(target=run, name=f"teammate-{name}", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 30.0) -> corral.RunSummary:
        if self._thread.is_alive():
            self._lead.request_shutdown(self.name, reason="done")
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"{self.name} still running"
        if self.error is not None:
            raise self.error
        assert self.summary is not None
        return self.summary


@pytest.mark.timeout(60)
@FLAVOURS
def test_each_claim_works_in_its_own_worktree_and_its_changes_are_committed_on_its_branch(
    lead: corral.Lead, repo: Path, flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corral.workspace")
    base = _git(repo, "rev-parse", "HEAD")
    lead.create_tasks([corral.TaskSpec(ODD_ID, title="Write the notes"), corral.TaskSpec("idle", title="Look only")])
    seen: dict[str, tuple[Path, str]] = {}

    def handler(task: corral.Task, workspace: Path) -> str:
        seen[task.id] = (workspace, os.getcwd())
        if task.id == ODD_ID:
            (workspace / "notes.txt").write_text("written in the worktree\n")
        return "ok"

    cwd = os.getcwd()
    mate = Running(lead, flavour, "ann", handler, workspace=corral.GitWorktree(repo))
    assert lead.wait_until_done(timeout=30).completed == 2
    assert mate.stop().completed == 2
    assert os.getcwd() == cwd

    name = worktree_name(ODD_ID)
    path, handler_cwd = seen[ODD_ID]
    assert path == repo / ".corral" / "worktrees" / f"{name}-1" and handler_cwd == cwd
    assert not path.exists() and not path.with_name(path.name + ".claim.json").exists()
    branch = f"corral/{name}/1"
    assert _git(repo, "check-ref-format", "--branch", branch) == branch
    log = _git(repo, "log", "-1", "--format=%an|%ae|%cn|%ce|%P|%B", branch).split("|")
    assert log[:4] == ["ann", "ann@corral.invalid", "ann", "ann@corral.invalid"]
    assert log[4] == base  # from base, one commit
    assert log[5].splitlines()[0] == f"Write the notes ({ODD_ID})" and f"Corral-Task: {ODD_ID}" in log[5]
    assert _git(repo, "show", f"{branch}:notes.txt") == "written in the worktree"
    # Nothing changed: no commit, the branch stays at its base.
    assert _git(repo, "rev-parse", "corral/idle/1") == base
    # The main checkout stays clean: `.corral/` is excluded, the branch is not checked out.
    assert _git(repo, "status", "--porcelain") == "" and _git(repo, "branch", "--show-current") == "main"
    assert "/.corral/" in (repo / ".git" / "info" / "exclude").read_text().splitlines()
    assert _git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    reports = {
        r.corral_workspace.worktree.task_id: r.corral_workspace
        for r in caplog.records
        if hasattr(r, "corral_workspace")
    }
    assert reports[ODD_ID].commit == _git(repo, "rev-parse", branch) and reports[ODD_ID].changed
    assert (reports["idle"].commit, reports["idle"].changed, reports["idle"].kept) == (base, False, False)
    # The same report, attached to each task as its workspace artifact.
    for task_id, commit in ((ODD_ID, _git(repo, "rev-parse", branch)), ("idle", base)):
        report = _workspace_artifact(lead, task_id)
        assert (report["branch"], report["commit"], report["base"]) == (
            f"corral/{worktree_name(task_id)}/1",
            commit,
            base,
        )
        assert (report["task_id"], report["attempt"], report["teammate"]) == (task_id, 1, "ann")
    assert _workspace_artifact(lead, ODD_ID)["changed"] and not _workspace_artifact(lead, "idle")["changed"]


def _workspace_artifact(lead: corral.Lead, task_id: str) -> dict[str, Any]:
    """The task's `corral/workspace.json`, checked to be listed as JSON."""
    (listed,) = [a for a in lead.get_task(task_id).artifacts if a.name == "corral/workspace.json"]
    assert listed.media_type == "application/json"
    report: dict[str, Any] = json.loads(lead.get_artifact(task_id, listed.name, sha256=listed.sha256))
    return report


@pytest.mark.timeout(60)
@FLAVOURS
def test_a_retry_starts_from_the_previous_attempts_branch(lead: corral.Lead, repo: Path, flavour: str) -> None:
    lead.create_tasks([corral.TaskSpec("fix", title="Fix it", max_attempts=2, retry_backoff=NO_BACKOFF)])
    found: list[bool] = []

    def handler(task: corral.Task, workspace: Path) -> str:
        if task.attempt == 1:
            (workspace / "first.txt").write_text("half done\n")
            raise RuntimeError("flaky")
        found.append((workspace / "first.txt").exists())
        (workspace / "second.txt").write_text("done\n")
        return "ok"

    mate = Running(lead, flavour, "ann", handler, workspace=corral.GitWorktree(repo))
    assert lead.wait_until_done(timeout=30).completed == 1
    summary = mate.stop()
    assert (summary.completed, summary.failed) == (1, 1) and found == [True]
    first, second = _git(repo, "rev-parse", "corral/fix/1"), _git(repo, "rev-parse", "corral/fix/2")
    assert _git(repo, "log", "-1", "--format=%P", second) == first
    assert "Corral-Outcome: unfinished (RuntimeError)" in _git(repo, "log", "-1", "--format=%B", first)
    assert _git(repo, "show", "corral/fix/2:first.txt") == "half done"
    worktrees = repo / ".corral" / "worktrees"
    assert (worktrees / "fix-1" / "first.txt").exists()  # the failure's worktree is kept
    assert not (worktrees / "fix-2").exists()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("keep", ["on_failure", "never"])
@FLAVOURS
def test_a_failed_claims_work_is_committed_and_its_worktree_kept_or_removed(
    lead: corral.Lead, repo: Path, flavour: str, keep: str
) -> None:
    lead.create_tasks([corral.TaskSpec("broken")])

    def handler(task: corral.Task, workspace: Path) -> str:
        (workspace / "attempt.txt").write_text("tried\n")
        raise corral.PermanentFailure("cannot")

    mate = Running(lead, flavour, "ann", handler, workspace=corral.GitWorktree(repo, keep=keep))  # type: ignore[arg-type]
    assert lead.wait_until_done(timeout=30).failed == 1
    assert mate.stop().failed == 1
    path = repo / ".corral" / "worktrees" / "broken-1"
    if keep == "on_failure":
        assert (path / "attempt.txt").read_text() == "tried\n"
        assert path.with_name("broken-1.claim.json").exists()
        assert _git(repo, "-C", str(path), "status", "--porcelain") == ""  # committed
    else:
        assert not path.exists() and not path.with_name("broken-1.claim.json").exists()
        assert _git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1
    assert _git(repo, "show", "corral/broken/1:attempt.txt") == "tried"
    # The claim was live when the work was committed: the failure's report is attached too.
    report = _workspace_artifact(lead, "broken")
    assert (report["branch"], report["commit"]) == ("corral/broken/1", _git(repo, "rev-parse", "corral/broken/1"))
    assert (report["changed"], report["kept"]) == (True, keep == "on_failure")


@pytest.mark.timeout(60)
@FLAVOURS
def test_a_refused_workspace_artifact_is_logged_and_the_task_still_completes(
    tmp_path: Path, repo: Path, flavour: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corral.workspace")
    # A board whose artifact quota the report (a few hundred bytes) does not fit in.
    quota = ["--max-artifact-bytes", "64", "--max-artifact-store-bytes", "64"]
    with corral.Lead.launch(tmp_path / "state", extra_args=quota, ready_timeout=30) as lead:
        lead.create_tasks([corral.TaskSpec("fix")])

        def handler(task: corral.Task, workspace: Path) -> str:
            (workspace / "fix.txt").write_text("fixed\n")
            return "ok"

        mate = Running(lead, flavour, "ann", handler, workspace=corral.GitWorktree(repo))
        assert lead.wait_until_done(timeout=30).completed == 1
        assert mate.stop().completed == 1
        task = lead.get_task("fix")
        assert (task.result, task.artifacts) == (b"ok", ())
    assert _git(repo, "show", "corral/fix/1:fix.txt") == "fixed"
    refused = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(refused) == 1 and refused[0].startswith("task fix: corral/workspace.json not attached: "), refused


@pytest.mark.timeout(90)
@FLAVOURS
def test_the_start_prunes_this_teammates_ended_claims_and_leaves_a_live_one_alone(
    lead: corral.Lead, repo: Path, flavour: str
) -> None:
    lead.create_tasks([corral.TaskSpec("old", max_attempts=1)])
    spec = corral.GitWorktree(repo)

    def fail(task: corral.Task, workspace: Path) -> str:
        raise RuntimeError("leave the worktree behind")

    first = Running(lead, flavour, "ann", fail, workspace=spec)
    assert lead.wait_until_done(timeout=30).failed == 1
    first.stop()
    worktrees = repo / ".corral" / "worktrees"
    stale = worktrees / "old-1"
    assert stale.is_dir()
    (stale / "leftover.txt").write_text("never committed\n")  # as a teammate that died mid-claim leaves it

    # bob holds a claim, and its worktree, while ann starts again.
    lead.create_tasks([corral.TaskSpec("live")])
    holding, release = threading.Event(), threading.Event()

    def hold(task: corral.Task, workspace: Path) -> str:
        holding.set()
        assert release.wait(30)
        return "ok"

    bob = Running(lead, flavour, "bob", hold, workspace=spec)
    wait_until(holding, timeout=20, what="bob's claim")
    lead.create_tasks([corral.TaskSpec("new")])
    ann = Running(lead, flavour, "ann-2", lambda task, workspace: "ok", workspace=spec)
    wait_until(lambda: lead.get_task("new").state is State.COMPLETED, timeout=20, what="ann-2's task")
    ann.stop()
    # ann-2 is not ann: ann's worktree is another teammate's, and stays.
    assert stale.is_dir() and (worktrees / "live-1").is_dir()

    again = Running(
        lead, flavour, "ann", lambda task, workspace: "ok", token=first.token, workspace=spec, max_idle_polls=1
    )
    again.stop()
    assert not stale.exists() and not (worktrees / "old-1.claim.json").exists()
    assert _git(repo, "show", "corral/old/1:leftover.txt") == "never committed"
    assert "Corral-Outcome: abandoned" in _git(repo, "log", "-1", "--format=%B", "corral/old/1")
    assert (worktrees / "live-1").is_dir() and (worktrees / "live-1.claim.json").exists()
    release.set()
    assert lead.wait_until_done(timeout=30).completed == 2
    bob.stop()
    assert not (worktrees / "live-1").exists()


# A teammate in a process of its own: git's lock files, not this process's lock, keep it
# apart from the others.
_CHILD_TEAMMATE = """
import sys

import corral


def handle(task):
    workspace = corral.current_claim().workspace
    (workspace / f"{task.id}.txt").write_text(task.id)
    return "ok"


summary = corral.run_teammate(handle, workspace=corral.GitWorktree(sys.argv[1]), slots=2, poll_interval=0.05)
print(summary.completed, summary.failed, summary.lost)
"""


@pytest.mark.timeout(120)
def test_teammates_on_one_repository_at_once_each_commit_every_task(
    lead: corral.Lead, repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corral")
    ids = [f"t{n}" for n in range(24)]
    lead.create_tasks([corral.TaskSpec(i, title=f"task {i}") for i in ids])
    spec = corral.GitWorktree(repo)

    def handler(task: corral.Task, workspace: Path) -> str:
        (workspace / f"{task.id}.txt").write_text(task.id)
        return "ok"

    # One of each flavour in this process and one in a child process, two slots each:
    # six claims open and close worktrees of one repository at once.
    env = {**os.environ, **lead.teammate_env(lead.add_teammate("cy"))}
    child = subprocess.Popen(
        [sys.executable, "-c", _CHILD_TEAMMATE, str(repo)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        mates = [
            Running(lead, flavour, name, handler, workspace=spec, slots=2)
            for flavour, name in (("sync", "ann"), ("aio", "bob"))
        ]
        done = lead.wait_until_done(timeout=90)
        summaries = [mate.stop() for mate in mates]
        lead.request_shutdown("cy", reason="done")
        out, err = child.communicate(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 0 and err == "", err
    completed, failed, lost = (int(n) for n in out.split())
    assert done.completed == len(ids) and sum(s.completed for s in summaries) + completed == len(ids)
    assert sum(s.failed + s.lost for s in summaries) + failed + lost == 0
    for task_id in ids:
        assert _git(repo, "show", f"corral/{task_id}/1:{task_id}.txt") == task_id
        author = _git(repo, "log", "-1", "--format=%an", f"corral/{task_id}/1")
        assert author == lead.get_task(task_id).owner
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING], "no git error, no retried failure"
    assert list((repo / ".corral" / "worktrees").iterdir()) == []
    assert _git(repo, "worktree", "list", "--porcelain").count("worktree ") == 1


def test_keep_must_be_on_failure_or_never() -> None:
    with pytest.raises(ValueError, match="keep must be 'on_failure' or 'never', got 'sometimes'"):
        corral.GitWorktree("/tmp", keep="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="base must name a commit"):
        corral.GitWorktree("/tmp", base="")
    spec = corral.GitWorktree("repo")
    assert (spec.repo, spec.base, spec.keep) == (Path("repo"), "HEAD", "on_failure")


@pytest.mark.timeout(60)
@FLAVOURS
def test_a_repo_that_is_not_a_git_repository_stops_run_teammate_at_its_start(
    lead: corral.Lead, tmp_path: Path, repo: Path, flavour: str
) -> None:
    lead.create_tasks([corral.TaskSpec("untouched")])
    plain = tmp_path / "plain"
    plain.mkdir()
    for n, (spec, message) in enumerate(
        (
            (corral.GitWorktree(plain), "is not in a git work tree"),
            (corral.GitWorktree(tmp_path / "missing"), "is not a directory"),
            (corral.GitWorktree(repo, base="no-such-branch"), "base 'no-such-branch' names no commit"),
        )
    ):
        mate = Running(lead, flavour, f"ann-{n}", lambda task, workspace: "never", workspace=spec)
        with pytest.raises(corral.GitError, match=message):
            mate.stop()
    task = lead.get_task("untouched")
    assert (task.state, task.attempts) == (State.PENDING, ())
    assert not (plain / ".corral").exists()
