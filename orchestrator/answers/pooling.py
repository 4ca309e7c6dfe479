"""Pooling a host type's hosts, and finding the host that does not belong (pure).

Trials of one config on hosts of one type are replicates of one experiment, so their values
pool, but only if the hosts really are alike. A host whose values, on the configs it shares
with its siblings, sit consistently off the siblings' by more than the restart noise allows
is a finding (a throttled GPU, a different driver, a noisy neighbour) and is kept out of the
pool: averaging it in would move every estimate and widen every interval.

The test, per host: on each config measured on it and on at least two siblings, the host's
mean log value less the median over all those hosts (itself included, so one sick host cannot
drag the reference and make its healthy siblings look off); these deviations are combined,
inverse-variance weighted, against the restart variance measured within (host, config) cells
(a t test on its degrees of freedom), or, with no repeats on any host, by a one-sample t test
on the deviations themselves. A host is flagged when p < 0.01 divided by the hosts tested
(Bonferroni), the worst first; the test then runs again without it. Two hosts alone can be
found to disagree, but not which one is off: that is a note, and both stay in the pool.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats

from orchestrator.answers.estimate import pooled_restart_variance
from orchestrator.answers.model import HostFlag

ALPHA = 0.01
"""Family-wise false-flag rate per host type and test round."""

HostValues = Mapping[str, Mapping[str, Sequence[float]]]
"""config id -> host -> that host's restart values of the config."""


@dataclass(frozen=True, slots=True)
class HostTest:
    host: str
    shift: float
    """The host's typical deviation from its siblings, as a ratio less 1 (-0.12: 12 % lower)."""
    p: float
    configs: int


@dataclass(frozen=True, slots=True)
class PoolCheck:
    """The hosts kept out of a type's pool, and what the reader must know about the rest."""

    flags: tuple[HostFlag, ...] = ()
    notes: tuple[str, ...] = ()

    @property
    def excluded(self) -> frozenset[str]:
        return frozenset(flag.host for flag in self.flags)


def _positive(values: Sequence[float]) -> list[float]:
    return [v for v in values if math.isfinite(v) and v > 0]


def _log_mean(values: Sequence[float]) -> float:
    return float(np.mean(np.log(values)))


def _restricted(data: HostValues, hosts: Sequence[str]) -> dict[str, dict[str, list[float]]]:
    out: dict[str, dict[str, list[float]]] = {}
    for config, by_host in data.items():
        kept = {h: _positive(v) for h, v in by_host.items() if h in hosts}
        kept = {h: v for h, v in kept.items() if v}
        if kept:
            out[config] = kept
    return out


def _combined(
    deviations: Sequence[tuple[float, float]], log_var: float | None, df: int
) -> tuple[float, float] | None:
    """(mean shift, p) of deviations (value, variance weight) against zero."""
    if not deviations:
        return None
    if log_var is not None and log_var > 0:
        weights = np.array([1.0 / w for _, w in deviations])
        values = np.array([d for d, _ in deviations])
        shift = float(np.sum(weights * values) / np.sum(weights))
        t = shift / math.sqrt(log_var / float(np.sum(weights)))
        return shift, float(2 * stats.t.sf(abs(t), df))
    if len(deviations) >= 3:
        values = np.array([d for d, _ in deviations])
        if float(np.std(values)) == 0.0:
            return None
        result = stats.ttest_1samp(values, 0.0)
        return float(values.mean()), float(result.pvalue)
    return None


def _test_host(
    host: str, data: Mapping[str, Mapping[str, list[float]]], log_var: float | None, df: int
) -> HostTest | None:
    deviations: list[tuple[float, float]] = []
    for by_host in data.values():
        if host not in by_host or len(by_host) < 3:
            continue
        means = {h: _log_mean(v) for h, v in by_host.items()}
        reference = float(np.median(list(means.values())))
        others = sum(len(v) for h, v in by_host.items() if h != host)
        deviations.append((means[host] - reference, 1.0 / len(by_host[host]) + 1.0 / others))
    found = _combined(deviations, log_var, df)
    if found is None:
        return None
    shift, p = found
    return HostTest(host, math.exp(shift) - 1.0, p, len(deviations))


def _pair_note(
    pair: Sequence[str],
    data: Mapping[str, Mapping[str, list[float]]],
    log_var: float | None,
    df: int,
    host_type: str,
) -> str | None:
    first, second = pair
    deviations = [
        (
            _log_mean(v[first]) - _log_mean(v[second]),
            1.0 / len(v[first]) + 1.0 / len(v[second]),
        )
        for v in data.values()
        if first in v and second in v
    ]
    found = _combined(deviations, log_var, df)
    if found is None or found[1] >= ALPHA:
        return None
    shift = math.exp(found[0]) - 1.0
    return (
        f"hosts {first} and {second} of type {host_type} disagree beyond noise ({first} "
        f"{shift:+.1%} on {len(deviations)} shared configs, p={found[1]:.2g}); with two hosts "
        "the one that is off cannot be told, so both stay in the pool"
    )


def check_pool(host_type: str, data: HostValues, hosts: Sequence[str]) -> PoolCheck:
    """Which of ``hosts`` (one type) to keep out of the pool, from the configs' values."""
    remaining = [h for h in hosts if any(h in by_host for by_host in data.values())]
    flags: list[HostFlag] = []
    while len(remaining) >= 3:
        current = _restricted(data, remaining)
        variance = pooled_restart_variance(
            v for by_host in current.values() for v in by_host.values()
        )
        log_var, df = (variance.log_var, variance.df) if variance else (None, 0)
        tests = [t for h in remaining if (t := _test_host(h, current, log_var, df)) is not None]
        threshold = ALPHA / max(len(tests), 1)
        failing = [t for t in tests if t.p < threshold]
        if not failing:
            break
        worst = min(failing, key=lambda t: (t.p, -abs(t.shift)))
        flags.append(
            HostFlag(
                host=worst.host,
                host_type=host_type,
                message=(
                    f"{worst.host} reads {worst.shift:+.1%} against its {host_type} siblings on "
                    f"{worst.configs} shared configs, beyond their restart noise "
                    f"(p={worst.p:.2g}); kept out of the pool"
                ),
            )
        )
        remaining.remove(worst.host)
    notes: list[str] = []
    if len(remaining) == 2:
        current = _restricted(data, remaining)
        variance = pooled_restart_variance(
            v for by_host in current.values() for v in by_host.values()
        )
        log_var, df = (variance.log_var, variance.df) if variance else (None, 0)
        note = _pair_note(remaining, current, log_var, df, host_type)
        if note is not None:
            notes.append(note)
    return PoolCheck(tuple(flags), tuple(notes))
