"""The daemon's log tells what happened on the board, one line each, and never a token."""

from __future__ import annotations

import json

import pytest

from corral.v1 import corral_pb2 as pb
from tests.support.waiting import wait_until

from .wire import rpc_error, spec


def activity(daemon) -> list[dict]:
    """The `activity` objects of the JSON log lines written so far."""
    found = []
    for line in daemon.all_logs().splitlines():
        if line.startswith("{"):
            entry = json.loads(line)
            if "activity" in entry:
                assert entry["level"] == "info" and entry["logger"] == "corrald.activity", entry
                found.append(entry["activity"])
    return found


@pytest.mark.timeout(60)
def test_joins_claims_completions_failures_expiries_and_refusals_are_logged(corrald):
    daemon = corrald(extra_args=["--log-format", "json"])
    ann = daemon.add_teammate("ann")
    watch = daemon.watch()
    daemon.create_tasks(spec("ok"), spec("flaky", max_attempts=2), spec("slow", lease=1))
    stream = ann.idle(slots=3)
    claims = {claim.task.id: claim for claim in (stream.next_event("claim") for _ in range(3))}
    ann.complete(claims["ok"])
    ann.teammate.FailTask(
        pb.FailTaskRequest(task_id="flaky", claim_token=claims["flaky"].claim_token, error="bad", retryable=True)
    )
    again = stream.next_event("claim", timeout=5)  # flaky's second attempt
    assert again.task.id == "flaky"
    watch.next_matching(  # slow's 1 s lease runs out and the reaper takes the task back
        lambda e: (
            e.WhichOneof("event") == "task_changed"
            and e.task_changed.id == "slow"
            and e.task_changed.state == pb.TASK_STATE_PENDING
            and "lease expired" in e.task_changed.error
        ),
        what="slow back to pending",
        timeout=10,
    )
    watch.cancel()
    stray = daemon.client("corral-tm-not-a-real-token", "stray")
    rpc_error(stray.board.GetStats, pb.GetStatsRequest())
    stream.call.cancel()
    # Leaving is a write: wait for it, or SIGTERM may refuse it as not yet taken.
    wait_until(lambda: any(entry["event"] == "left" for entry in activity(daemon)), timeout=10, what="ann's leave")
    daemon.stop_and_check()

    seen = activity(daemon)
    events = [entry["event"] for entry in seen]
    for wanted in ("added", "joined", "claimed", "completed", "failed", "lease_expired", "left", "refused"):
        assert wanted in events, (wanted, events)
    assert {"event": "completed", "task": "ok", "teammate": "ann"} in seen
    failed = next(entry for entry in seen if entry["event"] == "failed")
    assert (failed["task"], failed["final"], failed["error"]) == ("flaky", False, "bad")
    first = next(entry for entry in seen if entry["event"] == "claimed")
    assert first["teammate"] == "ann" and first["attempt"] == 1 and first["fence"] >= 1
    refused = next(entry for entry in seen if entry["event"] == "refused")
    assert refused["caller"] == "" and refused["reason"]
    text = daemon.all_logs()
    for secret in (
        ann.token,
        daemon.read_lead_token(),
        "corral-tm-not-a-real-token",
        *(claim.claim_token for claim in claims.values()),
    ):
        assert secret not in text, "a credential or claim token reached the log"
