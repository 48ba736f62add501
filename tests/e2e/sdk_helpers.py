"""Helpers shared by the SDK end-to-end tests (a uniquely named module, so
`import` cannot pick up another test directory's conftest)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import corral

# Short idle polls keep tests fast; 50 ms is the daemon's minimum.
FAST_POLL = 0.05


def eventually(predicate: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll `predicate` until it returns something truthy; fail at the deadline."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        assert time.monotonic() < deadline, f"{what} not reached within {timeout}s"
        threading.Event().wait(0.02)


def watch_until(
    lead: corral.Lead, predicate: Callable[[corral.WatchEvent], bool], *, after_seq: int = 0, timeout: float = 10.0
) -> corral.WatchEvent:
    """The first watch event (replaying from `after_seq`) matching `predicate`."""
    for event in lead.watch(after_seq, timeout=timeout):
        if predicate(event):
            return event
    raise AssertionError("watch ended before the expected event")


def task_reached(task_id: str, state: corral.TaskState) -> Callable[[corral.WatchEvent], bool]:
    """Predicate: a TaskChanged event putting `task_id` into `state`."""
    return lambda e: isinstance(e, corral.TaskChanged) and e.task.id == task_id and e.task.state is state


class TeammateThread:
    """Runs `corral.run_teammate` in a thread and keeps its summary or error."""

    def __init__(self, lead: corral.Lead, name: str, handler: Callable[[corral.Task], Any], **options: Any) -> None:
        self.name = name
        self.new = lead.add_teammate(name, roles=options.pop("roles", ()))
        env = lead.teammate_env(self.new)
        options.setdefault("poll_interval", FAST_POLL)
        self.summary: corral.RunSummary | None = None
        self.error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._run,
            args=(handler,),
            kwargs={"address": env["CORRAL_ADDRESS"], "token": env["CORRAL_TOKEN"], **options},
            name=f"teammate-{name}",
            daemon=True,
        )

    def start(self) -> TeammateThread:
        self._thread.start()
        return self

    def _run(self, handler: Callable[[corral.Task], Any], **kwargs: Any) -> None:
        try:
            self.summary = corral.run_teammate(handler, **kwargs)
        except BaseException as exc:  # reported by result()
            self.error = exc

    def result(self, timeout: float = 30.0) -> corral.RunSummary:
        """Wait for run_teammate to return and give its summary (re-raising its error)."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"teammate {self.name} still running after {timeout}s"
        if self.error is not None:
            raise self.error
        assert self.summary is not None
        return self.summary
