"""The board: the one object the service layer talks to.

It validates input, turns each operation into one writer job (or one reader
query), and keeps the credential cache. Every decision about who may get
what lives in `store` and in `delivery`, which composes it; the gRPC layer
only converts and maps errors.
"""

from __future__ import annotations

import dataclasses
import logging
import pathlib
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, TypeVar

from . import cpu, delivery, errors, requestids, validate
from .answers import Completed, Renewed, ack_record, acked_again
from .board_artifacts import BoardArtifacts
from .board_reads import BoardReads
from .clock import Clock
from .config import Limits, WriterConfig
from .credentials import (
    TEAMMATE_PREFIX,
    VIEWER_TOKEN_PREFIX,
    Credentials,
    Identity,
    mint,
    stored,
    token_hash,
    viewer_identity,
)
from .model import (
    Budget,
    CanceledTask,
    Completion,
    ConcurrencyLimit,
    CreatedBatch,
    OpCompletion,
    Proposed,
    TaskCreation,
    TaskRecord,
    TaskSpec,
    TeammateRecord,
    Usage,
    Verdict,
    ViewerRecord,
)
from .readers import ReaderPool
from .requestids import OpKey, RequestKey
from .stats import PostgresHealth as PostgresHealth  # GetStats' conversion names it here
from .store import artifacts, inbox, keys, leases, ops, output, proposals, protocol, status, tasks, team, usage, viewers
from .store.boardclock import stamp_clock
from .store.driver import BoardDriver
from .store.sqlite.driver import SqliteBoard
from .stream import ParkedStreams, StreamView
from .txn import Mergeable, OpOutcome, PendingOpRecord, Txn
from .writer import CommitFailed, Writer

if TYPE_CHECKING:
    from .store.postgres.listener import WakeListener


T = TypeVar("T")

log = logging.getLogger("corrald.board")


class Board(BoardReads, BoardArtifacts):
    """The board's writes (each one writer job) and, from `BoardReads`, its reads."""

    def __init__(
        self,
        database: pathlib.Path | BoardDriver,
        *,
        clock: Clock,
        limits: Limits = Limits(),
        writer_config: WriterConfig = WriterConfig(),
        lead_token: str | None = None,
        readers: int = 4,
    ) -> None:
        self.clock = clock
        self.limits = limits
        # Told, on the loop, of each viewer removed (the web board ends its sessions and streams).
        self.viewer_removed: list[Callable[[Identity], None]] = []
        # The board's storage: the writer thread (this daemon's one read-write
        # connection), whose commits the daemon's wiring listens to
        # (`writer.on_commit`), and the reader pool, opened with the board. A SQLite
        # board is a file this daemon alone serves; a PostgreSQL board is served by
        # every daemon given its DSN and schema, each with its own writer.
        if isinstance(database, pathlib.Path):
            if lead_token is None:
                raise ValueError("a SQLite board needs the lead token of its state directory")
            database = SqliteBoard(database, token_hash(lead_token), writer_config)
        self.driver: BoardDriver = database
        self.credentials = Credentials(self.driver.lead_hash)
        self.writer = Writer(
            self.driver.open_writer,
            clock,
            writer_config,
            epilogue=stamp_clock,
            storage=self.driver.writer_storage(),
        )
        self.blobs = self.driver.blob_store()  # artifacts' bytes (board_artifacts.py)
        self._reader_count = readers
        self.readers: ReaderPool | None = None
        # A PostgreSQL board's wake-ups from its other daemons (set by the daemon's wiring).
        self.listener: WakeListener | None = None

    @property
    def daemon_id(self) -> str:
        """This daemon among those serving a PostgreSQL board ('' on a SQLite board)."""
        return self.driver.daemon_id

    # ------------------------------------------------------------ lifecycle

    def open(self) -> None:
        """Starts the writer, recovers from a previous life, loads credentials."""
        self.writer.start()
        self.readers = ReaderPool(self.driver.open_reader, size=self._reader_count, begin=self.driver.reader_begin)
        driver = self.driver
        driver.catch_up_clock(self.writer.call, self.clock)

        def recover(tx: Txn):
            if driver.join(tx):  # the board's restart: nobody else serves it
                tasks.extend_live_leases(tx)
                keys.recount(tx)
                leases.rebuild(tx)
                team.mark_all_offline(tx)
            return stored(tx.conn)

        self.credentials.load(self.writer.call(recover))
        # Before anything is served: what no artifact names is removed (the blob store's rule).
        self.blobs.prepare(lambda: self.call_read(artifacts.named_contents))
        if driver.shared:  # another daemon may mint a credential this one has not read
            self.credentials.read = self.call_read

    def reload_credentials(self) -> None:
        """Reads every credential again (blocking): another daemon of a PostgreSQL board
        added or removed one. A viewer removed there is told to the listeners here."""
        for identity in self.credentials.load(self.call_read(stored)):
            for listener in self.viewer_removed:
                listener(identity)

    def close(self) -> None:
        self.writer.close()
        self.driver.leave()
        if self.readers is not None:
            self.readers.close()
        self.blobs.close()

    # ------------------------------------------------------------ lead

    async def create_batch(self, raw_specs: Sequence[TaskSpec], request_id: str = "") -> CreatedBatch:
        """Adds a batch; says which of its ids were on the board already, unchanged.

        Checks and digests run before the writer (on a worker thread when the
        batch is big), so the writer job only reads what it must and inserts.
        """
        if len(request_id) > self.limits.name_max_chars:
            raise errors.InvalidArgument("request_id", f"longer than {self.limits.name_max_chars} characters")
        items = len(raw_specs) + sum(len(spec.depends_on) for spec in raw_specs)
        now_ms = self.clock.now_ms()
        batch = await cpu.run(
            lambda: validate.prepare_batch(raw_specs, self.limits, now_ms), inline=items <= cpu.INLINE_ITEMS
        )
        return await self.writer.run(lambda tx: tasks.create_batch(tx, batch, request_id))

    async def _write(
        self, job: Callable[[Txn], T], key: RequestKey | None, replay: Callable[[Txn], None] | None = None
    ) -> T:
        """Runs a write's job; with a request id, once (requestids.py): a call answered before
        raises AnsweredBefore, after `replay` ran in its transaction."""
        if key is None:
            return await self.writer.run(job)
        return requestids.settle(await self.writer.run(requestids.job(job, key, replay)))

    async def cancel_tasks(self, task_ids: Sequence[str], key: RequestKey | None = None) -> list[CanceledTask]:
        validate.task_ids(task_ids, self.limits)
        return await self._write(lambda tx: tasks.cancel(tx, list(task_ids)), key)

    async def retry_tasks(
        self, task_ids: Sequence[str], reset_attempts: bool, key: RequestKey | None = None
    ) -> tuple[list[TaskRecord], int]:
        """Sends FAILED or CANCELED tasks back to PENDING (with the dependents canceled
        because of them); returns the first of them, named ones first, and how many
        changed in all."""
        validate.task_ids(task_ids, self.limits)
        return await self._write(lambda tx: self._changed(tx, tasks.retry(tx, list(task_ids), reset_attempts)), key)

    def _changed(self, tx: Txn, seqs: list[int]) -> tuple[list[TaskRecord], int]:
        """The first of the tasks a call changed, and how many it changed: the reply holds a
        few MiB of them at most, so no more are read than could fit, as they stand when this
        commits (a request id keeps this answer)."""
        return tasks.records_by_seq(tx.conn, seqs[: self.limits.page_size_max]), len(seqs)

    async def revoke_claim(self, task_id: str, reason: str, key: RequestKey | None = None) -> TaskRecord:
        """Takes the task's live claim from its holder (see `tasks.revoke`)."""
        if not task_id:
            raise errors.InvalidArgument("task_id", "must not be empty")
        validate.check_text("reason", reason, self.limits.text_max_bytes)
        return await self._write(lambda tx: tasks.revoke(tx, task_id, reason), key)

    async def review_task(
        self, task_id: str, approve: bool, feedback: str, key: RequestKey | None = None
    ) -> TaskRecord:
        """The Lead decides a task IN_REVIEW (see `tasks.review_task`)."""
        if not task_id:
            raise errors.InvalidArgument("task_id", "must not be empty")
        verdict = Verdict(approve, feedback)
        try:
            validate.verdict(verdict, self.limits)
        except errors.InvalidArgument as error:  # this call names it `feedback`
            raise errors.InvalidArgument("feedback", error.description) from None
        return await self._write(lambda tx: tasks.review_task(tx, task_id, verdict), key)

    async def answer_question(self, task_id: str, answer: str, key: RequestKey | None = None) -> TaskRecord:
        """Answers a NEEDS_INPUT task's question: it is PENDING again (see `tasks.answer_question`)."""
        if not task_id:
            raise errors.InvalidArgument("task_id", "must not be empty")
        validate.check_text("answer", answer, self.limits.text_max_bytes)
        return await self._write(lambda tx: tasks.answer_question(tx, task_id, answer), key)

    async def decide_proposals(
        self, task_ids: Sequence[str], approve: bool, feedback: str, key: RequestKey | None = None
    ) -> tuple[list[TaskRecord], int]:
        """Approves or rejects PROPOSED tasks (see `proposals.decide`): the first of
        the tasks it changed, as RetryTasks answers, and how many changed in all."""
        validate.graph_ids("task_ids", task_ids)
        validate.check_text("feedback", feedback, self.limits.text_max_bytes)
        return await self._write(lambda tx: self._changed(tx, proposals.decide(tx, task_ids, approve, feedback)), key)

    async def add_dependencies(
        self, task_id: str, depends_on: Sequence[str], key: RequestKey | None = None
    ) -> TaskRecord:
        """Makes a PENDING or PROPOSED task wait for more tasks (see `tasks.add_dependencies`)."""
        if not task_id:
            raise errors.InvalidArgument("task_id", "must not be empty")
        validate.graph_ids("depends_on", depends_on)
        return await self._write(lambda tx: tasks.add_dependencies(tx, task_id, depends_on), key)

    async def set_task_creation(self, name: str, policy: TaskCreation, key: RequestKey | None = None) -> TaskCreation:
        """How a teammate's proposed tasks land, or with "*" the default of those without their own."""
        if not name:
            raise errors.InvalidArgument("teammate", 'must name a teammate or "*"')
        return await self._write(lambda tx: proposals.set_task_creation(tx, name, policy), key)

    async def add_teammate(
        self, name: str, roles: Sequence[str], require_plan: bool, key: RequestKey | None = None
    ) -> tuple[TeammateRecord, str]:
        """Mints a teammate credential; only its hash is stored. Sent again with its request
        id, the call gives the teammate a new credential (AnsweredBefore carries it)."""
        validate.teammate(name, roles, self.limits)
        return await self._mint(
            TEAMMATE_PREFIX,
            self.credentials.grant_teammate,
            lambda tx, digest: team.add_teammate(tx, name, tuple(roles), require_plan, digest),
            lambda tx, digest: team.rotate_token(tx, name, digest),
            key,
            name,
        )

    async def _mint(
        self,
        prefix: str,
        grant: Callable[..., None],
        add: Callable[[Txn, bytes], T],
        rotate: Callable[[Txn, bytes], None],
        key: RequestKey | None,
        name: str,
    ) -> tuple[T, str]:
        """A new credential for `name`, added (`add`) with only its hash stored. A retry of the
        call that added it (its request id) gives it another (`rotate`): the first one's answer
        was lost, so it is forgotten, and AnsweredBefore carries the new one."""
        token, digest = mint(prefix)
        try:
            added = await self._write(lambda tx: (add(tx, digest), token), key, replay=lambda tx: rotate(tx, digest))
        except requestids.AnsweredBefore as before:
            grant(name, digest, only=True)
            raise requestids.AnsweredBefore(before.response, token) from None
        grant(name, digest)
        return added

    async def remove_teammate(self, name: str, key: RequestKey | None = None) -> TeammateRecord:
        record = await self._write(lambda tx: team.remove_teammate(tx, name), key)
        self.credentials.forget_teammate(name)
        return record

    async def add_viewer(self, name: str, key: RequestKey | None = None) -> tuple[ViewerRecord, str]:
        """Mints a read-only credential; only its hash is stored. Sent again with its request
        id, the call gives the viewer a new credential (AnsweredBefore carries it)."""
        validate.check_id("name", name, self.limits)
        return await self._mint(
            VIEWER_TOKEN_PREFIX,
            self.credentials.grant_viewer,
            lambda tx, digest: viewers.add_viewer(tx, name, digest),
            lambda tx, digest: viewers.rotate_token(tx, name, digest),
            key,
            name,
        )

    async def remove_viewer(self, name: str, key: RequestKey | None = None) -> None:
        await self._write(lambda tx: viewers.remove_viewer(tx, name), key)
        self.credentials.forget_viewer(name)
        for listener in self.viewer_removed:
            listener(viewer_identity(name))

    async def list_viewers(self) -> list[ViewerRecord]:
        return await self.read(viewers.list_viewers)

    async def request_shutdown(
        self, name: str, reason: str, grace_ms: int, key: RequestKey | None = None
    ) -> tuple[str, int]:
        validate.check_text("reason", reason, self.limits.text_max_bytes)
        grace = validate.defaulted(
            "grace", grace_ms, self.limits.grace_default_ms, self.limits.grace_min_ms, self.limits.grace_max_ms, "ms"
        )
        return await self._write(lambda tx: protocol.request_shutdown(tx, name, reason, grace), key)

    async def set_budget(
        self, name: str, max_cost_micros: int, max_tokens: int, key: RequestKey | None = None
    ) -> Budget:
        """Sets a teammate's budget, or with "*" the default of every teammate without its own."""
        if not name:
            raise errors.InvalidArgument("teammate", 'must name a teammate or "*"')
        budget = validate.budget(max_cost_micros, max_tokens)
        return await self._write(lambda tx: usage.set_budget(tx, name, budget), key)

    async def decide_plan(self, plan_id: str, approve: bool, feedback: str, key: RequestKey | None = None) -> int:
        validate.check_text("feedback", feedback, self.limits.text_max_bytes)
        return await self._write(lambda tx: protocol.decide_plan(tx, plan_id, approve, feedback), key)

    async def set_concurrency_limit(
        self, concurrency_key: str, limit: int, key: RequestKey | None = None
    ) -> ConcurrencyLimit:
        validate.concurrency_limit(concurrency_key, limit, self.limits)
        return await self._write(lambda tx: keys.set_limit(tx, concurrency_key, limit), key)

    async def concurrency_limits(self) -> list[ConcurrencyLimit]:
        """Every key with a limit, by key (a read)."""
        return await self.read(keys.list_limits)

    async def reap(self) -> int | None:
        """Reclaims expired leases, opens due time gates and runs out shutdown graces;
        returns the next deadline."""

        def job(tx: Txn) -> tuple[list[str], int | None]:
            tasks.reclaim_expired(tx)
            tasks.open_due_gates(tx)
            removed = protocol.expire_shutdowns(tx)
            return removed, tasks.next_deadline(tx.conn)

        removed, deadline = await self.writer.run(job)
        for name in removed:
            self.credentials.forget_teammate(name)
        return deadline

    # ------------------------------------------------------------ teammate

    async def next_for(self, name: str, stream: StreamView, *, look_first: bool = False) -> delivery.Delivery:
        """What the teammate's stream sends next (design §5), decided from its snapshot;
        the stream's loop takes in what the check learned (`StreamState.learned`). With
        `look_first`, a read answers whenever no claim could be made, and the writer runs
        only when one could."""
        if look_first and not stream.online_pending:
            now_ms = self.clock.now_ms()
            found = await self.read(lambda conn: delivery.look(conn, name, stream, now_ms))
            if found is not None:
                return found
        joining = stream.online_pending

        def decide(tx: Txn) -> delivery.Delivery:
            if not joining:
                return delivery.next_for_teammate(tx, name, stream)
            # Its opening could not record it online (a full disk): now, before the check.
            epoch = team.set_online(tx, name, True, served_by=self.daemon_id)
            return dataclasses.replace(delivery.next_for_teammate(tx, name, stream), epoch=epoch)

        try:
            return await self.writer.run(decide)
        except CommitFailed:
            # What is stored still reaches the teammate; a new claim waits for a commit.
            now_ms = self.clock.now_ms()
            return await self.read(lambda conn: delivery.readable(conn, name, stream, now_ms))

    async def set_online(self, name: str, online: bool, reason: str | None = None) -> int:
        """Records the teammate online or offline; returns its stream epoch (see team.set_online)."""
        return await self.writer.run(lambda tx: team.set_online(tx, name, online, reason, served_by=self.daemon_id))

    # ------------------------------------------------------------ claim calls
    #
    # One method per call, unary or a Session op (`op`). A Session op is one writer job
    # that records its outcome by its op id (store/ops.py); sent again, it is answered
    # from its record, and what the answer needs beyond it (the task) is read in the
    # same job. Its error, first or recorded, is raised as a unary call's is.

    async def ack(self, name: str, through_seq: int, *, op: OpKey | None = None) -> int:
        """Acknowledges the teammate's messages through `through_seq`; returns how far they are."""
        if op is None:
            return await self.writer.run(lambda tx: inbox.ack(tx, name, through_seq))
        return await self._once(
            name, op, lambda tx: inbox.ack(tx, name, through_seq), acked_again, recorded_as=ack_record
        )

    async def renew(
        self,
        name: str,
        task_id: str,
        token: str,
        progress: str = "",
        fraction: float | None = None,
        reported: Usage | None = None,
        *,
        op: OpKey | None = None,
    ) -> Renewed:
        """Extends the lease; non-empty `progress` or a `fraction` is stored on the task,
        and `reported` usage added to the sums."""
        note = validate.progress(progress, fraction, self.limits)
        spent = validate.usage(reported, self.limits)

        def body(tx: Txn) -> Renewed:
            return Renewed(*tasks.renew(tx, name, task_id, token, note, spent))

        if op is None:
            renewed = await self.writer.run(body)
        else:
            renewed = await self._once(name, op, body, Renewed.again, recorded_as=Renewed.record)
        if renewed.lease_end_ms <= self.clock.now_ms():
            # Its commit took longer than the whole lease: the claim is over by the daemon
            # clock (the reaper ends it), and an OK would say it lives.
            raise errors.LeaseExpired(f"lease on task {task_id!r} ended before the renewal committed", id=task_id)
        return renewed

    async def complete(
        self,
        name: str,
        task_id: str,
        token: str,
        result: bytes,
        *,
        reported: Usage | None = None,
        verdict: Verdict | None = None,
        stream: StreamView | None = None,
        waiters: ParkedStreams | None = None,
        op: OpKey | None = None,
    ) -> Completed:
        """Completes the task, adding `reported` usage to the sums.

        For a teammate whose stream is open (`stream`, its snapshot), the same job serves
        the `waiters` and decides the stream's next item (`Completed.handoff`), which the
        caller hands the stream (`StreamState.hand`) to send at its next turn: never in the
        call's reply. A Session op (`op`, always from its stream) sent again is answered
        with the task as it stands, and no handoff."""
        validate.result(result, self.limits)
        validate.verdict(verdict, self.limits)
        spent = validate.usage(reported, self.limits)
        completion = Completion(name, task_id, token, result, verdict)
        if stream is None:
            assert op is None, "a Session op completes from its stream"
            task = await self.writer.run(lambda tx: tasks.complete(tx, completion, spent))
            return Completed(task, None)

        def body(tx: Txn, record: PendingOpRecord | None) -> Completed:
            return Completed(*delivery.complete_then_next(tx, completion, stream, waiters, spent, record))

        if op is None:
            return await self.writer.run(lambda tx: body(tx, None))
        # The completion's step writes the op's record (store/ops.py); without usage to
        # charge, a driver that merges completions may run it with those queued beside it.
        merge, merged = None, self.driver.merged_completion
        if merged is not None and spent is None and verdict is None:
            merge = merged(OpCompletion(op.op_id, op.digest, completion), delivery.views_touched)
        return await self._once(
            name, op, ops.RecordingBody(body), lambda tx, _: Completed(tasks.get_task(tx.conn, task_id), None), merge
        )

    async def fail(
        self,
        name: str,
        task_id: str,
        token: str,
        error: str,
        retryable: bool,
        reported: Usage | None = None,
        *,
        op: OpKey | None = None,
    ) -> TaskRecord:
        validate.check_text("error", error, self.limits.text_max_bytes)
        spent = validate.usage(reported, self.limits)
        return await self._end(
            name, task_id, op, lambda tx: tasks.fail(tx, name, task_id, token, error, retryable, spent)
        )

    async def release(self, name: str, task_id: str, token: str, *, op: OpKey | None = None) -> TaskRecord:
        return await self._end(name, task_id, op, lambda tx: tasks.release(tx, name, task_id, token))

    async def ask_question(
        self, name: str, task_id: str, token: str, question: str, *, op: OpKey | None = None
    ) -> TaskRecord:
        """Ends the claim and leaves the task NEEDS_INPUT (see `tasks.ask_question`)."""
        validate.question(question, self.limits)
        return await self._end(name, task_id, op, lambda tx: tasks.ask_question(tx, name, task_id, token, question))

    async def propose_tasks(
        self, name: str, specs: Sequence[TaskSpec], task_id: str, token: str, block: bool, *, op: OpKey | None = None
    ) -> Proposed:
        """A teammate's discovered tasks, as the Lead's policy for it says (see `proposals.propose`)."""
        batch = validate.proposal(specs, task_id, token, block, self.limits, self.clock.now_ms())

        def body(tx: Txn) -> Proposed:  # sent again, it answers as it did (`tasks.propose`)
            return proposals.propose(tx, name, batch, task_id, token, block=block)

        return await (self.writer.run(body) if op is None else self._once(name, op, body, lambda tx, _: body(tx)))

    async def append_output(
        self, name: str, task_id: str, token: str, data: bytes, *, op: OpKey | None = None
    ) -> output.Appended:
        """Adds `data` to the output of the caller's live claim (see `output.append_output`)."""
        validate.output_data(data, self.limits)
        limit = self.limits.output_max_bytes

        def body(tx: Txn) -> output.Appended:
            return output.append_output(tx, name, task_id, token, data, limit)

        if op is None:
            return await self.writer.run(body)
        return await self._once(
            name,
            op,
            body,
            lambda tx, done: output.Appended(output.attempt_of_token(tx.conn, token), done.value or 0),
            recorded_as=lambda appended: OpOutcome(value=appended.size),
        )

    async def _end(self, name: str, task_id: str, op: OpKey | None, body: Callable[[Txn], TaskRecord]) -> TaskRecord:
        """A failure, a release or a question: the task as it ends, or, for an op sent again, as it stands."""
        if op is None:
            return await self.writer.run(body)
        return await self._once(name, op, body, lambda tx, _: tasks.get_task(tx.conn, task_id))

    async def _once(
        self,
        name: str,
        op: OpKey,
        body: Callable[[Txn], T] | ops.RecordingBody[T],
        again: Callable[[Txn, OpOutcome], T],
        merge: Mergeable | None = None,
        *,
        recorded_as: Callable[[T], OpOutcome] | None = None,
    ) -> T:
        """Runs `body` as the Session op `op`, once: sent again, `again` answers from its record."""

        def job(tx: Txn) -> ops.OpRun[T]:
            run = ops.run_once(tx, name, op.op_id, op.digest, body, recorded_as=recorded_as)
            if run.ran or run.outcome.error is not None:
                return run
            return ops.OpRun(run.outcome, False, again(tx, run.outcome))

        run = await self.writer.run(job, merge)
        if run.outcome.error is not None:
            raise run.outcome.error  # committed with its record
        return run.value  # type: ignore[return-value]  # set whenever no error is

    async def submit_plan(self, name: str, plan: str) -> str:
        validate.check_text("plan", plan, self.limits.text_max_bytes)
        return await self.writer.run(lambda tx: protocol.submit_plan(tx, name, plan))

    async def respond_shutdown(self, name: str, request_id: str, approve: bool, reason: str) -> None:
        validate.check_text("reason", reason, self.limits.text_max_bytes)
        await self.writer.run(lambda tx: protocol.respond_shutdown(tx, name, request_id, approve, reason))

    # ------------------------------------------------------------ both

    async def send_message(self, sender: str, to: str, body: str, key: RequestKey | None = None) -> list[str]:
        if not to:
            raise errors.InvalidArgument("to", "must not be empty")
        validate.check_text("body", body, self.limits.text_max_bytes)
        limit = self.limits.unacked_inbox_max
        return await self._write(lambda tx: inbox.send_message(tx, sender, to, body, inbox_limit=limit), key)

    async def set_waiting(self, name: str, waiting: bool) -> None:
        """Records that the teammate waits for work still to come (or no longer does)."""
        await self.writer.run(lambda tx: status.set_waiting(tx, name, waiting))
