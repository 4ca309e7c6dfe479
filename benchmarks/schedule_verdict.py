"""How often the schedule's verdict is wrong across loads, on synthetic sweeps with a known answer.

A schedule is recommended only when it is worse than the best fixed config at no load beyond
the noise and better at one (docs/answers.md). That reads every load's margin at once, so one
load's chance miss is enough to call an equal schedule "worse" (or "better"): with three loads
judged each at its own 95 % the verdict claims a difference that is not there up to three
times as often as one interval misses. The verdict therefore builds the loads' intervals as a
simultaneous 95 % family (Bonferroni, :func:`orchestrator.answers.schedule.judged_loads`).

Each experiment is one host type at ``L`` loads: four fixed configs and the schedule, each
restarted three times, every restart a speed factor of its process shared by all its loads
(restart-to-restart noise, so the loads' margins are correlated, as a real sweep's are) times
each point's own request-to-request noise. Per load, the real estimate code builds the type's
variance model from the five configs' restarts and each side's spread, as ``answer_sweep``
ranks a schedule trial beside the fixed configs, and ``judged_loads`` judges the family.
The per-load rule it replaced (each load at its own 95 %) is scored on the same draws.

Scenarios (the schedule's true margin over the best fixed config per load):

- ``equal``: 0 at each of 3 loads: every ``better`` or ``worse`` is false;
- ``equal-5``: the same at 5 loads;
- ``better-at-one``: +10 % at the first of 3 loads, 0 elsewhere: recommending it is right,
  a ``worse`` anywhere is false;
- ``worse-at-one``: +15 % at the first, -8 % at the last: recommending it is wrong.

Scores per scenario and rule: ``false_claim`` (share of experiments with any load called
``better`` or ``worse`` where the truth is equal), ``false_worse`` (the same, ``worse`` only),
``recommended`` (share of experiments whose verdict recommends the schedule). With E
experiments a rate near 5 % has a binomial standard error of about 0.022 / sqrt(E / 100).

    python benchmarks/schedule_verdict.py [--quick] [--json] [--experiments N] [--seed S]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from orchestrator.answers.estimate import Sample, Spread, own_variance, spread, variance_model
from orchestrator.answers.model import LoadVerdict
from orchestrator.answers.schedule import judged_loads

RESTART_CV = 0.02
"""Restart-to-restart spread of a config's speed (log sd), shared by its loads."""
REQUEST_CV = 0.01
"""Request-to-request noise of one point (relative sd), its own at each load."""
RESTARTS = 3
FIXED_CONFIGS = 4


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    margins: tuple[float, ...]
    """The schedule's true relative margin over the best fixed config, per load."""

    @property
    def right_to_recommend(self) -> bool:
        return min(self.margins) >= 0 and max(self.margins) > 0


SCENARIOS = (
    Scenario("equal", (0.0, 0.0, 0.0)),
    Scenario("equal-5", (0.0, 0.0, 0.0, 0.0, 0.0)),
    Scenario("better-at-one", (0.10, 0.0, 0.0)),
    Scenario("worse-at-one", (0.15, 0.0, -0.08)),
)


def _restarts(rng: np.random.Generator, truths: Sequence[float]) -> list[list[Sample]]:
    """``RESTARTS`` restarts of one config measuring every load: per load, its samples."""
    factors = np.exp(RESTART_CV * rng.standard_normal(RESTARTS))
    noise = 1.0 + REQUEST_CV * rng.standard_normal((len(truths), RESTARTS))
    return [
        [Sample(float(truth * factors[r] * noise[i, r])) for r in range(RESTARTS)]
        for i, truth in enumerate(truths)
    ]


def _experiment(
    rng: np.random.Generator, scenario: Scenario
) -> list[tuple[Spread, Spread]]:
    """Per load, the schedule's spread and the best fixed config's, each from the type's
    variance model at that load."""
    loads = len(scenario.margins)
    best = [float(v) for v in rng.uniform(100.0, 1500.0, loads)]
    others = [[b * float(rng.uniform(0.6, 0.95)) for b in best] for _ in range(FIXED_CONFIGS - 1)]
    schedule_truth = [b * (1.0 + m) for b, m in zip(best, scenario.margins, strict=True)]
    measured = [_restarts(rng, truths) for truths in (schedule_truth, best, *others)]
    pairs = []
    for load in range(loads):
        groups = [config[load] for config in measured]
        owns = [own for g in groups if (own := own_variance([g], "log")) is not None]
        model = variance_model(owns, "log")
        schedule, fixed = spread(groups[0], model), spread(groups[1], model)
        assert schedule is not None and fixed is not None
        pairs.append((schedule, fixed))
    return pairs


def _per_load(pairs: Sequence[tuple[Spread, Spread]]) -> list[LoadVerdict]:
    """The rule before: each load judged on its own 95 % interval."""
    return [judged_loads([pair], minimized=False)[0][0][1] for pair in pairs]


def run(scenario: Scenario, experiments: int, seed: int) -> dict[str, Any]:
    """The verdict's error rates on one scenario over ``experiments`` host types."""
    rng = np.random.default_rng(seed)
    equal = [i for i, m in enumerate(scenario.margins) if m == 0]
    counts = {rule: {"false_claim": 0, "false_worse": 0, "recommended": 0}
              for rule in ("family", "per-load")}  # fmt: skip
    confidence = 0.95
    for _ in range(experiments):
        pairs = _experiment(rng, scenario)
        judged, confidence = judged_loads(pairs, minimized=False)
        for rule, verdicts in (("family", [v for _, v in judged]), ("per-load", _per_load(pairs))):
            tally = counts[rule]
            tally["false_claim"] += any(verdicts[i] != "tie" for i in equal)
            tally["false_worse"] += any(verdicts[i] == "worse" for i in equal)
            tally["recommended"] += "worse" not in verdicts and "better" in verdicts
    return {
        "scenario": scenario.name,
        "margins": list(scenario.margins),
        "right_to_recommend": scenario.right_to_recommend,
        "experiments": experiments,
        "seed": seed,
        "each_confidence": round(confidence, 4),
        **{rule: {k: round(n / experiments, 4) for k, n in tally.items()}
           for rule, tally in counts.items()},
    }


def parse(argv: Sequence[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the smallest size (seconds)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--experiments", type=int, default=None, help="host types per scenario")
    parser.add_argument("--seed", type=int, default=34, help="the first scenario's seed")
    return parser.parse_args(argv)


QUICK_EXPERIMENTS = 1000
FULL_EXPERIMENTS = 4000


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    args = parse(argv)
    experiments = args.experiments or (QUICK_EXPERIMENTS if args.quick else FULL_EXPERIMENTS)
    started = time.monotonic()
    rows = [run(s, experiments, args.seed + i) for i, s in enumerate(SCENARIOS)]
    return {
        "benchmark": "schedule_verdict",
        "experiments": experiments,
        "rows": rows,
        "wall_s": round(time.monotonic() - started, 1),
    }


def _print(result: dict[str, Any]) -> None:
    print(f"the schedule's verdict, {result['experiments']} host types per scenario")
    for row in result["rows"]:
        for rule in ("family", "per-load"):
            r = row[rule]
            print(
                f"{row['scenario']:14} {rule:8}: false claim {r['false_claim']:.3f}, "
                f"false worse {r['false_worse']:.3f}, recommended {r['recommended']:.3f}"
            )
    print(f"wall {result['wall_s']} s")


if __name__ == "__main__":
    found = main(sys.argv[1:])
    if "--json" in sys.argv[1:]:
        print(json.dumps(found, indent=2))
    else:
        _print(found)
