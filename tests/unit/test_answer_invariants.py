"""The answer holds together as a person reads it, whatever the stored results (hypothesis).

Each example is a sweep's results as the store hands them over: restarts of a few configs on
two hosts, measuring, screening and confirming, some failed or cancelled, with flagged points,
under a sweep that ended done, cut by its deadline, cancelled or still running. Over every one
(2,000 per property, all properties read off each example):

(a) ``best`` is ``contenders[0]``, and the numbers shown for it agree everywhere: the
    headline's and the details' figures are the contenders table's (rendered in Markdown and
    HTML), the convergence ends on its estimate, the heatmap's marked cell shows it;
(b) ``tied`` is exactly the valid configs whose margin interval against the best, as shown,
    holds 0; the baseline is never tied while the best's speedup interval excludes 1;
(c) every interval of a positive metric has a positive lower bound and a non-zero width;
(d) a sweep that did not finish its plan or search never headlines "Deploy" and says why it
    stopped; nor does one whose best was compared with nothing;
(e) a ``better`` headline resting on a flagged point says so in its own sentence.
"""

from __future__ import annotations

import html as htmllib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.answers import Answer, Contender, answer_sweep
from orchestrator.report import fmt
from orchestrator.report.html import table_html
from orchestrator.report.markdown import table as markdown_table
from orchestrator.report.space import explored_space
from orchestrator.report.tables import contenders_table
from orchestrator.report.words import answer_words, readable, value_text
from orchestrator.store import (
    ExplorationStop,
    HostOutcome,
    LatencySummary,
    MatrixCell,
    SweepResults,
    ThroughputMetrics,
    ThroughputPoint,
    TrialOutcome,
    TrialPlan,
)
from orchestrator.sweepfile import Sweep, parse_sweep

EXAMPLES = 2000
CELL = MatrixCell(1024, 4)
CONFIGS: tuple[Mapping[str, Any], ...] = (
    {},
    {"budget": 4, "topk": 2},
    {"budget": 8, "topk": 2},
    {"budget": 8, "topk": 4},
    {"budget": 16, "topk": 4},
)
QUALITY = ("client_saturated", "errors", "concurrency_short", "too_few_requests")


def _sweep_text(metric: str) -> str:
    return "\n".join(
        [
            "name: t",
            "hosts:",
            '  - {name: a, address: 127.0.0.1, base_url: "http://127.0.0.1:30000", type: gpu}',
            '  - {name: b, address: 127.0.0.2, base_url: "http://127.0.0.2:30000", type: gpu}',
            "server:",
            "  model: m",
            "  knobs:",
            "    budget: {flag: --speculative-ddtree-budget}",
            "    topk: {flag: --speculative-ddtree-topk}",
            "baseline: true",
            "configs: [{budget: 4, topk: 2}, {budget: 8, topk: 2}, {budget: 8, topk: 4},"
            " {budget: 16, topk: 4}, {budget: 32, topk: 8}]",
            "benchmark: {contexts: [1024], concurrency: [4]}",
            f"objective: {{metric: {metric}, context: 1024, concurrency: 4}}",
            "",
        ]
    )


SWEEPS = {
    metric: parse_sweep(_sweep_text(metric), "t.yaml") for metric in ("output_tok_s", "ttft_p99_s")
}


@dataclass(frozen=True)
class Restart:
    config: int
    host: str
    value: float | None
    purpose: str
    state: str
    flags: tuple[str, ...]


@dataclass(frozen=True)
class Case:
    metric: str
    restarts: tuple[Restart, ...]
    state: str
    stopped: str | None
    exploration: str | None

    @property
    def sweep(self) -> Sweep:
        return SWEEPS[self.metric]

    def results(self) -> SweepResults:
        trials = []
        for n, restart in enumerate(self.restarts):
            config = dict(CONFIGS[restart.config])
            points: tuple[ThroughputPoint, ...] = ()
            if restart.value is not None and restart.state == "done":
                tok_s = restart.value if self.metric == "output_tok_s" else 1000.0
                ttft = restart.value / 1000.0 if self.metric == "ttft_p99_s" else 0.5
                points = (
                    ThroughputPoint(
                        context=CELL.context,
                        concurrency=CELL.concurrency,
                        metrics=ThroughputMetrics(
                            output_tok_s=tok_s, ttft=LatencySummary(count=8, p99_s=ttft)
                        ),
                        quality=restart.flags,
                    ),
                )
            trials.append(
                TrialOutcome(
                    key=f"{restart.host}.{json.dumps(config, sort_keys=True)}.{n}",
                    host=restart.host,
                    config=config,
                    baseline=not config,
                    state=restart.state,  # type: ignore[arg-type]
                    cause={"failed": "oom", "cancelled": None}.get(restart.state),
                    attempt=1,
                    started_at=float(n),
                    finished_at=float(n) + 0.5,
                    points=points,
                    plan=TrialPlan(cells=(CELL,), rounds=2, purpose=restart.purpose),  # type: ignore[arg-type]
                )
            )
        stops = (
            (ExplorationStop("gpu", self.exploration, 3, 5),)
            if self.exploration is not None
            else ()
        )
        return SweepResults(
            sweep="t",
            id=1,
            state=self.state,  # type: ignore[arg-type]
            summary={"stopped": self.stopped},
            hosts=(HostOutcome("a", "gpu"), HostOutcome("b", "gpu")),
            trials=tuple(trials),
            exploration_stops=stops,
        )

    @property
    def cut_short(self) -> bool:
        never_ran = any(r.state == "cancelled" for r in self.restarts)
        return (
            self.state != "done"
            or self.stopped is not None
            or never_ran
            or (self.exploration is not None and "finish_by" in self.exploration)
        )


@st.composite
def restarts(draw: st.DrawFn) -> Restart:
    config = draw(st.integers(0, len(CONFIGS) - 1))
    # A config's values sit around its own level, so ties and clear winners both occur; some
    # restarts repeat a value exactly (a capped metric, a rounding).
    level = 100.0 * (1 + config)
    value = draw(
        st.one_of(
            st.floats(level * 0.5, level * 1.5, allow_nan=False),
            st.just(level),
        )
    )
    state = draw(st.sampled_from(("done", "done", "done", "done", "failed", "cancelled")))
    return Restart(
        config=config,
        host=draw(st.sampled_from(("a", "b"))),
        value=value,
        purpose=draw(st.sampled_from(("measure", "measure", "screen", "confirm"))),
        state=state,
        flags=tuple(draw(st.lists(st.sampled_from(QUALITY), max_size=2, unique=True))),
    )


@st.composite
def cases(draw: st.DrawFn) -> Case:
    return Case(
        metric=draw(st.sampled_from(("output_tok_s", "output_tok_s", "ttft_p99_s"))),
        restarts=tuple(draw(st.lists(restarts(), min_size=1, max_size=12))),
        state=draw(st.sampled_from(("done", "done", "done", "cancelled", "running", "failed"))),
        stopped=draw(st.sampled_from((None, None, None, "finish_by deadline"))),
        exploration=draw(
            st.sampled_from(
                (
                    None,
                    "max_restarts reached",
                    "only the confirmation reserve of the time to finish_by is left",
                )
            )
        ),
    )


def _holds_zero(ci: tuple[float, float] | None) -> bool:
    return ci is None or ci[0] <= 0.0 <= ci[1]


def _positive_interval(ci: tuple[float, float] | None) -> bool:
    return ci is None or (0.0 < ci[0] < ci[1])


def _row(rendered: str, label: str) -> str:
    """The Markdown contenders table's row for ``label``."""
    return next(line for line in rendered.splitlines() if line.startswith(f"| {label} "))


def _numbers_agree(answer: Answer) -> None:
    """(a): the figures the words give for the best are the ones its table row shows."""
    best = answer.best
    assert best is not None
    said = answer_words(answer)
    objective = answer.objective
    estimate = fmt.metric_number(objective.metric, best.estimate.value)
    table = contenders_table(answer)
    markdown = "\n".join(markdown_table(table))
    row = _row(markdown, best.label.replace("|", "\\|"))
    assert f"| {estimate} " in row or f"| **{estimate}** " in row
    words = " ".join((said.headline, *said.details))
    assert value_text(objective, best) in words
    if best.speedup_vs_baseline is not None:
        shown = fmt.ratio(best.speedup_vs_baseline) + fmt.interval(best.speedup_ci95, fmt.factor)
        assert shown in row
        if answer.verdict == "better" and answer.runner_up is not None and not answer.stopped:
            assert fmt.ratio(best.speedup_vs_baseline) in said.headline
            assert fmt.interval(best.speedup_ci95, fmt.factor) in said.headline
    if answer.margin is not None and answer.runner_up is not None:
        margin = fmt.percent(answer.margin.relative) + fmt.interval(answer.margin.ci95, fmt.percent)
        runner_row = _row(markdown, answer.runner_up.label)
        assert margin in runner_row
        if answer.verdict == "better" and not answer.stopped:
            assert margin in said.headline
    page = htmllib.unescape(table_html(table))
    assert re.search(rf">\s*{re.escape(estimate)}\s*<", page)


def _check(case: Case) -> None:
    (raw,) = answer_sweep(case.results(), case.sweep)
    answer = readable(raw)
    said = answer_words(answer)
    contenders = answer.contenders
    best = answer.best
    # (a) one rank, one number
    if best is not None:
        assert contenders[0] == best
        _numbers_agree(answer)
        if answer.convergence:
            last = answer.convergence[-1]
            assert last.best == best.estimate.value and last.label == best.label
        grid = explored_space(answer)
        if grid is not None:
            marked = [cell for row in grid.cells for cell in row if cell.is_best]
            for cell in marked:
                assert cell.contender == best
        assert "highest" not in (said.headline + " ".join(said.details)).lower()
    # (b) the tie rule is the margins shown
    valid = [c for c in contenders[1:] if not c.violations]
    for contender in valid:
        assert contender.vs_best is not None
    expected = {c.label for c in valid if _holds_zero(_ci(c))}
    assert {c.label for c in answer.tied} == expected
    if best is not None:
        assert answer.verdict == ("tie" if expected else "better")
    baseline = next((c for c in contenders if not c.config), None)
    if baseline is not None and best is not None and baseline in answer.tied:
        assert best.speedup_ci95 is None or best.speedup_ci95[0] <= 1.0 <= best.speedup_ci95[1]
    # (c) positive, non-degenerate intervals
    for contender in contenders:
        assert _positive_interval(contender.estimate.ci95)
        assert _positive_interval(contender.speedup_ci95) or contender.speedup_vs_baseline == 1.0
    # (d) cut short: said first, never "Deploy"
    if case.cut_short:
        assert answer.stopped
        assert "Deploy" not in said.headline
        assert said.headline.startswith("Cut short")
    if best is not None and answer.runner_up is None:
        assert "Deploy" not in said.headline
    # (e) a better claim on flagged points says so
    if said.headline.startswith("Deploy"):
        assert best is not None and answer.runner_up is not None
        if best.flags or answer.runner_up.flags:
            assert "flagged" in said.headline


def _ci(contender: Contender) -> tuple[float, float] | None:
    assert contender.vs_best is not None
    return contender.vs_best.ci95


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(cases())
def test_every_answer_holds_together(case: Case) -> None:
    _check(case)


def test_the_examples_reach_every_verdict_and_ending() -> None:
    """The generator is not vacuous: it reaches ties, clear winners, cut-short sweeps and
    flagged winners (checked on a fixed sample)."""
    seen: set[str] = set()
    examples: list[Case] = []

    @settings(max_examples=300, deadline=None, database=None, derandomize=True)
    @given(cases())
    def collect(case: Case) -> None:
        examples.append(case)

    collect()
    for case in examples:
        (answer,) = answer_sweep(case.results(), case.sweep)
        seen.add(answer.verdict)
        if answer.stopped:
            seen.add("cut-short")
        if answer.best is not None and answer.best.flags:
            seen.add("flagged")
        if any(not c.config for c in answer.tied):
            seen.add("baseline-tied")
    assert {"better", "tie", "cut-short", "flagged", "baseline-tied"} <= seen, seen
