"""A sweep's attempts as restarts of configs on host types, and what each one measured (pure).

Each done attempt is one restart replicate of its config on its host: the config is known by
its normalized knob mapping (repeats of one config have distinct trial keys), the host type
by the sweep's hosts. A run's value for an objective is read from its throughput points at
the objective's cells (the last point of a cell, should a trial have measured it twice),
combined by geometric mean over cells.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.answers.estimate import Sample, geomean_within, weighted_geomean
from orchestrator.answers.model import ObjectiveView
from orchestrator.answers.saturation import share_bound
from orchestrator.causes import NEVER_STARTED
from orchestrator.plan import normalize_config
from orchestrator.points import ThroughputPoint
from orchestrator.store.records import TrialPurpose
from orchestrator.store.results import SweepResults, TrialOutcome, is_schedule_plan
from orchestrator.sweepfile import Sweep
from orchestrator.types import LATENCIES, THROUGHPUT_SCALARS, JsonObject, MatrixCell


def config_id(config: Mapping[str, Any]) -> str:
    """A config's identity: its normalized knob mapping as canonical JSON."""
    return json.dumps(normalize_config(config), sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Run:
    """One attempt of a trial on a host of the type, in the order the restarts finished."""

    outcome: TrialOutcome
    config_id: str
    order: int

    @property
    def host(self) -> str:
        return self.outcome.host

    @property
    def done(self) -> bool:
        return self.outcome.state == "done"

    @property
    def purpose(self) -> TrialPurpose:
        return self.outcome.plan.purpose if self.outcome.plan is not None else "measure"


def host_types(results: SweepResults, sweep: Sweep) -> dict[str, str]:
    """host name -> host type: the sweep file's, else what the store recorded."""
    types = {host.name: host.type for host in results.hosts}
    types.update({host.name: host.host_type for host in sweep.hosts})
    return types


def type_order(results: SweepResults, sweep: Sweep) -> list[str]:
    """Host types in the order the sweep file first names them."""
    order: list[str] = []
    for name in [h.host_type for h in sweep.hosts] + [h.type for h in results.hosts]:
        if name not in order:
            order.append(name)
    return order


def _finish_key(item: tuple[int, TrialOutcome]) -> tuple[float, int]:
    index, outcome = item
    when = outcome.finished_at if outcome.finished_at is not None else outcome.started_at
    return (when if when is not None else math.inf, index)


def _failed_before_start(outcome: TrialOutcome) -> bool:
    """Refused by the preflight (a flag or value the host's SGLang rejects): no unit start."""
    return (outcome.evidence or {}).get("found_by") == "preflight"


SCHEDULE_ID = "schedule"
"""The group of a ``schedule`` trial's restarts: a schedule is no fixed config, whatever
config its server starts from."""


def runs_of_type(
    results: SweepResults, sweep: Sweep, host_type: str, *, schedules: bool = False
) -> list[Run]:
    """Every unit start on hosts of ``host_type`` (attempts, failed and retried included; a
    trial never attempted, or set aside before its start, is none), in finishing order: the
    fixed configs' (``schedules`` False) or the schedule trials' (True, grouped as
    :data:`SCHEDULE_ID`)."""
    types = host_types(results, sweep)
    attempts = [
        (index, outcome)
        for index, outcome in enumerate(results.trials)
        if outcome.attempt is not None
        and types.get(outcome.host) == host_type
        and outcome.cause not in NEVER_STARTED
        and outcome.state != "skipped"  # the runner skips only before a start
        and outcome.state != "cancelled"  # a cancel records the trials it kept from starting
        and not _failed_before_start(outcome)
        and is_schedule_plan(outcome.plan) == schedules
    ]
    ordered = sorted(attempts, key=_finish_key)
    return [
        Run(outcome, SCHEDULE_ID if schedules else config_id(outcome.config), n)
        for n, (_, outcome) in enumerate(ordered)
    ]


def refused_of_type(results: SweepResults, sweep: Sweep, host_type: str) -> list[TrialOutcome]:
    """The trials on hosts of ``host_type`` the preflight refused: no unit started, so none is
    a :class:`Run`, yet each is its config failing (a flag or value the engine rejects)."""
    types = host_types(results, sweep)
    return [
        outcome
        for outcome in results.trials
        if types.get(outcome.host) == host_type and _failed_before_start(outcome)
    ]


def point_at(outcome: TrialOutcome, cell: MatrixCell) -> ThroughputPoint | None:
    found = None
    for point in outcome.throughput:
        if point.cell == cell:
            found = point
    return found


def point_metric(point: ThroughputPoint, metric: str) -> float | None:
    """A stored point metric by its stored name (``output_tok_s``, ``ttft_p99_s``), or the
    point's accept length (``accept_len``)."""
    if metric == "accept_len":
        value: object = point.accept.value
    elif metric in THROUGHPUT_SCALARS:
        value = getattr(point.metrics, metric)
    else:
        latency, _, stat = metric.partition("_")
        if latency not in LATENCIES:
            return None
        value = getattr(getattr(point.metrics, latency), stat, None)
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def coding_pass_rate(outcome: TrialOutcome) -> float | None:
    """Passes over the problems of the trial's coding anchor (a problem it never answered
    counts as not passed); None when the trial ran no coding anchor."""
    problems = len(outcome.plan.problems) if outcome.plan is not None else 0
    coding = outcome.coding
    total = problems or len(coding)
    if total == 0:
        return None
    return sum(1 for point in coding if point.passed) / total


def run_sample(outcome: TrialOutcome, objective: ObjectiveView) -> Sample | None:
    """The run's objective value, with its within-run standard error when the points store one
    (``output_tok_s`` only) and, for a share of a count, its cap and count
    (:func:`~orchestrator.answers.saturation.share_bound`); None when a cell is missing or has
    no value."""
    if objective.metric == "coding_pass_rate":
        rate = coding_pass_rate(outcome)
        problems = len(outcome.plan.problems) if outcome.plan is not None else 0
        count = problems or len(outcome.coding)
        return None if rate is None else Sample(rate, outcome.host, cap=1.0, count=count)
    values: list[float] = []
    ses: list[float | None] = []
    dfs: list[float | None] = []
    bounds: list[tuple[float, int | None]] = []
    for cell in objective.cells:
        point = point_at(outcome, cell)
        value = None if point is None else point_metric(point, objective.metric)
        if point is None or value is None:
            return None
        values.append(value)
        se = point.metrics.output_tok_s_se if objective.metric == "output_tok_s" else None
        ses.append(se)
        dfs.append(point.metrics.output_tok_s_batches - 1 if se is not None else None)
        if (bound := share_bound(objective.metric, point)) is not None:
            bounds.append(bound)
    cap, requests = _combined_bound(bounds, len(values), objective.weights)
    if len(values) == 1:
        return Sample(values[0], outcome.host, ses[0], dfs[0], cap, requests)
    value, se, df = geomean_within(values, ses, dfs, objective.weights)
    return Sample(value, outcome.host, se, df, cap, requests)


def _combined_bound(
    bounds: Sequence[tuple[float, int | None]], cells: int, weights: Sequence[float] | None
) -> tuple[float | None, int | None]:
    """The cells' caps combined as the objective combines its values (weighted geometric
    mean), with the fewest requests; (None, None) unless every cell has a cap."""
    if not bounds or len(bounds) != cells:
        return None, None
    cap = weighted_geomean([c for c, _ in bounds], weights)
    counts = [n for _, n in bounds if n]
    return cap, (min(counts) if len(counts) == len(bounds) else None)


def full_fidelity(outcome: TrialOutcome, objective: ObjectiveView) -> bool:
    """A screening attempt that went on, on the same server, to more than the objective's cells
    (the full matrix or the coding anchor) counts as a full measurement."""
    if outcome.plan is None or outcome.plan.purpose != "screen":
        return True
    cells = set(objective.cells)
    return bool(outcome.coding) or any(
        p.cell not in cells for p in outcome.throughput
    )


@dataclass(frozen=True, slots=True)
class ConfigRuns:
    """A config's done runs on the pooled hosts of one type, by what they are for."""

    config: JsonObject
    measured: tuple[tuple[Run, Sample], ...] = ()
    screened: tuple[tuple[Run, Sample], ...] = ()
    confirmed: tuple[tuple[Run, Sample], ...] = ()

    @property
    def selection(self) -> tuple[tuple[Run, Sample], ...]:
        """What the config was picked on: every restart that explored or raced it, full
        measurements and screens pooled (a screen measures the objective's own cells, so its
        value is one more restart of the same quantity, and restart-to-restart noise dwarfs
        the fewer rounds' request noise); a config only ever confirmed, its confirmations."""
        return (self.measured + self.screened) or self.confirmed

    @property
    def reported(self) -> tuple[tuple[Run, Sample], ...]:
        """What its estimate is reported from: confirmation restarts when there are any (they
        did not pick it), else what it was picked on."""
        return self.confirmed or self.selection

    @property
    def every(self) -> tuple[tuple[Run, Sample], ...]:
        """Every restart of the config, whatever it was for: what its variance and its
        ``restarts`` count rest on."""
        return self.measured + self.screened + self.confirmed

    @property
    def screened_only(self) -> bool:
        return not self.measured and not self.confirmed and bool(self.screened)

    @property
    def evidence(self) -> tuple[Run, ...]:
        """The runs its constraints are judged on: full-fidelity ones when there are any."""
        full = self.measured + self.confirmed
        return tuple(run for run, _ in (full or self.screened))


def group_runs(
    runs: Sequence[Run], objective: ObjectiveView, excluded: frozenset[str]
) -> dict[str, ConfigRuns]:
    """Done runs with an objective value, on hosts not kept out of the pool, by config."""
    grouped: dict[str, dict[str, list[tuple[Run, Sample]]]] = {}
    configs: dict[str, JsonObject] = {}
    for run in runs:
        if not run.done or run.host in excluded:
            continue
        sample = run_sample(run.outcome, objective)
        if sample is None:
            continue
        kind = (
            "confirmed"
            if run.purpose == "confirm"
            else "measured"
            if full_fidelity(run.outcome, objective)
            else "screened"
        )
        configs.setdefault(run.config_id, dict(normalize_config(run.outcome.config)))
        grouped.setdefault(run.config_id, {}).setdefault(kind, []).append((run, sample))
    return {
        key: ConfigRuns(
            configs[key],
            tuple(kinds.get("measured", ())),
            tuple(kinds.get("screened", ())),
            tuple(kinds.get("confirmed", ())),
        )
        for key, kinds in grouped.items()
    }
