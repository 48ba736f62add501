"""Following the Watch feed from a thread, replaying it to its current end,
and one-line descriptions of events.

The sync `Lead.watch` iterator blocks, so a pump runs it in a daemon thread
on its own connection and hands events over a queue; closing that
connection ends the stream. There is no RPC telling the newest event
sequence, so "caught up" means: the stream went quiet for a short window
(the replay is sent back to back, so a pause means it reached the live end),
bounded by an overall limit for boards that never go quiet.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass

import corral

from .artifacts import artifact_line
from .output import first_line, progress_label, short, state_name, tasks_proposed_line

QUIET_SECONDS = 0.3
REPLAY_LIMIT_SECONDS = 10.0


@dataclass(frozen=True)
class _End:
    error: corral.CorralError | None


class StreamEnded(Exception):
    """The Watch stream ended (the daemon stopped, or the pump was closed)."""

    def __init__(self, error: corral.CorralError | None) -> None:
        super().__init__(str(error) if error else "the daemon ended the watch stream")
        self.error = error


class EventPump:
    """`Lead.watch(after_seq)` in a background thread; `get()` the events in order."""

    def __init__(self, address: str, token: str, *, after_seq: int = 0) -> None:
        self._lead = corral.Lead.connect(address, token, connect_timeout=0)
        self._queue: queue.Queue[corral.WatchEvent | _End] = queue.Queue()
        self._closing = threading.Event()
        self._ended = False
        self.last_seq = after_seq
        try:  # fail fast (Unavailable, Unauthenticated) before any thread starts
            self._lead.get_stats()
        except BaseException:
            self._lead.close()
            raise
        self._thread = threading.Thread(target=self._run, args=(after_seq,), name="corral-watch", daemon=True)
        self._thread.start()

    def _run(self, after_seq: int) -> None:
        try:
            for event in self._lead.watch(after_seq):
                self._queue.put(event)
            self._queue.put(_End(None))
        except corral.CorralError as exc:
            self._queue.put(_End(None if self._closing.is_set() else exc))
        except Exception as exc:  # never lose the end of the stream
            self._queue.put(_End(corral.CorralError(f"watch stream failed: {exc!r}")))

    def get(self, timeout: float | None) -> corral.WatchEvent | None:
        """The next event, or None when none arrived within `timeout` seconds.

        Raises StreamEnded once the stream is over.
        """
        if self._ended:
            raise StreamEnded(None)
        try:
            item = self._queue.get(timeout=timeout) if timeout is None or timeout > 0 else self._queue.get_nowait()
        except queue.Empty:
            return None
        if isinstance(item, _End):
            self._ended = True
            raise StreamEnded(item.error)
        self.last_seq = item.seq
        return item

    def close(self) -> None:
        """End the stream (cancels the call) and close the connection."""
        self._closing.set()
        self._lead.close()
        self._thread.join(timeout=2.0)

    def __enter__(self) -> EventPump:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def replay(
    address: str,
    token: str,
    *,
    after_seq: int = 0,
    quiet: float = QUIET_SECONDS,
    limit: float = REPLAY_LIMIT_SECONDS,
) -> list[corral.WatchEvent]:
    """Every event after `after_seq` up to the feed's current end (see module doc)."""
    events: list[corral.WatchEvent] = []
    deadline = time.monotonic() + limit
    with EventPump(address, token, after_seq=after_seq) as pump:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return events
            try:
                event = pump.get(timeout=min(quiet, left))
            except StreamEnded as ended:
                if ended.error is not None:
                    raise ended.error from None
                return events
            if event is None:
                return events
            events.append(event)


def describe(event: corral.WatchEvent) -> str:
    """One line for an event, from the event alone (see BoardModel for richer lines)."""
    if isinstance(event, corral.TaskChanged):
        task = event.task
        parts = [f"task {task.id} {state_name(task.state)}"]
        if task.owner:
            parts.append(f"owner={task.owner}")
        if task.attempt:
            parts.append(f"attempt={task.attempt}/{task.max_attempts}")
        if task.error and task.state is not corral.TaskState.COMPLETED:
            parts.append(f"error={short(first_line(task.error), 60)!r}")
        if task.state is corral.TaskState.IN_PROGRESS and progress_label(task):
            parts.append(f"progress={progress_label(task)!r}")
        if task.question:
            parts.append(f"question={short(task.question, 60)!r}")
        if task.review_rounds:
            parts.append(f"review_rounds={task.review_rounds}")
        return " ".join(parts)
    if isinstance(event, corral.TeammateChanged):
        reason = event.reason
        why = "" if reason is corral.TeammateChangeReason.UNSPECIFIED else f" ({state_name(reason)})"
        return f"teammate {event.teammate.name} {state_name(event.status)}{why}"
    if isinstance(event, corral.LeadMessage):
        return f"message from {event.message.sender}: {short(event.message.body, 100)}"
    if isinstance(event, corral.PlanSubmitted):
        return f"plan {event.plan_id} submitted by {event.author}: {short(event.plan, 80)}"
    if isinstance(event, corral.PlanDecided):
        verdict = "approved" if event.approve else "rejected"
        because = f" ({short(event.feedback, 60)})" if event.feedback else ""
        return f"plan {event.plan_id} of {event.author} {verdict}{because}"
    if isinstance(event, corral.BudgetExhaustedEvent):
        spent = event.exhausted.spent
        return f"budget of {event.exhausted.teammate} spent: {spent.tokens} tokens, {spent.cost_micros} micros"
    if isinstance(event, corral.QuestionAsked):
        return f"{event.asked_by} asked about task {event.task_id}: {short(event.question, 100)}"
    if isinstance(event, corral.QuestionAnswered):
        return f"question on task {event.task_id} answered: {short(event.answer, 100)}"
    if isinstance(event, corral.ReviewDecided):
        verdict = "approved" if event.approve else "rejected"
        because = f": {short(event.feedback, 100)}" if event.feedback else ""
        return f"review round {event.round} of task {event.task_id} {verdict} by {event.reviewer}{because}"
    if isinstance(event, corral.TasksProposed):
        return tasks_proposed_line(event)
    if isinstance(event, corral.ArtifactAdded):
        return artifact_line(event)
    if isinstance(event, corral.ProposalsDecidedEvent):
        verdict = "approved" if event.approve else "rejected"
        because = f": {short(event.feedback, 100)}" if event.feedback else ""
        return f"proposed tasks {', '.join(event.task_ids)} {verdict}{because}"
    answer = "approved" if event.approve else "rejected"
    because = f" ({short(event.reason, 60)})" if event.reason else ""
    return f"shutdown {event.request_id} {answer} by {event.teammate}{because}"


def stamp(event: corral.WatchEvent) -> str:
    """`#seq HH:MM:SS.mmm` (local time) for a line."""
    when = event.time.astimezone().strftime("%H:%M:%S.%f")[:-3] if event.time else "--:--:--.---"
    return f"#{event.seq} {when}"
