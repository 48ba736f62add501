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
import collections
import dataclasses
import itertools
import threading
from collections.abc import Iterable

from .model import BudgetExhausted, ClaimEnd, ClaimGrant, InboxItem

# A budget notice is handed to every open stream of its teammate after the
# commit that closed the gate; a stream opened behind a closed gate finds it in
# its first check. Either way a stream sends one notice per closing.
StreamItem = ClaimGrant | InboxItem | BudgetExhausted


# How many claims told ended a stream remembers (see StreamState._ended_tokens): a
# handoff overtaken by a notice arrives within a turn or two of the event loop.
ENDED_TOKENS_KEPT = 64


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
    # A newer stream of the teammate opened (on any daemon): this one gets nothing more and ends.
    superseded: bool = False


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
        # The teammate's stream epoch its opening recorded (None until recorded): a check
        # that reads a later one delivers nothing, and the stream ends superseded.
        self.epoch: int | None = None
        # Wake-ups (event loop only).
        self.event = asyncio.Event()
        self.waiting = False  # between checks, waiting for `event` or the poll interval
        # Woken because a claim may be waiting (a task became ready, a slot freed,
        # a gate opened, or a paused teammate showed life): the next check goes
        # straight to the writer instead of looking first.
        self.claim_likely = False
        self.ended: str | None = None  # why the stream must end, if it must
        self.superseded = False
        # Woken by the board (not by an op of its own arriving on a Session): the
        # next turn of the loop checks what to send.
        self.nudged = False
        # Claims another job made for this stream (a completion's handoff), to send
        # before anything else is checked (event loop only).
        self.handed: list[StreamItem] = []
        # Claims that died under the teammate, committed: told before anything else
        # (event loop only; never stored, so a later stream does not hear of them).
        self.claims_ended: list[ClaimEnd] = []
        # The tokens of the last claims told ended: a handoff of one of them that arrives
        # after its notice (the job that made it committed first, but another daemon's
        # notice overtook its reply) is never sent.
        self._ended_tokens: collections.deque[str] = collections.deque(maxlen=ENDED_TOKENS_KEPT)
        # Claims this stream sent that a check found no longer live, with no notice heard
        # (insertion-ordered, at most ENDED_TOKENS_KEPT): most were ended by the teammate
        # itself, but one ended under it while this daemon heard nothing is told only when
        # the claim history is asked (`reconcile.Reconciler`), which these are kept for.
        self._vanished: dict[str, None] = {}
        # Its place in the line of streams waiting for work (`ParkedStreams`): taken
        # when it first waits after its last claim, and kept across wake-ups that
        # brought it nothing, so a stream woken in vain does not lose its turn.
        self.waiting_since: int | None = None
        # A task became ready while this stream waited with no free slot, so nothing woke
        # it. A completion's handoff that frees its slot was decided in its own job, which
        # may have committed before that task became ready (on a board several daemons
        # serve, their wake-ups can overtake this daemon's own): it checks once more.
        # A check of its own sees everything committed, and clears it.
        self.missed_ready = False
        # The budget notice this stream sent last: a check that finds the gate closed
        # tells a stream that has not heard, and a handed copy of it is not sent twice.
        self.budget_notice: BudgetExhausted | None = None

    def may_take(self, role: str) -> bool:
        return not role or role in self.roles

    def end(self, why: str, *, superseded: bool = False) -> None:
        self.ended = why
        self.superseded = superseded
        self.nudge()

    def nudge(self, *, claim_likely: bool = False) -> None:
        """Something committed that this stream may have to send: it checks again."""
        self.claim_likely = self.claim_likely or claim_likely
        self.nudged = True
        self.event.set()

    def hand(self, delivery: Delivery) -> None:
        """What another job decided for this stream (a completion's handoff): sent at its
        next turn, before anything is checked. Unlike a check's answer it says nothing
        of which claims are live: this stream may have sent newer ones since."""
        if delivery.superseded:
            self.end("superseded by a newer stream", superseded=True)
            return
        items = [item for item in delivery.items if not _ended(item, self._ended_tokens)]
        if len(items) < len(delivery.items):
            # Its claim is dead already: what it said of the slots is stale; look again.
            self.nudge(claim_likely=True)
            delivery = dataclasses.replace(delivery, can_claim=None)
        self.handed.extend(items)
        if delivery.can_claim is not None:
            self.can_claim = delivery.can_claim
            if delivery.can_claim and self.missed_ready:
                self.missed_ready = False
                self.nudge(claim_likely=True)
        if delivery.claims_paused is not None:
            self.claims_paused = delivery.claims_paused
        self.event.set()

    def claim_ended(self, end: ClaimEnd) -> None:
        """A claim of this teammate ended without its doing (after the commit that ended it).
        Told once: the commit's notice and the claim history's (`heard_late`) may both come."""
        if end.token in self._ended_tokens or any(told.token == end.token for told in self.claims_ended):
            return
        self.claims_ended.append(end)
        self.event.set()

    def held_tokens(self) -> set[str]:
        """The claims whose ending this stream would have to tell: those it sent (live as far
        as it knows, or found gone without a notice) and those handed to it, not sent yet."""
        handed = {item.token for item in self.handed if isinstance(item, ClaimGrant)}
        return self.sent_tokens | self._vanished.keys() | handed

    def heard_late(self, ends: dict[str, ClaimEnd | None]) -> None:
        """How some of `held_tokens` ended, read from the claim history: a claim that ended
        under the teammate is told (once), a handed claim not sent yet never goes out, and
        one the teammate ended itself (None) needs nothing."""
        for token, end in ends.items():
            sent = token in self.sent_tokens or token in self._vanished
            self._vanished.pop(token, None)
            if end is None:
                self.sent_tokens.discard(token)  # as the next check would
            elif sent:
                self.claim_ended(end)
            elif token not in self._ended_tokens:
                self._ended_tokens.append(token)  # a handoff of it arriving later is not sent either
                self.handed = [item for item in self.handed if not _ended(item, (token,))]

    def take_claims_ended(self) -> list[ClaimEnd]:
        """The notices to send now; the claims they name are forgotten, and a handed one
        that has not gone out yet never will."""
        if not self.claims_ended:
            return []  # the stream loop asks on every turn: almost always nothing
        ended, self.claims_ended = self.claims_ended, []
        dead = {end.token for end in ended}
        self._ended_tokens.extend(dead)
        for token in dead:
            self._vanished.pop(token, None)
        self.sent_tokens -= dead
        self.handed = [item for item in self.handed if not (isinstance(item, ClaimGrant) and item.token in dead)]
        return ended

    def take_handed(self) -> list[StreamItem]:
        """The handed items not sent yet (a check of its own may have sent one first)."""
        handed, self.handed = self.handed, []
        return self.unsent(handed)

    def showed_life(self, now_ms: int) -> None:
        """The teammate made a call of its own: it is not frozen, claims may flow again."""
        self.last_alive_ms = now_ms
        if self.claims_paused:
            self.nudge(claim_likely=True)

    def learned(self, delivery: Delivery) -> None:
        """Takes in what a check found (before its items are sent)."""
        if delivery.superseded:
            self.end("superseded by a newer stream", superseded=True)
            return
        self.missed_ready = False
        self._forget_gone(self.sent_tokens - delivery.live_tokens)
        self.sent_tokens &= delivery.live_tokens
        if delivery.can_claim is not None:
            self.can_claim = delivery.can_claim
        if delivery.claims_paused is not None:
            self.claims_paused = delivery.claims_paused
        if delivery.claims_paused and self.last_alive_ms != delivery.alive_ms:
            # The teammate called while the check ran: `showed_life` saw no pause
            # yet and woke nobody, so wake the stream here, or its claims would
            # wait for the next poll.
            self.nudge(claim_likely=True)

    def _forget_gone(self, gone: set[str]) -> None:
        """Sent claims a check found no longer live: kept aside until the history says how
        they ended, unless their notice came already."""
        for token in gone:
            if token in self._ended_tokens or any(told.token == token for told in self.claims_ended):
                continue
            self._vanished[token] = None
            if len(self._vanished) > ENDED_TOKENS_KEPT:
                del self._vanished[next(iter(self._vanished))]  # the oldest

    def unsent(self, items: list[StreamItem]) -> list[StreamItem]:
        """`items` without what this stream sent already: a claim handed to it may also
        come back as a held claim from a check of its own, and goes out once. So does a
        budget notice both handed by the commit that closed the gate and found by
        the check of the same completion."""
        fresh: list[StreamItem] = []
        for item in items:
            if not self._sent(item) and not (isinstance(item, BudgetExhausted) and item in fresh):
                fresh.append(item)
        return fresh

    def _sent(self, item: StreamItem) -> bool:
        if isinstance(item, ClaimGrant):
            return item.token in self.sent_tokens
        if isinstance(item, InboxItem):
            return item.seq <= (self.sent_through_seq or 0)
        return item == self.budget_notice

    def mark_sent(self, items: list[StreamItem]) -> None:
        for item in items:
            if isinstance(item, ClaimGrant):
                self.sent_tokens.add(item.token)
                self.waiting_since = None  # it got work: its next wait goes to the back of the line
            elif isinstance(item, InboxItem):
                self.sent_through_seq = max(self.sent_through_seq or 0, item.seq)
            else:
                self.budget_notice = item

    def settled(self, sent: list[StreamItem]) -> bool:
        """True when, after sending `sent`, asking again now would find nothing.

        That holds right after a fresh claim filled the last slot: the same check
        found the inbox empty and the gates open, and any later change wakes the
        stream. Skipping that empty re-check saves a writer job per claim.
        """
        return len(sent) == 1 and isinstance(sent[0], ClaimGrant) and not self.can_claim


def _ended(item: StreamItem, ended_tokens: Iterable[str]) -> bool:
    return isinstance(item, ClaimGrant) and item.token in ended_tokens


class ParkedStreams:
    """The streams waiting for work with a free slot and open gates, in the order they
    began to wait: the waiters a completion serves first, inside its own job.

    Streams park and leave on the event loop; a writer job takes a snapshot, so
    a lock guards the order. A snapshot may name a stream that just left or
    changed: the job decides every claim from what is committed (gates, slots,
    the inbox), never from the snapshot, which only says whom to try.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._streams: dict[str, StreamState] = {}
        self._tickets = itertools.count()

    def park(self, stream: StreamState) -> None:
        with self._lock:
            if stream.waiting_since is None:
                stream.waiting_since = next(self._tickets)
            self._streams[stream.name] = stream

    def leave(self, stream: StreamState) -> None:
        with self._lock:
            if self._streams.get(stream.name) is stream:
                del self._streams[stream.name]

    def snapshot(self) -> list[StreamState]:
        """The parked streams, the longest-waiting first."""
        with self._lock:
            return sorted(self._streams.values(), key=_place_in_line)

    @staticmethod
    def in_line(streams: Iterable[StreamState]) -> list[StreamState]:
        """`streams` in the order of the line: those waiting longest first, then the rest."""
        return sorted(streams, key=_place_in_line)


def _place_in_line(stream: StreamState) -> float:
    return stream.waiting_since if stream.waiting_since is not None else float("inf")
