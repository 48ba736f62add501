# Generated from client/corral/aio/_claim.py by scripts/unasync.py: do not edit.
# Change the asyncio source and run `make unasync`.
"""The claim handle and its lease keepalive."""

from __future__ import annotations

import contextlib
import datetime
import logging
import os
import time
from collections.abc import Callable, Iterable, Iterator
from typing import Any, Protocol

from corral import _convert
from corral._artifacts import ArtifactSource, artifact_source, media_type_for
from corral._claimoutput import ClaimOutput
from corral._claimstate import (
    DEAD_CLAIM_ERRORS,
    ClaimState,
    check_complete,
    check_decide,
    check_output,
    check_progress,
    check_question,
    check_usage,
    claim_ended_error,
    end_reason_of,
    retry_delay_after_renew_error,
)
from corral._errors import ClaimEndedError, CorralError
from corral._primitives import Lock, Ticker
from corral._retry import is_transient
from corral._types import Artifact, ClaimEnded, ClaimEndReason, ClaimInfo, Task, TaskSpec, Usage, Verdict

__all__ = ["Claim", "ClaimCalls"]

_log = logging.getLogger("corral.claim")


class ClaimCalls(Protocol):
    """What a claim asks of the teammate connection that received it."""

    def renew(
        self,
        task_id: str,
        token: str,
        *,
        timeout: float,
        progress: str = "",
        fraction: float | None = None,
        usage: Usage | None = None,
    ) -> tuple[datetime.datetime, bool]:
        """RenewLease (with progress and usage, if any): the new expiry, and whether a protocol message waits."""

    def complete(
        self, task_id: str, token: str, result: bytes, usage: Usage | None = None, verdict: Verdict | None = None
    ) -> Task:
        """CompleteTask (a review's claim: with its verdict and no result)."""

    def fail(self, task_id: str, token: str, error: str, retryable: bool, usage: Usage | None = None) -> Task:
        """FailTask."""

    def release(self, task_id: str, token: str) -> Task:
        """ReleaseTask."""

    def ask(self, task_id: str, token: str, question: str) -> Task:
        """AskQuestion."""

    def propose(self, request: Any) -> tuple[list[Task], Task | None]:
        """ProposeTasks (a `pb.ProposeTasksRequest`): the tasks, and a split's task."""

    def append_output(self, task_id: str, token: str, data: bytes) -> tuple[int, int]:
        """AppendOutput: the attempt appended to, and its output's size after the append."""

    def put_artifact(self, task_id: str, token: str, name: str, media_type: str, source: ArtifactSource) -> Artifact:
        """PutArtifact: the artifact as attached."""

    def forget(self, token: str) -> None:
        """The claim ended: stop counting it as held."""

    def free_slot(self, token: str) -> None:
        """FreeSlot: the work of this claim stopped."""


class Claim(ClaimState):
    """An exclusive, leased hold on one task, as yielded by `Teammate.idle`.

    Finish it with exactly one of `complete`, `fail`, `release`, `ask` or a split
    (`propose_tasks(..., block=True)`); a review's claim (`review` set) with `decide`
    instead of `complete`. Keep the
    lease alive while you work with `with claim.keepalive(): ...`
    (renews at a third of the lease in the background: a thread in `corral`,
    an asyncio task in `corral.aio`). When a renew proves the claim dead
    (lease expired, token superseded, task canceled) the keepalive stops and
    records it: `claim.lost` turns True, `claim.ended` is set and
    `claim.check()` raises ClaimEndedError (a LeaseLost), so long work should
    poll `ended` or call `check()` between steps. When the daemon ends the
    claim under its holder (expiry, cancel, RevokeClaim, attempt timeout) the
    stream says so at once: `claim.ended` is set, `claim.end_reason` gives the
    reason, the keepalive stops renewing, and `check()` raises ClaimEndedError
    with the matching error as cause.

    `output(text)` streams what the work is doing to the attempt's live output,
    which the Lead and the board follow (`tail_output`); `put_artifact` attaches
    a file the work made to the task.
    """

    def __init__(self, info: ClaimInfo, calls: ClaimCalls) -> None:
        super().__init__(info)
        self._calls = calls
        self._lock = Lock()
        self._keepalive: Ticker | None = None
        self._output = ClaimOutput(info.task.id, self._append_output)

    # ------------------------------------------------------------ calls

    def renew(self, *, usage: Usage | None = None) -> datetime.datetime:
        """Extend the lease by its duration; returns the new expiry. `usage` reports
        what the work spent since the last report (added to the task's, this
        teammate's and the board's sums; a spent budget stops new claims).

        Raises LeaseExpired / ClaimTokenMismatch / TaskCanceled (and records
        the loss) when the claim is dead, InvalidArgument (before any call) for
        negative usage counts or a model name over 200 characters.
        """
        check_usage(usage)
        return self._renew("", None, usage)

    def report_progress(
        self, text: str, fraction: float | None = None, *, usage: Usage | None = None
    ) -> datetime.datetime:
        """Tell the Lead how far the work got ("running tests, 3/5", 0.6): a renew
        now that stores `text` (at most 1 KiB of UTF-8) and `fraction` (0 to 1, or
        None: not known) on the task, and counts `usage` as `renew` does; returns
        the new expiry, like `renew`.

        Raises InvalidArgument, before any call, for text, a fraction or usage out
        of bounds. Watch shows at most one progress change per task per second.
        """
        check_progress(text, fraction)
        check_usage(usage)
        return self._renew(text, fraction, usage)

    def _renew(self, progress: str, fraction: float | None, usage: Usage | None = None) -> datetime.datetime:
        sent_at = time.monotonic()
        timeout = max(self._lease_seconds, 1.0)
        try:
            expire_time, protocol_pending = self._calls.renew(
                self.task.id, self.token, timeout=timeout, progress=progress, fraction=fraction, usage=usage
            )
        except DEAD_CLAIM_ERRORS as exc:
            self._record_lost(exc)
            raise
        with self._lock:
            self._lease_expire_time = expire_time
            self._protocol_pending = protocol_pending
            # Measured from when the request left: the daemon's lease started later.
            self._local_expiry = sent_at + self._lease_seconds
        return expire_time

    def complete(self, result: bytes | str = b"", *, usage: Usage | None = None) -> Task:
        """Finish the task with `result`; safe to repeat (the daemon is idempotent, and
        counts `usage`, what the work spent since the last report, once)."""
        check_usage(usage)
        check_complete(self.review)
        payload = result.encode("utf-8") if isinstance(result, str) else result
        return self._finish(self._calls.complete, payload, usage)

    def decide(self, verdict: Verdict, *, usage: Usage | None = None) -> Task:
        """Answer a review's claim (`review` set): `Approve()` completes the task with
        the reviewed result (its dependents get it); `Reject(feedback)` sends it back
        for rework, where the next work claim carries the feedback and the rejected
        result (or fails it, once its policy's max_rounds rejections are reached).
        One method taking a verdict value, rather than approve() and reject(): the
        same `Approve` / `Reject` a `run_teammate` reviewer returns and
        `Lead.review_task` takes. Returns the task as the verdict left it.

        Raises InvalidArgument, before any call, on a work claim (finish it with
        `complete`), for a Reject with no feedback, feedback over 64 KiB, or a value
        that is not an Approve or a Reject; for a claim no longer live, what
        `complete` raises.
        """
        check_usage(usage)
        check_decide(self.review, verdict)
        return self._finish(self._calls.complete, b"", usage, verdict)

    def fail(self, error: str, *, retryable: bool = True, usage: Usage | None = None) -> Task:
        """Report failure; retryable ones go back to PENDING while attempts remain.
        `usage` is what the work spent since the last report."""
        check_usage(usage)
        return self._finish(self._calls.fail, error, retryable, usage)

    def release(self) -> Task:
        """Give the task back without using up an attempt."""
        return self._finish(self._calls.release)

    def ask(self, question: str) -> Task:
        """Ask the Lead `question` rather than guess, ending the claim (no attempt used):
        the task waits NEEDS_INPUT, claimed by no one, until `Lead.answer_question`;
        then its next claim carries every question and answer so far in `answers`.
        Returns the task as the question left it (NEEDS_INPUT, `question` set).

        Raises InvalidArgument, before any call, for a question with no text or over
        64 KiB of UTF-8; FailedPrecondition once the task has asked 20 questions
        (complete or fail it instead); and, for a claim no longer live, what `release`
        raises.
        """
        check_question(question)
        return self._finish(self._calls.ask, question)

    def propose_tasks(self, specs: Iterable[TaskSpec], *, block: bool = False) -> list[str]:
        """Propose tasks discovered while working on this claim; returns their ids.
        They record where they came from (`Task.discovered_from` is this task,
        `proposed_by` this teammate) and, as the Lead's policy for this teammate says
        (`Lead.set_task_creation`), are PROPOSED, waiting for the Lead's decision (a
        `ProposalsDecided` on the stream says it), or PENDING at once. The claim
        goes on: keep working, or finish it as usual.

        With `block`, the task is split instead: it gains the proposed tasks as
        dependencies, the claim ends (no attempt used; `split` turns True, the
        keepalive stops, the slot is free) and the task is PENDING until they
        complete; its next claim carries their results in `dependency_results`. If
        the Lead rejects one, that dependency is dropped and the task is ready again.
        In `run_teammate`, return from the handler after a split: its outcome is
        not reported.

        1 to 100 specs, checked as `Lead.create_tasks` checks a batch (they may depend
        on tasks on the board and on each other; their ids must be new, AlreadyExists
        otherwise), none with a priority above this task's (InvalidArgument). Raises
        PermissionDenied when the Lead denies this teammate task creation,
        FailedPrecondition when 1,000 of its proposals already wait, InvalidArgument
        for a split that would close a dependency cycle; and, for a claim no longer
        live, what `renew` raises (and records the loss). Any other error leaves the
        claim as it was.
        """
        request = _convert.propose_tasks_request(specs, self.task.id, self.token, block=block)
        if not block:
            return self._propose(request)
        with self._lock:
            renewing = self._keepalive is not None
        # No renew may race the split, which ends the claim: it would find it dead.
        self.stop_keepalive()
        self._output.flush()
        try:
            ids = self._propose(request)
        except BaseException:
            if renewing and self._lost is None:
                self.start_keepalive()
            raise
        self._output.close()
        self._split = True
        self._calls.forget(self.token)
        return ids

    def _propose(self, request: Any) -> list[str]:
        try:
            tasks, _ = self._calls.propose(request)
        except DEAD_CLAIM_ERRORS as exc:
            self._record_lost(exc)
            raise
        return [task.id for task in tasks]

    def free_slot(self) -> None:
        """Say that the work on this claim has stopped without finishing it (its claim
        ended under it, or its outcome could not be reported): the slot may take a new
        claim. Needed only on a stream opened with `idle(hold_slots_until_freed=True)`,
        where such a slot stays taken until then; completing, failing, releasing or
        asking about the claim frees it too. Saying it again changes nothing."""
        self._calls.free_slot(self.token)

    def _finish(self, call: Callable[..., Any], *args: Any) -> Task:
        self.stop_keepalive()
        self._output.flush()  # the output is whole when the attempt ends
        try:
            task: Task = call(self.task.id, self.token, *args)
        except DEAD_CLAIM_ERRORS:
            self._calls.forget(self.token)
            self._output.close()
            raise
        self._output.close()
        # Any other error leaves the claim held, so the call can be retried.
        self._calls.forget(self.token)
        return task

    # ------------------------------------------------------------ output

    def output(self, text: str) -> None:
        """Add `text` (sent as UTF-8) to this attempt's live output, which the Lead
        and the board follow as it comes (`tail_output`). Never waits on the
        network: the text is buffered and sent in the background at most every
        200 ms, or once 32 KiB wait, and what is buffered is sent before the claim
        completes, fails, is released or asks, so the output is whole when the
        attempt ends. Past 1 MiB waiting (the daemon slower than the writes),
        writes are dropped until the next batch goes, which then says how many
        bytes were dropped. Once the attempt's output reaches the daemon's limit
        (16 MiB by default) nothing more is sent (one warning, on the
        `corral.output` logger); text written after the claim ended is dropped.
        A failed append is logged there, never raised."""
        self._output.write(text)

    def append_output(self, text: str) -> int:
        """Append `text` (1 byte to 64 KiB of UTF-8) to this attempt's output now, after
        what `output` buffered, and return the output's size in bytes after it (the
        attempt is `attempt`). Unlike `output` it waits for the daemon and raises:
        InvalidArgument (before any call) for empty or oversized text, LimitExceeded
        (reason OUTPUT_LIMIT, nothing stored) past the attempt's limit, and, for a claim
        no longer live, what `renew` raises (and records the loss). For a handler's
        running commentary prefer `output`, which batches."""
        data = text.encode("utf-8")
        check_output(data)
        self._output.flush()
        try:
            _, size = self._append_output(data)
        except DEAD_CLAIM_ERRORS as exc:
            self._record_lost(exc)
            raise
        return size

    def _append_output(self, data: bytes) -> tuple[int, int]:
        return self._calls.append_output(self.task.id, self.token, data)

    def _close_output(self) -> None:
        """Drop what the output buffer holds and end its background flusher."""
        self._output.close()

    # ------------------------------------------------------------ artifacts

    def put_artifact(
        self, name: str, data_or_path: bytes | str | os.PathLike[str], media_type: str | None = None
    ) -> Artifact:
        """Attach a file to the task as an artifact of this attempt and return it as
        stored (its size and SHA-256). `data_or_path` is the content: bytes, a str
        (sent as UTF-8), or a path whose file is streamed in pieces of 1 MiB, never
        read whole. `name` is a relative path of at most 200 characters
        (`reports/summary.md`; no `..`, no leading `/`); `media_type` is
        `type/subtype`, guessed from the name when None (`application/octet-stream`
        when the name says nothing). An artifact of a name the task already has
        supersedes it in `Task.artifacts` (the task's history keeps both).

        The upload is a call of its own, on the Idle and the Session transport
        alike, and the daemon attaches the file only if the claim is still live when
        the last byte arrives. A call whose answer was lost is sent again, with the
        same bytes: the daemon stores content once by its SHA-256, so a repeat adds
        only a second, identical entry to the task's history.

        Raises InvalidArgument for a bad name or media type (the daemon names
        `header.name` or `header.media_type`) or content of another type, before any
        byte is sent; LimitExceeded past the daemon's size limit (reason
        ARTIFACT_LIMIT, 256 MiB by default) or the board's quota (reason
        ARTIFACT_QUOTA); and, for a claim no longer live, what `complete` raises (and
        records the loss). Nothing of a refused upload is attached.
        """
        source = artifact_source(data_or_path)
        try:
            return self._calls.put_artifact(self.task.id, self.token, name, media_type_for(name, media_type), source)
        except DEAD_CLAIM_ERRORS as exc:
            self._record_lost(exc)
            raise

    # ------------------------------------------------------------ keepalive

    @contextlib.contextmanager
    def keepalive(self) -> Iterator[Claim]:
        """Renew the lease in the background for the duration of the block."""
        self.start_keepalive()
        try:
            yield self
        finally:
            self.stop_keepalive()

    def start_keepalive(self) -> None:
        """Start renewing at a third of the lease until `stop_keepalive` or a
        finish call (on `corral.aio`, from within the event loop)."""
        with self._lock:
            if self._keepalive is None and self._lost is None:
                self._keepalive = Ticker(
                    self._keepalive_tick,
                    self._renew_interval,
                    name=f"corral-keepalive-{self.task.id}",
                )

    def stop_keepalive(self) -> None:
        """Stop the keepalive, if running, and wait for it."""
        with self._lock:
            keepalive, self._keepalive = self._keepalive, None
        if keepalive is not None:
            keepalive.stop()

    def _keepalive_tick(self) -> float | None:
        """Renew once; returns the delay to the next renew, None to stop."""
        interval = self._renew_interval
        if self._lost is not None:
            return None  # ended by the daemon (its stream said so): nothing to renew
        try:
            self.renew()
            return interval
        except DEAD_CLAIM_ERRORS:
            return None  # renew() recorded the loss
        except CorralError as exc:
            lease_left = self._local_expiry - time.monotonic()
            delay = retry_delay_after_renew_error(exc, lease_left, interval)
            if delay is None:
                self._record_lost(None if is_transient(exc) else exc)
            else:
                _log.info(
                    "renewing task %s failed (%s); retrying in %.2fs",
                    self.task.id,
                    exc,
                    delay,
                )
            return delay

    def _record_lost(self, cause: CorralError | None, reason: ClaimEndReason | None = None) -> None:
        with self._lock:
            first = self._lost is None
            if first:
                self._end_reason = reason or end_reason_of(cause)
                self._lost = ClaimEndedError(self.task.id, cause, self._end_reason)
                _log.warning("%s", self._lost)
        if cause is not None:
            self._calls.forget(self.token)
        self._output.stop()  # nothing more can be appended to an ended claim
        if first:
            self._ended.set()  # outside the lock: it calls back (an asyncio handler is cancelled)

    def _end(self, notice: ClaimEnded) -> None:
        """The stream said the daemon ended this claim: it is lost, with the reason."""
        self._record_lost(claim_ended_error(notice), notice.reason)

    def _refresh(self, info: ClaimInfo) -> None:
        """A re-sent claim (new stream) carries the current lease expiry."""
        with self._lock:
            self._lease_expire_time = info.lease_expire_time
