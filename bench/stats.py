"""Run summaries and the machine description (percentiles: tests.support)."""

from __future__ import annotations

import datetime
import os
import pathlib
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable, Sequence

from tests.support import percentile


def summary(values: Sequence[float], unit: str) -> dict:
    """One figure: the median of the runs, with min, max and every run."""
    values = [float(v) for v in values]
    return {
        "median": statistics.median(values) if values else 0.0,
        "min": min(values) if values else 0.0,
        "max": max(values) if values else 0.0,
        "runs": values,
        "unit": unit,
    }


def summarize(runs: list[dict], fields: dict[str, str]) -> dict:
    """Turns a list of per-run dicts into {field: summary} for the named fields (field -> unit)."""
    return {field: summary([run[field] for run in runs], unit) for field, unit in fields.items()}


def ms(seconds: float) -> float:
    return seconds * 1000.0


def latency_fields(samples_s: Sequence[float], prefix: str = "") -> dict:
    """p50/p99/max in milliseconds from samples in seconds."""
    return {
        f"{prefix}p50_ms": ms(percentile(samples_s, 0.50, empty=0.0)),
        f"{prefix}p99_ms": ms(percentile(samples_s, 0.99, empty=0.0)),
        f"{prefix}max_ms": ms(max(samples_s)) if samples_s else 0.0,
        f"{prefix}samples": len(samples_s),
    }


def repeat(runs: int, once: Callable[[int], dict]) -> list[dict]:
    return [once(index) for index in range(runs)]


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            for line in cpuinfo:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def fsync_latency(directory: pathlib.Path | None = None, samples: int = 200) -> dict:
    """p50/p99 of write(4 KiB) + fsync on the disk the state directories use."""
    with tempfile.TemporaryDirectory(prefix="corral-bench-fsync-", dir=directory) as root:
        path = pathlib.Path(root) / "probe"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
        took = []
        try:
            for i in range(samples):
                started = time.perf_counter()
                os.pwrite(fd, b"x" * 4096, (i % 64) * 4096)
                os.fsync(fd)
                took.append(time.perf_counter() - started)
        finally:
            os.close(fd)
    return {"p50_ms": ms(percentile(took, 0.5)), "p99_ms": ms(percentile(took, 0.99)), "samples": samples}


def machine() -> dict:
    import grpc  # noqa: PLC0415 (only the report needs the version)

    return {
        "nproc": os.cpu_count(),
        "cpu_model": _cpu_model(),
        "python": platform.python_version(),
        "grpcio": grpc.__version__,
        "sqlite": sqlite3.sqlite_version,
        "platform": platform.platform(),
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "loadavg_at_start": os.getloadavg(),
        "fsync_4k": fsync_latency(),
    }
