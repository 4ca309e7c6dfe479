"""Speculative schedules proposed from the answers across load, in each engine's own form.

The per-load answers come from synthetic results whose best draft length falls with load
(tests/unit/test_answers_across_load.py); the engines' forms are checked against what vLLM
0.33 and SGLang 0.5.23 read (their rules as the module docstrings quote them).
"""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import numpy as np

from orchestrator.answers import answer_sweep
from orchestrator.answers.estimate import Spread
from orchestrator.answers.schedule import band_starts, judged_loads
from orchestrator.engines.schedule import NativeSchedule, NoNativeSchedule, ScheduleBand
from orchestrator.engines.sglang.schedule import native_schedule as sglang_schedule
from orchestrator.engines.shared import last_flag_value
from orchestrator.engines.vllm.schedule import native_schedule as vllm_schedule
from orchestrator.invocation import ServerRecipe, UnitBase
from orchestrator.store import MatrixCell, ThroughputMetrics, ThroughputPoint
from orchestrator.sweepfile import parse_sweep
from orchestrator.sweepfile.schema import KnobMapping
from tests.unit.test_answers import Bench, only
from tests.unit.test_answers_across_load import CONFIGS, measured, sweep_text

VLLM_KNOBS = {
    "method": KnobMapping(flag="--speculative-config", json_key="method"),
    "tokens": KnobMapping(flag="--speculative-config", json_key="num_speculative_tokens"),
}
SGLANG_KNOBS = {
    "algorithm": KnobMapping(flag="--speculative-algorithm"),
    "steps": KnobMapping(flag="--speculative-num-steps"),
    "topk": KnobMapping(flag="--speculative-eagle-topk"),
    "drafts": KnobMapping(flag="--speculative-num-draft-tokens"),
}
UNIT = UnitBase(("/opt/vllm/bin/vllm", "serve", "/models/m", "--port", "8000"))
DROPIN = "/etc/systemd/system/sglang.service.d/90-orchestrator.conf"


def flag_value(argv: tuple[str, ...], flag: str) -> str | None:
    found = last_flag_value(argv, (flag,))
    return None if found is None else found[1]


def launched(form: NativeSchedule, knobs: dict[str, KnobMapping]) -> tuple[str, ...]:
    """The argv a schedule trial runs, built by the invocation builder every trial uses."""
    recipe = ServerRecipe(knobs, dropin=DROPIN)
    return recipe.invocation(form.config, UNIT, overlay=form.overlay).argv


def speculative_config(form: NativeSchedule) -> Any:
    return json.loads(flag_value(launched(form, VLLM_KNOBS), "--speculative-config") or "null")


def test_bands_start_at_one_and_at_the_geometric_midpoints() -> None:
    assert band_starts([1, 8, 32]) == [1, 3, 16]
    assert band_starts([1, 2]) == [1, 2]
    assert band_starts([4, 64]) == [1, 16]


def test_vllm_takes_the_draft_length_by_batch_size_capped_by_the_largest() -> None:
    bands = [
        ScheduleBand(1, {"method": "eagle3", "tokens": 7}),
        ScheduleBand(3, {"method": "eagle3", "tokens": 5}),
        ScheduleBand(16, {"method": "eagle3", "tokens": 3}),
    ]
    form = vllm_schedule(bands, VLLM_KNOBS)
    assert isinstance(form, NativeSchedule)
    body = speculative_config(form)
    assert body == {
        "method": "eagle3",
        "num_speculative_tokens": 7,
        "num_speculative_tokens_per_batch_size": [[1, 2, 7], [3, 15, 5], [16, 16, 3]],
    }
    assert form.config == {"method": "eagle3", "tokens": 7}
    assert form.overlay.refused_line.startswith("Dynamic speculative decoding is not supported")


def test_vllm_merges_equal_neighbours_and_drafts_nothing_where_the_baseline_won() -> None:
    bands = [
        ScheduleBand(1, {"method": "ngram", "tokens": 4}),
        ScheduleBand(3, {"method": "ngram", "tokens": 4}),
        ScheduleBand(16, {}),
    ]
    form = vllm_schedule(bands, VLLM_KNOBS)
    assert isinstance(form, NativeSchedule)
    body = speculative_config(form)
    assert body["num_speculative_tokens_per_batch_size"] == [[1, 15, 4], [16, 16, 0]]


def test_vllm_says_why_it_takes_no_schedule() -> None:
    other_method = [
        ScheduleBand(1, {"method": "eagle3", "tokens": 5}),
        ScheduleBand(8, {"method": "ngram", "tokens": 3}),
    ]
    form = vllm_schedule(other_method, VLLM_KNOBS)
    assert isinstance(form, NoNativeSchedule) and "method differ" in form.reason
    suffix = [ScheduleBand(1, {"method": "suffix", "tokens": 5}),
              ScheduleBand(8, {"method": "suffix", "tokens": 3})]  # fmt: skip
    form = vllm_schedule(suffix, VLLM_KNOBS)
    assert isinstance(form, NoNativeSchedule) and "method suffix would fall back" in form.reason


def test_sglang_pins_each_slot_to_the_steps_measured_best_there() -> None:
    eagle = {"algorithm": "EAGLE3", "topk": 1}
    bands = [
        ScheduleBand(1, {**eagle, "steps": 7, "drafts": 8}),
        ScheduleBand(3, {**eagle, "steps": 4, "drafts": 5}),
        ScheduleBand(16, {}),
    ]
    form = sglang_schedule(bands, SGLANG_KNOBS)
    assert isinstance(form, NativeSchedule)
    assert form.overlay.flags == {"--speculative-adaptive": None}
    argv = launched(form, SGLANG_KNOBS)
    path = flag_value(argv, "--speculative-adaptive-config")
    assert path == DROPIN.replace(".conf", ".speculative-adaptive-config.json")
    assert "--speculative-adaptive" in argv and flag_value(argv, "--speculative-num-steps") == "7"
    slots = json.loads(form.overlay.files["--speculative-adaptive-config"])
    assert slots == {
        "1": {"candidate_steps": [7], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
              "ceiling_coeff": 0},
        "3": {"candidate_steps": [4], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
              "ceiling_coeff": 0},
        "16": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
               "ceiling_coeff": 0},
    }  # fmt: skip
    # SGLang's loader: integer-string keys, non-negative int steps (adaptive_spec_params).
    assert all(key.isdigit() for key in slots)
    assert all(all(isinstance(s, int) and s >= 0 for s in v["candidate_steps"])
               for v in slots.values())  # fmt: skip
    assert form.config["steps"] == 7 and form.config["drafts"] == 8
    assert form.overlay.refused_line == "speculative_adaptive disabled:"


def test_sglang_adapts_only_eagle_with_top_k_one() -> None:
    ddtree = [ScheduleBand(1, {"algorithm": "DDTREE", "steps": 7}),
              ScheduleBand(8, {"algorithm": "DDTREE", "steps": 3})]  # fmt: skip
    form = sglang_schedule(ddtree, SGLANG_KNOBS)
    assert isinstance(form, NoNativeSchedule) and "EAGLE/EAGLE3 with top-k 1" in form.reason
    topk4 = [ScheduleBand(1, {"algorithm": "EAGLE", "topk": 4, "steps": 7}),
             ScheduleBand(8, {"algorithm": "EAGLE", "topk": 4, "steps": 3})]  # fmt: skip
    form = sglang_schedule(topk4, SGLANG_KNOBS)
    assert isinstance(form, NoNativeSchedule) and "top-k 4" in form.reason


NGRAM: dict[str, dict[str, Any]] = {
    "{}": {},
    "3": {"method": "ngram", "tokens": 3},
    "5": {"method": "ngram", "tokens": 5},
    "7": {"method": "ngram", "tokens": 7},
}


def _vllm_text(objective: str) -> str:
    text = sweep_text(objective).replace(
        "  knobs: {tokens: {flag: --num-speculative-tokens}}\n",
        "  knobs:\n"
        "    method: {flag: --speculative-config, json_key: method}\n"
        "    tokens: {flag: --speculative-config, json_key: num_speculative_tokens}\n",
    )
    text = "engine: vllm\n" + text.replace(
        "configs: [{tokens: 3}, {tokens: 5}, {tokens: 7}]",
        "configs: [{method: ngram, tokens: 3}, {method: ngram, tokens: 5},"
        " {method: ngram, tokens: 7}]",
    )
    return text


def _vllm_answer(objective: str) -> Any:
    bench = Bench()
    measured(bench, np.random.default_rng(3), 3, configs=NGRAM)
    return only(answer_sweep(bench.results(), parse_sweep(_vllm_text(objective), "s.yaml")))


def test_an_across_load_answer_proposes_the_engines_schedule() -> None:
    answer = _vllm_answer("{metric: output_tok_s, context: 1024, concurrency: [1, 8, 32]}")
    schedule = answer.schedule
    assert schedule is not None and schedule.native is not None
    assert [(b.start, b.end, b.load, b.best.config["tokens"]) for b in schedule.bands] == [
        (1, 2, 1, 7),
        (3, 15, 8, 5),
        (16, None, 32, 3),
    ]
    document = json.loads(json.dumps(answer.to_json(), allow_nan=False))["schedule"]
    assert document["bands"][0]["from"] == 1 and document["bands"][2]["to"] is None
    assert len(document["bands"][1]["ci95"]) == 2
    overlay = document["native"]["overlay"]
    assert overlay["json"]["--speculative-config"]["num_speculative_tokens_per_batch_size"] == [
        [1, 2, 7], [3, 15, 5], [16, 16, 3]
    ]  # fmt: skip
    assert document["native"]["config"] == {"method": "ngram", "tokens": 7}


def test_a_load_list_on_an_engine_without_a_schedule_gives_the_bands_as_they_are() -> None:
    bench = Bench()
    measured(bench, np.random.default_rng(4), 3)
    text = sweep_text("{metric: output_tok_s, context: 1024, concurrency: [1, 8, 32]}")
    answer = only(answer_sweep(bench.results(), parse_sweep(text, "s.yaml")))  # SGLang knobs
    schedule = answer.schedule
    assert schedule is not None and schedule.native is None
    assert schedule.no_native is not None and "--speculative-num-steps" in schedule.no_native
    assert [b.best.config for b in schedule.bands] == [{"tokens": 7}, {"tokens": 5}, {"tokens": 3}]


ACROSS = "{metric: output_tok_s, context: 1024, concurrency: [1, 8, 32]}"


def _with_schedule_trials(values: dict[int, float], repeats: int = 3, seed: int = 5) -> Any:
    """The answer to :func:`schedule_results`."""
    results = schedule_results(values, repeats, seed)
    return only(answer_sweep(results, parse_sweep(_vllm_text(ACROSS), "s.yaml")))


def schedule_results(values: dict[int, float], repeats: int = 3, seed: int = 5) -> Any:
    """The vLLM sweep's results plus ``repeats`` restarts of the proposed schedule, measuring
    ``values`` per concurrency (each restart's speed drawn like the fixed configs')."""
    objective = ACROSS
    first = _vllm_answer(objective)
    native = first.schedule.native
    bench = Bench()
    rng = np.random.default_rng(3)
    measured(bench, rng, 3, configs=NGRAM)
    draws = np.random.default_rng(seed)
    for _ in range(repeats):
        factor = 1 + 0.01 * float(draws.standard_normal())
        points: list[Any] = [
            ThroughputPoint(
                context=1024, concurrency=c, metrics=ThroughputMetrics(output_tok_s=v * factor)
            )
            for c, v in values.items()
        ]
        bench._add("a", native.config, points, cells=tuple(MatrixCell(1024, c) for c in values))
        last = bench.trials[-1]
        plan = dataclasses.replace(last.plan, purpose="schedule", overlay=native.overlay)
        bench.trials[-1] = dataclasses.replace(last, plan=plan)
    return bench.results()


def test_a_schedule_that_wins_where_the_best_fixed_config_loses_is_recommended() -> None:
    # The per-load winners' truth (tokens 7 at c1, 5 at c8, 3 at c32) run as one schedule.
    answer = _with_schedule_trials({1: 140.0, 8: 560.0, 32: 1100.0})
    verdict = answer.schedule.verdict
    assert verdict is not None and verdict.restarts == 3
    by_load = {c.cell.concurrency: c for c in verdict.comparisons}
    fixed = answer.best.config  # the config deployed without the schedule
    assert all(c.fixed.config == fixed for c in verdict.comparisons)
    assert [by_load[c].verdict for c in (1, 8, 32)].count("worse") == 0
    assert "better" in {c.verdict for c in verdict.comparisons}
    assert verdict.recommended and verdict.words.startswith("deploy the schedule")
    document = json.loads(json.dumps(answer.to_json(), allow_nan=False))
    assert document["schedule"]["verdict"]["recommended"] is True
    # Three loads read at once: each margin's interval is one of a simultaneous 95 % family,
    # and every reader is told so.
    assert verdict.confidence == 1 - 0.05 / 3
    intervals = document["schedule"]["verdict"]["intervals"]
    assert intervals["simultaneous"] == 0.95 and intervals["method"] == "bonferroni"
    assert intervals["each"] == verdict.confidence and "98.3%" in intervals["covers"]
    assert verdict.words.endswith("(simultaneous 95% intervals over 3 loads)")


def test_a_load_s_margin_is_read_on_the_family_s_wider_interval() -> None:
    """The same two spreads judged alone and as one of three loads: the family's interval is
    wider (Bonferroni's 98.3 % each), so a margin just beyond one 95 % interval is a tie
    among three."""
    fixed = Spread(100.0, 0.01, 8.0, "restarts", 3)
    schedule = Spread(103.2, 0.01, 8.0, "restarts", 3)
    ((alone, said_alone),), level = judged_loads([(schedule, fixed)], minimized=False)
    assert level == 0.95 and said_alone == "better"
    family, level = judged_loads([(schedule, fixed)] * 3, minimized=False)
    assert level == 1 - 0.05 / 3
    assert [said for _, said in family] == ["tie"] * 3
    (margin, _) = family[0]
    assert margin.ci95 is not None and alone.ci95 is not None
    assert margin.ci95[0] < 0 < alone.ci95[0] and margin.ci95[1] > alone.ci95[1]
    assert margin.relative == alone.relative


def test_a_schedule_that_loses_at_one_load_is_not_recommended_and_says_where() -> None:
    # Switching costs it 15 % at c32: better at c1, worse at c32.
    answer = _with_schedule_trials({1: 140.0, 8: 560.0, 32: 1100.0 * 0.85 * 0.85})
    verdict = answer.schedule.verdict
    assert verdict is not None and not verdict.recommended
    worse = [c for c in verdict.comparisons if c.verdict == "worse"]
    assert [c.cell.concurrency for c in worse] == [32]
    assert "lost at c32" in verdict.words and verdict.words.startswith("keep the best fixed")
    # The fixed answer is unchanged by the schedule's restarts.
    assert answer.best is not None and answer.best.config != {}


def test_schedule_trials_are_not_a_fixed_config() -> None:
    answer = _with_schedule_trials({1: 10_000.0, 8: 10_000.0, 32: 10_000.0})
    labels = [c.label for c in answer.contenders]
    assert all("schedule" not in label for label in labels)
    assert answer.best is not None and answer.best.estimate.value < 2000


def test_a_ddtree_answer_across_load_has_no_native_schedule_and_gives_the_bands() -> None:
    text = sweep_text("{metric: output_tok_s, context: 1024, concurrency: [1, 8, 32]}").replace(
        "  knobs: {tokens: {flag: --num-speculative-tokens}}\n",
        "  knobs:\n"
        "    algorithm: {flag: --speculative-algorithm}\n"
        "    tokens: {flag: --speculative-ddtree-budget}\n",
    ).replace(
        "configs: [{tokens: 3}, {tokens: 5}, {tokens: 7}]",
        "configs: [{algorithm: DDTREE, tokens: 3}, {algorithm: DDTREE, tokens: 5},"
        " {algorithm: DDTREE, tokens: 7}]",
    )
    ddtree = {key: {"algorithm": "DDTREE", **c} if c else {} for key, c in CONFIGS.items()}
    bench = Bench()
    measured(bench, np.random.default_rng(6), 3, configs=ddtree)
    answer = only(answer_sweep(bench.results(), parse_sweep(text, "s.yaml")))
    schedule = answer.schedule
    assert schedule is not None and schedule.native is None
    assert schedule.no_native is not None and "(here DDTREE)" in schedule.no_native
    assert [b.best.config["tokens"] for b in schedule.bands] == [7, 5, 3]
    assert [(b.start, b.end) for b in schedule.bands] == [(1, 2), (3, 15), (16, None)]
