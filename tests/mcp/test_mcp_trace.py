"""The bridges with OpenTelemetry configured: the MCP SDK opens a span for each
request, so a tool call sent again carries another trace context. A create_tasks
sent again with its request_id, and a propose_tasks sent again, are answered as
the first call was; the tasks keep the first call's trace context."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

import corral
from tests.support.tracing import recording_provider

from .mcpkit import bridge_agent

pytestmark = pytest.mark.timeout(40)


@pytest.fixture(scope="module", autouse=True)
def spans() -> Iterator[InMemorySpanExporter]:
    """A recording tracer provider for this module, unset after it."""
    with recording_provider(InMemorySpanExporter()) as exporter:
        yield exporter


def traces_of(spans: InMemorySpanExporter) -> set[str]:
    """The trace ids (as a traceparent spells them) of the spans finished since the last
    call, which clears them: what one tool call ran under."""
    found = {f"{span.context.trace_id:032x}" for span in spans.get_finished_spans()}
    spans.clear()
    return found


def assert_sent_from_two_traces(stored: str, first: set[str], again: set[str]) -> None:
    """The two calls ran under traces of their own, and the task kept the first's."""
    assert first and again and not first & again, (first, again)
    assert stored.split("-")[1] in first


def test_a_create_tasks_sent_again_with_its_request_id_is_the_same_batch(board, secrets, spans) -> None:
    # A role no teammate has: the module's other teammates are not handed these.
    tasks = [
        {"id": "traced-a", "required_role": "nobody"},
        {"id": "traced-b", "required_role": "nobody", "depends_on": ["traced-a"]},
    ]

    async def scenario() -> None:
        async with bridge_agent(board.address, board.token, secrets) as lead:
            traces_of(spans)
            first = await lead.ok("create_tasks", tasks=tasks, request_id="traced-batch")
            first_traces = traces_of(spans)
            stored = board.get_task("traced-a").trace_parent
            assert stored, "the bridge's request ran in a span"
            again = await lead.ok("create_tasks", tasks=tasks, request_id="traced-batch")
            assert_sent_from_two_traces(stored, first_traces, traces_of(spans))
            assert again["task_ids"] == first["task_ids"] == ["traced-a", "traced-b"]
            assert board.get_task("traced-a").trace_parent == stored

    asyncio.run(scenario())


def test_a_propose_tasks_sent_again_answers_as_before(board, secrets, mint, spans) -> None:
    name, token = mint(roles=["tracer"])
    held, found = f"{name}-held", f"{name}-found"

    async def scenario() -> None:
        async with (
            bridge_agent(board.address, board.token, secrets) as lead,
            bridge_agent(board.address, token, secrets) as mate,
        ):
            await lead.ok("create_tasks", tasks=[{"id": held, "required_role": "tracer"}])
            assert (await mate.ok("next_item", wait_seconds=5))["claim"]["task_id"] == held
            spec = {"id": found, "title": "found on the way", "required_role": "tracer"}
            traces_of(spans)
            first = await mate.ok("propose_tasks", tasks=[spec])
            first_traces = traces_of(spans)
            stored = board.get_task(found).trace_parent
            assert stored, "the bridge's request ran in a span"
            again = await mate.ok("propose_tasks", tasks=[spec])
            assert_sent_from_two_traces(stored, first_traces, traces_of(spans))
            assert again["task_ids"] == first["task_ids"] == [found]
            assert board.get_task(found).trace_parent == stored
            assert board.get_task(found).state is corral.TaskState.PROPOSED

    asyncio.run(scenario())
