"""Unary writes with a request id: the key a call is kept under, and its answer when it
ran before (the board keeps the records: requestids.py)."""

from __future__ import annotations

import hashlib
from collections.abc import Awaitable, Callable
from typing import TypeVar

from google.protobuf.message import Message

from corral.v1 import corral_pb2 as pb

from .. import cpu, errors
from ..credentials import Identity
from ..requestids import AnsweredBefore, RequestKey

R = TypeVar("R")
M = TypeVar("M", bound=Message)


async def answer(
    identity: Identity,
    request: Message,
    limit_chars: int,
    call: Callable[[RequestKey | None], Awaitable[R]],
    reply: Callable[[R], M],
    *,
    credential_field: str = "",
    inline: Callable[[R], bool] = lambda result: True,
) -> M:
    """`reply(await call(key))`; a call sent before with the same request id gets its first
    answer instead. A `credential_field` is never kept: a retry's answer has the new
    credential the board minted for it. With a request id, the reply is built once, in
    the write's transaction (it is kept there); without one, off the event loop unless
    `inline(result)` (cpu.py)."""
    rpc = request.DESCRIPTOR.name.removesuffix("Request")
    built: list[M] = []
    key = _key(identity, request, rpc, limit_chars, reply, credential_field, built)
    try:
        result = await call(key)
    except AnsweredBefore as before:
        response = getattr(pb, f"{rpc}Response").FromString(before.response)
        if credential_field:
            setattr(response, credential_field, before.credential)
        return response
    if built:
        return built[0]
    return await cpu.run(lambda: reply(result), inline=inline(result))


def _key(
    identity: Identity,
    request: Message,
    rpc: str,
    limit_chars: int,
    reply: Callable[[R], M],
    credential_field: str,
    built: list[M],
) -> RequestKey | None:
    request_id: str = getattr(request, "request_id")  # noqa: B009 (every such request has one)
    if not request_id:
        return None
    if len(request_id) > limit_chars:
        raise errors.InvalidArgument("request_id", f"longer than {limit_chars} characters")
    fields = type(request)()
    fields.CopyFrom(request)
    fields.ClearField("request_id")
    digest = hashlib.sha256(rpc.encode() + b"\0" + fields.SerializeToString(deterministic=True)).digest()

    def encode(result: R) -> bytes:
        response = reply(result)
        # Only the last run's: a batch that runs again (savepoints, a busy retry) encodes
        # again, and its last run is the one that committed.
        built[:] = [response]
        if not credential_field:
            return response.SerializeToString(deterministic=True)
        kept = type(response)()
        kept.CopyFrom(response)
        kept.ClearField(credential_field)
        return kept.SerializeToString(deterministic=True)

    return RequestKey(identity.name, rpc, request_id, digest, encode)
