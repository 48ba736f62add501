"""`corral serve` is `corrald serve`; the daemon's Prometheus endpoint counts what happened."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

import corral

CORRAL = str(Path(sys.executable).with_name("corral"))


def corral_command(*args: str) -> list[str]:
    """The installed console script, else the module (same code either way)."""
    if os.access(CORRAL, os.X_OK):
        return [CORRAL, *args]
    return [sys.executable, "-c", "import sys; from corral.cli import main; sys.exit(main())", *args]


@contextlib.contextmanager
def corral_serving(*args: str) -> Iterator[tuple[subprocess.Popen[str], dict[str, Any]]]:
    """`corral serve ARGS` in the foreground, as a user runs it: the process and its ready line.

    Killed on the way out if the test did not stop it.
    """
    process = subprocess.Popen(
        corral_command("serve", *args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert process.stdout is not None
        ready = json.loads(process.stdout.readline())  # blocks until corrald's ready line
        assert ready["event"] == "ready", ready
        yield process, ready
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def corral_run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(corral_command(*args), capture_output=True, text=True, timeout=30, check=False)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_serve_help_names_the_command_the_user_ran(flag):
    shown = corral_run("serve", flag)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("Usage: corral serve [OPTIONS]")
    assert "--state-dir" in shown.stdout


@pytest.mark.timeout(60)
def test_corrald_accepts_h_everywhere():
    for args in (["-h"], ["serve", "-h"]):
        shown = subprocess.run(
            [sys.executable, "-m", "corrald", *args], capture_output=True, text=True, timeout=30, check=False
        )
        assert shown.returncode == 0, (args, shown.stderr)
        assert shown.stdout.startswith("Usage: python -m corrald"), shown.stdout


@pytest.mark.timeout(60)
def test_corral_accepts_h_on_every_command():
    for args in (["-h"], ["tasks", "-h"], ["tasks", "add", "-h"], ["teammates", "list", "-h"], ["demo", "-h"]):
        shown = corral_run(*args)
        assert shown.returncode == 0, (args, shown.stderr)
        assert shown.stdout.startswith("Usage: corral"), shown.stdout


@pytest.mark.timeout(60)
def test_serve_runs_corrald_with_the_same_arguments(tmp_path):
    state_dir = tmp_path / "state"
    with corral_serving("--state-dir", str(state_dir), "--log-format", "json") as (process, ready):
        assert ready["address"] == f"unix:{state_dir.absolute() / 'corral.sock'}"
        assert ready["pid"] == process.pid  # exec'd in place: the same process
        stats = corral_run("stats", "--json", "--state-dir", str(state_dir))
        assert stats.returncode == 0, stats.stderr
        assert json.loads(stats.stdout)["active_tasks"] == 0
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0


@pytest.mark.timeout(60)
def test_serve_help_is_corralds():
    result = corral_run("serve", "--help")
    assert result.returncode == 0
    assert "--state-dir" in result.stdout and "--metrics" in result.stdout


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def scrape(port: int) -> dict[str, list]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as response:
        text = response.read().decode("utf-8")
    return {family.name: family.samples for family in text_string_to_metric_families(text)}


def sample(families: dict[str, list], family: str, name: str, **labels: str) -> float:
    matches = [
        s.value for s in families[family] if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(matches) == 1, (family, name, labels, families[family])
    return matches[0]


@pytest.mark.timeout(90)
def test_metrics_endpoint_counts_the_work(tmp_path, start_teammate_factory):
    port = free_port()
    tasks = [corral.TaskSpec(f"t{i}", depends_on=(f"t{i - 1}",) if i % 3 else ()) for i in range(12)]
    with corral.Lead.launch(tmp_path / "state", extra_args=["--metrics", f"127.0.0.1:{port}"]) as lead:
        before = scrape(port)
        assert sample(before, "corral_operations", "corral_operations_total", operation="completions") == 0
        lead.create_tasks(tasks)
        lead.create_tasks([corral.TaskSpec("doomed")])
        lead.cancel_tasks(["doomed"])

        def handler(task: corral.Task) -> str:
            if task.id == "t4" and corral.current_claim().attempt == 1:
                raise RuntimeError("fail once")
            return task.id

        start = start_teammate_factory(lead)
        mates = [start("ann", handler), start("bob", handler)]
        lead.wait_until_done(timeout=30)
        completed = lead.get_stats().count(corral.TaskState.COMPLETED)
        assert completed == len(tasks)
        for mate in mates:
            lead.request_shutdown(mate.new.name, reason="done")
        for mate in mates:
            assert mate.result().exit_reason is corral.ExitReason.SHUTDOWN

        families = scrape(port)
        ops = "corral_operations_total"
        assert sample(families, "corral_operations", ops, operation="completions") == completed
        assert sample(families, "corral_operations", ops, operation="failures") == 1
        assert sample(families, "corral_operations", ops, operation="claims") == completed + 1
        assert sample(families, "corral_operations", ops, operation="cancellations") == 1
        assert sample(families, "corral_operations", ops, operation="lease_expirations") == 0
        assert sample(families, "corral_tasks", "corral_tasks", state="completed") == completed
        assert sample(families, "corral_tasks", "corral_tasks", state="canceled") == 1
        assert sample(families, "corral_tasks", "corral_tasks", state="pending") == 0
        assert sample(families, "corral_teammates", "corral_teammates", status="offline") == 2
        assert sample(families, "corral_writer_queue_depth", "corral_writer_queue_depth") >= 0
        levels = {s.labels["level"]: s.value for s in families["corral_writer_queue_level"]}
        assert sum(levels.values()) == 1 and set(levels) == {"normal", "record", "warn", "degraded", "refuse"}
        commits = sample(families, "corral_writer_commit_seconds", "corral_writer_commit_seconds_count")
        assert commits >= completed
        assert sample(families, "corral_writer_failed_commits", "corral_writer_failed_commits_total") == 0
        assert sample(families, "corral_writer_refused_jobs", "corral_writer_refused_jobs_total") == 0
        assert sample(families, "corral_idle_streams_open", "corral_idle_streams_open") == 0
        assert sample(families, "corral_refused_calls", "corral_refused_calls_total") == 0
        jobs = sample(families, "corral_writer_jobs_per_commit", "corral_writer_jobs_per_commit_sum")
        assert jobs >= commits


@pytest.mark.timeout(60)
def test_stop_ends_the_daemon_on_a_state_dir(tmp_path):
    state_dir = tmp_path / "state"
    with corral_serving("--state-dir", str(state_dir)) as (process, _):
        stopped = corral_run("stop", "--state-dir", str(state_dir))
        assert stopped.returncode == 0, stopped.stderr
        assert stopped.stdout.strip() == f"stopped corrald pid {process.pid}"
        # The lock goes with the daemon's last steps, so its exit follows at once, orderly (status 0).
        assert process.wait(timeout=10) == 0
        again = corral_run("stop", "--state-dir", str(state_dir))
        assert again.returncode == 0 and again.stdout.strip() == f"no corrald is running on {state_dir}"


@pytest.mark.timeout(30)
def test_stop_without_a_state_dir_is_a_usage_error(tmp_path):
    missing = tmp_path / "nowhere"
    stopped = corral_run("stop", "--state-dir", str(missing))
    assert stopped.returncode == 2
    assert stopped.stderr.strip() == f"corral: no state directory at {missing}"


@pytest.mark.timeout(60)
def test_the_ready_line_names_the_metrics_port_it_bound(tmp_path):
    with corral_serving("--state-dir", str(tmp_path / "state"), "--metrics", "127.0.0.1:0") as (process, ready):
        host, _, port = ready["metrics"].rpartition(":")
        assert host == "127.0.0.1" and int(port) > 0, ready
        families = scrape(int(port))  # the named port really serves the metrics
        assert "corral_writer_queue_depth" in families
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=15) == 0
