"""A recording OpenTelemetry tracer provider for a test module, unset afterwards."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.util._once import Once


@contextlib.contextmanager
def recording_provider(exporter: InMemorySpanExporter) -> Iterator[InMemorySpanExporter]:
    """The process's tracer provider (OpenTelemetry allows one), recording into `exporter`;
    afterwards none is set again, as OpenTelemetry's own test utilities reset it: the later
    tests of this process would run under it otherwise (the MCP SDK, in process in the
    tests/mcp bridge, would then open a recording span per request)."""
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    try:
        yield exporter
    finally:
        provider.shutdown()
        trace._TRACER_PROVIDER_SET_ONCE = Once()  # private, as opentelemetry-test-utils resets it
        trace._TRACER_PROVIDER = None
