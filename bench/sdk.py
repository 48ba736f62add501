"""The Python SDK's own cost, through its public API (so it measures any checkout).

    python -m bench.sdk latency [--cycles 600]    one sync teammate: claim -> complete
    python -m bench.sdk team [--teammates 32]     sync run_teammate threads: cycles/s
    python -m bench.sdk team --facade             the same on one corral.aio loop
    python -m bench.sdk facade [--cycles 600]     `latency` via a facade over corral.aio

`latency` prints the sync `Claim.complete()` call and the whole cycle (claim
received -> completed -> next claim received) over `--cycles` tasks, and the
sync unary `get_stats()` call. `team` runs `--teammates` sync `run_teammate`
loops as threads of this process and times `--tasks` tasks from their
creation until `wait_until_done` returns. Each prints one JSON line, with
the path of the `corral` package measured. `facade` measures what the
rejected design would cost: each sync call handed to an event loop thread
running `corral.aio`, the caller blocking on the future.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import threading
import time

import corral
import corral.aio

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


def _handler(task: corral.Task) -> bytes:
    return b""


def facade(cycles: int) -> dict:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    def call(coroutine):  # what every sync method of a facade would do
        return asyncio.run_coroutine_threadsafe(coroutine, loop).result()

    try:
        with corral.Lead.launch() as lead:
            new = lead.add_teammate("solo")
            specs = [corral.TaskSpec(f"t{i:05d}") for i in range(WARMUP + cycles)]
            for start in range(0, len(specs), 500):
                lead.create_tasks(specs[start : start + 500])
            teammate = call(corral.aio.Teammate.connect(lead.address, new.token))
            events = teammate.idle(max_idle_polls=1_000, poll_interval=5.0)
            completes: list[float] = []
            whole: list[float] = []
            arrived = None
            while len(completes) < WARMUP + cycles:
                event = call(anext(events))
                if not isinstance(event, corral.aio.Claim):
                    continue
                now = time.perf_counter()
                if arrived is not None:
                    whole.append(now - arrived)
                arrived = now
                call(event.complete())
                completes.append(time.perf_counter() - now)
            call(events.aclose())
            unary = []
            for _ in range(WARMUP + cycles):
                started = time.perf_counter()
                call(teammate.get_stats())
                unary.append(time.perf_counter() - started)
            call(teammate.close())
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
        with contextlib.suppress(RuntimeError):
            loop.close()
    return {
        "complete": _ms(completes[WARMUP:]),
        "cycle": _ms(whole[WARMUP:]),
        "get_stats": _ms(unary[WARMUP:]),
        "cycles": cycles,
    }


def team(teammates: int, tasks: int, *, on_facade: bool = False) -> dict:
    with corral.Lead.launch() as lead:
        members = [lead.add_teammate(f"mate{i:02d}") for i in range(teammates)]
        summaries: list[corral.RunSummary] = []
        options = {
            "address": lead.address,
            "max_idle_polls": 1_000,
            "poll_interval": 5.0,
        }

        def work(token: str) -> None:
            summary = corral.run_teammate(_handler, token=token, **options)
            summaries.append(summary)

        async def on_one_loop(tokens: list[str]) -> None:
            # A facade's run_teammate: the asyncio loop, the plain handler in threads.
            runs = [corral.aio.run_teammate(_handler, token=t, **options) for t in tokens]
            summaries.extend(await asyncio.gather(*runs))

        tokens = [m.token for m in members]
        if on_facade:
            threads = [threading.Thread(target=asyncio.run, args=(on_one_loop(tokens),))]
        else:
            threads = [threading.Thread(target=work, args=(t,)) for t in tokens]
        for thread in threads:
            thread.start()
        # Every teammate's Idle stream is open before the clock starts.
        deadline = time.monotonic() + 60
        while sum(t.status is corral.TeammateStatus.IDLE for t in lead.list_teammates()) < teammates:
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
        "design": "facade" if on_facade else "sdk",
        "cycles_per_s": round(tasks / elapsed, 1),
        "completed": completed,
        "tasks": tasks,
        "teammates": teammates,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("latency", "team", "facade"))
    parser.add_argument("--cycles", type=int, default=600)
    parser.add_argument("--teammates", type=int, default=32)
    parser.add_argument("--tasks", type=int, default=3_000)
    parser.add_argument("--label", default="")
    parser.add_argument("--facade", action="store_true", help="team: on corral.aio")
    args = parser.parse_args()
    if args.mode == "team":
        result = team(args.teammates, args.tasks, on_facade=args.facade)
    else:
        result = (latency if args.mode == "latency" else facade)(args.cycles)
    print(json.dumps({"mode": args.mode, "label": args.label, "sdk": corral.__file__, **result}))


if __name__ == "__main__":
    main()
