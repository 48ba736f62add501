"""A teammate bridge's connection state: one client, one stream pump, the claims
the model holds (by task id; the model never sees a claim token), and lease renewal
while the agent is attentive.

The pump reads the teammate's stream (Session or Idle, through the SDK) into a
queue. After an inbox item it waits until the model has been shown that item and
calls `next_item` again; only then does it move on, which is when the SDK
acknowledges the item. So "acknowledged" means "a model saw it", and the
daemon's gate (design §5 step 3) stays shut until then.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import dataclasses
import logging
import time
from typing import Any

import tenacity

import corral
from corral import aio
from corral._claimstate import seconds_until
from corral._retry import is_transient

from . import views as view
from .errors import ToolFailure, failure_from_error
from .rendering import TextBudget

__all__ = ["LinkSettings", "TeammateLink"]

_log = logging.getLogger("corral.mcp")

_INBOX = (corral.Message, corral.ShutdownRequest, corral.PlanDecision, corral.ProposalsDecided)
# Inbox items the daemon sends no claim past until acknowledged.
_PROTOCOL = (corral.ShutdownRequest, corral.PlanDecision, corral.ProposalsDecided)
# What a finish call raises for a claim that is no longer live (the holder lost it).
_DEAD_CLAIM = (
    corral.LeaseExpired,
    corral.ClaimTokenMismatch,
    corral.TaskCanceled,
    corral.ClaimRevoked,
    corral.AttemptTimedOut,
)
# Finished claims remembered so a repeated complete_task gets the stored result.
_REMEMBER_FINISHED = 256


@dataclasses.dataclass(frozen=True)
class LinkSettings:
    quiet_limit: float = 30 * 60.0  # stop renewing after this long without a corral tool call
    progress_interval: float = 10.0  # a progress notification this often while next_item waits
    # The stream's idle polling (None: the daemon's defaults, 12 polls of 5 s before idle_timeout).
    max_idle_polls: int | None = None
    poll_interval: float | None = None


class TeammateLink:
    """Everything a teammate bridge keeps between tool calls."""

    def __init__(
        self,
        teammate: aio.Teammate,
        identity: corral.Identity,
        settings: LinkSettings,
        *,
        held_at_start: tuple[str, ...] = (),
    ) -> None:
        self.teammate = teammate
        self.identity = identity
        self.settings = settings
        self._claims: dict[str, aio.Claim] = {}  # shown to the model, by task id
        # Received but not yet shown (the daemon hands the next claim over with a completion):
        # renewed all the same, so a model that takes its time between calls loses nothing.
        self._unshown: dict[str, aio.Claim] = {}
        self._finished: collections.OrderedDict[str, aio.Claim] = collections.OrderedDict()
        # Claims this teammate held before the bridge started: shown again as `resumed`.
        self._resumable = set(held_at_start)
        # Stream items not yet shown; an inbox item comes with the gate its acknowledgement waits on.
        self._items: collections.deque[tuple[aio.IdleEvent, asyncio.Event | None]] = collections.deque()
        self._arrived = asyncio.Event()
        self._pump: asyncio.Task[None] | None = None
        self._shown_gate: asyncio.Event | None = None  # set it to acknowledge the inbox item last shown
        self._stream_error: corral.CorralError | None = None
        self._shutdown_request: corral.ShutdownRequest | None = None  # shown, not yet answered
        self._shutdown_approved = False
        self._budget_exhausted = False
        self._next_lock = asyncio.Lock()  # next_item calls are served one at a time, in call order
        self._last_call = time.monotonic()
        self._renewing = True
        self._watchdog = asyncio.create_task(self._watch_attention(), name="corral-mcp-quiet-limit")

    # ------------------------------------------------------------ lifecycle

    async def close(self) -> None:
        """Stop renewing and streaming and close the channel; held leases run out as designed."""
        for task in (self._pump, self._watchdog):
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        await self.teammate.close()

    def touch(self) -> str | None:
        """The agent called a tool: renew again if renewal had stopped; says so, if it had."""
        self._last_call = time.monotonic()
        if self._renewing:
            return None
        self._renewing = True
        for claim in self._renewed():
            if not claim.lost:
                claim.start_keepalive()
        limit = self.settings.quiet_limit
        return (
            f"lease renewal had stopped: no corral tool was called for {limit:g} s; it runs again now, "
            "but a lease may have ended meanwhile (finishing that task then says LEASE_EXPIRED)"
        )

    async def _watch_attention(self) -> None:
        limit = self.settings.quiet_limit
        while True:
            quiet_for = time.monotonic() - self._last_call
            if self._renewing and quiet_for >= limit:
                self._renewing = False
                _log.warning("no corral tool call for %gs: lease renewal stopped", limit)
                for claim in self._renewed():
                    await claim.stop_keepalive()
                quiet_for = 0.0
            await asyncio.sleep(max(limit - quiet_for, 0.05))

    # ------------------------------------------------------------ the stream pump

    def _ensure_pump(self) -> None:
        if self._pump is None or self._pump.done():
            self._stream_error = None
            self._pump = asyncio.create_task(self._run_pump(), name="corral-mcp-stream")

    async def _run_pump(self) -> None:
        while True:
            retrying = tenacity.AsyncRetrying(
                retry=tenacity.retry_if_exception(is_transient),
                wait=tenacity.wait_random_exponential(multiplier=0.1, max=5.0),
                before_sleep=self._note_outage,
                reraise=True,
            )
            try:
                ended: bool = await retrying(self._stream_once)
            except corral.CorralError as exc:
                _log.warning("the stream ended: %s", exc)
                self._stream_error = exc
                self._arrived.set()
                return
            if ended:
                self._arrived.set()
                return

    def _note_outage(self, state: tenacity.RetryCallState) -> None:
        exc = state.outcome.exception() if state.outcome else None
        if isinstance(exc, corral.CorralError):
            self._stream_error = exc
            self._arrived.set()
        _log.info("stream broke (%s); reconnecting", exc)

    async def _stream_once(self) -> bool:
        """One stream: True when it ended normally, False when it broke after delivering
        (reconnect with a fresh backoff); raises when it broke before delivering anything."""
        delivered = False
        try:
            stream = self.teammate.idle(
                max_idle_polls=self.settings.max_idle_polls, poll_interval=self.settings.poll_interval
            )
            async with contextlib.aclosing(stream) as events:
                async for event in events:
                    delivered = True
                    self._stream_error = None
                    if isinstance(event, corral.BudgetExhausted):
                        self._budget_exhausted = True
                        continue
                    if isinstance(event, aio.Claim):
                        self._unshown[event.token] = event
                        if self._renewing:
                            event.start_keepalive()
                    gate = asyncio.Event() if isinstance(event, _INBOX) else None
                    self._items.append((event, gate))
                    self._arrived.set()
                    if gate is not None:
                        await gate.wait()  # until the model has seen it and called next_item again
        except corral.CorralError as exc:
            if delivered and is_transient(exc):
                self._stream_error = exc
                _log.info("stream broke (%s); reconnecting", exc)
                return False
            raise
        return True

    # ------------------------------------------------------------ next_item

    async def next_item(self, wait_seconds: float, progress: Any) -> dict[str, Any]:
        """The one next thing for the model (design §5 as calls), waiting up to `wait_seconds`."""
        async with self._next_lock:
            if self._shown_gate is not None:
                self._shown_gate.set()  # the model saw the last inbox item: acknowledge it
                self._shown_gate = None
            if not self._shutdown_approved:
                self._ensure_pump()
            deadline = time.monotonic() + wait_seconds
            restarted = False
            while True:
                if self._items:
                    item, self._shown_gate = self._items.popleft()
                    return self._present(item)
                error = self._stream_error
                if error is not None and (self._pump is None or self._pump.done()):
                    raise failure_from_error(error)
                left = deadline - time.monotonic()
                if left <= 0 or self._shutdown_approved:
                    break
                self._arrived.clear()
                try:
                    await asyncio.wait_for(self._arrived.wait(), min(left, self.settings.progress_interval))
                except TimeoutError:
                    left = deadline - time.monotonic()
                    if left > 0:
                        await progress(f"waiting for work: {left:.0f} s left of this call")
                if self._pump is not None and self._pump.done() and not self._items and self._stream_error is None:
                    # The stream ended (after an idle_timeout already shown, say): wait on a new
                    # one, once per call, so a stream that keeps ending cannot spin here.
                    if restarted or self._shutdown_approved:
                        break
                    restarted = True
                    self._ensure_pump()
            # Reconnecting after an outage: the gate check below asks the daemon, so a daemon still
            # down answers UNAVAILABLE, and one that is back answers what keeps work away.
            return await self._nothing()

    def _present(self, item: aio.IdleEvent) -> dict[str, Any]:
        if isinstance(item, aio.Claim):
            resumed = item.task.id in self._resumable
            self._resumable.discard(item.task.id)
            self._unshown.pop(item.token, None)
            self._claims[item.task.id] = item
            if item.review is not None:
                return {
                    "kind": "review",
                    "review": view.review(item, TextBudget(), resumed=resumed),
                    "hint": "judge the result, then answer with submit_review(task_id, approve, feedback); "
                    "feedback is required to reject",
                }
            return {"kind": "claim", "claim": view.claim(item, TextBudget(), resumed=resumed)}
        if isinstance(item, corral.ShutdownRequest):
            self._shutdown_request = item
            return {
                "kind": "shutdown_request",
                "shutdown_request": view.shutdown_request(item, TextBudget()),
                "hint": "answer with respond_shutdown(request_id, approve, reason); no work comes until you do",
            }
        if isinstance(item, corral.PlanDecision):
            return {"kind": "plan_decision", "plan_decision": view.plan_decision(item, TextBudget())}
        if isinstance(item, corral.ProposalsDecided):
            then = (
                "they are PENDING and claimed like any task"
                if item.approve
                else "they are CANCELED (feedback says why); a task you split on them is ready again without them"
            )
            return {
                "kind": "proposals_decided",
                "proposals_decided": view.proposals_decided(item, TextBudget()),
                "hint": f"the Lead {'approved' if item.approve else 'rejected'} tasks you proposed: {then}; "
                "call next_item",
            }
        if isinstance(item, corral.Message):
            return {"kind": "message", "message": view.message(item, TextBudget())}
        if isinstance(item, corral.ClaimEnded):
            return {
                "kind": "claim_ended",
                "claim_ended": view.claim_ended(item),
                "hint": "stop working on that task (do not complete it) and call next_item",
            }
        assert isinstance(item, corral.IdleTimeout), f"unexpected stream item {type(item).__name__}"
        return {
            "kind": "idle_timeout",
            "idle_timeout": {"idle_polls": item.idle_polls},
            "hint": "no work came for a while; call next_item again to keep waiting, or stop",
        }

    async def _nothing(self) -> dict[str, Any]:
        blocked, hint = await self.gate()
        return {"kind": "none", "blocked_by": blocked, "hint": hint}

    async def gate(self) -> tuple[str, str]:
        """Which gate keeps work away (a blocked_by value) and the tool that opens it."""
        if self._shutdown_approved:
            return "shutdown_pending", "you approved the shutdown: finish up and end your session"
        if self._shutdown_request is not None:
            rid = self._shutdown_request.request_id
            return "shutdown_pending", f"answer the shutdown request with respond_shutdown(request_id={rid!r}, ...)"
        if self._shown_gate is not None or any(isinstance(i, _PROTOCOL) for i, _ in self._items):
            return "protocol_unacknowledged", "a protocol message waits: call next_item to receive it"
        me = await self.my_info()
        if me is not None and me.status is corral.TeammateStatus.AWAITING_PLAN:
            return "plan_required", "submit a plan with submit_plan(plan), then call next_item for the decision"
        if me is not None and me.status is corral.TeammateStatus.SHUTTING_DOWN:
            return "shutdown_pending", "a shutdown request waits: call next_item to receive it"
        held = ", ".join(sorted(t for t, c in self._claims.items() if c.review is None))
        if held:
            return "no_ready_task", f"you hold {held}: finish it with complete_task, fail_task or release_task"
        reviews = ", ".join(sorted(self._claims))
        if reviews:
            return "no_ready_task", f"you hold the review of {reviews}: answer it with submit_review or release_task"
        if self._budget_exhausted:
            return "no_ready_task", "your budget is spent: no claims until the Lead raises it; call next_item later"
        return "no_ready_task", "no task is ready for you now; call next_item again to keep waiting"

    async def my_info(self) -> corral.TeammateInfo | None:
        for mate in await self.teammate.list_teammates():
            if mate.name == self.identity.name:
                return mate
        return None

    # ------------------------------------------------------------ claims by task id

    def _renewed(self) -> list[aio.Claim]:
        return [*self._claims.values(), *self._unshown.values()]

    def _claim(self, task_id: str, *, finished_too: bool = False) -> aio.Claim:
        claim = self._claims.get(task_id) or (self._finished.get(task_id) if finished_too else None)
        if claim is None:
            held = ", ".join(sorted(self._claims)) or "none"
            raise ToolFailure(
                "NOT_HELD",
                f"this bridge holds no claim on task {task_id!r} (held: {held}); only tasks next_item gave you "
                "can be renewed or finished",
            )
        return claim

    async def renew(self, task_id: str, progress: str, fraction: float | None, usage: corral.Usage | None) -> aio.Claim:
        claim = self._claim(task_id)
        try:
            if progress or fraction is not None:
                await claim.report_progress(progress, fraction, usage=usage)
            else:
                await claim.renew(usage=usage)
        except corral.CorralError as exc:
            raise self._claim_failure(task_id, exc) from None
        return claim

    async def complete(self, task_id: str, result: bytes, usage: corral.Usage | None) -> corral.Task:
        claim = self._claim(task_id, finished_too=True)
        if claim.review is not None:
            raise ToolFailure(
                "INVALID_ARGUMENT",
                f"task {task_id!r} is a review you hold, not work: answer it with submit_review(task_id, approve, "
                "feedback)",
            )
        return await self._finish(task_id, claim, claim.complete(result, usage=usage), remember=True)

    async def submit_review(self, task_id: str, verdict: corral.Verdict) -> corral.Task:
        """Answer the review of `task_id` this bridge holds (`Claim.decide`)."""
        claim = self._claims.get(task_id)
        if claim is None or claim.review is None:
            reviews = ", ".join(sorted(t for t, c in self._claims.items() if c.review is not None)) or "none"
            raise ToolFailure(
                "NOT_HELD",
                f"this bridge holds no review of task {task_id!r} (reviews held: {reviews}); only reviews next_item "
                "gave you can be answered",
            )
        return await self._finish(task_id, claim, claim.decide(verdict))

    async def fail(self, task_id: str, error: str, retryable: bool, usage: corral.Usage | None) -> corral.Task:
        claim = self._claim(task_id)
        return await self._finish(task_id, claim, claim.fail(error, retryable=retryable, usage=usage))

    async def release(self, task_id: str) -> corral.Task:
        claim = self._claim(task_id)
        return await self._finish(task_id, claim, claim.release())

    async def ask(self, task_id: str, question: str) -> corral.Task:
        """Ask the Lead about a held task (`Claim.ask`): the claim ends, the task waits
        NEEDS_INPUT.

        A refusal that leaves the claim alive (a task past its questions, an overloaded
        daemon) keeps it held and renewed; only a dead claim is dropped."""
        claim = self._claim(task_id)
        try:
            task = await claim.ask(question)
        except corral.CorralError as exc:
            if isinstance(exc, (*_DEAD_CLAIM, corral.Unauthenticated)):
                self._claims.pop(task_id, None)
                raise failure_from_error(exc, task_id=task_id) from None
            if self._renewing and not claim.lost:
                claim.start_keepalive()
            failure = failure_from_error(exc, task_id=task_id)
            raise ToolFailure(failure.reason, f"{failure.message}; you still hold the task") from None
        self._claims.pop(task_id, None)
        return task

    async def propose(self, specs: tuple[corral.TaskSpec, ...], source: str, block: bool) -> list[str]:
        """Propose tasks discovered from the held claim on `source` (`Claim.propose_tasks`;
        "": from no claim); returns their ids. With `block` that task is split: its claim
        ends (the SDK stops renewing it) and the bridge forgets it. A dead claim is dropped;
        other refusals leave the claim held."""
        if not source:
            return await self.teammate.propose_tasks(specs)
        claim = self._claims[source]
        try:
            ids = await claim.propose_tasks(specs, block=block)
        except (*_DEAD_CLAIM, corral.Unauthenticated) as exc:
            self._claims.pop(source, None)
            raise failure_from_error(exc, task_id=source) from None
        if block:
            self._claims.pop(source, None)
        return ids

    def proposal_source(self, task_id: str, block: bool) -> str:
        """The task a proposal comes from: `task_id` (NOT_HELD unless held), else the one
        task held ("" when none is, unless `block` needs one)."""
        if task_id:
            self._claim(task_id)  # NOT_HELD unless held
            return task_id
        work = sorted(t for t, c in self._claims.items() if c.review is None)
        if len(work) > 1:
            raise ToolFailure(
                "INVALID_ARGUMENT", f"task_id: you hold {', '.join(work)}: name the task the work was discovered from"
            )
        if not work and block:
            raise ToolFailure(
                "INVALID_ARGUMENT",
                "block_current_task: you hold no task to split; propose without it, or call next_item for a task",
            )
        return work[0] if work else ""

    async def append_output(self, task_id: str, text: str) -> tuple[int, int]:
        """Append `text` to a held claim's live output now (`Claim.append_output`): the
        claim's attempt and the output's size in bytes after the append."""
        claim = self._claim(task_id)
        try:
            size = await claim.append_output(text)
        except corral.CorralError as exc:
            raise self._claim_failure(task_id, exc) from None
        return claim.attempt, size

    async def put_artifact(self, task_id: str, name: str, data: bytes, media_type: str) -> corral.Artifact:
        """Attach `data` to a held claim's task as an artifact (`Claim.put_artifact`)."""
        claim = self._claim(task_id)
        try:
            return await claim.put_artifact(name, data, media_type)
        except corral.CorralError as exc:
            raise self._claim_failure(task_id, exc) from None

    async def _finish(self, task_id: str, claim: aio.Claim, call: Any, *, remember: bool = False) -> corral.Task:
        try:
            task: corral.Task = await call
        except corral.CorralError as exc:
            if task_id in self._claims and self._renewing and not claim.lost:
                claim.start_keepalive()  # not finished: it stays held and renewed
            raise self._claim_failure(task_id, exc) from None
        self._claims.pop(task_id, None)
        if remember:
            self._finished[task_id] = claim
            while len(self._finished) > _REMEMBER_FINISHED:
                self._finished.popitem(last=False)
        return task

    def _claim_failure(self, task_id: str, exc: corral.CorralError) -> ToolFailure:
        if isinstance(exc, (corral.FailedPrecondition, corral.Unauthenticated)):
            self._claims.pop(task_id, None)  # the claim is dead: the model must not keep it
        return failure_from_error(exc, task_id=task_id)

    # ------------------------------------------------------------ plans and shutdown

    async def respond_shutdown(self, request_id: str, approve: bool, reason: str) -> None:
        await self.teammate.respond_shutdown(request_id, approve=approve, reason=reason)
        if self._shutdown_request is not None and self._shutdown_request.request_id == request_id:
            self._shutdown_request = None
        if approve:
            self._shutdown_approved = True
            self._claims.clear()  # the daemon released them
            self._unshown.clear()
            self._arrived.set()

    # ------------------------------------------------------------ attention

    def attention(self) -> list[str]:
        """What waits for this teammate, said in every result so a busy model learns of it."""
        notes: list[str] = []
        waiting = [item for item, _ in self._items]
        if any(isinstance(i, corral.ShutdownRequest) for i in waiting):
            notes.append("a shutdown request from the Lead waits: call next_item")
        elif any(isinstance(i, corral.PlanDecision) for i in waiting):
            notes.append("a plan decision waits: call next_item")
        elif any(isinstance(i, corral.ProposalsDecided) for i in waiting):
            notes.append("the Lead's decision on tasks you proposed waits: call next_item")
        elif any(claim.protocol_pending for claim in self._claims.values()):
            notes.append("a protocol message from the Lead waits: call next_item")
        if self._shutdown_request is not None:
            notes.append(f"answer shutdown request {self._shutdown_request.request_id!r} with respond_shutdown")
        for item in waiting:
            if isinstance(item, corral.ClaimEnded):
                notes.append(f"your claim on task {item.task_id!r} ended ({item.reason.name}): call next_item")
        return notes

    def claims_status(self) -> list[dict[str, Any]]:
        return [
            {
                "task_id": claim.task.id,
                "kind": "review" if claim.review is not None else "claim",
                "attempt": claim.attempt,
                "lease_seconds_left": round(seconds_until(claim.lease_expire_time), 3),
                "lost": claim.lost,
            }
            for claim in self._claims.values()
        ]

    @property
    def renewing(self) -> bool:
        return self._renewing
