"""Profile the daemon under a benchmark load with py-spy: `python -m bench.profile`.

Starts corrald (or the echo floor), attaches `py-spy record` (or `strace -c`)
to it, runs one end-to-end load (default: 32 teammates, independent DAG), and
prints the hottest functions by self and inclusive samples per thread (or the
system calls per cycle). Needs `pip install py-spy` (or strace) and ptrace
permission on the server (root, or kernel.yama.ptrace_scope=0).

    python -m bench.profile --teammates 32 --tasks 4096 --out /tmp/corrald.txt
    python -m bench.profile --gil --native           # who holds the GIL, with C frames
    python -m bench.profile --tool strace             # system calls per cycle (needs strace)
    python -m bench.profile --server echo --tool strace   # the same for the gRPC echo floor
    python -m bench.profile --transport session       # corrald's Session stream (echo: the bidi floor)
    python -m bench.profile --transport session --store postgres   # a PostgreSQL board (see bench.pg_server)
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import pathlib
import shutil
import signal
import subprocess
import sys
import time

from . import config, dags, e2e, grpc_floor, pg_server, teamworker
from .daemon import Daemon

LOADS = {  # (--server, --transport) -> bench.teamworker load
    ("corral", "idle"): "idle",
    ("corral", "session"): "session",
    ("echo", "idle"): "echo",
    ("echo", "session"): "echo_bidi",
}


def _frames(line: str) -> tuple[list[str], int]:
    stack, _, count = line.rstrip().rpartition(" ")
    return stack.split(";"), int(count)


def _function(frame: str) -> str:
    """'name (path/file.py:123)' -> 'name (path/file.py)': one row per function, not per line."""
    name, _, where = frame.partition(" (")
    return f"{name} ({where.rsplit(':', 1)[0]})" if where else frame


def top(raw: pathlib.Path, limit: int = 25) -> str:
    """Self and inclusive sample counts per function, per thread, from py-spy's raw (collapsed) output."""
    by_thread: dict[str, tuple[collections.Counter, collections.Counter, list[int]]] = {}
    for line in raw.read_text().splitlines():
        if not line.strip():
            continue
        frames, count = _frames(line)
        thread, frames = frames[0], frames[1:]
        self_c, incl_c, total = by_thread.setdefault(thread, (collections.Counter(), collections.Counter(), [0]))
        total[0] += count
        if frames:
            self_c[frames[-1]] += count  # self time keeps the line: it says which statement
        for frame in {_function(f) for f in frames}:
            incl_c[frame] += count
    out = []
    for thread, (self_c, incl_c, total) in sorted(by_thread.items(), key=lambda item: -item[1][2][0]):
        out.append(f"== {thread}: {total[0]} samples")
        out.append("-- self")
        out += [f"{100 * n / total[0]:5.1f}%  {frame}" for frame, n in self_c.most_common(limit)]
        out.append("-- inclusive")
        out += [f"{100 * n / total[0]:5.1f}%  {frame}" for frame, n in incl_c.most_common(limit)]
    return "\n".join(out)


def syscalls(table: pathlib.Path, cycles: int, limit: int = 15) -> str:
    """Calls per cycle from `strace -c` output."""
    rows = []
    for line in table.read_text().splitlines():
        parts = line.split()
        if len(parts) >= 5 and parts[0].replace(".", "", 1).isdigit() and parts[-1] != "total":
            calls = int(parts[3])
            rows.append((calls, parts[-1], float(parts[1])))
    rows.sort(reverse=True)
    total = sum(calls for calls, _, _ in rows)
    out = [f"{total / max(cycles, 1):7.1f}  syscalls per cycle in all"]
    out += [
        f"{calls / max(cycles, 1):7.1f}  {name}  ({seconds:.3f} s in strace's count)"
        for calls, name, seconds in rows[:limit]
    ]
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m bench.profile", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--server",
        choices=("corral", "echo"),
        default="corral",
        help="profile corrald, or the gRPC echo floor under the same load",
    )
    parser.add_argument(
        "--transport",
        choices=("idle", "session"),
        default="idle",
        help="Idle + unary, or the Session stream (for echo: the unary or the bidirectional floor)",
    )
    parser.add_argument(
        "--tool",
        choices=("py-spy", "strace"),
        default="py-spy",
        help="py-spy: hottest functions; strace -c: system calls per cycle",
    )
    parser.add_argument(
        "--store",
        choices=("sqlite", "postgres"),
        default="sqlite",
        help="corrald's store; postgres: a board in a database of its own on the server section 8 uses"
        f" ({pg_server.SERVER_ENV}, else {pg_server.LOCAL_SERVER}), dropped afterwards",
    )
    parser.add_argument("--teammates", type=int, default=32)
    parser.add_argument("--tasks", type=int, default=4096)
    parser.add_argument("--dag", choices=dags.DAGS, default="independent")
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--gil", action="store_true", help="py-spy: only sample threads holding the GIL")
    parser.add_argument("--native", action="store_true", help="py-spy: include native (C/Cython) frames")
    parser.add_argument("--out", type=pathlib.Path, default=pathlib.Path("corrald-profile.txt"))
    args = parser.parse_args(argv)
    if _tool(args.tool) is None:  # before anything starts: a missing tool is found in a second, not a minute
        parser.error(f"{args.tool} not found: {TOOL_INSTALL[args.tool]}")
    raw = args.out.with_suffix(".raw")
    with contextlib.ExitStack() as stack:
        if args.server == "corral":
            server = stack.enter_context(_corrald(stack, args.store))
            members, _ = e2e._setup(server, args.teammates, session=False)  # noqa: SLF001 (same package)
            e2e._create(server, args.dag, args.tasks, prefix="p-")  # noqa: SLF001
        else:
            server = stack.enter_context(grpc_floor.EchoServer())
            members = [(f"m{i}", f"token-{i}") for i in range(args.teammates)]
        recorder = subprocess.Popen(_recorder(args, server.pid, raw), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        time.sleep(1.0)
        load = LOADS[args.server, args.transport]
        tally = teamworker.run_clients(
            load, server.address, members, target=args.tasks, deadline_s=config.FULL.run_deadline_s
        )
        recorder.send_signal(signal.SIGINT)  # both tools write their report and exit
        _, err = recorder.communicate(timeout=60)
    if not raw.exists():
        print(f"{args.tool} wrote nothing: {err.decode(errors='replace')[-2000:]}", file=sys.stderr)
        return 1
    store = f", {args.store}" if args.server == "corral" else ""
    body = top(raw) if args.tool == "py-spy" else syscalls(raw, tally["completed"])
    summary = (
        f"{args.server} ({load}{store}): {args.teammates} teammates, {tally['completed']} cycles ({args.dag}),"
        f" {tally['throughput']:.0f} cycles/s under the profiler\n" + body
    )
    args.out.write_text(summary + "\n")
    print(summary)
    return 0


def _corrald(stack: contextlib.ExitStack, store: str) -> Daemon:
    """The daemon to profile, not started; a PostgreSQL board gets a database of its own."""
    if store == "sqlite":
        return Daemon()
    dsn, why_not = pg_server.find_server()
    if dsn is None:
        raise SystemExit(f"--store postgres: {why_not}")
    return pg_server.pg_daemon(stack.enter_context(pg_server.Store(dsn)), "corral")


TOOL_INSTALL = {
    "py-spy": "pip install py-spy (into this interpreter's environment)",
    "strace": "apt-get install strace",
}


def _tool(name: str) -> str | None:
    """The tool's path: on PATH, else beside this interpreter (a virtualenv's bin/)."""
    beside = pathlib.Path(sys.executable).with_name(name)
    return shutil.which(name) or (str(beside) if beside.exists() else None)


def _recorder(args, pid: int, raw: pathlib.Path) -> list[str]:
    if args.tool == "strace":
        return [str(_tool("strace")), "-c", "-f", "-p", str(pid), "-o", str(raw)]
    return (
        [
            str(_tool("py-spy")),
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(args.rate),
            "--format",
            "raw",
            "--threads",
            "--output",
            str(raw),
        ]
        + (["--gil"] if args.gil else [])
        + (["--native"] if args.native else [])
    )


if __name__ == "__main__":
    sys.exit(main())
