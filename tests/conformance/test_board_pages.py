"""Listings and the Watch feed are cut by bytes before any payload is loaded.

The store sizes each task from SQLite's lengths alone; the size must never be
less than the task's size on the wire, or a page could outgrow what a
default client accepts.
"""

from __future__ import annotations

import pytest

from corrald.model import ReviewPolicy
from corrald.service import convert
from corrald.store import tasks
from tests.support.boardkit import spec

pytestmark = pytest.mark.timeout(30)

KIB = 1024
MIB = 1024 * KIB


def listing(board, after_seq: int = 0, *, limit: int = 100, max_bytes: int = MIB):
    return board.run(board.board.list_tasks(states=[], owner="", after_seq=after_seq, limit=limit, max_bytes=max_bytes))


def test_a_listing_takes_the_tasks_that_fit_and_says_more_follow(board):
    board.create(*(spec(f"t{i}", payload=bytes([i]) * (400 * KIB)) for i in range(5)))
    seen, after = [], 0
    pages = []
    for _ in range(5):  # three pages expected; bounded in case `more` never ends
        page = listing(board, after)
        pages.append(([t.id for t in page.tasks], page.more))
        seen += page.tasks
        if not page.more:
            break
        after = page.tasks[-1].seq
    assert pages == [(["t0", "t1"], True), (["t2", "t3"], True), (["t4"], False)]
    assert all(t.payload == bytes([int(t.id[1:])]) * (400 * KIB) for t in seen)


def test_a_task_larger_than_the_budget_still_makes_a_page_of_one(board):
    board.create(spec("huge", payload=b"h" * MIB), spec("small"))
    page = listing(board, max_bytes=64 * KIB)
    assert [t.id for t in page.tasks] == ["huge"] and page.more


def test_the_page_size_still_limits_a_listing_of_small_tasks(board):
    board.create(*(spec(f"s{i}") for i in range(3)))
    first = listing(board, limit=2)
    assert [t.id for t in first.tasks] == ["s0", "s1"] and first.more
    rest = listing(board, first.tasks[-1].seq, limit=2)
    assert [t.id for t in rest.tasks] == ["s2"] and not rest.more


def test_the_stored_size_is_never_less_than_the_wire_size(board):
    board.add("w1", roles=["reviewer"])
    board.create(
        spec("first", title="é" * 200),
        spec(
            "wide",
            "first",
            title="ü" * 200,
            description="漢" * 20_000,  # three bytes a character
            payload=b"p" * 1000,
            required_role="reviewer",
            priority=-1_000_000,
            max_attempts=100,
            lease_ms=86_400_000,
        ),
    )
    grant = board.claim("w1")
    board.fail("w1", grant.task.id, grant.token, error="é" * 5000, retryable=True)
    grant = board.claim("w1")
    board.complete("w1", grant.task.id, grant.token, result=b"r" * 3000)
    # A question waiting for the Lead and a review policy are on the wire too.
    board.create(spec("asker", review=ReviewPolicy("r" * 128, 0)))
    grant = board.claim("w1")
    board.ask("w1", "asker", grant.token, "ä" * 30_000)
    page = listing(board)
    assert [t.id for t in page.tasks] == ["first", "wide", "asker"]
    sizes = board.run(board.board.read(lambda conn: tasks.wire_bytes_by_id(conn, ["first", "wide", "asker"])))
    for record in page.tasks:
        # Each task in a reply also takes its field tag and length prefix.
        assert sizes[record.id] >= convert.task(record).ByteSize() + 4, record.id


def test_the_feed_is_cut_by_bytes_and_says_more_follow(board):
    board.create(*(spec(f"f{i}", payload=bytes([i]) * (400 * KIB)) for i in range(3)))
    first = board.run(board.board.read_feed(0, 256, MIB))
    assert [task.id for _, task, _ in first.items] == ["f0", "f1"] and first.more
    rest = board.run(board.board.read_feed(first.items[-1][0].seq, 256, MIB))
    assert [task.id for _, task, _ in rest.items] == ["f2"] and not rest.more
    assert rest.items[0][1].payload == bytes([2]) * (400 * KIB)


def test_a_full_feed_page_says_more_may_follow(board):
    board.create(*(spec(f"e{i}") for i in range(3)))
    page = board.run(board.board.read_feed(0, 3, MIB))
    assert len(page.items) == 3 and page.more
