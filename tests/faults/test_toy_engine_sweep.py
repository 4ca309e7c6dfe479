"""Proof that the engine seam is real (issue 23, item 5): an engine the orchestrator has never
heard of runs a whole sweep.

``tests/toyengine`` is a serving engine of its own (its flags, log lines, readiness endpoint,
metrics and argv parser) registered only here. A simulated host's unit runs it; a sweep with
``engine: toy`` goes through the real runner: preflight by the toy's own parser, drop-ins of
toy flags, clean restarts proven ready by ``/toy/config`` and a real generation, the
benchmark matrix, accept length from the toy's ``TOYSTAT`` journal lines, the answer and the
report, and the host restored. The toy server makes ``depth 2 + fused kernel`` fastest by
construction, and the answer must say so.

Runs on the fault harness (addresses 127.0.0.217 and 218 are this file's).
"""

from __future__ import annotations

import itertools
import socket
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml

from orchestrator import engines
from orchestrator.answers import answer_sweep
from orchestrator.engines.base import DecodeEvent, Engine, FailureEvent, ReadyEvent
from orchestrator.report import render_report
from orchestrator.sim.host import SERVER_PORT, UNIT_NAME, render_unit
from orchestrator.store import Store
from orchestrator.sweepfile import parse_sweep
from orchestrator.verbs import check
from tests.faults.harness import (
    STATE_PROPS,
    FaultHost,
    fault_host,
    host_name,
    point_count,
    sweep_yaml,
)
from tests.faults.harness import run as run_sweep_text
from tests.toyengine import server
from tests.toyengine.engine import ToyEngine

ADDRESS = "127.0.0.217"  # outside the fault tests' 120-139: each test its own address
HELP_ADDRESS = "127.0.0.218"
REPO = Path(__file__).resolve().parents[2]
MODEL = "toy-model"
ROUNDS = 5
MAX_TOKENS = 46
"""45 decode tokens: whole steps at accept length 2.25 (20) and 2.5 (18), so no request ends on
a truncated step and the TOYSTAT lines and the counters give the same accept length."""

DEPTH_2: dict[str, Any] = {"depth": 2}
DEPTH_4: dict[str, Any] = {"depth": 4}
FUSED: dict[str, Any] = {"depth": 2, "kernel": "fused"}
CONFIGS_BY = (("depth 2", DEPTH_2), ("depth 4", DEPTH_4), ("fused", FUSED))
CONFIGS = tuple(config for _, config in CONFIGS_BY)
KNOBS = {"depth": {"flag": "--toy-draft-depth"}, "kernel": {"flag": "--toy-kernel"}}


@pytest.fixture
def toy() -> Iterator[ToyEngine]:
    """The toy engine, known by name for one test only."""
    engine = ToyEngine()
    assert isinstance(engine, Engine)  # every member of the seam
    engines.register(engine)
    try:
        yield engine
    finally:
        engines.unregister(engine.name)
    assert "toy" not in engines.names()


def toy_unit(address: str) -> str:
    """The host's unit as found: the toy server, no speculation, no metrics; the checkout on
    its PYTHONPATH (the simulated systemd starts programs in ``/``). Six starts within a few
    seconds would hit systemd's start rate limit (the restore then retries): that is not what
    this test is about, so the unit turns the limit off."""
    argv = [
        sys.executable, "-m", "tests.toyengine.server",
        "--toy-host", address, "--toy-port", str(SERVER_PORT),
        "--toy-model-name", MODEL, "--toy-step-ms", "4", "--toy-stat-interval", "4",
        "--toy-load-s", "0.05",
    ]  # fmt: skip
    text = render_unit(argv, description=f"Toy server ({host_name(address)}, simulated)")
    text = text.replace("Type=simple\n", f"Type=simple\nEnvironment=PYTHONPATH={REPO}\n", 1)
    return text.replace("\n[Service]\n", "StartLimitIntervalSec=0\n\n[Service]\n", 1)


def toy_sweep(host: FaultHost) -> str:
    """The harness's small sweep over ``host``, on the toy engine with its own knobs."""
    document = yaml.safe_load(
        sweep_yaml(
            host,
            "toy-engine",
            CONFIGS,
            baseline=True,
            benchmark={"concurrency": [1, 2], "max_tokens": MAX_TOKENS, "rounds": ROUNDS},
        )
    )
    document["engine"] = "toy"
    document["server"] = {"unit": UNIT_NAME, "model": MODEL, "knobs": KNOBS}
    return yaml.safe_dump(document, sort_keys=False)


async def toy_config(host: FaultHost) -> dict[str, Any]:
    async with (
        aiohttp.ClientSession() as http,
        http.get(host.base_url + server.CONFIG_PATH, timeout=aiohttp.ClientTimeout(5)) as reply,
    ):
        body: dict[str, Any] = await reply.json()
        return body


def throughput_points(trial: Mapping[str, Any]) -> dict[int, dict[str, Any]]:
    """A trial's throughput points by concurrency."""
    return {p["concurrency"]: p for p in trial["points"] if p["kind"] == "throughput"}


def pairs(argv: Sequence[str]) -> set[tuple[str, str]]:
    return set(itertools.pairwise(argv))


async def test_a_toy_engine_runs_a_whole_sweep(tmp_path: Path, toy: ToyEngine) -> None:
    async with fault_host(tmp_path, ADDRESS, unit=toy_unit(ADDRESS)) as host:
        assert (await toy_config(host))["draft_depth"] == 0  # the unit as found serves
        text = toy_sweep(host)
        sweep = parse_sweep(text, "toy-engine.yaml")
        result = await run_sweep_text(tmp_path, text, sweep=sweep)
        restored = await toy_config(host)
        assert host.unit_files() == host.unit_files_before
        assert await host.show(*STATE_PROPS) == host.state_before
        async with await Store.open(tmp_path / "orchestrator.db") as store:
            markdown = await render_report(store, [result.outcome.sweep_id], "md")
    assert result.outcome.state == "done", result.results

    # Preflight: the host's own toy parser was asked about every config's argv.
    (preflight,) = result.of_kind("preflight")
    checks = {c["name"]: c for c in preflight["checks"]}
    assert preflight["ok"] and preflight["parser"] == "toy", preflight
    assert "parsed 4 configs' argv" in checks["toy_parser"]["detail"], checks
    assert "--toy-metrics added" in checks["metrics"]["detail"], checks
    assert toy.calls["read_answers"] == 1

    # Every trial done, on the drop-in's toy flags, proven by the NEW process's /toy/config.
    trials = {name: result.trial(config) for name, config in [("baseline", {}), *CONFIGS_BY]}
    for name, trial in trials.items():
        assert trial["state"] == "done" and trial["cause"] is None, (name, trial)
        provenance = trial["evidence"]["provenance"]
        running = provenance["server_args"]  # what /toy/config said at readiness
        assert running["version"] == server.VERSION and running["metrics"] is True, running
        assert provenance["added_flags"] == ["--toy-metrics"]
        config = trial["config"]
        assert running["draft_depth"] == config.get("depth", 0), (name, running)
        assert running["kernel"] == config.get("kernel", "plain"), (name, running)
        # The new process's own argv (from /toy/config) is the drop-in's command line.
        assert provenance["launch_command"] == " ".join(provenance["exec_start"][3:])
        argv = pairs(provenance["exec_start"])
        for knob, flag in (("depth", "--toy-draft-depth"), ("kernel", "--toy-kernel")):
            if knob in config:
                assert (flag, str(config[knob])) in argv, (name, provenance["exec_start"])
            else:
                assert flag not in provenance["exec_start"], (name, provenance["exec_start"])
    restarts = len(trials) + 1  # and the restore's
    assert toy.calls["server_config"] >= restarts and toy.calls["probe_generation"] >= restarts
    assert toy.calls["chat.parse_final"] >= restarts  # each probe a real generation
    assert toy.calls["check_server_config"] >= len(trials)
    assert toy.calls["build_provenance"] >= len(trials) and toy.calls["log.ready"] >= restarts

    # The matrix, measured on the toy server: its speeds in the order it makes them.
    speeds: dict[int, dict[str, float]] = {1: {}, 2: {}}
    requests = 0
    for name, trial in trials.items():
        points = throughput_points(trial)
        assert sorted(points) == [1, 2] and point_count(trial) == 2, (name, trial["points"])
        for concurrency, point in points.items():
            metrics = point["metrics"]
            assert metrics["errors"] == 0, metrics
            assert metrics["requests_ok"] == ROUNDS * concurrency, metrics
            assert metrics["output_len_max"] == MAX_TOKENS, metrics
            assert metrics["prompt_tokens_tolerance"] == 0, metrics
            speeds[concurrency][name] = metrics["output_tok_s"]
            requests += metrics["requests"]
    # By design fused runs 2x depth 2 and 2.5x the rest (the server's docstring); the closer
    # pairs (depth 2 vs 4: 24 %, depth 4 vs baseline: 14 %) are within what a 2-core machine
    # under the whole suite's load does to 4 ms sleeps, so only the wide gap is asserted, with
    # room for that load (a loaded run measured fused at 1.46x depth 2).
    for concurrency, by_name in speeds.items():
        fused = by_name["fused"]
        assert all(fused >= 1.25 * v for n, v in by_name.items() if n != "fused"), (
            concurrency,
            by_name,
        )
    assert toy.calls["chat.parse_stream"] >= requests  # the bench read them in the toy's dialect

    # Accept length from the toy's own TOYSTAT lines (journal) and its own /metrics counters.
    expected = {"depth 2": 2.25, "depth 4": 2.5, "fused": 2.25}
    for name, trial in trials.items():
        for point in throughput_points(trial).values():
            accept = point["accept_len"]
            if name == "baseline":  # no speculation: TOYSTAT lines carry no mean_accept
                assert accept["accept_len"] is None and accept["accept_len_journal_lines"] == 0
                assert "toy_verify_steps_total" in accept["accept_len_metrics_reason"], accept
                continue
            assert accept["accept_len_journal"] == pytest.approx(expected[name]), (name, accept)
            assert accept["accept_len_journal_lines"] > 0
            assert accept["accept_len_metrics"] == pytest.approx(expected[name]), (name, accept)
            assert accept["accept_len"] == accept["accept_len_metrics"]
            assert accept["accept_len_flags"] == [], (name, accept)
    assert toy.calls["log.toystat"] > 0

    # The answer names the config the toy server makes fastest, at every cell.
    answers = answer_sweep(result.outcome.sweep_results, sweep)
    assert len(answers) == 2
    for answer in answers:
        assert answer.verdict == "better" and answer.best is not None, answer.to_json()
        assert answer.best.config == FUSED, answer.to_json()

    # The report renders it.
    assert "**Deploy depth=2 kernel=fused on fault-217" in markdown, markdown
    assert "### Throughput, context 60 tokens" in markdown
    assert "-m tests.toyengine.server" in markdown  # the provenance's ExecStart

    # The host as found again: the toy server with its own defaults, and nothing else left.
    assert restored["draft_depth"] == 0 and restored["metrics"] is False, restored
    with pytest.raises(OSError):
        socket.create_connection((ADDRESS, SERVER_PORT), timeout=1).close()


async def test_the_help_fallback_runs_the_program_as_the_unit_runs_it(
    tmp_path: Path, toy: ToyEngine
) -> None:
    """Where the engine's own parser cannot be asked, the preflight reads the program's
    ``--help``. Here the unit runs the toy server through a module found only on the unit's
    ``Environment=PYTHONPATH`` (so the toy's parser, which knows only its own module, is not
    asked): run bare, ``--help`` fails with ModuleNotFoundError and a healthy host is set
    aside; run as the unit runs it, it answers and the sweep's flags are found."""
    hidden = tmp_path / "hidden"
    hidden.mkdir()
    (hidden / "toylaunch.py").write_text(
        "import runpy\nrunpy.run_module('tests.toyengine.server', run_name='__main__')\n"
    )
    unit = toy_unit(HELP_ADDRESS).replace("tests.toyengine.server", "toylaunch")
    unit = unit.replace(f"PYTHONPATH={REPO}", f"PYTHONPATH={hidden}")
    async with fault_host(tmp_path, HELP_ADDRESS, unit=unit) as host:
        sweep = parse_sweep(toy_sweep(host), "toy-help.yaml")
        (found,) = await check.check_sweep_hosts(sweep)
    checks = {c.name: c for c in found.checks}
    assert found.reason is None and found.parser == "help", found
    assert checks["toy_help"].ok and "not used" in checks["toy_parser"].detail, checks
    assert found.unknown_flags == frozenset() and found.ok, found


def run_server(*flags: str) -> subprocess.CompletedProcess[str]:
    """The toy server's command line run for real, as the unit would run it."""
    argv = [sys.executable, "-m", "tests.toyengine.server", *flags]
    return subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=30)


def test_the_toy_engine_reads_its_servers_own_lines() -> None:
    toy = ToyEngine()
    shown = run_server("--help")
    assert shown.returncode == 0
    for flag in ("--toy-draft-depth", "--toy-kernel", "--toy-metrics"):
        assert flag in shown.stdout, shown.stdout
    unknown = run_server("--toy-port", "1", "--speculative-algorithm", "NGRAM")
    assert unknown.returncode == 2
    event = toy.parse_log_line(unknown.stderr.splitlines()[-1])
    assert isinstance(event, FailureEvent) and event.cause == "bad-flag", unknown.stderr
    refused = run_server("--toy-port", "1", "--toy-kernel", "fused")
    assert refused.returncode == 1
    event = toy.parse_log_line(refused.stderr.splitlines()[-1])
    assert isinstance(event, FailureEvent) and event.cause == "invalid-config", refused.stderr

    assert isinstance(toy.parse_log_line(f"{server.READY_LINE} model=m"), ReadyEvent)
    stat = toy.parse_log_line("TOYSTAT steps=4 accepted=5 drafted=8 mean_accept=2.2500 running=2")
    assert isinstance(stat, DecodeEvent) and stat.accept_len == 2.25 and stat.running_req == 2
    assert stat.accept_rate == pytest.approx(5 / 8)
    off = toy.parse_log_line("TOYSTAT steps=4 accepted=0 drafted=0 running=1")
    assert isinstance(off, DecodeEvent) and off.accept_len is None
    assert toy.parse_log_line("Decode batch, #running-req: 1, accept len: 3.00") is None


def test_the_toy_parser_answers_for_each_argv() -> None:
    """The preflight's question to the host's own toy parser, asked here with this checkout's
    interpreter: one verdict per argv, argparse's and the resolution's refusals told apart."""
    toy = ToyEngine()
    argvs = [
        ["--toy-port", "1", "--toy-draft-depth", "2"],
        ["--toy-port", "1", "--toy-draft-dept", "2"],
        ["--toy-port", "1", "--toy-kernel", "fused"],
        ["--toy-port", "1", "--toy-draft-depth", "9"],
    ]
    command = toy.batch_command([sys.executable], argvs)
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=30)
    verdicts = toy.read_answers(done.stdout, done.stderr, len(argvs))
    assert isinstance(verdicts, list), verdicts
    ok, unknown, unresolved, bad_value = verdicts
    assert ok.ok is True and ok.speculative == {"draft_depth": 2, "kernel": "plain"}
    assert unknown.cause == "bad-flag" and unknown.unknown_flags == ("--toy-draft-dept",)
    assert unresolved.cause == "invalid-config" and "fused" in (unresolved.error or "")
    assert bad_value.cause == "bad-flag" and bad_value.unknown_flags == ()
    assert {v.parser for v in verdicts} == {"toy"}
