"""The sync claim handle and its lease keepalive thread."""

from __future__ import annotations

import contextlib
import datetime
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from corral._errors import (
    ClaimTokenMismatch,
    CorralError,
    LeaseExpired,
    LeaseLost,
    Overloaded,
    TaskCanceled,
)
from corral._retry import is_transient
from corral._types import ClaimInfo, Task

if TYPE_CHECKING:
    from corral._teammate import Teammate

__all__ = ["Claim"]

_log = logging.getLogger("corral.claim")

# Errors proving the claim is dead: keepalive stops and records LeaseLost.
DEAD_CLAIM_ERRORS = (LeaseExpired, ClaimTokenMismatch, TaskCanceled)
MIN_RENEW_INTERVAL = 0.05


def lease_seconds(info: ClaimInfo) -> float:
    """The claim's lease length: the task's, else what is left of this one."""
    if info.task.lease_duration > datetime.timedelta(0):
        return info.task.lease_duration.total_seconds()
    return max(seconds_until(info.lease_expire_time), MIN_RENEW_INTERVAL)


def retry_delay_after_renew_error(exc: CorralError, lease_left: float, interval: float) -> float | None:
    """When to try renewing again after `exc`, or None when the claim is lost.

    Transient errors are retried sooner while the lease (as measured
    locally) has time left; any other error, e.g. the teammate having been
    removed, means the claim is gone too.
    """
    if not is_transient(exc) or lease_left <= 0:
        return None
    hint = exc.retry_after.total_seconds() if isinstance(exc, Overloaded) and exc.retry_after else None
    return max(min(hint or lease_left / 3, lease_left, interval), MIN_RENEW_INTERVAL)


def seconds_until(when: datetime.datetime | None) -> float:
    """Seconds from now (wall clock) to `when`; 0 when unknown or past."""
    if when is None:
        return 0.0
    return max((when - datetime.datetime.now(datetime.UTC)).total_seconds(), 0.0)


class ClaimState:
    """What the sync and asyncio claim handles share: the claim's data and lease bookkeeping."""

    def __init__(self, info: ClaimInfo) -> None:
        self._info = info
        self._lease_seconds = lease_seconds(info)
        self._lease_expire_time = info.lease_expire_time
        self._local_expiry = time.monotonic() + seconds_until(info.lease_expire_time)
        self._protocol_pending = False
        self._lost: LeaseLost | None = None

    def __repr__(self) -> str:
        return f"Claim(task={self.task.id!r}, attempt={self.attempt}, fence={self.fence}, lost={self.lost})"

    # ------------------------------------------------------------ data

    @property
    def info(self) -> ClaimInfo:
        """The claim's data as first received."""
        return self._info

    @property
    def task(self) -> Task:
        """The claimed task (as of the claim)."""
        return self._info.task

    @property
    def token(self) -> str:
        """The claim token; the daemon accepts writes about the task only with it."""
        return self._info.token

    @property
    def attempt(self) -> int:
        """Which attempt at the task this claim is (1 for the first)."""
        return self._info.attempt

    @property
    def fence(self) -> int:
        """Board-wide increasing number; pass it to external systems to fence stale holders."""
        return self._info.fence

    @property
    def lease_expire_time(self) -> datetime.datetime | None:
        """When the lease ends (daemon clock) unless renewed."""
        return self._lease_expire_time

    @property
    def protocol_pending(self) -> bool:
        """True when the last renew said a shutdown request or plan decision waits."""
        return self._protocol_pending

    @property
    def lost(self) -> bool:
        """True once the keepalive (or a renew) found the lease lost."""
        return self._lost is not None

    @property
    def lost_error(self) -> LeaseLost | None:
        """The recorded LeaseLost, if any; its `cause` is None for an unconfirmed loss."""
        return self._lost

    def check(self) -> None:
        """Raise LeaseLost if the lease was lost; call it between steps of long work."""
        if self._lost is not None:
            raise self._lost


class Claim(ClaimState):
    """An exclusive, leased hold on one task, as yielded by `Teammate.idle`.

    Finish it with exactly one of `complete`, `fail` or `release`. Keep the
    lease alive while you work with `with claim.keepalive(): ...` (renews at
    a third of the lease in a background thread). When a renew proves the
    claim dead (lease expired, token superseded, task canceled) the keepalive
    stops and records it: `claim.lost` turns True and `claim.check()` raises
    LeaseLost, so long work should call `check()` between steps.
    """

    def __init__(self, info: ClaimInfo, teammate: Teammate) -> None:
        super().__init__(info)
        self._teammate = teammate
        self._lock = threading.Lock()
        self._keepalive: _Keepalive | None = None

    # ------------------------------------------------------------ calls

    def renew(self) -> datetime.datetime:
        """Extend the lease by its duration; returns the new expiry.

        Raises LeaseExpired / ClaimTokenMismatch / TaskCanceled (and records
        the loss) when the claim is dead.
        """
        sent_at = time.monotonic()
        timeout = max(self._lease_seconds, 1.0)
        try:
            expire_time, protocol_pending = self._teammate._renew(self.task.id, self.token, timeout=timeout)
        except DEAD_CLAIM_ERRORS as exc:
            self._record_lost(exc)
            raise
        with self._lock:
            self._lease_expire_time = expire_time
            self._protocol_pending = protocol_pending
            # Measured from when the request left: the daemon's lease started later.
            self._local_expiry = sent_at + self._lease_seconds
        return expire_time

    def complete(self, result: bytes | str = b"") -> Task:
        """Finish the task with `result`; safe to repeat (the daemon is idempotent)."""
        payload = result.encode("utf-8") if isinstance(result, str) else result
        return self._finish(lambda: self._teammate._complete(self.task.id, self.token, payload))

    def fail(self, error: str, *, retryable: bool = True) -> Task:
        """Report failure; retryable failures go back to PENDING while attempts remain."""
        return self._finish(lambda: self._teammate._fail(self.task.id, self.token, error, retryable))

    def release(self) -> Task:
        """Give the task back without using up an attempt."""
        return self._finish(lambda: self._teammate._release(self.task.id, self.token))

    def _finish(self, call: Callable[[], Task]) -> Task:
        self.stop_keepalive()
        try:
            task = call()
        except DEAD_CLAIM_ERRORS:
            self._teammate._forget(self.token)
            raise
        self._teammate._forget(self.token)
        return task

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
        """Start renewing at a third of the lease until `stop_keepalive` or a finish call."""
        with self._lock:
            if self._keepalive is None and self._lost is None:
                self._keepalive = _Keepalive(self, max(self._lease_seconds / 3, MIN_RENEW_INTERVAL))

    def stop_keepalive(self) -> None:
        """Stop the keepalive thread, if running, and wait for it."""
        with self._lock:
            keepalive, self._keepalive = self._keepalive, None
        if keepalive is not None:
            keepalive.stop()

    def _keepalive_tick(self, interval: float) -> float | None:
        """Renew once; returns the delay to the next renew, None to stop."""
        try:
            self.renew()
            return interval
        except DEAD_CLAIM_ERRORS:
            return None  # renew() recorded the loss
        except CorralError as exc:
            delay = retry_delay_after_renew_error(exc, self._local_expiry - time.monotonic(), interval)
            if delay is None:
                self._record_lost(None if is_transient(exc) else exc)
            else:
                _log.info("renewing task %s failed (%s); retrying in %.2fs", self.task.id, exc, delay)
            return delay

    def _record_lost(self, cause: CorralError | None) -> None:
        with self._lock:
            if self._lost is None:
                self._lost = LeaseLost(self.task.id, cause)
                _log.warning("%s", self._lost)
        if cause is not None:
            self._teammate._forget(self.token)

    def _refresh(self, info: ClaimInfo) -> None:
        """A re-sent claim (new stream) carries the current lease expiry."""
        with self._lock:
            self._lease_expire_time = info.lease_expire_time


class _Keepalive:
    """A thread calling `claim._keepalive_tick` until stopped or told to stop."""

    def __init__(self, claim: Claim, interval: float) -> None:
        self._claim = claim
        self._interval = interval
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"corral-keepalive-{claim.task.id}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        delay: float | None = self._interval
        while delay is not None and not self._stopped.wait(delay):
            delay = self._claim._keepalive_tick(self._interval)

    def stop(self) -> None:
        self._stopped.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()
