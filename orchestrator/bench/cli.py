"""``orchestrator bench``: the matrix against any running server, no SSH, no journal.

Useful on its own (how fast is this server right now?), for checking the client against a
server whose truth is known (the simulator), and as a peer of an engine's own serving
benchmark (benchmarks/serving.py runs both on the same requests). ``--engine`` names the
server's engine (its request dialect and ``/metrics`` counters; the default engine when not
given). ``--json`` writes one JSON document to stdout and nothing else; logs and the
progress display go to stderr. ``--output FILE`` keeps a results file: JSON lines, one per
point as soon as it is measured, each with its requests.

The progress display counts the warm-up and measured requests of every point (calibration
probes and the coding anchor are not counted): a live bar on a terminal, else a plain line at
most every few seconds and at each point's end, so a log or CI shows it too.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, Literal, TextIO, get_args

from orchestrator import engines
from orchestrator.bench.client import BenchClient, Phase, RawExchange
from orchestrator.bench.http1 import ConnectionPolicy, base_url_from_user
from orchestrator.bench.measure import measure_point
from orchestrator.bench.openloop import arrival_schedule
from orchestrator.bench.point import FLAG_ERRORS, Measurement, PointSpec, Slo
from orchestrator.bench.problems import (
    CodingProblem,
    ProblemFileError,
    builtin_problems,
    load_problem_file,
    select,
)
from orchestrator.bench.prompts import CalibrationError, PromptFactory, PromptSource
from orchestrator.bench.workloads import (
    BUILTIN_WORKLOADS,
    WorkloadFileError,
    WorkloadSample,
    load_builtin,
    parse_sample,
)
from orchestrator.bench.workloads.source import WorkloadPrompts
from orchestrator.engines.base import Engine, Prompt, as_prompt
from orchestrator.log import get_logger
from orchestrator.points import CodingPoint
from orchestrator.types import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    ApiKind,
    Arrivals,
    OutputLengths,
)

OUTPUT_LENGTHS: tuple[OutputLengths, ...] = get_args(OutputLengths)
JOURNAL_NOTE = "bench mode reads no journal: accept_len comes from meta_info or /metrics only"
COUNTED_PHASES: frozenset[Phase] = frozenset({"warmup", "measured"})
"""The requests the progress display counts: every point's warm-up and measured ones."""


# --------------------------------------------------------------------------- progress (pure)


def clock_duration(seconds: float) -> str:
    """``0:07``, ``12:34``, ``1:02:03``: elapsed time and ETA as a terminal shows them."""
    whole = max(round(seconds), 0)
    hours, rest = divmod(whole, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def eta_seconds(done: int, total: int, paced_s: float | None) -> float | None:
    """Time left at the pace since the first request finished (``paced_s`` seconds for the
    ``done - 1`` after it: the start-up and the first calibration are not the pace); None
    until there is a pace, 0 once all are done."""
    if done >= total:
        return 0.0
    if done < 2 or paced_s is None or paced_s <= 0:
        return None
    return paced_s / (done - 1) * (total - done)


@dataclass(frozen=True, slots=True)
class RequestSnapshot:
    """What the bench's request display shows at one moment (a sweep's is
    :class:`~orchestrator.progress.snapshot.ProgressSnapshot`)."""

    done: int
    total: int
    elapsed_s: float
    point: str
    """The point being measured, e.g. ``ctx 1024 x c8`` or ``ctx 1024 @ 4 req/s``."""
    paced_s: float | None = None
    """Seconds since the first request finished (None before)."""

    @property
    def eta_s(self) -> float | None:
        return eta_seconds(self.done, self.total, self.paced_s)

    def line(self) -> str:
        """One plain line: ``bench 120/500 requests (24%) elapsed 0:12 ETA 0:38 | ctx 60 x c4``."""
        percent = 100 * self.done // self.total if self.total else 100
        eta = self.eta_s
        parts = [
            f"bench {self.done}/{self.total} requests ({percent}%)",
            f"elapsed {clock_duration(self.elapsed_s)}",
            f"ETA {'-:--' if eta is None else clock_duration(eta)}",
        ]
        text = " ".join(parts)
        return f"{text} | {self.point}" if self.point else text


class RequestProgress:
    """Requests done of the run's total, with an ETA, on ``stream`` (stderr).

    On a terminal a rich Live line (bar, counts, elapsed, ETA) redrawn four times a second;
    elsewhere a plain :meth:`RequestSnapshot.line` at most every ``every_s`` seconds and at each
    point's end. Safe to call from the event loop while rich's refresh thread draws.
    """

    def __init__(
        self,
        total: int,
        *,
        stream: TextIO,
        live: bool | None = None,
        every_s: float = 5.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.total = total
        self.stream = stream
        self.live = stream.isatty() if live is None else live
        self.every_s = every_s
        self.clock = clock
        self.started = clock()
        self.done = 0
        self.point = ""
        self.first_done: float | None = None
        self._printed_at: float | None = None
        self._printed_final = False
        self._lock = threading.Lock()
        self._display: Any = None

    def snapshot(self) -> RequestSnapshot:
        now = self.clock()
        with self._lock:
            paced = None if self.first_done is None else now - self.first_done
            return RequestSnapshot(self.done, self.total, now - self.started, self.point, paced)

    def render(self) -> Any:
        from rich.progress_bar import ProgressBar
        from rich.table import Table

        snap = self.snapshot()
        grid = Table.grid(padding=(0, 1))
        grid.add_row(ProgressBar(total=max(snap.total, 1), completed=snap.done, width=30),
                     snap.line())
        return grid

    def __enter__(self) -> RequestProgress:
        if self.live and self.total > 0:
            from rich.console import Console
            from rich.live import Live

            self._display = Live(
                console=Console(file=self.stream),
                get_renderable=self.render,
                refresh_per_second=4,
                transient=False,
            )
            self._display.__enter__()
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._display is not None:
            self._display.refresh()
            self._display.__exit__(None, None, None)
            self._display = None
        elif self.total > 0 and not self._printed_final:
            self._print()

    def start_point(self, label: str) -> None:
        with self._lock:
            self.point = label

    def end_point(self) -> None:
        if self._display is None:
            self._print()

    def advance(self, requests: int = 1) -> None:
        with self._lock:
            if self.first_done is None:
                self.first_done = self.clock()
            self.done += requests
        if self._display is None:
            now = self.clock()
            if self._printed_at is None or now - self._printed_at >= self.every_s:
                self._print()

    def _print(self) -> None:
        snap = self.snapshot()
        self._printed_at = self.clock()
        self._printed_final = snap.done >= snap.total
        print(snap.line(), file=self.stream, flush=True)


class ObservedClient(BenchClient):
    """The bench client, telling the progress display of each finished request and keeping
    each request's prompt by label while ``prompts`` is a dict (``--output-prompts``).

    The matrix sees an ordinary :class:`BenchClient`; only ``stream`` (every request of a point,
    calibration probes included) is observed.
    """

    progress: RequestProgress | None = None
    prompts: dict[str, str | Prompt] | None = None

    async def stream(self, prompt: str | Prompt, **options: Any) -> RawExchange:
        raw = await super().stream(prompt, **options)
        if raw.phase in COUNTED_PHASES:
            if self.prompts is not None:
                self.prompts[raw.label] = prompt
            if self.progress is not None:
                self.progress.advance()
        return raw


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite number > 0, got {text}")
    return value


SLO_KEYS = {"ttft_ms": "ttft_s", "tpot_ms": "tpot_s", "e2e_ms": "e2e_s"}
"""``--slo`` keys (the sweep file's ``slo`` keys, milliseconds) and the :class:`Slo` field
each sets (seconds)."""


def parse_slo(text: str) -> Slo:
    """``ttft_ms=2000,tpot_ms=100,e2e_ms=60000`` (any of the three, each at most once)."""
    bounds: dict[str, float] = {}
    for item in text.split(","):
        key, sep, value = item.strip().partition("=")
        if not sep or key not in SLO_KEYS:
            known = ", ".join(SLO_KEYS)
            problem = f"{item.strip()!r}: expected KEY=MS, KEY one of {known}"
            raise argparse.ArgumentTypeError(problem)
        if SLO_KEYS[key] in bounds:
            raise argparse.ArgumentTypeError(f"{key} given twice")
        bounds[SLO_KEYS[key]] = _positive_float(value) / 1000.0
    return Slo(**bounds)


@dataclass(frozen=True, slots=True)
class WorkloadOption:
    """``--workload`` as given: its label (the points' ``workload`` field) and what it names."""

    label: str
    kind: Literal["synthetic", "builtin", "file"]
    name: str
    """The built-in set's name or the file's path as written; empty for synthetic."""


def parse_workload(text: str) -> WorkloadOption:
    """``synthetic``, ``builtin:NAME`` (one of the sets that ship with the package) or
    ``file:PATH`` (a JSONL traffic sample); labels as the sweep file's workloads have them."""
    if text == "synthetic":
        return WorkloadOption("synthetic", "synthetic", "")
    kind, sep, name = text.partition(":")
    if sep and kind == "file" and name:
        return WorkloadOption(text, "file", name)
    if sep and kind == "builtin":
        if name not in BUILTIN_WORKLOADS:
            known = ", ".join(BUILTIN_WORKLOADS)
            raise argparse.ArgumentTypeError(f"no built-in workload {name!r} (built-in: {known})")
        return WorkloadOption(text, "builtin", name)
    raise argparse.ArgumentTypeError(
        f"{text!r}: expected synthetic, builtin:NAME or file:PATH"
    )


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the bench options to ``parser`` (the ``bench`` subcommand or a standalone one)."""
    _server_options(parser)
    _load_options(parser)
    _rate_options(parser)
    _traffic_options(parser)
    _request_options(parser)
    _coding_and_output_options(parser)
    return parser


def _server_options(parser: argparse.ArgumentParser) -> None:
    """Which server, model, engine and API."""
    parser.add_argument(
        "--url",
        required=True,
        help="server base URL, e.g. http://host:30000 (host:port means http://host:port)",
    )
    parser.add_argument("--model", required=True, help="served model name (chat API 'model')")
    parser.add_argument(
        "--engine",
        default=engines.DEFAULT_ENGINE,
        metavar="NAME",
        help="the server's engine: its request dialect and /metrics counters "
        f"(default {engines.DEFAULT_ENGINE}; known: {', '.join(engines.names())})",
    )
    parser.add_argument(
        "--api",
        choices=get_args(ApiKind),
        default="chat",
        help="chat: /v1/chat/completions; generate: the engine's native API (per-request "
        "accept length, where the engine reports it)",
    )


def _load_options(parser: argparse.ArgumentParser) -> None:
    """The points: contexts, and their loads (concurrencies, rates)."""
    parser.add_argument(
        "--contexts",
        type=_positive_int,
        nargs="+",
        default=[60, 1024],
        help="prompt lengths in server tokens (space-separated)",
    )
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        nargs="+",
        default=None,
        help="closed-loop points: requests in flight (space-separated; default 1 8, none "
        "when --rate is given alone)",
    )
    parser.add_argument(
        "--rate",
        type=_positive_float,
        nargs="+",
        default=None,
        help="open-loop points: requests per second (space-separated), measured for --duration",
    )


def _rate_options(parser: argparse.ArgumentParser) -> None:
    """How a rate point's arrivals come, and the bounds goodput counts against."""
    parser.add_argument(
        "--arrivals",
        choices=get_args(Arrivals),
        default="poisson",
        help="rate points: Poisson arrivals (exponential gaps from --seed) or evenly spaced",
    )
    parser.add_argument(
        "--duration",
        type=_positive_float,
        default=30.0,
        help="rate points: seconds of arrivals measured after the warm-up (default 30)",
    )
    parser.add_argument(
        "--max-concurrency",
        type=_positive_int,
        default=256,
        help="rate points: most requests in flight (default 256)",
    )
    parser.add_argument("--seed", type=int, default=0, help="rate points: the schedule's seed")
    parser.add_argument(
        "--slo",
        type=parse_slo,
        default=None,
        help="per-request bounds for goodput: ttft_ms=..,tpot_ms=..,e2e_ms=.. (any of them)",
    )


def _traffic_options(parser: argparse.ArgumentParser) -> None:
    """What each point sends: its workload, output lengths, rounds and warm-up."""
    parser.add_argument(
        "--workload",
        type=parse_workload,
        default=parse_workload("synthetic"),
        help="synthetic (filler prompts), builtin:NAME (" + ", ".join(BUILTIN_WORKLOADS)
        + ") or file:PATH (a JSONL traffic sample)",
    )
    parser.add_argument(
        "--output-lengths",
        choices=OUTPUT_LENGTHS,
        default=None,
        help="fixed: every request yields --max-tokens (ignore_eos; the default); natural: the "
        "model stops, --max-tokens caps; workload: each request's output_tokens from the "
        "workload (ignore_eos), --max-tokens where it has none",
    )
    parser.add_argument(
        "--rounds",
        type=_positive_int,
        default=5,
        help="measured requests per point = rounds x concurrency",
    )
    parser.add_argument(
        "--warmup",
        type=_non_negative_int,
        default=None,
        help="warm-up requests per point, excluded from metrics (default: the concurrency; "
        "for a rate point one second of its arrivals, at most --max-concurrency)",
    )


def _request_options(parser: argparse.ArgumentParser) -> None:
    """How each request is sent and read: length, sampling, timeout, connections, metrics."""
    parser.add_argument("--max-tokens", type=_positive_int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument(
        "--no-ignore-eos",
        dest="ignore_eos",
        action="store_false",
        help="let the model stop early: --output-lengths natural",
    )
    parser.add_argument("--request-timeout", type=float, default=600.0, help="seconds")
    parser.add_argument(
        "--connections",
        choices=get_args(ConnectionPolicy),
        default="keep-alive",
        help="keep-alive: reuse pooled connections, as pooled clients (OpenAI SDK, httpx) do "
        "(the default); per-request: a fresh connection for every request, closed after its "
        "response, as bench_serving and clients that connect per call do (its TTFT includes "
        "the connect)",
    )
    parser.add_argument(
        "--no-metrics",
        dest="scrape_metrics",
        action="store_false",
        help="do not scrape /metrics around each point",
    )
    parser.add_argument(
        "--continuous-usage",
        action="store_true",
        help="chat: ask for usage on every chunk (exact per-chunk tokens where supported)",
    )
    parser.add_argument(
        "--calibration-cache",
        type=Path,
        default=None,
        help="JSON file caching prompt-length calibrations across runs",
    )


def _coding_and_output_options(parser: argparse.ArgumentParser) -> None:
    """The coding anchor and what is written where."""
    parser.add_argument(
        "--coding",
        action="store_true",
        help="also run the coding-correctness anchor (built-in problems, sandboxed tests)",
    )
    parser.add_argument("--coding-max-tokens", type=_positive_int, default=4096)
    parser.add_argument(
        "--problems",
        type=Path,
        default=None,
        help="--coding: JSONL problem file ({id, prompt, entry_point, tests}; default built-in)",
    )
    parser.add_argument(
        "--problem-ids", nargs="+", default=None, help="--coding: only these problems, in order"
    )
    parser.add_argument(
        "--no-matrix", dest="matrix", action="store_false", help="skip the throughput matrix"
    )
    parser.add_argument(
        "--output",
        type=Path,
        default=None,
        metavar="FILE",
        help="results file: JSON lines, one per point as it is measured, with its requests",
    )
    parser.add_argument(
        "--output-prompts",
        action="store_true",
        help="--output: also keep each request's prompt (to replay the same requests elsewhere)",
    )
    parser.add_argument("--raw", action="store_true", help="--json: include every request")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")


@dataclass(frozen=True, slots=True)
class PlannedPoint:
    """One point of the run: a closed loop (``concurrency``) or an open one (``rate``), with
    the requests the progress display counts for it."""

    context: int
    concurrency: int | None
    rate: float | None
    warmup: int
    measured: int

    @property
    def requests(self) -> int:
        return self.warmup + self.measured

    @property
    def label(self) -> str:
        load = f"x c{self.concurrency}" if self.rate is None else f"@ {self.rate:g} req/s"
        return f"ctx {self.context} {load}"


def closed_loads(args: argparse.Namespace) -> list[int]:
    """``--concurrency`` as given; by default ``1 8``, or none when only ``--rate`` is given."""
    if args.concurrency is not None:
        return list(args.concurrency)
    return [] if args.rate else [1, 8]


def planned_points(args: argparse.Namespace) -> list[PlannedPoint]:
    """The matrix's points in run order: per context, the closed points, then the rate
    points (whose measured requests are their arrival schedule's)."""
    if not args.matrix:
        return []
    plan: list[PlannedPoint] = []
    for context in args.contexts:
        for concurrency in closed_loads(args):
            warmup = concurrency if args.warmup is None else args.warmup
            plan.append(PlannedPoint(context, concurrency, None, warmup, args.rounds * concurrency))
        for rate in args.rate or []:
            schedule = arrival_schedule(rate, args.duration, args.arrivals, args.seed)
            warmup = args.warmup
            if warmup is None:  # one second of arrivals, as many as may be in flight
                warmup = min(math.ceil(rate), args.max_concurrency)
            plan.append(PlannedPoint(context, None, rate, warmup, len(schedule)))
    return plan


def prompt_as_sent(prompt: str | Prompt, api: ApiKind) -> str | list[dict[str, str]]:
    """A request's prompt as the server got it: ``/generate``'s one text, or the chat API's
    messages (``[{"role", "content"}, ...]``)."""
    typed = as_prompt(prompt)
    if api == "generate":
        return typed.plain_text()
    return [{"role": m.role, "content": m.content} for m in typed.chat_messages()]


def point_line(
    point: Measurement,
    *,
    url: str,
    model: str,
    api: ApiKind,
    connections: ConnectionPolicy = "keep-alive",
    prompts: dict[str, str | Prompt] | None = None,
) -> dict[str, Any]:
    """One ``--output`` line: the point with every request (warm-up labelled), where and
    how (``connections``) it was measured, and with ``prompts`` each request's prompt as it
    was sent."""
    line: dict[str, Any] = {"url": url, "model": model, "api": api, "connections": connections}
    line.update(_point_summary(point, include_requests=True))
    if prompts is not None:
        for request in line["raw_requests"]:
            sent = prompts.get(request["label"])
            request["prompt"] = None if sent is None else prompt_as_sent(sent, api)
    return line


def _point_summary(point: Measurement, *, include_requests: bool) -> dict[str, Any]:
    out = point.to_json(include_requests=include_requests)
    out["accept_len_journal_reason"] = JOURNAL_NOTE
    return out


def _print_table(points: list[Measurement]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="bench")
    for header in (
        "ctx",
        "load",
        "held",
        "req/s",
        "goodput",
        "tok/s",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99",
        "TPOT p50",
        "E2E p50",
        "err",
        "accept_len",
        "flags",
    ):
        table.add_column(header, justify="right")

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.1f} ms"

    def num(value: float | None, digits: int = 1) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    for p in points:
        m, accept = p.metrics, p.point.accept
        load = f"C={p.spec.concurrency}" if p.spec.rate is None else f"{p.spec.rate:g}/s"
        table.add_row(
            str(p.spec.context),
            load,
            num(m.concurrency_held, 2),
            num(m.request_s, 2),
            num(m.goodput, 2),
            num(m.output_tok_s),
            ms(m.ttft.p50_s),
            ms(m.ttft.p99_s),
            ms(m.itl.p50_s),
            ms(m.itl.p99_s),
            ms(m.tpot.p50_s),
            ms(m.e2e.p50_s),
            str(m.errors),
            num(accept.value, 3),
            " ".join(p.flags + accept.flags),
        )
    # Off a terminal (piped, captured) rich would squeeze the table into 80 columns.
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def _load_problems(path: Path | None, ids: list[str] | None) -> list[CodingProblem]:
    problems = builtin_problems() if path is None else load_problem_file(path)
    return select(problems, ids) if ids else problems


def _coding_document(results: list[CodingPoint]) -> dict[str, Any]:
    from orchestrator.bench.coding import summarize

    summary = summarize(results)
    return {
        "passed": summary.passed,
        "scored": summary.scored,
        "total": summary.total,
        "pass_rate": summary.pass_rate,
        "outcomes": summary.counts,
        "results": [
            {
                "problem_id": r.problem,
                "outcome": r.outcome.value,
                "detail": r.detail,
                "finish_reason": r.finish_reason,
                "completion_tokens": r.completion_tokens,
                "elapsed_s": r.elapsed_s,
            }
            for r in results
        ],
    }


def output_lengths(args: argparse.Namespace) -> OutputLengths:
    """``--output-lengths``, with ``--no-ignore-eos`` as ``natural`` (ValueError when both
    are given and disagree)."""
    chosen: OutputLengths | None = args.output_lengths
    if not args.ignore_eos:
        if chosen not in (None, "natural"):
            raise ValueError(f"--no-ignore-eos contradicts --output-lengths {chosen}")
        return "natural"
    return chosen or "fixed"


def point_spec(planned: PlannedPoint, args: argparse.Namespace) -> PointSpec:
    """The point ``planned`` asks for, with the run's shared settings (its rate points' seed,
    arrivals, duration and cap are the command line's)."""
    closed = planned.rate is None
    return PointSpec(
        context=planned.context,
        concurrency=planned.concurrency if closed else None,
        rounds=args.rounds if closed else None,
        warmup_requests=planned.warmup,
        max_tokens=args.max_tokens,
        temperature=args.temperature,
        ignore_eos=output_lengths(args) != "natural",
        rate=planned.rate,
        arrivals=None if closed else args.arrivals,
        duration_s=None if closed else args.duration,
        max_concurrency=None if closed else args.max_concurrency,
        workload=args.workload.label,
        seed=None if closed else args.seed,
        slo=args.slo,
    )


def load_workload(option: WorkloadOption) -> WorkloadSample | None:
    """The sample a ``--workload`` names (None for synthetic), read and checked before any
    request: OSError for an unreadable file, WorkloadFileError listing its bad lines."""
    if option.kind == "synthetic":
        return None
    if option.kind == "builtin":
        return load_builtin(option.name)
    text = Path(option.name).read_text(encoding="utf-8")
    return parse_sample(text, filename=option.name, label=option.label)


def prompt_source(
    client: BenchClient, args: argparse.Namespace, sample: WorkloadSample | None
) -> PromptSource:
    """Synthetic prompts (calibrations cached in ``--calibration-cache``) or the sample's."""
    if sample is None:
        return PromptFactory(client, cache_path=args.calibration_cache)
    return WorkloadPrompts(
        client, sample, workload_output_lengths=output_lengths(args) == "workload"
    )


def run_document(args: argparse.Namespace, engine: Engine) -> dict[str, Any]:
    """The ``--json`` document before any point: what was measured, with which settings."""
    lengths = output_lengths(args)
    return {
        "url": args.url,
        "model": args.model,
        "api": args.api,
        "engine": engine.name,
        "settings": {
            "contexts": list(args.contexts),
            "concurrency": closed_loads(args),
            "rate": list(args.rate or []),
            "arrivals": args.arrivals,
            "duration_s": args.duration,
            "max_concurrency": args.max_concurrency,
            "seed": args.seed,
            "slo": None if args.slo is None else args.slo.to_dict(),
            "workload": args.workload.label,
            "output_lengths": lengths,
            "rounds": args.rounds,
            "warmup": args.warmup,
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "ignore_eos": lengths != "natural",
            "request_timeout_s": args.request_timeout,
            "connections": args.connections,
            "scrape_metrics": args.scrape_metrics,
            "matrix": args.matrix,
            "coding": args.coding,
        },
        "accept_len_note": JOURNAL_NOTE,
        "points": [],
        "coding": None,
        "error": None,
    }


async def run_async(
    args: argparse.Namespace,
    problems: list[CodingProblem] | None = None,
    output: IO[str] | None = None,
    sample: WorkloadSample | None = None,
    engine: Engine | None = None,
) -> tuple[int, dict[str, Any], list[Measurement]]:
    """Run the matrix (and coding when asked): the exit code, the JSON document, the points.

    Each point goes to ``output`` (one JSON line, flushed) as soon as it is measured, so a run
    cut short keeps what it measured. ``engine`` is the server's (``--engine`` when None)."""
    log = get_logger(component="bench.cli", url=args.url)
    engine = engine if engine is not None else engines.get(args.engine)
    plan = planned_points(args)
    document = run_document(args, engine)
    points: list[Measurement] = []
    client = ObservedClient(
        args.url,
        api=args.api,
        model=args.model,
        concurrency=client_pool(args, plan),
        request_timeout=args.request_timeout,
        continuous_usage_stats=args.continuous_usage,
        connections=args.connections,
        engine=engine,
    )
    async with client:
        prompts = prompt_source(client, args, sample)
        try:
            await _measure_all(client, args, plan, prompts, output, points)
        except CalibrationError as exc:
            log.error("bench.calibration_failed", error=str(exc))
            document["error"] = f"calibration failed: {exc}"
        document["points"] = [_point_summary(p, include_requests=args.raw) for p in points]
        if args.coding and document["error"] is None:
            document["coding"] = await _run_coding(client, args, problems)
    failed = document["error"] is not None or any(FLAG_ERRORS in p.flags for p in points)
    return (EXIT_FAILED if failed else EXIT_OK), document, points


def client_pool(args: argparse.Namespace, plan: list[PlannedPoint]) -> int:
    """Connections the client needs: the largest concurrency, and ``--max-concurrency`` when
    a rate point is planned."""
    closed = [p.concurrency for p in plan if p.concurrency is not None]
    rates: list[int] = [args.max_concurrency] if any(p.rate is not None for p in plan) else []
    return max([1, *closed, *rates])


async def _measure_all(
    client: ObservedClient,
    args: argparse.Namespace,
    plan: list[PlannedPoint],
    prompts: PromptSource,
    output: IO[str] | None,
    points: list[Measurement],
) -> None:
    """Each planned point in turn, appended to ``points`` and written to ``output`` as soon as
    it is measured (what was measured stays when a later point's calibration fails)."""
    progress = RequestProgress(sum(p.requests for p in plan), stream=sys.stderr)
    try:
        with progress:
            client.progress = progress
            for planned in plan:
                progress.start_point(planned.label)
                client.prompts = {} if args.output_prompts else None
                point = await measure_point(
                    client, prompts, point_spec(planned, args), scrape_metrics=args.scrape_metrics
                )
                points.append(point)
                if output is not None:
                    line = point_line(
                        point, url=args.url, model=args.model, api=args.api,
                        connections=args.connections, prompts=client.prompts,
                    )  # fmt: skip
                    output.write(json.dumps(line, default=str) + "\n")
                    output.flush()
                progress.end_point()
    finally:
        client.progress = None
        client.prompts = None


async def _run_coding(
    client: BenchClient, args: argparse.Namespace, problems: list[CodingProblem] | None
) -> dict[str, Any]:
    """The coding anchor's problems on ``client``, at temperature 0, as the document holds
    them."""
    # Imported here, after the entry point configured logging: the module binds its logger
    # at import time.
    from orchestrator.bench.coding import run_coding

    results = await run_coding(
        client,
        problems,
        max_tokens=args.coding_max_tokens,
        temperature=0.0,
        timeout_s=args.request_timeout,
    )
    return _coding_document(results)


class BadInput(Exception):
    """What ``orchestrator bench`` refuses before any request, line by line (exit 2)."""

    def __init__(self, *lines: str) -> None:
        super().__init__("; ".join(lines))
        self.lines = lines


def checked_inputs(
    args: argparse.Namespace,
) -> tuple[Engine, list[CodingProblem] | None, WorkloadSample | None]:
    """The run's engine, coding problems and workload sample, each read and checked before any
    request (:class:`BadInput` with what is wrong otherwise); ``args.url`` normalized."""
    if args.temperature < 0 or args.request_timeout <= 0:
        raise BadInput("--temperature must be >= 0 and --request-timeout > 0")
    if args.output_prompts and args.output is None:
        raise BadInput("--output-prompts needs --output FILE")
    try:
        output_lengths(args)
    except ValueError as exc:
        raise BadInput(str(exc)) from exc
    try:
        args.url = base_url_from_user(args.url)
    except ValueError as exc:
        raise BadInput(f"--url: {exc}") from exc
    try:
        engine = engines.get(args.engine)
    except engines.UnknownEngine as exc:
        raise BadInput(f"--engine: {exc}") from exc
    problems: list[CodingProblem] | None = None
    if args.coding and (args.problems is not None or args.problem_ids):
        try:
            problems = _load_problems(args.problems, args.problem_ids)
        except (OSError, ProblemFileError) as exc:
            raise BadInput(f"problems: {exc}") from exc
    return engine, problems, _checked_workload(args.workload)


def _checked_workload(option: WorkloadOption) -> WorkloadSample | None:
    try:
        return load_workload(option)
    except OSError as exc:
        raise BadInput(f"--workload: {exc.strerror or exc}: {option.name}") from exc
    except UnicodeDecodeError as exc:
        raise BadInput(f"--workload: {option.name}: not UTF-8 text") from exc
    except WorkloadFileError as exc:
        raise BadInput(*(f"--workload: {problem}" for problem in exc.problems)) from exc


def run(args: argparse.Namespace) -> int:
    """Entry point of ``orchestrator bench``: exit 0 ok, 1 failed, 2 bad input."""
    try:
        engine, problems, sample = checked_inputs(args)
        try:
            output = None if args.output is None else args.output.open("w", encoding="utf-8")
        except OSError as exc:
            raise BadInput(f"--output: {exc.strerror or exc}: {args.output}") from exc
    except BadInput as bad:
        for line in bad.lines:
            print(f"bench: {line}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        code, document, points = asyncio.run(run_async(args, problems, output, sample, engine))
    finally:
        if output is not None:
            output.close()
    if args.json:
        json.dump(document, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
        return code
    if points:
        _print_table(points)
    if document["error"] is not None:
        print(f"bench: {document['error']}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    from orchestrator.log import configure_logging

    parser = configure_parser(argparse.ArgumentParser(prog="orchestrator bench"))
    args = parser.parse_args(argv)
    configure_logging()
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
