"""A handler's live output through the SDK and a real daemon, on both teammate
transports: `claim.output`, `corral.output` and captured log records arrive whole
and in order through `Lead.tail_output`, batched into few appends and flushed before
the claim completes; an attempt's output limit does not fail the handler; a tail
resumes across a daemon restart with no gap and no repeat."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterable
from pathlib import Path

import pytest

import corral
import corral.aio
from tests.support import FAST_POLL, TeammateThread, task_reached, watch_until

pytestmark = [pytest.mark.usefixtures("transport"), pytest.mark.timeout(60)]

APPENDED = "appended"  # the flusher's debug record of each append (logger corral.output)


def _read_to_end(chunks: Iterable[corral.OutputChunk], start: int = 0) -> tuple[bytes, list[corral.OutputChunk]]:
    """Every chunk to the `end` chunk, checking each starts where the last one stopped."""
    seen: list[corral.OutputChunk] = []
    at = start
    for chunk in chunks:
        assert chunk.offset == at, f"a gap or a repeat: a chunk at {chunk.offset}, expected {at}"
        seen.append(chunk)
        at += len(chunk.data)
        if chunk.end:
            assert not chunk.data
            break
    assert seen and seen[-1].end, "the tail stopped before the attempt's end"
    return b"".join(chunk.data for chunk in seen), seen


def _appends(caplog: pytest.LogCaptureFixture, task_id: str) -> int:
    return sum(1 for r in caplog.records if r.name == "corral.output" and f"task {task_id}: {APPENDED}" in r.message)


def test_output_and_captured_logs_arrive_whole_in_order_in_few_appends_before_the_end(
    lead: corral.Lead, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="corral.output")
    work_log = logging.getLogger("tests.output.work")
    work_log.setLevel(logging.INFO)
    lead.create_tasks([corral.TaskSpec("t")])
    go = threading.Event()
    lines = [f"step {i}\n" for i in range(500)]

    def handler(task: corral.Task) -> str:
        corral.current_claim().output("begin\n")
        assert go.wait(20)
        for line in lines:  # many small writes: few appends
            corral.output(line)
        work_log.info("from the log")
        corral.output("é and the last line\n")  # UTF-8
        return "done"

    mate = TeammateThread(lead, "ann", handler, capture_logs=True, max_idle_polls=3).start()
    watch_until(lead, task_reached("t", corral.TaskState.IN_PROGRESS))
    tail = lead.tail_output("t")  # follows from before the handler's first write
    first = next(tail)
    assert (first.attempt, first.offset, first.data) == (1, 0, b"begin\n")
    go.set()  # the rest comes while the tail follows
    rest, chunks = _read_to_end(tail, start=len(first.data))
    text = (first.data + rest).decode()
    written, last = "begin\n" + "".join(lines), "é and the last line\n"
    assert text.startswith(written) and text.endswith(last)
    record = text[len(written) : -len(last)]  # the captured log record, one line
    assert record.count("\n") == 1 and record.endswith(" INFO tests.output.work: from the log\n"), record
    assert chunks[-1].end and chunks[-1].offset == len(text.encode())
    assert mate.result().completed == 1 and lead.get_task("t").result == b"done"
    # The tail saw the whole output before the end chunk: it was flushed before the completion.
    stored = b"".join(c.data for c in lead.tail_output("t", follow=False))
    assert stored == text.encode()
    assert 2 <= _appends(caplog, "t") <= 6, "500 writes within a moment are a few appends, not one each"
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING and r.name == "corral.output"]


def test_output_past_the_attempts_limit_does_not_fail_the_handler(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG, logger="corral.output")
    with corral.Lead.launch(tmp_path / "state", extra_args=["--max-output-bytes", "1000"]) as lead:
        lead.create_tasks([corral.TaskSpec("big")])
        go = threading.Event()

        def handler(task: corral.Task) -> str:
            corral.output("a" * 600)
            assert go.wait(20)
            corral.output("b" * 600)  # past the limit: refused whole
            corral.output("c" * 10)  # nothing more is sent
            return "finished anyway"

        mate = TeammateThread(lead, "ann", handler, max_idle_polls=3).start()
        watch_until(lead, task_reached("big", corral.TaskState.IN_PROGRESS))
        tail = lead.tail_output("big")
        assert next(tail).data == b"a" * 600
        go.set()
        rest, _ = _read_to_end(tail, start=600)
        assert rest == b""
        assert mate.result().completed == 1
        assert lead.get_task("big").result == b"finished anyway"
    warnings = [r for r in caplog.records if r.name == "corral.output" and r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "limit" in warnings[0].message


def test_aio_handlers_output_and_logs_go_to_their_own_claims(lead: corral.Lead) -> None:
    """Two coroutine handlers at once on one teammate: each one's output and log records
    reach its own task's output only."""
    work_log = logging.getLogger("tests.output.aio")
    work_log.setLevel(logging.INFO)
    lead.create_tasks([corral.TaskSpec("x"), corral.TaskSpec("y")])
    env = lead.teammate_env(lead.add_teammate("ann"))

    async def handler(task: corral.Task) -> str:
        for i in range(20):
            corral.aio.output(f"{task.id} {i}\n")
            work_log.info("%s logged %d", task.id, i)
            await asyncio.sleep(0)  # let the other handler interleave
        return task.id

    async def scenario() -> dict[str, bytes]:
        summary = await corral.aio.run_teammate(
            handler,
            address=env["CORRAL_ADDRESS"],
            token=env["CORRAL_TOKEN"],
            slots=2,
            max_idle_polls=3,
            poll_interval=FAST_POLL,
            capture_logs=True,
        )
        assert summary.completed == 2
        async with await corral.aio.Lead.connect(lead.address, lead.token) as reader:
            return {
                task_id: b"".join([chunk.data async for chunk in reader.tail_output(task_id)]) for task_id in ("x", "y")
            }

    outputs = asyncio.run(scenario())
    for task_id, other in (("x", "y"), ("y", "x")):
        lines = outputs[task_id].decode().splitlines()
        assert [line for line in lines if " INFO " not in line] == [f"{task_id} {i}" for i in range(20)]
        logged = [line.split(": ", 1)[1] for line in lines if " INFO tests.output.aio: " in line]
        assert logged == [f"{task_id} logged {i}" for i in range(20)]
        assert other not in outputs[task_id].decode()


def test_corral_output_outside_a_handler_says_so() -> None:
    with pytest.raises(LookupError, match="outside a task handler"):
        corral.output("nowhere to go")


@pytest.mark.timeout(90)
def test_a_tail_resumes_across_a_daemon_restart_with_no_gap_and_no_repeat(tmp_path: Path) -> None:
    state = tmp_path / "state"
    first = corral.Lead.launch(state)
    go = threading.Event()

    def handler(task: corral.Task) -> str:
        corral.output("before the restart\n")
        assert go.wait(60)
        corral.output("after the restart\n")
        return "ok"

    try:
        first.create_tasks([corral.TaskSpec("r")])
        mate = TeammateThread(first, "ann", handler, stop_on_idle_timeout=False, reconnect_timeout=30).start()
        watch_until(first, task_reached("r", corral.TaskState.IN_PROGRESS))
        reader = corral.Lead.connect(first.address, first.token)
        tail = reader.tail_output("r", reconnect_timeout=30)
        before = next(tail)
        assert before.data == b"before the restart\n"
    finally:
        first.close()  # SIGTERM: the tail's stream ends; it reconnects
    try:
        with corral.Lead.launch(state) as second:
            assert second.address == first.address
            go.set()
            rest, chunks = _read_to_end(tail, start=len(before.data))
            assert before.data + rest == b"before the restart\nafter the restart\n"
            assert {chunk.attempt for chunk in chunks} == {before.attempt}
            assert second.get_task("r").state is corral.TaskState.COMPLETED
            second.request_shutdown("ann")
            assert mate.result().completed == 1
    finally:
        reader.close()
