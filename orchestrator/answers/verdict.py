"""Which configs may win (constraints), and whether the data names a winner (pure).

Constraints are judged on a config's pooled full-fidelity runs on the host type: a point
metric (or ``accept_len``) at each of the answer's cells, the mean over runs compared with its
bound; ``coding_pass_rate`` as passes / problems of each run's coding anchor, averaged;
``lossless`` by :mod:`orchestrator.bench.lossless` against the baseline's temperature-0 coding
outputs on the same type. ``>= baseline`` compares with the baseline config's value on the
same type. A constraint that cannot be judged (the metric was not measured, no baseline, no
coding outputs to compare) counts against the config, in words that say so: a config is
recommended only for what was shown. Constraint checks compare point estimates, not
intervals.

The verdict is ``better`` only when the best beats every other valid config beyond the
uncertainty (each margin's 95 % interval excludes 0); else ``tie`` with every valid config the
data cannot tell from the best; ``no-valid-config`` when nothing valid was measured.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.answers.estimate import Spread, improvement
from orchestrator.answers.model import Margin, Verdict
from orchestrator.answers.runs import ConfigRuns, Run, coding_pass_rate, point_at, point_metric
from orchestrator.bench.coding import Outcome
from orchestrator.bench.lossless import compare_outputs
from orchestrator.sweepfile.schema import Bound
from orchestrator.types import MatrixCell


@dataclass(frozen=True, slots=True)
class Constraints:
    """A sweep's constraints as one answer judges them: at its cells, against its baseline."""

    bounds: Mapping[str, Bound | bool]
    cells: tuple[MatrixCell, ...]
    baseline: ConfigRuns | None


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _cell_value(runs: Sequence[Run], metric: str, cell: MatrixCell) -> float | None:
    values = []
    for run in runs:
        point = point_at(run.outcome, cell)
        value = None if point is None else point_metric(point, metric)
        if value is not None:
            values.append(value)
    return _mean(values)


def _pass_rate(runs: Sequence[Run]) -> float | None:
    return _mean([r for run in runs if (r := coding_pass_rate(run.outcome)) is not None])


def _where(cell: MatrixCell | None) -> str:
    return "" if cell is None else f" at {cell.words}"


def _bound_problem(
    name: str,
    bound: Bound,
    value: float | None,
    baseline_value: float | None,
    cell: MatrixCell | None,
) -> str | None:
    if value is None:
        return f"{name} cannot be judged: not measured{_where(cell)}"
    if bound.value == "baseline":
        if baseline_value is None:
            return f"{name} {value:.4g} cannot be judged against the baseline: none measured"
        limit, shown = baseline_value, f"baseline ({baseline_value:.4g})"
    else:
        limit, shown = float(bound.value), f"{bound.value:g}"
    if bound.holds(value, limit):
        return None
    return f"{name} {value:.4g} breaks {bound.op} {shown}{_where(cell)}"


def _outputs(run: Run) -> dict[str, str]:
    return {
        p.problem: p.output for p in run.outcome.coding if p.outcome is not Outcome.REQUEST_ERROR
    }


def _at_temperature_zero(runs: Sequence[Run]) -> list[Run]:
    return [
        run
        for run in runs
        if run.outcome.coding
        and run.outcome.plan is not None
        and run.outcome.plan.coding_temperature == 0.0
    ]


def lossless_problem(candidate: Sequence[Run], baseline: Sequence[Run]) -> str | None:
    """Why ``candidate``'s runs are not shown lossless against ``baseline``'s: a drift in
    words, or why it cannot be judged; None when every run reproduces the baseline's text."""
    references = _at_temperature_zero(baseline)
    if not references:
        return "lossless cannot be judged: no baseline coding outputs at temperature 0"
    runs = _at_temperature_zero(candidate)
    if not runs:
        return "lossless cannot be judged: no coding outputs at temperature 0"
    for run in runs:
        reference = next((r for r in references if r.host == run.host), references[0])
        report = compare_outputs(_outputs(reference), _outputs(run))
        if report.compared == 0:
            return "lossless cannot be judged: no coding problem answered by both"
        if report.drifted:
            differ = report.compared - report.exact_matches
            return (
                f"lossless broken: {differ} of {report.compared} coding outputs differ from "
                f"the baseline's (first at character {report.earliest_divergence_char})"
            )
    return None


def violations(config: ConfigRuns, is_baseline: bool, rules: Constraints) -> tuple[str, ...]:
    """The constraints ``config`` breaks or cannot be shown to keep, in words."""
    runs = config.evidence
    base = rules.baseline.evidence if rules.baseline is not None else ()
    found: list[str] = []
    for name, bound in rules.bounds.items():
        if name == "lossless":
            if bound is True and not is_baseline:
                problem = lossless_problem(runs, base)
                if problem is not None:
                    found.append(problem)
            continue
        if isinstance(bound, bool):
            continue
        if name == "coding_pass_rate":
            problem = _bound_problem(
                name, bound, _pass_rate(runs), _pass_rate(base) if base else None, None
            )
            if problem is not None:
                found.append(problem)
            continue
        for cell in rules.cells:
            problem = _bound_problem(
                name,
                bound,
                _cell_value(runs, name, cell),
                _cell_value(base, name, cell) if base else None,
                cell,
            )
            if problem is not None:
                found.append(problem)
    return tuple(found)


@dataclass(frozen=True, slots=True)
class RankedConfig:
    """A config's place in one answer: what it was picked on, what is reported, and whether it
    may win."""

    key: str
    runs: ConfigRuns
    label: str
    selection: Spread
    reported: Spread
    violations: tuple[str, ...] = ()
    smoothed: float | None = None
    """The selection's value shrunk toward its neighbours' (:mod:`.smooth`), when fitted."""

    @property
    def valid(self) -> bool:
        return not self.violations

    @property
    def pick(self) -> float:
        """What the config is ranked on: its smoothed selection value, else the selection's."""
        return self.selection.value if self.smoothed is None else self.smoothed


def rank(standings: Sequence[RankedConfig], *, minimized: bool) -> list[RankedConfig]:
    """Valid configs first, each group best first by what it was picked on."""

    def key(s: RankedConfig) -> tuple[bool, float]:
        return (not s.valid, s.pick if minimized else -s.pick)

    return sorted(standings, key=key)


def margin(best: RankedConfig, other: RankedConfig, *, minimized: bool) -> Margin:
    """How much ``best`` beats ``other`` on their reported estimates (positive = better), with
    the 95 % interval of the ratio (:func:`~orchestrator.answers.estimate.improvement`) read
    from the same spreads the answer shows (a within-run-only one with the assumed restart
    spread already in it, :func:`~orchestrator.answers.estimate.with_assumed_restarts`)."""
    factor, ci = improvement(best.reported, other.reported, minimized=minimized)
    return Margin(factor - 1.0, None if ci is None else (ci[0] - 1.0, ci[1] - 1.0))


@dataclass(frozen=True, slots=True)
class Decision:
    """The verdict over one answer's configs, in the order the answer shows them."""

    verdict: Verdict
    order: tuple[RankedConfig, ...] = ()
    """Every config, the best first: the rank (valid first, each group by what it was picked
    on), with the best moved to the front where confirmation overturned the pick."""
    margins: Mapping[str, Margin] = dataclasses.field(default_factory=dict)
    """Each other valid config's key -> how much the best beats it (the margin shown)."""
    tied: tuple[RankedConfig, ...] = ()
    """Exactly the valid configs whose margin interval holds 0 (or that have none)."""
    overturned: tuple[RankedConfig, ...] = ()
    """Configs ranked above the best whose own restarts the best's lose to beyond the
    uncertainty: the pick they were ranked on is not confirmed (named in the notes)."""

    @property
    def best(self) -> RankedConfig | None:
        return self.order[0] if self.order and self.order[0].valid else None

    @property
    def runner_up(self) -> RankedConfig | None:
        valid = [s for s in self.order if s.valid]
        return valid[1] if len(valid) > 1 else None

    @property
    def margin(self) -> Margin | None:
        runner = self.runner_up
        return None if runner is None else self.margins[runner.key]


def _lost_to(margin: Margin) -> bool:
    """The margin's interval lies wholly below 0: the other config beats the best beyond the
    uncertainty."""
    return margin.ci95 is not None and margin.ci95[1] < 0.0


def holds_zero(margin: Margin) -> bool:
    """The margin's interval, as shown, does not exclude 0 (or there is none): a tie."""
    ci = margin.ci95
    return ci is None or ci[0] <= 0.0 <= ci[1]


def decide(ranked: Sequence[RankedConfig], *, minimized: bool) -> Decision:
    """The verdict over configs ranked by :func:`rank`.

    The best is the first by rank, unless another valid config's reported estimate beats the
    best's beyond the uncertainty (confirmation restarts overturned the pick): then that one
    leads instead, until none does (each step strictly improves the reported estimate, so it
    ends). ``tied`` is then exactly the valid configs whose margin interval holds 0, and the
    verdict ``better`` exactly when there are none."""
    valid = [s for s in ranked if s.valid]
    if not valid:
        return Decision("no-valid-config", tuple(ranked))
    best = valid[0]
    overturned: list[RankedConfig] = []
    while True:
        margins = {s.key: margin(best, s, minimized=minimized) for s in valid if s is not best}
        beaten = [s for s in valid if s is not best and _lost_to(margins[s.key])]
        if not beaten:
            break
        # The challenger with the widest own estimate leads next.
        overturned.append(best)
        best = (min if minimized else max)(beaten, key=lambda s: s.reported.value)
    order = (best, *(s for s in ranked if s is not best))
    tied = tuple(s for s in order[1:] if s.valid and holds_zero(margins[s.key]))
    return Decision(
        "tie" if tied else "better",
        order,
        margins,
        tied,
        tuple(overturned),
    )
