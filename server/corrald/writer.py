"""The writer: the board's read-write connections, group commit.

Callers submit *jobs*: whole transaction bodies `job(tx) -> value`, never
single statements. The writer runs queued jobs in one `BEGIN IMMEDIATE … COMMIT`,
each guarded so that a failing job rolls back alone, until the
batch holds `max_batch` jobs or the queue is empty; once the batch has run for
`batch_budget_ms` it takes only jobs of callers with none in it yet. Futures
resolve only after COMMIT returns; if COMMIT fails, every job of that batch
fails (nothing is reported successful that is not durable).

How a batch guards each job is the driver's (`WriterStorage.job_guard`): a savepoint
each on SQLite; none on PostgreSQL, whose batch runs again, guarded, when a job failed
having written (`Rerun`), and where runs of jobs share a statement (store/postgres/runs.py).

Jobs are taken from the queue by owner, the least-served owner first
(`overload/fairqueue.py`), and the budget keeps one caller's backlog from
stretching a batch: so a caller with an occasional cheap job goes ahead of the
backlog and waits for one short commit, not for a batch filled by whoever has
the most jobs in flight. A job's owner is the identity of the call that submitted it
(`job_owner`, set by the RPC layer). "Served" counts the writer time each
owner's jobs took, not how many there were; after each batch the writer tells
the queue, and `costs` (`overload/costs.py`) for pacing, what each job took.
The queue is bounded, and a caller that finds it full waits a little for a
place (`overload/queue_bound.py`).

A SQLite board has one writer thread; a PostgreSQL board may have a pool of them, each
with its own connection, draining the same queue (store/postgres/pool.py). Each thread's
`Shift` (`WriterStorage.crew`) says when it may take jobs, and orders its COMMIT and its answers.
"""

from __future__ import annotations

import asyncio
import collections
import concurrent.futures
import contextvars
import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Collection, Sequence
from typing import Any, TypeVar

import tenacity

from . import failpoints
from .clock import Clock
from .config import WriterConfig
from .errors import CommitInDoubt, Overloaded, ReentrantSubmit, Unavailable
from .overload.costs import CostLedger
from .overload.fairqueue import FairQueue
from .overload.queue_bound import QueueBound, level
from .store.driver import Rerun, Shift
from .store.driver import WriterStorage as Storage
from .txn import Mergeable, Txn, Wakes

log = logging.getLogger("corrald.writer")
T = TypeVar("T")
Job = Callable[[Txn], T]

# Whose turn a submitted job takes in the queue: the calling identity's name, or
# "" for the daemon's own work (recovery, the reaper).
job_owner: contextvars.ContextVar[str] = contextvars.ContextVar("corral_job_owner", default="")
# What a job came to: whether it succeeded, its value or its error, what it changed.
_Outcome = tuple[bool, Any, Wakes | None]


class CommitFailed(Unavailable):
    """The batch this job belonged to did not commit; the job had no effect (the
    caller may retry). The writer logs the failure once, for the whole batch."""

    reason = "COMMIT_FAILED"


@dataclasses.dataclass(slots=True)
class _Pending:
    job: Job
    future: concurrent.futures.Future | asyncio.Future
    loop: asyncio.AbstractEventLoop | None
    owner: str
    merge: Mergeable | None = None

    def run(self, tx: Txn) -> Any:
        failpoints.hit("job:" + self.owner)
        return self.job(tx)


@dataclasses.dataclass(slots=True)
class _WriterThread:
    """One writer thread's own: its place among the writers, its connection, its retrier,
    and what its jobs took (owner, seconds) since its last batch's report."""

    shift: Shift
    retrying: tenacity.Retrying
    conn: Any = None
    spent: list[tuple[str, float]] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class WriterStats:
    queue_depth: int
    queue_depth_p50: float
    queue_depth_p99: float
    level: str
    commits: int
    jobs: int
    mean_batch_size: float
    busy_retries: int
    failed_commits: int
    refused_jobs: int
    commit_latency_p50_ms: float
    commit_latency_p99_ms: float
    job_time_p99_ms: float
    job_time_max_ms: float
    writers: int = 1
    writers_in_transaction: int = 0
    # Committed jobs whose first statement ran once for their run of jobs (`txn.Mergeable`).
    jobs_run_together: int = 0


def _percentile(samples: Sequence[float], q: float) -> float:
    if not samples:
        return 0.0
    ordered = sorted(samples)
    return float(ordered[min(len(ordered) - 1, int(q * len(ordered)))])


class Writer:
    """Owns the read-write connections; see the module docstring."""

    def __init__(
        self,
        connect: Callable[[], Any],
        clock: Clock,
        config: WriterConfig = WriterConfig(),
        on_commit: Callable[[Wakes], None] | None = None,
        on_batch: Callable[[float, int], None] | None = None,
        epilogue: Callable[[Any, int, bool, list[BaseException]], None] | None = None,
        timer: Callable[[], float] = time.perf_counter,
        storage: Storage | None = None,
    ) -> None:
        from .store.sqlite.storage import SqliteStorage  # noqa: PLC0415 (the default: the writer of a SQLite board)

        self._connect = connect
        self._storage: Storage = storage if storage is not None else SqliteStorage()
        self._clock = clock
        self._config = config
        # Told after each COMMIT, on the writer thread: what the batch's jobs changed
        # (the daemon's wiring connects it to the wake hub), and how long it took.
        self.on_commit = on_commit
        # Told after each COMMIT, on this event loop, just before the batch's callers
        # there learn their outcome, in the same hop from this thread: (loop, listener).
        self.on_commit_in_loop: tuple[asyncio.AbstractEventLoop, Callable[[Wakes], None]] | None = None
        self.on_batch = on_batch  # (commit latency in seconds, jobs)
        # Runs last in every transaction, outside the jobs' savepoints, with
        # whether the jobs changed anything and the errors they raised.
        self._epilogue = epilogue
        self._timer = timer  # seconds, for the batch budget and the jobs' costs
        self._queue: FairQueue[_Pending] = FairQueue()
        self._shifts = self._storage.crew(config.writers, lambda: bool(self._queue))
        self.costs = CostLedger()
        self._bound = QueueBound(config.levels, config.room_wait_ms)
        self._cond = threading.Condition()
        self._accepting = False
        self._threads: list[threading.Thread] = []
        self._thread_ids: set[int] = set()
        self._writers: list[_WriterThread] = []
        self._in_transaction = 0
        self._connected = threading.Barrier(len(self._shifts) + 1)  # each writer has connected, or failed to
        self._go = threading.Event()
        self._start_error: BaseException | None = None
        self._depth_samples: collections.deque[int] = collections.deque(maxlen=4096)
        self._latency_ms: collections.deque[float] = collections.deque(maxlen=4096)
        self._job_ms: collections.deque[float] = collections.deque(maxlen=4096)
        self._counting = threading.Lock()
        self._commits = self._jobs = self._busy_retries = self._failed_commits = 0
        self._jobs_run_together = 0
        self._last_warn = 0.0
        # Built once per writer thread: a Retrying per batch left a reference cycle per
        # batch for the cyclic collector, whose full passes stall the whole daemon.
        self._retrying = tenacity.Retrying(
            retry=tenacity.retry_if_exception(self._storage.is_busy),
            stop=tenacity.stop_after_attempt(config.busy_retries),
            wait=tenacity.wait_exponential_jitter(multiplier=0.002, max=0.2),
            before_sleep=self._count_busy,
            reraise=True,
        )

    # ------------------------------------------------------------ lifecycle

    def start(self) -> None:
        for number, shift in enumerate(self._shifts):
            writer = _WriterThread(shift, self._retrying.copy())
            name = "corral-writer" if len(self._shifts) == 1 else f"corral-writer-{number}"
            thread = threading.Thread(target=self._main, args=(writer,), name=name, daemon=True)
            self._writers.append(writer)
            self._threads.append(thread)
            thread.start()
        self._connected.wait()
        if self._start_error is None:
            with self._cond:
                self._accepting = True
        self._go.set()
        if self._start_error is not None:
            for thread in self._threads:
                thread.join()
            raise self._start_error

    def stop_taking(self) -> None:
        """Stops accepting and takes no more jobs: the running batch still commits and
        its jobs are answered, every job still queued fails with Unavailable and is
        never applied, so a caller told to retry never finds its write stored twice."""
        with self._cond:
            self._accepting = False
            refused = [self._queue.pop() for _ in range(len(self._queue))]
            self._cond.notify_all()
        for _ in refused:
            self._bound.place_freed()  # a caller waiting for room learns the writer is gone
        refused = [pending for pending in refused if _may_resolve(pending.future)]
        failure = Unavailable("corrald is shutting down; the write was not applied")
        self._resolve(refused, [(False, failure, None)] * len(refused))

    def settle(self) -> None:
        """`stop_taking`, then waits for the running batch to commit and be answered."""
        self.stop_taking()
        for thread in self._threads:
            thread.join()

    def close(self, *, checkpoint: bool = True) -> None:
        """`settle`, then checkpoints and closes.

        A checkpoint that fails (a full disk) is logged and skipped: the WAL holds
        every commit and the next start replays it."""
        self.settle()
        for writer in self._writers:
            if writer.conn is not None:
                self._storage.close(writer.conn, checkpoint)
                writer.conn = None

    # ------------------------------------------------------------ submitting

    def submit(self, job: Job[T], merge: Mergeable | None = None) -> concurrent.futures.Future[T]:
        """Queues a job from any thread; the future resolves after COMMIT."""
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._enqueue(_Pending(job, future, None, job_owner.get(), merge))
        return future

    async def run(self, job: Job[T], merge: Mergeable | None = None) -> T:
        """Queues a job from the event loop and awaits its committed result. With `merge`,
        the writer may run the job's first statement together with other jobs' (`Mergeable`).

        A full queue makes the caller wait up to `room_wait_ms` for a place
        (back-pressure for bursts) before it is refused with Overloaded
        (see overload/queue_bound.py).
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        pending = _Pending(job, future, loop, job_owner.get(), merge)
        try:
            self._enqueue(pending, count_refusal=False)
        except Overloaded:
            await self._bound.wait_for_room(lambda final: self._enqueue(pending, count_refusal=final))
        return await future

    def call(self, job: Job[T], timeout: float | None = None) -> T:
        """Blocking convenience for threads and tests."""
        return self.submit(job).result(timeout)

    def _enqueue(self, pending: _Pending, *, count_refusal: bool = True) -> None:
        if threading.get_ident() in self._thread_ids:
            raise ReentrantSubmit("a writer job may not submit another job: it would wait on itself")
        with self._cond:
            if not self._accepting:
                raise Unavailable("the writer is not accepting jobs (daemon draining)")
            depth = len(self._queue)
            self._bound.check(depth, count=count_refusal)
            self._depth_samples.append(depth)
            self._queue.push(pending.owner, pending)
            self._cond.notify()
        if depth > self._config.levels.warn and time.monotonic() - self._last_warn > 5:
            self._last_warn = time.monotonic()
            log.warning("writer queue depth %d (%s)", depth, level(depth, self._config.levels))

    # ------------------------------------------------------------ the thread

    def _main(self, writer: _WriterThread) -> None:
        self._thread_ids.add(threading.get_ident())
        try:
            writer.conn = self._connect()
        except BaseException as error:  # reported to start()
            self._start_error = error
        self._connected.wait()
        self._go.wait()
        if self._start_error is not None:
            if writer.conn is not None:
                self._storage.close(writer.conn, False)
                writer.conn = None
            return
        shift = writer.shift
        while True:
            shift.wait_turn()
            with self._cond:
                while not self._queue and self._accepting:
                    self._cond.wait()
                if not self._queue:
                    shift.leave()
                    return  # closed and drained
            try:
                self._run_batch(writer)
            except BaseException:
                shift.leave()
                raise

    def _take(self, unless_owner_in: Collection[str] = ()) -> _Pending | None:
        """The next job to run; None when the queue is empty or the next job's
        owner is one of `unless_owner_in`."""
        while True:
            with self._cond:
                if not self._queue or self._queue.next_owner() in unless_owner_in:
                    return None
                pending = self._queue.pop()
            self._bound.place_freed()  # one place more: one caller waiting for room may take it
            # A thread caller may have cancelled its future while it waited:
            # such a job must not run (nobody would learn its outcome).
            if _may_resolve(pending.future):
                return pending

    def _grow(self, batch: list[_Pending], owners: set[str], take_until: float | None) -> bool:
        """Takes one more job into the running batch while it has room. Past its
        time budget it takes only a job of a caller with none in the batch yet: a
        backlog cannot keep the batch going, while an occasional caller still joins."""
        if take_until is None or len(batch) >= self._config.max_batch:
            return False
        pending = self._take(unless_owner_in=owners if self._timer() >= take_until else ())
        if pending is None:
            return False
        batch.append(pending)
        owners.add(pending.owner)
        return True

    def _run_batch(self, writer: _WriterThread) -> None:
        """Runs one batch, in its writer's turn (`Shift`)."""
        started, batch_from = time.perf_counter(), self._timer()
        batch: list[_Pending] = []
        owners: set[str] = set()
        take_until: float | None = None  # set when the first job is taken
        again = False  # a job asked for its batch again (`Rerun`): every later attempt is guarded
        first_taken = False

        def take_first() -> bool:
            # The first job is taken once the transaction is open (its lock, on a shared
            # board, held): whatever was queued until then joins this batch, in order.
            nonlocal take_until, first_taken
            first_taken = True
            first = self._take()
            if first is not None:
                batch.append(first)
                owners.add(first.owner)
                take_until = self._timer() + self._config.batch_budget_ms / 1000
            return first is not None

        def attempt() -> tuple[list[_Outcome], Wakes]:
            # Only the attempt that took the first job takes more; a retry after
            # SQLITE_BUSY runs exactly the jobs the failed attempt held.
            nonlocal take_until, again
            conn = writer.conn = self._storage.begin(writer.conn)
            if not first_taken and not take_first():
                self._abandon(conn)  # no retry: it has nothing to run
                return [], Wakes()
            try:
                try:
                    return self._transaction(writer, conn, batch, owners, take_until, again)
                except Rerun:
                    again = True  # and the batch may still grow: no job of it took effect
                    conn = writer.conn = self._storage.begin(writer.conn)
                    return self._transaction(writer, conn, batch, owners, take_until, again)
            finally:
                take_until = None

        committed = True
        wakes = Wakes()
        try:
            outcomes, wakes = writer.retrying(attempt)
        except BaseException as error:  # the whole batch failed (perhaps after its COMMIT)
            if not first_taken:  # its transaction never opened: the job it was opened for fails
                take_first()
            committed = False
            # A COMMIT whose outcome the storage could not learn is reported as such: telling
            # the callers "not applied" could make them apply it twice.
            failure: BaseException = (
                error if isinstance(error, CommitInDoubt) else CommitFailed(f"transaction did not commit: {error}")
            )
            outcomes = [(False, failure, None)] * len(batch)
            if batch:
                with self._counting:
                    self._failed_commits += 1
                log.error("commit of %d jobs failed: %s", len(batch), error)
        # A batch that committed answers in its turn whatever happened after its COMMIT:
        # every batch committed after it waits for that.
        with writer.shift.answering():
            if not batch:
                return  # the jobs it opened for were taken by the batch before it
            if committed:
                with self._counting:
                    self._commits += 1
                    self._jobs += len(batch)
                latency = time.perf_counter() - started
                self._latency_ms.append(latency * 1000)
                if self.on_batch is not None:
                    self.on_batch(latency, len(batch))
            self._answer(batch, outcomes, wakes)
        self._report_costs(writer, self._timer() - batch_from)  # after the replies are on their way

    def _abandon(self, conn: Any) -> None:
        """Rolls back a transaction that ran nothing (on a lost connection, the next BEGIN opens another)."""
        try:
            conn.execute("ROLLBACK")
        except Exception as error:
            if not self._storage.is_storage_error(error):
                raise

    def _answer(self, batch: list[_Pending], outcomes: list[_Outcome], wakes: Wakes) -> None:
        if wakes and self.on_commit is not None:
            try:
                self.on_commit(wakes)
            except Exception:  # a broken listener must not stop the writer
                log.exception("wake-up listener failed")
        self._resolve(batch, outcomes, (self.on_commit_in_loop, wakes) if wakes else None)

    def _report_costs(self, writer: _WriterThread, batch_s: float) -> None:
        """Charges each job of the batch its share of the batch's time, in proportion to its own
        time: BEGIN, COMMIT and its fsync are paid for by the jobs whose writes made them, and a
        job run twice (a retry after SQLITE_BUSY) costs twice."""
        spent, writer.spent = writer.spent, []
        jobs_s = sum(seconds for _, seconds in spent)
        if jobs_s > 0:
            spent = [(owner, seconds * batch_s / jobs_s) for owner, seconds in spent]
        with self._cond:
            for owner, seconds in spent:
                self._queue.observe(owner, seconds)
        self.costs.add(spent)

    def _count_busy(self, state: tenacity.RetryCallState) -> None:
        with self._counting:
            self._busy_retries += 1

    def _transaction(
        self,
        writer: _WriterThread,
        conn: Any,
        batch: list[_Pending],
        owners: set[str],
        take_until: float | None,
        again: bool,
    ) -> tuple[list[_Outcome], Wakes]:
        """Runs the batch in the transaction open on `conn` and commits it; returns its
        outcomes and what its committed jobs changed."""
        with self._counting:
            self._in_transaction += 1
        now = self._clock.now_ms()
        shift = writer.shift
        # What the jobs know of the leases and time gates (so a claim need not query for
        # expired leases or due gates); forgotten whenever a job or a batch rolls back.
        watches = shift.watches()
        guard = self._storage.job_guard(self._timer, again=again)
        storage_error = self._storage.is_storage_error

        def fill() -> None:  # takes every queued job the batch may take
            while self._grow(batch, owners, take_until):
                pass

        try:
            changes_before = conn.total_changes
            outcomes: list[_Outcome] = []
            while len(outcomes) < len(batch) or self._grow(batch, owners, take_until):
                index = len(outcomes)
                pending = batch[index]
                # Each job acts at the instant it runs: a lease it renews or grants is
                # measured from then, not from the start of a batch that an earlier
                # job may have made long. `now` never goes back within a batch.
                now = max(now, self._clock.now_ms())
                share = 0.0 if pending.merge is None else guard.before(conn, now, batch, index, fill)
                job_started, cost_from = time.perf_counter(), self._timer()
                tx = Txn(conn, now, leases=watches[0], gates=watches[1])
                ok, value = guard.run(conn, tx, batch, index)
                if ok:
                    outcomes.append((True, value, tx.wakes))
                else:
                    for watch in watches:
                        watch.forget()  # what the job taught it is rolled back with the job
                    if conn.in_transaction and storage_error(value):  # the storage (a full disk), not the job
                        log.error("a job could not write: %s", value)
                        value = CommitFailed(f"the job did not commit: {value}")
                    outcomes.append((False, value, None))
                self._job_ms.append((time.perf_counter() - job_started) * 1000)
                writer.spent.append((pending.owner, self._timer() - cost_from + share))
                if not conn.in_transaction:
                    # SQLite rolled the whole transaction back (e.g. disk full):
                    # the earlier jobs of this batch are gone too.
                    raise CommitFailed(f"transaction rolled back by job {len(outcomes) - 1}")
            shift.batch_closed()  # another writer may open its transaction, for jobs this one will not take
            if self._epilogue is not None:
                failures = [value for ok, value, _ in outcomes if not ok]
                self._epilogue(conn, now, conn.total_changes != changes_before, failures)
            wakes = Wakes()
            for ok, _, job_wakes in outcomes:
                if ok and job_wakes:
                    wakes.merge(job_wakes)
            self._storage.announce(conn, wakes)
            failpoints.hit("before_commit")
            if failpoints.armed():
                for owner in owners:  # a delay or a failure for one caller's batches
                    failpoints.hit("before_commit:" + owner)
            shift.commit(conn)
            if guard.together:
                with self._counting:
                    self._jobs_run_together += guard.together
        except BaseException:
            for watch in watches:
                watch.forget()
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        finally:
            with self._counting:
                self._in_transaction -= 1
        failpoints.hit("after_commit")
        return outcomes, wakes

    @staticmethod
    def _resolve(
        batch: list[_Pending],
        outcomes: list[_Outcome],
        told: tuple[tuple[asyncio.AbstractEventLoop, Callable[[Wakes], None]] | None, Wakes] | None = None,
    ) -> None:
        by_loop: dict[asyncio.AbstractEventLoop, list] = {}
        listener: tuple[asyncio.AbstractEventLoop, Callable[[], None]] | None = None
        if told is not None:
            where, wakes = told
            if where is not None:
                loop, tell = where
                listener = loop, lambda: tell(wakes)
                by_loop[loop] = []
        for pending, (ok, value, _) in zip(batch, outcomes, strict=True):
            if pending.loop is None:
                (pending.future.set_result if ok else pending.future.set_exception)(value)
            else:
                by_loop.setdefault(pending.loop, []).append((pending.future, ok, value))
        for loop, items in by_loop.items():
            # One thread hop per loop per batch, not one per job, the listener's included.
            first = listener[1] if listener is not None and listener[0] is loop else None
            try:
                loop.call_soon_threadsafe(_resolve_on_loop, items, first)
            except RuntimeError:  # loop closed: nobody is waiting any more
                pass

    # ------------------------------------------------------------ stats

    def stats(self) -> WriterStats:
        with self._cond:
            depth = len(self._queue)
            samples = list(self._depth_samples)
        latencies = list(self._latency_ms)
        job_times = list(self._job_ms)
        return WriterStats(
            queue_depth=depth,
            queue_depth_p50=_percentile(samples, 0.5),
            queue_depth_p99=_percentile(samples, 0.99),
            level=level(depth, self._config.levels),
            commits=self._commits,
            jobs=self._jobs,
            mean_batch_size=self._jobs / self._commits if self._commits else 0.0,
            busy_retries=self._busy_retries,
            failed_commits=self._failed_commits,
            refused_jobs=self._bound.refused,
            commit_latency_p50_ms=_percentile(latencies, 0.5),
            commit_latency_p99_ms=_percentile(latencies, 0.99),
            job_time_p99_ms=_percentile(job_times, 0.99),
            job_time_max_ms=max(job_times, default=0.0),
            writers=self._config.writers,
            writers_in_transaction=self._in_transaction,
            jobs_run_together=self._jobs_run_together,
        )


def _may_resolve(future: concurrent.futures.Future | asyncio.Future) -> bool:
    """False for a thread caller's future it cancelled while the job waited."""
    return not isinstance(future, concurrent.futures.Future) or future.set_running_or_notify_cancel()


def _resolve_on_loop(items: list[tuple[asyncio.Future, bool, Any]], first: Callable[[], None] | None = None) -> None:
    if first is not None:
        try:
            first()
        except Exception:  # a broken listener must not keep callers from their outcome
            log.exception("wake-up listener failed")
    for future, ok, value in items:
        if not future.done():  # else the awaiting coroutine was cancelled
            (future.set_result if ok else future.set_exception)(value)
