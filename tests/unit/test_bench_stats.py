"""Pure statistics of the benchmark: percentiles, in-flight accounting, ITL spreading, and
the point metrics/flags computed from request records."""

from __future__ import annotations

import math
import statistics

import pytest
from hypothesis import given
from hypothesis import strategies as st

from orchestrator.bench.client import Chunk, ErrorKind, RequestRecord, TokenSource
from orchestrator.bench.closedloop import closed_metrics, steady_window
from orchestrator.bench.point import (
    FLAG_CLIENT_SATURATED,
    FLAG_CONCURRENCY_SHORT,
    FLAG_ERRORS,
    FLAG_SHORT_OUTPUTS,
    FLAG_TOO_FEW_REQUESTS,
    FLAG_TRUNCATED,
    MeasuredRequests,
    PointSpec,
    QualityThresholds,
)
from orchestrator.bench.stats import (
    mean,
    median,
    percentile,
    spread_gaps,
    summarize,
    time_weighted_in_flight,
)


def test_percentile_matches_numpy_linear_on_known_values() -> None:
    data = [15.0, 20.0, 35.0, 40.0, 50.0]
    # numpy.percentile(data, q) with the default 'linear' method:
    assert percentile(data, 0) == 15.0
    assert percentile(data, 50) == 35.0
    assert percentile(data, 90) == pytest.approx(46.0)
    assert percentile(data, 99) == pytest.approx(49.6)
    assert percentile(data, 100) == 50.0
    assert percentile([7.0], 99) == 7.0


@given(st.lists(st.floats(-1e6, 1e6), min_size=1, max_size=200))
def test_percentile_agrees_with_statistics_quantiles_inclusive(values: list[float]) -> None:
    # statistics.quantiles(method="inclusive") is the same type-7 interpolation.
    if len(values) >= 2:
        cuts = statistics.quantiles(values, n=100, method="inclusive")
        assert percentile(values, 50) == pytest.approx(cuts[49], rel=1e-9, abs=1e-6)
        assert percentile(values, 90) == pytest.approx(cuts[89], rel=1e-9, abs=1e-6)
    assert min(values) <= percentile(values, 99) <= max(values)


def test_empty_inputs_are_errors_not_zero() -> None:
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        mean([])
    with pytest.raises(ValueError):
        percentile([1.0], 101)
    assert median([]) is None
    empty = summarize([])
    assert empty.count == 0 and empty.p99 is None and empty.mean is None


def test_summary_fields_are_flat_and_named() -> None:
    fields = summarize([1.0, 2.0, 3.0]).as_fields("ttft")
    assert fields["ttft_count"] == 3
    assert fields["ttft_mean"] == 2.0
    assert fields["ttft_p50"] == 2.0
    assert fields["ttft_max"] == 3.0


def test_time_weighted_in_flight_clips_to_window() -> None:
    intervals = [(0.0, 10.0), (0.0, 10.0), (5.0, 15.0)]
    assert time_weighted_in_flight(intervals, 0.0, 10.0) == pytest.approx(2.5)
    assert time_weighted_in_flight(intervals, 10.0, 15.0) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        time_weighted_in_flight(intervals, 3.0, 3.0)


def test_spread_gaps_spreads_multi_token_chunks() -> None:
    # First chunk at 1.0 carries 1 token (TTFT); then a 3-token chunk after 0.3 s,
    # a zero-token (usage) chunk, and a 1-token chunk 0.1 s later.
    chunks = [(1.0, 1), (1.3, 3), (1.35, 0), (1.4, 1)]
    gaps = spread_gaps(chunks)
    assert gaps == pytest.approx([0.1, 0.1, 0.1, 0.1])
    assert spread_gaps([(0.5, 0), (1.0, 4)]) == []


@given(st.lists(st.tuples(st.floats(0.0001, 1.0), st.integers(1, 8)), min_size=2, max_size=50))
def test_spread_gaps_sum_equals_decode_time(steps: list[tuple[float, int]]) -> None:
    t = 0.0
    chunks = []
    for gap, tokens in steps:
        t += gap
        chunks.append((t, tokens))
    samples = spread_gaps(chunks)
    assert len(samples) == sum(k for _, k in steps[1:])
    assert math.fsum(samples) == pytest.approx(chunks[-1][0] - chunks[0][0])


def _record(
    send: float,
    *,
    ttft: float = 0.1,
    tokens: int = 10,
    step: float = 0.01,
    per_chunk: int = 1,
    prompt: int = 100,
    finish: str = "length",
    error: ErrorKind | None = None,
    max_tokens: int = 10,
    ignore_eos: bool = True,
) -> RequestRecord:
    chunks = []
    t = send + ttft
    left = tokens
    while left > 0:
        k = min(per_chunk, left)
        chunks.append(Chunk(t, k))
        left -= k
        t += step * k
    end = chunks[-1].arrival if chunks else send + ttft
    return RequestRecord(
        label="r",
        phase="measured",
        api="generate",
        max_tokens=max_tokens,
        ignore_eos=ignore_eos,
        send_time=send,
        end_time=end,
        chunks=[] if error else chunks,
        token_source=TokenSource.CUMULATIVE_PER_CHUNK,
        prompt_tokens=prompt,
        completion_tokens=None if error else tokens,
        finish_reason=None if error else finish,
        error=error,
    )


SPEC = PointSpec(context=100, concurrency=2, rounds=4, warmup_requests=0, max_tokens=10)


def test_closed_metrics_on_a_clean_closed_loop() -> None:
    # Two workers, four back-to-back requests each, 0.19 s per request.
    records, workers = [], []
    for worker in range(2):
        t = 0.0
        for _ in range(4):
            r = _record(t, per_chunk=2)
            records.append(r)
            workers.append(worker)
            assert r.end_time is not None
            t = r.end_time
    metrics, flags = closed_metrics(
        MeasuredRequests(
            records, SPEC, QualityThresholds(), cpu_seconds=0.01, loop_lag_samples=[0.001] * 50
        ),
        workers,
    )
    assert metrics.requests == metrics.requests_ok == 8
    assert metrics.output_tokens == 80
    assert metrics.wall_s == pytest.approx(4 * 0.18)
    assert metrics.output_tok_s == pytest.approx(80 / 0.72)
    assert metrics.ttft.p50_s == pytest.approx(0.1)
    # 2-token chunks 0.02 s apart: ITL is 0.01 per token, not 0.02 per chunk.
    assert metrics.itl.p50_s == pytest.approx(0.01)
    assert metrics.itl.count == 8 * 8
    assert metrics.tpot.mean_s == pytest.approx(0.01)
    assert metrics.request_decode_tok_s_p50 == pytest.approx(100.0)
    assert metrics.concurrency_held == pytest.approx(2.0)
    assert metrics.prompt_tokens_tolerance == 0
    assert flags == ()


def test_closed_metrics_flags_what_makes_a_point_untrustworthy() -> None:
    spec = PointSpec(context=100, concurrency=4, rounds=1, warmup_requests=0, max_tokens=10)
    records = [
        _record(0.0),
        _record(0.5),  # sent late: the client did not hold 4 in flight
        _record(0.0, tokens=6),  # finished early despite ignore_eos
        _record(0.0, error=ErrorKind.TIMEOUT),
    ]
    metrics, flags = closed_metrics(
        MeasuredRequests(
            records, spec, QualityThresholds(), cpu_seconds=0.9, loop_lag_samples=[0.2]
        ),
        [0, 1, 2, 3],
    )
    assert metrics.errors == 1 and metrics.errors_by_kind == {"timeout": 1}
    assert metrics.short_outputs == 1
    assert metrics.requests_ok == 3
    assert set(flags) >= {
        FLAG_CONCURRENCY_SHORT,
        FLAG_CLIENT_SATURATED,
        FLAG_ERRORS,
        FLAG_SHORT_OUTPUTS,
        FLAG_TOO_FEW_REQUESTS,
    }


def test_length_finish_is_truncation_only_without_ignore_eos() -> None:
    spec = PointSpec(
        context=100, concurrency=1, rounds=1, warmup_requests=0, max_tokens=10, ignore_eos=False
    )
    records = [_record(0.0, ignore_eos=False, finish="length")]
    metrics, flags = closed_metrics(
        MeasuredRequests(records, spec, QualityThresholds(min_requests=1)),
        [0],
    )
    assert metrics.truncated == 1 and FLAG_TRUNCATED in flags
    metrics, flags = closed_metrics(
        MeasuredRequests([_record(0.0)], SPEC, QualityThresholds(min_requests=1)),
        [0],
    )
    assert metrics.truncated == 0 and FLAG_TRUNCATED not in flags


def test_steady_window_excludes_ramp_and_tail() -> None:
    rows = [(0, 0.0, 1.0), (0, 1.0, 2.0), (1, 0.2, 1.2), (1, 1.2, 2.5)]
    assert steady_window(rows) == (0.2, 2.0)
    assert steady_window([(0, 0.0, 1.0), (1, 2.0, 3.0)]) is None
    assert steady_window([]) is None
