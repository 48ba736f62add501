"""Races between daemons of one board, each many times over, every round's outcome judged:

- a claim against a shutdown request sent through another daemon (invariant 5: no claim
  while a protocol message waits);
- a new task against the completion of its dependency (the new task becomes ready either way);
- a cancel through one daemon against the claim of the canceled task on another: the claim
  came first (the stream sends the claim then claim_ended, or claim_ended alone when the claim
  had not gone out, and never the claim after it; completing fails TASK_CANCELED) or the
  cancel did (the task is never sent); never a canceled task completed;
- two dependencies completed at once through two daemons: their dependent becomes ready once
  (unmet_deps 0, never below) and is claimed once;
- a renewal sent about the lease's end (RENEW_OFFSETS_MS; the lease is half-open, so at its end
  it is dead, design §1) through one daemon against the reclaim (by the reapers, and by the
  Idle stream of a teammate waiting on the other daemon): the renewal won (the holder completes,
  nobody else held the task) or the reclaim did (not before the lease's end; the renewal fails
  LEASE_EXPIRED, the task is claimed again with a new token, the old token's completion fails
  LEASE_EXPIRED, the holder hears claim_ended after the reclaim), never both. A lease is at
  least 1 s, so these rounds run in RENEW_LANES lanes at once.

Which side wins a round is up to the race; each test prints its tally ([figures]). A failure
names the round and gives the task's row, its claims and its event log rows.
"""

from __future__ import annotations

import collections
import concurrent.futures
import dataclasses
import os
import time
from collections.abc import Callable

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.contract.session_board import shutdown_gate_breaches
from tests.contract.wire import Client, Stream, duration, short, spec, status_details, ts_seconds
from tests.support.waiting import wait_until

SOAK = os.environ.get("CORRAL_SOAK") == "1"
SHUTDOWN_RACES = 1_000 if SOAK else 150
DEPENDENCY_RACES = 500 if SOAK else 100
CANCEL_RACES = 1_000 if SOAK else 100
JOIN_RACES = 1_000 if SOAK else 100
RENEW_RACES = 1_000 if SOAK else 100
CLOCK_SLACK_S = 0.05  # this host's clock against the database's, the same host's
RENEW_LANES = 4  # renewal rounds run in this many lanes at once: each waits a whole lease
LEASE_S = 1.0  # the shortest lease a task may have (design §7)
# When a renewal round sends its renewal, in ms from the lease's end (negative: before it); the
# round number picks one, so every run tries both sides of the end (a request reaches the store
# a few ms after it is sent).
RENEW_OFFSETS_MS = (-24, -16, -12, -8, -6, -4, -2, -1, 0, 2)


@pytest.mark.timeout(600 if SOAK else 120)
def test_no_claim_reaches_a_teammate_while_a_shutdown_request_sent_elsewhere_waits(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("raced")
    stream = a.client(mate.token, "raced").idle(poll_interval=60)
    a.wait_open_streams(1)
    teammate = a.client(mate.token, "raced")
    received_order = []
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for round_no in range(SHUTDOWN_RACES):
            task = pool.submit(a.create_tasks, spec(f"r{round_no}"))
            request = pb.RequestShutdownRequest(name="raced", reason=f"round {round_no}")
            request.grace.CopyFrom(duration(60))
            shutdown = pool.submit(b.lead.lead.RequestShutdown, request)
            task.result(10), shutdown.result(10)
            got_request = got_claim = None
            while got_request is None or got_claim is None:
                item = stream.next(10)
                which = item.WhichOneof("event")
                received_order.append(which)
                if which == "shutdown_request":
                    got_request = item.shutdown_request
                    # Answered no, then acknowledged: the gate opens again.
                    teammate.teammate.RespondShutdown(
                        pb.RespondShutdownRequest(request_id=got_request.request_id, approve=False, reason="busy")
                    )
                    teammate.ack(got_request.seq)
                elif which == "claim":
                    got_claim = item.claim
                    teammate.complete(got_claim)
    stream.cancel()
    with shared_board.connection() as conn:
        breaches = shutdown_gate_breaches(conn)
    assert breaches == [], breaches[:5]
    assert received_order.count("claim") == SHUTDOWN_RACES


@pytest.mark.timeout(300 if SOAK else 90)
def test_a_task_created_through_one_daemon_as_its_dependency_completes_on_another_becomes_ready(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("finisher")
    worker = b.client(mate.token, "finisher")
    stream = worker.idle(poll_interval=60)
    b.wait_open_streams(1)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for round_no in range(DEPENDENCY_RACES):
            a.create_tasks(spec(f"dep{round_no}"))
            claim = stream.next_event("claim", timeout=10)
            assert claim.task.id == f"dep{round_no}"
            # The completion (through b) and the dependent's creation (through a) race.
            done = pool.submit(worker.complete, claim)
            made = pool.submit(a.create_tasks, spec(f"child{round_no}", f"dep{round_no}"))
            done.result(10), made.result(10)
            child_item = stream.try_next(10)
            if child_item is None:
                row = shared_board.sql(
                    "SELECT state, unmet_deps, gate_shut, owner FROM tasks WHERE id = %s", (f"child{round_no}",)
                )
                pytest.fail(f"round {round_no}: no claim of the dependent (state, unmet, gate, owner): {row}")
            child = child_item.claim
            assert child.task.id == f"child{round_no}", f"round {round_no}: {child_item}"
            worker.complete(child)
    stream.cancel()
    assert all(task.state == pb.TASK_STATE_COMPLETED for task in a.all_tasks())


# ---------------------------------------------------------------- cancel against claim


def _claims_of(board, task_id: str) -> list[tuple]:
    """The claim history of `task_id`: (token, teammate, attempt, outcome), oldest first."""
    return board.sql(
        "SELECT c.token, c.teammate, c.attempt, c.outcome FROM claims AS c JOIN tasks AS t ON t.seq = c.task_seq"
        " WHERE t.id = %s ORDER BY c.fence",
        (task_id,),
    )


def _evidence(board, task_id: str) -> str:
    """The task row, its claims and its event log rows, for a failure's message."""
    task = board.sql(
        "SELECT state, unmet_deps, owner, attempt, live_fence, lease_expire_ms, finish_ms, error FROM tasks"
        " WHERE id = %s",
        (task_id,),
    )
    events = board.sql(
        "SELECT seq, time_ms, kind, data FROM events WHERE data::json->>'id' = %s ORDER BY seq", (task_id,)
    )
    return f"task {task_id} (state, unmet, owner, attempt, fence, lease end, finish, error) {task};" + (
        f" claims (token, teammate, attempt, outcome) {_claims_of(board, task_id)}; events {events}"
    )


def _next_item(board, stream, task_id: str, what: str):
    """The stream's next item, within 10 s; the failure names `task_id`'s evidence."""
    try:
        return stream.next(10)
    except AssertionError as error:
        raise AssertionError(f"{what}: {error}; {_evidence(board, task_id)}") from None


def _next_claim(board, stream, task_id: str, what: str):
    """The stream's next item, which must be the claim of `task_id` (so nothing else came first)."""
    item = _next_item(board, stream, task_id, what)
    if item.WhichOneof("event") == "claim" and item.claim.task.id == task_id:
        return item.claim
    if item.WhichOneof("event") != "claim":
        raise AssertionError(f"{what}: {stream.label} sent {short(item)} before {task_id}")
    told = [earlier for earlier in stream.received[:-1] if earlier.claim_ended.claim_token == item.claim.claim_token]
    after = f" after its claim_ended {short(told[0])}" if told else ""
    stray = f"{stream.label} sent the claim of {item.claim.task.id} (token {item.claim.claim_token}){after}"
    raise AssertionError(f"{what}: {stray}, before {task_id}; {_evidence(board, item.claim.task.id)}")


def _reason(error: grpc.RpcError) -> tuple[grpc.StatusCode, str]:
    info = status_details(error).get("error_info")
    return error.code(), info.reason if info is not None else ""


def _judge_cancel(board, stream, mate, task_id: str, reply: pb.CancelTasksResponse, what: str) -> str:
    """Which side won the round; fails on anything but one clean winner.

    A claim the cancel ended while the stream's check was still running is never sent
    (the stream tells claim_ended alone: service/teamstream.py), so a claim in the store
    shows on the stream as claim then claim_ended, or as claim_ended alone."""
    assert [task.id for task in reply.tasks] == [task_id], f"{what}: the cancel canceled {reply.tasks}"
    claims = _claims_of(board, task_id)
    state = board.sql("SELECT state FROM tasks WHERE id = %s", (task_id,))
    assert state == [(pb.TASK_STATE_CANCELED,)], f"{what}: {_evidence(board, task_id)}"
    if not claims:
        return "cancel first"  # the next round's first claim shows the stream never sent it
    assert [c[1:] for c in claims] == [(mate.name, 1, "canceled")], f"{what}: {_evidence(board, task_id)}"
    token = claims[0][0]
    item = _next_item(board, stream, task_id, what)
    outcome = "claim first, canceled before it was sent"
    if item.WhichOneof("event") == "claim" and item.claim.task.id == task_id:
        assert item.claim.claim_token == token, f"{what}: the stream sent another token than the store's"
        item = _next_item(board, stream, task_id, what)
        outcome = "claim first, sent, then canceled"
    told = (item.claim_ended.task_id, item.claim_ended.claim_token, item.claim_ended.reason)
    expected = (task_id, token, pb.CLAIM_END_REASON_TASK_CANCELED)
    assert told == expected, f"{what}: {short(item)}; {_evidence(board, task_id)}"
    claim = pb.Claim(task=pb.Task(id=task_id), claim_token=token)
    _must_fail(lambda: mate.complete(claim), "TASK_CANCELED", board, task_id, f"{what}: the canceled claim")
    return outcome


def _must_fail(call, reason: str, board, task_id: str, what: str) -> None:
    """`call()` must fail FAILED_PRECONDITION with `reason`; the failure names the round's evidence."""
    try:
        answered = call()
    except grpc.RpcError as error:
        failed = _reason(error)
        assert failed == (grpc.StatusCode.FAILED_PRECONDITION, reason), f"{what}: {failed}; {_evidence(board, task_id)}"
        return
    raise AssertionError(f"{what}: expected {reason}, got {short(answered)}; {_evidence(board, task_id)}")


@pytest.mark.timeout(900 if SOAK else 120)
def test_a_cancel_through_one_daemon_and_a_claim_on_another_never_both_win(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    mate = a.add_teammate("handed")
    stream = mate.idle(poll_interval=60)
    a.wait_open_streams(1)
    tally: collections.Counter[str] = collections.Counter()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for round_no in range(CANCEL_RACES):
            first, raced = f"first{round_no}", f"raced{round_no}"
            a.create_tasks(spec(first), spec(raced, first))
            held = _next_claim(shared_board, stream, first, f"round {round_no}")
            # Completing `first` through a hands `raced` to the teammate's stream there, in the
            # completion's own transaction (or its stream claims it after); the cancel through
            # b races that claim.
            done = pool.submit(mate.complete, held)
            canceled = pool.submit(b.lead.lead.CancelTasks, pb.CancelTasksRequest(ids=[raced]))
            done.result(10)
            reply = canceled.result(10)
            tally[_judge_cancel(shared_board, stream, mate, raced, reply, f"round {round_no}")] += 1
    # A canceled task the stream still sent would come before this one.
    a.create_tasks(spec("last"))
    mate.complete(_next_claim(shared_board, stream, "last", "after the rounds"))
    stream.cancel()
    print(f"\n[figures] cancel against claim, {CANCEL_RACES} rounds: {dict(tally)}")
    assert sum(tally.values()) == CANCEL_RACES


# ---------------------------------------------------------------- two dependencies at once


def _first_claim(streams: dict, what: str, timeout: float = 10.0) -> tuple[str, pb.Claim]:
    """(whose stream, the claim) of the first item any of `streams` sends, polled with a deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for name, stream in streams.items():
            item = stream.try_next(0.005)
            if item is not None:
                assert item.WhichOneof("event") == "claim", f"{what}: {stream.label} sent {short(item)}"
                return name, item.claim
    raise AssertionError(f"{what}: no stream got a claim within {timeout}s")


def _completed_last(board, first: str, second: str) -> str:
    """Which of the two tasks' completions committed last (by the event log's order)."""
    rows = board.sql(
        "SELECT data::json->>'id' FROM events WHERE kind = 'task_changed' AND data::json->>'id' IN (%s, %s)"
        " AND (data::json->>'state')::int = %s ORDER BY seq",
        (first, second, pb.TASK_STATE_COMPLETED),
    )
    assert sorted(rows) == sorted([(first,), (second,)]), rows
    return rows[-1][0]


@pytest.mark.timeout(900 if SOAK else 120)
def test_a_task_whose_two_dependencies_complete_at_once_on_two_daemons_is_claimed_once(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    left = a.add_teammate("left", roles=["left"])  # works through a
    right = b.client(a.add_teammate("right", roles=["right"]).token, "right")  # works through b
    clients = {"left": left, "right": right}
    streams = {name: client.idle(poll_interval=60) for name, client in clients.items()}
    a.wait_open_streams(1), b.wait_open_streams(1)
    tally: collections.Counter[str] = collections.Counter()
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        for round_no in range(JOIN_RACES):
            what, join = f"round {round_no}", f"join{round_no}"
            deps = {"left": f"left{round_no}", "right": f"right{round_no}"}
            a.create_tasks(*(spec(dep, required_role=role) for role, dep in deps.items()), spec(join, *deps.values()))
            held = {role: _next_claim(shared_board, streams[role], dep, what) for role, dep in deps.items()}
            fired = [pool.submit(clients[role].complete, held[role]) for role in deps]
            for future in fired:
                future.result(10)
            who, claim = _first_claim(streams, what)
            assert claim.task.id == join, f"{what}: {who} got {short(claim)}"
            row = shared_board.sql("SELECT unmet_deps FROM tasks WHERE id = %s", (join,))
            assert row == [(0,)], f"{what}: {_evidence(shared_board, join)}"
            claims = _claims_of(shared_board, join)
            assert claims == [(claim.claim_token, who, 1, None)], f"{what}: {_evidence(shared_board, join)}"
            clients[who].complete(claim)
            last = "left" if _completed_last(shared_board, *deps.values()) == deps["left"] else "right"
            tally[f"{last} completed last, {who} claimed"] += 1
    # A second claim of a joined task would come before these.
    a.create_tasks(*(spec(f"last-{role}", required_role=role) for role in clients))
    for role, client in clients.items():
        client.complete(_next_claim(shared_board, streams[role], f"last-{role}", "after the rounds"))
        streams[role].cancel()
    assert shared_board.sql("SELECT id, unmet_deps FROM tasks WHERE unmet_deps < 0") == []
    print(f"\n[figures] two dependencies at once, {JOIN_RACES} rounds: {dict(tally)}")
    assert sum(tally.values()) == JOIN_RACES


# ---------------------------------------------------------------- renew against reclaim


@dataclasses.dataclass(frozen=True)
class _Race:
    """One renewal round: the holder's stream (through a) got the claim; the other teammate's
    stream (on b) was opened after that, so it can only get the task from a reclaim."""

    holder: Client
    other: Client
    held: Stream
    waiting: Stream
    claim: pb.Claim
    what: str

    def streams(self) -> dict[str, Stream]:
        return {self.holder.name: self.held, self.other.name: self.waiting}

    def client(self, name: str) -> Client:
        return self.holder if name == self.holder.name else self.other


def _kept(board, race: _Race, renewed: pb.RenewLeaseResponse) -> str:
    """The renewal won: the holder's completion succeeds and nobody else ever held the task."""
    task_id, what = race.claim.task.id, race.what
    assert ts_seconds(renewed.lease_expire_time) > ts_seconds(race.claim.lease_expire_time), f"{what}: {renewed}"
    try:
        race.holder.complete(race.claim)
    except grpc.RpcError as error:
        raise AssertionError(f"{what}: renewed, then {_reason(error)}; {_evidence(board, task_id)}") from None
    other_got = [short(item) for item in race.waiting.received]
    assert other_got == [], f"{what}: renewed, yet {race.other.name} got {other_got}; {_evidence(board, task_id)}"
    claims = [row[1:] for row in _claims_of(board, task_id)]
    assert claims == [(race.holder.name, 1, "completed")], f"{what}: renewed; {_evidence(board, task_id)}"
    return "renewed"


def _read_after_expiry(race: _Race, seen: dict, done: Callable[[dict], bool]) -> None:
    """Reads both streams until `done(seen)` or 10 s pass, keeping in `seen` the holder's
    claim_ended (and when it was read) and the task's next claim (and whose stream got it:
    either may, both teammates are free). Anything else fails."""
    deadline = time.monotonic() + 10
    while not done(seen) and time.monotonic() < deadline:
        for name, stream in race.streams().items():
            item = stream.try_next(0.005)
            kind = item.WhichOneof("event") if item is not None else None
            if kind == "claim_ended" and name == race.holder.name and "notice" not in seen:
                seen["notice"] = (item.claim_ended, time.time())
            elif kind == "claim" and item.claim.task.id == race.claim.task.id and "claim" not in seen:
                seen["claim"] = (name, item.claim)
            elif item is not None:
                raise AssertionError(f"{race.what}: {stream.label} sent {short(item)}, having read {sorted(seen)}")


def _read_with_evidence(board, race: _Race, seen: dict, wanted: str) -> None:
    """`_read_after_expiry` until `wanted` is in `seen`; a failure gives the round's evidence."""
    try:
        _read_after_expiry(race, seen, lambda seen: wanted in seen)
        assert wanted in seen, f"{race.what}: no {wanted} in 10 s, having read {sorted(seen)}"
    except AssertionError as error:
        raise AssertionError(f"{error}; {_evidence(board, race.claim.task.id)}") from None


def _reclaimed(board, race: _Race) -> str:
    """The reclaim won: the task is claimed again with a new token, the old token's completion
    fails LEASE_EXPIRED, and the holder is told (within the issue's bound for wake-ups that
    cross daemons: the reclaim may have run on either)."""
    claim, what = race.claim, race.what
    task_id = claim.task.id
    seen: dict = {}
    # The reclaim may have come before the renewal was sent: the other's stream, read while
    # waiting to send it, may hold the task's next claim already.
    for item in race.waiting.received:
        if item.WhichOneof("event") == "claim" and item.claim.task.id == task_id:
            seen["claim"] = (race.other.name, item.claim)
    _read_with_evidence(board, race, seen, "claim")
    taker, fresh = seen["claim"]
    assert fresh.claim_token != claim.claim_token and fresh.attempt == 2, f"{what}: {short(fresh)}"
    # Half-open lease: the reclaim ran at or after its end (its time is the store's `now`).
    (reclaimed_ms,) = board.sql("SELECT end_ms FROM claims WHERE token = %s", (claim.claim_token,))[0]
    early = claim.lease_expire_time.ToMilliseconds() - reclaimed_ms
    assert early <= 0, f"{what}: reclaimed {early} ms before the lease ended; {_evidence(board, task_id)}"
    _must_fail(lambda: race.holder.complete(claim), "LEASE_EXPIRED", board, task_id, f"{what}: the old token")
    race.client(taker).complete(fresh)  # at once: its lease is 1 s too
    claims = [row[1:] for row in _claims_of(board, task_id)]
    expected = [(race.holder.name, 1, "expired"), (taker, 2, "completed")]
    assert claims == expected, f"{what}: {_evidence(board, task_id)}"
    _read_with_evidence(board, race, seen, "notice")
    ended, told_at = seen["notice"]
    told = (ended.task_id, ended.claim_token, ended.reason)
    assert told == (task_id, claim.claim_token, pb.CLAIM_END_REASON_LEASE_EXPIRED), f"{what}: {short(ended)}"
    early = reclaimed_ms / 1000 - told_at  # how soon: bench/latency.py (3e) and bench/pg_latency.py
    assert early <= CLOCK_SLACK_S, f"{what}: the holder was told {early:.2f} s before the reclaim"
    return "reclaimed, then the holder claimed it again" if taker == race.holder.name else "reclaimed by the other"


def _renew_race(board, race: _Race, offset_ms: int) -> str:
    """Renews `offset_ms` after the lease's end (by this host's clock, which is the database's)."""
    fire_at = ts_seconds(race.claim.lease_expire_time) + offset_ms / 1000
    # The wait for that instant reads the other's stream: a claim that comes first stays in `received`.
    while (left := fire_at - time.time()) > 0 and not race.waiting.received:
        race.waiting.try_next(left)
    try:
        renewed = race.holder.renew(race.claim)
    except grpc.RpcError as error:
        failed = _reason(error)
        assert failed == (grpc.StatusCode.FAILED_PRECONDITION, "LEASE_EXPIRED"), f"{race.what}: renewal {failed}"
        return _reclaimed(board, race)
    return _kept(board, race, renewed)


def _offline(daemon, name: str) -> bool:
    return daemon.teammate(name).status == pb.TEAMMATE_STATUS_OFFLINE


def _renew_lane(board, a, b, lane: int, rounds: int) -> collections.Counter[str]:
    """`rounds` races in one lane; its tasks need role lane<n>, which only its two teammates have."""
    role = f"lane{lane}"
    holder = a.add_teammate(f"holder{lane}", roles=[role])
    other = b.client(a.add_teammate(f"other{lane}", roles=[role]).token, f"other{lane}")
    tally: collections.Counter[str] = collections.Counter()
    for round_no in range(rounds):
        what, task_id = f"lane {lane} round {round_no}", f"{role}-{round_no}"
        offset_ms = RENEW_OFFSETS_MS[round_no % len(RENEW_OFFSETS_MS)]
        a.create_tasks(spec(task_id, lease=LEASE_S, required_role=role))
        # The holder opens a stream each round: a stream told that its lease was reclaimed
        # does not look for work again, even once its teammate calls, until its poll
        # interval (a wake-up gap, on SQLite too, that is not this test's subject).
        held = holder.idle(poll_interval=60)
        claim = _next_claim(board, held, task_id, what)
        waiting = other.idle(poll_interval=60)
        race = _Race(holder, other, held, waiting, claim, what)
        tally[f"{_renew_race(board, race, offset_ms)} ({offset_ms:+d} ms)"] += 1
        judged = {stream.label: len(stream.received) for stream in (held, waiting)}
        for stream in (held, waiting):
            stream.cancel()
            late = [short(item) for item in stream.received[judged[stream.label] :]]
            assert late == [], f"{what}: {stream.label} also sent {late}; {_evidence(board, task_id)}"
        # A cancelled stream is still served until its daemon sees it close: a claim it makes
        # meanwhile is never read, and the next round's task would sit out its lease with it.
        for name in (holder.name, other.name):
            wait_until(lambda name=name: _offline(a, name), 10, f"{what}: {name}'s streams closed")
    return tally


@pytest.mark.timeout(900 if SOAK else 150)
def test_a_renewal_at_the_lease_end_and_a_reclaim_on_another_daemon_never_both_win(shared_board):
    a, b = shared_board.daemon("a"), shared_board.daemon("b")
    per_lane = RENEW_RACES // RENEW_LANES
    with concurrent.futures.ThreadPoolExecutor(RENEW_LANES) as pool:
        lanes = [pool.submit(_renew_lane, shared_board, a, b, lane, per_lane) for lane in range(RENEW_LANES)]
        concurrent.futures.wait(lanes)
    tally = sum((lane.result() for lane in lanes), collections.Counter())
    print(f"\n[figures] renew against reclaim, {per_lane * RENEW_LANES} rounds: {dict(sorted(tally.items()))}")
    assert sum(tally.values()) == per_lane * RENEW_LANES
