"""SGLang behind the engine seam (``orchestrator.engines.base.Engine``).

Its HTTP dialects (chat and ``/generate``: request bodies, final and streamed answers), log
lines, failure causes, the running server's config check, the readiness probe, the served model
name, provenance, the readiness config endpoint, and (through :mod:`.argv`) how its own parser is
asked about an argv. ``SGLANG`` is the engine object; the module-level functions are the same
operations for callers that name SGLang directly (``orchestrator.sglang.parse_log_line``, the
documented name, re-exports them).

The formats here are SGLang's real ones (``shared/FACTS.md``): the orchestrator meets them on
hosts no test can run, so lines are parsed by field name, never by position, and every prefix
variant SGLang emits (timestamps with or without milliseconds; the rank tags ``DP``, ``PP``,
``ATTN_CP``, ``MOE_DP``, ``TP``, ``EP`` in any combination) or journald keeps (none) is accepted.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple

import orchestrator.engines.sglang.argv as argv_parser
import orchestrator.engines.sglang.forcing as forcing
import orchestrator.engines.sglang.schedule as schedule
from orchestrator.engines.base import (
    AcceptanceCounters,
    Chunk,
    ConfigCheck,
    ConfigDifference,
    DecodeEvent,
    Dialect,
    Engine,
    EnvKnob,
    ErrorKind,
    FailureEvent,
    FieldValue,
    Generation,
    InitEvent,
    KnobResolution,
    LinePrefix,
    LogEvent,
    PrefillEvent,
    ProbeResult,
    Provenance,
    ProvenanceSources,
    ReadyEvent,
    Reply,
    ServedModel,
    StreamParse,
    TokenSource,
    WireRequest,
    as_prompt,
)
from orchestrator.engines.openai_chat import (
    ERROR_DETAIL_LIMIT,
    ChatDialect,
    count,
    json_object,
    stream_payloads,
)
from orchestrator.engines.shared import (
    PROBE_MAX_TOKENS,
    PROBE_PROMPT,
    failure_event,
    first_failure,
    init_fields,
    last_flag_value,
    lines_follow_decoding,
    listed_models,
    probe_request,
    program_help_argv,
)
from orchestrator.host.launchfile import LaunchFormat
from orchestrator.host.procfs import parse_proc_environ
from orchestrator.types import ApiKind, FailureCause, KnobValue, MetricsMode

if TYPE_CHECKING:
    import aiohttp

__all__ = [
    "SGLANG",
    "ChatDialect",
    "ConfigCheck",
    "ConfigDifference",
    "DdtreeInitEvent",
    "DecodeEvent",
    "DflashInitEvent",
    "EnvKnob",
    "FailureEvent",
    "GenerateDialect",
    "KnobResolution",
    "LinePrefix",
    "LogEvent",
    "PrefillEvent",
    "ProbeResult",
    "Provenance",
    "ReadyEvent",
    "Sglang",
    "build_probe_request",
    "build_provenance",
    "check_server_config",
    "classify_failure",
    "dialect",
    "parse_log_line",
    "parse_proc_environ",
    "probe_generated_tokens",
    "probe_generation",
    "resolve_flag_knob",
    "served_model",
    "served_models",
    "server_config",
]

# --------------------------------------------------------------------------------------------
# Log lines
# --------------------------------------------------------------------------------------------

# `[2026-10-30 12:00:00.123 DP1 ATTN_CP0 TP2] message`; every part after the seconds is
# optional. SGLang's scheduler builds the tags in the order DP, PP, ATTN_CP, MOE_DP, TP, EP; a
# tag is upper-case letters and underscores, then the rank.
_PREFIX = re.compile(
    r"^\[(?P<ts>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:\.\d+)?)"
    r"(?P<tags>(?: [A-Z][A-Z_]*\d+)*)\]\s?"
)
_TAG = re.compile(r"([A-Z][A-Z_]*?)(\d+)")
_BATCH = re.compile(r"^(?P<kind>Decode|Prefill) batch(?: \[(?P<iter>\d+)\])?[.,]\s*")
# `name: value` pairs; names may hold spaces, '#', '-', '/' and parentheses.
_FIELD = re.compile(r"\s*(?P<name>[^:,][^:,]*?):\s*(?P<value>[^,]*?)\s*(?:,|$)")
_READY = re.compile(r"The server is fired up and ready to roll!", re.I)
_DFLASH_INIT = re.compile(r"Initialized DFLASH draft runner\.?\s*(?P<rest>.*)$", re.I)
_DDTREE_INIT = re.compile(r"Initialized DDTree worker\.?\s*(?P<rest>.*)$", re.I)
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
    # wait_port_available raises ValueError("{name} at {port} is not available in {N}
    # seconds. ..."): a taken port, though its type alone would say invalid-config.
    (
        "port-in-use",
        re.compile(
            r"\[Errno 98\][^\n]*|address already in use|\bis not available in \d+ seconds\b.*",
            re.I,
        ),
    ),
    (
        "bad-flag",
        re.compile(
            r"error: unrecognized arguments:.*|error: ambiguous option:.*"
            r"|error: argument [^\s:]+:.*",
            re.I,
        ),
    ),
    ("warmup-failed", re.compile(r"Initialization failed\. warmup error.*", re.I)),
    # ServerArgs' resolution raises ValueError or fails an assert (AssertionError).
    ("invalid-config", re.compile(r"\b(?:ValueError|AssertionError)\b.*", re.I)),
)


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


def _key_values(rest: str) -> dict[str, FieldValue]:
    return {
        found.group("key"): _scalar(found.group("value").strip())
        for found in _KEY_VALUE.finditer(rest)
    }


@dataclass(frozen=True, slots=True)
class DflashInitEvent(InitEvent):
    """The DFLASH draft runner's init line: its block size and draft window."""

    block_size: int | None = field(kw_only=True)
    draft_window_size: int | None = field(kw_only=True)
    compact_cache: bool | None = field(kw_only=True)
    kind: str = "dflash_init"


@dataclass(frozen=True, slots=True)
class DdtreeInitEvent(InitEvent):
    """The DDTree worker's init line: its block size and tree budget (the verify width is
    ``max_tree_nodes`` = budget + 1), as the running server resolved them."""

    block_size: int | None = field(kw_only=True)
    tree_budget: int | None = field(kw_only=True)
    max_tree_nodes: int | None = field(kw_only=True)
    kind: str = "ddtree_init"


def _ddtree_init(prefix: LinePrefix, rest: str) -> DdtreeInitEvent:
    fields = _key_values(rest)
    return DdtreeInitEvent(
        prefix=prefix,
        fields=fields,
        block_size=_integer(fields, "block_size"),
        tree_budget=_integer(fields, "tree_budget"),
        max_tree_nodes=_integer(fields, "max_tree_nodes"),
    )


def _dflash_init(prefix: LinePrefix, rest: str) -> DflashInitEvent:
    fields = _key_values(rest)
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
    return first_failure(_FAILURES, text)


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
    ddtree = _DDTREE_INIT.search(body)
    if ddtree is not None:
        return _ddtree_init(prefix, ddtree.group("rest"))
    return failure_event(_FAILURES, prefix, body)


# --------------------------------------------------------------------------------------------
# Knobs -> /server_info keys, and the check of the running server's config
# --------------------------------------------------------------------------------------------

METRICS_FLAG = "--enable-metrics"
"""Gives Prometheus ``/metrics`` (the spec counters): what ``server.metrics: auto`` adds."""


def metrics_flags(metrics: MetricsMode) -> tuple[str, ...]:
    """The flags ``server.metrics`` asks each trial's command line to have."""
    return (METRICS_FLAG,) if metrics == "auto" else ()


ACCEPTANCE_COUNTERS = AcceptanceCounters(
    verify_steps="sglang:spec_verify_calls_total",
    tokens="sglang:generation_tokens_total",
    tokens_include_first=True,
    tokens_include_bonus=True,
)
"""Accept length from ``/metrics``: generated tokens (bar each request's first, from its
prefill) over verify calls, the decode log's own definition."""


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
    server_info: Mapping[str, Any], flags: Sequence[KnobResolution]
) -> ConfigCheck:
    """Prove the running server took the trial's flags, by ``/server_info``."""
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
    return ConfigCheck(mismatches=tuple(mismatches), overridden=tuple(overridden))


# --------------------------------------------------------------------------------------------
# The HTTP dialects: the one place a request is written and an answer read
# --------------------------------------------------------------------------------------------

class GenerateDialect:
    """SGLang's native ``/generate``: no chat template; ``meta_info`` carries the exact
    cumulative token count of every chunk and, finished, the speculative-decoding counters."""

    api: ApiKind = "generate"

    def request(self, ask: Generation) -> WireRequest:
        params: dict[str, Any] = {"max_new_tokens": ask.max_tokens, "temperature": ask.temperature}
        if ask.ignore_eos is not None:
            params["ignore_eos"] = ask.ignore_eos
        # /generate takes no model name; usage per chunk is always there (meta_info). A
        # conversation goes as plain text (Prompt.plain_text says how it is written).
        text = as_prompt(ask.prompt).plain_text()
        return WireRequest(
            "/generate", {"text": text, "sampling_params": params, "stream": ask.stream}
        )

    def parse_final(self, data: Any) -> Reply:
        """``meta_info.finish_reason`` is an object (``{"type": "length", "length": N}``),
        reduced here to its type."""
        response = json_object(data)
        meta = response.get("meta_info")
        meta = meta if isinstance(meta, dict) else {}
        finish = meta.get("finish_reason")
        text = response.get("text")
        return Reply(
            content=text if isinstance(text, str) else None,
            reasoning_content=None,
            finish_reason=finish.get("type") if isinstance(finish, dict) else finish,
            completion_tokens=count(meta.get("completion_tokens")),
        )

    def parse_stream(self, events: Sequence[tuple[float, str]]) -> StreamParse:
        parsed = StreamParse(TokenSource.CUMULATIVE_PER_CHUNK)
        try:
            payloads, done = stream_payloads(events)
        except ValueError as exc:
            return parsed.fail(ErrorKind.PROTOCOL, f"bad stream event: {exc}")
        seen = 0
        generated = ""
        meta: dict[str, Any] = {}
        for arrival, obj in payloads:
            if "error" in obj:
                detail = json.dumps(obj["error"])[:ERROR_DETAIL_LIMIT]
                return parsed.fail(ErrorKind.SERVER_ERROR, detail)
            text = obj.get("text")
            if isinstance(text, str):
                # Cumulative by default; incremental output is tolerated too.
                generated = text if text.startswith(generated) else generated + text
                parsed.content_parts[:] = [generated]
            meta = obj.get("meta_info") or {}
            cumulative = meta.get("completion_tokens")
            if not isinstance(cumulative, int):
                return parsed.fail(ErrorKind.PROTOCOL, "meta_info.completion_tokens missing")
            parsed.chunks.append(Chunk(arrival, max(cumulative - seen, 0)))
            seen = max(seen, cumulative)
        parsed.completion_tokens = seen
        parsed.prompt_tokens = meta.get("prompt_tokens")
        parsed.cached_tokens = meta.get("cached_tokens")
        parsed.response_id = meta.get("id")
        _read_spec_counts(parsed, meta)
        finish = meta.get("finish_reason")
        parsed.finish_reason = finish.get("type") if isinstance(finish, dict) else finish
        if parsed.finish_reason == "abort":
            return parsed.fail(ErrorKind.ABORTED, json.dumps(finish)[:ERROR_DETAIL_LIMIT])
        if parsed.finish_reason is None:
            return parsed.fail(ErrorKind.CONNECTION, f"stream ended without finish (done={done})")
        return parsed


# A finished request's speculative counters, by SGLang's names; the older spelling of each
# (``fill_spec_decoding_meta`` keeps it as an alias, builds before the rename wrote only it).
_CORRECT_DRAFTS = ("spec_num_correct_drafts", "spec_accepted_drafts")
_PROPOSED_DRAFTS = ("spec_num_proposed_drafts", "spec_proposed_drafts")


def _metacount(meta: Mapping[str, Any], names: Sequence[str]) -> int | None:
    for name in names:
        value = meta.get(name)
        if isinstance(value, int | float) and not isinstance(value, bool) and value >= 0:
            return int(value)
    return None


def _read_spec_counts(parsed: StreamParse, meta: Mapping[str, Any]) -> None:
    """``spec_verify_ct``, ``spec_accept_length`` and the draft counts of the final chunk."""
    parsed.spec_verify_ct = _metacount(meta, ("spec_verify_ct",))
    length = meta.get("spec_accept_length")
    if isinstance(length, int | float) and not isinstance(length, bool):
        parsed.spec_accept_length = float(length)
    parsed.spec_correct_drafts = _metacount(meta, _CORRECT_DRAFTS)
    parsed.spec_proposed_drafts = _metacount(meta, _PROPOSED_DRAFTS)


_DIALECTS: dict[ApiKind, Dialect] = {"chat": ChatDialect(), "generate": GenerateDialect()}


def dialect(api: ApiKind) -> Dialect:
    """SGLang's dialect for one of its HTTP APIs."""
    return _DIALECTS[api]


# --------------------------------------------------------------------------------------------
# Readiness probe: a real generation, and the model name the benchmark sends
# --------------------------------------------------------------------------------------------

class ProbeRequest(NamedTuple):
    path: str
    body: dict[str, Any]


def build_probe_request(
    api: ApiKind, model: str | None, *, max_tokens: int = PROBE_MAX_TOKENS
) -> ProbeRequest:
    """A small deterministic generation (temperature 0), not streamed: usage counts the tokens."""
    request = dialect(api).request(
        Generation(PROBE_PROMPT, max_tokens, temperature=0, stream=False, model=model or None)
    )
    return ProbeRequest(request.path, request.body)


def probe_generated_tokens(api: ApiKind, response: Any) -> int:
    """Tokens the probe generated, from ``usage`` / ``meta_info`` (never counted by chunks);
    0 for any shape that does not say (a ``/generate`` batch answer sums its items)."""
    items = response if api == "generate" and isinstance(response, list) else [response]
    reader = dialect(api)
    return sum(
        reader.parse_final(item).completion_tokens or 0 for item in items if isinstance(item, dict)
    )


# SGLang's defaults: the served name is --served-model-name, else the --model-path as given.
_SERVED_NAME_FLAGS = ("--served-model-name",)
_MODEL_PATH_FLAGS = ("--model-path", "--model")


def served_model(argv: Sequence[str]) -> ServedModel | None:
    """The model name an SGLang command line serves, or None when it names no model (a
    wrapper script, say): ``--served-model-name``, else the ``--model-path`` itself."""
    for flags in (_SERVED_NAME_FLAGS, _MODEL_PATH_FLAGS):
        found = last_flag_value(argv, flags)
        if found is not None:
            return ServedModel(name=found[1], flag=found[0])
    return None


served_models = listed_models
"""The model ids ``/v1/models`` lists, or None when the server does not say."""


async def probe_generation(
    session: aiohttp.ClientSession,
    base_url: str,
    api: ApiKind,
    model: str | None,
    timeout: float,
) -> ProbeResult:
    """Ask the server for a real generation (:func:`build_probe_request`); on the chat API
    the name sent as ``model`` is first checked against ``/v1/models`` (``/generate`` takes
    no model name)."""
    request = WireRequest(*build_probe_request(api, model))

    def generated(body: Any) -> int:
        return probe_generated_tokens(api, body)

    served_as = model if api == "chat" else None
    return await probe_request(session, base_url, request, generated, timeout, served_as=served_as)


# --------------------------------------------------------------------------------------------
# Provenance
# --------------------------------------------------------------------------------------------

# /server_info entries that are state, not resolved arguments.
_NOT_ARGS = frozenset({"internal_states", "version", "launch_command", "startup_time"})


DEFAULT_DECODE_LOG_INTERVAL = 40  # SGLang's --decode-log-interval default


def decode_log_interval(server_info: Mapping[str, Any]) -> int:
    """``--decode-log-interval`` as ``/server_info`` reports it (SGLang's default when absent
    or unusable): each decode line summarises that many iterations."""
    value = server_info.get("decode_log_interval", DEFAULT_DECODE_LOG_INTERVAL)
    if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
        return int(value)
    return DEFAULT_DECODE_LOG_INTERVAL


def build_provenance(sources: ProvenanceSources) -> Provenance:
    """Provenance from ``/server_info``, the GPU identities, the ExecStart/env we installed,
    and the speculative workers' init lines of the invocation (the first of each kind: with
    several DP groups each logs the same)."""
    info = sources.server_info
    worker_init = init_fields(sources.init_events)
    version = info.get("version")
    model_path = info.get("model_path")
    launch = info.get("launch_command")
    return sources.provenance(
        "sglang",
        engine_version=str(version) if version is not None else None,
        model_path=str(model_path) if model_path is not None else None,
        server_args={k: v for k, v in info.items() if k not in _NOT_ARGS},
        launch_command=str(launch) if launch is not None else None,
        worker_init=worker_init,
    )


# --------------------------------------------------------------------------------------------
# The engine object
# --------------------------------------------------------------------------------------------


async def server_config(
    session: aiohttp.ClientSession, base_url: str, timeout: float
) -> dict[str, Any] | None:
    """``/server_info`` (``/get_server_info`` on old builds), or None while not answering.
    Raises ``aiohttp.ClientConnectorError`` when nothing listens on the port."""
    import aiohttp  # the sweep-file verbs import this module without the HTTP stack

    for path in ("/server_info", "/get_server_info"):
        try:
            async with session.get(
                base_url.rstrip("/") + path, timeout=aiohttp.ClientTimeout(total=timeout)
            ) as response:
                if response.status == 404:
                    continue
                if response.status != 200:
                    return None
                body = await response.json(content_type=None)
                return body if isinstance(body, dict) else None
        except aiohttp.ClientConnectorError:
            raise
        except (aiohttp.ClientError, TimeoutError, json.JSONDecodeError):
            return None
    return None


class Sglang:
    """SGLang as an ``orchestrator.engines.base.Engine``: the functions above, behind the seam
    (mypy checks them against the protocol where ``SGLANG`` is declared)."""

    name = "sglang"
    default_unit = "sglang.service"
    apis: frozenset[ApiKind] = frozenset({"chat", "generate"})
    metrics_flag = METRICS_FLAG
    acceptance_counters = ACCEPTANCE_COUNTERS
    metrics_flags = staticmethod(metrics_flags)
    server_config = staticmethod(server_config)
    normal_word = staticmethod(forcing.normal_word)
    forced_flags = staticmethod(forcing.forced_flags)
    parse_command = staticmethod(argv_parser.parse_command)
    batch_command = staticmethod(argv_parser.batch_command)
    read_answers = staticmethod(argv_parser.read_answers)
    help_argv = staticmethod(program_help_argv)
    native_schedule = staticmethod(schedule.native_schedule)
    file_flags: Mapping[str, LaunchFormat] = {schedule.ADAPTIVE_CONFIG_FLAG: "json"}
    """``--speculative-adaptive-config`` names a JSON file (a schedule's, written beside the
    drop-in as a launch file)."""
    dialect = staticmethod(dialect)
    parse_log_line = staticmethod(parse_log_line)
    classify_failure = staticmethod(classify_failure)
    resolve_flag_knob = staticmethod(resolve_flag_knob)
    check_server_config = staticmethod(check_server_config)
    served_model = staticmethod(served_model)
    served_models = staticmethod(served_models)
    probe_generation = staticmethod(probe_generation)
    build_provenance = staticmethod(build_provenance)
    decode_log_interval = staticmethod(decode_log_interval)
    decode_log_period_s = staticmethod(lines_follow_decoding)


SGLANG: Engine = Sglang()
