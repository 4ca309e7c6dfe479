"""The values shared across the layers, defined once (httpx keeps such types in `_types.py`).

Nothing here imports from the rest of the package, so every layer may import it.
"""

from __future__ import annotations

import hashlib
import re
from enum import StrEnum
from typing import Final, Literal

ApiKind = Literal["chat", "generate"]
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
