"""Races between daemons of one board, many times over: a claim against a shutdown request
sent through another daemon (invariant 5: no claim while a protocol message waits), and a
new task against the completion of its dependency (the new task becomes ready either way).
"""

from __future__ import annotations

import concurrent.futures
import os

import pytest

from corral.v1 import corral_pb2 as pb
from tests.contract.session_board import shutdown_gate_breaches
from tests.contract.wire import duration, spec

SOAK = os.environ.get("CORRAL_SOAK") == "1"
SHUTDOWN_RACES = 1_000 if SOAK else 150
DEPENDENCY_RACES = 500 if SOAK else 100


@pytest.mark.timeout(600 if SOAK else 120)
def test_no_claim_reaches_a_teammate_while_a_shutdown_request_sent_elsewhere_waits(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("raced")
    stream = a.client(mate.token, "raced").idle(poll_interval=60)
    a.wait_open_streams(1)
    teammate = a.client(mate.token, "raced")
    received_order = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for round_no in range(SHUTDOWN_RACES):
            task = pool.submit(a.create_tasks, spec(f"r{round_no}"))
            request = pb.RequestShutdownRequest(name="raced", reason=f"round {round_no}")
            request.grace.CopyFrom(duration(60))
            shutdown = pool.submit(b.lead.lead.RequestShutdown, request)
            task.result(10), shutdown.result(10)
            got_request = got_claim = None
            while got_request is None or got_claim is None:
                item = stream.next(10)
                which = item.WhichOneof("event")
                received_order.append(which)
                if which == "shutdown_request":
                    got_request = item.shutdown_request
                    # Answered no, then acknowledged: the gate opens again.
                    teammate.teammate.RespondShutdown(
                        pb.RespondShutdownRequest(request_id=got_request.request_id, approve=False, reason="busy")
                    )
                    teammate.ack(got_request.seq)
                elif which == "claim":
                    got_claim = item.claim
                    teammate.complete(got_claim)
    stream.cancel()
    with shared_board.connection() as conn:
        breaches = shutdown_gate_breaches(conn)
    assert breaches == [], breaches[:5]
    assert received_order.count("claim") == SHUTDOWN_RACES


@pytest.mark.timeout(300 if SOAK else 90)
def test_a_task_created_through_one_daemon_as_its_dependency_completes_on_another_becomes_ready(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("finisher")
    worker = b.client(mate.token, "finisher")
    stream = worker.idle(poll_interval=60)
    b.wait_open_streams(1)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for round_no in range(DEPENDENCY_RACES):
            a.create_tasks(spec(f"dep{round_no}"))
            claim = stream.next_event("claim", timeout=10)
            assert claim.task.id == f"dep{round_no}"
            # The completion (through b) and the dependent's creation (through a) race.
            done = pool.submit(worker.complete, claim)
            made = pool.submit(a.create_tasks, spec(f"child{round_no}", f"dep{round_no}"))
            done.result(10), made.result(10)
            child_item = stream.try_next(10)
            if child_item is None:
                row = shared_board.sql(
                    "SELECT state, unmet_deps, gate_shut, owner FROM tasks WHERE id = %s", (f"child{round_no}",)
                )
                pytest.fail(f"round {round_no}: no claim of the dependent (state, unmet, gate, owner): {row}")
            child = child_item.claim
            assert child.task.id == f"child{round_no}", f"round {round_no}: {child_item}"
            worker.complete(child)
    stream.cancel()
    assert all(task.state == pb.TASK_STATE_COMPLETED for task in a.all_tasks())
