"""A queue that serves first the owner it has served least lately.

The writer's jobs come from many callers. Served first-come, one caller with
many jobs in flight fills each group commit, and everyone else's job waits for
all of them. Here each owner keeps its own first-come line, and the next item
always comes from the waiting owner with the least *attained service*: the
cost of its items taken lately, each counting less the longer ago it was
taken (halving every `half_life` pops). Jobs differ in cost by far more than
one: a message to `*` writes a row per teammate, a renewal one. Counting
cost, a caller of expensive jobs is served as much as it weighs on the
writer, not as often as a renewing teammate. An item's cost is known only
once it has run, so a pop charges the owner's usual cost: a running mean of
what its items cost, as the writer reports with `observe` (for an owner not
seen yet, the mean over all owners; before any cost is known, 1 per item).
So:

- a caller with an occasional job (a teammate renewing its lease) goes ahead
  of one that keeps a backlog (a flood), whose attained service is high;
- owners that all keep a backlog share the writer's time equally (their
  turns in inverse proportion to their items' cost), as in round robin;
- a backlogged owner is never starved: while it waits its attained service
  decays and everyone else's grows, so its turn comes within a few half-lives.

Attained service is kept in growing units instead of decaying every value:
each pop adds `increment` times the item's cost, and `increment` grows by
2**(1/half_life) per pop, which orders owners exactly as decayed sums would.
Values are rescaled before they grow large, and owners idle long enough to
count as new are forgotten then (with their usual cost), so memory follows
the owners seen lately.
"""

from __future__ import annotations

import collections
import heapq
from typing import Generic, TypeVar

T = TypeVar("T")

_RESCALE_AT = 2.0**40  # rescale well before floats lose the precision that orders owners
_FORGET_BELOW = 2.0**-30  # attained service this small, relative to one pop, is no service
# How far one observed cost moves an owner's usual cost: a few items follow a change
# of what the owner sends, one odd item (a collector pause within it) does not decide.
_COST_WEIGHT = 0.25


class FairQueue(Generic[T]):
    """Least attained service first; first-come within an owner. Not thread-safe."""

    __slots__ = (
        "_lines",
        "_served",
        "_cost",
        "_mean_cost",
        "_observed",
        "_turns",
        "_size",
        "_increment",
        "_growth",
        "_arrivals",
    )

    def __init__(self, half_life: int = 512) -> None:
        if half_life < 1:
            raise ValueError("half_life must be at least one pop")
        self._lines: dict[str, collections.deque[T]] = {}
        self._served: dict[str, float] = {}
        self._cost: dict[str, float] = {}  # owner -> its usual cost per item
        self._mean_cost = 1.0  # over all owners' items, for an owner not observed yet
        self._observed = False  # whether any cost above 0 was observed yet
        # One entry per owner with a waiting item: (attained service, arrival, owner).
        self._turns: list[tuple[float, int, str]] = []
        self._size = 0
        self._increment = 1.0
        self._growth = 2.0 ** (1.0 / half_life)
        self._arrivals = 0  # breaks ties first come, first served

    def __len__(self) -> int:
        return self._size

    def push(self, owner: str, item: T) -> None:
        line = self._lines.get(owner)
        if line is None:
            line = self._lines[owner] = collections.deque()
            self._enter(owner)
        line.append(item)
        self._size += 1

    def pop(self) -> T:
        """The oldest item of the least-served waiting owner; IndexError when empty."""
        if not self._turns:
            raise IndexError("pop from an empty FairQueue")
        _, _, owner = heapq.heappop(self._turns)
        line = self._lines[owner]
        item = line.popleft()
        self._size -= 1
        cost = self._cost.get(owner, self._mean_cost)
        self._served[owner] = self._served.get(owner, 0.0) + self._increment * cost
        self._increment *= self._growth
        if line:
            self._enter(owner)
        else:
            del self._lines[owner]
        if self._increment >= _RESCALE_AT:
            self._rescale()
        return item

    def observe(self, owner: str, cost: float) -> None:
        """What one of `owner`'s items cost once it ran (any unit, the same for every item)."""
        cost = max(cost, 0.0)
        if not self._observed and cost > 0:
            self._take_scale(cost)
        usual = self._cost.get(owner)
        self._cost[owner] = cost if usual is None else usual + (cost - usual) * _COST_WEIGHT
        self._mean_cost += (cost - self._mean_cost) * _COST_WEIGHT / 8  # many owners make the mean

    def _take_scale(self, cost: float) -> None:
        """Until the first cost is known every pop counted 1: from now on those count as items of
        that first cost, so that what was served before and after compares in one unit."""
        self._observed = True
        self._mean_cost = cost
        self._served = {owner: served * cost for owner, served in self._served.items()}
        self._turns = [(served * cost, arrival, owner) for served, arrival, owner in self._turns]

    def next_owner(self) -> str | None:
        """Whose item `pop` would return; None when empty."""
        return self._turns[0][2] if self._turns else None

    def _enter(self, owner: str) -> None:
        self._arrivals += 1
        heapq.heappush(self._turns, (self._served.get(owner, 0.0), self._arrivals, owner))

    def _rescale(self) -> None:
        scale = self._increment
        self._increment = 1.0
        self._served = {
            owner: served / scale
            for owner, served in self._served.items()
            if owner in self._lines or served / scale >= _FORGET_BELOW * self._mean_cost
        }
        self._cost = {owner: cost for owner, cost in self._cost.items() if owner in self._served}
        # Dividing every key by one positive number keeps the heap ordered.
        self._turns = [(served / scale, arrival, owner) for served, arrival, owner in self._turns]
