"""The PostgreSQL server section 8 measures against: finding it, the bench's own database on it (`Store`),
and daemons serving boards in that database.

A database corral_bench_<random> is created on the server at the start (the
server: CORRAL_BENCH_PG_DSN, default postgresql://postgres@127.0.0.1:5432/postgres)
and dropped WITH (FORCE) at the end; every configuration has a schema of its
own in it. Without a server that answers, the section is recorded as
unavailable.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import time
import urllib.parse
from typing import TYPE_CHECKING

from .daemon import Daemon, cpu_seconds
from .stats import latency_fields

if TYPE_CHECKING:
    import psycopg

SERVER_ENV = "CORRAL_BENCH_PG_DSN"
LOCAL_SERVER = "postgresql://postgres@127.0.0.1:5432/postgres"
SWITCHES_ENV = "CORRAL_BENCH_PG_OFF"  # corrald.store.postgres.storage.BENCH_SWITCHES_ENV: read by the daemon alone


def shared(nproc: int | None = None) -> str:
    """The note every figure of this section carries."""
    return f"PostgreSQL shares the {nproc or os.cpu_count()} cores with the daemons and the clients"


# ---------------------------------------------------------------- the server and the bench's database


def _is_local(dsn: str) -> bool:
    """Whether the server runs on this machine (then its backends' CPU can be read from /proc)."""
    from psycopg import conninfo  # noqa: PLC0415

    host = str(conninfo.conninfo_to_dict(dsn).get("host") or "")
    return host in ("", "localhost", "127.0.0.1", "::1") or host.startswith("/")


class Store:
    """A database of the bench's own on the PostgreSQL server: created on enter, dropped WITH (FORCE) on exit."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.name = f"corral_bench_{secrets.token_hex(6)}"
        self.dsn = urllib.parse.urlsplit(server)._replace(path=f"/{self.name}").geturl()
        self.local = _is_local(server)
        self._conn: psycopg.Connection | None = None

    def __enter__(self) -> Store:
        import psycopg  # noqa: PLC0415 (only this section needs it)

        with psycopg.connect(self.server, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f"CREATE DATABASE {self.name}")
        try:
            self._conn = psycopg.connect(self.dsn, autocommit=True, connect_timeout=10)
        except BaseException:
            self._drop()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._conn is not None:
            self._conn.close()
        self._drop()

    def _drop(self) -> None:
        import psycopg  # noqa: PLC0415

        with psycopg.connect(self.server, autocommit=True, connect_timeout=10) as admin:
            admin.execute(f"DROP DATABASE IF EXISTS {self.name} WITH (FORCE)")

    def args(self, schema: str) -> tuple[str, ...]:
        return ("--store", self.dsn, "--pg-schema", schema)

    def settings(self) -> dict:
        assert self._conn is not None
        names = ("server_version", "fsync", "synchronous_commit", "shared_buffers", "max_connections")
        return {name: (self._conn.execute(f"SHOW {name}").fetchone() or ("?",))[0] for name in names}

    def commit_floor(self, samples: int) -> dict:
        """A bare commit from Python: a one-row INSERT in a transaction of its own (autocommit), timed
        round trip; what any write of the board pays at least (WAL flush included)."""
        assert self._conn is not None
        self._conn.execute("CREATE TABLE bench_commit_floor (id bigserial PRIMARY KEY, at double precision)")
        took = []
        for _ in range(samples):
            started = time.perf_counter()
            self._conn.execute("INSERT INTO bench_commit_floor (at) VALUES (%s)", (started,))
            took.append(time.perf_counter() - started)
        return latency_fields(took)

    def setting(self, name: str) -> str:
        assert self._conn is not None
        return str((self._conn.execute(f"SHOW {name}").fetchone() or ("?",))[0])

    def task_rows(self, schema: str) -> dict:
        """The board's tasks table as the server's statistics last counted it: a backend reports its
        counts at most once a second (and an idle one within 10 s), so the last moment's may be missing."""
        assert self._conn is not None
        row = self._conn.execute(
            "SELECT n_dead_tup, n_live_tup FROM pg_stat_user_tables WHERE schemaname = %s AND relname = 'tasks'",
            (schema,),
        ).fetchone()
        return {"n_dead_tup": row[0] if row else None, "n_live_tup": row[1] if row else None}

    def vacuum(self, schema: str) -> None:
        from psycopg import sql  # noqa: PLC0415

        assert self._conn is not None
        self._conn.execute(sql.SQL("VACUUM {}.tasks").format(sql.Identifier(schema)))

    def backend_cpu(self) -> dict[int, float] | None:
        """CPU seconds so far of each backend serving this database (not this connection's); None
        when the server is not on this machine."""
        if not self.local or self._conn is None:
            return None
        rows = self._conn.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        ).fetchall()
        return {pid: cpu_seconds(pid) for (pid,) in rows}


def cpu_spent(before: dict[int, float] | None, after: dict[int, float] | None) -> float | None:
    """CPU seconds the backends used in between (those that ended in between are not counted)."""
    if before is None or after is None:
        return None
    return sum(now - before.get(pid, 0.0) for pid, now in after.items())


def find_server() -> tuple[str | None, str]:
    """The server's DSN, or None and why not."""
    try:
        import psycopg  # noqa: PLC0415
    except ImportError:
        return None, "psycopg is not installed (pip install -e '.[postgres]')"
    server = os.environ.get(SERVER_ENV, LOCAL_SERVER)
    try:
        with psycopg.connect(server, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as error:
        detail = " ".join(str(error).split())[:120]
        return None, f"no PostgreSQL server answers at {SERVER_ENV} or {LOCAL_SERVER} ({detail})"
    return server, ""


def pg_daemon(
    store: Store, schema: str, lead_token: str | None = None, off: str = "", extra: tuple[str, ...] = ()
) -> Daemon:
    """A daemon on the board in `schema` (not started); `off`: what CORRAL_BENCH_PG_OFF switches off in it
    alone ("" for nothing, whatever the bench's own environment says); `extra`: more arguments."""
    return Daemon(extra_args=(*store.args(schema), *extra), lead_token=lead_token, env={SWITCHES_ENV: off})


@contextlib.contextmanager
def daemons_for(store: Store, config: str, schema: str, off: str = "", extra: tuple[str, ...] = ()):
    """The config's daemons, started (the first creates the board), stopped on exit."""
    with contextlib.ExitStack() as stack:
        if config == "sqlite":
            yield [stack.enter_context(Daemon())]
            return
        first = stack.enter_context(pg_daemon(store, schema, off=off, extra=extra))
        daemons = [first]
        if config == "pg2":
            daemons.append(stack.enter_context(pg_daemon(store, schema, first.token, off, extra)))
        yield daemons
