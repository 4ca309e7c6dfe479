"""A config's objective value on one host type, and the 95 % interval around it (pure).

What an interval covers depends on what was measured, and each :class:`Spread` says which
(``basis``, :data:`~orchestrator.answers.model.IntervalBasis`):

- ``restarts`` (two or more restarts of the config): a t interval over the restart values.
  Each restart's value already carries that run's request-to-request noise, so the spread of
  the restart values covers both request-to-request and restart-to-restart variance (and, when
  the restarts ran on several hosts of the type, host-to-host variance within the type).
- ``borrowed-restart-variance`` (one restart): the one value, with the relative restart
  variance pooled over the type's repeated configs (:func:`pooled_restart_variance`) and its
  degrees of freedom. It assumes the config's restarts spread like the repeated configs' do
  (a common coefficient of variation), which is what a multiplicative speed factor per process
  gives.
- ``within-run-only`` (one restart, nothing repeated on the type): the run's own standard
  error (batch means over its waves), request-to-request noise only. Restart-to-restart
  variance is not in it, so it is too narrow wherever restarts differ; it is labelled so.
- ``none``: nothing to build an interval from.

Intervals use Student's t quantiles (scipy) on the log scale: the metrics are positive and
their noise multiplicative (a speed factor per process), so an interval is ``value *
exp(+-t * rel_se)``, never below zero however few and spread the restarts. Ratios (speedup,
margin) are t intervals on the log ratio (:func:`ratio_interval`). No relative error is
taken below :data:`MIN_RESTART_CV` per restart: identical values (a metric capped by the
offered load, a rounding) say the noise was not seen, not that there is none.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.answers.model import Estimate, IntervalBasis

CONFIDENCE = 0.95
NOISY_CV = 0.05
"""A config whose restarts vary by more than this (coefficient of variation) is noisy."""
MIN_RESTART_CV = 0.005
"""The least restart-to-restart spread an interval assumes (0.5 %, a quarter of what the
benchmark's hosts show): two restarts that agree to the digit, or a type whose repeated
configs all hit the same cap, would otherwise give an interval of zero width."""


@functools.lru_cache(maxsize=4096)
def t_quantile(df: float) -> float:
    """The two-sided 95 % quantile of Student's t with ``df`` degrees of freedom (cached: an
    answer asks for the same few many times)."""
    from scipy import special  # imported on first use: scipy is slow to import

    return float(special.stdtrit(df, 0.5 + CONFIDENCE / 2))


def t_interval(value: float, scale: float, df: float) -> tuple[float, float]:
    """``value`` +- the 95 % t quantile times ``scale``."""
    half = t_quantile(df) * scale
    return (value - half, value + half)


def log_interval(value: float, rel_se: float, df: float) -> tuple[float, float]:
    """The 95 % t interval of a positive ``value`` on the log scale: ``value * exp(+-t *
    rel_se)`` (the relative error is the log value's standard error, to first order)."""
    low, high = t_interval(math.log(value), rel_se, df)
    return (math.exp(low), math.exp(high))


def floored(rel_se: float, restarts: int) -> float:
    """``rel_se`` no smaller than :data:`MIN_RESTART_CV` over ``restarts`` restarts."""
    return max(rel_se, MIN_RESTART_CV / math.sqrt(restarts))


@dataclass(frozen=True, slots=True)
class Sample:
    """One restart's objective value, with the request-to-request standard error of that run
    when the point stores one."""

    value: float
    host: str = ""
    within_se: float | None = None
    within_df: float | None = None


@dataclass(frozen=True, slots=True)
class RestartVariance:
    """Restart-to-restart variance of log values (about the squared coefficient of variation)
    pooled over a host type's repeated configs."""

    log_var: float
    df: int
    configs: int


@dataclass(frozen=True, slots=True)
class Spread:
    """A value with its standard error relative to the value and that error's degrees of
    freedom: what an interval, and a ratio's interval, are built from."""

    value: float
    rel_se: float | None
    df: float | None
    basis: IntervalBasis
    restarts: int
    hosts: tuple[str, ...] = ()
    cv: float | None = None
    borrowed_from: int = 0
    """Repeated configs the restart variance was borrowed from (basis borrowed only)."""

    @property
    def ci95(self) -> tuple[float, float] | None:
        """The 95 % interval on the log scale (:func:`log_interval`); None without an error
        or for a value that is not positive (no scale to build it on)."""
        if self.rel_se is None or self.df is None or not self.value > 0:
            return None
        return log_interval(self.value, self.rel_se, self.df)

    @property
    def noisy(self) -> bool:
        return self.cv is not None and self.cv > NOISY_CV

    def estimate(self) -> Estimate:
        return Estimate(
            value=self.value,
            ci95=self.ci95,
            basis=self.basis,
            restarts=self.restarts,
            hosts=self.hosts,
            cv=self.cv,
            noisy=self.noisy,
        )


def _positive(values: Iterable[float]) -> list[float]:
    return [v for v in values if math.isfinite(v) and v > 0]


def pooled_restart_variance(groups: Iterable[Sequence[float]]) -> RestartVariance | None:
    """The log-scale variance of restart values pooled over configs measured at least twice
    (each config's own mean removed, degrees of freedom summed); None when none was."""
    squares = 0.0
    df = 0
    configs = 0
    for group in groups:
        values = _positive(group)
        if len(values) < 2:
            continue
        logs = [math.log(v) for v in values]
        center = math.fsum(logs) / len(logs)
        squares += math.fsum((x - center) ** 2 for x in logs)
        df += len(values) - 1
        configs += 1
    if df == 0:
        return None
    return RestartVariance(log_var=squares / df, df=df, configs=configs)


def _hosts(samples: Sequence[Sample]) -> tuple[str, ...]:
    return tuple(sorted({s.host for s in samples if s.host}))


def spread(samples: Sequence[Sample], pooled: RestartVariance | None) -> Spread | None:
    """The estimate from ``samples`` (one per restart): see the module's bases. None when
    there is no sample."""
    if not samples:
        return None
    values = [s.value for s in samples]
    mean = math.fsum(values) / len(values)
    hosts = _hosts(samples)
    if len(samples) >= 2:
        sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))
        cv = sd / abs(mean) if mean != 0 else None
        rel = floored(sd / math.sqrt(len(samples)) / mean, len(samples)) if mean > 0 else None
        return Spread(mean, rel, len(samples) - 1, "restarts", len(samples), hosts, cv)
    (sample,) = samples
    if pooled is not None and mean > 0:
        return Spread(
            mean,
            floored(math.sqrt(pooled.log_var), 1),
            pooled.df,
            "borrowed-restart-variance",
            1,
            hosts,
            borrowed_from=pooled.configs,
        )
    if sample.within_se is not None and sample.within_df and mean > 0:
        return Spread(
            mean, floored(sample.within_se / mean, 1), sample.within_df, "within-run-only", 1, hosts
        )
    return Spread(mean, None, None, "none", 1, hosts)


def geomean_within(
    values: Sequence[float], ses: Sequence[float | None], dfs: Sequence[float | None]
) -> tuple[float, float | None, float | None]:
    """The geometric mean of one run's cell values with its within-run standard error (delta
    method on the logs: the cells' relative errors add in quadrature, over the cell count) and
    the smallest of the cells' degrees of freedom; (value, None, None) when a cell has none."""
    if any(v <= 0 for v in values):
        return 0.0, None, None
    value = float(np.exp(np.mean(np.log(values))))
    if any(se is None for se in ses) or any(df is None for df in dfs):
        return value, None, None
    rel = math.sqrt(sum((se / v) ** 2 for se, v in zip(ses, values, strict=True) if se is not None))
    return value, value * rel / len(values), min(df for df in dfs if df is not None)


def ratio_interval(
    numerator: Spread, denominator: Spread
) -> tuple[float, tuple[float, float] | None]:
    """``numerator / denominator`` with a 95 % t interval on its logarithm.

    The two estimates come from different restarts, so their errors are independent: the log
    ratio's standard error is the two relative errors in quadrature, with Welch-Satterthwaite
    degrees of freedom. The interval covers whatever each side's basis covers (restarts:
    request-to-request and restart-to-restart variance; within-run-only: request-to-request
    only); None when either side has no interval or a value is not positive.
    """
    if numerator.value <= 0 or denominator.value <= 0:
        return math.nan, None
    ratio = numerator.value / denominator.value
    if numerator.rel_se is None or denominator.rel_se is None:
        return ratio, None
    if numerator.df is None or denominator.df is None:
        return ratio, None
    var_a, var_b = numerator.rel_se**2, denominator.rel_se**2
    total = var_a + var_b
    if total == 0.0:
        return ratio, (ratio, ratio)
    df = total**2 / (
        (var_a**2 / numerator.df if var_a else 0.0) + (var_b**2 / denominator.df if var_b else 0.0)
    )
    low, high = t_interval(math.log(ratio), math.sqrt(total), df)
    return ratio, (math.exp(low), math.exp(high))


def improvement(
    better: Spread, other: Spread, *, minimized: bool
) -> tuple[float, tuple[float, float] | None]:
    """How many times ``better`` beats ``other`` (above 1 = better, whichever way the metric
    goes: for a minimized metric, ``other / better``), with the 95 % interval of
    :func:`ratio_interval`."""
    if minimized:
        return ratio_interval(other, better)
    return ratio_interval(better, other)
