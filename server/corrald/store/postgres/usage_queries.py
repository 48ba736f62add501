"""The statements of spending and budgets (usage reports summed on tasks and teammates,
the budget gate), in PostgreSQL's dialect: `dialect.sql(conn).usage.NAME` (kept apart from
queries.py, whose statements every other verb uses; `GATE_CLOSED` is part of some)."""

from __future__ import annotations

TEAMMATE_EXISTS_FOR_BUDGET = "SELECT 1 FROM teammates WHERE name = %s"
SET_DEFAULT_BUDGET = "UPDATE meta SET value = %s WHERE key = %s"
SET_BUDGET = "UPDATE teammates SET budget_cost_micros = %s, budget_tokens = %s WHERE name = %s"

# The teammate's effective budget, for a query over `teammates AS t`.
_EFFECTIVE_COST = "coalesce(t.budget_cost_micros, (SELECT value FROM meta WHERE key = 'budget_cost_micros'))"
_EFFECTIVE_TOKENS = "coalesce(t.budget_tokens, (SELECT value FROM meta WHERE key = 'budget_tokens'))"
INT64_MAX = 2**63 - 1


def _capped_sum(left: str, right: str) -> str:
    """`left + right`, or INT64_MAX where that would be larger (both non-negative):
    PostgreSQL refuses an overflowing bigint."""
    return f"CASE WHEN {left} > {INT64_MAX} - {right} THEN {INT64_MAX} ELSE {left} + {right} END"


# True when the teammate's spending reached its budget on either measure (a limit of 0 is none).
GATE_CLOSED = (
    f"({_EFFECTIVE_COST} BETWEEN 1 AND t.cost_micros"
    f" OR {_EFFECTIVE_TOKENS} BETWEEN 1 AND {_capped_sum('t.input_tokens', 't.output_tokens')})"
)
_STANDING = f"t.name, t.input_tokens, t.output_tokens, t.cost_micros, t.model, {_EFFECTIVE_COST}, {_EFFECTIVE_TOKENS}"
_STANDING_RETURNED = _STANDING.replace("t.", "")
_BELOW_CAP = " AND ".join(
    f"{column} <= {INT64_MAX} - %s" for column in ("input_tokens", "output_tokens", "cost_micros")
)
USAGE_SUMS = (
    ", ".join(f"{column} = {_capped_sum(column, '%s')}" for column in ("input_tokens", "output_tokens", "cost_micros"))
    + ", model = CASE WHEN %s = '' THEN model ELSE %s END"
)
CHARGE_TASK = f"UPDATE tasks SET {USAGE_SUMS} WHERE seq = %s"
CHARGE_BELOW_CAP = f"UPDATE teammates SET {USAGE_SUMS} WHERE name = %s AND {_BELOW_CAP} RETURNING {_STANDING_RETURNED}"
CHARGE = f"UPDATE teammates SET {USAGE_SUMS} WHERE name = %s RETURNING {_STANDING_RETURNED}"
STANDING = f"SELECT {_STANDING} FROM teammates AS t WHERE t.name = %s"
CLOSED_GATES_OF_ONE = f"SELECT {_STANDING} FROM teammates AS t WHERE t.removed = 0 AND t.name = %s AND {GATE_CLOSED}"
CLOSED_GATES_ON_DEFAULT = (
    f"SELECT {_STANDING} FROM teammates AS t WHERE t.removed = 0 AND t.budget_cost_micros IS NULL AND {GATE_CLOSED}"
)
