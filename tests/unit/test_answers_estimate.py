"""Intervals on synthetic experiments with a known answer: what each basis covers, and what not.

Each experiment draws restarts of a config whose true mean is known: a per-restart speed factor
(restart-to-restart sd) times the true mean, plus the run's own request-to-request error. A
95 % interval should hold the true mean in about 95 of 100 experiments; with 2000 experiments
the binomial standard error is 0.5 %, so 93-97 % is four of them either side.
"""

from __future__ import annotations

import numpy as np

from orchestrator.answers.estimate import (
    Sample,
    own_variance,
    ratio_interval,
    spread,
    variance_model,
)
from orchestrator.bench.stats import batch_rate_se

EXPERIMENTS = 2000
MU = 100.0
RESTART_SD = 0.03
REQUEST_SE = 0.01


def _restarts(rng: np.random.Generator, mu: float, n: int, restart_sd: float) -> list[Sample]:
    factors = 1.0 + restart_sd * rng.standard_normal(n)
    noise = REQUEST_SE * mu * rng.standard_normal(n)
    return [
        Sample(float(mu * f + e), "h", REQUEST_SE * mu, 10_000)
        for f, e in zip(factors, noise, strict=True)
    ]


def _covers(ci: tuple[float, float] | None, truth: float) -> bool:
    assert ci is not None
    return ci[0] <= truth <= ci[1]


def test_restart_t_interval_covers_95_percent() -> None:
    rng = np.random.default_rng(1)
    hits = 0
    for _ in range(EXPERIMENTS):
        found = spread(_restarts(rng, MU, 3, RESTART_SD), None)
        assert found is not None and found.basis == "restarts" and found.restarts == 3
        hits += _covers(found.ci95, MU)
    assert 0.93 <= hits / EXPERIMENTS <= 0.97


def test_borrowed_restart_variance_covers_95_percent_with_one_restart() -> None:
    """One restart of the config, four other configs (other true means) repeated three times:
    the type's variance model (their variances' prior) gives the one restart an honest
    interval."""
    rng = np.random.default_rng(2)
    hits = 0
    for _ in range(EXPERIMENTS):
        repeated = [_restarts(rng, m, 3, RESTART_SD) for m in (60, 80, 120, 150)]
        owns = [own for group in repeated if (own := own_variance([group], "log")) is not None]
        model = variance_model(owns, "log")
        assert model is not None and model.configs == 4
        found = spread(_restarts(rng, MU, 1, RESTART_SD), model)
        assert found is not None and found.basis == "borrowed-restart-variance"
        hits += _covers(found.ci95, MU)
    assert 0.93 <= hits / EXPERIMENTS <= 0.97


def test_within_run_only_under_covers_when_restarts_vary_which_is_why_it_is_labelled() -> None:
    rng = np.random.default_rng(3)
    with_restart_noise = 0
    without = 0
    for _ in range(EXPERIMENTS):
        found = spread(_restarts(rng, MU, 1, RESTART_SD), None)
        assert found is not None and found.basis == "within-run-only"
        with_restart_noise += _covers(found.ci95, MU)
        steady = spread(_restarts(rng, MU, 1, 0.0), None)
        assert steady is not None
        without += _covers(steady.ci95, MU)
    assert with_restart_noise / EXPERIMENTS < 0.7  # about 46 %: restart variance is not in it
    assert 0.93 <= without / EXPERIMENTS <= 0.97  # right when restarts do not vary


def test_no_interval_without_repeats_or_a_within_run_error() -> None:
    found = spread([Sample(100.0, "h")], None)
    assert found is not None and found.basis == "none" and found.ci95 is None
    assert spread([], None) is None


def test_ratio_interval_covers_the_true_speedup() -> None:
    rng = np.random.default_rng(4)
    hits = 0
    for _ in range(EXPERIMENTS):
        fast = spread(_restarts(rng, 1.25 * MU, 3, RESTART_SD), None)
        base = spread(_restarts(rng, MU, 4, RESTART_SD), None)
        assert fast is not None and base is not None
        ratio, ci = ratio_interval(fast, base)
        assert ratio > 0
        hits += _covers(ci, 1.25)
    assert 0.93 <= hits / EXPERIMENTS <= 0.97


def test_noisy_when_restarts_vary_more_than_5_percent() -> None:
    calm = spread([Sample(v) for v in (100.0, 101.0, 99.0)], None)
    rough = spread([Sample(v) for v in (100.0, 112.0, 90.0)], None)
    assert calm is not None and calm.cv is not None and not calm.noisy
    assert rough is not None and rough.cv is not None and rough.cv > 0.05 and rough.noisy


def test_batch_means_standard_error_of_a_closed_loop_rate() -> None:
    """Waves of 4 requests of 100 tokens: steady waves have no spread; waves whose length
    varies by a known sd give a standard error near the rate's true sd over sqrt(waves)."""
    steady = [(1.0 * (w + 1), 100.0) for w in range(10) for _ in range(4)]
    se, batches = batch_rate_se(steady, 0.0, 4)
    assert batches == 10 and se is not None and se < 1e-9
    assert batch_rate_se(steady[:4], 0.0, 4) == (None, 1)

    rng = np.random.default_rng(5)
    estimates, rates = [], []
    for _ in range(400):
        spans = 1.0 + 0.05 * rng.standard_normal(20)
        ends = np.cumsum(spans)
        done = [(float(end), 100.0) for end in ends for _ in range(4)]
        se, batches = batch_rate_se(done, 0.0, 4)
        assert batches == 20 and se is not None
        estimates.append(se)
        rates.append(400.0 * 20 / float(ends[-1]))
    assert 0.8 < float(np.mean(estimates)) / float(np.std(rates, ddof=1)) < 1.2
