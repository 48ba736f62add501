"""Section 6: what the MCP bridge (`corral mcp`) costs.

* Cycles/s of one agent doing `next_item` → `complete_task` on a board of ready
  independent tasks, after WARMUP untimed cycles: through one bridge over stdio (a `python -m corral mcp`
  child, the Python MCP client), through the same bridge in-process (the
  client's in-memory transport), and the same loop through the Python SDK
  directly (`corral.aio.Teammate.idle` → `claim.complete`). Variants alternate
  within each round on one daemon, each with its own teammate and tasks.
* Added latency per tool call: the per-call time of `next_item` (a task ready)
  and `complete_task` over stdio, against the SDK's per-step time in the direct
  loop (next claim from the stream; the completion's answer).
* Ready → `next_item` return for a waiting agent over stdio: the agent is parked
  in `next_item(wait_seconds=10)` with nothing ready; the Lead creates one task;
  measured from the create call's return to the tool call's return. Beside it,
  the same through the SDK: create's return to the claim from a parked stream.
* The bridge's RSS after the runs (VmRSS of the `corral mcp` child).

Each figure is the median round.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pathlib
import sys
import time

import corral
import corral.aio

from .daemon import Daemon, rss_mib, run_async
from .stats import latency_fields, summary

REPO = pathlib.Path(__file__).resolve().parents[1]
VARIANTS = ("sdk", "in_process", "stdio")
TIMEOUT_S = 300.0
WARMUP = 5  # untimed cycles first: opening the stream and the first calls are not the steady state


def _env(address: str, token: str) -> dict[str, str]:
    path = os.pathsep.join(str(REPO / part) for part in ("server", "client", "."))
    return {**os.environ, "PYTHONPATH": path, "CORRAL_ADDRESS": address, "CORRAL_TOKEN": token}


def _bridge_pid() -> int | None:
    """The `corral mcp` child of this process (the MCP client started it)."""
    for entry in pathlib.Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            stat = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(stat[1]) == os.getpid() and b"mcp" in cmdline and b"corral" in cmdline:
            return int(entry.name)
    return None


async def _sdk_loop(address: str, token: str, count: int) -> tuple[float, list[float], list[float]]:
    """`count` timed cycles after WARMUP untimed ones (the stream's opening is not a cycle)."""
    claim_s: list[float] = []
    complete_s: list[float] = []
    async with await corral.aio.Teammate.connect(address, token) as mate:
        done = 0
        started = step = time.perf_counter()
        async with contextlib.aclosing(mate.idle()) as events:
            async for event in events:
                if not isinstance(event, corral.aio.Claim):
                    continue
                got = time.perf_counter()
                await event.complete("done")
                done += 1
                if done <= WARMUP:
                    started = step = time.perf_counter()
                    continue
                claim_s.append(got - step)
                step = time.perf_counter()
                complete_s.append(step - got)
                if done == WARMUP + count:
                    break
        return time.perf_counter() - started, claim_s, complete_s


async def _sdk_ready_to_return(address: str, token: str, lead: corral.aio.Lead, role: str, samples: int) -> list[float]:
    """The ready → claim wait through the SDK directly: a teammate parked on its stream."""
    waits: list[float] = []
    async with await corral.aio.Teammate.connect(address, token) as mate:
        async with contextlib.aclosing(mate.idle()) as events:
            for index in range(samples):
                await lead.create_tasks([corral.TaskSpec(f"{role}-sdkwait-{index}", required_role=role)])
                created = time.perf_counter()
                event = await anext(events)
                while not isinstance(event, corral.aio.Claim):
                    event = await anext(events)
                waits.append(time.perf_counter() - created)
                await event.complete("done")
                await asyncio.sleep(0.05)  # parked again before the next task
    return waits


async def _tool_loop(client, count: int) -> tuple[float, list[float], list[float]]:
    """`count` timed next_item → complete_task cycles after WARMUP untimed ones."""
    next_s: list[float] = []
    complete_s: list[float] = []
    done = 0
    started = time.perf_counter()
    while done < WARMUP + count:
        before = time.perf_counter()
        item = (await client.call_tool("next_item", {"wait_seconds": 10})).structured_content
        got = time.perf_counter()
        if item["kind"] != "claim":
            continue
        answer = await client.call_tool("complete_task", {"task_id": item["claim"]["task_id"], "result": "done"})
        assert not answer.is_error, answer.content
        done += 1
        if done <= WARMUP:
            started = time.perf_counter()
            continue
        next_s.append(got - before)
        complete_s.append(time.perf_counter() - got)
    return time.perf_counter() - started, next_s, complete_s


async def _ready_to_return(client, lead: corral.aio.Lead, role: str, samples: int, tag: str) -> list[float]:
    waits: list[float] = []
    for index in range(samples):
        call = asyncio.create_task(client.call_tool("next_item", {"wait_seconds": 10}))
        await asyncio.sleep(0.05)  # the agent is parked in next_item by now
        await lead.create_tasks([corral.TaskSpec(f"{tag}-wait-{index}", required_role=role)])
        created = time.perf_counter()
        item = (await call).structured_content
        waits.append(time.perf_counter() - created)
        assert item["kind"] == "claim", item
        await client.call_tool("complete_task", {"task_id": item["claim"]["task_id"], "result": "done"})
    return waits


async def _round(address: str, lead: corral.aio.Lead, cycles: int, samples: int, index: int) -> dict:
    from mcp import Client, StdioServerParameters  # noqa: PLC0415 (the bench runs without the extra too)

    from corral.mcp_bridge import Bridge, BridgeConfig  # noqa: PLC0415

    out: dict = {}
    for variant in VARIANTS:
        role = f"{variant}{index}"
        new = await lead.add_teammate(f"bench-{role}", roles=[role])
        await lead.create_tasks([corral.TaskSpec(f"{role}-{i}", required_role=role) for i in range(cycles + WARMUP)])
        if variant == "sdk":
            elapsed, first, second = await _sdk_loop(address, new.token, cycles)
            waits = await _sdk_ready_to_return(address, new.token, lead, role, samples)
            out["sdk_ready_to_return"] = latency_fields(waits)
        elif variant == "in_process":
            bridge = await Bridge.open(BridgeConfig(address=address, token=new.token))
            try:
                async with Client(bridge.server) as client:
                    elapsed, first, second = await _tool_loop(client, cycles)
            finally:
                await bridge.close()
        else:
            params = StdioServerParameters(
                command=sys.executable, args=["-m", "corral", "mcp"], env=_env(address, new.token), cwd=str(REPO)
            )
            async with Client(params) as client:
                elapsed, first, second = await _tool_loop(client, cycles)
                out["ready_to_return"] = latency_fields(await _ready_to_return(client, lead, role, samples, role))
                pid = _bridge_pid()
                out["bridge_rss_mib"] = rss_mib(pid) if pid else 0.0
        out[variant] = {
            "throughput": cycles / elapsed,
            **latency_fields(first, "next_"),
            **latency_fields(second, "complete_"),
        }
    return out


def run(sizes, runs: int, log) -> dict:
    try:
        import mcp  # noqa: F401, PLC0415
    except ImportError:
        log("  mcp: not measured (the MCP SDK is not installed: pip install 'corral[mcp]')")
        return {"unavailable": "the MCP SDK is not installed"}
    cycles, samples = sizes.mcp_cycles, sizes.latency_samples
    rounds: list[dict] = []
    with Daemon() as daemon:

        async def measure() -> None:
            async with await corral.aio.Lead.connect(daemon.address, daemon.token) as lead:
                for index in range(runs):
                    rounds.append(
                        await asyncio.wait_for(_round(daemon.address, lead, cycles, samples, index), TIMEOUT_S)
                    )
                    rates = ", ".join(f"{v} {rounds[-1][v]['throughput']:.0f}/s" for v in VARIANTS)
                    log(f"  mcp round {index + 1}: {rates}")

        run_async(measure())
    result: dict = {"cycles": cycles, "samples": samples}
    for variant in VARIANTS:
        result[variant] = {
            key: summary([r[variant][key] for r in rounds], "cycles/s" if key == "throughput" else "ms")
            for key in rounds[0][variant]
            if not key.endswith("samples")
        }
    result["stdio_over_sdk"] = summary([r["stdio"]["throughput"] / r["sdk"]["throughput"] for r in rounds], "x")
    result["in_process_over_sdk"] = summary(
        [r["in_process"]["throughput"] / r["sdk"]["throughput"] for r in rounds], "x"
    )
    for step, sdk_step in (("next", "next"), ("complete", "complete")):
        for pct in ("p50", "p99"):
            added = [r["stdio"][f"{step}_{pct}_ms"] - r["sdk"][f"{sdk_step}_{pct}_ms"] for r in rounds]
            result[f"added_{step}_{pct}_ms"] = summary(added, "ms")
    for figure in ("ready_to_return", "sdk_ready_to_return"):
        result[figure] = {
            key: summary([r[figure][key] for r in rounds], "ms") for key in ("p50_ms", "p99_ms", "max_ms")
        }
    result["bridge_rss_mib"] = summary([r["bridge_rss_mib"] for r in rounds], "MiB")
    return result
