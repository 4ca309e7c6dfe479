"""What an answer is: per host type, the config to deploy, how sure that is, and why.

These are the types that cross from the answers layer (which computes them from a sweep's
stored results) to its readers: ``results --json`` / ``run --json``, the reports, ``adopt``.
JSON is made only by their ``to_json``, at those edges.
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass
from typing import Literal

from orchestrator.engines.schedule import NativeSchedule
from orchestrator.types import JsonObject, MatrixCell, OfferedLoad

IntervalBasis = Literal["restarts", "borrowed-restart-variance", "within-run-only", "none"]
"""What variance an interval covers: ``restarts`` (the spread of this config's own restarts,
which holds request-to-request noise too), ``borrowed-restart-variance`` (one restart, with
the restart-to-restart spread measured on the host type's repeated configs), ``within-run-only``
(one restart and no repeated config to borrow from: the run's request-to-request noise, shown
with an assumed restart spread added since none was measured, so no deploy basis), ``none``
(nothing to build an interval from)."""

Verdict = Literal["better", "tie", "no-valid-config"]

LoadVerdict = Literal["better", "worse", "tie"]
"""What a measured schedule's margin over the best fixed config says at one load."""

RANK_WORDS = (
    "ranked on each config's restarts it was picked on (measuring and screening, never its "
    "confirmations), shrunk toward its neighbours' where a smooth surface fits the space"
)
"""What ``contenders`` are ordered by, in words every reader of an answer shows."""


def _interval(ci: tuple[float, float] | None) -> list[float] | None:
    return None if ci is None else [ci[0], ci[1]]


@dataclass(frozen=True, slots=True)
class Estimate:
    """One config's objective value on one host type, pooled over its restarts there."""

    value: float
    ci95: tuple[float, float] | None
    basis: IntervalBasis
    restarts: int
    """Restarts (unit starts that measured it) behind the value."""
    hosts: tuple[str, ...] = ()
    cv: float | None = None
    """Coefficient of variation across its restarts (None with fewer than two)."""
    noisy: bool = False
    """cv above 5 %: the restarts disagree more than a deploy decision should rest on."""

    def to_json(self) -> JsonObject:
        return {
            "value": self.value,
            "ci95": _interval(self.ci95),
            "basis": self.basis,
            "restarts": self.restarts,
            "hosts": list(self.hosts),
            "cv": self.cv,
            "noisy": self.noisy,
        }


@dataclass(frozen=True, slots=True)
class Contender:
    """A config's standing in one host type's answer."""

    config: JsonObject
    """Knob -> value, as in ``trials[].config``."""
    label: str
    estimate: Estimate
    speedup_vs_baseline: float | None = None
    speedup_ci95: tuple[float, float] | None = None
    violations: tuple[str, ...] = ()
    """Constraints it breaks, in words (``"ttft_p99_s 2.41 > 2.0"``): it cannot win."""
    screened_only: bool = False
    """Measured only at screening fidelity (fewer rounds, the objective's cells)."""
    ranked_on: float | None = None
    """The value the answer ranked it by (:data:`RANK_WORDS`): its estimate shrunk toward its
    neighbours' when a surface was fitted, else the mean of the restarts it was picked on;
    differs from ``estimate.value`` where either applies."""
    vs_best: Margin | None = None
    """How much the answer's best beats it (positive = the best is better), with the
    interval the tie rule reads; None for the best itself and for configs that cannot win."""
    flags: tuple[str, ...] = ()
    """Quality flags (``client_saturated``, ``accept_len_disagree``, ...) of the points its
    estimate rests on, at the objective's cells."""

    def to_json(self) -> JsonObject:
        return {
            "config": self.config,
            "label": self.label,
            "estimate": self.estimate.value,
            "ci95": _interval(self.estimate.ci95),
            "basis": self.estimate.basis,
            "restarts": self.estimate.restarts,
            "hosts": list(self.estimate.hosts),
            "cv": self.estimate.cv,
            "noisy": self.estimate.noisy,
            "speedup_vs_baseline": self.speedup_vs_baseline,
            "speedup_ci95": _interval(self.speedup_ci95),
            "violations": list(self.violations),
            "screened_only": self.screened_only,
            "ranked_on": self.ranked_on,
            "vs_best": None if self.vs_best is None else self.vs_best.to_json(),
            "flags": list(self.flags),
        }


@dataclass(frozen=True, slots=True)
class HostFlag:
    """A host that disagrees with its siblings beyond noise: a finding, kept out of the pool."""

    host: str
    host_type: str
    message: str

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Margin:
    """How much the best beats the runner-up: relative difference of the objective (positive
    = better, whichever way the metric goes) with its 95 % interval."""

    relative: float
    ci95: tuple[float, float] | None

    def to_json(self) -> JsonObject:
        return {"relative": self.relative, "ci95": _interval(self.ci95)}


@dataclass(frozen=True, slots=True)
class ObjectiveView:
    """The objective an answer is about, in the sweep file's terms."""

    metric: str
    cells: tuple[MatrixCell, ...]
    """The cells the value is read at (combined by ``combine``)."""
    minimized: bool
    combine: str = "geomean"
    weights: tuple[float, ...] | None = None
    """Per cell, its share of the combined value (an across-load objective's ``load``, summing
    to 1); None: the cells weigh the same."""
    across_load: bool = False
    """The objective asks its question at each of several loads (``per_load`` answers)."""
    loads: tuple[OfferedLoad | None, ...] = ()
    """Per cell, what its schedule really offered and the client sent, as the type's points
    measured them (:func:`~orchestrator.answers.saturation.measured_load`); None at a
    closed-loop cell or where no point stored its schedule (its rate is then nominal)."""

    def per_load(self) -> tuple[ObjectiveView, ...]:
        """The same question at each of the objective's cells alone (one per load)."""
        return tuple(
            ObjectiveView(self.metric, (cell,), self.minimized, loads=(self.load(cell),))
            for cell in self.cells
        )

    def load(self, cell: MatrixCell) -> OfferedLoad | None:
        """What ``cell``'s points measured of its load (:attr:`loads`)."""
        loads = dict(zip(self.cells, self.loads, strict=False))
        return loads.get(cell)

    def to_json(self) -> JsonObject:
        return {
            "metric": self.metric,
            "cells": [cell.as_fields() for cell in self.cells],
            "goal": "min" if self.minimized else "max",
            "combine": self.combine,
            "weights": None if self.weights is None else list(self.weights),
            "across_load": self.across_load,
            "loads": [
                None if (load := self.load(cell)) is None else load.to_json() for cell in self.cells
            ],
        }


@dataclass(frozen=True, slots=True)
class FailedConfig:
    """A config of the space that was tried on this host type and never measured."""

    config: JsonObject
    label: str
    cause: str | None

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class ConvergenceStep:
    """After ``restarts`` unit starts on the type, the best valid estimate so far."""

    restarts: int
    best: float | None
    label: str | None

    def to_json(self) -> JsonObject:
        return asdict(self)


EXPLORATION_MARGIN = 0.02
"""How much better than the answer's config an unexplored config must be for the exploration
risk to count it: 2 %, the restart-to-restart spread of the simulated hosts, below which a
night's restarts would not tell the two apart anyway."""
EXPLORATION_THRESHOLD = 0.10
"""The largest exploration risk an answer may say "Deploy" with (and ``adopt`` installs
without ``--allow-unexplored``): one chance in ten that a config the night did not measure
beats its config by more than :data:`EXPLORATION_MARGIN`."""

ExplorationMethod = Literal["complete", "surface", "exchangeable"]
"""How the exploration risk was estimated: ``complete`` (every config of the space measured
or failed: no risk), ``surface`` (the smoothed response surface the search picks with,
:func:`orchestrator.answers.smooth.exceed_chances`), ``exchangeable`` (too few configs to fit
one: the chance that the best of the space is among the unexplored, were every config equally
likely to be it, which bounds the chance of one beating the answer's config by the margin)."""


@dataclass(frozen=True, slots=True)
class Exploration:
    """How much of the space an answer rests on, and what the rest risks (docs/answers.md,
    "How much was explored")."""

    explored: int
    """Configs of the space measured on the type (the baseline, when the sweep has one,
    included)."""
    space: int
    failed: int
    """Configs tried that never produced a measurement: explored, and out of the running."""
    risk: float
    """The chance that a config neither measured nor failed beats the answer's config by more
    than ``margin`` (relative, on the objective), by ``method``."""
    method: ExplorationMethod
    margin: float = EXPLORATION_MARGIN
    threshold: float = EXPLORATION_THRESHOLD
    next: tuple[JsonObject, ...] = ()
    """The unexplored configs to run next, the likeliest to beat the answer's config first."""

    @property
    def unexplored(self) -> int:
        return max(0, self.space - self.explored - self.failed)

    @property
    def risky(self) -> bool:
        """Above the threshold: the answer is the best found so far, not a deploy advice."""
        return self.risk > self.threshold

    def to_json(self) -> JsonObject:
        return {
            "explored": self.explored,
            "space": self.space,
            "failed": self.failed,
            "unexplored": self.unexplored,
            "risk": self.risk,
            "method": self.method,
            "margin": self.margin,
            "threshold": self.threshold,
            "next": list(self.next),
        }


@dataclass(frozen=True, slots=True)
class Band:
    """One measured load's winner, over the batch sizes ``start`` to ``end`` (None: open)."""

    start: int
    end: int | None
    load: int
    """The concurrency it was measured at."""
    best: Contender

    def to_json(self) -> JsonObject:
        return {
            "from": self.start,
            "to": self.end,
            "concurrency": self.load,
            "config": dict(self.best.config),
            "label": self.best.label,
            "estimate": self.best.estimate.value,
            "ci95": None if self.best.estimate.ci95 is None else list(self.best.estimate.ci95),
        }


@dataclass(frozen=True, slots=True)
class Schedule:
    """The proposed bands and the engine's form of them (or why it has none)."""

    bands: tuple[Band, ...]
    native: NativeSchedule | None
    no_native: str | None
    """Why the engine takes no schedule for these bands; None when :attr:`native` is set."""
    verdict: ScheduleVerdict | None = None
    """The schedule measured against the best fixed config at every load; None until a
    schedule trial of this type has been measured."""

    def to_json(self) -> JsonObject:
        return {
            "bands": [band.to_json() for band in self.bands],
            "native": None if self.native is None else self.native.to_json(),
            "no_native": self.no_native,
            "verdict": None if self.verdict is None else self.verdict.to_json(),
        }


@dataclass(frozen=True, slots=True)
class LoadComparison:
    """The measured schedule against the best fixed config at one load: the relative
    difference (positive = the schedule is better, whichever way the metric goes) with its
    interval, one of the verdict's simultaneous family (:attr:`ScheduleVerdict.confidence`),
    and what it says: ``better`` or ``worse`` beyond the noise, else ``tie``."""

    cell: MatrixCell
    fixed: Contender
    """The best fixed config (the one the answer names over every load) at this load."""
    schedule: Estimate
    """The schedule trial's value at this load."""
    margin: Margin
    verdict: LoadVerdict

    def to_json(self) -> JsonObject:
        return {
            "concurrency": self.cell.concurrency,
            "rate": self.cell.rate,
            "fixed": self.fixed.to_json(),
            "schedule": self.schedule.to_json(),
            "margin": self.margin.to_json(),
            "verdict": self.verdict,
        }


@dataclass(frozen=True, slots=True)
class ScheduleVerdict:
    """Whether the measured schedule is recommended: not worse than the best fixed config at
    any load beyond the noise and better at one (``recommended``); ``words`` says why, or what
    the schedule lost where."""

    recommended: bool
    comparisons: tuple[LoadComparison, ...]
    words: str
    restarts: int
    """Schedule trials measured (each a restart)."""
    confidence: float = 0.95
    """The level each load's margin interval is built at, so that all of them hold at once
    with 95 % (Bonferroni over the loads compared): a verdict that reads every load may not
    take one load's 1-in-40 miss for a loss."""

    @property
    def intervals(self) -> str:
        """What the margins' intervals are, in words every reader of the verdict shows."""
        loads = len(self.comparisons)
        covers = (
            "the restart-to-restart and request-to-request variance of both sides' restarts"
        )
        if loads <= 1:
            return f"a 95% interval at the one load compared, covering {covers}"
        return (
            f"simultaneous 95% intervals over {loads} loads (Bonferroni, each at "
            f"{self.confidence:.1%}); each covers {covers}"
        )

    def to_json(self) -> JsonObject:
        return {
            "recommended": self.recommended,
            "comparisons": [c.to_json() for c in self.comparisons],
            "words": self.words,
            "restarts": self.restarts,
            "intervals": {
                "simultaneous": 0.95,
                "each": self.confidence,
                "method": "bonferroni",
                "covers": self.intervals,
            }
            if self.comparisons
            else None,
        }


@dataclass(frozen=True, slots=True)
class Answer:
    """Which config to deploy on one host type for one objective, and how sure that is."""

    host_type: str
    objective: ObjectiveView
    verdict: Verdict
    best: Contender | None
    runner_up: Contender | None = None
    tied: tuple[Contender, ...] = ()
    """On ``tie``: the configs the data cannot tell from ``best`` (``best`` not repeated)."""
    margin: Margin | None = None
    """best vs runner-up."""
    explored: int = 0
    """Distinct configs measured on this host type."""
    space: int = 0
    """Distinct configs in the sweep's space."""
    restarts_used: int = 0
    contenders: tuple[Contender, ...] = ()
    """Every measured config, best first (what the report's pictures show)."""
    failed: tuple[FailedConfig, ...] = ()
    convergence: tuple[ConvergenceStep, ...] = ()
    """Best-so-far against restarts spent, in the order the restarts happened."""
    flags: tuple[HostFlag, ...] = ()
    notes: tuple[str, ...] = ()
    """What the reader must know to trust it (borrowed variance, a cut-short search, ...)."""
    stopped: str | None = None
    """Why the sweep (or the search on this type) ended before its plan or search did, in
    words (``"the finish_by deadline stopped it"``); None when it ran to its end. A cut-short
    answer is what was measured so far, never a deploy advice."""
    capped: str | None = None
    """Why the objective cannot tell the leaders apart (the offered load caps it), with what
    to change; None when it can."""
    exploration: Exploration | None = None
    """How much of the space was explored and the chance that what was not beats ``best``;
    None where nothing was measured."""
    per_load: tuple[Answer, ...] = ()
    """An across-load objective's answer at each load alone, in the objective's order (the
    same interval model and tie rule); () for an objective at one load."""
    schedule: Schedule | None = None
    """The speculative schedule the per-load answers propose (concurrency loads only)."""

    @property
    def load_cell(self) -> MatrixCell:
        """The one cell a per-load answer is about (its objective's only cell)."""
        (cell,) = self.objective.cells
        return cell

    def winner_changes(self) -> tuple[WinnerChange, ...]:
        """Where the config named at one load differs from the one named at the load before
        (the per-load answers in the objective's order)."""
        changes = []
        for before, after in itertools.pairwise(self.per_load):
            was, now = named(before), named(after)
            if was is not None and now is not None and was.label != now.label:
                changes.append(WinnerChange(after.load_cell, was.label, now.label))
        return tuple(changes)

    def per_load_json(self) -> list[JsonObject]:
        """Each load's answer as ``answers[].per_load`` holds it: the load, then the verdict,
        best, tied, runner-up and margin as the overall answer writes them."""
        out = []
        for answer in self.per_load:
            cell = answer.load_cell
            out.append(
                {
                    "concurrency": cell.concurrency,
                    "rate": cell.rate,
                    "context": cell.context,
                    "workload": cell.workload,
                    "verdict": answer.verdict,
                    "best": None if answer.best is None else answer.best.to_json(),
                    "runner_up": None if answer.runner_up is None else answer.runner_up.to_json(),
                    "tied": [c.config for c in answer.tied],
                    "margin": None if answer.margin is None else answer.margin.to_json(),
                    "contenders": [c.to_json() for c in answer.contenders],
                    "notes": list(answer.notes),
                    "capped": answer.capped,
                }
            )
        return out

    def to_json(self) -> JsonObject:
        return {
            "host_type": self.host_type,
            "objective": self.objective.to_json(),
            "verdict": self.verdict,
            "best": None if self.best is None else self.best.to_json(),
            "runner_up": None if self.runner_up is None else self.runner_up.to_json(),
            "tied": [c.config for c in self.tied],
            "margin": None if self.margin is None else self.margin.to_json(),
            "explored": self.explored,
            "space": self.space,
            "restarts_used": self.restarts_used,
            "contenders": [c.to_json() for c in self.contenders],
            "failed": [f.to_json() for f in self.failed],
            "convergence": [step.to_json() for step in self.convergence],
            "flags": [f.to_json() for f in self.flags],
            "notes": list(self.notes),
            "rank": RANK_WORDS,
            "stopped": self.stopped,
            "capped": self.capped,
            "exploration": None if self.exploration is None else self.exploration.to_json(),
            "per_load": self.per_load_json(),
            "schedule": None if self.schedule is None else self.schedule.to_json(),
            "winner_changes": [change.to_json() for change in self.winner_changes()],
        }


@dataclass(frozen=True, slots=True)
class WinnerChange:
    """At ``cell``'s load the config named changes from ``before`` to ``after``."""

    cell: MatrixCell
    before: str
    after: str

    def words(self) -> str:
        return f"from {self.cell.load}: {self.after} (before: {self.before})"

    def to_json(self) -> JsonObject:
        return {
            "concurrency": self.cell.concurrency,
            "rate": self.cell.rate,
            "before": self.before,
            "after": self.after,
        }


def named(answer: Answer) -> Contender | None:
    """The one config an answer names: what ``adopt`` installs (with ``--allow-tie`` too),
    what the headline names first and what the explored-space heatmap marks.

    The rule (docs/answers.md, "The rank, and one number per config"): the first valid config
    of the answer's rank, which ranks each config on the restarts it was picked on, smoothed
    over its neighbours; unless another valid config's own restarts beat it beyond the
    uncertainty, which is then named instead (:func:`orchestrator.answers.verdict.decide`).
    That is ``best``; on a tie it is the first of the tied by rank, not necessarily the one
    with the highest estimate (:func:`standing_words` says which)."""
    return answer.best


def top_estimate(answer: Answer) -> Contender | None:
    """The valid contender whose estimate tops the estimate column (the lowest for a
    minimized metric); None without a valid one."""
    valid = [c for c in answer.contenders if not c.violations]
    if not valid:
        return None
    pick = min if answer.objective.minimized else max
    return pick(valid, key=lambda c: c.estimate.value)


def standing_words(answer: Answer) -> str:
    """What :func:`named`'s config is, in words true of the estimate column: "the highest
    estimate" only when its estimate tops every valid config's, else "first by rank" and the
    config whose estimate is higher."""
    chosen = named(answer)
    if chosen is None:
        return "no valid config"
    top = top_estimate(answer)
    higher = "lowest" if answer.objective.minimized else "highest"
    if top is None or top.estimate.value == chosen.estimate.value:
        return f"the {higher} estimate"
    return (
        f"first by rank, on the restarts it was picked on; {top.label} has the {higher} "
        f"estimate, {top.estimate.value:,.4g} against {chosen.estimate.value:,.4g}"
    )
