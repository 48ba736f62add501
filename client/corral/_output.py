"""`corral.output(text)` and `run_teammate(..., capture_logs=True)`: a handler's
output reaches its claim through a contextvar that the runners set around each
handler, so concurrent handlers (asyncio tasks, threads) never mix their output."""

from __future__ import annotations

import contextlib
import contextvars
import logging
import threading
from collections.abc import Iterator
from typing import Protocol

__all__ = ["LOG_FORMAT", "OutputLogHandler", "capturing_logs", "output", "writing_output_to"]

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
"""How `capture_logs` writes each record: one line (a traceback follows on the lines after it)."""

# The loggers whose records are about output itself: never captured into output.
_OWN_LOGGER = "corral.output"


class _Writes(Protocol):
    def output(self, text: str) -> None: ...


_current_output: contextvars.ContextVar[_Writes] = contextvars.ContextVar("corral.current_output")


def output(text: str) -> None:
    """Add `text` to the live output of the task the calling handler works on (a
    handler that `corral.run_teammate` or `corral.aio.run_teammate` runs): the same as
    `current_claim().output(text)`, buffered and sent in the background, never waiting
    on the network. Raises LookupError outside a handler (a thread the handler starts
    itself does not inherit it: use `current_claim().output` there, or
    `contextvars.copy_context()`)."""
    try:
        target = _current_output.get()
    except LookupError:
        raise LookupError(
            "corral.output() is called outside a task handler: call it from a handler that "
            "run_teammate runs, or use claim.output(text) on a claim you hold"
        ) from None
    target.output(text)


@contextlib.contextmanager
def writing_output_to(claim: _Writes) -> Iterator[None]:
    """Within the block (and what it starts with this context), `output()` and captured
    log records go to `claim`."""
    token = _current_output.set(claim)
    try:
        yield
    finally:
        _current_output.reset(token)


class OutputLogHandler(logging.Handler):
    """Writes each record emitted where a handler's claim is current to that claim's
    output, one line per record (LOG_FORMAT); records elsewhere, and the SDK's own
    records about output, are left alone."""

    def __init__(self) -> None:
        super().__init__()
        self.setFormatter(logging.Formatter(LOG_FORMAT))

    def emit(self, record: logging.LogRecord) -> None:
        if record.name == _OWN_LOGGER or record.name.startswith(_OWN_LOGGER + "."):
            return
        target = _current_output.get(None)
        if target is None:
            return
        try:
            target.output(self.format(record) + "\n")
        except Exception:  # noqa: BLE001 (logging must not raise into the caller)
            self.handleError(record)


# One handler on the root logger however many runs capture at once, so a record is
# written once: the contextvar picks its claim.
_capture_lock = threading.Lock()
_capture_users = 0
_capture_handler: OutputLogHandler | None = None


@contextlib.contextmanager
def capturing_logs(enabled: bool = True) -> Iterator[None]:
    """While the block runs, route `logging` records emitted in a handler's context to
    its claim's output (records pass the loggers' levels as configured)."""
    global _capture_users, _capture_handler
    if not enabled:
        yield
        return
    with _capture_lock:
        if _capture_users == 0:
            _capture_handler = OutputLogHandler()
            logging.getLogger().addHandler(_capture_handler)
        _capture_users += 1
    try:
        yield
    finally:
        with _capture_lock:
            _capture_users -= 1
            if _capture_users == 0 and _capture_handler is not None:
                logging.getLogger().removeHandler(_capture_handler)
                _capture_handler = None
