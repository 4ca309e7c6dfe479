"""The report as Markdown: for the terminal and for pasting into a ticket.

GitHub-flavoured tables; a flagged number carries its flag codes in brackets (``412 [E,T]``)
with the legend at the top, a failed trial says FAILED where its numbers would be.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import orchestrator.report.fmt as fmt
import orchestrator.report.tables as tables
from orchestrator.answers import Answer
from orchestrator.report.across import front_points
from orchestrator.report.compare import Comparison, compare
from orchestrator.report.model import FLAGS, SweepReport, flag_codes, flag_info
from orchestrator.report.space import explored_space
from orchestrator.report.words import across_load_words, answer_words, native_form, readable
from orchestrator.types import plural


def _escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _cell(cell: tables.Cell) -> str:
    text = cell.text
    if cell.flags:
        text += f" [{flag_codes(cell.flags)}]"
    if cell.kind == "best" and text:
        text = f"**{text}**"
    return _escape(text)


def table(t: tables.Table) -> list[str]:
    lines = [
        "| " + " | ".join(_escape(h) for h in t.headers) + " |",
        "|" + "|".join("---" for _ in t.headers) + "|",
    ]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    if t.note:
        lines += ["", f"_{t.note}_"]
    return lines


def _used_flags(reports: Iterable[SweepReport]) -> list[str]:
    used = {f for r in reports for t in r.trials for p in t.throughput for f in p.flags}
    known = [f for f in FLAGS if f in used]
    return known + sorted(used - set(known))


def _legend(reports: Sequence[SweepReport]) -> list[str]:
    used = _used_flags(reports)
    if not used:
        return []
    parts = [f"`{flag_info(f).code}` {flag_info(f).meaning}" for f in used]
    return [
        "**Flags** (a point flagged E, N, C or S wins a cell only if the cell has no clean "
        "point): " + "; ".join(parts),
        "",
    ]


def _sweep_header(report: SweepReport) -> list[str]:
    states: dict[str, int] = {}
    for trial in report.trials:
        states[trial.state] = states.get(trial.state, 0) + 1
    counts = ", ".join(f"{n} {s}" for s, n in sorted(states.items()))
    return [
        f"Sweep `{report.name}` (id {report.id}): **{report.state}**; model "
        f"`{report.model or fmt.MISSING}`; started {fmt.when(report.started_at)}, finished "
        f"{fmt.when(report.finished_at)} ({fmt.duration(report.started_at, report.finished_at)}); "
        f"{plural(len(report.trials), 'trial')} ({counts or 'none'}).",
        "",
    ]


def across_load_lines(report: SweepReport, answer: Answer, h: str) -> list[str]:
    """An across-load answer's opening in text: the answer at each load, where the winner
    changes, the per-load table, the schedule (its native form, its verdict once measured)
    and the front of the measured configs as a table; nothing for an answer at one load."""
    said = across_load_words(answer)
    if said is None:
        return []
    lines = [f"{h} The answer across load on {answer.host_type}", ""]
    lines += [f"- {_escape(line)}" for line in said.loads]
    lines += ["", _escape(said.changes), ""]
    per_load = tables.per_load_table(answer)
    lines += [f"{h}# {per_load.title}", "", *table(per_load), ""]
    lines += [f"{h}# The schedule", ""]
    for line in said.schedule:
        lines += [_escape(line), ""]
    schedule = answer.schedule
    if schedule is not None and schedule.native is not None:
        for what, text in native_form(schedule.native):
            lines += [f"{what[0].upper()}{what[1:]}:", "", "```", text, "```", ""]
    for line in said.verdict:
        lines += [_escape(line), ""]
    verdict = tables.schedule_verdict_table(answer)
    if verdict is not None:
        lines += [f"{h}# {verdict.title}", "", *table(verdict), ""]
    group = next((g for g in report.groups if g.host_type == answer.host_type), None)
    points = front_points(group, answer) if group is not None else ()
    if points:
        front = tables.front_table(points, answer)
        lines += [f"{h}# {front.title}", "", *table(front), ""]
    return lines


def answer_sections(report: SweepReport, level: int = 2) -> list[str]:
    """The answer first: per host type (per cell without an objective) the decision in
    words, how best-so-far moved with restarts, and the explored space as a table (Markdown
    has no pictures; the HTML report draws the same as SVG). Nothing without answers."""
    if not report.answers:
        return []
    h = "#" * level
    lines = [f"{h} Answer", ""]
    shown = [readable(a) for a in report.answers]
    if len(shown) > 1:
        glance = tables.answers_table(shown)
        lines += [f"{h}# {glance.title}", "", *table(glance), ""]
    for answer in shown:
        said = answer_words(answer)
        lines += [f"**{_escape(said.headline)}**", ""]
        across = across_load_lines(report, answer, f"{h}#")
        if across:
            across += [f"{h}# Over all loads on {answer.host_type}", ""]
        lines += across
        lines += [f"- {_escape(detail)}" for detail in said.details]
        lines.append("")
        if answer.convergence:
            steps = tables.convergence_table(answer)
            lines += [f"{h}# {steps.title}", "", *table(steps), ""]
        grid = explored_space(answer)
        if grid is not None:
            explored = tables.space_table(grid, answer)
            lines += [f"{h}# {explored.title}", "", *table(explored), ""]
    return lines


def sweep_sections(report: SweepReport, level: int = 2) -> list[str]:
    """Every section of one sweep's report after its answer, headings starting at ``level``."""
    h = "#" * level
    lines: list[str] = []
    for group in report.groups:
        hosts = ", ".join(host.name for host in group.hosts) or fmt.MISSING
        lines += [f"{h} Host type `{group.host_type}` (hosts: {hosts})", ""]
        configs = tables.configs_table(group)
        lines += [f"{h}# {configs.title}", "", *table(configs), ""]
        for t in tables.throughput_tables(group):
            lines += [f"{h}# Throughput, {t.title.lower()}", "", *table(t), ""]
        for t in tables.rate_tables(group):
            lines += [f"{h}# {t.title}", "", *table(t), ""]
        per_workload = tables.workload_table(group)
        if per_workload is not None:
            lines += [f"{h}# {per_workload.title}", "", *table(per_workload), ""]
        for t in (
            *tables.best_tables(group, report.answers_for(group.host_type)),
            tables.speedup_table(group),
            tables.coding_table(group),
        ):
            lines += [f"{h}# {t.title}", "", *table(t), ""]
        failed = tables.failed_trials(group)
        lines += [f"{h}# Failed trials", ""]
        if not failed:
            lines += ["None.", ""]
        for f in failed:
            lines += [
                f"- **{_escape(f.label)}** on `{f.host}`, attempt {f.attempt}: "
                f"{f.state} (`{f.cause or 'unknown'}`)",
            ]
            if f.lines:
                lines += ["", "  ```", *(f"  {line}" for line in f.lines), "  ```"]
        lines.append("")
        for t in (
            tables.lifecycle_table(group),
            tables.provenance_table(group, report.model),
        ):
            lines += [f"{h}# {t.title}", "", *table(t), ""]
    lines += [f"{h} Warnings", ""]
    grouped = tables.warning_groups([(w.kind, w.host, w.trial, w.message) for w in report.warnings])
    if not grouped:
        lines += ["None.", ""]
    for kind, messages in grouped.items():
        lines += [f"- **{kind}**"]
        lines += [f"  - {_escape(m)}" for m in messages]
    lines.append("")
    return lines


def comparison_sections(comparisons: Sequence[Comparison]) -> list[str]:
    lines: list[str] = []
    for comparison in comparisons:
        lines += [f"## Comparison: {comparison.title}", ""]
        for t in tables.comparison_tables(comparison):
            lines += [f"### {t.title}", "", *table(t), ""]
    return lines


def render_markdown(reports: Sequence[SweepReport]) -> str:
    """One sweep's report, or several side by side (comparison first, then each sweep)."""
    if len(reports) == 1:
        report = reports[0]
        lines = [f"# Sweep report: {report.name}", "", *_sweep_header(report)]
        lines += [*answer_sections(report), *_legend(reports), *sweep_sections(report)]
    else:
        names = " vs ".join(r.name for r in reports)
        lines = [f"# Sweep comparison: {names}", ""]
        for report in reports:
            lines += _sweep_header(report)
        lines += _legend(reports)
        lines += comparison_sections(compare(reports))
        for report in reports:
            lines += [f"## Sweep `{report.name}`", "", *answer_sections(report, level=3)]
            lines += sweep_sections(report, level=3)
    return "\n".join(lines).rstrip() + "\n"
