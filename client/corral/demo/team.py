"""The demo's teammates: who they are, and their processes.

Each teammate is a real subprocess (`python -m corral.demo.worker`) with its
own credential in CORRAL_ADDRESS / CORRAL_TOKEN; its output goes to
`logs/NAME.log` in the run directory.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import corral

STOP_GRACE_SECONDS = 3.0


class DemoFailed(Exception):
    """The demo did not do what it promised; the message says what and where to look."""


@dataclass(frozen=True)
class Member:
    """One demo teammate."""

    name: str
    roles: tuple[str, ...] = ()
    plan: str | None = None
    hello: str | None = None

    @property
    def blurb(self) -> str:
        notes = [f"role {', '.join(self.roles)}"] if self.roles else []
        if self.plan is not None:
            notes.append("plan approval required")
        if self.hello is not None:
            notes.append("messages the Lead")
        return f"{self.name} ({'; '.join(notes)})" if notes else self.name


TEAM: tuple[Member, ...] = (
    Member("ada"),
    Member("brook", hello="brook here: ready to work; I'll take whatever is ready"),
    # Two editors: a result is never reviewed by its author, so either can review the other's.
    Member("cyd", roles=("editor",)),
    Member("dee", roles=("reviewer", "editor")),
    Member("eve", plan="Take any ready task, read the results it depends on, report my share of the total."),
)


@dataclass
class Process:
    member: Member
    popen: subprocess.Popen[bytes]
    log_path: Path
    log_file: IO[bytes]
    released: bool = False  # True once the Lead asked it to stop: exiting is then expected

    def tail(self, lines: int = 12) -> str:
        self.log_file.flush()
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return "\n".join(text.rstrip().splitlines()[-lines:])

    def run_summary(self) -> dict[str, Any] | None:
        """The worker's final JSON line, if it wrote one."""
        for line in reversed(self.tail(5).splitlines()):
            if line.startswith("{"):
                try:
                    summary: dict[str, Any] = json.loads(line)
                except ValueError:
                    return None
                return summary
        return None


class Team:
    """Mints the teammates' credentials and runs their processes."""

    def __init__(
        self,
        lead: corral.Lead,
        log_dir: Path,
        *,
        work_ms: int,
        members: tuple[Member, ...] = TEAM,
        addresses: tuple[str, ...] = (),
    ):
        self._lead = lead
        self._log_dir = log_dir
        self._work_ms = work_ms
        self.members = members
        # The daemons the teammates connect to, taken in turn (default: the Lead's).
        self._addresses = addresses or (lead.address,)
        self.processes: dict[str, Process] = {}

    def start(self) -> None:
        self._log_dir.mkdir(parents=True, exist_ok=True)
        for index, member in enumerate(self.members):
            plan_first = member.plan is not None
            new = self._lead.add_teammate(member.name, roles=member.roles, require_plan_approval=plan_first)
            address = self._addresses[index % len(self._addresses)]
            self.processes[member.name] = self._spawn(member, self._lead.teammate_env(new, address=address))

    def _spawn(self, member: Member, env: dict[str, str]) -> Process:
        command = [sys.executable, "-m", "corral.demo.worker", "--name", member.name, "--work-ms", str(self._work_ms)]
        if member.plan is not None:
            command += ["--plan", member.plan]
        if member.hello is not None:
            command += ["--hello", member.hello]
        log_path = self._log_dir / f"{member.name}.log"
        log_file = open(log_path, "wb")  # noqa: SIM115 - closed in stop_all
        popen = subprocess.Popen(
            command,
            stdin=subprocess.DEVNULL,
            stdout=log_file,
            stderr=subprocess.STDOUT,
            env={**os.environ, **env, "PYTHONUNBUFFERED": "1"},
        )
        return Process(member, popen, log_path, log_file)

    def check_alive(self) -> None:
        """Raise DemoFailed if a teammate exited before it was asked to stop."""
        for process in self.processes.values():
            code = process.popen.poll()
            if code is not None and not process.released:
                raise DemoFailed(
                    f"teammate {process.member.name} exited early with status {code}; "
                    f"end of {process.log_path}:\n{process.tail()}"
                )

    def running(self) -> list[Process]:
        return [p for p in self.processes.values() if p.popen.poll() is None]

    def check_exits(self) -> None:
        """Raise DemoFailed unless every process exited with status 0."""
        for process in self.processes.values():
            code = process.popen.poll()
            if code != 0:
                raise DemoFailed(
                    f"teammate {process.member.name} exited with status {code}; "
                    f"end of {process.log_path}:\n{process.tail()}"
                )

    def stop_all(self) -> None:
        """Terminate whatever still runs (after a failure), then close the logs."""
        for process in self.running():
            process.popen.terminate()
        for process in self.processes.values():
            try:
                process.popen.wait(STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.popen.kill()
                process.popen.wait()
            process.log_file.close()
