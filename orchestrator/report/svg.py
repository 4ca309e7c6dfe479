"""Small, dependency-free SVG charts for the HTML report: lines, scatter, heatmap, boxes.

Hand-written so the report stays one self-contained file with no JavaScript and no network,
and so a missing value can never be drawn as zero: a point without a value (failed trial,
failed point) is drawn as a red cross in a "no result" strip under the axis, and a point
whose numbers carry quality flags is drawn hollow with an amber ring. Every mark has a
``<title>`` (the browser's tooltip) saying what it is.
"""

from __future__ import annotations

import dataclasses
import html
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

PALETTE = (
    "#4e79a7",
    "#f28e2b",
    "#59a14f",
    "#b07aa1",
    "#e15759",
    "#76b7b2",
    "#edc948",
    "#9c755f",
    "#ff9da7",
    "#17becf",
)
BASELINE_COLOR = "#555555"
FLAG_COLOR = "#d97706"
FAIL_COLOR = "#c81e1e"
GRID = "#e5e7eb"
AXIS = "#6b7280"
FONT = "font-family:system-ui,-apple-system,'Segoe UI',Roboto,sans-serif"

MarkStatus = Literal["ok", "flagged", "failed"]

TITLE_SIZE = 13
"""A panel title's font size (px), drawn bold (weight 600)."""
TITLE_MARGIN = 8
"""Room (px) kept free on each side of a centred title."""
EM_PER_CHAR = {False: 0.62, True: 0.7}
"""An upper estimate of the average advance of one character, in em, regular and bold: the
widest sans-serif ``system-ui`` resolves to on Linux (DejaVu Sans) averages about 0.6 and,
bold, 0.68 over mixed-case words. A chart measures its title with it so no browser clips it."""


def esc(text: str) -> str:
    return html.escape(text, quote=True)


def color_for(index: int) -> str:
    return PALETTE[index % len(PALETTE)]


def nice_ticks(
    low: float, high: float, count: int = 5, *, integer: bool = False
) -> list[float]:
    """Round tick values covering [low, high] (1, 2, 2.5, 5 x 10^n steps); ``integer``: a
    count's axis (restarts, a knob's whole values), whose steps are whole (no 2.5, none under
    1)."""
    if not math.isfinite(low) or not math.isfinite(high):
        return [0.0, 1.0]
    if high <= low:
        high = low + (abs(low) or 1.0)
    raw = (high - low) / max(count, 1)
    if integer:
        raw = max(raw, 1.0)
    magnitude = 10 ** math.floor(math.log10(raw))
    steps = (1, 2, 5, 10) if integer else (1, 2, 2.5, 5, 10)
    step = next(m * magnitude for m in steps if m * magnitude >= raw)
    start = math.floor(low / step) * step
    ticks = []
    value = start
    while value <= high + step * 1e-9:
        ticks.append(round(value, 10))
        value += step
    if ticks[-1] < high:
        ticks.append(round(value, 10))
    return ticks


def log_ticks(low: float, high: float) -> list[float]:
    """1, 2, 5 x 10^n ticks covering [low, high] (both > 0)."""
    ticks: list[float] = []
    exponent = math.floor(math.log10(low))
    while True:
        for mantissa in (1, 2, 5):
            value = mantissa * 10**exponent
            if value > high * 1.0001:
                return _trim(ticks, low)
            ticks.append(float(value))
        exponent += 1


def _trim(ticks: list[float], low: float) -> list[float]:
    kept = [t for t in ticks if t >= low * 0.9999]
    below = [t for t in ticks if t < low * 0.9999]
    return ([below[-1]] if below else []) + kept


def tick_label(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 10000:
        return f"{value / 1000:g}k"
    if abs(value) >= 1:
        return f"{value:g}"
    return f"{value:.3g}"


@dataclass(frozen=True, slots=True)
class Mark:
    """One data point; ``y`` None means "no result" (never zero)."""

    x: float
    y: float | None
    status: MarkStatus = "ok"
    title: str = ""


@dataclass(frozen=True, slots=True)
class Series:
    name: str
    color: str
    marks: tuple[Mark, ...]
    dashed: bool = False
    connect: bool = True
    ordered: bool = False
    """Connect the marks in the order given (a config's curve through its loads), not by x."""


@dataclass(frozen=True, slots=True)
class Scale:
    """Maps data to pixels on one axis, linear or log."""

    low: float
    high: float
    start: float
    end: float
    log: bool = False

    def __call__(self, value: float) -> float:
        if self.log:
            lo, hi, v = math.log(self.low), math.log(self.high), math.log(max(value, 1e-12))
        else:
            lo, hi, v = self.low, self.high, value
        span = (hi - lo) or 1.0
        return self.start + (v - lo) / span * (self.end - self.start)


@dataclass(frozen=True, slots=True)
class Frame:
    """A panel's geometry: outer size and the margins around the plotting area."""

    width: int = 420
    height: int = 300
    left: int = 58
    right: int = 14
    top: int = 30
    bottom: int = 44

    @property
    def plot_left(self) -> int:
        return self.left

    @property
    def plot_right(self) -> int:
        return self.width - self.right

    @property
    def plot_top(self) -> int:
        return self.top

    @property
    def plot_bottom(self) -> int:
        return self.height - self.bottom


def text_width(text: str, size: float = TITLE_SIZE, *, bold: bool = True) -> float:
    """An upper estimate of ``text``'s rendered width in px (:data:`EM_PER_CHAR`): SVG does
    not wrap or shrink text, so a chart sizes itself to fit its title from this."""
    return len(text) * size * EM_PER_CHAR[bold]


def title_fits(width: int, title: str) -> int:
    """``width``, widened where ``title`` (centred, :data:`TITLE_MARGIN` either side) needs
    more."""
    return max(width, math.ceil(text_width(title) + 2 * TITLE_MARGIN))


def _fit(frame: Frame, title: str) -> Frame:
    """``frame`` with its plotting area widened when its title would not fit."""
    return dataclasses.replace(frame, width=title_fits(frame.width, title))


def _svg_open(frame: Frame, label: str) -> str:
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {frame.width} {frame.height}" '
        f'width="{frame.width}" height="{frame.height}" role="img" aria-label="{esc(label)}" '
        f'style="{FONT}">'
    )


def _axes(
    frame: Frame,
    xs: Callable[[float], float],
    ys: Callable[[float], float],
    x_ticks: Sequence[float],
    y_ticks: Sequence[float],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_tick_labels: Sequence[str] | None = None,
) -> list[str]:
    parts = [
        f'<text x="{frame.width / 2:.1f}" y="18" text-anchor="middle" font-size="13" '
        f'font-weight="600" fill="#111827">{esc(title)}</text>'
    ]
    for tick in y_ticks:
        y = ys(tick)
        parts.append(
            f'<line x1="{frame.plot_left}" x2="{frame.plot_right}" y1="{y:.1f}" y2="{y:.1f}" '
            f'stroke="{GRID}" stroke-width="1"/>'
        )
        parts.append(
            f'<text x="{frame.plot_left - 6}" y="{y + 4:.1f}" text-anchor="end" font-size="11" '
            f'fill="{AXIS}">{esc(tick_label(tick))}</text>'
        )
    labels = x_tick_labels or [tick_label(t) for t in x_ticks]
    for tick, text in zip(x_ticks, labels, strict=True):
        x = xs(tick)
        parts.append(
            f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{frame.plot_bottom}" '
            f'y2="{frame.plot_bottom + 4}" stroke="{AXIS}"/>'
        )
        parts.append(
            f'<text x="{x:.1f}" y="{frame.plot_bottom + 16}" text-anchor="middle" '
            f'font-size="11" fill="{AXIS}">{esc(text)}</text>'
        )
    parts.append(
        f'<line x1="{frame.plot_left}" x2="{frame.plot_right}" y1="{frame.plot_bottom}" '
        f'y2="{frame.plot_bottom}" stroke="{AXIS}"/>'
    )
    parts.append(
        f'<line x1="{frame.plot_left}" x2="{frame.plot_left}" y1="{frame.plot_top}" '
        f'y2="{frame.plot_bottom}" stroke="{AXIS}"/>'
    )
    parts.append(
        f'<text x="{(frame.plot_left + frame.plot_right) / 2:.1f}" y="{frame.height - 4}" '
        f'text-anchor="middle" font-size="11" fill="#374151">{esc(x_label)}</text>'
    )
    mid = (frame.plot_top + frame.plot_bottom) / 2
    parts.append(
        f'<text x="13" y="{mid:.1f}" text-anchor="middle" font-size="11" fill="#374151" '
        f'transform="rotate(-90 13 {mid:.1f})">{esc(y_label)}</text>'
    )
    return parts


def _mark(x: float, y: float, mark: Mark, color: str) -> str:
    title = f"<title>{esc(mark.title)}</title>" if mark.title else ""
    if mark.status == "flagged":
        return (
            f'<g class="mark flagged"><circle cx="{x:.1f}" cy="{y:.1f}" r="6" fill="white" '
            f'stroke="{FLAG_COLOR}" stroke-width="2.5"/><circle cx="{x:.1f}" cy="{y:.1f}" '
            f'r="2.5" fill="{color}"/>{title}</g>'
        )
    return (
        f'<circle class="mark" cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{color}" '
        f'stroke="white" stroke-width="1">{title}</circle>'
    )


def _no_result_label(frame: Frame, y: float) -> str:
    """The strip's name, left of the axis where a y tick would be: never over a mark."""
    return (
        f'<text x="{frame.plot_left - 5}" y="{y + 3.5:.1f}" text-anchor="end" font-size="9.5" '
        f'fill="{FAIL_COLOR}">none</text>'
    )


def _cross(x: float, y: float, title: str) -> str:
    size = 5
    return (
        f'<g class="mark failed" stroke="{FAIL_COLOR}" stroke-width="2.5">'
        f'<line x1="{x - size:.1f}" y1="{y - size:.1f}" x2="{x + size:.1f}" y2="{y + size:.1f}"/>'
        f'<line x1="{x - size:.1f}" y1="{y + size:.1f}" x2="{x + size:.1f}" y2="{y - size:.1f}"/>'
        f"<title>{esc(title)}</title></g>"
    )


def _y_range(values: Sequence[float], *, log: bool, zero: bool) -> tuple[list[float], float, float]:
    """The y ticks and the axis' low and high ends for ``values``. Values that are none of
    them negative (every metric a report plots) never get an axis below 0: padding stops
    there."""
    if log and values:
        low, high = min(values) * 0.8, max(values) * 1.25
        ticks = log_ticks(low, high)
        return ticks, min(ticks[0], low), max(ticks[-1], high)
    low = 0.0 if zero or not values else min(values)
    high = max(values) if values else 1.0
    if not zero and values:
        pad = (high - low) * 0.1 or 0.5
        low, high = (max(low - pad, 0.0) if low >= 0 else low - pad), high + pad
    ticks = nice_ticks(low, high)
    return ticks, ticks[0], ticks[-1]


def _x_axis(
    frame: Frame,
    xs: Sequence[float],
    *,
    categories: Sequence[float] | None,
    log: bool,
    zero: bool,
    integer: bool = False,
) -> tuple[Callable[[float], float], list[float]]:
    """Where an x value is drawn, and the x ticks: evenly spaced categories, or a linear or
    log scale over ``xs`` (whole ticks for an ``integer`` axis)."""
    if categories:
        positions = {v: i for i, v in enumerate(categories)}
        n = max(len(categories) - 1, 1)
        pad = 0.35

        def at_category(v: float) -> float:
            return frame.plot_left + (positions.get(v, 0) + pad) / (n + 2 * pad) * (
                frame.plot_right - frame.plot_left
            )

        return at_category, list(categories)
    lo = min(xs) if xs else 0.0
    hi = max(xs) if xs else 1.0
    if log:
        ticks = log_ticks(lo, hi)
        scale = Scale(
            min(ticks[0], lo), max(ticks[-1], hi), frame.plot_left, frame.plot_right, log=True
        )
        return scale, ticks
    pad_x = (hi - lo) * 0.08 or 0.5
    start = 0.0 if zero else (max(lo - pad_x, 0.0) if lo >= 0 else lo - pad_x)
    ticks = nice_ticks(start, hi + (0.5 if zero else pad_x), integer=integer)
    return Scale(ticks[0], ticks[-1], frame.plot_left, frame.plot_right), ticks


def _series_parts(
    series: Series, xmap: Callable[[float], float], ys: Callable[[float], float]
) -> list[str]:
    """A series' line (broken where a mark has no value) and its marks."""
    parts: list[str] = []
    if series.connect:
        segment: list[str] = []
        runs: list[list[str]] = []
        for mark in series.marks if series.ordered else sorted(series.marks, key=lambda m: m.x):
            if mark.y is None:
                if segment:
                    runs.append(segment)
                segment = []
                continue
            segment.append(f"{xmap(mark.x):.1f},{ys(mark.y):.1f}")
        if segment:
            runs.append(segment)
        dash = ' stroke-dasharray="6 4"' if series.dashed else ""
        for run in runs:
            if len(run) > 1:
                parts.append(
                    f'<polyline points="{" ".join(run)}" fill="none" stroke="{series.color}" '
                    f'stroke-width="2"{dash}><title>{esc(series.name)}</title></polyline>'
                )
    for mark in series.marks:
        if mark.y is not None:
            parts.append(_mark(xmap(mark.x), ys(mark.y), mark, series.color))
    return parts


def _failed_crosses(
    series: Sequence[Series], xmap: Callable[[float], float], y: float
) -> list[str]:
    """A cross per mark with no value, in the no-result strip; several series failing at one
    x would hide each other, so they spread along it."""
    failed = [mark for s in series for mark in s.marks if mark.y is None]
    per_x: dict[float, int] = {}
    for mark in failed:
        per_x[mark.x] = per_x.get(mark.x, 0) + 1
    placed: dict[float, int] = {}
    parts: list[str] = []
    for mark in failed:
        k = placed.get(mark.x, 0)
        placed[mark.x] = k + 1
        offset = (k - (per_x[mark.x] - 1) / 2) * 13
        parts.append(_cross(xmap(mark.x) + offset, y, mark.title))
    return parts


def xy_panel(
    series: Sequence[Series],
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_log: bool = False,
    y_log: bool = False,
    x_categories: Sequence[float] | None = None,
    y_zero: bool = True,
    frame: Frame | None = None,
    x_zero: bool = False,
    x_integer: bool = False,
    front: Sequence[Mark] = (),
) -> str:
    """A line or scatter panel. ``x_categories`` puts exactly those x values on the axis
    (evenly spaced), e.g. the concurrencies measured; ``x_zero`` starts a linear x axis at 0
    (counts, such as restarts spent); ``x_integer`` ticks it at whole numbers only;
    ``front`` marks are highlighted (a broad line through them and a ring on each: a Pareto
    front among the series' marks)."""
    frame = _fit(frame or Frame(), title)
    values = [m.y for s in series for m in s.marks if m.y is not None]
    has_failed = any(m.y is None for s in series for m in s.marks)
    y_ticks, y_low, y_high = _y_range(values, log=y_log, zero=y_zero)
    strip = 22 if has_failed else 0
    ys = Scale(y_low, y_high, frame.plot_bottom - strip, frame.plot_top, log=y_log)
    xmap, x_ticks = _x_axis(
        frame,
        [m.x for s in series for m in s.marks],
        categories=x_categories,
        log=x_log,
        zero=x_zero,
        integer=x_integer,
    )
    parts = [_svg_open(frame, title)]
    parts += _axes(
        frame,
        xmap,
        ys,
        x_ticks,
        [t for t in y_ticks if y_low <= t <= y_high],
        title=title,
        x_label=x_label,
        y_label=y_label,
    )
    if has_failed:
        parts += _no_result_strip(frame, strip)
    parts += _front_line(front, xmap, ys)
    for one in series:
        parts += _series_parts(one, xmap, ys)
    parts += _front_rings(front, xmap, ys)
    parts += _failed_crosses(series, xmap, frame.plot_bottom - strip / 2)
    parts.append("</svg>")
    return "".join(parts)


def _no_result_strip(frame: Frame, strip: float) -> list[str]:
    """The pale red strip under a panel's plotting area where marks without a value go."""
    return [
        f'<rect x="{frame.plot_left + 1}" y="{frame.plot_bottom - strip}" '
        f'width="{frame.plot_right - frame.plot_left - 1}" height="{strip}" fill="#fef2f2"/>',
        _no_result_label(frame, frame.plot_bottom - strip / 2),
    ]


FRONT_COLOR = "#111827"


def _front_line(
    front: Sequence[Mark], xmap: Callable[[float], float], ys: Callable[[float], float]
) -> list[str]:
    """A broad pale line through the front's marks, left to right, under the series."""
    marks = sorted((m for m in front if m.y is not None), key=lambda m: m.x)
    if len(marks) < 2:
        return []
    points = " ".join(f"{xmap(m.x):.1f},{ys(m.y):.1f}" for m in marks if m.y is not None)
    return [
        f'<polyline class="front" points="{points}" fill="none" stroke="{FRONT_COLOR}" '
        f'stroke-opacity="0.16" stroke-width="9" stroke-linejoin="round" '
        f'stroke-linecap="round"><title>Pareto front</title></polyline>'
    ]


def _front_rings(
    front: Sequence[Mark], xmap: Callable[[float], float], ys: Callable[[float], float]
) -> list[str]:
    """A ring around each mark of the front, over the series' own marks."""
    return [
        f'<circle class="front-point" cx="{xmap(m.x):.1f}" cy="{ys(m.y):.1f}" r="7.5" '
        f'fill="none" stroke="{FRONT_COLOR}" stroke-width="1.5">'
        f"<title>{esc(m.title)}</title></circle>"
        for m in front
        if m.y is not None
    ]


def heat_color(value: float, center: float = 1.0, span: float = 1.5) -> str:
    """Diverging: red below ``center``, white at it, green above (saturating at +-span)."""
    t = max(-1.0, min(1.0, (value - center) / span if value >= center else (value - center) / 0.5))
    if t >= 0:
        r, g, b = (255 - int(t * (255 - 34)), 255 - int(t * (255 - 139)), 255 - int(t * (255 - 34)))
    else:
        t = -t
        r, g, b = (255 - int(t * (255 - 200)), 255 - int(t * (255 - 30)), 255 - int(t * (255 - 30)))
    return f"#{r:02x}{g:02x}{b:02x}"


def scale_color(t: float) -> str:
    """Sequential: white at 0, deep green at 1 (for estimates with no natural center)."""
    t = max(0.0, min(1.0, t))
    r, g, b = (255 - int(t * (255 - 21)), 255 - int(t * (255 - 128)), 255 - int(t * (255 - 61)))
    return f"#{r:02x}{g:02x}{b:02x}"


HeatStatus = Literal["ok", "flagged", "failed", "unexplored"]
"""``unexplored``: a point of the space nobody tried, drawn blank (neither value nor hatch)."""


@dataclass(frozen=True, slots=True)
class HeatCell:
    value: float | None
    text: str
    status: HeatStatus = "ok"
    title: str = ""
    explored: bool = False
    """Draw a dot in the corner: this point was measured (the explored-space picture)."""
    best: bool = False
    """Draw a heavy border: the answer's config."""


def _heat_cell(
    cell: HeatCell, x: float, y: float, width: int, height: int, paint: Callable[[float], str]
) -> str:
    """One heatmap cell: blank and dashed when nobody tried it, hatched without a value, a
    heavy frame on the answer's config, an amber one on a flagged cell."""
    tip = f"<title>{esc(cell.title)}</title>" if cell.title else ""
    if cell.status == "unexplored":
        return (
            f'<g class="cell unexplored"><rect x="{x + 1}" y="{y + 1}" '
            f'width="{width - 2}" height="{height - 2}" fill="white" '
            f'stroke="{GRID}" stroke-dasharray="3 3"/>{tip}</g>'
        )
    fill = "url(#hatch)" if cell.value is None else paint(cell.value)
    stroke = FLAG_COLOR if cell.status == "flagged" else "white"
    stroke_width = 2.5 if cell.status == "flagged" else 1
    if cell.best:
        stroke, stroke_width = "#111827", 3
    text_color = FAIL_COLOR if cell.status == "failed" else "#111827"
    marks = (["explored"] if cell.explored else []) + (["best"] if cell.best else [])
    classes = " ".join(["cell", cell.status, *marks])
    dot = (
        f'<circle class="explored-mark" cx="{x + 6}" cy="{y + 6}" r="2.5" fill="#111827"/>'
        if cell.explored
        else ""
    )
    return (
        f'<g class="{classes}"><rect x="{x + 1}" y="{y + 1}" '
        f'width="{width - 2}" height="{height - 2}" fill="{fill}" '
        f'stroke="{stroke}" stroke-width="{stroke_width}"/>{dot}'
        f'<text x="{x + width / 2:.1f}" y="{y + height / 2 + 4:.1f}" '
        f'text-anchor="middle" font-size="11" fill="{text_color}">{esc(cell.text)}</text>'
        f"{tip}</g>"
    )


def _heat_open(width: int, height: int, title: str) -> list[str]:
    """A heatmap's ``<svg>`` start: its size, the hatch pattern of cells without a value, and
    its title."""
    return [
        f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
        f'height="{height}" role="img" aria-label="{esc(title)}" style="{FONT}">',
        '<defs><pattern id="hatch" width="6" height="6" patternUnits="userSpaceOnUse" '
        'patternTransform="rotate(45)"><rect width="6" height="6" fill="#f3f4f6"/>'
        '<line x1="0" y1="0" x2="0" y2="6" stroke="#d1d5db" stroke-width="3"/></pattern></defs>',
        f'<text x="{width / 2:.1f}" y="18" text-anchor="middle" font-size="13" '
        f'font-weight="600" fill="#111827">{esc(title)}</text>',
    ]


def _axis_name(name: str, x: str, y: int, anchor: str) -> str:
    """A heatmap axis's name (the knob its rows or columns vary), at ``x`` as written."""
    return (
        f'<text class="axis-label" x="{x}" y="{y}" text-anchor="{anchor}" '
        f'font-size="11" font-weight="600" fill="#374151">{esc(name)}</text>'
    )


def heatmap(
    rows: Sequence[str],
    columns: Sequence[str],
    cells: Sequence[Sequence[HeatCell]],
    *,
    title: str,
    center: float = 1.0,
    cell_width: int = 64,
    cell_height: int = 26,
    color: Callable[[float], str] | None = None,
    row_label: str | None = None,
    column_label: str | None = None,
) -> str:
    """Rows x columns of colored cells; a cell without a value is hatched, never colored as
    a number. ``color`` maps a value to a fill (default: diverging around ``center``);
    ``row_label`` / ``column_label`` name the axes (the knobs of an explored space)."""
    paint = color or (lambda value: heat_color(value, center))
    label_width = max([len(r) for r in rows] + [len(row_label or "")], default=6) * 7 + 16
    # Each column as wide as its longest label (draft model paths run to 25 characters and
    # more): centred labels wider than their column ran into each other and into the rows'
    # knob name.
    widest = max((text_width(c, 11, bold=False) for c in columns), default=0.0)
    cell_width = max(cell_width, math.ceil(widest) + 10)
    top = 58 + (14 if column_label else 0)
    width = title_fits(label_width + cell_width * len(columns) + 10, title)
    height = top + cell_height * len(rows) + 10
    parts = _heat_open(width, height, title)
    if column_label:
        middle = label_width + cell_width * len(columns) / 2
        parts.append(_axis_name(column_label, f"{middle:.1f}", top - 26, "middle"))
    if row_label:
        parts.append(_axis_name(row_label, f"{label_width - 8}", top - 8, "end"))
    for j, column in enumerate(columns):
        x = label_width + j * cell_width + cell_width / 2
        parts.append(
            f'<text x="{x:.1f}" y="{top - 8}" text-anchor="middle" font-size="11" '
            f'fill="{AXIS}">{esc(column)}</text>'
        )
    for i, row in enumerate(rows):
        y = top + i * cell_height
        parts.append(
            f'<text x="{label_width - 8}" y="{y + cell_height / 2 + 4:.1f}" text-anchor="end" '
            f'font-size="11" fill="#111827">{esc(row)}</text>'
        )
        for j, cell in enumerate(cells[i]):
            x = label_width + j * cell_width
            parts.append(_heat_cell(cell, x, y, cell_width, cell_height, paint))
    parts.append("</svg>")
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class Box:
    """One distribution: drawn as p10..p90 whiskers, p25..p75 box and the median."""

    name: str
    color: str
    samples: tuple[float, ...]
    status: MarkStatus = "ok"
    title: str = ""


def _quantile(ordered: Sequence[float], q: float) -> float:
    rank = (len(ordered) - 1) * q
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def _box_scale(
    groups: Sequence[tuple[str, Sequence[Box]]], frame: Frame, strip: float, *, y_log: bool
) -> tuple[Scale, list[float]]:
    """The y scale of a box panel (above the no-result strip) and its ticks."""
    values = [v for _, boxes in groups for b in boxes for v in b.samples if v > 0]
    if values:
        low, high = min(values) * 0.8, max(values) * 1.25
    else:
        low, high = 0.001, 1.0
    ticks = log_ticks(low, high) if y_log else nice_ticks(0.0, high)
    ys = Scale(
        min(ticks[0], low) if y_log else ticks[0],
        max(ticks[-1], high) if y_log else ticks[-1],
        frame.plot_bottom - strip,
        frame.plot_top,
        log=y_log,
    )
    return ys, ticks


def _box(box: Box, x: float, box_w: float, ys: Scale) -> str:
    """One box: whiskers p10-p90, the box p25-p75, the median line, and its tooltip."""
    cx = x + box_w / 2
    ordered = sorted(box.samples)
    p10, p25, p50, p75, p90 = (_quantile(ordered, q) for q in (0.1, 0.25, 0.5, 0.75, 0.9))
    stroke = FLAG_COLOR if box.status == "flagged" else box.color
    tip = esc(
        box.title
        or f"{box.name}: median {p50 * 1000:.0f} ms, p90 {p90 * 1000:.0f} ms, "
        f"{len(ordered)} request{'' if len(ordered) == 1 else 's'}"
    )
    return (
        f'<g class="box {box.status}"><title>{tip}</title>'
        f'<line x1="{cx:.1f}" x2="{cx:.1f}" y1="{ys(p10):.1f}" y2="{ys(p90):.1f}" '
        f'stroke="{stroke}" stroke-width="1.5"/>'
        f'<rect x="{x + 2:.1f}" y="{ys(p75):.1f}" width="{max(box_w - 4, 2):.1f}" '
        f'height="{max(ys(p25) - ys(p75), 1):.1f}" fill="{box.color}" '
        f'fill-opacity="0.35" stroke="{stroke}" stroke-width="1.5"/>'
        f'<line x1="{x + 2:.1f}" x2="{x + box_w - 2:.1f}" y1="{ys(p50):.1f}" '
        f'y2="{ys(p50):.1f}" stroke="{box.color}" stroke-width="2.5"/></g>'
    )


def box_panel(
    groups: Sequence[tuple[str, Sequence[Box]]],
    *,
    title: str,
    x_label: str,
    y_label: str,
    y_log: bool = True,
    frame: Frame | None = None,
) -> str:
    """Box plots grouped along x (e.g. one group per concurrency, one box per config)."""
    frame = _fit(frame or Frame(), title)
    has_failed = any(not b.samples for _, boxes in groups for b in boxes)
    strip = 22 if has_failed else 0
    ys, ticks = _box_scale(groups, frame, strip, y_log=y_log)
    width = frame.plot_right - frame.plot_left
    slot = width / max(len(groups), 1)
    centers = [frame.plot_left + slot * (i + 0.5) for i in range(len(groups))]
    parts = [_svg_open(frame, title)]
    parts += _axes(
        frame,
        lambda v: centers[int(v)],
        ys,
        [float(i) for i in range(len(groups))],
        ticks,
        title=title,
        x_label=x_label,
        y_label=y_label,
        x_tick_labels=[name for name, _ in groups],
    )
    for index, (_, boxes) in enumerate(groups):
        n = max(len(boxes), 1)
        box_w = min(slot * 0.8 / n, 22.0)
        start = centers[index] - box_w * n / 2
        for k, box in enumerate(boxes):
            x = start + k * box_w
            if box.samples:
                parts.append(_box(box, x, box_w, ys))
            else:
                cross_y = frame.plot_bottom - strip / 2
                parts.append(_cross(x + box_w / 2, cross_y, box.title or f"{box.name}: no result"))
    if has_failed:
        parts.append(_no_result_label(frame, frame.plot_bottom - strip / 2))
    parts.append("</svg>")
    return "".join(parts)


# --- the band chart: which config wins where along the load ---------------------------------


@dataclass(frozen=True, slots=True)
class LoadBand:
    """One load of a band chart: the stretch of the load axis its config is named for, from
    ``start`` up to ``end`` (None: from the axis' start, to its end), the load it was measured
    at, and there the config's estimate with its 95 % interval."""

    at: float
    start: float | None
    end: float | None
    label: str
    color: str
    value: float | None
    """None: no valid config at this load (a cross, never a zero)."""
    ci95: tuple[float, float] | None
    value_text: str
    tick: str
    """The load's name on the axis (``c8``)."""
    range_text: str = ""
    """The stretch in words (``batch 3–15``), under the label in the strip."""
    tie: bool = False
    title: str = ""


BAND_STRIP = 34
"""Height (px) of the strip under a band chart's plot where each band's config is named."""


@dataclass(frozen=True, slots=True)
class _BandGeometry:
    frame: Frame
    xs: Scale
    ys: Scale

    @property
    def strip_top(self) -> float:
        return self.frame.plot_bottom - BAND_STRIP

    def span(self, band: LoadBand) -> tuple[float, float]:
        left = self.xs(band.start) if band.start is not None else self.frame.plot_left
        right = self.xs(band.end) if band.end is not None else self.frame.plot_right
        return max(left, self.frame.plot_left), min(right, self.frame.plot_right)


def _fitted(text: str, width: float, size: float, *, bold: bool) -> str:
    """``text``, cut with an ellipsis where it would run past ``width`` px."""
    room = int(width / (size * EM_PER_CHAR[bold]))
    return text if len(text) <= room else text[: max(room - 1, 1)] + "…"


def _band_region(band: LoadBand, at: _BandGeometry) -> list[str]:
    """The band's stretch: a tint over the plot, and in the strip its config and range."""
    left, right = at.span(band)
    top, width = at.frame.plot_top, right - left
    middle = (left + right) / 2
    fill = FAIL_COLOR if band.value is None else band.color
    dash = ' stroke-dasharray="4 3"' if band.tie else ""
    label_color = FAIL_COLOR if band.value is None else "#111827"
    parts = [
        f'<rect class="region" x="{left:.1f}" y="{top}" width="{width:.1f}" '
        f'height="{at.strip_top - top:.1f}" fill="{fill}" fill-opacity="0.08"/>',
        f'<rect class="strip" x="{left + 1:.1f}" y="{at.strip_top + 1:.1f}" '
        f'width="{max(width - 2, 1):.1f}" height="{BAND_STRIP - 2}" fill="{fill}" '
        f'fill-opacity="0.30" stroke="{fill}" stroke-width="1.5"{dash}/>',
        f'<text class="label" x="{middle:.1f}" y="{at.strip_top + 15:.1f}" text-anchor="middle" '
        f'font-size="11" font-weight="600" fill="{label_color}">'
        f"{esc(_fitted(band.label, width - 6, 11, bold=True))}</text>",
    ]
    if band.range_text:
        parts.append(
            f'<text class="range" x="{middle:.1f}" y="{at.strip_top + 28:.1f}" '
            f'text-anchor="middle" font-size="10" fill="#374151">'
            f"{esc(_fitted(band.range_text, width - 6, 10, bold=False))}</text>"
        )
    return parts


def _band_estimate(band: LoadBand, at: _BandGeometry) -> list[str]:
    """The estimate at the measured load: a mark (hollow and ringed on a tie), its 95 %
    whiskers, and its value above them; a cross where no config is valid."""
    x = at.xs(band.at)
    if band.value is None:
        return [_cross(x, at.strip_top - 12, band.title or f"{band.label}: no result")]
    low, high = band.ci95 if band.ci95 is not None else (band.value, band.value)
    status: MarkStatus = "flagged" if band.tie else "ok"
    top, bottom = at.ys(high), at.ys(low)
    parts = [
        f'<g class="whisker" stroke="{band.color}" stroke-width="1.8">'
        f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top:.1f}" y2="{bottom:.1f}"/>'
        f'<line x1="{x - 6:.1f}" x2="{x + 6:.1f}" y1="{top:.1f}" y2="{top:.1f}"/>'
        f'<line x1="{x - 6:.1f}" x2="{x + 6:.1f}" y1="{bottom:.1f}" y2="{bottom:.1f}"/></g>',
        _mark(x, at.ys(band.value), Mark(band.at, band.value, status), band.color),
        f'<text class="value" x="{x:.1f}" y="{top - 8:.1f}" text-anchor="middle" '
        f'font-size="10.5" fill="#111827">{esc(band.value_text)}</text>',
    ]
    if band.tie:
        parts.append(
            f'<text class="tie" x="{x + 10:.1f}" y="{at.ys(band.value) + 4:.1f}" '
            f'font-size="10.5" font-weight="600" fill="{FLAG_COLOR}">tie</text>'
        )
    return parts


def _band_scales(bands: Sequence[LoadBand], frame: Frame) -> tuple[_BandGeometry, list[float]]:
    """The log load axis over the measured loads, and the estimate axis (log where the
    estimates span more than a factor of 6) above the strip, with its ticks."""
    ats = [b.at for b in bands]
    xs = Scale(min(ats) / 1.7, max(ats) * 1.7, frame.plot_left, frame.plot_right, log=True)
    values = [v for b in bands for v in (b.value, *(b.ci95 or ())) if v is not None]
    log = bool(values) and min(values) > 0 and max(values) / min(values) > 6
    ticks, low, high = _y_range(values, log=log, zero=False)
    ys = Scale(low, high, frame.plot_bottom - BAND_STRIP - 10, frame.plot_top + 22, log=log)
    return _BandGeometry(frame, xs, ys), [t for t in ticks if low <= t <= high]


def band_chart(
    bands: Sequence[LoadBand], *, title: str, x_label: str, y_label: str
) -> str:
    """Which config wins where along the load: per load, its stretch of the (log) load axis
    tinted in its config's colour and named in the strip under the plot, and at the load it
    was measured at, the config's estimate with its 95 % interval; a tie is drawn hollow,
    ringed and dashed, a load without a valid config as a cross."""
    frame = _fit(Frame(width=max(600, 165 * len(bands)), height=360, left=64, bottom=46), title)
    at, y_ticks = _band_scales(bands, frame)
    parts = [_svg_open(frame, title)]
    parts += _axes(
        frame,
        at.xs,
        at.ys,
        [b.at for b in bands],
        y_ticks,
        title=title,
        x_label=x_label,
        y_label=y_label,
        x_tick_labels=[b.tick for b in bands],
    )
    for band in bands:
        kind = " tie" if band.tie else (" none" if band.value is None else "")
        parts.append(f'<g class="band{kind}"><title>{esc(band.title)}</title>')
        parts += _band_region(band, at)
        parts += _band_estimate(band, at)
        parts.append("</g>")
    for band in bands[1:]:
        if band.start is not None:
            x = at.xs(band.start)
            parts.append(
                f'<line class="boundary" x1="{x:.1f}" x2="{x:.1f}" y1="{frame.plot_top}" '
                f'y2="{frame.plot_bottom}" stroke="{AXIS}" stroke-dasharray="3 3"/>'
            )
    parts.append("</svg>")
    return "".join(parts)
