"""The intervals hold together as more data comes (issue 32's invariants (f) and (i); issue 22's
are in test_answer_invariants.py), over generated result sets, 2,000 examples per property.

(f) A config's interval never widens when a restart whose value lies inside it is added, and
    two configs with the same restarts and the same spread get the same width. The width is
    the interval's on the scale it is built on (``2 t se``: the log of high/low on the log
    scale; the difference of angles, before clipping to [0, cap], on the share scale), with the
    type's variance model held as it was: a restart added to one config also moves the prior
    every config shrinks toward, which is the type's evidence changing, not this config's.
(i) A baseline whose objective interval lies wholly on the worse side of the best's is never
    tied with it, on every kind of metric an objective may name: a token rate, a latency
    (minimized), goodput at an open-loop cell and a fraction of requests; on every basis an
    interval can have (``restarts``, ``borrowed-restart-variance`` and ``within-run-only``,
    where the interval shown is the one the tie rule reads: the run's own noise with the
    assumed restart spread added).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.answers import Answer, Contender, answer_sweep
from orchestrator.answers.estimate import (
    OwnVariance,
    Sample,
    Scale,
    Spread,
    spread,
    t_quantile,
    variance_model,
)
from orchestrator.store import LatencySummary, MatrixCell, ThroughputMetrics, ThroughputPoint
from orchestrator.sweepfile import Sweep, parse_sweep
from tests.unit.test_answers import B4, B8, B16, Bench, sweep_text
from tests.unit.test_variance_model import OFFERED, SECONDS, goodput_point

EXAMPLES = 2000
SETTINGS = settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)


def _half_width(found: Spread) -> float:
    assert found.rel_se is not None and found.df is not None
    return t_quantile(found.df) * found.rel_se


# --- (f): more data never reads as less certainty -------------------------------------------------


@st.composite
def _variances(draw: st.DrawFn) -> list[OwnVariance]:
    """The type's repeated configs' own variances: a common level, some configs far off it."""
    level = draw(st.floats(1e-5, 0.02))
    return [
        OwnVariance(level * draw(st.floats(0.05, 20.0)), draw(st.integers(1, 5)))
        for _ in range(draw(st.integers(1, 8)))
    ]


@st.composite
def _restarts(draw: st.DrawFn, scale: Scale) -> list[Sample]:
    if scale == "log":
        center = draw(st.floats(10.0, 5000.0))
        return [
            Sample(center * math.exp(draw(st.floats(-0.3, 0.3))))
            for _ in range(draw(st.integers(1, 5)))
        ]
    count = draw(st.sampled_from((10, 43, 400)))
    cap = draw(st.sampled_from((1.0, OFFERED / SECONDS)))
    return [
        Sample(cap * draw(st.integers(0, count)) / count, cap=cap, count=count)
        for _ in range(draw(st.integers(1, 5)))
    ]


@st.composite
def _growth(draw: st.DrawFn) -> tuple[Scale, list[OwnVariance], list[Sample], float]:
    scale: Scale = draw(st.sampled_from(("log", "share")))
    return scale, draw(_variances()), draw(_restarts(scale)), draw(st.floats(0.0, 1.0))


@SETTINGS
@given(_growth())
def test_f_a_restart_inside_the_interval_never_widens_it(
    case: tuple[Scale, list[OwnVariance], list[Sample], float],
) -> None:
    scale, variances, samples, where = case
    model = variance_model(variances, scale)
    assert model is not None
    before = spread(samples, model)
    assert before is not None and before.ci95 is not None
    low, high = before.ci95
    value = low + where * (high - low)
    added = Sample(value, cap=samples[0].cap, count=samples[0].count)
    after = spread([*samples, added], model)
    assert after is not None and after.basis == "restarts"
    assert _half_width(after) <= _half_width(before) * (1 + 1e-9)


@st.composite
def _twins(draw: st.DrawFn) -> tuple[list[float], float, list[list[float]]]:
    """One config's restarts, a factor another config's are the same restarts times, and
    the other configs' restarts on the type."""
    first = [draw(st.floats(50.0, 150.0)) for _ in range(draw(st.integers(1, 4)))]
    others = [
        [draw(st.floats(50.0, 150.0)) for _ in range(draw(st.integers(1, 4)))]
        for _ in range(draw(st.integers(0, 2)))
    ]
    return first, draw(st.floats(1.1, 3.0)), others


@SETTINGS
@given(_twins())
def test_f_the_same_restarts_and_spread_get_the_same_width(
    case: tuple[list[float], float, list[list[float]]],
) -> None:
    """Through the whole answer: configs budget=4 and budget=8 with the same number of
    restarts and the same relative spread, on one host type with others."""
    first, factor, others = case
    bench = Bench()
    for value in first:
        bench.run("a", B4, value)
        bench.run("a", B8, value * factor)
    for config, values in zip(({}, B16), others, strict=False):
        for value in values:
            bench.run("a", config, value)
    (answer,) = answer_sweep(bench.results(), parse_sweep(sweep_text(), "t.yaml"))
    four = next(c for c in answer.contenders if c.config == B4).estimate
    eight = next(c for c in answer.contenders if c.config == B8).estimate
    assert four.basis == eight.basis and four.restarts == eight.restarts
    if four.ci95 is None or eight.ci95 is None:
        assert four.ci95 is None and eight.ci95 is None
        return
    width = math.log(four.ci95[1] / four.ci95[0])
    assert math.isclose(math.log(eight.ci95[1] / eight.ci95[0]), width, rel_tol=1e-9)


# --- (i): a baseline wholly behind is never tied ------------------------------------------------

_OPEN_LOOP = "benchmark: {contexts: [2048], concurrency: [], rate: [4], slo: {ttft_ms: 2000}}\n"


def _sweep(metric: str) -> Sweep:
    text = sweep_text(objective=False)
    if metric in ("goodput", "goodput_fraction"):
        text = text.replace("benchmark: {contexts: [1024, 4096], concurrency: [4]}\n", _OPEN_LOOP)
        text += f"objective: {{metric: {metric}, context: 2048, rate: 4}}\n"
    else:
        text += f"objective: {{metric: {metric}, context: 1024, concurrency: 4}}\n"
    return parse_sweep(text, "t.yaml")


METRICS = ("output_tok_s", "ttft_p99_s", "goodput", "goodput_fraction")
SWEEPS = {metric: _sweep(metric) for metric in METRICS}


@dataclass(frozen=True)
class Restart:
    config: int
    host: str
    level: float
    """Relative to what the metric can reach: tokens/s over 1000, seconds, a share of 1."""
    within: float = 0.01
    """A token rate's within-run standard error, relative to its value."""
    batches: int = 4
    """The batch means that error rests on (its degrees of freedom, less one)."""


@dataclass(frozen=True)
class Case:
    metric: str
    restarts: tuple[Restart, ...]


CONFIGS: tuple[Mapping[str, Any], ...] = ({}, B4, B8, B16)


def _record(bench: Bench, metric: str, restart: Restart) -> None:
    config = CONFIGS[restart.config]
    if metric == "output_tok_s":
        value = 1000.0 * restart.level
        metrics = ThroughputMetrics(
            output_tok_s=value,
            output_tok_s_se=value * restart.within,
            output_tok_s_batches=restart.batches,
            ttft=LatencySummary(count=4, p99_s=0.5),
        )
        point = ThroughputPoint(context=1024, concurrency=4, metrics=metrics)
        bench._add(restart.host, config, [point], cells=(MatrixCell(1024, 4),))
        return
    if metric == "ttft_p99_s":
        bench.run(restart.host, config, 1000.0, ttft_p99=restart.level)
        return
    point = goodput_point(round(OFFERED * restart.level), wall=SECONDS + 0.2)
    bench._add(restart.host, config, [point], cells=(MatrixCell(2048, rate=4.0),))


@st.composite
def _cases(draw: st.DrawFn) -> Case:
    """Result sets of every basis: configs restarted up to 4 times (``restarts``, and
    ``borrowed-restart-variance`` for those restarted once beside repeated ones), or each at
    most once (``within-run-only``: nothing repeated on the type)."""
    metric = draw(st.sampled_from(METRICS))
    share = metric in ("goodput", "goodput_fraction")
    most = draw(st.sampled_from((1, 4)))
    levels = [draw(st.floats(0.0, 1.0) if share else st.floats(0.2, 3.0)) for _ in CONFIGS]
    restarts: list[Restart] = []
    for config, level in enumerate(levels):
        for _ in range(draw(st.integers(0 if config else 1, most))):
            spread_ = draw(st.floats(0.0, 0.3))
            noisy = level * (1 + draw(st.floats(-spread_, spread_)))
            restarts.append(
                Restart(
                    config,
                    draw(st.sampled_from(("a", "b"))),
                    min(noisy, 1.0) if share else noisy,
                    draw(st.floats(0.0005, 0.05)),
                    draw(st.integers(2, 16)),
                )
            )
    order = draw(st.permutations(range(len(restarts))))
    return Case(metric, tuple(restarts[i] for i in order))


def _behind(baseline: tuple[float, float], best: tuple[float, float], *, minimized: bool) -> bool:
    """The baseline's interval lies wholly on the worse side of the best's."""
    return baseline[0] > best[1] if minimized else baseline[1] < best[0]


def _answer(case: Case) -> Answer:
    bench = Bench()
    for restart in case.restarts:
        _record(bench, case.metric, restart)
    (answer,) = answer_sweep(bench.results(("a", "b")), SWEEPS[case.metric])
    return answer


def _behind_pair(case: Case) -> tuple[Answer, Contender, Contender] | None:
    """The answer, its best and its baseline, when the baseline's interval lies wholly on
    the worse side of the best's; None otherwise."""
    answer = _answer(case)
    best = answer.best
    baseline = next((c for c in answer.contenders if not c.config), None)
    if best is None or baseline is None or baseline is best or baseline.violations:
        return None
    if best.estimate.ci95 is None or baseline.estimate.ci95 is None:
        return None
    minimized = answer.objective.minimized
    if not _behind(baseline.estimate.ci95, best.estimate.ci95, minimized=minimized):
        return None
    return answer, best, baseline


@SETTINGS
@given(_cases())
def test_i_a_baseline_wholly_behind_the_best_is_never_tied(case: Case) -> None:
    found = _behind_pair(case)
    if found is None:
        return
    answer, best, baseline = found
    assert baseline not in answer.tied
    assert best.speedup_ci95 is not None and best.speedup_ci95[0] > 1.0


@SETTINGS
@given(_cases())
def test_i_any_config_wholly_behind_the_best_is_never_tied(case: Case) -> None:
    """The same for every valid config, read from the contenders table's "ahead by" column."""
    answer = _answer(case)
    best = answer.best
    if best is None or best.estimate.ci95 is None:
        return
    minimized = answer.objective.minimized
    for other in answer.contenders:
        if other is best or other.violations or other.estimate.ci95 is None:
            continue
        if _behind(other.estimate.ci95, best.estimate.ci95, minimized=minimized):
            assert other not in answer.tied
            assert other.vs_best is not None and other.vs_best.ci95 is not None
            assert other.vs_best.ci95[0] > 0.0


def test_the_generator_reaches_baselines_behind_on_every_metric_and_basis() -> None:
    """Not vacuous: on a fixed sample, each metric gives baselines wholly behind the best, and
    so does each basis an interval can have (a latency has no within-run error: one restart
    of it has no interval)."""
    metrics: set[str] = set()
    bases: set[tuple[str, str]] = set()

    @settings(max_examples=600, deadline=None, database=None, derandomize=True)
    @given(_cases())
    def collect(case: Case) -> None:
        found = _behind_pair(case)
        if found is not None:
            metrics.add(case.metric)
            bases.add((case.metric, found[2].estimate.basis))

    collect()
    assert metrics == set(METRICS), metrics
    for metric in ("output_tok_s", "goodput", "goodput_fraction"):
        assert (metric, "within-run-only") in bases, bases
    assert any(basis == "borrowed-restart-variance" for _, basis in bases), bases
