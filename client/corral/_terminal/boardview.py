"""The board as seen through the Watch feed, drawn live (rich) or as plain lines.

`BoardModel` folds watch events into tasks, teammates and a short history;
`LiveBoard` redraws it in a terminal, `PlainBoard` prints progress lines for
logs and pipes. Both are driven by the caller's loop (`update()` after each
batch of events), so they never touch the network themselves.
"""

from __future__ import annotations

import collections
import os
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import IO, Protocol

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.markup import escape
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

import corral

from .artifacts import artifact_line
from .output import (
    blob_text,
    first_line,
    progress_label,
    short,
    state_name,
    styled,
    tasks_proposed_line,
    waiting_text,
)

HISTORY_LINES = 8
PLAIN_PROGRESS_EVERY = 0.5
WAITING_LINES = 6


def want_live(force_plain: bool = False) -> bool:
    """Draw a live board only on a real terminal (not CI, not a pipe, not TERM=dumb)."""
    if force_plain or os.environ.get("CI") or os.environ.get("TERM") == "dumb":
        return False
    return sys.stdout.isatty()


@dataclass
class Mate:
    """What the board knows about one teammate."""

    name: str
    roles: tuple[str, ...] = ()
    status: corral.TeammateStatus = corral.TeammateStatus.OFFLINE
    current: str = ""
    done: int = 0


@dataclass
class BoardModel:
    """Tasks, teammates and recent history, folded from watch events."""

    tasks: dict[str, corral.Task] = field(default_factory=dict)
    mates: dict[str, Mate] = field(default_factory=dict)
    history: collections.deque[str] = field(default_factory=lambda: collections.deque(maxlen=HISTORY_LINES))
    notable: list[str] = field(default_factory=list)
    plans: dict[str, corral.PlanSubmitted] = field(default_factory=dict)  # every plan submitted, decided or not
    messages: list[corral.LeadMessage] = field(default_factory=list)
    answers: dict[str, corral.ShutdownAnswered] = field(default_factory=dict)
    expected_tasks: int = 0  # when known (the demo): progress waits until the replay has them all
    failed_attempts: int = 0
    # Why pending tasks wait (task id -> reason), as the daemon last said: the
    # events do not carry it, so the caller refreshes it with `set_waiting`.
    waiting: dict[str, str] = field(default_factory=dict)
    first_claim: float | None = None
    last_finish: float | None = None
    last_seq: int = 0

    # ------------------------------------------------------------ folding

    def apply(self, event: corral.WatchEvent) -> None:
        self.last_seq = max(self.last_seq, event.seq)
        if isinstance(event, corral.TaskChanged):
            self._task(event.task)
        elif isinstance(event, corral.TeammateChanged):
            self._teammate(event)
        elif isinstance(event, corral.LeadMessage):
            self.messages.append(event)
            self.note(f"message from {event.message.sender}: {short(event.message.body, 80)}")
        elif isinstance(event, corral.PlanSubmitted):
            self.plans[event.plan_id] = event
            self.note(f"{event.author} submitted plan {event.plan_id}: {short(event.plan, 60)}")
        elif isinstance(event, corral.PlanDecided):
            verdict = "approved" if event.approve else "rejected"
            self.note(f"plan {event.plan_id} of {event.author} {verdict}")
        elif isinstance(event, corral.ShutdownAnswered):
            self.answers[event.request_id] = event
            answer = "approved" if event.approve else "rejected"
            self.note(f"{event.teammate} {answer} shutdown: {short(event.reason, 60)}")
        elif isinstance(event, corral.QuestionAsked):
            self.note(f"{event.asked_by} asked about {event.task_id}: {short(event.question, 80)}")
        elif isinstance(event, corral.QuestionAnswered):
            self.note(f"the lead answered {event.task_id}: {short(event.answer, 60)}")
        elif isinstance(event, corral.ReviewDecided):
            verdict = "approved" if event.approve else "rejected"
            because = f": {short(event.feedback, 60)}" if event.feedback else ""
            self.note(f"{event.reviewer} {verdict} {event.task_id} (review round {event.round}){because}")
        elif isinstance(event, corral.TasksProposed):
            self.note(tasks_proposed_line(event))
        elif isinstance(event, corral.ProposalsDecidedEvent):
            verdict = "approved" if event.approve else "rejected"
            because = f": {short(event.feedback, 60)}" if event.feedback else ""
            self.note(f"the lead {verdict} the proposed {', '.join(event.task_ids)}{because}")
        elif isinstance(event, corral.ArtifactAdded):
            self.note(artifact_line(event))

    def note(self, line: str, *, notable: bool = True) -> None:
        """Add a line to the history (and, if notable, to the plain output)."""
        self.history.append(line)
        if notable:
            self.notable.append(line)

    def mate(self, name: str) -> Mate:
        return self.mates.setdefault(name, Mate(name))

    def _task(self, task: corral.Task) -> None:
        old = self.tasks.get(task.id)
        self.tasks[task.id] = task
        was_running = old is not None and old.state is corral.TaskState.IN_PROGRESS
        if was_running and old is not None and _same_attempt(old, task):
            # The holder reported progress (or the event repeats what is known).
            if (task.progress, task.progress_fraction) != (old.progress, old.progress_fraction):
                label = progress_label(task)
                if label:
                    self.note(f"{task.owner or '?'} on {task.id}: {label}")
            return
        if was_running and old is not None and old.owner:
            self._clear_current(old.owner, task.id)
        reviewing = old is not None and old.state is corral.TaskState.IN_REVIEW and old.owner
        if reviewing and old is not None and (task.owner, task.state) != (old.owner, old.state):
            self._clear_current(old.owner, task.id)  # the review's claim ended
        state = task.state
        if state is corral.TaskState.IN_PROGRESS:
            self.first_claim = self.first_claim or time.monotonic()
            if task.owner:
                self.mate(task.owner).current = task.id
            self.note(f"{task.owner} claimed {task.id} (attempt {task.attempt})", notable=False)
        elif state is corral.TaskState.COMPLETED:
            self.last_finish = time.monotonic()
            if task.owner:
                self.mate(task.owner).done += 1
            self.note(f"{task.owner or '?'} completed {task.id}", notable=False)
        elif state is corral.TaskState.PENDING and was_running and old is not None:
            self._back_to_pending(old, task)
        elif state is corral.TaskState.PENDING and old is None:
            self.note(f"task {task.id} added", notable=False)
        elif state is corral.TaskState.FAILED:
            self.last_finish = time.monotonic()
            self.note(f"{task.id} FAILED after {task.attempt} attempt(s): {short(first_line(task.error), 60)}")
        elif state is corral.TaskState.CANCELED:
            self.note(f"{task.id} canceled")
        elif state is corral.TaskState.IN_REVIEW and task.owner:
            # A review's claim holds the task: its reviewer is busy on it.
            self.mate(task.owner).current = task.id
        elif state is corral.TaskState.IN_REVIEW and was_running and old is not None:
            self.note(f"{old.owner or '?'} submitted {task.id} for review", notable=False)

    def _back_to_pending(self, old: corral.Task, task: corral.Task) -> None:
        # A release or a split does not use up an attempt; a failure or an expiry does, and records why.
        added = [dep for dep in task.depends_on if dep not in old.depends_on]
        if added:
            self.note(f"{old.owner or '?'} split {task.id}: it waits for {', '.join(added)}", notable=False)
        elif task.attempt < old.attempt:
            self.note(f"{old.owner or '?'} released {task.id}")
        elif task.error.startswith("lease expired"):
            self.note(f"{task.id}: lease of {old.owner or '?'} expired on attempt {old.attempt}; will retry")
        else:
            self.failed_attempts += 1
            self.note(f"{task.id} attempt {old.attempt} failed ({short(first_line(task.error), 50)}); will retry")

    def _clear_current(self, name: str, task_id: str) -> None:
        mate = self.mates.get(name)
        if mate is not None and mate.current == task_id:
            mate.current = ""

    def _teammate(self, event: corral.TeammateChanged) -> None:
        mate = self.mate(event.teammate.name)
        mate.roles = event.teammate.roles or mate.roles
        mate.status = event.status
        if event.status is not corral.TeammateStatus.BUSY:
            mate.current = ""
        reason = event.reason
        notable = reason in (
            corral.TeammateChangeReason.JOINED,
            corral.TeammateChangeReason.LEFT,
            corral.TeammateChangeReason.REMOVED,
            corral.TeammateChangeReason.IDLE_TIMEOUT,
        )
        if notable:
            self.note(f"teammate {mate.name} {state_name(reason)}")

    def set_waiting(self, pending: Iterable[corral.Task]) -> None:
        """Replace what pending tasks wait for with the daemon's answer (from ListTasks).

        A task that waits on something besides its dependencies (a teammate with
        its role, a slot of its key, its time) looks ready but is not claimed:
        each such reason, when new, is a notable line."""
        waiting = {}
        for task in pending:
            reason = waiting_text(task)
            if not reason:
                continue
            waiting[task.id] = reason
            stands_out = task.waiting_for is not None and not task.waiting_for.dependencies
            if stands_out and self.waiting.get(task.id) != reason:
                self.note(f"{task.id} waits for {reason}")
        self.waiting = waiting

    # ------------------------------------------------------------ questions

    def count(self, *states: corral.TaskState) -> int:
        return sum(1 for task in self.tasks.values() if task.state in states)

    def counts(self) -> dict[corral.TaskState, int]:
        return {state: self.count(state) for state in corral.TaskState}

    def questions(self) -> dict[str, str]:
        """The questions waiting for the Lead's answer, by task id (NEEDS_INPUT tasks)."""
        return {task.id: task.question for task in self.tasks.values() if task.state is corral.TaskState.NEEDS_INPUT}

    def lead_reviews(self) -> dict[str, bytes]:
        """The results waiting for the Lead's review, by task id: IN_REVIEW tasks whose
        policy names no reviewer role (`corral tasks review ID --approve|--reject`)."""
        return {
            task.id: task.result
            for task in self.tasks.values()
            if task.state is corral.TaskState.IN_REVIEW and task.review is not None and not task.review.reviewer_role
        }

    def proposals(self) -> dict[str, corral.Task]:
        """The tasks teammates proposed, waiting for the Lead's decision, by task id
        (PROPOSED tasks: `corral proposals approve|reject ID`)."""
        return {task.id: task for task in self.tasks.values() if task.state is corral.TaskState.PROPOSED}

    def all_final(self) -> bool:
        """True when the board has tasks and every one is final (a hint; confirm with GetStats)."""
        return bool(self.tasks) and all(task.state.is_final for task in self.tasks.values())

    def caught_up(self) -> None:
        """The replay of the history is folded in: what it noted is no news, but what
        runs now is, with its holder's latest progress, and so is each question still
        waiting for the Lead's answer, each result waiting for the Lead's review and
        each proposed task waiting for the Lead's decision."""
        self.notable = [
            f"{task.owner or '?'} on {task.id}: {label}"
            for task in self.tasks.values()
            if task.state is corral.TaskState.IN_PROGRESS and (label := progress_label(task))
        ]
        self.notable += [
            f"{task_id} waits for an answer: {short(question, 80)}" for task_id, question in self.questions().items()
        ]
        self.notable += [
            f"{task_id} waits for the lead's review: {short(first_line(blob_text(result)), 80)}"
            for task_id, result in self.lead_reviews().items()
        ]
        self.notable += [
            f"{task_id} waits for the lead's decision: {_proposal(task)}" for task_id, task in self.proposals().items()
        ]

    def drain_notable(self) -> list[str]:
        lines, self.notable = self.notable, []
        return lines


def _proposal(task: corral.Task) -> str:
    """`proposed by ann from t: the title`."""
    origin = f" from {task.discovered_from}" if task.discovered_from else ""
    title = f": {short(task.title, 60)}" if task.title else ""
    return f"proposed by {task.proposed_by or '?'}{origin}{title}"


def _same_attempt(old: corral.Task, task: corral.Task) -> bool:
    return task.state is corral.TaskState.IN_PROGRESS and (task.owner, task.attempt) == (old.owner, old.attempt)


class BoardView(Protocol):
    def update(self) -> None: ...

    def close(self) -> None: ...


def progress_text(model: BoardModel) -> str:
    """`12/30 completed | pending 10, in_progress 4, completed 12` (zero states left out)."""
    counts = model.counts()
    parts = [f"{state_name(state)} {counts[state]}" for state in corral.TaskState if counts[state]]
    return f"{counts[corral.TaskState.COMPLETED]}/{len(model.tasks)} completed | " + ", ".join(parts)


class PlainBoard:
    """Progress lines and notable events, for logs and pipes."""

    def __init__(self, model: BoardModel, *, out: IO[str] | None = None, started: float | None = None) -> None:
        self._model = model
        self._out = out or sys.stdout
        self._started = started or time.monotonic()
        self._last_progress = ""
        self._last_time = 0.0

    def update(self, *, force: bool = False) -> None:
        elapsed = time.monotonic() - self._started
        for line in self._model.drain_notable():
            self._print(f"[{elapsed:6.1f}s] {line}")
        progress = progress_text(self._model)
        due = force or time.monotonic() - self._last_time >= PLAIN_PROGRESS_EVERY
        known = len(self._model.tasks)
        if known and known >= self._model.expected_tasks and progress != self._last_progress and due:
            self._print(f"[{elapsed:6.1f}s] {progress}")
            self._last_progress, self._last_time = progress, time.monotonic()

    def close(self) -> None:
        self.update(force=True)

    def _print(self, line: str) -> None:
        print(line, file=self._out, flush=True)


class LiveBoard:
    """A live terminal board (rich Live), redrawn on each `update()`."""

    def __init__(
        self, model: BoardModel, title: str, *, console: Console | None = None, started: float | None = None
    ) -> None:
        self._model = model
        self._title = title
        self._started = started or time.monotonic()
        self._live = Live(self._render(), console=console, refresh_per_second=10, transient=False)
        self._live.start()

    def update(self) -> None:
        self._model.drain_notable()  # the history panel shows them
        self._live.update(self._render())

    def close(self) -> None:
        self.update()
        self._live.stop()

    def _render(self) -> Group:
        model = self._model
        counts = model.counts()
        total = len(model.tasks)
        done = counts[corral.TaskState.COMPLETED]
        header = Text.from_markup(
            f"[bold]{escape(self._title)}[/]   {done}/{total} completed   "
            f"elapsed {time.monotonic() - self._started:.1f}s"
        )
        # ProgressBar ends without a newline: give it a row of its own.
        bar = Table.grid(padding=(0, 1))
        bar.add_row(ProgressBar(total=max(total, 1), completed=done, width=60), f"{done}/{total}")
        states = Text.from_markup("   ".join(f"{styled(state)} {counts[state]}" for state in corral.TaskState))
        parts: list[RenderableType] = [header, bar, states, Text(""), self._mates_table()]
        if self._model.waiting:
            parts.append(self._waiting_table())
        questions = self._model.questions()
        if questions:
            parts.append(self._questions_table(questions))
        reviews = self._model.lead_reviews()
        if reviews:
            parts.append(self._reviews_table(reviews))
        proposals = self._model.proposals()
        if proposals:
            parts.append(self._proposals_table(proposals))
        return Group(*parts, self._history())

    def _mates_table(self) -> Table:
        table = Table("teammate", "roles", "status", "current task", "done", title="teammates", title_justify="left")
        for mate in sorted(self._model.mates.values(), key=lambda m: m.name):
            table.add_row(
                escape(mate.name),
                escape(", ".join(mate.roles) or "-"),
                styled(mate.status),
                escape(self._current(mate)),
                str(mate.done),
            )
        return table

    def _current(self, mate: Mate) -> str:
        """The teammate's task, with its progress when it reported some."""
        task = self._model.tasks.get(mate.current)
        if task is None:
            return mate.current or "-"
        label = progress_label(task, 40)
        return f"{task.id}: {label}" if label else task.id

    def _waiting_table(self) -> Table:
        """Pending tasks and what holds each, those not held by their dependencies first."""
        waiting = self._model.waiting
        ordered = sorted(waiting, key=lambda task_id: (waiting[task_id].startswith("dependencies"), task_id))
        table = Table("pending task", "waits for", title="waiting", title_justify="left")
        for task_id in ordered[:WAITING_LINES]:
            table.add_row(escape(task_id), escape(short(waiting[task_id], 80)))
        if len(ordered) > WAITING_LINES:
            table.add_row(f"... {len(ordered) - WAITING_LINES} more", "")
        return table

    def _questions_table(self, questions: dict[str, str]) -> Table:
        """Tasks waiting for the Lead's answer (`corral tasks answer ID TEXT`), and what each asks."""
        table = Table("task", "asks", title="questions for the lead", title_justify="left")
        for task_id in sorted(questions)[:WAITING_LINES]:
            table.add_row(escape(task_id), escape(short(questions[task_id], 80)))
        if len(questions) > WAITING_LINES:
            table.add_row(f"... {len(questions) - WAITING_LINES} more", "")
        return table

    def _reviews_table(self, reviews: dict[str, bytes]) -> Table:
        """Results waiting for the Lead's review (`corral tasks review ID --approve|--reject`)."""
        table = Table("task", "result", title="reviews for the lead", title_justify="left", min_width=24)
        for task_id in sorted(reviews)[:WAITING_LINES]:
            table.add_row(escape(task_id), escape(short(first_line(blob_text(reviews[task_id])), 80)))
        if len(reviews) > WAITING_LINES:
            table.add_row(f"... {len(reviews) - WAITING_LINES} more", "")
        return table

    def _proposals_table(self, proposals: dict[str, corral.Task]) -> Table:
        """Proposed tasks waiting for the Lead (`corral proposals approve|reject ID`)."""
        table = Table("task", "proposed", title="proposals for the lead", title_justify="left", min_width=24)
        for task_id in sorted(proposals)[:WAITING_LINES]:
            table.add_row(escape(task_id), escape(_proposal(proposals[task_id])))
        if len(proposals) > WAITING_LINES:
            table.add_row(f"... {len(proposals) - WAITING_LINES} more", "")
        return table

    def _history(self) -> Table:
        table = Table("latest events", show_edge=False, box=None)
        for line in self._model.history:
            table.add_row(escape(line))
        return table


def open_view(
    model: BoardModel, title: str, *, plain: bool, out: IO[str] | None = None, started: float | None = None
) -> BoardView:
    """A LiveBoard on a terminal, else a PlainBoard (on `out`, default stdout).

    `started` (a `time.monotonic()` value) is where the elapsed time counts from.
    """
    if want_live(plain) and out in (None, sys.stdout):
        return LiveBoard(model, title, started=started)
    return PlainBoard(model, out=out, started=started)
