"""Session completions queued together, on both stores.

On PostgreSQL the writer runs the completions of a run of queued Session ops in
one statement (`tasks.complete_many`, `Mergeable`), and each job takes its row;
on SQLite each runs its own. Either way every op must end as if the ops had run
one by one: each completion, its dependents' counts, its op record, its refusal.
These tests queue the ops behind a held writer, so they are one batch in order.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time

import pytest

from corrald import errors, failpoints
from corrald.model import ClaimGrant, TaskState
from corrald.requestids import OpKey
from corrald.store.postgres.storage import BENCH_SWITCHES_ENV
from corrald.stream import ParkedStreams, StreamState
from corrald.txn import OpOutcome, Wakes
from corrald.writer import CommitFailed, job_owner
from tests.support.boardkit import Blocker, spec

pytestmark = pytest.mark.timeout(60)

COMPLETED = int(TaskState.COMPLETED)


def digest(op_id: str) -> bytes:
    return hashlib.sha256(op_id.encode()).digest()


def complete_together(
    board,
    ops: list[tuple[str, str, str, str]],
    streams: dict[str, StreamState] | None = None,
    waiters: ParkedStreams | None = None,
) -> list:
    """Sends the Session completions `ops` (teammate, op id, task id, token) while the
    writer is held, so they run in one batch, in this order; each one's
    (outcome, task, delivery), or the exception its call raised. Each teammate's
    stream is its own of `streams` (default: a new one of one slot), and `waiters`
    are the streams parked for work (default: none)."""
    writer = board.board.writer
    blocker = Blocker()
    held = blocker.hold(writer)
    streams = streams or {}
    waiters = waiters or ParkedStreams()

    async def one(name: str, op_id: str, task_id: str, token: str):
        job_owner.set(name)  # each op is its teammate's call, as the RPC layer says
        request = (name, task_id, token, f"result of {task_id}".encode())
        stream = streams.get(name) or StreamState(name, slots=1)
        try:
            done = await board.board.complete(*request, stream=stream, waiters=waiters, op=OpKey(op_id, digest(op_id)))
        except CommitFailed:
            raise  # the job failed: nothing was recorded
        except errors.CorralError as error:  # a refusal, recorded: the op's result carries it
            return OpOutcome(error=error), None, None
        return OpOutcome(), done.task, done.handoff

    async def all_queued_then_released():
        calls = [asyncio.ensure_future(one(*op)) for op in ops]
        deadline = time.monotonic() + 10
        while writer.stats().queue_depth < len(ops):
            assert time.monotonic() < deadline, "the ops were never queued"
            await asyncio.sleep(0)
        blocker.release()
        return await asyncio.gather(*calls, return_exceptions=True)

    try:
        return board.run(all_queued_then_released())
    finally:
        blocker.release()
        held.result(10)


def team_holding(board, count: int) -> list[tuple[str, str, str]]:
    """Teammates m1..m<count>, each holding a claim: (name, task id, token)."""
    held = []
    for index in range(1, count + 1):
        name = f"m{index}"
        board.add(name)
        grant = board.claim(name)
        assert grant is not None
        held.append((name, grant.task.id, grant.token))
    return held


def run_together(board) -> int:
    return board.board.writer.stats().jobs_run_together


def handed(delivery) -> list[str]:
    return [item.task.id for item in delivery.items if isinstance(item, ClaimGrant)] if delivery else []


@pytest.mark.parametrize("runs", ["on", "switched off"])
def test_completions_queued_together_end_as_if_run_one_by_one(make_board, store, monkeypatch, runs):
    if runs == "switched off":  # the benchmark's switch: each completion its own statement
        monkeypatch.setenv(BENCH_SWITCHES_ENV, "merge")
    board = make_board()
    board.create(*(spec(task_id) for task_id in "abcdef"), spec("ab", "a", "b"), spec("c2", "c"))
    held = team_holding(board, 6)
    before = run_together(board)
    heard: list[Wakes] = []
    board.board.writer.on_commit = heard.append

    answers = complete_together(board, [(name, f"done-{task}", task, token) for name, task, token in held])

    for (name, task_id, _), (outcome, task, _) in zip(held, answers, strict=True):
        assert outcome.error is None, f"{name}: {outcome.error}"
        assert (task.id, task.state, task.result) == (task_id, TaskState.COMPLETED, f"result of {task_id}".encode())
    # "ab" waited on two of the completions, "c2" on one: each became ready once and was
    # handed to exactly one of the completing teammates.
    given = sorted(task_id for _, _, delivery in answers for task_id in handed(delivery))
    assert given == ["ab", "c2"]
    # Each ended claim is named for its output's followers; the claims handed over are not.
    fences = dict(board.rows("SELECT token, fence FROM claims"))
    named = {fence for wakes in heard for fence in wakes.output}
    assert named == {fences[token] for _, _, token in held}
    assert board.rows("SELECT id, unmet_deps, state FROM tasks WHERE id IN ('ab', 'c2') ORDER BY id") == [
        ("ab", 0, int(TaskState.IN_PROGRESS)),
        ("c2", 0, int(TaskState.IN_PROGRESS)),
    ]
    # The event log holds one completion per task, in the order the ops were queued.
    completions = [
        json.loads(data)["id"] for _, _, data in board.events("task_changed") if json.loads(data)["state"] == COMPLETED
    ]
    assert completions == list("abcdef")
    assert board.scalar("SELECT count(*) FROM session_ops") == 6
    # On PostgreSQL the six ran their completion in one statement; SQLite runs each alone.
    assert run_together(board) - before == (6 if store == "postgres" and runs == "on" else 0)


def test_a_refused_completion_among_others_fails_alone_and_is_answered_again_from_its_record(board, store):
    board.create(*(spec(task_id) for task_id in "abcd"))
    (m1, a, a_token), (m2, b, _), (m3, c, c_token), (m4, d, d_token) = team_holding(board, 4)

    first = complete_together(
        board, [(m1, "op-a", a, a_token), (m2, "op-b", b, "not-the-token"), (m3, "op-c", c, c_token)]
    )

    assert first[0][0].error is None and first[2][0].error is None
    assert isinstance(first[1][0].error, errors.ClaimTokenMismatch)
    assert board.state(b) == TaskState.IN_PROGRESS
    assert [board.state(task) for task in (a, c)] == [TaskState.COMPLETED, TaskState.COMPLETED]

    before = run_together(board)
    again = complete_together(
        board, [(m2, "op-b", b, "not-the-token"), (m1, "op-a", a, a_token), (m4, "op-d", d, d_token)]
    )

    assert isinstance(again[0][0].error, errors.ClaimTokenMismatch), "the refusal was not answered from its record"
    outcome, task, delivery = again[1]
    assert outcome.error is None and delivery is None, "the op sent again ran again"
    assert task.result == b"result of a"
    assert again[2][0].error is None and board.state(d) == TaskState.COMPLETED
    assert board.scalar("SELECT count(*) FROM session_ops") == 4
    assert run_together(board) - before == (3 if store == "postgres" else 0)


def test_a_completion_failing_after_its_share_of_the_run_leaves_nothing_behind(board):
    board.create(*(spec(task_id) for task_id in "abc"))
    (m1, a, a_token), (m2, b, b_token), (m3, c, c_token) = team_holding(board, 3)
    failpoints.enable("job:m2", "error")

    answers = complete_together(board, [(m1, "op-a", a, a_token), (m2, "op-b", b, b_token), (m3, "op-c", c, c_token)])

    assert answers[0][0].error is None and answers[2][0].error is None
    assert isinstance(answers[1], Exception), "m2's job did not fail"
    assert [board.state(task) for task in (a, b, c)] == [
        TaskState.COMPLETED,
        TaskState.IN_PROGRESS,
        TaskState.COMPLETED,
    ]
    assert board.rows("SELECT teammate FROM session_ops ORDER BY teammate") == [(m1,), (m3,)]
    assert board.scalar("SELECT outcome FROM claims WHERE token = ?", (b_token,)) is None, "m2's claim was ended"

    failpoints.disable()
    ((outcome, task, _),) = complete_together(board, [(m2, "op-b", b, b_token)])
    assert outcome.error is None and task.state == TaskState.COMPLETED


def test_a_completion_reads_its_teammate_again_when_a_completion_before_it_handed_that_teammate_a_claim(board):
    """m2 (two slots) waits for work with one slot free while its completion is queued
    behind m1's. m1's completion makes "d" ready and hands it to the waiting m2. m2's
    completion then finds "d" among m2's claims (and sends it again on m2's stream) and
    claims nothing more: what the run read of m2 before "d" was handed no longer holds."""
    board.create(spec("a", priority=9), spec("b", priority=9), spec("d", "a", priority=5), spec("e"), spec("f"))
    (m1, a, a_token), (m2, b, b_token) = team_holding(board, 2)
    m2_stream = StreamState(m2, slots=2)
    m2_stream.sent_tokens.add(b_token)  # the stream sent its claim on "b"
    waiting = ParkedStreams()
    waiting.park(m2_stream)

    first, second = complete_together(
        board, [(m1, "op-a", a, a_token), (m2, "op-b", b, b_token)], streams={m2: m2_stream}, waiters=waiting
    )

    assert first[0].error is None and second[0].error is None
    assert handed(first[2]) == ["e"], "m1 claims the next ready task once d went to the waiting m2"
    assert handed(second[2]) == ["d"], "m2's completion did not see the claim handed to it"
    assert board.rows("SELECT id, owner FROM tasks WHERE state = 2 ORDER BY id") == [("d", m2), ("e", m1)]
    assert board.state("f") == TaskState.PENDING, "m2 claimed past what it was handed"
