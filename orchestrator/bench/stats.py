"""Summary statistics for benchmark points: pure functions, no I/O, no numpy.

Percentiles use linear interpolation between closest ranks (Hyndman & Fan type 7), the
method numpy calls ``linear`` and its default, so numbers compare with other tools' output.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

PERCENTILES = (50.0, 90.0, 99.0)


def percentile(values: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) of ``values`` by linear interpolation (numpy ``linear``).

    Raises ValueError on an empty sequence or q outside [0, 100]: a percentile of nothing
    is not zero, and callers must say what they report instead.
    """
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"percentile q={q} outside [0, 100]")
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = math.ceil(rank)
    if low == high:
        return float(ordered[low])
    weight = rank - low
    return float(ordered[low] + (ordered[high] - ordered[low]) * weight)


def mean(values: Sequence[float]) -> float:
    """Arithmetic mean; ValueError on an empty sequence."""
    if not values:
        raise ValueError("mean of an empty sequence")
    return math.fsum(values) / len(values)


@dataclass(frozen=True)
class Summary:
    """Mean and tail percentiles of one metric over one point; all None when no samples."""

    count: int
    mean: float | None
    p50: float | None
    p90: float | None
    p99: float | None
    max: float | None

    def as_fields(self, prefix: str) -> dict[str, float | int | None]:
        """Flat ``{prefix}_mean``, ``{prefix}_p50``, ... fields for JSON and the store."""
        return {
            f"{prefix}_count": self.count,
            f"{prefix}_mean": self.mean,
            f"{prefix}_p50": self.p50,
            f"{prefix}_p90": self.p90,
            f"{prefix}_p99": self.p99,
            f"{prefix}_max": self.max,
        }


EMPTY_SUMMARY = Summary(count=0, mean=None, p50=None, p90=None, p99=None, max=None)
"""The summary of no samples (a metric a point did not measure)."""


def summarize(values: Iterable[float]) -> Summary:
    """Summary of ``values`` (any iterable; consumed once)."""
    data = list(values)
    if not data:
        return EMPTY_SUMMARY
    return Summary(
        count=len(data),
        mean=mean(data),
        p50=percentile(data, 50.0),
        p90=percentile(data, 90.0),
        p99=percentile(data, 99.0),
        max=float(max(data)),
    )


def median(values: Sequence[float]) -> float | None:
    """Median, or None when there are no values."""
    return percentile(values, 50.0) if values else None


def time_weighted_in_flight(
    intervals: Iterable[tuple[float, float]], window_start: float, window_end: float
) -> float:
    """Mean number of intervals open over [window_start, window_end], weighted by time.

    Each interval is (start, end) of one request; the parts outside the window are clipped.
    This is the concurrency a load generator actually held, as opposed to the one it asked for.
    """
    span = window_end - window_start
    if span <= 0:
        raise ValueError(f"empty window [{window_start}, {window_end}]")
    covered = 0.0
    for start, end in intervals:
        lo = max(start, window_start)
        hi = min(end, window_end)
        if hi > lo:
            covered += hi - lo
    return covered / span


def spread_gaps(chunks: Sequence[tuple[float, int]]) -> list[float]:
    """Inter-token latencies from (arrival time, tokens carried) chunks.

    The first token-carrying chunk starts the clock (its arrival is the TTFT). A later chunk
    that carries k tokens contributes k samples of gap/k, so a speculative step that emits
    several tokens at once lowers the ITL instead of looking like one long gap. Chunks that
    carry no tokens (role, finish, usage chunks) are skipped.
    """
    samples: list[float] = []
    previous: float | None = None
    for arrival, tokens in chunks:
        if tokens <= 0:
            continue
        if previous is not None:
            gap = (arrival - previous) / tokens
            samples.extend([gap] * tokens)
        previous = arrival
    return samples


def batch_rate_se(
    completions: Sequence[tuple[float, float]], start: float, batch: int
) -> tuple[float | None, int]:
    """Standard error of a closed loop's aggregate rate (tokens per second), by batch means.

    ``completions`` are (end time, tokens) of the measured requests, ``start`` the first send,
    ``batch`` the completions per batch (one wave: the concurrency). Consecutive batches in
    completion order each span from the previous batch's last end to their own, so their spans
    add up to the point's wall time and the ratio estimator over them is the point's rate; its
    standard error (sum of tokens over sum of spans, the usual ratio-estimator variance) is the
    request-to-request uncertainty of that one run. It says nothing about restart-to-restart
    variance. Returns (None, batches) with fewer than two batches.
    """
    ordered = sorted(completions)
    batches = len(ordered) // batch if batch > 0 else 0
    if batches < 2:
        return None, batches
    tokens: list[float] = []
    spans: list[float] = []
    previous = start
    for index in range(batches):
        chunk = ordered[index * batch : (index + 1) * batch]
        if index == batches - 1:
            chunk = ordered[index * batch :]  # the ragged tail joins the last batch
        end = chunk[-1][0]
        tokens.append(math.fsum(t for _, t in chunk))
        spans.append(end - previous)
        previous = end
    total_span = math.fsum(spans)
    if total_span <= 0:
        return None, batches
    rate = math.fsum(tokens) / total_span
    residuals = math.fsum((t - rate * s) ** 2 for t, s in zip(tokens, spans, strict=True))
    return math.sqrt(batches / (batches - 1) * residuals) / total_span, batches
