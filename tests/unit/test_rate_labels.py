"""Labels at an open-loop cell say the rates measured, not the nominal one alone (issue 32,
item 4: every label said 4 req/s while the seeded Poisson schedule offered 43 arrivals in 8 s,
5.4 req/s). One formatter (``MatrixCell.measured_load``) makes them for the report's answer
labels and the live display; where no point stored its schedule the rate is marked nominal.
"""

from __future__ import annotations

import dataclasses

from orchestrator.answers import Answer, answer_sweep
from orchestrator.progress.snapshot import BestBy
from orchestrator.progress.tracker import SweepShape, SweepTracker
from orchestrator.report.tables import contenders_table
from orchestrator.report.words import answer_words, where
from orchestrator.store import MatrixCell, ThroughputPoint
from orchestrator.types import OfferedLoad
from tests.unit.test_answers import B8, Bench, make_sweep
from tests.unit.test_variance_model import OFFERED, SECONDS, _goodput_sweep, goodput_point

CELL = MatrixCell(2048, rate=4.0)
MEASURED = "context 2048 / rate 4 req/s (5.38 offered, 5.38 sent)"


def _answer(points: dict[str, ThroughputPoint]) -> Answer:
    bench = Bench()
    for host in ("a", "a"):
        for config, point in points.items():
            bench._add(host, {} if config == "base" else B8, [point], cells=(CELL,))
    (answer,) = answer_sweep(bench.results(), _goodput_sweep())
    return answer


def test_the_answer_labels_its_open_loop_cell_with_the_rates_measured() -> None:
    answer = _answer({"base": goodput_point(3), "b8": goodput_point(40)})
    rate = OFFERED / SECONDS
    assert answer.objective.load(CELL) == OfferedLoad(rate, rate)
    assert where(answer.objective) == MEASURED
    assert MEASURED in contenders_table(answer).title
    shown = answer_words(answer)
    assert MEASURED in shown.headline
    assert "rate 4 req/s" not in shown.headline.replace(MEASURED, "")
    assert answer.objective.to_json()["loads"] == [{"offered": rate, "sent": rate}]


def test_a_rate_no_point_measured_is_marked_nominal() -> None:
    """Points stored before their schedule was (no requests_scheduled, no duration_s)."""

    def old(good: int) -> ThroughputPoint:
        point = goodput_point(good)
        metrics = dataclasses.replace(point.metrics, requests_scheduled=None, duration_s=None)
        return dataclasses.replace(point, metrics=metrics)

    answer = _answer({"base": old(3), "b8": old(40)})
    assert answer.objective.load(CELL) is None
    assert where(answer.objective) == "context 2048 / nominal rate 4 req/s"
    assert answer.objective.to_json()["loads"] == [None]


def test_a_closed_loop_label_is_as_before() -> None:
    bench = Bench()
    bench.run("a", {}, 100.0)
    bench.run("a", B8, 120.0)
    (answer,) = answer_sweep(bench.results(), make_sweep())
    assert where(answer.objective) == "context 1024 / concurrency 4"
    assert answer.objective.to_json()["loads"] == [None]


def _tracker(best_by: BestBy) -> SweepTracker:
    tracker = SweepTracker(SweepShape(host_types={"a": "gpu"}, best_by=best_by), started=0.0)
    tracker.update("a", {"trial": "t1", "config": "budget=4 topk=4"}, 1.0)
    tracker.update("a", {"point": goodput_point(42)}, 2.0)
    return tracker


def test_the_live_display_marks_the_header_nominal_and_shows_the_best_measured() -> None:
    snapshot = _tracker(BestBy("goodput", (CELL,))).snapshot(3.0, 3.0)
    assert snapshot.best_by.words() == "goodput at 2048/nominal 4 req/s"
    assert snapshot.best_words() == "budget=4 topk=4 @a: 5.2 req/s (5.38 offered, 5.38 sent)"


def test_the_live_display_point_by_point_names_the_cell_with_its_rates() -> None:
    snapshot = _tracker(BestBy("goodput")).snapshot(3.0, 3.0)
    assert snapshot.best_words().endswith(" at 2048/4 req/s (5.38 offered, 5.38 sent)")
