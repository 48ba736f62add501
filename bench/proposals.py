"""Section 10: discovered work (#34): what PROPOSED tasks cost a claim, and AddDependencies on a big board.

* In-process claim latency, as section 5a measures it (bench.semantics' `_Board`: the
  writer job of a claim through the real Writer, one teammate holding a window of
  claims and completing the oldest before each claim) on (a) a board of N ready tasks
  and (b) the same N ready tasks with `proposals_proposed` PROPOSED tasks before them
  in board order (a teammate's proposals waiting for the Lead, never claimed). Both
  boards are built with the store's own functions before their writers start, and
  commit with synchronous=NORMAL (no fsync: the reads are what PROPOSED tasks could
  cost). Each round alternates (a) and (b) ten times, a tenth of its claims each, and
  the ratio b/a of the claim p50 is taken per round. Target: ≤ 1.1×.
* AddDependencies through the wire (LeadService.AddDependencies, unary, one call at a
  time) on a daemon whose board holds `proposals_board` PENDING tasks, all unfinished:
  projects of 100 tasks in 10 layers of 10, each task after 2 of the layer before. Each
  call makes one task wait for one more: mostly a task of a lower layer of its own project
  (accepted: the cycle check walks the two neighbourhoods until they meet or end), some a
  task of another project (accepted), and some a task of a higher layer that waits for
  it already (refused: the cycle is named). Target: p99 ≤ 20 ms.

Each figure is the median round.
"""

from __future__ import annotations

import pathlib
import random
import shutil
import time
from collections.abc import Iterator

import grpc

from corral.v1 import corral_pb2 as pb

from .daemon import Daemon, Lead, run_async, scratch_dir
from .semantics import BUILD_BATCH, TEAMMATE, WINDOW, _Board, _spec
from .stats import latency_fields, summary

PROPOSER = "proposer"
LAYERS, WIDTH = 10, 10  # a project of the AddDependencies board: 100 tasks
DEPS_EACH = 2
MIX = (("within", 0.6), ("across", 0.2), ("cycle", 0.2))  # the kinds of AddDependencies calls
SEED = 34
SLICES = 10  # each round alternates the boards this many times, a slice of its claims each


class _QuietBoard(_Board):
    """bench.semantics' board with commits that skip the fsync (synchronous=NORMAL under WAL):
    what PROPOSED tasks could cost is the claim's reads, which a commit's fsync on a shared
    disk would drown."""

    def __init__(self, database: pathlib.Path) -> None:
        from corrald.clock import SystemClock  # noqa: PLC0415
        from corrald.store.sqlite.storage import open_writer  # noqa: PLC0415
        from corrald.writer import Writer, WriterConfig  # noqa: PLC0415

        super().__init__(database)
        self.writer.close()
        config = WriterConfig(synchronous="NORMAL")
        self.writer = Writer(
            lambda: open_writer(database, synchronous=config.synchronous, busy_timeout_ms=config.busy_timeout_ms),
            SystemClock(),
            config,
        )
        self.writer.start()


# ---------------------------------------------------------------- claims beside PROPOSED tasks


def _build(database: pathlib.Path, ready: int, proposed: int) -> float:
    """A board of `ready` ready tasks, after `proposed` PROPOSED ones (a teammate's, from no
    claim). Returns seconds."""
    from corrald import validate  # noqa: PLC0415 (server internals only for the build)
    from corrald.config import Limits  # noqa: PLC0415
    from corrald.store import team  # noqa: PLC0415
    from corrald.store.sqlite import storage  # noqa: PLC0415
    from corrald.store.tasks.create import Origin, create_batch  # noqa: PLC0415
    from corrald.txn import Txn  # noqa: PLC0415

    started = time.perf_counter()
    now_ms = time.time_ns() // 1_000_000
    conn = storage.open_writer(database, synchronous="OFF")
    try:
        conn.execute("BEGIN IMMEDIATE")
        tx = Txn(conn, now_ms)
        team.add_teammate(tx, TEAMMATE, (), False, b"h" * 32)
        team.add_teammate(tx, PROPOSER, (), False, b"p" * 32)
        conn.execute("COMMIT")
        batches = [([_spec(f"p{i}") for i in range(proposed)], Origin(PROPOSER, "", needs_decision=True))]
        ready_specs = [_spec(f"r{i}") for i in range(ready)]
        batches += [(ready_specs[low : low + BUILD_BATCH], None) for low in range(0, ready, BUILD_BATCH)]
        for specs, origin in batches:
            if not specs:
                continue
            batch = validate.prepare_batch(specs, Limits(), now_ms=now_ms)
            conn.execute("BEGIN IMMEDIATE")
            if origin is None:
                create_batch(Txn(conn, now_ms), batch)
            else:
                create_batch(Txn(conn, now_ms), batch, origin=origin)
            conn.execute("COMMIT")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()
    return time.perf_counter() - started


def claims(sizes, runs: int, log) -> dict:
    root = scratch_dir("proposals")
    ready, proposed, count = sizes.proposals_ready, sizes.proposals_proposed, sizes.proposals_claims
    if ready < runs * count + WINDOW:
        raise ValueError("proposals_ready must exceed runs x proposals_claims + the claim window")
    try:
        build = {
            "plain": _build(root / "plain.sqlite3", ready, 0),
            "proposals": _build(root / "proposals.sqlite3", ready, proposed),
        }
        boards = {name: _QuietBoard(root / f"{name}.sqlite3") for name in build}
        rounds = []
        try:
            for measured in alternate_claims(boards, "proposals", runs, count):
                rounds.append(measured)
                log(
                    f"proposals   claim job p50 plain {measured['plain']['p50_ms']:.3f} ms, with {proposed:,}"
                    f" PROPOSED {measured['proposals']['p50_ms']:.3f} ms -> ratio {measured['ratio_p50']:.2f}"
                    f" (p99 {measured['plain']['p99_ms']:.3f} / {measured['proposals']['p99_ms']:.3f} ms)"
                )
        finally:
            for board in boards.values():
                board.close()
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return {"ready": ready, "proposed": proposed, **claims_summary(rounds, "proposals", count, build)}


def alternate_claims(boards: dict[str, _QuietBoard], variant: str, runs: int, count: int) -> Iterator[dict]:
    """Rounds of claim-job latency on boards "plain" and `variant`, `count` claims each per
    round: per board its latency fields, the order, and `variant`/plain of p50 and p99."""
    for run in range(runs):
        order = ("plain", variant) if run % 2 == 0 else (variant, "plain")
        samples: dict[str, list[float]] = {name: [] for name in order}
        for slice_ in range(SLICES):  # alternated finely: a shared machine's load moves in seconds
            for name in order if slice_ % 2 == 0 else order[::-1]:
                samples[name] += boards[name].cycles(count // SLICES)
        measured: dict = {name: latency_fields(samples[name]) for name in order}
        measured["order"] = list(order)
        measured["ratio_p50"] = measured[variant]["p50_ms"] / measured["plain"]["p50_ms"]
        measured["ratio_p99"] = measured[variant]["p99_ms"] / measured["plain"]["p99_ms"]
        yield measured


def claims_summary(rounds: list[dict], variant: str, count: int, build: dict) -> dict:
    """The figures of `alternate_claims`' rounds: medians over the rounds."""
    out: dict = {
        "claims_per_round": count,
        "window": WINDOW,
        "build_s": build,
        "rounds": rounds,
        "ratio_p50": summary([r["ratio_p50"] for r in rounds], "ratio"),
        "ratio_p99": summary([r["ratio_p99"] for r in rounds], "ratio"),
    }
    for name in ("plain", variant):
        out[name] = {field: summary([r[name][field] for r in rounds], "ms") for field in ("p50_ms", "p99_ms")}
    return out


# ---------------------------------------------------------------- AddDependencies on a big board


def _task_id(project: int, layer: int, index: int) -> str:
    return f"g{project}-{layer}-{index}"


def _graph_specs(projects: int, rng: random.Random) -> list[pb.TaskSpec]:
    """Projects of LAYERS x WIDTH tasks, each after DEPS_EACH tasks of the layer before,
    in board order (a batch holds whole projects: its dependencies are in it or before it)."""
    specs = []
    for project in range(projects):
        for layer in range(LAYERS):
            for index in range(WIDTH):
                deps = [_task_id(project, layer - 1, i) for i in rng.sample(range(WIDTH), DEPS_EACH)] if layer else []
                specs.append(
                    pb.TaskSpec(id=_task_id(project, layer, index), title="bench", depends_on=deps, payload=b"x" * 32)
                )
    return specs


def _edge(kind: str, projects: int, rng: random.Random) -> tuple[str, str]:
    """(task, its new dependency) for one AddDependencies call of `kind`."""
    project = rng.randrange(projects)
    if kind == "across":
        other = (project + rng.randrange(1, projects)) % projects
        return (
            _task_id(project, rng.randrange(LAYERS), rng.randrange(WIDTH)),
            _task_id(other, rng.randrange(LAYERS), rng.randrange(WIDTH)),
        )
    low = rng.randrange(LAYERS - 2)
    high = rng.randrange(low + 2, LAYERS)  # two layers up or more: it waits for `low` already, or may
    lower, higher = _task_id(project, low, rng.randrange(WIDTH)), _task_id(project, high, rng.randrange(WIDTH))
    return (higher, lower) if kind == "within" else (lower, higher)


async def _depend_calls(lead: Lead, projects: int, samples: int, rng: random.Random) -> dict:
    timed: dict[str, list[float]] = {kind: [] for kind, _ in MIX}
    refused: dict[str, int] = {kind: 0 for kind, _ in MIX}
    kinds, weights = zip(*MIX, strict=True)
    for _ in range(samples):
        kind = rng.choices(kinds, weights)[0]
        task_id, dep = _edge(kind, projects, rng)
        request = pb.AddDependenciesRequest(task_id=task_id, depends_on=[dep])
        started = time.perf_counter()
        try:
            await lead.lead.AddDependencies(request, metadata=lead.md, timeout=60)
        except grpc.aio.AioRpcError as error:
            if error.code() != grpc.StatusCode.INVALID_ARGUMENT or "dependency cycle" not in (error.details() or ""):
                raise
            refused[kind] += 1
        timed[kind].append(time.perf_counter() - started)
    return {"timed": timed, "refused": refused}


def depend(sizes, runs: int, log) -> dict:
    projects = sizes.proposals_board // (LAYERS * WIDTH)
    rng = random.Random(SEED)
    specs = _graph_specs(projects, rng)
    rounds = []
    with Daemon() as daemon:

        async def build() -> float:
            lead = Lead(daemon.address, daemon.token)
            try:
                return await lead.create(specs)
            finally:
                await lead.close()

        build_s = run_async(build())
        log(
            f"proposals   AddDependencies board: {len(specs):,} tasks in {projects:,} projects,"
            f" built in {build_s:.0f} s"
        )
        for run in range(runs):

            async def measure(seed: int = SEED + 1 + run) -> dict:
                lead = Lead(daemon.address, daemon.token)
                try:
                    return await _depend_calls(lead, projects, sizes.proposals_depend_samples, random.Random(seed))
                finally:
                    await lead.close()

            measured = run_async(measure())
            every = [s for samples in measured["timed"].values() for s in samples]
            figures = {"all": latency_fields(every)}
            figures.update({kind: latency_fields(samples) for kind, samples in measured["timed"].items() if samples})
            rounds.append({**figures, "calls": {k: len(v) for k, v in measured["timed"].items()}, **measured})
            log(
                f"proposals   AddDependencies on {len(specs):,} tasks: p50 {figures['all']['p50_ms']:.2f} ms,"
                f" p99 {figures['all']['p99_ms']:.2f} ms over {len(every)} calls"
                f" ({', '.join(f'{k} {len(v)}' for k, v in measured['timed'].items())};"
                f" refused as cycles: {sum(measured['refused'].values())})"
            )
    for r in rounds:
        del r["timed"]
    out: dict = {
        "board_tasks": len(specs),
        "projects": projects,
        "layers": LAYERS,
        "width": WIDTH,
        "deps_each": DEPS_EACH,
        "mix": dict(MIX),
        "samples_per_round": sizes.proposals_depend_samples,
        "build_s": build_s,
        "rounds": rounds,
    }
    for kind in ("all", *(k for k, _ in MIX)):
        present = [r[kind] for r in rounds if kind in r]
        out[kind] = {field: summary([f[field] for f in present], "ms") for field in ("p50_ms", "p99_ms")}
    return out


def run(sizes, runs: int, log) -> dict:
    return {"claims": claims(sizes, runs, log), "depend": depend(sizes, runs, log)}
