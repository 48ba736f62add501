"""What each caller's writer jobs cost, handed from the writer thread to the event loop.

Calls differ in cost by far more than one: a message to `*` writes a row per
teammate and wakes them all, a lease renewal touches one row. Counting calls
lets a caller of expensive ones take several times its share of the daemon
while its count looks like everyone else's. The writer knows what each job
cost (the time it ran, owner by owner), so it reports that here once per
batch, and pacing (pacing.py) takes the sums on the event loop and charges
each identity's rate with them.

Jobs of every kind are charged, whatever submitted them: a unary call, an
Idle open or an op of a stream, since each job carries its owner
(`writer.job_owner`). Between two takes the ledger holds one sum per owner
that had a job run, so its size follows the identities at work.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable


class CostLedger:
    """Thread-safe: the writer thread `add`s, the event loop `take`s."""

    __slots__ = ("_lock", "_spent")

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._spent: dict[str, float] = {}  # owner -> seconds of writer time since the last take

    def add(self, spent: Iterable[tuple[str, float]]) -> None:
        """Adds one batch's (owner, seconds) pairs, one per job."""
        with self._lock:
            for owner, seconds in spent:
                self._spent[owner] = self._spent.get(owner, 0.0) + seconds

    def take(self) -> dict[str, float]:
        """What was added since the last take, by owner; {} when nothing was."""
        # Looked at without the lock first: pacing asks on every call, and most of
        # the time there is nothing new. A sum added just after this look is not
        # lost; the next take finds it.
        if not self._spent:
            return {}
        with self._lock:
            spent, self._spent = self._spent, {}
        return spent
