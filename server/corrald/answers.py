"""What the board's claim verbs answer, and how a Session op sent again is answered from
its record (store/ops.py keeps an op's outcome; these say what goes in and comes out)."""

from __future__ import annotations

from typing import NamedTuple

from .delivery import Delivery
from .model import TaskRecord
from .txn import OpOutcome, Txn


class Renewed(NamedTuple):
    """A renewal's answer. A Session op's record keeps it as (value, flag)."""

    lease_end_ms: int
    protocol_pending: bool  # a protocol message waits for the teammate

    def record(self) -> OpOutcome:
        return OpOutcome(value=self.lease_end_ms, flag=self.protocol_pending)

    @staticmethod
    def again(tx: Txn, recorded: OpOutcome) -> Renewed:
        return Renewed(recorded.value or 0, recorded.flag)


class Completed(NamedTuple):
    """A completion's answer: the task, and the stream's next item when the call came
    with its stream's snapshot and ran now (None otherwise)."""

    task: TaskRecord
    handoff: Delivery | None


def ack_record(acked: int) -> OpOutcome:
    """An acknowledgement's record keeps how far the messages are acknowledged as its value."""
    return OpOutcome(value=acked)


def acked_again(tx: Txn, recorded: OpOutcome) -> int:
    return recorded.value or 0
