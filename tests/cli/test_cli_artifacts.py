"""`corral artifacts list ID [--json]` and `corral artifacts get ID NAME [-o FILE]`:
a task's artifacts as a table or JSON, and one's bytes on stdout or written whole to
a file; `tasks show` lists them; unknown tasks and names are the CLI's one error
line, exit 1, with no file written."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

import corral
from tests.support import task_reached, watch_until

pytestmark = pytest.mark.timeout(60)

REPORT = "# Report\nall green é\n"
BINARY = bytes(range(256)) * 4


def _attach(lead: corral.Lead, start_teammate) -> None:
    lead.create_tasks([corral.TaskSpec("t")])

    def handler(task: corral.Task) -> str:
        claim = corral.current_claim()
        claim.put_artifact("report.md", REPORT, media_type="text/markdown")
        claim.put_artifact("bin/data.bin", BINARY)
        return "ok"

    start_teammate("ann", handler)
    watch_until(lead, task_reached("t", corral.TaskState.COMPLETED))


def test_list_shows_a_table_and_json(cli, lead, start_teammate):
    _attach(lead, start_teammate)
    table = cli("artifacts", "list", "t", env={"COLUMNS": "120"})
    assert table.exit_code == 0, table.stderr
    lines = table.stdout.splitlines()
    header = next(line for line in lines if "name" in line)
    assert all(column in header for column in ("media type", "size", "sha256", "attempt", "time"))
    (report_row,) = [line for line in lines if "report.md" in line]
    sha = hashlib.sha256(REPORT.encode()).hexdigest()
    assert "text/markdown" in report_row and sha[:12] in report_row and sha[:13] not in report_row
    assert "1.0 KiB" in next(line for line in lines if "bin/data.bin" in line)
    narrow = cli("artifacts", "list", "t", env={"COLUMNS": "80"}).stdout
    assert sha[:12] in narrow and "bin/data.bin" in narrow, "the short columns and the name stay whole"

    listed = cli.json("artifacts", "list", "t")
    assert [a["name"] for a in listed] == ["bin/data.bin", "report.md"]
    assert listed[1] == {
        "name": "report.md",
        "media_type": "text/markdown",
        "size": len(REPORT.encode()),
        "sha256": sha,
        "attempt": 1,
        "create_time": listed[1]["create_time"],
    }
    assert listed[1]["create_time"].endswith("Z")
    assert cli.json("tasks", "show", "t")["artifacts"] == listed
    shown = cli("tasks", "show", "t", env={"COLUMNS": "120"})
    assert "artifacts" in shown.stdout and "report.md" in shown.stdout and "bin/data.bin" in shown.stdout


def test_watch_tells_each_artifact_added(cli, lead, start_teammate):
    _attach(lead, start_teammate)
    lines = [json.loads(line) for line in cli("watch", "--no-follow", "--json").stdout.splitlines()]
    added = [line for line in lines if line["type"] == "artifact_added"]
    assert [(a["task_id"], a["teammate"], a["artifact"]["name"]) for a in added] == [
        ("t", "ann", "report.md"),
        ("t", "ann", "bin/data.bin"),
    ]
    assert added[0]["artifact"]["sha256"] == hashlib.sha256(REPORT.encode()).hexdigest()
    text = cli("watch", "--no-follow").stdout
    assert "ann attached report.md (text/markdown, 22 B) to task t, attempt 1" in text


def test_list_of_a_task_without_artifacts_says_so(cli, lead):
    lead.create_tasks([corral.TaskSpec("empty")])
    assert cli("artifacts", "list", "empty").stdout.strip() == "task empty has no artifacts"
    assert cli.json("artifacts", "list", "empty") == []


def test_get_prints_the_bytes_or_writes_a_file_whole(cli, lead, start_teammate, tmp_path: Path):
    _attach(lead, start_teammate)
    out = cli("artifacts", "get", "t", "bin/data.bin")
    assert out.exit_code == 0, out.stderr
    assert out.stdout_bytes == BINARY
    target = tmp_path / "report.md"
    written = cli("artifacts", "get", "t", "report.md", "-o", str(target))
    assert written.exit_code == 0, written.stderr
    assert written.stdout_bytes == b""
    assert target.read_text(encoding="utf-8") == REPORT
    assert sorted(os.listdir(tmp_path)) == ["report.md", "state"], "no temporary file left"


def test_errors_are_one_line_and_write_no_file(cli, lead, start_teammate, error_line, tmp_path: Path):
    _attach(lead, start_teammate)
    assert "NOT_FOUND" in error_line(cli("artifacts", "list", "nope"))
    missing = cli("artifacts", "get", "t", "nope.txt", "-o", str(tmp_path / "nope.txt"))
    assert missing.exit_code == 1 and "ARTIFACT_NOT_FOUND" in error_line(missing)
    assert not (tmp_path / "nope.txt").exists()
    assert sorted(os.listdir(tmp_path)) == ["state"], "no temporary file left"
    to_stdout = cli("artifacts", "get", "t", "nope.txt")
    assert "ARTIFACT_NOT_FOUND" in error_line(to_stdout) and to_stdout.stdout_bytes == b""
    assert cli("artifacts", "get", "t").exit_code == 2  # usage: NAME is missing
