"""The one percentile function of the tests and the bench."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(samples: Sequence[float], q: float, *, empty: float = math.nan) -> float:
    """Nearest-rank percentile, q in [0, 1]: the smallest sample with at least q of them at or below it.

    `empty` is returned when there are no samples (NaN unless the caller needs a number).
    """
    if not samples:
        return empty
    ordered = sorted(samples)
    # round() first: q * n computed in floating point can land a hair above a whole rank.
    rank = math.ceil(round(q * len(ordered), 9))
    return float(ordered[min(len(ordered), max(rank, 1)) - 1])
