"""vLLM behind the engine seam (``orchestrator.engines.base.Engine``), as ``vllm serve`` 0.33 runs
under systemd: the OpenAI-compatible chat dialect, its log lines (:mod:`.logs`), readiness and
its config (:mod:`.config`), its parser asked on the host (:mod:`.argv`), the knob rules of
``--speculative-config`` (:mod:`.facts`), and acceptance read from its Prometheus counters.

Speculation is one JSON-valued flag, ``--speculative-config``, built from several knobs (the
sweep file's ``json_key``): one argv element that the drop-in and the knob surgery treat as
any flag. vLLM's dotted form (``--speculative-config.method dflash``) is not used: its parser
turns the dotted keys into a second ``--speculative-config`` appended at the end, which
replaces a JSON one elsewhere on the command line instead of merging with it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import orchestrator.engines.vllm.argv as argv_parser
import orchestrator.engines.vllm.config as config
import orchestrator.engines.vllm.facts as facts
import orchestrator.engines.vllm.logs as logs
import orchestrator.engines.vllm.schedule as schedule
from orchestrator.engines.base import (
    AcceptanceCounters,
    Engine,
    ServedModel,
)
from orchestrator.engines.openai_chat import ChatDialect
from orchestrator.engines.shared import ChatOnlyEngine, lines_weigh_alike
from orchestrator.types import KnobValue, MetricsMode

ACCEPTANCE_COUNTERS = AcceptanceCounters(
    verify_steps="vllm:spec_decode_num_drafts_total",
    tokens="vllm:spec_decode_num_accepted_tokens_total",
    tokens_include_first=False,
    tokens_include_bonus=False,
)
"""``1 + accepted / drafts`` over a point's deltas: vLLM's own mean acceptance length
(``v1/spec_decode/metrics.py``), bonus token included."""

def metrics_flags(metrics: MetricsMode) -> tuple[str, ...]:
    """Nothing to add: vLLM serves ``/metrics`` unless started with ``--disable-log-stats``."""
    return ()


STATS_INTERVAL_ENV = "VLLM_LOG_STATS_INTERVAL"
DEFAULT_STATS_INTERVAL_S = 10.0


def decode_log_period_s(environment: Mapping[str, str]) -> float:
    """``VLLM_LOG_STATS_INTERVAL`` as the server was started with it, else vLLM's 10 s: a
    ``SpecDecoding metrics`` line is written once per interval with drafts in it."""
    try:
        seconds = float(environment.get(STATS_INTERVAL_ENV, ""))
    except ValueError:
        return DEFAULT_STATS_INTERVAL_S
    return seconds if math.isfinite(seconds) and seconds > 0 else DEFAULT_STATS_INTERVAL_S


def _after(argv: Sequence[str], flag: str) -> str | None:
    found: str | None = None
    for index, word in enumerate(argv):
        name, sep, value = word.partition("=")
        if name.replace("_", "-") != flag:
            continue
        if sep:
            found = value
        elif index + 1 < len(argv) and not argv[index + 1].startswith("-"):
            found = argv[index + 1]
    return found


def served_model(argv: Sequence[str]) -> ServedModel | None:
    """``--served-model-name`` (its first name), else the model ``serve`` takes (the
    positional tag, or ``--model``), as vLLM names it in ``/v1/models``."""
    name = _after(argv, "--served-model-name")
    if name is not None:
        return ServedModel(name=name, flag="--served-model-name")
    if "serve" in argv:
        index = list(argv).index("serve")
        if index + 1 < len(argv) and not argv[index + 1].startswith("-"):
            return ServedModel(name=argv[index + 1], flag="serve")
    model = _after(argv, "--model")
    return None if model is None else ServedModel(name=model, flag="--model")


# --- the sweep file's knob rules (orchestrator.engines.base.KnobRules) ------------------------


def knob_problem(flag: str, json_key: str | None) -> str | None:
    """Why a knob's mapping names something vLLM would refuse (a key of
    ``--speculative-config`` that is no ``SpeculativeConfig`` field), or None."""
    if json_key is not None and flag in facts.SPEC_FLAG_ALIASES:
        return facts.key_problem(json_key)
    return None


def value_problem(flag: str, json_key: str | None, value: KnobValue) -> str | None:
    """Why vLLM would refuse ``value`` for the knob (an unknown method, a count below 1), or
    None; the shortcut flags are checked as the keys they set."""
    if json_key is not None and flag in facts.SPEC_FLAG_ALIASES:
        return facts.value_problem(json_key, value)
    if flag in facts.SHORTCUT_FLAGS:
        return facts.value_problem(facts.SHORTCUT_FLAGS[flag], value)
    return None


def json_key_report(flag: str, json_key: str) -> str | None:
    """Where the running config reports a key of a JSON flag (the config check's key)."""
    if flag in facts.SPEC_FLAG_ALIASES:
        return config.config_path(flag, json_key)
    return None


class Vllm(ChatOnlyEngine):
    """vLLM as an ``orchestrator.engines.base.Engine`` (and ``KnobRules``): driven through its
    OpenAI-compatible chat API."""

    name = "vllm"
    default_unit = "vllm.service"
    server = "vLLM"
    chat = ChatDialect()
    metrics_flag = ""
    """None: vLLM serves ``/metrics`` by default (``--disable-log-stats`` turns it off)."""
    acceptance_counters = ACCEPTANCE_COUNTERS
    metrics_flags = staticmethod(metrics_flags)
    server_config = staticmethod(config.server_config)
    normal_word = staticmethod(config.normal_word)
    forced_flags = staticmethod(config.forced_flags)
    parse_command = staticmethod(argv_parser.parse_command)
    batch_command = staticmethod(argv_parser.batch_command)
    read_answers = staticmethod(argv_parser.read_answers)
    help_argv = staticmethod(argv_parser.help_argv)
    native_schedule = staticmethod(schedule.native_schedule)
    parse_log_line = staticmethod(logs.parse_log_line)
    classify_failure = staticmethod(logs.classify_failure)
    resolve_flag_knob = staticmethod(config.resolve_flag_knob)
    check_server_config = staticmethod(config.check_server_config)
    served_model = staticmethod(served_model)
    build_provenance = staticmethod(config.build_provenance)
    decode_log_interval = staticmethod(lines_weigh_alike)
    decode_log_period_s = staticmethod(decode_log_period_s)
    knob_problem = staticmethod(knob_problem)
    value_problem = staticmethod(value_problem)
    json_key_report = staticmethod(json_key_report)


VLLM: Engine = Vllm()

__all__ = ["ACCEPTANCE_COUNTERS", "VLLM", "Vllm", "served_model"]
