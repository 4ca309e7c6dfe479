"""A sweep's trials: which config runs on which host, in what order, under what stable key.

The key identifies a trial across runs (resume, dedup, the drop-in header, the store): it is
derived from host, unit and the knob values alone, never from file order, dict key order or
knobs left absent, so reordering a sweep file or declaring one more knob keeps old results
matched to their trials. A config's later measurements (``benchmark.repeats``) get derived keys
(:func:`repeat_key`), so adding repeats keeps the first measurements matched too.

The grid runs in rounds: every config once, then every config again (A B C A B C), so that a
host's drift over the night spreads over all configs instead of reading as a config effect.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.bench.problems import builtin_problems
from orchestrator.host.dropin import (
    format_knob_value,
    render_dropin,
    render_dropin_delta,
)
from orchestrator.host.launchfile import LaunchFile
from orchestrator.invocation import ServerRecipe
from orchestrator.search.deadline import local_deadline
from orchestrator.sweepfile import HostSpec, Sweep
from orchestrator.types import KnobValue

_SLUG_UNSAFE = re.compile(r"[^A-Za-z0-9.]+")
_SLUG_MAX = 60
_DIGEST_CHARS = 12


@dataclass(frozen=True, slots=True)
class Trial:
    """One config on one host. ``config`` holds only the knobs that are set (absent = None)."""

    key: str
    host: str
    config: dict[str, KnobValue]
    is_baseline: bool
    ordinal: int
    repeat: int = 1
    """Which round of the grid this measurement is (1..``benchmark.repeats``)."""


@dataclass(frozen=True, slots=True)
class PlanWarning:
    """Where the plan cannot keep a host difference from reading as a config difference."""

    host_type: str
    message: str

    def __str__(self) -> str:
        return f"host type {self.host_type}: {self.message}"


@dataclass(frozen=True, slots=True)
class PlanCut:
    """What ``search.max_restarts`` left out of one host type's grid (its trials in plan
    order are kept up to the cap, so whole rounds go first)."""

    host_type: str
    max_restarts: int
    planned: int
    """Trials the uncut grid has on the type."""
    configs_cut: int
    """Configs left with no measurement at all on the type."""
    repeats_cut: int
    """Measurements cut of configs that keep at least one."""

    def __str__(self) -> str:
        return (
            f"host type {self.host_type}: search.max_restarts {self.max_restarts} keeps "
            f"{self.max_restarts} of {self.planned} trials: {self.configs_cut} config(s) not "
            f"measured, {self.repeats_cut} further measurement(s) of the others cut"
        )


@dataclass(frozen=True, slots=True)
class Plan:
    """The ordered trials of one sweep (ordinal = position; each host runs its own in order)."""

    sweep: str
    trials: tuple[Trial, ...]
    warnings: tuple[PlanWarning, ...] = ()
    cuts: tuple[PlanCut, ...] = ()

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


REPEAT_SEPARATOR = "~r"


def repeat_key(key: str, repeat: int) -> str:
    """The key of the ``repeat``-th measurement of the trial keyed ``key``: the first keeps
    ``key`` itself (a sweep that adds repeats keeps its stored trials), a later one is
    ``<key>~r<repeat>``. Every restart that measures a config again (grid repeats, a search's
    confirmations) is keyed here, so one config's measurements never share a key."""
    if repeat < 1:
        raise ValueError(f"repeat {repeat}: measurements count from 1")
    return key if repeat == 1 else f"{key}{REPEAT_SEPARATOR}{repeat}"


def first_key(key: str) -> str:
    """The key of the first measurement of the config that ``key`` measures (the inverse of
    :func:`repeat_key`)."""
    head, separator, tail = key.rpartition(REPEAT_SEPARATOR)
    return head if separator and tail.isdigit() else key


def space_trials(sweep: Sweep, host: str) -> list[tuple[str, dict[str, KnobValue]]]:
    """Every config of the sweep's space on ``host``, under its first measurement's key: what
    the preflight parses, since a search may propose any of them (the plan's own trials are
    only the grid's order cut to ``search.max_restarts``)."""
    return [(trial_key(host, sweep.unit, c), c) for c in expand_configs(sweep)]


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
    """Every trial of ``sweep`` in ``benchmark.repeats`` rounds, each round every config once
    in expansion order (A B C A B C).

    ``each-host``: each round runs every config on every host (a config is measured
    ``repeats`` times on each host). ``across-type``: each round runs the baseline on every
    host and each other config on one host of its type; the first round's host is the one
    :func:`balanced_assignment` picks, and each later round moves it to the type's next host,
    so a config's ``repeats`` measurements alternate over the type's hosts.

    With ``search.max_restarts``, each host type keeps its first ``max_restarts`` trials in
    this order (whole rounds first) and :attr:`Plan.cuts` says what was left out."""
    configs = expand_configs(sweep)
    first_hosts: dict[int, list[HostSpec]] = {index: [] for index in range(len(configs))}
    type_members = _hosts_by_type(sweep.hosts)
    warnings: list[PlanWarning] = []
    if sweep.distribute == "across-type":
        for host_type, members in type_members.items():
            assignment = balanced_assignment(configs, [h.name for h in members])
            by_name = {host.name: host for host in members}
            over_rounds = []
            for index, names in enumerate(assignment):
                first_hosts[index].extend(by_name[name] for name in names)
                over_rounds.append(
                    _hosts_over_rounds(
                        [by_name[name] for name in names],
                        type_members,
                        sweep.benchmark.repeats,
                        moves=bool(configs[index]),
                    )
                )
            warnings.extend(_confounding(host_type, configs, over_rounds, len(members)))
    else:
        for index in first_hosts:
            first_hosts[index] = list(sweep.hosts)
    trials: list[Trial] = []
    for repeat in range(1, sweep.benchmark.repeats + 1):
        for index, config in enumerate(configs):
            for host in _round_hosts(first_hosts[index], type_members, repeat, bool(config)):
                trials.append(
                    Trial(
                        key=repeat_key(trial_key(host.name, sweep.unit, config), repeat),
                        host=host.name,
                        config=dict(config),
                        is_baseline=not config,
                        ordinal=len(trials),
                        repeat=repeat,
                    )
                )
    cuts: list[PlanCut] = []
    if sweep.search.max_restarts is not None:
        trials, cuts = _cut_to_cap(sweep, trials, sweep.search.max_restarts)
    return Plan(sweep=sweep.name, trials=tuple(trials), warnings=tuple(warnings), cuts=tuple(cuts))


def _round_hosts(
    first: list[HostSpec],
    type_members: Mapping[str, list[HostSpec]],
    repeat: int,
    moves: bool,
) -> list[HostSpec]:
    """The hosts that measure a config in round ``repeat``: where a config runs on one host
    of a type, it moves to the type's next host each round; where it runs on every host of
    the type (the baseline, or any config under ``each-host``) it stays."""
    if not moves:
        return first
    out = []
    for host in first:
        members = type_members[host.host_type]
        alone = sum(1 for other in first if other.host_type == host.host_type) == 1
        if alone and len(members) > 1:
            host = members[(members.index(host) + repeat - 1) % len(members)]
        out.append(host)
    return out


def _hosts_over_rounds(
    first: list[HostSpec],
    type_members: Mapping[str, list[HostSpec]],
    repeats: int,
    *,
    moves: bool,
) -> list[str]:
    """The hosts that measure a config in any of the ``repeats`` rounds."""
    return sorted(
        {
            host.name
            for repeat in range(1, repeats + 1)
            for host in _round_hosts(first, type_members, repeat, moves)
        }
    )


def _cut_to_cap(sweep: Sweep, trials: list[Trial], cap: int) -> tuple[list[Trial], list[PlanCut]]:
    """Each host type's first ``cap`` trials in plan order, renumbered; and per cut type, how
    many configs and repeat measurements were left out."""
    type_of = {host.name: host.host_type for host in sweep.hosts}
    used: dict[str, int] = {}
    kept: list[Trial] = []
    dropped: dict[str, list[Trial]] = {}
    for trial in trials:
        host_type = type_of[trial.host]
        if used.get(host_type, 0) < cap:
            used[host_type] = used.get(host_type, 0) + 1
            kept.append(dataclasses.replace(trial, ordinal=len(kept)))
        else:
            dropped.setdefault(host_type, []).append(trial)
    cuts = []
    for host_type, left_out in dropped.items():
        measured = {_canonical_json(t.config) for t in kept if type_of[t.host] == host_type}
        unmeasured = {_canonical_json(t.config) for t in left_out} - measured
        repeats_cut = sum(1 for t in left_out if _canonical_json(t.config) in measured)
        cuts.append(
            PlanCut(
                host_type=host_type,
                max_restarts=cap,
                planned=cap + len(left_out),
                configs_cut=len(unmeasured),
                repeats_cut=repeats_cut,
            )
        )
    return kept, cuts


def _levels(configs: list[dict[str, KnobValue]]) -> list[dict[str, str]]:
    """Each config's level of every knob any config sets (absent is a level too), as text
    that keeps ``1``, ``true`` and ``"1"`` apart."""
    knobs = sorted({name for config in configs for name in config})
    return [{name: _canonical_json(config.get(name)) for name in knobs} for config in configs]


def balanced_assignment(configs: list[dict[str, KnobValue]], hosts: list[str]) -> list[list[str]]:
    """For each config, the hosts (of one type) that run it: the baseline on every host, so
    each host's own baseline measures how it differs; each other config on one host, chosen
    greedily so that each knob's values spread over the hosts (the host already running
    fewest configs with the same values, then the least loaded, then the first).

    Round-robin tied a knob value to a host whenever the number of hosts divided the grid's
    inner dimension (budget x topk on two hosts: every topk=4 on the first): a host effect
    then reads as a topk effect."""
    levels = _levels([config for config in configs if config])
    seen: dict[str, dict[tuple[str, str], int]] = {host: {} for host in hosts}
    load = dict.fromkeys(hosts, 0)
    out: list[list[str]] = []
    config_levels = iter(levels)
    for config in configs:
        if not config:
            out.append(list(hosts))
            continue
        level = next(config_levels)

        def cost(host: str, level: dict[str, str] = level) -> tuple[int, int, int]:
            same = sum(seen[host].get(item, 0) for item in level.items())
            return same, load[host], hosts.index(host)

        host = min(hosts, key=cost)
        for item in level.items():
            seen[host][item] = seen[host].get(item, 0) + 1
        load[host] += 1
        out.append([host])
    return out


def _confounding(
    host_type: str,
    configs: list[dict[str, KnobValue]],
    assignment: list[list[str]],
    host_count: int,
) -> list[PlanWarning]:
    """Where a knob value runs on one host only: ``assignment`` holds each config's hosts
    over all rounds (repeats move a config over the type's hosts, which can spread it)."""
    if host_count < 2:
        return []
    warnings = []
    if not any(not config for config in configs):
        warnings.append(
            PlanWarning(
                host_type,
                f"no baseline: each of its {host_count} hosts runs other configs, so a host "
                "difference reads as a config difference (baseline: true runs it on every host)",
            )
        )
    tested = [(config, hosts) for config, hosts in zip(configs, assignment, strict=True) if config]
    levels = _levels([config for config, _ in tested])
    for knob in sorted(levels[0]) if levels else []:
        hosts_of: dict[str, set[str]] = {}
        for level, (_, hosts_run) in zip(levels, tested, strict=True):
            hosts_of.setdefault(level[knob], set()).update(hosts_run)
        if len(hosts_of) < 2:
            continue
        alone = sorted(
            (_level_text(value), next(iter(hosts)))
            for value, hosts in hosts_of.items()
            if len(hosts) == 1
        )
        if alone:
            where = ", ".join(f"{knob}={value} only on {host}" for value, host in alone)
            warnings.append(
                PlanWarning(
                    host_type,
                    f"{where} (too few configs to spread them): compare each with its own "
                    "host's baseline",
                )
            )
    return warnings


def _level_text(canonical: str) -> str:
    return "(absent)" if canonical == "null" else canonical


def trial_launch_files(sweep: Sweep, trial: Trial) -> tuple[LaunchFile, ...]:
    """The files ``trial`` writes on its host beside its drop-in (its engine's config files),
    as the lifecycle writes them: the same builder, path and bytes."""
    return ServerRecipe.of(sweep, sweep.host(trial.host)).invocation(trial.config).launch_files


def render_launch_files(files: Sequence[LaunchFile]) -> str:
    """Launch files as ``plan`` shows them: each one's path and mode, then its content."""
    blocks = [
        f"# launch file {f.path} (mode {f.mode:04o})\n{f.content.decode('utf-8', 'replace')}"
        for f in files
    ]
    return "".join(b if b.endswith("\n") else b + "\n" for b in blocks)


def render_trial_dropin(sweep: Sweep, trial: Trial) -> str:
    """The drop-in ``trial`` installs, when the sweep gives a representative ``exec_start``;
    otherwise the change it makes to whatever ExecStart the unit has, as commented text.
    Both are :mod:`orchestrator.host.dropin`'s renderers, the ones the lifecycle installs.
    The trial's launch files, if any, are :func:`trial_launch_files`."""
    host = sweep.host(trial.host)
    recipe = ServerRecipe.of(sweep, host)
    invocation = recipe.invocation(trial.config)
    if sweep.server.exec_start:
        return render_dropin(sweep.name, trial.key, invocation)
    removed = [target.flag for target in recipe.knobs.values() if target.flag]
    return render_dropin_delta(
        sweep.name, trial.key, invocation, removed, if_missing=recipe.metrics_flags
    )


@dataclass(frozen=True, slots=True)
class PlanEstimate:
    """How long the plan takes, under stated assumptions: per trial, per host (its trials one
    after another, then its restore) and for the sweep (hosts run in parallel: the longest)."""

    trial_s: float
    restart_s: float
    bench_s: float
    coding_s: float
    per_host_s: dict[str, float]
    assumptions: tuple[str, ...]

    @property
    def total_s(self) -> float:
        return max(self.per_host_s.values(), default=0.0)


def _coding_problem_count(sweep: Sweep) -> int | None:
    coding = sweep.coding
    if coding is None:
        return 0
    if coding.select:
        return len(coding.select)
    if coding.problems == "builtin":
        return len(builtin_problems())
    return None


def estimate_plan(plan: Plan, sweep: Sweep) -> PlanEstimate:
    """A duration estimate from the sweep's benchmark sizes and ``estimate:`` section.

    A closed point is ``rounds`` waves of ``concurrency`` requests (plus the warm-up's waves),
    each request reading its context and writing ``max_tokens`` at the assumed per-request
    rates; an open-loop point sends for ``rate_duration_s`` after one warm-up wave and drains
    its last request; every workload measures every point. The coding problems run one at a
    time, each writing up to its ``max_tokens``. Retries and failures (which end a trial early)
    are not counted."""
    assumed = sweep.estimate
    bench_s = _benchmark_s(sweep)
    problems = _coding_problem_count(sweep)
    coding_s = 0.0
    if sweep.coding is not None and problems:
        coding_s = problems * sweep.coding.max_tokens / assumed.decode_tokens_per_s
    trial_s = assumed.restart + bench_s + coding_s
    per_host = {host.name: 0.0 for host in sweep.hosts}
    for trial in plan.trials:
        per_host[trial.host] += trial_s
    for name in per_host:
        per_host[name] += assumed.restart
    return PlanEstimate(
        trial_s=trial_s,
        restart_s=assumed.restart,
        bench_s=bench_s,
        coding_s=coding_s,
        per_host_s=per_host,
        assumptions=tuple(_estimate_assumptions(sweep, problems)),
    )


def _benchmark_s(sweep: Sweep) -> float:
    """One trial's benchmark at the assumed per-request rates (:func:`estimate_plan`)."""
    assumed, bench = sweep.estimate, sweep.benchmark
    total = 0.0
    for cell in bench.matrix_cells():
        wave_s = cell.context / assumed.prefill_tokens_per_s + (
            bench.max_tokens / assumed.decode_tokens_per_s
        )
        if cell.concurrency is not None:
            waves = bench.rounds + math.ceil(bench.warmup_requests / cell.concurrency)
            total += waves * wave_s
        else:
            total += bench.rate_duration_s + 2 * wave_s
    return total


def _estimate_assumptions(sweep: Sweep, problems: int | None) -> list[str]:
    """What the estimate assumes, in words, each with the setting that changes it."""
    assumed = sweep.estimate
    restart = format_duration(assumed.restart)
    restart_source = (
        "estimate.restart"
        if "restart" in assumed.model_fields_set
        else "estimate.restart's default: this model's load time is unknown before a run; "
        "set estimate.restart to what a restart of it takes"
    )
    assumptions = [
        f"one restart (stop, memory release, load, warm-up) takes {restart} ({restart_source})",
        f"one request writes {assumed.decode_tokens_per_s:g} tokens/s and reads "
        f"{assumed.prefill_tokens_per_s:g} tokens/s (estimate.decode_tokens_per_s, "
        "estimate.prefill_tokens_per_s)",
        "each host ends with one more restart (its restore); hosts run in parallel",
        "no retries, no failures; the timeouts are only upper bounds",
    ]
    if sweep.benchmark.repeats > 1:
        assumptions.append(
            f"each config is measured {sweep.benchmark.repeats} times (benchmark.repeats), "
            "each after its own restart: each repeat is one of the trials above"
        )
    if sweep.search.strategy != "grid":
        assumptions.append(
            f"strategy {sweep.search.strategy}: every one of the type's "
            f"{sweep.search.max_restarts} starts (search.max_restarts) measures the whole "
            "matrix (screening is shorter)"
        )
    if sweep.coding is not None and problems is None:
        assumptions.append(f"the coding problems of {sweep.coding.problems!r} are not counted")
    return assumptions


@dataclass(frozen=True, slots=True)
class DeadlineCheck:
    """The plan's estimate against ``schedule.finish_by``: the time from when the sweep may
    start (``not_before``, else now) to the deadline, and whether the estimate overruns it."""

    finish_by: str
    start: dt.datetime
    start_from: str
    """``now`` or ``schedule.not_before``."""
    finish: dt.datetime
    estimate_s: float
    assumes: str
    """What the estimate rests on, in a few words (the restart time first: unknown before a
    run, it dominates)."""
    search: bool
    """A search stops exploring in time for the deadline itself; a grid is cut by it."""

    @property
    def available_s(self) -> float:
        return (self.finish - self.start).total_seconds()

    @property
    def overruns(self) -> bool:
        return self.estimate_s > self.available_s

    def warning(self) -> str | None:
        """The warning ``plan`` prints when the estimate overruns the deadline."""
        if not self.overruns:
            return None
        start = "now" if self.start_from == "now" else "at schedule.not_before"
        consequence = (
            "the search will explore less and stop for the deadline"
            if self.search
            else "the sweep will be stopped there with part of the plan not measured"
        )
        return (
            f"schedule.finish_by {self.finish_by}: started {start} ({self.start:%H:%M}), the "
            f"sweep has {format_duration(self.available_s)} but plan estimates about "
            f"{format_duration(self.estimate_s)} (an estimate, not a measurement: it assumes "
            f"{self.assumes}): {consequence}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "finish_by": self.finish_by,
            "start": self.start.isoformat(timespec="minutes"),
            "start_from": self.start_from,
            "available_s": round(self.available_s, 1),
            "estimate_s": round(self.estimate_s, 1),
            "assumes": self.assumes,
            "overruns": self.overruns,
            "warning": self.warning(),
        }


def deadline_check(sweep: Sweep, estimate: PlanEstimate, now: dt.datetime) -> DeadlineCheck | None:
    """The estimate against ``schedule.finish_by`` (control machine local time), for a sweep
    that starts at ``not_before`` or, without one, ``now``; None without a deadline. A sweep
    queued behind others starts later, and has less time than this says."""
    schedule = sweep.schedule
    if schedule is None or schedule.finish_by is None:
        return None
    start_from = "now"
    start = now
    if schedule.not_before is not None:
        start, start_from = local_deadline(schedule.not_before, now), "schedule.not_before"
    return DeadlineCheck(
        finish_by=schedule.finish_by,
        start=start,
        start_from=start_from,
        finish=local_deadline(schedule.finish_by, start),
        estimate_s=estimate.total_s,
        assumes=_short_assumptions(sweep),
        search=sweep.search.strategy != "grid",
    )


def _short_assumptions(sweep: Sweep) -> str:
    assumed = sweep.estimate
    restart = format_duration(assumed.restart)
    source = (
        "estimate.restart"
        if "restart" in assumed.model_fields_set
        else "estimate.restart's default; the load time is unknown before a run"
    )
    text = (
        f"{restart} per restart ({source}) and {assumed.decode_tokens_per_s:g} output "
        "tokens/s per request, no retries"
    )
    if sweep.search.strategy != "grid":
        text += f", and all {sweep.search.max_restarts} starts per host type at full fidelity"
    return text


def plan_notes(sweep: Sweep, plan: Plan) -> list[str]:
    """What ``orchestrator plan`` says beyond the table: under a search strategy, that the
    table is only the grid's view; under the grid, what the restart cap cut."""
    schedules = sweep.schedule_restarts()
    then = (
        [
            f"then up to {schedules} schedule trial(s) per host type (search.schedule_trials): "
            "the schedule the answer across load proposes, in the engine's own form, measured "
            "against the best fixed config; not in the table, since it is known only then"
        ]
        if schedules
        else []
    )
    if sweep.search.strategy != "grid":
        return [
            f"strategy {sweep.search.strategy} (seed {sweep.search.seed}): the search proposes "
            f"its own trials from these {len(expand_configs(sweep))} configs, at most "
            f"{sweep.search.max_restarts} unit starts per host type; the table is the grid's "
            "order, cut to that cap",
            *then,
        ]
    notes = [str(cut) for cut in plan.cuts]
    if plan.cuts:
        notes.append("retries count against search.max_restarts when the sweep runs")
    return [*notes, *then]


def repeat_warnings(sweep: Sweep) -> list[str]:
    """A warning when an objective asks for a verdict that one restart per config can only
    support with borrowed (or no) restart-to-restart variance."""
    if sweep.objective is None or sweep.benchmark.repeats > 1:
        return []
    return [
        "benchmark.repeats is 1: a config's interval borrows restart-to-restart variance from "
        "repeated configs, or is within-run only"
    ]


def format_duration(seconds: float) -> str:
    """``45s``, ``12m30s``, ``3h05m``: to the second under an hour, to the minute above."""
    whole = round(seconds)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes}m{rest:02d}s" if rest else f"{minutes}m"
    hours, rest = divmod(round(seconds / 60), 60)
    return f"{hours}h{rest:02d}m"


def _trial_json(sweep: Sweep, trial: Trial, estimate: PlanEstimate) -> dict[str, Any]:
    """One trial of ``plan --json``: what runs where, its drop-in and launch files."""
    return {
        "key": trial.key,
        "host": trial.host,
        "host_type": sweep.host(trial.host).host_type,
        "ordinal": trial.ordinal,
        "is_baseline": trial.is_baseline,
        "config": trial.config,
        "repeat": trial.repeat,
        "dropin": render_trial_dropin(sweep, trial),
        "launch_files": [f.to_json() for f in trial_launch_files(sweep, trial)],
        "estimate_s": round(estimate.trial_s, 1),
    }


def _estimate_json(estimate: PlanEstimate) -> dict[str, Any]:
    """``plan --json``'s ``estimate``: the sweep's, a trial's (by step), each host's."""
    return {
        "total_s": round(estimate.total_s, 1),
        "per_trial_s": round(estimate.trial_s, 1),
        "per_trial": {
            "restart_s": round(estimate.restart_s, 1),
            "benchmark_s": round(estimate.bench_s, 1),
            "coding_s": round(estimate.coding_s, 1),
        },
        "per_host_s": {name: round(v, 1) for name, v in estimate.per_host_s.items()},
        "assumptions": list(estimate.assumptions),
    }


def _search_json(plan: Plan, sweep: Sweep) -> dict[str, Any]:
    """``plan --json``'s ``search``: the strategy, its cap, the space's size and what the
    cap cuts per host type."""
    return {
        "strategy": sweep.search.strategy,
        "max_restarts": sweep.search.max_restarts,
        "seed": sweep.search.seed,
        "space": len(expand_configs(sweep)),
        "schedule_trials": sweep.schedule_restarts(),
        "cuts": [
            {
                "host_type": cut.host_type,
                "planned": cut.planned,
                "kept": cut.max_restarts,
                "configs_cut": cut.configs_cut,
                "repeats_cut": cut.repeats_cut,
            }
            for cut in plan.cuts
        ],
    }


def plan_json(
    plan: Plan,
    sweep: Sweep,
    *,
    file_warnings: Sequence[str] = (),
    now: dt.datetime | None = None,
) -> dict[str, Any]:
    """``{"sweep": name, "trials": [{"key", "host", "config", "repeat", "dropin", ...}]}``,
    with who runs what (``hosts``), the duration ``estimate``, the estimate against
    ``schedule.finish_by`` (``deadline``, null without one; ``now`` is when the sweep would
    start without ``not_before``), the ``repeats`` and ``search`` (strategy, cap, the space's
    size, what the cap ``cuts``) and the ``warnings`` (the sweep file's, as
    ``FILE:LINE: FIELD: message``, then the plan's, then the deadline's)."""
    estimate = estimate_plan(plan, sweep)
    deadline = deadline_check(sweep, estimate, now or dt.datetime.now())
    overrun = deadline.warning() if deadline is not None else None
    return {
        "sweep": plan.sweep,
        "distribute": sweep.distribute,
        "trials": [_trial_json(sweep, trial, estimate) for trial in plan.trials],
        "hosts": [
            {
                "name": host.name,
                "host_type": host.host_type,
                "trials": [trial.key for trial in plan.for_host(host.name)],
                "configs": [trial.config for trial in plan.for_host(host.name)],
                "estimate_s": round(estimate.per_host_s[host.name], 1),
            }
            for host in sweep.hosts
        ],
        "estimate": _estimate_json(estimate),
        "deadline": deadline.to_json() if deadline is not None else None,
        "repeats": sweep.benchmark.repeats,
        "search": _search_json(plan, sweep),
        "warnings": [
            *file_warnings,
            *(str(warning) for warning in plan.warnings),
            *([overrun] if overrun else []),
        ],
    }
