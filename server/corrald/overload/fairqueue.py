"""A queue that serves first the owner it has served least lately.

The writer's jobs come from many callers. Served first-come, one caller with
many jobs in flight fills each group commit, and everyone else's job waits for
all of them. Here each owner keeps its own first-come line, and the next item
always comes from the waiting owner with the least *attained service*: the
number of its items taken lately, each counting less the longer ago it was
taken (halving every `half_life` pops). So:

- a caller with an occasional job (a teammate renewing its lease) goes ahead
  of one that keeps a backlog (a flood), whose attained service is high;
- owners that all keep a backlog share the queue equally, as in round robin;
- a backlogged owner is never starved: while it waits its attained service
  decays and everyone else's grows, so its turn comes within a few half-lives.

Attained service is kept in growing units instead of decaying every value:
each pop adds `increment`, and `increment` grows by 2**(1/half_life) per pop,
which orders owners exactly as decayed counts would. Values are rescaled
before they grow large, and owners idle long enough to count as new are
forgotten then, so memory follows the owners seen lately.
"""

from __future__ import annotations

import collections
import heapq
from typing import Generic, TypeVar

T = TypeVar("T")

_RESCALE_AT = 2.0**40  # rescale well before floats lose the precision that orders owners
_FORGET_BELOW = 2.0**-30  # attained service this small, relative to one pop, is no service


class FairQueue(Generic[T]):
    """Least attained service first; first-come within an owner. Not thread-safe."""

    __slots__ = ("_lines", "_served", "_turns", "_size", "_increment", "_growth", "_arrivals")

    def __init__(self, half_life: int = 512) -> None:
        if half_life < 1:
            raise ValueError("half_life must be at least one pop")
        self._lines: dict[str, collections.deque[T]] = {}
        self._served: dict[str, float] = {}
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
        self._served[owner] = self._served.get(owner, 0.0) + self._increment
        self._increment *= self._growth
        if line:
            self._enter(owner)
        else:
            del self._lines[owner]
        if self._increment >= _RESCALE_AT:
            self._rescale()
        return item

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
            if owner in self._lines or served / scale >= _FORGET_BELOW
        }
        # Dividing every key by one positive number keeps the heap ordered.
        self._turns = [(served / scale, arrival, owner) for served, arrival, owner in self._turns]
