"""The report as one self-contained HTML file: the Markdown's tables plus inline SVG plots.

No script, no external stylesheet, font or image: the file opens from a mail attachment or a
ticket on a machine without network, and prints (A4 landscape, figures kept whole). Failed
and flagged points are drawn as such (red crosses in a "no result" strip, amber rings),
never as zeros.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import orchestrator.report.fmt as fmt
import orchestrator.report.svg as svg
import orchestrator.report.tables as tables
from orchestrator.answers import Answer
from orchestrator.answers.model import named
from orchestrator.report.across import FrontPoint, LoadRow, config_key, front_points, load_rows
from orchestrator.report.compare import compare
from orchestrator.report.model import (
    FLAGS,
    HostTypeGroup,
    PointView,
    SweepReport,
    TrialView,
    flag_codes,
    flag_info,
)
from orchestrator.report.space import SpaceCell, estimates, explored_space
from orchestrator.report.svg import esc
from orchestrator.report.tables import schedule_verdict_table
from orchestrator.report.words import (
    AcrossLoadWords,
    across_load_words,
    answer_words,
    load_line,
    native_form,
    readable,
    where,
)
from orchestrator.types import plural

CSS = """
:root { --fail: #c81e1e; --flag: #d97706; --good: #15803d; --bad: #b91c1c; --muted: #6b7280; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, -apple-system, 'Segoe UI', Roboto, sans-serif; color: #111827;
       margin: 0; padding: 20px 28px 40px; background: #fff; }
p.meta, p.note, ul.warnings, pre, figcaption { max-width: 120ch; }
h1 { font-size: 24px; margin: 0 0 4px; }
h2 { font-size: 19px; margin: 28px 0 8px; padding-bottom: 4px; border-bottom: 2px solid #e5e7eb; }
h3 { font-size: 15px; margin: 20px 0 6px; }
p.meta { color: #374151; margin: 4px 0 10px; }
.legend { display: flex; flex-wrap: wrap; gap: 6px 16px; margin: 6px 0 10px; font-size: 12.5px; }
.legend span.swatch { display: inline-block; width: 22px; height: 4px; margin: 0 6px 3px 0;
                      vertical-align: middle; border-radius: 2px; }
.legend span.dashed { background: repeating-linear-gradient(90deg, #555 0 6px, transparent 6px 10px)
                      !important; }
.keys { font-size: 12.5px; color: #374151; margin: 4px 0 8px; }
.keys b { color: var(--flag); }
.keys .x { color: var(--fail); font-weight: 700; }
.panels { display: flex; flex-wrap: wrap; gap: 10px 14px; align-items: flex-start; }
.figures { display: flex; flex-wrap: wrap; gap: 0 36px; align-items: flex-start; }
figure { margin: 8px 0 14px; break-inside: avoid; }
figcaption { font-size: 12.5px; color: var(--muted); margin-top: 2px; }
table { border-collapse: collapse; margin: 6px 0 4px; font-size: 12.5px;
        font-variant-numeric: tabular-nums; break-inside: avoid; }
th, td { border: 1px solid #e5e7eb; padding: 3px 7px; text-align: right; vertical-align: top; }
th { background: #f9fafb; font-weight: 600; text-align: center; }
td:first-child, th:first-child { text-align: left; }
tr.baseline td:first-child { font-style: italic; }
td.failed { background: #fef2f2; color: var(--fail); font-weight: 600; }
td.missing { color: var(--muted); }
td.best { background: #ecfdf5; font-weight: 700; }
td.flagged { background: #fffbeb; }
td.good { color: var(--good); }
td.bad { color: var(--bad); }
td.text { text-align: left; }
sup.flags { color: var(--flag); font-weight: 700; margin-left: 2px; cursor: help; }
p.note { font-size: 12px; color: var(--muted); margin: 0 0 8px; }
pre { background: #f9fafb; border: 1px solid #e5e7eb; padding: 6px 8px; font-size: 12px;
      white-space: pre-wrap; margin: 4px 0 10px; }
ul.warnings li { margin: 2px 0; }
.answer { border-left: 4px solid var(--good); padding: 2px 0 2px 12px; margin: 8px 0 16px; }
.answer.tie { border-left-color: var(--flag); }
.answer.no-valid-config { border-left-color: var(--fail); }
.answer p.headline { font-size: 16px; font-weight: 600; margin: 4px 0; max-width: 120ch; }
.answer ul { margin: 4px 0 6px; max-width: 120ch; }
.answer figcaption { max-width: 62ch; }
.scroll { overflow-x: auto; }
@page { size: A4 landscape; margin: 10mm; }
@media print {
  body { padding: 0; max-width: none; font-size: 11px; }
  h2 { break-before: auto; break-after: avoid; }
  h3 { break-after: avoid; }
  .scroll { overflow: visible; }
  table { font-size: 10px; }
  a { color: inherit; text-decoration: none; }
}
"""

_TEXT_KINDS = {"config", "host", "cell", "sides", "failures (outcome)", "ExecStart (baseline)"}


def _cell_html(cell: tables.Cell, header: str) -> str:
    classes: list[str] = [cell.kind] if cell.kind else []
    if (
        header in _TEXT_KINDS
        or header.startswith("best:")
        or not any(ch.isdigit() for ch in cell.text)
    ):
        classes.append("text")
    attrs = f' class="{" ".join(classes)}"' if classes else ""
    if cell.title:
        attrs += f' title="{esc(cell.title)}"'
    flags = ""
    if cell.flags:
        meaning = "; ".join(flag_info(f).meaning for f in cell.flags)
        flags = f'<sup class="flags" title="{esc(meaning)}">{esc(flag_codes(cell.flags))}</sup>'
    return f"<td{attrs}>{esc(cell.text)}{flags}</td>"


def table_html(t: tables.Table, *, heading: str = "h3") -> str:
    head = "".join(f"<th>{esc(h)}</th>" for h in t.headers)
    rows = []
    for row in t.rows:
        cls = ' class="baseline"' if row and row[0].kind == "baseline" else ""
        cells = "".join(_cell_html(c, h) for c, h in zip(row, t.headers, strict=False))
        rows.append(f"<tr{cls}>{cells}</tr>")
    note = f'<p class="note">{esc(t.note)}</p>' if t.note else ""
    return (
        f'<{heading}>{esc(t.title)}</{heading}><div class="scroll"><table><thead><tr>{head}'
        f"</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{note}"
    )


# --- plots ---------------------------------------------------------------------------------


def _by_config(group: HostTypeGroup) -> dict[str, list[TrialView]]:
    """The group's trials by config (its restarts, on any host), in first-trial order."""
    configs: dict[str, list[TrialView]] = {}
    for trial in group.trials:
        configs.setdefault(trial.identity, []).append(trial)
    return configs


def _colors(group: HostTypeGroup) -> dict[str, str]:
    """Each trial's colour: its config's, so a config's restarts read as one config."""
    colors: dict[str, str] = {}
    index = 0
    for trials in _by_config(group).values():
        if trials[0].is_baseline:
            color = svg.BASELINE_COLOR
        else:
            color = svg.color_for(index)
            index += 1
        colors.update((trial.key, color) for trial in trials)
    return colors


def _legend(group: HostTypeGroup, colors: dict[str, str]) -> str:
    """One entry per config, however many restarts it had."""
    items = []
    for trials in _by_config(group).values():
        first = trials[0]
        dashed = " dashed" if first.is_baseline else ""
        name = first.short_label or first.label
        hosts = sorted({t.host for t in trials})
        where = f" @{', '.join(hosts)}" if group.show_host else ""
        count = f", {plural(len(trials), 'trial')}" if len(trials) > 1 else ""
        failed = [t for t in trials if t.state == "failed"]
        tail = f" (failed: {failed[-1].cause})" if len(failed) == len(trials) else ""
        items.append(
            f'<span><span class="swatch{dashed}" style="background:{colors[first.key]}"></span>'
            f"{esc(name + where + count + tail)}</span>"
        )
    return f'<div class="legend">{"".join(items)}</div>'


def _keys() -> str:
    return (
        '<div class="keys"><span class="x">×</span> in the red strip: no result (failed '
        "trial or point), never a zero. A ring <b>◯</b> marks a point with quality flags "
        "(hover for the details).</div>"
    )


def _status(trial: TrialView, point: PointView | None) -> svg.MarkStatus:
    if point is None or point.output_tok_s is None:
        return "failed"
    return "flagged" if point.flags else "ok"


def _point_title(group: HostTypeGroup, trial: TrialView, point: PointView | None) -> str:
    name = group.display(trial)
    if point is None:
        reason = f"{trial.state}: {trial.cause}" if trial.cause else "not measured"
        return f"{name}: no result ({reason})"
    flags = f" [{', '.join(flag_info(f).meaning for f in point.flags)}]" if point.flags else ""
    return (
        f"{name}, context {point.context}, c={point.concurrency}: "
        f"{fmt.rate(point.output_tok_s)} tok/s, accept_len {fmt.accept(point.accept_len)}{flags}"
    )


def throughput_figure(group: HostTypeGroup, colors: dict[str, str]) -> str:
    panels = []
    for context in group.contexts:
        series = [
            svg.Series(
                name=group.display(trial),
                color=colors[trial.key],
                dashed=trial.is_baseline,
                marks=tuple(
                    svg.Mark(
                        x=float(conc),
                        y=p.output_tok_s if p is not None else None,
                        status=_status(trial, p),
                        title=_point_title(group, trial, p),
                    )
                    for conc in group.concurrencies
                    if group.planned(trial, context, conc)
                    for p in (group.point(trial, context, conc),)
                ),
            )
            for trial in group.trials
        ]
        panels.append(
            svg.xy_panel(
                series,
                title=f"context {context} tokens",
                x_label="concurrency",
                y_label="aggregate output tok/s",
                x_categories=[float(c) for c in group.concurrencies],
            )
        )
    return _figure(
        panels,
        "Throughput vs concurrency, one panel per context (aggregate output tokens/s).",
    )


def speedup_figure(group: HostTypeGroup) -> str | None:
    trials = [t for t in group.trials if not t.is_baseline]
    if not trials or not any(t.is_baseline for t in group.trials):
        return None
    cells = group.cells
    grid: list[list[svg.HeatCell]] = []
    for trial in trials:
        row = []
        for ctx, conc in cells:
            point = group.point(trial, ctx, conc)
            value = group.speedup(trial, ctx, conc)
            if value is None:
                failed = point is None and trial.state == "failed"
                row.append(
                    svg.HeatCell(
                        None,
                        "FAILED" if failed else fmt.MISSING,
                        "failed" if failed else "ok",
                        _point_title(group, trial, point),
                    )
                )
                continue
            codes = flag_codes(point.flags) if point else ""
            row.append(
                svg.HeatCell(
                    value,
                    fmt.ratio(value) + ("!" if codes else ""),
                    "flagged" if codes else "ok",
                    _point_title(group, trial, point) + f" = {fmt.ratio(value)} the baseline",
                )
            )
        grid.append(row)
    chart = svg.heatmap(
        [group.display(t) for t in trials],
        [fmt.cell_name(ctx, conc) for ctx, conc in cells],
        grid,
        title="Speedup over the baseline (context/concurrency)",
    )
    return _figure(
        [chart],
        "Green: faster than the baseline, red: slower; hatched: no result; an amber border "
        "and ! mark a flagged point.",
    )


def _sweep_knob(group: HostTypeGroup) -> str | None:
    """The numeric knob with the most distinct values (the sweep's budget, usually)."""
    best: tuple[int, str] | None = None
    names = {n for t in group.trials for n in t.config}
    for name in sorted(names):
        values = {
            t.config[name]
            for t in group.trials
            if isinstance(t.config.get(name), int | float)
            and not isinstance(t.config.get(name), bool)
        }
        if len(values) >= 2 and (best is None or len(values) > best[0]):
            best = (len(values), name)
    return best[1] if best else None


_CONTEXT_COLORS = ("#1f77b4", "#9467bd", "#8c564b", "#2ca02c", "#17becf", "#bcbd22")


def _context_color(index: int) -> str:
    return _CONTEXT_COLORS[index % len(_CONTEXT_COLORS)]


def _accept_mark(
    group: HostTypeGroup, trial: TrialView, context: int, value: float
) -> svg.Mark | None:
    """One trial's accept_len at ``context`` (the mean over its planned concurrencies), at its
    knob's ``value``; None where the trial never meant to measure that context."""
    planned = [c for c in group.concurrencies if group.planned(trial, context, c)]
    if not planned:
        return None  # a screen that never meant to measure this context
    points = [group.point(trial, context, c) for c in planned]
    values = [p.accept_len for p in points if p is not None and p.accept_len]
    flagged = any(p.flags for p in points if p is not None)
    mean = sum(values) / len(values) if values else None
    return svg.Mark(
        value,
        mean,
        "failed" if mean is None else ("flagged" if flagged else "ok"),
        f"{group.display(trial)}, context {context}: "
        + (
            f"accept_len {mean:.2f} (mean over concurrencies)"
            if mean is not None
            else f"no result ({trial.state}: {trial.cause})"
        ),
    )


def _accept_vs_knob(group: HostTypeGroup, knob: str) -> tuple[str, str]:
    """The panel of accept_len against the swept ``knob``, one series per context, and its
    legend's items."""
    series = []
    for index, context in enumerate(group.contexts):
        marks = []
        for trial in group.trials:
            value = trial.config.get(knob)
            if not isinstance(value, int | float) or isinstance(value, bool):
                continue
            mark = _accept_mark(group, trial, context, float(value))
            if mark is not None:
                marks.append(mark)
        series.append(svg.Series(f"context {context}", _context_color(index), tuple(marks)))
    whole = all(isinstance(t.config.get(knob), int) for t in group.trials if knob in t.config)
    panel = svg.xy_panel(
        series,
        title=f"accept_len vs {knob}",
        x_label=knob,
        y_label="accept_len",
        y_zero=False,
        x_integer=whole,
    )
    legend_items = "".join(
        f'<span><span class="swatch" style="background:{_context_color(i)}"></span>'
        f"context {c}</span>"
        for i, c in enumerate(group.contexts)
    )
    return panel, legend_items


def _throughput_vs_accept(group: HostTypeGroup, colors: dict[str, str]) -> list[str]:
    """Per context, aggregate output tok/s against accept_len: one mark per concurrency."""
    panels = []
    for context in group.contexts:
        series = []
        for trial in group.trials:
            scatter = tuple(
                svg.Mark(
                    p.accept_len, p.output_tok_s, _status(trial, p), _point_title(group, trial, p)
                )
                for conc in group.concurrencies
                if (p := group.point(trial, context, conc)) is not None
                and p.accept_len is not None
                and p.output_tok_s is not None
            )
            if scatter:
                series.append(
                    svg.Series(group.display(trial), colors[trial.key], scatter, connect=False)
                )
        if series:
            panels.append(
                svg.xy_panel(
                    series,
                    title=f"tok/s vs accept_len, context {context}",
                    x_label="accept_len",
                    y_label="aggregate output tok/s",
                )
            )
    return panels


def accept_figure(group: HostTypeGroup, colors: dict[str, str]) -> str | None:
    panels = []
    legend_items = ""
    knob = _sweep_knob(group)
    if knob is not None:
        panel, legend_items = _accept_vs_knob(group, knob)
        panels.append(panel)
    panels.extend(_throughput_vs_accept(group, colors))
    if not panels:
        return None
    caption = (
        "accept_len (the most tightly scoped source: meta_info, else /metrics, else the "
        "journal) against the swept knob, and against throughput (one mark per concurrency)."
    )
    legend = f'<div class="legend">{legend_items}</div>' if legend_items else ""
    return _figure(panels, caption, prefix=legend)


def ttft_figure(group: HostTypeGroup, colors: dict[str, str]) -> str | None:
    panels = []
    for context in group.contexts:
        groups = []
        for conc in group.concurrencies:
            boxes = []
            for trial in group.trials:
                if not group.planned(trial, context, conc):
                    continue
                point = group.point(trial, context, conc)
                samples = point.ttft_samples_s if point is not None else ()
                boxes.append(
                    svg.Box(
                        group.display(trial),
                        colors[trial.key],
                        tuple(samples),
                        _status(trial, point) if samples else "failed",
                        "" if samples else _point_title(group, trial, point),
                    )
                )
            groups.append((f"c={conc}", boxes))
        panels.append(
            svg.box_panel(
                groups,
                title=f"TTFT, context {context} tokens",
                x_label="concurrency",
                y_label="TTFT (s, log)",
            )
        )
    if not panels:
        return None
    return _figure(
        panels,
        "TTFT distribution of the measured requests: box p25-p75, line the median, whiskers "
        "p10-p90; one box per trial, in its config's legend colour.",
    )


def _figure(panels: Sequence[str], caption: str, *, prefix: str = "") -> str:
    return (
        f'<figure>{prefix}<div class="panels">{"".join(panels)}</div>'
        f"<figcaption>{esc(caption)}</figcaption></figure>"
    )


# --- the answer ----------------------------------------------------------------------------


def convergence_figure(answer: Answer) -> str | None:
    """The answer so far against restarts spent on the host type (a cross while nothing
    valid): the config the answer would have named after each, with its estimate; the last
    mark is the answer's own number."""
    if not answer.convergence:
        return None
    metric = answer.objective.metric
    marks = tuple(
        svg.Mark(
            float(step.restarts),
            step.best,
            "ok" if step.best is not None else "failed",
            f"after {plural(step.restarts, 'restart')}: "
            + (
                f"{step.label}, {fmt.metric(metric, step.best)}"
                if step.best is not None
                else "no valid config yet"
            ),
        )
        for step in answer.convergence
    )
    unit = fmt.metric_unit(metric).strip()
    panel = svg.xy_panel(
        [svg.Series("the answer so far", svg.color_for(0), marks)],
        title=f"The answer so far vs restarts, {answer.host_type}",
        x_label=f"restarts on {answer.host_type}",
        y_label=f"{metric} of the config named" + (f" ({unit})" if unit else ""),
        y_zero=False,
        x_zero=True,
        x_integer=True,
    )
    return _figure(
        [panel],
        f"After each restart on the host type (in the order restarts happened), the config "
        f"the answer would have named from the restarts so far and its {metric} estimate at "
        f"{where(answer.objective)}, as the contenders table shows it; a cross: no valid "
        "config yet.",
    )


def _space_cell(answer: Answer, cell: SpaceCell, color: Callable[[float], str]) -> svg.HeatCell:
    metric = answer.objective.metric
    contender = cell.contender
    if cell.state == "explored" and contender is not None:
        estimate = contender.estimate
        title = (
            f"{contender.label}: {fmt.metric(metric, estimate.value)}"
            f"{fmt.interval(estimate.ci95, lambda v: fmt.metric_number(metric, v))}, "
            f"{plural(estimate.restarts, 'restart')}"
        )
        if contender.violations:
            title += "; breaks " + ", ".join(contender.violations)
        if estimate.noisy:
            title += "; noisy"
        if cell.configs > 1:
            title += f" (first by rank of {cell.configs} configs with these values)"
        if cell.failed:
            title += f"; {len(cell.failed)} failed here"
        return svg.HeatCell(
            estimate.value,
            fmt.metric_number(metric, estimate.value),
            "flagged" if contender.violations or estimate.noisy else "ok",
            title,
            explored=True,
            best=cell.is_best,
        )
    if cell.state == "failed":
        causes = "; ".join(f"{f.label}: {f.cause or 'unknown'}" for f in cell.failed)
        return svg.HeatCell(None, "FAILED", "failed", f"failed, never measured ({causes})")
    return svg.HeatCell(None, "", "unexplored", "not explored")


def space_figure(answer: Answer) -> str | None:
    """The explored space over two knobs: estimates colored (darker is better), the
    answer's config framed, failed configs hatched, unexplored points blank."""
    grid = explored_space(answer)
    if grid is None:
        return None
    values = estimates(grid)
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    span = (high - low) or 1.0

    def color(value: float) -> str:
        t = (value - low) / span
        # The worst measured point still gets a tint: white is reserved for "not explored".
        return svg.scale_color(0.12 + 0.88 * (1.0 - t if answer.objective.minimized else t))

    chart = svg.heatmap(
        list(grid.rows),
        list(grid.columns),
        [[_space_cell(answer, cell, color) for cell in line] for line in grid.cells],
        title=f"Explored space, {answer.host_type}",
        color=color,
        row_label=grid.row_knob,
        column_label=grid.column_knob,
    )
    return _figure([chart], tables.space_note(grid, answer))


# --- the answer across load ----------------------------------------------------------------


def config_colors(answer: Answer, drawn: Sequence[str] = ()) -> dict[str, str]:
    """One colour per config across the across-load pictures: the configs named at some load
    first (the band chart's few get the most distinct colours), then the other contenders,
    then whatever else is ``drawn`` (by key: a measured schedule, which no answer contends
    with); the baseline its usual grey."""
    configs = [c.config for each in answer.per_load if (c := named(each)) is not None]
    configs += [c.config for each in answer.per_load for c in each.contenders]
    configs += [c.config for c in answer.contenders]
    colors: dict[str, str] = {}
    for key in [*(config_key(config) for config in configs), *drawn]:
        if key not in colors:
            colors[key] = (
                svg.BASELINE_COLOR if key == config_key({}) else svg.color_for(len(colors))
            )
    return colors


def _load_band(row: LoadRow, colors: dict[str, str]) -> svg.LoadBand:
    answer = row.answer
    best = row.named
    metric = answer.objective.metric
    words_at = load_line(answer)
    if best is None:
        return svg.LoadBand(
            row.at,
            row.start,
            row.end,
            "no valid config",
            svg.FAIL_COLOR,
            None,
            None,
            "",
            row.cell.load,
            row.range_words(),
            title=words_at,
        )
    value = fmt.metric_number(metric, best.estimate.value) + fmt.interval(
        best.estimate.ci95, lambda v: fmt.metric_number(metric, v)
    )
    return svg.LoadBand(
        row.at,
        row.start,
        row.end,
        best.label,
        colors.get(config_key(best.config), svg.color_for(0)),
        best.estimate.value,
        best.estimate.ci95,
        value,
        row.cell.load,
        row.range_words(),
        tie=answer.verdict == "tie",
        title=words_at + (f" ({row.range_words()} in the schedule)" if row.band else ""),
    )


def band_figure(answer: Answer, colors: dict[str, str]) -> str:
    """Which config the answer names at each load, with its estimate and 95% interval, over
    the stretch of load it is named for (the schedule's band where there is one)."""
    rows = load_rows(answer)
    metric = answer.objective.metric
    unit = fmt.metric_unit(metric).strip()
    rate = any(row.cell.rate is not None for row in rows)
    chart = svg.band_chart(
        [_load_band(row, colors) for row in rows],
        title=f"The config named at each load, {answer.host_type}",
        x_label="offered rate (req/s, log)" if rate else "concurrency: running batch size (log)",
        y_label=f"{metric} of the config named" + (f" ({unit})" if unit else ""),
    )
    stretch = (
        "its schedule band (the running batch sizes it covers)"
        if answer.schedule is not None
        else "halfway (geometrically) to the neighbouring loads"
    )
    return _figure(
        [chart],
        f"Per load: the config named (its colour, named in the strip) over {stretch}; the "
        f"mark is its {metric} estimate at the load it was measured at, the whiskers its 95% "
        "interval. A hollow ringed mark and a dashed strip: a tie at that load (the strip names "
        "the first by rank).",
    )


def front_figure(points: Sequence[FrontPoint], colors: dict[str, str]) -> str | None:
    """Total output tok/s against tok/s per user: one curve per config through its loads, the
    Pareto front highlighted."""
    if not points:
        return None
    by_config: dict[str, list[FrontPoint]] = {}
    for point in points:
        by_config.setdefault(point.key, []).append(point)

    def mark(point: FrontPoint) -> svg.Mark:
        front = ", on the Pareto front" if point.on_front else ""
        return svg.Mark(
            point.per_user,
            point.total,
            title=f"{point.label} at {point.cell.load}: {fmt.rate(point.total)} tok/s total, "
            f"{fmt.rate(point.per_user)} tok/s per user ({point.source}){front}",
        )

    series = [
        svg.Series(
            group[0].label,
            colors.get(key, svg.color_for(0)),
            tuple(mark(p) for p in group),
            dashed=key == config_key({}),
            ordered=True,
        )
        for key, group in by_config.items()
    ]
    users = [p.per_user for p in points]
    totals = [p.total for p in points]
    panel = svg.xy_panel(
        series,
        title="Total vs per-user throughput",
        x_label="tok/s per user",
        y_label="total output tok/s",
        x_log=min(users) > 0 and max(users) / min(users) > 8,
        y_log=min(totals) > 0 and max(totals) / min(totals) > 8,
        front=[mark(p) for p in points if p.on_front],
        frame=svg.Frame(width=520, height=340),
    )
    return _figure(
        [panel],
        "Every measured config at each load: total output tokens/s against tokens/s per user "
        "(the median per-request decode rate, else the total over the concurrency); each curve "
        "runs through a config's loads. Ringed on a broad line: the Pareto front, where no "
        "other point gives more of both.",
    )


def _schedule_html(answer: Answer, said: AcrossLoadWords, sub: str) -> str:
    """The schedule: its words, its native form in the engine's terms, and its verdict table
    once measured."""
    parts = [f"<{sub}>The schedule</{sub}>"]
    parts += [f"<p>{esc(line)}</p>" for line in said.schedule]
    schedule = answer.schedule
    if schedule is not None and schedule.native is not None:
        for what, text in native_form(schedule.native):
            parts.append(f'<p class="note">{esc(what)}:</p><pre class="native">{esc(text)}</pre>')
    parts += [f"<p>{esc(line)}</p>" for line in said.verdict]
    verdict = schedule_verdict_table(answer)
    if verdict is not None:
        parts.append(table_html(verdict, heading=_deeper(sub)))
    return "".join(parts)


def _deeper(heading: str) -> str:
    return f"h{min(int(heading[1]) + 1, 6)}"


def across_load_html(report: SweepReport, answer: Answer, heading: str) -> str:
    """An across-load answer's opening: the answer at each load in words and as a band chart,
    where the winner changes, the schedule, and the front of the measured configs."""
    said = across_load_words(answer)
    if said is None:
        return ""
    group = next((g for g in report.groups if g.host_type == answer.host_type), None)
    points = front_points(group, answer) if group is not None else ()
    colors = config_colors(answer, [p.key for p in points])
    legend = "".join(
        f'<span><span class="swatch{" dashed" if key == config_key({}) else ""}" '
        f'style="background:{color}"></span>{esc(label)}</span>'
        for key, color, label in _legend_items(answer, colors, points)
    )
    figures = [band_figure(answer, colors), front_figure(points, colors)]
    loads = "".join(f"<li>{esc(line)}</li>" for line in said.loads)
    return (
        f'<div class="across"><{heading}>The answer across load on {esc(answer.host_type)}'
        f"</{heading}><ul>{loads}</ul><p>{esc(said.changes)}</p>"
        f'<div class="legend">{legend}</div>'
        f'<div class="figures">{"".join(f for f in figures if f)}</div>'
        + table_html(tables.per_load_table(answer), heading=_deeper(heading))
        + _schedule_html(answer, said, _deeper(heading))
        + "</div>"
    )


def _across_opening(report: SweepReport, answer: Answer, heading: str) -> str:
    """The across-load block, then the heading of the answer over all loads (its details
    follow); empty for an answer at one load."""
    block = across_load_html(report, answer, heading)
    if not block:
        return ""
    return f"{block}<{heading}>Over all loads on {esc(answer.host_type)}</{heading}>"


def _legend_items(
    answer: Answer, colors: dict[str, str], points: Sequence[FrontPoint]
) -> list[tuple[str, str, str]]:
    """(config key, colour, name) of every config the across-load pictures draw."""
    names = {config_key(c.config): c.label for each in answer.per_load for c in each.contenders}
    names.update((p.key, p.label) for p in points if p.key not in names)
    return [(key, color, names[key]) for key, color in colors.items() if key in names]


def answers_html(report: SweepReport, heading: str) -> str:
    """The answer in words per host type (per cell without an objective), with its
    convergence and explored-space pictures; empty without answers."""
    if not report.answers:
        return ""
    parts = [f'<section class="answers"><{heading}>Answer</{heading}>']
    shown = [readable(a) for a in report.answers]
    if len(shown) > 1:
        parts.append(table_html(tables.answers_table(shown)))
    sub = _deeper(heading)
    for answer in shown:
        said = answer_words(answer)
        details = "".join(f"<li>{esc(d)}</li>" for d in said.details)
        figures = [convergence_figure(answer), space_figure(answer)]
        parts.append(
            f'<div class="answer {esc(answer.verdict)}"><p class="headline">'
            f"{esc(said.headline)}</p>{_across_opening(report, answer, sub)}<ul>{details}</ul>"
            f'<div class="figures">{"".join(f for f in figures if f)}</div></div>'
        )
    parts.append("</section>")
    return "".join(parts)


# --- the page ------------------------------------------------------------------------------


def _header(report: SweepReport) -> str:
    states: dict[str, int] = {}
    for trial in report.trials:
        states[trial.state] = states.get(trial.state, 0) + 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    return (
        f'<p class="meta">Sweep <b>{esc(report.name)}</b> (id {report.id}): '
        f"<b>{esc(report.state)}</b> · model <code>{esc(report.model or fmt.MISSING)}</code> · "
        f"started {esc(fmt.when(report.started_at))}, finished {esc(fmt.when(report.finished_at))}"
        f" ({esc(fmt.duration(report.started_at, report.finished_at))}) · "
        f"{plural(len(report.trials), 'trial')} ({esc(counts or 'none')})</p>"
    )


def _flag_legend(reports: Sequence[SweepReport]) -> str:
    used = {f for r in reports for t in r.trials for p in t.throughput for f in p.flags}
    ordered = [f for f in FLAGS if f in used] + sorted(used - set(FLAGS))
    if not ordered:
        return ""
    items = "; ".join(
        f"<b>{esc(flag_info(f).code)}</b> {esc(flag_info(f).meaning)}" for f in ordered
    )
    return (
        f'<div class="keys">Flags on numbers: {items}. A point flagged E, N, C or S wins a cell '
        "only if the cell has no clean point.</div>"
    )


def _failed_html(group: HostTypeGroup) -> str:
    failed = tables.failed_trials(group)
    if not failed:
        return "<h3>Failed trials</h3><p>None.</p>"
    parts = ["<h3>Failed trials</h3>"]
    for f in failed:
        parts.append(
            f"<p><b>{esc(f.label)}</b> on <code>{esc(f.host)}</code>, attempt {f.attempt}: "
            f'{esc(f.state)} (<code class="cause">{esc(f.cause or "unknown")}</code>)</p>'
        )
        if f.lines:
            parts.append(f"<pre>{esc(chr(10).join(f.lines))}</pre>")
    return "".join(parts)


def _warnings_html(report: SweepReport, heading: str) -> str:
    grouped = tables.warning_groups([(w.kind, w.host, w.trial, w.message) for w in report.warnings])
    if not grouped:
        return f"<{heading}>Warnings</{heading}><p>None.</p>"
    items = "".join(
        f"<li><b>{esc(kind)}</b><ul>{''.join(f'<li>{esc(m)}</li>' for m in messages)}</ul></li>"
        for kind, messages in grouped.items()
    )
    return f'<{heading}>Warnings</{heading}><ul class="warnings">{items}</ul>'


def group_html(report: SweepReport, group: HostTypeGroup, heading: str, sub: str) -> str:
    colors = _colors(group)
    hosts = ", ".join(h.name for h in group.hosts) or fmt.MISSING
    parts = [
        f'<section class="group"><{heading}>Host type <code>{esc(group.host_type)}</code> '
        f"(hosts: {esc(hosts)})</{heading}>",
        *(
            table_html(t, heading=sub)
            for t in tables.best_tables(group, report.answers_for(group.host_type))
        ),
        f"<{sub}>Plots</{sub}>",
        _legend(group, colors),
        _keys(),
    ]
    figures = [
        throughput_figure(group, colors),
        speedup_figure(group),
        accept_figure(group, colors),
        ttft_figure(group, colors),
    ]
    # Side by side as far as the window allows; each figure stays whole.
    parts.append(f'<div class="figures">{"".join(f for f in figures if f)}</div>')
    parts.append(table_html(tables.configs_table(group), heading=sub))
    parts += [table_html(t, heading=sub) for t in tables.throughput_tables(group)]
    parts += [table_html(t, heading=sub) for t in tables.rate_tables(group)]
    per_workload = tables.workload_table(group)
    if per_workload is not None:
        parts.append(table_html(per_workload, heading=sub))
    parts += [
        table_html(tables.speedup_table(group), heading=sub),
        table_html(tables.coding_table(group), heading=sub),
        _failed_html(group),
        table_html(tables.lifecycle_table(group), heading=sub),
        table_html(tables.provenance_table(group, report.model), heading=sub),
        "</section>",
    ]
    return "".join(parts)


def render_html(reports: Sequence[SweepReport]) -> str:
    """One sweep's report, or several side by side (comparison first, then each sweep)."""
    names = " vs ".join(r.name for r in reports)
    title = f"Sweep report: {names}" if len(reports) == 1 else f"Sweep comparison: {names}"
    body = [f"<h1>{esc(title)}</h1>"]
    body += [_header(r) for r in reports]
    if len(reports) == 1:
        body.append(answers_html(reports[0], "h2"))
    body.append(_flag_legend(reports))
    if len(reports) == 1:
        report = reports[0]
        body += [group_html(report, g, "h2", "h3") for g in report.groups]
        body.append(_warnings_html(report, "h2"))
    else:
        for comparison in compare(reports):
            body.append(f"<h2>Comparison: {esc(comparison.title)}</h2>")
            body += [table_html(t) for t in tables.comparison_tables(comparison)]
        for report in reports:
            body.append(f"<h2>Sweep {esc(report.name)}</h2>")
            body.append(answers_html(report, "h3"))
            body += [group_html(report, g, "h2", "h3") for g in report.groups]
            body.append(_warnings_html(report, "h3"))
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'
        f"<title>{esc(title)}</title><style>{CSS}</style></head><body>"
        + "".join(body)
        + "</body></html>\n"
    )
