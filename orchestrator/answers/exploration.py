"""How much of the space an answer rests on, and the chance that what was not explored beats
it (pure).

A search with a tight ``max_restarts`` may measure a third of a small grid and still find a
clear winner among what it measured: "Deploy" then is a claim about the configs it saw, not
about the space. So every answer carries an :class:`~orchestrator.answers.model.Exploration`:
the configs of the space measured, failed and never tried, and the *exploration risk*, the
chance that a config never tried beats the answer's config by more than
:data:`~orchestrator.answers.model.EXPLORATION_MARGIN`:

- with :data:`~orchestrator.answers.smooth.MIN_CONFIGS` or more configs of the space measured,
  by the smoothed response surface the search and the answer pick with, its length chosen
  from a longer grid (:func:`~orchestrator.answers.smooth.exceed_chances`): the chance, under
  the surface's joint posterior at the answer's config and every untried one, that at least
  one untried config beats it by the margin;
- with fewer, no surface can be fitted, and the risk is the share of the configs not tried
  among those that could still win (the untried and the measured): the chance that the
  space's best is among the untried were every config equally likely to be it (a grid in
  file order), which bounds the chance that an untried one beats the answer's by the margin.
  An adaptive search tries promising configs first, so for it this errs toward more risk.

The baseline (no knob set) is outside the surface: an answer that names it is judged by the
share, as above. The configs to run next are the untried ones likeliest to beat the answer's
(by the surface), or without one, the untried nearest to the answer's config in the space.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from orchestrator.answers.model import EXPLORATION_MARGIN, Exploration
from orchestrator.answers.runs import config_id
from orchestrator.answers.smooth import Axes, exceed_chances
from orchestrator.types import JsonObject, KnobValue

NEXT = 3
"""How many configs an answer suggests to run next."""

Config = Mapping[str, KnobValue]


def explore_risk(
    axes: Axes,
    space: Sequence[Config],
    measured: Mapping[str, tuple[Config, Sequence[float]]],
    failed: frozenset[str],
    chosen: str | None,
    *,
    minimized: bool,
) -> Exploration:
    """The exploration of ``space`` (its configs, the baseline included when the sweep has
    one) by what was ``measured`` (:func:`~orchestrator.answers.runs.config_id` -> the config
    and the values it was picked on) and ``failed`` (ids tried and never measured), judged
    against ``chosen`` (the id of the answer's named config; None: nothing valid)."""
    by_id = {config_id(config): config for config in space}
    explored = [i for i in by_id if i in measured]
    tried_failed = [i for i in by_id if i in failed and i not in measured]
    untried = [config for i, config in by_id.items() if i not in measured and i not in failed]
    counts = (len(explored), len(by_id), len(tried_failed))
    if not untried:
        return Exploration(*counts, risk=0.0, method="complete")
    share = len(untried) / (len(untried) + len(explored))
    if chosen is None or chosen not in measured:
        nearest = untried
    else:
        target = measured[chosen][0]
        surface = [i for i in explored if measured[i][0]]
        candidates = [config for config in untried if config]
        if target and chosen in surface and len(candidates) == len(untried):
            chances = exceed_chances(
                axes,
                [measured[i][0] for i in surface],
                [measured[i][1] for i in surface],
                surface.index(chosen),
                candidates,
                margin=EXPLORATION_MARGIN,
                minimized=minimized,
            )
            if chances is not None:
                each = chances.each
                order = sorted(range(len(candidates)), key=lambda j: -each[j])
                return Exploration(
                    *counts,
                    risk=min(1.0, max(0.0, chances.any)),
                    method="surface",
                    next=tuple(dict(candidates[j]) for j in order[:NEXT]),
                )
        nearest = _nearest(axes, target, untried) if target else untried
    return Exploration(
        *counts,
        risk=share,
        method="exchangeable",
        next=tuple(_json(c) for c in nearest[:NEXT]),
    )


def _nearest(axes: Axes, chosen: Config, configs: Sequence[Config]) -> list[Config]:
    """``configs`` nearest ``chosen`` first (the distance the smoothing uses), then in space
    order."""
    d2 = axes.squared_distances([chosen, *configs])[0, 1:]
    order = sorted(range(len(configs)), key=lambda j: (float(d2[j]), j))
    return [configs[j] for j in order]


def _json(config: Config) -> JsonObject:
    return dict(config)
