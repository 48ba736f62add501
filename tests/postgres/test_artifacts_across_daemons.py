"""Artifacts on a PostgreSQL board served by two daemons: an artifact uploaded through one
is served by the other byte for byte, listed on its tasks and in a dependent's claim there;
and the board-wide quota holds when uploads attach through both daemons at once."""

from __future__ import annotations

import concurrent.futures
import hashlib
import os

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.contract.test_artifacts import MIB, get, put
from tests.contract.wire import spec

pytestmark = pytest.mark.timeout(120)


def test_an_artifact_uploaded_through_one_daemon_is_served_by_another(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("writer")
    reader = b.client(mate.token, "writer")
    a.create_tasks(spec("t"), spec("u", "t"))
    stream = mate.idle()
    claim = stream.next_event("claim", timeout=5.0)
    data = os.urandom(5 * MIB + 3)
    answer = put(mate, claim, data, name="data/blob.bin")
    assert get(b.lead, "t", "data/blob.bin") == data
    assert hashlib.sha256(get(reader, "t", "data/blob.bin")).hexdigest() == answer.sha256
    assert list(b.get_task("t").artifacts) == [answer]
    mate.complete(claim)
    dependent = stream.next_event("claim", timeout=5.0)
    assert [(d.task_id, d.artifact) for d in dependent.dependency_artifacts] == [("t", answer)]
    stream.cancel()


def test_the_quota_holds_when_two_daemons_attach_at_once(shared_board):
    quota = ("--max-artifact-store-bytes", str(5 * MIB))
    a, b = shared_board.daemon("a", extra_args=quota), shared_board.daemon("b", extra_args=quota)
    ids = [f"t{n}" for n in range(8)]
    a.create_tasks(*(spec(task_id) for task_id in ids))
    mates = [(a if n % 2 else b).client(a.add_teammate(f"m{n}").token, f"m{n}") for n in range(8)]
    streams = [mate.idle() for mate in mates]
    claims = [stream.next_event("claim", timeout=10.0) for stream in streams]

    def upload(n: int):
        try:
            return put(mates[n], claims[n], bytes([n]) * MIB, name="f")
        except grpc.RpcError as error:
            return error

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        outcomes = list(pool.map(upload, range(8)))
    kept = [outcome for outcome in outcomes if isinstance(outcome, pb.Artifact)]
    refused = [outcome for outcome in outcomes if not isinstance(outcome, pb.Artifact)]
    assert len(kept) == 5, outcomes
    assert all(error.code() == grpc.StatusCode.RESOURCE_EXHAUSTED for error in refused)
    assert sum(len(a.get_task(task_id).artifacts) for task_id in ids) == 5
    for stream in streams:
        stream.cancel()
