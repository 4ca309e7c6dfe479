"""The live display, driven the way the runner drives it.

The display is rendered to a plain-text console with a fake clock: what a person reads is the
text, so the tests read the text."""

from __future__ import annotations

import io
import re
import time
from typing import Any

from rich.console import Console

from orchestrator.plan import plan_sweep
from orchestrator.progress.live import LiveProgress
from orchestrator.progress.snapshot import clock_time, duration
from orchestrator.progress.tracker import planned_trials
from orchestrator.store import ThroughputMetrics, ThroughputPoint
from orchestrator.verbs.demo import load_demo_sweep


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def _text(renderable: Any, width: int = 120) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    console.print(renderable)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


def _demo_display() -> tuple[LiveProgress, _Clock, float]:
    sweep, _ = load_demo_sweep()
    clock = _Clock()
    wall = 1_800_000_000.0
    progress = LiveProgress(
        planned_trials(plan_sweep(sweep).trials),
        sweep="demo",
        console=Console(file=io.StringIO()),
        clock=clock,
        wall_clock=lambda: wall + (clock.now - 1000.0),
    )
    return progress, clock, wall


def test_rows_name_configs_by_their_knob_values_never_by_trial_key() -> None:
    progress, _clock, _ = _demo_display()
    sweep, _ = load_demo_sweep()
    budget_4 = next(
        t for t in plan_sweep(sweep).trials if t.config.get("budget") == 4 and t.host == "sim-01"
    )
    progress.update("sim-01", step="preflight", trial=None)
    progress.update("sim-01", trial=budget_4.key, step="reconfigure", attempt=1)
    text = _text(progress.render())
    row = next(line for line in text.splitlines() if "sim-01" in line)
    assert "budget=4" in row and budget_4.key not in text and "sim-01." not in text
    assert "restart + load" in row
    # every knob that varies is named, the one every config shares (draft_model) is not
    names = {t.words for t in planned_trials(plan_sweep(sweep).trials)}
    assert "baseline" in names and not any("draft_model" in name for name in names)
    assert "algorithm=DDTREE budget=4 topk=4 window=2048" in names
    assert "algorithm=DDTREE budget=8 legacy_window=2048 topk=4" in names


def test_points_of_the_trials_total_and_an_eta_as_clock_time() -> None:
    progress, clock, wall = _demo_display()
    trials = planned_trials(plan_sweep(load_demo_sweep()[0]).trials)
    mine = [t for t in trials if t.host == "sim-01"]
    progress.update("sim-01", trial=mine[0].key, step="reconfigure", attempt=1)
    assert "ETA after the first point" in _text(progress.render())
    clock.now += 10.0  # a 10 s load
    progress.update("sim-01", step="ctx 60 x c1", done=0, total=9)
    clock.now += 2.0  # a 2 s point
    point = ThroughputPoint(60, 1, ThroughputMetrics(output_tok_s=400.0))
    progress.update("sim-01", done=1, total=9, last_point={"output_tok_s": 400.0}, point=point)
    text = _text(progress.render())
    row = next(line for line in text.splitlines() if "sim-01" in line)
    count = len(mine)
    assert re.search(r"\b1/9\b", row) and re.search(rf"\b1/{count}\b", row)
    # The sweep ends with its slowest host. sim-01: 8 points of this trial, then the rest of its
    # plan at a 10 s load and 9 points of 2 s; sim-02, not started, all its trials at sim-01's
    # pace; each then restores its unit, one more 10 s load.
    theirs = len([t for t in trials if t.host == "sim-02"])
    sim_01 = 8 * 2.0 + (count - 1) * (10.0 + 9 * 2.0) + 10.0
    sim_02 = theirs * (10.0 + 9 * 2.0) + 10.0
    left = max(sim_01, sim_02)
    assert f"ETA {clock_time(wall + 12.0 + left)} (in {duration(left)})" in text
    assert "best so far: baseline @sim-01: 400 tok/s (60/c1)" in text


def test_final_frame_says_every_host_finished() -> None:
    progress, _clock, _ = _demo_display()
    for host in ("sim-01", "sim-02"):
        progress.update(host, step="restore", trial=None)
        progress.update(host, step="done", trial=None)
    text = _text(progress.render())
    assert "finished" in text.splitlines()[0]
    trials = planned_trials(plan_sweep(load_demo_sweep()[0]).trials)
    for host in ("sim-01", "sim-02"):
        row = next(line for line in text.splitlines() if host in line)
        count = len([t for t in trials if t.host == host])
        assert f"{count}/{count}" in row and "finished" in row


def test_the_display_redraws_by_itself_on_a_terminal() -> None:
    """The elapsed time moves between the runner's reports: the frame is drawn by the refresh
    thread from the current state (the old display drew only when the runner reported)."""
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    sweep, _ = load_demo_sweep()
    with LiveProgress(planned_trials(plan_sweep(sweep).trials), console=console) as progress:
        progress.update("sim-01", step="preflight", trial=None)
        time.sleep(1.6)
    frames = set(re.findall(r"(\d+)s elapsed", out.getvalue()))
    assert len(frames) >= 2
