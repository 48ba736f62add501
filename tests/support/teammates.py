"""SDK-level helpers for tests that drive a real daemon through `corral`: teammates in threads, watch waits."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import corral

# Short idle polls keep tests fast; 50 ms is the daemon's minimum.
FAST_POLL = 0.05


def watch_until(
    lead: corral.Lead, predicate: Callable[[corral.WatchEvent], bool], *, after_seq: int = 0, timeout: float = 10.0
) -> corral.WatchEvent:
    """The first watch event (replaying from `after_seq`) matching `predicate`; the stream's deadline is `timeout`."""
    for event in lead.watch(after_seq, timeout=timeout):
        if predicate(event):
            return event
    raise AssertionError("the watch stream ended before the expected event")


def task_reached(task_id: str, state: corral.TaskState) -> Callable[[corral.WatchEvent], bool]:
    """Predicate: a TaskChanged event putting `task_id` into `state`."""
    return lambda e: isinstance(e, corral.TaskChanged) and e.task.id == task_id and e.task.state is state


class TeammateThread:
    """Runs `corral.run_teammate` in a thread (after `start()`) and keeps its summary or error.

    Options not for `add_teammate` go to `run_teammate`; `poll_interval` defaults to FAST_POLL.
    """

    def __init__(
        self,
        lead: corral.Lead,
        name: str,
        handler: Callable[[corral.Task], Any],
        *,
        roles: tuple[str, ...] | list[str] = (),
        require_plan_approval: bool = False,
        **options: Any,
    ) -> None:
        self.name = name
        self.new = lead.add_teammate(name, roles=roles, require_plan_approval=require_plan_approval)
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

    def running(self) -> bool:
        return self._thread.is_alive()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def _run(self, handler: Callable[[corral.Task], Any], **kwargs: Any) -> None:
        try:
            self.summary = corral.run_teammate(handler, **kwargs)
        except BaseException as exc:  # noqa: BLE001 (reported by result())
            self.error = exc

    def result(self, timeout: float = 30.0) -> corral.RunSummary:
        """Waits for run_teammate to return and gives its summary (re-raising its error)."""
        self._thread.join(timeout)
        assert not self._thread.is_alive(), f"teammate {self.name} still running after {timeout}s"
        if self.error is not None:
            raise self.error
        assert self.summary is not None
        return self.summary
