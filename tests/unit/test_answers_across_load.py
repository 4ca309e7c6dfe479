"""The answer across load: one answer per load with the same interval model and tie rule, the
overall answer weighed by the operator's ``load`` shares, and where the winner changes.

Synthetic results with a known truth: the best config changes with concurrency (a long draft
wins at c1, a short one at c32, as published speculative-decoding numbers show).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pytest

from orchestrator.answers import answer_sweep
from orchestrator.store import MatrixCell, ThroughputMetrics, ThroughputPoint
from orchestrator.sweepfile import SweepFileError, parse_sweep
from tests.unit.test_answers import Bench, only

LOADS = (1, 8, 32)
K3, K5, K7 = {"tokens": 3}, {"tokens": 5}, {"tokens": 7}
TRUTH: dict[str, dict[int, float]] = {
    "{}": {1: 50.0, 8: 300.0, 32: 800.0},
    "3": {1: 90.0, 8: 520.0, 32: 1100.0},
    "5": {1: 120.0, 8: 560.0, 32: 950.0},
    "7": {1: 140.0, 8: 500.0, 32: 700.0},
}
CONFIGS: dict[str, dict[str, int]] = {"{}": {}, "3": K3, "5": K5, "7": K7}


def sweep_text(objective: str) -> str:
    return (
        "name: across\n"
        "hosts:\n"
        '  - {name: a, address: 127.0.0.1, base_url: "http://127.0.0.1:30000", type: gpu}\n'
        "server:\n"
        "  model: m\n"
        "  knobs: {tokens: {flag: --num-speculative-tokens}}\n"
        "baseline: true\n"
        "configs: [{tokens: 3}, {tokens: 5}, {tokens: 7}]\n"
        "benchmark: {contexts: [1024], concurrency: [1, 8, 32]}\n"
        f"objective: {objective}\n"
    )


def measured(
    bench: Bench,
    rng: np.random.Generator,
    repeats: int,
    cv: float = 0.01,
    configs: Mapping[str, Mapping[str, Any]] = CONFIGS,
) -> None:
    """Each config (by its key in :data:`TRUTH`) restarted ``repeats`` times, every restart
    measuring every load."""
    for _ in range(repeats):
        for key, config in configs.items():
            factor = 1 + cv * float(rng.standard_normal())  # one restart's speed
            points: list[Any] = [
                ThroughputPoint(
                    context=1024,
                    concurrency=load,
                    metrics=ThroughputMetrics(output_tok_s=TRUTH[key][load] * factor),
                )
                for load in LOADS
            ]
            bench._add("a", config, points, cells=tuple(MatrixCell(1024, c) for c in LOADS))


def answer_for(objective: str, seed: int = 1, repeats: int = 3) -> Any:
    bench = Bench()
    measured(bench, np.random.default_rng(seed), repeats)
    return only(answer_sweep(bench.results(), parse_sweep(sweep_text(objective), "s.yaml")))


def test_each_load_gets_its_own_answer_and_the_changes_of_winner_are_named() -> None:
    answer = answer_for("{metric: output_tok_s, context: 1024, concurrency: [1, 8, 32]}")
    assert [a.load_cell.concurrency for a in answer.per_load] == [1, 8, 32]
    bests = [None if a.best is None else a.best.config for a in answer.per_load]
    assert bests == [K7, K5, K3]
    assert all(a.verdict == "better" for a in answer.per_load)
    changes = answer.winner_changes()
    assert [(c.cell.concurrency, c.before, c.after) for c in changes] == [
        (8, "tokens=7", "tokens=5"),
        (32, "tokens=5", "tokens=3"),
    ]
    document = json.loads(json.dumps(answer.to_json(), allow_nan=False))
    assert [entry["concurrency"] for entry in document["per_load"]] == [1, 8, 32]
    assert document["per_load"][0]["best"]["config"] == K7
    assert document["per_load"][2]["verdict"] == "better"
    assert document["winner_changes"][0] == {
        "concurrency": 8,
        "rate": None,
        "before": "tokens=7",
        "after": "tokens=5",
    }


def test_a_per_load_interval_is_the_same_as_an_objective_at_that_load_alone() -> None:
    across = answer_for("{metric: output_tok_s, context: 1024, concurrency: [1, 8, 32]}")
    alone = answer_for("{metric: output_tok_s, context: 1024, concurrency: 8}")
    at_8 = across.per_load[1]
    assert at_8.best is not None and alone.best is not None
    assert at_8.best.config == alone.best.config
    assert at_8.best.estimate.value == pytest.approx(alone.best.estimate.value)
    assert at_8.best.estimate.ci95 == pytest.approx(alone.best.estimate.ci95)
    assert at_8.margin is not None and alone.margin is not None
    assert at_8.margin.ci95 == pytest.approx(alone.margin.ci95)


def _weighted_truth(config: str, shares: Mapping[int, float]) -> float:
    total = sum(shares.values())
    return math.exp(sum(w / total * math.log(TRUTH[config][c]) for c, w in shares.items()))


def test_the_overall_answer_is_the_load_weighted_objective() -> None:
    # Mostly at c32: the short draft wins overall; mostly at c1: the long one.
    busy = {1: 0.05, 8: 0.15, 32: 0.8}
    quiet = {1: 0.8, 8: 0.15, 32: 0.05}
    for shares, expected in ((busy, K3), (quiet, K7)):
        load = "{" + ", ".join(f"{c}: {w}" for c, w in shares.items()) + "}"
        answer = answer_for(
            f"{{metric: output_tok_s, context: 1024, concurrency: [1, 8, 32], load: {load}}}"
        )
        assert answer.best is not None and answer.best.config == expected
        truth = _weighted_truth(json.dumps(expected["tokens"]), shares)
        ci = answer.best.estimate.ci95
        assert ci is not None and ci[0] < truth < ci[1]
        assert answer.objective.weights == pytest.approx(
            [w / sum(shares.values()) for w in shares.values()]
        )


def test_without_a_load_weighting_every_load_weighs_the_same() -> None:
    answer = answer_for("{metric: output_tok_s, context: 1024, concurrency: [1, 8, 32]}")
    assert answer.objective.weights == pytest.approx([1 / 3] * 3)
    equal = {c: 1.0 for c in LOADS}
    assert answer.best is not None
    truth = _weighted_truth(json.dumps(answer.best.config["tokens"]), equal)
    assert answer.best.estimate.value == pytest.approx(truth, rel=0.03)


def test_a_single_load_objective_has_no_per_load_answers() -> None:
    answer = answer_for("{metric: output_tok_s, context: 1024, concurrency: 8}")
    assert answer.per_load == () and answer.winner_changes() == ()
    assert answer.to_json()["per_load"] == []


@pytest.mark.parametrize(
    ("objective", "words"),
    [
        (
            "{metric: output_tok_s, context: 1024, concurrency: 8, load: {8: 1}}",
            "give 'concurrency' (or 'rate') as a list",
        ),
        (
            "{metric: output_tok_s, context: 1024, concurrency: [1, 8], load: {1: 0.5}}",
            "missing 8",
        ),
        (
            "{metric: output_tok_s, context: 1024, concurrency: [1, 8],"
            " load: {1: 0.5, 8: 0, 4: 1}}",
            "not listed 4",
        ),
        (
            "{metric: output_tok_s, context: 1024, concurrency: [1, 8], load: {1: 0, 8: 0}}",
            "all 0",
        ),
        ("{metric: output_tok_s, context: 1024, concurrency: [1, 1]}", "duplicate value 1"),
        ("{metric: output_tok_s, context: 1024, concurrency: [1, 16]}", "concurrency 16"),
    ],
)
def test_a_bad_load_objective_names_the_field(objective: str, words: str) -> None:
    with pytest.raises(SweepFileError) as caught:
        parse_sweep(sweep_text(objective), "s.yaml")
    text = str(caught.value)
    assert words in text and "objective" in text and "s.yaml" in text
