"""Progress of a search (the demo's adaptive mode), driven the way the runner drives it.

A search proposes its trials as it goes, so the display has no list of them: its trial column
counts the host type's restarts against ``max_restarts``, its ETA prices the restarts left (and
stops at ``finish_by``), and "best so far" is the objective's value at the objective's cells.
A tester saw "ETA in 49s" for a sweep that took 9m20s, a trial column of "-/0" then "0/0", and
a best ranked by tok/s at whatever cell was fastest. The daemon keeps the same state
(:class:`SweepProgress`) and `orchestrator status` shows it, text and --json: it used to show
neither progress nor ETA, and cut a long name to a prefix two sweeps could share."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from typing import Any

from rich.console import Console

from orchestrator.progress.live import LiveProgress
from orchestrator.progress.reports import SweepProgress
from orchestrator.progress.snapshot import BestBy, ProgressSnapshot, clock_time
from orchestrator.progress.tracker import SweepShape
from orchestrator.store import LatencySummary, SweepRecord, ThroughputMetrics, ThroughputPoint
from orchestrator.store.results import config_label
from orchestrator.sweepview import SweepView
from orchestrator.types import MatrixCell
from orchestrator.verbs.demo import load_demo_sweep
from orchestrator.verbs.status import print_sweep, print_sweeps

WALL = 1_800_000_000.0


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _text(progress: LiveProgress, width: int = 120) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(progress.render())
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


ADAPTIVE = SweepShape(
    host_types={"sim-01": "sim-gpu", "sim-02": "sim-gpu"},
    max_restarts=12,
    best_by=BestBy("output_tok_s", (MatrixCell(1024, 4),)),
)
"""Two hosts of one type, 12 restarts, the objective tok/s at 1024/c4 (the demo's shape)."""


def test_the_shape_of_a_search_comes_from_its_sweep_file() -> None:
    sweep, _ = load_demo_sweep()  # adaptive: no plan ahead, a cap, an objective
    shape = SweepShape.of(sweep)
    assert shape.trials == () and shape.max_restarts == sweep.search.max_restarts
    assert shape.host_types == {"sim-01": "sim-gpu", "sim-02": "sim-gpu"}
    assert shape.best_by == BestBy("output_tok_s", (MatrixCell(1024, 4),))


def _display(shape: SweepShape) -> tuple[LiveProgress, _Clock]:
    clock = _Clock()
    progress = LiveProgress(
        shape,
        sweep="demo",
        console=Console(file=io.StringIO()),
        clock=clock,
        wall_clock=lambda: WALL + (clock.now - 1000.0),
    )
    return progress, clock


def _point(context: int, concurrency: int, tok_s: float, ttft_p99: float = 1.0) -> Any:
    metrics = ThroughputMetrics(output_tok_s=tok_s, ttft=LatencySummary(count=8, p99_s=ttft_p99))
    return ThroughputPoint(context, concurrency, metrics)


def _start(progress: LiveProgress, host: str, key: str, config: str, left: int) -> None:
    """What the runner reports as a trial starts: the trial, then the restart it counted."""
    progress.update(host, trial=key, config=config, step="reconfigure", attempt=1)
    progress.update(host, restarts_left=left)


def _measure(
    progress: LiveProgress, clock: _Clock, host: str, points: list[Any], total: int = 4
) -> None:
    """Each point 5 s, reported as the runner does: the step, then the point measured."""
    for done, point in enumerate(points, start=1):
        progress.update(host, step=f"ctx {point.context} x c{point.concurrency}", total=total)
        clock.now += 5.0
        progress.update(host, done=done, total=total, point=point)


def test_an_adaptive_sweep_counts_restarts_and_prices_the_ones_left() -> None:
    progress, clock = _display(ADAPTIVE)
    for host in ("sim-01", "sim-02"):
        progress.update(host, step="preflight", trial=None, config=None)
    text = _text(progress)
    assert "-/0" not in text and "0/0" not in text
    assert re.search(r"sim-01 .* 0/12 restarts", text)

    _start(progress, "sim-01", "k-base", "baseline", left=11)
    _start(progress, "sim-02", "k-b4", "budget=4 topk=4", left=10)
    clock.now += 30.0  # a 30 s load on each, then two points of 5 s side by side
    points = {
        "sim-01": [_point(60, 1, 900.0), _point(1024, 4, 500.0)],
        "sim-02": [_point(60, 1, 2000.0), _point(1024, 4, 450.0)],
    }
    for done in (1, 2):
        for host, measured in points.items():
            point = measured[done - 1]
            progress.update(host, step=f"ctx {point.context} x c{point.concurrency}", total=4)
        clock.now += 5.0
        for host, measured in points.items():
            progress.update(host, done=done, total=4, point=measured[done - 1])
    text = _text(progress)
    for host in ("sim-01", "sim-02"):
        row = next(line for line in text.splitlines() if host in line)
        assert "2/12 restarts" in row and re.search(r"\b2/4\b", row), row
    # Each host: 2 points of its trial left, then its share of the 10 restarts left (5) at a
    # 30 s load and 4 points of 5 s, then its restore (one more load).
    left = 2 * 5.0 + 5 * (30.0 + 4 * 5.0) + 30.0
    now = WALL + (clock.now - 1000.0)
    assert f"ETA {clock_time(now + left)} (in 4m50s, at most: 10 restarts left)" in text
    # The objective's cell decides, not the fastest point anywhere (sim-02's 2,000 at 60/c1).
    assert "best so far (output_tok_s at 1024/c4): baseline @sim-01: 500 tok/s" in text


def test_a_finished_search_row_counts_its_restarts_never_zero_of_zero() -> None:
    progress, clock = _display(ADAPTIVE)
    _start(progress, "sim-01", "k-base", "baseline", left=11)
    clock.now += 30.0
    _measure(progress, clock, "sim-01", [_point(1024, 4, 500.0)], total=1)
    progress.update("sim-01", restarts_left=0)
    for host in ("sim-01", "sim-02"):
        progress.update(host, step="restore", trial=None, config=None)
        progress.update(host, step="done", trial=None, config=None)
    text = _text(progress)
    assert "finished" in text.splitlines()[0]
    assert "0/0" not in text and "-/0" not in text
    rows = [line for line in text.splitlines() if line.lstrip().startswith("sim-0")]
    assert len(rows) == 2 and all("12/12 restarts" in row for row in rows)


def test_finish_by_ends_the_estimate_with_the_restore_after_it() -> None:
    shape = dataclasses.replace(ADAPTIVE, finish_at=WALL + 120.0)
    progress, clock = _display(shape)
    _start(progress, "sim-01", "k-base", "baseline", left=11)
    clock.now += 30.0
    _measure(progress, clock, "sim-01", [_point(1024, 4, 500.0)])
    text = _text(progress)
    # 35 s in, 85 s to finish_by, then a 30 s restore: 1m55s, not the budget's 5 restarts.
    assert f"ETA {clock_time(WALL + 150.0)} (in 1m55s: finish_by, then restore)" in text


def test_a_minimized_objective_over_two_cells_ranks_by_their_geometric_mean() -> None:
    cells = (MatrixCell(1024, 4), MatrixCell(4096, 4))
    shape = SweepShape(host_types={"h1": "t", "h2": "t"}, max_restarts=8,
                       best_by=BestBy("ttft_p99_s", cells))  # fmt: skip
    progress, clock = _display(shape)
    _start(progress, "h1", "k1", "budget=4", left=7)
    _start(progress, "h2", "k2", "budget=8", left=6)
    # h1: 0.2 s and 0.8 s (geomean 0.4); h2: 0.1 s at one cell only so far: not ranked yet.
    _measure(progress, clock, "h1", [_point(1024, 4, 1.0, 0.2), _point(4096, 4, 1.0, 0.8)])
    _measure(progress, clock, "h2", [_point(1024, 4, 1.0, 0.1)])
    assert "best so far (ttft_p99_s at 1024/c4, 4096/c4): budget=4 @h1: 400 ms" in _text(progress)
    _measure(progress, clock, "h2", [_point(1024, 4, 1.0, 0.1), _point(4096, 4, 1.0, 0.9)])
    assert "budget=8 @h2: 300 ms" in _text(progress)  # geomean 0.3 s: smaller is better


# --- the daemon and `orchestrator status` ----------------------------------------------------


def _running_demo() -> tuple[SweepProgress, _Clock]:
    """The adaptive demo, one trial on each host, two of four points measured on each."""
    clock = _Clock()
    progress = SweepProgress(ADAPTIVE, clock=clock, wall_clock=lambda: WALL + (clock.now - 1000.0))
    for host, left in (("sim-01", 11), ("sim-02", 10)):
        progress.update(host, trial=f"k-{host}", config="budget=4", step="reconfigure", attempt=1)
        progress.update(host, restarts_left=left)
    clock.now += 30.0
    for done in (1, 2):
        for host in ("sim-01", "sim-02"):
            progress.update(host, step="ctx 1024 x c4", total=4)
        clock.now += 5.0
        for host, rate in (("sim-01", 500.0), ("sim-02", 450.0)):
            point = ThroughputPoint(1024, 4, ThroughputMetrics(output_tok_s=rate))
            metrics = {"output_tok_s": rate}
            progress.update(host, done=done, total=4, last_point=metrics, point=point)
    return progress, clock


def _record(name: str, sweep_id: int, state: str = "running") -> SweepRecord:
    return SweepRecord(sweep_id, name, "ab" * 32, "", None, 0, WALL - 600, state,  # type: ignore[arg-type]
                       WALL - 60, None, None, None, None)  # fmt: skip


def test_the_daemon_keeps_progress_and_eta_and_its_host_fields_stay_json() -> None:
    progress, clock = _running_demo()
    json.dumps(progress.hosts)  # the typed point the runner now reports is the tracker's only
    assert progress.hosts["sim-01"]["last_point"] == {"output_tok_s": 500.0}
    snapshot = progress.snapshot()
    document = SweepView(_record("demo", 7), active=True, progress=snapshot).to_json()
    shown = json.loads(json.dumps(document))["progress"]
    left = 2 * 5.0 + 5 * (30.0 + 4 * 5.0) + 30.0  # see test_progress_adaptive
    assert shown["eta"]["left_s"] == left and shown["eta"]["bound"] == "restarts"
    assert shown["eta"]["at"] == WALL + (clock.now - 1000.0) + left
    assert shown["restarts"] == [{"host_type": "sim-gpu", "used": 2, "cap": 12}]
    assert shown["best"]["config"] == "budget=4" and shown["best"]["host"] == "sim-01"
    assert ProgressSnapshot.from_json(shown) == snapshot
    # a sweep that is not running has no progress, and says so with a null, not a missing key
    assert SweepView(_record("old", 3, "done")).to_json()["progress"] is None


def test_status_text_shows_progress_eta_and_whole_names_at_80_columns() -> None:
    progress, _ = _running_demo()
    snapshot = progress.snapshot()
    names = ("nightly-ddtree-b300-budget-topk-sweep-a", "nightly-ddtree-b300-budget-topk-sweep-b")
    sweeps = [
        SweepView(_record(names[0], 7), active=True, progress=snapshot).to_json(),
        SweepView(_record(names[1], 8, "queued")).to_json(),
    ]
    console = Console(file=io.StringIO(), width=80, color_system=None)
    print_sweeps(json.loads(json.dumps(sweeps)), console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert all(f"{name}: " in text for name in names), text
    assert snapshot.eta is not None
    assert f"restarts 2/12 (sim-gpu); ETA {clock_time(snapshot.eta.at)}" in text
    assert max(len(line) for line in text.splitlines()) <= 80

    detail = {**sweeps[0], "trials": {"running": 2}, "hosts": []}
    console = Console(file=io.StringIO(), width=200, color_system=None)
    print_sweep(detail, console)
    text = console.file.getvalue()  # type: ignore[attr-defined]
    assert f"progress: restarts 2/12 (sim-gpu); ETA {clock_time(snapshot.eta.at)}" in text
    assert "best so far (output_tok_s at 1024/c4): budget=4 @sim-01: 500 tok/s" in text


def test_a_searched_config_is_named_without_the_knobs_every_config_shares() -> None:
    """The runner names a search's trial by its full label (every knob): the display said
    "algorithm=DDTREE budget=4 draft_model=/models/Kimi-K2.6-DFlash topk=4 window=2048" on
    each row. The space's shared knobs are said once, the row names what varies."""
    sweep, _ = load_demo_sweep()  # every config of its space has the same draft_model
    progress, _clock = _display(SweepShape.of(sweep))
    config = {"algorithm": "DDTREE", "draft_model": "/models/Kimi-K2.6-DFlash", "budget": 8,
              "topk": 4, "window": 2048}  # fmt: skip
    progress.update("sim-01", trial="k-b8", config=config_label(config), step="reconfigure")
    text = _text(progress)
    row = next(line for line in text.splitlines() if line.lstrip().startswith("sim-01"))
    assert "budget=8" in row and "topk=4" in row and "draft_model" not in row
    assert text.count("draft_model=/models/Kimi-K2.6-DFlash") == 1
    assert "every config: draft_model=/models/Kimi-K2.6-DFlash" in text
