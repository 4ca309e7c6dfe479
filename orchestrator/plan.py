"""A sweep's trials: which config runs on which host, in what order, under what stable key.

The key identifies a trial across runs (resume, dedup, the drop-in header, the store): it is
derived from host, unit and the knob values alone, never from file order, dict key order or
knobs left absent, so reordering a sweep file or declaring one more knob keeps old results
matched to their trials.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from orchestrator.host.dropin import (
    apply_knobs,
    format_knob_value,
    render_dropin,
    render_dropin_delta,
)
from orchestrator.sweepfile import HostSpec, Sweep
from orchestrator.types import KnobValue

_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9.]+")
_SLUG_MAX = 60
_DIGEST_CHARS = 12
_PLACEHOLDER = "<ExecStart>"


@dataclass(frozen=True, slots=True)
class Trial:
    """One config on one host. ``config`` holds only the knobs that are set (absent = None)."""

    key: str
    host: str
    config: dict[str, KnobValue]
    is_baseline: bool
    ordinal: int


@dataclass(frozen=True, slots=True)
class Plan:
    """The ordered trials of one sweep (ordinal = position; each host runs its own in order)."""

    sweep: str
    trials: tuple[Trial, ...]

    def for_host(self, host: str) -> list[Trial]:
        return [trial for trial in self.trials if trial.host == host]

    def __iter__(self) -> Iterator[Trial]:
        return iter(self.trials)

    def __len__(self) -> int:
        return len(self.trials)


def normalize_config(config: Mapping[str, KnobValue]) -> dict[str, KnobValue]:
    """Knobs set to None dropped, the rest in name order: the config's canonical form."""
    return {name: config[name] for name in sorted(config) if config[name] is not None}


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True)


def _slug(config: Mapping[str, KnobValue]) -> str:
    if not config:
        return "baseline"
    parts = []
    for name, value in config.items():
        text = "true" if value is True else "false" if value is False else format_knob_value(value)
        parts.append(f"{name}-{_SLUG_UNSAFE.sub('-', text).strip('-') or 'x'}")
    return "_".join(parts)[:_SLUG_MAX].rstrip("-_")


def trial_key(host: str, unit: str, config: Mapping[str, KnobValue]) -> str:
    """``<host>.<readable slug>.<12 hex of sha256>``; the digest alone makes it unique."""
    normal = normalize_config(config)
    digest = hashlib.sha256(
        _canonical_json({"host": host, "unit": unit, "config": normal}).encode("ascii")
    ).hexdigest()[:_DIGEST_CHARS]
    return f"{host}.{_slug(normal)}.{digest}"


def expand_configs(sweep: Sweep) -> list[dict[str, KnobValue]]:
    """Baseline (when asked) first, then the explicit list, then the grid's product, in
    normalized form with duplicates (same values) removed, first occurrence kept."""
    candidates: list[Mapping[str, KnobValue]] = []
    if sweep.baseline:
        candidates.append({})
    candidates.extend(sweep.configs)
    if sweep.grid:
        names = list(sweep.grid)
        for combination in itertools.product(*sweep.grid.values()):
            candidates.append(dict(zip(names, combination, strict=True)))
    seen: set[str] = set()
    unique: list[dict[str, KnobValue]] = []
    for candidate in candidates:
        normal = normalize_config(candidate)
        identity = _canonical_json(normal)
        if identity not in seen:
            seen.add(identity)
            unique.append(normal)
    return unique


def _hosts_by_type(hosts: list[HostSpec]) -> dict[str, list[HostSpec]]:
    groups: dict[str, list[HostSpec]] = {}
    for host in hosts:
        groups.setdefault(host.host_type, []).append(host)
    return groups


def plan_sweep(sweep: Sweep) -> Plan:
    """Every trial of ``sweep``: each config on every host (``each-host``), or once per host
    type, round-robin over that type's hosts (``across-type``)."""
    trials: list[Trial] = []
    groups = _hosts_by_type(sweep.hosts)
    for index, config in enumerate(expand_configs(sweep)):
        if sweep.distribute == "across-type":
            hosts = [members[index % len(members)] for members in groups.values()]
        else:
            hosts = list(sweep.hosts)
        for host in hosts:
            trials.append(
                Trial(
                    key=trial_key(host.name, sweep.server.unit, config),
                    host=host.name,
                    config=dict(config),
                    is_baseline=not config,
                    ordinal=len(trials),
                )
            )
    return Plan(sweep=sweep.name, trials=tuple(trials))


def render_trial_dropin(sweep: Sweep, trial: Trial) -> str:
    """The drop-in ``trial`` installs, when the sweep gives a representative ``exec_start``;
    otherwise the change it makes to whatever ExecStart the unit has, as commented text.
    Both are :mod:`orchestrator.host.dropin`'s renderers, the ones the lifecycle installs."""
    host = sweep.host(trial.host)
    knob_map = host.effective_knobs(sweep.server.knobs)
    base = sweep.server.exec_start or [_PLACEHOLDER]
    invocation = apply_knobs(
        base, {}, knob_map, trial.config, sweep.server.extra_flags, sweep.server.environment
    )
    if sweep.server.exec_start:
        return render_dropin(sweep.name, trial.key, invocation)
    removed = [target.flag for target in knob_map.values() if target.flag]
    return render_dropin_delta(sweep.name, trial.key, invocation, removed)


def plan_json(plan: Plan, sweep: Sweep) -> dict[str, Any]:
    """``{"sweep": name, "trials": [{"key", "host", "config", "dropin", ...}]}``."""
    return {
        "sweep": plan.sweep,
        "trials": [
            {
                "key": trial.key,
                "host": trial.host,
                "host_type": sweep.host(trial.host).host_type,
                "ordinal": trial.ordinal,
                "is_baseline": trial.is_baseline,
                "config": trial.config,
                "dropin": render_trial_dropin(sweep, trial),
            }
            for trial in plan.trials
        ],
    }
