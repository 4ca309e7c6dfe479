"""Everything SGLang-specific: log lines, the running server's config check, the probe, provenance.

The formats here are SGLang's real ones (``shared/FACTS.md``): the orchestrator meets them on
hosts no test can run, so lines are parsed by field name, never by position, and every prefix
variant SGLang emits (timestamps with or without milliseconds, DP/PP/TP/EP rank tags) or journald
keeps (none) is accepted.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, NamedTuple

import aiohttp

from orchestrator.host.dropin import format_knob_value
from orchestrator.host.gpu import GpuIdentity
from orchestrator.types import ApiKind, FailureCause, KnobValue

# --------------------------------------------------------------------------------------------
# Log lines
# --------------------------------------------------------------------------------------------

FieldValue = float | int | bool | str

# `[2026-10-30 12:00:00.123 DP0 TP3] message`; every part after the seconds is optional.
_PREFIX = re.compile(
    r"^\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)"
    r"(?P<tags>(?: [A-Z]+\d+)*)\]\s?"
)
_TAG = re.compile(r"([A-Z]+)(\d+)")
_BATCH = re.compile(r"^(?P<kind>Decode|Prefill) batch(?: \[(?P<iter>\d+)\])?[.,]\s*")
# `name: value` pairs; names may hold spaces, '#', '-', '/' and parentheses.
_FIELD = re.compile(r"\s*(?P<name>[^:,][^:,]*?):\s*(?P<value>[^,]*?)\s*(?:,|$)")
_READY = re.compile(r"The server is fired up and ready to roll!", re.I)
_DFLASH_INIT = re.compile(r"Initialized DFLASH draft runner\.?\s*(?P<rest>.*)$", re.I)
_KEY_VALUE = re.compile(r"(?P<key>[A-Za-z_][A-Za-z0-9_]*)=(?P<value>[^,]*)")

# Checked in order: the most specific cause first (a warmup error may be an OOM).
_FAILURES: tuple[tuple[FailureCause, re.Pattern[str]], ...] = (
    (
        "oom",
        re.compile(
            r"CUDA error: out of memory|out of memory|OutOfMemoryError"
            r"|cudnn_status_alloc_failed|std::bad_alloc|Not enough memory",
            re.I,
        ),
    ),
    ("port-in-use", re.compile(r"\[Errno 98\][^\n]*|address already in use", re.I)),
    (
        "bad-flag",
        re.compile(r"error: unrecognized arguments:.*|error: argument [^\s:]+:.*", re.I),
    ),
    ("warmup-failed", re.compile(r"Initialization failed\. warmup error.*", re.I)),
    ("invalid-config", re.compile(r"\bValueError\b.*", re.I)),
)


@dataclass(frozen=True, slots=True)
class LinePrefix:
    """SGLang's ``[timestamp ranks]`` prefix, when the message still carries it."""

    timestamp: str | None
    ranks: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class DecodeEvent:
    """A ``Decode batch`` interval line. ``accept_len`` is None when speculative decoding is off."""

    prefix: LinePrefix
    fields: Mapping[str, FieldValue]
    running_req: int | None
    queue_req: int | None
    gen_throughput: float | None
    accept_len: float | None
    accept_rate: float | None
    token_usage: float | None
    num_tokens: int | None
    graph: bool | None
    graph_kind: str | None
    forward_iter: int | None
    kind: Literal["decode"] = "decode"


@dataclass(frozen=True, slots=True)
class PrefillEvent:
    prefix: LinePrefix
    fields: Mapping[str, FieldValue]
    new_seq: int | None
    new_token: int | None
    cached_token: int | None
    running_req: int | None
    queue_req: int | None
    input_throughput: float | None
    forward_iter: int | None
    kind: Literal["prefill"] = "prefill"


@dataclass(frozen=True, slots=True)
class ReadyEvent:
    """The ready line: logged only after SGLang's own warmup generation succeeded."""

    prefix: LinePrefix
    kind: Literal["ready"] = "ready"


@dataclass(frozen=True, slots=True)
class DflashInitEvent:
    prefix: LinePrefix
    fields: Mapping[str, FieldValue]
    block_size: int | None
    draft_window_size: int | None
    compact_cache: bool | None
    kind: Literal["dflash_init"] = "dflash_init"


@dataclass(frozen=True, slots=True)
class FailureEvent:
    """A startup failure marker; ``matched`` is the text that gave the cause away."""

    prefix: LinePrefix
    cause: FailureCause
    matched: str
    message: str
    kind: Literal["failure"] = "failure"


LogEvent = DecodeEvent | PrefillEvent | ReadyEvent | DflashInitEvent | FailureEvent


def split_prefix(message: str) -> tuple[LinePrefix, str]:
    """Separate SGLang's optional ``[ts ranks]`` prefix from the message body."""
    text = message.strip()
    found = _PREFIX.match(text)
    if found is None:
        return LinePrefix(timestamp=None, ranks={}), text
    ranks = {name: int(number) for name, number in _TAG.findall(found.group("tags"))}
    return LinePrefix(timestamp=found.group("ts"), ranks=ranks), text[found.end() :]


def _scalar(text: str) -> FieldValue:
    if text in ("True", "False"):
        return text == "True"
    try:
        return int(text)
    except ValueError:
        pass
    try:
        return float(text)
    except ValueError:
        return text


def parse_fields(body: str) -> dict[str, FieldValue]:
    """``#running-req: 4, token usage: 0.05, ...`` -> {name: value}, names as SGLang writes them."""
    return {
        found.group("name").strip(): _scalar(found.group("value"))
        for found in _FIELD.finditer(body)
        if found.group("name").strip()
    }


def _number(fields: Mapping[str, FieldValue], *names: str) -> float | None:
    for name in names:
        value = fields.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    return None


def _integer(fields: Mapping[str, FieldValue], *names: str) -> int | None:
    value = _number(fields, *names)
    return None if value is None else int(value)


def _graph(fields: Mapping[str, FieldValue]) -> tuple[bool | None, str | None]:
    for name, value in fields.items():
        if name.endswith(" graph") and isinstance(value, bool):
            return value, name.removesuffix(" graph")
    return None, None


def _decode(prefix: LinePrefix, body: str, forward_iter: int | None) -> DecodeEvent:
    fields = parse_fields(body)
    graph, graph_kind = _graph(fields)
    return DecodeEvent(
        prefix=prefix,
        fields=fields,
        running_req=_integer(fields, "#running-req"),
        queue_req=_integer(fields, "#queue-req"),
        gen_throughput=_number(fields, "gen throughput (token/s)"),
        accept_len=_number(fields, "accept len"),
        accept_rate=_number(fields, "accept rate"),
        token_usage=_number(fields, "token usage", "full token usage"),
        num_tokens=_integer(fields, "#token", "#full token"),
        graph=graph,
        graph_kind=graph_kind,
        forward_iter=forward_iter,
    )


def _prefill(prefix: LinePrefix, body: str, forward_iter: int | None) -> PrefillEvent:
    fields = parse_fields(body)
    return PrefillEvent(
        prefix=prefix,
        fields=fields,
        new_seq=_integer(fields, "#new-seq"),
        new_token=_integer(fields, "#new-token"),
        cached_token=_integer(fields, "#cached-token"),
        running_req=_integer(fields, "#running-req"),
        queue_req=_integer(fields, "#queue-req"),
        input_throughput=_number(fields, "input throughput (token/s)"),
        forward_iter=forward_iter,
    )


def _dflash_init(prefix: LinePrefix, rest: str) -> DflashInitEvent:
    fields: dict[str, FieldValue] = {
        found.group("key"): _scalar(found.group("value").strip())
        for found in _KEY_VALUE.finditer(rest)
    }
    compact = fields.get("compact_cache")
    return DflashInitEvent(
        prefix=prefix,
        fields=fields,
        block_size=_integer(fields, "block_size"),
        draft_window_size=_integer(fields, "draft_window_size"),
        compact_cache=compact if isinstance(compact, bool) else None,
    )


def classify_failure(text: str) -> tuple[FailureCause, str] | None:
    """The startup-failure cause a line reveals, with the matched text (case-insensitive)."""
    for cause, pattern in _FAILURES:
        found = pattern.search(text)
        if found is not None:
            return cause, found.group(0).strip()
    return None


def parse_log_line(message: str) -> LogEvent | None:
    """One SGLang log message (a journald MESSAGE, prefix or not) -> its event, or None."""
    prefix, body = split_prefix(message)
    batch = _BATCH.match(body)
    if batch is not None:
        forward_iter = int(batch.group("iter")) if batch.group("iter") else None
        rest = body[batch.end() :]
        if batch.group("kind") == "Decode":
            return _decode(prefix, rest, forward_iter)
        return _prefill(prefix, rest, forward_iter)
    if _READY.search(body):
        return ReadyEvent(prefix=prefix)
    dflash = _DFLASH_INIT.search(body)
    if dflash is not None:
        return _dflash_init(prefix, dflash.group("rest"))
    failure = classify_failure(body)
    if failure is not None:
        cause, matched = failure
        return FailureEvent(prefix=prefix, cause=cause, matched=matched, message=body)
    return None


# --------------------------------------------------------------------------------------------
# Knobs -> /server_info keys, and the check of the running server's config
# --------------------------------------------------------------------------------------------

# Flags whose /server_info key is not the flag name with '-' -> '_'.
_WINDOW_OLD_FLAG = "--speculative-dflash-draft-window-size"
_WINDOW_NEW_KEY = "speculative_draft_window_size"
_WINDOW_OLD_KEY = "speculative_dflash_draft_window_size"
_FLAG_ALIASES = {
    "--speculative-dflash-block-size": "speculative_num_draft_tokens",
}
_ALGORITHM_KEY = "speculative_algorithm"
_ALGORITHM_REPORTED_AS = {"NEXTN": "EAGLE"}


def version_tuple(version: str) -> tuple[int, ...]:
    """``0.5.12rc1`` / ``0.5.11.post2`` -> (0, 5, 12) / (0, 5, 11): the numeric release part."""
    parts: list[int] = []
    for piece in version.strip().lstrip("v").split("."):
        digits = re.match(r"\d+", piece)
        if digits is None:
            break
        parts.append(int(digits.group(0)))
        if digits.end() != len(piece):
            break
    return tuple(parts)


def server_info_keys(flag: str, *, sglang_version: str | None = None) -> tuple[str, ...]:
    """The ``/server_info`` keys a flag may resolve to, the likeliest first.

    Default: strip ``--`` and turn ``-`` into ``_``. The draft-window flag's old spelling
    resolves to ``speculative_dflash_draft_window_size`` on 0.5.11 and to
    ``speculative_draft_window_size`` from 0.5.12; with no version both are candidates.
    """
    if flag in _FLAG_ALIASES:
        return (_FLAG_ALIASES[flag],)
    if flag == _WINDOW_OLD_FLAG or flag == "--" + _WINDOW_NEW_KEY.replace("_", "-"):
        if sglang_version is not None and version_tuple(sglang_version) < (0, 5, 12):
            return (_WINDOW_OLD_KEY, _WINDOW_NEW_KEY)
        return (_WINDOW_NEW_KEY, _WINDOW_OLD_KEY)
    return (flag.lstrip("-").replace("-", "_"),)


@dataclass(frozen=True, slots=True)
class KnobResolution:
    """One flag knob's value and where the running server reports it."""

    knob: str
    flag: str
    value: KnobValue
    server_info_keys: tuple[str, ...]


def resolve_flag_knob(
    knob: str,
    flag: str,
    value: KnobValue,
    *,
    server_info_key: str | None = None,
    sglang_version: str | None = None,
) -> KnobResolution:
    """A knob's expected ``/server_info`` entry; an explicit key from the knob map wins."""
    keys = (
        (server_info_key,)
        if server_info_key
        else server_info_keys(flag, sglang_version=sglang_version)
    )
    return KnobResolution(knob=knob, flag=flag, value=value, server_info_keys=keys)


@dataclass(frozen=True, slots=True)
class EnvKnob:
    """One environment knob; ``value`` None means the variable must be absent."""

    knob: str
    name: str
    value: KnobValue


@dataclass(frozen=True, slots=True)
class ConfigDifference:
    """A knob whose running value is not the asked one; ``where`` is its source."""

    knob: str
    where: str
    expected: Any
    actual: Any
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ConfigCheck:
    """Mismatches fail a trial; ``overridden`` (SGLang forced the value) are only warnings."""

    mismatches: tuple[ConfigDifference, ...]
    overridden: tuple[ConfigDifference, ...]

    @property
    def ok(self) -> bool:
        return not self.mismatches


def _normalise(value: Any, key: str | None = None) -> Any:
    """Compare knob values as SGLang does: numbers by value, the algorithm upper-cased."""
    if isinstance(value, str):
        text = value.strip()
        if key == _ALGORITHM_KEY:
            upper = text.upper()
            return _ALGORITHM_REPORTED_AS.get(upper, upper)
        if text in ("True", "true", "False", "false"):
            return text.lower() == "true"
        scalar = _scalar(text)
        return float(scalar) if isinstance(scalar, int | float) else scalar
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    return value


def _forced_by_server(key: str, actual: Any, server_info: Mapping[str, Any]) -> str | None:
    """Why SGLang itself set ``key`` to ``actual`` regardless of the flag, or None."""
    algorithm = _normalise(server_info.get(_ALGORITHM_KEY), _ALGORITHM_KEY)
    if (
        algorithm == "DFLASH"
        and key in ("speculative_num_steps", "speculative_eagle_topk")
        and _normalise(actual) == 1.0
    ):
        return "DFLASH forces speculative_num_steps = speculative_eagle_topk = 1"
    steps = _normalise(server_info.get("speculative_num_steps"))
    if (
        key == "speculative_num_draft_tokens"
        and _normalise(server_info.get("speculative_eagle_topk")) == 1.0
        and isinstance(steps, float)
        and _normalise(actual) == steps + 1
    ):
        return "with speculative_eagle_topk 1 SGLang forces draft tokens = steps + 1"
    return None


def check_server_config(
    server_info: Mapping[str, Any],
    flags: Sequence[KnobResolution],
    env: Sequence[EnvKnob],
    process_environ: Mapping[str, str],
) -> ConfigCheck:
    """Prove the running server took the trial's config: flags by ``/server_info``, env by
    the main process's environment (``/proc/<MainPID>/environ``)."""
    mismatches: list[ConfigDifference] = []
    overridden: list[ConfigDifference] = []
    for knob in flags:
        if knob.value is None:
            continue  # the flag is left out: the server's default applies
        key = next((k for k in knob.server_info_keys if k in server_info), None)
        if key is None:
            mismatches.append(
                ConfigDifference(
                    knob.knob,
                    f"server_info[{knob.server_info_keys[0]}]",
                    knob.value,
                    None,
                    "key missing from /server_info",
                )
            )
            continue
        actual = server_info[key]
        if _normalise(knob.value, key) == _normalise(actual, key):
            continue
        where = f"server_info[{key}]"
        forced = _forced_by_server(key, actual, server_info)
        if forced is not None:
            overridden.append(ConfigDifference(knob.knob, where, knob.value, actual, forced))
        else:
            mismatches.append(ConfigDifference(knob.knob, where, knob.value, actual))
    for variable in env:
        actual_env = process_environ.get(variable.name)
        # The same text apply_knobs wrote into the drop-in's Environment= line.
        expected_env = None if variable.value is None else format_knob_value(variable.value)
        if actual_env != expected_env:
            mismatches.append(
                ConfigDifference(
                    variable.knob, f"environ[{variable.name}]", expected_env, actual_env
                )
            )
    return ConfigCheck(mismatches=tuple(mismatches), overridden=tuple(overridden))


def parse_proc_environ(data: bytes) -> dict[str, str]:
    """``/proc/<pid>/environ`` (NUL-separated ``K=V``) -> dict; odd bytes replaced, not fatal."""
    environ: dict[str, str] = {}
    for item in data.split(b"\0"):
        if not item:
            continue
        name, sep, value = item.decode("utf-8", errors="replace").partition("=")
        if sep:
            environ[name] = value
    return environ


# --------------------------------------------------------------------------------------------
# Readiness probe: a real generation
# --------------------------------------------------------------------------------------------

PROBE_PROMPT = "Count from one to five."
PROBE_MAX_TOKENS = 8


class ProbeRequest(NamedTuple):
    path: str
    body: dict[str, Any]


def build_probe_request(
    api: ApiKind, model: str | None, *, max_tokens: int = PROBE_MAX_TOKENS
) -> ProbeRequest:
    """A small deterministic generation (temperature 0), not streamed: usage counts the tokens."""
    if api == "chat":
        body: dict[str, Any] = {
            "messages": [{"role": "user", "content": PROBE_PROMPT}],
            "max_tokens": max_tokens,
            "temperature": 0,
            "stream": False,
        }
        if model:
            body["model"] = model
        return ProbeRequest("/v1/chat/completions", body)
    return ProbeRequest(
        "/generate",
        {
            "text": PROBE_PROMPT,
            "sampling_params": {"max_new_tokens": max_tokens, "temperature": 0},
            "stream": False,
        },
    )


def _as_int(value: Any) -> int:
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return int(value)
    return 0


def probe_generated_tokens(api: ApiKind, response: Any) -> int:
    """Tokens the probe generated, from ``usage`` / ``meta_info`` (never counted by chunks)."""
    if api == "chat":
        if not isinstance(response, dict):
            return 0
        usage = response.get("usage")
        return _as_int(usage.get("completion_tokens")) if isinstance(usage, dict) else 0
    items = response if isinstance(response, list) else [response]
    total = 0
    for item in items:
        if isinstance(item, dict) and isinstance(item.get("meta_info"), dict):
            total += _as_int(item["meta_info"].get("completion_tokens"))
    return total


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One probe: ``ok`` only when HTTP 200 and tokens were generated."""

    ok: bool
    tokens: int
    status: int | None
    elapsed_s: float
    error: str | None = None
    excerpt: str = ""


async def probe_generation(
    session: aiohttp.ClientSession,
    base_url: str,
    api: ApiKind,
    model: str | None,
    timeout: float,
) -> ProbeResult:
    """Ask the server for a real generation; connection errors are results, not exceptions,
    because the caller probes repeatedly while the server loads."""
    request = build_probe_request(api, model)
    started = time.monotonic()
    try:
        async with session.post(
            base_url.rstrip("/") + request.path,
            json=request.body,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            raw = await response.read()
            status = response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        return ProbeResult(
            ok=False,
            tokens=0,
            status=None,
            elapsed_s=time.monotonic() - started,
            error=f"{type(exc).__name__}: {exc}",
        )
    elapsed = time.monotonic() - started
    excerpt = raw[:500].decode("utf-8", errors="replace")
    if status != 200:
        return ProbeResult(False, 0, status, elapsed, f"HTTP {status}", excerpt)
    try:
        body = json.loads(raw)
    except ValueError:
        return ProbeResult(False, 0, status, elapsed, "response is not JSON", excerpt)
    tokens = probe_generated_tokens(api, body)
    error = None if tokens > 0 else "no tokens generated"
    return ProbeResult(tokens > 0, tokens, status, elapsed, error, excerpt)


# --------------------------------------------------------------------------------------------
# Provenance
# --------------------------------------------------------------------------------------------

# /server_info entries that are state, not resolved arguments.
_NOT_ARGS = frozenset({"internal_states", "version", "launch_command", "startup_time"})


@dataclass(frozen=True, slots=True)
class Provenance:
    """What exactly ran a trial: stored with it so a result can be traced and repeated."""

    sglang_version: str | None
    model_path: str | None
    server_args: Mapping[str, Any]
    launch_command: str | None
    gpus: tuple[GpuIdentity, ...]
    exec_start: tuple[str, ...]
    environment: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "sglang_version": self.sglang_version,
            "model_path": self.model_path,
            "server_args": dict(self.server_args),
            "launch_command": self.launch_command,
            "gpus": [{"name": g.name, "driver_version": g.driver_version} for g in self.gpus],
            "exec_start": list(self.exec_start),
            "environment": dict(self.environment),
        }


def build_provenance(
    server_info: Mapping[str, Any],
    gpus: Sequence[GpuIdentity],
    exec_start: Sequence[str],
    environment: Mapping[str, str],
) -> Provenance:
    """Provenance from ``/server_info``, the GPU identities and the ExecStart/env we installed."""
    version = server_info.get("version")
    model_path = server_info.get("model_path")
    launch = server_info.get("launch_command")
    return Provenance(
        sglang_version=str(version) if version is not None else None,
        model_path=str(model_path) if model_path is not None else None,
        server_args={k: v for k, v in server_info.items() if k not in _NOT_ARGS},
        launch_command=str(launch) if launch is not None else None,
        gpus=tuple(gpus),
        exec_start=tuple(exec_start),
        environment=dict(environment),
    )
