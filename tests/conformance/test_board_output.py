"""A task's live output, on both stores: appends from the live claim alone, kept per attempt
within the limits, nothing stored of a refused one, read back from any offset after a
restart; which claim an attempt number names; who may read it; which claims a commit
names for their followers to look again (every way a claim ends, and nothing else)."""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import hashlib
from collections.abc import Callable

import pytest

from corrald import errors
from corrald.config import Limits
from corrald.model import ClaimGrant, ReviewPolicy, TaskCreation, TaskState, Usage, Verdict
from corrald.requestids import OpKey
from corrald.store import output
from corrald.txn import Wakes
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(60)

LEASE = 10_000


@pytest.fixture
def team(board):
    board.add("w1")
    board.add("w2")
    return board


def _append(board, name: str, task_id: str, token: str, data: bytes, op: str | None = None) -> output.Appended:
    key = None if op is None else OpKey(op, hashlib.sha256(b"output" + data).digest())
    return board.run(board.board.append_output(name, task_id, token, data, op=key))


def _read(
    board, task_id: str, attempt: int = 0, offset: int = 0, reader: str | None = None, piece: int = 7
) -> tuple[bytes, bool]:
    """The whole output of the attempt from `offset`, read in pieces of at most `piece` bytes as
    TailOutput reads it (7: a piece ends inside an append, or at its end, in the short outputs)."""
    found = board.run(board.board.output_attempt(task_id, attempt, reader))
    pieces, ended = [], False
    for _ in range(10_000):
        page = board.run(board.board.read_output(found.fence, offset, piece))
        if not page.data:
            ended = page.ended
            break
        pieces.append(page.data)
        offset += len(page.data)
    return b"".join(pieces), ended


def _stored(board) -> tuple[int, int]:
    """Rows of output and the bytes the claims count."""
    return (
        board.scalar("SELECT count(*) FROM output_chunks"),
        board.scalar("SELECT coalesce(sum(output_bytes), 0) FROM claims"),
    )


def test_appends_are_kept_in_order_with_their_offsets(team):
    team.create(spec("a"))
    grant = team.claim("w1")
    sizes = [_append(team, "w1", "a", grant.token, part) for part in (b"hello ", b"wor", b"ld\n")]
    assert sizes == [output.Appended(1, 6), output.Appended(1, 9), output.Appended(1, 12)]
    assert _read(team, "a") == (b"hello world\n", False)
    assert _read(team, "a", offset=4) == (b"o world\n", False)
    assert _read(team, "a", offset=12) == (b"", False)
    assert team.rows("SELECT pos, data FROM output_chunks ORDER BY pos") == [
        (0, b"hello "),
        (6, b"wor"),
        (9, b"ld\n"),
    ]
    before = len(team.events())
    _append(team, "w1", "a", grant.token, b"more")
    assert len(team.events()) == before, "an append logs no event: Watch is not flooded"
    team.complete("w1", "a", grant.token)
    assert _read(team, "a") == (b"hello world\nmore", True)


def test_the_limits_refuse_and_store_nothing(make_board, clock):
    board = make_board(limits=Limits(output_max_bytes=10))
    board.add("w1")
    board.create(spec("a"))
    grant = board.claim("w1")
    assert _append(board, "w1", "a", grant.token, b"123456").size == 6
    with pytest.raises(errors.OutputLimit) as refused:
        _append(board, "w1", "a", grant.token, b"78901")
    assert refused.value.reason == "OUTPUT_LIMIT" and "10" in refused.value.message
    assert _stored(board) == (1, 6)
    assert _append(board, "w1", "a", grant.token, b"7890").size == 10, "up to the limit itself"
    with pytest.raises(errors.OutputLimit):
        _append(board, "w1", "a", grant.token, b"x")
    for data, why in ((b"", "empty"), (b"x" * (64 * 1024 + 1), "larger than")):
        with pytest.raises(errors.InvalidArgument) as bad:
            _append(board, "w1", "a", grant.token, data)
        assert bad.value.field == "data" and why in bad.value.description
    assert _stored(board) == (2, 10)
    assert _read(board, "a") == (b"1234567890", False)


def test_an_append_of_64_kib_is_taken(team):
    team.create(spec("a"))
    grant = team.claim("w1")
    data = bytes(range(256)) * 256
    assert _append(team, "w1", "a", grant.token, data).size == 64 * 1024
    # Read back in 17 pieces of up to 4,001 bytes, not some 9,300 of 7 (seconds of round trips
    # on PostgreSQL): every byte is still compared, from an offset inside the append.
    assert _read(team, "a", offset=100, piece=4001) == (data[100:], False)


def test_a_dead_claim_appends_nothing(team, clock):
    team.create(spec("exp", lease_ms=LEASE), spec("rel"), spec("rev"), spec("done"), spec("other"))
    grants = {grant.task.id: grant for grant in (team.claim("w1") for _ in range(4))}
    other = team.claim("w2")
    team.release("w1", "rel", grants["rel"].token)
    team.revoke("rev")
    team.complete("w1", "done", grants["done"].token)
    cases = [
        ("w1", "rel", grants["rel"].token, errors.ClaimTokenMismatch),
        ("w1", "rev", grants["rev"].token, errors.ClaimRevoked),
        ("w1", "done", grants["done"].token, errors.ClaimTokenMismatch),
        ("w1", "other", other.token, errors.ClaimTokenMismatch),  # not the holder
        ("w2", "exp", grants["exp"].token, errors.ClaimTokenMismatch),  # the token of another teammate
        ("w1", "other", grants["exp"].token, errors.ClaimTokenMismatch),  # the token of another task
        ("w1", "nope", grants["exp"].token, errors.TaskNotFound),
    ]
    for name, task_id, token, error in cases:
        with pytest.raises(error):
            _append(team, name, task_id, token, b"late")
    clock.advance(LEASE)
    with pytest.raises(errors.LeaseExpired):
        _append(team, "w1", "exp", grants["exp"].token, b"late")
    team.reap()
    with pytest.raises(errors.LeaseExpired):
        _append(team, "w1", "exp", grants["exp"].token, b"late")
    assert _stored(team) == (0, 0)


def test_output_survives_a_restart_and_goes_on_where_it_was(team):
    team.create(spec("a", lease_ms=LEASE))
    grant = team.claim("w1")
    _append(team, "w1", "a", grant.token, b"before ")
    team.restart()
    assert _read(team, "a") == (b"before ", False)
    assert _append(team, "w1", "a", grant.token, b"after").size == 12
    assert _read(team, "a") == (b"before after", False)


def test_each_attempt_keeps_its_own_output_and_a_number_names_the_latest_claim_with_it(team):
    team.create(spec("a", max_attempts=3), spec("b"))
    first = team.claim("w1")
    _append(team, "w1", "a", first.token, b"one")
    team.fail("w1", "a", first.token)
    second = team.claim("w1")
    assert second.attempt == 2
    _append(team, "w1", "a", second.token, b"two, given back")
    team.release("w1", "a", second.token)  # a release uses no attempt: the next claim is 2 too
    third = team.claim("w2")
    assert third.attempt == 2
    assert _append(team, "w2", "a", third.token, b"two again") == output.Appended(2, 9)
    assert _read(team, "a", 1) == (b"one", True)
    assert _read(team, "a", 2) == (b"two again", False), "the latest claim of that number"
    assert _read(team, "a", 0) == (b"two again", False)
    with pytest.raises(errors.AttemptNotFound):
        _read(team, "a", 3)
    with pytest.raises(errors.AttemptNotFound):
        _read(team, "b", 0)  # never claimed
    with pytest.raises(errors.TaskNotFound):
        _read(team, "nope")


def test_a_review_claim_appends_too(team):
    team.add("rita", roles=("rev",))
    team.create(spec("a", review=ReviewPolicy("rev", 0)))
    work = team.claim("w1")
    _append(team, "w1", "a", work.token, b"draft log")
    team.complete("w1", "a", work.token, b"draft")
    assert _read(team, "a", 1) == (b"draft log", True)
    review = team.claim("rita")
    assert review.attempt == work.attempt == 1, "a review's claim has its work claim's number"
    assert _append(team, "rita", "a", review.token, b"looks fine").size == 10
    # The number names the latest claim that has it: the review's now.
    assert _read(team, "a", 0) == _read(team, "a", 1) == (b"looks fine", False)
    team.complete("rita", "a", review.token, b"", verdict=Verdict(True, "ok"))
    assert _read(team, "a", 0) == (b"looks fine", True)


def test_a_teammate_reads_its_own_tasks_and_their_dependencies_only(team):
    team.add("w3")
    team.create(spec("dep"), spec("mine", "dep"), spec("else"))
    dep = team.claim("w2")
    team.complete("w2", "dep", dep.token)
    mine = team.claim("w1")
    assert mine.task.id == "mine"
    elsewhere = team.claim("w3")
    assert elsewhere.task.id == "else"
    assert _read(team, "mine", reader="w1")[0] == b""
    assert _read(team, "dep", reader="w1") == (b"", True), "a dependency of its task"
    assert _read(team, "dep", reader="w2") == (b"", True), "a task it held"
    for reader, task_id in (("w3", "mine"), ("w3", "dep"), ("w1", "else"), ("w2", "mine")):
        with pytest.raises(errors.PermissionDenied):
            _read(team, task_id, reader=reader)
    assert _read(team, "else", reader=None) == (b"", False), "the Lead or a viewer"


def test_a_session_op_sent_again_appends_once(team):
    team.create(spec("a"))
    grant = team.claim("w1")
    assert _append(team, "w1", "a", grant.token, b"abc", op="o1") == output.Appended(1, 3)
    assert _append(team, "w1", "a", grant.token, b"abc", op="o1") == output.Appended(1, 3)
    assert _append(team, "w1", "a", grant.token, b"de", op="o2") == output.Appended(1, 5)
    team.complete("w1", "a", grant.token)
    with pytest.raises(errors.ClaimTokenMismatch):
        _append(team, "w1", "a", grant.token, b"x", op="o3")
    with pytest.raises(errors.ClaimTokenMismatch):  # answered from its record, not run again
        _append(team, "w1", "a", grant.token, b"x", op="o3")
    assert _read(team, "a") == (b"abcde", True)
    assert _stored(team) == (2, 5)


def test_concurrent_appends_tile_the_output(make_board):
    board = make_board(limits=Limits(output_max_bytes=300))
    board.add("w1")
    board.create(spec("a"))
    grant = board.claim("w1")
    parts = [bytes([65 + n % 26]) * (1 + n % 7) for n in range(120)]

    async def one(part: bytes):
        try:
            return await board.board.append_output("w1", "a", grant.token, part)
        except errors.OutputLimit:
            return None

    async def all_of():
        return await asyncio.gather(*(one(part) for part in parts))

    done = [d for d in board.run(all_of()) if d is not None]
    rows = board.rows("SELECT pos, data FROM output_chunks ORDER BY pos")
    at = 0
    for pos, data in rows:
        assert pos == at, "no gap and no overlap"
        at += len(bytes(data))
    assert at == max(d.size for d in done) == board.scalar("SELECT output_bytes FROM claims") <= 300
    assert len(rows) == len(done)


def _named(board, act: Callable[[], object]) -> set[int]:
    """The claims (by fence) whose followers the commits of `act()` wake (`Wakes.output`)."""
    heard: list[Wakes] = []
    board.board.writer.on_commit = heard.append  # on the writer thread, before the call returns
    try:
        act()
    finally:
        board.board.writer.on_commit = None
    return {fence for wakes in heard for fence in wakes.output}


def test_every_way_a_claim_ends_wakes_the_followers_of_that_claim_alone(team, clock):
    team.add("w3")
    team.add("rita", roles=("rev",))
    team.set_creation("*", TaskCreation.ALLOW)
    team.create(spec("other", lease_ms=1000 * LEASE))
    other = team.claim("w2")  # live throughout: no commit below may name it

    def claimed(task_spec, name: str = "w1") -> ClaimGrant:
        team.create(task_spec)
        grant = team.claim(name)
        assert grant is not None and grant.task.id == task_spec.id
        return grant

    def ends(grant: ClaimGrant, act: Callable[[], object], how: str) -> None:
        named = _named(team, act)
        assert grant.fence in named, f"{how}: its followers sleep on"
        assert other.fence not in named, f"{how}: woke another claim's followers"
        if team.state(grant.task.id) is TaskState.PENDING:
            team.cancel(grant.task.id)  # out of the way of the next claim

    grant = claimed(spec("done"))
    assert other.fence not in _named(team, lambda: _append(team, "w1", "done", grant.token, b"x"))
    ends(grant, lambda: team.complete("w1", "done", grant.token), "completed")
    grant = claimed(spec("spent"))
    ends(grant, lambda: team.complete("w1", "spent", grant.token, usage=Usage(1, 2, 3, "m")), "completed, with usage")
    grant = claimed(spec("retried", max_attempts=2))
    ends(grant, lambda: team.fail("w1", "retried", grant.token), "failed, to be retried")
    grant = claimed(spec("failed"))
    ends(grant, lambda: team.fail("w1", "failed", grant.token, retryable=False), "failed")
    grant = claimed(spec("given"))
    ends(grant, lambda: team.release("w1", "given", grant.token), "released")
    grant = claimed(spec("revoked"))
    ends(grant, lambda: team.revoke("revoked"), "revoked")
    grant = claimed(spec("canceled"))
    ends(grant, lambda: team.cancel("canceled"), "canceled")
    grant = claimed(spec("asked"))
    ends(grant, lambda: team.ask("w1", "asked", grant.token), "asked a question")
    grant = claimed(spec("split"))
    ends(grant, lambda: team.propose("w1", spec("part"), task_id="split", token=grant.token, block=True), "split")
    team.cancel("part")
    grant = claimed(spec("removed"), "w3")
    ends(grant, lambda: team.run(team.board.remove_teammate("w3")), "its holder removed")
    grant = claimed(spec("expired", lease_ms=LEASE))
    clock.advance(LEASE)
    ends(grant, team.reap, "expired")
    timed = dataclasses.replace(spec("timed", lease_ms=LEASE), attempt_timeout_ms=LEASE // 2)
    grant = claimed(timed)
    clock.advance(LEASE // 2)
    ends(grant, team.reap, "timed out")
    for task_id, decide in (
        ("approved", lambda review: team.complete("rita", "approved", review.token, b"", verdict=Verdict(True))),
        ("taken", lambda review: team.review("taken", True)),  # the Lead decides: the review's claim is revoked
    ):
        work = claimed(spec(task_id, review=ReviewPolicy("rev", 0)))
        ends(work, functools.partial(team.complete, "w1", task_id, work.token, b"draft"), "completed for review")
        review = team.claim("rita")
        assert review is not None and review.task.id == task_id
        ends(review, functools.partial(decide, review), f"review {task_id}")
