"""The Python SDK's own cost, through its public API only (so it runs against any checkout).

    python -m bench.sdk latency [--cycles 600]    one sync teammate: claim -> complete
    python -m bench.sdk team [--teammates 32]     sync run_teammate threads: cycles/s

`latency` prints the sync `Claim.complete()` call and the whole cycle (claim
received -> completed -> next claim received) over `--cycles` tasks, and the
sync unary `get_stats()` call. `team` runs `--teammates` sync `run_teammate`
loops as threads of this process and times `--tasks` tasks from their
creation until `wait_until_done` returns. Each prints one JSON line, with
the path of the `corral` package measured.
"""

from __future__ import annotations

import argparse
import json
import threading
import time

import corral

from .stats import percentile

WARMUP = 50


def _ms(samples: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(1000 * percentile(samples, 0.50), 3),
        "p99_ms": round(1000 * percentile(samples, 0.99), 3),
    }


def latency(cycles: int) -> dict:
    with corral.Lead.launch() as lead:
        new = lead.add_teammate("solo")
        specs = [corral.TaskSpec(f"t{i:05d}") for i in range(WARMUP + cycles)]
        for start in range(0, len(specs), 500):
            lead.create_tasks(specs[start : start + 500])
        completes: list[float] = []
        whole: list[float] = []
        with corral.Teammate.connect(lead.address, new.token) as teammate:
            arrived = None
            for event in teammate.idle(max_idle_polls=1_000, poll_interval=5.0):
                if not isinstance(event, corral.Claim):
                    continue
                now = time.perf_counter()
                if arrived is not None:
                    whole.append(now - arrived)
                arrived = now
                event.complete()
                completes.append(time.perf_counter() - now)
                if len(completes) == WARMUP + cycles:
                    break
            unary = []
            for _ in range(WARMUP + cycles):
                started = time.perf_counter()
                teammate.get_stats()
                unary.append(time.perf_counter() - started)
    return {
        "complete": _ms(completes[WARMUP:]),
        "cycle": _ms(whole[WARMUP:]),
        "get_stats": _ms(unary[WARMUP:]),
        "cycles": cycles,
    }


def team(teammates: int, tasks: int) -> dict:
    with corral.Lead.launch() as lead:
        members = [lead.add_teammate(f"mate{i:02d}") for i in range(teammates)]
        summaries: list[corral.RunSummary] = []

        def work(token: str) -> None:
            summary = corral.run_teammate(
                lambda task: b"",
                address=lead.address,
                token=token,
                max_idle_polls=1_000,
                poll_interval=5.0,
            )
            summaries.append(summary)

        threads = [threading.Thread(target=work, args=(m.token,)) for m in members]
        for thread in threads:
            thread.start()
        # Every teammate's Idle stream is open before the clock starts.
        deadline = time.monotonic() + 60
        while (
            sum(t.status is corral.TeammateStatus.IDLE for t in lead.list_teammates())
            < teammates
        ):
            if time.monotonic() > deadline:
                raise TimeoutError("teammates did not all connect")
            threading.Event().wait(0.05)
        specs = [corral.TaskSpec(f"t{i:05d}") for i in range(tasks)]
        started = time.perf_counter()
        for start in range(0, len(specs), 500):
            lead.create_tasks(specs[start : start + 500])
        lead.wait_until_done(timeout=600)
        elapsed = time.perf_counter() - started
        for member in members:
            lead.request_shutdown(member.name)
        for thread in threads:
            thread.join(60)
    completed = sum(s.completed for s in summaries)
    return {
        "cycles_per_s": round(tasks / elapsed, 1),
        "completed": completed,
        "tasks": tasks,
        "teammates": teammates,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("latency", "team"))
    parser.add_argument("--cycles", type=int, default=600)
    parser.add_argument("--teammates", type=int, default=32)
    parser.add_argument("--tasks", type=int, default=3_000)
    parser.add_argument("--label", default="")
    args = parser.parse_args()
    result = (
        latency(args.cycles)
        if args.mode == "latency"
        else team(args.teammates, args.tasks)
    )
    print(
        json.dumps(
            {"mode": args.mode, "label": args.label, "sdk": corral.__file__, **result}
        )
    )


if __name__ == "__main__":
    main()
