"""Reports from a real SQLite store filled the way the runner fills it: analysis and formats."""

from __future__ import annotations

import asyncio
import io
import json
import re
import shlex
from pathlib import Path

import pytest

from orchestrator.cli import main
from orchestrator.report import render, render_report
from orchestrator.report.compare import compare
from orchestrator.report.export import BASE_COLUMNS
from orchestrator.report.model import SweepReport, load_report
from orchestrator.report.tables import provenance_table
from orchestrator.store import HostEntry, MatrixCell, NewTrial, Store, SweepNotFound, TrialPlan
from tests.integration.test_report_support import (
    EXEC_START,
    ConfigSpec,
    SweepSpec,
    ddtree,
    demo_like_spec,
    fill_sweep,
)

NVLINK = "nightly-ddtree"
PCIE = "nightly-pcie"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("report") / "store.db"

    async def fill() -> None:
        async with await Store.open(path) as store:
            await fill_sweep(store, demo_like_spec(NVLINK))
            await fill_sweep(
                store,
                demo_like_spec(PCIE, hosts=(("gpu-b", "h100-pcie"),), perf_scale=0.7),
                seed=3,
            )

    asyncio.run(fill())
    return path


def _load(db: Path, ref: str, *, include_requests: bool = False) -> SweepReport:
    async def go() -> SweepReport:
        async with await Store.open(db) as store:
            return await load_report(store, ref, include_requests=include_requests)

    return asyncio.run(go())


@pytest.fixture(scope="module")
def report(db: Path) -> SweepReport:
    return _load(db, NVLINK)


# The fixture's configs as the report names them: every knob that varies among them (the
# DFLASH config sets another algorithm and window) is shown.
DDTREE_4 = "algorithm=DDTREE budget=4 topk=4 window=2048"
DDTREE_8 = "algorithm=DDTREE budget=8 topk=4 window=2048"
DDTREE_12 = "algorithm=DDTREE budget=12 topk=4 window=2048"
DDTREE_16 = "algorithm=DDTREE budget=16 topk=4 window=2048"
DDTREE_8_LEGACY = "algorithm=DDTREE budget=8 legacy_window=2048 topk=4"


def _trial(report: SweepReport, short: str):  # type: ignore[no-untyped-def]
    return next(t for t in report.trials if t.short_label == short)


# --- the analysis --------------------------------------------------------------------------


def test_groups_by_host_type_with_short_labels(report: SweepReport) -> None:
    (group,) = report.groups
    assert group.host_type == "h200-nvlink"
    assert [t.short_label for t in group.trials] == [
        "baseline",
        # Every knob that varies among the configs is shown (the DFLASH config sets another
        # algorithm and window), so no config reads like another (issue 22).
        "algorithm=DDTREE budget=4 topk=4 window=2048",
        "algorithm=DDTREE budget=8 topk=4 window=2048",
        "algorithm=DDTREE budget=12 topk=4 window=2048",
        "algorithm=DDTREE budget=16 topk=4 window=2048",
        "algorithm=DDTREE budget=8 legacy_window=2048 topk=4",
        "algorithm=DFLASH block_size=16 window=8",
    ]
    assert group.contexts == (60, 1024, 4096) and group.concurrencies == (1, 4, 16)


def test_flagged_points_keep_their_flags_and_never_win_a_cell(report: SweepReport) -> None:
    group = report.groups[0]
    faulty = _trial(report, DDTREE_16).point_at(MatrixCell(4096, 16))
    assert faulty is not None
    assert {"errors", "truncated"} <= set(faulty.flags)
    assert not faulty.trusted
    short = _trial(report, DDTREE_12).point_at(MatrixCell(4096, 4))
    assert short is not None and "concurrency_short" in short.flags
    disagree = _trial(report, DDTREE_8).point_at(MatrixCell(1024, 16))
    assert disagree is not None and "accept_len_disagree" in disagree.flags
    for ctx, conc in group.cells:
        best = group.best(ctx, conc)
        assert best is not None
        trusted = [
            p.output_tok_s
            for t in group.trials
            if (p := t.point_at(MatrixCell(ctx, conc))) is not None and p.trusted and p.output_tok_s
        ]
        assert best[1].output_tok_s == max(trusted)
        assert best[1].trusted


def test_baseline_without_speculation_is_not_flagged_for_missing_accept_len(
    report: SweepReport,
) -> None:
    baseline = _trial(report, "baseline")
    assert baseline.is_baseline and baseline.throughput
    assert all("no_decode_lines" not in p.flags for p in baseline.throughput)
    assert all(p.accept_len is None for p in baseline.throughput)


def test_speedup_is_the_ratio_to_the_same_hosts_baseline(report: SweepReport) -> None:
    group = report.groups[0]
    trial, baseline = _trial(report, DDTREE_8), _trial(report, "baseline")
    mine, theirs = trial.point_at(MatrixCell(60, 4)), baseline.point_at(MatrixCell(60, 4))
    assert mine is not None and theirs is not None
    assert mine.output_tok_s is not None and theirs.output_tok_s is not None
    assert group.speedup(trial, 60, 4) == pytest.approx(mine.output_tok_s / theirs.output_tok_s)
    assert group.speedup(_trial(report, DDTREE_8_LEGACY), 60, 4) is None


def test_failed_trials_keep_cause_and_evidence(report: SweepReport) -> None:
    bad_flag = _trial(report, DDTREE_8_LEGACY)
    assert bad_flag.state == "failed" and bad_flag.cause == "bad-flag"
    assert not bad_flag.throughput
    assert bad_flag.latest is not None
    lines = bad_flag.latest.evidence_lines()
    assert lines[0] == "the server rejected a flag at startup"
    assert any("unrecognized arguments" in line for line in lines)
    life = bad_flag.lifecycle
    assert life is not None and life.source == "events" and life.load_s is None


def test_lossless_check_finds_the_drifting_config(report: SweepReport) -> None:
    drift = _trial(report, DDTREE_16).lossless
    assert drift is not None and drift.drifted
    assert "merge_sorted" in drift.differing
    clean = _trial(report, DDTREE_4).lossless
    assert clean is not None and not clean.drifted and clean.exact_matches == clean.compared


def test_warnings_name_every_problem(report: SweepReport) -> None:
    kinds = {w.kind for w in report.warnings}
    assert {
        "overridden",
        "output-drift",
        "concurrency-short",
        "accept-len-disagree",
        "errors",
        "truncated",
        "coding-truncated",
    } <= kinds
    overridden = next(w for w in report.warnings if w.kind == "overridden")
    assert "window" in overridden.message and "1024" in overridden.message


def test_lifecycle_and_provenance_come_from_the_done_attempt(report: SweepReport) -> None:
    trial = _trial(report, DDTREE_4)
    life = trial.lifecycle
    assert life is not None and life.source == "timeline"
    assert life.memory_release_s == pytest.approx(5.7, abs=0.01)
    host = report.groups[0].hosts[0]
    assert host.provenance is not None
    assert host.provenance["sglang_version"] == "0.5.23"
    assert host.provenance["exec_start"][:3] == ["/usr/bin/python3", "-m", "sglang.launch_server"]


# --- formats -------------------------------------------------------------------------------


def test_markdown_shows_tables_failures_and_flags(report: SweepReport) -> None:
    text = render([report], "md")
    assert text.startswith("# Sweep report: nightly-ddtree")
    for heading in (
        "### Throughput, context 60 tokens",
        "### Best config per cell",
        "### Speedup over the baseline",
        "### Coding anchor",
        "### Failed trials",
        "### Lifecycle (seconds)",
        "### Provenance",
        "## Warnings",
    ):
        assert heading in text
    row = next(line for line in text.splitlines() if line.startswith(f"| {DDTREE_8_LEGACY}"))
    assert "FAILED" in row
    assert "[E,T]" in text and "[C]" in text and "[A]" in text
    assert "word_count: TRUNCATED" in text and "gcd: FAIL" in text
    assert "DRIFT: 3/5 identical" in text
    assert "unrecognized arguments: --speculative-dflash-draft-window-size 2048" in text
    assert "8× NVIDIA H200" in text and "570.86.15" in text
    # A failed point is never a number: no zero tok/s anywhere in the failed rows.
    assert " 0.0 " not in row and "| 0 |" not in row


def test_csv_round_trips_through_pandas(report: SweepReport) -> None:
    import pandas as pd  # here: importing it costs every worker's collection 0.5 s

    frame = pd.read_csv(io.StringIO(render([report], "csv")))
    for column in (
        *BASE_COLUMNS,
        "output_tok_s",
        "request_decode_tok_s_p50",
        "ttft_p50_s",
        "ttft_p99_s",
        "itl_p50_s",
        "e2e_p99_s",
        "concurrency_held",
        "client_cpu_fraction",
        "accept_len",
        "accept_len_journal",
        "accept_len_meta_info",
        "accept_len_metrics",
        "errors_by_kind.timeout",
        "outcome",
        "knob_budget",
        "knob_topk",
        "knob_window",
        "knob_algorithm",
    ):
        assert column in frame.columns, column
    throughput = frame[frame.kind == "throughput"]
    assert len(throughput) == 5 * 9
    assert len(frame[frame.kind == "coding"]) == 5 * 5
    failed = frame[frame.kind == "none"]
    assert set(failed.trial_cause) == {"bad-flag", "invalid-config"}
    assert failed.output_tok_s.isna().all()  # unknown, never zero
    cell = (throughput.knob_budget == 16) & (throughput.context == 4096)
    faulty = throughput[cell & (throughput.concurrency == 16)].iloc[0]
    assert bool(faulty.flag_errors) and bool(faulty.flag_truncated)
    assert faulty["errors_by_kind.timeout"] == 12
    assert throughput.flag_errors.dtype == bool
    best = throughput[throughput.is_best_in_cell]
    assert len(best) == 9
    assert throughput.output_tok_s.notna().all()
    baseline = throughput[throughput.is_baseline]
    assert (baseline.speedup_vs_baseline == 1.0).all()


def test_json_holds_the_full_structure_and_requests_on_demand(db: Path) -> None:
    lean = json.loads(render([_load(db, NVLINK)], "json"))
    assert lean["format"] == "orchestrator-report/1"
    (sweep,) = lean["sweeps"]
    group = sweep["groups"][0]
    assert len(group["best"]) == 9 and all(b["trial"] for b in group["best"])
    trial = next(t for t in group["trials"] if t["config"].get("budget") == 16)
    point = next(p for p in trial["points"] if p["context"] == 4096 and p["concurrency"] == 16)
    assert "errors" in point["flags"] and "requests" not in point
    assert trial["lossless"]["drifted"] is True
    failed = next(t for t in group["trials"] if t["cause"] == "invalid-config")
    assert failed["attempts"][0]["evidence"]["exit_status"] == 1

    full = json.loads(
        render([_load(db, NVLINK, include_requests=True)], "json", include_requests=True)
    )
    point = full["sweeps"][0]["groups"][0]["trials"][1]["points"][0]
    assert point["requests"] and {"ttft_s", "e2e_s", "completion_tokens"} <= set(
        point["requests"][0]
    )
    assert len(point["ttft_samples_s"]) == point["metrics"]["requests_ok"]


def test_two_sweeps_compare_side_by_side(db: Path) -> None:
    nvlink, pcie = _load(db, NVLINK), _load(db, PCIE)
    (comparison,) = compare([nvlink, pcie])
    assert [s.group.host_type for s in comparison.sides] == ["h200-nvlink", "h100-pcie"]
    cell = next(c for c in comparison.cells if (c.context, c.concurrency) == (60, 1))
    assert all(b is not None for b in cell.best)
    ratio = cell.ratios[1]
    assert ratio is not None and 0.6 < ratio < 0.8  # the PCIe host runs at 0.7x
    labels = [c.label for c in comparison.configs]
    assert labels[0] == "baseline" and DDTREE_8 in labels
    text = render([nvlink, pcie], "md")
    assert "## Comparison: nightly-ddtree / h200-nvlink vs nightly-pcie / h100-pcie" in text
    assert "nightly-pcie ÷ nightly-ddtree" in text
    html = render([nvlink, pcie], "html")
    assert "Comparison: nightly-ddtree / h200-nvlink vs nightly-pcie / h100-pcie" in html


async def test_render_report_reads_the_store_and_refuses_unknown_sweeps(db: Path) -> None:
    async with await Store.open(db) as store:
        text = await render_report(store, [NVLINK], "html")
        assert text.startswith("<!DOCTYPE html>") and "<svg" in text
        assert "http://" not in text.replace('xmlns="http://www.w3.org/2000/svg"', "")
        with pytest.raises(SweepNotFound):
            await render_report(store, ["no-such-sweep"], "md")
        with pytest.raises(ValueError):
            await render_report(store, [NVLINK], "pdf")  # type: ignore[arg-type]


# --- the verb ------------------------------------------------------------------------------


def test_report_verb_writes_each_format(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import pandas as pd  # here: importing it costs every worker's collection 0.5 s

    for suffix, marker in ((".md", "# Sweep report"), (".html", "<!DOCTYPE html>"), (".json", "{")):
        out = tmp_path / f"report{suffix}"
        assert main(["report", NVLINK, "--db", str(db), "-o", str(out)]) == 0
        assert out.read_text("utf-8").startswith(marker)
    assert main(["report", NVLINK, PCIE, "--db", str(db), "--format", "csv"]) == 0
    frame = pd.read_csv(io.StringIO(capsys.readouterr().out))
    assert set(frame.sweep) == {NVLINK, PCIE}


def test_report_verb_exits_2_on_unknown_sweep_or_store(
    db: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["report", "nope", "--db", str(db)]) == 2
    assert "nope" in capsys.readouterr().err
    assert main(["report", NVLINK, "--db", str(tmp_path / "missing.db")]) == 2
    assert not (tmp_path / "missing.db").exists()


# --- what a reader meets: honest states, the baseline's command line, the page width ------


async def test_never_started_trials_of_a_cancelled_sweep_read_cancelled(tmp_path: Path) -> None:
    """The in-flight trial failed (stopped); the ones never started are cancelled, not failed.
    The matrix comes from the trials' stored plans: this sweep file names no benchmark."""
    plan = TrialPlan(cells=(MatrixCell(60, 1), MatrixCell(60, 4)), rounds=2)
    async with await Store.open(tmp_path / "store.db") as store:
        sweep = (await store.submit_sweep("cut", "name: cut\n")).sweep
        await store.add_hosts(sweep.id, [HostEntry("gpu-a", "h200")])
        base, b8, _ = await store.add_trials(
            sweep.id,
            [
                NewTrial("t0", "gpu-a", {}, 0, is_baseline=True, plan=plan),
                NewTrial("t1", "gpu-a", {"budget": 8}, 1, plan=plan),
                NewTrial("t2", "gpu-a", {"budget": 16}, 2, plan=plan),
            ],
        )
        await store.set_sweep_state(sweep.id, "running")
        done = await store.start_attempt(base.id)
        await store.finish_attempt(done.id, "done")
        stopped = await store.start_attempt(b8.id)
        await store.finish_attempt(stopped.id, "failed", cause="stopped")
        await store.set_sweep_state(sweep.id, "cancelled")
        report = await load_report(store, "cut")
    assert [t.state for t in report.trials] == ["done", "failed", "cancelled"]
    (group,) = report.groups
    assert (group.contexts, group.concurrencies) == ((60,), (1, 4))
    text = render([report], "md")
    rows = [line for line in text.splitlines() if line.startswith("| budget=16")]
    assert rows and all("FAILED" not in row for row in rows)
    assert any("CANCELLED" in row for row in rows)
    assert any("FAILED: stopped" in line for line in text.splitlines() if "budget=8" in line)
    html = render([report], "html")
    assert "CANCELLED" in html


def _exec_start_cell(report: SweepReport, host: str) -> str:
    (group,) = report.groups
    table = provenance_table(group, report.model)
    row = next(r for r in table.rows if r[0].text == host)
    assert table.headers[-1] == "ExecStart (baseline)"
    return row[-1].text


def test_baseline_exec_start_is_the_baselines_own(report: SweepReport) -> None:
    assert _exec_start_cell(report, "gpu-a") == shlex.join(EXEC_START)


async def test_a_host_without_a_baseline_shows_no_other_configs_command_line(
    tmp_path: Path,
) -> None:
    spec = SweepSpec(
        name="no-baseline",
        hosts=(("gpu-a", "h200-nvlink"),),
        configs=(ConfigSpec(ddtree(4)), ConfigSpec(ddtree(8))),
        contexts=(60,),
        concurrency=(1,),
        rounds=2,
    )
    async with await Store.open(tmp_path / "store.db") as store:
        await fill_sweep(store, spec)
        report = await load_report(store, "no-baseline")
    assert all(t.provenance is not None for t in report.trials)  # both ran, with a command line
    cell = _exec_start_cell(report, "gpu-a")
    assert "--speculative" not in cell and "no baseline ran" in cell


def test_html_report_uses_the_width_of_a_wide_window(report: SweepReport) -> None:
    html = render([report], "html")
    body = re.search(r"\bbody \{([^}]*)\}", html)
    assert body is not None
    assert "max-width" not in body.group(1)  # the page may be as wide as the window
    assert "max-width: 120ch" in html  # running text stays readable
