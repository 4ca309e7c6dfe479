"""Two or more sweeps side by side: the best config per cell in each, and tok/s ratios.

Typical uses: the PCIe and the NVLink hosts (one sweep, or two), or last night against the
night before. Groups are paired by host type when every sweep has that type; what is left is
paired in order, so a PCIe-only sweep still compares with an NVLink-only one.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.report.model import HostTypeGroup, PointView, SweepReport


@dataclass(frozen=True, slots=True)
class Side:
    """One sweep's group of hosts in a comparison."""

    sweep: str
    group: HostTypeGroup

    @property
    def title(self) -> str:
        return f"{self.sweep} / {self.group.host_type}"


@dataclass(frozen=True, slots=True)
class CellBest:
    label: str
    output_tok_s: float


@dataclass(frozen=True, slots=True)
class CellComparison:
    """The best trusted config of each side in one (context, concurrency) cell."""

    context: int
    concurrency: int
    best: tuple[CellBest | None, ...]

    @property
    def ratios(self) -> tuple[float | None, ...]:
        """Each side's best tok/s over the first side's."""
        first = self.best[0]
        return tuple(
            b.output_tok_s / first.output_tok_s if b is not None and first is not None else None
            for b in self.best
        )


@dataclass(frozen=True, slots=True)
class ConfigComparison:
    """One config run on every side: its tok/s per cell on each, and the ratio to the first."""

    label: str
    cells: tuple[tuple[int, int, tuple[float | None, ...]], ...]

    def ratio(self, index: int) -> tuple[float | None, ...]:
        out: list[float | None] = []
        for _ctx, _conc, values in self.cells:
            first, other = values[0], values[index]
            out.append(other / first if first and other is not None else None)
        return tuple(out)


@dataclass(frozen=True, slots=True)
class Comparison:
    sides: tuple[Side, ...]
    cells: tuple[CellComparison, ...]
    configs: tuple[ConfigComparison, ...]

    @property
    def title(self) -> str:
        return " vs ".join(side.title for side in self.sides)


def _pairings(reports: Sequence[SweepReport]) -> list[tuple[Side, ...]]:
    shared = [
        g.host_type
        for g in reports[0].groups
        if all(any(o.host_type == g.host_type for o in r.groups) for r in reports[1:])
    ]
    pairs: list[tuple[Side, ...]] = [
        tuple(Side(r.name, next(g for g in r.groups if g.host_type == t)) for r in reports)
        for t in shared
    ]
    rest = [[g for g in r.groups if g.host_type not in shared] for r in reports]
    for index in range(min(len(groups) for groups in rest)):
        pairs.append(tuple(Side(r.name, rest[i][index]) for i, r in enumerate(reports)))
    return pairs


def _config_point(group: HostTypeGroup, key: str, ctx: int, conc: int) -> PointView | None:
    for trial in group.trials:
        if trial.identity == key and (point := group.point(trial, ctx, conc)) is not None:
            return point
    return None


def compare_sides(sides: Sequence[Side]) -> Comparison:
    contexts = sorted(set.intersection(*(set(s.group.contexts) for s in sides)))
    concurrencies = sorted(set.intersection(*(set(s.group.concurrencies) for s in sides)))
    cells: list[CellComparison] = []
    for ctx in contexts:
        for conc in concurrencies:
            best: list[CellBest | None] = []
            for side in sides:
                found = side.group.best(ctx, conc)
                if found is None:
                    best.append(None)
                    continue
                trial, point = found
                assert point.output_tok_s is not None
                best.append(CellBest(trial.short_label or trial.label, point.output_tok_s))
            cells.append(CellComparison(ctx, conc, tuple(best)))
    keys: list[str] = []
    labels: dict[str, str] = {}
    for trial in sides[0].group.trials:
        key = trial.identity
        present = all(any(t.identity == key for t in s.group.trials) for s in sides)
        if present and key not in keys:
            keys.append(key)
            labels[key] = trial.short_label or trial.label
    configs = [
        ConfigComparison(
            label=labels[key],
            cells=tuple(
                (
                    ctx,
                    conc,
                    tuple(
                        p.output_tok_s
                        if (p := _config_point(s.group, key, ctx, conc)) is not None
                        else None
                        for s in sides
                    ),
                )
                for ctx in contexts
                for conc in concurrencies
            ),
        )
        for key in keys
    ]
    return Comparison(tuple(sides), tuple(cells), tuple(configs))


def compare(reports: Sequence[SweepReport]) -> list[Comparison]:
    """One comparison per paired group; empty for fewer than two sweeps."""
    if len(reports) < 2:
        return []
    return [compare_sides(sides) for sides in _pairings(reports)]
