"""How long one stopped daemon holds up a PostgreSQL board's writes, at the default stall
bound (`--pg-stall-timeout`, 5 s; docs/postgres.md, "When a daemon stops").

Two daemons serve a board. B's Lead write holds the board's write lock (a failpoint
pauses its job for 2 s inside the transaction), and then B is cut off in one of two
ways: SIGSTOP, or its connections blackholed by a TCP proxy (no reset: a partition).
The figure is the time from that moment until a Lead write through A is answered: the
issue's target is 10 s, the design's bound the stall bound plus a second. B's own
write is then answered truthfully (stored once, or refused and not stored).

    python -m bench.pg_stall [--rounds N]
"""

from __future__ import annotations

import argparse
import concurrent.futures
import os
import pathlib
import signal
import statistics
import tempfile
import time

import grpc

from tests.contract.wire import spec
from tests.postgres.conftest import SharedBoard
from tests.support import wait_until
from tests.support.tcp_proxy import proxy_in_front_of

HOLD = "job:lead=sleep:2000:1"  # B's first Lead job pauses inside its transaction
KINDS = ("sigstop", "blackhole")


def one_round(kind: str) -> tuple[float, str]:
    """Seconds until a write through A is answered once B is cut off; what B's write became."""
    board = SharedBoard(pathlib.Path(tempfile.mkdtemp(prefix="corral-stall-")))
    try:
        with proxy_in_front_of(board.dsn) as (proxy, via_proxy):
            a = board.daemon("a")
            b = board.daemon("b", failpoints=HOLD, dsn=via_proxy if kind == "blackhole" else None)
            with concurrent.futures.ThreadPoolExecutor(1) as pool:
                held = pool.submit(b.create_tasks, spec("held"), request_id="held")
                wait_until(lambda: "failpoint: sleeping" in b.latest_log(), 10, "B's write holding the lock")
                started = time.monotonic()
                if kind == "sigstop":
                    os.kill(b.pid, signal.SIGSTOP)
                else:
                    proxy.blackhole()
                a.create_tasks(spec("through-a"), request_id="through-a")
                took = time.monotonic() - started
                if kind == "sigstop":
                    os.kill(b.pid, signal.SIGCONT)
                try:
                    held.result(60)
                    answer = "OK"
                except grpc.RpcError as error:
                    answer = error.code().name
            stored = board.sql("SELECT count(*) FROM tasks WHERE id = 'held'")[0][0]
            return took, f"B's write answered {answer}, stored {stored}x"
    finally:
        board.stop_daemons()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    rounds = parser.parse_args().rounds
    for kind in KINDS:
        figures = []
        for number in range(rounds):
            took, what = one_round(kind)
            figures.append(took)
            print(f"{kind} round {number + 1}: a write through A answered after {took:.2f} s; {what}")
        print(
            f"{kind}: min {min(figures):.2f} s, median {statistics.median(figures):.2f} s, max {max(figures):.2f} s"
            f" ({rounds} rounds; target 10 s)"
        )


if __name__ == "__main__":
    main()
