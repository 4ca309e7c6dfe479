"""The sweep's space as a search sees it, and when two configs are the same server.

The space is the sweep's ``configs`` plus its ``grid`` after the plan's deduplication
(:func:`orchestrator.plan.expand_configs`), less the baseline, which every strategy runs on
its own terms. Each knob's levels are the values the space gives it (absent is a level too),
as canonical text, so a model can treat them as categories.

Two configs are the same server when the sweep's engine would run the same thing: the rendered
command line and environment are equal once values are normalised as the engine reads them
(``Engine.normal_word``: for SGLang numbers by value, the algorithm upper-cased), and a knob
the sweep marks ``overridden_by_server`` is left out where the engine forces its value
(``Engine.forced_flags``; SGLang's rules are in :mod:`orchestrator.engines.sglang.forcing`).
A search never pays a restart for a config whose identity it has already run, and never
proposes one whose identity failed with ``bad-flag`` or ``invalid-config``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from orchestrator import engines
from orchestrator.answers.smooth import Axes, knob_levels, level
from orchestrator.host.dropin import (
    ExtraFlagConflict,
    FlagArg,
    UnknownKnobError,
    flag_args,
)
from orchestrator.invocation import ServerRecipe
from orchestrator.plan import expand_configs, normalize_config
from orchestrator.sweepfile import HostSpec, KnobMapping, Sweep
from orchestrator.types import KnobValue

Config = dict[str, KnobValue]


def config_identity(config: Mapping[str, KnobValue]) -> str:
    """The config's own identity (its normalised knob values), as stored trials carry it."""
    return json.dumps(normalize_config(config), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class SearchSpace:
    """The configs a strategy may propose (baseline excluded) and each knob's levels."""

    configs: tuple[Config, ...]
    knobs: tuple[str, ...]
    levels: Mapping[str, tuple[str, ...]]
    baseline: bool
    explicit: int = 0
    """The first ``explicit`` configs are the sweep's own ``configs:`` list: the operator's
    candidates, measured before the strategy proposes from the ``grid``."""
    axes: Axes = field(init=False)
    """The knobs' numeric orders, derived once from ``levels``: every proposal measures
    distances in them."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "axes", Axes.of_levels(self.knobs, self.levels))

    def levels_of(self, config: Mapping[str, KnobValue]) -> dict[str, str]:
        return {knob: level(config.get(knob)) for knob in self.knobs}

    def __len__(self) -> int:
        return len(self.configs)


def search_space(sweep: Sweep) -> SearchSpace:
    configs = tuple(config for config in expand_configs(sweep) if config)
    knobs, levels = knob_levels(configs)
    listed = {config_identity(c) for c in sweep.configs if normalize_config(c)}
    explicit = sum(1 for config in configs if config_identity(config) in listed)
    return SearchSpace(
        configs=configs, knobs=knobs, levels=levels, baseline=sweep.baseline, explicit=explicit
    )


def _flag_values(argv: Sequence[str]) -> list[tuple[str, str | None]]:
    """The words of a command line as (flag, value) pairs; other words as (word, None)."""
    return [
        (arg.flag, arg.value) if isinstance(arg, FlagArg) else (arg, None)
        for arg in flag_args(argv)
    ]


def server_identity(sweep: Sweep, host: HostSpec, config: Mapping[str, KnobValue]) -> str:
    """What the sweep's engine would run for ``config`` on ``host`` (a representative of its
    type), as text: equal for configs that resolve to the same server (module docstring)."""
    engine = engines.get(sweep.engine)
    recipe = ServerRecipe.of(sweep, host, engine)
    try:
        # No metrics flags: every config of the sweep gets the same ones, and the identities
        # already stored were made without them.
        invocation = recipe.invocation(config, add_metrics_flags=False)
    except (ExtraFlagConflict, UnknownKnobError):
        return "invalid:" + config_identity(config)
    pairs = [
        (flag, None if value is None else engine.normal_word(value, flag))
        for flag, value in _flag_values(invocation.argv)
    ]
    values = {flag: value for flag, value in pairs if flag.startswith("--")}
    forced = engine.forced_flags(values)
    knob_map: dict[str, KnobMapping] = host.effective_knobs(sweep.server.knobs)
    may_override = {m.flag for m in knob_map.values() if m.flag and m.overridden_by_server}
    kept = [(flag, value) for flag, value in pairs if not (flag in forced and flag in may_override)]
    flags = sorted((flag, value or "") for flag, value in kept if flag.startswith("--"))
    words = [flag for flag, _ in kept if not flag.startswith("--")]
    env = sorted(
        (name, engine.normal_word(value, None)) for name, value in invocation.environment.items()
    )
    return json.dumps({"words": words, "flags": flags, "env": env}, separators=(",", ":"))
