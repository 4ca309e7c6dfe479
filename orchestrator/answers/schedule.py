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

import itertools
import math
from collections.abc import Mapping, Sequence

from orchestrator.answers.model import Answer, Band, Schedule, named
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


__all__ = ["band_starts", "propose_schedule"]
