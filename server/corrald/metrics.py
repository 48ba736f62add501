"""Prometheus metrics (`corrald serve --metrics HOST:PORT`).

Counters for operations come from each committed job's tally, so a number is
only ever counted after COMMIT; gauges are read at scrape time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from wsgiref.simple_server import WSGIServer

from .board import Board
from .model import TaskState, TeammateStatus
from .overload.lanes import CallLanes
from .overload.queue_bound import LEVELS
from .txn import Wakes
from .wake import WakeHub

OPERATIONS = (
    "claims",
    "handoffs",
    "completions",
    "failures",
    "releases",
    "lease_expirations",
    "cancellations",
    "revocations",
    "attempt_timeouts",
)


class _BoardCollector(Collector):
    def __init__(self, board: Board, hub: WakeHub, lanes: CallLanes) -> None:
        self._board = board
        self._hub = hub
        self._lanes = lanes

    def collect(self):
        stats = self._board.stats_blocking()  # this runs on the metrics endpoint's thread
        writer = stats.writer
        yield GaugeMetricFamily("corral_writer_queue_depth", "Jobs waiting for the writer.", value=writer.queue_depth)
        level = GaugeMetricFamily("corral_writer_queue_level", "1 for the current queue level.", labels=["level"])
        for name in LEVELS:
            level.add_metric([name], 1.0 if name == writer.level else 0.0)
        yield level
        yield CounterMetricFamily(
            "corral_writer_busy_retries", "SQLITE_BUSY retries of a whole transaction.", value=writer.busy_retries
        )
        yield CounterMetricFamily(
            "corral_writer_failed_commits", "Batches whose COMMIT failed.", value=writer.failed_commits
        )
        yield CounterMetricFamily(
            "corral_writer_refused_jobs", "Jobs refused because the queue was full.", value=writer.refused_jobs
        )
        yield GaugeMetricFamily("corral_idle_streams_open", "Open Idle streams.", value=self._hub.open_streams)
        yield CounterMetricFamily(
            "corral_output_follower_wakeups",
            "TailOutput followers woken by a commit that grew or ended their claim's output.",
            value=self._hub.output_wakeups,
        )
        yield CounterMetricFamily(
            "corral_refused_calls", "Calls refused by per-identity limits.", value=self._lanes.refused
        )
        yield GaugeMetricFamily(
            "corral_calls_waiting", "Calls waiting for a place in their caller's lane.", value=self._lanes.waiting
        )
        # The board's usage sums live in the database, so these counters survive a restart.
        spent = stats.usage
        yield CounterMetricFamily(
            "corral_usage_input_tokens", "Input tokens teammates reported spending.", value=spent.input_tokens
        )
        yield CounterMetricFamily(
            "corral_usage_output_tokens", "Output tokens teammates reported spending.", value=spent.output_tokens
        )
        yield CounterMetricFamily(
            "corral_usage_cost_micros", "Cost teammates reported spending, in micros.", value=spent.cost_micros
        )
        family = GaugeMetricFamily("corral_tasks", "Tasks on the board by state.", labels=["state"])
        for state in TaskState:
            family.add_metric([state.name.lower()], stats.tasks_by_state.get(state, 0))
        yield family
        family = GaugeMetricFamily("corral_teammates", "Teammates by status.", labels=["status"])
        for status in TeammateStatus:
            family.add_metric([status.name.lower()], stats.teammates_by_status.get(status, 0))
        yield family


class Metrics:
    def __init__(self, board: Board, hub: WakeHub, lanes: CallLanes) -> None:
        self.registry = CollectorRegistry()
        self._http: WSGIServer | None = None
        self._commit_seconds = Histogram(
            "corral_writer_commit_seconds",
            "Time from BEGIN to COMMIT of one group commit.",
            buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 1.0),
            registry=self.registry,
        )
        self._batch_jobs = Histogram(
            "corral_writer_jobs_per_commit",
            "Jobs in one group commit.",
            buckets=(1, 2, 4, 8, 16, 32, 64),
            registry=self.registry,
        )
        self._operations = Counter(
            "corral_operations", "Committed board operations.", ["operation"], registry=self.registry
        )
        for name in OPERATIONS:
            self._operations.labels(name)
        self.registry.register(_BoardCollector(board, hub, lanes))

    def observe_commit(self, seconds: float, jobs: int) -> None:
        """The writer's `on_batch`: one group commit took `seconds` for `jobs` jobs."""
        self._commit_seconds.observe(seconds)
        self._batch_jobs.observe(jobs)

    def observe_wakes(self, wakes: Wakes) -> None:
        """Counts a commit's operations (on the writer thread, after COMMIT)."""
        for name, count in wakes.tally.items():
            self._operations.labels(name).inc(count)

    def serve(self, address: str) -> str:
        """Starts the endpoint; returns the address it listens on (port 0 picks a free one).

        The board must be open: scrapes read it.
        """
        host, _, port = address.rpartition(":")
        host = host.removeprefix("[").removesuffix("]") or "127.0.0.1"
        self._http, _ = start_http_server(int(port), addr=host, registry=self.registry)
        bound_host, bound_port = str(self._http.server_address[0]), self._http.server_address[1]
        return f"[{bound_host}]:{bound_port}" if ":" in bound_host else f"{bound_host}:{bound_port}"

    def close(self) -> None:
        """Stops the endpoint, if it was started."""
        if self._http is not None:
            self._http.shutdown()
            self._http.server_close()
            self._http = None
