"""examples/coding_team.py, run as a user would: every edit lands on main through its own
merge, each task's branch is kept, and by the daemon's event log no two tasks whose
resources conflict (one exclusive) were ever in progress at once."""

from __future__ import annotations

import importlib.util
import itertools
import subprocess
import sys
from pathlib import Path

import pytest

import corral

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "coding_team.py"


def _example():
    spec = importlib.util.spec_from_file_location("coding_team", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def _overlap(a: str, b: str) -> bool:
    short, long = sorted((a, b), key=len)
    return long == short or long.startswith(short + "/")


def _conflict(a: corral.TaskSpec, b: corral.TaskSpec) -> bool:
    """Whether two tasks may not run at once: an exclusive resource of one overlaps any of the other's."""
    return any(
        _overlap(x, y)
        for mine, theirs in ((a, b), (b, a))
        for x in mine.resources
        for y in (*theirs.resources, *theirs.shared_resources)
    )


@pytest.mark.timeout(120)
def test_the_example_merges_every_edit_and_never_runs_conflicting_tasks_at_once(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), str(tmp_path)], capture_output=True, text=True, timeout=100, check=False
    )
    assert done.returncode == 0, done.stderr
    example = _example()
    specs = {spec.id: spec for spec in example.tasks()}
    assert f"{len(specs)} tasks completed" in done.stdout
    repo = tmp_path / "demo"

    # Every edit is on main, each through a merge commit of its own branch.
    for task_id, (file, text, _, _) in example.EDITS.items():
        assert (repo / file).read_text() == text
        assert _git(repo, "show", f"main:{file}") == text.rstrip("\n")
        assert _git(repo, "show", f"corral/{task_id}/1:{file}") == text.rstrip("\n")
        assert _git(repo, "merge-base", "--is-ancestor", f"corral/{task_id}/1", "main") == ""
    merges = _git(repo, "log", "--merges", "--format=%s", "main").splitlines()
    assert sorted(merges) == sorted(f"Merge {task_id} (corral/{task_id}/1)" for task_id in example.EDITS)
    assert _git(repo, "status", "--porcelain") == "", "main's checkout is clean"
    assert list((repo / ".corral" / "worktrees").iterdir()) == [], "every worktree was removed"
    printed = done.stdout.split("tasks completed", 1)[1]
    assert all(merge in printed for merge in merges), "the example prints main's log"

    # The event log, replayed: which tasks were in progress together.
    conflicting = {frozenset(pair) for pair in itertools.combinations(specs, 2) if _conflict(*(specs[i] for i in pair))}
    assert (
        frozenset({"api-orders", "api-errors"}) in conflicting and frozenset({"ui-orders", "docs-api"}) in conflicting
    )
    running: set[str] = set()
    finished: set[str] = set()
    seen_together: set[frozenset[str]] = set()
    with corral.Lead.launch(tmp_path / "state", ready_timeout=30) as lead:
        events = lead.watch(0, timeout=30)
        for event in events:
            if not isinstance(event, corral.TaskChanged):
                continue
            task = event.task
            assert (task.resources, task.shared_resources) == (
                specs[task.id].resources,
                specs[task.id].shared_resources,
            )
            if task.state is corral.TaskState.IN_PROGRESS:
                seen_together |= {frozenset({task.id, other}) for other in running}
                running.add(task.id)
            else:
                running.discard(task.id)
            if task.state is corral.TaskState.COMPLETED:
                finished.add(task.id)
            if finished == set(specs):
                break
        events.close()
    assert finished == set(specs)
    assert seen_together & conflicting == set(), "conflicting tasks were in progress at once"
