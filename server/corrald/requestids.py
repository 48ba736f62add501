"""A unary write sent with a request id runs once.

The call's first outcome, its response as sent or its error, is kept with the
caller's Session op records (store/ops.py), in the transaction of the write itself,
so there is never a write without its record nor a record without its write. A
call with the same request id within the records' lifetime is answered from the
record and changes nothing (`AnsweredBefore`); the same id with other fields is
INVALID_ARGUMENT. This is what makes a write whose answer was lost, or answered
COMMIT_IN_DOUBT, safe to send again.

A response that carried a credential (AddTeammate, AddViewer) is kept without it:
the retry mints a new one and revokes the first (`replay`), since the caller
never saw it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any, TypeVar

from .errors import CorralError
from .store import ops
from .txn import OpOutcome, Txn

T = TypeVar("T")


@dataclasses.dataclass(frozen=True)
class RequestKey:
    """Who sent which call with which id, and how to keep its answer."""

    caller: str  # the identity's name: "lead", or the teammate's
    rpc: str  # the method's name: an id names one call of one RPC
    request_id: str
    digest: bytes  # of every field but the request id
    encode: Callable[[Any], bytes]  # the board's result as the response to keep


@dataclasses.dataclass(frozen=True, slots=True)
class OpKey:
    """A Session op's id, as its teammate chose it, and the digest of its body: the op runs
    once, and the same id with another body is INVALID_ARGUMENT (store/ops.py)."""

    op_id: str
    digest: bytes


class AnsweredBefore(Exception):  # noqa: N818 (an outcome, not a failure)
    """The call ran before: `response` is its first answer, as kept; `credential`, when
    set, is the new one a replay minted, to put in that answer."""

    def __init__(self, response: bytes, credential: str = "") -> None:
        super().__init__("answered before")
        self.response = response
        self.credential = credential


@dataclasses.dataclass(frozen=True)
class _Failed:
    error: CorralError


def _kept_as(key: RequestKey) -> Callable[[Any], OpOutcome]:
    return lambda value: OpOutcome(response=key.encode(value))


def job(
    body: Callable[[Txn], T], key: RequestKey, replay: Callable[[Txn], None] | None = None
) -> Callable[[Txn], T | AnsweredBefore | _Failed]:
    """The writer job that runs `body` once for `key`; its value goes through `settle`.
    A domain error of the first call is kept as its outcome, so the job returns it
    (committing the record) rather than raising it."""

    def once(tx: Txn) -> T | AnsweredBefore | _Failed:
        op_id = ops.request_op_id(key.rpc, key.request_id)
        run = ops.run_once(tx, key.caller, op_id, key.digest, body, recorded_as=_kept_as(key))
        if run.outcome.error is not None:
            return _Failed(run.outcome.error)
        if run.ran:
            return run.value  # type: ignore[return-value]  # what `body` returned
        if replay is not None:
            replay(tx)
        return AnsweredBefore(run.outcome.response or b"")

    return once


def settle(value: T | AnsweredBefore | _Failed) -> T:
    """The committed job's value, or its kept error raised, or AnsweredBefore raised."""
    if isinstance(value, _Failed):
        raise value.error
    if isinstance(value, AnsweredBefore):
        raise value
    return value
