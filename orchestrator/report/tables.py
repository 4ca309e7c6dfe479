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

import orchestrator.report.fmt as fmt
import orchestrator.report.words as words
from orchestrator.answers import Answer, Contender, Estimate
from orchestrator.answers.model import named
from orchestrator.report.across import FrontPoint, LoadRow, load_rows
from orchestrator.report.compare import Comparison
from orchestrator.report.model import UNTRUSTED_FLAGS, HostTypeGroup, PointView, TrialView
from orchestrator.report.space import SpaceGrid
from orchestrator.store.results import config_label, format_knob
from orchestrator.types import SYNTHETIC_WORKLOAD, MatrixCell, format_rate, plural

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


def _point_cells(point: PointView | None, trial: TrialView, best: bool) -> list[Cell]:
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
                point = group.point(trial, context, conc)
                row += _point_cells(point, trial, winners.get(conc) == trial.key)
            rows.append(tuple(row))
        title = f"Context {context} tokens"
        if group.main_workload != SYNTHETIC_WORKLOAD:
            title += f", workload {group.main_workload}"
        tables.append(
            Table(
                title,
                tuple(headers),
                tuple(rows),
                note="tok/s: aggregate output tokens per second; req tok/s: median per-request "
                "decode rate; the best trusted value of each column is marked.",
            )
        )
    return tables


def rate_tables(group: HostTypeGroup) -> list[Table]:
    """One table per (workload, context) with open-loop points: a row per config, per offered
    rate what the client really sent, goodput under the sweep's slo, TTFT p99, TPOT p50 and
    accept_len. The best goodput of each rate is marked (trusted points only)."""
    found: list[Table] = []
    keys = sorted({(c.workload, c.context) for c in group.other_cells if c.rate is not None})
    for workload, context in keys:
        cells = sorted(
            c
            for c in group.other_cells
            if c.rate is not None and (c.workload, c.context) == (workload, context)
        )
        headers = ["config"]
        for cell in cells:
            assert cell.rate is not None  # the cells above are rate cells
            name = f"{format_rate(cell.rate)}/s"
            headers += [
                f"{name} sent/s",
                f"{name} goodput",
                f"{name} TTFT p99 / TPOT p50 ms",
                f"{name} accept_len",
            ]
        winners = [_best_goodput(group, cell) for cell in cells]
        rows = []
        for trial in group.trials:
            row = [_trial_cell(group, trial)]
            for cell, winner in zip(cells, winners, strict=True):
                row += _rate_cells(trial.point_at(cell), trial, winner)
            rows.append(tuple(row))
        title = f"Open loop, context {context} tokens"
        if workload != SYNTHETIC_WORKLOAD:
            title += f", workload {workload}"
        found.append(Table(title, tuple(headers), tuple(rows), note=_RATE_NOTE))
    return found


_RATE_NOTE = (
    "sent/s: requests the client really sent per second (flag R when below 95% of the offered "
    "schedule); goodput: requests per second meeting every slo bound; the best trusted "
    "goodput of each rate is marked."
)


def _best_goodput(group: HostTypeGroup, cell: MatrixCell) -> str | None:
    candidates = [
        (point.goodput, trial.key)
        for trial in group.trials
        if (point := trial.point_at(cell)) is not None
        and point.goodput is not None
        and not UNTRUSTED_FLAGS.intersection(point.flags)
    ]
    return max(candidates)[1] if candidates else None


def _rate_cells(point: PointView | None, trial: TrialView, best: str | None) -> list[Cell]:
    if point is None:
        text = "FAILED" if trial.state == "failed" else fmt.MISSING
        kind: CellKind = "failed" if trial.state == "failed" else "missing"
        return [Cell(text, kind=kind, title=_state_text(trial))] + [Cell("", kind=kind)] * 3
    flags = point.flags
    return [
        Cell(fmt.rate(point.achieved_rate), flags, kind="flagged" if flags else ""),
        Cell(fmt.rate(point.goodput), kind="best" if best == trial.key else ""),
        Cell(f"{fmt.ms(point.ttft_p99_s)} / {fmt.ms(point.tpot_p50_s)}"),
        Cell(fmt.accept(point.accept_len)),
    ]


def workload_table(group: HostTypeGroup) -> Table | None:
    """Acceptance and speed per workload, when the sweep measured several: a row per config,
    per workload the mean accept_len over its points, aggregate tok/s at its most loaded
    closed-loop cell and the median output length there. None with one workload."""
    workloads = list(dict.fromkeys(c.workload for c in group.all_cells))
    if len(workloads) < 2:
        return None
    headers = ["config"]
    reference: dict[str, MatrixCell | None] = {}
    for workload in workloads:
        closed = sorted(c for c in group.all_cells if c.workload == workload and c.rate is None)
        reference[workload] = closed[-1] if closed else None
        at = f" @ {closed[-1].context}/{closed[-1].load}" if closed else ""
        headers += [f"{workload} accept_len", f"{workload} tok/s{at}", f"{workload} out len"]
    rows = []
    for trial in group.trials:
        row = [_trial_cell(group, trial)]
        for workload in workloads:
            accepts = [
                p.accept_len
                for p in trial.throughput
                if p.cell.workload == workload and p.accept_len is not None
            ]
            cell = reference[workload]
            point = trial.point_at(cell) if cell is not None else None
            row += [
                Cell(fmt.accept(sum(accepts) / len(accepts) if accepts else None)),
                Cell(fmt.rate(point.output_tok_s if point else None), point.flags if point else ()),
                Cell(fmt.count(point.output_len_p50 if point else None)),
            ]
        rows.append(tuple(row))
    return Table(
        "Per workload",
        tuple(headers),
        tuple(rows),
        note="accept_len: mean over the workload's points; tok/s and output length (median "
        "tokens) at the workload's most loaded closed-loop cell.",
    )


def best_table(group: HostTypeGroup, title: str = "Best config per cell") -> Table:
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
    return Table(title, headers, tuple(rows))


def speedup_table(group: HostTypeGroup) -> Table:
    cells = group.cells
    rows = []
    for trial in group.trials:
        if trial.is_baseline:
            continue
        row = [_trial_cell(group, trial)]
        for ctx, conc in cells:
            value = group.speedup(trial, ctx, conc)
            point = group.point(trial, ctx, conc)
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


def _engine_words(provenance: Mapping[str, Any]) -> str:
    """``sglang 0.5.23``: the engine and the version its server reported (a store written
    before engines had names says only SGLang's version)."""
    engine = provenance.get("engine") or ("sglang" if provenance.get("sglang_version") else None)
    version = provenance.get("engine_version") or provenance.get("sglang_version")
    if engine is None:
        return fmt.MISSING
    return f"{engine} {version}" if version else f"{engine} ({fmt.MISSING})"


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
                Cell(_engine_words(prov)),
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
        ("host", "engine", "GPUs", "driver", "model", "ExecStart (baseline)"),
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


# --- answers: pooled per host type -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PooledConfig:
    """One config's value in one cell, pooled over the type's hosts that measured it."""

    label: str
    output_tok_s: float
    hosts: tuple[str, ...]
    flags: tuple[str, ...]
    """Flags of the pooled points when none of them was trusted (else empty)."""
    is_baseline: bool


def pooled_cell(
    group: HostTypeGroup, context: int, concurrency: int, left_out: frozenset[str] = frozenset()
) -> list[PooledConfig]:
    """Every config's mean aggregate tok/s in the cell over the type's hosts (``left_out``
    hosts, flagged as sick by the answers, excluded); trusted points only, unless a config has
    none (then its flagged points, flags kept)."""
    by_config: dict[str, list[tuple[TrialView, PointView]]] = {}
    for trial in group.trials:
        point = group.point(trial, context, concurrency)
        if trial.host in left_out or point is None or point.output_tok_s is None:
            continue
        by_config.setdefault(trial.identity, []).append((trial, point))
    pooled: list[PooledConfig] = []
    for measured in by_config.values():
        trusted = [(t, p) for t, p in measured if p.trusted]
        used = trusted or measured
        values = [p.output_tok_s for _, p in used if p.output_tok_s is not None]
        first = used[0][0]
        flags = () if trusted else tuple(sorted({f for _, p in used for f in p.flags}))
        pooled.append(
            PooledConfig(
                label=first.short_label or first.label,
                output_tok_s=sum(values) / len(values),
                hosts=tuple(sorted({t.host for t, _ in used})),
                flags=flags,
                is_baseline=first.is_baseline,
            )
        )
    return pooled


def _cell_answer(answers: Sequence[Answer], cell: MatrixCell) -> Answer | None:
    """The answer about exactly this cell's aggregate tok/s (a sweep without an objective
    has one per cell)."""
    return next(
        (
            a
            for a in answers
            if a.objective.metric == "output_tok_s" and a.objective.cells == (cell,)
        ),
        None,
    )


def _answer_cell(answer: Answer) -> Cell:
    best = answer.best
    basis = (
        words.basis_words(best.estimate.basis, best.estimate.restarts) if best is not None else None
    )
    if best is None:
        return Cell("no valid config", kind="missing", title=words.answer_words(answer).headline)
    value = fmt.rate(best.estimate.value) + fmt.interval(best.estimate.ci95, fmt.rate)
    speedup = (
        f", {fmt.ratio(best.speedup_vs_baseline)}"
        f"{fmt.interval(best.speedup_ci95, fmt.factor)} baseline"
        if best.speedup_vs_baseline is not None
        else ""
    )
    if answer.verdict == "tie":
        names = ", ".join(c.label for c in (best, *answer.tied))
        return Cell(f"tie: {names} ({value} tok/s{speedup})", title=basis)
    return Cell(f"{best.label} ({value} tok/s{speedup})", title=basis)


def pooled_best_table(group: HostTypeGroup, answers: Sequence[Answer]) -> Table:
    """The best config per cell for the host type, each config named once however many of
    the type's hosts ran it: the answer's estimate and interval where an answer is about the
    cell, else the mean over the hosts."""
    left_out = frozenset(f.host for a in answers for f in a.flags)
    rows = []
    for context in group.contexts:
        row = [Cell(str(context))]
        for conc in group.concurrencies:
            answer = _cell_answer(answers, group.grid_cell(context, conc))
            if answer is not None:
                row.append(_answer_cell(answer))
                continue
            pooled = pooled_cell(group, context, conc, left_out)
            candidates = [p for p in pooled if not p.flags] or pooled
            if not candidates:
                row.append(Cell("no trusted point", kind="missing"))
                continue
            best = max(candidates, key=lambda p: p.output_tok_s)
            baseline = next((p for p in pooled if p.is_baseline), None)
            extra = (
                f", {fmt.ratio(best.output_tok_s / baseline.output_tok_s)} baseline"
                if baseline is not None and baseline.output_tok_s and not best.is_baseline
                else ""
            )
            hosts = f"{len(best.hosts)} host{'' if len(best.hosts) == 1 else 's'}"
            row.append(
                Cell(
                    f"{best.label} ({fmt.rate(best.output_tok_s)} tok/s{extra}, {hosts})",
                    best.flags,
                    title=", ".join(best.hosts),
                )
            )
        rows.append(tuple(row))
    headers = ("context", *(f"c={c}" for c in group.concurrencies))
    left = (
        f" ({', '.join(sorted(left_out))} left out: disagrees with its siblings)"
        if left_out
        else ""
    )
    return Table(
        "Best config per cell, pooled over the host type",
        headers,
        tuple(rows),
        note="Each config once per host type: where an answer is about the cell, its estimate "
        "with the 95% interval; elsewhere the mean aggregate tok/s over the type's hosts"
        f"{left}. Per-host detail below.",
    )


def best_tables(group: HostTypeGroup, answers: Sequence[Answer]) -> list[Table]:
    """The best config per cell: per host type first where answers pool the type's hosts,
    with each answer's contenders, then the per-host table; without answers, the per-host
    table alone (as reports always had it)."""
    if not answers:
        return [best_table(group)]
    answers = [words.readable(a) for a in answers]
    return [
        *(contenders_table(a) for a in answers if a.contenders),
        pooled_best_table(group, answers),
        best_table(group, "Best config per cell, per host"),
    ]


def _standing_note(answer: Answer, contender: Contender, tied: set[str]) -> str | None:
    """The row's place in the answer, in words that never call a row "best" or "highest"
    unless it tops the column shown."""
    best = answer.best
    if best is not None and contender.label == best.label:
        if answer.stopped:
            return "first by rank (cut short)"
        if answer.verdict == "tie":
            return "first by rank, tied"
        return "deploy" if answer.runner_up is not None else "only valid config"
    if contender.label in tied:
        return "tied"
    return None


def _margin_cell(contender: Contender) -> Cell:
    margin = contender.vs_best
    if margin is None:
        return Cell(fmt.MISSING, kind="missing")
    return Cell(
        fmt.percent(margin.relative) + fmt.interval(margin.ci95, fmt.percent),
        title="how much the answer's config beats it (positive = better); tied when the "
        "interval holds 0",
    )


def _contender_row(
    answer: Answer,
    contender: Contender,
    *,
    ranked_column: bool,
    top: str | None,
    tied: set[str],
) -> tuple[Cell, ...]:
    """One config's row of :func:`contenders_table`."""
    metric = answer.objective.metric
    estimate = contender.estimate
    notes: list[str] = []
    kind: CellKind = ""
    standing = _standing_note(answer, contender, tied)
    if standing:
        notes.append(standing)
    if contender.violations:
        notes.append("breaks " + ", ".join(contender.violations))
        kind = "bad"
    if estimate.noisy:
        notes.append("noisy")
        kind = kind or "flagged"
    if contender.screened_only:
        notes.append("screened only")
    row = [
        Cell(contender.label, contender.flags, title=config_label(contender.config)),
        Cell(
            fmt.metric_number(metric, estimate.value),
            kind="best" if contender.label == top else "",
        ),
        Cell(
            fmt.interval(estimate.ci95, lambda v: fmt.metric_number(metric, v)).strip()
            or fmt.MISSING,
            kind="" if estimate.ci95 else "missing",
            title=words.basis_words(estimate.basis, estimate.restarts),
        ),
    ]
    if ranked_column:
        row.append(Cell(fmt.metric_number(metric, contender.ranked_on)))
    row += [
        Cell(estimate.basis),
        Cell(str(estimate.restarts)),
        Cell(", ".join(estimate.hosts) or fmt.MISSING),
        Cell(fmt.percent(estimate.cv)),
        Cell(
            fmt.ratio(contender.speedup_vs_baseline)
            + fmt.interval(contender.speedup_ci95, fmt.factor)
        ),
        _margin_cell(contender),
        Cell("; ".join(notes), kind=kind),
    ]
    return tuple(row)


def contenders_table(answer: Answer) -> Table:
    """Every measured config of one answer in the answer's rank order (its config first),
    with its interval, its margin to the answer's config and its standing."""
    objective = answer.objective
    metric = objective.metric
    best_label = answer.best.label if answer.best is not None else None
    ranked_column = any(words.ranked_differently(c) for c in answer.contenders)
    top = _top(answer)
    tied = {c.label for c in answer.tied}
    rows = tuple(
        _contender_row(answer, contender, ranked_column=ranked_column, top=top, tied=tied)
        for contender in answer.contenders
    )
    unit = fmt.metric_unit(metric).strip()
    headers = [
        "config",
        f"estimate{f' ({unit})' if unit else ''}",
        "95% interval",
        *(["ranked on"] if ranked_column else []),
        "interval basis",
        "restarts",
        "hosts",
        "cv",
        "vs baseline",
        f"{best_label or 'first'} ahead by",
        "notes",
    ]
    ranked_words = (
        " Ranked on: the restarts each config was picked on, shrunk toward its neighbours' in "
        "the space (docs/answers.md); the estimate is the mean of its own restarts."
        if ranked_column
        else " Rank: by the estimate."
    )
    return Table(
        f"Contenders: {metric} at {words.where(objective)}, in the answer's rank order",
        tuple(headers),
        rows,
        note="One row per config on the host type, its restarts on every host of the type "
        "pooled; cv: spread across its restarts (noisy above 5%). Bold: the highest estimate "
        "(the lowest for a minimized metric)." + ranked_words,
    )


def _top(answer: Answer) -> str | None:
    """The label of the contender whose estimate tops the estimate column (valid ones)."""
    valid = [c for c in answer.contenders if not c.violations] or list(answer.contenders)
    if not valid:
        return None
    pick = min if answer.objective.minimized else max
    return pick(valid, key=lambda c: c.estimate.value).label


def convergence_table(answer: Answer) -> Table:
    """The answer so far against restarts: the steps where the named config changed, and the
    last one (its estimate moves a little with every restart of it; the config is the news).
    The last row is the answer's own config and estimate."""
    rows = []
    steps = answer.convergence
    previous: tuple[str | None] | None = None
    for index, step in enumerate(steps):
        current = (step.label,)
        if current == previous and index != len(steps) - 1:
            continue
        previous = current
        rows.append(
            (
                Cell(str(step.restarts)),
                Cell(fmt.metric_number(answer.objective.metric, step.best)),
                Cell(step.label or "no valid config yet", kind="" if step.label else "missing"),
            )
        )
    return Table(
        f"Convergence on {answer.host_type}, {words.where(answer.objective)}",
        ("restarts", f"estimate of the config named so far ({answer.objective.metric})", "config"),
        tuple(rows),
        note="Restarts: unit starts on the host type, in the order they happened. After each, "
        "the config the answer would have named from the restarts so far (the same rank) and "
        "its estimate as the contenders table shows it.",
    )


def space_table(grid: SpaceGrid, answer: Answer) -> Table:
    """The explored space as a table: estimates where measured, FAILED, blank unexplored."""
    metric = answer.objective.metric
    rows = []
    for name, line in zip(grid.rows, grid.cells, strict=True):
        row = [Cell(name)]
        for cell in line:
            if cell.state == "explored" and cell.contender is not None:
                text = fmt.metric_number(metric, cell.contender.estimate.value)
                flags: CellKind = "bad" if cell.contender.violations else ""
                row.append(
                    Cell(text, kind="best" if cell.is_best else flags, title=cell.contender.label)
                )
            elif cell.state == "failed":
                causes = ", ".join(sorted({f.cause or "unknown" for f in cell.failed}))
                row.append(Cell("FAILED", kind="failed", title=causes))
            else:
                row.append(Cell("", kind="missing"))
        rows.append(tuple(row))
    corner = f"{grid.row_knob} \\ {grid.column_knob}" if grid.row_knob else grid.column_knob
    return Table(
        f"Explored space on {answer.host_type}, {words.where(answer.objective)}",
        (corner, *grid.columns),
        tuple(rows),
        note=space_note(grid, answer),
    )


def space_note(grid: SpaceGrid, answer: Answer) -> str:
    folded = (
        f" Other knobs ({', '.join(grid.other_knobs)}): each cell shows the config the answer "
        "ranks first over them."
        if grid.other_knobs
        else ""
    )
    axes = f"{grid.row_knob} x {grid.column_knob}" if grid.row_knob else grid.column_knob
    return (
        f"{answer.objective.metric} estimates by {axes}; the answer's config is marked, "
        f"FAILED: tried and never measured, blank: not explored.{folded}"
    )


def answers_table(answers: Sequence[Answer]) -> Table:
    """Every answer on one line, before the answers one by one (a sweep without an objective
    has one per host type and cell)."""
    rows = []
    for answer in answers:
        best = answer.best
        tied = ", ".join(c.label for c in answer.tied)
        if best is None:
            rows.append(
                (
                    Cell(answer.host_type),
                    Cell(words.where(answer.objective)),
                    Cell(answer.verdict, kind="failed"),
                    *(Cell(fmt.MISSING, kind="missing"),) * 5,
                )
            )
            continue
        estimate = best.estimate
        margin = (
            fmt.percent(answer.margin.relative) + fmt.interval(answer.margin.ci95, fmt.percent)
            if answer.margin is not None
            else fmt.MISSING
        )
        rows.append(
            (
                Cell(answer.host_type),
                Cell(words.where(answer.objective)),
                Cell(
                    answer.verdict + (" (cut short)" if answer.stopped else ""),
                    kind="good" if answer.verdict == "better" and not answer.stopped else "flagged",
                    title=answer.stopped,
                ),
                Cell(
                    best.label + (f" (tied: {tied})" if tied else ""),
                    title=config_label(best.config),
                ),
                Cell(words.value_text(answer.objective, best)),
                Cell(
                    fmt.ratio(best.speedup_vs_baseline)
                    + fmt.interval(best.speedup_ci95, fmt.factor)
                ),
                Cell(margin),
                Cell(estimate.basis, kind="bad" if estimate.basis == "within-run-only" else ""),
            )
        )
    return Table(
        "Answers at a glance",
        ("host type", "at", "verdict", "config", "estimate", "vs baseline", "margin", "basis"),
        tuple(rows),
        note="margin: the answer's config's relative lead over the runner-up, with its 95% "
        "interval; cut short: the sweep ended before its plan or search did (not a deploy "
        "advice).",
    )


# --- the answer across load ------------------------------------------------------------------


def _named_cell(answer: Answer) -> Cell:
    best = named(answer)
    if best is None:
        return Cell("no valid config", kind="failed")
    tied = ", ".join(c.label for c in answer.tied)
    return Cell(best.label + (f" (tied: {tied})" if tied else ""), title=config_label(best.config))


_VERDICT_KINDS: dict[str, CellKind] = {
    "better": "good",
    "tie": "flagged",
    "no-valid-config": "failed",
}


def _load_row(row: LoadRow) -> tuple[Cell, ...]:
    answer = row.answer
    metric = answer.objective.metric
    best = named(answer)
    margin = answer.margin
    if best is None:
        numbers = (Cell(fmt.MISSING, kind="missing"),) * 3
    else:
        numbers = (
            Cell(fmt.metric_number(metric, best.estimate.value)),
            Cell(
                fmt.interval(best.estimate.ci95, lambda v: fmt.metric_number(metric, v)).strip()
                or fmt.MISSING,
                title=words.basis_words(best.estimate.basis, best.estimate.restarts),
            ),
            Cell(fmt.ratio(best.speedup_vs_baseline) + fmt.interval(best.speedup_ci95, fmt.factor)),
        )
    runner = answer.runner_up
    return (
        Cell(row.cell.measured_load(answer.objective.load(row.cell))),
        Cell(answer.verdict, kind=_VERDICT_KINDS[answer.verdict]),
        _named_cell(answer),
        *numbers,
        Cell(runner.label if runner is not None else fmt.MISSING),
        Cell(
            fmt.percent(margin.relative) + fmt.interval(margin.ci95, fmt.percent)
            if margin is not None
            else fmt.MISSING
        ),
        Cell(row.range_words() or fmt.MISSING, kind="" if row.band else "missing"),
    )


def per_load_table(answer: Answer) -> Table:
    """An across-load answer's answer at each load: the config named, its verdict, estimate
    and interval, its lead over the runner-up, and the schedule band it stands for."""
    metric = answer.objective.metric
    unit = fmt.metric_unit(metric).strip()
    return Table(
        f"The answer at each load on {answer.host_type}: {metric}",
        (
            "load",
            "verdict",
            "config",
            f"estimate{f' ({unit})' if unit else ''}",
            "95% interval",
            "vs baseline",
            "runner-up",
            "ahead by",
            "schedule band",
        ),
        tuple(_load_row(row) for row in load_rows(answer)),
        note="Each load answered alone, with the same interval model and tie rule as any "
        "answer; ahead by: the named config's lead over the runner-up with its 95% interval "
        "(a tie when it holds 0). Schedule band: the running batch sizes the schedule gives "
        "that load's config.",
    )


def schedule_verdict_table(answer: Answer) -> Table | None:
    """The measured schedule against the best fixed config at each load; None until the
    schedule was measured."""
    schedule = answer.schedule
    verdict = schedule.verdict if schedule is not None else None
    if verdict is None:
        return None
    metric = answer.objective.metric

    def value(estimate: Estimate) -> str:
        return fmt.metric_number(metric, estimate.value) + fmt.interval(
            estimate.ci95, lambda v: fmt.metric_number(metric, v)
        )

    kinds: dict[str, CellKind] = {"better": "good", "worse": "bad", "tie": ""}
    rows = tuple(
        (
            Cell(c.cell.load),
            Cell(c.fixed.label, title=config_label(c.fixed.config)),
            Cell(value(c.fixed.estimate)),
            Cell(value(c.schedule)),
            Cell(fmt.percent(c.margin.relative) + fmt.interval(c.margin.ci95, fmt.percent)),
            Cell(c.verdict, kind=kinds[c.verdict]),
        )
        for c in verdict.comparisons
    )
    unit = fmt.metric_unit(metric).strip()
    return Table(
        f"The schedule against the best fixed config at each load on {answer.host_type}",
        (
            "load",
            "best fixed config",
            f"fixed{f' ({unit})' if unit else ''}",
            f"schedule{f' ({unit})' if unit else ''}",
            "schedule vs fixed",
            "verdict",
        ),
        rows,
        note=f"{plural(verdict.restarts, 'restart')} of the schedule. schedule vs fixed: the "
        f"relative difference (positive = the schedule is better), with {verdict.intervals}; "
        "a tie when its interval holds 0. "
        + ("Recommended." if verdict.recommended else "Not recommended."),
    )


def front_table(points: Sequence[FrontPoint], answer: Answer) -> Table:
    """Total output tok/s and tok/s per user of every measured config at each load, the
    points on the Pareto front marked."""
    cells = [row.cell for row in load_rows(answer)]
    labels = list(dict.fromkeys(p.label for p in points))
    at = {(p.label, p.cell): p for p in points}
    rows = []
    for label in labels:
        row = [Cell(label)]
        for cell in cells:
            point = at.get((label, cell))
            if point is None:
                row.append(Cell(fmt.MISSING, kind="missing"))
                continue
            star = "*" if point.source == "total / concurrency" else ""
            row.append(
                Cell(
                    f"{fmt.rate(point.total)} / {fmt.rate(point.per_user)}{star}",
                    kind="best" if point.on_front else "",
                    title=f"per user: {point.source}",
                )
            )
        rows.append(tuple(row))
    return Table(
        f"Total vs per-user throughput on {answer.host_type}",
        ("config", *(f"{cell.load} total / per user" for cell in cells)),
        tuple(rows),
        note="tok/s: total output tokens per second / tokens per second per user (the median "
        "per-request decode rate; * where the total over the concurrency stands in). Marked: on "
        "the Pareto front, where no other config at any load gives more of both.",
    )
