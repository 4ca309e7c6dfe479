"""A running sweep's progress at one moment, as every reader shows it: what each host runs,
how much of the plan or of the restart budget is spent, the ETA and what bounds it, and the
best config so far by the sweep's objective; with its JSON (``status --json``) and its words.

:class:`~orchestrator.progress.tracker.SweepTracker` makes one from the runner's reports; the
live display (:mod:`orchestrator.progress.live`) and the daemon's ``status`` show the same one.
This module imports no sweep file, plan, store or report (the report's number formats only
when words are asked), so the ``status`` client stays light.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

from orchestrator.types import JsonObject, MatrixCell, OfferedLoad, metric_is_minimized

_Plain = TypeVar("_Plain", "Eta", "HostProgress", "Restarts")

EtaBound = Literal["plan", "restarts", "finish_by"]
"""What ends the sweep in the estimate: the plan's last trial, the restart budget's last
start, or ``schedule.finish_by``."""


@dataclass(frozen=True, slots=True)
class BestBy:
    """What "best so far" ranks by: the objective's ``metric`` at its ``cells`` (combined by
    geometric mean, as the search scores a trial), or with no cells each point's own value
    (a sweep without an objective: output tokens/s at any cell)."""

    metric: str = "output_tok_s"
    cells: tuple[MatrixCell, ...] = ()

    @property
    def minimized(self) -> bool:
        return metric_is_minimized(self.metric)

    def words(self) -> str:
        """``output_tok_s at 1024/c4``, ``goodput at 8192/nominal 8 req/s`` (what the best's
        schedule really offered is on its own line, :meth:`ProgressSnapshot.best_words`); empty
        for tok/s at any cell (the value says it)."""
        from orchestrator.report import fmt  # the report's package: only when words are asked

        if not self.cells:
            return ""
        labels = ", ".join(fmt.measured_cell_label(c, None) for c in self.cells)
        return f"{self.metric} at {labels}"


@dataclass(frozen=True, slots=True)
class Best:
    """The best trial so far by :class:`BestBy`."""

    config: str
    host: str
    value: float
    cell: MatrixCell | None
    """The point's cell when ranked point by point (no objective); None for the objective."""
    offered: float | None = None
    """At an open-loop cell, the rate its schedule really offered (req/s), which a seeded
    Poisson draw moves off the nominal ``rate``; None at a closed-loop one."""
    achieved: float | None = None
    """At an open-loop cell, the rate the client really sent (req/s)."""

    @property
    def load(self) -> OfferedLoad | None:
        """What its point measured of an open-loop cell's load; None at a closed-loop one."""
        return None if self.offered is None else OfferedLoad(self.offered, self.achieved)


@dataclass(frozen=True, slots=True)
class Eta:
    left_s: float
    at: float
    """Wall-clock time (Unix seconds)."""
    bound: EtaBound
    restarts_left: int | None = None
    """Restarts the search may still make, over its host types (``bound`` restarts)."""


@dataclass(frozen=True, slots=True)
class HostProgress:
    """One host's row: its config in its own words, which trial, its step and points."""

    name: str
    config: str | None
    attempt: int | None
    step: str
    done: int
    total: int
    trial: str
    """``3/6`` (of its plan), ``3/12 restarts`` (of its type's budget) or ``3 done``."""
    finished: bool


@dataclass(frozen=True, slots=True)
class Restarts:
    """A host type's unit starts in this sweep, of its cap."""

    host_type: str
    used: int
    cap: int | None


@dataclass(frozen=True, slots=True)
class ProgressSnapshot:
    """The sweep at one moment, as every reader shows it."""

    elapsed_s: float
    finished: bool
    eta: Eta | None
    hosts: tuple[HostProgress, ...]
    restarts: tuple[Restarts, ...]
    trials: tuple[int, int] | None
    """Trials begun of the plan's (a grid); None under a search."""
    best: Best | None
    best_by: BestBy

    def eta_words(self, clock_time: Callable[[float], str]) -> str:
        """``ETA 03:12 (in 41m)`` and what bounds it; ``clock_time`` writes a Unix time."""
        if self.finished:
            return "finished"
        if self.eta is None:
            return "ETA after the first point"
        eta = self.eta
        text = f"ETA {clock_time(eta.at)} (in {duration(eta.left_s)}"
        if eta.bound == "restarts":
            text += f", at most: {eta.restarts_left} restarts left"
        elif eta.bound == "finish_by":
            text += ": finish_by, then restore"
        return text + ")"

    def done_words(self) -> str:
        """``trials 4/12``, ``restarts 3/12`` (each host type), or ``3 trials begun``."""
        if self.trials is not None:
            return f"trials {self.trials[0]}/{self.trials[1]}"
        capped = [r for r in self.restarts if r.cap is not None]
        if capped:
            return ", ".join(f"restarts {r.used}/{r.cap} ({r.host_type})" for r in capped)
        return f"{sum(r.used for r in self.restarts)} restarts"

    def best_words(self) -> str:
        """``budget=8 @sim-01: 4,134 tok/s (1024/c4)``; at an open-loop cell with the rates
        its schedule really offered and the client sent, ``... 5.3 req/s (5.38 offered, 5.31
        sent)`` for the objective, ``... 5.3 req/s at 2048/4 req/s (5.38 offered, 5.31
        sent)`` point by point; ``-`` before any."""
        from orchestrator.report import fmt  # the report's package: only when words are asked

        best = self.best
        if best is None:
            return "-"
        value = fmt.metric(self.best_by.metric, best.value)
        load = best.load
        if best.cell is None:
            where = "" if load is None else f" ({load.words})"
        elif best.cell.open_loop and load is not None:
            where = f" at {fmt.measured_cell_label(best.cell, load)}"
        else:
            where = f" ({fmt.measured_cell_label(best.cell, load)})"
        return f"{best.config} @{best.host}: {value}{where}"

    def to_json(self) -> JsonObject:
        """The snapshot for ``status --json`` (and back, :meth:`from_json`, for ``status``)."""
        best, trials = self.best, self.trials
        return {
            "elapsed_s": round(self.elapsed_s, 1),
            "finished": self.finished,
            "eta": None if self.eta is None else dataclasses.asdict(self.eta),
            "trials_begun": None if trials is None else trials[0],
            "trials_planned": None if trials is None else trials[1],
            "restarts": [dataclasses.asdict(r) for r in self.restarts],
            "hosts": [dataclasses.asdict(h) for h in self.hosts],
            "best_by": {
                "metric": self.best_by.metric,
                "cells": [c.as_fields() for c in self.best_by.cells],
            },
            "best": None
            if best is None
            else {
                "config": best.config,
                "host": best.host,
                "value": best.value,
                "cell": None if best.cell is None else best.cell.as_fields(),
                "offered": best.offered,
                "achieved": best.achieved,
            },
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ProgressSnapshot:
        """Raises KeyError, TypeError or ValueError on a document that is not one."""
        eta, best, by = data["eta"], data["best"], data["best_by"]
        begun, planned = data["trials_begun"], data["trials_planned"]
        return cls(
            elapsed_s=float(data["elapsed_s"]),
            finished=bool(data["finished"]),
            eta=None if eta is None else _plain(Eta, eta),
            hosts=tuple(_plain(HostProgress, h) for h in data["hosts"]),
            restarts=tuple(_plain(Restarts, r) for r in data["restarts"]),
            trials=None if begun is None else (int(begun), int(planned)),
            best=None
            if best is None
            else Best(
                str(best["config"]),
                str(best["host"]),
                float(best["value"]),
                None if best["cell"] is None else MatrixCell(**best["cell"]),
                _rate(best.get("offered")),
                _rate(best.get("achieved")),
            ),
            best_by=BestBy(str(by["metric"]), tuple(MatrixCell(**c) for c in by["cells"])),
        )


def _plain(cls: type[_Plain], data: Mapping[str, Any]) -> _Plain:
    """A dataclass of plain values from its :func:`dataclasses.asdict` form."""
    return cls(**{f.name: data[f.name] for f in dataclasses.fields(cls)})


def clock_time(epoch: float) -> str:
    return time.strftime("%H:%M:%S", time.localtime(epoch))


def duration(seconds: float) -> str:
    """``42s``, ``3m05s``, ``1h02m``."""
    whole = max(round(seconds), 0)
    if whole < 60:
        return f"{whole}s"
    if whole < 3600:
        return f"{whole // 60}m{whole % 60:02d}s"
    return f"{whole // 3600}h{whole % 3600 // 60:02d}m"


def _rate(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
