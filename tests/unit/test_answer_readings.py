"""What a tester read in the report and must not read again (issue 22), one case each, on
results built as the store hands them over (see test_answers.Bench)."""

from __future__ import annotations

import dataclasses

from orchestrator.answers import answer_sweep
from orchestrator.answers.estimate import Sample, spread
from orchestrator.report.model import short_labels
from orchestrator.report.words import answer_words, readable
from orchestrator.store import ExplorationStop
from orchestrator.sweepfile import parse_sweep
from tests.unit.test_answers import B4, B8, B16, Bench, make_sweep, only, sweep_text


def test_an_interval_of_a_positive_metric_never_goes_below_zero() -> None:
    """Two restarts 24 % apart: a linear t interval was [-8.5, 23.2] req/s."""
    wide = spread([Sample(11.0), Sample(4.8)], None)
    assert wide is not None and wide.ci95 is not None
    low, high = wide.ci95
    assert 0.0 < low < 7.9 < high


def test_identical_restarts_get_an_interval_of_non_zero_width() -> None:
    """``[15.9, 15.9]``, cv 0.0 %, was shown for a capped goodput."""
    same = spread([Sample(15.9), Sample(15.9)], None)
    assert same is not None and same.ci95 is not None and same.cv == 0.0
    low, high = same.ci95
    assert low < 15.9 < high


def test_the_baseline_is_tied_only_when_the_best_speedup_interval_holds_one() -> None:
    bench = Bench()
    for value in (11.0, 4.8):  # the baseline: 2 restarts, cv 24 %
        bench.run("a", {}, value)
    for value in (16.0, 15.9):
        bench.run("a", B8, value)
    bench.run("a", B4, 15.8)
    answer = only(answer_sweep(bench.results(), make_sweep()))
    assert answer.best is not None and answer.best.speedup_ci95 is not None
    baseline = next(c for c in answer.contenders if not c.config)
    low, high = answer.best.speedup_ci95
    assert (baseline in answer.tied) == (low <= 1.0 <= high)
    assert baseline.vs_best is not None and baseline.vs_best.ci95 is not None
    # One interval, two readings: the margin against the baseline is the speedup less 1.
    assert baseline.vs_best.ci95[0] == low - 1.0 and baseline.vs_best.ci95[1] == high - 1.0


def test_a_deadline_cut_sweep_says_so_first_and_never_deploys() -> None:
    """finish_by 3 minutes away: only the baseline ran, state done, headline was "Deploy
    baseline ... the only valid config measured"."""
    bench = Bench()
    bench.run("a", {}, 80.0)
    results = dataclasses.replace(
        bench.results(),
        summary={"stopped": "finish_by deadline"},
        exploration_stops=(
            ExplorationStop(
                "gpu", "only the confirmation reserve of the time to finish_by is left", 0, 3
            ),
        ),
    )
    said = answer_words(readable(only(answer_sweep(results, make_sweep()))))
    assert said.headline.startswith("Cut short on gpu (the finish_by deadline stopped it")
    assert "Deploy" not in said.headline
    assert "nothing to compare it with" in said.headline


def test_a_cancel_after_the_baseline_names_no_failed_config() -> None:
    """After a cancel: "none of the 17 configs tried produced a measurement" when only the
    baseline was tried (the cancel's own records of trials it kept from starting counted)."""
    bench = Bench()
    bench.run("a", {}, 80.0)
    for config in (B4, B8, B16):
        bench.run("a", config, None, state="cancelled")
    answer = only(answer_sweep(bench.results(state="cancelled"), make_sweep()))
    assert answer.failed == () and answer.restarts_used == 1
    said = answer_words(readable(answer))
    assert said.headline.startswith("Cut short on gpu (the sweep was cancelled")
    assert "produced a measurement" not in said.headline and "Deploy" not in said.headline


def test_a_goodput_at_the_offered_rate_is_said_to_be_capped() -> None:
    """Goodput at an offered 16 req/s: every config scored 15.8-16.0, a six-way tie with
    nothing to say why."""
    text = (
        sweep_text(objective=False).replace(
            "benchmark: {contexts: [1024, 4096], concurrency: [4]}",
            "benchmark: {contexts: [1024], concurrency: [], rate: [16], slo: {ttft_ms: 2000}}",
        )
        + "objective: {metric: goodput, context: 1024, rate: 16}\n"
    )
    sweep = parse_sweep(text, "t.yaml")
    bench = Bench()
    values = {"{}": (9.0, 9.4), "4": (15.8, 15.9), "8": (16.0, 15.9), "16": (15.9, 16.0)}
    configs = {"{}": {}, "4": B4, "8": B8, "16": B16}
    for key, pair in values.items():
        for value in pair:
            bench.run_goodput("a", configs[key], value, rate=16.0)
    answer = only(answer_sweep(bench.results(), sweep))
    assert answer.verdict == "tie" and answer.capped is not None
    assert "16 req/s" in answer.capped and "higher benchmark rate" in answer.capped
    assert "capped" in answer_words(answer).headline


def test_a_better_claim_on_a_flagged_point_says_so_in_its_sentence() -> None:
    bench = Bench()
    for value in (80.0, 81.0):
        bench.run("a", {}, value)
    for value in (130.0, 131.0):
        bench.run("a", B8, value, quality=("client_saturated",))
    for value in (100.0, 101.0):
        bench.run("a", B4, value)
    for value in (90.0, 91.0):  # the whole space measured: nothing unexplored to doubt it by
        bench.run("a", B16, value)
    said = answer_words(readable(only(answer_sweep(bench.results(), make_sweep()))))
    assert said.headline.startswith("Deploy budget=8")
    assert "flagged" in said.headline and "saturated (S)" in said.headline


def test_every_knob_that_varies_is_shown_and_shared_ones_are_said_once() -> None:
    """ "topk=4" meant budget=4 topk=4 beside "budget=8 topk=2"."""
    configs = [
        {},
        {"algorithm": "DDTREE", "budget": 4, "topk": 4},
        {"algorithm": "DDTREE", "budget": 8, "topk": 2},
        {"algorithm": "DDTREE", "budget": 8, "topk": 4},
    ]
    assert short_labels(configs) == [
        "baseline",
        "budget=4 topk=4",
        "budget=8 topk=2",
        "budget=8 topk=4",
    ]
