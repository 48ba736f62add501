"""A process's resident memory, read from /proc, and its peak over a block."""

from __future__ import annotations

import contextlib
import pathlib
import threading
from collections.abc import Iterator


def rss_mib(pid: int) -> float:
    """The process's resident set size (VmRSS), in MiB."""
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


@contextlib.contextmanager
def peak_rss(pid: int) -> Iterator[dict[str, float]]:
    """Samples the process's resident memory every 5 ms; yields {'start', 'peak'} (MiB)."""
    seen = {"start": rss_mib(pid), "peak": 0.0}
    seen["peak"] = seen["start"]
    stop = threading.Event()

    def sample() -> None:
        while not stop.wait(0.005):  # the sampling's pace, ended by the event
            seen["peak"] = max(seen["peak"], rss_mib(pid))

    sampler = threading.Thread(target=sample, name="rss sampler", daemon=True)
    sampler.start()
    try:
        yield seen
    finally:
        stop.set()
        sampler.join(5)
        seen["peak"] = max(seen["peak"], rss_mib(pid))
