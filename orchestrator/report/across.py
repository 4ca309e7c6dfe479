"""The answer across load as the report shows it: each load's answer with the stretch of load
its config is named for, and the front of tokens per second per user against total tokens per
second of every measured config at the objective's loads.

Pure functions of an :class:`~orchestrator.answers.Answer` that has ``per_load`` answers and of
the host type's typed points (:class:`~orchestrator.report.model.HostTypeGroup`); Markdown and
HTML draw from the same values, so a config's number at a load reads the same in the words,
the band chart, the tables and the front.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Literal

from orchestrator.answers import Answer, Contender
from orchestrator.answers.model import Band, named
from orchestrator.report.model import HostTypeGroup, PointView, TrialView, config_key
from orchestrator.types import MatrixCell


def load_value(cell: MatrixCell) -> float:
    """Where a cell sits on the load axis: its concurrency, or its rate."""
    return float(cell.rate if cell.rate is not None else cell.concurrency or 0)


@dataclass(frozen=True, slots=True)
class LoadRow:
    """One load's answer and the stretch of load it speaks for: the schedule's band measured
    at this load (batch sizes ``start`` to ``end``, inclusive), or without a schedule halfway
    (geometrically) to the neighbouring loads."""

    answer: Answer
    band: Band | None
    start: float | None
    """Where the stretch begins on the load axis; None: at the axis' start (the first)."""
    end: float | None
    """Where the next stretch begins; None: to the axis' end (the last)."""

    @property
    def cell(self) -> MatrixCell:
        return self.answer.load_cell

    @property
    def at(self) -> float:
        return load_value(self.cell)

    @property
    def named(self) -> Contender | None:
        return named(self.answer)

    def range_words(self) -> str:
        """``batch 3–15``, ``batch 16 and up``; empty without a schedule band."""
        return "" if self.band is None else batch_range(self.band)


def batch_range(band: Band) -> str:
    """The running batch sizes a schedule's band covers: ``batch 3–15``, ``batch 16 and up``."""
    if band.end is None:
        return f"batch {band.start} and up"
    if band.end == band.start:
        return f"batch {band.start}"
    return f"batch {band.start}–{band.end}"


def load_rows(answer: Answer) -> tuple[LoadRow, ...]:
    """The per-load answers in load order, each with its schedule band (matched by the
    concurrency it was measured at) or its geometric stretch when the answer has none."""
    ordered = sorted(answer.per_load, key=lambda a: load_value(a.load_cell))
    bands = {band.load: band for band in answer.schedule.bands} if answer.schedule else {}
    mine = [bands.get(a.load_cell.concurrency or -1) for a in ordered]
    rows = []
    for index, (each, band) in enumerate(zip(ordered, mine, strict=True)):
        if all(b is not None for b in mine):
            assert band is not None
            start = float(band.start) if index else None
            end = float(band.end + 1) if band.end is not None else None
        else:
            at = load_value(each.load_cell)
            before = load_value(ordered[index - 1].load_cell) if index else None
            after = load_value(ordered[index + 1].load_cell) if index + 1 < len(ordered) else None
            start = math.sqrt(before * at) if before else None
            end = math.sqrt(after * at) if after else None
        rows.append(LoadRow(each, band, start, end))
    return tuple(rows)


# --- the front ------------------------------------------------------------------------------

PerUserSource = Literal["decode p50", "total / concurrency"]


@dataclass(frozen=True, slots=True)
class FrontPoint:
    """One config at one load: total output tokens/s and tokens/s per user, and whether no
    other point beats it on both (the Pareto front)."""

    label: str
    key: str
    """:func:`config_key` of its config."""
    cell: MatrixCell
    total: float
    per_user: float
    source: PerUserSource
    """Where ``per_user`` comes from: the points' median per-request decode rate, else the
    total over the load's concurrency (the concurrency the client held at a rate)."""
    on_front: bool = False


def _pooled(group: HostTypeGroup, cell: MatrixCell, left_out: frozenset[str]) -> dict[
    str, tuple[TrialView, list[PointView]]
]:
    """Each config's points at ``cell`` over the type's hosts (``left_out`` ones aside):
    its trusted points, or its flagged ones when it has none."""
    by_config: dict[str, tuple[TrialView, list[PointView]]] = {}
    for trial in group.trials:
        point = trial.point_at(cell)
        if trial.host in left_out or point is None or point.output_tok_s is None:
            continue
        by_config.setdefault(trial.identity, (trial, []))[1].append(point)
    return {
        key: (trial, [p for p in points if p.trusted] or points)
        for key, (trial, points) in by_config.items()
    }


def _mean(values: Sequence[float]) -> float | None:
    return sum(values) / len(values) if values else None


def _per_user(points: Sequence[PointView], total: float) -> tuple[float, PerUserSource] | None:
    """The points' median per-request decode rate, else ``total`` over the concurrency."""
    decode = _mean([p.request_tok_s for p in points if p.request_tok_s is not None])
    if decode is not None:
        return decode, "decode p50"
    concurrency = points[0].concurrency
    held = _mean([h for p in points if (h := p.metrics.concurrency_held) is not None])
    users = float(concurrency) if concurrency is not None else held
    return (total / users, "total / concurrency") if users else None


def front_points(group: HostTypeGroup, answer: Answer) -> tuple[FrontPoint, ...]:
    """Every config measured on the type at each of the answer's loads, the front marked.

    The total is the per-load answer's estimate where the objective is ``output_tok_s`` and
    the config is one of that load's contenders (the number its band and tables show), else
    the mean of its points; configs are named as the answer names them."""
    left_out = frozenset(flag.host for flag in answer.flags)
    points: list[FrontPoint] = []
    for row in load_rows(answer):
        contenders = {config_key(c.config): c for c in row.answer.contenders}
        for key, (trial, measured) in _pooled(group, row.cell, left_out).items():
            contender = contenders.get(key)
            total = _mean([p.output_tok_s for p in measured if p.output_tok_s is not None])
            if contender is not None and answer.objective.metric == "output_tok_s":
                total = contender.estimate.value
            per_user = _per_user(measured, total) if total else None
            if total is None or per_user is None:
                continue
            label = contender.label if contender else (trial.short_label or trial.label)
            points.append(FrontPoint(label, key, row.cell, total, *per_user))
    return pareto(points)


def pareto(points: Sequence[FrontPoint]) -> tuple[FrontPoint, ...]:
    """``points`` with the ones no other point matches or beats on both axes (and beats on
    one) marked ``on_front``."""

    def beaten(p: FrontPoint) -> bool:
        return any(
            q.total >= p.total
            and q.per_user >= p.per_user
            and (q.total > p.total or q.per_user > p.per_user)
            for q in points
        )

    return tuple(replace(p, on_front=not beaten(p)) for p in points)


__all__ = [
    "FrontPoint",
    "LoadRow",
    "PerUserSource",
    "batch_range",
    "config_key",
    "front_points",
    "load_rows",
    "load_value",
    "pareto",
]
