"""The report's answer: its words per verdict and interval basis, its pictures, and the tables
that pool a host type's hosts. Answers are built here as the answers layer hands them over."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from orchestrator.answers import (
    Answer,
    Contender,
    ConvergenceStep,
    Estimate,
    FailedConfig,
    HostFlag,
    IntervalBasis,
    Margin,
    ObjectiveView,
)
from orchestrator.report import render
from orchestrator.report.html import convergence_figure, space_figure
from orchestrator.report.model import SweepReport, load_report
from orchestrator.report.space import explored_space
from orchestrator.report.tables import (
    best_tables,
    convergence_table,
    pooled_best_table,
    space_table,
)
from orchestrator.report.words import answer_words, readable
from orchestrator.store import Store
from orchestrator.types import MatrixCell
from tests.integration.test_report_support import ConfigSpec, SweepSpec, ddtree, fill_sweep

NS = {"s": "http://www.w3.org/2000/svg"}
OBJECTIVE = ObjectiveView("output_tok_s", (MatrixCell(4096, 32),), minimized=False)


def contender(
    budget: int,
    topk: int,
    value: float,
    *,
    ci: tuple[float, float] | None = None,
    basis: IntervalBasis = "restarts",
    restarts: int = 3,
    speedup: float | None = None,
    speedup_ci: tuple[float, float] | None = None,
    cv: float | None = 0.02,
    noisy: bool = False,
    violations: tuple[str, ...] = (),
    window: int | None = None,
) -> Contender:
    config: dict[str, Any] = {"algorithm": "DDTREE", "budget": budget, "topk": topk}
    label = f"budget={budget} topk={topk}"
    if window is not None:
        config["window"] = window
        label += f" window={window}"
    return Contender(
        config=config,
        label=label,
        estimate=Estimate(
            value=value,
            ci95=ci if ci is not None else (value * 0.97, value * 1.03),
            basis=basis,
            restarts=restarts,
            hosts=("sim-01", "sim-02"),
            cv=cv,
            noisy=noisy,
        ),
        speedup_vs_baseline=speedup,
        speedup_ci95=speedup_ci,
        violations=violations,
    )


WINNER = contender(16, 4, 2310.0, speedup=2.31, speedup_ci=(2.22, 2.40))
RUNNER = contender(12, 4, 2221.0, speedup=2.22, speedup_ci=(2.15, 2.30))


def better(**changes: Any) -> Answer:
    answer = Answer(
        host_type="b300",
        objective=OBJECTIVE,
        verdict="better",
        best=WINNER,
        runner_up=RUNNER,
        margin=Margin(0.04, (0.01, 0.07)),
        explored=5,
        space=84,
        restarts_used=12,
        contenders=(
            WINNER,
            RUNNER,
            contender(8, 4, 1900.0, speedup=1.9),
            contender(8, 2, 1700.0, speedup=1.7),
            contender(16, 2, 2000.0, speedup=2.0),
        ),
        failed=(
            FailedConfig(
                {"algorithm": "DDTREE", "budget": 32, "topk": 8}, "budget=32 topk=8", "oom"
            ),
        ),
        convergence=(
            ConvergenceStep(1, None, None),
            ConvergenceStep(2, 1700.0, "budget=8 topk=2"),
            ConvergenceStep(3, 1900.0, "budget=8 topk=4"),
            ConvergenceStep(4, 1900.0, "budget=8 topk=4"),
            ConvergenceStep(5, 2310.0, "budget=16 topk=4"),
        ),
    )
    return dataclasses.replace(answer, **changes)


# --- the words -----------------------------------------------------------------------------


def test_a_clear_winner_reads_as_the_issue_asks() -> None:
    said = answer_words(better())
    assert said.headline == (
        "Deploy budget=16 topk=4 on b300: 2.31× the baseline [2.22, 2.40] at context 4096 / "
        "concurrency 32; beats budget=12 topk=4 by 4.0% [1.0%, 7.0%]."
    )
    details = "\n".join(said.details)
    assert "output_tok_s 2,310 tok/s [2,241, 2,379], from 3 restarts on sim-01, sim-02" in details
    assert "restart-to-restart and request-to-request variance over 3 restarts" in details
    assert "Explored 5 of 84 configs (12 restarts used); 1 failed; 78 not explored." in details
    assert "Failed, never measured: budget=32 topk=8 (oom)." in details


def test_a_tie_lists_the_tied_configs_and_what_would_break_it() -> None:
    said = answer_words(better(verdict="tie", tied=(RUNNER,), margin=Margin(0.004, (-0.012, 0.02))))
    assert said.headline == (
        "No single winner on b300 at context 4096 / concurrency 32: the data cannot tell "
        "budget=16 topk=4 from budget=12 topk=4 on output_tok_s (the differences are within "
        "the uncertainty)."
    )
    details = "\n".join(said.details)
    # "Highest" only for the top of a column shown: the leader of a tie is first by rank.
    assert "First by rank: budget=16 topk=4" in details
    assert "highest" not in (said.headline + details).lower()
    assert "lead over budget=12 topk=4 is 0.4% [-1.2%, 2.0%]" in details
    assert "more repeats" in details and "benchmark.repeats" in details


def test_no_valid_config_says_why() -> None:
    ruled = (
        contender(16, 4, 2310.0, violations=("ttft_p99_s 2.41 > 2.0",)),
        contender(8, 4, 1900.0, violations=("coding_pass_rate 0.6 < baseline 1.0",)),
    )
    said = answer_words(
        better(verdict="no-valid-config", best=None, runner_up=None, margin=None, contenders=ruled)
    )
    assert said.headline == (
        "No config to deploy on b300 at context 4096 / concurrency 32: every measured config "
        "(2) breaks a constraint."
    )
    assert (
        "Ruled out by a constraint: budget=16 topk=4 (ttft_p99_s 2.41 > 2.0); budget=8 topk=4 "
        "(coding_pass_rate 0.6 < baseline 1.0)." in said.details
    )
    nothing = answer_words(
        better(
            verdict="no-valid-config",
            best=None,
            runner_up=None,
            margin=None,
            contenders=(),
            explored=0,
            restarts_used=2,
            convergence=(),
        )
    )
    assert nothing.headline.endswith(
        ": the only config tried (budget=32 topk=8) produced no measurement."
    )
    coverage = "Explored 0 of 84 configs (2 restarts used); 1 failed; 83 not explored."
    assert coverage in nothing.details


@pytest.mark.parametrize(
    ("basis", "words"),
    [
        ("borrowed-restart-variance", "borrows the restart-to-restart variance measured on"),
        ("within-run-only", "(request-to-request noise) with an assumed 5% restart spread"),
        ("none", "no interval: too little data to build one"),
    ],
)
def test_the_interval_basis_is_said_in_words(basis: IntervalBasis, words: str) -> None:
    single = dataclasses.replace(
        WINNER, estimate=dataclasses.replace(WINNER.estimate, basis=basis, restarts=1, cv=None)
    )
    details = "\n".join(answer_words(better(best=single)).details)
    assert words in details
    assert "from 1 restart on" in details


def test_noisy_configs_sick_hosts_and_faster_configs_that_break_a_constraint() -> None:
    noisy = contender(12, 4, 2221.0, cv=0.072, noisy=True)
    faster = contender(32, 8, 2600.0, violations=("ttft_p99_s 2.41 > 2.0",))
    said = answer_words(
        better(
            contenders=(faster, WINNER, noisy),
            flags=(
                HostFlag("sim-02", "b300", "budget=16 topk=4 runs 11% slower there than on sim-01"),
            ),
            notes=("the search was cut by finish_by at 06:00 UTC",),
        )
    )
    details = said.details
    assert "Noisy (its restarts disagree by more than 5%): budget=12 topk=4 (cv 7.2%)." in details
    assert (
        "Host sim-02 disagrees with its siblings: budget=16 topk=4 runs 11% slower there than on "
        "sim-01; left out of the pool." in details
    )
    assert (
        "Ruled out by a constraint although faster: budget=32 topk=8 (ttft_p99_s 2.41 > 2.0)."
        in details
    )
    assert details[-1] == "the search was cut by finish_by at 06:00 UTC"


def test_a_minimized_metric_over_several_cells_reads_in_its_unit() -> None:
    objective = ObjectiveView(
        "ttft_p99_s", (MatrixCell(1024, 8), MatrixCell(4096, 32)), minimized=True
    )
    best = dataclasses.replace(
        WINNER,
        estimate=dataclasses.replace(WINNER.estimate, value=0.412, ci95=(0.398, 0.431)),
        speedup_vs_baseline=None,
    )
    said = answer_words(better(objective=objective, best=best, runner_up=None, margin=None))
    # One valid config is compared with nothing: no deploy advice.
    assert said.headline == (
        "Only budget=16 topk=4 was measured validly on b300 at the geomean of 2 cells "
        "(1024/c8, 4096/c32) (412 ms [398, 431]): nothing to compare it with, so no deploy "
        "advice."
    )


def test_configs_read_by_the_knobs_that_vary_and_keep_their_full_config() -> None:
    """The answers layer names configs by every knob; the report drops the shared ones, in
    the notes too, and still says the whole config to deploy."""

    def spelled(c: Contender) -> Contender:
        return dataclasses.replace(c, label=f"algorithm=DDTREE {c.label}")

    full = better()
    answer = dataclasses.replace(
        full,
        best=spelled(WINNER),
        runner_up=spelled(RUNNER),
        contenders=tuple(spelled(c) for c in full.contenders),
        convergence=(ConvergenceStep(1, 2310.0, "algorithm=DDTREE budget=16 topk=4"),),
        notes=(
            "algorithm=DDTREE budget=16 topk=4's estimate comes from its 2 confirmation "
            "restart(s) only; algorithm=DDTREE budget=1 topk=4 is not in this space",
        ),
    )
    shown = readable(answer)
    said = answer_words(shown)
    assert said.headline.startswith("Deploy budget=16 topk=4 on b300:")
    assert "beats budget=12 topk=4 by" in said.headline
    # The knob every config shares is said once, then the config to deploy in full.
    assert said.details[0] == "Every config sets algorithm=DDTREE (left out of the names)."
    assert said.details[1].startswith(
        "Estimate: budget=16 topk=4 (algorithm=DDTREE budget=16 topk=4), output_tok_s"
    )
    assert shown.notes == (
        "budget=16 topk=4's estimate comes from its 2 confirmation restart(s) only; "
        "algorithm=DDTREE budget=1 topk=4 is not in this space",
    )
    assert shown.convergence[0].label == "budget=16 topk=4"
    assert answer.best is not None and shown.best is not None
    assert shown.best.config == answer.best.config
    assert readable(better()) == better()  # already short: unchanged


# --- the pictures --------------------------------------------------------------------------


def _svgs(html: str) -> list[ET.Element]:
    return [ET.fromstring(m) for m in re.findall(r"<svg .*?</svg>", html, flags=re.S)]


def _texts(root: ET.Element) -> list[str]:
    return [t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text")]


def test_convergence_plot_is_the_answer_so_far_against_restarts() -> None:
    figure = convergence_figure(better())
    assert figure is not None
    (root,) = _svgs(figure)
    texts = _texts(root)
    assert "restarts on b300" in texts
    assert "output_tok_s of the config named (tok/s)" in texts
    # The first restart found nothing valid: a cross in the no-result strip, not a zero.
    failed = root.findall(".//s:g[@class='mark failed']", NS)
    assert len(failed) == 1
    assert "no valid config yet" in (failed[0].findtext("s:title", namespaces=NS) or "")
    assert len(root.findall(".//s:circle[@class='mark']", NS)) == 4
    assert root.findall(".//s:polyline", NS)


def test_explored_space_marks_explored_failed_and_unexplored_points() -> None:
    figure = space_figure(better())
    assert figure is not None
    (root,) = _svgs(figure)
    texts = _texts(root)
    assert "budget" in texts and "topk" in texts  # the axes name their knobs
    cells = root.findall(".//s:g", NS)
    classes = [g.attrib.get("class", "") for g in cells]
    explored = [c for c in classes if "explored" in c.split()]
    assert len(explored) == 5
    assert len(root.findall(".//s:circle[@class='explored-mark']", NS)) == 5
    assert [c for c in classes if "best" in c.split()] == ["cell ok explored best"]
    # budget 8/12/16/32 x topk 2/4/8: 12 points, 5 measured, 1 failed, the rest blank.
    assert classes.count("cell failed") == 1
    assert classes.count("cell unexplored") == 6
    failed = next(g for g in cells if g.attrib.get("class") == "cell failed")
    assert failed.findtext("s:text", namespaces=NS) == "FAILED"
    assert "oom" in (failed.findtext("s:title", namespaces=NS) or "")


def test_the_space_folds_other_knobs_into_the_best_over_them() -> None:
    answer = better(
        contenders=(
            WINNER,
            contender(16, 4, 2000.0, window=2048),
            contender(8, 4, 1900.0, window=2048),
            contender(8, 2, 1700.0),
            contender(12, 8, 1800.0),
            dataclasses.replace(WINNER, config={}, label="baseline"),
        )
    )
    grid = explored_space(answer)
    assert grid is not None
    assert (grid.row_knob, grid.column_knob) == ("budget", "topk")
    assert grid.other_knobs == ("window",)
    assert "(unset)" not in grid.rows + grid.columns  # the baseline is not a point of the space
    row = grid.rows.index("16")
    cell = grid.cells[row][grid.columns.index("4")]
    assert cell.contender is WINNER and cell.configs == 2 and cell.is_best


def test_markdown_tables_for_the_pictures() -> None:
    answer = better()
    steps = convergence_table(answer)
    # Only where the best changed, and the last restart.
    assert [(r[0].text, r[1].text, r[2].text) for r in steps.rows] == [
        ("1", "—", "no valid config yet"),
        ("2", "1,700", "budget=8 topk=2"),
        ("3", "1,900", "budget=8 topk=4"),
        ("5", "2,310", "budget=16 topk=4"),
    ]
    grid = explored_space(answer)
    assert grid is not None
    space = space_table(grid, answer)
    assert space.headers == ("budget \\ topk", "2", "4", "8")
    by_budget = {row[0].text: [(c.text, c.kind) for c in row[1:]] for row in space.rows}
    assert by_budget["16"] == [("2,000", ""), ("2,310", "best"), ("", "missing")]
    assert by_budget["32"] == [("", "missing"), ("", "missing"), ("FAILED", "failed")]


# --- the report, pooled --------------------------------------------------------------------


@pytest.fixture(scope="module")
def twin_report(tmp_path_factory: pytest.TempPathFactory) -> SweepReport:
    """Two hosts of one type ran the same configs: the tables must name each config once."""
    path = tmp_path_factory.mktemp("answers") / "store.db"
    spec = SweepSpec(
        name="twins",
        hosts=(("sim-01", "b300"), ("sim-02", "b300")),
        configs=(ConfigSpec({}), ConfigSpec(ddtree(8)), ConfigSpec(ddtree(12))),
        contexts=(1024,),
        concurrency=(1, 4),
        rounds=2,
    )

    async def go() -> SweepReport:
        async with await Store.open(path) as store:
            await fill_sweep(store, spec)
            return await load_report(store, "twins")

    return asyncio.run(go())


def _cell_answer(concurrency: int, verdict: str = "better") -> Answer:
    eight = contender(8, 4, 900.0, speedup=1.8, speedup_ci=(1.7, 1.9))
    twelve = contender(12, 4, 850.0, speedup=1.7)
    return better(
        objective=ObjectiveView("output_tok_s", (MatrixCell(1024, concurrency),), minimized=False),
        verdict=verdict,
        best=eight,
        runner_up=twelve,
        tied=(twelve,) if verdict == "tie" else (),
        contenders=(eight, twelve),
        failed=(),
        space=2,
        explored=2,
    )


def test_without_answers_the_best_table_is_the_per_host_one(twin_report: SweepReport) -> None:
    (table,) = best_tables(twin_report.groups[0], ())
    assert table.title == "Best config per cell"
    assert all("@sim-0" in cell.text for row in table.rows for cell in row[1:])
    text = render([twin_report], "md")
    assert "## Answer" not in text and "pooled" not in text


def test_pooled_table_names_each_config_once_per_host_type(twin_report: SweepReport) -> None:
    group = twin_report.groups[0]
    answers = (_cell_answer(4), _cell_answer(1, "tie"))
    pooled = pooled_best_table(group, answers)
    ((context, at1, at4),) = pooled.rows
    assert context.text == "1024"
    assert at4.text == "budget=8 topk=4 (900 [873, 927] tok/s, 1.80× [1.70, 1.90] baseline)"
    assert at1.text.startswith("tie: budget=8 topk=4, budget=12 topk=4 (900 [873, 927] tok/s")
    assert "@" not in at4.text + at1.text
    titles = [t.title for t in best_tables(group, answers)]
    assert titles[-1] == "Best config per cell, per host"  # per-host detail kept below
    assert titles[0].startswith("Contenders: output_tok_s at context 1024 / concurrency 4")


def test_pooled_cells_without_an_answer_average_the_hosts_and_drop_sick_ones(
    twin_report: SweepReport,
) -> None:
    group = twin_report.groups[0]
    other = _cell_answer(4)
    off_cell = dataclasses.replace(
        other, objective=ObjectiveView("output_tok_s", (MatrixCell(4096, 32),), minimized=False)
    )
    ((_, _, at4),) = pooled_best_table(group, (off_cell,)).rows
    assert at4.text.endswith(", 2 hosts)") and "@" not in at4.text
    sick = dataclasses.replace(off_cell, flags=(HostFlag("sim-02", "b300", "slow"),))
    table = pooled_best_table(group, (sick,))
    ((_, _, at4),) = table.rows
    assert at4.text.endswith(", 1 host)") and at4.title == "sim-01"
    assert table.note is not None and "sim-02 left out" in table.note


def test_reports_open_with_the_answer(twin_report: SweepReport, tmp_path: Path) -> None:
    report = dataclasses.replace(twin_report, answers=(_cell_answer(4), _cell_answer(1, "tie")))
    markdown = render([report], "md")
    assert markdown.index("## Answer") < markdown.index("## Host type")
    assert "**Deploy budget=8 on b300: 1.80× the baseline [1.70, 1.90]" in markdown
    # Several answers: one line each first, then one by one.
    assert markdown.index("### Answers at a glance") < markdown.index("**Deploy budget=8")
    assert (
        "| b300 | context 1024 / concurrency 1 | tie | budget=8 (tied: budget=12) | "
        "900 tok/s [873, 927] | 1.80× [1.70, 1.90] | 4.0% [1.0%, 7.0%] | restarts |"
    ) in markdown
    assert "### Convergence on b300, context 1024 / concurrency 4" in markdown
    assert "| budget \\ topk |" not in markdown  # one knob varies: one row
    assert "### Explored space on b300, context 1024 / concurrency 4" in markdown
    html = render([report], "html")
    assert html.index('<section class="answers">') < html.index('<section class="group">')
    assert '<div class="answer tie">' in html
    for root in _svgs(html):  # every inline picture is valid XML
        assert root.tag == "{http://www.w3.org/2000/svg}svg"
    compared = render([report, twin_report], "md")
    assert compared.index("### Answer") < compared.index("### Host type")
    assert compared.count("### Answer\n") == 1  # only the sweep that has answers
    document = json.loads(render([report], "json"))
    assert [a["verdict"] for a in document["sweeps"][0]["answers"]] == ["better", "tie"]
    assert "answers" not in json.loads(render([twin_report], "json"))["sweeps"][0]
