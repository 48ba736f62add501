"""A git worktree per claim: `corral.GitWorktree`, and the blocking git work that
`run_teammate(..., workspace=GitWorktree(repo))` does around each handler.

Layout, in the repository's top-level directory:

    .corral/worktrees/<name>-<attempt>/            the claim's worktree
    .corral/worktrees/<name>-<attempt>.claim.json  who opened it, for which claim

on the branch `corral/<name>/<attempt>`, where `<name>` is the task id with every
character other than an ASCII letter, a digit, `-` or `_` written as `%XX` per
UTF-8 byte (`a b:c/..x` is `a%20b%3Ac%2F%2E%2Ex`): git takes the result both as
a path component and as a ref component, and `urllib.parse.unquote` gives the id
back. A name longer than 96 characters keeps its first 64 and ends in `%%` and 16
hex digits of the id's SHA-256 (`%%` never occurs otherwise); the claim file
still holds the id. The claim file sits beside the worktree, not in it, so the
handler's files and `git add -A` never see it.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import os
import shutil
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, get_args

from corral._errors import GitError
from corral._git import git, repo_lock, retry_while_locked
from corral._types import Task

__all__ = [
    "WORKSPACE_ARTIFACT",
    "WORKSPACE_MEDIA_TYPE",
    "ClaimWorktree",
    "GitWorktree",
    "WorkspaceReport",
    "Worktrees",
    "branch_name",
    "worktree_name",
    "workspace_json",
]

_log = logging.getLogger("corral.workspace")

Keep = Literal["on_failure", "never"]
WORKTREES_DIR = Path(".corral") / "worktrees"
# The name and media type of the report, attached to the task as an artifact.
WORKSPACE_ARTIFACT = "corral/workspace.json"
WORKSPACE_MEDIA_TYPE = "application/json"
EXCLUDE_LINE = "/.corral/"
EMAIL_DOMAIN = "corral.invalid"

_PLAIN = frozenset(string.ascii_letters + string.digits + "-_")
_NAME_MAX = 96
_NAME_KEPT = 64


@dataclass(frozen=True, init=False)
class GitWorktree:
    """Run each claim of `run_teammate` in a git worktree of its own:
    `run_teammate(handler, workspace=corral.GitWorktree("/src/web"))`.

    Each work claim gets a fresh worktree at `<repo>/.corral/worktrees/<task>-<attempt>`
    on a new branch `corral/<task>/<attempt>`, started from `base` (any commit-ish;
    read again for each claim), or, for a retried or reworked task, from the
    branch of its latest earlier attempt, so that work is revised rather than
    redone. The handler finds the path in `current_claim().workspace`; the process's
    working directory is left alone. When the handler returns, everything it
    changed is committed on the branch (author and committer: the teammate's name,
    `<name>@corral.invalid`; message: the task's title and id), the branch and commit
    are logged (logger `corral.workspace`) and attached to the task as the artifact
    `corral/workspace.json` (JSON: branch, commit, base, path, ...), and the worktree
    is removed; the branch stays. A handler that fails (or asks, splits, or loses its
    claim) has its work committed on the branch too (and the report attached while
    the claim is live; a refused upload is logged, never fails the task), and its
    worktree kept for a look (`keep="on_failure"`) or removed (`keep="never"`). At
    the start of `run_teammate`, the worktrees this teammate kept for claims now over
    are removed.

    `repo` is a directory of a git work tree (its top level is used); `run_teammate`
    raises GitError at its start when it is not one, or when `base` names no commit.
    Raises ValueError for a `keep` other than "on_failure" or "never", or an empty `base`.
    """

    repo: Path
    base: str
    keep: Keep

    def __init__(self, repo: str | os.PathLike[str], *, base: str = "HEAD", keep: Keep = "on_failure") -> None:
        if keep not in get_args(Keep):
            raise ValueError(f"keep must be 'on_failure' or 'never', got {keep!r}")
        if not isinstance(base, str) or not base.strip():
            raise ValueError(f"base must name a commit (a branch, tag or hash), got {base!r}")
        object.__setattr__(self, "repo", Path(repo))
        object.__setattr__(self, "base", base)
        object.__setattr__(self, "keep", keep)


def worktree_name(task_id: str) -> str:
    """The task id as one path and ref component (the module docstring gives the rule)."""
    pieces = [
        ch if ch in _PLAIN else "".join(f"%{byte:02X}" for byte in ch.encode("utf-8", "surrogatepass"))
        for ch in task_id
    ]
    encoded = "".join(pieces)
    if len(encoded) <= _NAME_MAX:
        return encoded
    kept, length = [], 0
    for piece in pieces:  # whole characters only, so the kept part still decodes
        if length + len(piece) > _NAME_KEPT:
            break
        kept.append(piece)
        length += len(piece)
    digest = hashlib.sha256(task_id.encode("utf-8", "surrogatepass")).hexdigest()[:16]
    return "".join(kept) + "%%" + digest


def branch_name(task_id: str, attempt: int) -> str:
    """The branch of one attempt at a task: `corral/<name>/<attempt>`."""
    return f"corral/{worktree_name(task_id)}/{attempt}"


@dataclass(frozen=True)
class ClaimWorktree:
    """One claim's worktree, as its claim file records it."""

    teammate: str
    task_id: str
    title: str
    attempt: int
    fence: int
    path: Path
    branch: str
    base: str  # the commit the branch stood at when this claim's work began

    @property
    def claim_file(self) -> Path:
        return self.path.with_name(self.path.name + ".claim.json")

    def to_json(self) -> str:
        return json.dumps({**dataclasses.asdict(self), "path": str(self.path)}, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> ClaimWorktree:
        fields = json.loads(text)
        return cls(**{**fields, "path": Path(fields["path"])})


@dataclass(frozen=True)
class WorkspaceReport:
    """What a claim's work left on its branch."""

    worktree: ClaimWorktree
    commit: str  # the branch's head afterwards: the new commit, or `base` when nothing changed
    changed: bool  # False: nothing to commit, so no commit was made
    kept: bool  # the worktree is still there


def workspace_json(report: WorkspaceReport) -> bytes:
    """The report as the task's `corral/workspace.json` artifact."""
    worktree = report.worktree
    return json.dumps(
        {
            "branch": worktree.branch,
            "commit": report.commit,
            "base": worktree.base,
            "changed": report.changed,
            "path": str(worktree.path),
            "kept": report.kept,
            "task_id": worktree.task_id,
            "attempt": worktree.attempt,
            "teammate": worktree.teammate,
        },
        sort_keys=True,
    ).encode("utf-8")


class Worktrees:
    """One `run_teammate`'s worktrees in one repository. Every method blocks (git
    runs in a subprocess): `corral.aio` calls them in a thread."""

    def __init__(self, spec: GitWorktree, teammate: str) -> None:
        self._spec = spec
        self._teammate = teammate
        self._repo = spec.repo
        self._lock = repo_lock(spec.repo)

    @property
    def keep(self) -> Keep:
        return self._spec.keep

    # ------------------------------------------------------------ start

    def prepare(self) -> list[ClaimWorktree]:
        """Check the repository and `base`, keep `.corral/` out of its commits, drop
        git's records of worktrees whose directories are gone; returns the claim files
        of this teammate's worktrees left by earlier runs (or by this one's claims
        still to be re-sent)."""
        repo = self._spec.repo
        if not repo.is_dir():
            raise GitError(f"GitWorktree: {repo} is not a directory, so not a git repository")
        done = git("rev-parse", "--show-toplevel", cwd=repo, check=False)
        if done.returncode != 0:
            raise GitError(
                f"GitWorktree: {repo} is not in a git work tree: {done.stderr.strip()}",
                stderr=done.stderr.strip(),
                returncode=done.returncode,
            )
        self._repo = Path(done.stdout.strip())
        self._lock = repo_lock(self._repo)
        if git(
            "rev-parse", "--verify", "--quiet", f"{self._spec.base}^{{commit}}", cwd=self._repo, check=False
        ).returncode:
            raise GitError(f"GitWorktree: base {self._spec.base!r} names no commit in {self._repo}")
        with self._lock:
            retry_while_locked(self._exclude_corral_dir)
            retry_while_locked(lambda: git("worktree", "prune", cwd=self._repo))
        return [worktree for worktree in self._claim_files() if worktree.teammate == self._teammate]

    def _exclude_corral_dir(self) -> None:
        common = git("rev-parse", "--path-format=absolute", "--git-common-dir", cwd=self._repo).stdout.strip()
        exclude = Path(common) / "info" / "exclude"
        lines = exclude.read_text(encoding="utf-8").splitlines() if exclude.exists() else []
        if EXCLUDE_LINE not in lines:
            exclude.parent.mkdir(parents=True, exist_ok=True)
            with exclude.open("a", encoding="utf-8") as out:
                out.write(("\n" if lines else "") + "# worktrees of corral's claims\n" + EXCLUDE_LINE + "\n")

    def _claim_files(self) -> list[ClaimWorktree]:
        found = []
        for path in sorted((self._repo / WORKTREES_DIR).glob("*.claim.json")):
            try:
                found.append(ClaimWorktree.from_json(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, TypeError, KeyError) as exc:
                _log.warning("ignoring the unreadable claim file %s (%s)", path, exc)
        return found

    def prune(self, worktree: ClaimWorktree) -> None:
        """Remove the worktree of a claim that is over, after committing what it left
        uncommitted (a teammate that stopped mid-claim) on its branch; the branch stays.
        A worktree whose leftovers cannot be committed is kept, with a warning."""
        if _is_worktree(worktree.path):
            try:
                self._commit(worktree, "abandoned (committed when the teammate started again)")
            except GitError as exc:
                _log.warning(
                    "kept the worktree %s: its uncommitted work could not be committed (%s)", worktree.path, exc
                )
                return
        self._remove(worktree)
        _log.info("removed the worktree %s of an ended claim on task %s", worktree.path, worktree.task_id)

    # ------------------------------------------------------------ claims

    def open(self, task: Task, attempt: int, fence: int) -> ClaimWorktree:
        """The claim's worktree, made (or, when an earlier claim of the same attempt
        left it, taken over: a question, a split, a release, or a claim re-sent after
        a restart), with its claim file written."""
        return retry_while_locked(lambda: self._open(task, attempt, fence))

    def _open(self, task: Task, attempt: int, fence: int) -> ClaimWorktree:
        name = worktree_name(task.id)
        path = self._repo / WORKTREES_DIR / f"{name}-{attempt}"
        branch = branch_name(task.id, attempt)
        with self._lock:
            if not _is_worktree(path):
                if path.exists():  # what a failed `worktree add` left
                    shutil.rmtree(path)
                self._add(path, name, branch, attempt)
            base = git("rev-parse", "HEAD", cwd=path).stdout.strip()
            worktree = ClaimWorktree(self._teammate, task.id, task.title, attempt, fence, path, branch, base)
            worktree.claim_file.write_text(worktree.to_json(), encoding="utf-8")
        return worktree

    def _add(self, path: Path, name: str, branch: str, attempt: int) -> None:
        """`git worktree add` on the attempt's branch, made first when it is new.

        `git worktree prune` runs only when git says a record of a worktree that is gone
        is in the way, not before every add: a prune in one process can delete the admin
        entry another process's `worktree add` has just made (that add then fails, and
        is tried again)."""
        args: tuple[str, ...]
        if self._has_branch(branch):
            args = ("worktree", "add", "--quiet", str(path), branch)
        else:
            start = self._earlier_branch(name, attempt) or self._spec.base
            args = ("worktree", "add", "--quiet", "-b", branch, str(path), start)
        try:
            git(*args, cwd=self._repo)
        except GitError as exc:
            if "already registered" not in exc.stderr:
                raise
            git("worktree", "prune", cwd=self._repo)
            git(*args, cwd=self._repo)

    def _has_branch(self, branch: str) -> bool:
        ref = f"refs/heads/{branch}"
        return git("show-ref", "--verify", "--quiet", ref, cwd=self._repo, check=False).returncode == 0

    def _earlier_branch(self, name: str, attempt: int) -> str | None:
        """The branch of the task's latest attempt before `attempt`, if any."""
        prefix = f"refs/heads/corral/{name}/"
        listed = git("for-each-ref", "--format=%(refname)", prefix, cwd=self._repo).stdout.split()
        earlier = [int(ref[len(prefix) :]) for ref in listed if ref[len(prefix) :].isdigit()]
        earlier = [number for number in earlier if number < attempt]
        return f"{prefix}{max(earlier)}" if earlier else None

    def finish(self, worktree: ClaimWorktree, *, done: bool, outcome: str) -> WorkspaceReport:
        """Commit the claim's work on its branch; remove the worktree when the work is
        `done`, or always with keep="never". Raises GitError when the commit fails (the
        worktree stays); a removal that fails is logged (the next start retries it)."""
        commit, changed = self._commit(worktree, outcome)
        kept = not done and self._spec.keep == "on_failure"
        if not kept:
            try:
                self._remove(worktree)
            except GitError as exc:
                _log.warning(
                    "the worktree %s could not be removed (%s); the next start tries again", worktree.path, exc
                )
                kept = True
        return WorkspaceReport(worktree, commit, changed, kept)

    def _commit(self, worktree: ClaimWorktree, outcome: str) -> tuple[str, bool]:
        """Commit everything in the worktree; returns its head and whether a commit was
        made (none when nothing changed)."""
        return retry_while_locked(lambda: self._commit_once(worktree, outcome))

    def _commit_once(self, worktree: ClaimWorktree, outcome: str) -> tuple[str, bool]:
        path = worktree.path
        git("add", "--all", cwd=path)
        staged = git("diff", "--cached", "--quiet", cwd=path, check=False).returncode
        if staged not in (0, 1):
            git("diff", "--cached", "--quiet", cwd=path)  # raises with git's message
        if staged == 1:
            git("commit", "--quiet", "--no-verify", "-m", _message(worktree, outcome), cwd=path, env=self._identity())
        head = git("rev-parse", "HEAD", cwd=path).stdout.strip()
        return head, staged == 1

    def _identity(self) -> dict[str, str]:
        name = self._teammate.replace("<", "").replace(">", "") or "corral"
        email = f"{worktree_name(self._teammate)}@{EMAIL_DOMAIN}"
        return {
            "GIT_AUTHOR_NAME": name,
            "GIT_AUTHOR_EMAIL": email,
            "GIT_COMMITTER_NAME": name,
            "GIT_COMMITTER_EMAIL": email,
        }

    def _remove(self, worktree: ClaimWorktree) -> None:
        def remove() -> None:
            with self._lock:
                if _is_worktree(worktree.path):
                    git("worktree", "remove", "--force", str(worktree.path), cwd=self._repo)
                elif worktree.path.exists():
                    shutil.rmtree(worktree.path)  # git's record of it, if any, goes at the next start's prune
                worktree.claim_file.unlink(missing_ok=True)

        retry_while_locked(remove)


def _is_worktree(path: Path) -> bool:
    """Whether `path` is a working worktree (not a directory a failed add left, nor one
    whose admin entry another process pruned)."""
    if not (path / ".git").exists():
        return False
    return git("rev-parse", "--git-dir", cwd=path, check=False).returncode == 0


def _message(worktree: ClaimWorktree, outcome: str) -> str:
    title = worktree.title.strip().splitlines()[0] if worktree.title.strip() else ""
    subject = f"{title} ({worktree.task_id})" if title else worktree.task_id
    return (
        f"{subject}\n\nCorral-Task: {worktree.task_id}\nCorral-Attempt: {worktree.attempt}\nCorral-Outcome: {outcome}\n"
    )
