"""The running vLLM server's config: where readiness reads it, how a trial's knobs are checked
against it, how the engine reads a command-line value, and the provenance.

vLLM reports its resolved config over HTTP only in development mode: ``GET
/server_info?config_format=json`` is registered when the unit runs with
``VLLM_SERVER_DEV_MODE=1`` (``entrypoints/launchers/api_server/routers.py``) and answers
``{"vllm_config": {...}, "vllm_env": {...}, "system_env": {...}}``. Without it the
orchestrator reads what every vLLM serves: ``/health`` (200 once the engine runs), ``/version``
and ``/metrics``, whose ``vllm:spec_decode_num_accepted_tokens_per_pos_total`` counters exist
for each draft position from the start, so the running ``num_speculative_tokens`` is known
either way; the other keys are then unverifiable over HTTP, and the process's startup line
``non-default args: {...}`` (read from the journal, :mod:`.logs`) is the record kept in the
provenance. :func:`server_config` returns one shape for both, with ``config_source`` saying which.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import orchestrator.engines.vllm.facts as facts
from orchestrator.engines.base import (
    ConfigCheck,
    ConfigDifference,
    FieldValue,
    KnobResolution,
    Provenance,
    ProvenanceSources,
)
from orchestrator.engines.shared import init_fields, normal_scalar_word

if TYPE_CHECKING:
    import aiohttp

SPEC_SECTION = "speculative_config"
"""Where the running config keeps ``--speculative-config``'s keys."""
DEV_MODE_ENV = "VLLM_SERVER_DEV_MODE"
SOURCE_SERVER_INFO = "server_info"
SOURCE_METRICS = "metrics"
PER_POSITION = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
_POSITION = re.compile(
    r"^" + re.escape(PER_POSITION) + r"\{[^}]*\bposition=\"(?P<pos>\d+)\"[^}]*\}\s"
)
_OBSERVABLE_WITHOUT_DEV_MODE = frozenset({f"{SPEC_SECTION}.num_speculative_tokens"})
_FORCED_BY_METHOD: Mapping[str, tuple[str, str]] = {
    "parallel_drafting": ("dflash", "dspark"),
}
"""``SpeculativeConfig.__post_init__`` sets ``parallel_drafting = True`` for these methods."""


# --------------------------------------------------------------------------------------------
# Reading the running config
# --------------------------------------------------------------------------------------------


def speculative_positions(metrics_text: str) -> int | None:
    """How many draft positions the per-position counters have (``num_speculative_tokens``),
    or None when the server runs no speculation."""
    positions = {
        int(found.group("pos"))
        for line in metrics_text.splitlines()
        if (found := _POSITION.match(line)) is not None
    }
    return max(positions) + 1 if positions else None


async def _get(
    session: aiohttp.ClientSession, url: str, timeout: float
) -> tuple[int, bytes] | None:
    import aiohttp

    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            return response.status, await response.read()
    except aiohttp.ClientConnectorError:
        raise
    except (aiohttp.ClientError, TimeoutError):
        return None


def _json(body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError:
        return None


async def server_config(
    session: aiohttp.ClientSession, base_url: str, timeout: float
) -> dict[str, Any] | None:
    """The running server's config once ``/health`` says its engine runs, else None; raises
    ``aiohttp.ClientConnectorError`` while nothing listens on the port."""
    base = base_url.rstrip("/")
    health = await _get(session, base + "/health", timeout)
    if health is None or health[0] != 200:
        return None
    version_reply = await _get(session, base + "/version", timeout)
    version_body = _json(version_reply[1]) if version_reply and version_reply[0] == 200 else None
    version = version_body.get("version") if isinstance(version_body, dict) else None
    info = await _get(session, base + "/server_info?config_format=json", timeout)
    body = _json(info[1]) if info is not None and info[0] == 200 else None
    if isinstance(body, dict) and isinstance(body.get("vllm_config"), dict):
        vllm_config: dict[str, Any] = body["vllm_config"]
        return {
            "config_source": SOURCE_SERVER_INFO,
            "version": version,
            "vllm_config": vllm_config,
            SPEC_SECTION: vllm_config.get(SPEC_SECTION),
            "vllm_env": body.get("vllm_env") if isinstance(body.get("vllm_env"), dict) else {},
        }
    metrics = await _get(session, base + "/metrics", timeout)
    if metrics is None or metrics[0] != 200:
        return None
    positions = speculative_positions(metrics[1].decode("utf-8", errors="replace"))
    return {
        "config_source": SOURCE_METRICS,
        "version": version,
        SPEC_SECTION: None if positions is None else {"num_speculative_tokens": positions},
    }


# --------------------------------------------------------------------------------------------
# Knobs against the running config
# --------------------------------------------------------------------------------------------


def config_path(flag: str, json_key: str | None = None) -> str:
    """Where the running config reports a flag (``--max-num-seqs`` -> ``max_num_seqs``, found
    in whichever section holds it) or a key of ``--speculative-config``."""
    if json_key is not None and flag in facts.SPEC_FLAG_ALIASES:
        return f"{SPEC_SECTION}.{facts.config_key(json_key)}"
    if flag in facts.SHORTCUT_FLAGS:
        return f"{SPEC_SECTION}.{facts.SHORTCUT_FLAGS[flag]}"
    return flag.lstrip("-").replace("-", "_")


def resolve_flag_knob(
    knob: str, flag: str, value: Any, *, server_info_key: str | None = None
) -> KnobResolution:
    """A knob's place in the running config; a key the sweep file gives wins (``a.b`` is a
    path, a bare ``speculative_config`` key names the JSON flag's section)."""
    key = server_info_key or config_path(flag)
    return KnobResolution(knob=knob, flag=flag, value=value, server_info_keys=(key,))


def _lookup(config: Mapping[str, Any], path: str) -> tuple[bool, Any]:
    """(found, value) of a dotted path; a bare name is looked for at the top and then in
    each section of ``vllm_config`` (an engine argument lives in one config)."""
    head, _, rest = path.partition(".")
    if rest:
        section = config.get(head)
        if not isinstance(section, Mapping):
            return False, None
        return (rest in section), section.get(rest)
    vllm_config = config.get("vllm_config")
    for scope in (config, *(vllm_config.values() if isinstance(vllm_config, Mapping) else ())):
        if isinstance(scope, Mapping) and head in scope:
            return True, scope[head]
    return False, None


def _normal(value: Any, key: str) -> Any:
    if key.endswith(".method") and isinstance(value, str):
        return facts.canonical_method(value)
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, int | float):
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        try:
            return float(text)
        except ValueError:
            return text
    return value


def _forced(key: str, actual: Any, config: Mapping[str, Any]) -> str | None:
    """Why vLLM itself set ``key`` regardless of the asked value, or None."""
    _, _, name = key.rpartition(".")
    methods = _FORCED_BY_METHOD.get(name)
    section = config.get(SPEC_SECTION)
    method = section.get("method") if isinstance(section, Mapping) else None
    if methods and method in methods and actual is True:
        return f"vLLM sets {name} = True for method {method}"
    return None


def _flag_difference(
    knob: KnobResolution, config: Mapping[str, Any]
) -> tuple[ConfigDifference | None, ConfigDifference | None]:
    """(mismatch, overridden) for one flag knob."""
    key = knob.server_info_keys[0]
    source = config.get("config_source")
    where = f"{source}[{key}]"
    if source != SOURCE_SERVER_INFO and key not in _OBSERVABLE_WITHOUT_DEV_MODE:
        return None, None  # not reported without dev mode: the provenance keeps the log's record
    found, actual = _lookup(config, key)
    if not found:
        reason = "speculative decoding is off" if key.startswith(SPEC_SECTION) else "not reported"
        return ConfigDifference(knob.knob, where, knob.value, None, reason), None
    if _normal(knob.value, key) == _normal(actual, key):
        return None, None
    forced = _forced(key, actual, config)
    difference = ConfigDifference(knob.knob, where, knob.value, actual, forced or "")
    return (None, difference) if forced else (difference, None)


def check_server_config(
    server_info: Mapping[str, Any], flags: Sequence[KnobResolution]
) -> ConfigCheck:
    """Prove the running server took the trial's flag and JSON knobs, by the running config
    (what its source reports)."""
    mismatches: list[ConfigDifference] = []
    overridden: list[ConfigDifference] = []
    for knob in flags:
        if knob.value is None:
            continue
        mismatch, forced = _flag_difference(knob, server_info)
        mismatches.extend([mismatch] if mismatch else [])
        overridden.extend([forced] if forced else [])
    return ConfigCheck(mismatches=tuple(mismatches), overridden=tuple(overridden))


# --------------------------------------------------------------------------------------------
# How vLLM reads a value; provenance
# --------------------------------------------------------------------------------------------


def normal_word(word: str, flag: str | None) -> str:
    """A command-line value as vLLM reads it: ``--speculative-config``'s JSON by its keys
    (``-`` as ``_``, an old MTP method name as ``mtp``, numbers by value), other numbers by
    value, booleans in one spelling."""
    text = word.strip()
    if flag in facts.SPEC_FLAG_ALIASES:
        try:
            value = json.loads(text)
        except ValueError:
            return text
        if not isinstance(value, dict):
            return text
        normal = {facts.config_key(k): v for k, v in value.items()}
        if isinstance(normal.get("method"), str):
            normal["method"] = facts.canonical_method(normal["method"])
        return json.dumps(normal, sort_keys=True, separators=(",", ":"))
    return normal_scalar_word(text)


def forced_flags(values: Mapping[str, str | None]) -> frozenset[str]:
    """No whole flag is replaced: what vLLM forces is a key inside ``--speculative-config``
    (``parallel_drafting`` for DFlash), which :func:`normal_word` cannot tell apart from an
    asked one; the config check records it as overridden."""
    return frozenset()


def build_provenance(sources: ProvenanceSources) -> Provenance:
    """What ran: the version (``/version``, else the startup line), the resolved config
    (``vllm_config`` in dev mode; else the startup ``non-default args``), the resolved
    speculative config, and the process's startup lines by kind."""
    info = sources.server_info
    worker_init = init_fields(sources.init_events)
    version = info.get("version") or worker_init.get("vllm_version", {}).get("version")
    vllm_config = info.get("vllm_config")
    args: dict[str, Any]
    if isinstance(vllm_config, Mapping):
        args = dict(vllm_config)
    else:
        args = dict(worker_init.get("non_default_args", {}))
    args["config_source"] = info.get("config_source")
    args[SPEC_SECTION] = info.get(SPEC_SECTION)
    model = _model_path(vllm_config, worker_init)
    return sources.provenance(
        "vllm",
        engine_version=str(version) if version else None,
        model_path=model,
        server_args=args,
        launch_command=None,
        worker_init=worker_init,
    )


def _model_path(
    vllm_config: Any, worker_init: Mapping[str, Mapping[str, FieldValue]]
) -> str | None:
    if isinstance(vllm_config, Mapping):
        model_config = vllm_config.get("model_config")
        if isinstance(model_config, Mapping) and model_config.get("model"):
            return str(model_config["model"])
    args = worker_init.get("non_default_args", {})
    for key in ("model_tag", "model"):
        if args.get(key):
            return str(args[key])
    for kind in ("vllm_version", "vllm_model"):  # the one-line form, the logo's line
        served = worker_init.get(kind, {}).get("model")
        if served:
            return str(served)
    return None


__all__ = [
    "DEV_MODE_ENV",
    "SPEC_SECTION",
    "build_provenance",
    "check_server_config",
    "config_path",
    "forced_flags",
    "normal_word",
    "resolve_flag_knob",
    "server_config",
    "speculative_positions",
]
