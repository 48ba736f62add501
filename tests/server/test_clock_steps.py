"""The daemon clock against wall-clock steps: leases are measured on the host's
monotonic clock while the daemon runs, and one time base holds across restarts
even when the wall clock went back between them.
"""

from __future__ import annotations

import logging

import pytest

from corrald import errors
from corrald.clock import FakeClock, SystemClock
from corrald.model import TaskState
from tests.support import SteppingHost
from tests.support.boardkit import SyncBoard, spec

# SQLite's own machinery: its writer connection, its clock across restarts of one file.
pytestmark = pytest.mark.timeout(30)

LEASE = 10_000
HOUR = 3_600_000

PENDING, IN_PROGRESS = TaskState.PENDING, TaskState.IN_PROGRESS


def daemon_clock(host: SteppingHost) -> SystemClock:
    """The clock a daemon starting on `host` now would make."""
    return SystemClock(wall=host.wall, monotonic=host.monotonic)


@pytest.fixture
def host() -> SteppingHost:
    return SteppingHost()


@pytest.fixture
def stepped(db_path, host):
    """A board on a daemon clock over `host`, with teammates w1 and w2."""
    sync = SyncBoard(db_path, daemon_clock(host)).open()
    sync.add("w1")
    sync.add("w2")
    yield sync
    sync.dispose()


def restart_on(board: SyncBoard, host: SteppingHost) -> None:
    """A new daemon process: a new clock reading the host's wall clock as it now is."""
    board.close()
    board.clock = daemon_clock(host)
    board.open()


def clock_ms(board: SyncBoard) -> int:
    return board.scalar("SELECT value FROM meta WHERE key = 'clock_ms'")


# ---------------------------------------------------------------- the clock itself


def test_system_clock_starts_at_the_wall_clock_and_advances_with_the_monotonic_one(host):
    clock = daemon_clock(host)
    start = clock.now_ms()
    assert start == host.wall_ns // 1_000_000
    host.elapse(1_500)
    assert clock.now_ms() == start + 1_500


@pytest.mark.parametrize("step_ms", [-HOUR, HOUR])
def test_a_wall_clock_step_does_not_move_the_system_clock(host, step_ms):
    clock = daemon_clock(host)
    start = clock.now_ms()
    host.step_wall(step_ms)
    assert clock.now_ms() == start
    host.elapse(250)
    assert clock.now_ms() == start + 250


def test_not_before_only_moves_the_system_clock_forward(host):
    clock = daemon_clock(host)
    start = clock.now_ms()
    assert clock.not_before(start - HOUR) == 0
    assert clock.now_ms() == start
    assert clock.not_before(start + HOUR) == HOUR
    assert clock.now_ms() == start + HOUR
    host.elapse(7)
    assert clock.now_ms() == start + HOUR + 7


def test_not_before_only_moves_the_fake_clock_forward():
    clock = FakeClock(start_ms=1_000)
    assert clock.not_before(500) == 0 and clock.now_ms() == 1_000
    assert clock.not_before(4_000) == 3_000 and clock.now_ms() == 4_000


# ---------------------------------------------------------------- a running daemon


def test_a_forward_step_does_not_expire_a_lease_early(stepped, host):
    stepped.create(spec("a", lease_ms=LEASE))
    grant = stepped.claim("w1")
    host.step_wall(HOUR)
    host.elapse(LEASE - 1)  # 1 ms of the lease left, on the monotonic clock
    assert stepped.reap() == grant.lease_expire_ms
    assert stepped.claim("w2") is None
    assert stepped.state("a") is IN_PROGRESS
    end, _ = stepped.renew("w1", "a", grant.token)
    # Measured from the monotonic now: 10 s after the claim, not an hour later.
    assert end == grant.lease_expire_ms - 1 + LEASE
    assert stepped.task("a").lease_expire_ms == end


def test_a_backward_step_does_not_lengthen_a_lease(stepped, host):
    stepped.create(spec("a", lease_ms=LEASE))
    grant = stepped.claim("w1")
    host.step_wall(-HOUR)
    host.elapse(LEASE)  # the lease has run its whole length
    with pytest.raises(errors.LeaseExpired):
        stepped.renew("w1", "a", grant.token)
    assert stepped.reap() is None
    assert stepped.state("a") is PENDING
    assert stepped.rows("SELECT outcome, end_ms FROM claims") == [("expired", grant.lease_expire_ms)]


def test_renew_after_steps_both_ways_measures_from_the_monotonic_now(stepped, host):
    stepped.create(spec("a", lease_ms=LEASE))
    grant = stepped.claim("w1")
    claimed_at = grant.lease_expire_ms - LEASE
    host.step_wall(-HOUR)
    host.elapse(3_000)
    first, _ = stepped.renew("w1", "a", grant.token)
    host.step_wall(2 * HOUR)
    host.elapse(3_000)
    second, _ = stepped.renew("w1", "a", grant.token)
    assert (first, second) == (claimed_at + 3_000 + LEASE, claimed_at + 6_000 + LEASE)


# ---------------------------------------------------------------- restarts


def test_a_restart_after_the_wall_clock_went_back_keeps_reported_deaths(stepped, host, caplog):
    stepped.create(spec("a", lease_ms=LEASE), spec("b", lease_ms=3 * LEASE))
    ga, gb = stepped.claim("w1"), stepped.claim("w2")
    host.elapse(LEASE + 1_000)
    with pytest.raises(errors.LeaseExpired):  # reported dead: must stay dead
        stepped.renew("w1", "a", ga.token)
    last = clock_ms(stepped)
    host.step_wall(-HOUR)  # between the runs
    host.elapse(5_000)
    with caplog.at_level(logging.WARNING, logger="corrald.board"):
        restart_on(stepped, host)
    assert [r.getMessage() for r in caplog.records] == [
        "wall clock 3595.000 s behind this board's clock; carrying on from the board's"
    ]

    assert stepped.state("a") is PENDING
    assert stepped.rows("SELECT outcome FROM claims WHERE fence = ?", (ga.fence,)) == [("expired",)]
    with pytest.raises(errors.LeaseExpired):
        stepped.renew("w1", "a", ga.token)
    now = stepped.clock.now_ms()
    assert last <= now < last + HOUR  # carries on from the board's clock
    # "b" was alive when the previous daemon stopped: a whole new lease from now.
    assert stepped.task("b").lease_expire_ms == now + 3 * LEASE
    end, _ = stepped.renew("w2", "b", gb.token)
    assert end == now + 3 * LEASE


def test_two_restarts_behind_a_wall_clock_that_went_back_keep_one_time_base(stepped, host):
    stepped.create(spec("a", lease_ms=LEASE), spec("b", lease_ms=3 * LEASE))
    stepped.claim("w1")
    gb = stepped.claim("w2")
    host.elapse(1_000)
    host.step_wall(-HOUR)
    restart_on(stepped, host)

    # Second run, its wall clock still an hour behind the first run's.
    host.elapse(LEASE + 1_000)
    stepped.reap()  # "a"'s lease ended while this daemon ran
    assert stepped.state("a") is PENDING
    ga2 = stepped.claim("w1")
    host.elapse(LEASE)
    with pytest.raises(errors.LeaseExpired):
        stepped.renew("w1", "a", ga2.token)
    stepped.renew("w2", "b", gb.token)
    assert clock_ms(stepped) == stepped.clock.now_ms()  # the high-water mark moved with this run
    host.elapse(4 * LEASE)  # downtime: "b" runs out while nobody can renew it
    restart_on(stepped, host)

    now = stepped.clock.now_ms()
    assert stepped.state("a") is PENDING  # reported dead in the second run
    assert stepped.task("b").state is IN_PROGRESS
    assert stepped.task("b").lease_expire_ms == now + 3 * LEASE
    end, _ = stepped.renew("w2", "b", gb.token)
    assert end == now + 3 * LEASE
