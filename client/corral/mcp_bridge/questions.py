"""Questions to the Lead on the wire: the calls, fields and states the SDK does not
make or read yet (AskQuestion, AnswerQuestion, TASK_STATE_NEEDS_INPUT,
ATTEMPT_OUTCOME_ASKED, Claim.answers, Task.question and Watch's question events).

Each call goes through the SDK client's own plumbing (its channel, credential,
Session stream, write retries and error mapping) with the generated stubs, and
whatever the SDK's conversions cannot read yet is read here from the message
itself: `TaskState(6)` and `AttemptOutcome(8)` raise ValueError in `corral._convert`.
"""

from __future__ import annotations

import collections
import contextlib
import dataclasses
import datetime
from collections.abc import AsyncGenerator, Callable
from typing import Any

import corral
from corral import _convert, aio
from corral._claimstate import DEAD_CLAIM_ERRORS
from corral.v1 import corral_pb2 as pb

__all__ = [
    "NEEDS_INPUT",
    "QUESTION_MAX_BYTES",
    "AnsweredQuestion",
    "AskedQuestion",
    "AskingTeammate",
    "ClaimAnswers",
    "UnreadTask",
    "WatchItem",
    "WireTask",
    "answer_question",
    "ask_question",
    "attempt_outcome_name",
    "get_task",
    "list_tasks_page",
    "state_name",
    "tasks_by_state",
    "tasks_needing_input",
    "time_of",
    "watch",
]

NEEDS_INPUT = "NEEDS_INPUT"
# The daemon's text limit (questions and answers): refused here first, naming the field.
QUESTION_MAX_BYTES = 64 * 1024
# Claims whose answers (or ASKED previous attempt) wait to be shown; re-sends of held claims add none.
_CLAIMS_KEPT = 256

_SDK_STATES = frozenset(state.value for state in corral.TaskState)
_SDK_OUTCOMES = frozenset(outcome.value for outcome in corral.AttemptOutcome)


def state_name(value: int) -> str:
    """A wire task state's name without its prefix ("NEEDS_INPUT")."""
    try:
        return pb.TaskState.Name(value).removeprefix("TASK_STATE_")
    except ValueError:
        return f"STATE_{value}"


def attempt_outcome_name(value: int) -> str:
    """A wire attempt outcome's name without its prefix ("ASKED")."""
    try:
        return pb.AttemptOutcome.Name(value).removeprefix("ATTEMPT_OUTCOME_")
    except ValueError:
        return f"OUTCOME_{value}"


def time_of(message: Any, field: str) -> datetime.datetime | None:
    """A Timestamp field of a wire message; None when unset."""
    return _convert.time_from_pb(message, field)


# ---------------------------------------------------------------- tasks


@dataclasses.dataclass(frozen=True)
class WireTask:
    """A task as the SDK reads it, and what it cannot read yet: the wire's own state
    name, the question it waits on, and each attempt's outcome name."""

    task: corral.Task
    state: str
    question: str
    attempt_outcomes: tuple[str, ...] = ()


def _readable(message: pb.Task) -> WireTask:
    state, question = state_name(message.state), message.question
    if message.state not in _SDK_STATES:
        copy = pb.Task()
        copy.CopyFrom(message)
        copy.state = pb.TASK_STATE_PENDING  # unfinished, as NEEDS_INPUT is; `state` keeps its own name
        message = copy
    return WireTask(_convert.task_from_pb(message), state, question)


def _attempt(message: pb.TaskAttempt) -> corral.Attempt:
    if message.outcome in _SDK_OUTCOMES:
        return _convert.attempt_from_pb(message)
    copy = pb.TaskAttempt()
    copy.CopyFrom(message)
    copy.outcome = pb.ATTEMPT_OUTCOME_RELEASED  # its name is kept in WireTask.attempt_outcomes
    return _convert.attempt_from_pb(copy)


async def get_task(client: aio.Teammate | aio.Lead, task_id: str) -> WireTask:
    """GetTask, its claim history included, whatever its state and its attempts' outcomes."""
    response: pb.GetTaskResponse = await client._unary(client._board.GetTask, pb.GetTaskRequest(task_id=task_id))
    read = _readable(response.task)
    task = dataclasses.replace(read.task, attempts=tuple(_attempt(a) for a in response.attempts))
    outcomes = tuple(attempt_outcome_name(a.outcome) for a in response.attempts)
    return dataclasses.replace(read, task=task, attempt_outcomes=outcomes)


async def list_tasks_page(
    client: aio.Teammate | aio.Lead, *, states: list[str], owner: str, page_size: int, page_token: str
) -> tuple[list[WireTask], str]:
    """One page of ListTasks; `states` by name ("PENDING", "NEEDS_INPUT"), any state when empty."""
    request = pb.ListTasksRequest(
        states=[f"TASK_STATE_{name}" for name in states], owner=owner, page_size=page_size, page_token=page_token
    )
    response: pb.ListTasksResponse = await client._unary(client._board.ListTasks, request)
    return [_readable(task) for task in response.tasks], response.next_page_token


async def tasks_needing_input(lead: aio.Lead, limit: int) -> tuple[list[pb.Task], bool]:
    """The first `limit` NEEDS_INPUT tasks in board order, and whether there are more."""
    request = pb.ListTasksRequest(states=[pb.TASK_STATE_NEEDS_INPUT], page_size=limit)
    response: pb.ListTasksResponse = await lead._unary(lead._board.ListTasks, request)
    return list(response.tasks), bool(response.next_page_token)


async def tasks_by_state(lead: aio.Lead) -> dict[str, int]:
    """GetStats' task counts by state name, NEEDS_INPUT included."""
    response: pb.GetStatsResponse = await lead._unary(lead._board.GetStats, pb.GetStatsRequest())
    return {key.removeprefix("TASK_STATE_"): count for key, count in response.tasks_by_state.items()}


# ---------------------------------------------------------------- the two calls


async def ask_question(teammate: aio.Teammate, claim: aio.Claim, question: str) -> pb.Task:
    """AskQuestion for a held claim, as the SDK sends a release: an op on the Session
    stream while one is open, else the unary call. The claim ends either way (its
    keepalive stops first); the task comes back NEEDS_INPUT."""
    await claim.stop_keepalive()
    request = pb.AskQuestionRequest(task_id=claim.task.id, claim_token=claim.token, question=question)
    try:
        answer = await teammate._session.call(pb.SessionRequest(ask=request))
        if answer is None:
            answer = await teammate._unary(teammate._teammate.AskQuestion, request)
    except DEAD_CLAIM_ERRORS:
        teammate._claims.forget(claim.token)
        raise
    # Any other error leaves the claim held, so the call can be made again.
    teammate._claims.forget(claim.token)
    teammate._working.pop(claim.token, None)
    task: pb.Task = answer.task
    return task


async def answer_question(lead: aio.Lead, task_id: str, answer: str) -> pb.Task:
    """AnswerQuestion, sent again with its request id while its outcome is unknown."""
    response: pb.AnswerQuestionResponse = await lead._write(
        lead._lead.AnswerQuestion, pb.AnswerQuestionRequest(task_id=task_id, answer=answer)
    )
    return response.task


# ---------------------------------------------------------------- a claim's answers


@dataclasses.dataclass(frozen=True)
class ClaimAnswers:
    """What a claim carries that the SDK's Claim does not: every question asked on its
    task with its answer, and its previous attempt when that one ended ASKED."""

    answers: tuple[pb.QuestionAnswer, ...]
    previous_attempt: pb.TaskAttempt | None = None


class AskingTeammate(aio.Teammate):
    """aio.Teammate that reads each claim's answers off the stream (Session or Idle)
    before the SDK converts it, keeping them by claim token for the bridge to show.

    A previous attempt that ended ASKED is taken off the message (kept here): the
    SDK's conversion would raise on its outcome, and end the stream with it."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._answers: collections.OrderedDict[str, ClaimAnswers] = collections.OrderedDict()
        events = self._session.events

        async def read_events(request: pb.IdleRequest) -> AsyncGenerator[pb.SessionResponse, None]:
            async with contextlib.aclosing(events(request)) as responses:
                async for response in responses:
                    self._read_claim(response)
                    yield response

        self._session.events = read_events  # type: ignore[method-assign]

    async def _stream(  # the Idle stream's responses (and any other stream's, untouched)
        self, method: Callable[..., Any], request: Any, *, timeout: float | None = None
    ) -> AsyncGenerator[Any, None]:
        async with contextlib.aclosing(super()._stream(method, request, timeout=timeout)) as responses:
            async for response in responses:
                self._read_claim(response)
                yield response

    def _read_claim(self, response: Any) -> None:
        if "event" not in response.DESCRIPTOR.oneofs_by_name or response.WhichOneof("event") != "claim":
            return
        claim: pb.Claim = response.claim
        previous: pb.TaskAttempt | None = None
        if claim.HasField("previous_attempt") and claim.previous_attempt.outcome not in _SDK_OUTCOMES:
            previous = pb.TaskAttempt()
            previous.CopyFrom(claim.previous_attempt)
            claim.ClearField("previous_attempt")
        if claim.answers or previous is not None:
            self._answers[claim.claim_token] = ClaimAnswers(tuple(claim.answers), previous)
            self._answers.move_to_end(claim.claim_token)
            while len(self._answers) > _CLAIMS_KEPT:
                self._answers.popitem(last=False)

    def answers_of(self, claim: aio.Claim) -> ClaimAnswers | None:
        """What the claim carried beyond the SDK's Claim, if anything."""
        return self._answers.get(claim.token)


# ---------------------------------------------------------------- Watch


@dataclasses.dataclass(frozen=True)
class AskedQuestion:
    seq: int
    time: datetime.datetime | None
    task_id: str
    question: str
    asked_by: str


@dataclasses.dataclass(frozen=True)
class AnsweredQuestion:
    seq: int
    time: datetime.datetime | None
    task_id: str
    question: str
    answer: str


@dataclasses.dataclass(frozen=True)
class UnreadTask:
    """A task_changed event whose task is in a state the SDK cannot read (NEEDS_INPUT)."""

    seq: int
    time: datetime.datetime | None
    task: pb.Task


WatchItem = corral.WatchEvent | AskedQuestion | AnsweredQuestion | UnreadTask


def _watch_item(response: pb.WatchResponse) -> WatchItem | None:
    seq, when = response.seq, time_of(response, "time")
    kind = response.WhichOneof("event")
    if kind == "question_asked":
        asked = response.question_asked
        return AskedQuestion(seq, when, asked.task_id, asked.question, asked.asked_by)
    if kind == "question_answered":
        answered = response.question_answered
        return AnsweredQuestion(seq, when, answered.task_id, answered.question, answered.answer)
    if kind == "task_changed" and response.task_changed.state not in _SDK_STATES:
        return UnreadTask(seq, when, response.task_changed)
    return _convert.watch_event_from_pb(response)


async def watch(lead: aio.Lead, after_seq: int) -> AsyncGenerator[WatchItem, None]:
    """`lead.watch(after_seq)` with the events of questions, and tasks in any state."""
    stream = lead._stream(lead._lead.Watch, pb.WatchRequest(after_seq=after_seq))
    async with contextlib.aclosing(stream) as responses:
        async for response in responses:
            item = _watch_item(response)
            if item is not None:
                yield item
