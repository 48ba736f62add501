"""Section 8, throughput: Session cycles/s on PostgreSQL boards, against SQLite and with parts switched off.

* Cycles: Session claim → complete cycles/s (raw stubs, as in bench/paired.py)
  at each of `pg_teammates` teammates, for the SQLite store on one daemon, a
  PostgreSQL board on one daemon, and a PostgreSQL board served by two daemons
  with the teammates split evenly between them (each client process talks to
  one daemon). Each round measures the three back to back at each count (their
  order rotates from round to round), each on fresh daemons and a fresh
  schema; the ratios PG-1 / SQLite and PG-2 / PG-1 are taken within the round.
  CPU per cycle is the daemons' user+system time over the run, and beside it
  that of the PostgreSQL backends serving the bench's database.
* The board lock, NOTIFY, group commit, the writer pool and completions run together: Session cycles/s at
  `pg_switch_teammates` on one PostgreSQL daemon with nothing, NOTIFY, or the
  board lock switched off (CORRAL_BENCH_PG_OFF, in the daemon's environment
  only; the lock off is sound with one daemon of one writer thread only, and
  runs so), with the board lock and group commit off (one job per transaction,
  the default pool's writers in parallel: the writer of a board ordered by row
  locks alone, without their extra statements), with one writer thread
  in place of the default pool (`--pg-writers 1`), or with each Session
  completion in a statement of its own instead of a run of queued completions
  in one (`merge`); the order rotates from round to round, ratios to "nothing
  off" within the round.
"""

from __future__ import annotations

from . import e2e, teamworker
from .daemon import Daemon, Lead, run_async
from .pg_server import Store, cpu_spent, daemons_for, shared
from .stats import latency_fields, summary

CONFIGS = ("sqlite", "pg1", "pg2")
RATIOS = {"pg1_vs_sqlite": ("pg1", "sqlite"), "pg2_vs_pg1": ("pg2", "pg1")}
FIELDS = {
    "throughput": "cycles/s",
    "p50_ms": "ms",
    "p99_ms": "ms",
    "cpu_ms": "daemon CPU ms/cycle (all daemons)",
    "pg_cpu_ms": "PostgreSQL backend CPU ms/cycle",
    "jobs_per_cycle": "writer jobs/cycle (all daemons)",
    "mean_batch": "jobs/commit",
    "notifies_per_cycle": "NOTIFY/cycle (all daemons)",
    "errors": "count",
}
SWITCHES = ("none", "notify", "lock", "group", "pool", "merge")  # what each configuration of `switches` turns off
# What the daemon is started with for a switch: CORRAL_BENCH_PG_OFF, and arguments.
ONE_WRITER = ("--pg-writers", "1")
SWITCHED = {
    "none": ("", ()),
    "notify": ("notify", ()),
    "lock": ("lock", ONE_WRITER),
    "group": ("lock,group", ()),
    "pool": ("", ONE_WRITER),
    "merge": ("merge", ()),
}


# ---------------------------------------------------------------- cycles


def _writer(daemons: list[Daemon]) -> dict:
    stats = [e2e._writer_stats(daemon) for daemon in daemons]
    return {key: sum(s[key] for s in stats) for key in ("jobs", "commits")}


def _notifies(daemons: list[Daemon]) -> int:
    """The NOTIFYs the daemons sent so far (0 for SQLite)."""

    async def sent(daemon: Daemon) -> int:
        lead = Lead(daemon.address, daemon.token)
        try:
            return (await lead.stats()).postgres.notifies_sent
        finally:
            await lead.close()

    return sum(run_async(sent(daemon)) for daemon in daemons)


def _cycles(
    store: Store, config: str, count: int, tasks: int, schema: str, sizes, off: str = "", extra: tuple[str, ...] = ()
) -> dict:
    with daemons_for(store, config, schema, off, extra) as daemons:
        members, refusal = e2e._setup(daemons[0], count, session=True)
        if refusal:
            return {"unavailable": refusal}
        e2e._create(daemons[0], "independent", tasks, prefix="t-")
        before, cpu, notifies = _writer(daemons), sum(d.cpu_seconds() for d in daemons), _notifies(daemons)
        pg_before = store.backend_cpu() if config != "sqlite" else None
        # As many client processes for every config; with two daemons, each process talks to one.
        processes = len(daemons) * -(-sizes.client_processes // len(daemons))
        tally = teamworker.run_clients(
            "session",
            [d.address for d in daemons],
            members,
            target=tasks,
            deadline_s=sizes.run_deadline_s,
            processes=processes,
        )
        cpu = sum(d.cpu_seconds() for d in daemons) - cpu
        pg_cpu = cpu_spent(pg_before, store.backend_cpu()) if config != "sqlite" else None
        after, notifies = _writer(daemons), _notifies(daemons) - notifies
    done = max(tally["completed"], 1)
    commits = after["commits"] - before["commits"]
    return {
        "throughput": tally["throughput"],
        **latency_fields(tally["latencies"]),
        "cpu_ms": 1000 * cpu / done,
        "pg_cpu_ms": None if pg_cpu is None else 1000 * pg_cpu / done,
        "jobs_per_cycle": (after["jobs"] - before["jobs"]) / done,
        "mean_batch": (after["jobs"] - before["jobs"]) / commits if commits else 0.0,
        "notifies_per_cycle": None if config == "sqlite" else notifies / done,
        "daemons": len(daemons),
        "client_processes": processes,
        "completed": tally["completed"],
        "errors": tally["errors"],
        "refused": tally["refused"],
        "timed_out": tally["timed_out"],
        "error_samples": tally["error_samples"],
        **teamworker.spread(tally["per_teammate"]),
    }


def _round_ratios(measured: dict) -> dict:
    rate = {config: measured[config].get("throughput") for config in CONFIGS}
    return {
        name: rate[top] / rate[bottom] if rate[top] and rate[bottom] else None for name, (top, bottom) in RATIOS.items()
    }


def _figure(values: list, unit: str) -> dict | None:
    """The median round, or None when some round lacks the figure."""
    if not values or any(v is None for v in values):
        return None
    return summary(values, unit)


def _config_table(runs_of: list[dict]) -> dict:
    """One configuration's `_cycles` figures over the rounds."""
    missing = [f["unavailable"] for f in runs_of if "unavailable" in f]
    if missing:
        return {"unavailable": missing[0]}
    table: dict = {field: _figure([f[field] for f in runs_of], unit) for field, unit in FIELDS.items()}
    table["max_over_min"] = _figure([f["max_over_min"] for f in runs_of], "max/min")
    table["per_teammate_min_max"] = [[f["min_completions"], f["max_completions"]] for f in runs_of]
    table["timed_out"] = any(f["timed_out"] for f in runs_of)
    table["error_samples"] = [s for f in runs_of for s in f["error_samples"]][:3]
    return table


def cycles(store: Store, sizes, runs: int, log) -> dict:
    rounds: list[dict] = []
    for run in range(runs):
        order = CONFIGS[run % len(CONFIGS) :] + CONFIGS[: run % len(CONFIGS)]
        measured: dict = {}
        for count in sizes.pg_teammates:
            tasks = sizes.tasks(count)
            at = {config: _cycles(store, config, count, tasks, f"r{run}_{config}_{count}", sizes) for config in order}
            at["ratios"] = _round_ratios(at)
            measured[str(count)] = at
            log(_line(count, at))
        rounds.append(measured)
    by_count: dict = {}
    for count in sizes.pg_teammates:
        key = str(count)
        table = {config: _config_table([r[key][config] for r in rounds]) for config in CONFIGS}
        table["ratios"] = {name: _figure([r[key]["ratios"][name] for r in rounds], "ratio") for name in RATIOS}
        by_count[key] = table
    return {
        "teammates": list(sizes.pg_teammates),
        "tasks": {str(count): sizes.tasks(count) for count in sizes.pg_teammates},
        "client_processes": sizes.client_processes,
        "rounds": rounds,
        "by_count": by_count,
    }


def _cpu_note(figures: dict) -> str:
    """The note " (daemon + PG ms CPU/cycle)" of one `_cycles` result, or "" without the figure."""
    pg, daemon = figures.get("pg_cpu_ms"), figures.get("cpu_ms")
    if daemon is None:
        return ""
    return f" ({daemon:.2f}" + ("" if pg is None else f" + PG {pg:.2f}") + " ms CPU/cycle)"


def _line(count: int, at: dict) -> str:
    def rate(config: str) -> str:
        value = at[config].get("throughput")
        return f"{value:6.0f}" if value else "   n/a"

    def cpu(config: str) -> str:
        return _cpu_note(at[config])

    ratios = ", ".join(f"{name} {value:.2f}" for name, value in at["ratios"].items() if value is not None)
    return (
        f"postgres    {count:>3} teammates, Session: SQLite {rate('sqlite')}{cpu('sqlite')}, PG 1 daemon"
        f" {rate('pg1')}{cpu('pg1')}, PG 2 daemons {rate('pg2')}{cpu('pg2')} cycles/s -> {ratios} [{shared()}]"
    )


# ---------------------------------------------------------------- what the board lock and NOTIFY cost


def switches(store: Store, sizes, runs: int, log) -> dict:
    """Session cycles on one PostgreSQL daemon with nothing, NOTIFY, or the board lock switched off
    (CORRAL_BENCH_PG_OFF; the lock off is sound with one daemon of one writer only), the lock and group commit off
    (one job per transaction, the pool's writers in parallel), one writer in place of the pool, or each completion
    in its own statement (no runs); in an order that rotates from round to round, each on a fresh daemon and schema,
    ratios to "nothing off" within the round."""
    count = sizes.pg_switch_teammates
    tasks = sizes.tasks(count)
    rounds = []
    for run in range(runs):
        order = SWITCHES[run % len(SWITCHES) :] + SWITCHES[: run % len(SWITCHES)]
        at = {name: _cycles(store, "pg1", count, tasks, f"off{run}_{name}", sizes, *SWITCHED[name]) for name in order}
        rate = {name: at[name].get("throughput") for name in SWITCHES}
        at["ratios"] = {
            f"{name}_off_vs_on": rate[name] / rate["none"] if rate[name] and rate["none"] else None
            for name in SWITCHES[1:]
        }
        rounds.append(at)
        log(_switches_line(count, at))
    table = {name: _config_table([r[name] for r in rounds]) for name in SWITCHES}
    names = [f"{name}_off_vs_on" for name in SWITCHES[1:]]
    return {
        "teammates": count,
        "tasks": tasks,
        "daemons": 1,
        "rounds": rounds,
        **table,
        "ratios": {name: _figure([r["ratios"][name] for r in rounds], "ratio") for name in names},
    }


def _switches_line(count: int, at: dict) -> str:
    def rate(name: str) -> str:
        value = at[name].get("throughput")
        return f"{value:.0f}{_cpu_note(at[name])}" if value else "n/a"

    ratios = ", ".join(f"{name} {value:.2f}" for name, value in at["ratios"].items() if value is not None)
    return (
        f"postgres    {count:>3} teammates, Session, one PG daemon: all on {rate('none')}, NOTIFY off"
        f" {rate('notify')}, board lock off {rate('lock')}, one job per transaction {rate('group')}, one writer"
        f" {rate('pool')}, each completion its own statement {rate('merge')} cycles/s -> {ratios}"
        f" [{shared()}]"
    )
