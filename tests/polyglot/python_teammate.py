"""A Python SDK teammate in a process of its own, logging like node/teammate.js.

The transport is chosen per process (CORRAL_TRANSPORT=idle|session, read by
the SDK), so a test that wants both on one daemon runs each in its own
process. Environment: CORRAL_ADDRESS, CORRAL_TOKEN, CORRAL_TRANSPORT (read by
the SDK); CORRAL_NAME, CORRAL_MAX_IDLE_POLLS, CORRAL_POLL_INTERVAL_MS,
CORRAL_WORK_MS (as for the Node teammate).

stdout: one JSON object per line: `handled` per task the handler finished
(its completion is reported to the daemon after that), then `exit` with the
run's summary.
"""

from __future__ import annotations

import json
import os
import sys
import threading

from corral import Task, run_teammate


def main() -> int:
    name = os.environ["CORRAL_NAME"]
    work_s = int(os.environ.get("CORRAL_WORK_MS", "0")) / 1000
    simulated_work = threading.Event()  # never set: wait() is the work's duration
    lock = threading.Lock()

    def emit(event: str, **fields: object) -> None:
        with lock:
            sys.stdout.write(json.dumps({"event": event, "teammate": name, **fields}) + "\n")
            sys.stdout.flush()

    def handle(task: Task) -> bytes:
        simulated_work.wait(work_s)
        emit("handled", task=task.id)
        return json.dumps({"by": "python", "teammate": name, "task": task.id}).encode()

    summary = run_teammate(
        handle,
        max_idle_polls=int(os.environ.get("CORRAL_MAX_IDLE_POLLS", "600")),
        poll_interval=int(os.environ.get("CORRAL_POLL_INTERVAL_MS", "200")) / 1000,
    )
    emit(
        "exit",
        reason=summary.exit_reason.name,
        completed=summary.completed,
        failed=summary.failed,
        lost=summary.lost,
        transport=os.environ.get("CORRAL_TRANSPORT", ""),
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
