"""'Best so far' at an open-loop cell shows the rate its schedule really offered and the rate
the client sent (issue 32, item 4: every label said 4 req/s while the seeded Poisson schedule
offered 43 arrivals in 8 s, 5.4 req/s)."""

from __future__ import annotations

from orchestrator.progress.snapshot import BestBy, ProgressSnapshot
from orchestrator.progress.tracker import SweepShape, SweepTracker
from orchestrator.store import MatrixCell
from tests.unit.test_variance_model import goodput_point


def test_best_so_far_at_an_open_loop_cell_shows_the_offered_and_sent_rates() -> None:
    cell = MatrixCell(2048, rate=4.0)
    tracker = SweepTracker(
        SweepShape(host_types={"a": "gpu"}, best_by=BestBy("goodput", (cell,))), started=0.0
    )
    tracker.update("a", {"trial": "t1", "config": "budget=4 topk=4"}, 1.0)
    tracker.update("a", {"point": goodput_point(42)}, 2.0)
    best = tracker.best
    assert best is not None and best.offered == 43 / 8.0 and best.achieved == 43 / 8.0
    snapshot = tracker.snapshot(3.0, 3.0)
    words = snapshot.best_words()
    assert "(5.38 offered, 5.38 sent)" in words
    again = ProgressSnapshot.from_json(snapshot.to_json())
    assert again.best == best and again.best_words() == words
