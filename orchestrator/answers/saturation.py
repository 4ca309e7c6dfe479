"""An objective the offered load caps: it cannot tell configs apart once they all keep up.

At an open-loop cell the client offers ``rate`` requests per second. A server that keeps up
completes them at that rate whatever its speed, so the rate-like metrics (``goodput``,
``achieved_rate``, ``request_s``; ``goodput_fraction`` at 1.0) top out at what was offered:
every config that keeps up scores the same, and a sweep ranked on them is a tie by
construction. Seen from the answer, the leaders sit within :data:`CAP_TOLERANCE` of the cap;
the fix is the sweep's, not the statistics': offer more (a higher ``rate``) or rank on a
latency (``tpot_p50_s``) that still tells the configs apart. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from orchestrator.types import MatrixCell

CAP_TOLERANCE = 0.03
"""A value within 3 % of the cap counts as at the cap: an open-loop run's achieved rate
misses the offered one by its schedule's Poisson noise (about ``1/sqrt(requests)``, 3 % at
1,000 requests), so closer than that no config can be said to fall behind."""

RATE_METRICS = frozenset({"goodput", "achieved_rate", "request_s"})
"""Requests per second: bounded by the offered rate at an open-loop cell."""
FRACTION_METRICS = frozenset({"goodput_fraction"})
"""A share of the requests: bounded by 1."""


def offered_cap(metric: str, cells: Sequence[MatrixCell]) -> float | None:
    """The most ``metric`` can reach at ``cells`` (combined by geometric mean, as an objective
    combines them), or None when nothing but the server's speed bounds it (a closed-loop cell,
    a token rate, a latency)."""
    if not cells or any(cell.rate is None for cell in cells):
        return None
    if metric in FRACTION_METRICS:
        return 1.0
    if metric not in RATE_METRICS:
        return None
    rates = [cell.rate for cell in cells if cell.rate is not None]
    return math.exp(math.fsum(math.log(rate) for rate in rates) / len(rates))


def at_cap(value: float, cap: float) -> bool:
    """``value`` is within :data:`CAP_TOLERANCE` of ``cap`` (or above it)."""
    return value >= cap * (1.0 - CAP_TOLERANCE)


__all__ = ["CAP_TOLERANCE", "FRACTION_METRICS", "RATE_METRICS", "at_cap", "offered_cap"]
