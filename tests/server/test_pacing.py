"""Pacing (overload/pacing.py): a teammate far above the team's mean rate of daemon time waits while
the daemon is busy with others; its writer jobs count for what they cost (overload/costs.py);
nobody is held back alone or beside a quiet team; the Lead is never held."""

from __future__ import annotations

import heapq
import math
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from corrald.overload.costs import CostLedger
from corrald.overload.pacing import ACTIVE_S, HALF_LIFE_S, Pacer, PacingConfig
from tests.support.boardkit import SecondsClock

pytestmark = pytest.mark.timeout(60)

CONFIG = PacingConfig(slack=1.25, busy_window_ms=100)


def _run(
    pacer: Pacer,
    clock: SecondsClock,
    steady: dict[str, float],
    flooder_every_s: float | None,
    seconds: float,
    job_s: dict[str, float] | None = None,
    costs: CostLedger | None = None,
) -> dict[str, tuple[int, int]]:
    """Steady teammates send a call every `1/rate` s; a flooder always has one call waiting,
    looked at every `flooder_every_s`, and sends the next the moment one starts. With `costs`,
    each call started is a writer job of `job_s[name]` seconds, reported as the writer does.
    Returns {name: (calls started, times a waiting call was held back)}."""
    counts = {name: [0, 0] for name in [*steady, "flooder"]}
    events = [(clock.now + i / (len(steady) * rate), name) for i, (name, rate) in enumerate(steady.items())]
    if flooder_every_s is not None:
        events.append((clock.now, "flooder"))
    heapq.heapify(events)
    flooder_waiting = False
    end = clock.now + seconds
    while events and events[0][0] < end:
        at, name = heapq.heappop(events)
        clock.now = at
        if name != "flooder" or not flooder_waiting:
            pacer.arrived(name, counted=True)
        if pacer.may_start(name):
            counts[name][0] += 1
            flooder_waiting = False if name == "flooder" else flooder_waiting
            if costs is not None and job_s is not None:
                costs.add([(name, job_s[name])])
        else:
            counts[name][1] += 1
            flooder_waiting = flooder_waiting or name == "flooder"
        heapq.heappush(events, (at + (flooder_every_s if name == "flooder" else 1 / steady[name]), name))
    return {name: (started, held) for name, (started, held) in counts.items()}


def test_a_flooder_beside_a_busy_team_is_held_near_the_mean_and_the_team_never_waits():
    clock = SecondsClock()
    pacer = Pacer(CONFIG, clock=clock)
    team = {f"t{i}": 120.0 for i in range(10)}
    _run(pacer, clock, team, flooder_every_s=0.0005, seconds=1)  # past the first calls, when rates are few
    counts = _run(pacer, clock, team, flooder_every_s=0.0005, seconds=10)
    assert all(held == 0 for name, (_, held) in counts.items() if name != "flooder"), counts
    team_rate = sum(started for name, (started, _) in counts.items() if name != "flooder") / 10 / 10
    flooder_rate = counts["flooder"][0] / 10
    # The flooder's rate converges to slack times the mean, itself included.
    mean = (team_rate * 10 + flooder_rate) / 11
    assert flooder_rate == pytest.approx(CONFIG.slack * mean, rel=0.1), (flooder_rate, team_rate)
    assert counts["flooder"][1] > counts["flooder"][0]  # its waiting call was held back again and again


CALL_S = CONFIG.call_cost_ms / 1000
TEAM = {f"t{i}": 100.0 for i in range(10)}
# A renewal's writer job against a message to every teammate's (as measured, see server/DESIGN.md).
RENEW_S, BROADCAST_S = 0.0003, 0.003


def test_a_teammate_of_expensive_jobs_is_held_though_it_calls_no_more_often():
    """Eleven teammates each calling 100 times a second; one's calls each cost the writer ten times
    what the others' do. Counting calls it is never held; charged its jobs' writer time it is."""
    for charged in (False, True):
        clock = SecondsClock()
        costs = CostLedger()
        pacer = Pacer(CONFIG, clock=clock, costs=costs if charged else None)
        job_s = {**dict.fromkeys(TEAM, RENEW_S), "heavy": BROADCAST_S}
        _run(pacer, clock, {**TEAM, "heavy": 100.0}, None, 1, job_s=job_s, costs=costs)  # past the first calls
        counts = _run(pacer, clock, {**TEAM, "heavy": 100.0}, None, 5, job_s=job_s, costs=costs)
        assert all(held == 0 for name, (_, held) in counts.items() if name != "heavy"), counts
        assert (counts["heavy"][1] > 0) == charged, counts


def test_a_flooder_of_expensive_jobs_is_held_near_the_mean_cost():
    """The flooder's rate of daemon time (its calls and their jobs) converges to slack times the
    mean, itself included: a tenth of the calls it would start if only its calls were counted."""
    clock = SecondsClock()
    costs = CostLedger()
    pacer = Pacer(CONFIG, clock=clock, costs=costs)
    job_s = {**dict.fromkeys(TEAM, RENEW_S), "flooder": BROADCAST_S}
    _run(pacer, clock, TEAM, 0.0005, 1, job_s=job_s, costs=costs)
    counts = _run(pacer, clock, TEAM, 0.0005, 10, job_s=job_s, costs=costs)
    assert all(held == 0 for name, (_, held) in counts.items() if name != "flooder"), counts
    mate_cost = (
        sum(started for name, (started, _) in counts.items() if name != "flooder") / 10 / 10 * (CALL_S + RENEW_S)
    )
    flooder_cost = counts["flooder"][0] / 10 * (CALL_S + BROADCAST_S)
    mean = (mate_cost * 10 + flooder_cost) / 11
    assert flooder_cost == pytest.approx(CONFIG.slack * mean, rel=0.1), (flooder_cost, mate_cost)


def test_a_call_is_held_longer_the_further_above_its_share_its_teammate_is():
    """At its share a call may be held `max_hold_ms`; at k times its share k times that, and never
    longer than `longest_hold_ms`: a flooder of expensive calls cannot start one per 50 ms."""
    clock = SecondsClock()  # frozen: nothing decays
    costs = CostLedger()
    pacer = Pacer(PacingConfig(slack=1.25, max_hold_ms=200, longest_hold_ms=1000), clock=clock, costs=costs)
    for name in [*TEAM, "a"]:
        pacer.arrived(name, counted=True)  # one call each: everyone at the mean
    assert pacer.may_start("a")
    costs.add([("a", 9 * CALL_S)])  # "a" has now asked for ten calls' worth, the others one each
    assert not pacer.may_start("a")
    share = CONFIG.slack * 20 / 11  # in calls
    assert pacer.hold_limit_s("a") == pytest.approx(0.200 * 10 / share)
    costs.add([("a", 1.0)])  # a thousand calls' worth more: over eight times its share
    assert not pacer.may_start("a")
    assert pacer.hold_limit_s("a") == 1.0


def test_only_teammates_calling_lately_are_charged_their_jobs():
    """Jobs of the Lead, of the daemon itself ("") and of a teammate with no unary call lately (its
    work all on one stream) charge nobody and make nobody active; an active teammate's do."""
    clock = SecondsClock()
    costs = CostLedger()
    pacer = Pacer(CONFIG, clock=clock, costs=costs)
    pacer.arrived("lead", counted=False)
    pacer.arrived("a", counted=True)
    pacer.arrived("b", counted=True)
    costs.add([("lead", 1.0), ("", 1.0), ("streaming", 1.0)])
    assert pacer.may_start("a") and pacer.may_start("b")  # a and b asked for as much
    assert pacer.active_teammates() == 2
    costs.add([("a", 0.01)])  # thirteen calls' worth
    assert not pacer.may_start("a")
    assert pacer.may_start("b")


def test_the_ledger_hands_over_every_cost_added_from_other_threads():
    ledger = CostLedger()
    taken: dict[str, float] = {}
    adding = [threading.Thread(target=lambda: [ledger.add([("x", 1.0), ("y", 2.0)]) for _ in range(5_000)])]
    adding.append(threading.Thread(target=lambda: [ledger.add([("x", 1.0)]) for _ in range(5_000)]))
    for thread in adding:
        thread.start()
    while any(thread.is_alive() for thread in adding):
        for owner, seconds in ledger.take().items():
            taken[owner] = taken.get(owner, 0.0) + seconds
    for thread in adding:
        thread.join()
    for owner, seconds in ledger.take().items():
        taken[owner] = taken.get(owner, 0.0) + seconds
    assert taken == {"x": 10_000.0, "y": 10_000.0}
    assert ledger.take() == {}


def test_nobody_is_held_back_alone():
    clock = SecondsClock()
    pacer = Pacer(CONFIG, clock=clock)
    counts = _run(pacer, clock, {}, flooder_every_s=0.001, seconds=3)
    started, held = counts["flooder"]
    assert held == 0 and started >= 2999


def test_beside_a_quiet_team_a_busy_teammate_is_held_only_just_after_the_others_call():
    clock = SecondsClock()
    pacer = Pacer(CONFIG, clock=clock)
    counts = _run(pacer, clock, {"quiet": 2.0}, flooder_every_s=0.001, seconds=10)
    started, held = counts["flooder"]
    # Busy with the quiet one for 100 ms after each of its 2 calls a second: at most a fifth of the time.
    assert held <= 0.2 * (started + held), counts
    assert counts["quiet"][1] == 0


def test_the_lead_is_never_held_nor_counted_but_keeps_the_daemon_busy():
    clock = SecondsClock()
    pacer = Pacer(CONFIG, clock=clock)
    for _ in range(50):
        assert pacer.may_start("lead")  # the Lead's lane never asks; the answer would be yes anyway
        pacer.arrived("lead", counted=False)
        clock.now += 0.001
    assert pacer.active_teammates() == 0
    # Two teammates, one far above the other; the other's last call is long past.
    pacer.arrived("slow", counted=True)
    clock.now += 0.5
    for _ in range(30):
        pacer.arrived("fast", counted=True)
    assert pacer.may_start("fast")  # nobody else has called lately
    pacer.arrived("lead", counted=False)
    assert not pacer.may_start("fast")  # the Lead's call makes the daemon busy
    clock.now += CONFIG.busy_window_ms / 1000 + 0.001
    assert pacer.may_start("fast")


def test_teammates_that_go_quiet_are_forgotten_with_their_share():
    clock = SecondsClock()
    pacer = Pacer(CONFIG, clock=clock)
    _run(pacer, clock, {f"t{i}": 50.0 for i in range(5)}, flooder_every_s=None, seconds=2)
    assert pacer.active_teammates() == 5
    clock.now += ACTIVE_S + 0.01
    for _ in range(10):
        pacer.arrived("new", counted=True)
    for _ in range(4):
        pacer.arrived("other", counted=True)
    # Had the five's rates stayed in the total, the mean would be several times higher and
    # "new" would pass; without them it is above 1.25 times the mean of the two.
    assert not pacer.may_start("new")
    assert pacer.may_start("other")
    assert pacer.active_teammates() == 2


def test_slack_zero_turns_pacing_off():
    clock = SecondsClock()
    pacer = Pacer(PacingConfig(slack=0), clock=clock)
    counts = _run(pacer, clock, {f"t{i}": 100.0 for i in range(5)}, flooder_every_s=0.001, seconds=2)
    assert counts["flooder"][1] == 0


# A schedule: (who, seconds since the previous step); "lead" sends uncounted calls.
SCHEDULE = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", "d", "lead"]), st.sampled_from([0.0, 0.0001, 0.003, 0.05, 0.2, 0.7, 1.5])
    ),
    max_size=120,
)


@settings(max_examples=300, deadline=None)
@given(SCHEDULE)
def test_may_start_matches_a_model_recomputed_from_the_whole_history(schedule):
    """The model keeps every call and recomputes, for each question, each teammate's exactly
    decayed rate, who is active, the mean and whether the others were busy."""
    clock = SecondsClock()
    pacer = Pacer(CONFIG, clock=clock)
    calls: list[tuple[float, str]] = []
    for who, pause in schedule:
        clock.now += pause
        now = clock.now
        for asker in ("a", "b", "c", "d"):
            expected = _model_may_start(calls, asker, now)
            if expected is not None:
                assert pacer.may_start(asker) == expected, (asker, calls, now)
        pacer.arrived(who, counted=who != "lead")
        calls.append((now, who))


def _model_may_start(calls: list[tuple[float, str]], asker: str, now: float) -> bool | None:
    """None where float rounding could decide either way."""
    teammates = [(t, who) for t, who in calls if who != "lead"]
    if not any(who == asker for _, who in teammates):
        return True
    others = [t for t, who in calls if who != asker]
    if not others or max(others) < now - CONFIG.busy_window_ms / 1000:
        return True
    last = {}
    for t, who in teammates:
        last[who] = t
    if last[asker] < now - ACTIVE_S:
        return True
    active = {who for who, t in last.items() if t >= now - ACTIVE_S}
    if len(active) < 2:
        return True

    def rate(name: str) -> float:
        """Counts the calls since the teammate's last quiet spell (one longer than ACTIVE_S)."""
        total, previous = 0.0, None
        for t, who in teammates:
            if who == name:
                if previous is not None and previous < t - ACTIVE_S:
                    total = 0.0
                total += math.exp((t - now) * math.log(2) / HALF_LIFE_S)
                previous = t
        return total

    # Rates in calls here; the pacer's are the same times `call_cost_ms`, which does not change the answer.
    mine, limit = rate(asker), CONFIG.slack * sum(rate(name) for name in active) / len(active)
    if abs(mine - limit) <= 1e-6 * max(1.0, limit):
        return None
    return mine <= limit
