"""The running ``llama-server``'s config: where readiness reads it, how a trial's knobs are
checked against it, how llama.cpp reads a command-line value, the model name it serves, and the
provenance.

``llama-server`` reports little of its command line over HTTP. While it loads, every endpoint
but the web UI's answers 503 ``{"error": {"message": "Loading model", ...}}``; then ``/health``
answers 200 and ``/props`` gives ``model_path``, ``total_slots`` (``-np``), ``build_info``
(``b<N>-<commit>``, what ``--version`` prints), the chat template and the slot context;
``/slots`` (on by default) says per slot whether it can ``speculative``-ly decode (a draft
model or an n-gram method was set up). The speculative sizes (``--spec-draft-n-max``,
``--spec-draft-n-min``, ``--spec-draft-p-min``, the n-gram sizes) and the thread counts are
reported nowhere over HTTP: for those the proof is systemd's own argv (the lifecycle checks
the loaded ``ExecStart`` before the restart) and the server's startup lines kept in the
provenance (``loading draft model '/m/draft.gguf'``, its slots), and each point's
``/metrics`` counters show whether drafts were verified.
"""

from __future__ import annotations

import json
import os.path
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.engines.base import (
    ConfigCheck,
    ConfigDifference,
    KnobResolution,
    Provenance,
    ProvenanceSources,
    ServedModel,
)
from orchestrator.engines.shared import (
    init_fields,
    last_flag_value,
    normal_scalar_word,
)
from orchestrator.host.dropin import format_knob_value

if TYPE_CHECKING:
    import aiohttp

SPEC_TYPE_FLAG = "--spec-type"
SPECULATING = "speculative"
"""The config key (from ``/slots``) that says the server set up speculative decoding."""
NO_SPECULATION = "none"

# Each flag spelling llama.cpp accepts (common/arg.cpp) -> where the running config says it.
_REPORTED: Mapping[str, str] = {
    "-m": "model_path",
    "--model": "model_path",
    "-np": "total_slots",
    "--parallel": "total_slots",
}
_SPEC_TYPE_FLAGS = frozenset({SPEC_TYPE_FLAG})
_DRAFT_MODEL_FLAGS = frozenset({"-md", "--model-draft", "--spec-draft-model"})
_DRAFT_SIZE_FLAGS = frozenset(
    {"--spec-draft-n-max", "--spec-draft-n-min", "--spec-draft-p-min", "--draft-p-min",
     "--spec-draft-p-split", "--draft-p-split"}
)  # fmt: skip
_SIZE_FLAGS_BY_TYPE: Mapping[str, frozenset[str]] = {
    "ngram-simple": frozenset(
        {"--spec-ngram-simple-size-n", "--spec-ngram-simple-size-m", "--spec-ngram-simple-min-hits"}
    ),
    "ngram-map-k": frozenset(
        {"--spec-ngram-map-k-size-n", "--spec-ngram-map-k-size-m", "--spec-ngram-map-k-min-hits"}
    ),
    "ngram-map-k4v": frozenset(
        {
            "--spec-ngram-map-k4v-size-n",
            "--spec-ngram-map-k4v-size-m",
            "--spec-ngram-map-k4v-min-hits",
        }
    ),
    "ngram-mod": frozenset(
        {"--spec-ngram-mod-n-min", "--spec-ngram-mod-n-max", "--spec-ngram-mod-n-match"}
    ),
}
"""The flags that size each speculative method (``common_params_speculative``: the ``draft-*``
methods read ``draft.n_max``/``n_min``/``p_min``, each n-gram method its own sizes): a flag
changes nothing while its method is not in ``--spec-type``."""
_ALIAS_FLAGS = ("-a", "--alias")
_MODEL_FLAGS = ("-m", "--model")


# --------------------------------------------------------------------------------------------
# Reading the running config
# --------------------------------------------------------------------------------------------


async def _get_json(session: aiohttp.ClientSession, url: str, timeout: float) -> Any:
    """The JSON a 200 answer carries, else None; raises ``aiohttp.ClientConnectorError``."""
    import aiohttp

    try:
        async with session.get(url, timeout=aiohttp.ClientTimeout(total=timeout)) as response:
            if response.status != 200:
                return None
            return json.loads(await response.read())
    except aiohttp.ClientConnectorError:
        raise
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None


async def server_config(
    session: aiohttp.ClientSession, base_url: str, timeout: float
) -> dict[str, Any] | None:
    """``/props`` with ``speculative`` (every slot of ``/slots`` can speculate) once
    ``/health`` answers 200; None while the model loads (503 ``Loading model``) or a read
    fails; raises ``aiohttp.ClientConnectorError`` while nothing listens on the port."""
    base = base_url.rstrip("/")
    health = await _get_json(session, base + "/health", timeout)
    if not isinstance(health, dict):
        return None
    props = await _get_json(session, base + "/props", timeout)
    if not isinstance(props, dict):
        return None
    slots = await _get_json(session, base + "/slots", timeout)
    config: dict[str, Any] = dict(props)
    if isinstance(slots, list) and slots:
        config[SPECULATING] = all(
            isinstance(s, dict) and s.get(SPECULATING) is True for s in slots
        )
    return config


# --------------------------------------------------------------------------------------------
# Knobs against the running config
# --------------------------------------------------------------------------------------------


def _key_of(flag: str) -> str | None:
    if flag in _REPORTED:
        return _REPORTED[flag]
    if flag in _SPEC_TYPE_FLAGS or flag in _DRAFT_MODEL_FLAGS:
        return SPECULATING
    return None


def resolve_flag_knob(
    knob: str, flag: str, value: Any, *, server_info_key: str | None = None
) -> KnobResolution:
    """Where the running config reports a knob's flag (``()``: nowhere over HTTP); a key the
    sweep file gives wins."""
    key = server_info_key or _key_of(flag)
    return KnobResolution(knob=knob, flag=flag, value=value, server_info_keys=(key,) if key else ())


def _expected(knob: KnobResolution, key: str) -> Any:
    """What the running config should say for the knob's value."""
    if key == SPECULATING:
        if knob.flag in _SPEC_TYPE_FLAGS:
            types = {t.strip() for t in str(knob.value).split(",") if t.strip()}
            return bool(types - {NO_SPECULATION})
        return True  # a draft model: whether it is used is the spec type's to say
    if key == "model_path":
        return str(knob.value)
    return normal_scalar_word(format_knob_value(knob.value))


def _difference(knob: KnobResolution, config: Mapping[str, Any]) -> ConfigDifference | None:
    if not knob.server_info_keys:
        return None  # reported nowhere over HTTP: systemd's argv and the startup lines say it
    key = knob.server_info_keys[0]
    if key not in config:
        return ConfigDifference(knob.knob, f"props[{key}]", knob.value, None, "not reported")
    expected, actual = _expected(knob, key), config[key]
    if key == SPECULATING:
        if knob.flag in _DRAFT_MODEL_FLAGS and actual is not True:
            return None  # loaded but unused without a draft spec type: not this knob's say
        same = actual is expected
    elif key == "model_path":
        same = str(actual) == expected
    else:
        same = normal_scalar_word(str(actual)) == expected
    return None if same else ConfigDifference(knob.knob, f"props[{key}]", knob.value, actual)


def check_server_config(
    server_info: Mapping[str, Any], flags: Sequence[KnobResolution]
) -> ConfigCheck:
    """Prove what the running server reports of the trial's config (the model, the slots,
    whether it speculates)."""
    flagged = (_difference(knob, server_info) for knob in flags if knob.value is not None)
    mismatches = [d for d in flagged if d is not None]
    return ConfigCheck(
        mismatches=tuple(mismatches), overridden=()
    )


# --------------------------------------------------------------------------------------------
# How llama.cpp reads a value; the model it serves; provenance
# --------------------------------------------------------------------------------------------


def normal_word(word: str, flag: str | None) -> str:
    """A command-line value as llama.cpp reads it: numbers by value (``std::stoi``,
    ``std::stof``), booleans in one spelling; ``--spec-type``'s list as written (its order is
    the order the methods are tried)."""
    text = word.strip()
    if flag in _SPEC_TYPE_FLAGS:
        return ",".join(part.strip() for part in text.split(","))
    return normal_scalar_word(text)


def forced_flags(values: Mapping[str, str | None]) -> frozenset[str]:
    """The flags that size a speculative method ``--spec-type`` does not run (no type, or
    ``none``: every one of them): configs that differ only there run the same server."""
    types = {t for t in (values.get(SPEC_TYPE_FLAG) or NO_SPECULATION).split(",") if t}
    unused = set() if any(t.startswith("draft-") for t in types) else set(_DRAFT_SIZE_FLAGS)
    for method, flags in _SIZE_FLAGS_BY_TYPE.items():
        if method not in types:
            unused |= flags
    return frozenset(unused)


def served_model(argv: Sequence[str]) -> ServedModel | None:
    """The name ``/v1/models`` lists: the first of ``--alias``'s comma-separated names, else
    the model file's name (``server-context.cpp``: ``model_path.filename()``)."""
    alias = last_flag_value(argv, _ALIAS_FLAGS)
    names = [] if alias is None else [a.strip() for a in alias[1].split(",") if a.strip()]
    if names:
        return ServedModel(name=names[0], flag="--alias")
    model = last_flag_value(argv, _MODEL_FLAGS)
    return None if model is None else ServedModel(os.path.basename(model[1]), flag="--model")


def build_provenance(sources: ProvenanceSources) -> Provenance:
    """What ran: ``/props``' ``build_info`` (``b1-0c1e570``: the build number and commit
    ``--version`` prints), the model path, the slots and whether they speculate, and the
    startup lines (the models loaded, the draft's among them, and the slots) by kind."""
    info = sources.server_info
    worker_init = init_fields(sources.init_events)
    version = info.get("build_info")
    args = {
        key: info.get(key)
        for key in ("model_path", "model_alias", "total_slots", SPECULATING, "build_info")
    }
    settings = info.get("default_generation_settings")
    if isinstance(settings, Mapping):
        args["n_ctx"] = settings.get("n_ctx")
    model = info.get("model_path")
    return sources.provenance(
        "llamacpp",
        engine_version=str(version) if version else None,
        model_path=str(model) if model else None,
        server_args=args,
        launch_command=None,
        worker_init=worker_init,
    )


__all__ = [
    "SPECULATING",
    "SPEC_TYPE_FLAG",
    "build_provenance",
    "check_server_config",
    "forced_flags",
    "normal_word",
    "resolve_flag_knob",
    "served_model",
    "server_config",
]
