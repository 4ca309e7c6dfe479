"""Borrowing strength across neighbouring configs (orchestrator/answers/smooth.py) on
synthetic data with a known answer: on a smooth surface measured once per config under a 2 %
restart noise, the smoothed estimates find the best measured config more often than raw
means; a config measured often keeps its own value; where a surface cannot be fitted each
config stands on its own restarts. Pure numpy, no store: each test well under a second.
"""

from __future__ import annotations

import math
import random

from orchestrator.answers import answer_sweep
from orchestrator.answers.smooth import Axes, smooth
from orchestrator.search.source import Standing, smoothed
from orchestrator.store import (
    HostOutcome,
    MatrixCell,
    SweepResults,
    ThroughputMetrics,
    ThroughputPoint,
    TrialOutcome,
    TrialPlan,
)
from orchestrator.sweepfile import Sweep, parse_sweep
from orchestrator.types import KnobValue

BUDGETS = (4, 8, 12, 16, 20, 24, 32)
TOPKS = (2, 4, 6, 8)
WINDOWS: tuple[int | None, ...] = (None, 2048, 4096)
SPACE: list[dict[str, KnobValue]] = [
    {"budget": b, "topk": t, "window": w} for b in BUDGETS for t in TOPKS for w in WINDOWS
]


def _truth(config: dict[str, KnobValue]) -> float:
    """A smooth peak at budget 8-12, top-k 4, the window 2048 a little better (a few % per
    level away from the peak, as speculative-decoding knobs behave)."""
    b = BUDGETS.index(config["budget"])  # type: ignore[arg-type]
    t = TOPKS.index(config["topk"])  # type: ignore[arg-type]
    w = {None: 0.0, 2048: 0.02, 4096: 0.01}[config["window"]]  # type: ignore[index]
    return 600.0 * math.exp(-0.03 * (b - 1.3) ** 2 - 0.02 * (t - 1.2) ** 2 + w)


def test_the_axes_order_numeric_knobs_and_keep_others_categorical() -> None:
    axes = Axes.of(SPACE)
    assert axes.ordered["budget"] == tuple(str(b) for b in BUDGETS)
    assert "window" not in axes.ordered  # none/2048/4096: absent is not a number
    d2 = axes.squared_distances(
        [SPACE[0], {"budget": 12, "topk": 2, "window": None}, {**SPACE[0], "window": 2048}]
    )
    assert d2[0, 1] == 4.0  # two budget levels apart
    assert d2[0, 2] == 1.0  # another window level
    assert d2[1, 2] == 5.0


def test_smoothing_finds_the_best_config_more_often_than_raw_means() -> None:
    """The whole space measured once (a grid's night) under a 2 % restart noise, 20 times:
    the smoothed pick is the true best more often, and lands nearer it, than the best raw
    restart (the winner's curse of a pick on single restarts)."""
    rng = random.Random(7)
    axes = Axes.of(SPACE)
    truths = [_truth(c) for c in SPACE]
    best = max(truths)
    raw_regret = smooth_regret = 0.0
    raw_hits = smooth_hits = 0
    for _ in range(20):
        data = [[v * math.exp(rng.gauss(0.0, 0.02))] for v in truths]
        fits = smooth(axes, SPACE, data, 0.02**2)
        assert all(fit.shrunk for fit in fits)
        raw = max(range(len(SPACE)), key=lambda i: data[i][0])
        smoothed = max(range(len(SPACE)), key=lambda i: fits[i].value)
        raw_regret += 1 - truths[raw] / best
        smooth_regret += 1 - truths[smoothed] / best
        raw_hits += truths[raw] == best
        smooth_hits += truths[smoothed] == best
    assert smooth_regret < 0.8 * raw_regret
    assert smooth_hits > raw_hits


def test_a_config_measured_often_stands_on_its_own_restarts() -> None:
    """An outlier from its neighbours (10 % above them) measured eight times is not pulled
    to them: its own restarts outweigh one restart's worth of doubt each neighbour adds."""
    rng = random.Random(3)
    axes = Axes.of(SPACE)
    chosen = SPACE[:12]
    data = [[_truth(c) * math.exp(rng.gauss(0.0, 0.02))] for c in chosen]
    outlier = 5
    high = 1.10 * _truth(chosen[outlier])
    data[outlier] = [high * math.exp(rng.gauss(0.0, 0.02)) for _ in range(8)]
    fits = smooth(axes, chosen, data, 0.02**2)
    own = sum(data[outlier]) / len(data[outlier])
    assert abs(fits[outlier].value / own - 1) < 0.02
    assert fits[outlier].value == max(fit.value for fit in fits)


def test_too_few_configs_or_mixed_signs_are_not_smoothed() -> None:
    axes = Axes.of(SPACE)
    few = smooth(axes, SPACE[:3], [[100.0], [101.0, 103.0], [99.0]], 0.02**2)
    assert [fit.value for fit in few] == [100.0, 102.0, 99.0]
    assert not any(fit.shrunk for fit in few)
    mixed = smooth(axes, SPACE[:4], [[1.0], [-1.0], [2.0], [3.0]], 0.02**2)
    assert [fit.value for fit in mixed] == [1.0, -1.0, 2.0, 3.0]
    negated = smooth(axes, SPACE[:5], [[-1.0], [-1.1], [-1.2], [-1.0], [-1.05]], 0.02**2)
    assert all(fit.value < 0 and fit.shrunk for fit in negated)  # a minimized metric


def _outcome(n: int, config: dict[str, KnobValue], value: float, purpose: str) -> TrialOutcome:
    cell = MatrixCell(1024, 4)
    return TrialOutcome(
        key=f"a.{n}",
        host="a",
        config=dict(config),
        baseline=not config,
        state="done",
        cause=None,
        attempt=1,
        started_at=float(n),
        finished_at=float(n) + 0.5,
        points=(
            ThroughputPoint(
                context=1024, concurrency=4, metrics=ThroughputMetrics(output_tok_s=value)
            ),
        ),
        plan=TrialPlan(cells=(cell,), rounds=2, problems=(), purpose=purpose),  # type: ignore[arg-type]
    )


def _budget_sweep() -> Sweep:
    """One host type, a budget line of 8 configs and a baseline, the objective its one cell."""
    return parse_sweep(
        "\n".join(
            [
                "name: t",
                "hosts:",
                '  - {name: a, address: 127.0.0.1, base_url: "http://127.0.0.1:30000", type: gpu}',
                "server:",
                "  model: m",
                "  knobs: {budget: {flag: --speculative-ddtree-budget}}",
                "baseline: true",
                "grid: {budget: [4, 8, 12, 16, 20, 24, 28, 32]}",
                "benchmark: {contexts: [1024], concurrency: [4]}",
                "objective: {metric: output_tok_s, context: 1024, concurrency: 4}",
            ]
        )
        + "\n",
        "t.yaml",
    )


def test_the_answer_picks_on_smoothed_estimates_and_reports_confirmations_alone() -> None:
    """One restart per budget under a 2-3 % restart noise: a peak at 12-16 whose neighbours
    agree, and budget 28 one restart above it between neighbours 6-7 % below (a lucky
    restart, by the noise). Raw means would name 28; the smoothed pick names the peak's best,
    and its estimate is still its confirmation restart's alone."""
    sweep = _budget_sweep()
    screens = {4: 95.0, 8: 99.0, 12: 101.0, 16: 100.5, 20: 98.0, 24: 95.0, 28: 101.5, 32: 94.0}
    trials = [_outcome(0, {}, 80.0, "measure"), _outcome(1, {}, 82.5, "measure")]
    for n, (budget, value) in enumerate(screens.items(), start=2):
        trials.append(_outcome(n, {"budget": budget}, value, "screen"))
    trials.append(_outcome(20, {"budget": 12}, 99.0, "confirm"))
    results = SweepResults(
        sweep="t", id=1, state="done", hosts=(HostOutcome("a", "gpu"),), trials=tuple(trials)
    )
    (answer,) = answer_sweep(results, sweep)
    assert answer.best is not None and answer.best.config == {"budget": 12}
    assert answer.best.estimate.value == 99.0  # the confirmation alone, not the smoothed 100+
    raw_best = max(screens, key=lambda b: screens[b])
    assert raw_best == 28  # what the pick on raw means would have named


def test_the_answer_names_the_config_the_search_led_with() -> None:
    """The same screens, and budget 4 restarted twice with values that agree to the digit: the
    measured restart variance is nil. The search weighs each restart by a spread shrunk
    toward its prior (two agreeing restarts are not proof of a quiet host) and leads with the
    peak, budget 12, which it then races and confirms. The answer must pick with the same
    weights: on the measured variance alone nothing is smoothed, and it would name budget 28's
    one lucky restart, a config the search never raced."""
    sweep = _budget_sweep()
    screens = {4: 95.0, 8: 99.0, 12: 101.0, 16: 100.5, 20: 98.0, 24: 95.0, 28: 101.5, 32: 94.0}
    trials = [_outcome(0, {}, 80.0, "measure")]
    for n, (budget, value) in enumerate(screens.items(), start=1):
        trials.append(_outcome(n, {"budget": budget}, value, "screen"))
    trials.append(_outcome(10, {"budget": 4}, 95.0, "measure"))
    results = SweepResults(
        sweep="t", id=1, state="done", hosts=(HostOutcome("a", "gpu"),), trials=tuple(trials)
    )
    values = {budget: [value] for budget, value in screens.items()}
    values[4].append(95.0)
    axes = Axes.of([{"budget": budget} for budget in screens])
    standings = [Standing({"budget": b}, tuple(v)) for b, v in values.items()]
    led = max(smoothed(standings, axes), key=lambda s: s.pick)
    assert led.config == {"budget": 12}
    (answer,) = answer_sweep(results, sweep)
    assert answer.best is not None and answer.best.config == led.config
