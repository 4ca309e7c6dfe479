"""A real engine under the orchestrator: llama.cpp's ``llama-server`` (built from the package
registry's source by ``make real-engine``) as a real-systemd host's unit, swept by
``orchestrator run``: real drop-ins, real restarts, readiness (503 ``Loading model``, then a
real generation), the benchmark matrix, acceptance from the journal and ``/metrics``, an
answer that decides (speculation beats the baseline beyond its interval, and the config it
names is one of the two fastest that ``orchestrator bench`` measures against hand-started
servers), and the host restored byte for byte. Faults with the real engine: a draft path that
does not exist, a removed flag, SIGKILL of the server mid-benchmark.

How much is measured (requests a point, restarts a config) is :mod:`tests.realengine.sizing`'s,
with its reasons. No test here bounds a time: the machine is shared."""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import statistics
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from orchestrator import engines
from tests.realengine import compare, sweeping
from tests.realengine.sizing import TIER
from tests.realengine.sweeping import by_config, key, run_sweep, running, throughput
from tests.realengine.unit import LlamaHost

pytestmark = [pytest.mark.realengine, pytest.mark.timeout(1800)]

DRAFT_SIZES = TIER.draft_sizes
MISSING_DRAFT = "/nonexistent/draft.gguf"
BENCHMARK = TIER.benchmark_yaml() + running(trial_retries=2)


@pytest.fixture(scope="module")
def direct(llama_host: LlamaHost) -> compare.Comparison:
    """The tier's configs measured by ``orchestrator bench`` against hand-started servers
    (:mod:`tests.realengine.compare`), once for the module."""
    comparison = compare.run_comparison(llama_host.engine)
    print(json.dumps({"direct": comparison.to_json()}))
    return comparison


def draft_config(llama: LlamaHost, n_max: int) -> dict[str, Any]:
    return {"spec": "draft-simple", "draft": str(llama.draft()), "n_max": n_max}


def test_a_llama_server_sweep_answers_which_draft_size(
    llama_host: LlamaHost, direct: compare.Comparison, tmp_path: Path
) -> None:
    llama = llama_host
    configs = [draft_config(llama, n) for n in DRAFT_SIZES]
    missing = {"spec": "draft-simple", "draft": MISSING_DRAFT, "n_max": 4}
    removed = {"spec": "draft-simple", "draft": str(llama.draft()), "legacy_n_max": 8}
    body = "baseline: true\nconfigs:\n" + "".join(
        f"  - {json.dumps(c)}\n" for c in [*configs, missing, removed]
    )
    before = llama.unit_files()
    started = time.monotonic()
    code, document, log = run_sweep(
        llama.sweep_yaml("llamacpp-real", body + BENCHMARK), tmp_path, "sweep"
    )
    elapsed = time.monotonic() - started
    assert code == 1, log[-3000:]  # the missing draft and the removed flag fail by design
    trials = by_config(document["trials"])

    # Faults: the removed flag never reached the host (the host's own llama-server refused
    # it in the preflight); the missing draft failed at startup, its cause read from the
    # server's own text.
    for trial in trials[key(removed)]:
        assert (trial["state"], trial["cause"]) == ("failed", "bad-flag"), trial
        assert trial["evidence"]["found_by"] == "preflight", trial["evidence"]
        assert "has been removed" in json.dumps(trial["evidence"]), trial["evidence"]
    for trial in trials[key(missing)]:
        assert (trial["state"], trial["cause"]) == ("failed", "invalid-config"), trial
        assert MISSING_DRAFT in json.dumps(trial["evidence"]), trial["evidence"]

    # Every other config measured TIER.repeats times, each after its own restart, on the
    # asked argv; every point has its requests and prompts of exactly its context (no N, no P).
    measured = {"baseline": trials[key({})]}
    measured.update({str(n): trials[key(c)] for n, c in zip(DRAFT_SIZES, configs, strict=True)})
    for name, attempts in measured.items():
        assert [t["state"] for t in attempts] == ["done"] * TIER.repeats, (name, attempts)
        assert len({t["evidence"]["invocation_id"] for t in attempts}) == TIER.repeats, attempts
        for trial in attempts:
            check_provenance(llama, name, trial["evidence"]["provenance"])
            (point,) = [p for p in trial["points"] if p["kind"] == "throughput"]
            metrics = point["metrics"]
            assert metrics["errors"] == 0 and metrics["requests_ok"] == TIER.rounds, metrics
            assert metrics["output_len_max"] == TIER.max_tokens, metrics
            assert metrics["prompt_tokens_min"] == metrics["prompt_tokens_max"] == TIER.context
            assert not {"too_few_requests", "prompt_length_inexact"} & set(point["quality"])
    accept = {name: accept_lengths(attempts) for name, attempts in measured.items()}
    assert accept.pop("baseline") == [None] * TIER.repeats
    # The shortest draft accepts the fewest tokens a step. Not ordered beyond it: llama.cpp
    # ends a draft where the draft model's confidence falls below its p-min, so 8 and 16 draft
    # alike on most steps, and their accept lengths (4.5-5.4 over 64-token answers) overlapped
    # from restart to restart.
    means = [statistics.fmean(accept[str(n)]) for n in DRAFT_SIZES]
    assert means[0] < min(means[1:]) and means[0] > 1, accept

    answer = check_answer(document, measured)
    check_decision(answer, direct)
    check_host_events(tmp_path / "sweep.db")
    assert llama.unit_files() == before  # restored byte for byte
    assert llama.show("ActiveState")["ActiveState"] == "active"
    props = llama.await_serving()
    assert props["model_path"] == str(llama.engine.models.target)
    assert [s["speculative"] for s in llama.get("/slots")] == [False]
    report = {
        "elapsed_s": round(elapsed),
        "answer": answer,
        "accept_len": {n: [round(a, 3) for a in v] for n, v in accept.items()},
        "output_tok_s": {
            n: [round(throughput(t), 1) for t in attempts] for n, attempts in measured.items()
        },
        "direct": direct.to_json(),
    }
    (tmp_path / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


def check_provenance(llama: LlamaHost, name: str, provenance: dict[str, Any]) -> None:
    """What ran: this build, the drop-in's argv (the knobs' flags and --metrics), and what the
    new process said of itself (``/slots`` speculative, the draft it loaded)."""
    assert provenance["engine"] == "llamacpp", provenance
    assert provenance["engine_version"] == "b1-0c1e570", provenance
    assert provenance["added_flags"] == ["--metrics"], provenance
    assert provenance["gpus"] == []  # no GPU: the host's RAM was the memory gate's
    speculating = name != "baseline"
    assert provenance["server_args"]["speculative"] is speculating, provenance
    argv = provenance["exec_start"]
    assert argv[:2] == [str(llama.engine.llama_server), "--model"] and "--metrics" in argv
    if speculating:
        at = argv.index("--spec-draft-n-max")
        assert argv[at + 1] == name and "--spec-type" in argv, argv
        assert provenance["worker_init"]["draft_model"]["path"] == str(llama.draft())
    else:
        assert "--spec-type" not in argv and "draft_model" not in provenance["worker_init"]


def accept_lengths(attempts: list[dict[str, Any]]) -> list[float | None]:
    """Each attempt's accept length, after checking its sources: the ``llamacpp:`` counters'
    deltas (exact: the value taken) and the journal's per-request ``draft acceptance`` lines
    of the point's own window, flagged when they disagree by more than 5 %."""
    values: list[float | None] = []
    for trial in attempts:
        (point,) = [p for p in trial["points"] if p["kind"] == "throughput"]
        accept = point["accept_len"]
        if accept["accept_len"] is None:
            assert accept["accept_len_journal_lines"] == 0, accept
            assert accept["accept_len_metrics"] is None, accept
            values.append(None)
            continue
        assert accept["accept_len"] == accept["accept_len_metrics"], accept
        # one line per request
        assert accept["accept_len_journal_lines"] == TIER.rounds, accept
        apart = abs(accept["accept_len_journal"] / accept["accept_len_metrics"] - 1) > 0.05
        assert apart == ("disagree" in accept["accept_len_flags"]), accept
        assert accept["accept_len_meta_info"] is None  # the chat API reports no verify steps
        values.append(float(accept["accept_len"]))
    return values


def check_answer(document: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """The answer, read (:func:`tests.realengine.sweeping.check_answer`), configs named by
    their draft size (whether it decides: :func:`check_decision`)."""
    return sweeping.check_answer(
        document, measured, lambda config: compare.config_name(config.get("n_max")), TIER.repeats
    )


def check_decision(answer: dict[str, Any], direct: compare.Comparison) -> None:
    """An answer a person could act on: it names a speculative config that beats the baseline
    beyond the uncertainty (the speedup's whole interval above 1, the baseline not tied with
    it), and that config is one of the two fastest when ``orchestrator bench`` measures the
    same configs against hand-started servers. Configs near the best may stay tied with it
    (a tie among draft sizes still says: speculate, with any of these)."""
    assert answer["verdict"] in ("better", "tie"), answer
    assert answer["best"] != compare.BASELINE, (answer, direct.to_json())
    assert compare.BASELINE not in answer["tied"], (answer, direct.to_json())
    assert answer["speedup_ci95"] is not None and answer["speedup_ci95"][0] > 1, answer
    assert answer["best"] in direct.ranking[:2], (answer, direct.to_json())


def check_host_events(db: Path) -> None:
    """The preflight asked the host's own llama-server and judged memory by the host's RAM."""
    sweeping.check_host_events(db, "llamacpp")


def test_readiness_is_loading_503_then_200(llama_host: LlamaHost) -> None:
    """What readiness meets on a restart: the port refuses, then answers 503 ``Loading
    model`` while the model loads (the engine's ``server_config`` says not yet), then 200."""
    engine = engines.get("llamacpp")

    async def server_config() -> dict[str, Any] | None:
        async with aiohttp.ClientSession() as http:
            try:
                return await engine.server_config(http, llama_host.base_url, 5.0)
            except aiohttp.ClientConnectorError:
                return None

    llama_host.host.ssh(["systemctl", "restart", llama_host.unit])
    seen: list[object] = []
    loading_config: list[dict[str, Any] | None] = []
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(llama_host.base_url + "/health", timeout=5) as reply:
                seen.append(reply.status)
                break
        except urllib.error.HTTPError as error:
            seen.append(error.code)
            body = json.loads(error.read())
            assert body["error"]["message"] == "Loading model", body
            if not loading_config:
                loading_config.append(asyncio.run(server_config()))
        except urllib.error.URLError:
            seen.append("refused")
        time.sleep(0.01)
    order = [s for i, s in enumerate(seen) if i == 0 or seen[i - 1] != s]
    assert order[-1] == 200 and 503 in order, order
    assert order in (["refused", 503, 200], [503, 200]), order
    assert loading_config == [None]  # 503: not ready, whatever else answers
    ready = asyncio.run(server_config())
    assert ready is not None and ready["speculative"] is False and ready["total_slots"] == 1


def test_sigkill_mid_benchmark_is_a_crash(llama_host: LlamaHost, tmp_path: Path) -> None:
    """The server killed (SIGKILL, by its pid) while a point is measured: the attempt fails
    ``crashed``, and the host is restored as found, serving again."""
    llama = llama_host
    before = llama.unit_files()
    config = {**draft_config(llama, 8)}
    sizing = dataclasses.replace(TIER, rounds=8, repeats=1)
    benchmark = sizing.benchmark_yaml() + running(trial_retries=0)
    text = llama.sweep_yaml("llamacpp-kill", f"configs:\n  - {json.dumps(config)}\n{benchmark}")
    killed: list[int] = []

    def kill_mid_point() -> None:
        """Once the trial's server (its --metrics) has generated past its probe, prompt
        calibration and warm-up, SIGKILL its main process."""
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            try:
                metrics = llama.get("/metrics")
            except OSError:
                metrics = ""
            predicted = [
                float(line.split()[-1])
                for line in metrics.splitlines()
                if line.startswith("llamacpp:tokens_predicted_total ")
            ]
            if predicted and predicted[0] >= 400:
                pid = int(llama.show("MainPID")["MainPID"])
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.05)

    killer = threading.Thread(target=kill_mid_point, daemon=True)
    killer.start()
    code, document, log = run_sweep(text, tmp_path, "kill")
    killer.join(timeout=10)
    assert killed, log[-3000:]
    assert code == 1, log[-3000:]
    (trial,) = document["trials"]
    assert (trial["state"], trial["cause"]) == ("failed", "crashed"), trial
    assert llama.unit_files() == before
    assert llama.show("ActiveState")["ActiveState"] == "active"
    assert int(llama.show("MainPID")["MainPID"]) not in killed
    assert llama.await_serving()["model_path"] == str(llama.engine.models.target)


def test_bench_measures_a_hand_started_server(direct: compare.Comparison) -> None:
    """``orchestrator bench --engine llamacpp`` against a llama-server started by hand (no
    systemd, no journal; the direct comparison's runs): tokens from the chunks' ``timings``,
    accept length from the ``llamacpp:`` counters, prompts of exactly the context."""
    for measurement in direct.measurements:
        point = measurement.point
        assert point["requests_ok"] == TIER.rounds and point["errors"] == 0, point
        assert point["output_tokens"] == TIER.rounds * TIER.max_tokens, point
        assert point["output_len_max"] == TIER.max_tokens, point
        assert point["prompt_tokens_min"] == point["prompt_tokens_max"] == TIER.context, point
        if measurement.config == compare.BASELINE:
            assert point["accept_len"] is None, point
            continue
        assert point["accept_len"] == point["accept_len_metrics"] and point["accept_len"] > 1.5
        assert point["accept_len_metrics_verify_calls"] > 0, point
        assert point["accept_len_meta_info"] is None, point  # chat reports no verify steps
