"""The simulator's truth holds against what a sweep measures on a simulated host.

A small sweep runs end to end (real runner, SSH, systemd stand-in, the simulated server over
HTTP) with restart jitter off; every measured point's ``output_tok_s`` and ``accept_len`` must
lie within the request-sampling noise of :func:`orchestrator.sim.truth.sweep_truth`, computed
from the very settings file the host's server read.

Tolerance, per point: ``Z`` standard deviations of ONE measurement, which the truth's own
replays give (which requests accepted how many tokens; the baseline, one token a step, has
none), around two truths.

Above: the truth of an ideal client, as a search is scored, plus ``EPSILON`` for timer
granularity. Nothing lets a point run faster than the model (a step cut short only repays
the event loop's lateness in starting it), so this side is tight: a truth that counted a
prefill twice or a step too many fails here.

Below: the truth of a client that takes ``TURNAROUND_S`` from a request's end to its next
request reaching the server, less ``SLACK``. This side carries what the model leaves to the
machine: the client shares 2 cores with the runner and, in a suite, other tests; its
turnaround is several ms idle and tens of ms under load, and the requests a round sends
"together" reach the server ms apart, so the server may prefill them in two batches (one more
prefill's fixed cost, 10 ms). 25-75 ms a round, 2-6 % of these points, were seen at load
averages up to 17. A truth that left out the prefill (about a quarter of these points) still
fails here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.sim.settings import ServerSimSettings
from orchestrator.sim.truth import CellTruth, sweep_truth
from orchestrator.sweepfile import parse_sweep
from tests.faults.harness import fault_host, run, sweep_yaml

ADDRESS = "127.0.0.187"  # this test's own (fault tests: 120-139, 145-149)
Z = 4.0
TURNAROUND_S = 0.05
SLACK = 0.10
EPSILON = 0.005

DFLASH = {"algorithm": "DFLASH", "draft_model": "/models/dflash", "draft_tokens": 8}


def throughput_bounds(ideal: CellTruth, slow: CellTruth) -> tuple[float, float]:
    """[lowest, highest] output_tok_s a measurement may show (module docstring)."""
    return (
        (slow.output_tok_s - Z * slow.output_tok_s_sd) * (1 - SLACK),
        (ideal.output_tok_s + Z * ideal.output_tok_s_sd) * (1 + EPSILON),
    )


@pytest.mark.slow
async def test_measured_points_agree_with_the_truth(tmp_path: Path) -> None:
    server = {"load_s": 0.2, "warmup_s": 0.1, "stop_delay_s": 0.05, "restart_jitter": 0}
    # Real-time steps (time_scale 1), so the client's turnaround is small against a step.
    settings = {"time_scale": 1.0, "memory_release_lag_s": 0.1}
    async with fault_host(tmp_path, ADDRESS, settings=settings, server=server) as host:
        text = sweep_yaml(
            host,
            "truth",
            [DFLASH],
            baseline=True,
            knobs={"draft_model": {"flag": "--speculative-draft-model-path"}},
            benchmark={
                "api": "generate",
                "contexts": [1024],
                "concurrency": [2, 4],
                "max_tokens": 32,
                "rounds": 2,
                "warmup_requests": 0,
            },
            policy={"restore": "stopped"},  # no restart after the last trial
        )
        done = await run(tmp_path, text)
        server_settings = ServerSimSettings.load(host.cluster.hosts[0].server_config_path)
    assert server_settings.restart_jitter == 0.0
    sweep = parse_sweep(text, "truth.yaml")
    truth = sweep_truth(sweep, server_settings, replications=64)
    slow_client = sweep_truth(
        sweep, server_settings, replications=64, turnaround_s=TURNAROUND_S
    )
    compared = 0
    for config in ({}, DFLASH):
        trial = done.trial(config)
        assert trial["state"] == "done", trial
        expected = truth.of(config)
        for point in (p for p in trial["points"] if p["kind"] == "throughput"):
            cell = expected.cell(point["context"], point["concurrency"])
            slow = slow_client.of(config).cell(point["context"], point["concurrency"])
            low, high = throughput_bounds(cell, slow)
            assert low <= point["metrics"]["output_tok_s"] <= high, (config, point, cell)
            accept = point["accept_len"]["accept_len"]
            if cell.accept_len is None:
                assert accept is None, point
            else:
                assert cell.accept_len_sd is not None and cell.accept_len_sd > 0
                assert abs(accept - cell.accept_len) <= Z * cell.accept_len_sd, (point, cell)
            compared += 1
    assert compared == 4
