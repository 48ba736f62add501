"""Where the asyncio and sync SDKs really differ, side by side.

The SDK's control flow is written once, in `corral.aio`, and
`scripts/unasync.py` writes the sync modules from it, turning `AsyncX` into
`X` and `async_x` into `x`. Each pair here does one small thing the two
worlds do differently: spawning work, a background ticker, a lock, reading a
stream, running blocking or user code, a time limit, a queue, a future and
background reading. No SDK logic lives here.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import inspect
import logging
import queue
import threading
from collections.abc import Awaitable, Callable, Coroutine
from contextlib import AbstractContextManager
from types import TracebackType
from typing import Any, ParamSpec, TypeVar

import grpc.aio

__all__ = [
    "AsyncBackground",
    "AsyncFuture",
    "AsyncLock",
    "AsyncPump",
    "AsyncQueue",
    "AsyncTicker",
    "AsyncWorkers",
    "Background",
    "Flag",
    "Future",
    "Lock",
    "Pump",
    "Queue",
    "Ticker",
    "Workers",
    "async_invoke",
    "async_may_write",
    "async_next_message",
    "async_run_blocking",
    "async_run_handler",
    "async_time_limit",
    "async_wait_future",
    "invoke",
    "may_write",
    "next_message",
    "run_blocking",
    "run_handler",
    "time_limit",
    "wait_future",
]

_log = logging.getLogger("corral.runner")

P = ParamSpec("P")
T = TypeVar("T")

# ------------------------------------------------------------ locks


class AsyncLock:
    """No lock at all: on asyncio, state changes run on the loop's one thread
    and nothing awaits while holding this, so nothing can interleave."""

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


Lock = threading.Lock
"""Sync: a claim's keepalive thread races the handler's thread."""

# ------------------------------------------------------------ flags


class Flag:
    """A flag set once and never cleared, readable from any thread: `is_set()`,
    `wait(timeout)` and truth like a `threading.Event`; `subscribe` calls back
    when it is set (from the thread that set it), so asyncio code can await it."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._callbacks: list[Callable[[], None]] = []

    def __bool__(self) -> bool:
        return self._event.is_set()

    def __repr__(self) -> str:
        return f"Flag(set={self._event.is_set()})"

    def is_set(self) -> bool:
        """True once the flag is set."""
        return self._event.is_set()

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the flag is set or `timeout` seconds pass; returns `is_set()`."""
        return self._event.wait(timeout)

    def set(self) -> None:
        """Set the flag (again is a no-op) and call back every subscriber once."""
        with self._lock:
            if self._event.is_set():
                return
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            callback()

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call `callback()` once the flag is set (now, if it is); returns an unsubscribe."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(callback)
                return lambda: self._unsubscribe(callback)
        callback()
        return lambda: None

    def _unsubscribe(self, callback: Callable[[], None]) -> None:
        with self._lock:
            if callback in self._callbacks:
                self._callbacks.remove(callback)


# ------------------------------------------------------------ handler work


class AsyncWorkers:
    """Handler work as asyncio tasks; `cancel()` unwinds them on teardown."""

    def __init__(self, slots: int, *, name: str) -> None:
        self._name = name
        self._tasks: set[asyncio.Task[None]] = set()

    def spawn(self, work: Callable[..., Coroutine[Any, Any, None]], *args: Any) -> None:
        """Start `work(*args)` now (the daemon hands out at most `slots` claims)."""
        task = asyncio.create_task(work(*args), name=self._name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            _log.error("handler work failed", exc_info=task.exception())

    async def wait(self) -> None:
        """Wait until the work running now has finished (or unwound)."""
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def cancel(self) -> None:
        """Cancel every running task (each hands its claim back as it unwinds)."""
        for task in self._tasks:
            task.cancel()

    async def join(self) -> None:
        """Wait for everything spawned; the workers are done after this."""
        await self.wait()


class Workers:
    """Handler work on a pool of `slots` threads, named `name`-N."""

    def __init__(self, slots: int, *, name: str) -> None:
        self._pool = concurrent.futures.ThreadPoolExecutor(slots, thread_name_prefix=name)
        self._lock = threading.Lock()
        self._futures: set[concurrent.futures.Future[None]] = set()

    def spawn(self, work: Callable[..., None], *args: Any) -> None:
        """Run `work(*args)` on a free thread, or queue it until one is."""
        future = self._pool.submit(work, *args)
        with self._lock:
            self._futures.add(future)
        future.add_done_callback(self._finished)

    def _finished(self, future: concurrent.futures.Future[None]) -> None:
        with self._lock:
            self._futures.discard(future)
        if future.exception() is not None:
            _log.error("handler work failed", exc_info=future.exception())

    def wait(self) -> None:
        """Wait until the work running now has finished."""
        with self._lock:
            running = set(self._futures)
        concurrent.futures.wait(running)

    def cancel(self) -> None:
        """Nothing: a running thread cannot be cancelled; it finishes and reports."""

    def join(self) -> None:
        """Wait for everything spawned and stop the threads."""
        self._pool.shutdown(wait=True)


# ------------------------------------------------------------ background ticks


class AsyncTicker:
    """Calls `await tick()` after `delay` seconds, then after each delay it
    returns, until it returns None or `stop()`; an asyncio task."""

    def __init__(self, tick: Callable[[], Awaitable[float | None]], delay: float, *, name: str) -> None:
        self._task = asyncio.create_task(self._run(tick, delay), name=name)

    async def _run(self, tick: Callable[[], Awaitable[float | None]], delay: float | None) -> None:
        while delay is not None:
            await asyncio.sleep(delay)
            delay = await tick()

    async def stop(self) -> None:
        """Cancel the task and wait for it (unless the tick itself is stopping it)."""
        if self._task is not asyncio.current_task():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task


class Ticker:
    """The same on a daemon thread, woken early by a stop Event."""

    def __init__(self, tick: Callable[[], float | None], delay: float, *, name: str) -> None:
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(tick, delay), name=name, daemon=True)
        self._thread.start()

    def _run(self, tick: Callable[[], float | None], delay: float | None) -> None:
        while delay is not None and not self._stopped.wait(delay):
            delay = tick()

    def stop(self) -> None:
        """Stop ticking and wait for a tick in progress (unless called by the tick)."""
        self._stopped.set()
        if threading.current_thread() is not self._thread:
            self._thread.join()


# ------------------------------------------------------------ pumps


class AsyncPump:
    """Runs `await work()` once, as an asyncio task on the loop this was made on (make
    it on the loop's thread), started by the first `poke()` from any thread; later
    pokes wake the work from `await pump.wait(timeout)`. The work runs in a context
    of its own: nothing the poking code set in contextvars is seen there."""

    def __init__(self, work: Callable[[], Coroutine[Any, Any, None]], *, name: str) -> None:
        self._loop = asyncio.get_running_loop()
        self._work = work
        self._name = name
        self._lock = threading.Lock()  # pokes come from any thread
        self._started: asyncio.Task[None] | concurrent.futures.Future[None] | None = None
        self._event = asyncio.Event()  # set and awaited on the loop only

    def poke(self) -> None:
        """Start the work if it has not started, and wake its `wait`; from any thread."""
        on_loop = _running_loop() is self._loop
        with self._lock:
            if self._started is None:
                fresh = contextvars.Context()
                if on_loop:
                    self._started = fresh.run(self._loop.create_task, self._work(), name=self._name)
                else:
                    self._started = fresh.run(asyncio.run_coroutine_threadsafe, self._work(), self._loop)
        self._wake(on_loop)

    def wake(self) -> None:
        """Wake the work's `wait` if it started (it is not started); from any thread."""
        on_loop = _running_loop() is self._loop
        with self._lock:
            if self._started is None:
                return
        self._wake(on_loop)

    def _wake(self, on_loop: bool) -> None:
        if on_loop:
            self._event.set()
        else:
            with contextlib.suppress(RuntimeError):  # the loop closed: nothing waits any more
                self._loop.call_soon_threadsafe(self._event.set)

    async def wait(self, timeout: float | None) -> None:
        """In the work: until poked (since the last wait) or `timeout` seconds pass."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._event.wait()
        self._event.clear()

    async def join(self) -> None:
        """Wait for the work to end, if it started (on the loop)."""
        with self._lock:
            started = self._started
        if started is None:
            return
        waited = asyncio.wrap_future(started) if isinstance(started, concurrent.futures.Future) else started
        with contextlib.suppress(asyncio.CancelledError):
            await waited


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Pump:
    """The same on a daemon thread, started by the first `poke()`."""

    def __init__(self, work: Callable[[], None], *, name: str) -> None:
        self._work = work
        self._name = name
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._event = threading.Event()

    def poke(self) -> None:
        """Start the work if it has not started, and wake its `wait`; from any thread."""
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name=self._name, daemon=True)
                self._thread.start()
        self._event.set()

    def wake(self) -> None:
        """Wake the work's `wait` if it started (it is not started); from any thread."""
        self._event.set()

    def wait(self, timeout: float | None) -> None:
        """In the work: until poked (since the last wait) or `timeout` seconds pass."""
        self._event.wait(timeout)
        self._event.clear()

    def join(self) -> None:
        """Wait for the work to end, if it started (unless called by the work)."""
        with self._lock:
            thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join()


# ------------------------------------------------------------ streams


async def async_next_message(call: Any) -> Any | None:
    """The next message of a `grpc.aio` server stream; None once it has ended."""
    message = await call.read()
    return None if message is grpc.aio.EOF else message


def next_message(call: Any) -> Any | None:
    """The next message of a sync server stream; None once it has ended."""
    return next(call, None)


async def async_may_write(call_of: Callable[[], Any], headers_wait: float) -> bool:
    """Whether the bidirectional call `call_of()` is still open once the server's
    headers came, or `headers_wait` seconds passed without them.

    A `grpc.aio` write that loses the race with the call's end replaces the
    status the server sent with INTERNAL "Internal error from Core"
    (grpc/grpc#36066): an UNIMPLEMENTED from a daemon without the method would
    read INTERNAL about half the time. The daemon sends its headers at once,
    and one without the method sends them with the status, so writing after
    them keeps the status. The wait is bounded for a proxy that holds headers
    back until the first message.
    """
    call = call_of()
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(headers_wait):
            await call.initial_metadata()
    return not call.done()


def may_write(call_of: Callable[[], Any], headers_wait: float) -> bool:
    """Sync gRPC keeps the server's status when a write fails: write at once."""
    return True


# ------------------------------------------------------------ hand-offs

AsyncQueue = asyncio.Queue
"""Unbounded; `put_nowait` and `await get()`, all on the loop's thread."""

Queue = queue.Queue
"""Unbounded; `put_nowait` from any thread, a blocking `get()`."""

AsyncFuture = asyncio.Future
"""Created and resolved on the loop's thread."""

Future = concurrent.futures.Future
"""Resolved by one thread, waited on by another."""


async def async_wait_future(future: asyncio.Future[T], timeout: float) -> T:
    """The future's result; TimeoutError after `timeout` seconds, leaving the
    future pending (a timeout or a cancelled waiter does not cancel it)."""
    return await asyncio.wait_for(asyncio.shield(future), timeout)


def wait_future(future: concurrent.futures.Future[T], timeout: float) -> T:
    """The future's result; TimeoutError after `timeout` seconds, leaving the future pending."""
    return future.result(timeout)


class AsyncBackground:
    """Runs `await work(*args)` as an asyncio task."""

    def __init__(self, work: Callable[..., Coroutine[Any, Any, None]], *args: Any, name: str) -> None:
        self._task = asyncio.create_task(work(*args), name=name)

    async def join(self) -> None:
        """Wait for the work to end (it ends on its own; this does not stop it)."""
        with contextlib.suppress(asyncio.CancelledError):
            await self._task


class Background:
    """Runs `work(*args)` on a daemon thread."""

    def __init__(self, work: Callable[..., None], *args: Any, name: str) -> None:
        self._thread = threading.Thread(target=work, args=args, name=name, daemon=True)
        self._thread.start()

    def join(self) -> None:
        """Wait for the work to end (it ends on its own; this does not stop it)."""
        self._thread.join()


# ------------------------------------------------------------ running code


async def async_run_blocking(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Run a blocking function in a thread so the event loop keeps going."""
    return await asyncio.to_thread(fn, *args, **kwargs)


def run_blocking(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    """Sync callers may block: call `fn` directly."""
    return fn(*args, **kwargs)


async def async_run_handler(handler: Callable[..., Any], arg: Any, *, stop: Flag) -> Any:
    """Await a coroutine function on the loop, as a task that is cancelled once
    `stop` is set (then, once it has unwound, None is returned: the caller knows
    why). Run a plain function in a thread (so it cannot stall keepalives),
    awaiting what it returns if awaitable: a thread cannot be cancelled, so it
    polls `stop` (`current_claim().ended`) and is waited for."""
    if not inspect.iscoroutinefunction(handler):
        # to_thread copies this context, so current_claim() works in the thread.
        outcome = await asyncio.to_thread(handler, arg)
        return await outcome if inspect.isawaitable(outcome) else outcome
    loop = asyncio.get_running_loop()
    work = asyncio.ensure_future(handler(arg))
    stopped: asyncio.Future[None] = loop.create_future()
    unsubscribe = stop.subscribe(lambda: _resolve_threadsafe(loop, stopped))
    try:
        await asyncio.wait((work, stopped), return_when=asyncio.FIRST_COMPLETED)
        if not work.done():
            work.cancel()
            await asyncio.wait((work,))
    except BaseException:
        work.cancel()
        raise
    finally:
        unsubscribe()
        stopped.cancel()
    return None if work.cancelled() else work.result()


def _resolve_threadsafe(loop: asyncio.AbstractEventLoop, future: asyncio.Future[None]) -> None:
    loop.call_soon_threadsafe(_resolve, future)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


def run_handler(handler: Callable[..., Any], arg: Any, *, stop: Flag) -> Any:
    """Sync handlers already run on a worker thread: call directly. A thread
    cannot be cancelled: the handler polls `current_claim().ended` (`stop`)."""
    return handler(arg)


async def async_invoke(fn: Callable[..., Any], *args: Any) -> Any:
    """Call `fn` on the loop, awaiting its result when it is awaitable."""
    outcome = fn(*args)
    return await outcome if inspect.isawaitable(outcome) else outcome


def invoke(fn: Callable[..., Any], *args: Any) -> Any:
    """Call `fn`."""
    return fn(*args)


def async_time_limit(seconds: float) -> asyncio.Timeout:
    """Raise TimeoutError in the block once `seconds` have passed."""
    return asyncio.timeout(seconds)


def time_limit(seconds: float) -> AbstractContextManager[None]:
    """No limit of its own: a blocking call cannot be interrupted, so each call
    in the block carries its own deadline."""
    return contextlib.nullcontext()
