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
end; each test takes a schema of its own in it (`fresh_schema`).
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import os
import pathlib
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile

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


def _throwaway() -> str:
    """Starts a cluster of our own; returns its DSN. It is stopped and deleted at exit."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb")) or [shutil.which("initdb") or ""]
    initdb = found[-1]
    if not initdb or not os.path.exists(initdb):
        raise NoPostgres(_INSTALL_HINT)
    bin_dir = pathlib.Path(initdb).parent
    root = pathlib.Path(tempfile.mkdtemp(prefix="corral-pg-"))
    data, port = root / "data", _free_port()
    as_user: list[str] = []
    if os.geteuid() == 0:
        owner = pwd.getpwnam("postgres")
        os.chown(root, owner.pw_uid, owner.pw_gid)
        as_user = ["runuser", "-u", "postgres", "--"]
    run = lambda *args: subprocess.run([*as_user, *args], check=True, capture_output=True, timeout=120)  # noqa: E731
    run(str(bin_dir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
    options = f"-c listen_addresses='' -k {root} -p {port} -c fsync=off"
    run(str(bin_dir / "pg_ctl"), "-D", str(data), "-o", options, "-w", "-l", str(root / "log"), "start")

    def stop() -> None:
        with contextlib.suppress(Exception):
            run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)

    atexit.register(stop)
    return f"postgresql://postgres@/postgres?host={root}&port={port}"


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
            _server = _throwaway()
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


def run_database_dsn() -> str:
    """This test process's own database (created on first use, dropped at exit), as a URL."""
    global _database
    if _database is None:
        server = server_dsn()
        name = f"corral_test_{secrets.token_hex(6)}"
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f"CREATE DATABASE {name}")

        def drop() -> None:
            with contextlib.suppress(psycopg.Error), psycopg.connect(server, autocommit=True) as conn:
                conn.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")

        atexit.register(drop)
        _database = _as_url(_with_database(server, name))
    return _database


def fresh_schema() -> str:
    """A schema name no test has used."""
    return f"t_{secrets.token_hex(6)}"


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
