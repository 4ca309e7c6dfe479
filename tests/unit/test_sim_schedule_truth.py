"""``sim truth`` for every engine the simulator speaks, and for a speculative schedule: the
truth of a vLLM sweep read as vLLM command lines, and a schedule in the engine's own form (as
the answers render it) scored per load beside the best fixed config there."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator import cli
from orchestrator.answers.schedule import band_starts
from orchestrator.engines.schedule import NativeSchedule, ScheduleBand
from orchestrator.engines.sglang.schedule import native_schedule as sglang_schedule
from orchestrator.engines.vllm.schedule import native_schedule as vllm_schedule
from orchestrator.sim.truth import read_schedule
from orchestrator.sweepfile import load_sweep, parse_sweep

REPO = Path(__file__).resolve().parents[2]
LOADS = [1, 8, 32]
HOSTS = [{"name": "h", "address": "127.0.0.1", "base_url": "http://127.0.0.1:30000"}]
BENCHMARK = {"api": "chat", "contexts": [1024], "concurrency": LOADS, "max_tokens": 192,
             "rounds": 2}  # fmt: skip
DFLASH = {"method": "dflash", "draft": "/models/Kimi-K2.6-DFlash"}
VLLM_SWEEP = {
    "name": "vllm-by-load",
    "engine": "vllm",
    "hosts": HOSTS,
    "server": {"model": "kimi-k2.6", "knobs": {
        "method": {"flag": "--speculative-config", "json_key": "method"},
        "tokens": {"flag": "--speculative-config", "json_key": "num_speculative_tokens"},
        "draft": {"flag": "--speculative-config", "json_key": "model"},
    }},
    "baseline": True,
    "grid": {"method": ["dflash"], "draft": [DFLASH["draft"]], "tokens": [1, 2, 3, 6, 8, 15]},
    "benchmark": BENCHMARK,
}  # fmt: skip
EAGLE3 = {"algorithm": "EAGLE3", "draft": "/models/Kimi-K2.6-EAGLE3", "topk": 1}
SGLANG_SWEEP = {
    "name": "sglang-by-load",
    "hosts": HOSTS,
    "server": {"model": "kimi-k2.6", "knobs": {
        "algorithm": {"flag": "--speculative-algorithm"},
        "draft": {"flag": "--speculative-draft-model-path"},
        "steps": {"flag": "--speculative-num-steps"},
        "topk": {"flag": "--speculative-eagle-topk"},
    }},
    "baseline": True,
    "grid": {**{k: [v] for k, v in EAGLE3.items()}, "steps": [1, 2, 3, 5, 8]},
    "benchmark": BENCHMARK,
}  # fmt: skip


def _truth(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, sweep: dict[str, Any],
    schedule: NativeSchedule | dict[str, Any] | None = None,
) -> dict[str, Any]:  # fmt: skip
    """``sim truth SWEEP [--schedule FILE] --json``'s document."""
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep), encoding="utf-8")
    argv = ["sim", "truth", str(path), "--json"]
    if schedule is not None:
        form = schedule.to_json() if isinstance(schedule, NativeSchedule) else schedule
        (tmp_path / "schedule.json").write_text(json.dumps(form), encoding="utf-8")
        argv += ["--schedule", str(tmp_path / "schedule.json")]
    assert cli.main(argv) == 0, capsys.readouterr().err
    document: dict[str, Any] = json.loads(capsys.readouterr().out)
    return document


def _best_by_load(document: dict[str, Any], knob: str) -> dict[int, Any]:
    """Per load: the value of ``knob`` in the config with the highest ``output_tok_s``."""
    best: dict[int, tuple[float, Any]] = {}
    for entry in document["configs"]:
        for cell in entry["cells"]:
            rate = cell["output_tok_s"]
            if cell["concurrency"] not in best or rate > best[cell["concurrency"]][0]:
                best[cell["concurrency"]] = (rate, entry["config"].get(knob))
    return {load: value for load, (_, value) in best.items()}


def _bands(best: dict[int, Any], common: dict[str, Any], knob: str) -> list[ScheduleBand]:
    """The answers' bands: from the geometric midpoints between loads, each load's best."""
    starts = band_starts(LOADS)
    return [ScheduleBand(start, {**common, knob: best[load]})
            for start, load in zip(starts, LOADS, strict=True)]  # fmt: skip


def test_a_vllm_sweep_is_read_as_vllm_command_lines() -> None:
    """The demo's vLLM sweep: its configs start where vLLM starts them, and the two meant to
    fail fail as vLLM fails them."""
    from orchestrator.sim.truth import sweep_truth

    sweep = load_sweep(REPO / "sweeps" / "demo-vllm.yaml")
    truth = sweep_truth(sweep, replications=2)
    errors = {json.dumps(e.config, sort_keys=True): e.error for e in truth.configs}
    assert sum(error is None for error in errors.values()) == 6  # baseline, 2 DFlash, 3 EAGLE-3
    refused = [error for error in errors.values() if error is not None]
    assert refused[0] == ("bad-flag: vllm serve: error: unrecognized arguments: "
                          "--speculative-algorithm DFLASH")  # fmt: skip
    assert refused[1].startswith("invalid-config: ValueError: max_num_scheduled_tokens is set")


def test_a_vllm_schedule_scores_as_the_best_fixed_config_at_every_load(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fixed = _truth(capsys, tmp_path, VLLM_SWEEP)
    best = _best_by_load(fixed, "tokens")
    assert best[1] > best[8] > best[32] > 0, best  # the best draft length falls with load
    schedule = vllm_schedule(_bands(best, DFLASH, "tokens"), parse_sweep(
        yaml.safe_dump(VLLM_SWEEP), "s").server.knobs)  # fmt: skip
    assert isinstance(schedule, NativeSchedule)
    document = _truth(capsys, tmp_path, VLLM_SWEEP, schedule)
    scored = document["schedule"]
    assert "error" not in scored, scored
    assert [cell["concurrency"] for cell in scored["cells"]] == LOADS
    for cell in scored["cells"]:
        assert cell["best_fixed"]["config"]["tokens"] == best[cell["concurrency"]]
        assert cell["ratio"] == pytest.approx(1.0, abs=0.01), cell
    # The fixed configs' truths are unchanged by the schedule beside them.
    assert document["configs"] == fixed["configs"]


def test_an_sglang_adaptive_schedule_scores_as_the_best_fixed_config_at_every_load(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    fixed = _truth(capsys, tmp_path, SGLANG_SWEEP)
    best = _best_by_load(fixed, "steps")
    assert best[1] > best[8] > best[32] > 0, best
    knobs = parse_sweep(yaml.safe_dump(SGLANG_SWEEP), "s").server.knobs
    schedule = sglang_schedule(_bands(best, EAGLE3, "steps"), knobs)
    assert isinstance(schedule, NativeSchedule) and schedule.overlay.files
    scored = _truth(capsys, tmp_path, SGLANG_SWEEP, schedule)["schedule"]
    assert "error" not in scored, scored
    for cell in scored["cells"]:
        assert cell["ratio"] == pytest.approx(1.0, abs=0.01), cell


def test_a_schedule_the_engine_drops_does_not_run(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """SGLang falls back to static params for DDTree: the schedule's truth is its refusal,
    never the static config's cells."""
    ddtree = {**SGLANG_SWEEP, "server": {"model": "m", "knobs": {
        "algorithm": {"flag": "--speculative-algorithm"},
        "draft": {"flag": "--speculative-draft-model-path"},
        "steps": {"flag": "--speculative-num-steps"},
    }}, "grid": {"algorithm": ["DDTREE"], "draft": ["/d"]}}  # fmt: skip
    slots = {"1": {"candidate_steps": [3]}, "8": {"candidate_steps": [1]}}
    native = {"config": {"algorithm": "DDTREE", "draft": "/d"}, "overlay": {
        "flags": {"--speculative-adaptive": None},
        "files": {"--speculative-adaptive-config": json.dumps(slots)},
        "refused_line": "speculative_adaptive disabled:"}}  # fmt: skip
    scored = _truth(capsys, tmp_path, ddtree, native)["schedule"]
    assert scored["cells"] == []
    assert scored["error"] == (
        "invalid-config: speculative_adaptive disabled: speculative_algorithm=DDTREE (only "
        "EAGLE/EAGLE3 are supported). Falling back to static speculative params."
    )


def test_the_truth_replays_pinned_adaptive_slots_only(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    slots = {"1": {"candidate_steps": [1, 3, 5]}, "8": {"candidate_steps": [1]}}
    native = {"config": {**EAGLE3, "steps": 3}, "overlay": {
        "flags": {"--speculative-adaptive": None},
        "files": {"--speculative-adaptive-config": json.dumps(slots)}}}  # fmt: skip
    scored = _truth(capsys, tmp_path, SGLANG_SWEEP, native)["schedule"]
    assert scored["cells"] == [] and scored["error"].startswith("unmodelled: ")


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("[]", "a schedule is a JSON object with a \"config\" object"),
        ('{"config": {}, "overlay": 3}', '"overlay" is not an object'),
        ('{"config": {}, "overlay": {"files": []}}', '"files" is not an object'),
        ("{", "Expecting property name"),
    ],
)
def test_a_schedule_file_that_is_not_one_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(VLLM_SWEEP), encoding="utf-8")
    (tmp_path / "bad.json").write_text(content, encoding="utf-8")
    assert cli.main(["sim", "truth", str(path), "--schedule", str(tmp_path / "bad.json")]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"sim truth: --schedule {tmp_path / 'bad.json'}: {message}")


def test_a_schedule_is_read_in_each_of_its_forms() -> None:
    native = {"config": {"tokens": 8}, "overlay": {"json": {"--speculative-config": {
        "num_speculative_tokens_per_batch_size": [[1, 7, 8], [8, 8, 2]]}}}}  # fmt: skip
    config, overlay = read_schedule(native)
    assert config == {"tokens": 8}
    assert overlay.json["--speculative-config"]["num_speculative_tokens_per_batch_size"][1] \
        == [8, 8, 2]  # fmt: skip
    assert read_schedule({"native": native}) == (config, overlay)  # an answer's schedule
    flat = {"config": {"steps": 3}, "flags": {"--speculative-adaptive": None},
            "files": {"--speculative-adaptive-config": "{}"}}  # fmt: skip
    assert read_schedule(flat)[1].flags == {"--speculative-adaptive": None}
