"""`corral demo` end to end, without a terminal, as `make demo` runs it in CI."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import corral
from corral.demo import DemoFailed, evidence, load_sample_dag
from corral.demo.report import expected_values

CORRAL = str(Path(sys.executable).with_name("corral"))


def run_demo(*args: str, timeout: float = 150.0) -> subprocess.CompletedProcess[str]:
    command = [CORRAL] if os.access(CORRAL, os.X_OK) else [sys.executable, "-m", "corral.cli"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("CORRAL_")}
    return subprocess.run(
        [*command, "demo", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.fixture
def short_dir() -> Iterator[Path]:
    """A directory with a short path: the daemon's Unix socket path must fit in ~100 characters."""
    base = "/tmp" if os.path.isdir("/tmp") else None
    path = Path(tempfile.mkdtemp(prefix="corral-t-", dir=base))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def run_dir_of(output: str) -> Path:
    match = re.search(r"run directory (\S+)", output)
    assert match, output
    return Path(match.group(1))


@pytest.mark.timeout(10)
def test_sample_dag_has_the_promised_shapes():
    specs = {spec.id: spec for spec in load_sample_dag().specs}
    assert 25 <= len(specs) <= 40
    dependents: dict[str, list[str]] = {}
    for spec in specs.values():
        for dep in spec.depends_on:
            dependents.setdefault(dep, []).append(spec.id)
    assert max(len(children) for children in dependents.values()) >= 5  # a fan-out
    assert dependents["schema"] == ["migrate", "seed"] and specs["db-ready"].depends_on == ("migrate", "seed")
    assert [spec.id for spec in specs.values() if spec.required_role] == ["security-review"]
    assert len({spec.priority for spec in specs.values()}) >= 4
    assert sum(b'"fail_first_attempt": true' in spec.payload for spec in specs.values()) == 1
    # One result an editor reviews (two teammates hold the role: never the author), one question to the Lead.
    assert [(spec.id, spec.review) for spec in specs.values() if spec.review is not None] == [
        ("changelog", corral.ReviewPolicy("editor", 3))
    ]
    assert [spec.id for spec in specs.values() if b'"ask":' in spec.payload] == ["release-notes"]
    assert [spec.id for spec in specs.values() if b'"discovers":' in spec.payload] == ["migrate"]
    assert set(expected_values(list(specs.values()))) == set(specs)  # every task computes a value from its deps


@pytest.mark.timeout(200)
def test_demo_runs_to_completion_without_a_terminal(short_dir):
    result = run_demo("--dir", str(short_dir), "--web", "127.0.0.1:0")  # as make demo runs it
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # The web board's address and a one-time login link, never the lead's token.
    board = re.search(r"^  web board (http://127\.0\.0\.1:\d+)$", out, re.MULTILINE)
    assert board, out
    assert re.search(rf"^  open {re.escape(board[1])}/login#ticket=corral-ticket-\S+ ", out, re.MULTILINE), out
    total = len(load_sample_dag().specs) + 1  # and backup-db, which migrate's teammate discovers
    # Plain progress lines, not a live board.
    assert "\x1b[" not in out
    assert re.search(rf"^\[\s*\d+\.\ds\] {total}/{total} completed \| completed {total}$", out, re.MULTILINE), out
    # What happened along the way.
    assert "eve submitted plan" in out and "lead approved eve's plan" in out
    assert "message from brook:" in out
    assert "integration attempt 1 failed (SimulatedFailure:" in out
    assert re.search(r"^\[\s*\d+\.\ds\] (cyd|dee) rejected changelog \(review round 1\): Say which", out, re.MULTILINE)
    assert re.search(r"^\[\s*\d+\.\ds\] (cyd|dee) approved changelog \(review round 2\)$", out, re.MULTILINE)
    assert re.search(r"^\[\s*\d+\.\ds\] \w+ asked about release-notes: Which version", out, re.MULTILINE)
    assert "the lead answered release-notes: Announce version 1.0." in out
    assert re.search(r"^\[\s*\d+\.\ds\] lead approved backup-db, proposed by \w+$", out, re.MULTILINE), out
    # The summary.
    assert f"corral demo: {total}/{total} tasks completed in" in out
    assert f"attempts    {total + 1} (1 retry: integration)" in out
    assert re.search(r"throughput  \d+\.\d cycles/s", out)
    assert re.search(r"writer      queue depth p99 \d", out)
    assert re.search(
        r"^  reviews     changelog: round 1 rejected by (cyd|dee) \('Say which services changed\.'\), "
        r"round 2 approved by (cyd|dee)$",
        out,
        re.MULTILINE,
    ), out
    assert (
        "  questions   release-notes asked 'Which version do the notes announce?', "
        "the lead answered 'Announce version 1.0.'"
    ) in out
    discovered = r"^  discovered  migrate: \w+ proposed backup-db and split its task on it; the lead approved$"
    assert re.search(discovered, out, re.MULTILINE), out
    # Every task wrote live output; perf's report went up as an artifact and publish read it.
    output = re.search(
        r"^  output      (\d+) tasks wrote (\d+) lines as they worked: `corral tasks output ID`", out, re.M
    )
    assert output and int(output[1]) == total and int(output[2]) >= 3 * total, out
    assert "or a task's drawer on the web board" in out
    artifact = re.search(
        r"^  artifacts   perf: perf-report\.json \(\d+ B, sha256 ([0-9a-f]{12})…\) read by (\w+) \(publish\) "
        r"and the lead: `corral artifacts get perf perf-report\.json`$",
        out,
        re.MULTILINE,
    )
    assert artifact, out
    assert re.search(
        r"^\[\s*\d+\.\ds\] \w+ attached perf-report\.json \(application/json, \d+ B\) to task perf", out, re.M
    )
    assert "every one approved its shutdown and exited 0" in out

    # The state directory is kept: a daemon on it shows every task completed.
    run_dir = run_dir_of(out)
    assert run_dir.parent == short_dir
    logs = sorted(path.name for path in (run_dir / "logs").iterdir())
    assert logs == ["ada.log", "brook.log", "cyd.log", "dee.log", "eve.log"]
    assert (run_dir / "state" / "lead.token").read_text().strip() not in out + result.stderr
    with corral.Lead.launch(run_dir / "state") as lead:
        tasks = list(lead.list_tasks())
        # The output and the artifact outlive the run: the board served again has them.
        publish_output = b"".join(chunk.data for chunk in lead.tail_output("publish", follow=False)).decode()
        (report,) = lead.get_task("perf").artifacts
        data = lead.get_artifact("perf", "perf-report.json", sha256=report.sha256)
    assert len(tasks) == total
    assert all(task.state is corral.TaskState.COMPLETED for task in tasks)
    by_id = {task.id: task for task in tasks}
    assert by_id["security-review"].owner == "dee"  # the only reviewer
    assert by_id["integration"].attempt == 2
    changelog = by_id["changelog"]
    assert changelog.review_rounds == 1 and b'"revised":"Say which services changed."' in changelog.result
    assert b'"answer":"Announce version 1.0."' in by_id["release-notes"].result
    backup, migrate = by_id["backup-db"], by_id["migrate"]
    assert backup.discovered_from == "migrate" and backup.proposed_by in {"ada", "brook", "cyd", "dee", "eve"}
    assert migrate.depends_on == ("schema", "backup-db") and b'"after":"backup-db"' in migrate.result
    # perf's report as the demo printed it, and as publish read it (its output says so).
    assert (report.media_type, report.sha256[:12]) == ("application/json", artifact[1])
    perf_report = json.loads(data)
    assert (perf_report["task"], perf_report["value"]) == ("perf", expected_values(load_sample_dag().specs)["perf"])
    publish = json.loads(by_id["publish"].result)
    assert (publish["by"], publish["artifacts_read"]) == (artifact[2], {"perf/perf-report.json": report.sha256})
    assert publish_output.startswith(f"{artifact[2]} took publish (attempt 1): ")
    assert f"read perf's perf-report.json ({report.size} bytes, sha256 {artifact[1]})\n" in publish_output
    assert publish_output.endswith(f"done: value {publish['value']}\n")


@pytest.mark.timeout(10)
def test_the_demo_fails_unless_output_and_the_artifact_round_tripped():
    when = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC)
    report = corral.Artifact("r.json", "application/json", 16, "ab" * 32, 1, when)
    specs = [
        corral.TaskSpec("make", payload=b'{"artifact": "r.json"}'),
        corral.TaskSpec("use", depends_on=("make",)),
    ]
    done = corral.TaskState.COMPLETED
    made = corral.Task("make", done, attempt=1, result=b'{"by": "ann"}', artifacts=(report,))
    read = b'{"by": "bob", "artifacts_read": {"make/r.json": "' + report.sha256.encode() + b'"}}'
    used = corral.Task("use", done, depends_on=("make",), attempt=1, result=read)
    output = {"make": b"ann took make\n", "use": b"bob took use\nread it\n"}
    downloads: dict[tuple[str, str], bytes | str] = {("make", "r.json"): b'{"task": "make"}'}

    (proof,) = evidence.check(evidence.Evidence(output, downloads), [made, used], specs)
    assert proof.line() == "make: r.json (16 B, sha256 abababababab…) read by bob (use) and the lead"
    assert (
        evidence.Evidence(output, downloads).tasks_with_output,
        evidence.Evidence(output, downloads).output_lines,
    ) == (2, 3)

    def refused(tasks: list[corral.Task], **changes: Any) -> str:
        gathered = evidence.Evidence(**{"output": output, "downloads": downloads, **changes})
        with pytest.raises(DemoFailed) as failed:
            evidence.check(gathered, tasks, specs)
        return str(failed.value)

    assert refused([made, used], output={**output, "use": b""}) == "1 task(s) wrote no live output: use"
    unattached = dataclasses.replace(made, artifacts=())
    assert "should have attached the artifact r.json, but its artifacts do not list it" in refused([unattached, used])
    assert "could not read artifact r.json of task make: gone" in refused(
        [made, used], downloads={("make", "r.json"): "gone"}
    )
    assert "is not that task's report" in refused([made, used], downloads={("make", "r.json"): b"{}"})
    unread = dataclasses.replace(used, result=b'{"by": "bob"}')
    assert "artifact r.json of task make was not read by its dependent(s) use" in refused([made, unread])


@pytest.mark.timeout(120)
def test_demo_fails_clearly_when_a_task_fails(short_dir):
    dag = short_dir / "doomed.toml"
    dag.write_text(
        '[[tasks]]\nid = "ok"\npayload = \'{"weight": 1}\'\n'
        '[[tasks]]\nid = "doomed"\nmax_attempts = 1\ndepends_on = ["ok"]\n'
        'payload = \'{"weight": 1, "reads": ["ok"], "fail_first_attempt": true}\'\n'
        '[[tasks]]\nid = "after"\ndepends_on = ["doomed"]\n',
        encoding="utf-8",
    )
    result = run_demo("--dir", str(short_dir), "--dag", str(dag), "--work-ms", "1")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith("corral: demo failed: 2 of 3 task(s) not completed: doomed is FAILED")
    assert "after is CANCELED" in first
    assert "run directory" in result.stderr


@pytest.mark.timeout(120)
def test_demo_times_out_with_a_clear_message(short_dir):
    dag = short_dir / "slow.toml"
    dag.write_text('[[tasks]]\nid = "slow"\n', encoding="utf-8")
    result = run_demo("--dir", str(short_dir), "--dag", str(dag), "--work-ms", "10000", "--timeout", "4")
    assert result.returncode == 1
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith("corral: demo failed: timed out after 4s waiting for "), result.stderr


@pytest.mark.timeout(30)
def test_demo_refuses_a_bad_dag_file(tmp_path):
    dag = tmp_path / "bad.toml"
    dag.write_text('[[tasks]]\nid = "x"\npriority = "high"\n', encoding="utf-8")
    result = run_demo("--dag", str(dag), "--dir", str(tmp_path))
    assert result.returncode == 1
    expected = f"corral: demo failed: {dag}: task 'x' (tasks[0]): priority: expected an integer, got string \"high\""
    assert result.stderr.strip() == expected


@pytest.mark.timeout(30)
def test_demo_refuses_a_run_directory_too_long_for_a_socket(tmp_path):
    deep = tmp_path / ("d" * 60)
    deep.mkdir()
    result = run_demo("--dir", str(deep))
    assert result.returncode == 1
    assert "longer than a Unix socket allows" in result.stderr and "pass a shorter --dir" in result.stderr


@pytest.mark.timeout(30)
def test_demo_refuses_a_role_no_teammate_holds(tmp_path):
    dag = tmp_path / "roles.yaml"
    dag.write_text("tasks:\n  - id: ship\n    required_role: deployer\n", encoding="utf-8")
    result = run_demo("--dag", str(dag), "--dir", str(tmp_path))
    assert result.returncode == 1
    assert (
        "task 'ship' requires role 'deployer', which no demo teammate holds (roles: editor, reviewer)" in result.stderr
    )


@pytest.mark.timeout(60)
def test_make_demo_installs_only_the_demo_extra(tmp_path: Path) -> None:
    # A fresh `make demo` (and demo-postgres) installs corral with its `demo` extra, not the
    # test toolchain; `make test` still installs everything (the `test` extra holds the demo's).
    make = shutil.which("make")
    if make is None:
        pytest.skip("make is not installed")
    root = Path(__file__).resolve().parents[2]
    for target in ("demo", "demo-postgres"):
        plan = subprocess.run(
            [make, "-n", "-C", str(root), target, f"VENV={tmp_path / 'venv'}"],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout
        installs = [line for line in plan.splitlines() if "pip install" in line]
        assert installs == [f"{tmp_path / 'venv'}/bin/python -m pip install --quiet -e '.[demo]'"], plan
    import tomllib

    extras = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert set(extras["demo"]) <= set(extras["test"])
