"""A burst of concurrent unary calls on one connection: every call is served or refused by
admission (RESOURCE_EXHAUSTED, ErrorInfo OVERLOADED, RetryInfo), and each refusal is counted.

gRPC core holds calls the Python server has not taken yet in a queue of its own, and past
its bound cancels them with no status details (see server/DESIGN.md, "Calls gRPC core
answers"); the daemon sizes that queue and the per-connection stream limit above any burst
the lanes should answer.
"""

from __future__ import annotations

import asyncio
import collections

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc

from .wire import assert_status, bearer

# Past gRPC core's default queue of calls not yet taken by the application (1,000, with
# rejection certain from 3,000), which a burst of this size fills in well under a second.
BURST = 4000


async def _burst(address: str, token: str, count: int) -> list[grpc.RpcError | None]:
    async with grpc.aio.insecure_channel(address) as channel:
        stub = corral_pb2_grpc.BoardServiceStub(channel)
        metadata = bearer(token)
        await stub.GetStats(pb.GetStatsRequest(), metadata=metadata, timeout=10)  # connected before the burst

        async def one() -> grpc.RpcError | None:
            try:
                await stub.GetTask(pb.GetTaskRequest(id="absent"), metadata=metadata, timeout=30)
            except grpc.aio.AioRpcError as error:
                return None if error.code() == grpc.StatusCode.NOT_FOUND else error
            raise AssertionError("GetTask found a task on an empty board")

        return await asyncio.wait_for(asyncio.gather(*(one() for _ in range(count))), 60)


@pytest.mark.timeout(90)
def test_a_burst_on_one_connection_is_served_or_refused_with_retry_info(corrald):
    daemon = corrald(extra_args=["--calls-per-identity", "1", "--waiting-per-identity", "20"])
    failures = asyncio.run(_burst(daemon.address, daemon.lead_token, BURST))
    refused = [error for error in failures if error is not None]
    codes = collections.Counter(error.code().name for error in refused)
    assert set(codes) <= {"RESOURCE_EXHAUSTED"}, f"calls ended outside admission: {codes}"
    for error in refused:
        found = assert_status(error, grpc.StatusCode.RESOURCE_EXHAUSTED, reason="OVERLOADED")
        retry = found.get("retry_info")
        assert retry is not None and (retry.retry_delay.seconds or retry.retry_delay.nanos), "no RetryInfo delay"
    assert refused, f"{BURST} concurrent calls never passed a line of 20"
    assert daemon.stats().refused_calls == len(refused)
