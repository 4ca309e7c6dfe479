"""`make demo` as a person at a terminal sees it: run in tmux, the pane read as it runs.

The done-when of issue 12: on a TTY the live display updates during the run (several frames
with changing progress, configs named by knob values, an ETA as a clock time), the log stays
quiet, and the end names each trial's outcome, the demo's two intended failures in plain words,
and the command that opens the report. The run is the session's one terminal demo
(tests/integration/terminal_demo.py), which the docs test also reads.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

from tests.integration.terminal_demo import TerminalDemo


def test_demo_on_a_terminal_shows_the_live_display_and_ends_with_the_outcome(
    terminal_demo: TerminalDemo,
) -> None:
    frames, everything = terminal_demo.frames, terminal_demo.everything
    assert terminal_demo.exit_status == "0", everything

    # The live display redrew during the run, with progress that moved.
    progress = [
        tuple(re.findall(r"^\s+(sim-0\d)\s.*?(\d+/\d+)\s*$", frame, re.M)) for frame in frames
    ]
    assert len(set(progress)) >= 4, frames[-3:]
    # A full trial measures 4 cells and 3 coding problems: 7 points.
    points = {done for frame in frames for done in re.findall(r"\b(\d)/7\b", frame)}
    assert len(points) >= 3, points  # e.g. 1/7, 4/7, 6/7: points of the trial's total
    assert any(re.search(r"ETA \d\d:\d\d:\d\d \(in ", frame) for frame in frames)
    # Configs read as knob values, never as truncated trial keys.
    shown = "\n".join(frames)
    # Every knob that varies among the configs is named (the DFLASH config sets another
    # algorithm and window); the one they all share is said once.
    assert re.search(r"sim-0\d\s+algorithm=DDTREE budget=(4|8|32) topk=(1|4|16) window=2048", shown)
    assert "every config: draft_model=/models/Kimi-K2.6-DFlash" in shown
    assert "sim-01.algorithm" not in everything and ".algorithm-DDTREE" not in everything
    assert re.search(r"best so far \(output_tok_s at [^)]+\): ", shown), shown

    # A quiet log: no info events on the terminal (a warning may come, not a flood), just the
    # display and the outcome.
    assert "[info" not in everything and '"event"' not in everything
    logged = [line for line in everything.splitlines() if re.match(r"\d{4}-\d\d-\d\dT", line)]
    failures = [line for line in logged if "trial.failed" in line]
    # Each intended failure is told as it happens (a warning), with the config in its words.
    assert len(failures) == 2, logged  # the search measures each listed config once a type
    # (the display's console folds a long event over lines: count in the whole text)
    assert everything.count("cause=bad-flag") == 1, everything
    assert everything.count("cause=invalid-config") == 1, everything
    assert everything.count("config=") >= 2, everything
    assert len(logged) - len(failures) <= 3, logged
    assert len([line for line in everything.splitlines() if line.strip()]) < 150

    # The end: every trial's outcome, the two intended failures in plain words, the best
    # config, and the commands that open the report.
    end = everything[everything.rindex("sweep demo (id"):]
    rows = [line for line in end.splitlines() if re.match(r"\s+sim-0\d\s", line)]
    assert len(rows) >= 12, end
    flat = re.sub(r"\s+", " ", end)
    assert flat.count("FAILED: bad-flag (as intended)") == 1
    assert flat.count("FAILED: invalid-config (as intended)") == 1
    assert "does not know a flag: --speculative-dflash-draft-window-size" in flat
    assert (
        "refused the config (found by the preflight, before any restart): ValueError: "
        "--speculative-draft-window-size must be >="
        in flat
    )
    # Full-matrix trials (the baselines, promoted screens, the race and the confirmations)
    # and screens of the objective's cell; then the answer, in the report's words.
    assert len(re.findall(r" done: 4 points, up to [\d,]+ tok/s, coding \d/3 pass", flat)) >= 3
    assert re.search(r" done: 1 point, up to [\d,]+ tok/s", flat)
    assert re.search(r"answer: (Deploy .+ on sim-gpu|No single winner on sim-gpu)", flat)
    assert "demo: every trial ended as intended" in flat
    # the default state directory, shown as the README shows it
    state = "~/.local/state/orchestrator/demo"
    assert f"open the report: xdg-open {state}/demo-report.html" in flat
    assert f"orchestrator report demo --db {state}/demo.db --format md" in flat
    assert (terminal_demo.state_dir / "demo-report.html").exists()
    # ... and the log file kept every event as JSON.
    log_lines = (terminal_demo.state_dir / "demo.log").read_text().splitlines()
    assert len(log_lines) > 100 and all(line.startswith("{") for line in log_lines)
    events = {json.loads(line)["event"] for line in log_lines}
    assert {"sweep.started", "server.ready", "sweep.finished"} <= events
    html = (terminal_demo.state_dir / "demo-report.html").read_text()
    assert "<svg" in html and "invalid-config" in html and "bad-flag" in html


def test_the_demos_store_holds_every_planned_cell(terminal_demo: TerminalDemo) -> None:
    """What the demo left in its store, read back as an operator would (``results --json``):
    every cell each trial's plan holds is committed (the full matrix of 2 contexts x 2
    concurrencies for promoted and confirming trials, the objective's cell for a screen the
    adaptive search did not promote), and the answer names the host type."""
    state = terminal_demo.state_dir
    shown = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "results", "demo", "--json",
         "--db", str(state / "demo.db")],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    document = json.loads(shown.stdout)
    trials = document["trials"]
    assert {t["state"] for t in trials} == {"done", "failed"}
    done = [t for t in trials if t["state"] == "done"]
    assert all(
        len([p for p in t["points"] if p["kind"] == "throughput"]) == len(t["plan"]["cells"])
        for t in done
    )
    assert any(len(t["plan"]["cells"]) == 4 for t in done)
    assert document["answers"] and document["answers"][0]["host_type"] == "sim-gpu"
