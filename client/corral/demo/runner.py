"""`corral demo`: a daemon, the sample DAG, a team of teammate processes, a live board.

The Lead side is one loop on the main thread: take the watch events that
arrived (a pump thread follows the stream), fold them into the board, react
(approve plans, answer the questions teammates ask, approve the tasks they
discover), redraw, check the teammate
processes and the deadline.
Every wait is bounded by the run's deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.resources
import os
import select
import shlex
import signal
import sys
import tempfile
import threading
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import IO

import corral
from corral._dagfile import DagError, DagFile, load_dag, parse_dag
from corral._terminal.boardview import BoardModel, open_view
from corral._terminal.events import EventPump, StreamEnded
from corral._terminal.weblink import board_url, one_time_link

from .evidence import check, gather
from .report import DemoReport, build_report, verify
from .team import TEAM, DemoFailed, Team

SAMPLE_DAG = "sample_dag.toml"
# sun_path holds 108 bytes on Linux, 104 on macOS, including the final NUL.
MAX_SOCKET_PATH = 103
TICK_SECONDS = 0.1
INTERRUPT_CHECK_S = 0.1  # how often the last prompt looks for a Ctrl-C that came between its selects
SHUTDOWN_GRACE_SECONDS = 30.0
# What the demo's Lead answers a teammate's question (the sample DAG's release-notes asks one).
LEAD_ANSWER = "Announce version 1.0."
# Why the demo's Lead approves what a teammate discovered (the sample DAG's migrate finds backup-db).
LEAD_APPROVAL = "Yes: do it first."


class Deadline:
    """The run's time budget."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._end = time.monotonic() + seconds

    def left(self) -> float:
        return max(self._end - time.monotonic(), 0.0)

    def check(self, waiting_for: str) -> None:
        if self.left() <= 0:
            raise DemoFailed(f"timed out after {self.seconds:g}s waiting for {waiting_for}")


def load_sample_dag() -> DagFile:
    """The DAG shipped with the package."""
    text = importlib.resources.files("corral.demo").joinpath(SAMPLE_DAG).read_text(encoding="utf-8")
    return parse_dag(text, "toml", name=SAMPLE_DAG)


class Conductor:
    """The Lead's loop: follow events, approve plans, answer questions, draw the board,
    shut the team down."""

    def __init__(
        self,
        lead: corral.Lead,
        team: Team,
        deadline: Deadline,
        *,
        task_count: int,
        plain: bool,
        out: IO[str],
        started: float,
    ) -> None:
        self.model = BoardModel(expected_tasks=task_count)
        self.approved: list[str] = []
        self.answered: list[tuple[corral.QuestionAsked, str]] = []  # each question and the Lead's answer
        self.reviews: list[corral.ReviewDecided] = []
        self.proposals: list[corral.TasksProposed] = []  # each proposal the Lead approved
        self._lead = lead
        self._team = team
        self._deadline = deadline
        self._task_count = task_count
        self._decided: set[str] = set()
        self._decided_seqs: set[int] = set()
        self._pump = EventPump(lead.address, lead.token)
        self._view = open_view(self.model, "corral demo", plain=plain, out=out, started=started)

    def run(self) -> None:
        """Until every task is final, then until every teammate has shut down."""
        try:
            self._until(self._work_done, lambda: f"every task to finish ({self._progress()})")
            self._shut_down_team()
        finally:
            self._view.close()
            self._pump.close()

    def _progress(self) -> str:
        done = self.model.count(corral.TaskState.COMPLETED)
        return f"{done}/{self._task_count} completed"

    def _until(self, done: Callable[[], bool], waiting_for: Callable[[], str]) -> None:
        while not done():
            self._deadline.check(waiting_for())
            self._step()

    def _step(self) -> None:
        try:
            event = self._pump.get(timeout=min(TICK_SECONDS, max(self._deadline.left(), 0.001)))
            while event is not None:
                self.model.apply(event)
                self._react(event)
                event = self._pump.get(timeout=0)
        except StreamEnded as ended:
            raise DemoFailed(f"the daemon ended the watch stream: {ended}") from None
        self._view.update()
        self._team.check_alive()

    def _react(self, event: corral.WatchEvent) -> None:
        if isinstance(event, corral.PlanSubmitted) and event.plan_id not in self._decided:
            self._decided.add(event.plan_id)
            self._lead.decide_plan(event.plan_id, approve=True, feedback="Approved: go ahead.")
            self.approved.append(event.author)
            self.model.note(f"lead approved {event.author}'s plan {event.plan_id}")
        elif isinstance(event, corral.QuestionAsked) and event.seq not in self._decided_seqs:
            # The watch follows the board from its start: each question is seen once, and
            # answered at once (the task waits NEEDS_INPUT, claimed by no one, until then).
            self._decided_seqs.add(event.seq)
            self._lead.answer_question(event.task_id, LEAD_ANSWER)
            self.answered.append((event, LEAD_ANSWER))
        elif isinstance(event, corral.ReviewDecided):
            self.reviews.append(event)
        elif isinstance(event, corral.TasksProposed) and event.needs_decision and event.seq not in self._decided_seqs:
            # A teammate found work its task needs: the demo's Lead approves it (the split
            # task waits for it, PENDING, and comes back with its result).
            self._decided_seqs.add(event.seq)
            with contextlib.suppress(corral.FailedPrecondition):  # decided already (a replayed event)
                self._lead.decide_proposals(list(event.task_ids), True, LEAD_APPROVAL)
                self.proposals.append(event)
                self.model.note(f"lead approved {', '.join(event.task_ids)}, proposed by {event.teammate}")
        elif isinstance(event, corral.TaskChanged) and _waits_for_the_lead(event.task):
            # A DAG of one's own may have the Lead review (`review = {}`): the demo's Lead approves.
            with contextlib.suppress(corral.FailedPrecondition):  # decided already (a replayed event)
                self._lead.review_task(event.task.id, corral.Approve("the demo's lead approves"))

    def _work_done(self) -> bool:
        if len(self.model.tasks) < self._task_count or not self.model.all_final():
            return False
        return self._lead.get_stats().active_tasks == 0  # the feed is a hint; the board decides

    def _shut_down_team(self) -> None:
        grace = max(min(SHUTDOWN_GRACE_SECONDS, self._deadline.left()), 1.0)
        requests: dict[str, str] = {}
        for name, process in self._team.processes.items():
            process.released = True  # from here on, exiting is what it should do
            requests[name] = self._lead.request_shutdown(name, reason="every task is finished", grace=grace)
            self.model.note(f"lead asked {name} to shut down")
        answers = self.model.answers

        def answered() -> bool:
            return all(request_id in answers for request_id in requests.values())

        self._until(answered, lambda: f"shutdown answers from {', '.join(self._unanswered(requests))}")
        refused = [answers[request_id].teammate for request_id in requests.values() if not answers[request_id].approve]
        if refused:
            raise DemoFailed(f"teammate(s) refused to shut down: {', '.join(refused)}")
        self._until(
            lambda: not self._team.running(),
            lambda: f"teammate processes to exit ({', '.join(p.member.name for p in self._team.running())})",
        )

    def _unanswered(self, requests: dict[str, str]) -> list[str]:
        return [name for name, request_id in requests.items() if request_id not in self.model.answers]


def _waits_for_the_lead(task: corral.Task) -> bool:
    """True for a result waiting IN_REVIEW for the Lead's review (no reviewer role)."""
    in_review = task.state is corral.TaskState.IN_REVIEW
    return in_review and task.review is not None and not task.review.reviewer_role


def run_demo(
    *,
    timeout: float = 120.0,
    work_ms: int = 100,
    dag_file: Path | None = None,
    base_dir: Path | None = None,
    plain: bool = False,
    out: IO[str] | None = None,
    web: str | None = None,
    store: str | None = None,
    keep_schema: bool = False,
) -> DemoReport:
    """Run the whole demo; returns its report, raises DemoFailed (run directory kept).

    With `store` (a postgresql:// DSN) the board is kept in PostgreSQL, in a new schema
    of its own, and two daemons serve it: the teammates are split between them. The
    schema is dropped at the end unless `keep_schema`."""
    out = out or sys.stdout
    started = time.monotonic()
    deadline = Deadline(timeout)
    try:
        dag = load_dag(dag_file) if dag_file is not None else load_sample_dag()
    except DagError as exc:
        raise DemoFailed(str(exc)) from None
    _check_roles(dag)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path(tempfile.mkdtemp(prefix=f"corral-demo-{stamp}-", dir=base_dir)).absolute()
    say = _printer(out)
    say(f"corral demo: {len(dag.specs)} tasks from {dag.name}; teammates {', '.join(m.blurb for m in TEAM)}")
    say(f"  run directory {run_dir} (state/ and logs/ are kept)")
    board = PostgresBoard(store, f"demo_{stamp.replace('-', '_')}_{os.getpid()}", keep_schema) if store else None
    if board is not None:
        fate = "kept" if keep_schema else "dropped at the end; --keep-schema keeps it"
        say(f"  PostgreSQL board in schema {board.schema}, served by two daemons (the schema is {fate})")
    try:
        return _run(dag, run_dir, deadline, started, work_ms=work_ms, plain=plain, out=out, web=web, board=board)
    except corral.CorralError as exc:
        raise DemoFailed(f"{exc} (run directory {run_dir})") from None
    except DemoFailed as exc:
        raise DemoFailed(f"{exc}\n(run directory {run_dir}: state/ for the board, logs/ per teammate)") from None
    finally:
        if board is not None and not keep_schema:
            board.drop()  # the daemons have stopped: nothing serves it any more


def _run(
    dag: DagFile,
    run_dir: Path,
    deadline: Deadline,
    started: float,
    *,
    work_ms: int,
    plain: bool,
    out: IO[str],
    web: str | None = None,
    board: PostgresBoard | None = None,
) -> DemoReport:
    say = _printer(out)
    with _launch(run_dir, deadline, web, board) as lead, contextlib.ExitStack() as others:
        say(f"  corrald pid {lead.pid} listening on {lead.address}")
        addresses: tuple[str, ...] = (lead.address,)
        if board is not None:
            second = others.enter_context(_second_daemon(run_dir, deadline, board))
            say(f"  corrald pid {second.pid} listening on {second.address} (the same board)")
            addresses = (lead.address, second.address)
        if web is not None:
            _announce_board(lead, run_dir / "state", say)
            _pause("press Enter to start the team (the board fills in live)")
        lead.create_tasks(dag.specs)
        team = Team(lead, run_dir / "logs", work_ms=work_ms, addresses=addresses)
        try:
            team.start()
            conductor = Conductor(
                lead, team, deadline, task_count=len(dag.specs), plain=plain, out=out, started=started
            )
            conductor.run()
            tasks = list(lead.list_tasks())
            stats = lead.get_stats()
            evidence = gather(lead, tasks, dag.specs)  # the output and artifacts, read while the daemon runs
        finally:
            team.stop_all()
        if web is not None:
            _pause("the board stays up: press Enter (or Ctrl-C) to stop the daemon", interrupt_goes_on=True)
        wall = time.monotonic() - started
    team.check_exits()
    verify(tasks, dag.specs, conductor.model, team.members, answer=LEAD_ANSWER)
    proofs = check(evidence, tasks, dag.specs)
    report = build_report(
        run_dir=run_dir,
        tasks=tasks,
        model=conductor.model,
        stats=stats,
        wall_seconds=wall,
        approved=conductor.approved,
        answered=conductor.answered,
        reviews=conductor.reviews,
        proposals=conductor.proposals,
        serve_args=board.serve_hint() if board is not None else "",
        evidence=evidence,
        artifacts=proofs,
    )
    for line in report.lines():
        say(line)
    return report


def _announce_board(lead: corral.Lead, state_dir: Path, say: Callable[[str], None]) -> None:
    """The web board's address and a one-time login link (the lead's token stays in the state dir)."""
    url = board_url(state_dir)
    if url is None:
        raise DemoFailed("corrald started without its web board")
    try:
        link = one_time_link(url, (state_dir / "lead.token").read_text().strip())
    except OSError as exc:
        raise DemoFailed(f"the web board at {url} gave no login link: {exc}") from None
    say(f"  web board {url}")
    say(f"  open {link} (logs in once, within two minutes)")


def _check_roles(dag: DagFile) -> None:
    """Refuse at once a task no demo teammate may take, or whose result none may review
    (it would wait until the timeout)."""
    roles = {role for member in TEAM for role in member.roles}
    for spec in dag.specs:
        if spec.required_role and spec.required_role not in roles:
            raise DemoFailed(
                f"{dag.name}: task {spec.id!r} requires role {spec.required_role!r}, which no demo teammate holds "
                f"(roles: {', '.join(sorted(roles))})"
            )
        reviewer_role = spec.review.reviewer_role if spec.review is not None else ""
        if reviewer_role and reviewer_role not in roles:
            raise DemoFailed(
                f"{dag.name}: task {spec.id!r} is reviewed by role {reviewer_role!r}, which no demo teammate holds "
                f"(roles: {', '.join(sorted(roles))})"
            )


def _pause(prompt: str, *, interrupt_goes_on: bool = False) -> None:
    """On a terminal, waits for Enter, so the person at the browser can watch; elsewhere goes on.

    With `interrupt_goes_on`, Ctrl-C is an answer too (the run is over: all that is left
    is to stop the daemon, cleanly, which Ctrl-C's SIGINT to corrald starts as well)."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        return
    if interrupt_goes_on:
        _wait_for_enter_or_interrupt(prompt)
        return
    try:
        input(f"  {prompt} ")
    except EOFError:
        pass


def _wait_for_enter_or_interrupt(prompt: str) -> None:
    """Waits for a line on stdin or a SIGINT. Not `input()`: a SIGINT that lands after
    the prompt is written but before the read begins is only seen at the next key, so a
    quick Ctrl-C would leave the demo waiting; here the handler sets a flag the wait
    looks at between short selects."""
    interrupted = threading.Event()
    previous = signal.signal(signal.SIGINT, lambda _signum, _frame: interrupted.set())
    try:
        print(f"  {prompt} ", end="", flush=True)
        while not interrupted.is_set():
            readable, _, _ = select.select([sys.stdin], [], [], INTERRUPT_CHECK_S)
            if readable:
                sys.stdin.readline()
                return
        print(flush=True)  # the prompt's line ends after the ^C
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclasses.dataclass(frozen=True)
class PostgresBoard:
    """Where a demo on PostgreSQL keeps its board: the DSN and a schema of its own."""

    dsn: str
    schema: str
    keep: bool = False

    def serve_args(self) -> list[str]:
        return ["--store", self.dsn, "--pg-schema", self.schema]

    def serve_hint(self) -> str | None:
        """The `corral serve` options that serve this board again (the DSN without its
        password); None when the schema is dropped at the end."""
        if not self.keep:
            return None
        return f" --store {shlex.quote(_without_password(self.dsn))} --pg-schema {self.schema}"

    def drop(self) -> None:
        """Drops the run's schema. The demo made it and names it; corrald has no verb for
        ending a board, and the demo extra brings psycopg."""
        import psycopg  # noqa: PLC0415 (only a demo on PostgreSQL loads it)
        from psycopg import sql  # noqa: PLC0415

        try:
            with psycopg.connect(self.dsn, autocommit=True, connect_timeout=10) as conn:
                conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(self.schema)))
        except psycopg.Error as exc:
            print(f"corral demo: could not drop schema {self.schema}: {exc}", file=sys.stderr, flush=True)


def _without_password(dsn: str) -> str:
    parts = urllib.parse.urlsplit(dsn)
    if parts.password is None:
        return dsn
    netloc = parts.netloc.replace(f":{parts.password}@", ":PASSWORD@", 1)
    return urllib.parse.urlunsplit(parts._replace(netloc=netloc))


def _second_daemon(run_dir: Path, deadline: Deadline, board: PostgresBoard) -> corral.Lead:
    """Another daemon of the same PostgreSQL board, on a state directory of its own (the board's
    lead token is the one the first daemon wrote)."""
    try:
        return corral.Lead.launch(
            run_dir / "state-2",
            extra_args=board.serve_args(),
            ready_timeout=max(min(30.0, deadline.left()), 1.0),
            lead_token=(run_dir / "state" / "lead.token").read_text().strip(),
        )
    except corral.CorralError as exc:
        raise DemoFailed(f"the second daemon did not start: {exc}") from None


def _launch(
    run_dir: Path, deadline: Deadline, web: str | None = None, board: PostgresBoard | None = None
) -> corral.Lead:
    """Start corrald on run_dir/state; a failure keeps the daemon's stderr in a file."""
    state_dir = run_dir / "state"
    socket_path = state_dir / "corral.sock"
    if len(str(socket_path)) > MAX_SOCKET_PATH:
        raise DemoFailed(
            f"the daemon's socket path {socket_path} is longer than a Unix socket allows "
            f"({len(str(socket_path))} > {MAX_SOCKET_PATH} characters); pass a shorter --dir"
        )
    try:
        extra = ["--web", web] if web is not None else []
        if board is not None:
            extra += board.serve_args()
        return corral.Lead.launch(state_dir, extra_args=extra, ready_timeout=max(min(30.0, deadline.left()), 1.0))
    except corral.CorralError as exc:
        log = run_dir / "corrald-start.log"
        log.write_text(str(exc), encoding="utf-8")
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        cause = lines[-1] if len(lines) > 1 else ""
        raise DemoFailed(f"{lines[0] if lines else exc} {cause} (full output in {log})") from None


def _printer(out: IO[str]) -> Callable[[str], None]:
    def say(line: str) -> None:
        print(line, file=out, flush=True)

    return say
