"""The number a search learns from: one trial's objective value, and whether it is allowed.

A search needs one value per measured trial, now, to choose the next config; the answers layer
(``orchestrator.answers``) judges the finished sweep with intervals. This is the search's own
small reading, so the two can be pointed at one definition later:

- the objective's metric at each of its cells (``accept_len`` from the point's accept length,
  every other name from the point's stored metrics), combined by geometric mean; a minimized
  metric (latencies, errors) is negated, so larger is always better;
- each constraint over every measured cell (``ttft_p99_s: "<= 2.0"``), over the trial's coding
  anchor (``coding_pass_rate``: passes / problems), or against the host type's baseline trial
  (``">= baseline"``: the baseline's value at the same cell); ``lossless: true`` asks the coding
  outputs to equal the baseline's. What a trial did not measure (a screening look has no coding)
  is not held against it;
- a trial that failed, or broke a constraint, has no usable value: the model is told a bad
  value (:func:`penalty`) so it learns to avoid the region, not an exception.

Without an objective every cell of the matrix counts, output tokens per second.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.answers.answer import default_metric
from orchestrator.answers.estimate import weighted_geomean
from orchestrator.answers.runs import point_metric
from orchestrator.points import CodingPoint, Point, ThroughputPoint
from orchestrator.sweepfile import Sweep
from orchestrator.sweepfile.schema import Bound
from orchestrator.types import MatrixCell, metric_is_minimized


@dataclass(frozen=True, slots=True)
class Objective:
    """What the search maximizes: ``metric`` at ``cells``, geomean, negated when minimized."""

    metric: str
    cells: tuple[MatrixCell, ...]
    minimized: bool
    weights: tuple[float, ...] | None = None
    """Per cell, its share of the geometric mean (an across-load objective's ``load``)."""


def sweep_objective(sweep: Sweep) -> Objective:
    """The sweep's objective, or without one output tokens/s over the closed-loop cells (a
    sweep of rate points only: their :func:`~orchestrator.answers.answer.default_metric`)."""
    if sweep.objective is not None:
        return Objective(
            sweep.objective.metric,
            sweep.objective_cells(),
            sweep.objective.minimized,
            sweep.objective.weights(),
        )
    cells = sweep.benchmark.matrix_cells()
    chosen = tuple(c for c in cells if c.rate is None) or cells
    metric = default_metric(chosen[0], sweep.benchmark.slo is not None)
    return Objective(metric, chosen, metric_is_minimized(metric))


@dataclass(frozen=True, slots=True)
class TrialScore:
    """``value`` is None when the objective's cells are not all measured (or not positive)."""

    value: float | None
    broken: tuple[str, ...] = ()

    @property
    def feasible(self) -> bool:
        return self.value is not None and not self.broken


def _cells(points: Sequence[Point]) -> dict[MatrixCell, ThroughputPoint]:
    return {p.cell: p for p in points if isinstance(p, ThroughputPoint)}


def objective_value(objective: Objective, points: Sequence[Point]) -> float | None:
    """The geometric mean of the metric over the objective's cells (negated when minimized),
    or None when a cell is missing or its value is not positive."""
    by_cell = _cells(points)
    values = []
    for cell in objective.cells:
        point = by_cell.get(cell)
        value = None if point is None else point_metric(point, objective.metric)
        if value is None or not value > 0 or not math.isfinite(value):
            return None
        values.append(value)
    mean = weighted_geomean(values, objective.weights)
    return -mean if objective.minimized else mean


def pass_rate(points: Sequence[Point]) -> float | None:
    coding = [p for p in points if isinstance(p, CodingPoint)]
    return sum(p.passed for p in coding) / len(coding) if coding else None


def broken_constraints(
    sweep: Sweep, points: Sequence[Point], baseline: Sequence[Point] | None
) -> tuple[str, ...]:
    """The names of the sweep's constraints ``points`` break (module docstring)."""
    broken: list[str] = []
    cells, base_cells = _cells(points), _cells(baseline or ())
    for name, bound in sorted(sweep.constraints.items()):
        if isinstance(bound, bool):
            if name == "lossless" and bound and not _lossless(points, baseline):
                broken.append(name)
            continue
        if name == "coding_pass_rate":
            base_rate = pass_rate(baseline or ())
            if not _holds(bound, pass_rate(points), base_rate):
                broken.append(name)
            continue
        for cell, point in sorted(cells.items()):
            base = base_cells.get(cell)
            if not _holds(
                bound, point_metric(point, name), None if base is None else point_metric(base, name)
            ):
                broken.append(name)
                break
    return tuple(broken)


def _holds(bound: Bound, value: float | None, baseline: float | None) -> bool:
    """Unknown (not measured, or no baseline yet) holds: only evidence breaks a constraint."""
    limit = baseline if bound.value == "baseline" else bound.value
    if value is None or limit is None:
        return True
    assert isinstance(limit, float | int)
    return bound.holds(value, float(limit))


def _lossless(points: Sequence[Point], baseline: Sequence[Point] | None) -> bool:
    ours = {p.problem: p.output for p in points if isinstance(p, CodingPoint)}
    theirs = {p.problem: p.output for p in baseline or () if isinstance(p, CodingPoint)}
    return all(ours[problem] == theirs[problem] for problem in ours.keys() & theirs.keys())


def score_trial(
    sweep: Sweep,
    objective: Objective,
    points: Sequence[Point],
    baseline: Sequence[Point] | None,
) -> TrialScore:
    return TrialScore(
        objective_value(objective, points), broken_constraints(sweep, points, baseline)
    )


def penalty(values: Sequence[float]) -> float:
    """The bad value a failed or constraint-breaking trial is told as: below every value seen
    by the spread of the values (or by one, or by half the magnitude, when there is no spread),
    so the model ranks it last without the scale of a sentinel distorting its densities."""
    if not values:
        return -1.0
    low, high = min(values), max(values)
    spread = high - low or max(abs(low) * 0.5, 1.0)
    return low - spread
