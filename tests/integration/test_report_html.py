"""The HTML report in a real browser (headless Chromium over the DevTools protocol), and the
whole report path on a store filled by a real sweep on the simulated host."""

from __future__ import annotations

import asyncio
import io
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from orchestrator.report import FORMATS, render, render_report
from orchestrator.store import Store
from tests.integration.test_report_support import (
    chromium_binary,
    demo_like_spec,
    fill_sweep,
    inspect_page,
    screenshot,
)
from tests.unit.test_report_across import across_report

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def chromium() -> str:
    return chromium_binary()


async def _html(tmp_path: Path) -> Path:
    db = tmp_path / "store.db"
    async with await Store.open(db) as store:
        await fill_sweep(store, demo_like_spec())
        text = await render_report(store, ["nightly-ddtree"], "html")
    page = tmp_path / "report.html"
    page.write_text(text, "utf-8")
    return page


async def test_html_report_renders_in_chromium_without_errors(
    chromium: str, tmp_path: Path
) -> None:
    page = await _html(tmp_path)
    check = await inspect_page(chromium, page, tmp_path / "profile-devtools")
    assert check.console_errors == []
    assert check.exceptions == []
    assert check.failed_requests == []
    assert check.title == "Sweep report: nightly-ddtree"
    assert check.svg_count >= 8  # 3 throughput, heatmap, accept_len x4, 3 TTFT
    assert check.empty_svgs == 0
    # The two configs that failed at startup show as failures, the faulty points as flagged.
    assert check.failed_marks >= 2 * 3 * 3
    assert check.flagged_marks >= 3
    assert check.failed_cells >= 2 * 3 * 3

    png = tmp_path / "report.png"
    shot = await asyncio.to_thread(screenshot, chromium, page, png, tmp_path / "profile-shot")
    assert shot.returncode == 0, shot.stderr[-2000:]
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 50_000  # a blank page is a few kB; plots make it larger


BAND_CHART = """(() => {
  const chart = [...document.querySelectorAll('svg')].find(
    s => (s.getAttribute('aria-label') || '').startsWith('The config named at each load'));
  chart.scrollIntoView();
  const box = chart.getBoundingClientRect();
  const hit = document.elementFromPoint(box.left + box.width / 2, box.top + box.height / 2);
  const strips = [...chart.querySelectorAll('g.band rect.strip')]
    .map(r => r.getBoundingClientRect());
  return JSON.stringify({width: box.width, height: box.height, on_top: chart.contains(hit),
    bands: chart.querySelectorAll('g.band').length,
    strips: strips.filter(r => r.width > 0 && r.height > 0).length});
})()"""


async def test_an_across_load_report_shows_its_band_chart(chromium: str, tmp_path: Path) -> None:
    """The answer across load in a real browser: the band chart is laid out, on top, with a
    band per load; the screenshot (one launch with the checks) is where the probe scrolled."""
    page = tmp_path / "across.html"
    page.write_text(render([across_report()], "html"), "utf-8")
    png = tmp_path / "across.png"
    check = await inspect_page(
        chromium, page, tmp_path / "profile-across", probe=BAND_CHART, shot=png
    )
    assert check.console_errors == [] and check.exceptions == []
    assert check.empty_svgs == 0
    chart = check.probe
    assert chart["width"] >= 600 and chart["height"] >= 300 and chart["on_top"]
    assert chart["bands"] == 3 and chart["strips"] == 3
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.stat().st_size > 20_000  # a blank viewport is a few kB


# --- the real path: simulated host, `orchestrator run`, then `orchestrator report` ---------


@pytest.fixture
def sim_host(tmp_path: Path) -> Iterator[dict[str, object]]:
    state = tmp_path / "sim"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "orchestrator.sim.cli",
            "up",
            "--hosts",
            "1",
            "--json",
            "--state-dir",
            str(state),
            "--time-scale",
            "0.05",
            "--base-address",
            "127.0.0.87",
            "--port",
            "2287",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line, "sim up printed nothing"
        yield json.loads(line)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=10)


@pytest.mark.slow
def test_report_from_a_real_simulated_sweep(
    sim_host: dict[str, object], tmp_path: Path, chromium: str
) -> None:
    """Every format from a store the real runner filled on the simulated host (the sweep
    ``sim up`` writes, cut to a baseline and one config with one coding problem: every
    section of the report, a quarter of the work)."""
    import pandas as pd  # here: importing it costs every worker's collection 0.5 s

    db = tmp_path / "real.db"
    sweep = yaml.safe_load(Path(str(sim_host["sweep_file"])).read_text())
    sweep["configs"] = sweep["configs"][:1]
    sweep["coding"]["select"] = sweep["coding"]["select"][:1]
    sweep_file = tmp_path / "real.yaml"
    sweep_file.write_text(yaml.safe_dump(sweep, sort_keys=False))
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "orchestrator.cli",
            "run",
            str(sweep_file),
            "--db",
            str(db),
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=280,
        cwd=REPO,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    results = json.loads(run.stdout)
    hosts = results.get("hosts", [])
    set_aside = [h for h in hosts if h.get("set_aside")]
    assert not set_aside and any(t["state"] == "done" for t in results["trials"]), (
        "the runner could not run the sweep on the simulated host: "
        + "; ".join(str(h["set_aside"]) for h in set_aside)
        + run.stderr[-3000:]
    )

    async def render_all() -> dict[str, str]:
        async with await Store.open(db) as store:
            return {f: await render_report(store, [results["sweep"]], f) for f in FORMATS}

    texts = asyncio.run(render_all())
    assert "# Sweep report:" in texts["md"] and "### Best config per cell" in texts["md"]
    frame = pd.read_csv(io.StringIO(texts["csv"]))
    assert {"output_tok_s", "ttft_p50_s", "accept_len", "knob_budget"} <= set(frame.columns)
    assert (frame.kind == "throughput").any()
    document = json.loads(texts["json"])
    assert document["sweeps"][0]["groups"][0]["trials"]
    page = tmp_path / "real.html"
    page.write_text(texts["html"], "utf-8")
    check = asyncio.run(inspect_page(chromium, page, tmp_path / "profile"))
    assert check.console_errors == [] and check.exceptions == []
    assert check.svg_count > 0 and check.empty_svgs == 0
