"""How a Lead follows the board until it is done (shared by both flavours)."""

from __future__ import annotations

import datetime

from corral._types import Task, TaskState

__all__ = ["seconds", "track_unfinished"]


def seconds(value: datetime.timedelta | float) -> float:
    """A duration given as a timedelta or as seconds, in seconds."""
    return value.total_seconds() if isinstance(value, datetime.timedelta) else float(value)


def track_unfinished(unfinished: dict[str, TaskState], task: Task) -> bool:
    """Record `task`'s state; True when a task finished and none is known unfinished.

    Only a hint: the caller confirms with GetStats, which also covers tasks
    whose earlier events this replay has not reached.
    """
    if not task.state.is_final:
        unfinished[task.id] = task.state
        return False
    unfinished.pop(task.id, None)
    return not unfinished
