"""Keeps one teammate from taking more than its share of a busy daemon.

A lane bounds how many calls one caller runs at once, not how often it sends
them. A caller that always has its next call waiting starts it the moment the
last one ends, while a teammate making one call at a time loses a client round
trip between calls; on a busy daemon every call the first one runs is time
the others wait. So the lanes also compare what teammates cost the daemon.

Each teammate's *rate* is the daemon time it asked for lately, halving every
`HALF_LIFE_S`: `call_cost_ms` for every unary call it sent (started, waiting
or refused: what it asks for, not what it got), plus the writer's time for
each of its jobs, whatever submitted them (a call, an Idle stream), as the
writer reports it after each batch (costs.py). A message to `*` thus counts
for what it costs, many renewals' worth, not as one call. While the daemon is
busy with others (another caller sent a call within the last
`busy_window_ms`), a teammate whose rate is above `slack` times the mean rate
of the teammates active lately (a unary call within `ACTIVE_S`) waits before
its next call starts, until the others' calls raise the mean or its own rate
decays, and for no longer than `max_hold_ms` times how many times its share
it is (at most `longest_hold_ms`). Once the others go quiet for that long,
nobody is held back.

"Busy" is about calls arriving, not about calls running: a teammate's call
spends most of its time in transport, so even a saturated daemon often has no
call of the others inside a handler at the instant a flooder's call ends.

The Lead is never held back and not counted in the mean: its calls are the
team's own work. They do make the daemon busy.
"""

from __future__ import annotations

import collections
import dataclasses
import math
import time
from collections.abc import Callable

from .costs import CostLedger

# A rate forgets half of what it counted in this long: long enough that one
# burst does not decide, short enough to follow a caller that starts flooding.
HALF_LIFE_S = 0.5
_DECAY_PER_S = math.log(2) / HALF_LIFE_S
# A teammate that sent no call for this long no longer counts as active.
ACTIVE_S = 1.0


@dataclasses.dataclass(frozen=True)
class PacingConfig:
    # How far above the mean rate a teammate may go while the daemon is busy;
    # 0 turns pacing off. Above 1, so that teammates of equal load, whose rates
    # wander around the mean, are not held back.
    slack: float = 1.25
    # The daemon counts as busy with others for this long after another
    # caller's call arrives. Long enough to bridge the gaps between a busy
    # team's calls (a client round trip, a collector pause): at 20 ms a
    # flooder still found enough gaps to keep most of its rate.
    busy_window_ms: float = 100.0
    # A call is held back at most this long times how many times its share
    # its teammate's rate is, and never longer than `longest_hold_ms`. Pacing
    # may slow an honest teammate whose work simply costs more than its peers'
    # (a little above its share, it waits about this long at most; a renewal
    # must not wait until its lease ends), while a flooder of expensive calls,
    # far above its share, waits until it is back near it: with a fixed cap,
    # each free place of its lane started one call per 50 ms whatever the
    # call cost.
    max_hold_ms: float = 50.0
    longest_hold_ms: float = 1000.0
    # What a unary call costs the daemon besides its writer jobs (receiving it,
    # the handler, the reply), counted as it arrives. Ten teammates renewing
    # leases took 1.1-1.2 ms of daemon CPU per call, of which the writer's job
    # ran 0.3-0.4 ms (see server/DESIGN.md).
    call_cost_ms: float = 0.75


class _Teammate:
    __slots__ = ("rate", "stamp", "last_call", "excess")

    def __init__(self, now: float) -> None:
        self.rate = 0.0  # seconds of daemon time asked for, decayed, as of `stamp`
        self.stamp = now
        self.last_call = now
        self.excess = 1.0  # how many times its share the rate was when `may_start` last said no


class Pacer:
    """Event-loop only, like CallLanes. `arrived` is told of every unary call as it arrives;
    `costs` holds the writer's report of what each owner's jobs took.

    Only teammates active by their unary calls are compared, and only they are
    charged their jobs' writer time: a teammate whose work all goes through one
    stream (Session) has no call to hold back, and charged its jobs alone it
    would look cheaper than a teammate doing the same work in unary calls.
    """

    def __init__(
        self,
        config: PacingConfig = PacingConfig(),
        clock: Callable[[], float] = time.monotonic,
        costs: CostLedger | None = None,
    ) -> None:
        self._config = config
        self._clock = clock
        self._costs = costs
        self._call_cost_s = config.call_cost_ms / 1000
        # Active teammates, least recently calling first (so pruning looks only at the front).
        self._teammates: collections.OrderedDict[str, _Teammate] = collections.OrderedDict()
        self._total_rate = 0.0  # of the active teammates, as of `_total_stamp`
        self._total_stamp = 0.0
        self._lead_last_call = -math.inf

    @property
    def busy_window_s(self) -> float:
        return self._config.busy_window_ms / 1000

    @property
    def max_hold_s(self) -> float:
        return self._config.max_hold_ms / 1000

    def arrived(self, identity: str, *, counted: bool) -> None:
        now = self._clock()
        if not counted:
            self._lead_last_call = now
            return
        self._forget_inactive(now)  # one back after a quiet spell starts afresh
        self._take_costs(now)
        teammate = self._teammates.get(identity)
        if teammate is None:
            teammate = self._teammates[identity] = _Teammate(now)
        else:
            self._teammates.move_to_end(identity)
            teammate.last_call = now
        self._charge(teammate, self._call_cost_s, now)

    def _take_costs(self, now: float) -> None:
        """Charges active teammates what the writer reported since the last look
        (usually one batch or none); the costs of any other owner are dropped."""
        if self._costs is None:
            return
        for owner, seconds in self._costs.take().items():
            teammate = self._teammates.get(owner)
            if teammate is not None:
                self._charge(teammate, seconds, now)

    def _charge(self, teammate: _Teammate, seconds: float, now: float) -> None:
        teammate.rate = _decayed(teammate.rate, teammate.stamp, now) + seconds
        teammate.stamp = now
        self._total_rate = _decayed(self._total_rate, self._total_stamp, now) + seconds
        self._total_stamp = now

    def may_start(self, identity: str) -> bool:
        """False while `identity` is above its share of a busy daemon."""
        if self._config.slack <= 0:
            return True
        teammate = self._teammates.get(identity)
        now = self._clock()
        if (
            teammate is None
            or teammate.last_call < now - ACTIVE_S  # quiet lately itself
            or self._others_last_call(identity) < now - self.busy_window_s
        ):
            return True
        self._forget_inactive(now)
        active = len(self._teammates)
        if active < 2:
            return True
        self._take_costs(now)
        share = self._config.slack * _decayed(self._total_rate, self._total_stamp, now) / active
        rate = _decayed(teammate.rate, teammate.stamp, now)
        if rate <= share:
            return True
        teammate.excess = rate / share if share > 0 else math.inf
        return False

    def hold_limit_s(self, identity: str) -> float:
        """How long a call of `identity` may be held back, once `may_start` said no: `max_hold_ms`
        times how many times its share its rate was then, at most `longest_hold_ms`."""
        teammate = self._teammates.get(identity)
        excess = teammate.excess if teammate is not None else 1.0
        return min(self._config.max_hold_ms * max(1.0, excess), self._config.longest_hold_ms) / 1000

    def _others_last_call(self, identity: str) -> float:
        latest = self._lead_last_call
        for name in reversed(self._teammates):  # the most recent callers are at the end
            if name != identity:
                return max(latest, self._teammates[name].last_call)
        return latest

    def _forget_inactive(self, now: float) -> None:
        horizon = now - ACTIVE_S
        while self._teammates:
            identity, oldest = next(iter(self._teammates.items()))
            if oldest.last_call >= horizon:
                return
            del self._teammates[identity]
            # The total stays the sum over active teammates: take this one's part out.
            self._total_rate = max(
                0.0, _decayed(self._total_rate, self._total_stamp, now) - _decayed(oldest.rate, oldest.stamp, now)
            )
            self._total_stamp = now

    def active_teammates(self) -> int:
        return len(self._teammates)


def _decayed(value: float, stamp: float, now: float) -> float:
    return value * math.exp((stamp - now) * _DECAY_PER_S)
