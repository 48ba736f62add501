"""Section 8: the board in PostgreSQL (`corrald serve --store postgresql://… --pg-schema S`).

The PostgreSQL server runs on this same machine: it shares the cores with the
daemons and the client processes, so every figure here has the server's own
work on the same CPUs (`shared()` says so in the results, on every log line and
in every target).

The measures, each in a module of its own:

* bench/pg_cycles.py: Session cycles/s on SQLite, one and two PostgreSQL
  daemons; and with the board lock, NOTIFY or group commit switched off.
* bench/pg_latency.py: ready → claim across daemons; claim latency by board size.
* bench/pg_failures.py: reclaim after SIGKILL of a daemon; the MVCC trap.
* bench/pg_server.py: the server, the bench's database on it, the daemons.

Beside them, the server's commit floor: a one-row INSERT in a transaction of
its own from psycopg, round trip.
"""

from __future__ import annotations

from . import pg_cycles, pg_failures, pg_latency
from .pg_server import Store, find_server, shared


def run(sizes, runs: int, log) -> dict:
    server, why = find_server()
    if server is None:
        log(f"postgres    not measured: {why}")
        return {"unavailable": why, "shared_cores": shared()}
    with Store(server) as store:
        settings = store.settings()
        log(
            f"postgres    PostgreSQL {settings['server_version']} (fsync {settings['fsync']}, synchronous_commit"
            f" {settings['synchronous_commit']}), database {store.name} [{shared()}]"
        )
        floor = store.commit_floor(sizes.pg_latency_samples)
        log(
            f"postgres    commit floor (one-row INSERT, autocommit, psycopg): p50 {floor['p50_ms']:.2f} ms"
            f" p99 {floor['p99_ms']:.2f} ms [{shared()}]"
        )
        out = {
            "shared_cores": shared(),
            "server": settings,
            "commit_floor": floor,
            "server_local": store.local,
            "database": store.name,
            "cycles": pg_cycles.cycles(store, sizes, runs, log),
            "ready_to_claim": pg_latency.ready_to_claim(store, sizes, runs, log),
            "board_size": pg_latency.board_size(store, sizes, runs, log),
            "reclaim": pg_failures.reclaim(store, sizes, log),
            "mvcc": pg_failures.mvcc(store, sizes, log),
            "switches": pg_cycles.switches(store, sizes, runs, log),
        }
    return out
