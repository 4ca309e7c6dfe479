"""The hand-written SVG charts: valid XML, and a missing value is never drawn as zero."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from orchestrator.report import svg

NS = {"s": "http://www.w3.org/2000/svg"}


def _parse(text: str) -> ET.Element:
    return ET.fromstring(text)


def test_nice_ticks_cover_the_range_with_round_steps() -> None:
    assert svg.nice_ticks(0, 2262) == [0, 500, 1000, 1500, 2000, 2500]
    assert svg.nice_ticks(3.2, 8.6)[0] <= 3.2 and svg.nice_ticks(3.2, 8.6)[-1] >= 8.6
    assert svg.log_ticks(0.012, 7.8) == [0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0]


def test_missing_points_are_crosses_in_the_no_result_strip_not_zeros() -> None:
    series = [
        svg.Series(
            "budget=8",
            "#4e79a7",
            (
                svg.Mark(1, 220.0),
                svg.Mark(4, None, "failed", "budget=8: no result"),
                svg.Mark(16, 2000.0, "flagged", "E,T"),
            ),
        )
    ]
    root = _parse(
        svg.xy_panel(series, title="t", x_label="c", y_label="tok/s", x_categories=[1, 4, 16])
    )
    failed = root.findall(".//s:g[@class='mark failed']", NS)
    assert len(failed) == 1
    assert failed[0].find("s:title", NS) is not None
    flagged = root.findall(".//s:g[@class='mark flagged']", NS)
    assert len(flagged) == 1
    circles = root.findall(".//s:circle[@class='mark']", NS)
    assert len(circles) == 1  # only the real value is a plain dot
    # The line breaks at the gap instead of diving to zero.
    assert root.findall(".//s:polyline", NS) == []
    zero_tick = next(t for t in root.iter("{http://www.w3.org/2000/svg}text") if t.text == "0")
    cross_line = failed[0].find("s:line", NS)
    assert cross_line is not None
    assert float(cross_line.attrib["y1"]) > float(zero_tick.attrib["y"])  # below the zero line


def test_heatmap_hatches_cells_without_a_value() -> None:
    root = _parse(
        svg.heatmap(
            ["budget=8", "bad"],
            ["60/c1", "60/c4"],
            [
                [svg.HeatCell(1.5, "1.50×"), svg.HeatCell(0.9, "0.90×!", "flagged")],
                [svg.HeatCell(None, "FAILED", "failed"), svg.HeatCell(None, "—")],
            ],
            title="speedup",
        )
    )
    fills = [r.attrib["fill"] for r in root.findall(".//s:g/s:rect", NS)]
    assert fills.count("url(#hatch)") == 2
    assert svg.heat_color(1.0) == "#ffffff"
    assert svg.heat_color(2.5) != svg.heat_color(0.7)


def test_box_panel_draws_samples_and_marks_empty_ones() -> None:
    root = _parse(
        svg.box_panel(
            [("c=1", [svg.Box("a", "#111111", (0.01, 0.02, 0.03)), svg.Box("b", "#222222", ())])],
            title="TTFT",
            x_label="concurrency",
            y_label="s",
        )
    )
    assert len(root.findall(".//s:g[@class='box ok']", NS)) == 1
    assert len(root.findall(".//s:g[@class='mark failed']", NS)) == 1


def test_text_is_escaped() -> None:
    root = _parse(svg.xy_panel([], title="<b>&", x_label="x", y_label="y"))
    assert any(t.text == "<b>&" for t in root.iter("{http://www.w3.org/2000/svg}text"))


WIDE_BOLD_EM = 0.68
"""DejaVu Sans Bold's average advance over mixed-case words, in em: among the widest fonts a
browser's ``system-ui`` resolves to (checked independently of the chart's own estimate)."""


def _title_fits(root: ET.Element) -> tuple[float, float, float]:
    """The left and right of the title's estimated extent, and the viewBox's width."""
    width = float(root.attrib["viewBox"].split()[2])
    title = next(root.iter("{http://www.w3.org/2000/svg}text"))
    assert title.attrib["text-anchor"] == "middle" and title.text
    half = len(title.text) * float(title.attrib["font-size"]) * WIDE_BOLD_EM / 2
    center = float(title.attrib["x"])
    return center - half, center + half, width


def test_a_small_explored_space_is_wide_enough_for_its_title() -> None:
    # The demo's picture: two top-k columns, and a title as wide as the grid (it was clipped).
    cells = [[svg.HeatCell(1.0, "4,100"), svg.HeatCell(None, "", "unexplored")]] * 4
    chart = svg.heatmap(
        ["4", "8", "16", "32"],
        ["2", "4"],
        cells,
        title="Explored space, sim-gpu",
        row_label="budget",
        column_label="topk",
    )
    left, right, width = _title_fits(_parse(chart))
    assert left >= 0 and right <= width
    title = "Explored space, " + "x" * 60
    long = svg.heatmap(["4"], ["2"], [[svg.HeatCell(1.0, "1")]], title=title)
    left, right, width = _title_fits(_parse(long))
    assert left >= 0 and right <= width


def test_a_panel_widens_for_a_long_title_and_keeps_its_plot() -> None:
    title = "Output throughput at context 1024, concurrency 4, on every host type of the sweep"
    for chart in (
        svg.xy_panel([], title=title, x_label="x", y_label="y"),
        svg.box_panel([("c=1", [svg.Box("a", "#111111", (0.01,))])], title=title, x_label="c",
                      y_label="s"),
    ):
        left, right, width = _title_fits(_parse(chart))
        assert left >= 0 and right <= width
    assert svg.xy_panel([], title="t", x_label="x", y_label="y").count('viewBox="0 0 420 300"')
