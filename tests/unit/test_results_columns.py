"""`orchestrator results SWEEP` (text): why each attempt ran and which repeat it is, at 80 columns.

A DDTree sweep's every label was "algorithm=DDTREE budget=12 draft_model=/models/Kimi-K2.6-DFlash
topk=4 window=2048", the table had no purpose or repeat (a screen, a confirmation and a first
measurement of one config read alike), and at 80 columns rich cut cells short."""

from __future__ import annotations

import io

from rich.console import Console

from orchestrator.store import HostOutcome, SweepResults, TrialOutcome, TrialPlan
from orchestrator.types import MatrixCell
from orchestrator.verbs.results import print_results

DDTREE = {"algorithm": "DDTREE", "draft_model": "/models/Kimi-K2.6-DFlash", "window": 2048}


def _trial(config: dict[str, object], purpose: str, repeat: int, **fields: object) -> TrialOutcome:
    plan = TrialPlan((MatrixCell(1024, 4),), 2, purpose=purpose, repeat=repeat)  # type: ignore[arg-type]
    base: dict[str, object] = {"state": "done", "attempt": 1}
    merged = {**base, **fields}
    return TrialOutcome(
        key=f"k{len(config)}{purpose}{repeat}",
        host="b300-node-017",
        config=config,
        baseline=not config,
        plan=plan,
        **merged,  # type: ignore[arg-type]
    )


def _render(results: SweepResults, width: int = 80) -> str:
    console = Console(file=io.StringIO(), width=width, color_system=None)
    print_results(results, console)
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(out, str)
    return out


def test_results_show_purpose_and_repeat_and_stay_whole_at_80_columns() -> None:
    results = SweepResults(
        sweep="ddtree-night",
        id=4,
        state="done",
        hosts=(HostOutcome("b300-node-017", "b300"),),
        trials=(
            _trial({}, "measure", 1),
            _trial({**DDTREE, "budget": 12, "topk": 4}, "screen", 1),
            _trial({**DDTREE, "budget": 8, "topk": 2}, "measure", 1),
            _trial({**DDTREE, "budget": 8, "topk": 2}, "confirm", 2),
            _trial(
                {**DDTREE, "budget": 16, "topk": 8},
                "screen",
                1,
                state="failed",
                cause="memory-not-released",
                attempt=2,
            ),
        ),
    )
    text = _render(results)
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80, text
    # the knobs every config shares, once; each row names only what varies
    assert "every config: algorithm=DDTREE draft_model=/models/Kimi-K2.6-DFlash window=2048" in text
    assert text.count("draft_model") == 1
    header = next(line for line in lines if "config" in line and "purpose" in line)
    assert "repeat" in header and "attempt" in header
    words = text.split()
    for knob in ("budget=12", "topk=4", "budget=8", "topk=2", "budget=16", "topk=8"):
        assert knob in words, knob  # never cut inside a knob
    confirm = next(line for line in lines if "confirm" in line)
    assert "budget=8" in confirm and " 2 " in confirm
    screens = [line for line in lines if "screen" in line]
    assert len(screens) == 2
    assert "memory-not-released" in "".join(words)  # may wrap after "failed:"
