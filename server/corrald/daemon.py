"""The daemon's life: build and connect its parts (`assemble`), serve, stop in order."""

from __future__ import annotations

import asyncio
import dataclasses
import gc
import json
import logging
import os
import pathlib
import signal
import sys
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

import grpc
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_health.v1.health import aio as health_aio
from grpc_reflection.v1alpha import reflection

from corral.v1 import corral_pb2 as pb
from corral.v1 import corral_pb2_grpc as pb_grpc

from . import activity, failpoints
from .board import Board
from .clock import Clock, SystemClock
from .config import MESSAGE_MAX_BYTES, ConfigError, Limits, WriterConfig
from .connections import connection_options, raise_open_files_limit
from .credentials import token_hash
from .errors import CorralError
from .listen import bind
from .looplag import LoopLag
from .metrics import Metrics
from .overload import heap
from .overload.lanes import CallLanes, LaneConfig
from .overload.pacing import Pacer
from .overload.reopen import ReopenSpacing
from .reaper import Reaper
from .reconcile import Reconciler
from .service.board import BoardServicer
from .service.interceptor import CorralInterceptor
from .service.lead import LeadServicer
from .service.teammate import TeammateServicer
from .statedir import StateDir
from .txn import Wakes
from .wake import WakeHub
from .web.config import WebConfig

if TYPE_CHECKING:
    from .store.postgres.listener import WakeListener
    from .store.postgres.store import PgBoard
    from .store.postgres.target import PgTarget
    from .web.app import WebBoard

log = logging.getLogger("corrald")

CALLS_HELD_BY_CORE = 8192
SERVER_OPTIONS = (
    ("grpc.so_reuseport", 0),  # a second daemon must fail to bind, not share the port
    # No request needs more (config.py says how it was set); one over it is refused unread.
    ("grpc.max_receive_message_length", MESSAGE_MAX_BYTES),
    ("grpc.max_send_message_length", 64 * 1024 * 1024),
    # Notice a dead or paused teammate's stream within seconds.
    ("grpc.keepalive_time_ms", 10_000),
    ("grpc.keepalive_timeout_ms", 5_000),
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_ping_interval_without_data_ms", 5_000),
    ("grpc.http2.max_pings_without_data", 0),
    # A burst of calls waits in gRPC core until the event loop takes each one;
    # past these bounds core answers by itself (REFUSED_STREAM, or CANCELLED),
    # with no ErrorInfo or RetryInfo. Core's own pending bound (1,000, certain
    # rejection at 3,000) cancelled a third of 5,000 calls from one client;
    # at 8,192 they reach the lanes, which serve them or refuse with OVERLOADED.
    # A call held in core costs about 12 KiB. See server/DESIGN.md.
    ("grpc.max_concurrent_streams", CALLS_HELD_BY_CORE),
    ("grpc.server.max_pending_requests", CALLS_HELD_BY_CORE),
    ("grpc.server.max_pending_requests_hard_limit", CALLS_HELD_BY_CORE),
)
# The first `server.stop` only sends GOAWAY and stops new calls; the one after
# the writer settles sets the real grace. No job runs this long (server/DESIGN.md).
_UNTIL_THE_WRITER_SETTLES_S = 60.0
SERVICE_NAMES = (
    pb.DESCRIPTOR.services_by_name["LeadService"].full_name,
    pb.DESCRIPTOR.services_by_name["TeammateService"].full_name,
    pb.DESCRIPTOR.services_by_name["BoardService"].full_name,
)


@dataclasses.dataclass(frozen=True)
class ServeConfig:
    state_dir: pathlib.Path
    listen: str | None = None
    tls_cert: pathlib.Path | None = None
    tls_key: pathlib.Path | None = None
    metrics: str | None = None
    limits: Limits = Limits()
    writer: WriterConfig = WriterConfig()
    lanes: LaneConfig = LaneConfig()
    stop_grace_s: float = 2.0
    web: WebConfig | None = None  # the web board, off unless `--web`
    # A PostgreSQL board (`--store postgresql://…`); None: the state directory's SQLite file.
    store: PgTarget | None = None


@dataclasses.dataclass(frozen=True)
class Parts:
    """The daemon's parts, connected (see `assemble`)."""

    board: Board
    hub: WakeHub
    reaper: Reaper
    lanes: CallLanes
    loop_lag: LoopLag
    metrics: Metrics | None
    teammates: TeammateServicer
    lead: LeadServicer
    health: health_aio.HealthServicer
    server: grpc.aio.Server
    listener: WakeListener | None = None  # a PostgreSQL board's wake-ups from its other daemons
    # Claim-ended notices a PostgreSQL board's daemon may have missed, told from the history.
    reconciler: Reconciler | None = None


def assemble(
    config: ServeConfig,
    *,
    database: pathlib.Path | PgBoard,
    lead_token: str | None,
    clock: Clock,
    loop: asyncio.AbstractEventLoop,
    draining: Callable[[], bool],
    open_files_limit: int,
) -> Parts:
    """Builds the writer, board, wake hub, reaper, metrics and servicers, and connects them.

    This is the one place that says how the parts meet. Nothing runs yet: the
    board opens, the metrics endpoint starts and the server binds in `Daemon.start`.
    """
    # The board: it validates, turns each operation into a writer job or a read,
    # and owns the writer thread (the only read-write connection) and the reader pool.
    board = Board(database, clock=clock, limits=config.limits, writer_config=config.writer, lead_token=lead_token)
    writer = board.writer
    reaper = Reaper(board)  # reclaims expired leases and runs out shutdown graces, on a timer
    # The activity log is written here, on the loop, not by the writer thread,
    # whose time between commits is the board's throughput.
    hub = WakeHub(loop, on_deadline=reaper.schedule, clock=clock, on_activity=activity.write)
    # Pacing charges each teammate with what its writer jobs took (overload/costs.py).
    lanes = CallLanes(config.lanes, Pacer(config.lanes.pacing, costs=writer.costs))
    loop_lag = LoopLag()
    metrics = Metrics(board, hub, lanes) if config.metrics else None

    # The commit -> wake-up -> stream path. After each COMMIT the writer thread
    # reports what the batch changed (`Wakes`) to the hub, on the event loop, in
    # the same hop that gives the batch's callers their outcome (so a commit
    # costs one wake-up of the loop, and the hub has applied a batch's changes
    # before any of its callers goes on). The hub wakes the streams that may
    # have work now, each of which asks the board again what to send
    # (`Board.next_for`, one writer job), hands claims made for a stream in
    # another job to it, moves the Watch streams' event, and arms the reaper
    # for the next lease end or shutdown deadline.
    writer.on_commit_in_loop = (loop, hub.apply)
    if metrics is not None:
        writer.on_commit = metrics.observe_wakes  # writer thread, after COMMIT
        writer.on_batch = metrics.observe_commit

    # The gRPC surface: one interceptor authenticates every call and gives it a
    # place in its caller's lane; the servicers only convert and ask the board.
    server = grpc.aio.server(
        interceptors=[CorralInterceptor(board, lanes, draining=draining)],
        options=SERVER_OPTIONS + connection_options(open_files_limit),
    )
    teammates = TeammateServicer(board, hub, ReopenSpacing())
    lead = LeadServicer(board, hub)  # the web board's actions call it too
    pb_grpc.add_LeadServiceServicer_to_server(lead, server)
    pb_grpc.add_TeammateServiceServicer_to_server(teammates, server)
    pb_grpc.add_BoardServiceServicer_to_server(BoardServicer(board, hub, lanes, loop_lag), server)
    health = health_aio.HealthServicer()
    health_pb2_grpc.add_HealthServicer_to_server(health, server)
    reflection.enable_server_reflection((*SERVICE_NAMES, reflection.SERVICE_NAME, "grpc.health.v1.Health"), server)
    # Notices live in the claim history too: after any gap in what this daemon heard of
    # the others (the listener says when), each open stream's claims are checked there.
    reconciler = Reconciler(board, hub) if board.driver.shared else None
    listener = _listen_to_other_daemons(board, hub, health, clock, loop, reconciler) if reconciler is not None else None
    board.listener = listener
    return Parts(board, hub, reaper, lanes, loop_lag, metrics, teammates, lead, health, server, listener, reconciler)


def _listen_to_other_daemons(
    board: Board,
    hub: WakeHub,
    health: health_aio.HealthServicer,
    clock: Clock,
    loop: asyncio.AbstractEventLoop,
    reconciler: Reconciler,
) -> WakeListener:
    """A PostgreSQL board's other daemons commit too: their wake-ups reach this daemon's hub
    as its own commits' do. Health says NOT_SERVING while they cannot be heard, or while
    this daemon cannot write the board (its connection lost or cut, the server away), and
    SERVING again once both are back."""
    from .store.postgres.listener import WakeListener  # noqa: PLC0415 (the SQLite path loads nothing of psycopg)
    from .store.postgres.store import PgBoard  # noqa: PLC0415

    pg = board.driver
    assert isinstance(pg, PgBoard)
    storage = pg.storage
    hearing = [False]  # the listener reports itself up once it listens

    def deliver(wakes: Wakes) -> None:
        for name in wakes.streams_opened:
            hub.superseded_elsewhere(name)
        if wakes.ended or wakes.credentials:  # a teammate or viewer removed there
            board.reload_credentials()
        hub.apply(wakes)

    def tell() -> None:
        up = hearing[0] and storage.writable
        status = health_pb2.HealthCheckResponse.SERVING if up else health_pb2.HealthCheckResponse.NOT_SERVING
        if not hub.closing:
            for service in ("", *SERVICE_NAMES):
                loop.create_task(health.set(service, status))

    def on_state(up: bool) -> None:
        hearing[0] = up
        tell()

    def on_writable(writable: bool) -> None:  # on a writer thread, or the watchdog's
        loop.call_soon_threadsafe(tell)

    storage.on_writable = on_writable
    return WakeListener(pg.target, pg.daemon_id, deliver, clock.now_ms, on_state, on_gap=reconciler.after_gap)


class Daemon:
    """One corrald: state dir, board, server; `run` returns the exit code."""

    def __init__(self, config: ServeConfig, *, clock: Clock | None = None) -> None:
        self.config = config
        self._clock_given = clock is not None
        self.clock = clock or SystemClock(wall=_host_wall_clock())
        self.state = StateDir(config.state_dir)
        self._heartbeat: asyncio.Task | None = None
        self.address: str | None = None
        self.metrics_address: str | None = None
        self.web: WebBoard | None = None
        self._draining = False
        self._stop = asyncio.Event()

    def request_stop(self) -> None:
        self._stop.set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self.state.acquire()
        database: pathlib.Path | PgBoard = self.state.paths.database
        lead_token = None
        if self.config.store is None:
            self.state.refuse_unbound_start()
            lead_token = self.state.lead_token()
        else:
            database = await loop.run_in_executor(None, self._open_postgres, self.config.store)
        parts = self.parts = assemble(
            self.config,
            database=database,
            lead_token=lead_token,
            clock=self.clock,
            loop=loop,
            draining=lambda: self._draining,
            open_files_limit=raise_open_files_limit(),
        )
        await loop.run_in_executor(None, parts.board.open)
        if parts.listener is not None:
            parts.listener.start()
        if parts.reconciler is not None:
            parts.reconciler.start()
            self._heartbeat = loop.create_task(self._beat(parts.board), name="corral-heartbeat")
        self.state.secure_files()
        if parts.metrics is not None and self.config.metrics is not None:
            self.metrics_address = parts.metrics.serve(self.config.metrics)
        self.address = bind(
            parts.server, self.config.listen, self.config.tls_cert, self.config.tls_key, self.state.paths.socket
        )
        await parts.server.start()
        if self.config.web is not None:
            # The board's HTTP site, on this same loop beside the gRPC server. Imported
            # here: aiohttp costs a daemon without --web about 150 ms of every start.
            from .web.app import WebBoard  # noqa: PLC0415

            self.web = WebBoard(
                self.config.web,
                parts.board,
                parts.hub,
                parts.lead,
                sessions_file=self.state.paths.web_sessions,
                state_dir=self.state.paths.root,
            )
            self.state.write_web_address(await self.web.start())
        for service in ("", *SERVICE_NAMES):
            await parts.health.set(service, health_pb2.HealthCheckResponse.SERVING)
        parts.reaper.schedule(self.clock.now_ms())  # leases extended at recovery still need a timer
        parts.loop_lag.start()

    async def stop(self) -> None:
        """Ordered: stop accepting, end streams, settle the writer, let the server go, checkpoint, close.

        Every write gets its true answer before the server goes: the writer takes
        no more jobs (those still queued are refused, never applied) and the
        batch it is running commits, all within the server's grace, which is for
        sending those answers; calls still running at its end are cancelled.

        The server's stop begins first, with no deadline yet, so every connection
        has its GOAWAY before its streams end: a teammate whose Idle stream ends
        reconnects on a new connection (to the next daemon), never with a new
        call on this one, where that call can race the GOAWAY and the close and
        wait on a connection nobody answers. The grace is set once the writer
        has settled (a second `stop` with a shorter grace wins)."""
        parts = self.parts
        self._draining = True
        await parts.health.enter_graceful_shutdown()
        goaway = asyncio.create_task(parts.server.stop(_UNTIL_THE_WRITER_SETTLES_S))
        await asyncio.sleep(0)  # the task runs to its first await: gRPC core has begun the shutdown
        parts.hub.close("corrald is shutting down")
        if self.web is not None:
            await self.web.stop()
            self.state.forget_web_address()
        loop = asyncio.get_running_loop()
        if self._heartbeat is not None:
            self._heartbeat.cancel()
            await asyncio.gather(self._heartbeat, return_exceptions=True)
        if parts.listener is not None:
            await parts.listener.close()
        if parts.reconciler is not None:
            await parts.reconciler.close()
        await loop.run_in_executor(None, parts.board.writer.settle)
        await parts.server.stop(self.config.stop_grace_s)
        await goaway
        await parts.teammates.drain()
        await parts.reaper.close()
        await parts.loop_lag.close()
        if parts.metrics is not None:
            parts.metrics.close()
        await loop.run_in_executor(None, parts.board.close)
        if self.address and self.address.startswith("unix:"):
            pathlib.Path(self.address.removeprefix("unix:")).unlink(missing_ok=True)
        self.state.release()

    def _open_postgres(self, target: PgTarget) -> PgBoard:
        """Connects to the board (waiting for the server up to --pg-connect-timeout), migrates it,
        and binds this state directory to it; the daemon's clock becomes the database's."""
        import psycopg  # noqa: PLC0415 (only a PostgreSQL board loads psycopg)

        from .store.postgres.schema import SchemaError  # noqa: PLC0415
        from .store.postgres.storage import BENCH_SWITCHES_ENV, bench_switches_off, describe  # noqa: PLC0415
        from .store.postgres.store import open_board  # noqa: PLC0415

        switched_off = bench_switches_off()
        if "group" in switched_off:
            # One job per transaction: how the writer would run without the board lock's serial
            # order (row locks held across a group commit deadlock between daemons: docs/postgres.md).
            self.config = dataclasses.replace(self.config, writer=dataclasses.replace(self.config.writer, max_batch=1))
        if "lock" in switched_off and self.config.writer.writers > 1 and "group" not in switched_off:
            # Without the board lock, writer threads would write the board at once.
            raise ConfigError(f"{BENCH_SWITCHES_ENV}=lock needs --pg-writers 1 (or group off as well)")
        try:
            pg = open_board(
                target,
                token_hash,
                database_clock=not self._clock_given,
                expected_board_id=self.state.board_id(),
                state_dir=str(self.state.paths.root),
            )
        except SchemaError as error:
            raise ConfigError(str(error)) from None
        except psycopg.Error as error:
            raise ConfigError(f"cannot open the PostgreSQL board ({target.shown()}): {describe(error)}") from None
        self.state.bind_board(pg.identity.board_id)
        self.state.record_store(target.shown())
        if pg.identity.new_lead_token is not None:
            self.state.write_lead_token(pg.identity.new_lead_token)
        elif not self.state.paths.lead_token.exists():
            # The board keeps only the hash of its lead token: the plain one is where the
            # daemon that created the board wrote it.
            creator, where = pg.identity.creator, "the lead.token in that daemon's state directory"
            if creator.state_dir:  # recorded (boards since schema 4): `corral --state-dir` here names it
                self.state.record_board_creator(creator.host, creator.state_dir)
                where = f"{creator.host}:{os.path.join(creator.state_dir, 'lead.token')}"
            log.info(
                "joined PostgreSQL board %s, which another daemon created: its lead token is %s"
                " (copy it into %s to use --state-dir here)",
                pg.identity.board_id,
                where,
                self.state.paths.root,
            )
        if pg.clock is not None:
            self.clock = pg.clock
        log.info("serving PostgreSQL board %s (%s) as daemon %s", pg.identity.board_id, target.shown(), pg.daemon_id)
        return pg

    async def _beat(self, board: Board) -> None:
        """Keeps this daemon's row in the board's `daemons` table fresh."""
        from .store.postgres.store import HEARTBEAT_MS, heartbeat  # noqa: PLC0415

        daemon_id = board.driver.daemon_id
        while True:
            await asyncio.sleep(HEARTBEAT_MS / 1000)
            try:
                await board.writer.run(lambda tx: heartbeat(tx, daemon_id))
            except CorralError as error:  # the database is away: the next beat tries again
                log.warning("heartbeat not recorded: %s", error)

    async def run(self) -> int:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(signum, self.request_stop)
        await self.start()
        _quiet_the_collector()
        ready = {"event": "ready", "address": self.address, "pid": os.getpid(), "state_dir": str(self.state.paths.root)}
        if self.web is not None and self.web.url:
            ready["web"] = self.web.url
        if self.metrics_address:
            ready["metrics"] = self.metrics_address  # as bound: `--metrics 127.0.0.1:0` names its port
        sys.stdout.write(json.dumps(ready) + "\n")
        sys.stdout.flush()
        log.info("serving on %s", self.address)
        await self._stop.wait()
        log.info("stopping")
        await self.stop()
        return 0


def _quiet_the_collector() -> None:
    """Makes the cyclic collector's full passes shorter and rarer; each one
    stalls every call for as long as it runs.

    Shorter: everything alive after start-up (modules, gRPC, protobuf
    descriptors) is frozen out of its reach; full passes during a flood took
    25-35 ms walking it, and 10-15 ms since. Rarer: a full pass waits for 30
    passes over the middle generation instead of 10, so under load it comes
    every few seconds instead of every second or two. In the reliability suite's flood this took
    the ten others' p99 from 18.6-35.2 ms to 17.5-24.2 ms (four runs each),
    with no measurable change in memory growth under overload."""
    gc.collect()
    gc.freeze()
    young_passes_per_full_pass = 30
    allocations, passes_per_middle_pass, _ = gc.get_threshold()
    gc.set_threshold(allocations, passes_per_middle_pass, young_passes_per_full_pass)


# Test-only: shifts this daemon's reading of the host's wall clock (a host whose clock is
# wrong). A SQLite board's time follows it; a PostgreSQL board's is the database's.
LOCAL_CLOCK_OFFSET_ENV = "CORRAL_TEST_LOCAL_CLOCK_OFFSET_MS"


def _host_wall_clock() -> Callable[[], int]:
    offset_ns = int(os.environ.get(LOCAL_CLOCK_OFFSET_ENV, "0") or 0) * 1_000_000
    return time.time_ns if not offset_ns else lambda: time.time_ns() + offset_ns


def serve(config: ServeConfig) -> int:
    failpoints.load_from_env()
    # The writer thread releases the GIL around every SQLite call and must win
    # it back from the event loop; at the default 5 ms switch interval each
    # hand-back can stall a whole group commit. 1 ms measured ~20% more cycles/s.
    sys.setswitchinterval(0.001)
    # Before the first big request: what one leaves is given back (overload/heap.py).
    heap.fix_thresholds()
    os.umask(0o077)  # every file and socket we create is private
    return asyncio.run(Daemon(config).run())
