"""The report's tables as plain data (headers, rows of cells), shared by Markdown and HTML.

Building a table once and rendering it twice keeps the two formats saying the same thing;
each renderer only decides how a cell's kind (failed, best, flagged, ...) looks.
"""

from __future__ import annotations

import shlex
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from orchestrator.report import fmt
from orchestrator.report.compare import Comparison
from orchestrator.report.model import HostTypeGroup, ThroughputPoint, TrialView
from orchestrator.store.results import format_knob

CellKind = Literal["", "failed", "best", "missing", "good", "bad", "baseline", "flagged"]


@dataclass(frozen=True, slots=True)
class Cell:
    text: str
    flags: tuple[str, ...] = ()
    kind: CellKind = ""
    title: str | None = None


@dataclass(frozen=True, slots=True)
class Table:
    title: str
    headers: tuple[str, ...]
    rows: tuple[tuple[Cell, ...], ...]
    note: str | None = None


@dataclass(frozen=True, slots=True)
class FailedTrial:
    """A trial that did not finish, with the first lines of what explains it."""

    label: str
    host: str
    attempt: int
    state: str
    cause: str | None
    lines: tuple[str, ...]


def _trial_cell(group: HostTypeGroup, trial: TrialView) -> Cell:
    return Cell(
        group.display(trial),
        kind="baseline" if trial.is_baseline else "",
        title=trial.label,
    )


def _state_text(trial: TrialView) -> str:
    return f"{trial.state.upper()}: {trial.cause}" if trial.cause else trial.state.upper()


def _point_cells(point: ThroughputPoint | None, trial: TrialView, best: bool) -> list[Cell]:
    if point is None:
        text = "FAILED" if trial.state == "failed" else fmt.MISSING
        kind: CellKind = "failed" if trial.state == "failed" else "missing"
        return [Cell(text, kind=kind, title=_state_text(trial))] + [Cell("", kind=kind)] * 3
    flags = point.flags
    bad: CellKind = "failed" if point.output_tok_s is None else ("flagged" if flags else "")
    return [
        Cell(fmt.rate(point.output_tok_s), flags, kind="best" if best else bad),
        Cell(fmt.rate(point.request_tok_s)),
        Cell(f"{fmt.ms(point.ttft_p50_s)} / {fmt.ms(point.ttft_p99_s)}"),
        Cell(fmt.accept(point.accept_len)),
    ]


def throughput_tables(group: HostTypeGroup) -> list[Table]:
    """One table per context: a row per config, four columns per concurrency."""
    tables: list[Table] = []
    for context in group.contexts:
        headers = ["config"]
        for conc in group.concurrencies:
            headers += [f"c={conc} tok/s", f"c={conc} req tok/s", f"c={conc} TTFT p50/p99 ms"]
            headers += [f"c={conc} accept_len"]
        winners = {
            conc: found[0].key
            for conc in group.concurrencies
            if (found := group.best(context, conc)) is not None
        }
        rows = []
        for trial in group.trials:
            row = [_trial_cell(group, trial)]
            for conc in group.concurrencies:
                point = trial.point(context, conc)
                row += _point_cells(point, trial, winners.get(conc) == trial.key)
            rows.append(tuple(row))
        tables.append(
            Table(
                f"Context {context} tokens",
                tuple(headers),
                tuple(rows),
                note="tok/s: aggregate output tokens per second; req tok/s: median per-request "
                "decode rate; the best trusted value of each column is marked.",
            )
        )
    return tables


def best_table(group: HostTypeGroup) -> Table:
    rows = []
    for context in group.contexts:
        row = [Cell(str(context))]
        for conc in group.concurrencies:
            found = group.best(context, conc)
            if found is None:
                row.append(Cell("no trusted point", kind="missing"))
                continue
            trial, point = found
            speedup = group.speedup(trial, context, conc)
            extra = f", {fmt.ratio(speedup)} baseline" if speedup is not None else ""
            row.append(
                Cell(
                    f"{group.display(trial)} ({fmt.rate(point.output_tok_s)} tok/s{extra})",
                    point.flags,
                )
            )
        rows.append(tuple(row))
    headers = ("context", *(f"c={c}" for c in group.concurrencies))
    return Table("Best config per cell", headers, tuple(rows))


def speedup_table(group: HostTypeGroup) -> Table:
    cells = group.cells
    rows = []
    for trial in group.trials:
        if trial.is_baseline:
            continue
        row = [_trial_cell(group, trial)]
        for ctx, conc in cells:
            value = group.speedup(trial, ctx, conc)
            point = trial.point(ctx, conc)
            if value is None:
                failed = trial.state == "failed" and point is None
                row.append(
                    Cell(
                        "FAILED" if failed else fmt.MISSING, kind="failed" if failed else "missing"
                    )
                )
                continue
            kind: CellKind = "good" if value >= 1.0 else "bad"
            row.append(Cell(fmt.ratio(value), point.flags if point else (), kind=kind))
        rows.append(tuple(row))
    headers = ("config", *(fmt.cell_name(ctx, conc) for ctx, conc in cells))
    return Table(
        "Speedup over the baseline (aggregate tok/s, context/concurrency)",
        headers,
        tuple(rows),
        note="The baseline is the trial with every knob removed on the same host "
        "(else on another host of the same type).",
    )


def coding_table(group: HostTypeGroup) -> Table:
    rows = []
    for trial in group.trials:
        summary = trial.coding_summary()
        if summary.total == 0:
            state = "no coding results" if trial.state == "done" else _state_text(trial)
            kind: CellKind = "failed" if trial.state == "failed" else "missing"
            rows.append((_trial_cell(group, trial), Cell(state, kind=kind), Cell(""), Cell("")))
            continue
        failures = (
            ", ".join(f"{p}: {o.value.upper()}" for p, o in trial.coding_failures()) or "none"
        )
        passed = f"{summary.passed}/{summary.scored}"
        unscored = summary.total - summary.scored
        if unscored:
            passed += f" ({unscored} not scored)"
        drift = trial.lossless
        if trial.is_baseline:
            lossless = Cell("(baseline)")
        elif drift is None:
            lossless = Cell(fmt.MISSING, kind="missing")
        elif drift.drifted:
            lossless = Cell(
                f"DRIFT: {drift.exact_matches}/{drift.compared} identical "
                f"({', '.join(drift.differing)})",
                kind="bad",
            )
        else:
            lossless = Cell(f"{drift.exact_matches}/{drift.compared} identical", kind="good")
        scored_all = summary.passed == summary.scored and not unscored
        rows.append(
            (
                _trial_cell(group, trial),
                Cell(passed, kind="good" if scored_all else "bad"),
                Cell(failures, kind="" if failures == "none" else "bad"),
                lossless,
            )
        )
    return Table(
        "Coding anchor",
        ("config", "passed / scored", "failures (outcome)", "output vs baseline (temperature 0)"),
        tuple(rows),
        note="TRUNCATED and REQUEST_ERROR outcomes are not scored: a cut-off answer is not a "
        "wrong one.",
    )


def failed_trials(group: HostTypeGroup) -> list[FailedTrial]:
    out: list[FailedTrial] = []
    for trial in group.trials:
        for attempt in trial.attempts:
            if attempt.state not in ("failed", "skipped"):
                continue
            out.append(
                FailedTrial(
                    label=group.display(trial),
                    host=trial.host,
                    attempt=attempt.number,
                    state=attempt.state,
                    cause=attempt.cause,
                    lines=tuple(attempt.evidence_lines()),
                )
            )
    return out


def lifecycle_table(group: HostTypeGroup) -> Table:
    rows = []
    for trial in group.trials:
        life = trial.lifecycle
        if life is None:
            rows.append((_trial_cell(group, trial), *(Cell(fmt.MISSING, kind="missing"),) * 4))
            continue
        ready = fmt.seconds(life.reconfigure_s)
        if trial.state == "failed":
            ready = f"never ({trial.cause})"
        rows.append(
            (
                _trial_cell(group, trial),
                Cell(fmt.seconds(life.stop_s)),
                Cell(fmt.seconds(life.memory_release_s)),
                Cell(fmt.seconds(life.load_s)),
                Cell(ready, kind="failed" if trial.state == "failed" else ""),
            )
        )
    return Table(
        "Lifecycle (seconds)",
        ("config", "stop", "memory-release wait", "load (start → ready)", "ready after"),
        tuple(rows),
        note="ready after: from the first step of the reconfigure to proven readiness.",
    )


def _gpus(provenance: Mapping[str, Any]) -> tuple[str, str]:
    gpus = provenance.get("gpus") or []
    names = Counter(str(g.get("name")) for g in gpus if isinstance(g, Mapping))
    drivers = sorted({str(g.get("driver_version")) for g in gpus if isinstance(g, Mapping)})
    text = ", ".join(f"{count}× {name}" for name, count in names.items()) or fmt.MISSING
    return text, ", ".join(drivers) or fmt.MISSING


def provenance_table(group: HostTypeGroup, model: str | None) -> Table:
    rows = []
    for host in group.hosts:
        prov = host.provenance
        if prov is None:
            reason = host.set_aside_reason or "no successful trial"
            rows.append(
                (Cell(host.name), Cell(f"unknown: {reason}", kind="missing"), *(Cell(""),) * 4)
            )
            continue
        gpus, driver = _gpus(prov)
        exec_start = host.baseline_exec_start
        rows.append(
            (
                Cell(host.name),
                Cell(str(prov.get("sglang_version") or fmt.MISSING)),
                Cell(gpus),
                Cell(driver),
                Cell(str(prov.get("model_path") or model or fmt.MISSING)),
                Cell(shlex.join(exec_start))
                if exec_start
                else Cell("none: no baseline ran on this host", kind="missing"),
            )
        )
    return Table(
        "Provenance",
        ("host", "SGLang", "GPUs", "driver", "model", "ExecStart (baseline)"),
        tuple(rows),
    )


def configs_table(group: HostTypeGroup) -> Table:
    knobs = sorted({name for t in group.trials for name in t.config})
    rows = [
        (
            _trial_cell(group, trial),
            Cell(trial.host),
            *(Cell(format_knob(trial.config[k]) if k in trial.config else "") for k in knobs),
            Cell(
                _state_text(trial),
                kind="failed" if trial.state == "failed" else "",
            ),
        )
        for trial in group.trials
    ]
    return Table("Configs", ("config", "host", *knobs, "outcome"), tuple(rows))


def comparison_tables(comparison: Comparison) -> list[Table]:
    sides = comparison.sides
    best_rows = []
    for cell in comparison.cells:
        row = [Cell(fmt.cell_name(cell.context, cell.concurrency))]
        for best in cell.best:
            if best is None:
                row.append(Cell("no trusted point", kind="missing"))
            else:
                row.append(Cell(f"{best.label} ({fmt.rate(best.output_tok_s)} tok/s)"))
        for ratio in cell.ratios[1:]:
            row.append(Cell(fmt.ratio(ratio), kind=_ratio_kind(ratio)))
        best_rows.append(tuple(row))
    headers = (
        "cell",
        *(f"best: {s.title}" for s in sides),
        *(f"{s.sweep} ÷ {sides[0].sweep}" for s in sides[1:]),
    )
    tables = [Table("Best config per cell", headers, tuple(best_rows))]
    if comparison.configs:
        cells = [(ctx, conc) for ctx, conc, _ in comparison.configs[0].cells]
        ratio_rows = []
        for config in comparison.configs:
            for index in range(1, len(sides)):
                ratios = config.ratio(index)
                ratio_rows.append(
                    (
                        Cell(config.label),
                        Cell(f"{sides[index].title} ÷ {sides[0].title}"),
                        *(Cell(fmt.ratio(r), kind=_ratio_kind(r)) for r in ratios),
                    )
                )
        tables.append(
            Table(
                "Same config, tok/s ratio",
                ("config", "sides", *(fmt.cell_name(c, n) for c, n in cells)),
                tuple(ratio_rows),
            )
        )
    return tables


def _ratio_kind(value: float | None) -> CellKind:
    if value is None:
        return "missing"
    return "good" if value >= 1.0 else "bad"


def warning_groups(
    kinds: Sequence[tuple[str, str | None, str | None, str]],
) -> dict[str, list[str]]:
    """Warnings grouped by kind, each line naming where it applies."""
    grouped: dict[str, list[str]] = {}
    for kind, host, trial, message in kinds:
        where = " / ".join(part for part in (host, trial) if part)
        grouped.setdefault(kind, []).append(f"{where}: {message}" if where else message)
    return grouped
