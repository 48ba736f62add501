"""The worktree per claim below the runner, against a real git repository: how task ids
become branch and directory names, and an operation that waits out another process's
git lock file instead of failing."""

from __future__ import annotations

import logging
import subprocess
import threading
import urllib.parse
from pathlib import Path

import pytest

import corral
from corral._worktree import Worktrees, branch_name, worktree_name
from tests.support import wait_until

pytestmark = pytest.mark.timeout(60)


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    path = tmp_path / "repo"
    path.mkdir()
    _git(path, "init", "--quiet", "--initial-branch=main")
    _git(
        path,
        "-c",
        "user.name=setup",
        "-c",
        "user.email=setup@example.invalid",
        "commit",
        "-q",
        "--allow-empty",
        "-m",
        "0",
    )
    return path


@pytest.mark.parametrize("task_id", ["a b:c/..x", ".hidden", "x.lock", "é/ü", "@", "a@{b}", "~^:?*[\\", "plain-id_1"])
def test_every_task_id_maps_to_a_name_git_accepts_and_back(task_id: str, tmp_path: Path) -> None:
    name = worktree_name(task_id)
    assert set(name) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_%")
    assert urllib.parse.unquote(name) == task_id
    branch = branch_name(task_id, 3)
    assert branch == f"corral/{name}/3"
    assert _git(tmp_path, "check-ref-format", "--branch", branch) == branch
    (tmp_path / f"{name}-3").mkdir()  # a plain directory name, no separator in it


def test_the_rule_is_the_documented_one_and_long_ids_stay_short_and_distinct() -> None:
    assert worktree_name("a b:c/..x") == "a%20b%3Ac%2F%2E%2Ex"
    assert worktree_name("build-1_x") == "build-1_x"
    long_a, long_b = "ü" * 127 + "a", "ü" * 127 + "b"
    names = {worktree_name(long_a), worktree_name(long_b)}
    assert len(names) == 2
    for name in names:
        assert len(name) <= 96 and "%%" in name and not name.split("%%")[0].endswith("%")
        assert urllib.parse.unquote(name.split("%%")[0], errors="strict") == "ü" * 10  # whole characters only
    assert "%%" not in worktree_name("ü" * 16) and "%%" in worktree_name("ü" * 16 + "a")  # 96 characters: kept whole


def test_an_operation_waits_while_another_process_holds_a_lock_git_needs(
    repo: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="corral.workspace")
    worktrees = Worktrees(corral.GitWorktree(repo), "ann")
    worktrees.prepare()
    # As another git process creating the same ref would hold it.
    held = repo / ".git" / "refs" / "heads" / "corral" / "t" / "1.lock"
    held.parent.mkdir(parents=True)
    held.write_text("")
    opened: list[Path] = []
    errors: list[BaseException] = []

    def open_worktree() -> None:
        try:
            opened.append(worktrees.open(corral.Task("t", corral.TaskState.IN_PROGRESS), 1, 7).path)
        except BaseException as exc:  # noqa: BLE001 (asserted below)
            errors.append(exc)

    opener = threading.Thread(target=open_worktree)
    opener.start()
    wait_until(
        lambda: any("another git process holds a lock" in r.getMessage() for r in caplog.records),
        timeout=20,
        what="a retry on the held lock",
    )
    assert not opened
    held.unlink()
    opener.join(40)
    assert errors == [] and opened == [repo / ".corral" / "worktrees" / "t-1"]
    assert _git(repo, "rev-parse", "corral/t/1") == _git(repo, "rev-parse", "main")


def test_a_failing_git_command_raises_git_error_with_its_stderr(repo: Path) -> None:
    worktrees = Worktrees(corral.GitWorktree(repo, base="nowhere"), "ann")
    with pytest.raises(corral.GitError, match="base 'nowhere' names no commit"):
        worktrees.prepare()
    from corral._git import git

    with pytest.raises(corral.GitError) as raised:
        git("rev-parse", "--verify", "no-such-ref", cwd=repo)
    assert (raised.value.returncode, raised.value.stderr) == (128, "fatal: Needed a single revision")
    assert raised.value.command[0] == "git" and raised.value.command[-1] == "no-such-ref"
    assert "git rev-parse --verify no-such-ref failed in" in str(raised.value)
