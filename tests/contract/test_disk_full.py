"""A full disk (SQLite's commits fail): writes are refused UNAVAILABLE and logged once each,
Idle streams still deliver what is stored, and SIGTERM still exits 0.

`before_commit=error:3+` makes every commit fail after the daemon's first two (recovery
at start, then the reaper's first pass), as SQLITE_FULL would; `before_checkpoint=error`
makes the final checkpoint fail.
"""

from __future__ import annotations

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support import STOP_TIMEOUT_S, wait_until

from .wire import assert_status, rpc_error, spec

pytestmark = pytest.mark.sqlite_only  # SQLite's disk and checkpoint failures

COMMITS_FAIL_AFTER_START = "before_commit=error:3+"
COMMITS_AT_START = 2


def wait_for_commits_to_fail(daemon) -> None:
    wait_until(lambda: daemon.stats().writer.commits == COMMITS_AT_START, 10, "the daemon's own commits at start")


def lines_with(text: str, log: str) -> list[str]:
    return [line for line in log.splitlines() if text in line]


@pytest.mark.timeout(60)
def test_a_failed_final_checkpoint_still_exits_zero_and_loses_nothing(corrald):
    daemon = corrald(failpoints="before_checkpoint=error")
    daemon.create_tasks(spec("kept"))
    code, took = daemon.terminate()
    assert code == 0 and took < STOP_TIMEOUT_S, (code, took, daemon.stderr_tail())
    log = daemon.latest_log()
    assert len(lines_with("final checkpoint failed", log)) == 1, log
    assert "Traceback" not in log, log
    again = corrald(daemon.state_dir)  # the WAL the checkpoint left is replayed
    assert again.get_task("kept").id == "kept"


@pytest.mark.timeout(60)
def test_each_failed_commit_logs_one_line_and_no_traceback(corrald):
    daemon = corrald(failpoints=COMMITS_FAIL_AFTER_START)
    wait_for_commits_to_fail(daemon)
    writes = [
        lambda: daemon.lead.lead.CreateTasks(pb.CreateTasksRequest(tasks=[spec("a")])),
        lambda: daemon.lead.lead.CreateTasks(pb.CreateTasksRequest(tasks=[spec("b"), spec("c", "b")])),
        lambda: daemon.lead.lead.AddTeammate(pb.AddTeammateRequest(name="ghost")),
        lambda: daemon.lead.lead.CancelTasks(pb.CancelTasksRequest(ids=["nothing"])),
        lambda: daemon.lead.board.SendMessage(pb.SendMessageRequest(to="nobody", body="lost")),
    ]
    for write in writes:
        assert_status(rpc_error(write), grpc.StatusCode.UNAVAILABLE, reason="COMMIT_FAILED")

    # The reaper's own passes fail too, at any moment: compare the log with the writer's
    # count when the two agree, which they always do if each failure logs one line.
    def failures_and_lines() -> tuple[int, int, int] | None:
        failed = daemon.stats().writer.failed_commits
        log = daemon.latest_log()
        lines = len(lines_with("commit of 1 jobs failed: injected failure", log))
        mentions = len(lines_with("injected failure", log))  # nothing else repeats it
        return (failed, lines, mentions) if daemon.stats().writer.failed_commits == failed else None

    failed, lines, mentions = wait_until(failures_and_lines, 5, "a steady count of failed commits")
    assert failed >= len(writes)
    assert lines == mentions == failed, daemon.latest_log()
    assert "Traceback" not in daemon.latest_log()
    assert daemon.stats().writer.commits == COMMITS_AT_START


@pytest.mark.timeout(60)
def test_a_storage_error_inside_a_job_is_one_line_and_unavailable(corrald):
    """The job alone fails (the rest of its batch commits); it reads as a failed commit."""
    daemon = corrald(failpoints="job:lead=error")
    error = rpc_error(daemon.lead.lead.CreateTasks, pb.CreateTasksRequest(tasks=[spec("a")]))
    assert_status(error, grpc.StatusCode.UNAVAILABLE, reason="COMMIT_FAILED")
    # The reply can overtake the log line's write to the file.
    wait_until(lambda: lines_with("injected failure", daemon.latest_log()), 10, "the failure in the log")
    log = daemon.latest_log()
    assert len(lines_with("injected failure", log)) == 1, log
    assert "Traceback" not in log, log


@pytest.mark.timeout(60)
def test_idle_streams_deliver_what_is_stored_while_commits_fail(corrald):
    """Held claims are re-sent, messages and shutdown requests delivered, and no new claim is
    made past what a read can see; the streams stay open."""
    daemon = corrald()
    holder, told, fresh = (daemon.add_teammate(name) for name in ("holder", "told", "fresh"))
    daemon.create_tasks(spec("held"))
    stream = holder.idle()
    claim = stream.next_event("claim")
    stream.cancel()
    daemon.create_tasks(spec("free"))
    daemon.lead.board.SendMessage(pb.SendMessageRequest(to="holder", body="hello"))
    shutdown = daemon.lead.lead.RequestShutdown(pb.RequestShutdownRequest(name="told", reason="done"))
    code, _ = daemon.terminate()
    assert code == 0, daemon.stderr_tail()

    daemon = corrald(daemon.state_dir, failpoints=COMMITS_FAIL_AFTER_START)
    wait_for_commits_to_fail(daemon)
    holder, told, fresh = (daemon.client(mate.token, mate.name) for mate in (holder, told, fresh))
    holding, telling, idling = holder.idle(), told.idle(), fresh.idle(poll_interval=0.1)
    resent = holding.next_event("claim")
    assert (resent.task.id, resent.claim_token, resent.fence) == ("held", claim.claim_token, claim.fence)
    assert holding.next_event("message").body == "hello"
    assert telling.next_event("shutdown_request").request_id == shutdown.request_id
    # "free" is ready, but only a commit may claim it; the streams stay open.
    assert idling.expect_quiet(1.0, then=lambda: daemon.get_task("free")).state == pb.TASK_STATE_PENDING
    stats = holding.expect_quiet(0.1, then=daemon.stats)
    assert stats.writer.commits == COMMITS_AT_START and stats.writer.failed_commits > 0
    assert stats.open_streams == 3
    assert "Traceback" not in daemon.latest_log()
    for stream in (holding, telling, idling):
        stream.cancel()
