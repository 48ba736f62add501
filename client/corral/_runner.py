# Generated from client/corral/aio/_runner.py by scripts/unasync.py: do not edit.
# Change the asyncio source and run `make unasync`.
"""`run_teammate`: the whole teammate loop around a task handler."""

from __future__ import annotations

import contextvars
import datetime
import functools
import logging
from collections.abc import Callable
from typing import Any

from corral._channel import unreachable_error, unreachable_warning
from corral._claim import Claim
from corral._claimstate import DEAD_CLAIM_ERRORS, check_verdict
from corral._errors import (
    CorralError,
    FailedPrecondition,
    InvalidArgument,
    LeaseLost,
    NeedsInput,
    PermanentFailure,
    Unauthenticated,
    Unavailable,
)
from corral._handling import (
    Handler,
    Reviewer,
    RunOptions,
    Tally,
    describe_failure,
    encode_result,
    is_retryable,
    shutdown_reason,
)
from corral._output import capturing_logs, output, writing_output_to
from corral._primitives import Workers, invoke, run_handler
from corral._retry import is_transient, retrying
from corral._teammate import IdleEvent, Teammate
from corral._tracing import handler_span
from corral._types import (
    Approve,
    BudgetExhausted,
    ExitReason,
    IdleTimeout,
    Message,
    PlanDecision,
    ProposalsDecided,
    Reject,
    RunSummary,
    ShutdownRequest,
)
from corral._workspace import Workspaces
from corral._worktree import GitWorktree

__all__ = ["current_claim", "output", "run_teammate"]

_log = logging.getLogger("corral.runner")

_current_claim: contextvars.ContextVar[Claim] = contextvars.ContextVar(f"{__name__}.current_claim")


def current_claim() -> Claim:
    """The claim whose task the calling `run_teammate` handler is working on.

    Use it for the `fence` (to guard external writes), `check()` (to stop
    long work once the lease is lost or the claim ended), `report_progress()`
    and `renew(usage=...)` (to count what the work spends as it goes),
    `answers` (what the Lead said to the task's questions so far), and on a
    rework `rejected_result` (the result a review sent back; why is in
    `previous_attempt.feedback`). In a `reviewer`, it is the review's claim
    (`review` says whose result, and which round). Raises LookupError outside a
    handler.
    """
    return _current_claim.get()


def run_teammate(
    handler: Handler,
    *,
    address: str | None = None,
    token: str | None = None,
    plan: str | None = None,
    slots: int = 1,
    max_idle_polls: int | None = None,
    poll_interval: datetime.timedelta | float | None = None,
    on_message: Callable[[Message], Any] | None = None,
    stop_on_idle_timeout: bool = True,
    reconnect_timeout: float = 60.0,
    reviewer: Reviewer | None = None,
    capture_logs: bool = False,
    workspace: GitWorktree | None = None,
) -> RunSummary:
    """Connect as a teammate and work until told to stop; returns a RunSummary.

    For each claim, `handler(task)` runs in a worker thread (up to `slots` at
    once) while a keepalive renews the lease; on `corral.aio` a coroutine
    function is awaited on the event loop instead. Its return value (bytes,
    str or None) completes the task; an exception fails it, retryably unless
    it is `PermanentFailure`, and `NeedsInput(question)` asks the Lead that
    question instead (`Claim.ask`: the claim ends, the slot is free again, and the
    task comes back once answered, with `current_claim().answers`).
    `current_claim()` inside the handler gives the claim: a handler that finds a
    prerequisite missing may split its task on it
    (`current_claim().propose_tasks(specs, block=True)`) and return; the task comes
    back once they complete, with their results in `dependency_results`, and what
    the handler returned or raised after the split is not reported. A rework after a
    rejected review carries the rejected result (`current_claim().rejected_result`)
    and why (`current_claim().previous_attempt.feedback`).

    `reviewer`: for a teammate holding a task's `ReviewPolicy.reviewer_role`. A
    review's claim (`Claim.review`) runs `reviewer(task, result)` instead of the
    handler, the same way (a thread, or the event loop for a coroutine function on
    `corral.aio`), and the `corral.Approve()` or `corral.Reject(feedback)` it returns
    decides the review (`Claim.decide`). A reviewer that raises, or returns
    anything else, fails the claim: the review is offered again, no attempt
    used. Without a `reviewer`, a review's claim is released at once (logged the
    first time) so a teammate that can review takes it: the daemon does not offer
    a review to a teammate that released it in the same round.

    When the claim ends under the handler (the Lead revoked it or canceled the
    task, its attempt time limit passed, its lease was lost) a coroutine
    handler is cancelled; a handler in a thread, which cannot be, finds
    `current_claim().ended` set (poll it, or call `current_claim().check()`,
    which raises ClaimEndedError). Either way its outcome is dropped: the
    daemon already ended the claim.

    - `plan`: submitted first; claims arrive once the Lead approves it. A
      rejection ends the run (exit reason PLAN_REJECTED, feedback in the
      summary) so the caller can revise and run again.
    - A shutdown request is approved once running handlers have finished
      (exit reason SHUTDOWN); answer before its deadline or be removed.
    - `idle_timeout` ends the run (IDLE_TIMEOUT) unless `stop_on_idle_timeout`
      is False, in which case a new stream is opened.
    - `on_message` is called with each plain Message, on the loop's thread
      (on `corral.aio` it may return an awaitable, which is awaited).
    - A daemon that cannot be reached (at the start, or a lost connection)
      is retried with jittered exponential backoff for up to
      `reconnect_timeout` seconds per outage: the first failure of each
      outage logs a warning naming the address and the budget, and once it
      is spent Unavailable is raised, naming the address.
    - Removal by the Lead ends the run (REMOVED).
    - A spent budget (`BudgetExhausted`) is logged as a warning; the run keeps
      waiting, and claims come again once the Lead raises the budget.
    - The Lead's decisions on proposed tasks (`ProposalsDecided`) are logged.

    A handler streams what it is doing to its attempt's live output with
    `corral.output(text)` (or `current_claim().output(text)`): buffered, sent in the
    background, and whole by the time the claim is finished. With `capture_logs`,
    every `logging` record emitted in a handler's context (its own code, and what
    it calls on its thread or task) is written there too, one line per record
    (`%(asctime)s %(levelname)s %(name)s: %(message)s`); records still pass the
    loggers' levels as configured (`logging.basicConfig(level=logging.INFO)` lets
    INFO through), and go to the other handlers as before.
    - `workspace=corral.GitWorktree(repo)`: each work claim runs in a git worktree of
      its own (`current_claim().workspace`), whose changes are committed on the branch
      `corral/<task>/<attempt>` once the handler is done (see GitWorktree). The
      repository is checked at the start (GitError when it is none).
    """
    options = RunOptions(
        plan=plan,
        slots=slots,
        max_idle_polls=max_idle_polls,
        poll_interval=poll_interval,
        on_message=on_message,
        stop_on_idle_timeout=stop_on_idle_timeout,
        reconnect_timeout=reconnect_timeout,
        reviewer=reviewer,
        capture_logs=capture_logs,
    )
    with Teammate.connect(address, token, connect_timeout=reconnect_timeout) as teammate:
        return _Runner(teammate, handler, options, Workspaces(workspace)).run()


class _StreamBroke(Exception):
    """A stream that had delivered events broke: reconnect, with a fresh outage
    budget."""


class _Runner:
    def __init__(self, teammate: Teammate, handler: Handler, options: RunOptions, workspaces: Workspaces) -> None:
        self._teammate = teammate
        self._workspaces = workspaces
        self._handler = handler
        self._options = options
        self._tally = Tally()
        self._workers = Workers(options.slots, name="corral-handler")
        self._connected = False
        self._plan_id = ""
        self._plan_feedback = ""
        self._declined_a_review = False

    def run(self) -> RunSummary:
        with capturing_logs(self._options.capture_logs):
            try:
                self._retry(self._workspaces.start, self._teammate)
                if self._options.plan is not None:
                    self._plan_id = self._retry(self._teammate.submit_plan, self._options.plan)
                exit_reason = self._serve()
            except BaseException:
                self._workers.cancel()  # asyncio tasks unwind; threads cannot be cancelled
                raise
            finally:
                # Running handlers hold leases: let them finish (or unwind) and report.
                self._workers.join()
        return self._tally.summary(exit_reason, plan_id=self._plan_id, plan_feedback=self._plan_feedback)

    def _retry(self, call: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        address, budget = self._teammate.address, self._options.reconnect_timeout
        policy = retrying(budget, on_unavailable=lambda: unreachable_warning(address, budget))
        try:
            return policy(call, *args, **kwargs)
        except Unavailable as exc:
            raise unreachable_error(address, budget, exc.details) from exc

    # ------------------------------------------------------------ streams

    def _serve(self) -> ExitReason:
        while True:
            try:
                exit_reason: ExitReason = self._retry(self._one_stream)
            except _StreamBroke:
                continue
            except Unauthenticated:
                if self._connected:  # the credential worked before: the Lead removed us
                    return ExitReason.REMOVED
                raise
            if exit_reason is ExitReason.IDLE_TIMEOUT and not self._options.stop_on_idle_timeout:
                continue
            return exit_reason

    def _one_stream(self) -> ExitReason:
        """Follow one stream (Session or Idle) to an exit reason; transient errors propagate
        for a retry."""
        delivered = False
        options = self._options
        events = self._teammate.idle(
            max_idle_polls=options.max_idle_polls,
            poll_interval=options.poll_interval,
            slots=options.slots,
            # A slot whose claim ended under a running handler stays taken until the
            # handler returns (`_work` frees it), so no claim comes that no worker can start.
            hold_slots_until_freed=True,
        )
        try:
            for event in events:
                delivered = self._connected = True
                exit_reason = self._dispatch(event)
                if exit_reason is not None:
                    return exit_reason
        except CorralError as exc:
            if delivered and is_transient(exc):
                _log.info("the stream broke (%s); reconnecting", exc)
                raise _StreamBroke from exc
            raise
        finally:
            events.close()
        if delivered:
            raise _StreamBroke
        raise Unavailable("the daemon ended the stream without sending anything")

    def _dispatch(self, event: IdleEvent) -> ExitReason | None:
        if isinstance(event, Claim):
            self._workers.spawn(self._work, event)
        elif isinstance(event, Message):
            if self._options.on_message is not None:
                invoke(self._options.on_message, event)
        elif isinstance(event, PlanDecision):
            return self._on_plan_decision(event)
        elif isinstance(event, ShutdownRequest):
            self._shut_down(event)
            return ExitReason.SHUTDOWN
        elif isinstance(event, ProposalsDecided):
            decided = "approved" if event.approve else "rejected"
            because = f": {event.feedback.splitlines()[0][:200]}" if event.feedback else ""
            _log.info("the lead %s the proposed tasks %s%s", decided, ", ".join(event.task_ids), because)
        elif isinstance(event, IdleTimeout):
            return ExitReason.IDLE_TIMEOUT
        elif isinstance(event, BudgetExhausted):
            spent, budget = event.spent, event.budget
            _log.warning(
                "budget spent (%d tokens of %s, %d cost micros of %s): no new claim until the Lead raises it",
                spent.tokens,
                budget.max_tokens or "no limit",
                spent.cost_micros,
                budget.max_cost_micros or "no limit",
            )
        return None

    def _on_plan_decision(self, decision: PlanDecision) -> ExitReason | None:
        if decision.approve or not self._plan_id or decision.plan_id != self._plan_id:
            return None  # approved, or about a plan this run did not submit
        self._plan_feedback = decision.feedback
        # The loop returns without resuming idle(), which would have acked.
        self._quietly(self._teammate.ack, decision.seq)
        return ExitReason.PLAN_REJECTED

    def _shut_down(self, request: ShutdownRequest) -> None:
        self._workers.wait()
        try:
            self._retry(
                self._teammate.respond_shutdown,
                request.request_id,
                approve=True,
                reason=shutdown_reason(request),
            )
        except CorralError as exc:
            # e.g. the deadline passed and the daemon removed us already
            _log.warning("answering shutdown request %s failed: %s", request.request_id, exc)
        self._quietly(self._teammate.ack, request.seq)

    # ------------------------------------------------------------ claims

    def _work(self, claim: Claim) -> None:
        if claim.review is not None:
            self._review(claim)
            return
        context_token = _current_claim.set(claim)
        try:
            with claim.keepalive():
                try:
                    self._workspaces.enter(claim)
                    with handler_span(claim.task.id, claim.attempt, claim.task.trace_parent), writing_output_to(claim):
                        outcome = run_handler(self._handler, claim.task, stop=claim.ended)
                    claim.check()  # ended meanwhile (an asyncio handler was cancelled): drop the outcome
                    result, error = encode_result(outcome), None
                except Exception as exc:  # noqa: BLE001 (it fails the task)
                    result, error = b"", exc
                error = self._workspaces.leave(claim, error)  # still under the keepalive: commits take time
        except BaseException:
            # Torn down mid-handler (asyncio cancels the run's tasks), or the
            # handler raised past Exception: hand the task back at once.
            self._quietly(claim.release)
            raise
        finally:
            _current_claim.reset(context_token)
        if claim.split:
            # The handler ended the claim itself: there is no outcome to report.
            self._tally.add(split=1)
            _log.info("task %s: split; it comes back once the tasks it waits for complete", claim.task.id)
            if error is not None:
                _log.warning("task %s: the handler raised after its split (ignored): %s", claim.task.id, error)
            return
        # A failure to report is logged by the workers.
        if not self._report(claim, result, error):
            # The handler is done with a claim it did not finish: its slot is free now.
            self._quietly(claim.free_slot)

    def _review(self, claim: Claim) -> None:
        """A review's claim: the reviewer's verdict decides it. No reviewer, or a verdict
        refused, releases it (offered to another reviewer); a reviewer that raises fails
        it (offered again, to this teammate too)."""
        review = claim.review
        assert review is not None
        reviewer = self._options.reviewer
        if reviewer is None:
            if not self._declined_a_review:
                self._declined_a_review = True
                _log.warning(
                    "task %s: a review's claim came, but run_teammate has no reviewer=; "
                    "released for a teammate that reviews (said once)",
                    claim.task.id,
                )
            self._quietly(claim.release)
            return
        context_token = _current_claim.set(claim)
        try:
            with claim.keepalive():
                try:
                    with handler_span(claim.task.id, claim.attempt, claim.task.trace_parent), writing_output_to(claim):
                        verdict = run_handler(functools.partial(reviewer, claim.task), review.result, stop=claim.ended)
                    claim.check()
                    if not isinstance(verdict, (Approve, Reject)):
                        returned = type(verdict).__name__
                        raise TypeError(f"reviewer returned {returned}; return corral.Approve() or corral.Reject(...)")
                    check_verdict(verdict, "verdict.feedback")  # e.g. a Reject with no feedback
                except LeaseLost:
                    self._tally.add(lost=1)
                    self._quietly(claim.free_slot)
                    return
                except Exception as exc:  # noqa: BLE001 (the review is offered again)
                    _log.warning("task %s: the reviewer raised (%s); the review is offered again", claim.task.id, exc)
                    _log.debug("task %s: the reviewer's traceback", claim.task.id, exc_info=exc)
                    # Failed, not released: this teammate may take it again (a release says "not mine").
                    self._quietly(functools.partial(claim.fail, f"the reviewer raised: {exc}"[:4096]))
                    return
        except BaseException:
            self._quietly(claim.release)
            raise
        finally:
            _current_claim.reset(context_token)
        try:
            self._retry(claim.decide, verdict)
        except DEAD_CLAIM_ERRORS as exc:
            _log.warning("task %s: verdict dropped, claim is dead (%s)", claim.task.id, exc)
            self._tally.add(lost=1)
            self._quietly(claim.free_slot)
        except CorralError as exc:
            _log.error("task %s: the verdict could not be given (%s); released", claim.task.id, exc)
            self._tally.add(lost=1)
            self._quietly(claim.release)
        else:
            self._tally.add(reviewed=1)
            decided = "approved" if verdict.approve else f"rejected: {verdict.feedback.splitlines()[0][:200]}"
            _log.info("task %s: review round %d %s", claim.task.id, review.round, decided)

    def _report(
        self,
        claim: Claim,
        result: bytes,
        error: Exception | None,
    ) -> bool:
        """Reports the handler's outcome; True when that finished the claim (which frees its slot)."""
        proven_lost = claim.lost_error is not None and claim.lost_error.cause is not None
        if proven_lost or isinstance(error, LeaseLost):
            self._tally.add(lost=1)
            if not proven_lost:
                # The loss was only a guess: hand the task back in case it is ours.
                self._quietly(claim.release)
            return False
        try:
            if isinstance(error, NeedsInput):
                error = self._ask(claim, error.question)
                if error is None:
                    self._tally.add(asked=1)
                    return True
            elif error is None:
                error = self._complete(claim, result)
                if error is None:
                    self._tally.add(completed=1)
                    return True
            failure, retryable = describe_failure(error), is_retryable(error)
            _log_failure(claim, failure, retryable, error)
            self._retry(claim.fail, failure, retryable=retryable)
            self._tally.add(failed=1)
            return True
        except DEAD_CLAIM_ERRORS as exc:
            _log.warning("task %s: outcome dropped, claim is dead (%s)", claim.task.id, exc)
            self._tally.add(lost=1)
        except CorralError as exc:
            # e.g. removed for missing a shutdown deadline, or the daemon stayed down
            _log.error("task %s: outcome could not be reported (%s)", claim.task.id, exc)
            self._tally.add(lost=1)
        return False

    def _complete(self, claim: Claim, result: bytes) -> Exception | None:
        """Complete the task; returns the failure to report if the result is refused."""
        try:
            self._retry(claim.complete, result)
        except InvalidArgument as exc:
            # e.g. a result over the size limit: retrying cannot help
            return PermanentFailure(f"result refused by the daemon: {exc}")
        return None

    def _ask(self, claim: Claim, question: str) -> Exception | None:
        """Ask the Lead; returns the failure to report if the question is refused."""
        try:
            self._retry(claim.ask, question)
        except DEAD_CLAIM_ERRORS:
            raise
        except (InvalidArgument, FailedPrecondition) as exc:
            # An empty or oversized question, or a task that asked too many: the
            # handler would ask the same again, so fail the task for good.
            return PermanentFailure(f"the handler's question was refused ({exc})")
        _log.info("task %s: asked the lead: %s", claim.task.id, question.splitlines()[0][:200])
        return None

    def _quietly(self, call: Callable[..., Any], *args: Any) -> None:
        try:
            call(*args)
        except CorralError as exc:
            _log.debug("ignored: %s", exc)


def _log_failure(claim: Claim, failure: str, retryable: bool, error: Exception) -> None:
    """One line for a failed task and what happens next; the traceback at debug level
    (the board keeps the message, the traceback stays with the teammate)."""
    attempt, most = claim.attempt, claim.task.max_attempts
    if not retryable:
        then = "it will not be retried"
    elif most and attempt >= most:
        then = "no attempts are left"
    else:
        then = "it will be retried"
    of = f" of {most}" if most else ""
    summary = failure.splitlines()[0] if failure else ""
    _log.warning("task %s failed (attempt %d%s): %s; %s", claim.task.id, attempt, of, summary, then)
    _log.debug("task %s: the handler's traceback", claim.task.id, exc_info=error)
