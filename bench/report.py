"""Targets and the Markdown report, from the JSON each section wrote."""

from __future__ import annotations

import json
import pathlib

ANALYSIS = pathlib.Path(__file__).resolve().parent / "analysis.md"


def load(results_dir: pathlib.Path) -> dict:
    sections = {}
    for path in sorted(results_dir.glob("*.json")):
        document = json.loads(path.read_text())
        if "section" in document:
            sections[document["section"]] = document
    return sections


def _r(sections: dict, name: str):
    return sections.get(name, {}).get("results")


def _at(table: dict, want: int) -> tuple[str, dict] | None:
    """The entry for `want` teammates, else the largest count below it (quick runs)."""
    if not table:
        return None
    if str(want) in table:
        return str(want), table[str(want)]
    lower = [int(k) for k in table if int(k) <= want] or [min(int(k) for k in table)]
    key = str(max(lower))
    return key, table[key]


def _best(table: dict, field: str = "throughput") -> tuple[str, float] | None:
    if not table:
        return None
    key = max(table, key=lambda k: table[k][field]["median"])
    return key, table[key][field]["median"]


def _target(tid, what, measured, unit, goal, ratio, met, basis) -> dict:
    return {
        "id": tid,
        "what": what,
        "measured": measured,
        "unit": unit,
        "goal": goal,
        "ratio": ratio,
        "met": met,
        "basis": basis,
    }


def targets(sections: dict) -> list[dict]:
    out = []
    e2e, floor, tut = _r(sections, "e2e"), _r(sections, "grpc_floor"), _r(sections, "tutorial")
    pair = _r(sections, "paired")
    if pair:
        n, mine = pair["teammates"], pair["corral"]["median"]
        ratio = pair["vs_floor"]["median"]
        out.append(
            _target(
                "1a",
                f"corral / gRPC echo floor, {n} teammates, back to back",
                mine,
                "cycles/s",
                "≥ 0.7×",
                ratio,
                ratio >= 0.7,
                f"median of {len(pair['rounds'])} paired rounds; floor {pair['floor']['median']:.0f}"
                f" cycles/s (ratios {_span(pair['vs_floor'])})",
            )
        )
        ratio = pair["vs_tutorial"]["median"]
        out.append(
            _target(
                "1b",
                f"corral / tutorial design at synchronous=FULL, {n} teammates, back to back",
                mine,
                "cycles/s",
                "≥ 1×",
                ratio,
                ratio >= 1.0,
                f"median of paired rounds vs the tutorial's best process count; tutorial best "
                f"{pair['tutorial_best']['median']:.0f} cycles/s (ratios {_span(pair['vs_tutorial'])})",
            )
        )
    if e2e:
        at = _at(e2e["FULL"]["independent"], 32)
        corral = at[1]["throughput"]["median"]
        if floor and not pair:
            fat = _at(floor["teammates"], int(at[0]))
            ratio = corral / fat[1]["throughput"]["median"]
            out.append(
                _target(
                    "1a",
                    f"corral / gRPC echo floor, {at[0]} teammates",
                    corral,
                    "cycles/s",
                    "≥ 0.7×",
                    ratio,
                    ratio >= 0.7,
                    f"floor {fat[1]['throughput']['median']:.0f} cycles/s",
                )
            )
        for sync in ("NORMAL",) if pair else ("FULL", "NORMAL"):
            mine = _at(e2e[sync].get("independent", {}), 32)
            best = _best((tut or {}).get(sync, {}).get("independent", {}))
            if mine and best:
                value = mine[1]["throughput"]["median"]
                ratio = value / best[1]
                out.append(
                    _target(
                        "1b" if sync == "FULL" else "1c",
                        f"corral / tutorial design at synchronous={sync}, {mine[0]} teammates",
                        value,
                        "cycles/s",
                        "≥ 1×",
                        ratio,
                        ratio >= 1.0,
                        f"tutorial best {best[1]:.0f} cycles/s at {best[0]} processes",
                    )
                )
    lat = _r(sections, "latency")
    if lat:
        for key, what in (
            ("dependency", "dependency completes → dependent's claim at a waiting teammate"),
            ("shutdown", "shutdown request → its teammate"),
        ):
            p99 = lat[f"{key}_p99_ms"]["median"]
            out.append(
                _target(
                    "3" + key[0],
                    f"{what}, p99",
                    p99,
                    "ms",
                    "≤ 5 ms",
                    p99 / 5.0,
                    p99 <= 5.0,
                    f"p50 {lat[f'{key}_p50_ms']['median']:.2f} ms; a 5 s poll loop: mean 2,500 ms, p99 4,950 ms",
                )
            )
    scale = _r(sections, "scale")
    if scale:
        sizes = scale["board_size"]["sizes"]
        small, large = min(sizes, key=int), max(sizes, key=int)
        p_small, p_large = sizes[small]["p50_ms"]["median"], sizes[large]["p50_ms"]["median"]
        ratio = p_large / p_small
        out.append(
            _target(
                "4a",
                f"claim p50 at {int(large):,} / at {int(small):,} tasks",
                p_large,
                "ms",
                "≤ 1.5×",
                ratio,
                ratio <= 1.5,
                f"{p_small:.2f} ms at {int(small):,} tasks",
            )
        )
        streams = scale["streams"]
        n = streams["streams_open"]
        out.append(
            _target(
                "4b",
                f"daemon RSS with {n} open Idle streams",
                streams["rss_mib"],
                "MiB",
                "≤ 150 MiB",
                streams["rss_mib"] / 150,
                streams["rss_mib"] <= 150,
                f"{streams['rss_mib_before_streams']:.0f} MiB before the streams opened",
            )
        )
        p99 = streams["p99_ms"]["median"]
        out.append(
            _target(
                "4c",
                f"GetTask p99 with {n} open Idle streams",
                p99,
                "ms",
                "≤ 20 ms",
                p99 / 20,
                p99 <= 20,
                f"p50 {streams['p50_ms']['median']:.2f} ms",
            )
        )
        busy = scale["busy_writer"]
        depth = busy["queue_depth_p99"]["median"]
        out.append(
            _target(
                "4d",
                f"writer queue depth p99, {busy['teammates']} busy teammates",
                depth,
                "jobs",
                "< 50",
                depth / 50,
                depth < 50,
                f"mean batch {busy['mean_batch']['median']:.1f} jobs/commit",
            )
        )
        subs = scale["submissions"]
        fails = subs["failures_total"]
        out.append(
            _target(
                "4e",
                f"{subs['concurrent']:,} concurrent submissions (CreateTasks, SendMessage)",
                fails,
                "failures",
                "0",
                None,
                fails == 0,
                f"over {sections['scale']['runs']} bursts of each kind, no client retry; codes "
                f"{sorted(set(subs['create_tasks']['codes'] + subs['send_message']['codes']))}; "
                f"{subs['failures_after_retry_total']} still failing after retries with backoff",
            )
        )
    return out


def _span(figure: dict) -> str:
    return f"{figure['min']:.2f}–{figure['max']:.2f}"


def target_lines(items: list[dict]) -> list[str]:
    lines = ["targets:"]
    for t in items:
        ratio = "" if t["ratio"] is None else f"  ratio {t['ratio']:.2f}"
        lines.append(
            f"  ({t['id']}) {t['what']}: {t['measured']:.4g} {t['unit']}{ratio}  target {t['goal']}"
            f"  -> {'MET' if t['met'] else 'MISSED'}  [{t['basis']}]"
        )
    return lines


# ---------------------------------------------------------------- Markdown


def _versions(sections: dict, context: dict) -> str:
    """The commit each section measured; more than one means the sections are not comparable."""
    seen: dict[str, list[str]] = {}
    for name, document in sections.items():
        code = document.get("code", {"commit": "unknown", "uncommitted": []})
        label = code["commit"] + (" + uncommitted changes" if code["uncommitted"] else "")
        seen.setdefault(label, []).append(name)
    if len(seen) <= 1:
        return next(iter(seen), context["code"]["commit"])
    return "; ".join(f"{label}: {', '.join(names)}" for label, names in seen.items())


def _cell(figure: dict | None, digits: int = 0) -> str:
    if figure is None:  # a figure an older results file does not have
        return ""
    f = f"{{:,.{digits}f}}"
    if figure["min"] == figure["max"]:
        return f.format(figure["median"])
    return f"{f.format(figure['median'])} ({f.format(figure['min'])}–{f.format(figure['max'])})"


def _table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _e2e_rows(e2e: dict, floor: dict | None, wfloor: dict | None) -> list[list[str]]:
    rows = []
    for sync in ("FULL", "NORMAL"):
        for kind, table in e2e.get(sync, {}).items():
            for count, fig in table.items():
                gf = (floor or {}).get("teammates", {}).get(count)
                wf = (wfloor or {}).get("FULL", {}).get(count) if sync == "FULL" and kind == "independent" else None
                same = gf is not None and kind == "independent" and sync == "FULL"
                rows.append(
                    [
                        sync,
                        kind,
                        count,
                        _cell(fig["throughput"]),
                        _cell(fig["p50_ms"], 2),
                        _cell(fig["p99_ms"], 2),
                        _cell(fig["mean_batch"], 1),
                        _cell(fig.get("server_cpu_ms"), 2),
                        _cell(gf["throughput"]) if same else "",
                        _cell(gf.get("server_cpu_ms"), 2) if same else "",
                        _cell(wf["throughput"]) if wf else "",
                        _cell(wf.get("cpu_ms"), 2) if wf else "",
                    ]
                )
    return rows


def markdown(sections: dict, items: list[dict], context: dict) -> str:
    m = context["machine"]
    parts = [
        "# corral benchmarks\n\n",
        "Generated by `python -m bench` (bench/; `make bench`). Every figure is the median of the runs, with"
        " (min–max) when they differ. Numbers are from a shared 2-core VM on which other test suites ran at the"
        " same time, so they are noisy; compare ratios measured in the same run, not absolute values.\n\n",
        _table(
            ["", ""],
            [
                ["command", f"`{context['command']}`"],
                ["runs per figure", str(context["runs"])],
                ["corral commit", _versions(sections, context)],
                ["date", m["date"]],
                ["nproc", str(m["nproc"])],
                ["CPU", m["cpu_model"]],
                ["Python", m["python"]],
                ["grpcio", m["grpcio"]],
                ["SQLite", m["sqlite"]],
                ["load average at start", ", ".join(f"{x:.1f}" for x in m["loadavg_at_start"])],
                [
                    "write 4 KiB + fsync (state-dir disk)",
                    f"p50 {m['fsync_4k']['p50_ms']:.2f} ms, p99 {m['fsync_4k']['p99_ms']:.2f} ms",
                ],
            ],
        ),
        "\n## Targets\n\n",
        _table(
            ["#", "what", "measured", "target", "ratio", "met", "basis"],
            [
                [
                    t["id"],
                    t["what"],
                    f"{t['measured']:,.4g} {t['unit']}",
                    t["goal"],
                    "" if t["ratio"] is None else f"{t['ratio']:.2f}",
                    "yes" if t["met"] else "**no**",
                    t["basis"],
                ]
                for t in items
            ],
        ),
    ]
    e2e, floor, wfloor = _r(sections, "e2e"), _r(sections, "grpc_floor"), _r(sections, "writer_floor")
    if e2e:
        parts += [
            "\n## 1. End to end over the Unix socket\n\n",
            "Teammates are asyncio tasks on grpc.aio raw stubs spread over"
            f" {context['sizes']['client_processes']} client processes; each opens `Idle`"
            " (slots=1) and calls `CompleteTask` on every claim. Cycle = claim delivered → CompleteTask"
            " returned; throughput = completed tasks / wall time. The gRPC floor is an echo server with the same"
            " call pattern; the writer floor runs the same writer jobs in-process with no RPC. The layered"
            " DAG has"
            " layers of 64 tasks, each depending on two tasks of the layer before. CPU per cycle is the"
            " server process's user+system time over the run divided by the cycles.\n\n",
            _table(
                [
                    "sync",
                    "DAG",
                    "teammates",
                    "corral cycles/s",
                    "cycle p50 ms",
                    "cycle p99 ms",
                    "jobs/commit",
                    "daemon CPU ms/cycle",
                    "gRPC floor cycles/s",
                    "echo server CPU ms/cycle",
                    "writer floor cycles/s",
                    "writer floor CPU ms/cycle",
                ],
                _e2e_rows(e2e, floor, wfloor),
            ),
        ]
    pair = _r(sections, "paired")
    if pair:
        rows = [
            [
                str(i + 1),
                f"{r['corral']:,.0f}",
                f"{r['corral_cpu_ms']:.2f}",
                f"{r['floor']:,.0f}",
                ", ".join(f"{n}: {v:,.0f}" for n, v in r["tutorial"].items()),
                f"{r['tutorial_worst_stall_ms']:,.0f}",
                f"{r['vs_floor']:.2f}",
                f"{r['vs_tutorial']:.2f}",
            ]
            for i, r in enumerate(pair["rounds"])
        ]
        parts += [
            f"\n### Targets (1), back to back ({pair['teammates']} teammates, independent DAG, FULL)\n\n",
            "Each round runs corral, then the echo floor, then the tutorial design at each process count,"
            " within a minute, so load drift on the shared machine hits all three alike.\n\n",
            _table(
                [
                    "round",
                    "corral cycles/s",
                    "daemon CPU ms/cycle",
                    "gRPC floor cycles/s",
                    "tutorial cycles/s by processes",
                    "tutorial worst stall ms",
                    "corral/floor",
                    "corral/tutorial best",
                ],
                rows,
            ),
        ]
    parts += _baselines(sections)
    parts += _latency(_r(sections, "latency"))
    parts += _scale(_r(sections, "scale"))
    parts += _big_batch(_r(sections, "big_batch"))
    if ANALYSIS.exists():
        parts += ["\n", ANALYSIS.read_text()]
    return "".join(parts)


def _baselines(sections: dict) -> list[str]:
    parts = []
    tut, huey, floor = _r(sections, "tutorial"), _r(sections, "huey"), _r(sections, "grpc_floor")
    if tut:
        rows = [
            [
                sync,
                kind,
                procs,
                _cell(f["throughput"]),
                _cell(f["p50_ms"], 2),
                _cell(f["p99_ms"], 2),
                _cell(f.get("worst_stall_ms")),
                _cell(f.get("busy_timeouts")),
            ]
            for sync, kinds in tut.items()
            for kind, table in kinds.items()
            for procs, f in table.items()
        ]
        parts += [
            "\n## 2. Baselines\n\n### The tutorial design (N processes, BEGIN IMMEDIATE, busy_timeout=5000)\n\n",
            _table(
                [
                    "sync",
                    "DAG",
                    "processes",
                    "cycles/s",
                    "cycle p50 ms",
                    "cycle p99 ms",
                    "worst claim stall ms",
                    "busy timeouts",
                ],
                rows,
            ),
        ]
    if huey:
        rows = [
            [
                procs,
                _cell(f["throughput"]),
                _cell(f["p50_ms"], 2),
                _cell(f["p99_ms"], 2),
                _cell(f.get("worst_stall_ms")),
                _cell(f.get("busy_timeouts")),
            ]
            for procs, f in huey["FULL"].items()
        ]
        parts += [
            "\n### Huey SqliteStorage (fsync=True), enqueue + dequeue pairs\n\n",
            _table(
                [
                    "processes",
                    "pairs/s",
                    "pair p50 ms",
                    "pair p99 ms",
                    "worst pair ms",
                    "busy timeouts (database is locked)",
                ],
                rows,
            ),
        ]
    if floor:
        rows = [
            [n, _cell(f["throughput"]), _cell(f["p50_ms"], 2), _cell(f["p99_ms"], 2), _cell(f.get("server_cpu_ms"), 3)]
            for n, f in floor["teammates"].items()
        ]
        parts += [
            "\n### gRPC floor (grpc.aio echo, generic handlers, same call pattern)\n\n",
            _table(["teammates", "cycles/s", "cycle p50 ms", "cycle p99 ms", "server CPU ms/cycle"], rows),
        ]
    wfloor = _r(sections, "writer_floor")
    if wfloor:
        floors = list(wfloor["FULL"].items())
        floors += [(f"{n}, one job per commit", f) for n, f in wfloor.get("one_job_per_commit", {}).items()]
        rows = [
            [
                n,
                _cell(f["throughput"]),
                _cell(f["p50_ms"], 2),
                _cell(f["p99_ms"], 2),
                _cell(f["mean_batch"], 1),
                _cell(f.get("cpu_ms"), 3),
            ]
            for n, f in floors
        ]
        parts += [
            "\n### SQLite floor (corrald's Writer in-process, group commit, synchronous=FULL)\n\n",
            "The last row runs the same cycles with every writer job in a transaction of its own"
            " (`max_batch=1`): what group commit buys.\n\n"
            if "one_job_per_commit" in wfloor
            else "",
            _table(
                ["teammates", "cycles/s", "complete p50 ms", "complete p99 ms", "jobs/commit", "CPU ms/cycle"], rows
            ),
        ]
    return parts


def _latency(lat: dict | None) -> list[str]:
    if not lat:
        return []
    poll = lat["poll_loop"]
    rows = [
        [
            "dependency completes → dependent's claim at a waiting teammate",
            _cell(lat["dependency_p50_ms"], 2),
            _cell(lat["dependency_p99_ms"], 2),
            _cell(lat["dependency_max_ms"], 1),
        ],
        [
            "shutdown request → its teammate",
            _cell(lat["shutdown_p50_ms"], 2),
            _cell(lat["shutdown_p99_ms"], 2),
            _cell(lat["shutdown_max_ms"], 1),
        ],
        [
            "writer commit latency during the run (GetStats)",
            _cell(lat.get("commit_p50_ms"), 2),
            _cell(lat.get("commit_p99_ms"), 2),
            "",
        ],
    ]
    floor = lat.get("grpc_floor")
    if floor:
        rows.append(
            [
                "gRPC floor for the same path: unary call → message on a waiting stream (echo server)",
                _cell(floor["p50_ms"], 2),
                _cell(floor["p99_ms"], 2),
                _cell(floor["max_ms"], 1),
            ]
        )
    normal = lat.get("NORMAL")
    if normal:
        rows += [
            [
                "at synchronous=NORMAL (diagnostic): dependency → claim",
                _cell(normal["dependency_p50_ms"], 2),
                _cell(normal["dependency_p99_ms"], 2),
                _cell(normal["dependency_max_ms"], 1),
            ],
            [
                "at synchronous=NORMAL (diagnostic): shutdown → teammate",
                _cell(normal["shutdown_p50_ms"], 2),
                _cell(normal["shutdown_p99_ms"], 2),
                _cell(normal["shutdown_max_ms"], 1),
            ],
        ]
    rows += [
        [
            f"{poll['interval_s']:g} s poll loop (analytic: uniform wait)",
            f"{poll['analytic']['p50_ms']:,.0f}",
            f"{poll['analytic']['p99_ms']:,.0f}",
            "",
        ],
        [
            f"{poll['interval_s']:g} s poll loop, simulated ({len(poll['simulated_ms'])} samples)",
            ", ".join(f"{x:,.0f}" for x in poll["simulated_ms"]),
            "",
            "",
        ],
    ]
    return [
        f"\n## 3. Push latency ({lat['samples_per_run']} samples per run)\n\n",
        _table(["path", "p50 ms", "p99 ms", "max ms"], rows),
    ]


def _scale(scale: dict | None) -> list[str]:
    if not scale:
        return []
    board = scale["board_size"]
    rows = [
        [f"{int(n):,}", _cell(f["p50_ms"], 2), _cell(f["p99_ms"], 2), _cell(f["rss_mib"]), f"{f['build_s']:.0f}"]
        for n, f in board["sizes"].items()
    ]
    s, busy, subs = scale["streams"], scale["busy_writer"], scale["submissions"]
    other = [
        [f"open Idle streams (wanted {s['streams_wanted']:,})", f"{s['streams_open']:,}"],
        [
            "daemon RSS before streams / with streams open",
            f"{s['rss_mib_before_streams']:.0f} / {s['rss_mib']:.0f} MiB",
        ],
        ["GetTask p50 / p99 with the streams open", f"{_cell(s['p50_ms'], 2)} / {_cell(s['p99_ms'], 2)} ms"],
        [
            "daemon CPU during the GetTask runs (with the streams' idle polls)",
            _cell(s.get("daemon_cpu_percent")) + " %",
        ],
        ["stream opens refused (RESOURCE_EXHAUSTED) and retried", str(s["open_refused_then_retried"])],
        ["streams that ended early", str(s["streams_ended_early"])],
        [f"writer queue depth p99, {busy['teammates']} busy teammates", _cell(busy["queue_depth_p99"])],
        [f"{busy['teammates']} busy teammates throughput", _cell(busy["throughput"]) + " cycles/s"],
        [
            f"{subs['concurrent']:,} concurrent CreateTasks: refused / still failing after retries / wall",
            f"{_cell(subs['create_tasks']['failures'])} / {_cell(subs['create_tasks']['failures_after_retry'])}"
            f" / {_cell(subs['create_tasks']['wall_s'], 2)} s",
        ],
        [
            f"{subs['concurrent']:,} concurrent SendMessage: refused / still failing after retries / wall",
            f"{_cell(subs['send_message']['failures'])} / {_cell(subs['send_message']['failures_after_retry'])}"
            f" / {_cell(subs['send_message']['wall_s'], 2)} s",
        ],
        [
            "GetStats writer.refused_jobs after the bursts (counts jobs that waited, then got in)",
            str(subs["refused_jobs"]),
        ],
    ]
    return [
        "\n## 4. Scale\n\n",
        f"Board built with {board['build']}. Claim latency = CompleteTask returned → next"
        " claim received, one teammate, all other tasks pending. The Idle streams use the default 5 s poll"
        " interval; a stream refused at open is reopened after a short random backoff.\n\n",
        _table(["tasks on the board", "claim p50 ms", "claim p99 ms", "daemon RSS MiB", "build s"], rows),
        "\n",
        _table(["measure", "value"], other),
    ]


def _big_batch(big: dict | None) -> list[str]:
    if not big:
        return []
    rest, loaded = big["at_rest"], big["with_batch"]
    rows = [
        [label, _cell(rest.get(field), digits), _cell(loaded.get(field), digits)]
        for label, field, digits in (
            ("writer job time p99 (ms)", "job_time_p99_ms", 2),
            ("longest writer job (ms)", "job_time_max_ms", 0),
            ("event-loop lag p99 (ms, a 10 ms timer's lateness)", "loop_lag_p99_ms", 1),
            ("event-loop lag max (ms)", "loop_lag_max_ms", 0),
            ("longest lease renewal (ms)", "renew_max_ms", 0),
            ("failed renewals", "renew_failures", 0),
        )
    ]
    rows.append(["CreateTasks of the batch, wall (s)", "", _cell(loaded.get("create_s"), 2)])
    rows.append(
        [
            f"refusal of as many tasks with 200 dependencies each (s; {', '.join(big['refused_with'])})",
            "",
            _cell(loaded.get("refuse_s"), 2),
        ]
    )
    return [
        f"\n## One big batch beside a renewing teammate\n\n{big['tasks']:,} tasks with {big['dependencies']:,}"
        " dependencies and 120-character ids in one CreateTasks, while one teammate renews a 2 s lease every"
        " 100 ms; at rest is the same daemon with the renewer alone. Daemon figures from GetStats.\n\n",
        _table(["", "at rest", "with the batch"], rows),
    ]
