"""A team of two coding teammates on one git repository, with no agent: each task edits
files under the paths it leases, in a worktree of its own, and merge tasks holding the
whole repository exclusively are the merge queue. docs/coding-agents.md explains it.

    python examples/coding_team.py [DIRECTORY]

makes a repository `demo` (and the daemon's state) in DIRECTORY (a new temporary one when
left out), starts a daemon, creates the tasks, runs two teammates until every task is
done, and prints the log of `main`: one merge per edit. Needs git and corral.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import corral

REPO = "repo:demo"  # the resource that stands for the whole repository
MERGE_PREFIX = "merge-"
# Each edit: the file it writes, what goes in it, and the paths it leases.
EDITS = {
    "api-orders": ("src/api/orders.py", "def list_orders():\n    return []\n", [f"{REPO}/src/api"], []),
    # Inside src/api: it overlaps api-orders, so the two never run at once.
    "api-errors": ("src/api/errors.py", "class NotFound(Exception):\n    pass\n", [f"{REPO}/src/api/errors.py"], []),
    # Reads the API's documentation while docs-api rewrites it: they wait for each other.
    "ui-orders": ("src/ui/orders.js", "export const orders = [];\n", [f"{REPO}/src/ui"], [f"{REPO}/docs/api.md"]),
    "docs-api": ("docs/api.md", "# API\n\nGET /orders lists the orders.\n", [f"{REPO}/docs/api.md"], []),
}
WORK_SECONDS = 0.3  # how long an edit "takes", so that teammates really work side by side


def git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def make_repository(path: Path) -> Path:
    path.mkdir(parents=True)
    git(path, "init", "--quiet", "--initial-branch=main")
    for name in ("src/api/__init__.py", "src/ui/index.js", "docs/index.md"):
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text("")
    git(path, "add", "--all")
    git(path, "-c", "user.name=setup", "-c", "user.email=setup@example.invalid", "commit", "--quiet", "-m", "start")
    return path


def tasks() -> list[corral.TaskSpec]:
    specs = []
    for task_id, (file, text, resources, shared) in EDITS.items():
        payload = json.dumps({"file": file, "text": text}).encode()
        specs.append(
            corral.TaskSpec(
                task_id,
                title=f"write {file}",
                payload=payload,
                required_role="coder",
                resources=tuple(resources),
                shared_resources=tuple(shared),
            )
        )
        # The merge queue: each merge holds the whole repository, so merges run one at a
        # time, on a main nobody else moves, and no edit of the repository runs meanwhile.
        specs.append(
            corral.TaskSpec(
                f"{MERGE_PREFIX}{task_id}",
                title=f"merge {task_id}",
                depends_on=(task_id,),
                required_role="coder",
                resources=(REPO,),
            )
        )
    return specs


def handler_for(repo: Path):
    def handle(task: corral.Task) -> str:
        claim = corral.current_claim()
        workspace = claim.workspace
        assert workspace is not None, "run_teammate was given a GitWorktree"
        if task.id.startswith(MERGE_PREFIX):
            return merge(repo, workspace, task, claim.dependency_results)
        edit = json.loads(task.payload)
        time.sleep(WORK_SECONDS)  # the work itself
        target = workspace / edit["file"]
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(edit["text"])
        # run_teammate commits it on this branch once the handler returns.
        return git(workspace, "rev-parse", "--abbrev-ref", "HEAD")

    return handle


def merge(repo: Path, workspace: Path, task: corral.Task, results: dict[str, bytes]) -> str:
    """Merge the edit's branch in this claim's worktree (a checkout of main), then move
    main there: main's checkout is clean and only a merge, holding the repository, moves it."""
    (edited,) = task.depends_on
    branch = results[edited].decode()
    who = ["-c", f"user.name={task.owner}", "-c", f"user.email={task.owner}@example.invalid"]
    git(workspace, *who, "merge", "--no-ff", "--quiet", "-m", f"Merge {edited} ({branch})", branch)
    merged = git(workspace, "rev-parse", "HEAD")
    git(repo, "merge", "--ff-only", "--quiet", merged)
    return merged


def run(directory: Path) -> Path:
    """The whole example in `directory`; answers the repository."""
    repo = make_repository(directory / "demo")
    with corral.Lead.launch(directory / "state") as lead:
        lead.create_tasks(tasks())
        workspace = corral.GitWorktree(repo, base="main", keep="on_failure")
        handle = handler_for(repo)
        names = ("ann", "bob")
        threads = []
        for name in names:
            token = lead.add_teammate(name, roles=["coder"]).token
            options = {"address": lead.address, "token": token, "workspace": workspace, "poll_interval": 0.1}
            thread = threading.Thread(target=corral.run_teammate, args=(handle,), kwargs=options, name=name)
            thread.start()
            threads.append(thread)
        done = lead.wait_until_done(timeout=120, raise_on_failure=True)
        for name in names:
            lead.request_shutdown(name, reason="all merged")
        for thread in threads:
            thread.join(30)
        print(f"{done.completed} tasks completed")
    print(git(repo, "log", "--graph", "--format=%h %an: %s", "main"))
    return repo


if __name__ == "__main__":
    run(Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="corral-coding-team-")))
