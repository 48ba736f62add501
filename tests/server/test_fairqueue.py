"""The writer's queue (fairqueue.py): least attained service first, first-come within an owner,
equal shares among backlogged owners, service counted by cost, no starvation, bounded memory."""

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


def _serve(queue: FairQueue[str], costs: dict[str, float], pops: int, steady: list[str]) -> collections.Counter:
    """Pops `pops` items, telling the queue what each cost (`costs` by owner) as the writer does
    once a job has run; the `steady` owners push their next item as soon as one is taken."""
    taken: collections.Counter = collections.Counter()
    for _ in range(pops):
        owner = queue.pop()
        taken[owner] += 1
        queue.observe(owner, costs[owner])
        if owner in steady:
            queue.push(owner, owner)
    return taken


def test_backlogged_owners_share_the_cost_not_the_count():
    """Two owners that always have items waiting, one's costing four times the other's: the cheap
    one has four items taken for each of the expensive one's, so both get equal writer time."""
    queue: FairQueue[str] = FairQueue()
    for _ in range(10_000):
        queue.push("cheap", "cheap")
        queue.push("dear", "dear")
    taken = _serve(queue, {"cheap": 0.0005, "dear": 0.002}, 10_000, steady=[])
    assert taken["cheap"] == pytest.approx(4 * taken["dear"], rel=0.05), taken


def test_a_flood_of_expensive_items_gets_its_share_of_cost_beside_steady_callers():
    """Twenty callers with one cheap item each, pushing the next as soon as one is taken (teammates
    renewing), and one owner with a backlog of items ten times as expensive (a flood of messages to
    every teammate): the flood gets as much of the writer's time as each of the others, so a
    tenth as many turns; counted by items, it would have had as many turns as each of them."""
    queue: FairQueue[str] = FairQueue()
    steady = [f"mate{i}" for i in range(20)]
    for owner in steady:
        queue.push(owner, owner)
    for _ in range(10_000):
        queue.push("flood", "flood")
    costs = {**dict.fromkeys(steady, 0.0003), "flood": 0.003}
    _serve(queue, costs, 2_000, steady)  # until each owner's usual cost is learnt
    taken = _serve(queue, costs, 20_100, steady)
    per_mate = sum(taken[owner] for owner in steady) / 20
    assert all(0.9 * per_mate <= taken[owner] <= 1.1 * per_mate for owner in steady), taken
    # Its writer time (each turn worth ten) within 15% of each mate's; turns come a whole item at once.
    assert 0.85 * per_mate <= 10 * taken["flood"] <= 1.15 * per_mate, taken


def test_an_owner_not_seen_yet_is_charged_the_mean_cost():
    """A newcomer's first item counts as much as the others' usual item: neither free nor a whole
    unit; and what was served before the first cost was known is counted in that cost."""
    queue: FairQueue[str] = FairQueue()
    queue.push("early", "early")
    queue.pop()  # charged one item: no cost is known yet
    for owner in ("a", "b"):
        queue.push(owner, owner)
        queue.pop()
        queue.observe(owner, 0.001)
    queue.push("new", "new")
    queue.pop()
    served = queue._served  # noqa: SLF001
    assert served["new"] == pytest.approx(served["a"], rel=0.01)
    assert served["early"] == pytest.approx(served["a"], rel=0.01)


def test_owners_gone_quiet_are_forgotten():
    queue: FairQueue[int] = FairQueue(half_life=4)
    for i in range(20_000):
        queue.push(f"once{i}", i)
        assert queue.pop() == i
        queue.observe(f"once{i}", 0.001)
    # Memory follows the owners seen lately, their usual costs included.
    assert len(queue._served) < 1_000  # noqa: SLF001
    assert len(queue._cost) < 1_000  # noqa: SLF001


def test_half_life_must_be_positive():
    with pytest.raises(ValueError, match="half_life"):
        FairQueue(half_life=0)
