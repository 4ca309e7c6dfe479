"""The k-th proposal of a host type: a pure function of the seed and the results it saw.

``random`` draws uniformly from the configs not yet paid for, with a generator seeded from
(seed, host type, k). ``adaptive`` builds a fresh Optuna study from the results it saw, in
proposal order (each knob a categorical distribution over its levels; a failed or
constraint-breaking config told as a bad value, :func:`~orchestrator.search.score.penalty`),
asks a TPE sampler seeded from (seed, host type, k) for one point, and takes the unpaid config
nearest to it (fewest knobs differing, then space order): a sampled point outside the space,
or one already paid for, never costs a restart. Because nothing is carried from one proposal to
the next, a fresh strategy over the same store asks exactly what a killed one would have.
"""

from __future__ import annotations

import hashlib
import json
import random
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from orchestrator.search.score import penalty
from orchestrator.search.space import Config, SearchSpace
from orchestrator.types import KnobValue

if TYPE_CHECKING:
    from optuna.distributions import BaseDistribution

Strategy = Literal["random", "adaptive"]
TPE_STARTUP_MAX = 10
"""Random proposals before TPE models (Optuna's default), fewer for a small budget."""


def derive_seed(seed: int, *parts: str | int) -> int:
    """A 32-bit seed from the sweep's seed and what names this draw (type, proposal number)."""
    text = json.dumps([seed, *parts], separators=(",", ":"))
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:4], "big")


@dataclass(frozen=True, slots=True)
class Seen:
    """One result a proposal was asked with: the config and its value (None: failed, or broke
    a constraint)."""

    config: Mapping[str, KnobValue]
    value: float | None


def startup_trials(max_restarts: int) -> int:
    """TPE's random start: a quarter of the budget, between 3 and Optuna's default 10."""
    return max(3, min(TPE_STARTUP_MAX, max_restarts // 4))


def propose(
    strategy: Strategy,
    space: SearchSpace,
    candidates: Sequence[int],
    seen: Sequence[Seen],
    *,
    seed: int,
    host_type: str,
    k: int,
    n_startup: int = TPE_STARTUP_MAX,
) -> int:
    """The index (into ``space.configs``) of proposal ``k``; ``candidates`` are the indices
    not yet paid for, never empty."""
    if not candidates:
        raise ValueError("nothing left to propose")
    draw_seed = derive_seed(seed, host_type, k)
    if strategy == "random" or not space.knobs:
        return random.Random(draw_seed).choice(list(candidates))
    wanted = _tpe_point(space, seen, draw_seed, n_startup)
    return nearest(space, candidates, wanted)


def _distributions(space: SearchSpace) -> dict[str, BaseDistribution]:
    from optuna.distributions import CategoricalDistribution

    return {knob: CategoricalDistribution(space.levels[knob]) for knob in space.knobs}


def _tpe_point(
    space: SearchSpace, seen: Sequence[Seen], draw_seed: int, n_startup: int
) -> dict[str, str]:
    # Imported here: Optuna costs every `run` and `daemon` start a third of a CPU-second to
    # import, and only an adaptive search that gets this far uses it.
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = _distributions(space)
    sampler = optuna.samplers.TPESampler(seed=draw_seed, n_startup_trials=n_startup)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    good = [s.value for s in seen if s.value is not None]
    bad = penalty(good)
    for result in seen:
        params = space.levels_of(result.config)
        if any(params[knob] not in space.levels[knob] for knob in space.knobs):
            continue  # a config from outside the space (the sweep file changed): not a level
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions=distributions,
                value=result.value if result.value is not None else bad,
            )
        )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        trial = study.ask(distributions)
    return {knob: str(trial.params[knob]) for knob in space.knobs}


def nearest(space: SearchSpace, candidates: Sequence[int], wanted: Mapping[str, str]) -> int:
    """The candidate differing from ``wanted`` in the fewest knobs (then the first)."""

    def distance(index: int) -> tuple[int, int]:
        levels = space.levels_of(space.configs[index])
        return sum(levels[k] != wanted.get(k) for k in space.knobs), index

    return min(candidates, key=distance)


def config_of(space: SearchSpace, index: int) -> Config:
    return dict(space.configs[index])
