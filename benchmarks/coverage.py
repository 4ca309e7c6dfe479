"""Coverage of the answers' 95 % intervals on synthetic host types with a known truth.

Each experiment is one host type of a sweep: a few configs with known true values, each
restarted 1 to 4 times, every restart a speed factor of its process (restart-to-restart noise)
times the truth, plus the run's request-to-request noise. The real estimate code
(``orchestrator.answers.estimate``: each config's own restart variance, the type's variance
model, the spread and its interval, as ``answer_sweep`` calls them) builds every config's
interval, and the benchmark counts how often it holds the truth. The model before issue 32
(a config's own variance on its own degrees of freedom from two restarts on, the pooled
variance borrowed for one restart, all on the log scale) is scored on the same draws.

Scenarios:

- ``equal``: 8 configs, every config's restarts vary by 2 % (cv), 1-4 restarts each;
- ``unequal``: 8 configs whose cv is drawn between 1 % and 4 % (log-uniform);
- ``one-unstable``: 8 configs at 2 %, one of them at 10 % (scored apart as ``unstable``);
- ``two-each``: 6 configs restarted twice each at 2 % (the demo's shape);
- ``goodput``: 8 configs' shares of 43 offered requests meeting the slo (true shares 0.03-1),
  each restart's share moved on the logit scale by sd 0.3, the count binomial: the share
  scale.

Scores per scenario, for the new model and the old: the share of intervals that hold the
truth (``coverage``; by restart count, and the unstable config apart) and the median width
(log of high/low on the log scale; on the share scale, high - low over the cap). With E
experiments of about 8 configs, the binomial standard error of a coverage near 95 % is about
0.0077 / sqrt(E / 100).

    python benchmarks/coverage.py [--quick] [--json] [--experiments N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from orchestrator.answers.estimate import (
    Sample,
    Scale,
    floored,
    log_interval,
    own_variance,
    pooled_restart_variance,
    spread,
    variance_model,
)

REQUEST_CV = 0.01
"""Request-to-request noise of one restart's value (relative sd)."""
OFFERED = 43
"""Requests a goodput restart's schedule offers (the issue's 43 arrivals in 8 s)."""
LOGIT_SD = 0.3
"""Restart-to-restart sd of a goodput share on the logit scale."""


@dataclass(frozen=True, slots=True)
class Config:
    truth: float
    restarts: int
    cv: float = 0.02
    unstable: bool = False


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    scale: Scale
    draw: Callable[[np.random.Generator], list[Config]]


def _restarts(rng: np.random.Generator) -> int:
    return int(rng.integers(1, 5))


def _levels(rng: np.random.Generator, n: int) -> list[float]:
    return [float(v) for v in rng.uniform(800.0, 2500.0, n)]


def _equal(rng: np.random.Generator) -> list[Config]:
    return [Config(v, _restarts(rng)) for v in _levels(rng, 8)]


def _unequal(rng: np.random.Generator) -> list[Config]:
    return [
        Config(v, _restarts(rng), float(math.exp(rng.uniform(math.log(0.01), math.log(0.04)))))
        for v in _levels(rng, 8)
    ]


def _one_unstable(rng: np.random.Generator) -> list[Config]:
    configs = [Config(v, _restarts(rng)) for v in _levels(rng, 7)]
    return [*configs, Config(float(rng.uniform(800.0, 2500.0)), _restarts(rng), 0.10, True)]


def _two_each(rng: np.random.Generator) -> list[Config]:
    return [Config(v, 2) for v in _levels(rng, 6)]


def _goodput(rng: np.random.Generator) -> list[Config]:
    return [Config(float(p), _restarts(rng)) for p in rng.uniform(0.03, 1.0, 8)]


SCENARIOS = (
    Scenario("equal", "log", _equal),
    Scenario("unequal", "log", _unequal),
    Scenario("one-unstable", "log", _one_unstable),
    Scenario("two-each", "log", _two_each),
    Scenario("goodput", "share", _goodput),
)

_LOGIT_Z = np.random.default_rng(12345).standard_normal(20_000)
"""Fixed normal draws for a goodput config's true mean share (E over restarts)."""


def _expit(x: np.ndarray | float) -> Any:
    return 1.0 / (1.0 + np.exp(-x))


def _true_share(p: float) -> float:
    """The mean over restarts of a share whose logit moves by :data:`LOGIT_SD`."""
    logit = math.log(p / (1 - p)) if p < 1 else 8.0
    return float(np.mean(_expit(logit + LOGIT_SD * _LOGIT_Z)))


def _draw(rng: np.random.Generator, config: Config, scale: Scale) -> list[Sample]:
    if scale == "share":
        logit = math.log(config.truth / (1 - config.truth)) if config.truth < 1 else 8.0
        shares = _expit(logit + LOGIT_SD * rng.standard_normal(config.restarts))
        goods = rng.binomial(OFFERED, shares)
        return [Sample(int(k) / OFFERED, cap=1.0, count=OFFERED) for k in goods]
    factors = np.exp(config.cv * rng.standard_normal(config.restarts))
    noise = 1.0 + REQUEST_CV * rng.standard_normal(config.restarts)
    return [Sample(float(config.truth * f * e)) for f, e in zip(factors, noise, strict=True)]


def _old_interval(
    samples: Sequence[Sample], groups: Sequence[Sequence[Sample]]
) -> tuple[float, float] | None:
    """The interval before issue 32 (log scale): own variance on n - 1 degrees of freedom
    from two restarts on, the type's pooled variance borrowed for one."""
    values = [s.value for s in samples]
    mean = math.fsum(values) / len(values)
    if not mean > 0:
        return None
    if len(values) >= 2:
        sd = statistics.stdev(values)
        return log_interval(
            mean, floored(sd / math.sqrt(len(values)) / mean, len(values)), len(values) - 1
        )
    pooled = pooled_restart_variance([[s.value for s in g] for g in groups])
    if pooled is None:
        return None
    return log_interval(mean, floored(math.sqrt(pooled.log_var), 1), pooled.df)


@dataclass
class Tally:
    hits: int = 0
    total: int = 0
    widths: list[float] = field(default_factory=list)

    def add(self, interval: tuple[float, float] | None, truth: float, scale: Scale) -> None:
        self.total += 1
        if interval is None:
            return
        low, high = interval
        self.hits += low <= truth <= high
        self.widths.append(high - low if scale == "share" else math.log(high / low))

    def row(self) -> dict[str, Any]:
        return {
            "coverage": round(self.hits / self.total, 4) if self.total else None,
            "intervals": self.total,
            "median_width": round(statistics.median(self.widths), 4) if self.widths else None,
        }


def run(scenario: Scenario, experiments: int, seed: int) -> dict[str, Any]:
    """Coverage of one scenario over ``experiments`` host types drawn from ``seed``."""
    rng = np.random.default_rng(seed)
    tallies: dict[str, dict[str, Tally]] = {"new": {}, "old": {}}

    def tally(model: str, key: str) -> Tally:
        return tallies[model].setdefault(key, Tally())

    for _ in range(experiments):
        configs = scenario.draw(rng)
        groups = [_draw(rng, c, scenario.scale) for c in configs]
        owns = [o for g in groups if (o := own_variance([g], scenario.scale)) is not None]
        model = variance_model(owns, scenario.scale)
        for config, samples in zip(configs, groups, strict=True):
            truth = _true_share(config.truth) if scenario.scale == "share" else config.truth
            found = spread(samples, model, scale=scenario.scale)
            new = found.ci95 if found is not None else None
            # The old model read a goodput share on the log scale too (none where it was 0).
            old = _old_interval(samples, groups)
            keys = ["all", f"restarts={config.restarts}"]
            if config.unstable:
                keys = ["unstable"]
            for key in keys:
                tally("new", key).add(new, truth, scenario.scale)
                tally("old", key).add(old, truth, scenario.scale)
    return {
        "scenario": scenario.name,
        "scale": scenario.scale,
        "experiments": experiments,
        "seed": seed,
        "new": {key: t.row() for key, t in sorted(tallies["new"].items())},
        "old": {key: t.row() for key, t in sorted(tallies["old"].items())},
    }


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the smallest size (seconds)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--experiments", type=int, default=None, help="host types per scenario")
    parser.add_argument("--seed", type=int, default=32, help="the first scenario's seed")
    parser.add_argument(
        "--scenarios",
        default=",".join(s.name for s in SCENARIOS),
        help="comma-separated scenarios",
    )
    return parser.parse_args(argv)


QUICK_EXPERIMENTS = 150
FULL_EXPERIMENTS = 2000


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    experiments = args.experiments or (QUICK_EXPERIMENTS if args.quick else FULL_EXPERIMENTS)
    names = [n for n in args.scenarios.split(",") if n]
    known = {s.name: s for s in SCENARIOS}
    if unknown := sorted(set(names) - set(known)):
        raise SystemExit(f"unknown scenario: {', '.join(unknown)}")
    started = time.monotonic()
    rows = [run(known[name], experiments, args.seed + i) for i, name in enumerate(names)]
    return {
        "benchmark": "coverage",
        "experiments": experiments,
        "rows": rows,
        "wall_s": round(time.monotonic() - started, 1),
    }


def _print(result: dict[str, Any]) -> None:
    print(f"coverage of 95 % intervals, {result['experiments']} host types per scenario")
    for row in result["rows"]:
        for model in ("new", "old"):
            cells = ", ".join(
                f"{key} {r['coverage']:.3f}"
                + (f" (w {r['median_width']:.3f})" if key == "all" else "")
                for key, r in row[model].items()
                if r["coverage"] is not None
            )
            print(f"{row['scenario']:13} {model}: {cells}")
    print(f"wall {result['wall_s']} s")


if __name__ == "__main__":
    found = main(sys.argv[1:])
    if "--json" in sys.argv[1:]:
        print(json.dumps(found, indent=2))
    else:
        _print(found)
