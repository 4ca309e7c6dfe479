"""The answer across load, end to end on simulated hosts (issue 34): a sweep whose true best
draft length falls with load answers at each load, proposes a schedule in the engine's own
form whose every band is within 3 % of the true best at its load (by the simulator's truth,
which the orchestrator never reads), runs it as a trial of its own on the same host and
matrix, and recommends it over the best fixed config; the host ends as found.

vLLM: ``num_speculative_tokens_per_batch_size`` inside ``--speculative-config``; SGLang with
EAGLE3 at top-k 1: ``--speculative-adaptive`` and its file, written beside the drop-in.
The sweeps decide by measured speed ratios: marked ``calibrated``, they run one at a time
with the machine to themselves (``make calibrated-test``, which CI runs after ``make test``),
where six workers on two cores would blur a 10 % difference. A DDTree sweep, whose winners differ by
50-75 % between its loads, runs in ``make test``: SGLang adapts no DDTree, so its answer says
so, gives the bands' configs as they are, and runs no schedule trial. Addresses
127.0.0.243-245 are this file's.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.answers import answer_sweep
from orchestrator.engines.schedule import NativeSchedule
from orchestrator.host.dropin import ADOPTED_DROPIN_NAME
from orchestrator.host.launchfile import MARK_SUFFIX, launch_file_path
from orchestrator.runner import run_sweep
from orchestrator.search.source import trial_source_for
from orchestrator.sim.settings import ServerSimSettings
from orchestrator.sim.truth import schedule_truth, sweep_truth
from orchestrator.store import Store
from orchestrator.sweepfile import Sweep, parse_sweep
from tests.faults.harness import (
    STATE_PROPS,
    FaultHost,
    assert_restored,
    fault_host,
    orchestrator_cli,
    sweep_yaml,
)

LOADS = [1, 8, 32]
CONTEXT = 256
"""Short prompts: a point's output rate counts its prefill, the same for every config, which
dilutes a gain. With SGLang's steps 1, 4, 10 the truth's c1 gain of 10 over 4 (11-12 %)
measured 5 % at 1024 and at 256 tokens, within the noise of three restarts, in two calibrated
runs of three; steps 1, 3, 10 give 21 % at c1 in truth. vLLM's tokens 2, 6, 15: 13 % at c1
and 18 % at c32 at 256 tokens."""
OBJECTIVE = {"metric": "output_tok_s", "context": CONTEXT, "concurrency": LOADS}
BENCHMARK = {"contexts": [CONTEXT], "concurrency": LOADS, "max_tokens": 128, "rounds": 4,
             "repeats": 3}  # fmt: skip
DFLASH_DRAFT = "/models/Kimi-K2.6-DFlash"
TIME_SCALE = {"vllm": 0.15, "sglang": 0.3}
"""Steps three (vLLM) and six (SGLang) times the harness's: a loopback client's few
milliseconds per request stay small beside a step, so what is measured ranks as the truth
does. SGLang's c1 gain of the longest draft over the best fixed config is 12 % in truth and
measured 5 % at three times (4 requests a point): the schedule's margin there came out within
the noise of two restarts in one calibrated run of two."""


def across_load_sweep(host: FaultHost, name: str, engine: str) -> str:
    """A grid over the draft length, every config measured at c1, c8 and c32 on three
    restarts, then three schedule trials: with two of each, a schedule 5-7 % better than the
    best fixed config at a load came out within the noise (a margin interval of [-2 %, 17 %])
    in one calibrated run of two, as an honest verdict on two restarts must."""
    # No baseline: at c32 it comes within 5 % of the shortest draft, and the question here is
    # which draft length wins where (a band the baseline wins would draft 0 there).
    document = yaml.safe_load(sweep_yaml(host, name, [], benchmark=BENCHMARK))
    document["configs"] = []
    document["objective"] = OBJECTIVE
    document["search"] = {"schedule_trials": 3}
    if engine == "vllm":
        document["engine"] = "vllm"
        document["server"] = {"model": "kimi-k2.6", "knobs": {
            "method": {"flag": "--speculative-config", "json_key": "method"},
            "tokens": {"flag": "--speculative-config", "json_key": "num_speculative_tokens"},
            "draft": {"flag": "--speculative-config", "json_key": "model"},
        }}  # fmt: skip
        document["grid"] = {"method": ["dflash"], "draft": [DFLASH_DRAFT], "tokens": [2, 6, 15]}
    else:
        document["server"]["knobs"] = {
            "algorithm": {"flag": "--speculative-algorithm"},
            "draft": {"flag": "--speculative-draft-model-path"},
            "steps": {"flag": "--speculative-num-steps"},
            "topk": {"flag": "--speculative-eagle-topk"},
        }
        document["grid"] = {"algorithm": ["EAGLE3"], "draft": ["/models/Kimi-K2.6-EAGLE3"],
                            "topk": [1], "steps": [1, 3, 10]}  # fmt: skip
    return yaml.safe_dump(document, sort_keys=False)


async def run_across_load(tmp_path: Path, text: str) -> tuple[Sweep, Any]:
    sweep = parse_sweep(text, "across.yaml")
    async with await Store.open(tmp_path / "orchestrator.db") as store:
        async with asyncio.timeout(900):
            outcome = await run_sweep(sweep, text, store, trials=trial_source_for(sweep))
    return sweep, outcome


def within_truth(sweep: Sweep, answer: Any, settings: ServerSimSettings) -> list[float]:
    """Each band's schedule truth over the best fixed config's truth at its load."""
    native = answer.schedule.native
    fixed = sweep_truth(sweep, settings)
    truth = schedule_truth(sweep, native.config, native.overlay, fixed, settings)
    assert truth.error is None, truth.error
    return [load.ratio for load in truth.loads if load.ratio is not None]


@pytest.mark.calibrated
@pytest.mark.parametrize(("engine", "address", "knob"), [
    ("vllm", "127.0.0.243", "tokens"),
    ("sglang", "127.0.0.244", "steps"),
])  # fmt: skip
async def test_a_schedule_is_proposed_measured_and_recommended(
    tmp_path: Path, engine: str, address: str, knob: str
) -> None:
    settings = {"time_scale": TIME_SCALE[engine]}
    async with fault_host(tmp_path, address, engine=engine, settings=settings) as host:
        text = across_load_sweep(host, f"across-{engine}", engine)
        sweep, outcome = await run_across_load(tmp_path, text)
        assert host.unit_files() == host.unit_files_before
        assert await host.show(*STATE_PROPS) == host.state_before
        assert outcome.state == "done", outcome.results
        (answer,) = answer_sweep(outcome.sweep_results, sweep)
        native = check_schedule(sweep, outcome, answer, knob)
        await adopt_and_restore(host, tmp_path, f"across-{engine}", native)


def check_schedule(sweep: Sweep, outcome: Any, answer: Any, knob: str) -> NativeSchedule:
    """The winner falls with load, the schedule follows the per-load winners within 3 % of
    the truth, and, measured as trials of its own, is recommended over the best fixed config."""
    per_load = {a.load_cell.concurrency: a.best.config[knob] for a in answer.per_load}
    assert per_load[1] > per_load[8] >= per_load[32], per_load  # the winner falls with load
    assert answer.winner_changes(), per_load
    schedule = answer.schedule
    assert schedule is not None and schedule.native is not None, answer.to_json()
    assert [b.best.config[knob] for b in schedule.bands] == [per_load[c] for c in LOADS]
    ratios = within_truth(sweep, answer, ServerSimSettings())  # ratios: the time scale cancels
    assert len(ratios) == 3 and min(ratios) >= 0.97, ratios
    # Measured as trials of its own, then judged against the best fixed config.
    trials = [t for t in outcome.results["trials"] if t["plan"]["purpose"] == "schedule"]
    assert len(trials) == 3 and all(t["state"] == "done" for t in trials), trials
    verdict = schedule.verdict
    assert verdict is not None and verdict.restarts == 3, schedule.to_json()
    assert verdict.recommended, [
        (c.cell.concurrency, c.fixed.label, c.fixed.estimate.value, c.schedule.value,
         c.margin.relative, c.margin.ci95)
        for c in verdict.comparisons
    ]  # fmt: skip
    assert all(c.fixed.config == answer.best.config for c in verdict.comparisons)
    native: NativeSchedule = schedule.native
    return native


async def adopt_and_restore(
    host: FaultHost, tmp_path: Path, name: str, native: NativeSchedule
) -> None:
    """``adopt`` installs the recommended schedule, not the best fixed config: its drop-in,
    and SGLang's adaptive file beside it with the measured content, the server running it;
    ``restore`` removes both and the unit is as found."""
    db = str(tmp_path / "orchestrator.db")
    code, out, err = await orchestrator_cli("adopt", name, "--type", host.name, "--db", db,
                                            "--json")  # fmt: skip
    assert code == 0, err
    adoption = json.loads(out)
    assert adoption["ok"] and adoption["label"] == "schedule", adoption
    assert adoption["schedule"] == native.to_json() and adoption["config"] == dict(native.config)
    dropin = f"{host.unit}.d/{ADOPTED_DROPIN_NAME}"
    files = {launch_file_path(dropin, flag, "json"): content
             for flag, content in native.overlay.files.items()}  # fmt: skip
    added = host.unit_files().keys() - host.unit_files_before.keys()
    marks = {path + MARK_SUFFIX for path in files}  # each file marked as ours for the restore
    assert added == {dropin, *files, *marks}, added
    for path, content in files.items():  # SGLang's adaptive config, as measured
        assert json.loads(host.unit_files()[path]) == json.loads(content)
    launched = (await host.show("ExecStart"))["ExecStart"]
    for flag in (*native.overlay.flags, *native.overlay.files, *native.overlay.json):
        assert flag in launched, launched
    for keys in native.overlay.json.values():  # vLLM's per-batch-size draft lengths
        assert all(key in launched for key in keys), launched
    if refused := native.overlay.refused_line:  # SGLang ran it adaptive, not static
        assert not any(refused in line for line in await host.journal())

    code, out, err = await orchestrator_cli("restore", "--all", "--db", db, "--json")
    assert code == 0, err
    assert [entry["ok"] for entry in json.loads(out)["restored"]] == [True]
    await assert_restored(host)


DDTREE_BUDGETS = {1: 16, 32: 2}
"""The simulator's truth at context 60: budget 16 is 75 % faster than 2 at c1, budget 2 52 %
faster than 16 at c32, far beyond what a loaded machine blurs."""


async def test_a_ddtree_sweep_says_sglang_has_no_schedule_for_it_and_gives_the_bands(
    tmp_path: Path,
) -> None:
    settings = {"ddtree": True}
    async with fault_host(tmp_path, "127.0.0.245", settings=settings) as host:
        benchmark = {"contexts": [60], "concurrency": [1, 32], "max_tokens": 64, "rounds": 2}
        document = yaml.safe_load(sweep_yaml(host, "ddtree-across", [], benchmark=benchmark))
        document["server"]["knobs"] = {
            "algorithm": {"flag": "--speculative-algorithm"},
            "draft": {"flag": "--speculative-draft-model-path"},
            "budget": {"flag": "--speculative-ddtree-budget"},
        }
        document["configs"] = [
            {"algorithm": "DDTREE", "draft": DFLASH_DRAFT, "budget": budget}
            for budget in sorted(set(DDTREE_BUDGETS.values()))
        ]
        document["objective"] = {"metric": "output_tok_s", "context": 60, "concurrency": [1, 32]}
        document["search"] = {"schedule_trials": 1}
        sweep, outcome = await run_across_load(tmp_path, yaml.safe_dump(document))
        assert outcome.state == "done", outcome.results
        await assert_restored(host)
    (answer,) = answer_sweep(outcome.sweep_results, sweep)
    per_load = {a.load_cell.concurrency: a.best.config["budget"] for a in answer.per_load}
    assert per_load == DDTREE_BUDGETS, per_load
    schedule = answer.schedule
    assert schedule is not None and schedule.native is None and schedule.verdict is None
    assert schedule.no_native is not None and "(here DDTREE)" in schedule.no_native
    assert [(b.start, b.end, b.best.config["budget"]) for b in schedule.bands] == [
        (1, 5, 16), (6, None, 2)
    ]  # fmt: skip
    # Nothing to run as a schedule: every restart went to the fixed configs.
    purposes = [t["plan"]["purpose"] for t in outcome.results["trials"]]
    assert "schedule" not in purposes and len(purposes) == 2, purposes
