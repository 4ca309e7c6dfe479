"""An objective the offered load caps: it cannot tell configs apart once they all keep up.

At an open-loop cell the client offers ``rate`` requests per second. A server that keeps up
completes them at that rate whatever its speed, so the rate-like metrics (``goodput``,
``achieved_rate``, ``request_s``; ``goodput_fraction`` at 1.0) top out at what was offered:
every config that keeps up scores the same, and a sweep ranked on them is a tie by
construction. Seen from the answer, the leaders sit within :data:`CAP_TOLERANCE` of the cap;
the fix is the sweep's, not the statistics': offer more (a higher ``rate``) or rank on a
latency (``tpot_p50_s``) that still tells the configs apart. Pure.

The cap is the rate the schedule really offered, not the nominal ``rate``: a seeded Poisson
schedule draws its arrivals by chance (43 in 8 s is 5.4 req/s at a nominal 4), and every
config of a sweep faces the same draw. A point stores its schedule's length and its measured
seconds (:func:`offered_rate`); the nominal rate stands in only for points that predate them.
The same bound makes these metrics shares of a known number of requests, which is the scale
their intervals are built on (:func:`share_bound`,
:mod:`orchestrator.answers.estimate`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from orchestrator.answers.estimate import Scale, weighted_geomean
from orchestrator.points import ThroughputPoint
from orchestrator.types import MatrixCell, OfferedLoad

CAP_TOLERANCE = 0.03
"""A value within 3 % of the cap counts as at the cap: an open-loop run's achieved rate
misses the offered one by its schedule's Poisson noise (about ``1/sqrt(requests)``, 3 % at
1,000 requests), so closer than that no config can be said to fall behind."""

RATE_METRICS = frozenset({"goodput", "achieved_rate", "request_s"})
"""Requests per second: bounded by the offered rate at an open-loop cell."""
FRACTION_METRICS = frozenset({"goodput_fraction"})
"""A share of the requests: bounded by 1."""
SHARE_METRICS = FRACTION_METRICS | {"coding_pass_rate"}
"""Shares of a count (requests, coding problems) wherever they are measured."""


def interval_scale(metric: str, cells: Sequence[MatrixCell]) -> Scale:
    """The scale ``metric``'s intervals are built on at ``cells``: ``share`` for a share of a
    count, or a rate the offered load bounds (every cell open-loop); ``log`` otherwise."""
    if metric in SHARE_METRICS:
        return "share"
    if metric in RATE_METRICS and cells and all(cell.rate is not None for cell in cells):
        return "share"
    return "log"


def _scheduled_rate(point: ThroughputPoint) -> float | None:
    """``point``'s arrivals over its measured seconds; None where it stored neither."""
    scheduled, seconds = point.metrics.requests_scheduled, point.metrics.duration_s
    if point.rate is None or not scheduled or not seconds:
        return None
    return scheduled / seconds


def offered_rate(point: ThroughputPoint) -> float | None:
    """The rate ``point``'s schedule really offered: its arrivals over its measured seconds;
    the nominal ``rate`` for a point that stored neither; None at a closed-loop point."""
    scheduled = _scheduled_rate(point)
    return point.rate if scheduled is None else scheduled


def measured_load(points: Sequence[ThroughputPoint]) -> OfferedLoad | None:
    """What the schedules of ``points`` (one open-loop cell's, over a type's restarts) really
    offered and what the client sent, each averaged, as the labels beside them say it; None
    where no point stored its schedule (points stored before 2026-12-07, a closed-loop cell):
    the label then says the rate is nominal."""
    offered = [rate for point in points if (rate := _scheduled_rate(point)) is not None]
    if not offered:
        return None
    sent = [p.metrics.achieved_rate for p in points if p.metrics.achieved_rate is not None]
    return OfferedLoad(
        math.fsum(offered) / len(offered), math.fsum(sent) / len(sent) if sent else None
    )


def share_bound(metric: str, point: ThroughputPoint) -> tuple[float, int | None] | None:
    """(cap, requests) of ``metric`` at ``point``, on the share scale: the offered rate and
    the arrivals scheduled for a rate metric at an open-loop point, 1 and the requests for a
    fraction; None where nothing but the server bounds it."""
    metrics = point.metrics
    if metric in FRACTION_METRICS:
        return 1.0, metrics.requests
    if metric in RATE_METRICS:
        rate = offered_rate(point)
        if rate is None:
            return None
        return rate, metrics.requests_scheduled or metrics.requests
    return None


def measured_cap(
    metric: str, points: Sequence[ThroughputPoint], weights: Sequence[float] | None = None
) -> float | None:
    """The most ``metric`` could reach at one restart's ``points`` (one per objective cell,
    combined by geometric mean as an objective combines them): the rate each schedule really
    offered (:func:`offered_rate`) for a rate metric, 1 for a fraction; None without points or
    where nothing but the server bounds one of them (a closed-loop point, a token rate)."""
    bounds = [share_bound(metric, point) for point in points]
    caps = [bound[0] for bound in bounds if bound is not None and bound[0] > 0]
    if not points or len(caps) != len(points):
        return None
    return weighted_geomean(caps, weights)


def offered_cap(
    metric: str, cells: Sequence[MatrixCell], weights: Sequence[float] | None = None
) -> float | None:
    """The most ``metric`` can reach at ``cells`` by their nominal rates (combined by geometric
    mean, as an objective combines them), or None when nothing but the server's speed bounds it
    (a closed-loop cell, a token rate, a latency). Measured points say better
    (:func:`measured_cap`); this stands in where there are none."""
    if not cells or any(cell.rate is None for cell in cells):
        return None
    if metric in FRACTION_METRICS:
        return 1.0
    if metric not in RATE_METRICS:
        return None
    return weighted_geomean([cell.rate for cell in cells if cell.rate is not None], weights)


def at_cap(value: float, cap: float) -> bool:
    """``value`` is within :data:`CAP_TOLERANCE` of ``cap`` (or above it)."""
    return value >= cap * (1.0 - CAP_TOLERANCE)


__all__ = [
    "CAP_TOLERANCE",
    "FRACTION_METRICS",
    "RATE_METRICS",
    "SHARE_METRICS",
    "at_cap",
    "interval_scale",
    "measured_cap",
    "measured_load",
    "offered_cap",
    "offered_rate",
    "share_bound",
]
