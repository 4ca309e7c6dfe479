"""What the HTML report's plots said that was not so: a screen's cells it never meant to
measure drawn as failures in the red "none" strip; one config's restarts in as many legend
colours; draft-path column labels running into each other; a restart axis ticked at 2.5; a
goodput axis down to -2."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence

from orchestrator.report import svg
from orchestrator.report.html import _colors, _legend, throughput_figure, ttft_figure
from orchestrator.report.model import AttemptView, HostTypeGroup, PointView, TrialView
from orchestrator.store import MatrixCell, ThroughputMetrics, ThroughputPoint, TrialPlan

NS = {"s": "http://www.w3.org/2000/svg"}
FULL = ((60, 1), (60, 4), (1024, 1), (1024, 4))


def _trial(
    key: str,
    config: Mapping[str, object],
    values: Mapping[tuple[int, int], float],
    *,
    cells: Sequence[tuple[int, int]] = FULL,
    state: str = "done",
    host: str = "h1",
) -> TrialView:
    points = tuple(
        PointView(
            ThroughputPoint(ctx, conc, ThroughputMetrics(output_tok_s=value)),
            (),
            ttft_samples_s=(0.01, 0.02, 0.03),
        )
        for (ctx, conc), value in values.items()
    )
    return TrialView(
        key=key,
        host=host,
        host_type="gpu",
        config=dict(config),
        is_baseline=not config,
        ordinal=0,
        label=" ".join(f"{k}={v}" for k, v in config.items()) or "baseline",
        attempts=(
            AttemptView(1, state, "bad-flag" if state == "failed" else None, {}, 0, 1, None),  # type: ignore[arg-type]
        ),
        throughput=points,
        coding=(),
        plan=TrialPlan(cells=tuple(MatrixCell(c, n) for c, n in cells), rounds=2),
    )


def _group(*trials: TrialView) -> HostTypeGroup:
    return HostTypeGroup("gpu", (), trials, contexts=(60, 1024), concurrencies=(1, 4))


def _panels(figure: str) -> dict[str, ET.Element]:
    roots = [ET.fromstring(s) for s in re.findall(r"<svg.*?</svg>", figure, re.S)]
    return {root.attrib["aria-label"]: root for root in roots}


def _crosses(root: ET.Element) -> int:
    return len(root.findall(".//s:g[@class='mark failed']", NS))


GROUP = _group(
    _trial("base", {}, {cell: 100.0 for cell in FULL}),
    _trial("screen", {"budget": 4}, {(1024, 4): 250.0}, cells=((1024, 4),)),
    _trial("bad", {"budget": 8, "legacy": 1}, {}, state="failed"),
)


def test_cells_a_screen_never_meant_to_measure_are_no_failure() -> None:
    panels = _panels(throughput_figure(GROUP, _colors(GROUP)))
    assert _crosses(panels["context 60 tokens"]) == 2  # the failed config's two, no screen's
    assert _crosses(panels["context 1024 tokens"]) == 2
    ttft = _panels(ttft_figure(GROUP, _colors(GROUP)) or "")
    assert _crosses(ttft["TTFT, context 60 tokens"]) == 2


def test_a_config_restarted_three_times_is_one_legend_entry_in_one_colour() -> None:
    group = _group(
        _trial("base", {}, {cell: 100.0 for cell in FULL}),
        *(_trial(f"b8~r{r}", {"budget": 8}, {cell: 200.0 + r for cell in FULL}) for r in (1, 2, 3)),
        _trial("b4", {"budget": 4}, {cell: 150.0 for cell in FULL}),
    )
    colors = _colors(group)
    assert colors["b8~r1"] == colors["b8~r2"] == colors["b8~r3"] != colors["b4"]
    legend = _legend(group, colors)
    assert legend.count("budget=8") == 1 and "3 trials" in legend
    assert legend.count("swatch") == 3


def _tick_labels(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]


def _line(marks: Sequence[svg.Mark], *, counts: bool = False) -> ET.Element:
    """One series over restarts, as the convergence figure draws the answer so far."""
    series = [svg.Series("answer", "#000", tuple(marks))]
    return ET.fromstring(
        svg.xy_panel(
            series,
            title="t",
            x_label="restarts",
            y_label="v",
            y_zero=False,
            x_zero=counts,
            x_integer=counts,
        )
    )


def test_a_restart_axis_ticks_at_whole_restarts() -> None:
    marks = [svg.Mark(float(x), 1000.0 + 40 * x) for x in range(1, 6)]
    root = _line(marks, counts=True)
    assert "2.5" not in _tick_labels(root)
    assert svg.nice_ticks(0, 5.5, integer=True) == [0, 2, 4, 6]
    assert svg.nice_ticks(0, 2.5, integer=True) == [0, 1, 2, 3]


def test_a_goodput_axis_never_runs_below_zero() -> None:
    root = _line([svg.Mark(1, 0.3), svg.Mark(2, 5.3), svg.Mark(3, 4.0)])  # req/s
    numbers = [float(t) for t in _tick_labels(root) if re.fullmatch(r"-?[\d.]+", t)]
    assert numbers and min(numbers) >= 0


def test_heatmap_columns_are_as_wide_as_their_labels() -> None:
    columns = ["/models/Kimi-K2.6-DFlash", "/models/Kimi-K2.6-EAGLE3"]
    root = ET.fromstring(
        svg.heatmap(
            ["3", "4"],
            columns,
            [[svg.HeatCell(1.0, "1"), svg.HeatCell(None, "", "unexplored")]] * 2,
            title="Explored space",
            row_label="tokens",
            column_label="draft",
        )
    )
    labels = [t for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text in columns]
    (a, b) = (float(t.attrib["x"]) for t in labels)
    assert b - a >= svg.text_width(columns[0], 11, bold=False)
    row_knob = next(t for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text == "tokens")
    first_left = a - svg.text_width(columns[0], 11, bold=False) / 2
    assert first_left >= float(row_knob.attrib["x"])  # the row knob's name ends before it
