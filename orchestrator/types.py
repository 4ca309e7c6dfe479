"""The values shared across the layers, defined once (httpx keeps such types in `_types.py`).

Nothing here imports from the rest of the package, so every layer may import it.
"""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum
from typing import Final, Literal

ApiKind = Literal["chat", "generate"]
MetricsMode = Literal["auto", "off"]
"""``server.metrics``: whether each trial's command line gets ``--enable-metrics``."""
"""Which SGLang HTTP API a sweep (or a probe, or the coding anchor) talks to."""

KnobValue = str | int | float | bool | None
"""One knob's value as a sweep file gives it (None: the knob is left out of the command line)."""

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
]
"""Why a trial's attempt failed; docs/architecture.md says what each means for an operator.
``stopped`` (a stop other than cancel took effect mid-trial) and ``host-set-aside`` (the
preflight set the host aside, so its trials never started) are recorded by the runner."""

THROUGHPUT_SCALARS: Final = (
    "requests",
    "requests_ok",
    "errors",
    "truncated",
    "short_outputs",
    "wall_s",
    "input_tokens",
    "output_tokens",
    "output_tok_s",
    "request_decode_tok_s_p50",
    "concurrency_held",
    "concurrency_held_full",
    "client_cpu_fraction",
    "loop_lag_max_s",
    "loop_lag_p99_s",
    "prompt_tokens_min",
    "prompt_tokens_max",
    "prompt_tokens_tolerance",
)
"""A throughput point's scalar metrics, in the order a point's ``metrics`` writes them."""

RATE_SCALARS: Final = (
    "request_s",
    "input_tok_s",
    "achieved_rate",
    "goodput",
    "goodput_fraction",
)
"""The scalars of issue 15's points (open-loop rate points, goodput under a sweep's ``slo``):
requests and input tokens per second, the achieved arrival rate, requests per second meeting
every slo bound, and the share of requests that did. All are maximized. Kept apart from
:data:`THROUGHPUT_SCALARS` until the stored point record (``store/results.py``) carries them,
since that record is built from every name in that tuple."""

LATENCIES: Final = ("ttft", "itl", "tpot", "e2e")
LATENCY_STATS: Final = ("count", "mean_s", "p50_s", "p90_s", "p99_s", "max_s")
"""Each latency is stored flat as ``<latency>_<stat>``: ``ttft_p99_s``, ``itl_p50_s``, ..."""

ANSWER_ONLY_METRICS: Final = ("accept_len", "coding_pass_rate")
SLO_METRICS: Final = ("goodput", "goodput_fraction")
"""Metrics that exist only when the sweep states an ``slo`` (an objective on one needs it)."""
"""What an objective or constraint may name beside a point's stored metrics: the point's
accept length, and passes / problems of the trial's coding anchor."""

_MINIMIZED_SCALARS: Final = frozenset(
    {"errors", "truncated", "short_outputs", "wall_s", "client_cpu_fraction"}
    | {"loop_lag_max_s", "loop_lag_p99_s"}
)


def point_metric_names() -> frozenset[str]:
    """Every numeric metric a throughput point stores, by its stored name."""
    return frozenset(THROUGHPUT_SCALARS) | {
        f"{name}_{stat}" for name in LATENCIES for stat in LATENCY_STATS
    }


def metric_is_minimized(name: str) -> bool:
    """Latencies, errors and wall time are better smaller; rates and lengths better larger."""
    return name in _MINIMIZED_SCALARS or name.split("_", 1)[0] in LATENCIES


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
