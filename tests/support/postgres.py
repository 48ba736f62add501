"""A PostgreSQL server for the tests, a database of their own on it, and a schema per test.

Where the server comes from, first that works:
1. `CORRAL_TEST_PG_DSN`, as given;
2. 127.0.0.1:5432 as user postgres, if it answers;
3. a throwaway cluster in a temporary directory, from the machine's PostgreSQL
   binaries (Debian's /usr/lib/postgresql/*/bin), listening on a Unix socket
   only, run as user `postgres` when the tests run as root (initdb refuses
   root), and stopped and deleted at the end;
4. else the run fails, naming what to install. Never a silent skip.

Each test process makes one database `corral_test_<random>` and drops it at the
end; each test takes a schema of its own in it (`fresh_schema`), or a board's
schema migrated already and emptied after the test before it (`board_schema`).

`ThrowawayServer` is the cluster of 3., for a test that must stop and start its
server: such a test starts one of its own and never touches the shared one.
"""

from __future__ import annotations

import atexit
import contextlib
import dataclasses
import glob
import graphlib
import os
import pathlib
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator

import psycopg

LOCAL_DSN = "postgresql://postgres@127.0.0.1:5432/postgres"
_INSTALL_HINT = (
    "the PostgreSQL tests need a server: set CORRAL_TEST_PG_DSN, run one on 127.0.0.1:5432 (user postgres),"
    " or install PostgreSQL's server binaries (Debian: apt-get install postgresql) for a throwaway one"
)


class NoPostgres(RuntimeError):
    pass


def _answers(dsn: str) -> bool:
    try:
        with psycopg.connect(dsn, connect_timeout=3, autocommit=True) as conn:
            conn.execute("SELECT 1")
        return True
    except psycopg.Error:
        return False


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _binaries() -> pathlib.Path:
    """The directory of the newest PostgreSQL server binaries on the machine."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb") or ""]
    if not found[-1] or not os.path.exists(found[-1]):
        raise NoPostgres(_INSTALL_HINT)
    return pathlib.Path(found[-1]).parent


class ThrowawayServer:
    """A cluster of our own in a temporary directory, on a Unix socket only (no TCP),
    with fsync off; run as user `postgres` when the tests run as root (initdb refuses
    root). `start` makes it on first use; `stop` and `start` again take it down and
    bring it back on the same socket with the same data (a server restart, for the
    tests of what the daemons do meanwhile); `close` stops it and deletes it, as
    happens at exit to one never closed."""

    def __init__(self) -> None:
        self._bin = _binaries()
        self._root = pathlib.Path(tempfile.mkdtemp(prefix="corral-pg-"))
        self._data = self._root / "data"
        self._port = _free_port()
        self._as_user: list[str] = []
        if os.geteuid() == 0:
            owner = pwd.getpwnam("postgres")
            os.chown(self._root, owner.pw_uid, owner.pw_gid)
            self._as_user = ["runuser", "-u", "postgres", "--"]
        self._closed = False
        atexit.register(self.close)

    @property
    def dsn(self) -> str:
        return f"postgresql://postgres@/postgres?host={self._root}&port={self._port}"

    def start(self) -> ThrowawayServer:
        """Starts the server (made on the first start); returns once it takes connections."""
        if not self._data.exists():
            self._run("initdb", "-D", str(self._data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-c listen_addresses='' -k {self._root} -p {self._port} -c fsync=off"
        self._run("pg_ctl", "-D", str(self._data), "-o", options, "-w", "-l", str(self._root / "log"), "start")
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stops the server (`pg_ctl stop -m mode`: fast ends every session, immediate
        also skips the shutdown checkpoint); returns once it is down."""
        self._run("pg_ctl", "-D", str(self._data), "-m", mode, "-w", "stop")

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if (self._data / "postmaster.pid").exists():
            with contextlib.suppress(Exception):
                self.stop("immediate")
        shutil.rmtree(self._root, ignore_errors=True)

    def _run(self, program: str, *args: str) -> None:
        command = [*self._as_user, str(self._bin / program), *args]
        subprocess.run(command, check=True, capture_output=True, timeout=120)


_server: str | None = None


def server_dsn() -> str:
    """A DSN of a server the tests may create databases on (see the module docstring)."""
    global _server
    if _server is None:
        given = os.environ.get("CORRAL_TEST_PG_DSN")
        if given:
            if not _answers(given):
                raise NoPostgres(f"CORRAL_TEST_PG_DSN does not answer: {given}")
            _server = given
        elif _answers(LOCAL_DSN):
            _server = LOCAL_DSN
        else:
            _server = ThrowawayServer().start().dsn
    return _server


def _with_database(dsn: str, database: str) -> str:
    params = psycopg.conninfo.conninfo_to_dict(dsn)
    params["dbname"] = database
    return psycopg.conninfo.make_conninfo(**params)


def _as_url(conninfo: str) -> str:
    """A postgresql:// URL for a conninfo string (corrald's --store takes URLs)."""
    params = psycopg.conninfo.conninfo_to_dict(conninfo)
    host = params.pop("host", "")
    user = params.pop("user", "")
    password = params.pop("password", None)
    database = params.pop("dbname", "")
    port = params.pop("port", None)
    auth = user + (f":{password}" if password else "")
    query = "&".join(f"{key}={value}" for key, value in sorted(params.items()))
    if host.startswith("/"):
        query = "&".join(filter(None, [f"host={host}", f"port={port}" if port else "", query]))
        return f"postgresql://{auth}@/{database}" + (f"?{query}" if query else "")
    where = host + (f":{port}" if port else "")
    return f"postgresql://{auth}@{where}/{database}" + (f"?{query}" if query else "")


_database: str | None = None


def new_database(server: str) -> str:
    """A database `corral_test_<random>` made on `server` (dropped at exit), as a URL."""
    name = f"corral_test_{secrets.token_hex(6)}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {name}")

    def drop() -> None:
        with contextlib.suppress(psycopg.Error), psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

    atexit.register(drop)
    return _as_url(_with_database(server, name))


def run_database_dsn() -> str:
    """This test process's own database (created on first use, dropped at exit), as a URL."""
    global _database
    if _database is None:
        _database = new_database(server_dsn())
    return _database


def fresh_schema() -> str:
    """A schema name no test has used."""
    return f"t_{secrets.token_hex(6)}"


@contextlib.contextmanager
def scratch_schema(*tables: str):
    """A fresh schema in this process's database holding `tables` (CREATE TABLE bodies,
    `name (columns…)`); its name, and the schema dropped afterwards."""
    name = fresh_schema()
    with psycopg.connect(run_database_dsn(), autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {name}")
        for table in tables:
            conn.execute(f"CREATE TABLE {name}.{table}")
    try:
        yield name
    finally:
        with psycopg.connect(run_database_dsn(), autocommit=True) as conn:
            conn.execute(f"DROP SCHEMA {name} CASCADE")


# ---------------------------------------------------------------- board schemas, migrated once
#
# Migrating a board's schema is some forty statements of DDL (~40 ms, most of a
# PostgreSQL board test's setup). Each test process migrates a template once, and
# the schemas it hands out are migrated boards emptied after use: every table's rows
# deleted and the template's put back, every sequence set as in the template (a few
# ms). A schema is emptied only when it is safe to reuse: no other connection to the
# process's database is left (one left would write into the next test's board), and
# its catalog is still the template's (a test may add a table or a column). Otherwise
# it is dropped, and the next test gets one migrated afresh.

_FINGERPRINT_SQL = """
SELECT md5(coalesce(string_agg(item, ',' ORDER BY item), '')) FROM (
    SELECT c.relname || ':' || c.relkind::text || ':' || coalesce(a.attname || ' '
        || format_type(a.atttypid, a.atttypmod) || ' ' || a.attnotnull::text || ' ' || a.attcollation::text
        || ' ' || coalesce(replace(pg_get_expr(d.adbin, d.adrelid), %(schema)s || '.', ''), ''), '') AS item
    FROM pg_class c
    LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
    LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
    WHERE c.relnamespace = %(schema)s::regnamespace
    UNION ALL SELECT 'constraint:' || conname || replace(pg_get_constraintdef(oid), %(schema)s || '.', '')
    FROM pg_constraint WHERE connamespace = %(schema)s::regnamespace
    UNION ALL SELECT 'trigger:' || t.tgname FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
    WHERE c.relnamespace = %(schema)s::regnamespace AND NOT t.tgisinternal
    UNION ALL SELECT 'function:' || proname FROM pg_proc WHERE pronamespace = %(schema)s::regnamespace
) catalog
"""
_OTHER_BACKENDS_SQL = (
    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid != pg_backend_pid()"
)
REUSE_WAIT_S = 2.0  # how long a released schema waits for the test's connections to go


@dataclasses.dataclass(frozen=True)
class _Template:
    """What a migrated, empty board schema holds, read once from the template."""

    name: str
    fingerprint: str
    tables: tuple[str, ...]  # referencing tables before the tables they reference
    seeded: tuple[str, ...]  # the tables with rows (the template's rows are put back)
    sequences: tuple[tuple[str, int, bool], ...]  # (name, last_value, is_called)


class _SchemaPool:
    def __init__(self) -> None:
        self._conn: psycopg.Connection | None = None
        self._template: _Template | None = None
        self._free: list[str] = []

    def conn(self) -> psycopg.Connection:
        if self._conn is None or self._conn.closed:
            self._conn = psycopg.connect(run_database_dsn(), autocommit=True)
        return self._conn

    def template(self) -> _Template:
        if self._template is None:
            self._template = self._read_template(self._migrated())
        return self._template

    def take(self) -> str:
        self.template()
        return self._free.pop() if self._free else self._migrated()

    def give_back(self, name: str) -> None:
        """Empties `name` for the next test, or drops it when it is not safe to reuse."""
        try:
            self._empty(name)
        except psycopg.Error:  # the server or the connection went away: the next test migrates anew
            with contextlib.suppress(psycopg.Error):
                self.conn().close()
            return

    def _empty(self, name: str) -> None:
        conn = self.conn()
        template = self.template()
        deadline = time.monotonic() + REUSE_WAIT_S
        while (others := conn.execute(_OTHER_BACKENDS_SQL).fetchone()[0]) and time.monotonic() < deadline:
            threading.Event().wait(0.002)  # a closed connection's backend exits in a moment
        if others or conn.execute(_FINGERPRINT_SQL, {"schema": name}).fetchone()[0] != template.fingerprint:
            with contextlib.suppress(psycopg.Error):
                conn.execute(f"SET lock_timeout = '1s'; DROP SCHEMA IF EXISTS {name} CASCADE; RESET lock_timeout")
            return
        statements = [f"DELETE FROM {name}.{table}" for table in template.tables]
        statements += [f"INSERT INTO {name}.{table} SELECT * FROM {template.name}.{table}" for table in template.seeded]
        statements += [f"SELECT setval('{name}.{seq}', {value}, {called})" for seq, value, called in template.sequences]
        with conn.transaction():
            conn.execute("; ".join(statements))
        self._free.append(name)

    def _migrated(self) -> str:
        """A new schema, migrated; emptied of its board row (a board's first daemon makes it)."""
        from tests.support.stores import migrate_postgres

        name = fresh_schema()
        conn = self.conn()
        migrate_postgres(conn, name)
        conn.execute(f"DELETE FROM {name}.board")
        return name

    def _read_template(self, name: str) -> _Template:
        conn = self.conn()
        tables = [row[0] for row in conn.execute("SELECT tablename FROM pg_tables WHERE schemaname = %s", (name,))]
        references = conn.execute(
            "SELECT confrelid::regclass::text, conrelid::regclass::text FROM pg_constraint"
            " WHERE contype = 'f' AND connamespace = %s::regnamespace",
            (name,),
        ).fetchall()
        graph: dict[str, set[str]] = {table: set() for table in tables}
        for referenced, referencing in references:
            graph[referenced.split(".")[-1]].add(referencing.split(".")[-1])
        ordered = tuple(graphlib.TopologicalSorter(graph).static_order())
        seeded = tuple(
            table for table in ordered if conn.execute(f"SELECT EXISTS (SELECT FROM {name}.{table})").fetchone()[0]
        )
        sequences = tuple(
            (seq, *conn.execute(f"SELECT last_value, is_called FROM {name}.{seq}").fetchone())
            for (seq,) in conn.execute("SELECT sequencename FROM pg_sequences WHERE schemaname = %s", (name,))
        )
        fingerprint = conn.execute(_FINGERPRINT_SQL, {"schema": name}).fetchone()[0]
        return _Template(name, fingerprint, ordered, seeded, sequences)


_pool = _SchemaPool()


@contextlib.contextmanager
def board_schema() -> Iterator[str]:
    """A migrated board schema of this process's database, with no board in it yet (the
    first daemon or Board to open it makes one, with the lead token it is given): for one
    test, whose connections to the database must all be closed when the block ends."""
    name = _pool.take()
    try:
        yield name
    finally:
        _pool.give_back(name)


def backends_waiting_for_a_lock(conn: psycopg.Connection) -> int:
    """How many other backends of this database wait for a lock now."""
    (waiting,) = conn.execute(
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
        " AND wait_event_type = 'Lock' AND pid != pg_backend_pid()"
    ).fetchone()
    return waiting


def main() -> int:
    """`make test`'s first look: which server the PostgreSQL tests will use, or why there is none."""
    given = os.environ.get("CORRAL_TEST_PG_DSN")
    if given:
        if not _answers(given):
            print(f"postgres: CORRAL_TEST_PG_DSN does not answer: {given}", file=sys.stderr)
            return 1
        print(f"postgres: {given} (CORRAL_TEST_PG_DSN)")
    elif _answers(LOCAL_DSN):
        print(f"postgres: {LOCAL_DSN}")
    elif sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or shutil.which("initdb"):
        print("postgres: none answers on 127.0.0.1:5432; each test process starts a throwaway server")
    else:
        print(f"postgres: {_INSTALL_HINT}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
