"""Entry point: ``python -m orchestrator.sim.sglang_server [SGLang flags]``.

Lifecycle, as a real SGLang server goes through it: parse flags (strict; exit 2) -> resolve
(ValueError traceback; exit 1) -> register GPU memory -> load weights, allocate the KV cache,
capture graphs (nothing listens on the HTTP port yet) -> the scheduler runs -> bind HTTP, as
uvicorn does only after the scheduler processes are ready (a taken port fails here, after the
load: ``[Errno 98]``, exit 1) -> ``/v1/models`` answers, ``/health`` 503 -> own warm-up
``/generate`` -> ready line -> serve. SIGTERM: keep serving ``stop_delay_s``, then exit 0.
Faults from the settings file (ORCH_SIM_CONFIG) bend this path; see docs/simulator.md.
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import signal
import sys
from collections.abc import Mapping, Sequence

import h11

from orchestrator.sim import server_faults
from orchestrator.sim.drafting import AdaptiveSteps, DraftPolicy
from orchestrator.sim.http_server import HttpServer
from orchestrator.sim.perfmodel import restart_speed_factor
from orchestrator.sim.server_args import (
    DFLASH_FAMILY,
    ServerArgs,
    build_parser,
    resolve,
    server_args_repr,
)
from orchestrator.sim.server_engine import Scheduler
from orchestrator.sim.server_gpu import gpu_indices, register_gpu_memory
from orchestrator.sim.server_http import WARMUP_HEADER, Phase, ServerState, SimServerApp
from orchestrator.sim.server_log import (
    READY_LINE,
    RankLayout,
    SglangLog,
    ddtree_init_line,
    dflash_init_line,
)
from orchestrator.sim.server_process import exit_after, listen, log_uvicorn_startup
from orchestrator.sim.settings import ServerSimSettings

WARMUP_PROMPT = "The capital city of France is"
WARMUP_TIMEOUT_S = 600.0


def _log_ms(environ: Mapping[str, str]) -> bool:
    return environ.get("SGLANG_LOG_MS", "") == "1"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    settings = ServerSimSettings.from_env()
    parser = build_parser(settings.sglang_version, settings.ddtree)
    ns = parser.parse_args(argv)  # exits 2 on an unknown flag, like SGLang
    early_log = SglangLog(ms=_log_ms(os.environ))
    try:
        args = resolve(ns, argv, version=settings.sglang_version, ddtree=settings.ddtree,
                       environ=os.environ)
    except (ValueError, AssertionError, AttributeError, OSError) as exc:
        server_faults.log_startup_exception(early_log, exc)
        return 1
    layout = RankLayout.from_args(args.values, os.environ)
    log = SglangLog(ms=_log_ms(os.environ), layout=layout)
    if args.deprecated_window_flag:
        log.main("--speculative-dflash-draft-window-size is deprecated; use "
                 "--speculative-draft-window-size instead.")
    log.main(server_args_repr(args))
    for warning in args.warnings:
        log.main(warning)

    crash = settings.faults.crash_at_start.active(argv)
    gpus = gpu_indices(layout.world_size, settings.gpu_count,
                       os.environ.get("CUDA_VISIBLE_DEVICES"))
    linger = settings.faults.leftover_child_s.active(argv)
    if linger is not None:
        server_faults.fork_leftover_child(settings, gpus, float(linger))
    elif settings.gpu_state_dir:
        register_gpu_memory(settings.gpu_state_dir, os.getpid(), gpus,
                            settings.weights_mib_per_gpu)

    launch = shlex.join([sys.executable, "-m", "orchestrator.sim.sglang_server", *argv])
    state = ServerState(args=args, settings=settings, argv=tuple(argv), launch_command=launch,
                        log=log)
    try:
        return asyncio.run(_serve(state, crash))
    except KeyboardInterrupt:
        return 0


class _Http:
    """The HTTP server, started only once the scheduler is up (as uvicorn is)."""

    def __init__(self, state: ServerState) -> None:
        self.state = state
        self.server: HttpServer | None = None

    async def start(self, crash: str | None) -> int | None:
        """Bind and serve; an exit code when the port is taken (or the fault says so)."""
        state = self.state
        log = state.log
        args = state.args
        host, port = str(args.get("host")), int(args.get("port"))
        log_uvicorn_startup(log.write_raw)
        sock = listen(host, port, log.write_raw, taken=crash == "port-in-use")
        if sock is None:
            log.write_raw("INFO:     Waiting for application shutdown.")
            log.write_raw("INFO:     Application shutdown complete.")
            return 1
        app = SimServerApp(state)
        self.server = HttpServer(app.router().dispatch, on_answer=app.access_log)
        await self.server.start(sock)
        log.write_raw(f"INFO:     Uvicorn running on http://{host}:{port} (Press CTRL+C to quit)")
        return None

    async def close(self) -> None:
        if self.server is not None:
            await self.server.close()


async def _serve(state: ServerState, crash: str | None) -> int:
    settings = state.settings
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    ignore_term = bool(settings.faults.ignore_sigterm.active(state.argv))

    def on_term() -> None:
        if ignore_term:
            return
        if not stop.is_set():
            stop.set()

    loop.add_signal_handler(signal.SIGTERM, on_term)
    loop.add_signal_handler(signal.SIGINT, on_term)

    http = _Http(state)
    lifecycle = asyncio.create_task(_start_up(state, crash, http))
    stop_wait = asyncio.create_task(stop.wait())
    done, _ = await asyncio.wait({lifecycle, stop_wait}, return_when=asyncio.FIRST_COMPLETED)
    if lifecycle in done:
        error = lifecycle.exception()
        if error is not None:
            server_faults.log_startup_exception(state.log, error)
            return 1
        code = lifecycle.result()
        if code is not None:
            return code
        await stop.wait()
    # The stop phase: SIGTERM received, keep answering for a while like a real server does.
    await asyncio.sleep(settings.scaled(settings.stop_delay_s))
    lifecycle.cancel()
    await http.close()
    return 0


async def _start_up(state: ServerState, crash: str | None, http: _Http) -> int | None:
    """Load, start the scheduler, bind HTTP, warm up, announce readiness. Returns an exit code
    on a startup crash, or None once ready (the scheduler keeps running in the background)."""
    log = state.log
    settings = state.settings
    args = state.args
    load_s = settings.scaled(settings.effective_load_s(state.argv))
    log.all_ranks(f"Load weight begin. avail mem={settings.gpu_total_mib / 1024:.2f} GB")
    if crash == "oom":
        await asyncio.sleep(load_s * 0.3)
        server_faults.log_cuda_oom(log, settings)
        return 1
    if crash == "exited":
        await asyncio.sleep(load_s * 0.3)
        server_faults.log_scheduler_died(log)
        return 1
    await asyncio.sleep(load_s)
    weight_gb = settings.weights_mib_per_gpu / 1024
    log.all_ranks(
        f"Load weight end. type=SimForCausalLM, dtype=torch.bfloat16, "
        f"avail mem={(settings.gpu_total_mib - settings.weights_mib_per_gpu) / 1024:.2f} GB, "
        f"mem usage={weight_gb:.2f} GB."
    )
    log.all_ranks(f"KV Cache is allocated. #tokens: {settings.max_total_tokens}")
    if args.shape.algorithm in DFLASH_FAMILY:
        block = int(args.get("speculative_num_draft_tokens"))
        log.tp0(dflash_init_line(model=str(args.get("speculative_draft_model_path")),
                                 block_size=block, window=args.shape.window))
        if args.shape.algorithm == "DDTREE":
            log.tp0(ddtree_init_line(block_size=block,
                                     tree_budget=int(args.get("speculative_ddtree_budget"))))
    draft = args.drafting.policy()
    if isinstance(draft, AdaptiveSteps):
        log.tp0(draft.init_line())
    log.rank(
        f"max_total_num_tokens={settings.max_total_tokens}, "
        f"chunked_prefill_size={args.get('chunked_prefill_size') or 8192}, "
        f"max_prefill_tokens=16384, max_running_requests={args.get('max_running_requests')}, "
        f"context_len={args.get('context_length') or 262144}"
    )
    scheduler = _make_scheduler(state, draft)
    state.scheduler = scheduler
    state.phase = Phase.WARMING
    loop_task = asyncio.create_task(scheduler.run())
    state.background.add(loop_task)
    code = await http.start(crash)
    if code is not None:
        return code
    await asyncio.sleep(settings.scaled(settings.warmup_s))
    if not args.get("skip_server_warmup"):
        error = await _warm_up(args)
        if error is not None:
            log.main(f"Initialization failed. warmup error: {error}")
            return 1
    state.phase = Phase.READY
    log.main(READY_LINE)
    return None


def _make_scheduler(state: ServerState, draft: DraftPolicy) -> Scheduler:
    settings = state.settings
    args = state.args
    crash_after = settings.faults.crash_after_requests.active(state.argv)

    def on_completed(count: int) -> None:
        if crash_after is not None and count >= crash_after:
            asyncio.get_running_loop().call_later(
                0.05, server_faults.crash_scheduler, state.log
            )

    return Scheduler(
        shape=args.shape,
        perf=settings.perf,
        time_scale=settings.time_scale,
        seed=settings.seed if args.get("random_seed") is None else int(args.get("random_seed")),
        max_running=int(args.get("max_running_requests")),
        max_total_tokens=settings.max_total_tokens,
        decode_log_interval=int(args.get("decode_log_interval")),
        radix_cache=not args.get("disable_radix_cache"),
        log=state.log,
        on_completed=on_completed,
        speed_factor=restart_speed_factor(
            settings.seed, os.environ.get("INVOCATION_ID", ""), settings.restart_jitter
        ),
        draft=draft,
    )


async def _warm_up(args: ServerArgs) -> str | None:
    """SGLang's own warm-up: a real /generate to itself over HTTP."""
    host = str(args.get("host"))
    if host in ("0.0.0.0", ""):
        host = "127.0.0.1"
    port = int(args.get("port"))
    body = json.dumps({
        "text": WARMUP_PROMPT,
        "sampling_params": {"temperature": 0, "max_new_tokens": 8, "ignore_eos": True},
    }).encode()
    try:
        async with asyncio.timeout(WARMUP_TIMEOUT_S):
            status, text = await _post(host, port, "/generate", body)
        if status != 200:
            return f"HTTP {status}: {text[:200]}"
        json.loads(text)
    except (OSError, TimeoutError, h11.ProtocolError, json.JSONDecodeError) as exc:
        return repr(exc)
    return None


async def _post(host: str, port: int, path: str, body: bytes) -> tuple[int, str]:
    """One POST on a fresh connection: the status and the body as text."""
    reader, writer = await asyncio.open_connection(host, port)
    conn = h11.Connection(h11.CLIENT)
    try:
        writer.write(b"".join(conn.send(event) or b"" for event in (
            h11.Request(method="POST", target=path, headers=[
                ("host", f"{host}:{port}"), ("content-type", "application/json"),
                ("content-length", str(len(body))), (WARMUP_HEADER, "1"),
                ("connection", "close"),
            ]),
            h11.Data(data=body),
            h11.EndOfMessage(),
        )))
        await writer.drain()
        status = 0
        received = bytearray()
        while True:
            event = conn.next_event()
            if event is h11.NEED_DATA:
                conn.receive_data(await reader.read(65536))
            elif isinstance(event, h11.Response):
                status = event.status_code
            elif isinstance(event, h11.Data):
                received += event.data
            elif isinstance(event, (h11.EndOfMessage, h11.ConnectionClosed)):
                return status, received.decode("utf-8", "replace")
    finally:
        writer.close()


if __name__ == "__main__":
    exit_after(main)
