"""The daemon's one-line progress (systemd's STATUS=, `status`) names configs by knob values."""

from __future__ import annotations

from orchestrator.progress.reports import SweepProgress


def test_the_status_line_names_the_config_by_its_knob_values_never_by_its_trial_key() -> None:
    progress = SweepProgress()
    progress.update("b300-1", step="preflight", trial=None, config=None)
    progress.update(
        "b300-1",
        trial="sim-01.algorithm-DDTREE.budget-8.3f2a",
        config="algorithm=DDTREE budget=8",
        step="reconfigure",
        attempt=1,
    )
    progress.update("b300-1", step="measure", done=2, total=9)
    progress.update("b300-2", step="restore", trial=None, config=None)
    line = progress.describe()
    assert line == "b300-1 algorithm=DDTREE budget=8 measure 2/9, b300-2 - restore"
    assert "3f2a" not in line
