"""`corral.aio.run_teammate`: the whole teammate loop on asyncio."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import datetime
import inspect
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from corral._claimstate import DEAD_CLAIM_ERRORS
from corral._errors import (
    CorralError,
    InvalidArgument,
    LeaseLost,
    PermanentFailure,
    Unauthenticated,
    Unavailable,
)
from corral._handling import (
    RunOptions,
    Tally,
    describe_failure,
    encode_result,
    is_retryable,
    shutdown_reason,
)
from corral._retry import async_retrying, is_transient
from corral._types import ExitReason, IdleTimeout, Message, PlanDecision, RunSummary, ShutdownRequest, Task
from corral.aio._claim import Claim
from corral.aio._teammate import IdleEvent, Teammate

__all__ = ["current_claim", "run_teammate"]

_log = logging.getLogger("corral.runner")

_current_claim: contextvars.ContextVar[Claim] = contextvars.ContextVar("corral_aio_current_claim")

_Result = bytes | str | None
Handler = Callable[[Task], _Result | Awaitable[_Result]]


def current_claim() -> Claim:
    """The claim whose task the calling handler works on; LookupError outside one."""
    return _current_claim.get()


async def run_teammate(
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
) -> RunSummary:
    """Connect as a teammate and work until told to stop (see `corral.run_teammate`).

    `handler` may be a coroutine function (awaited on the event loop) or a
    plain function (run in a worker thread so it cannot stall keepalives).
    `on_message` may likewise return an awaitable.
    """
    options = RunOptions(
        plan=plan,
        slots=slots,
        max_idle_polls=max_idle_polls,
        poll_interval=poll_interval,
        on_message=on_message,
        stop_on_idle_timeout=stop_on_idle_timeout,
        reconnect_timeout=reconnect_timeout,
    )
    async with await Teammate.connect(address, token) as teammate:
        return await _Runner(teammate, handler, options).run()


class _StreamBroke(Exception):
    """A stream that had delivered events broke: reconnect with a fresh outage budget."""


class _Runner:
    def __init__(self, teammate: Teammate, handler: Handler, options: RunOptions) -> None:
        self._teammate = teammate
        self._handler = handler
        self._options = options
        self._tally = Tally()
        self._in_flight: set[asyncio.Task[None]] = set()
        self._connected = False
        self._plan_id = ""
        self._plan_feedback = ""

    async def run(self) -> RunSummary:
        try:
            if self._options.plan is not None:
                self._plan_id = await self._retry(self._teammate.submit_plan, self._options.plan)
            exit_reason = await self._serve()
        except BaseException:
            for work in self._in_flight:
                work.cancel()
            raise
        finally:
            # Running handlers hold leases: let them finish (or unwind) and report.
            await asyncio.gather(*self._in_flight, return_exceptions=True)
        return self._tally.summary(exit_reason, plan_id=self._plan_id, plan_feedback=self._plan_feedback)

    async def _retry(self, call: Callable[..., Awaitable[Any]], *args: Any, **kwargs: Any) -> Any:
        return await async_retrying(self._options.reconnect_timeout)(call, *args, **kwargs)

    # ------------------------------------------------------------ streams

    async def _serve(self) -> ExitReason:
        while True:
            try:
                exit_reason: ExitReason = await self._retry(self._one_stream)
            except _StreamBroke:
                continue
            except Unauthenticated:
                if self._connected:  # the credential worked before: the Lead removed us
                    return ExitReason.REMOVED
                raise
            if exit_reason is ExitReason.IDLE_TIMEOUT and not self._options.stop_on_idle_timeout:
                continue
            return exit_reason

    async def _one_stream(self) -> ExitReason:
        delivered = False
        options = self._options
        events = self._teammate.idle(
            max_idle_polls=options.max_idle_polls, poll_interval=options.poll_interval, slots=options.slots
        )
        try:
            async for event in events:
                delivered = self._connected = True
                exit_reason = await self._dispatch(event)
                if exit_reason is not None:
                    return exit_reason
        except CorralError as exc:
            if delivered and is_transient(exc):
                _log.info("Idle stream broke (%s); reconnecting", exc)
                raise _StreamBroke from exc
            raise
        finally:
            await events.aclose()
        if delivered:
            raise _StreamBroke
        raise Unavailable("the daemon ended the Idle stream without sending anything")

    async def _dispatch(self, event: IdleEvent) -> ExitReason | None:
        if isinstance(event, Claim):
            work = asyncio.create_task(self._work(event), name=f"corral-handler-{event.task.id}")
            self._in_flight.add(work)
            work.add_done_callback(self._in_flight.discard)
        elif isinstance(event, Message):
            if self._options.on_message is not None:
                outcome = self._options.on_message(event)
                if inspect.isawaitable(outcome):
                    await outcome
        elif isinstance(event, PlanDecision):
            return await self._on_plan_decision(event)
        elif isinstance(event, ShutdownRequest):
            await self._shut_down(event)
            return ExitReason.SHUTDOWN
        elif isinstance(event, IdleTimeout):
            return ExitReason.IDLE_TIMEOUT
        return None

    async def _on_plan_decision(self, decision: PlanDecision) -> ExitReason | None:
        if decision.approve or not self._plan_id or decision.plan_id != self._plan_id:
            return None
        self._plan_feedback = decision.feedback
        await self._quietly(self._teammate.ack(decision.seq))
        return ExitReason.PLAN_REJECTED

    async def _shut_down(self, request: ShutdownRequest) -> None:
        await asyncio.gather(*self._in_flight, return_exceptions=True)
        try:
            await self._retry(
                self._teammate.respond_shutdown, request.request_id, approve=True, reason=shutdown_reason(request)
            )
        except CorralError as exc:
            _log.warning("answering shutdown request %s failed: %s", request.request_id, exc)
        await self._quietly(self._teammate.ack(request.seq))

    # ------------------------------------------------------------ claims

    async def _work(self, claim: Claim) -> None:
        _current_claim.set(claim)  # this task runs in its own copy of the context
        try:
            async with claim.keepalive():
                try:
                    result, error = encode_result(await self._call_handler(claim.task)), None
                except Exception as exc:  # the handler's failure is the task's failure
                    result, error = b"", exc
        except asyncio.CancelledError:
            await self._quietly(claim.release())  # the run is being torn down: hand the task back
            raise
        try:
            await self._report(claim, result, error)
        except Exception:
            _log.exception("reporting the outcome of task %s failed", claim.task.id)

    async def _call_handler(self, task: Task) -> Any:
        if inspect.iscoroutinefunction(self._handler):
            return await self._handler(task)
        # A plain function runs in a thread (with this context, so current_claim works).
        outcome = await asyncio.to_thread(self._handler, task)
        return await outcome if inspect.isawaitable(outcome) else outcome

    async def _report(self, claim: Claim, result: bytes, error: Exception | None) -> None:
        proven_lost = claim.lost_error is not None and claim.lost_error.cause is not None
        if proven_lost or isinstance(error, LeaseLost):
            self._tally.add(lost=1)
            if not proven_lost:
                await self._quietly(claim.release())
            return
        try:
            if error is None:
                error = await self._complete(claim, result)
                if error is None:
                    self._tally.add(completed=1)
                    return
            await self._retry(claim.fail, describe_failure(error), retryable=is_retryable(error))
            self._tally.add(failed=1)
        except DEAD_CLAIM_ERRORS as exc:
            _log.warning("task %s: outcome dropped, claim is dead (%s)", claim.task.id, exc)
            self._tally.add(lost=1)
        except CorralError as exc:  # e.g. removed for missing a shutdown deadline, or the daemon stayed down
            _log.error("task %s: outcome could not be reported (%s)", claim.task.id, exc)
            self._tally.add(lost=1)

    async def _complete(self, claim: Claim, result: bytes) -> Exception | None:
        try:
            await self._retry(claim.complete, result)
        except InvalidArgument as exc:
            return PermanentFailure(f"result refused by the daemon: {exc}")
        return None

    async def _quietly(self, call: Awaitable[Any]) -> None:
        with contextlib.suppress(CorralError):
            await call
