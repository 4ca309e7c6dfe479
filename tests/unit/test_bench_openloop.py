"""Open-loop points, pure parts: the arrival schedule's statistics, the goodput definition,
the achieved rate and its shortfall flag, and per-request output lengths in the metrics."""

from __future__ import annotations

import dataclasses
import itertools
import math

import pytest

from orchestrator.bench.client import ErrorKind, RequestRecord
from orchestrator.bench.closedloop import closed_metrics
from orchestrator.bench.openloop import arrival_schedule, offered_rate, rate_metrics
from orchestrator.bench.point import (
    FLAG_CONCURRENCY_SHORT,
    FLAG_RATE_SHORT,
    FLAG_SHORT_OUTPUTS,
    FLAG_TRUNCATED,
    MeasuredRequests,
    PointSpec,
    QualityThresholds,
    Slo,
    good_requests,
    point_metrics,
    prompt_reuse,
)
from orchestrator.engines.base import ChatMessage, Prompt
from orchestrator.points import ThroughputMetrics
from tests.unit.test_bench_stats import _record

# ------------------------------------------------------------------ the arrival schedule


def _gaps(offsets: tuple[float, ...]) -> list[float]:
    return [b - a for a, b in itertools.pairwise(offsets)]


def test_poisson_mean_gap_lies_in_its_confidence_interval_as_often_as_it_should() -> None:
    from scipy import stats as sps  # here: it costs every worker's collection 1 s

    # n exponential gaps of rate r: their sum is Gamma(n, 1/r), so the mean gap's 99%
    # interval is exact. Over 200 seeds about 2 fall outside; a binomial test says whether
    # the count is what a 1% miss rate gives.
    rate, duration = 5.0, 60.0
    outside = 0
    counts = []
    for seed in range(200):
        gaps = _gaps(arrival_schedule(rate, duration, "poisson", seed))
        n = len(gaps)
        low, high = sps.gamma.ppf([0.005, 0.995], n, scale=1.0 / (rate * n))
        outside += not low <= sum(gaps) / n <= high
        counts.append(n + 1)
    assert sps.binomtest(outside, 200, 0.01).pvalue > 0.001
    # Arrivals after the one at 0 are Poisson(rate * duration) per schedule.
    low, high = sps.poisson.interval(0.999, 200 * rate * duration)
    assert low <= sum(counts) - 200 <= high


def test_poisson_gaps_are_exponential_by_ks_test_and_the_test_has_power() -> None:
    from scipy import stats as sps  # here: it costs every worker's collection 1 s

    gaps = _gaps(arrival_schedule(10.0, 200.0, "poisson", seed=20261201))
    assert len(gaps) > 1500
    assert sps.kstest(gaps, "expon", args=(0.0, 1 / 10.0)).pvalue > 0.01
    # The same gaps against a 20% slower rate are rejected: the check can fail.
    assert sps.kstest(gaps, "expon", args=(0.0, 1 / 8.0)).pvalue < 0.01
    # Memoryless, not evenly spaced: the gaps' coefficient of variation is about 1.
    mean = sum(gaps) / len(gaps)
    sd = math.sqrt(sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1))
    assert 0.9 < sd / mean < 1.1


def test_schedule_is_reproducible_from_its_arguments_and_ordered() -> None:
    first = arrival_schedule(4.0, 30.0, "poisson", seed=3)
    assert first == arrival_schedule(4.0, 30.0, "poisson", seed=3)
    assert first != arrival_schedule(4.0, 30.0, "poisson", seed=4)
    assert first[0] == 0.0 and max(first) < 30.0
    assert all(b > a for a, b in itertools.pairwise(first))
    # Another rate with the same seed: the same arrivals, scaled in time.
    faster = arrival_schedule(8.0, 15.0, "poisson", seed=3)
    assert faster == pytest.approx([t / 2 for t in first][: len(faster)])


def test_constant_arrivals_are_evenly_spaced() -> None:
    schedule = arrival_schedule(4.0, 2.0, "constant", seed=99)
    assert schedule == pytest.approx([0.0, 0.25, 0.5, 0.75, 1.0, 1.25, 1.5, 1.75])
    assert arrival_schedule(4.0, 2.0, "constant", seed=1) == schedule  # the seed is unused
    assert len(arrival_schedule(3.0, 1.0, "constant", seed=0)) == 3
    assert arrival_schedule(2.5, 1.0, "constant", seed=0) == pytest.approx([0.0, 0.4, 0.8])
    assert offered_rate(schedule, 2.0) == 4.0


@pytest.mark.parametrize(
    ("rate", "duration", "arrivals"),
    [(0.0, 1.0, "poisson"), (-1.0, 1.0, "constant"), (1.0, 0.0, "poisson"), (1.0, 1.0, "burst")],
)
def test_schedule_rejects_what_is_not_a_rate(rate: float, duration: float, arrivals: str) -> None:
    with pytest.raises(ValueError):
        arrival_schedule(rate, duration, arrivals, seed=0)  # type: ignore[arg-type]


# ------------------------------------------------------------------ goodput

RATE_SPEC = PointSpec(
    context=100,
    concurrency=None,
    rounds=None,
    warmup_requests=0,
    max_tokens=10,
    rate=2.0,
    arrivals="constant",
    duration_s=2.5,
    max_concurrency=8,
)


def _known_records() -> list[RequestRecord]:
    """Five requests sent at 0, 0.5, ... with known latencies (see ``_record``: TTFT, then
    one token every ``step``)."""
    return [
        _record(0.0),  # ttft 0.1, tpot 0.01, e2e 0.19: good
        _record(0.5, ttft=0.3),  # misses the TTFT bound
        _record(1.0, step=0.03),  # tpot 0.03: misses the TPOT bound
        _record(1.5, error=ErrorKind.TIMEOUT),  # failed: never good
        _record(2.0, tokens=1, ttft=0.25),  # one token: no TPOT, meets that bound; ttft == bound
    ]


def test_goodput_counts_requests_meeting_every_bound_over_the_wall_time() -> None:
    records = _known_records()
    slo = Slo(ttft_s=0.25, tpot_s=0.02, e2e_s=1.0)
    assert [slo.met_by(r) for r in records] == [True, False, False, False, True]
    assert good_requests(records, slo) == 2
    spec = dataclasses.replace(RATE_SPEC, slo=slo)
    metrics, _ = point_metrics(
        MeasuredRequests(records, spec, QualityThresholds()), batch=2, origin=0.0
    )
    # wall: from the phase's start (0) to the last response's end (2.0 + 0.25)
    assert metrics.wall_s == pytest.approx(2.25)
    assert metrics.good_requests == 2
    assert metrics.goodput == pytest.approx(2 / 2.25)
    assert metrics.goodput_fraction == pytest.approx(2 / 5)
    assert metrics.request_s == pytest.approx(4 / 2.25)  # completed, not sent
    assert metrics.input_tok_s == pytest.approx(400 / 2.25)
    assert metrics.output_tok_s == pytest.approx(31 / 2.25)


def test_each_bound_alone_and_no_bound_at_all() -> None:
    records = _known_records()
    assert good_requests(records, Slo(ttft_s=0.25)) == 3
    assert good_requests(records, Slo(tpot_s=0.02)) == 3
    assert good_requests(records, Slo(e2e_s=0.25)) == 2  # 0.19 and 0.25 (inclusive)
    assert good_requests(records, Slo(e2e_s=0.1)) == 0
    # Without a bound there is no goodput (not "every request is good").
    for slo in (None, Slo()):
        metrics, _ = point_metrics(
            MeasuredRequests(
                records, dataclasses.replace(RATE_SPEC, slo=slo), QualityThresholds()
            ),
            batch=2,
        )
        assert metrics.goodput is None and metrics.goodput_fraction is None
    with pytest.raises(ValueError):
        Slo(ttft_s=0.0)


def test_closed_points_get_goodput_too() -> None:
    spec = PointSpec(
        context=100,
        concurrency=1,
        rounds=2,
        warmup_requests=0,
        max_tokens=10,
        slo=Slo(ttft_s=0.15),
    )
    records = [_record(0.0), _record(0.19, ttft=0.2)]
    metrics, flags = closed_metrics(
        MeasuredRequests(records, spec, QualityThresholds(min_requests=1)),
        [0, 0],
    )
    assert metrics.good_requests == 1
    assert metrics.wall_s == pytest.approx(0.19 + 0.29)
    assert metrics.goodput == pytest.approx(1 / 0.48)
    assert FLAG_CONCURRENCY_SHORT not in flags and metrics.achieved_rate is None


# ------------------------------------------------------------------ achieved rate


def _rate_metrics(
    records: list[RequestRecord],
    schedule: tuple[float, ...],
    *,
    dues: tuple[float, ...] | None = None,
    unsent: int = 0,
    spec: PointSpec = RATE_SPEC,
) -> tuple[ThroughputMetrics, tuple[str, ...]]:
    return rate_metrics(
        MeasuredRequests(records, spec, QualityThresholds(min_requests=1)),
        schedule if dues is None else dues,
        schedule=schedule,
        start=0.0,
        unsent=unsent,
    )


def test_achieved_rate_is_what_was_sent_and_a_shortfall_is_flagged() -> None:
    schedule = arrival_schedule(2.0, 2.5, "constant", seed=0)  # 0, 0.5, ... 2.0
    on_time = [_record(t) for t in schedule]
    metrics, flags = _rate_metrics(on_time, schedule)
    assert metrics.achieved_rate == pytest.approx(5 / 2.5) and FLAG_RATE_SHORT not in flags
    assert metrics.send_lag.max_s == pytest.approx(0.0) and metrics.requests_unsent == 0
    # Late sends of the same five (a slot was busy): the rate holds, the lateness shows.
    late = [_record(t + 0.3) for t in schedule[:4]] + [_record(2.4)]
    metrics, flags = _rate_metrics(late, schedule)
    assert metrics.send_lag.p50_s == pytest.approx(0.3)
    assert metrics.send_lag.max_s == pytest.approx(0.4)
    assert metrics.achieved_rate == pytest.approx(2.0) and FLAG_RATE_SHORT not in flags
    # Only four of five sent: 1.6/s against the schedule's 2/s, below 95%: flagged.
    metrics, flags = _rate_metrics(on_time[:4], schedule, dues=schedule[:4], unsent=1)
    assert metrics.achieved_rate == pytest.approx(4 / 2.5)
    assert metrics.requests_scheduled == 5 and metrics.requests_unsent == 1
    assert flags[0] == FLAG_RATE_SHORT
    # A send that woke past the end stretches the window instead of inflating the rate.
    metrics, _ = _rate_metrics([*on_time[:4], _record(3.0)], schedule)
    assert metrics.achieved_rate == pytest.approx(5 / 3.0)


def test_the_flag_compares_with_the_schedules_own_rate_not_the_nominal_one() -> None:
    # A Poisson draw of 4 arrivals where 2/s * 2.5 s = 5 were expected: sending all four
    # is keeping up (4/2.5 = 1.6/s is the schedule's own rate).
    schedule = (0.0, 0.7, 1.1, 2.2)
    records = [_record(t) for t in schedule]
    spec = dataclasses.replace(RATE_SPEC, arrivals="poisson")
    metrics, flags = _rate_metrics(records, schedule, spec=spec)
    assert metrics.achieved_rate == pytest.approx(1.6) and FLAG_RATE_SHORT not in flags
    with pytest.raises(ValueError):
        _rate_metrics(records, schedule, spec=dataclasses.replace(spec, rate=None))


# ------------------------------------------------------------------ output lengths


def test_lengths_are_judged_against_each_requests_own_max_tokens() -> None:
    # Workload output lengths: 4 and 6 tokens asked for under ignore_eos, the point's
    # max_tokens 10. Getting exactly what was asked is not short.
    spec = dataclasses.replace(RATE_SPEC, max_tokens=10)
    asked = [_record(0.0, tokens=4, max_tokens=4), _record(0.5, tokens=6, max_tokens=6)]
    metrics, flags = point_metrics(
        MeasuredRequests(asked, spec, QualityThresholds(min_requests=1)),
        batch=1,
    )
    assert metrics.short_outputs == 0 and FLAG_SHORT_OUTPUTS not in flags
    assert (metrics.output_len_count, metrics.output_len_mean) == (2, 5.0)
    assert (metrics.output_len_p50, metrics.output_len_max) == (5.0, 6.0)
    # One stopped early against its own 6: short, whatever the point's max_tokens says.
    early = [_record(0.0, tokens=4, max_tokens=4), _record(0.5, tokens=5, max_tokens=6)]
    metrics, flags = point_metrics(
        MeasuredRequests(early, spec, QualityThresholds(min_requests=1)),
        batch=1,
    )
    assert metrics.short_outputs == 1 and FLAG_SHORT_OUTPUTS in flags
    # Natural stopping (no ignore_eos): a stop is not truncation, hitting the cap is.
    natural = [
        _record(0.0, tokens=3, max_tokens=10, ignore_eos=False, finish="stop"),
        _record(0.5, tokens=10, max_tokens=10, ignore_eos=False, finish="length"),
    ]
    metrics, flags = point_metrics(
        MeasuredRequests(
            natural,
            dataclasses.replace(spec, ignore_eos=False),
            QualityThresholds(min_requests=1),
        ),
        batch=1,
    )
    assert metrics.truncated == 1 and metrics.short_outputs == 0 and FLAG_TRUNCATED in flags
    assert metrics.output_len_p50 == 6.5


def test_reuse_is_counted_by_sample_line_and_synthetic_prompts_are_always_distinct() -> None:
    assert prompt_reuse(["a", "a", "b"]) == (3, 0)
    assert prompt_reuse([]) == (0, 0)
    chat = (ChatMessage("user", "q"),)
    sent = [
        Prompt(messages=chat, origin=1),
        Prompt(messages=chat, origin=2),
        Prompt(messages=chat, origin=1, reused=True),
        Prompt(messages=chat, origin=2, reused=True),
        Prompt(messages=chat, origin=1, reused=True),
        Prompt(text="synthetic"),
    ]
    assert prompt_reuse(sent) == (3, 3)
    # A line first issued in the warm-up: reused in the measured phase, still one distinct.
    assert prompt_reuse([Prompt(messages=chat, origin=5, reused=True)] * 2) == (1, 2)
    spec = dataclasses.replace(RATE_SPEC, workload="file:traffic.jsonl")
    records = [_record(0.5 * i) for i in range(len(sent))]
    metrics, _ = point_metrics(
        MeasuredRequests(records, spec, QualityThresholds(), prompts=sent),
        batch=2,
    )
    assert (metrics.prompts_distinct, metrics.prompts_reused) == (3, 3)
    fields = metrics.measured_json()
    assert (fields["prompts_distinct"], fields["prompts_reused"]) == (3, 3)
