"""``python -m tests.toyengine.server``: a tiny serving engine that is not SGLang.

It exists so that a test can run a whole sweep on an engine the orchestrator has never heard
of. Everything an engine differs by is its own here: the flags (``--toy-*``, parsed strictly:
an unknown flag exits 2 with argparse's ``unrecognized arguments``), the log lines (``TOY
READY``, ``TOYSTAT ...`` per ``--toy-stat-interval`` decode steps of a request, ``TOYFAIL
<cause>: ...``), the readiness endpoint (``GET /toy/config``: the resolved flags), the metrics
(``toy_*`` counters, only with ``--toy-metrics``). Generation speaks OpenAI's chat API
(``/v1/chat/completions``, streamed with ``usage``; ``/v1/models``), so a bench counts its
tokens as it counts any OpenAI-compatible server's.

Its speed is deterministic and depends on the knobs, so configs differ by design: a decode
step drafts ``--toy-draft-depth`` tokens and yields :meth:`ToyConfig.accept_len` tokens on
average (an exact periodic pattern, not random), and costs ``--toy-step-ms`` x (1 + 0.3 x
depth), x 0.5 with ``--toy-kernel fused``. Depth 2 with the fused kernel is the fastest of
the configs the tests try; depth 4 pays more per step than its extra acceptance gives back.

Standard library only, so a start costs what Python's start-up costs.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from fractions import Fraction
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

PROG = "toy-server"
VERSION = "toy-1.0"
READY_LINE = "TOY READY"
STAT_WORD = "TOYSTAT"
FAIL_WORD = "TOYFAIL"
CONFIG_PATH = "/toy/config"
MAX_DEPTH = 8
FUSED_FACTOR = 0.5
"""The fused kernel's step cost relative to the plain one's."""
DEPTH_COST = 0.3
KERNELS = ("plain", "fused")
"""Each drafted token adds this fraction of a plain step to the step's cost."""


def build_parser() -> argparse.ArgumentParser:
    """The server's whole command line (``--help`` lists it; nothing else is taken)."""
    parser = argparse.ArgumentParser(
        prog=PROG, allow_abbrev=False, description="A toy serving engine for the tests."
    )
    parser.add_argument("--toy-host", default="127.0.0.1", help="address to listen on")
    parser.add_argument("--toy-port", type=int, required=True, help="port to listen on")
    parser.add_argument("--toy-model-name", default="toy-model", help="the served model name")
    parser.add_argument(
        "--toy-draft-depth",
        type=int,
        default=0,
        choices=range(MAX_DEPTH + 1),
        metavar=f"{{0..{MAX_DEPTH}}}",
        help="tokens drafted per decode step (0: no speculation)",
    )
    parser.add_argument(
        "--toy-kernel", choices=KERNELS, default="plain", help="the step kernel"
    )
    parser.add_argument("--toy-step-ms", type=float, default=4.0, help="a plain step's cost")
    parser.add_argument(
        "--toy-stat-interval", type=int, default=4, help="decode steps per TOYSTAT line"
    )
    parser.add_argument("--toy-load-s", type=float, default=0.1, help="load time before bind")
    parser.add_argument("--toy-metrics", action="store_true", help="serve /metrics")
    parser.add_argument(
        "--toy-spec-config",
        metavar="PATH",
        help="a JSON file of speculative settings (draft_depth, kernel) over the flags'",
    )
    return parser


SPEC_KEYS = ("draft_depth", "kernel")
"""What ``--toy-spec-config``'s file may set."""
SIM_ROOT_ENV = "ORCH_SIM_ROOT"
"""On a simulated host, its private root (``orchestrator.sim.settings.ROOT_ENV``): a host path
is read below it. Unset on a real host, where a path is read as it is."""


def spec_problem(spec: Any) -> str | None:
    """Why the server refuses ``spec`` (``--toy-spec-config``'s settings) whatever its flags,
    or None: what its start checks of the file, which an engine can check before a start."""
    if not isinstance(spec, dict) or set(spec) - set(SPEC_KEYS):
        return f"an object of {', '.join(SPEC_KEYS)} only"
    depth = spec.get("draft_depth", 0)
    if isinstance(depth, bool) or not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH:
        return f"draft_depth {depth!r} is not a whole number in 0..{MAX_DEPTH}"
    if spec.get("kernel", KERNELS[0]) not in KERNELS:
        return f"kernel {spec['kernel']!r} is not one of {', '.join(KERNELS)}"
    return None


def read_spec(path: str) -> dict[str, Any]:
    """The speculative settings of ``--toy-spec-config``'s file, at ``path`` on the host."""
    root = os.environ.get(SIM_ROOT_ENV)
    local = os.path.join(root, path.lstrip("/")) if root else path
    try:
        with open(local, encoding="utf-8") as handle:
            spec = json.load(handle)
    except (OSError, ValueError) as exc:
        raise ValueError(f"--toy-spec-config {path}: {type(exc).__name__}: {exc}") from exc
    problem = spec_problem(spec)
    if problem is not None:
        raise ValueError(f"--toy-spec-config {path}: {problem}")
    return dict(spec)


@dataclass(frozen=True, slots=True)
class ToyConfig:
    """The resolved command line: what ``/toy/config`` reports."""

    host: str
    port: int
    model_name: str
    draft_depth: int
    kernel: str
    step_ms: float
    stat_interval: int
    load_s: float
    metrics: bool
    spec_config: str | None = None
    """The ``--toy-spec-config`` file the settings came from (None: the flags alone)."""

    @property
    def accept_len(self) -> Fraction:
        """Tokens per decode step: 1 + 0.625 per drafted token up to two, 0.125 beyond."""
        depth = self.draft_depth
        return Fraction(8 + 5 * min(depth, 2) + max(depth - 2, 0), 8)

    @property
    def step_s(self) -> float:
        kernel = FUSED_FACTOR if self.kernel == "fused" else 1.0
        return self.step_ms / 1000 * (1 + DEPTH_COST * self.draft_depth) * kernel

    def tokens_at(self, step: int) -> int:
        """Tokens decode step ``step`` (0-based) yields: the pattern whose mean is accept_len."""
        m = self.accept_len
        return int((step + 1) * m) - int(step * m)

    def report(self) -> dict[str, Any]:
        return {
            "engine": "toy",
            "version": VERSION,
            **asdict(self),
            "accept_len": float(self.accept_len),
            "argv": sys.argv[1:],
        }


def resolve(args: argparse.Namespace, spec: dict[str, Any] | None = None) -> ToyConfig:
    """The parsed flags, with ``spec`` (``--toy-spec-config``'s file) over them, as a config;
    ValueError for combinations the engine refuses."""
    spec = spec or {}
    depth = spec.get("draft_depth", args.toy_draft_depth)
    kernel = spec.get("kernel", args.toy_kernel)
    if not isinstance(depth, int) or not 0 <= depth <= MAX_DEPTH or kernel not in KERNELS:
        raise ValueError(f"bad speculative settings: draft_depth={depth!r} kernel={kernel!r}")
    if kernel == "fused" and depth == 0:
        raise ValueError("--toy-kernel fused needs --toy-draft-depth >= 1")
    if args.toy_stat_interval < 1 or args.toy_step_ms <= 0:
        raise ValueError("--toy-stat-interval and --toy-step-ms must be positive")
    return ToyConfig(
        host=args.toy_host,
        port=args.toy_port,
        model_name=args.toy_model_name,
        draft_depth=depth,
        kernel=kernel,
        step_ms=args.toy_step_ms,
        stat_interval=args.toy_stat_interval,
        load_s=args.toy_load_s,
        metrics=args.toy_metrics,
        spec_config=args.toy_spec_config,
    )


_print_lock = threading.Lock()


def log(line: str) -> None:
    """One line on stderr (the unit's journal), whole even when threads log at once."""
    with _print_lock:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()


class Counters:
    """What ``/metrics`` reports, since start."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests = 0
        self.generated_tokens = 0
        self.verify_steps = 0
        self.accepted_drafts = 0
        self.running = 0

    def prometheus(self, config: ToyConfig) -> str:
        label = f'{{model_name="{config.model_name}"}}'
        with self.lock:
            rows = [
                ("toy_requests_total", "counter", self.requests),
                ("toy_generated_tokens_total", "counter", self.generated_tokens),
                ("toy_running_requests", "gauge", self.running),
            ]
            if config.draft_depth > 0:
                rows += [
                    ("toy_verify_steps_total", "counter", self.verify_steps),
                    ("toy_accepted_drafts_total", "counter", self.accepted_drafts),
                ]
        return "".join(f"# TYPE {n} {kind}\n{n}{label} {value}\n" for n, kind, value in rows)


def prompt_tokens(messages: Sequence[Any]) -> int:
    """Words of every message plus a fixed template cost: the toy's tokenizer."""
    total = 2
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        total += 3 + (len(content.split()) if isinstance(content, str) else 0)
    return total


def generate(
    config: ToyConfig, counters: Counters, max_tokens: int, emit: Callable[[int], None]
) -> int:
    """Produce ``max_tokens`` tokens in real time, ``emit(n)`` per step; returns the tokens.

    The prefill yields the first token; each decode step then yields ``tokens_at(step)``
    (capped at what is left). Every ``stat_interval`` decode steps a ``TOYSTAT`` line says
    what the interval's steps drafted and accepted."""
    with counters.lock:
        counters.running += 1
    produced = 0
    interval_steps = interval_accepted = 0
    try:
        time.sleep(config.step_s / 2)
        produced = min(1, max_tokens)
        if produced:
            emit(produced)
        for step in itertools.count():
            if produced >= max_tokens:
                break
            time.sleep(config.step_s)
            tokens = min(config.tokens_at(step), max_tokens - produced)
            produced += tokens
            emit(tokens)
            with counters.lock:
                counters.verify_steps += 1
                counters.accepted_drafts += tokens - 1
                running = counters.running
            interval_steps += 1
            interval_accepted += tokens - 1
            if interval_steps == config.stat_interval:
                log(stat_line(config, interval_steps, interval_accepted, running))
                interval_steps = interval_accepted = 0
    finally:
        with counters.lock:
            counters.running -= 1
            counters.requests += 1
            counters.generated_tokens += produced
    return produced


def stat_line(config: ToyConfig, steps: int, accepted: int, running: int) -> str:
    """``TOYSTAT steps=4 accepted=5 drafted=8 mean_accept=2.25 running=1``; no mean_accept
    without speculation."""
    words = [
        STAT_WORD,
        f"steps={steps}",
        f"accepted={accepted}",
        f"drafted={steps * config.draft_depth}",
    ]
    if config.draft_depth > 0:
        words.append(f"mean_accept={(accepted + steps) / steps:.4f}")
    words.append(f"running={running}")
    return " ".join(words)


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # each event its own small write: no 40 ms delayed-ACK stall
    server: ToyHttpServer

    def log_message(self, format: str, *args: Any) -> None:
        """No access log: a line per probe would only be noise in the journal."""

    def _json(self, status: int, body: Any) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _text(self, status: int, text: str) -> None:
        data = text.encode()
        self.send_response(status)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        config = self.server.config
        if self.path == CONFIG_PATH:
            self._json(200, config.report())
        elif self.path == "/health":
            self._json(200, {"status": "ok"})
        elif self.path == "/v1/models":
            model = {"id": config.model_name, "object": "model", "owned_by": "toy"}
            self._json(200, {"object": "list", "data": [model]})
        elif self.path == "/metrics" and config.metrics:
            self._text(200, self.server.counters.prometheus(config))
        else:
            self._json(404, {"error": {"message": f"no {self.path}"}})

    def do_POST(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        if self.path != "/v1/chat/completions":
            self._json(404, {"error": {"message": f"no {self.path}"}})
            return
        try:
            body = json.loads(raw)
            messages = list(body["messages"])
            max_tokens = int(body.get("max_tokens") or 16)
        except (ValueError, KeyError, TypeError) as exc:
            self._json(400, {"error": {"message": f"bad request: {exc}"}})
            return
        config = self.server.config
        model = body.get("model")
        if model is not None and model != config.model_name:
            self._json(404, {"error": {"message": f"model {model!r} not found"}})
            return
        prompt = prompt_tokens(messages)
        if body.get("stream"):
            options = body.get("stream_options") or {}
            self._stream(config, prompt, max_tokens, options)
        else:
            tokens = generate(config, self.server.counters, max_tokens, lambda n: None)
            self._json(200, self._final(config, prompt, tokens))

    def _final(self, config: ToyConfig, prompt: int, tokens: int) -> dict[str, Any]:
        return {
            "id": self.server.next_id(),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": config.model_name,
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": " tok" * tokens},
                    "finish_reason": "length",
                }
            ],
            "usage": _usage(prompt, tokens),
        }

    def _stream(
        self, config: ToyConfig, prompt: int, max_tokens: int, options: dict[str, Any]
    ) -> None:
        rid = self.server.next_id()
        continuous = bool(options.get("continuous_usage_stats"))
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        sent = 0

        def event(payload: Any) -> None:
            text = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            data = b"data: " + text + b"\n\n"
            self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
            self.wfile.flush()

        def chunk(delta: dict[str, Any], finish: str | None) -> dict[str, Any]:
            return {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": int(time.time()),
                "model": config.model_name,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                "usage": _usage(prompt, sent) if continuous else None,
            }

        def emit(tokens: int) -> None:
            nonlocal sent
            sent += tokens
            event(chunk({"content": " tok" * tokens}, None))

        try:
            event(chunk({"role": "assistant", "content": ""}, None))
            tokens = generate(config, self.server.counters, max_tokens, emit)
            event(chunk({}, "length"))
            if options.get("include_usage"):
                event({"id": rid, "object": "chat.completion.chunk", "choices": [],
                       "usage": _usage(prompt, tokens)})  # fmt: skip
            event(b"[DONE]")
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True


def _usage(prompt: int, completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
    }


class ToyHttpServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False

    def __init__(self, config: ToyConfig) -> None:
        self.config = config
        self.counters = Counters()
        self._ids = itertools.count(1)
        super().__init__((config.host, config.port), Handler)

    def next_id(self) -> str:
        return f"toy-{next(self._ids)}"


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # exits 2 on an unknown flag or a bad value
    try:
        spec = None if args.toy_spec_config is None else read_spec(args.toy_spec_config)
        config = resolve(args, spec)
    except ValueError as exc:
        log(f"{FAIL_WORD} invalid-config: {exc}")
        return 1
    log(f"TOY loading model={config.model_name} depth={config.draft_depth} kernel={config.kernel}")
    time.sleep(config.load_s)
    try:
        server = ToyHttpServer(config)
    except OSError as exc:
        log(f"{FAIL_WORD} port-in-use: {exc}")
        return 1

    def stop(signum: int, frame: object) -> None:
        log(f"TOY stopping on signal {signum}")
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    log(f"TOY listening on {config.host}:{config.port}")
    log(f"{READY_LINE} model={config.model_name}")
    server.serve_forever(poll_interval=0.05)
    server.server_close()
    log("TOY stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
