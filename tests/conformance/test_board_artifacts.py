"""Artifacts on both stores: attached only by a live claim, superseded by name with the
history kept, the board's quota counting each distinct content once and refusing at its
exact boundary, and many teammates uploading at once while the Lead cancels tasks under
them: what is attached came from a claim live at that moment, each task shows the
latest of each name, the quota counter sums what is stored, and a restart leaves no
blob that no artifact names."""

from __future__ import annotations

import asyncio
import hashlib
import json
import pathlib
import random
import threading
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from corrald import errors
from corrald.config import Limits
from corrald.model import ArtifactRecord
from corrald.store import artifacts
from tests.support.boardkit import Blocker, SyncBoard, spec

pytestmark = pytest.mark.timeout(120)

LEASE = 10_000
IN_PROGRESS = 2  # TaskState.IN_PROGRESS as the event log stores it


# ---------------------------------------------------------------- helpers


def _read(board: SyncBoard, task_id: str, artifact: str) -> bytes:
    """The task's current artifact of that name, read back as GetArtifact reads it."""
    found = board.run(board.board.find_artifact(task_id, artifact, None))
    pieces, offset = [], 0
    while offset < found.size:
        data = board.run(board.board.read_artifact(found.sha256, offset, 1000))
        assert data, f"{artifact!r} ends at {offset} of {found.size}"
        pieces.append(data)
        offset += len(data)
    return b"".join(pieces)


def _shown(board: SyncBoard, task_id: str) -> tuple[ArtifactRecord, ...]:
    """Task.artifacts as GetTask reads it."""
    return board.run(board.board.task_history(task_id))[0].artifacts


def _history(board: SyncBoard, task_id: str) -> list[tuple[ArtifactRecord, str]]:
    seq = board.scalar("SELECT seq FROM tasks WHERE id = ?", (task_id,))
    return board.call(lambda tx: artifacts.history(tx.conn, seq))


def _latest_per_name(history: list[tuple[ArtifactRecord, str]]) -> list[ArtifactRecord]:
    latest: dict[str, ArtifactRecord] = {}
    for record, _ in history:  # oldest first: a later row of a name supersedes
        latest[record.name] = record
    return [latest[name] for name in sorted(latest)]


def _stored_blobs(board: SyncBoard) -> tuple[dict[str, int], list[str]]:
    """({SHA-256: size} of every complete blob stored, [what an unfinished upload left])."""
    if isinstance(board.path, pathlib.Path):
        blobs = board.board.blobs
        sizes = {sha: (blobs.root / sha[:2] / sha).stat().st_size for sha in blobs.contents()}
        return sizes, blobs.temporary_files()
    complete = dict(board.rows("SELECT sha256, size FROM artifact_uploads WHERE sha256 IS NOT NULL"))
    partial = [f"upload {u}" for (u,) in board.rows("SELECT id FROM artifact_uploads WHERE sha256 IS NULL")]
    stray = board.scalar(
        "SELECT count(*) FROM artifact_chunks AS k WHERE NOT EXISTS"
        " (SELECT 1 FROM artifact_uploads AS u WHERE u.id = k.upload AND u.sha256 IS NOT NULL)"
    )
    return complete, partial + ([f"{stray} chunks"] if stray else [])


def _written(board: SyncBoard) -> tuple:
    """What an attach writes: its rows, the contents counted, the counter, the events."""
    return (
        board.rows("SELECT task_seq, attempt, name, sha256 FROM artifacts ORDER BY seq"),
        sorted(board.rows("SELECT sha256, size FROM artifact_contents")),
        board.call(lambda tx: artifacts.stored_bytes(tx.conn)),
        board.scalar("SELECT count(*) FROM events"),
    )


def _assert_quota_counts_what_is_stored(board: SyncBoard) -> None:
    """The counter is the sum of the distinct contents named, each stored whole, and a
    restart leaves nothing else stored."""
    named = dict(board.rows("SELECT sha256, size FROM artifact_contents"))
    assert {sha for (sha,) in board.rows("SELECT DISTINCT sha256 FROM artifacts")} == set(named)
    assert board.call(lambda tx: artifacts.stored_bytes(tx.conn)) == sum(named.values())
    board.restart()
    stored, unfinished = _stored_blobs(board)
    assert stored == named, "a blob no artifact names outlived the restart, or a named one is missing"
    assert unfinished == []
    assert board.call(lambda tx: artifacts.stored_bytes(tx.conn)) == sum(stored.values())


@pytest.fixture
def team(board):
    board.add("w1")
    board.add("w2")
    return board


# ---------------------------------------------------------------- attach and supersede


def test_the_headers_check_is_a_read_that_answers_while_the_writer_is_busy(team):
    team.create(spec("a"), spec("b"))
    live = team.claim("w1")
    done = team.claim("w2")
    team.complete("w2", done.task.id, done.token)
    jobs = team.board.writer.stats().jobs
    blocker = Blocker()
    held = blocker.hold(team.board.writer)  # any writer job would wait behind it
    try:
        assert team.run(team.board.check_artifact_claim("w1", live.task.id, live.token)) is None
        with pytest.raises(errors.ClaimTokenMismatch):
            team.run(team.board.check_artifact_claim("w2", done.task.id, done.token))
        with pytest.raises(errors.TaskNotFound):
            team.run(team.board.check_artifact_claim("w1", "nope", live.token))
        assert not held.done(), "the checks waited for the writer until the blocker gave up"
    finally:
        blocker.release()
        held.result(10)
    assert team.board.writer.stats().jobs == jobs + 1, "a job besides the blocker"


def test_a_later_attempt_supersedes_a_name_and_the_history_keeps_every_row(team):
    team.create(spec("a", max_attempts=3), spec("b", "a"))
    first = team.claim("w1")
    one = team.attach("w1", "a", first.token, "log", b"first attempt")
    kept = team.attach("w1", "a", first.token, "first-only", b"kept")
    team.fail("w1", "a", first.token, retryable=True)
    second = team.claim("w2")
    assert (second.task.id, second.attempt) == ("a", 2)
    assert [r.name for r in second.task.artifacts] == ["first-only", "log"], "a retry's claim shows them"
    two = team.attach("w2", "a", second.token, "log", b"second attempt")
    team.release("w2", "a", second.token)
    again = team.claim("w1")
    assert again.attempt == 2, "a release uses up no attempt"
    three = team.attach("w1", "a", again.token, "log", b"second attempt, claimed again")
    assert [(r.attempt, r.sha256) for r in (one, two, three)] == [
        (1, hashlib.sha256(b"first attempt").hexdigest()),
        (2, hashlib.sha256(b"second attempt").hexdigest()),
        (2, hashlib.sha256(b"second attempt, claimed again").hexdigest()),
    ]
    assert _history(team, "a") == [(one, "w1"), (kept, "w1"), (two, "w2"), (three, "w1")]
    assert _shown(team, "a") == (kept, three)
    assert _read(team, "a", "log") == b"second attempt, claimed again"
    team.complete("w1", "a", again.token)
    dependent = team.claim("w2")
    assert dependent.task.id == "b" and dependent.dependency_artifacts == (("a", kept), ("a", three))
    team.restart()
    assert _history(team, "a") == [(one, "w1"), (kept, "w1"), (two, "w2"), (three, "w1")]
    assert _shown(team, "a") == (kept, three)
    assert _read(team, "a", "first-only") == b"kept"


# ---------------------------------------------------------------- the quota


def test_the_quota_counts_each_distinct_content_once_and_refuses_at_its_exact_boundary(make_board):
    board = make_board(limits=Limits(artifact_store_max_bytes=100))
    board.add("w1")
    board.create(spec("a"), spec("b"))
    a, b = board.claim("w1"), board.claim("w1")
    forty, sixty = b"4" * 40, b"6" * 60
    board.attach("w1", "a", a.token, "forty", forty)
    board.attach("w1", "a", a.token, "same", forty)
    board.attach("w1", "b", b.token, "same", forty)
    assert board.call(lambda tx: artifacts.stored_bytes(tx.conn)) == 40, "the same content counts once"
    before = _written(board)
    with pytest.raises(errors.ArtifactQuota) as refused:
        board.attach("w1", "b", b.token, "one-over", b"6" * 61)  # 101 of 100
    assert refused.value.reason == "ARTIFACT_QUOTA" and "100" in refused.value.message
    assert _written(board) == before, "a refused attach writes nothing"
    board.attach("w1", "b", b.token, "sixty", sixty)  # exactly 100 of 100
    assert board.call(lambda tx: artifacts.stored_bytes(tx.conn)) == 100
    full = _written(board)
    with pytest.raises(errors.ArtifactQuota):
        board.attach("w1", "a", a.token, "one-byte", b"1")
    assert _written(board) == full
    # At the quota, content already stored (or none at all) still attaches: it adds nothing.
    assert board.attach("w1", "a", a.token, "again", sixty).size == 60
    assert board.attach("w1", "a", a.token, "empty", b"").size == 0
    assert board.call(lambda tx: artifacts.stored_bytes(tx.conn)) == 100
    assert [r.name for r in _shown(board, "a")] == ["again", "empty", "forty", "same"]
    _assert_quota_counts_what_is_stored(board)


# ---------------------------------------------------------------- dead claims


def test_a_dead_claim_attaches_nothing_and_its_bytes_go_at_restart(team, clock):
    team.create(spec("exp", lease_ms=LEASE), spec("rel"), spec("rev"), spec("can"), spec("done"), spec("other"))
    grants = {grant.task.id: grant for grant in (team.claim("w1") for _ in range(5))}
    other = team.claim("w2")
    kept = team.attach("w2", "other", other.token, "kept", b"kept")
    team.release("w1", "rel", grants["rel"].token)
    team.revoke("rev")
    team.cancel("can")
    team.complete("w1", "done", grants["done"].token)
    before = _written(team)
    cases = [
        ("w1", "rel", grants["rel"].token, errors.ClaimTokenMismatch),
        ("w1", "rev", grants["rev"].token, errors.ClaimRevoked),
        ("w1", "can", grants["can"].token, errors.TaskCanceled),
        ("w1", "done", grants["done"].token, errors.ClaimTokenMismatch),
        ("w1", "other", other.token, errors.ClaimTokenMismatch),  # not the holder
        ("w2", "exp", grants["exp"].token, errors.ClaimTokenMismatch),  # another teammate's token
        ("w1", "other", grants["exp"].token, errors.ClaimTokenMismatch),  # another task's token
        ("w1", "nope", grants["exp"].token, errors.TaskNotFound),
    ]
    for n, (name, task_id, token, error) in enumerate(cases):
        with pytest.raises(error):
            team.attach(name, task_id, token, "late", f"late {n}".encode())
        with pytest.raises(error):  # the header's check says the same, before any byte
            team.run(team.board.check_artifact_claim(name, task_id, token))
    assert _written(team) == before
    clock.advance(LEASE)
    with pytest.raises(errors.LeaseExpired):
        team.attach("w1", "exp", grants["exp"].token, "late", b"expired")
    with pytest.raises(errors.LeaseExpired):  # on the board's clock, the reaper not yet run
        team.run(team.board.check_artifact_claim("w1", "exp", grants["exp"].token))
    assert _written(team) == before
    team.reap()  # logs the expiry
    reaped = _written(team)
    with pytest.raises(errors.LeaseExpired):
        team.attach("w1", "exp", grants["exp"].token, "late", b"expired, reaped")
    assert _written(team) == reaped and reaped[:3] == before[:3]
    stored, _ = _stored_blobs(team)
    assert len(stored) == len(cases) + 3, "the refused uploads' bytes were stored, named by nothing"
    _assert_quota_counts_what_is_stored(team)
    assert [task_id for task_id in ("exp", "rel", "rev", "can", "done") if _shown(team, task_id)] == []
    assert _shown(team, "other") == (kept,)


# ---------------------------------------------------------------- many teammates at once

TEAMMATES = 14
TASKS = 36
DOOMED = {f"t{n:02}" for n in range(0, TASKS, 6)}  # canceled by the Lead between two uploads
NAMES = ("log", "report.txt", "out/data.bin")
SEED = 20250611


def _contents(rng: random.Random) -> list[bytes]:
    """A pool the teammates share, so the same content is uploaded by many at once."""
    return [b"", b"x", rng.randbytes(1000), rng.randbytes(64 * 1024), rng.randbytes(200 * 1024), b"y" * 4096]


class Crew:
    """The teammates' and the Lead's calls on the board's loop (run in a thread of its
    own), and what each attach answered."""

    def __init__(self, board: SyncBoard) -> None:
        self.board = board
        self.loop = board.loop
        self.thread = threading.Thread(target=self.loop.run_forever, name="board loop", daemon=True)
        self.lock = threading.Lock()
        self.attached: list[tuple[str, str, ArtifactRecord]] = []  # (task, teammate, record)
        self.refused: list[tuple[str, str, errors.ClaimError]] = []
        self.progress = threading.Condition(self.lock)
        self.waiting: set[str] = set()  # doomed tasks whose holder waits for their cancel
        self.canceled: dict[str, threading.Event] = {t: threading.Event() for t in DOOMED}

    def __enter__(self) -> Crew:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)

    def call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(30)

    def attach(self, name: str, task_id: str, token: str, artifact: str, data: bytes) -> bool:
        """One upload; False when the claim was dead at its attach."""
        try:
            record = self.call(self.board.attach_after_upload(name, task_id, token, artifact, data))
        except errors.ClaimError as error:
            with self.lock:
                self.refused.append((task_id, name, error))
            return False
        with self.progress:
            self.attached.append((task_id, name, record))
            self.progress.notify_all()
        return True

    def teammate(self, name: str, seed: int) -> None:
        rng = random.Random(seed)
        contents = _contents(random.Random(SEED))
        for _ in range(TASKS):
            grant = self.board.claim(name)
            if grant is None:
                return
            task_id, token = grant.task.id, grant.token
            live = True
            for n in range(rng.randint(2, 4)):
                data = rng.choice(contents) if rng.random() < 0.8 else f"{name} {task_id} {n}".encode()
                if task_id in DOOMED and n == 1:  # the Lead cancels it between two uploads
                    with self.progress:
                        self.waiting.add(task_id)
                        self.progress.notify_all()
                    assert self.canceled[task_id].wait(30), f"{task_id} was not canceled"
                live = self.attach(name, task_id, token, rng.choice(NAMES), data)
                if not live:
                    break
            if not live:
                continue
            ending = rng.random()
            board = self.board.board
            if ending < 0.6:
                end = board.complete(name, task_id, token, b"done")
            elif ending < 0.85:
                end = board.release(name, task_id, token)
            else:
                end = board.fail(name, task_id, token, "again", True)
            try:
                self.call(end)
            except errors.TaskCanceled:
                pass  # the Lead canceled it after the last upload

    def lead(self, others: list[str]) -> None:
        """Cancels each doomed task once its holder waits between two uploads, and before
        it one of the others, wherever its holder is, once a few more uploads were attached."""
        for n, task_id in enumerate(sorted(DOOMED)):
            with self.progress:
                seen = len(self.attached)
                self.progress.wait_for(lambda s=seen, t=task_id: len(self.attached) > s + 2 or t in self.waiting, 30)
            if n < len(others):
                self.call(self.board.board.cancel_tasks([others[n]]))
            with self.progress:
                held = self.progress.wait_for(lambda t=task_id: t in self.waiting, 30)
                assert held, f"{task_id} was never held"
            self.call(self.board.board.cancel_tasks([task_id]))
            self.canceled[task_id].set()

    def stop_waiting(self) -> None:
        """No teammate waits on a Lead that has failed."""
        for event in self.canceled.values():
            event.set()


def _check_every_attach_came_from_a_live_claim(board: SyncBoard) -> int:
    """Replays the event log: at each artifact_added, the task's live claim (its latest
    task_changed IN_PROGRESS, not ended since) is the attaching teammate's, of that attempt."""
    live: dict[str, tuple[str, int] | None] = {}
    added = 0
    for _, kind, data in board.events():
        event = json.loads(data) if isinstance(data, str) else data
        if kind == "task_changed":
            held = event["state"] == IN_PROGRESS
            live[event["id"]] = (event["owner"], event["attempt"]) if held else None
        elif kind == "artifact_added":
            added += 1
            holder = live.get(event["task_id"])
            assert holder == (event["teammate"], event["attempt"]), (event, holder)
    return added


def test_many_teammates_upload_at_once_while_the_lead_cancels(board):
    names = [f"w{n:02}" for n in range(TEAMMATES)]
    for name in names:
        board.add(name)
    board.create(*(spec(f"t{n:02}", max_attempts=3, lease_ms=60_000) for n in range(TASKS)))
    others = [f"t{n:02}" for n in range(3, TASKS, 6)]  # canceled wherever their holders are
    failures: list[BaseException] = []
    with Crew(board) as crew:

        def guarded(target: Callable[..., None], *args: Any) -> threading.Thread:
            def run() -> None:
                try:
                    target(*args)
                except BaseException as error:  # noqa: BLE001 (reported on the test's thread)
                    failures.append(error)
                    crew.stop_waiting()

            return threading.Thread(target=run, name=f"{target.__name__} {args[0]}")

        threads = [guarded(crew.teammate, name, SEED + n) for n, name in enumerate(names)]
        threads.append(guarded(crew.lead, others))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(90)
        assert not [t.name for t in threads if t.is_alive()], "a teammate or the Lead did not finish"
        assert not failures, failures

    # Each doomed task's upload after the cancel was refused as a canceled claim's is.
    refused_doomed = {task_id for task_id, _, error in crew.refused if isinstance(error, errors.TaskCanceled)}
    assert refused_doomed >= DOOMED
    assert all(isinstance(e, errors.TaskCanceled) for _, _, e in crew.refused), crew.refused
    # Every attached artifact is a row, every row an answered attach, from a claim live then.
    rows = board.rows(
        "SELECT t.id, a.teammate, a.name, a.sha256, a.attempt FROM artifacts AS a JOIN tasks AS t ON t.seq = a.task_seq"
    )
    answered = [(t, who, r.name, r.sha256, r.attempt) for t, who, r in crew.attached]
    assert sorted(rows) == sorted(answered)
    assert _check_every_attach_came_from_a_live_claim(board) == len(rows) > TASKS
    claims = set(
        board.rows("SELECT t.id, c.teammate, c.attempt FROM claims AS c JOIN tasks AS t ON t.seq = c.task_seq")
    )
    assert {(t, who, attempt) for t, who, _, _, attempt in rows} <= claims
    # Each task shows the latest artifact of each name its history holds.
    for n in range(TASKS):
        task_id = f"t{n:02}"
        assert list(_shown(board, task_id)) == _latest_per_name(_history(board, task_id)), task_id
    _assert_quota_counts_what_is_stored(board)
