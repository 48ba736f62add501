"""How big each measurement is: the full run and the `--quick` smoke run."""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Sizes:
    teammates: tuple[int, ...] = (1, 8, 32, 128)
    dags: tuple[str, ...] = ("independent", "layered")  # bench.dags.DAGS
    # Tasks per end-to-end run, by teammate count (multiples of the layer width, 64).
    tasks_for: tuple[tuple[int, int], ...] = ((1, 512), (8, 1536), (32, 2048), (128, 2560))
    cycles: int = 2048  # echo-floor cycles per run
    run_deadline_s: float = 90.0  # hard bound on any one load run
    client_processes: int = 2  # teammates are spread over this many client processes
    normal_at: int = 32  # also measure corral at synchronous=NORMAL with this many teammates
    normal: bool = True  # the synchronous=NORMAL diagnostics (e2e, latency) at all
    paired_teammates: int = 32  # targets (1) are measured back to back at this count
    tutorial_processes: tuple[int, ...] = (2, 8, 20)
    sdk_transports: tuple[str, ...] = ("session", "idle")  # the SDK's own loop, in the paired rounds
    tutorial_tasks: int = 2048
    tutorial_layered_at: int = 8  # the layered DAG for the tutorial design at this process count
    huey_processes: tuple[int, ...] = (2, 8, 20)
    huey_pairs: int = 2048
    floor_tasks: int = 2048  # writer-floor tasks per run
    latency_samples: int = 200
    poll_interval_s: float = 5.0
    poll_samples: int = 4
    board_sizes: tuple[int, ...] = (1_000, 100_000, 1_000_000)
    claim_samples: int = 200
    streams: int = 1_000
    unary_samples: int = 1_000
    busy_teammates: int = 20
    busy_tasks: int = 2048
    submissions: int = 1_000
    big_batch_tasks: int = 10_000  # the largest batch the limits admit: 10,000 tasks
    big_batch_deps_each: int = 5  # ... with 5 dependencies each (50,000, the limit)
    # The task-semantics section (bench/semantics.py): claims on a board of this many
    # ready tasks, plain and with delayed tasks and limited keys beside them...
    semantics_ready: int = 10_000
    semantics_delayed: int = 100_000
    semantics_keys: int = 1_000
    semantics_limit: int = 2
    semantics_claims: int = 1_000  # timed claims per board per round
    semantics_e2e_keys: int = 64  # ... and Session cycles with every task carrying one of these keys
    # The web board (bench/web.py): cycles at this many teammates with 0 and with this many
    # open boards, commit -> page update samples, and first renders of these board sizes.
    web_teammates: int = 32
    web_tasks: int = 2048
    web_boards: int = 10
    web_update_samples: int = 200
    web_render_sizes: tuple[int, ...] = (1_000, 10_000)
    mcp_cycles: int = 1_000  # next_item + complete_task cycles per variant per round (bench/mcp.py)
    # PostgreSQL boards (bench/postgres.py): Session cycles at these teammate counts on SQLite, on one
    # PostgreSQL daemon and on two sharing the board; cross-daemon ready -> claim samples per round;
    # claim latency on boards of these sizes (built with CreateTasks of 10,000) with this many claims.
    pg_teammates: tuple[int, ...] = (8, 32)
    pg_latency_samples: int = 300
    pg_board_sizes: tuple[int, ...] = (1_000, 100_000)
    pg_claim_samples: int = 200
    # ... reclaims of a lease whose daemon was SIGKILLed, through the other daemon; a REPEATABLE READ
    # snapshot held this long while this many Session cycles churn (claim latency before, held, after);
    # Session cycles at this many teammates with the board lock, NOTIFY or group commit switched off.
    pg_reclaim_samples: int = 20
    pg_mvcc_hold_s: float = 60.0
    pg_mvcc_churn: int = 20_000
    pg_switch_teammates: int = 32
    # Discovered work (bench/proposals.py): claims on a board of this many ready tasks, plain and
    # with this many PROPOSED tasks before them; AddDependencies calls on a board of this many tasks.
    proposals_ready: int = 10_000
    proposals_proposed: int = 1_000
    proposals_claims: int = 1_000  # timed claims per board per round
    proposals_board: int = 100_000
    proposals_depend_samples: int = 1_000  # AddDependencies calls per round
    # Path leases (bench/leases.py): claims on a board of this many ready tasks beside this many
    # IN_PROGRESS, with resources and without.
    leases_ready: int = 10_000
    leases_held: int = 1_000
    leases_claims: int = 1_000  # timed claims per board per round
    # Live output (bench/output.py): Session cycles beside this many teammates each appending
    # this many bytes to their task's output this often.
    output_appenders: int = 32
    output_append_bytes: int = 1024
    output_append_every_s: float = 0.1

    def tasks(self, teammates: int) -> int:
        table = dict(self.tasks_for)
        return table.get(teammates, max(table.values()))


FULL = Sizes()

QUICK = Sizes(
    teammates=(4,),
    dags=("independent",),
    tasks_for=((4, 64),),
    cycles=128,
    run_deadline_s=20.0,
    client_processes=1,
    normal_at=4,
    normal=False,
    paired_teammates=4,
    tutorial_processes=(2,),
    sdk_transports=("session",),
    tutorial_tasks=64,
    tutorial_layered_at=2,
    huey_processes=(2,),
    huey_pairs=64,
    floor_tasks=64,
    latency_samples=10,
    poll_interval_s=0.2,
    poll_samples=2,
    board_sizes=(200, 1_000),
    claim_samples=20,
    streams=20,
    unary_samples=50,
    busy_teammates=4,
    busy_tasks=64,
    submissions=50,
    big_batch_tasks=500,
    semantics_ready=200,
    semantics_delayed=2_000,
    semantics_keys=20,
    semantics_claims=40,
    semantics_e2e_keys=8,
    web_tasks=512,
    web_update_samples=30,
    mcp_cycles=30,
    pg_teammates=(4,),
    pg_latency_samples=20,
    pg_board_sizes=(200, 2_000),
    pg_claim_samples=20,
    pg_reclaim_samples=1,
    pg_mvcc_hold_s=1.0,
    pg_mvcc_churn=100,
    pg_switch_teammates=4,
    proposals_ready=200,
    proposals_proposed=50,
    proposals_claims=40,
    proposals_board=2_000,
    proposals_depend_samples=40,
    leases_ready=200,
    leases_held=50,
    leases_claims=40,
    output_appenders=4,
)
