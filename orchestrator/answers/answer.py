"""A sweep's stored results turned into one answer per host type (pure, no I/O).

For each host type (and, without an objective, each matrix cell): the hosts are pooled
(:mod:`.pooling`), each config's restarts give its estimate with a 95 % interval
(:mod:`.estimate`), constraints decide who may win and the margins whether a winner can be
named (:mod:`.verdict`). A config is picked on its measuring (or screening) restarts; when
confirmation restarts exist, the estimates it is reported with come from those alone, so the
luck that put it first is not in its number (no winner's curse).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator import engines
from orchestrator.answers.ending import STOPPED_CAUSE, cut_short
from orchestrator.answers.estimate import (
    MIN_PRIOR_DF,
    OwnVariance,
    Sample,
    Scale,
    Spread,
    VarianceModel,
    improvement,
    own_variance,
    spread,
    variance_model,
    with_assumed_restarts,
)
from orchestrator.answers.exploration import explore_risk
from orchestrator.answers.model import (
    Answer,
    Contender,
    ConvergenceStep,
    Exploration,
    FailedConfig,
    ObjectiveView,
    Schedule,
)
from orchestrator.answers.pooling import PoolCheck, check_pool
from orchestrator.answers.runs import (
    SCHEDULE_ID,
    ConfigRuns,
    Run,
    config_id,
    group_runs,
    host_types,
    point_at,
    refused_of_type,
    runs_of_type,
    type_order,
)
from orchestrator.answers.saturation import (
    CAP_TOLERANCE,
    RATE_METRICS,
    at_cap,
    interval_scale,
    measured_load,
    offered_cap,
)
from orchestrator.answers.schedule import judge_schedule, propose_schedule
from orchestrator.answers.smooth import PRIOR_RESTART_CV, Axes, smooth_picks
from orchestrator.answers.verdict import (
    Constraints,
    Decision,
    RankedConfig,
    decide,
    rank,
    violations,
)
from orchestrator.plan import expand_configs, normalize_config
from orchestrator.store.results import SweepResults, TrialOutcome, config_label
from orchestrator.sweepfile import Sweep
from orchestrator.types import KnobValue, MatrixCell, OfferedLoad, metric_is_minimized, plural

BASELINE_ID = config_id({})


def default_metric(cell: MatrixCell, has_slo: bool) -> str:
    """What "best" means at a cell when the sweep names no objective: aggregate output
    tokens/s at a closed-loop cell; at an open-loop one (whose throughput the offered rate
    sets) goodput under the sweep's ``slo``, or without one the median time per output token."""
    if cell.rate is None:
        return "output_tok_s"
    return "goodput" if has_slo else "tpot_p50_s"


def objective_views(sweep: Sweep) -> list[ObjectiveView]:
    """The sweep's objective, or without one, each matrix cell's :func:`default_metric`."""
    objective = sweep.objective
    if objective is not None:
        return [
            ObjectiveView(
                objective.metric,
                sweep.objective_cells(),
                objective.minimized,
                objective.combine,
                weights=objective.weights(),
                across_load=objective.across_load,
            )
        ]
    has_slo = sweep.benchmark.slo is not None
    views = []
    for cell in sweep.benchmark.matrix_cells():
        metric = default_metric(cell, has_slo)
        views.append(ObjectiveView(metric, (cell,), metric_is_minimized(metric)))
    return views


def answer_sweep(results: SweepResults, sweep: Sweep) -> tuple[Answer, ...]:
    """One answer per host type for the sweep's objective; without an objective, one per
    (host type, matrix cell) for ``output_tok_s`` there."""
    configs = expand_configs(sweep)
    space = len(configs)
    axes = Axes.of([normal for c in configs if (normal := normalize_config(c))])
    types = host_types(results, sweep)
    answers: list[Answer] = []
    for host_type in type_order(results, sweep):
        hosts = [name for name, kind in types.items() if kind == host_type]
        runs = runs_of_type(results, sweep, host_type)
        refused = refused_of_type(results, sweep, host_type)
        stopped = cut_short(results, host_type, types)
        for view in objective_views(sweep):
            answer = _answer(
                host_type, hosts, runs, view, sweep, space, axes, stopped, refused, configs
            )
            if view.across_load:
                per_load = tuple(
                    _answer(
                        host_type, hosts, runs, at_load, sweep, space, axes, stopped, refused
                    )
                    for at_load in view.per_load()
                )
                answer = dataclasses.replace(answer, per_load=per_load)
                scheduled = runs_of_type(results, sweep, host_type, schedules=True)
                answer = dataclasses.replace(
                    answer, schedule=_schedule(answer, sweep, runs, scheduled, hosts, axes)
                )
            answers.append(answer)
    return tuple(answers)


def _schedule(
    answer: Answer,
    sweep: Sweep,
    runs: Sequence[Run],
    scheduled: Sequence[Run],
    hosts: Sequence[str],
    axes: Axes,
) -> Schedule | None:
    """The schedule ``answer``'s per-load answers propose on the sweep's engine, with its
    verdict against the best fixed config at each load once schedule trials (``scheduled``)
    of this proposal have run."""
    proposed = propose_schedule(answer, engines.get(sweep.engine), sweep.server.knobs)
    if proposed is None or proposed.native is None or not scheduled:
        return proposed

    def ranked(view: ObjectiveView, both: Sequence[Run]) -> list[RankedConfig]:
        pool = check_pool(answer.host_type, _host_values(both, view), hosts)
        grouped = group_runs(both, view, pool.excluded)
        scope = _Scope(answer.host_type, view, pool, _variance(grouped, view))
        return _standings(grouped, scope, sweep, axes)

    return judge_schedule(proposed, answer, runs, scheduled, ranked)


@dataclass(frozen=True, slots=True)
class _Scope:
    host_type: str
    view: ObjectiveView
    pool: PoolCheck
    variance: VarianceModel | None


def _samples(pairs: Sequence[tuple[Run, Sample]]) -> list[Sample]:
    return [sample for _, sample in pairs]


def _host_values(runs: Sequence[Run], view: ObjectiveView) -> dict[str, dict[str, list[float]]]:
    data: dict[str, dict[str, list[float]]] = {}
    for key, config in group_runs(runs, view, frozenset()).items():
        for run, sample in config.measured + config.confirmed:
            data.setdefault(key, {}).setdefault(run.host, []).append(sample.value)
    return data


def _own(config: ConfigRuns, scale: Scale) -> OwnVariance | None:
    """A config's own restart variance from every restart it has on the pooled hosts: the
    restarts it was picked on about their mean, its confirmations about theirs."""
    picked = _samples(config.measured + config.screened)
    return own_variance([picked, _samples(config.confirmed)], scale)


def _variance(grouped: dict[str, ConfigRuns], view: ObjectiveView) -> VarianceModel | None:
    """The type's one variance model (:func:`~orchestrator.answers.estimate.variance_model`)
    from every repeated config's own variance."""
    scale = interval_scale(view.metric, view.cells)
    owns = [own for config in grouped.values() if (own := _own(config, scale)) is not None]
    return variance_model(owns, scale)


def _smoothed(grouped: dict[str, ConfigRuns], axes: Axes) -> dict[str, float]:
    """Each config's selection value shrunk toward a smooth surface over the space's configs
    (the baseline, outside the space, stands on its own), each restart weighted by the spread
    the search picked with (:func:`~orchestrator.answers.smooth.smooth_picks` of the same
    selection restarts), so the answer names the config the search raced and confirmed."""
    keys = [key for key in grouped if key not in (BASELINE_ID, SCHEDULE_ID)]
    if not keys:
        return {}
    selections = [[s.value for s in _samples(grouped[key].selection)] for key in keys]
    fits = smooth_picks(axes, [grouped[key].config for key in keys], selections)
    return {key: fit.value for key, fit in zip(keys, fits, strict=True) if fit.shrunk}


def _shown(
    pairs: Sequence[tuple[Run, Sample]],
    restarts: int,
    variance: VarianceModel | None,
    own: OwnVariance | None,
    scale: Scale,
) -> Spread:
    """One config's estimate from ``pairs`` resting on ``restarts`` restarts, as the answer
    shows it: a within-run-only one as the tie rule weighs it, with the assumed restart spread
    in it, so intervals that do not overlap are never tied (docs/answers.md, "What the
    interval covers")."""
    found = spread(_samples(pairs), variance, own=own, restarts=restarts, scale=scale)
    assert found is not None  # a group has a sample
    return with_assumed_restarts(found)


def _standings(
    grouped: dict[str, ConfigRuns], scope: _Scope, sweep: Sweep, axes: Axes
) -> list[RankedConfig]:
    rules = Constraints(dict(sweep.constraints), scope.view.cells, grouped.get(BASELINE_ID))
    smoothed = _smoothed(grouped, axes)
    out = []
    scale = interval_scale(scope.view.metric, scope.view.cells)
    for key, config in grouped.items():
        # The estimate rests on every restart of the config: its value on the reported ones,
        # its variance on all of them (moderated toward the type's).
        own = _own(config, scale)
        selection = _shown(config.selection, len(config.selection), scope.variance, own, scale)
        reported = _shown(config.reported, len(config.every), scope.variance, own, scale)
        out.append(
            RankedConfig(
                key,
                config,
                config_label(config.config),
                selection,
                reported,
                violations(config, key == BASELINE_ID, rules),
                smoothed.get(key),
            )
        )
    return rank(out, minimized=scope.view.minimized)


def _flags(config: ConfigRuns, view: ObjectiveView) -> tuple[str, ...]:
    """The quality flags of the points its reported estimate rests on, at the objective's
    cells, in the order first seen."""
    flags: dict[str, None] = {}
    for run, _ in config.reported:
        for cell in view.cells:
            point = point_at(run.outcome, cell)
            if point is not None:
                flags.update(dict.fromkeys(point.flags))
    return tuple(flags)


def _contender(
    standing: RankedConfig, baseline: Spread | None, decision: Decision, view: ObjectiveView
) -> Contender:
    """A standing as the answer shows it. Its speedup is read with the same spreads as the
    margins and the estimates shown (:func:`~orchestrator.answers.verdict.margin`), so the
    baseline's margin against the best and the best's speedup are one interval, and the tie
    rule and the speedup column can never disagree."""
    speedup: float | None = None
    speedup_ci: tuple[float, float] | None = None
    if baseline is not None:
        if standing.key == BASELINE_ID:
            speedup = 1.0
        else:
            factor, speedup_ci = improvement(standing.reported, baseline, minimized=view.minimized)
            speedup = factor if factor == factor else None  # NaN: a value was not positive
    return Contender(
        config=dict(standing.runs.config),
        label=standing.label,
        estimate=standing.reported.estimate(),
        speedup_vs_baseline=speedup,
        speedup_ci95=speedup_ci,
        violations=standing.violations,
        screened_only=standing.runs.screened_only,
        ranked_on=standing.pick,
        vs_best=decision.margins.get(standing.key),
        flags=_flags(standing.runs, view),
    )


def _failed(runs: Sequence[Run], refused: Sequence[TrialOutcome]) -> tuple[FailedConfig, ...]:
    """Configs tried and never measured: their restarts all failed, or the preflight refused
    them before any restart (``refused``). A trial stopped by a cancel or a deadline did not
    fail: it is not one of them."""
    by_config: dict[str, list[TrialOutcome]] = {}
    for outcome in [*refused, *(run.outcome for run in runs)]:
        if outcome.cause == STOPPED_CAUSE:
            continue
        by_config.setdefault(config_id(outcome.config), []).append(outcome)
    failed = []
    for tried in by_config.values():
        if any(outcome.state in ("done", "running") for outcome in tried):
            continue
        last = tried[-1]
        config = dict(normalize_config(last.config))
        failed.append(FailedConfig(config, config_label(config), last.cause))
    return tuple(failed)


def _convergence(
    runs: Sequence[Run], scope: _Scope, sweep: Sweep, axes: Axes
) -> tuple[ConvergenceStep, ...]:
    """After each restart (in the order they finished), the config the answer would have
    named from the restarts so far, and its estimate as the answer reports it: the same rank,
    the same quantity, so the last step is the answer's own best and number."""
    steps: list[ConvergenceStep] = []
    best: tuple[float, str] | None = None
    for index, run in enumerate(runs):
        if run.done and run.host not in scope.pool.excluded:
            grouped = group_runs(runs[: index + 1], scope.view, scope.pool.excluded)
            now = dataclasses.replace(scope, variance=_variance(grouped, scope.view))
            ranked = _standings(grouped, now, sweep, axes)
            leader = decide(ranked, minimized=scope.view.minimized).best
            best = None if leader is None else (leader.reported.value, leader.label)
        steps.append(
            ConvergenceStep(
                len(steps) + 1, None if best is None else best[0], None if best is None else best[1]
            )
        )
    return tuple(steps)


def _basis_note(standing: RankedConfig, host_type: str) -> str | None:
    spread_ = standing.reported
    if spread_.basis == "borrowed-restart-variance":
        alone = (
            "has one restart"
            if spread_.restarts == 1
            else f"has no two restarts of one kind ({spread_.restarts}: picked on, confirmed)"
        )
        return (
            f"{standing.label} {alone}: its interval borrows the restart variance "
            f"measured on {plural(spread_.borrowed_from, 'repeated config')} of {host_type} "
            f"({spread_.df:.3g} degrees of freedom)"
        )
    if spread_.basis == "within-run-only":
        return (
            f"{standing.label}'s interval is within-run only: no config was repeated on "
            f"{host_type}, so restart-to-restart variance was not measured; the interval shown "
            f"assumes restarts vary by {PRIOR_RESTART_CV:.0%}, which is no deploy basis "
            "(measure it with benchmark.repeats: 2)"
        )
    if spread_.basis == "none":
        return f"{standing.label} has no interval: one restart, nothing to measure its noise by"
    return None


def _model_note(scope: _Scope) -> str | None:
    """What the type's variance model rests on, when it is less than a prior fitted from the
    configs' own variances (docs/answers.md, "One variance model per host type")."""
    model = scope.variance
    if model is None:
        return None
    said: list[str] = []
    if model.method == "pooled":
        said.append(
            f"only {plural(model.configs, 'config')} repeated on {scope.host_type}: the "
            "intervals shrink each config's restart variance toward the type's pooled variance, "
            "not toward a fitted prior"
        )
    if model.assumed_df > 0:
        said.append(
            f"the type's restarts carry under {MIN_PRIOR_DF:g} degrees of freedom, so the "
            f"restart variance is completed with an assumed {PRIOR_RESTART_CV:.0%} spread "
            f"worth {model.assumed_df:.3g}"
        )
    return "; ".join(said) if said else None


def _notes(
    decision: Decision, ranked: Sequence[RankedConfig], scope: _Scope, flagged_only: Sequence[str]
) -> list[str]:
    notes: list[str] = []
    host_type = scope.host_type
    best = decision.best
    if best is not None:
        confirmed = len(best.runs.confirmed)
        if confirmed:
            every = len(best.runs.every)
            notes.append(
                f"{best.label}'s estimate comes from its "
                f"{plural(confirmed, 'confirmation restart')} only, not from the restarts it was "
                f"picked on; its interval's variance rests on all {every} of its restarts"
            )
        else:
            notes.append(
                f"{best.label}'s estimate is the one it was picked on (no confirmation "
                "restarts): it may flatter it"
            )
        if best.runs.screened_only:
            notes.append(f"{best.label} was measured at screening fidelity only")
        shown = [best, *decision.tied]
        if decision.runner_up is not None and decision.runner_up not in shown:
            shown.append(decision.runner_up)
        for standing in shown:
            note = _basis_note(standing, host_type)
            if note is not None:
                notes.append(note)
        model_note = _model_note(scope)
        if model_note is not None:
            notes.append(model_note)
        if decision.runner_up is None:
            notes.append(f"{best.label} is the only valid config measured on {host_type}")
        for standing in decision.overturned:
            notes.append(
                f"{standing.label} ranked first on what it was picked on, but its own restarts "
                f"lose to {best.label}'s beyond the uncertainty: {best.label} is named instead"
            )
    for standing in ranked:
        if standing.reported.noisy and standing.reported.cv is not None:
            shrunk = (
                "; its interval leans on the type's restart variance and may be too narrow: "
                "measure it again"
                if standing.reported.basis == "restarts"
                and standing.reported.scale == "log"
                and scope.variance is not None
                else ""
            )
            notes.append(
                f"{standing.label} is noisy: its restarts vary by {standing.reported.cv:.1%} "
                f"(coefficient of variation above 5 %){shrunk}"
            )
    notes.extend(scope.pool.notes)
    for label in flagged_only:
        notes.append(f"{label} was measured only on hosts kept out of the pool")
    if decision.verdict == "no-valid-config" and ranked:
        notes.append(f"every config measured on {host_type} breaks a constraint")
    return notes


def _capped(decision: Decision, view: ObjectiveView) -> str | None:
    """Why the objective cannot tell the leaders apart, when the offered load caps it: the
    best and every config tied with it sit at the cap, the rate the schedule really offered
    (:func:`~orchestrator.answers.saturation.offered_rate`; the nominal rate for points that
    predate it)."""
    nominal = offered_cap(view.metric, view.cells, view.weights)
    best = decision.best
    if nominal is None or best is None or view.minimized:
        return None
    leaders = [best, *decision.tied]
    caps = [s.reported.cap if s.reported.cap is not None else nominal for s in leaders]
    if len(leaders) < 2 or not all(
        at_cap(s.reported.value, cap) for s, cap in zip(leaders, caps, strict=True)
    ):
        return None  # a best alone at the cap kept up where the others did not: it is told
    rates = [cell.rate for cell in view.cells if cell.rate is not None]
    if view.metric in RATE_METRICS:
        offered = f"{max(caps):.3g} req/s offered" + (
            f", nominal {', '.join(f'{r:g}' for r in rates)} req/s"
            if any(abs(cap - nominal) > 0.005 * nominal for cap in caps)
            else ""
        )
    else:
        offered = ", ".join(f"{r:g} req/s" for r in rates)
    return (
        f"{view.metric} is capped by the offered load ({offered}): "
        f"{plural(len(leaders), 'config')} reach it within {CAP_TOLERANCE:.0%}, so it cannot "
        "tell them apart; offer more (a higher benchmark rate) or rank on a latency "
        "(objective metric tpot_p50_s) to separate them"
    )


def _answer(
    host_type: str,
    hosts: Sequence[str],
    runs: Sequence[Run],
    view: ObjectiveView,
    sweep: Sweep,
    space: int,
    axes: Axes,
    stopped: str | None,
    refused: Sequence[TrialOutcome],
    configs: Sequence[Mapping[str, KnobValue]] = (),
) -> Answer:
    pool = check_pool(host_type, _host_values(runs, view), hosts)
    everything = group_runs(runs, view, frozenset())
    grouped = group_runs(runs, view, pool.excluded)
    view = dataclasses.replace(view, loads=_loads(grouped, view))
    scope = _Scope(host_type, view, pool, _variance(grouped, view))
    ranked = _standings(grouped, scope, sweep, axes)
    decision = decide(ranked, minimized=view.minimized)
    baseline = next((s.reported for s in ranked if s.key == BASELINE_ID), None)
    contenders = {s.key: _contender(s, baseline, decision, view) for s in decision.order}
    flagged_only = [
        config_label(config.config) for key, config in everything.items() if key not in grouped
    ]
    best, runner_up = decision.best, decision.runner_up
    failed = _failed(runs, refused)
    return Answer(
        host_type=host_type,
        objective=view,
        verdict=decision.verdict,
        best=None if best is None else contenders[best.key],
        runner_up=None if runner_up is None else contenders[runner_up.key],
        tied=tuple(contenders[s.key] for s in decision.tied),
        margin=decision.margin,
        explored=len(grouped),
        space=space,
        restarts_used=len(runs),
        contenders=tuple(contenders.values()),
        failed=failed,
        convergence=_convergence(runs, scope, sweep, axes),
        flags=pool.flags,
        notes=tuple(_notes(decision, ranked, scope, flagged_only)),
        stopped=stopped,
        capped=_capped(decision, view),
        exploration=_exploration(configs, everything, grouped, failed, best, axes, view),
    )


def _loads(
    grouped: Mapping[str, ConfigRuns], view: ObjectiveView
) -> tuple[OfferedLoad | None, ...]:
    """Per objective cell, what its schedule really offered and the client sent over the
    pooled restarts' points (:func:`~orchestrator.answers.saturation.measured_load`), so
    every label of the answer says the rates measured, not the nominal one alone."""
    runs = [
        run
        for config in grouped.values()
        for run, _ in config.every
    ]
    return tuple(
        None
        if cell.rate is None
        else measured_load([p for run in runs if (p := point_at(run.outcome, cell)) is not None])
        for cell in view.cells
    )


def _exploration(
    configs: Sequence[Mapping[str, KnobValue]],
    everything: Mapping[str, ConfigRuns],
    grouped: Mapping[str, ConfigRuns],
    failed: Sequence[FailedConfig],
    best: RankedConfig | None,
    axes: Axes,
    view: ObjectiveView,
) -> Exploration | None:
    """How much of the space the answer rests on and what the rest risks
    (:mod:`.exploration`), on the values each config was picked on (the pool's, else every
    host's); None where nothing was measured."""
    if not everything or not configs:
        return None
    measured = {
        key: (runs.config, [s.value for s in _samples(runs.selection)])
        for key, runs in {**everything, **grouped}.items()
        if runs.selection
    }
    return explore_risk(
        axes,
        configs,
        measured,
        frozenset(config_id(f.config) for f in failed),
        None if best is None else best.key,
        minimized=view.minimized,
    )
