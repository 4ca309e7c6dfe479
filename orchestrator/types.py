"""The values shared across the layers, defined once (httpx keeps such types in `_types.py`).

Nothing here imports from the rest of the package, so every layer may import it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from enum import StrEnum
from typing import Any, Final, Literal, get_args, get_type_hints

ApiKind = Literal["chat", "generate"]
"""Which HTTP API a sweep (or a probe, or the coding anchor) talks to: ``chat``, the
OpenAI-compatible one every engine serves, or ``generate``, SGLang's own (``Engine.apis``)."""
MetricsMode = Literal["auto", "off"]
"""``server.metrics``: whether each trial's command line gets the engine's metrics flag."""

KnobValue = str | int | float | bool | None
"""One knob's value as a sweep file gives it (None: the knob is left out of the command line)."""

DEFAULT_LEASE_EXPIRY_S = 60.0
"""How long a host's lease lasts without a renewal unless the sweep file says
(``policy.lease_expiry``); the holder renews every quarter of it."""

FailureCause = Literal[
    "bad-flag",
    "invalid-config",
    "oom",
    "port-in-use",
    "warmup-failed",
    "exited",
    "start-limit",
    "memory-not-released",
    "ready-timeout",
    "config-mismatch",
    "host-unreachable",
    "host-command-failed",
    "stop-timeout",
    "crashed",
    "gpu-query-failed",
    "orchestrator-error",
    "stopped",
    "host-set-aside",
    "lease-lost",
]
"""Why a trial's attempt failed; docs/architecture.md says what each means for an operator.
``stopped`` (a stop other than cancel took effect mid-trial) and ``host-set-aside`` (the
preflight set the host aside, so its trials never started) are recorded by the runner;
``lease-lost`` is a change the host's lease refused (another controller took the host over)."""

@dataclass(frozen=True, slots=True)
class ThroughputScalars:
    """A throughput point's scalar metrics by their stored names, in the order a point's
    ``metrics`` writes them: the one list of them. :data:`THROUGHPUT_SCALARS` is its field names,
    the point's ``ThroughputMetrics`` (``orchestrator.points``) extends it and the bench's
    ``point_metrics`` builds that type, so a metric added here is measured, stored, read back
    and validated everywhere.

    Requests and input tokens per second; goodput (requests per second meeting every bound of
    the sweep's ``slo``) and the share that did; distinct and reused prompts; at an open-loop
    point the achieved arrival rate, the schedule's length and the requests it never sent; and
    the output lengths (tokens) the requests really had (docs/metrics.md). None: not measured.
    """

    requests: int | None = None
    requests_ok: int | None = None
    errors: int | None = None
    truncated: int | None = None
    short_outputs: int | None = None
    wall_s: float | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    output_tok_s: float | None = None
    """Aggregate output tokens per second over the point's wall time."""
    request_decode_tok_s_p50: float | None = None
    """Median per-request decode tokens per second."""
    concurrency_held: float | None = None
    concurrency_held_full: float | None = None
    client_cpu_fraction: float | None = None
    loop_lag_max_s: float | None = None
    loop_lag_p99_s: float | None = None
    prompt_tokens_min: int | None = None
    prompt_tokens_max: int | None = None
    prompt_tokens_tolerance: int | None = None
    request_s: float | None = None
    input_tok_s: float | None = None
    good_requests: int | None = None
    goodput: float | None = None
    """Requests per second meeting every bound of the sweep's ``slo``; None without one."""
    goodput_fraction: float | None = None
    prompts_distinct: int | None = None
    prompts_reused: int | None = None
    achieved_rate: float | None = None
    """Requests an open-loop point really sent per second (never the offered rate)."""
    requests_scheduled: int | None = None
    requests_unsent: int | None = None
    output_len_mean: float | None = None
    output_len_p50: float | None = None
    output_len_p90: float | None = None
    output_len_p99: float | None = None
    output_len_max: float | None = None


THROUGHPUT_SCALARS: Final = tuple(f.name for f in fields(ThroughputScalars))
""":class:`ThroughputScalars`' names, in its order."""
INTEGER_SCALARS: Final = frozenset(
    name for name, hint in get_type_hints(ThroughputScalars).items() if int in get_args(hint)
)
"""The scalars that are counts (read back as int, the others as float)."""

LATENCIES: Final = ("ttft", "itl", "tpot", "e2e", "send_lag")
LATENCY_STATS: Final = ("count", "mean_s", "p50_s", "p90_s", "p99_s", "max_s")
"""Each latency is stored flat as ``<latency>_<stat>``: ``ttft_p99_s``, ``itl_p50_s``, ..."""

ANSWER_ONLY_METRICS: Final = ("accept_len", "coding_pass_rate")
SLO_METRICS: Final = ("goodput", "goodput_fraction")
"""Metrics that exist only when the sweep states an ``slo`` (an objective on one needs it)."""
"""What an objective or constraint may name beside a point's stored metrics: the point's
accept length, and passes / problems of the trial's coding anchor."""

_MINIMIZED_SCALARS: Final = frozenset(
    {"errors", "truncated", "short_outputs", "wall_s", "client_cpu_fraction", "requests_unsent"}
    | {"loop_lag_max_s", "loop_lag_p99_s"}
)


def point_metric_names() -> frozenset[str]:
    """Every numeric metric a throughput point stores, by its stored name."""
    return frozenset(THROUGHPUT_SCALARS) | {
        f"{name}_{stat}" for name in LATENCIES for stat in LATENCY_STATS
    }


def metric_is_minimized(name: str) -> bool:
    """Latencies, errors and wall time are better smaller; rates and lengths better larger."""
    return name in _MINIMIZED_SCALARS or any(name.startswith(f"{lat}_") for lat in LATENCIES)


EXIT_OK: Final = 0
EXIT_FAILED: Final = 1
EXIT_BAD_INPUT: Final = 2


def content_hash(text: str) -> str:
    """sha256 (hex) of a text as submitted: identifies exactly what was run."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


class Outcome(StrEnum):
    """How one coding problem went. Only PASS/FAIL/ERROR/SYNTAX/TIMEOUT/NO_CODE are scored."""

    PASS = "pass"
    FAIL = "fail"  # a hidden assert failed
    ERROR = "error"  # an exception (or a signal) while running the code or its tests
    SYNTAX = "syntax"  # the final code does not compile
    TIMEOUT = "timeout"  # wall or CPU-time limit in the sandbox
    NO_CODE = "no_code"  # the answer came but holds no code
    TRUNCATED = "truncated"  # cut off (finish_reason length) or reasoning never ended
    REQUEST_ERROR = "request_error"  # the server did not answer: not the model's fault


_REF = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")


def valid_ref(ref: str) -> bool:
    """A sweep name or id (the API's paths and the CLI's arguments): no slashes, no dot-only
    names, nothing a path could be made of."""
    return bool(_REF.fullmatch(ref)) and ref not in (".", "..")


OutputLengths = Literal["fixed", "natural", "workload"]
"""``fixed``: every request runs to ``max_tokens`` (ignore_eos); ``natural``: the model stops
(``max_tokens`` caps it); ``workload``: each request's ``output_tokens`` from the sample is
its max_tokens, with ignore_eos (requests without one use ``max_tokens``)."""


Arrivals = Literal["poisson", "constant"]
"""How a rate point's requests arrive (``benchmark.arrivals``, ``bench --arrivals``):
exponential gaps (a Poisson process) or evenly spaced."""


# --- matrix cells ---------------------------------------------------------------------------

SYNTHETIC_WORKLOAD = "synthetic"
"""The workload label of today's filler prompts: the default, and absent from point keys."""


DEADLINE_STOP: Final = "finish_by deadline"
"""The stop reason a sweep records when ``schedule.finish_by`` arrives (its summary's
``stopped``): the runner writes it, the answers read it."""

JsonObject = dict[str, Any]
"""A JSON object as the edges (CLI, API, webhook, stored JSON columns) write and read it."""

RestorePolicy = Literal["as-found", "stopped", "leave"]
"""How a sweep leaves each unit at its end (``policy.restore``): running iff it was, stopped,
or on the last config for inspection."""


def plural(count: int, noun: str) -> str:
    """``1 restart``, ``3 restarts``: a count with its noun, as every message writes it."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def format_rate(rate: float) -> str:
    """A rate as keys and labels write it: ``2`` for 2.0, ``0.5`` for 0.5 (shortest exact)."""
    return f"{rate:g}" if float(f"{rate:g}") == rate else repr(rate)


@dataclass(frozen=True, slots=True)
class OfferedLoad:
    """What an open-loop cell's schedule really offered and what the client really sent
    (req/s), as its points measured them: a seeded Poisson schedule draws its arrivals by
    chance, so 43 in 8 s is 5.38 req/s at a nominal ``rate: 4``."""

    offered: float
    sent: float | None = None

    @property
    def words(self) -> str:
        """``5.38 offered, 5.31 sent``: how every label says it."""
        sent = "" if self.sent is None else f", {self.sent:.3g} sent"
        return f"{self.offered:.3g} offered{sent}"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def _measured(nominal: str, measured: OfferedLoad | None) -> str:
    """``nominal`` with what was measured in brackets, or marked nominal without it."""
    return f"nominal {nominal}" if measured is None else f"{nominal} ({measured.words})"


@dataclass(frozen=True, slots=True)
class MatrixCell:
    """One point a trial measures: a context at a closed-loop ``concurrency`` (that many
    requests in flight) or at an open-loop ``rate`` (requests per second), on a workload."""

    context: int
    concurrency: int | None = None
    rate: float | None = None
    workload: str = SYNTHETIC_WORKLOAD

    def __post_init__(self) -> None:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("a cell has a concurrency or a rate, not both")

    @property
    def open_loop(self) -> bool:
        return self.rate is not None

    @property
    def load(self) -> str:
        """``c32`` for a closed-loop cell, ``8 req/s`` for an open-loop one."""
        return f"c{self.concurrency}" if self.rate is None else f"{format_rate(self.rate)} req/s"

    def measured_load(self, measured: OfferedLoad | None) -> str:
        """The load as a label beside measured values says it: ``c32``; at an open-loop cell
        ``4 req/s (5.38 offered, 5.31 sent)`` where its points measured what the schedule
        offered, else ``nominal 4 req/s``, so a nominal rate never reads as what was offered."""
        if self.rate is None:
            return self.load
        return _measured(self.load, measured)

    def measured_words(self, measured: OfferedLoad | None) -> str:
        """:attr:`words` with :meth:`measured_load`'s rates: ``context 2048 / rate 4 req/s
        (5.38 offered, 5.31 sent)``, ``context 2048 / nominal rate 4 req/s``."""
        if self.rate is None:
            return self.words
        text = f"context {self.context} / {_measured(f'rate {self.load}', measured)}"
        return text if self.workload == SYNTHETIC_WORKLOAD else f"{text}, workload {self.workload}"

    @property
    def words(self) -> str:
        """``context 4096 / concurrency 32`` (``/ rate 8 req/s``; ``, workload W`` when not
        synthetic): how messages name the cell as the sweep file sets it (beside measured
        values, :meth:`measured_words`)."""
        load = (
            f"concurrency {self.concurrency}"
            if self.rate is None
            else f"rate {format_rate(self.rate)} req/s"
        )
        text = f"context {self.context} / {load}"
        return text if self.workload == SYNTHETIC_WORKLOAD else f"{text}, workload {self.workload}"

    def as_fields(self) -> dict[str, Any]:
        """The cell as a JSON object's fields (every key, null where it does not apply)."""
        return {
            "context": self.context,
            "concurrency": self.concurrency,
            "rate": self.rate,
            "workload": self.workload,
        }

    def sort_key(self) -> tuple[str, int, int, float]:
        """Workload, context, closed before open, then the load: the order reports list."""
        load = self.rate if self.rate is not None else float(self.concurrency or 0)
        return (self.workload, self.context, int(self.open_loop), load)

    def __lt__(self, other: MatrixCell) -> bool:
        return self.sort_key() < other.sort_key()

    def to_json(self) -> list[Any]:
        """``[context, concurrency]`` for a synthetic closed cell (the stored plans' shape
        before rates and workloads); an object otherwise."""
        if self.rate is None and self.workload == SYNTHETIC_WORKLOAD:
            return [self.context, self.concurrency]
        return [{"context": self.context, "concurrency": self.concurrency, "rate": self.rate,
                 "workload": self.workload}]

    @classmethod
    def from_json(cls, data: Any) -> MatrixCell:
        if isinstance(data, list) and len(data) == 2:
            return cls(int(data[0]), int(data[1]))
        item = data[0] if isinstance(data, list) and len(data) == 1 else data
        if not isinstance(item, Mapping):
            raise ValueError(f"not a matrix cell: {data!r}")
        concurrency, rate = item.get("concurrency"), item.get("rate")
        return cls(
            context=int(item["context"]),
            concurrency=None if concurrency is None else int(concurrency),
            rate=None if rate is None else float(rate),
            workload=str(item.get("workload") or SYNTHETIC_WORKLOAD),
        )


@dataclass(frozen=True, slots=True)
class LaunchOverlay:
    """What a trial's launch adds beyond its knobs: a speculative schedule in the engine's own
    form. ``json`` adds keys to a JSON-valued flag (vLLM's ``--speculative-config`` gains
    ``num_speculative_tokens_per_batch_size``), ``flags`` adds flags (None: a bare switch),
    ``files`` adds launch files by the flag that names each (SGLang's
    ``--speculative-adaptive-config``), and ``refused_line`` is the start of the log line with
    which the engine says it ignored them and runs its static settings (the trial then fails
    ``invalid-config``: a static run is never measured as the schedule)."""

    json: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    flags: Mapping[str, str | None] = field(default_factory=dict)
    files: Mapping[str, str] = field(default_factory=dict)
    refused_line: str = ""

    def __hash__(self) -> int:
        """By content (its mappings are not hashable): a plan holding it keys a cache."""
        return hash(json.dumps(self.to_json(), sort_keys=True, separators=(",", ":")))

    def to_json(self) -> dict[str, Any]:
        return {
            "json": {flag: dict(keys) for flag, keys in self.json.items()},
            "flags": dict(self.flags),
            "files": dict(self.files),
            "refused_line": self.refused_line,
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> LaunchOverlay:
        return cls(
            json={str(flag): dict(keys) for flag, keys in (data.get("json") or {}).items()},
            flags={str(flag): None if v is None else str(v)
                   for flag, v in (data.get("flags") or {}).items()},
            files={str(flag): str(text) for flag, text in (data.get("files") or {}).items()},
            refused_line=str(data.get("refused_line") or ""),
        )  # fmt: skip
