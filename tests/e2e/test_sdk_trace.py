"""Trace context through a real daemon and the SDK: with OpenTelemetry, a task
created inside a span carries it, and the teammate's handler runs in a child
span of it; a batch sent again from another span is the same batch; without
OpenTelemetry, nothing of it is needed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import corral
from tests.support.tracing import recording_provider

pytestmark = pytest.mark.timeout(30)

_EXPORTER = InMemorySpanExporter()


@pytest.fixture(scope="module")
def spans() -> Iterator[InMemorySpanExporter]:
    """A recording tracer provider for this module, unset after it."""
    with recording_provider(_EXPORTER) as exporter:
        yield exporter


def test_a_handler_span_is_the_child_of_the_span_that_created_the_task(
    lead: corral.Lead, spans: InMemorySpanExporter
) -> None:
    spans.clear()
    tracer = trace.get_tracer("lead")
    with tracer.start_as_current_span("plan the release") as lead_span:
        (created,) = lead.create_tasks([corral.TaskSpec("build")])
    context = lead_span.get_span_context()
    stored = lead.get_task("build").trace_parent
    assert stored == created.trace_parent
    assert stored.startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")
    ann = lead.add_teammate("ann")
    inner: list[int] = []

    def handler(task: corral.Task) -> bytes:
        inner.append(trace.get_current_span().get_span_context().trace_id)
        return b"built"

    summary = corral.run_teammate(handler, address=lead.address, token=ann.token, max_idle_polls=1, poll_interval=0.2)
    assert summary.completed == 1 and inner == [context.trace_id]
    (work,) = [span for span in spans.get_finished_spans() if span.name == "corral task build"]
    assert work.parent is not None and work.parent.span_id == context.span_id
    assert work.context.trace_id == context.trace_id
    assert work.attributes is not None and work.attributes["corral.task_id"] == "build"


def test_a_batch_sent_again_from_another_span_with_its_request_id_is_the_same_batch(
    lead: corral.Lead, spans: InMemorySpanExporter
) -> None:
    tracer = trace.get_tracer("lead")
    batch = [corral.TaskSpec("fetch"), corral.TaskSpec("build", depends_on=("fetch",))]
    with tracer.start_as_current_span("first try") as first_span:
        first = lead.create_tasks(batch, request_id="release-1")
    with tracer.start_as_current_span("second try") as second_span:
        again, unchanged = lead._create_batch(batch, request_id="release-1")
    assert first_span.get_span_context().span_id != second_span.get_span_context().span_id
    assert unchanged == ("fetch", "build"), "answered as the batch sent before"
    assert [(t.seq, t.create_time) for t in again] == [(t.seq, t.create_time) for t in first]
    assert [t.id for t in lead.list_tasks()] == ["fetch", "build"], "nothing new written"
    context = first_span.get_span_context()
    for task_id in ("fetch", "build"):
        assert lead.get_task(task_id).trace_parent.startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")
    with tracer.start_as_current_span("without a request id"):
        _, unchanged = lead._create_batch(batch, request_id=None)
    assert unchanged == ("fetch", "build"), "the same ids with the same specs"


def test_an_explicit_trace_parent_is_kept(lead: corral.Lead, spans: InMemorySpanExporter) -> None:
    mine = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with trace.get_tracer("lead").start_as_current_span("elsewhere"):
        lead.create_tasks([corral.TaskSpec("t", trace_parent=mine)])
    assert lead.get_task("t").trace_parent == mine


def test_a_bad_trace_parent_is_refused_with_the_field(lead: corral.Lead) -> None:
    with pytest.raises(corral.InvalidArgument, match=r"tasks\[0\]\.trace_parent"):
        lead.create_tasks([corral.TaskSpec("t", trace_parent="00-nonsense")])


def test_without_opentelemetry_tasks_carry_no_trace(tmp_path: Path) -> None:
    script = """
import sys
sys.modules["opentelemetry"] = None  # as if it were not installed
import corral
from corral import _convert, _tracing
assert _tracing.current_trace_parent() == ""
with _tracing.handler_span("t", 1, "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"):
    pass
request = _convert.create_tasks_request([corral.TaskSpec("t")], None)
assert request.tasks[0].trace_parent == ""
print("ok")
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0 and done.stdout.strip() == "ok", done.stderr
