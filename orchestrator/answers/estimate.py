"""A config's objective value on one host type, and the 95 % interval around it (pure).

**One variance model per host type** (:class:`VarianceModel`). Restart-to-restart variance is
a property of the host type and the operating point far more than of one config, and a config
is rarely restarted more than a few times. So each config's own restart variance ``s**2``
(``d`` degrees of freedom) is shrunk toward the type's, empirical Bayes as limma's moderated t
does for few replicates (Smyth 2004): the configs' variances are taken as draws from a scaled
inverse chi-square prior whose ``s0**2`` and ``d0`` are estimated from them by limma's method
of moments on the log variances (:func:`fit_prior`), and a config's variance is the posterior
``(d0*s0**2 + d*s**2) / (d0 + d)`` on ``d0 + d`` degrees of freedom (``d0`` at most the
type's pooled degrees of freedom: a prior is worth no more than the restarts it came from).
A config with one restart gets ``s0**2`` on ``d0``; each restart added moves the variance
toward its own and adds a degree of freedom, so an interval narrows as restarts are added,
while a config whose own restarts spread far more than the type's keeps a wide one. With fewer than
:data:`MIN_PRIOR_CONFIGS` repeated configs the prior cannot be estimated: the pooled variance
stands for it, with its degrees of freedom. A prior worth fewer than :data:`MIN_PRIOR_DF`
degrees of freedom is completed with the house's assumed restart spread
(:data:`~orchestrator.answers.smooth.PRIOR_RESTART_CV`, the spread a pick assumes too).

Each :class:`Spread` says what its interval covers (``basis``,
:data:`~orchestrator.answers.model.IntervalBasis`):

- ``restarts`` (the config was restarted more than once): its own restart variance,
  moderated as above. Each restart's value carries that run's request-to-request noise, so
  the restarts' spread covers request-to-request and restart-to-restart variance (and,
  across the type's hosts, host-to-host variance within the type).
- ``borrowed-restart-variance`` (one restart): the prior's variance, on its degrees of
  freedom. It assumes the config's restarts spread like the type's do.
- ``within-run-only`` (one restart, nothing repeated on the type): the run's own standard
  error, request-to-request noise only; too narrow wherever restarts differ, labelled so. An
  answer shows and weighs it with the assumed restart variance added
  (:func:`with_assumed_restarts`), one interval for the reader and the tie rule.
- ``none``: nothing to build an interval from.

**Scales** (:data:`Scale`). Most metrics are positive with multiplicative noise (a speed factor
per process): intervals are built on the ``log`` scale, ``value * exp(+-t * se)``, never below
zero. A rate the offered load bounds (goodput, at an open-loop cell) and a share of requests
(``goodput_fraction``, ``coding_pass_rate``) are counts out of a known number: their noise is
binomial, not multiplicative, and a value near 0 has no useful log. They are built on the
``share`` scale, the arcsine square root of the share ``value / cap`` (the variance-stabilizing
scale of a proportion, where one variance model across configs is sound): ``cap *
sin(theta +- t * se)**2``, inside ``[0, cap]``. Ratios (speedups, margins) are read on the
same scale as the intervals (:func:`ratio_interval`), so two configs whose intervals do not
overlap are never called tied.

No variance is taken below a floor per restart: :data:`MIN_RESTART_CV` squared on the log
scale, one restart's binomial variance ``1/(4n)`` on the share scale. Identical values (a
metric capped by the offered load, a rounding) say the noise was not seen, not that there is
none.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from orchestrator.answers.model import Estimate, IntervalBasis
from orchestrator.answers.smooth import PRIOR_RESTART_CV

CONFIDENCE = 0.95
NOISY_CV = 0.05
"""A config whose restarts vary by more than this (coefficient of variation) is noisy."""
MIN_RESTART_CV = 0.005
"""The least restart-to-restart spread an interval assumes (0.5 %, a quarter of what the
benchmark's hosts show): two restarts that agree to the digit, or a type whose repeated
configs all hit the same cap, would otherwise give an interval of zero width."""
MIN_PRIOR_CONFIGS = 3
"""Repeated configs needed to estimate the prior's spread and weight (limma's method of
moments needs the variance of their log variances); with fewer, the pooled variance stands
for the prior."""
MIN_PRIOR_DF = 3.0
"""The least weight (degrees of freedom) a type's prior carries; below it the prior is
completed with :data:`~orchestrator.answers.smooth.PRIOR_RESTART_CV`. Below about 2.5 degrees
of freedom a t interval widens when a restart inside it is added (the quantile explodes), so
more data would read as less certainty."""

Scale = Literal["log", "share"]
"""What an interval is built on: the log of the value, or the arcsine square root of the share
of its cap (module docstring)."""


@functools.lru_cache(maxsize=4096)
def t_quantile(df: float, confidence: float = CONFIDENCE) -> float:
    """The two-sided quantile of Student's t with ``df`` degrees of freedom at ``confidence``
    (95 % unless a family of intervals asks for more, :func:`simultaneous`; cached: an answer
    asks for the same few many times); the normal's for infinite ``df``."""
    from scipy import special  # imported on first use: scipy is slow to import

    if math.isinf(df):
        return float(special.ndtri(0.5 + confidence / 2))
    return float(special.stdtrit(df, 0.5 + confidence / 2))


def simultaneous(confidence: float, count: int) -> float:
    """The level each of ``count`` intervals is built at so that all of them hold at once with
    ``confidence`` (Bonferroni). It assumes nothing about how the intervals depend on one
    another, which matters where they share restarts: a schedule's comparisons at each load
    read the same restarts of the same two configs."""
    return 1.0 - (1.0 - confidence) / max(count, 1)


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


def angle(share: float) -> float:
    """The arcsine square root of a share, clipped to [0, 1]: the share scale."""
    return math.asin(math.sqrt(min(max(share, 0.0), 1.0)))


def _unangle(theta: float) -> float:
    return math.sin(min(max(theta, 0.0), math.pi / 2)) ** 2


@dataclass(frozen=True, slots=True)
class Sample:
    """One restart's objective value, with the request-to-request standard error of that run
    when the point stores one; on the share scale, the most the value can reach (``cap``: the
    rate the schedule really offered, 1 for a fraction) and the requests it counts (``count``)."""

    value: float
    host: str = ""
    within_se: float | None = None
    within_df: float | None = None
    cap: float | None = None
    count: int | None = None


def scaled(sample: Sample, scale: Scale) -> float | None:
    """The sample on ``scale``: its log, or the angle of its share of the cap; None where
    that scale has no value (a log of a value that is not positive, a share without a cap)."""
    if not math.isfinite(sample.value):
        return None
    if scale == "log":
        return math.log(sample.value) if sample.value > 0 else None
    if sample.cap is None or not sample.cap > 0:
        return None
    return angle(sample.value / sample.cap)


def floor_variance(samples: Sequence[Sample], scale: Scale) -> float:
    """The least variance one restart is taken to have on ``scale``: :data:`MIN_RESTART_CV`
    squared on the log scale; on the share scale the binomial variance of one restart's share
    of ``count`` requests, ``1/(4n)`` (the fewest requests among the samples)."""
    counts = [s.count for s in samples if s.count]
    if scale == "share" and counts:
        return 1.0 / (4.0 * min(counts))
    return MIN_RESTART_CV**2


@dataclass(frozen=True, slots=True)
class OwnVariance:
    """A config's own restart variance on a scale (each group of its restarts about its own
    mean), floored (:func:`floor_variance`), with its degrees of freedom."""

    var: float
    df: int


def own_variance(groups: Iterable[Sequence[Sample]], scale: Scale) -> OwnVariance | None:
    """One config's restart variance from ``groups`` of its restarts (a group's restarts share
    one mean: measuring and confirming restarts are centred apart, since the luck that picked
    a config is in the first and not the second); None with no group of two."""
    squares = 0.0
    df = 0
    seen: list[Sample] = []
    for group in groups:
        values = [x for s in group if (x := scaled(s, scale)) is not None]
        seen.extend(group)
        if len(values) < 2:
            continue
        center = math.fsum(values) / len(values)
        squares += math.fsum((x - center) ** 2 for x in values)
        df += len(values) - 1
    if df == 0:
        return None
    return OwnVariance(max(squares / df, floor_variance(seen, scale)), df)


def _trigamma_inverse(x: float) -> float:
    """y with trigamma(y) = x (limma's Newton iteration)."""
    from scipy import special

    if x > 1e7:
        return 1.0 / math.sqrt(x)
    if x < 1e-6:
        return 1.0 / x
    y = 0.5 + 1.0 / x
    for _ in range(50):
        tri = float(special.polygamma(1, y))
        step = tri * (1.0 - tri / x) / float(special.polygamma(2, y))
        y += step
        if -step / y < 1e-8:
            break
    return y


def fit_prior(variances: Sequence[OwnVariance]) -> tuple[float, float]:
    """``(d0, s0**2)``: the scaled inverse chi-square prior the configs' variances are drawn
    from, by limma's ``fitFDist`` (method of moments on the log variances, with digamma and
    trigamma corrections for their degrees of freedom). ``d0`` is infinite when the variances
    differ no more than their degrees of freedom explain (one common variance)."""
    from scipy import special

    logs = [
        math.log(v.var) - float(special.digamma(v.df / 2)) + math.log(v.df / 2) for v in variances
    ]
    mean = math.fsum(logs) / len(logs)
    spread_ = math.fsum((e - mean) ** 2 for e in logs) / (len(logs) - 1)
    excess = spread_ - math.fsum(float(special.polygamma(1, v.df / 2)) for v in variances) / len(
        variances
    )
    if excess <= 0:
        return math.inf, math.exp(mean)
    d0 = 2.0 * _trigamma_inverse(excess)
    return d0, math.exp(mean + float(special.digamma(d0 / 2)) - math.log(d0 / 2))


@dataclass(frozen=True, slots=True)
class VarianceModel:
    """A host type's restart variance on one scale: the prior each config's own variance is
    shrunk toward, and what it rests on."""

    scale: Scale
    prior_var: float
    prior_df: float
    """The prior's weight in degrees of freedom: no more than the type's restarts pooled (a
    prior the configs' variances fit as one common variance, limma's infinite ``d0``, is worth
    the degrees of freedom it was estimated from), plus what the assumed spread added."""
    configs: int
    """Configs repeated on the type, the prior's evidence."""
    method: Literal["moderated", "pooled"]
    """``moderated``: prior estimated from the configs' variances; ``pooled``: too few
    repeated configs to estimate one, the pooled variance stands for it."""
    assumed_df: float = 0.0
    """Degrees of freedom of :data:`~orchestrator.answers.smooth.PRIOR_RESTART_CV` in the prior
    (0 when the type's restarts alone carry :data:`MIN_PRIOR_DF`)."""

    def posterior(self, own: OwnVariance | None) -> tuple[float, float]:
        """A config's moderated variance and its degrees of freedom: the prior's with no own
        variance, else ``(d0*s0**2 + d*s**2) / (d0 + d)`` on ``d0 + d``, so each restart
        added is one more degree of freedom."""
        if own is None:
            return self.prior_var, self.prior_df
        d0, d = self.prior_df, own.df
        return (d0 * self.prior_var + d * own.var) / (d0 + d), d0 + d


def variance_model(variances: Sequence[OwnVariance], scale: Scale) -> VarianceModel | None:
    """The type's :class:`VarianceModel` from its configs' own variances (one per repeated
    config); None when no config was repeated."""
    if not variances:
        return None
    pooled_df = sum(v.df for v in variances)
    if len(variances) >= MIN_PRIOR_CONFIGS:
        d0, s0 = fit_prior(variances)
        method: Literal["moderated", "pooled"] = "moderated"
    else:
        d0 = float(pooled_df)
        s0 = math.fsum(v.var * v.df for v in variances) / pooled_df
        method = "pooled"
    d0 = min(d0, float(pooled_df))
    assumed = 0.0
    if d0 < MIN_PRIOR_DF:
        assumed = MIN_PRIOR_DF - d0
        s0 = (d0 * s0 + assumed * assumed_restart_variance(scale)) / MIN_PRIOR_DF
        d0 = MIN_PRIOR_DF
    return VarianceModel(scale, s0, d0, len(variances), method, assumed)


def assumed_restart_variance(scale: Scale) -> float:
    """The restart variance assumed before one is measured: the house's
    :data:`~orchestrator.answers.smooth.PRIOR_RESTART_CV` on the log scale; on the share
    scale the same relative spread of a share near one half (its angle moves by cv / 2)."""
    return PRIOR_RESTART_CV**2 if scale == "log" else (PRIOR_RESTART_CV / 2) ** 2


@dataclass(frozen=True, slots=True)
class RestartVariance:
    """Restart-to-restart variance of log values (about the squared coefficient of variation)
    pooled over a host type's repeated configs (what the host test of :mod:`.pooling` weighs
    deviations against)."""

    log_var: float
    df: int
    configs: int


@dataclass(frozen=True, slots=True)
class Spread:
    """A value with its standard error on its scale (the log scale: relative to the value) and
    that error's degrees of freedom: what an interval, and a ratio's interval, are built from."""

    value: float
    rel_se: float | None
    df: float | None
    basis: IntervalBasis
    restarts: int
    hosts: tuple[str, ...] = ()
    cv: float | None = None
    borrowed_from: int = 0
    """Repeated configs the restart variance was borrowed from (basis borrowed only)."""
    scale: Scale = "log"
    cap: float | None = None
    """The share scale's cap: the mean of the samples' (offered rate, or 1)."""
    count: int | None = None
    """The share scale's requests per restart (the fewest): half of one is the least a share
    is taken to be in a ratio."""
    assumed: bool = False
    """``rel_se`` holds the assumed restart variance beside the run's own error
    (:func:`with_assumed_restarts`)."""

    @property
    def ci95(self) -> tuple[float, float] | None:
        """The 95 % interval on the spread's scale (:func:`log_interval`, or the share's
        angle); None without an error, or for a log-scale value that is not positive."""
        if self.rel_se is None or self.df is None:
            return None
        if self.scale == "share":
            if self.cap is None:
                return None
            low, high = t_interval(angle(self.value / self.cap), self.rel_se, self.df)
            return (self.cap * _unangle(low), self.cap * _unangle(high))
        if not self.value > 0:
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


def _cv(values: Sequence[float]) -> float | None:
    if len(values) < 2:
        return None
    mean = math.fsum(values) / len(values)
    sd = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - 1))
    return sd / abs(mean) if mean != 0 else None


def spread(
    samples: Sequence[Sample],
    model: VarianceModel | None,
    *,
    own: OwnVariance | None = None,
    restarts: int | None = None,
    scale: Scale = "log",
) -> Spread | None:
    """The estimate from ``samples`` (one per restart, the value their mean): see the module's
    bases. ``own`` is the config's own restart variance when it rests on more restarts than
    ``samples`` (its picking restarts beside its confirmations), ``restarts`` how many restarts
    the estimate rests on in all (default: the samples). Without a ``model`` the config stands
    alone: its own variance on its own degrees of freedom. None when there is no sample."""
    if not samples:
        return None
    scale = model.scale if model is not None else scale
    values = [s.value for s in samples]
    mean = math.fsum(values) / len(values)
    hosts = _hosts(samples)
    n = len(samples)
    total = restarts if restarts is not None else n
    own = own if own is not None else own_variance([samples], scale)
    cv = _cv(values)
    caps = [s.cap for s in samples if s.cap is not None and s.cap > 0]
    cap = math.fsum(caps) / len(caps) if scale == "share" and caps else None
    counts = [s.count for s in samples if s.count]
    count = min(counts) if counts else None

    def made(basis: IntervalBasis, se: float | None, df: float | None, borrowed: int = 0) -> Spread:
        return Spread(mean, se, df, basis, total, hosts, cv, borrowed, scale, cap, count)

    if (scale == "share" and cap is None) or (scale == "log" and not mean > 0):
        return made("none", None, None)
    floor = floor_variance(samples, scale)
    if own is not None:
        var, df = model.posterior(own) if model is not None else (own.var, float(own.df))
        return made("restarts", math.sqrt(max(var, floor) / n), df)
    if model is not None:
        var, df = model.posterior(None)
        return made("borrowed-restart-variance", math.sqrt(max(var, floor) / n), df, model.configs)
    (sample,) = samples
    if scale == "share" and count:
        # One restart, nothing repeated: the share's binomial noise within the run.
        return made("within-run-only", math.sqrt(floor), math.inf)
    if scale == "log" and sample.within_se is not None and sample.within_df:
        return made("within-run-only", floored(sample.within_se / mean, 1), sample.within_df)
    return made("none", None, None)


def with_assumed_restarts(found: Spread) -> Spread:
    """A ``within-run-only`` spread as an answer shows it and decides on it: the run's own
    error with the restart variance assumed before one is measured added in quadrature
    (:func:`assumed_restart_variance`, on the spread's scale), since a deploy decision must
    outlast a restart. The interval a reader sees is then the one the tie rule reads, so two
    configs whose intervals do not overlap are never tied on this basis either. Other bases,
    and a spread that already holds the assumption, are returned as they are."""
    if found.basis != "within-run-only" or found.rel_se is None or found.assumed:
        return found
    rel_se = math.sqrt(found.rel_se**2 + assumed_restart_variance(found.scale))
    return dataclasses.replace(found, rel_se=rel_se, assumed=True)


def log_weights(count: int, weights: Sequence[float] | None) -> list[float]:
    """Each cell's weight in a geometric mean of ``count`` cells, summing to 1: ``weights``
    (an across-load objective's shares) or equal."""
    if weights is None:
        return [1.0 / count] * count
    if len(weights) != count:
        raise ValueError(f"{len(weights)} weights for {count} values")
    total = math.fsum(weights)
    return [w / total for w in weights]


def weighted_geomean(values: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """exp of the weighted mean of the logs (every value positive)."""
    shares = log_weights(len(values), weights)
    return math.exp(math.fsum(w * math.log(v) for w, v in zip(shares, values, strict=True)))


def geomean_within(
    values: Sequence[float],
    ses: Sequence[float | None],
    dfs: Sequence[float | None],
    weights: Sequence[float] | None = None,
) -> tuple[float, float | None, float | None]:
    """The (weighted) geometric mean of one run's cell values with its within-run standard
    error (delta method on the logs: each cell's relative error times its weight, added in
    quadrature) and the smallest of the cells' degrees of freedom; (value, None, None) when a
    cell has none. Equal weights without ``weights``."""
    if any(v <= 0 for v in values):
        return 0.0, None, None
    shares = log_weights(len(values), weights)
    value = weighted_geomean(values, shares)
    if any(se is None for se in ses) or any(df is None for df in dfs):
        return value, None, None
    rel = math.sqrt(
        math.fsum(
            (w * se / v) ** 2
            for w, se, v in zip(shares, ses, values, strict=True)
            if se is not None
        )
    )
    return value, value * rel, min(df for df in dfs if df is not None)


def _welch(var_a: float, df_a: float, var_b: float, df_b: float) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of two independent variances."""
    parts = (var_a**2 / df_a if var_a else 0.0) + (var_b**2 / df_b if var_b else 0.0)
    return (var_a + var_b) ** 2 / parts if parts > 0 else math.inf


def ratio_interval(
    numerator: Spread, denominator: Spread, *, confidence: float = CONFIDENCE
) -> tuple[float, tuple[float, float] | None]:
    """``numerator / denominator`` with an interval at ``confidence`` (95 % unless one of a
    family, :func:`simultaneous`) read on the two spreads' scale.

    The two estimates come from different restarts, so their errors are independent: the
    difference's standard error is the two in quadrature, with Welch-Satterthwaite degrees of
    freedom. On the log scale the difference is the log ratio. On the share scale it is the
    difference of the angles, and the ratio's interval is the ratio of the two values each
    end of that difference's interval implies (each side moved by its share of the variance,
    the least-squares split), so the ratio's interval holds 1 exactly when the angles' holds
    0; a share below half a request counts as half a request in a ratio (Haldane's
    correction), so a config that met no bound is a finite factor behind. The interval covers
    whatever each side's basis covers (restarts: request-to-request and restart-to-restart
    variance; within-run-only: request-to-request only); None when either side has no
    interval or a log-scale value is not positive.
    """
    if numerator.scale == "share" and denominator.scale == "share":
        return _share_ratio(numerator, denominator, confidence)
    if numerator.value <= 0 or denominator.value <= 0:
        return math.nan, None
    ratio = numerator.value / denominator.value
    errors = _errors(numerator, denominator, confidence)
    if errors is None:
        return ratio, None
    half = errors[2]
    if half == 0.0:
        return ratio, (ratio, ratio)
    return ratio, (ratio * math.exp(-half), ratio * math.exp(half))


def _errors(a: Spread, b: Spread, confidence: float) -> tuple[float, float, float] | None:
    """The two sides' variances and the half-width at ``confidence`` of their difference
    (independent errors in quadrature, Welch-Satterthwaite degrees of freedom); None when
    either side has no error."""
    if a.rel_se is None or b.rel_se is None or a.df is None or b.df is None:
        return None
    var_a, var_b = a.rel_se**2, b.rel_se**2
    if var_a + var_b == 0.0:
        return var_a, var_b, 0.0
    df = _welch(var_a, a.df, var_b, b.df)
    return var_a, var_b, t_quantile(df, confidence) * math.sqrt(var_a + var_b)


def _least_share(spread_: Spread) -> float:
    """Half a request of the spread's cap: the least a share-scale value counts as in a ratio."""
    cap = spread_.cap or 1.0
    return cap * 0.5 / spread_.count if spread_.count else cap * MIN_RESTART_CV


def _share_ratio(
    a: Spread, b: Spread, confidence: float
) -> tuple[float, tuple[float, float] | None]:
    least_a, least_b = _least_share(a), _least_share(b)
    ratio = max(a.value, least_a) / max(b.value, least_b)
    errors = _errors(a, b, confidence)
    if errors is None or a.cap is None or b.cap is None:
        return ratio, None
    var_a, var_b, half = errors
    if half == 0.0:
        return ratio, (ratio, ratio)
    total = var_a + var_b
    theta_a, theta_b = angle(a.value / a.cap), angle(b.value / b.cap)
    move_a, move_b = half * var_a / total, half * var_b / total

    def value(theta: float, cap: float, least: float) -> float:
        return max(cap * _unangle(theta), least)

    low = value(theta_a - move_a, a.cap, least_a) / value(theta_b + move_b, b.cap, least_b)
    high = value(theta_a + move_a, a.cap, least_a) / value(theta_b - move_b, b.cap, least_b)
    return ratio, (min(low, ratio), max(high, ratio))


def improvement(
    better: Spread, other: Spread, *, minimized: bool, confidence: float = CONFIDENCE
) -> tuple[float, tuple[float, float] | None]:
    """How many times ``better`` beats ``other`` (above 1 = better, whichever way the metric
    goes: for a minimized metric, ``other / better``), with the interval of
    :func:`ratio_interval` at ``confidence``."""
    if minimized:
        return ratio_interval(other, better, confidence=confidence)
    return ratio_interval(better, other, confidence=confidence)
