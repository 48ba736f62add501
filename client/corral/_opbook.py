"""The Session ops a teammate client has sent and not yet seen answered.

Each op gets an id unique to this client (a random prefix and a counter) that
it keeps across reconnects: an op sent again after a broken stream carries
the same id, so the daemon answers it with the outcome it recorded instead of
running it twice. The book is not thread-safe; the Session's lock guards it.
"""

from __future__ import annotations

import itertools
import secrets
from dataclasses import dataclass
from typing import Generic, TypeVar

from corral.v1 import corral_pb2 as pb

__all__ = ["OpBook", "PendingOp"]

W = TypeVar("W")  # what the caller waits on (a future of either flavour)
S = TypeVar("S")  # the stream an op was sent on


@dataclass(eq=False)
class PendingOp(Generic[W, S]):
    """One op awaiting its result."""

    request: pb.SessionRequest
    waiter: W
    # After a broken stream: True to send it again on the next stream, False
    # to hand it to the unary call at once (acks: resending gains nothing).
    resend: bool
    # The stream it was last sent on; None while it waits for the next one.
    stream: S | None = None
    # time.monotonic() of the last send, or of the break that left it unsent.
    since: float = 0.0
    # How often its answer was late enough to drop the stream for it.
    timeouts: int = 0

    @property
    def op_id(self) -> str:
        return self.request.op_id


class OpBook(Generic[W, S]):
    """Unanswered ops by id, oldest first."""

    def __init__(self, prefix: str | None = None) -> None:
        # 16 hex characters: another client of the same teammate (a restarted
        # process, a second connection) never picks the same ids.
        self._prefix = prefix or secrets.token_hex(8)
        self._numbers = itertools.count(1)
        self._ops: dict[str, PendingOp[W, S]] = {}

    def add(self, request: pb.SessionRequest, waiter: W, *, resend: bool) -> PendingOp[W, S]:
        """Give `request` the next op id and keep it until `pop`."""
        request.op_id = f"{self._prefix}-{next(self._numbers)}"
        op: PendingOp[W, S] = PendingOp(request, waiter, resend)
        self._ops[op.op_id] = op
        return op

    def pop(self, op_id: str) -> PendingOp[W, S] | None:
        """The op with this id, no longer pending; None if it is not (answered already, or given up)."""
        return self._ops.pop(op_id, None)

    def unanswered(self) -> list[PendingOp[W, S]]:
        """Every pending op, in the order they were added."""
        return list(self._ops.values())

    def __len__(self) -> int:
        return len(self._ops)
