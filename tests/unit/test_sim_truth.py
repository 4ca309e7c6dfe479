"""The simulator's truth: its replay of a point, the space it covers, its CLI.

The replay draws each request's verify steps up front and sums the decode steps between
events at once; here it is held against a plain step-by-step replica that calls the server's
own functions (``sample_accepted``, ``step_time_ms``, ``prefill_time_ms``) for every request
and step, and, for the baseline (no randomness), against closed forms.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from orchestrator import cli
from orchestrator.plan import expand_configs
from orchestrator.sim.content import ContentClass
from orchestrator.sim.drafting import BatchDraft
from orchestrator.sim.perfmodel import (
    BASELINE,
    PerfParams,
    SpecKind,
    SpecShape,
    accepted_distribution,
    expected_accept_len,
    prefill_time_ms,
    sample_accepted,
    step_time_ms,
)
from orchestrator.sim.replay import Samplers
from orchestrator.sim.settings import ServerSimSettings
from orchestrator.sim.thinking import NATURAL_LENGTHS
from orchestrator.sim.truth import CellModel, StepSampler, replay_point, sweep_truth
from orchestrator.sweepfile import parse_sweep

P = PerfParams()
TREE = SpecShape(SpecKind.TREE, "DDTREE", 10, 15, 4, None, 1, 0.0)
WINDOWED = SpecShape(SpecKind.TREE, "DDTREE", 10, 15, 4, 2048, 1, 0.0)
CHAIN = SpecShape(SpecKind.CHAIN, "DFLASH", 8, 7, 1, None, 1)
SHORT = SpecShape(SpecKind.CHAIN, "DFLASH", 3, 2, 1, None, 1)
BY_BATCH = BatchDraft((1, 3, 5), (CHAIN, SHORT, BASELINE))
"""Seven drafts for one or two running, two for three or four, none from five."""
WIDE_BY_BATCH = BatchDraft((1, 3), (TREE, SHORT))


def reference_point(model: CellModel, rng: random.Random) -> tuple[float, float | None]:
    """(output tok/s in model time, meta_info accept len) of one point, step by step."""
    total = model.rounds * model.concurrency
    issued = waiting = min(model.concurrency, total)
    arrived_next = 0
    running: list[list[int]] = []  # [emitted, length, steps, index of its content class]
    done = tokens = decode = steps = admitted = 0
    now = end = 0.0
    while done < total:
        finished: list[list[int]] = []
        if waiting and len(running) < model.max_running:
            batch = min(waiting, model.max_running - len(running))
            waiting -= batch
            now += prefill_time_ms(batch * model.context, model.perf)
            for _ in range(batch):
                kind = admitted % len(model.content)
                admitted += 1
                length = model.max_tokens if model.ignore_eos else min(
                    rng.randint(*NATURAL_LENGTHS[model.content[kind]]), model.max_tokens
                )
                (finished if length <= 1 else running).append([1, length, 0, kind])
        elif running:
            shape = model.shape if model.draft is None else model.draft.shape(len(running))
            now += step_time_ms(shape, [model.context + r[0] for r in running], model.perf)
            for r in running:
                gained = sample_accepted(
                    rng, shape, model.context + r[0], model.perf, model.content[r[3]]
                )
                r[0] += min(gained, r[1] - r[0])
                r[2] += 1
            finished = [r for r in running if r[0] >= r[1]]
            running = [r for r in running if r[0] < r[1]]
        else:
            waiting, arrived_next = waiting + arrived_next, 0
            continue
        waiting, arrived_next = waiting + arrived_next, 0
        for r in finished:
            done += 1
            tokens, decode, steps, end = tokens + r[1], decode + r[1] - 1, steps + r[2], now
            if issued < total:
                issued += 1
                arrived_next += 1
    shapes = (model.shape,) if model.draft is None else model.draft.shapes
    accept = decode / steps if any(x.speculative for x in shapes) and steps else None
    return 1000.0 * tokens / end, accept


def mean_and_se(values: list[float]) -> tuple[float, float]:
    return statistics.fmean(values), statistics.stdev(values) / math.sqrt(len(values))


def replay_many(model: CellModel, n: int) -> tuple[list[float], list[float]]:
    sampler = Samplers(model.perf)
    rates: list[float] = []
    accepts: list[float] = []
    for i in range(n):
        replay = replay_point(model, sampler, random.Random(i))
        rates.append(1000.0 * replay.output_tokens / replay.wall_ms)
        if replay.accept_len is not None:
            accepts.append(replay.accept_len)
    return rates, accepts


PLAIN, CODE, PROSE = ContentClass.PLAIN, ContentClass.CODE, ContentClass.PROSE


@pytest.mark.parametrize(
    ("shape", "context", "concurrency", "max_tokens", "ignore_eos", "max_running", "content"),
    [
        (CHAIN, 300, 4, 48, True, 48, (PLAIN,)),  # a chain, short context
        (TREE, 3000, 3, 40, True, 48, (PLAIN,)),  # the law moves with the context (no window)
        (WINDOWED, 2030, 4, 40, True, 48, (PLAIN,)),  # contexts cross the window mid-request
        (CHAIN, 100, 6, 24, True, 4, (PLAIN,)),  # more workers than max_running: a queue
        (TREE, 100, 2, 80, False, 48, (PLAIN,)),  # answers end by themselves (ignore_eos off)
        (CHAIN, 300, 4, 48, True, 48, (CODE,)),  # code: the drafter's law shifted up
        (TREE, 100, 2, 300, False, 48, (PROSE,)),  # prose: shifted down, and short answers
        (TREE, 100, 3, 300, False, 48, (CODE, PROSE, PLAIN)),  # a mixed workload, cycled
        (BY_BATCH, 300, 6, 64, True, 48, (PLAIN,)),  # a schedule: the tail changes shape
        (BY_BATCH, 100, 4, 200, False, 48, (CODE, PROSE)),  # ... ragged lengths, classes
        (WIDE_BY_BATCH, 3000, 4, 40, True, 3, (PLAIN,)),  # ... a queue, a moving law
    ],
)
def test_replay_matches_a_step_by_step_replica(
    shape: SpecShape | BatchDraft,
    context: int,
    concurrency: int,
    max_tokens: int,
    ignore_eos: bool,
    max_running: int,
    content: tuple[ContentClass, ...],
) -> None:
    draft = shape if isinstance(shape, BatchDraft) else None
    static = shape.steps[0] if isinstance(shape, BatchDraft) else shape
    model = CellModel(
        static, P, context, concurrency, 2, max_tokens, ignore_eos, max_running, content=content,
        draft=draft,
    )  # fmt: skip
    n = 300
    fast_rates, fast_accepts = replay_many(model, n)
    slow = [reference_point(model, random.Random(10_000 + i)) for i in range(n)]
    slow_rates = [rate for rate, _ in slow]
    slow_accepts = [accept for _, accept in slow if accept is not None]
    for fast_values, slow_values in ((fast_rates, slow_rates), (fast_accepts, slow_accepts)):
        (a, se_a), (b, se_b) = mean_and_se(fast_values), mean_and_se(slow_values)
        # Independent draws: 4 combined standard errors, plus 0.3 % for the replay's context
        # ramp (a request's context taken as growing evenly over its own steps).
        assert abs(a - b) <= 4 * math.hypot(se_a, se_b) + 0.003 * b, (a, b, se_a, se_b)


def test_a_schedule_of_one_shape_replays_as_the_fixed_config() -> None:
    """The same requests (each drawn from its own stream) meet the same shape: the same
    point, to the last bit."""
    fixed = CellModel(CHAIN, P, 300, 6, 2, 64, True, 48)
    scheduled = CellModel(CHAIN, P, 300, 6, 2, 64, True, 48, draft=BatchDraft((1,), (CHAIN,)))
    for seed in range(5):
        assert replay_point(fixed, Samplers(P), random.Random(seed)) == replay_point(
            scheduled, Samplers(P), random.Random(seed)
        )


def test_baseline_replay_is_the_closed_form() -> None:
    """One token a step, no randomness: C requests start together, finish together, and
    their replacements wake an idle server: rounds x (one prefill + L-1 steps)."""
    context, concurrency, rounds, length = 700, 3, 2, 20
    model = CellModel(BASELINE, P, context, concurrency, rounds, length, True, 1024)
    replay = replay_point(model, StepSampler(BASELINE, P), random.Random(0))
    one_round = prefill_time_ms(concurrency * context, P) + sum(
        step_time_ms(BASELINE, [context + emitted] * concurrency, P)
        for emitted in range(1, length)
    )
    assert replay.wall_ms == pytest.approx(rounds * one_round, rel=1e-12)
    assert replay.output_tokens == rounds * concurrency * length
    assert replay.accept_len is None


def test_a_slow_client_idles_the_baseline_server() -> None:
    model = CellModel(BASELINE, P, 700, 3, 2, 20, True, 1024)
    slow = CellModel(BASELINE, P, 700, 3, 2, 20, True, 1024, turnaround_ms=40.0)
    sampler = StepSampler(BASELINE, P)
    ideal = replay_point(model, sampler, random.Random(0)).wall_ms
    assert replay_point(slow, sampler, random.Random(0)).wall_ms == pytest.approx(ideal + 40.0)


def test_accepted_distribution_is_the_law_sample_accepted_draws() -> None:
    law = accepted_distribution(TREE, 600, P)
    assert math.fsum(law) == pytest.approx(1.0)
    mean = math.fsum((i + 1) * p for i, p in enumerate(law))
    assert mean == pytest.approx(expected_accept_len(TREE, 600, P))
    rng = random.Random(3)
    draws = [sample_accepted(rng, TREE, 600, P) for _ in range(20_000)]
    for gained, p in enumerate(law, start=1):
        share = sum(1 for d in draws if d == gained) / len(draws)
        assert abs(share - p) < 4 * math.sqrt(p * (1 - p) / len(draws)) + 1e-9


SWEEP = {
    "name": "truth-space",
    "hosts": [{"name": "h", "address": "127.0.0.1", "base_url": "http://127.0.0.1:30000"}],
    "server": {
        "model": "m",
        "knobs": {
            "algorithm": {"flag": "--speculative-algorithm"},
            "draft_model": {"flag": "--speculative-draft-model-path"},
            "budget": {"flag": "--speculative-ddtree-budget"},
            "topk": {"env": "SGLANG_DDTREE_MAX_TOPK"},
            "window": {"flag": "--speculative-draft-window-size"},
            "bogus": {"flag": "--no-such-flag"},
        },
    },
    "baseline": True,
    "configs": [
        {"algorithm": "DFLASH", "draft_model": "/d", "window": 4},  # window < block
        {"algorithm": "NGRAM", "bogus": 1},  # a flag this build does not know
        {"algorithm": "DDTREE", "draft_model": "/d", "budget": 8, "topk": 2},  # grid repeats it
    ],
    "grid": {"algorithm": ["DDTREE"], "draft_model": ["/d"], "budget": [8], "topk": [2, 4]},
    "benchmark": {"contexts": [60, 1024], "concurrency": [1, 2], "max_tokens": 16, "rounds": 1},
}


def test_the_truth_covers_the_plans_space_and_says_why_a_config_cannot_start() -> None:
    sweep = parse_sweep(yaml.safe_dump(SWEEP), "space.yaml")
    truth = sweep_truth(sweep, ServerSimSettings(), replications=4)
    assert [entry.config for entry in truth.configs] == expand_configs(sweep)
    assert len(truth.configs) == 5  # baseline, 2 failing, DDTREE topk 2 (once) and 4
    window = truth.of({"algorithm": "DFLASH", "draft_model": "/d", "window": 4})
    assert window.cells == () and window.error is not None
    assert window.error.startswith(
        "invalid-config: ValueError: --speculative-draft-window-size must be >="
    )
    bogus = truth.of({"algorithm": "NGRAM", "bogus": 1})
    assert bogus.error == "bad-flag: unrecognized arguments: --no-such-flag 1"
    topk2 = truth.of({"algorithm": "DDTREE", "draft_model": "/d", "budget": 8, "topk": 2})
    topk4 = truth.of({"algorithm": "DDTREE", "draft_model": "/d", "budget": 8, "topk": 4})
    cells = [(c.context, c.concurrency) for c in topk4.cells]
    assert cells == [(60, 1), (60, 2), (1024, 1), (1024, 2)]
    # The env knob reached the server: top-k 4 lifts acceptance over top-k 2 (over the cells:
    # 16 tokens a request and 4 replications leave one cell's mean within its sampling noise).
    twos = [c.accept_len for c in topk2.cells]
    fours = [c.accept_len for c in topk4.cells]
    assert None not in twos and None not in fours
    assert sum(f for f in fours if f is not None) > sum(t for t in twos if t is not None)
    baseline = truth.of({})
    assert all(c.accept_len is None and c.output_tok_s_sd == 0.0 for c in baseline.cells)


def test_a_crash_at_start_fault_aimed_at_configs_leaves_them_without_cells() -> None:
    sweep = parse_sweep(yaml.safe_dump(SWEEP), "space.yaml")
    aim = ["--speculative-ddtree-budget", "8"]
    settings = ServerSimSettings.from_mapping(
        {"faults": {"crash_at_start": {"value": "oom", "when_args": aim}}}
    )
    truth = sweep_truth(sweep, settings, replications=2)
    for topk in (2, 4):
        entry = truth.of({"algorithm": "DDTREE", "draft_model": "/d", "budget": 8, "topk": topk})
        assert entry.cells == () and entry.error is not None and entry.error.startswith("oom")
    assert len(truth.of({}).cells) == 4


def test_sim_truth_cli_prints_one_json_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP), encoding="utf-8")
    settings = json.dumps({"time_scale": 0.5})
    assert cli.main(["sim", "truth", str(path), "--settings", settings, "--replications",
                     "3", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    entries = {json.dumps(e["config"], sort_keys=True): e for e in document["configs"]}
    baseline = entries["{}"]
    assert set(baseline) == {"config", "cells"}
    first = baseline["cells"][0]
    assert {"context", "concurrency", "output_tok_s", "accept_len"} <= set(first)
    # time_scale 0.5 halves every step: the same point in half the wall time.
    direct = sweep_truth(parse_sweep(path.read_text(), "s"), replications=3).of({})
    assert first["output_tok_s"] == pytest.approx(2 * direct.cells[0].output_tok_s)
    assert "error" in entries[json.dumps({"algorithm": "NGRAM", "bogus": 1}, sort_keys=True)]


@pytest.mark.parametrize(
    "settings", ['{"restart_jitter": -1}', '{"nope": 1}', "[1]", "{bad json"]
)
def test_sim_truth_cli_refuses_bad_settings(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], settings: str
) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(SWEEP), encoding="utf-8")
    assert cli.main(["sim", "truth", str(path), "--settings", settings, "--json"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.startswith("sim truth: --settings")


def test_the_orchestrator_never_imports_the_truth() -> None:
    """Only the ``sim truth`` verb loads it: building every verb's parser and importing the
    control path leaves it unloaded (a fresh interpreter, so other tests' imports do not count).
    """
    probe = (
        "import sys\n"
        "import orchestrator.cli, orchestrator.runner, orchestrator.daemon\n"
        "orchestrator.cli.build_parser()\n"
        "print('orchestrator.sim.truth' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    assert done.stdout.strip() == "False", done.stderr
