"""The live display names configs against the whole space, not the plan ``max_restarts`` cut
to its first trials: a tester saw "every config: budget=4" over rows that ran budget=16."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.progress.live import LiveProgress
from orchestrator.progress.tracker import SweepShape
from orchestrator.store.results import config_label
from orchestrator.sweepfile import Sweep
from tests.unit.tinysweep import tiny_sweep


def _sweep(strategy: str) -> Sweep:
    search = {"strategy": strategy, "max_restarts": 3, "seed": 7}
    return tiny_sweep(search=search)  # its grid runs budget=4 x 3 top-k first


def _text(progress: LiveProgress) -> str:
    console = Console(file=io.StringIO(), width=140, color_system=None)
    console.print(progress.render())
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


def test_a_search_whose_first_trials_share_a_knob_names_it_on_each_row() -> None:
    shape = SweepShape.of(_sweep("adaptive"))
    assert "budget" not in shape.shared
    progress = LiveProgress(shape, sweep="space-words")
    progress.update("h1", trial="t", config=config_label({"budget": 16, "topk": 2}))
    text = _text(progress)
    assert "every config: budget=4" not in text
    row = next(line for line in text.splitlines() if line.lstrip().startswith("h1"))
    assert "budget=16" in row and "topk=2" in row


def test_a_capped_grid_names_the_knob_its_kept_trials_share() -> None:
    shape = SweepShape.of(_sweep("grid"))
    assert [t.words for t in shape.trials] == [
        "budget=4 topk=1",
        "budget=4 topk=2",
        "budget=4 topk=4",
    ]
