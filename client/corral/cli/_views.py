"""`corral board`, `corral watch`, `corral stats`, `corral graph`."""

from __future__ import annotations

import itertools
import time

import click
from rich.table import Table

import corral
from corral._terminal.boardview import BoardModel, open_view
from corral._terminal.events import QUIET_SECONDS, REPLAY_LIMIT_SECONDS, EventPump, StreamEnded, describe, stamp
from corral._terminal.output import console, emit_json, emit_json_line, event_json, stats_json

from ._connect import CliError, connection_options, lead_session, resolve_target, translate_errors
from ._graph import dot, mermaid

REFRESH_SECONDS = 0.1
# Why tasks wait is not in the events (it changes with time and with who is
# online): the board asks for the first pending tasks this often.
WAITING_REFRESH_SECONDS = 2.0
WAITING_SHOWN = 50
# A board whose feed never goes quiet opens after this much of its replay, and the
# rest plays on in view.
CATCH_UP_SHOWN_AFTER_SECONDS = 3.0


@click.command("board")
@click.option("--plain", is_flag=True, help="Print progress lines even on a terminal.")
@click.option("--until-done", is_flag=True, help="Exit once the board has tasks and none is pending or running.")
@click.option(
    "--timeout",
    type=click.FloatRange(min=0, min_open=True),
    help="Leave after this many seconds (with --until-done: fail if not done by then).",
)
@connection_options
@click.pass_context
def board_command(ctx: click.Context, plain: bool, until_done: bool, timeout: float | None) -> None:
    """A live view of the board: progress, teammates, latest events (Ctrl-C to leave)."""
    target = resolve_target(ctx)
    deadline = time.monotonic() + timeout if timeout else None
    model = BoardModel()
    with translate_errors(target), lead_session(ctx) as lead, EventPump(target.address, target.token) as pump:
        model.expected_tasks = sum(lead.get_stats().tasks_by_state.values())
        for mate in lead.list_teammates():
            entry = model.mate(mate.name)
            entry.roles, entry.status = mate.roles, mate.status
        try:
            # The feed replays the board's history first: fold it in unseen, so the view
            # opens on the board as it is now (the live board's history panel keeps it).
            _catch_up(pump, model, limit=min(CATCH_UP_SHOWN_AFTER_SECONDS, _left(deadline)))
            model.caught_up()
        except StreamEnded as ended:
            raise ended.error or CliError("the daemon ended the watch stream") from None
        view = open_view(model, f"corral board · {target.address}", plain=plain)
        asked_waiting = 0.0
        try:
            while deadline is None or time.monotonic() < deadline:
                if time.monotonic() - asked_waiting >= WAITING_REFRESH_SECONDS:
                    pending = lead.list_tasks(states=[corral.TaskState.PENDING], page_size=WAITING_SHOWN)
                    model.set_waiting(itertools.islice(pending, WAITING_SHOWN))
                    asked_waiting = time.monotonic()
                view.update()
                if until_done and model.all_final() and lead.get_stats().active_tasks == 0:
                    return
                _pump_some(pump, model)
        except StreamEnded as ended:
            raise ended.error or CliError("the daemon ended the watch stream") from None
        except KeyboardInterrupt:
            return
        finally:
            view.close()
    if until_done:
        raise CliError(f"the board was not done within {timeout:g}s")


def _left(deadline: float | None) -> float:
    return REPLAY_LIMIT_SECONDS if deadline is None else max(deadline - time.monotonic(), 0.0)


def _pump_some(pump: EventPump, model: BoardModel) -> bool:
    """Apply every event that arrives within one refresh; True when any did."""
    event = pump.get(timeout=REFRESH_SECONDS)
    if event is None:
        return False
    while event is not None:
        model.apply(event)
        event = pump.get(timeout=0)
    return True


def _catch_up(pump: EventPump, model: BoardModel, limit: float = REPLAY_LIMIT_SECONDS) -> None:
    """Apply events until the feed goes quiet (see `corral._terminal.events`), for at most `limit` seconds."""
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline and (event := pump.get(timeout=QUIET_SECONDS)) is not None:
        model.apply(event)


@click.command("watch")
@click.option(
    "--after-seq",
    type=click.IntRange(min=0),
    default=0,
    show_default=True,
    help="Start after this event sequence number (0 replays everything).",
)
@click.option(
    "--follow/--no-follow",
    default=True,
    show_default=True,
    help="Keep following live events, or stop once the feed is caught up.",
)
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), help="Stop after this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per line.")
@connection_options
@click.pass_context
def watch_command(ctx: click.Context, after_seq: int, follow: bool, timeout: float | None, as_json: bool) -> None:
    """Tail the board's event feed."""
    target = resolve_target(ctx)
    deadline = time.monotonic() + timeout if timeout else None
    with translate_errors(target), EventPump(target.address, target.token, after_seq=after_seq) as pump:
        try:
            while deadline is None or (left := deadline - time.monotonic()) > 0:
                wait = QUIET_SECONDS if not follow else None
                if deadline is not None:
                    wait = min(wait, left) if wait is not None else left
                event = pump.get(timeout=wait)
                if event is None:
                    if not follow:
                        return
                    continue
                if as_json:
                    emit_json_line(event_json(event))
                else:
                    click.echo(f"{stamp(event)} {describe(event)}")
        except StreamEnded as ended:
            if ended.error is not None:
                raise ended.error from None
        except KeyboardInterrupt:
            return


@click.command("stats")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@connection_options
@click.pass_context
def stats_command(ctx: click.Context, as_json: bool) -> None:
    """Counts by state and status, and the daemon writer's health."""
    with lead_session(ctx) as lead:
        stats = lead.get_stats()
    if as_json:
        emit_json(stats_json(stats))
        return
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold")
    grid.add_column()
    counts = stats_json(stats)
    grid.add_row("tasks", _counts(counts["tasks_by_state"]))
    grid.add_row("teammates", _counts(counts["teammates_by_status"]))
    grid.add_row("open streams", str(stats.open_streams))
    usage = stats.usage
    grid.add_row(
        "usage",
        f"{usage.input_tokens} input tokens, {usage.output_tokens} output tokens, {usage.cost_micros} cost micros",
    )
    writer = stats.writer
    grid.add_row(
        "writer queue", f"now {writer.queue_depth}, p50 {writer.queue_depth_p50:g}, p99 {writer.queue_depth_p99:g}"
    )
    grid.add_row(
        "commits",
        f"{writer.commits} ({writer.jobs} jobs, mean batch {writer.mean_batch_size:.2f}), "
        f"latency p50 {writer.commit_latency_p50_ms:.2f} ms, p99 {writer.commit_latency_p99_ms:.2f} ms",
    )
    grid.add_row(
        "trouble",
        f"busy retries {writer.busy_retries}, failed commits {writer.failed_commits}, "
        f"refused jobs {writer.refused_jobs}",
    )
    pg = stats.postgres
    if pg is not None:
        grid.add_row(
            "postgresql",
            f"{pg.daemons} daemon(s); wake-ups {'heard' if pg.listener_connected else 'NOT HEARD'} "
            f"({pg.notifies_sent} sent, {pg.notifies_heard} heard, {pg.listener_reconnects} reconnects)",
        )
        grid.add_row(
            "vacuum",
            f"oldest open transaction {pg.oldest_transaction_age_s:.1f} s, "
            f"task rows {pg.task_live_tuples} live, {pg.task_dead_tuples} dead",
        )
    console().print(grid)


def _counts(by_name: dict[str, int]) -> str:
    shown = [f"{name} {count}" for name, count in by_name.items() if count]
    return ", ".join(shown) or "none"


@click.command("graph")
@click.option("--format", "fmt", type=click.Choice(["mermaid", "dot"]), default="mermaid", show_default=True)
@click.option(
    "--state",
    "states",
    multiple=True,
    type=click.Choice([s.name.lower() for s in corral.TaskState]),
    help="Only tasks in this state (repeatable); edges to others become stubs.",
)
@connection_options
@click.pass_context
def graph_command(ctx: click.Context, fmt: str, states: tuple[str, ...]) -> None:
    """Print the task DAG with each task's state (Mermaid or Graphviz DOT)."""
    wanted = [corral.TaskState[name.upper()] for name in states]
    with lead_session(ctx) as lead:
        tasks = list(lead.list_tasks(states=wanted))
    click.echo(mermaid(tasks) if fmt == "mermaid" else dot(tasks), nl=False)
