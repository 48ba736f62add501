"""One teammate's stream as a state machine: its phase, what it sent, what its last check found, its mailbox.

A `StreamState` lives on the event loop, and only there. Its loop
(`service/teamstream.py`) moves its `Phase`; the wake hub and the board's callers,
also on the loop, post into it (`hand`, `claim_ended`, `ask_check`, `end`). A
writer job never touches it: it reads a `StreamView`, a frozen snapshot the loop
takes when it submits the job (or when the stream parks, for the completions that
serve waiting streams), and returns a `Delivery`. What the job decided comes back
to the loop: a check's own answer is applied (`learned`), and what another job
decided for the stream (a completion's handoff) or a claim that ended under it
waits in its `Mailbox` until its loop takes it, before anything else. So a
decision that did not commit leaves the stream as it was.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import enum
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


class Phase(enum.Enum):
    """Where a stream's loop is. Nothing outside the loop needs to tell its steps
    apart (checking, answering an op, sending), only whether it is waiting: a
    commit that lands while it is not may predate its check, so it always checks again."""

    NEW = "new"  # registered; its loop has not turned yet
    ACTIVE = "active"  # its loop is at work: checking, answering an op, or sending
    WAITING = "waiting"  # between checks, waiting for a wake-up or the poll interval
    ENDED = "ended"  # told to end (`StreamState.ended` says why): its loop stops at its next turn


# The moves a stream may make; `StreamState.to` refuses any other. Any phase but
# ENDED may end (a supersede, a removal, the daemon draining), and nothing follows ENDED.
NEXT_PHASES: dict[Phase, frozenset[Phase]] = {
    Phase.NEW: frozenset({Phase.ACTIVE, Phase.ENDED}),
    Phase.ACTIVE: frozenset({Phase.WAITING, Phase.ENDED}),
    Phase.WAITING: frozenset({Phase.ACTIVE, Phase.ENDED}),
    Phase.ENDED: frozenset(),
}


class IllegalTransition(Exception):
    """A stream was asked to move where its phase does not lead (a bug in its loop)."""

    def __init__(self, name: str, at: Phase, to: Phase) -> None:
        super().__init__(f"stream of {name!r}: no move from {at.name} to {to.name}")
        self.at = at
        self.to = to


class Check(enum.IntEnum):
    """Whether the board asked the stream to check again, and how (ordered: a stronger ask wins)."""

    NONE = 0  # nothing committed that concerns it since its last check
    LOOK = 1  # its inbox or claims changed: a read answers first unless a claim could follow
    CLAIM = 2  # a claim may be waiting (a task became ready, a slot freed, a gate opened): straight to the writer


class Claims(enum.Enum):
    """What the stream's last check found about claiming (a check that stopped before
    the claim step, to send held claims or inbox items, leaves it as it was)."""

    OPEN = "open"  # gates open and a slot free: it parks, and counts against tasks that become ready
    SHUT = "shut"  # a gate shut or every slot taken: only what opens them wakes it
    PAUSED = "paused"  # held back until the teammate shows life (silent since one of its leases ran out)


def claims_after(now: Claims, can_claim: bool | None, paused: bool | None) -> Claims:
    """`now` updated by a check's (or a handoff's) findings; None leaves that part as it was."""
    if paused:
        return Claims.PAUSED
    if can_claim is None:
        return Claims.SHUT if paused is False and now is Claims.PAUSED else now
    if can_claim:
        return Claims.OPEN
    return now if now is Claims.PAUSED and paused is None else Claims.SHUT


@dataclasses.dataclass(frozen=True, slots=True)
class StreamView:
    """What a writer job (or a read) may know of a stream: taken on the loop, read anywhere."""

    name: str
    roles: tuple[str, ...]
    slots: int
    sent_tokens: frozenset[str]  # the claims it sent (a check forgets those no longer live)
    sent_through_seq: int | None  # the last inbox item it sent (None: none yet)
    last_alive_ms: int | None  # the teammate's last call of its own (None: alive now)
    epoch: int | None  # the stream epoch its opening recorded (None until recorded)
    budget_notice: BudgetExhausted | None  # the budget notice it sent last
    online_pending: bool  # its opening could not record it online: its next committed check does
    # With hold_slots_until_freed: the claims whose slots the teammate has not freed (see
    # StreamState.working). Each one that is not a live claim of the teammate takes a slot.
    busy_tokens: frozenset[str] = frozenset()


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
    # The stream epoch this check recorded, with the teammate online, for a stream whose
    # opening could not (`StreamView.online_pending`); None when it recorded nothing.
    epoch: int | None = None


class Mailbox:
    """What the writer's jobs decided for a stream, kept on the loop until its loop takes
    it, first thing in its next turn. The hub and the board's callers post; the loop drains."""

    __slots__ = ("handoffs", "notices")

    def __init__(self) -> None:
        # Items another job decided for this stream (a completion's handoff: a claim
        # made for it, or a budget notice), to send before anything is checked.
        self.handoffs: list[StreamItem] = []
        # Claims that ended under the teammate, committed: told before anything else
        # (never stored, so a later stream does not hear of them).
        self.notices: list[ClaimEnd] = []


class StreamState:
    """One open stream: its phase, what it sent, what its last check found, its mailbox
    and its wake-up handle. A new stream starts empty, so it re-sends every claim its
    teammate holds."""

    def __init__(
        self, name: str = "", roles: tuple[str, ...] = (), *, slots: int = 1, opened_ms: int | None = None
    ) -> None:
        self.name = name
        self.roles = roles
        self.slots = slots
        self.phase = Phase.NEW
        self.ended: str | None = None  # why it ended (set with Phase.ENDED)
        self.superseded = False  # it ended because a newer stream of the teammate opened
        # What this stream sent: claims by token, inbox items through a sequence number.
        self.sent_tokens: set[str] = set()
        self.sent_through_seq: int | None = None
        # The budget notice this stream sent last: a check that finds the gate closed
        # tells a stream that has not heard, and a handed copy of it is not sent twice.
        self.budget_notice: BudgetExhausted | None = None
        # What its last check found about claiming: only OPEN streams park and are
        # counted against tasks that become ready.
        self.claims = Claims.OPEN
        # The teammate's last call of its own (opening the stream counts), daemon
        # clock. A teammate silent since one of its leases ran out may be frozen
        # with its stream open: it gets no new claim until it shows life.
        # None means "alive now" (a caller that does not track it).
        self.last_alive_ms = opened_ms
        # Opening could not record the teammate online (the commit failed, e.g. a
        # full disk): the stream serves anyway, and the next check that commits records it.
        self.online_pending = False
        # The teammate's stream epoch its opening recorded (None until recorded): a check
        # that reads a later one delivers nothing, and the stream ends superseded.
        self.epoch: int | None = None
        # Wake-ups: `event` wakes its loop; `check_due` says whether the board asked for a check.
        self.event = asyncio.Event()
        self.check_due = Check.NONE
        self.mailbox = Mailbox()
        # The tokens of the last claims told ended: a handoff of one of them that arrives
        # after its notice (the job that made it committed first, but another daemon's
        # notice overtook its reply) is never sent.
        self._ended_tokens: collections.deque[str] = collections.deque(maxlen=ENDED_TOKENS_KEPT)
        # Claims this stream sent that a check found no longer live, with no notice heard
        # (insertion-ordered, at most ENDED_TOKENS_KEPT): most were ended by the teammate
        # itself, but one ended under it while this daemon heard nothing is told only when
        # the claim history is asked (`reconcile.Reconciler`), which these are kept for.
        self._vanished: dict[str, None] = {}
        # The line of streams waiting for work it stands in (`ParkedStreams`), if any, and
        # its place there: taken when it first waits after its last claim, and kept across
        # wake-ups that brought it nothing, so a stream woken in vain does not lose its turn.
        self.line: ParkedStreams | None = None
        self.waiting_since: int | None = None
        # A task became ready while this stream waited with no free slot, so nothing woke
        # it. A completion's handoff that frees its slot was decided in its own job, which
        # may have committed before that task became ready (on a board several daemons
        # serve, their wake-ups can overtake this daemon's own): it checks once more.
        # A check of its own sees everything committed, and clears it.
        self.missed_ready = False
        # Opened with hold_slots_until_freed: a slot taken by a claim this stream sent
        # stays taken, whether or not the claim lives, until the teammate frees it (it
        # completes, fails or releases the claim, or says FreeSlot once the work of a
        # claim that ended under it stopped). So a claim that ends under a running
        # handler does not make room for one the teammate has no worker for.
        self.hold_slots = False
        # The tokens whose slots are held so (only with hold_slots): at most about `slots`,
        # since no claim is made while they fill the slots.
        self.working: set[str] = set()

    # ------------------------------------------------------------ phase

    def to(self, phase: Phase) -> None:
        """The loop's moves: to `phase`, if `NEXT_PHASES` lists the move; any other is
        refused and changes nothing. ENDED is reached only through `end`, which says why."""
        if phase not in NEXT_PHASES[self.phase] or phase is Phase.ENDED:
            raise IllegalTransition(self.name, self.phase, phase)
        self.phase = phase

    @property
    def waiting(self) -> bool:
        return self.phase is Phase.WAITING

    def end(self, why: str, *, superseded: bool = False) -> None:
        """The stream must end: its loop stops at its next turn. Told again, the last reason stands."""
        self.ended = why
        self.superseded = superseded
        self.phase = Phase.ENDED  # from any phase (NEXT_PHASES); told again, it stays
        if self.line is not None:
            self.line.leave(self)  # no completion serves a stream that is going
        self.ask_check()

    # ------------------------------------------------------------ what it may know off the loop

    def view(self, *, finishing: str = "") -> StreamView:
        """The frozen snapshot a writer job (or a read) decides from. `finishing`: the
        claim the job completes, whose slot its handoff may fill."""
        return StreamView(
            self.name,
            self.roles,
            self.slots,
            frozenset(self.sent_tokens),
            self.sent_through_seq,
            self.last_alive_ms,
            self.epoch,
            self.budget_notice,
            self.online_pending,
            frozenset(self.working - {finishing}) if self.working else frozenset(),
        )

    @property
    def busy_tokens(self) -> frozenset[str]:
        """As `StreamView.busy_tokens` (a stream may stand for its own snapshot)."""
        return frozenset(self.working)

    @property
    def can_claim(self) -> bool:
        return self.claims is Claims.OPEN

    @property
    def claims_paused(self) -> bool:
        return self.claims is Claims.PAUSED

    def may_take(self, role: str) -> bool:
        return not role or role in self.roles

    # ------------------------------------------------------------ posted to it (on the loop)

    def ask_check(self, *, claim_likely: bool = False) -> None:
        """Something committed that this stream may have to send: it checks again."""
        wanted = Check.CLAIM if claim_likely else Check.LOOK
        if wanted > self.check_due:
            self.check_due = wanted
        self.event.set()

    def hand(self, delivery: Delivery) -> None:
        """What another job decided for this stream (a completion's handoff): sent at its
        next turn, before anything is checked. Unlike a check's answer it says nothing
        of which claims are live: this stream may have sent newer ones since."""
        if delivery.superseded:
            self.end("superseded by a newer stream", superseded=True)
            return
        items = [item for item in delivery.items if not _ended(item, self._ended_tokens)]
        can_claim = delivery.can_claim
        if len(items) < len(delivery.items):
            # Its claim is dead already: what it said of the slots is stale; look again.
            self.ask_check(claim_likely=True)
            can_claim = None
        self.mailbox.handoffs.extend(items)
        self.claims = claims_after(self.claims, can_claim, delivery.claims_paused)
        if can_claim and self.missed_ready:
            self.missed_ready = False
            self.ask_check(claim_likely=True)
        self.event.set()

    def claim_ended(self, end: ClaimEnd) -> None:
        """A claim of this teammate ended without its doing (after the commit that ended it).
        Told once: the commit's notice and the claim history's (`heard_late`) may both come."""
        if end.token in self._ended_tokens or any(told.token == end.token for told in self.mailbox.notices):
            return
        self.mailbox.notices.append(end)
        self.event.set()

    @property
    def claims_ended(self) -> list[ClaimEnd]:
        """The notices waiting in its mailbox."""
        return self.mailbox.notices

    def held_tokens(self) -> set[str]:
        """The claims whose ending this stream would have to tell: those it sent (live as far
        as it knows, or found gone without a notice) and those handed to it, not sent yet."""
        handed = {item.token for item in self.mailbox.handoffs if isinstance(item, ClaimGrant)}
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
                mailbox = self.mailbox
                mailbox.handoffs = [item for item in mailbox.handoffs if not _ended(item, (token,))]

    def showed_life(self, now_ms: int) -> None:
        """The teammate made a call of its own: it is not frozen, claims may flow again."""
        self.last_alive_ms = now_ms
        if self.claims is Claims.PAUSED:
            self.ask_check(claim_likely=True)

    def finished(self, token: str, *, check: bool = True) -> None:
        """The teammate ended its claim `token` itself (completed, failed, released, asked
        about, split): the stream forgets having sent it, as its next check would (a stream
        fed by handoffs may see no check for a long time, and would otherwise carry every
        token it ever sent into each snapshot), and its slot is free."""
        self.sent_tokens.discard(token)
        self.free_slot(token, check=check)

    def free_slot(self, token: str, *, check: bool = True) -> None:
        """The teammate freed the slot of `token` (FreeSlot, or it finished the claim itself):
        with `check`, the stream looks for a claim again. Any other token changes nothing."""
        if token not in self.working:
            return
        self.working.discard(token)
        if check:
            self.ask_check(claim_likely=True)

    # ------------------------------------------------------------ drained by its loop

    def take_claims_ended(self) -> list[ClaimEnd]:
        """The notices to send now; the claims they name are forgotten, and a handed one
        that has not gone out yet never will."""
        mailbox = self.mailbox
        if not mailbox.notices:
            return []  # the stream loop asks on every turn: almost always nothing
        ended, mailbox.notices = mailbox.notices, []
        dead = {end.token for end in ended}
        self._ended_tokens.extend(dead)
        for token in dead:
            self._vanished.pop(token, None)
        self.sent_tokens -= dead
        mailbox.handoffs = [item for item in mailbox.handoffs if not _ended(item, dead)]
        return ended

    def take_handed(self) -> list[StreamItem]:
        """The handed items not sent yet (a check of its own may have sent one first)."""
        mailbox = self.mailbox
        if not mailbox.handoffs:
            return []
        handed, mailbox.handoffs = mailbox.handoffs, []
        return self.unsent(handed)

    def take_check(self) -> Check:
        """The check the board asked for since the last one (NONE: none), now taken."""
        due, self.check_due = self.check_due, Check.NONE
        return due

    def learned(self, delivery: Delivery) -> None:
        """Takes in what a check found (before its items are sent)."""
        if delivery.superseded:
            self.end("superseded by a newer stream", superseded=True)
            return
        if delivery.epoch is not None:  # recorded online now: its epoch holds once committed, not before
            self.epoch = delivery.epoch
            self.online_pending = False
        self.missed_ready = False
        self._forget_gone(self.sent_tokens - delivery.live_tokens)
        self.sent_tokens &= delivery.live_tokens
        self.claims = claims_after(self.claims, delivery.can_claim, delivery.claims_paused)
        if delivery.claims_paused and self.last_alive_ms != delivery.alive_ms:
            # The teammate called while the check ran: `showed_life` saw no pause
            # yet and woke nobody, so wake the stream here, or its claims would
            # wait for the next poll.
            self.ask_check(claim_likely=True)

    def _forget_gone(self, gone: set[str]) -> None:
        """Sent claims a check found no longer live: kept aside until the history says how
        they ended, unless their notice came already."""
        for token in gone:
            if token in self._ended_tokens or any(told.token == token for told in self.mailbox.notices):
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
                if self.hold_slots:
                    self.working.add(item.token)
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
        return len(sent) == 1 and isinstance(sent[0], ClaimGrant) and self.claims is not Claims.OPEN


def _ended(item: StreamItem, ended_tokens: Iterable[str]) -> bool:
    return isinstance(item, ClaimGrant) and item.token in ended_tokens


class ParkedStreams:
    """The streams waiting for work with a free slot and open gates, in the order they
    began to wait: the waiters a completion serves first, inside its own job.

    Streams park and leave on the event loop, each parking with its snapshot
    (`StreamView`), taken again each time it waits; a writer job reads only those
    snapshots, so a lock guards the line. A snapshot may be older than its stream
    (one that sent inbox items since it parked): the job decides every claim from
    what is committed (gates, slots, the inbox), and a waiter whose snapshot has
    not seen all it was sent gets nothing there; the snapshot only says whom to try.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        # name -> (place in line, the stream, its snapshot); the writer reads only the snapshot.
        self._streams: dict[str, tuple[int, StreamState, StreamView]] = {}
        self._tickets = itertools.count()

    def park(self, stream: StreamState) -> None:
        """Parks `stream`, or takes its snapshot again if it is parked already."""
        view = stream.view()
        with self._lock:
            if stream.waiting_since is None:
                stream.waiting_since = next(self._tickets)
            self._streams[stream.name] = (stream.waiting_since, stream, view)
        stream.line = self

    def leave(self, stream: StreamState) -> None:
        with self._lock:
            entry = self._streams.get(stream.name)
            if entry is not None and entry[1] is stream:
                del self._streams[stream.name]
        if stream.line is self:
            stream.line = None

    def snapshot(self) -> list[StreamView]:
        """The parked streams' snapshots, the longest-waiting first."""
        with self._lock:
            entries = sorted(self._streams.values(), key=_ticket)
        return [view for _, _, view in entries]

    @staticmethod
    def in_line(streams: Iterable[StreamState]) -> list[StreamState]:
        """`streams` in the order of the line: those waiting longest first, then the rest."""
        return sorted(streams, key=_place_in_line)


def _ticket(entry: tuple[int, StreamState, StreamView]) -> int:
    return entry[0]


def _place_in_line(stream: StreamState) -> float:
    return stream.waiting_since if stream.waiting_since is not None else float("inf")
