"""One Idle stream's state: the one object the wake hub and the delivery decision share.

The stream loop owns it, on the event loop. The wake hub reads it to choose whom
a commit wakes and sets its wake-up fields (`event`, `claim_likely`, `ended`).
The delivery decision (`delivery.py`) reads it, inside a writer job or a read,
and returns a `Delivery`; it never writes to it. The stream loop applies what
the decision learned (`learned`) and, once the items are sent, what it sent
(`mark_sent`). So a decision that did not commit leaves the stream as it was,
and any writer job may decide for a stream without reaching into the loop.
"""

from __future__ import annotations

import asyncio
import dataclasses

from .model import ClaimGrant, InboxItem

StreamItem = ClaimGrant | InboxItem


@dataclasses.dataclass(frozen=True, slots=True)
class Delivery:
    """One check's answer: what to send now, in order (nothing: wait), and what it learned."""

    items: list[StreamItem]
    # The teammate's claims whose lease has not ended; the stream forgets having sent any other.
    live_tokens: frozenset[str]
    # Whether the gates were open and a slot free after this check; None when the
    # check stopped before the claim step (it sent a held claim or inbox items).
    can_claim: bool | None = None
    # Whether claims were held back until the teammate shows life; None when not looked at.
    claims_paused: bool | None = None
    # The stream's `last_alive_ms` as the check read it: a call of the teammate's own
    # that arrived after that read was not seen by the check.
    alive_ms: int | None = None


class StreamState:
    """What one Idle stream has sent, what its last check found, and its wake-up handle.

    A new stream starts empty, so it re-sends every claim its teammate holds.
    """

    def __init__(
        self, name: str = "", roles: tuple[str, ...] = (), *, slots: int = 1, opened_ms: int | None = None
    ) -> None:
        self.name = name
        self.roles = roles
        self.slots = slots
        # What this stream sent: claims by token, inbox items through a sequence number.
        self.sent_tokens: set[str] = set()
        self.sent_through_seq: int | None = None
        # Whether the last check found the gates open and a free slot: only such
        # streams are counted against tasks that become ready.
        self.can_claim = True
        # The teammate's last call of its own (opening the stream counts), daemon
        # clock. A teammate silent since one of its leases ran out may be frozen
        # with its stream open: it gets no new claim until it shows life.
        # None means "alive now" (a caller that does not track it).
        self.last_alive_ms = opened_ms
        self.claims_paused = False  # the last check held claims back until the teammate shows life
        # Opening could not record the teammate online (the commit failed, e.g. a
        # full disk): the stream serves anyway, and the next check that commits records it.
        self.online_pending = False
        # Wake-ups (event loop only).
        self.event = asyncio.Event()
        self.waiting = False  # between checks, waiting for `event` or the poll interval
        # Woken because a claim may be waiting (a task became ready, a slot freed,
        # a gate opened, or a paused teammate showed life): the next check goes
        # straight to the writer instead of looking first.
        self.claim_likely = False
        self.ended: str | None = None  # why the stream must end, if it must
        self.superseded = False

    def may_take(self, role: str) -> bool:
        return not role or role in self.roles

    def end(self, why: str, *, superseded: bool = False) -> None:
        self.ended = why
        self.superseded = superseded
        self.event.set()

    def showed_life(self, now_ms: int) -> None:
        """The teammate made a call of its own: it is not frozen, claims may flow again."""
        self.last_alive_ms = now_ms
        if self.claims_paused:
            self.claim_likely = True
            self.event.set()

    def learned(self, delivery: Delivery) -> None:
        """Takes in what a check found (before its items are sent)."""
        self.sent_tokens &= delivery.live_tokens
        if delivery.can_claim is not None:
            self.can_claim = delivery.can_claim
        if delivery.claims_paused is not None:
            self.claims_paused = delivery.claims_paused
        if delivery.claims_paused and self.last_alive_ms != delivery.alive_ms:
            # The teammate called while the check ran: `showed_life` saw no pause
            # yet and woke nobody, so wake the stream here, or its claims would
            # wait for the next poll.
            self.claim_likely = True
            self.event.set()

    def mark_sent(self, items: list[StreamItem]) -> None:
        for item in items:
            if isinstance(item, ClaimGrant):
                self.sent_tokens.add(item.token)
            else:
                self.sent_through_seq = max(self.sent_through_seq or 0, item.seq)

    def settled(self, sent: list[StreamItem]) -> bool:
        """True when, after sending `sent`, asking again now would find nothing.

        That holds right after a fresh claim filled the last slot: the same check
        found the inbox empty and the gates open, and any later change wakes the
        stream. Skipping that empty re-check saves a writer job per claim.
        """
        return len(sent) == 1 and isinstance(sent[0], ClaimGrant) and not self.can_claim
