"""vLLM's log lines as the orchestrator reads them (vLLM 0.33.0, ``logger.py``,
``v1/spec_decode/metrics.py``, ``v1/metrics/loggers.py``, ``entrypoints/common/startup.py``).

A line is ``{VLLM_LOGGING_PREFIX}(PROCESS pid=N) LEVEL MM-DD HH:MM:SS [file.py:line] message``;
builds before the process tag wrote ``LEVEL MM-DD HH:MM:SS [file.py:line] message``, and
uvicorn's own lines are ``INFO:     message``. Either part may be missing; nothing is read by
position, and fields are read by name:

- ``SpecDecoding metrics: Mean acceptance length: 2.31, Accepted throughput: ...,
  Per-position acceptance rate: 0.764, 0.319, Avg Draft acceptance rate: 41.0%`` (0.33's
  order; older builds put ``Draft acceptance rate`` first). Without a usable mean acceptance
  length (``nan``, or an old line that had none) the line says nothing the orchestrator reads.
- ``Engine 000: Avg prompt throughput: ..., Running: N reqs, Waiting: N reqs, ...``: the
  interval's load, a decode event without an accept length.
- ``non-default args: {...}`` (a Python dict repr) and the version: the record of what the
  process was started with, kept in the provenance. By default vLLM writes the version and
  the model in a logo, one line each (``... █ ▀▄▀ █  version 0.32.0``, ``... █  model
  PATH``: kinds ``vllm_version`` and ``vllm_model``); with ``VLLM_DISABLE_LOG_LOGO=1`` as
  one line, ``vLLM server version V, serving model M``.
- startup failures, by vLLM's exact texts (:data:`FAILURES`).
"""

from __future__ import annotations

import ast
import json
import math
import re
from collections.abc import Mapping
from typing import Any

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

_PROCESS = re.compile(r"^\((?P<proc>[^()]*?)\s*pid=(?P<pid>\d+)\)\s*")
_LEVEL = re.compile(
    r"^(?P<level>DEBUG|INFO|WARNING|ERROR|CRITICAL)\s+"
    r"(?P<ts>\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)\s+\[(?P<where>[^\]]*)\]\s?"
)
_UVICORN = re.compile(r"^(?:DEBUG|INFO|WARNING|ERROR|CRITICAL):\s+")
_RANK = re.compile(r"(?:_DP|DP)(?P<dp>\d+)|rank=(?P<rank>\d+)|_(?P<worker>\d+)$")

_SPEC = re.compile(r"SpecDecoding metrics:\s*(?P<rest>.*)$")
_THROUGHPUT = re.compile(r"(?:Engine \d+:\s*)?(?P<rest>Avg prompt throughput:.*)$")
# A field starts after ", " with a capitalised name and a colon; the per-position rates
# (numbers after commas) never do, so they stay in their field.
_FIELD_SPLIT = re.compile(r",\s+(?=[A-Z][A-Za-z /()-]*:\s)")
_NUMBER = re.compile(r"^[-+]?(?:\d+(?:\.\d*)?|\.\d+|nan|inf)(?:[eE][-+]?\d+)?", re.I)
_NON_DEFAULT = re.compile(r"non-default args:\s*(?P<args>\{.*\})\s*$")
_VERSION = re.compile(r"\bversion\s+(?P<version>\d+\.\d+[0-9A-Za-z.+-]*)")
_SERVING = re.compile(r"serving model\s+(?P<model>\S+)")
# The logo's third line (``log_version_and_model``, the default form): the model after the art
_LOGO_MODEL = re.compile(r"[█▀▄]\s+model\s+(?P<model>\S+)\s*$")
_READY = re.compile(r"Application startup complete\.")

FAILURES: tuple[tuple[FailureCause, re.Pattern[str]], ...] = (
    (
        "oom",
        re.compile(
            # v1/worker/utils.py request_memory; v1/core/kv_cache_planning.py (both checks)
            r"Free memory on device \S+ \([^)]*\) on startup is less than .*"
            r"|No available memory for the cache blocks\..*"
            r"|To serve at least one request with the model's max seq len .*"
            r"|CUDA out of memory.*|torch\.OutOfMemoryError.*|CUDA error: out of memory.*"
            # the CPU backend's KV cache (VLLM_CPU_KVCACHE_SPACE) past the node's free RAM
            r"|Available memory on node \S+ \([^)]*\) on kv cache allocation is less than "
            r"requested memory for kv.*",
        ),
    ),
    (
        "port-in-use",
        re.compile(r"\[Errno 98\][^\n]*|address already in use", re.I),
    ),
    (
        "bad-flag",
        re.compile(
            r"error: unrecognized arguments:.*|error: ambiguous option:.*"
            r"|error: argument [^\s:]+:.*"
        ),
    ),
    (
        "invalid-config",
        re.compile(
            # config/vllm.py _set_max_num_scheduled_tokens: the speculative budget leaves none
            r"max_num_scheduled_tokens is set to -?\d+ based on the speculative decoding "
            r"settings, which does not allow any tokens to be scheduled.*"
            r"|VllmConfig does not have enough slots to schedule a token.*"
            r"|\b(?:ValueError|AssertionError|ValidationError|TypeError)\b:.*"
            r"|validation errors? for \w+.*",
        ),
    ),
    (
        # v1/engine/utils.py: the API server's line once an engine core died at startup; its
        # cause is in the engine core's earlier lines, read first when the journal kept them.
        "exited",
        re.compile(r"Engine core initialization failed\. See root cause above\..*"),
    ),
)
"""Checked in order, the most specific cause first (a memory ``ValueError`` is ``oom``)."""


def split_prefix(message: str) -> tuple[LinePrefix, str]:
    """Separate ``(PROCESS pid=N) LEVEL MM-DD HH:MM:SS [file:line]`` (any part present) from
    the message body. ``ranks`` holds what the process name says (``DP`` of
    ``EngineCore_DP1``, a worker's rank) and ``pid``."""
    text = message.strip()
    ranks: dict[str, int] = {}
    process = _PROCESS.match(text)
    if process is not None:
        ranks["pid"] = int(process.group("pid"))
        for found in _RANK.finditer(process.group("proc")):
            for name, key in (("dp", "DP"), ("rank", "rank"), ("worker", "rank")):
                if found.group(name) is not None:
                    ranks[key] = int(found.group(name))
        text = text[process.end() :]
    timestamp = None
    level = _LEVEL.match(text)
    if level is not None:
        timestamp = level.group("ts")
        text = text[level.end() :]
    else:
        text = _UVICORN.sub("", text, count=1)
    return LinePrefix(timestamp=timestamp, ranks=ranks), text


def _scalar(text: str) -> FieldValue:
    """``2.31`` -> 2.31, ``41.0%`` -> 41.0, ``100 tokens`` -> 100; a list of rates stays text."""
    value = text.strip()
    number = _NUMBER.match(value)
    if number is None or "," in value:
        return value
    word = number.group(0)
    try:
        return int(word)
    except ValueError:
        return float(word)


def parse_fields(body: str) -> dict[str, FieldValue]:
    """``Name: value, Name: value`` -> {name: value}, names as vLLM writes them."""
    fields: dict[str, FieldValue] = {}
    for part in _FIELD_SPLIT.split(body.strip()):
        name, sep, value = part.partition(":")
        if sep and name.strip():
            fields[name.strip()] = _scalar(value)
    return fields


def _finite(fields: Mapping[str, FieldValue], *names: str) -> float | None:
    for name in names:
        value = fields.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value) if math.isfinite(value) else None
    return None


def _count(fields: Mapping[str, FieldValue], name: str) -> int | None:
    value = _finite(fields, name)
    return None if value is None else int(value)


def _spec_decoding(prefix: LinePrefix, rest: str) -> DecodeEvent | None:
    fields = parse_fields(rest)
    accept_len = _finite(fields, "Mean acceptance length")
    if accept_len is None:
        return None  # nothing to read: speculation drafted nothing, or an old line
    rate = _finite(fields, "Avg Draft acceptance rate", "Draft acceptance rate")
    return DecodeEvent(
        prefix=prefix,
        fields=fields,
        accept_len=accept_len,
        accept_rate=None if rate is None else rate / 100.0,
    )


def _throughput(prefix: LinePrefix, rest: str) -> DecodeEvent:
    fields = parse_fields(rest)
    usage = next((v for k, v in fields.items() if k.endswith("KV cache usage")), None)
    return DecodeEvent(
        prefix=prefix,
        fields=fields,
        running_req=_count(fields, "Running"),
        queue_req=_count(fields, "Waiting"),
        gen_throughput=_finite(fields, "Avg generation throughput"),
        token_usage=usage / 100.0 if isinstance(usage, int | float) else None,
    )


def _flat(args: Mapping[str, Any]) -> dict[str, FieldValue]:
    """The non-default args as provenance fields: a dict value (``speculative_config``) by
    dotted keys, anything else that is not a scalar as JSON text."""
    flat: dict[str, FieldValue] = {}
    for key, value in args.items():
        if isinstance(value, dict):
            for inner, item in value.items():
                flat[f"{key}.{inner}"] = _field_value(item)
        else:
            flat[str(key)] = _field_value(value)
    return flat


def _field_value(value: Any) -> FieldValue:
    if isinstance(value, bool | int | float | str):
        return value
    return json.dumps(value, default=str, sort_keys=True)


def non_default_args(text: str) -> dict[str, Any] | None:
    """The dict of a ``non-default args: {...}`` message (a Python repr), or None."""
    found = _NON_DEFAULT.search(text)
    if found is None:
        return None
    try:
        parsed = ast.literal_eval(found.group("args"))
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return {"unparsed": found.group("args")[:4000]}
    return parsed if isinstance(parsed, dict) else None


def classify_failure(text: str) -> tuple[FailureCause, str] | None:
    """The startup-failure cause a line reveals, with the matched text."""
    return first_failure(FAILURES, text)


def parse_log_line(message: str) -> LogEvent | None:
    """One vLLM log message (a journald MESSAGE, prefix or not) -> its event, or None."""
    prefix, body = split_prefix(message)
    spec = _SPEC.search(body)
    if spec is not None:
        return _spec_decoding(prefix, spec.group("rest"))
    throughput = _THROUGHPUT.search(body)
    if throughput is not None:
        return _throughput(prefix, throughput.group("rest"))
    if _READY.search(body):
        return ReadyEvent(prefix=prefix)
    args = non_default_args(body)
    if args is not None:
        return InitEvent(prefix=prefix, fields=_flat(args), kind="non_default_args")
    version = _VERSION.search(body)
    if version is not None and ("vLLM" in body or "▀" in body or "█" in body):
        fields: dict[str, FieldValue] = {"version": version.group("version")}
        serving = _SERVING.search(body)
        if serving is not None:
            fields["model"] = serving.group("model")
        return InitEvent(prefix=prefix, fields=fields, kind="vllm_version")
    logo_model = _LOGO_MODEL.search(body)
    if logo_model is not None:
        return InitEvent(prefix=prefix, fields={"model": logo_model["model"]}, kind="vllm_model")
    return failure_event(FAILURES, prefix, body)


__all__ = ["FAILURES", "classify_failure", "non_default_args", "parse_fields", "parse_log_line"]
