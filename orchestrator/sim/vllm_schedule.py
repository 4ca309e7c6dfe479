"""vLLM 0.33's speculative schedule, as the simulated ``vllm serve`` honours it.

``--speculative-config``'s ``num_speculative_tokens_per_batch_size`` is a list of
``[range_start, range_end, num_speculative_tokens]`` with inclusive batch-size ranges
(``config/speculative.py``). What vLLM does with it, in order:

1. ``VllmConfig.__post_init__`` (the API server) drops it, with a warning logged once, where it
   cannot be honoured: data parallelism above 1 (:data:`DP_FALLBACK`), and on model runner V1
   a method outside :data:`V1_DYNAMIC_METHODS` (:data:`V1_FALLBACK`). Model runner V2 is the
   default unless ``VLLM_USE_V2_MODEL_RUNNER=0`` or the config has what V2 lacks
   (:func:`uses_v2_model_runner`).
2. The engine core's scheduler builds a dense lookup up to ``max_num_seqs``
   (``v1/spec_decode/dynamic/utils.build_dynamic_sd_schedule_lookup``), validating the list
   first (:func:`validate_schedule`: a ``ValueError`` that fails the engine core's start);
   gaps and the tail carry the previous count forward and every count is capped by
   ``num_speculative_tokens``.
3. Each scheduling step drafts ``lookup[number of scheduled requests]`` tokens; 0 drafts
   nothing.

The simulator keeps its own copy of these facts (it imports nothing of the orchestrator's).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
V1_DYNAMIC_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
"""The methods model runner V1 keeps a schedule for (``_maybe_disable_dynamic_sd_for_v1``)."""
V2_RUNNER_ENV = "VLLM_USE_V2_MODEL_RUNNER"
V2_UNSUPPORTED_METHODS = ("suffix", "custom_class")
"""Methods model runner V2 does not run (``_get_v2_model_runner_unsupported_features``)."""

V1_FALLBACK = (
    "Dynamic speculative decoding is not supported with the '{method}' speculative method on "
    "Model Runner V1. Disabling num_speculative_tokens_per_batch_size and falling back to "
    "static num_speculative_tokens={tokens}."
)
DP_FALLBACK = (
    "Dynamic speculative decoding is not supported with data parallelism because data-parallel "
    "ranks can select different speculative-token counts, causing DP divergence and deadlocks. "
    "Disabling num_speculative_tokens_per_batch_size and falling back to static "
    "num_speculative_tokens={tokens}."
)
V1_FALLBACK_WHERE = "vllm.py:1100"
DP_FALLBACK_WHERE = "vllm.py:1119"
"""Where vLLM 0.33's ``config/vllm.py`` logs each warning (``logger.warning_once``)."""


def uses_v2_model_runner(spec: Mapping[str, Any], environ: Mapping[str, str]) -> bool:
    """``VllmConfig.use_v2_model_runner`` for what the simulator models: the environment's
    choice when set (``VLLM_USE_V2_MODEL_RUNNER=0`` or ``1``), else V2 unless the method or
    EAGLE's parallel drafting is one V2 lacks."""
    raw = environ.get(V2_RUNNER_ENV)
    if raw is not None and raw.strip():
        try:
            return bool(int(raw))
        except ValueError:
            return raw.strip().lower() in ("true", "yes", "on")
    method = spec.get("method")
    if method in V2_UNSUPPORTED_METHODS:
        return False
    return not (spec.get("parallel_drafting") and method not in ("dflash", "dspark"))


def fallback_warning(
    spec: Mapping[str, Any], data_parallel_size: int, environ: Mapping[str, str]
) -> tuple[str, str] | None:
    """The warning (its text and where vLLM logs it) with which vLLM drops ``spec``'s schedule
    and runs its static ``num_speculative_tokens``, or None when it keeps it. As vLLM checks
    it, a schedule is present when the key is set at all, an empty list included."""
    if spec.get(SCHEDULE_KEY) is None:
        return None
    tokens = spec.get("num_speculative_tokens")
    if data_parallel_size > 1:
        return DP_FALLBACK.format(tokens=tokens), DP_FALLBACK_WHERE
    method = str(spec.get("method"))
    if not uses_v2_model_runner(spec, environ) and method not in V1_DYNAMIC_METHODS:
        return V1_FALLBACK.format(method=method, tokens=tokens), V1_FALLBACK_WHERE
    return None


def logged_at(warning: str) -> str:
    """Where vLLM logs a fallback warning of :func:`fallback_warning` (``[file.py:line]``)."""
    if warning.startswith(DP_FALLBACK.split("{", 1)[0]):
        return DP_FALLBACK_WHERE
    return V1_FALLBACK_WHERE


def validate_schedule(value: object) -> list[tuple[int, int, int]]:
    """``validate_and_normalize_dynamic_sd_schedule``: the ranges sorted by start, or vLLM's
    ``ValueError``."""
    if value is None:
        raise ValueError(
            "num_speculative_tokens_per_batch_size is required for dynamic speculative decoding."
        )
    if not isinstance(value, list):
        raise ValueError(
            "num_speculative_tokens_per_batch_size must be a non-empty list of "
            "(range_start, range_end, num_speculative_tokens) entries."
        )
    if not value:
        raise ValueError("num_speculative_tokens_per_batch_size must not be empty.")
    ranges = [_entry(entry) for entry in value]
    ranges.sort(key=lambda entry: entry[0])
    previous_end = 0
    for start, end, _ in ranges:
        if start <= previous_end:
            raise ValueError("Batch-size ranges must be non-overlapping and sorted.")
        previous_end = end
    if ranges[0][0] != 1:
        raise ValueError(
            "The first batch-size range must start at 1 so every runtime batch size has a "
            "defined schedule."
        )
    return ranges


def _entry(entry: object) -> tuple[int, int, int]:
    if not isinstance(entry, list | tuple) or len(entry) != 3:
        raise ValueError(
            "Each num_speculative_tokens_per_batch_size entry must be a 3-item sequence: "
            "(range_start, range_end, num_speculative_tokens)."
        )
    start, end, tokens = (int(entry[0]), int(entry[1]), int(entry[2]))
    if start <= 0 or end <= 0:
        raise ValueError(f"Batch-size range ({start}, {end}) must be positive.")
    if start > end:
        raise ValueError(f"Batch-size range start must be <= end for ({start}, {end}, {tokens}).")
    if tokens < 0:
        raise ValueError("num_speculative_tokens_per_batch_size values must be >= 0.")
    return start, end, tokens


def dense_lookup(value: object, max_batch_size: int, num_speculative_tokens: int) -> list[int]:
    """``build_dynamic_sd_schedule_lookup``: the draft length at each batch size 1 ..
    ``max_batch_size`` (index 0 unused), gaps and the tail carrying the previous count
    forward, each count capped by ``num_speculative_tokens``."""
    if max_batch_size <= 0:
        raise ValueError("vllm_max_batch_size must be > 0.")
    if num_speculative_tokens <= 0:
        raise ValueError("vllm_num_speculative_tokens must be > 0.")
    ranges = validate_schedule(value)
    dense = [0] * (max_batch_size + 1)
    next_batch = 1
    last: int | None = None
    for start, end, tokens in ranges:
        if start > next_batch and last is not None:
            for batch in range(next_batch, min(start, max_batch_size + 1)):
                dense[batch] = min(num_speculative_tokens, last)
        for batch in range(max(start, next_batch), min(end, max_batch_size) + 1):
            dense[batch] = min(num_speculative_tokens, tokens)
        next_batch = max(next_batch, end + 1)
        last = tokens
        if next_batch > max_batch_size:
            break
    if last is None:
        raise ValueError(
            "num_speculative_tokens_per_batch_size must contain at least one valid batch-size "
            "range."
        )
    for batch in range(next_batch, max_batch_size + 1):
        dense[batch] = min(num_speculative_tokens, last)
    return dense


__all__ = [
    "DP_FALLBACK",
    "SCHEDULE_KEY",
    "V1_DYNAMIC_METHODS",
    "V1_FALLBACK",
    "dense_lookup",
    "fallback_warning",
    "logged_at",
    "uses_v2_model_runner",
    "validate_schedule",
]
