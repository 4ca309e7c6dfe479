"""A throughput point's metric names have one definition (``types.ThroughputScalars``): the
point's metrics type extends it, the benchmark builds that type itself and the store reads it
back, so none can be added in one place and forgotten in another."""

from __future__ import annotations

import dataclasses

from orchestrator.bench.client import RequestRecord
from orchestrator.bench.point import MeasuredRequests, PointSpec, QualityThresholds, point_metrics
from orchestrator.points import ThroughputMetrics
from orchestrator.types import LATENCIES, THROUGHPUT_SCALARS, ThroughputScalars
from tests.unit.test_bench_stats import _record

STORE_OTHERS = {"errors_by_kind", "calibration", "extra", "output_tok_s_se"}
STORE_OTHERS |= {"output_tok_s_batches", "output_len_count", "arrivals", "seed", "duration_s"}
STORE_OTHERS |= {"max_concurrency", "arrival_schedule", "slo", *LATENCIES}
# What the benchmark leaves to a point's kind: a rate point's load facts (its rate metrics and
# its schedule), and the goodput of a point without an slo.
RATE_ONLY = {"achieved_rate", "requests_scheduled", "requests_unsent"}
SLO_ONLY = {"good_requests", "goodput", "goodput_fraction"}


def _names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _measured() -> ThroughputMetrics:
    """A closed point of a few requests, measured by the benchmark's one metrics function."""
    records: list[RequestRecord] = [_record(0.1 * i) for i in range(6)]
    spec = PointSpec(context=100, concurrency=2, rounds=3, warmup_requests=0, max_tokens=10)
    metrics, _ = point_metrics(
        MeasuredRequests(
            records,
            spec,
            QualityThresholds(),
            cpu_seconds=0.01,
            loop_lag_samples=[0.001, 0.002],
            prompts=["a"] * 6,
        ),
        batch=2,
    )
    return metrics


def test_the_point_type_is_the_scalars_and_its_named_others() -> None:
    assert issubclass(ThroughputMetrics, ThroughputScalars)
    assert _names(ThroughputMetrics) - set(THROUGHPUT_SCALARS) == STORE_OTHERS


def test_the_bench_fills_every_scalar_but_the_load_facts_of_another_kind() -> None:
    """A scalar added to ThroughputScalars and not measured shows up here as None."""
    measured = _measured()
    missing = {name for name in THROUGHPUT_SCALARS if getattr(measured, name) is None}
    assert missing == RATE_ONLY | SLO_ONLY


def test_the_store_reads_back_every_field_the_bench_wrote() -> None:
    measured = _measured()
    written = measured.to_json()
    assert set(THROUGHPUT_SCALARS) <= set(written)
    assert ThroughputMetrics.from_json(written) == measured
    assert measured.extra == {}
    flat = measured.measured_json()
    assert set(flat) <= set(written) and "calibration" not in flat
    assert flat["ttft_p99_s"] == measured.ttft.p99_s
    assert flat["output_len_count"] == measured.output_len_count == 6
