"""Usage and budgets: what teammates report spending, and the budget gate (design §5 step 3).

A report (`charge`) is added to its task's and its teammate's sums inside the
job of the completion, failure or renewal that carried it, so the delivery
check that follows in the same job (a completion's handoff) already sees the
gate closed. The board's sum is the teammates' (removed ones included). A
teammate's own budget is NULL when it has none; the "*" default lives in meta.
"""

from __future__ import annotations

import sqlite3

from .. import errors
from ..model import Budget, BudgetExhausted, Usage
from ..txn import Txn
from .dialect import sql
from .events import emit

# A sum of usage stops at the largest int64: SQLite would turn an overflowing
# sum into a REAL, PostgreSQL refuses it (bigint out of range), and a report is
# only checked to be non-negative, so any two counts may pass it. Every SQL
# expression that adds usage adds through the drivers' capped sums
# (`USAGE_SUMS`), and the budget gate (`GATE_CLOSED`) reads the capped sum, which
# reaches a budget (at most INT64_MAX) exactly when the true sum does.
INT64_MAX = 2**63 - 1


def _standing(row: tuple) -> tuple[str, Usage, Budget]:
    name, input_tokens, output_tokens, cost, model, max_cost, max_tokens = row
    return name, Usage(input_tokens, output_tokens, cost, model), Budget(max_cost, max_tokens)


def charge(tx: Txn, teammate: str, task_seq: int, usage: Usage) -> None:
    """Adds a report to the task's and the teammate's sums (`charge_teammate`)."""
    tx.conn.execute(sql(tx.conn).usage.CHARGE_TASK, (*_sum_params(usage), task_seq))
    charge_teammate(tx, teammate, usage)


def task_sums(conn: sqlite3.Connection, usage: Usage | None) -> tuple[str, tuple]:
    """The SET items (with a leading comma) and parameters that add a report to a
    task's sums, for the caller's own UPDATE of the task; nothing for no report. A
    renewal, completion or review submission carrying usage then updates the task row once."""
    if usage is None:
        return "", ()
    return ", " + sql(conn).usage.USAGE_SUMS, _sum_params(usage)


def charge_teammate(tx: Txn, teammate: str, usage: Usage) -> None:
    """Adds a report to the teammate's sums; the report that makes its spending
    reach its budget closes the gate and says so (`_exhausted`)."""
    counts = (usage.input_tokens, usage.output_tokens, usage.cost_micros)
    # While no sum is cut at the cap, the sums before the report are the sums after
    # it less the report, so one statement does. A sum cut at the cap no longer says
    # what it was (the gate may have closed before this report), so then the sums
    # are read first: a second statement only for a report that reaches the cap.
    statements = sql(tx.conn)
    row = tx.conn.execute(statements.usage.CHARGE_BELOW_CAP, (*_sum_params(usage), teammate, *counts)).fetchone()
    if row is not None:
        _, spent, budget = _standing(row)
        before = Usage(
            spent.input_tokens - usage.input_tokens,
            spent.output_tokens - usage.output_tokens,
            spent.cost_micros - usage.cost_micros,
        )
    else:
        _, before, _ = _standing(tx.conn.execute(statements.usage.STANDING, (teammate,)).fetchone())
        row = tx.conn.execute(statements.usage.CHARGE, (*_sum_params(usage), teammate)).fetchone()
        _, spent, budget = _standing(row)
    if budget.spent_by(spent) and not budget.spent_by(before):
        _exhausted(tx, BudgetExhausted(teammate, spent, budget))


def _sum_params(usage: Usage) -> tuple[int | str, ...]:
    """The parameters of a driver's `USAGE_SUMS` for a report."""
    counts = (usage.input_tokens, usage.output_tokens, usage.cost_micros)
    return (*(count for count in counts for _ in range(2)), usage.model, usage.model)


def _exhausted(tx: Txn, notice: BudgetExhausted) -> None:
    """The gate closed: Watch gets an event, the teammate's open stream the notice (after COMMIT)."""
    spent, budget = notice.spent, notice.budget
    emit(
        tx,
        "budget_exhausted",
        {
            "name": notice.teammate,
            "input_tokens": spent.input_tokens,
            "output_tokens": spent.output_tokens,
            "cost_micros": spent.cost_micros,
            "model": spent.model,
            "max_cost_micros": budget.max_cost_micros,
            "max_tokens": budget.max_tokens,
        },
    )
    tx.wakes.exhausted[notice.teammate] = notice
    tx.wakes.note("budget_exhausted", teammate=notice.teammate, cost_micros=spent.cost_micros, tokens=spent.tokens)


def set_budget(tx: Txn, name: str, budget: Budget) -> Budget:
    """Sets a teammate's own budget, or with "*" the default. A teammate whose gate this
    closes is told so; one whose gate it opens is woken to claim again."""
    if name != "*" and tx.conn.execute(sql(tx.conn).usage.TEAMMATE_EXISTS_FOR_BUDGET, (name,)).fetchone() is None:
        raise errors.TeammateNotFound(f"no teammate {name!r}", name=name)
    before = _closed(tx.conn, name)
    if name == "*":
        tx.conn.executemany(
            sql(tx.conn).usage.SET_DEFAULT_BUDGET,
            [(budget.max_cost_micros, "budget_cost_micros"), (budget.max_tokens, "budget_tokens")],
        )
    else:
        tx.conn.execute(
            sql(tx.conn).usage.SET_BUDGET,
            (budget.max_cost_micros, budget.max_tokens, name),
        )
    after = _closed(tx.conn, name)
    for teammate in sorted(after.keys() - before.keys()):
        _exhausted(tx, after[teammate])
    for teammate in before.keys() - after.keys():
        tx.wakes.teammates.add(teammate)
        tx.wakes.may_claim.add(teammate)
    tx.wakes.note("budget_set", teammate=name, cost_micros=budget.max_cost_micros, tokens=budget.max_tokens)
    return budget


def _closed(conn: sqlite3.Connection, name: str) -> dict[str, BudgetExhausted]:
    """The teammates (not removed) whose budget gate is closed: `name`, or with "*" those
    on the default budget."""
    statements = sql(conn)
    if name == "*":
        rows = conn.execute(statements.usage.CLOSED_GATES_ON_DEFAULT).fetchall()
    else:
        rows = conn.execute(statements.usage.CLOSED_GATES_OF_ONE, (name,)).fetchall()
    notices = [BudgetExhausted(*_standing(row)) for row in rows]
    return {notice.teammate: notice for notice in notices}


def of_teammate(conn: sqlite3.Connection, name: str) -> tuple[Usage, Budget]:
    """A teammate's sums and effective budget."""
    row = conn.execute(sql(conn).usage.STANDING, (name,)).fetchone()
    if row is None:
        raise errors.TeammateNotFound(f"no teammate {name!r}", name=name)
    _, spent, budget = _standing(row)
    return spent, budget


def board_total(conn: sqlite3.Connection) -> Usage:
    """What every teammate ever reported, summed (the board's usage)."""
    rows = conn.execute("SELECT input_tokens, output_tokens, cost_micros FROM teammates").fetchall()
    # Summed here, not by SQL's sum(), which fails on overflow; a team is a few rows.
    return Usage(*(min(sum(column), INT64_MAX) for column in zip(*rows, strict=True))) if rows else Usage()
