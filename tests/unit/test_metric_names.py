"""A throughput point's metric names have one definition (``types.ThroughputScalars``): the
store's type extends it and the bench writes its names, so none can be added in one place and
forgotten in another."""

from __future__ import annotations

import dataclasses

from orchestrator.bench.matrix import PointMetrics
from orchestrator.bench.stats import Summary
from orchestrator.store.results import ThroughputMetrics
from orchestrator.types import LATENCIES, THROUGHPUT_SCALARS, ThroughputScalars

# What a point carries beside its scalars, in the bench's type and the store's.
BENCH_OTHERS = {"errors_by_kind", "loop_lag", "output_len", "output_tok_s_se"}
BENCH_OTHERS |= {"output_tok_s_batches", *LATENCIES}
STORE_OTHERS = {"errors_by_kind", "calibration", "extra", "output_tok_s_se"}
STORE_OTHERS |= {"output_tok_s_batches", "arrivals", "seed", "duration_s", "max_concurrency"}
STORE_OTHERS |= {"arrival_schedule", "slo", *LATENCIES}


def _names(cls: type) -> set[str]:
    return {f.name for f in dataclasses.fields(cls)}


def _measured() -> PointMetrics:
    """A point with a distinct value in every field."""
    values = iter(range(1, 1000))
    given: dict[str, object] = {}
    for f in dataclasses.fields(PointMetrics):
        if f.name == "errors_by_kind":
            given[f.name] = {"timeout": 2}
        elif f.type == "Summary":
            given[f.name] = Summary(next(values), *(next(values) + 0.5 for _ in range(5)))
        else:
            given[f.name] = next(values)
    return PointMetrics(**given)  # type: ignore[arg-type]


def test_the_store_type_is_the_scalars_and_its_named_others() -> None:
    assert issubclass(ThroughputMetrics, ThroughputScalars)
    assert _names(ThroughputMetrics) - set(THROUGHPUT_SCALARS) == STORE_OTHERS


def test_every_bench_field_is_a_stored_scalar_or_a_named_other() -> None:
    """A field added to the bench's point and not to ThroughputScalars would never be stored."""
    assert _names(PointMetrics) - set(THROUGHPUT_SCALARS) == BENCH_OTHERS


def test_the_bench_writes_every_scalar_and_the_store_reads_each_back() -> None:
    measured = _measured()
    written = measured.as_fields()
    assert set(THROUGHPUT_SCALARS) <= set(written)
    stored = ThroughputMetrics.from_json(written)
    for name in THROUGHPUT_SCALARS:
        assert getattr(stored, name) == written[name] is not None, name
    assert stored.loop_lag_p99_s == measured.loop_lag.p99
    assert stored.output_len_max == measured.output_len.max
    assert stored.ttft.p99_s == measured.ttft.p99
    assert stored.errors_by_kind == {"timeout": 2}
    assert stored.extra == {"output_len_count": measured.output_len.count}
