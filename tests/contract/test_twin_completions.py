"""Two identical completions in flight at once (design §2 invariant 9: a task completed is
completed once; a repeated CompleteTask with the same token returns the stored result).

The same CompleteTask, with the same claim token and result, goes out twice on two
connections before either is answered: on a SQLite board to its one daemon, on a PostgreSQL
board through two daemons of it (`--store postgres`). Every job of the teammate sleeps
first (failpoint `job:twin`), so both are in the writers at once; on SQLite they may share
one group commit. What must hold, round after round: both callers get OK with the task
COMPLETED and the same result; the board has one completed claim and one COMPLETED event
for the task; its dependents are counted down once (a task that also waits for another
stays unclaimable; one that waited only for it becomes claimable).
"""

from __future__ import annotations

import json
import pathlib
import time
from collections.abc import Iterator

import grpc
import pytest

from corral.v1 import corral_pb2 as pb
from tests.support.boards import read_board
from tests.support.daemons import store_args

from .wire import _CHANNEL_OPTIONS, Client, Daemon, spec, start_corrald

ROUNDS = 4
JOB_SLEEP_MS = 150  # each job of the teammate: both completions are queued before either runs
COMPLETED = pb.TASK_STATE_COMPLETED

pytestmark = pytest.mark.timeout(90)


class _SecondDaemon(Daemon):
    """Another daemon of a PostgreSQL board: the Lead's token is the one the first wrote."""

    def __init__(self, state_dir: pathlib.Path, lead_token: str, **options) -> None:
        super().__init__(state_dir, **options)
        self._first_lead_token = lead_token

    def read_lead_token(self) -> str:
        return self._first_lead_token


@pytest.fixture
def daemons(tmp_path) -> Iterator[tuple[Daemon, Daemon]]:
    """(the daemon the first completion goes to, the one the second goes to): one daemon on
    SQLite, two daemons of one board on PostgreSQL."""
    failpoints = f"job:twin=sleep:{JOB_SLEEP_MS}"
    first = start_corrald(tmp_path / "one" / "state", tmp_path, failpoints=failpoints)
    started = [first]
    try:
        board = store_args(first.state_dir)  # the first daemon's board, on PostgreSQL
        if board:
            second = _SecondDaemon(
                tmp_path / "two" / "state", first.lead_token, log_dir=tmp_path, extra_args=board
            ).start(failpoints)
            started.append(second)
        yield first, started[-1]
    finally:
        for daemon in reversed(started):
            daemon.stop_and_check()


def _connection(daemon: Daemon, token: str) -> tuple[grpc.Channel, Client]:
    """A connection of its own (no subchannel shared with the daemon's other clients)."""
    channel = grpc.insecure_channel(daemon.address, options=_CHANNEL_OPTIONS)
    return channel, Client(channel, token, "twin")


def _completed_events(conn, task_id: str) -> int:
    count = 0
    for (data,) in conn.execute("SELECT data FROM events WHERE kind = 'task_changed'"):
        fields = json.loads(data)
        count += fields.get("id") == task_id and fields.get("state") == COMPLETED
    return count


def test_identical_completions_in_flight_complete_once(daemons):
    first, second = daemons
    twin = first.add_teammate("twin")
    first.create_tasks(spec("never", required_role="nobody"))  # a dependency nobody completes
    for round_ in range(ROUNDS):
        task, alone, joined = f"t{round_}", f"alone{round_}", f"joined{round_}"
        first.create_tasks(spec(task, priority=10), spec(alone, task), spec(joined, task, "never"))
        stream = twin.idle()
        claim = stream.next_event("claim", timeout=10)
        stream.cancel()
        assert claim.task.id == task
        request = pb.CompleteTaskRequest(task_id=task, claim_token=claim.claim_token, result=f"r{round_}".encode())
        connections = [_connection(first, twin.token), _connection(second, twin.token)]
        try:
            for _, client in connections:  # connected before the race, so both go out at once
                client.board.GetStats(pb.GetStatsRequest())
            sent: list[float] = []
            answered: list[float] = []
            futures = []
            for _, client in connections:
                sent.append(time.monotonic())
                future = client.teammate.CompleteTask.future(request, timeout=30)
                future.add_done_callback(lambda _, done=answered: done.append(time.monotonic()))
                futures.append(future)
            replies = [future.result() for future in futures]
        finally:
            for channel, _ in connections:
                channel.close()
        assert max(sent) < min(answered), "the second completion was sent after the first was answered"
        for reply in replies:
            assert (reply.task.state, reply.task.result) == (COMPLETED, request.result), reply.task
        with read_board(first.state_dir) as conn:
            completed_claims = conn.execute(
                "SELECT count(*) FROM claims JOIN tasks ON tasks.seq = claims.task_seq"
                " WHERE tasks.id = ? AND claims.outcome = 'completed'",
                (task,),
            ).fetchone()[0]
            unmet = dict(conn.execute("SELECT id, unmet_deps FROM tasks WHERE id IN (?, ?)", (alone, joined)))
            events = _completed_events(conn, task)
        assert completed_claims == 1, f"round {round_}: {completed_claims} completed claims of {task}"
        assert events == 1, f"round {round_}: {events} COMPLETED events of {task}"
        assert unmet == {alone: 0, joined: 1}, f"round {round_}: dependents counted down wrongly: {unmet}"
        # The dependent that waited only for the task is handed out; the other is not.
        stream = twin.idle()
        freed = stream.next_event("claim", timeout=10)
        stream.cancel()
        assert freed.task.id == alone, freed.task.id
        twin.complete(freed)
    assert all(first.get_task(f"joined{r}").state == pb.TASK_STATE_PENDING for r in range(ROUNDS))
