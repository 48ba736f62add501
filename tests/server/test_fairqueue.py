"""The writer's queue (fairqueue.py): least attained service first, first-come within an owner,
equal shares among backlogged owners, no starvation, bounded memory."""

from __future__ import annotations

import collections

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corrald.overload.fairqueue import FairQueue

pytestmark = pytest.mark.timeout(60)

OWNERS = st.sampled_from(["lead", "a", "b", "c", ""])
# A push by an owner, or a pop (None), in any interleaving.
STEPS = st.lists(st.one_of(OWNERS, st.none()), max_size=300)


@settings(max_examples=300, deadline=None)
@given(STEPS, st.sampled_from([1, 2, 7, 512]))
def test_the_least_served_waiting_owner_goes_next(steps, half_life):
    """Checked against a model that keeps every owner's exactly decayed service:
    each pop counts 2**(-age / half_life), age counted in pops since."""
    queue: FairQueue[tuple[str, int]] = FairQueue(half_life=half_life)
    growth = 2.0 ** (1.0 / half_life)
    pushed, popped, waiting = collections.Counter(), collections.Counter(), collections.Counter()
    served: dict[str, float] = collections.defaultdict(float)  # in units of the first pop
    pops = 0

    def pop() -> None:
        nonlocal pops
        owner, number = queue.pop()
        assert number == popped[owner], "an owner's items came out of order"
        now = growth**pops  # what one pop adds now
        least = min(served[o] for o, count in waiting.items() if count)
        # Float rounding may order near-ties either way; anything more is a wrong choice.
        assert served[owner] <= least + now * 2**-20, f"served {owner!r} while a less-served owner waited"
        served[owner] += now
        popped[owner] += 1
        waiting[owner] -= 1
        pops += 1

    for step in steps:
        if step is None:
            if len(queue):
                pop()
            else:
                with pytest.raises(IndexError):
                    queue.pop()
        else:
            queue.push(step, (step, pushed[step]))
            pushed[step] += 1
            waiting[step] += 1
        assert len(queue) == sum(waiting.values())
    while len(queue):
        pop()
    assert popped == pushed


def test_a_deep_line_does_not_delay_a_newcomer():
    queue: FairQueue[str] = FairQueue()
    for i in range(100):
        queue.push("hog", f"hog{i}")
    queue.pop()  # hog0: the hog has now been served
    queue.push("calm", "calm0")
    assert queue.pop() == "calm0"
    assert [queue.pop() for _ in range(99)] == [f"hog{i}" for i in range(1, 100)]
    assert len(queue) == 0


def test_backlogged_owners_take_turns():
    queue: FairQueue[str] = FairQueue()
    for owner in "ab":
        for i in range(5):
            queue.push(owner, f"{owner}{i}")
    assert [queue.pop() for _ in range(10)] == ["a0", "b0", "a1", "b1", "a2", "b2", "a3", "b3", "a4", "b4"]


@pytest.mark.parametrize("half_life", [8, 512])
def test_a_backlogged_owner_gets_its_share_among_steady_callers(half_life):
    """Twenty callers with one item each, pushing the next as soon as one is taken (a teammate
    renewing), and one owner with a backlog (a flood): the flood is served, neither more nor
    much less than each of the others."""
    queue: FairQueue[str] = FairQueue(half_life=half_life)
    steady = [f"mate{i}" for i in range(20)]
    for owner in steady:
        queue.push(owner, owner)
    for _ in range(10_000):
        queue.push("flood", "flood")
    taken = collections.Counter()
    longest_wait, since_flood = 0, 0
    for _ in range(21_000):
        owner = queue.pop()
        taken[owner] += 1
        since_flood = 0 if owner == "flood" else since_flood + 1
        longest_wait = max(longest_wait, since_flood)
        if owner != "flood":
            queue.push(owner, owner)
    fair = 21_000 / 21
    assert all(0.9 * fair <= taken[owner] <= 1.1 * fair for owner in [*steady, "flood"]), taken
    assert longest_wait <= 21, "the flood waited longer than one turn of everyone else"


def test_owners_gone_quiet_are_forgotten():
    queue: FairQueue[int] = FairQueue(half_life=4)
    for i in range(20_000):
        queue.push(f"once{i}", i)
        assert queue.pop() == i
    assert len(queue._served) < 1_000  # noqa: SLF001 (memory follows the owners seen lately)


def test_half_life_must_be_positive():
    with pytest.raises(ValueError, match="half_life"):
        FairQueue(half_life=0)
