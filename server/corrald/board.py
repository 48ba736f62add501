"""The board: the one object the service layer talks to.

It validates input, turns each operation into one writer job (or one reader
query), and keeps the credential cache. Every decision about who may get
what lives in `store` and in `delivery`, which composes it; the gRPC layer
only converts and maps errors.
"""

from __future__ import annotations

import dataclasses
import hashlib
import hmac
import logging
import pathlib
import secrets
from collections.abc import Callable, Sequence

from . import cpu, delivery, errors, validate
from .clock import Clock
from .config import Limits, WriterConfig
from .model import (
    CanceledTask,
    CreatedBatch,
    Event,
    FeedPage,
    TaskPage,
    TaskRecord,
    TaskSpec,
    TaskState,
    TeammateRecord,
    TeammateStatus,
    Txn,
)
from .readers import ReaderPool
from .store import events, inbox, protocol, status, tasks, team
from .store.schema import open_writer
from .stream import StreamItem, StreamState
from .writer import CommitFailed, Writer, WriterStats


@dataclasses.dataclass(frozen=True, slots=True)
class Identity:
    name: str  # "lead" or a teammate's name
    is_lead: bool


LEAD = "lead"

log = logging.getLogger("corrald.board")


def token_hash(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


def _stamp_clock(conn, now_ms: int, changed: bool, failures: list[BaseException]) -> None:
    # Record how far the daemon clock got whenever a transaction wrote or told
    # a caller its claim was dead, so a restart never revives such a lease. A
    # gated Idle check does neither, and so still writes nothing.
    if changed or any(isinstance(error, errors.ClaimError) for error in failures):
        tasks.note_clock(conn, now_ms)


@dataclasses.dataclass(frozen=True)
class BoardStats:
    tasks_by_state: dict[TaskState, int]
    teammates_by_status: dict[TeammateStatus, int]
    writer: WriterStats


class Board:
    def __init__(
        self,
        database: pathlib.Path,
        *,
        clock: Clock,
        limits: Limits = Limits(),
        writer_config: WriterConfig = WriterConfig(),
        lead_token: str,
        readers: int = 4,
    ) -> None:
        self.clock = clock
        self.limits = limits
        self._lead_hash = token_hash(lead_token)
        self._teammate_hashes: dict[bytes, str] = {}
        # The board's storage: the writer thread (the one read-write connection),
        # whose commits the daemon's wiring listens to (`writer.on_commit`), and
        # the reader pool, opened with the board.
        self.writer = Writer(
            lambda: open_writer(
                database, synchronous=writer_config.synchronous, busy_timeout_ms=writer_config.busy_timeout_ms
            ),
            clock,
            writer_config,
            epilogue=_stamp_clock,
        )
        self._database = database
        self._reader_count = readers
        self.readers: ReaderPool | None = None

    # ------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Starts the writer, recovers from a previous life, loads credentials."""
        self.writer.start()
        self.readers = ReaderPool(self._database, size=self._reader_count)
        # One time base per board: if the host's wall clock now reads earlier
        # than the previous daemon got (stepped back between runs), this daemon
        # carries on from there, so no stored lease end, grace or expiry lies
        # ahead of its "now" and the restart rule below sees a clock that
        # never went back.
        behind_ms = self.clock.not_before(self.writer.call(lambda tx: tasks.clock_reached(tx.conn)))
        if behind_ms:
            log.warning("wall clock %.3f s behind this board's clock; carrying on from the board's", behind_ms / 1000)

        def recover(tx: Txn) -> list[tuple[bytes, str, bool]]:
            tasks.extend_live_leases(tx)
            team.mark_all_offline(tx)
            return team.credentials(tx.conn)

        for digest, name, removed in self.writer.call(recover):
            if not removed:
                self._teammate_hashes[digest] = name

    def close(self) -> None:
        self.writer.close()
        if self.readers is not None:
            self.readers.close()

    # ------------------------------------------------------------ identity

    def authenticate(self, token: str) -> Identity | None:
        digest = token_hash(token)
        if hmac.compare_digest(digest, self._lead_hash):
            return Identity(LEAD, True)
        name = self._teammate_hashes.get(digest)
        return Identity(name, False) if name is not None else None

    # ------------------------------------------------------------ lead

    async def create_batch(self, raw_specs: Sequence[TaskSpec], request_id: str = "") -> CreatedBatch:
        """Adds a batch; says which of its ids were on the board already, unchanged.

        Checks and digests run before the writer (on a worker thread when the
        batch is big), so the writer job only reads what it must and inserts.
        """
        if len(request_id) > self.limits.name_max_chars:
            raise errors.InvalidArgument("request_id", f"longer than {self.limits.name_max_chars} characters")
        items = len(raw_specs) + sum(len(spec.depends_on) for spec in raw_specs)
        batch = await cpu.run(lambda: validate.prepare_batch(raw_specs, self.limits), inline=items <= cpu.INLINE_ITEMS)
        return await self.writer.run(lambda tx: tasks.create_batch(tx, batch, request_id))

    async def cancel_tasks(self, task_ids: Sequence[str]) -> list[CanceledTask]:
        if not task_ids:
            raise errors.InvalidArgument("ids", "must not be empty")
        if len(task_ids) > self.limits.batch_max:
            raise errors.InvalidArgument("ids", f"more than {self.limits.batch_max} ids in one call")
        return await self.writer.run(lambda tx: tasks.cancel(tx, list(task_ids)))

    async def add_teammate(self, name: str, roles: Sequence[str], require_plan: bool) -> tuple[TeammateRecord, str]:
        validate.check_id("name", name, self.limits)
        if name.casefold() in validate.RESERVED_NAMES:  # "Lead" would read as the lead
            raise errors.InvalidArgument("name", f"{name!r} is reserved")
        if len(roles) > self.limits.roles_max:
            raise errors.InvalidArgument("roles", f"more than {self.limits.roles_max} roles")
        for role in roles:
            validate.check_id("roles", role, self.limits)
        token = "corral-tm-" + secrets.token_urlsafe(32)
        digest = token_hash(token)
        record = await self.writer.run(lambda tx: team.add_teammate(tx, name, tuple(roles), require_plan, digest))
        self._teammate_hashes[digest] = name
        return record, token

    async def remove_teammate(self, name: str) -> TeammateRecord:
        record = await self.writer.run(lambda tx: team.remove_teammate(tx, name))
        self._forget(name)
        return record

    def _forget(self, name: str) -> None:
        for digest, owner in list(self._teammate_hashes.items()):
            if owner == name:
                del self._teammate_hashes[digest]

    async def request_shutdown(self, name: str, reason: str, grace_ms: int) -> tuple[str, int]:
        validate.check_text("reason", reason, self.limits.text_max_bytes)
        grace = validate.defaulted(
            "grace", grace_ms, self.limits.grace_default_ms, self.limits.grace_min_ms, self.limits.grace_max_ms, "ms"
        )
        return await self.writer.run(lambda tx: protocol.request_shutdown(tx, name, reason, grace))

    async def decide_plan(self, plan_id: str, approve: bool, feedback: str) -> int:
        validate.check_text("feedback", feedback, self.limits.text_max_bytes)
        return await self.writer.run(lambda tx: protocol.decide_plan(tx, plan_id, approve, feedback))

    async def reap(self) -> int | None:
        """Reclaims expired leases and runs out shutdown graces; returns the next deadline."""

        def job(tx: Txn) -> tuple[list[str], int | None]:
            tasks.reclaim_expired(tx)
            removed = protocol.expire_shutdowns(tx)
            return removed, tasks.next_deadline(tx.conn)

        removed, deadline = await self.writer.run(job)
        for name in removed:
            self._forget(name)
        return deadline

    # ------------------------------------------------------------ teammate

    async def next_for(self, name: str, stream: StreamState, *, look_first: bool = False) -> list[StreamItem]:
        """What the teammate's stream sends next (design §5); the stream takes in what the
        check learned. With `look_first`, a read answers whenever no claim could be made,
        and the writer runs only when one could."""
        found: delivery.Delivery | None = None
        if look_first and not stream.online_pending:
            now_ms = self.clock.now_ms()
            found = await self.read(lambda conn: delivery.look(conn, name, stream, now_ms))
        if found is None:
            joining = stream.online_pending

            def decide(tx: Txn) -> delivery.Delivery:
                if joining:  # its opening could not record it online (a full disk): now, with the check
                    team.set_online(tx, name, True)
                return delivery.next_for_teammate(tx, name, stream)

            try:
                found = await self.writer.run(decide)
            except CommitFailed:
                # What is stored still reaches the teammate; a new claim waits for a commit.
                now_ms = self.clock.now_ms()
                found = await self.read(lambda conn: delivery.readable(conn, name, stream, now_ms))
            else:
                stream.online_pending = False
        stream.learned(found)
        return found.items

    async def set_online(self, name: str, online: bool, reason: str | None = None) -> None:
        await self.writer.run(lambda tx: team.set_online(tx, name, online, reason))

    async def ack(self, name: str, through_seq: int) -> int:
        return await self.writer.run(lambda tx: inbox.ack(tx, name, through_seq))

    async def renew(self, name: str, task_id: str, token: str) -> tuple[int, bool]:
        lease_end, protocol_waiting = await self.writer.run(lambda tx: tasks.renew(tx, name, task_id, token))
        if lease_end <= self.clock.now_ms():
            # The commit took longer than the whole lease: the claim is over by the
            # daemon clock (the reaper ends it), and an OK would say it lives.
            raise errors.LeaseExpired(f"lease on task {task_id!r} ended before the renewal committed", id=task_id)
        return lease_end, protocol_waiting

    async def complete(self, name: str, task_id: str, token: str, result: bytes) -> TaskRecord:
        if len(result) > self.limits.blob_max_bytes:
            raise errors.InvalidArgument("result", f"larger than {self.limits.blob_max_bytes} bytes")
        return await self.writer.run(lambda tx: tasks.complete(tx, name, task_id, token, result))

    async def fail(self, name: str, task_id: str, token: str, error: str, retryable: bool) -> TaskRecord:
        validate.check_text("error", error, self.limits.text_max_bytes)
        return await self.writer.run(lambda tx: tasks.fail(tx, name, task_id, token, error, retryable))

    async def release(self, name: str, task_id: str, token: str) -> TaskRecord:
        return await self.writer.run(lambda tx: tasks.release(tx, name, task_id, token))

    async def submit_plan(self, name: str, plan: str) -> str:
        validate.check_text("plan", plan, self.limits.text_max_bytes)
        return await self.writer.run(lambda tx: protocol.submit_plan(tx, name, plan))

    async def respond_shutdown(self, name: str, request_id: str, approve: bool, reason: str) -> None:
        validate.check_text("reason", reason, self.limits.text_max_bytes)
        await self.writer.run(lambda tx: protocol.respond_shutdown(tx, name, request_id, approve, reason))

    # ------------------------------------------------------------ both

    async def send_message(self, sender: str, to: str, body: str) -> list[str]:
        if not to:
            raise errors.InvalidArgument("to", "must not be empty")
        validate.check_text("body", body, self.limits.text_max_bytes)
        limit = self.limits.unacked_inbox_max
        return await self.writer.run(lambda tx: inbox.send_message(tx, sender, to, body, inbox_limit=limit))

    async def read(self, query: Callable):
        assert self.readers is not None
        return await self.readers.run(query)

    async def get_task(self, task_id: str) -> TaskRecord:
        return await self.read(lambda conn: tasks.get_task(conn, task_id))

    async def list_tasks(
        self, *, states: Sequence[TaskState], owner: str, after_seq: int, limit: int, max_bytes: int
    ) -> TaskPage:
        """A page of tasks chosen within `max_bytes` before any payload is read (a read)."""
        return await self.read(
            lambda conn: tasks.list_tasks(
                conn, states=states, owner=owner, after_seq=after_seq, limit=limit, max_bytes=max_bytes
            )
        )

    async def list_teammates(self, after: int = 0, limit: int = -1) -> list[tuple[int, TeammateRecord]]:
        """Teammates in the order they were added, each with its position (a page cursor)."""
        return await self.read(lambda conn: team.list_teammates(conn, after, limit))

    async def work_waited_for(self, name: str, roles: tuple[str, ...]) -> list[str]:
        """Some unfinished tasks this teammate could still take; empty when none remains (a read)."""
        return await self.read(lambda conn: tasks.work_waited_for(conn, name, roles, limit=1))

    async def set_waiting(self, name: str, waiting: bool) -> None:
        """Records that the teammate waits for work still to come (or no longer does)."""
        await self.writer.run(lambda tx: status.set_waiting(tx, name, waiting))

    async def teammate_roles(self, name: str) -> tuple[str, ...]:
        return await self.read(lambda conn: team.roles_of(conn, name))

    async def read_feed(self, after_seq: int, limit: int, max_bytes: int) -> FeedPage:
        """Events after `after_seq` with the task or teammate each one is about: up to
        `limit`, as many as fit in `max_bytes` (at least one), chosen before any task is
        loaded (a read)."""

        def query(conn) -> FeedPage:
            found = events.read_events(conn, after_seq, limit)
            sizes = tasks.wire_bytes_by_id(conn, (e.data["id"] for e in found if e.kind == "task_changed"))
            items: list[tuple[Event, TaskRecord | None, TeammateRecord | None]] = []
            total = 0
            for event in found:
                total += sizes.get(event.data["id"], 0) if event.kind == "task_changed" else 0
                if items and total > max_bytes:
                    break
                task = tasks.get_task(conn, event.data["id"]) if event.kind == "task_changed" else None
                mate = team.get_teammate(conn, event.data["name"]) if event.kind == "teammate_changed" else None
                items.append((event, task, mate))
            return FeedPage(items, more=len(items) < len(found) or len(found) == limit)

        return await self.read(query)

    def _stats(self, conn) -> BoardStats:
        return BoardStats(tasks.count_by_state(conn), status.count_by_status(conn), self.writer.stats())

    async def stats(self) -> BoardStats:
        return await self.read(self._stats)

    def stats_blocking(self) -> BoardStats:
        """`stats` for a thread off the event loop (the metrics endpoint); the board must be open."""
        assert self.readers is not None
        return self.readers.call(self._stats)
