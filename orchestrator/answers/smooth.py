"""Borrowing strength across neighbouring configs: each config's pick estimate shrunk toward a
smooth response surface fitted over every measured restart (pure, numpy only).

A night measures most configs once, under a restart-to-restart noise (2 % on the benchmark's
hosts) as large as the gaps between the best configs (0.6-2 %). A config's own mean cannot
tell them apart; its neighbours can, when the surface is smooth: budget 12 and budget 20 at
the same top-k and window say something about budget 16. The fit is Gaussian-process
regression (kriging) on the logarithm of the values:

- a config's position is its level on each knob: a knob whose levels are all numbers (three
  or more, a budget, a top-k) by its rank in numeric order, any other knob (a window of
  none/2048/4096, words) by which level it is; two configs are ``d`` apart with ``d**2`` the
  sum of squared rank differences plus one per other knob they differ on;
- the surface is a constant plus a smooth deviation with covariance ``s2 * exp(-d**2 / 2
  l**2)``; each config's mean log value is that surface plus its restarts' noise, whose
  variance is the restart variance the search measured over its number of restarts;
- ``s2`` and ``l`` are chosen by restricted maximum likelihood over a small grid, so the data
  say how smooth the surface is: where neighbours disagree beyond the restart noise the fit
  chooses a short ``l`` or a large ``s2`` and each config stands on its own restarts again;
- each config's estimate is the fit's posterior mean at its own position, with the posterior
  standard deviation (the constant's uncertainty included) as its error.

What it assumes: a smooth surface in the knobs' levels. A config that is an outlier from its
neighbours is pulled toward them by one restart's worth of doubt, no more: the more it is
measured, the more its own restarts decide (the race measures the leaders directly). The pick
uses the smoothed estimate; what is *reported* for a winner is never smoothed (its
confirmation restarts alone, :mod:`.answer`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from orchestrator.types import KnobValue

MIN_CONFIGS = 4
"""Fewer configs than this: nothing to fit a surface to; each stands on its own restarts."""
LENGTH_SCALES = (0.5, 0.75, 1.0)
"""Candidate correlation lengths, in levels of an ordered knob: a neighbour one level away
is correlated 0.14-0.61. Longer lengths (to 3 levels) smooth more and did better on gentle
synthetic surfaces, but on benchmarks/search.py's development seeds (`default`, 6000-6049 and
7000-7049) they let regions a few levels away set the estimates near the optimum: p95 regret
2.6 % and 3.5 % against 2.2 % and 1.7 % with these."""
RISK_LENGTH_SCALES = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
"""Candidate correlation lengths of the fit that judges untried configs
(:func:`exceed_chances`): the pick's, and longer ones. A pick compares measured configs,
where a long length lets far regions pull the estimates near the optimum; the exploration
risk extrapolates to configs nothing measured, where the short lengths revert to the fitted
constant within a level and call every far config a fresh gamble. On benchmarks/search.py's
development seeds 5000-5015 (`default`, 17 of 85 configs explored) the mean risk was 0.62
with the pick's lengths and 0.37 with these, against an unexplored config truly beating the
answer by the margin in 1 of the 16 (docs/benchmarks.md)."""
RISK_DRAWS = 4000
"""Joint posterior draws behind the chance that any untried config beats the named one (a
fixed seed: the same results give the same risk; its Monte Carlo error is under 0.5 % at a
chance of 10 %)."""
SIGNAL_RATIOS = tuple(2.0**k for k in range(-3, 11))
"""Candidate surface variances, as multiples of one restart's variance."""


def level(value: KnobValue) -> str:
    """A knob value as a category: canonical JSON, so ``1``, ``true`` and ``"1"`` differ."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def ordered_levels(levels: Sequence[str]) -> tuple[str, ...] | None:
    """A knob's levels in numeric order when every level is a number (a budget, a top-k), so
    neighbouring levels may be modelled as alike; None for a knob whose levels are words or
    include absent (a window of none/2048/4096 stays categorical), or too few to order."""
    values = [json.loads(text) for text in levels]
    numeric = all(isinstance(v, int | float) and not isinstance(v, bool) for v in values)
    if len(values) < 3 or not numeric:
        return None
    return tuple(text for _, text in sorted(zip(values, levels, strict=True)))


def knob_levels(
    configs: Sequence[Mapping[str, KnobValue]],
) -> tuple[tuple[str, ...], dict[str, tuple[str, ...]]]:
    """The knobs ``configs`` set (in name order) and each knob's levels as :func:`level` text,
    in order of first appearance (absent is a level too)."""
    knobs = tuple(sorted({name for config in configs for name in config}))
    levels: dict[str, tuple[str, ...]] = {}
    for knob in knobs:
        levels[knob] = tuple(dict.fromkeys(level(config.get(knob)) for config in configs))
    return knobs, levels


@dataclass(frozen=True, slots=True)
class Axes:
    """Where configs sit in a space: its knobs, and the numeric order of the ordered ones."""

    knobs: tuple[str, ...]
    ordered: Mapping[str, tuple[str, ...]]

    @classmethod
    def of(cls, configs: Sequence[Mapping[str, KnobValue]]) -> Axes:
        """The axes of the space ``configs`` span (absent is a level of a knob too)."""
        return cls.of_levels(*knob_levels(configs))

    @classmethod
    def of_levels(cls, knobs: Sequence[str], levels: Mapping[str, Sequence[str]]) -> Axes:
        """The axes of a space whose levels are known already (:func:`knob_levels`)."""
        ordered = {
            knob: order for knob in knobs if (order := ordered_levels(levels[knob])) is not None
        }
        return cls(tuple(knobs), ordered)

    def squared_distances(self, configs: Sequence[Mapping[str, KnobValue]]) -> np.ndarray:
        """``d**2`` between every two of ``configs``: squared rank differences on ordered
        knobs, one per other knob (or a level outside the order) on which they differ."""
        total = np.zeros((len(configs), len(configs)))
        for knob in self.knobs:
            texts = [level(config.get(knob)) for config in configs]
            order = self.ordered.get(knob)
            if order is not None and all(text in order for text in texts):
                ranks = np.array([float(order.index(text)) for text in texts])
                total += (ranks[:, None] - ranks[None, :]) ** 2
            else:
                distinct = sorted(set(texts))
                codes = np.array([distinct.index(text) for text in texts])
                total += codes[:, None] != codes[None, :]
        return total


PRIOR_RESTART_CV = 0.05
"""The restart-to-restart spread a pick assumes before one was measured (the answer's too,
:func:`orchestrator.answers.estimate.assumed_restart_variance`), worth :data:`PRIOR_DF`
degrees of freedom once configs have been repeated."""
PRIOR_DF = 2


def restart_spread(groups: Iterable[Sequence[float]]) -> float:
    """The relative restart-to-restart spread of the configs measured more than once (each a
    group of values), pooled (a common coefficient of variation, as a per-process speed
    factor gives), shrunk toward :data:`PRIOR_RESTART_CV` while few restarts were repeated.

    What :func:`smooth` weighs each restart by whenever a config is picked: by the search
    (its steps, its race, its confirmations) and by the answer alike, so that the answer
    names the config the search raced and confirmed. (The answer's intervals use the type's
    variance model, :func:`orchestrator.answers.estimate.variance_model`: each config's own
    restart variance shrunk toward a prior fitted from the type's repeated configs, completed
    with this same assumed spread only while it rests on under 3 degrees of freedom.)"""
    squares, df = PRIOR_DF * PRIOR_RESTART_CV**2, PRIOR_DF
    for values in groups:
        mean = sum(values) / len(values) if values else 0.0
        if len(values) < 2 or mean == 0:
            continue
        squares += sum(((v - mean) / mean) ** 2 for v in values)
        df += len(values) - 1
    return math.sqrt(squares / df)


@dataclass(frozen=True, slots=True)
class Smoothed:
    """A config's pick estimate (the scale of its values) and its relative standard error."""

    value: float
    rel_se: float
    shrunk: bool
    """False when the config stands on its own restarts (too few configs to fit, values of
    mixed sign)."""


def _own(values: Sequence[float], log_var: float) -> Smoothed:
    mean = math.fsum(values) / len(values)
    return Smoothed(mean, math.sqrt(log_var / len(values)), shrunk=False)


def smooth(
    axes: Axes,
    configs: Sequence[Mapping[str, KnobValue]],
    values: Sequence[Sequence[float]],
    restart_log_var: float,
) -> list[Smoothed]:
    """Each config's estimate from its own restarts and its neighbours' (module docstring).

    ``values[i]`` are config ``i``'s restart values, all of one sign (a minimized metric the
    search negated is smoothed on its magnitude); ``restart_log_var`` is the variance of one
    restart's log value (the squared coefficient of variation)."""
    if len(configs) != len(values) or any(not v for v in values):
        raise ValueError("every config needs at least one value")
    flat = [x for group in values for x in group]
    sign = 1.0 if all(x > 0 for x in flat) else -1.0 if all(x < 0 for x in flat) else 0.0
    if len(configs) < MIN_CONFIGS or sign == 0.0 or restart_log_var <= 0:
        return [_own(v, restart_log_var) for v in values]
    y = np.array([np.mean(np.log(np.abs(v))) for v in values])
    noise = np.array([restart_log_var / len(v) for v in values])
    d2 = axes.squared_distances(configs)
    mean, var = _krige(y, noise, d2, restart_log_var)
    return [
        Smoothed(sign * math.exp(m), math.sqrt(max(v, 0.0)), shrunk=True)
        for m, v in zip(mean.tolist(), var.tolist(), strict=True)
    ]


@dataclass(frozen=True, slots=True)
class _Fit:
    """The kriging fit of the best restricted likelihood on the grid: the length scale, the
    surface variance, the constant and the factor of the data's covariance."""

    length: float
    signal: float
    mu: float
    factor: tuple[np.ndarray, bool]
    info: float


def _fit(
    y: np.ndarray,
    noise: np.ndarray,
    d2: np.ndarray,
    unit: float,
    lengths: Sequence[float] = LENGTH_SCALES,
) -> _Fit | None:
    """The grid point (length scale among ``lengths``, surface variance) of the best
    restricted likelihood; None when no grid point was positive definite."""
    from scipy.linalg import LinAlgError, cho_factor, cho_solve

    ones = np.ones_like(y)
    both = np.stack([y, ones], axis=1)
    best: tuple[float, _Fit] | None = None
    for length in lengths:
        correlation = np.exp(-d2 / (2.0 * length * length))
        for ratio in SIGNAL_RATIOS:
            k = ratio * unit * correlation
            try:
                factor = cho_factor(k + np.diag(noise), lower=True, check_finite=False)
            except LinAlgError:
                continue
            solved = cho_solve(factor, both, check_finite=False)
            info = float(ones @ solved[:, 1])
            mu = float(ones @ solved[:, 0]) / info
            quad = float(y @ solved[:, 0]) - mu * mu * info  # (y - mu)' C^-1 (y - mu)
            logdet = float(np.sum(np.log(np.diag(factor[0]))))
            loglik = -0.5 * quad - logdet - 0.5 * math.log(info)
            if best is None or loglik > best[0]:
                best = (loglik, _Fit(length, ratio * unit, mu, factor, info))
    return None if best is None else best[1]


def _krige(
    y: np.ndarray, noise: np.ndarray, d2: np.ndarray, unit: float
) -> tuple[np.ndarray, np.ndarray]:
    """Ordinary kriging's posterior mean and variance at the measured points, with the length
    scale and surface variance of the best restricted likelihood on the grid."""
    from scipy.linalg import cho_solve

    fit = _fit(y, noise, d2, unit)
    if fit is None:  # no grid point was positive definite: nothing smoothed
        return y, noise
    ones = np.ones_like(y)
    k = fit.signal * np.exp(-d2 / (2.0 * fit.length * fit.length))
    weights = cho_solve(fit.factor, k, check_finite=False)  # C^-1 K, column j for point j
    mean = fit.mu + weights.T @ (y - fit.mu)
    explained = np.einsum("ij,ij->j", k, weights)
    leftover = 1.0 - ones @ weights  # how much of the constant each estimate still leans on
    var = np.diag(k) - explained + leftover**2 / fit.info
    return mean, var


def _posterior(
    fit: _Fit, y: np.ndarray, d2_cross: np.ndarray, d2_targets: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The fit's joint posterior (mean, covariance) of the surface at target positions
    (``d2_cross``: targets x data, ``d2_targets``: targets x targets), the constant's
    uncertainty included."""
    from scipy.linalg import cho_solve

    scale = 2.0 * fit.length * fit.length
    cross = fit.signal * np.exp(-d2_cross / scale)
    prior = fit.signal * np.exp(-d2_targets / scale)
    weights = cho_solve(fit.factor, cross.T, check_finite=False)  # C^-1 k, one column a target
    mean = fit.mu + weights.T @ (y - fit.mu)
    leftover = 1.0 - weights.sum(axis=0)
    cov = prior - cross @ weights + np.outer(leftover, leftover) / fit.info
    return mean, cov


@dataclass(frozen=True, slots=True)
class Exceed:
    """The chances that untried configs beat a measured one by more than a margin."""

    each: tuple[float, ...]
    """Per untried config, alone."""
    any: float
    """That at least one of them does (their joint posterior: they share the fitted constant
    and, when neighbours, their deviations, so this is below ``1 - prod(1 - each)``)."""


def exceed_chances(
    axes: Axes,
    configs: Sequence[Mapping[str, KnobValue]],
    values: Sequence[Sequence[float]],
    chosen: int,
    targets: Sequence[Mapping[str, KnobValue]],
    *,
    margin: float,
    minimized: bool,
) -> Exceed | None:
    """The chances under a smoothed surface that ``targets`` (configs not measured) beat
    config ``chosen`` (one of ``configs``) by more than ``margin`` (relative).

    The surface is :func:`smooth_picks`'s kriging of the same restarts, weighed by the same
    restart spread, its length chosen by the likelihood among :data:`RISK_LENGTH_SCALES`;
    the chances come from its joint posterior at ``chosen`` and the targets, so the
    uncertainty of both sides, and the correlations between them, count. None where no
    surface is fitted (fewer than :data:`MIN_CONFIGS` configs, values not all positive)."""
    from scipy.stats import norm

    if len(configs) != len(values) or any(not v for v in values):
        raise ValueError("every config needs at least one value")
    flat = [x for group in values for x in group]
    if len(configs) < MIN_CONFIGS or not all(x > 0 for x in flat):
        return None
    cv = restart_spread(values)
    unit = cv * cv
    y = np.array([np.mean(np.log(v)) for v in values])
    noise = np.array([unit / len(v) for v in values])
    everything = [*configs, *targets]
    d2 = axes.squared_distances(everything)
    n = len(configs)
    fit = _fit(y, noise, d2[:n, :n], unit, RISK_LENGTH_SCALES)
    if fit is None:
        return None
    if not targets:
        return Exceed((), 0.0)
    points = [chosen, *range(n, len(everything))]
    mean, cov = _posterior(fit, y, d2[points][:, :n], d2[points][:, points])
    sign = -1.0 if minimized else 1.0
    gap = math.log1p(margin)
    each = []
    for j in range(1, len(points)):
        ahead = sign * (mean[j] - mean[0])
        var = max(cov[j, j] + cov[0, 0] - 2.0 * cov[0, j], 1e-12)
        each.append(float(norm.sf((gap - ahead) / math.sqrt(var))))
    draws = np.random.default_rng(0).multivariate_normal(
        mean, cov, size=RISK_DRAWS, method="eigh", check_valid="ignore"
    )
    ahead_draws = sign * (draws[:, 1:] - draws[:, :1])
    joint = float(np.mean(np.any(ahead_draws > gap, axis=1)))
    return Exceed(tuple(each), joint)


def smooth_picks(
    axes: Axes,
    configs: Sequence[Mapping[str, KnobValue]],
    values: Sequence[Sequence[float]],
) -> list[Smoothed]:
    """:func:`smooth` with each restart weighed by :func:`restart_spread` of the same values:
    the estimates every pick ranks by, the search's and the answer's alike, so that the two
    cannot weigh the same restarts differently and name different configs."""
    cv = restart_spread(values)
    return smooth(axes, configs, values, cv * cv)
