"""The report's answer across load: the answer at each load in words, tables and a band chart,
the schedule (its native form, its verdict once measured), and the front of total against
per-user throughput of the measured configs.

Answers come from the answers layer on synthetic results whose best draft length falls with
load (tests/unit/test_answers_across_load.py); a schedule's verdict is built by hand here, as
the answers layer will hand it over.
"""

from __future__ import annotations

import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from typing import Any, Literal

import numpy as np
import pytest
import yaml

from orchestrator.answers import Answer, Estimate, Margin, ObjectiveView, answer_sweep
from orchestrator.answers.model import LoadComparison, ScheduleVerdict
from orchestrator.points import ThroughputPoint
from orchestrator.report import render
from orchestrator.report.across import FrontPoint, front_points, load_rows, pareto
from orchestrator.report.html import across_load_html
from orchestrator.report.model import SCHEDULE_LABEL, SweepReport, build_report
from orchestrator.report.tables import (
    front_table,
    per_load_table,
    pooled_cell,
    schedule_verdict_table,
)
from orchestrator.report.words import (
    across_load_words,
    answer_words,
    bands_text,
    native_form,
    readable,
)
from orchestrator.store.results import SweepResults
from orchestrator.sweepfile import parse_sweep
from orchestrator.types import MatrixCell
from tests.unit.test_answers import Bench, only
from tests.unit.test_answers_across_load import measured, sweep_text
from tests.unit.test_schedules import schedule_results

NS = {"s": "http://www.w3.org/2000/svg"}
OBJECTIVE = "{metric: output_tok_s, context: 1024, concurrency: [1, 8, 32]}"
NGRAM = {
    "{}": {},
    "3": {"method": "ngram", "tokens": 3},
    "5": {"method": "ngram", "tokens": 5},
    "7": {"method": "ngram", "tokens": 7},
}


def vllm_sweep(results: SweepResults) -> Answer:
    """The across-load answer of the shared sweep on vLLM, its draft knobs inside
    ``--speculative-config`` over :data:`NGRAM`'s configs (so a native schedule)."""
    sweep = yaml.safe_load(sweep_text(OBJECTIVE))
    sweep["engine"] = "vllm"
    sweep["server"]["knobs"] = {
        knob: {"flag": "--speculative-config", "json_key": key}
        for knob, key in (("method", "method"), ("tokens", "num_speculative_tokens"))
    }
    sweep["configs"] = [config for config in NGRAM.values() if config]
    return only(answer_sweep(results, parse_sweep(yaml.safe_dump(sweep), "s.yaml")))


def with_decode(results: SweepResults) -> SweepResults:
    """Every point with a median per-request decode rate (a little above total / users)."""

    def decode(point: Any) -> Any:
        if not isinstance(point, ThroughputPoint) or point.metrics.output_tok_s is None:
            return point
        rate = point.metrics.output_tok_s / (point.concurrency or 1) * 1.1
        metrics = dataclasses.replace(point.metrics, request_decode_tok_s_p50=rate)
        return dataclasses.replace(point, metrics=metrics)

    trials = tuple(
        dataclasses.replace(t, points=tuple(decode(p) for p in t.points)) for t in results.trials
    )
    return dataclasses.replace(results, trials=trials)


def across(*, decode: bool = False, seed: int = 3) -> tuple[SweepResults, Answer]:
    bench = Bench()
    measured(bench, np.random.default_rng(seed), 3, configs=NGRAM)
    results = with_decode(bench.results()) if decode else bench.results()
    return results, vllm_sweep(results)


def measured_verdict(answer: Answer, gains: tuple[float, ...], spread: float) -> Answer:
    """``answer`` with its schedule measured: at each load the schedule's relative gain over
    the best fixed config, with an interval ``spread`` either side."""
    comparisons = []
    for each, gain in zip(answer.per_load, gains, strict=True):
        fixed = each.best
        assert fixed is not None
        value = fixed.estimate.value * (1 + gain)
        low, high = gain - spread, gain + spread
        said: Literal["better", "worse", "tie"] = (
            "better" if low > 0 else "worse" if high < 0 else "tie"
        )
        comparisons.append(
            LoadComparison(
                each.load_cell,
                fixed,
                Estimate(value, (value * 0.98, value * 1.02), "restarts", 2),
                Margin(gain, (low, high)),
                said,
            )
        )
    recommended = all(c.verdict != "worse" for c in comparisons) and any(
        c.verdict == "better" for c in comparisons
    )
    verdict = ScheduleVerdict(recommended, tuple(comparisons), "what the answers layer says", 2)
    assert answer.schedule is not None
    schedule = dataclasses.replace(answer.schedule, verdict=verdict)
    return dataclasses.replace(answer, schedule=schedule)


def across_report(*, verdict: bool = True, decode: bool = True) -> SweepReport:
    """A one-host sweep answered across load, its schedule measured (``verdict``) or not."""
    results, answer = across(decode=decode)
    if verdict:
        answer = measured_verdict(answer, (0.04, 0.01, -0.002), 0.015)
    return build_report(results, [], {}, answers=[answer])


# --- the words -----------------------------------------------------------------------------


def test_each_load_is_said_with_its_config_interval_and_where_the_winner_changes() -> None:
    _, answer = across()
    said = across_load_words(readable(answer))
    assert said is not None
    c1, c8, c32 = said.loads
    assert re.fullmatch(
        r"c1: tokens=7, 1\d\d tok/s \[1\d\d, 1\d\d\] \(2\.\d\d× the baseline \[.*\]\); "
        r"beats tokens=5 by \d+% \[\d+%, \d+%\]",
        c1,
    ), c1
    assert c8.startswith("c8: tokens=5, ") and "beats tokens=3 by" in c8
    assert c32.startswith("c32: tokens=3, 1,")
    assert said.changes == (
        "Where the winner changes: from c8: tokens=5 (before: tokens=7); "
        "from c32: tokens=3 (before: tokens=5)."
    )


def test_a_proposed_schedule_is_no_advice_until_it_is_measured() -> None:
    _, answer = across()
    shown = readable(answer)
    said = across_load_words(shown)
    assert said is not None
    assert said.schedule[0].startswith(
        "Schedule proposed from the per-load answers: tokens=7 at batch 1–2, tokens=5 at "
        "batch 3–15, tokens=3 at batch 16 and up."
    )
    assert "starts the server from method=ngram tokens=7" in said.schedule[1]
    assert "'Dynamic speculative decoding is not supported" in said.schedule[1]
    assert said.verdict == (
        "Not measured yet: the schedule has not run as a trial of its own against the best "
        "fixed config at every load, so it is a proposal and the advice is the best fixed "
        "config over the loads, tokens=5.",
    )
    headline = answer_words(shown).headline
    assert headline.startswith("Deploy tokens=5 on gpu: ")
    assert "at context 1024 across c1, c8, c32 (the geomean, each load weighing the same)" in (
        headline
    )
    assert shown.schedule is not None and shown.schedule.native is not None
    assert native_form(shown.schedule.native) == (
        (
            "keys added to --speculative-config's JSON",
            '{"num_speculative_tokens_per_batch_size": [[1, 2, 7], [3, 15, 5], [16, 16, 3]]}',
        ),
    )


def test_a_measured_schedule_that_wins_leads_the_headline_one_that_loses_does_not() -> None:
    _, answer = across()
    won = readable(measured_verdict(answer, (0.04, 0.01, -0.002), 0.015))
    assert answer_words(won).headline == (
        "Deploy the schedule on gpu: tokens=7 at batch 1–2, tokens=5 at batch 3–15, tokens=3 "
        "at batch 16 and up; measured against the best fixed config at every load, better at "
        "c1, tied at c8, c32, worse nowhere."
    )
    said = across_load_words(won)
    assert said is not None
    assert said.verdict[0] == (
        "Measured (2 restarts of the schedule) against the best fixed config at each load: "
        "better at c1; tie at c8, c32. Recommended: not worse at any load beyond the noise, "
        "and better at one."
    )
    assert said.verdict[1] == "what the answers layer says"
    lost = readable(measured_verdict(answer, (0.04, 0.01, -0.05), 0.015))
    assert answer_words(lost).headline.startswith("Deploy tokens=5 on gpu: ")
    said = across_load_words(lost)
    assert said is not None and said.verdict[0].endswith(
        "better at c1; tie at c8; worse at c32. Not recommended: the advice is the best fixed "
        "config over the loads, tokens=5."
    )


def test_neighbouring_bands_of_one_config_are_said_once() -> None:
    """The server runs one config over both bands: the words say so once, while the bands
    (one per measured load) keep each."""
    _, answer = across()
    assert answer.schedule is not None
    first, second, third = answer.schedule.bands
    same = dataclasses.replace(second, best=first.best)
    schedule = dataclasses.replace(answer.schedule, bands=(first, same, third))
    assert bands_text(readable(dataclasses.replace(answer, schedule=schedule)).schedule) == (
        "tokens=7 at batch 1–15, tokens=3 at batch 16 and up"
    )
    assert len(schedule.bands) == 3


def test_a_tie_at_a_load_names_the_tied_configs() -> None:
    _, answer = across()
    at8 = answer.per_load[1]
    assert at8.runner_up is not None
    tied = dataclasses.replace(
        at8, verdict="tie", tied=(at8.runner_up,), margin=Margin(0.01, (-0.02, 0.04))
    )
    shown = readable(dataclasses.replace(answer, per_load=(answer.per_load[0], tied,
                                                           answer.per_load[2])))  # fmt: skip
    said = across_load_words(shown)
    assert said is not None
    assert said.loads[1].startswith("c8: a tie, tokens=5 first by rank (")
    assert said.loads[1].endswith("with tokens=3; lead 1.0% [-2.0%, 4.0%], within the uncertainty")
    row = per_load_table(shown).rows[1]
    assert (row[1].text, row[1].kind) == ("tie", "flagged")
    assert row[2].text == "tokens=5 (tied: tokens=3)"
    chart = _band_chart(render([build_report(across()[0], [], {}, answers=[shown])], "html"))
    ties = chart.findall(".//s:g[@class='band tie']", NS)
    assert len(ties) == 1 and "tie" in _texts(ties[0])


def test_rate_loads_stretch_halfway_to_their_neighbours_and_have_no_schedule() -> None:
    _, answer = across()
    rates = (2.0, 8.0, 32.0)
    per_load = tuple(
        dataclasses.replace(
            each,
            objective=ObjectiveView("output_tok_s", (MatrixCell(1024, rate=r),), False),
        )
        for each, r in zip(answer.per_load, rates, strict=True)
    )
    at_rates = dataclasses.replace(answer, per_load=per_load, schedule=None)
    rows = load_rows(at_rates)
    assert [(r.start, r.end) for r in rows] == [(None, 4.0), (4.0, 16.0), (16.0, None)]
    assert [r.range_words() for r in rows] == ["", "", ""]
    said = across_load_words(readable(at_rates))
    assert said is not None and said.schedule[0].startswith("No schedule: the loads are request")


# --- the tables ----------------------------------------------------------------------------


def test_the_per_load_table_has_a_row_per_load_with_its_band() -> None:
    _, answer = across()
    table = per_load_table(readable(answer))
    assert table.headers[:5] == ("load", "verdict", "config", "estimate (tok/s)", "95% interval")
    assert [(r[0].text, r[1].text, r[2].text, r[8].text) for r in table.rows] == [
        ("c1", "better", "tokens=7", "batch 1–2"),
        ("c8", "better", "tokens=5", "batch 3–15"),
        ("c32", "better", "tokens=3", "batch 16 and up"),
    ]
    best = answer.per_load[0].best
    assert best is not None and best.estimate.ci95 is not None
    assert table.rows[0][4].text == f"[{best.estimate.ci95[0]:,.0f}, {best.estimate.ci95[1]:,.0f}]"


def test_the_verdict_table_compares_the_schedule_with_the_best_fixed_config_per_load() -> None:
    _, answer = across()
    assert schedule_verdict_table(answer) is None  # not measured yet
    table = schedule_verdict_table(readable(measured_verdict(answer, (0.04, 0.01, -0.05), 0.015)))
    assert table is not None
    assert [(r[0].text, r[1].text, r[4].text, r[5].text, r[5].kind) for r in table.rows] == [
        ("c1", "tokens=7", "4.0% [2.5%, 5.5%]", "better", "good"),
        ("c8", "tokens=5", "1.0% [-0.5%, 2.5%]", "tie", ""),
        ("c32", "tokens=3", "-5.0% [-6.5%, -3.5%]", "worse", "bad"),
    ]
    assert table.note is not None and table.note.endswith("Not recommended.")


# --- the front -----------------------------------------------------------------------------


def test_the_front_reads_every_config_at_every_load_with_the_answers_numbers() -> None:
    results, answer = across(decode=True)
    shown = readable(answer)
    report = build_report(results, [], {}, answers=[shown])
    points = front_points(report.groups[0], shown)
    assert len(points) == 4 * 3
    assert {p.source for p in points} == {"decode p50"}
    on_front = {(p.label, p.cell.concurrency) for p in points if p.on_front}
    assert on_front == {("tokens=7", 1), ("tokens=5", 8), ("tokens=3", 32)}
    # One number per config and load on the page: the total is the per-load estimate.
    for each in shown.per_load:
        for contender in each.contenders:
            point = next(
                p for p in points if p.label == contender.label and p.cell == each.load_cell
            )
            assert point.total == contender.estimate.value
    table = front_table(points, shown)
    assert table.headers == (
        "config", "c1 total / per user", "c8 total / per user", "c32 total / per user"
    )  # fmt: skip
    marked = [(r[0].text, i) for r in table.rows for i, c in enumerate(r) if c.kind == "best"]
    assert sorted(marked) == [("tokens=3", 3), ("tokens=5", 2), ("tokens=7", 1)]


def test_schedule_trials_are_the_schedule_s_own_never_pooled_into_its_fixed_settings() -> None:
    """A schedule trial's config is the schedule's fixed settings (tokens 7, its largest draft
    length): its points are the schedule's, on the front and in the cell tables, and the
    fixed config's numbers are what its own restarts measured."""
    values = {1: 150.0, 8: 600.0, 32: 1200.0}
    results = schedule_results(values)
    fixed_only = dataclasses.replace(results, trials=tuple(
        t for t in results.trials if t.plan is None or t.plan.purpose != "schedule"
    ))  # fmt: skip
    answer = readable(vllm_sweep(results))
    report = build_report(results, [], {}, answers=[answer])
    group = report.groups[0]
    scheduled = [t for t in group.trials if t.plan is not None and t.plan.purpose == "schedule"]
    assert len(scheduled) == 3 and {t.config["tokens"] for t in scheduled} == {7}
    assert {(t.label, t.short_label) for t in scheduled} == {(SCHEDULE_LABEL, SCHEDULE_LABEL)}
    before = build_report(fixed_only, [], {}, answers=[answer]).groups[0]
    for cell in (1, 8, 32):
        pooled = {row.label: row.output_tok_s for row in pooled_cell(group, 1024, cell)}
        alone = {row.label: row.output_tok_s for row in pooled_cell(before, 1024, cell)}
        assert pooled.pop(SCHEDULE_LABEL) == pytest.approx(values[cell], rel=0.05)
        assert pooled == alone  # tokens=7 is its own restarts, not the schedule's
    front = [p for p in front_points(group, answer) if p.label == SCHEDULE_LABEL]
    assert [p.cell.concurrency for p in front] == [1, 8, 32]


def test_the_front_draws_the_schedule_in_a_colour_and_legend_entry_of_its_own() -> None:
    """The schedule is no contender of any load, so it has no colour from the answers: it
    gets the next one, and the legend names it, rather than wearing the first config's."""
    results = schedule_results({1: 150.0, 8: 600.0, 32: 1200.0})
    answer = readable(vllm_sweep(results))
    report = build_report(results, [], {}, answers=[answer])
    html = across_load_html(report, answer, "h3")
    legend = re.findall(r'style="background:([^"]+)"></span>([^<]+)</span>', html)
    colors = {name: color for color, name in legend}
    assert SCHEDULE_LABEL in colors, legend
    assert [color for color, _ in legend].count(colors[SCHEDULE_LABEL]) == 1, legend


def test_without_a_decode_rate_the_total_over_the_concurrency_stands_in() -> None:
    results, answer = across(decode=False)
    report = build_report(results, [], {}, answers=[answer])
    points = front_points(report.groups[0], answer)
    assert {p.source for p in points} == {"total / concurrency"}
    at32 = [p for p in points if p.cell.concurrency == 32]
    assert all(p.per_user == pytest.approx(p.total / 32) for p in at32)
    assert "*" in front_table(points, answer).rows[0][2].text


def test_the_pareto_front_keeps_what_nothing_beats_on_both() -> None:
    cell = MatrixCell(1024, 1)

    def point(label: str, total: float, per_user: float) -> FrontPoint:
        return FrontPoint(label, label, cell, total, per_user, "decode p50")

    marked = pareto(
        [point("a", 100, 50), point("b", 200, 20), point("c", 90, 40), point("d", 200, 20)]
    )
    assert [p.on_front for p in marked] == [True, True, False, True]


# --- the renderings ------------------------------------------------------------------------


def _svgs(html: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", html, flags=re.S)]


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]


def _band_chart(html: str) -> ET.Element:
    (chart,) = [s for s in _svgs(html) if s.attrib["aria-label"].startswith("The config named")]
    return chart


def test_the_html_report_opens_with_a_band_per_load_and_the_front() -> None:
    report = across_report()
    html = render([report], "html")
    assert html.index('<div class="across">') < html.index("Over all loads on gpu")
    chart = _band_chart(html)
    bands = chart.findall(".//s:g[@class='band']", NS)
    assert len(bands) == 3
    (answer,) = report.answers
    for band, each, label in zip(bands, answer.per_load, ("tokens=7", "tokens=5", "tokens=3"),
                                 strict=True):  # fmt: skip
        assert band.findtext("s:text[@class='label']", namespaces=NS) == label
        value = band.findtext("s:text[@class='value']", namespaces=NS) or ""
        assert each.best is not None and each.best.estimate.ci95 is not None
        assert value.endswith(f"{each.best.estimate.ci95[1]:,.0f}]") and " [" in value
        assert len(band.findall(".//s:g[@class='whisker']/s:line", NS)) == 3
        assert band.findall("s:rect[@class='strip']", NS)
    (front,) = [s for s in _svgs(html) if s.attrib["aria-label"] == "Total vs per-user throughput"]
    assert len(front.findall(".//s:circle[@class='mark']", NS)) == 4 * 3
    rings = front.findall(".//s:circle[@class='front-point']", NS)
    assert len(rings) == 3 and all("Pareto front" in (r.findtext("s:title", namespaces=NS) or "")
                                   for r in rings)  # fmt: skip
    assert front.findall(".//s:polyline[@class='front']", NS)
    assert "num_speculative_tokens_per_batch_size" in html
    assert "The schedule against the best fixed config at each load on gpu" in html
    for root in _svgs(html):
        assert root.tag == "{http://www.w3.org/2000/svg}svg"


def test_the_markdown_report_says_the_same_in_text_and_tables() -> None:
    markdown = render([across_report(verdict=False)], "md")
    order = [
        "**Deploy tokens=5 on gpu:",
        "### The answer across load on gpu",
        "- c1: tokens=7, ",
        "Where the winner changes: from c8: tokens=5 (before: tokens=7)",
        "#### The answer at each load on gpu: output_tok_s",
        "| c8 | better | tokens=5 |",
        "#### The schedule",
        '{"num_speculative_tokens_per_batch_size": [[1, 2, 7], [3, 15, 5], [16, 16, 3]]}',
        "Not measured yet:",
        "#### Total vs per-user throughput on gpu",
        "### Over all loads on gpu",
        "- Estimate: tokens=5",
        "## Host type `gpu`",
    ]
    places = [markdown.index(text) for text in order]
    assert places == sorted(places)
    assert "#### The schedule against the best fixed config" not in markdown
    document = json.loads(render([across_report()], "json"))
    assert document["sweeps"][0]["answers"][0]["schedule"]["verdict"]["recommended"] is True


def test_an_answer_at_one_load_has_no_across_load_block() -> None:
    bench = Bench()
    measured(bench, np.random.default_rng(1), 2)
    text = sweep_text("{metric: output_tok_s, context: 1024, concurrency: 8}")
    answers = answer_sweep(bench.results(), parse_sweep(text, "s.yaml"))
    report = build_report(bench.results(), [], {}, answers=answers)
    assert across_load_words(answers[0]) is None
    assert "across load" not in render([report], "md")
    assert '<div class="across">' not in render([report], "html")
