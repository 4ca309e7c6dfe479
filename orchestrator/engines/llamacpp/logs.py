"""What ``llama-server``'s log lines say (llama.cpp as vendored by llama-cpp-python 0.3.36).

llama.cpp logs through ``common_log`` to stderr, without colours when stderr is no terminal
(as under systemd); this build puts the time since start and a level letter before each
message (``0.08.252.715 I slot print_timing: ...``; ``--no-log-prefix`` and
``--no-log-timestamps`` drop them), so every pattern here is searched, never anchored at the
line's start. The lines read:

- ``slot print_timing: id  0 | task 5 | draft acceptance = 0.75000 (  108 accepted /   144
  generated), mean len =  7.00`` (``server-context.cpp``, when a request that drafted
  finishes): one request's acceptance. ``mean len`` is ``1 + accepted / verify steps``, the
  same definition as the ``/metrics`` counters', so it is a :class:`DecodeEvent`'s
  ``accept_len`` (each line weighs alike: one request);
- ``srv  llama_server: model loaded`` once the model is loaded and ``/health`` answers 200
  (the ready line), after ``srv  llama_server: listening on ...``;
- at start, the models it loads (``srv    load_model: loading model '/m/target.gguf'``,
  ``common_speculative_init_result: loading draft model '/m/draft.gguf'``) and its slots
  (``srv    load_model: initializing, n_slots = 1, n_ctx_slot = 2048, kv_unified = 'false'``):
  init events, kept in the provenance (``/props`` names the target but never the draft);
- the texts a failed start ends with (``server.cpp``, ``common/arg.cpp``, ``server-http.cpp``,
  ``server-context.cpp``, the model loader), read into the causes of :data:`FAILURES`.
"""

from __future__ import annotations

import re

from orchestrator.engines.base import (
    DecodeEvent,
    FieldValue,
    InitEvent,
    LinePrefix,
    LogEvent,
    ReadyEvent,
)
from orchestrator.engines.shared import failure_event, first_failure
from orchestrator.types import FailureCause

NO_PREFIX = LinePrefix(timestamp=None, ranks={})

_ACCEPTANCE = re.compile(
    r"\bdraft acceptance = (?P<rate>[0-9.]+) \(\s*(?P<accepted>\d+) accepted /\s*"
    r"(?P<drafted>\d+) generated\), mean len =\s*(?P<mean>[0-9.]+)"
)
_SLOT = re.compile(r"\bid\s+(?P<slot>\d+) \| task (?P<task>-?\d+) \|")
_READY = re.compile(r"\bsrv\s+\S+: model loaded\s*$")
_LOADING = re.compile(r"\bloading (?P<which>draft )?model '(?P<path>[^']*)'")
_SLOTS = re.compile(
    r"\bload_model: initializing, n_slots = (?P<n_slots>\d+), n_ctx_slot = (?P<n_ctx>\d+)"
)

FAILURES: tuple[tuple[FailureCause, re.Pattern[str]], ...] = (
    # The CPU or GPU backend could not allocate the model's or the KV cache's buffers.
    (
        "oom",
        re.compile(
            r"failed to allocate[^\n]*buffer[^\n]*|unable to allocate[^\n]*"
            r"|cudaMalloc failed: out of memory[^\n]*|out of memory[^\n]*",
            re.I,
        ),
    ),
    # server-http.cpp: bind() failed.
    ("port-in-use", re.compile(r"couldn't bind HTTP server socket[^\n]*")),
    # common/arg.cpp: an unknown flag, a removed one, a bad value or speculative type; thrown
    # as std::invalid_argument, printed, and llama-server exits 1 before it loads anything.
    (
        "bad-flag",
        re.compile(
            r"error: invalid argument: \S+|error while handling argument \"[^\"]+\": [^\n]*"
            r"|error while handling environment variable \"[^\"]+\": [^\n]*"
            r"|error: unknown value for [^\n]*|expected value for argument[^\n]*"
        ),
    ),
    # The model or the draft is missing, unreadable or no GGUF file: the config cannot run.
    (
        "invalid-config",
        re.compile(
            r"failed to load draft model[^\n]*|failed to load model[^\n]*"
            r"|failed to initialize speculative decoding context[^\n]*"
            r"|the target and draft vocabs are not compatible[^\n]*"
            r"|gguf_init_from_\w+: (?:failed to open GGUF file[^\n]*|invalid magic[^\n]*"
            r"|failed to read magic[^\n]*)",
        ),
    ),
)
"""Startup-failure texts by cause, the most specific first."""


def classify_failure(text: str) -> tuple[FailureCause, str] | None:
    """The startup-failure cause a line reveals, with the matched text."""
    return first_failure(FAILURES, text)


def _acceptance(message: str) -> DecodeEvent | None:
    found = _ACCEPTANCE.search(message)
    if found is None:
        return None
    accepted, drafted = int(found["accepted"]), int(found["drafted"])
    fields: dict[str, FieldValue] = {
        "accepted": accepted,
        "drafted": drafted,
        "rate": float(found["rate"]),
        "mean len": float(found["mean"]),
    }
    slot = _SLOT.search(message)
    if slot is not None:
        fields["slot"], fields["task"] = int(slot["slot"]), int(slot["task"])
    return DecodeEvent(
        prefix=NO_PREFIX,
        fields=fields,
        accept_len=float(found["mean"]),
        accept_rate=accepted / drafted if drafted else None,
    )


def _init(message: str) -> InitEvent | None:
    loading = _LOADING.search(message)
    if loading is not None:
        kind = "draft_model" if loading["which"] else "model"
        return InitEvent(prefix=NO_PREFIX, fields={"path": loading["path"]}, kind=kind)
    slots = _SLOTS.search(message)
    if slots is not None:
        fields: dict[str, FieldValue] = {
            "n_slots": int(slots["n_slots"]),
            "n_ctx_slot": int(slots["n_ctx"]),
        }
        return InitEvent(prefix=NO_PREFIX, fields=fields, kind="slots")
    return None


def parse_log_line(message: str) -> LogEvent | None:
    """One ``llama-server`` log message (a journald MESSAGE) -> its event, or None."""
    text = message.rstrip()
    event: LogEvent | None = _acceptance(text)
    if event is not None:
        return event
    if _READY.search(text):
        return ReadyEvent(prefix=NO_PREFIX)
    event = _init(text)
    if event is not None:
        return event
    return failure_event(FAILURES, NO_PREFIX, text)


__all__ = ["FAILURES", "classify_failure", "parse_log_line"]
