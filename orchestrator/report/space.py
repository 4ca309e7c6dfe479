"""The explored space of one answer as a grid over two knobs: what the pictures draw.

The two knobs are the ones with the most distinct values among the answer's contenders
(ties: by name; the baseline, which sets no knob, is not drawn), rows for the first and
columns for the second; with one varied knob the grid is one row. The other knobs are folded
in: a cell shows the contender the answer ranks first among the configs that share its two
values (valid ones first: a config that breaks a constraint shows only when nothing in the
cell is valid; the answer's own config wherever it is one of them), with the estimate the
contenders table shows, and says how many configs it stands for. A cell that no contender
reached is ``failed`` when a config tried there never produced a measurement, and
``unexplored`` (drawn blank) when nothing was tried there at all.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.answers import Answer, Contender, FailedConfig
from orchestrator.answers.model import named
from orchestrator.store.results import format_knob

SpaceState = Literal["explored", "failed", "unexplored"]
UNSET = "(unset)"
"""How a knob a config does not set reads on an axis (the baseline sets none)."""
ONE_ROW = "estimate"
"""The row's name when only one knob varies."""


@dataclass(frozen=True, slots=True)
class SpaceCell:
    state: SpaceState
    contender: Contender | None = None
    """The best contender with this cell's knob values (None unless ``explored``)."""
    configs: int = 0
    """Measured configs with these values (more than one when other knobs vary)."""
    failed: tuple[FailedConfig, ...] = ()
    is_best: bool = False
    """The answer's named config (:func:`~orchestrator.answers.model.named`) is in this cell
    and is the contender it shows."""


@dataclass(frozen=True, slots=True)
class SpaceGrid:
    row_knob: str | None
    """None when only one knob varies (one row)."""
    column_knob: str
    rows: tuple[str, ...]
    columns: tuple[str, ...]
    cells: tuple[tuple[SpaceCell, ...], ...]
    other_knobs: tuple[str, ...]
    """Knobs that vary but are not on an axis: folded into the cells (best over them)."""


def _value(config: Mapping[str, Any], knob: str) -> str:
    return format_knob(config[knob]) if knob in config else UNSET


def _sort_key(text: str) -> tuple[int, float, str]:
    if text == UNSET:
        return (0, 0.0, "")
    try:
        number = json.loads(text)
    except ValueError:
        return (2, 0.0, text)
    if isinstance(number, int | float) and not isinstance(number, bool):
        return (1, float(number), text)
    return (2, 0.0, text)


def _varied(configs: Iterable[Mapping[str, Any]]) -> list[tuple[str, int]]:
    configs = list(configs)
    knobs = sorted({k for c in configs for k in c})
    counts = [(k, len({_value(c, k) for c in configs})) for k in knobs]
    return sorted(((k, n) for k, n in counts if n >= 2), key=lambda kn: (-kn[1], kn[0]))


_Cell = tuple[str, str]
"""A cell of the grid: its row's value and its column's, as written."""


def explored_space(answer: Answer) -> SpaceGrid | None:
    """The grid of ``answer``'s contenders and failed configs; None when fewer than two
    configs were tried or no knob varies (nothing to draw)."""
    # The baseline sets no knob: it is the reference the speedups are read against, not a
    # point of the space (on an axis it would add an "(unset)" value to every knob).
    contenders = tuple(c for c in answer.contenders if c.config)
    tried: list[Mapping[str, Any]] = [c.config for c in contenders]
    tried += [f.config for f in answer.failed]
    if len(tried) < 2:
        return None
    varied = _varied(c.config for c in contenders) or _varied(tried)
    if not varied:
        return None
    axes = [k for k, _ in varied[:2]]
    column_knob = axes[-1]
    row_knob = axes[0] if len(axes) == 2 else None
    other = tuple(k for k, _ in _varied(tried) if k not in axes)

    def position(config: Mapping[str, Any]) -> _Cell:
        row = _value(config, row_knob) if row_knob is not None else ""
        return row, _value(config, column_knob)

    rows = sorted({position(c)[0] for c in tried}, key=_sort_key)
    columns = sorted({position(c)[1] for c in tried}, key=_sort_key)
    failures: dict[_Cell, list[FailedConfig]] = {}
    for failure in answer.failed:
        failures.setdefault(position(failure.config), []).append(failure)
    # The mark: the config the answer names (the one adopt installs and the headline names
    # first), by the one rule of :func:`~orchestrator.answers.model.named`.
    chosen = named(answer)
    best_at = position(chosen.config) if chosen is not None and chosen.config else None
    return SpaceGrid(
        row_knob=row_knob,
        column_knob=column_knob,
        rows=tuple(rows) if row_knob is not None else (ONE_ROW,),
        columns=tuple(columns),
        cells=_space_cells(rows, columns, contenders, position, failures, best_at),
        other_knobs=other,
    )


def _space_cells(
    rows: Sequence[str],
    columns: Sequence[str],
    contenders: Sequence[Contender],
    position: Callable[[Mapping[str, Any]], _Cell],
    failures: Mapping[_Cell, Sequence[FailedConfig]],
    best_at: _Cell | None,
) -> tuple[tuple[SpaceCell, ...], ...]:
    """What each cell of the grid holds: the contender that stands for it, how many were
    measured there, the configs that failed there, and whether it is the answer's own."""
    standing: dict[_Cell, Contender] = {}
    measured: dict[_Cell, int] = {}
    # Contenders come in the answer's rank order (valid before invalid, its config first):
    # the first at a cell is the one that stands for it, with the table's number.
    for contender in contenders:
        at = position(contender.config)
        measured[at] = measured.get(at, 0) + 1
        standing.setdefault(at, contender)

    def cell(at: _Cell) -> SpaceCell:
        failed = tuple(failures.get(at, ()))
        if at in standing:
            return SpaceCell("explored", standing[at], measured[at], failed, is_best=at == best_at)
        if failed:
            return SpaceCell("failed", failed=failed)
        return SpaceCell("unexplored")

    return tuple(tuple(cell((row, column)) for column in columns) for row in rows)


def estimates(grid: SpaceGrid) -> Sequence[float]:
    return [
        cell.contender.estimate.value
        for line in grid.cells
        for cell in line
        if cell.contender is not None
    ]


__all__ = [
    "ONE_ROW",
    "UNSET",
    "SpaceCell",
    "SpaceGrid",
    "SpaceState",
    "estimates",
    "explored_space",
]
