"""A speculative schedule proposed from the answers at each load: the config named at each
measured concurrency, from that batch size up to the next band's, and the engine's own form of
it (:mod:`orchestrator.engines.schedule`) or why there is none.

A band's ``from``: the first band starts at batch size 1; between two measured loads ``a`` and
``b`` the later band starts at their geometric midpoint (batch sizes grow geometrically in a
sweep's matrix, and a speculative gain moves with the log of the batch). The last band has no
end. A proposal is not a recommendation: the schedule is measured as a trial of its own
against the best fixed config at every load before the answer may name it (issue 34, item 3).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Callable, Mapping, Sequence

from orchestrator.answers.estimate import CONFIDENCE, Spread, improvement, simultaneous
from orchestrator.answers.model import (
    Answer,
    Band,
    Contender,
    LoadComparison,
    LoadVerdict,
    Margin,
    ObjectiveView,
    Schedule,
    ScheduleVerdict,
    named,
)
from orchestrator.answers.runs import SCHEDULE_ID, Run, config_id
from orchestrator.answers.verdict import RankedConfig
from orchestrator.engines.base import Engine
from orchestrator.engines.schedule import (
    NoNativeSchedule,
    ScheduleBand,
    ScheduleForm,
)
from orchestrator.host.dropin import KnobTarget


def band_starts(loads: Sequence[int]) -> list[int]:
    """Each band's first batch size: 1, then the geometric midpoint of each two loads (above
    the lower, at most the higher)."""
    starts = [1]
    for lower, upper in itertools.pairwise(loads):
        starts.append(min(upper, max(lower + 1, round(math.sqrt(lower * upper)))))
    return starts


def propose_schedule(
    answer: Answer, engine: Engine, knobs: Mapping[str, KnobTarget]
) -> Schedule | None:
    """The schedule an across-load answer proposes on ``engine``; None when the loads are not
    concurrencies (an engine's schedule is keyed by its running batch) or a load has no named
    config."""
    per_load = sorted(answer.per_load, key=lambda a: a.load_cell.concurrency or 0)
    if not per_load or any(a.load_cell.concurrency is None for a in per_load):
        return None
    winners = [named(a) for a in per_load]
    if any(w is None for w in winners):
        return None
    loads = [a.load_cell.concurrency or 0 for a in per_load]
    starts = band_starts(loads)
    bands = tuple(
        Band(start, starts[i + 1] - 1 if i + 1 < len(starts) else None, load, best)
        for i, (start, load, best) in enumerate(zip(starts, loads, winners, strict=True))
        if best is not None
    )
    if len({band.best.label for band in bands}) == 1:
        return Schedule(bands, None, "one config wins at every load: no schedule is needed")
    if not isinstance(engine, ScheduleForm):
        return Schedule(
            bands, None, f"{engine.name} takes no speculative schedule: run each band's config"
        )
    form = engine.native_schedule(
        [ScheduleBand(band.start, band.best.config) for band in bands], knobs
    )
    if isinstance(form, NoNativeSchedule):
        return Schedule(bands, None, form.reason)
    return Schedule(bands, form, None)




Ranker = Callable[[ObjectiveView, Sequence[Run]], list[RankedConfig]]
"""The answers' ranking of the runs given at one view (the type's variance model and pool)."""


def _measured(proposed: Schedule, scheduled: Sequence[Run]) -> list[Run]:
    """The schedule trials that ran this proposal (its config and overlay)."""
    native = proposed.native
    assert native is not None
    return [
        run
        for run in scheduled
        if run.outcome.plan is not None
        and run.outcome.plan.overlay == native.overlay
        and dict(run.outcome.config) == dict(native.config)
    ]


def judged_loads(
    pairs: Sequence[tuple[Spread, Spread]], *, minimized: bool
) -> tuple[tuple[tuple[Margin, LoadVerdict], ...], float]:
    """The schedule's margin over the fixed config at each load (each pair: the schedule's
    spread, the fixed config's, at one load) and what it says there, with the level each
    margin's interval is built at: all of them hold at once with 95 %
    (:func:`~orchestrator.answers.estimate.simultaneous`). The verdict reads every load, and
    one load's miss in forty, taken as a loss, would say "keep the fixed config" of a schedule
    that is its equal there; ``benchmarks/schedule_verdict.py`` counts how often."""
    confidence = simultaneous(CONFIDENCE, len(pairs))
    judged = []
    for schedule, fixed in pairs:
        factor, ci = improvement(schedule, fixed, minimized=minimized, confidence=confidence)
        margin = Margin(factor - 1.0, None if ci is None else (ci[0] - 1.0, ci[1] - 1.0))
        verdict: LoadVerdict = "tie"
        if margin.ci95 is not None and margin.ci95[0] > 0:
            verdict = "better"
        elif margin.ci95 is not None and margin.ci95[1] < 0:
            verdict = "worse"
        judged.append((margin, verdict))
    return tuple(judged), confidence


def _comparisons(
    answer: Answer, fixed: Contender, ranked: Callable[[Answer], list[RankedConfig]]
) -> tuple[tuple[LoadComparison, ...], float]:
    """The schedule against ``fixed`` (the config the answer names over every load) at each
    load where both were ranked (:func:`judged_loads`), and the level each margin's interval
    is built at."""
    pairs: list[tuple[Answer, RankedConfig, RankedConfig]] = []
    for at in answer.per_load:
        by_key = {standing.key: standing for standing in ranked(at)}
        schedule, best = by_key.get(SCHEDULE_ID), by_key.get(config_id(fixed.config))
        if schedule is not None and best is not None:
            pairs.append((at, schedule, best))
    minimized = answer.objective.minimized
    judged, confidence = judged_loads(
        [(schedule.reported, best.reported) for _, schedule, best in pairs], minimized=minimized
    )
    return tuple(
        LoadComparison(
            at.load_cell,
            next((c for c in at.contenders if c.config == fixed.config), fixed),
            schedule.reported.estimate(),
            margin,
            verdict,
        )
        for (at, schedule, _), (margin, verdict) in zip(pairs, judged, strict=True)
    ), confidence


def _words(comparisons: Sequence[LoadComparison], recommended: bool) -> str:
    def said(c: LoadComparison) -> str:
        ci = "" if c.margin.ci95 is None else (
            f" [{c.margin.ci95[0]:+.0%}, {c.margin.ci95[1]:+.0%}]"
        )  # fmt: skip
        return f"{c.cell.load} {c.margin.relative:+.0%}{ci} vs {c.fixed.label}"

    better = [said(c) for c in comparisons if c.verdict == "better"]
    worse = [said(c) for c in comparisons if c.verdict == "worse"]
    loads = len(comparisons)
    family = f" (simultaneous 95% intervals over {loads} loads)" if loads > 1 else ""
    if recommended:
        return f"deploy the schedule: better at {'; '.join(better)}, and no worse elsewhere{family}"
    if worse:
        return f"keep the best fixed config: the schedule lost at {'; '.join(worse)}{family}"
    return (
        "keep the best fixed config: the schedule is better at no load beyond the noise"
        + family
    )


def judge_schedule(
    proposed: Schedule,
    answer: Answer,
    runs: Sequence[Run],
    scheduled: Sequence[Run],
    ranked: Ranker,
) -> Schedule:
    """``proposed`` with its verdict once trials of it ran: at each load the schedule's
    restarts ranked beside the fixed configs' (one variance model), against the best fixed
    config (the one the answer names over every load, what would be deployed instead).
    Recommended only when it is worse at no load beyond the noise and better at one, each
    load's margin read on an interval of a simultaneous 95 % family over the loads;
    a schedule trial that never measured (e.g. the engine ignored the schedule) is no
    recommendation either, and the words say why."""
    measured = _measured(proposed, scheduled)
    fixed = named(answer)
    if not measured or fixed is None:
        return proposed
    done = [run for run in measured if run.done]
    if not done:
        last = measured[-1].outcome
        words = f"keep the best fixed config: the schedule's trial failed ({last.cause})"
        return dataclasses.replace(
            proposed, verdict=ScheduleVerdict(False, (), words, len(measured))
        )
    comparisons, confidence = _comparisons(
        answer, fixed, lambda at: ranked(at.objective, [*runs, *done])
    )
    recommended = bool(comparisons) and all(c.verdict != "worse" for c in comparisons) and any(
        c.verdict == "better" for c in comparisons
    )
    words = _words(comparisons, recommended)
    verdict = ScheduleVerdict(recommended, comparisons, words, len(measured), confidence)
    return dataclasses.replace(proposed, verdict=verdict)


__all__ = ["Ranker", "band_starts", "judge_schedule", "judged_loads", "propose_schedule"]
