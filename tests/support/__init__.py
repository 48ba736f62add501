"""What the test suites and the bench share: daemons started through the SDK's launcher,
waiting with a deadline, percentiles, fake clocks and SDK teammates in threads.

Import from here (`from tests.support import wait_until`); pytest puts the
repository root on `sys.path` (`pythonpath` in pyproject.toml) and `python -m
bench` runs from it.
"""

from tests.support.clocks import SecondsClock, SteppingHost
from tests.support.daemons import READY_TIMEOUT_S, STOP_TIMEOUT_S, Daemon, start_refused
from tests.support.stats import percentile
from tests.support.teammates import FAST_POLL, TeammateThread, task_reached, watch_until
from tests.support.waiting import wait_until, wait_until_async

__all__ = [
    "FAST_POLL",
    "READY_TIMEOUT_S",
    "STOP_TIMEOUT_S",
    "Daemon",
    "SecondsClock",
    "SteppingHost",
    "TeammateThread",
    "percentile",
    "start_refused",
    "task_reached",
    "wait_until",
    "wait_until_async",
    "watch_until",
]
