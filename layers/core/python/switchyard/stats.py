"""The one percentile of the project: latency figures in the local platform's
status and canary judgement, and in the benchmarks."""

from __future__ import annotations

import math
from collections.abc import Sequence


def percentile(values: Sequence[float], q: float, nearest_rank: bool = False) -> float:
    """The q-th percentile (0-100) of ``values``, in any order; NaN when empty.

    Linear between the closest ranks by default (the benchmarks' figures); with
    ``nearest_rank``, a value that was observed (the smallest with at least q % of
    the values at or below it), as a canary's p99 is judged."""
    if not values:
        return math.nan
    ordered = sorted(values)
    if nearest_rank:
        return float(ordered[min(len(ordered) - 1, max(0, math.ceil(q / 100 * len(ordered)) - 1))])
    if len(ordered) == 1:
        return float(ordered[0])
    rank = (len(ordered) - 1) * q / 100
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return float(ordered[low] + (ordered[high] - ordered[low]) * (rank - low))
