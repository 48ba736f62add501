"""W3C trace context across the board, when OpenTelemetry is installed.

With `opentelemetry-api` importable, `create_tasks` stamps each spec that has
no `trace_parent` with the caller's current span, and `run_teammate` runs
each handler in a span that is that context's child: a Lead's trace then
shows every task's work. Without it both are no-ops, and corral needs no
OpenTelemetry at all.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

try:
    from opentelemetry import trace
    from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
except ImportError:  # pragma: no cover - exercised where OpenTelemetry is absent
    trace = None  # type: ignore[assignment]

__all__ = ["current_trace_parent", "handler_span"]

_FORMAT: Any = TraceContextTextMapPropagator() if trace is not None else None


def current_trace_parent() -> str:
    """The current span as a `traceparent` ("" with no OpenTelemetry or no valid span)."""
    if trace is None:
        return ""
    carrier: dict[str, str] = {}
    _FORMAT.inject(carrier)
    return carrier.get("traceparent", "")


@contextlib.contextmanager
def handler_span(task_id: str, attempt: int, trace_parent: str) -> Iterator[None]:
    """A span around one handler run, the child of the task's `trace_parent` (if any)."""
    if trace is None:
        yield
        return
    parent = _FORMAT.extract({"traceparent": trace_parent}) if trace_parent else None
    tracer = trace.get_tracer("corral")
    attributes: dict[str, str | int] = {"corral.task_id": task_id, "corral.attempt": attempt}
    with tracer.start_as_current_span(
        f"corral task {task_id}", context=parent, kind=trace.SpanKind.CONSUMER, attributes=attributes
    ):
        yield
