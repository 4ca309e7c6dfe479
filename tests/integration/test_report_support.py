"""What the report tests share: a store filled exactly as the runner fills it, and Chromium.

The sweep is built from the real classes the runner writes with: request records go through
``bench.closedloop.closed_metrics`` (so metrics and quality flags are computed, not typed in),
accept_len through ``bench.acceptlen``, and the points are the store's own types, made as the
bench makes them (``stored_request``, ``with_journal``, ``CodingPoint``, ``Server.evidence``).
Numbers come from the simulator's performance model, so throughput peaks at an interior budget
like a real sweep. Faults are injected at the request level: failed requests, truncated
outputs, a client that falls short of the concurrency, accept_len sources that disagree, a
config that fails at startup, outputs that drift from the baseline.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import random
import shutil
import socket
import subprocess
import time
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

from orchestrator.bench import acceptlen
from orchestrator.bench.client import Chunk, ErrorKind, RequestRecord, TokenSource
from orchestrator.bench.closedloop import closed_metrics
from orchestrator.bench.coding import Outcome
from orchestrator.bench.point import (
    MeasuredRequests,
    PointSpec,
    QualityThresholds,
    calibration_json,
    stored_request,
    with_journal,
)
from orchestrator.bench.prompts import Calibration
from orchestrator.engines.base import ProvenanceSources
from orchestrator.engines.sglang.engine import ConfigDifference, build_provenance
from orchestrator.evidence import Timeline
from orchestrator.host.gpu import GpuIdentity
from orchestrator.lifecycle import Server, TrialFailed
from orchestrator.points import CodingPoint, PointProvenance, ThroughputPoint
from orchestrator.sim import perfmodel
from orchestrator.store import AcceptEstimate, HostEntry, MatrixCell, NewTrial, Store, TrialPlan
from tests.sysdeps import apt_install

MAX_TOKENS = 128
PROBLEMS = ("is_palindrome", "fib", "merge_sorted", "word_count", "gcd")
EXEC_START = (
    "/usr/bin/python3",
    "-m",
    "sglang.launch_server",
    "--model-path",
    "/models/Kimi-K2.6",
    "--tp-size",
    "8",
    "--port",
    "30000",
)


@dataclass(frozen=True)
class PointFault:
    """What goes wrong at one (context, concurrency) point of one config."""

    errors: int = 0
    truncated: int = 0
    client_gap_s: float = 0.0
    journal_factor: float = 1.0


@dataclass(frozen=True)
class ConfigSpec:
    """One config of the fixture sweep and what happens to it."""

    config: dict[str, Any]
    fail: TrialFailed | None = None
    faults: dict[tuple[int, int], PointFault] = field(default_factory=dict)
    drift: tuple[str, ...] = ()
    coding_truncated: tuple[str, ...] = ()
    coding_fail: tuple[str, ...] = ()
    overridden: tuple[ConfigDifference, ...] = ()

    @property
    def is_baseline(self) -> bool:
        return not self.config


@dataclass(frozen=True)
class SweepSpec:
    name: str
    hosts: tuple[tuple[str, str], ...]
    configs: tuple[ConfigSpec, ...]
    contexts: tuple[int, ...] = (60, 1024, 4096)
    concurrency: tuple[int, ...] = (1, 4, 16)
    rounds: int = 6
    perf_scale: float = 1.0
    gpu_name: str = "NVIDIA H200"
    sglang_version: str = "0.5.23"


def _shape(config: dict[str, Any]) -> perfmodel.SpecShape:
    if not config:
        return perfmodel.BASELINE
    budget = int(config.get("budget", 8))
    return perfmodel.SpecShape(
        kind=perfmodel.SpecKind.TREE,
        algorithm=str(config.get("algorithm", "DDTREE")),
        verify_width=budget + 1,
        max_depth=16,
        topk=int(config.get("topk", 4)),
        window=config.get("window"),
        draft_steps=1,
    )


def _records(
    rng: random.Random,
    spec: PointSpec,
    config: dict[str, Any],
    fault: PointFault,
    scale: float,
) -> tuple[list[RequestRecord], list[int], float]:
    """A closed loop of ``spec.concurrency`` workers, timed with the performance model."""
    params = perfmodel.PerfParams()
    shape = _shape(config)
    per_request = perfmodel.steady_throughput(shape, spec.context, spec.concurrency, params)
    per_request *= scale
    accept = perfmodel.expected_accept_len(shape, spec.context, params)
    prefill_s = perfmodel.prefill_time_ms(spec.context * spec.concurrency, params) / 1000.0
    records: list[RequestRecord] = []
    workers: list[int] = []
    errors_left, truncated_left = fault.errors, fault.truncated
    for worker in range(spec.concurrency):
        clock = 1000.0 + rng.uniform(0, 0.002)
        for round_ in range(spec.rounds):
            send = clock
            ttft = prefill_s * rng.uniform(0.6, 1.5) + 0.004
            if errors_left and round_ == spec.rounds - 1:
                errors_left -= 1
                end = send + ttft + 1.0
                records.append(
                    RequestRecord(
                        label=f"measured-{spec.context}-{spec.concurrency}-{len(records)}",
                        phase="measured",
                        api="chat",
                        max_tokens=spec.max_tokens,
                        ignore_eos=spec.ignore_eos,
                        send_time=send,
                        end_time=end,
                        chunks=[],
                        token_source=TokenSource.USAGE_PER_CHUNK,
                        error=ErrorKind.TIMEOUT,
                        error_detail="no complete answer within 120 s",
                    )
                )
                workers.append(worker)
                clock = end + fault.client_gap_s
                continue
            tokens = spec.max_tokens
            finish = "length"
            if truncated_left and round_ == 0:
                truncated_left -= 1
            elif not spec.ignore_eos:
                tokens = spec.max_tokens - rng.randint(1, 20)
                finish = "stop"
            chunks = [Chunk(send + ttft, 1)]
            arrival, emitted, steps = send + ttft, 1, 0
            while emitted < tokens:
                step = max(1, min(tokens - emitted, round(rng.gauss(accept, 0.6))))
                arrival += step / per_request * rng.uniform(0.85, 1.15)
                emitted += step
                steps += 1
                chunks.append(Chunk(arrival, step))
            records.append(
                RequestRecord(
                    label=f"measured-{spec.context}-{spec.concurrency}-{len(records)}",
                    phase="measured",
                    api="chat",
                    max_tokens=spec.max_tokens,
                    ignore_eos=spec.ignore_eos,
                    send_time=send,
                    end_time=arrival + 0.001,
                    chunks=chunks,
                    token_source=TokenSource.USAGE_PER_CHUNK,
                    prompt_tokens=spec.context,
                    completion_tokens=tokens,
                    finish_reason=finish,
                    spec_verify_ct=steps if config else None,
                    http_status=200,
                )
            )
            workers.append(worker)
            clock = arrival + 0.002 + fault.client_gap_s
    return records, workers, accept


def point_result(
    rng: random.Random,
    context: int,
    concurrency: int,
    config: dict[str, Any],
    *,
    rounds: int,
    fault: PointFault,
    scale: float = 1.0,
) -> ThroughputPoint:
    """One point as a served server records it (``bench.measure.measure_point``'s point,
    journal accept_len and provenance attached)."""
    spec = PointSpec(
        context=context,
        concurrency=concurrency,
        rounds=rounds,
        warmup_requests=1,
        max_tokens=MAX_TOKENS,
        ignore_eos=fault.truncated == 0,
    )
    records, workers, accept = _records(rng, spec, config, fault, scale)
    wall = max(r.end_time or 0.0 for r in records) - min(r.send_time for r in records)
    metrics, flags = closed_metrics(
        MeasuredRequests(
            records,
            spec,
            QualityThresholds(),
            cpu_seconds=0.05 * wall,
            loop_lag_samples=[0.0004, 0.0007, 0.0011],
        ),
        workers,
    )
    ok = [r for r in records if r.ok]
    metrics_estimate = (
        AcceptEstimate(accept * rng.uniform(0.99, 1.01), 40 * concurrency)
        if config
        else AcceptEstimate(None, 0, "no verify call during the point (counters reset or flat)")
    )
    calibration = Calibration(
        base_url="http://127.0.0.1:30000",
        model="kimi-k2.6",
        api="chat",
        target_tokens=context,
        filler_words=context,
        measured_tokens=context,
        requests=2,
    )
    started = time.time()
    point = ThroughputPoint(
        context=context,
        concurrency=concurrency,
        metrics=dataclasses.replace(metrics, calibration=calibration_json(calibration)),
        accept=acceptlen.combine(
            acceptlen.from_journal(None),
            acceptlen.from_meta_info(
                acceptlen.RequestSpec(r.completion_tokens or 0, r.spec_verify_ct) for r in ok
            ),
            metrics_estimate,
        ),
        quality=flags,
        provenance=PointProvenance(
            invocation_id="inv-" + str(abs(hash(json.dumps(config, sort_keys=True))))[:10],
            cursor_start="s=0;i=1",
            cursor_end="s=0;i=9",
            started_at=started,
            finished_at=started + wall,
        ),
        requests=tuple(stored_request(r) for r in records),
    )
    samples = (
        [
            acceptlen.DecodeSample(accept * fault.journal_factor * rng.uniform(0.98, 1.02), 40, c)
            for c in range(1, 4)
        ]
        if config
        else []
    )
    return with_journal(point, samples)


def _coding_points(rng: random.Random, spec: ConfigSpec, invocation_id: str) -> list[CodingPoint]:
    points: list[CodingPoint] = []
    for problem in PROBLEMS:
        reasoning = f"<think>Plan for {problem}: handle the edge cases first.</think>\n"
        content = f"```python\ndef {problem}(*args):\n    return solve(*args)\n```\n"
        if problem in spec.drift:
            content = content.replace("solve", "solve_differently")
        outcome = Outcome.PASS
        finish = "stop"
        if problem in spec.coding_truncated:
            outcome, finish, content = Outcome.TRUNCATED, "length", ""
        elif problem in spec.coding_fail:
            outcome = Outcome.FAIL
        tokens, elapsed = 180 + rng.randint(0, 40), 2.0 + rng.random()
        now = time.time()
        points.append(
            CodingPoint(
                problem=problem,
                outcome=outcome,
                detail="" if outcome is Outcome.PASS else f"{outcome.value}: assert failed",
                code=None if outcome is Outcome.TRUNCATED else content.strip("`\npython"),
                output=reasoning + content,
                finish_reason=finish,
                completion_tokens=tokens,
                elapsed_s=elapsed,
                tokens_per_s=tokens / elapsed,
                provenance=PointProvenance(
                    invocation_id=invocation_id, started_at=now - elapsed, finished_at=now
                ),
            )
        )
    return points


def _server(spec: SweepSpec, config: ConfigSpec, host: str, begin: float) -> Server:
    argv = list(EXEC_START) + [
        part
        for name, value in sorted(config.config.items())
        for part in (f"--speculative-{name.replace('_', '-')}", str(value))
        if name != "topk"
    ]
    environment = {"SGLANG_DDTREE_MAX_TOPK": str(config.config["topk"])} if config.config else {}
    info = {
        "version": spec.sglang_version,
        "model_path": "/models/Kimi-K2.6",
        "tp_size": 8,
        "speculative_algorithm": config.config.get("algorithm"),
        "launch_command": " ".join(argv),
    }
    return Server(
        base_url=f"http://{host}:30000",
        api="chat",
        model="kimi-k2.6",
        invocation_id=f"inv-{host}-{begin:.0f}",
        main_pid=4242,
        start_cursor=None,
        timeline=Timeline(
            {
                "begin": begin,
                "dropin_installed": begin + 0.05,
                "stop_requested": begin + 0.1,
                "stopped": begin + 3.4,
                "memory_released": begin + 9.1,
                "start_requested": begin + 9.2,
                "started": begin + 9.3,
                "ready": begin + 71.8 + (12.0 if config.config else 0.0),
            }
        ),
        overridden=config.overridden,
        server_info=info,
        provenance=build_provenance(
            ProvenanceSources(
                info,
                gpus=[GpuIdentity(spec.gpu_name, "570.86.15")] * 8,
                exec_start=argv,
                environment=environment,
            )
        ),
    )


async def fill_sweep(store: Store, spec: SweepSpec, *, seed: int = 7) -> int:
    """Write ``spec`` into ``store`` the way ``runner.run_sweep`` does; returns the sweep id."""
    rng = random.Random(seed)
    yaml_text = (
        f"name: {spec.name}\nserver:\n  model: kimi-k2.6\nbenchmark:\n"
        f"  contexts: {list(spec.contexts)}\n  concurrency: {list(spec.concurrency)}\n"
        f"  rounds: {spec.rounds}\n  max_tokens: {MAX_TOKENS}\n"
        "coding:\n  problems: builtin\n  temperature: 0.0\n"
    )
    submitted = await store.submit_sweep(spec.name, yaml_text)
    sweep_id = submitted.sweep.id
    await store.add_hosts(sweep_id, [HostEntry(name, kind) for name, kind in spec.hosts])
    plan = TrialPlan(
        cells=tuple(MatrixCell(ctx, conc) for ctx in spec.contexts for conc in spec.concurrency),
        rounds=spec.rounds,
        problems=tuple(PROBLEMS),
        coding_temperature=0.0,
        model="kimi-k2.6",
    )
    new_trials = [
        NewTrial(
            key=f"{host}.{index}",
            host=host,
            config=config.config,
            ordinal=index * len(spec.hosts) + h,
            is_baseline=config.is_baseline,
            plan=plan,
        )
        for index, config in enumerate(spec.configs)
        for h, (host, _) in enumerate(spec.hosts)
    ]
    trials = await store.add_trials(sweep_id, new_trials)
    await store.set_sweep_state(sweep_id, "running")
    await store.add_event(sweep_id, "sweep.started", fields={"trials": len(trials)})
    by_key = {(t.key, t.host): t for t in trials}
    for index, config in enumerate(spec.configs):
        for host, _ in spec.hosts:
            trial = by_key[(f"{host}.{index}", host)]
            attempt = await store.start_attempt(trial.id)
            await store.add_event(
                sweep_id, "dropin.installed", host=host, fields={"trial": trial.key}
            )
            await store.add_event(sweep_id, "unit.stopped", host=host, fields={"waited_s": 3.3})
            await store.add_event(sweep_id, "memory.released", host=host, fields={"waited_s": 5.7})
            await store.add_event(
                sweep_id, "unit.started", host=host, fields={"invocation": "x", "main_pid": 1}
            )
            if config.fail is not None:
                await store.add_event(
                    sweep_id,
                    "server.exited",
                    host=host,
                    fields={"cause": config.fail.cause, "exit_status": config.fail.exit_status},
                )
                await store.finish_attempt(
                    attempt.id, "failed", cause=config.fail.cause, evidence=config.fail.to_json()
                )
                await store.add_event(
                    sweep_id,
                    "trial.failed",
                    host=host,
                    fields={"trial": trial.key, "attempt": 1, "cause": config.fail.cause},
                )
                continue
            server = _server(spec, config, host, time.time() - 80.0)
            await store.add_event(
                sweep_id,
                "server.ready",
                host=host,
                fields={"invocation": server.invocation_id, "load_s": 62.5, "overridden": []},
            )
            await store.set_attempt_invocation(attempt.id, server.invocation_id)
            for context in spec.contexts:
                for concurrency in spec.concurrency:
                    fault = config.faults.get((context, concurrency), PointFault())
                    point = point_result(
                        rng,
                        context,
                        concurrency,
                        config.config,
                        rounds=spec.rounds,
                        fault=fault,
                        scale=spec.perf_scale,
                    )
                    await store.record_point(attempt.id, point, point.requests)
            for coding in _coding_points(rng, config, server.invocation_id):
                await store.record_point(attempt.id, coding, [])
            evidence = server.evidence().to_json()
            await store.finish_attempt(attempt.id, "done", evidence=evidence)
    await store.set_sweep_state(sweep_id, "done", summary={"stopped": None, "failed_attempts": 0})
    await store.add_event(sweep_id, "sweep.finished", fields={"state": "done"})
    return sweep_id


def ddtree(budget: int, **extra: Any) -> dict[str, Any]:
    return {"algorithm": "DDTREE", "budget": budget, "topk": 4, "window": 2048, **extra}


def demo_like_spec(
    name: str = "nightly-ddtree",
    *,
    hosts: Sequence[tuple[str, str]] = (("gpu-a", "h200-nvlink"),),
    perf_scale: float = 1.0,
) -> SweepSpec:
    """The demo's shape: a baseline, a budget sweep with an interior optimum, a config that
    fails on a flag the build does not know, one SGLang rejects, and points with faults."""
    return SweepSpec(
        name=name,
        hosts=tuple(hosts),
        perf_scale=perf_scale,
        configs=(
            ConfigSpec({}),
            ConfigSpec(ddtree(4)),
            ConfigSpec(
                ddtree(8),
                faults={(1024, 16): PointFault(journal_factor=1.25)},
                overridden=(
                    ConfigDifference(
                        "window", "server_info", 2048, 1024, "clamped to the drafter's maximum"
                    ),
                ),
            ),
            ConfigSpec(ddtree(12), faults={(4096, 4): PointFault(client_gap_s=0.4)}),
            ConfigSpec(
                ddtree(16),
                faults={(4096, 16): PointFault(errors=12, truncated=3)},
                drift=("merge_sorted",),
                coding_truncated=("word_count",),
                coding_fail=("gcd",),
            ),
            ConfigSpec(
                {"algorithm": "DDTREE", "budget": 8, "topk": 4, "legacy_window": 2048},
                fail=TrialFailed(
                    "bad-flag",
                    "the server rejected a flag at startup",
                    excerpt=[
                        "usage: launch_server.py [-h] --model-path MODEL_PATH ...",
                        "launch_server.py: error: unrecognized arguments: "
                        "--speculative-dflash-draft-window-size 2048",
                    ],
                    exit_status=2,
                    invocation_id="inv-bad",
                ),
            ),
            ConfigSpec(
                {"algorithm": "DFLASH", "block_size": 16, "window": 8},
                fail=TrialFailed(
                    "invalid-config",
                    "SGLang refused the config",
                    excerpt=[
                        "[2026-11-30 02:14:07] Traceback (most recent call last):",
                        '  File "sglang/srt/server_args.py", line 1841, in check_server_args',
                        "ValueError: speculative_draft_window_size (8) must be >= "
                        "speculative_num_draft_tokens (16)",
                    ],
                    exit_status=1,
                    invocation_id="inv-invalid",
                ),
            ),
        ),
    )


# --- Chromium ------------------------------------------------------------------------------

CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
)


def chromium_binary() -> str:
    """Debian's ``chromium``, installed with apt-get when missing (CI starts bare)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found:
        return found
    apt_install("chromium")
    found = shutil.which("chromium")
    if not found:
        raise RuntimeError("apt-get installed chromium but it is not on PATH")
    return found


def screenshot(
    binary: str, html: Path, png: Path, profile: Path, *, width: int = 1400, height: int = 2000
) -> subprocess.CompletedProcess[str]:
    """One headless screenshot of a local file."""
    return subprocess.run(
        [
            binary,
            *CHROMIUM_FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "--hide-scrollbars",
            f"--screenshot={png}",
            html.as_uri(),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@dataclass
class PageCheck:
    """What the page said to the DevTools protocol: console errors and SVG facts."""

    console_errors: list[str]
    exceptions: list[str]
    failed_requests: list[str]
    svg_count: int
    empty_svgs: int
    title: str
    failed_marks: int
    flagged_marks: int
    failed_cells: int
    probe: Any = None
    """What the caller's ``probe`` expression returned (a JSON string, decoded)."""


async def inspect_page(
    binary: str,
    html: Path,
    profile: Path,
    *,
    timeout_s: float = 60.0,
    probe: str | None = None,
    shot: Path | None = None,
) -> PageCheck:
    """Load ``html`` in headless Chromium under the DevTools protocol and report what the page
    logged (console errors, uncaught exceptions, failed loads) and how many SVGs drew marks;
    ``probe`` (a JavaScript expression giving a JSON string) is evaluated after them, and
    ``shot`` receives a PNG of the viewport as the probe left it: one launch for all."""
    async with devtools_page(binary, profile, timeout_s=timeout_s) as page:
        async with asyncio.timeout(timeout_s):
            await page.load(html.as_uri())
            return await _check(page, probe, shot)


@contextlib.asynccontextmanager
async def devtools_page(
    binary: str, profile: Path, *, timeout_s: float = 60.0, window: str = "1300,1000"
) -> AsyncIterator[PageSession]:
    """Headless Chromium under the DevTools protocol, as its one page's session (what the
    page logs is collected as it comes); the browser is stopped, by its pid, on the way out.
    ``timeout_s`` bounds the wait for the browser to listen."""
    port = _free_port()
    process = await asyncio.create_subprocess_exec(
        binary,
        *CHROMIUM_FLAGS,
        f"--user-data-dir={profile}",
        f"--window-size={window}",
        "--remote-debugging-address=127.0.0.1",
        f"--remote-debugging-port={port}",
        "about:blank",
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with aiohttp.ClientSession() as http:
            async with asyncio.timeout(timeout_s):
                url = await _page_socket(http, port)
            async with http.ws_connect(url, max_msg_size=0) as ws:
                yield PageSession(ws)
    finally:
        process.terminate()
        try:
            await asyncio.wait_for(process.wait(), 10)
        except TimeoutError:
            process.kill()
            await process.wait()


class PageSession:
    """One page's DevTools connection: commands by id, and what the page logs meanwhile."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.next_id = 0
        self.console: list[str] = []
        self.exceptions: list[str] = []
        self.failed: list[str] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        mine = self.next_id
        await self.ws.send_json({"id": mine, "method": method, "params": params})
        while True:
            message = await self.ws.receive_json()
            if message.get("id") == mine:
                return dict(message.get("result", {}))
            self.collect(message)

    def collect(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.consoleAPICalled" and params.get("type") in ("error", "assert"):
            self.console.append(json.dumps(params.get("args")))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.console.append(params["entry"].get("text", ""))
        elif method == "Runtime.exceptionThrown":
            self.exceptions.append(json.dumps(params.get("exceptionDetails")))
        elif method == "Network.loadingFailed":
            self.failed.append(json.dumps(params))

    async def load(self, url: str) -> None:
        """Navigate to ``url`` and wait for its load event."""
        for domain in ("Runtime", "Log", "Network", "Page"):
            await self.call(f"{domain}.enable")
        await self.call("Page.navigate", url=url)
        while True:
            message = await self.ws.receive_json()
            self.collect(message)
            if message.get("method") == "Page.loadEventFired":
                return

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return json.loads(result["result"]["value"])

    async def screenshot(self, png: Path) -> None:
        """The viewport as it is now."""
        picture = await self.call("Page.captureScreenshot", format="png")
        png.write_bytes(base64.b64decode(picture["data"]))


_FACTS = (
    "JSON.stringify({svgs: document.querySelectorAll('svg').length, "
    "empty: [...document.querySelectorAll('svg')].filter(s => "
    "s.querySelectorAll('path,circle,rect,line,polyline,text').length === 0 "
    "|| s.getBoundingClientRect().width === 0).length, title: document.title, "
    "failedMarks: document.querySelectorAll('svg .mark.failed').length, "
    "flaggedMarks: document.querySelectorAll('svg .mark.flagged').length, "
    "failedCells: document.querySelectorAll('td.failed').length})"
)


async def _page_socket(http: aiohttp.ClientSession, port: int) -> str:
    """The DevTools websocket of the browser's page, once it listens."""
    while True:
        try:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as response:
                targets = [t for t in await response.json() if t.get("type") == "page"]
        except aiohttp.ClientError:
            targets = []
        if targets:
            return str(targets[0]["webSocketDebuggerUrl"])
        await asyncio.sleep(0.2)


async def _check(page: PageSession, probe: str | None, shot: Path | None) -> PageCheck:
    facts = await page.evaluate(_FACTS)
    probed = await page.evaluate(probe) if probe is not None else None
    if shot is not None:
        await page.screenshot(shot)
    return PageCheck(
        console_errors=page.console,
        exceptions=page.exceptions,
        failed_requests=page.failed,
        svg_count=int(facts["svgs"]),
        empty_svgs=int(facts["empty"]),
        title=str(facts["title"]),
        failed_marks=int(facts["failedMarks"]),
        flagged_marks=int(facts["flaggedMarks"]),
        failed_cells=int(facts["failedCells"]),
        probe=probed,
    )
