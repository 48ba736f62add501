"""`corral demo --store`: its schema is dropped unless kept, its closing hint serves the
kept board again, and a state directory bound to a PostgreSQL board refuses a SQLite start."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

import corral
from tests.support.postgres import run_database_dsn

pytestmark = pytest.mark.timeout(150)

DAG = (
    '[[tasks]]\nid = "a"\npayload = \'{"weight": 1, "artifact": "a.json"}\'\n[[tasks]]\nid = "b"\ndepends_on = ["a"]\n'
)


@pytest.fixture
def short_dir() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="corral-t-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def demo(short_dir: Path, dsn: str, *args: str) -> tuple[str, str]:
    dag = short_dir / "small.toml"
    dag.write_text(DAG, encoding="utf-8")
    command = [sys.executable, "-m", "corral.cli", "demo", "--store", dsn, "--dir", str(short_dir)]
    result = subprocess.run(
        [*command, "--dag", str(dag), "--work-ms", "1", *args],
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    schema = re.search(r"PostgreSQL board in schema (\w+)", result.stdout)
    assert schema, result.stdout
    # The teammates (split between the two daemons) wrote output, and b read a's artifact
    # from the board in PostgreSQL.
    assert re.search(r"^  output      2 tasks wrote \d+ lines as they worked", result.stdout, re.MULTILINE)
    read = r"^  artifacts   a: a\.json \(\d+ B, sha256 [0-9a-f]{12}…\) read by \w+ \(b\) and the lead: "
    assert re.search(read, result.stdout, re.MULTILINE), result.stdout
    return result.stdout, schema[1]


def schema_exists(dsn: str, schema: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)).fetchone() is not None


def serve(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "corrald", "serve", *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_demo_drops_its_schema_and_its_state_dir_refuses_a_sqlite_start(short_dir):
    dsn = run_database_dsn()
    out, schema = demo(short_dir, dsn)
    assert "(the schema is dropped at the end; --keep-schema keeps it)" in out
    assert not schema_exists(dsn, schema)
    kept = re.search(r"^  kept        (\S+) \(logs/; state/ served a board that was dropped\)$", out, re.MULTILINE)
    assert kept, out
    state = Path(kept[1]) / "state"
    board_id = (state / "board.id").read_text().strip()

    refused = serve("--state-dir", str(state))
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"corrald: state directory {state} serves PostgreSQL board {board_id} (")
    assert f"schema={schema}" in refused.stderr
    assert refused.stderr.rstrip().endswith(
        ", not a SQLite board: start it with --store DSN --pg-schema SCHEMA (that board's)"
    )
    assert not (state / "corral.sqlite3").exists()


def test_a_kept_schema_is_served_again_by_the_closing_hint(short_dir):
    dsn = run_database_dsn()
    out, schema = demo(short_dir, dsn, "--keep-schema")
    assert "(the schema is kept)" in out
    assert schema_exists(dsn, schema)
    hint = re.search(r"^  kept        \S+ \(state/: `corral serve (--state-dir .*)`; logs/\)$", out, re.MULTILINE)
    assert hint, out
    assert hint[1].endswith(f" --store {dsn} --pg-schema {schema}")
    # Served as the hint says, the state directory is the run's board again.
    args = shlex.split(hint[1])
    with corral.Lead.launch(args[1], extra_args=args[2:], ready_timeout=30) as lead:
        tasks = list(lead.list_tasks())
    assert sorted((task.id, task.state) for task in tasks) == [
        ("a", corral.TaskState.COMPLETED),
        ("b", corral.TaskState.COMPLETED),
    ]
