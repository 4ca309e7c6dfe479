"""vLLM's own speculative schedule: ``num_speculative_tokens_per_batch_size`` in
``--speculative-config`` (vLLM 0.33.0, ``config/speculative.py``).

The value is a list of ``(range_start, range_end, num_speculative_tokens)`` with inclusive
batch-size ranges, the first starting at 1, sorted and not overlapping
(``v1/spec_decode/dynamic/utils.validate_and_normalize_dynamic_sd_schedule``); a gap or the
tail after the last range carries the previous count forward, and every count is capped by
``num_speculative_tokens`` (``build_dynamic_sd_schedule_lookup``), which therefore must be the
largest. Only the draft length may vary by batch size: every other key is one server setting.
A count of 0 drafts nothing at that batch size, so a band the baseline won is a range of 0.

On model runner V1 vLLM drops the schedule for methods outside :data:`DYNAMIC_METHODS`, and
with data parallelism for every method, logging the warning that starts
:data:`FALLBACK_LINE` and running the static count (``config/vllm.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import orchestrator.engines.vllm.facts as facts
from orchestrator.engines.schedule import (
    NativeSchedule,
    NoNativeSchedule,
    ScheduleBand,
    check_bands,
    varying_knobs,
)
from orchestrator.host.dropin import KnobTarget
from orchestrator.types import KnobValue, LaunchOverlay

SCHEDULE_KEY = "num_speculative_tokens_per_batch_size"
TOKENS_KEY = "num_speculative_tokens"
DYNAMIC_METHODS = ("ngram", "eagle", "eagle3", "mtp", "draft_model", "dflash")
"""The methods model runner V1 keeps a schedule for (``_maybe_disable_dynamic_sd...``)."""
FALLBACK_LINE = "Dynamic speculative decoding is not supported"


def _spec_knobs(knobs: Mapping[str, KnobTarget]) -> dict[str, str]:
    """The knobs inside ``--speculative-config``, by name, with their JSON key."""
    return {
        name: target.json_key
        for name, target in knobs.items()
        if target.flag in facts.SPEC_FLAG_ALIASES and target.json_key is not None
    }


def _ranges(starts: Sequence[int], counts: Sequence[int]) -> list[list[int]]:
    """Inclusive ranges from each band's start to the next's, adjacent equal counts merged;
    the last range ends where it starts (vLLM carries it forward)."""
    ranges: list[list[int]] = []
    for index, (start, count) in enumerate(zip(starts, counts, strict=True)):
        end = starts[index + 1] - 1 if index + 1 < len(starts) else start
        if ranges and ranges[-1][2] == count:
            ranges[-1][1] = end
        else:
            ranges.append([start, end, count])
    return ranges


def native_schedule(
    bands: Sequence[ScheduleBand], knobs: Mapping[str, KnobTarget]
) -> NativeSchedule | NoNativeSchedule:
    """``bands`` as one ``--speculative-config``, or why vLLM cannot take them as one."""
    check_bands(bands)
    spec = _spec_knobs(knobs)
    tokens = next((name for name, key in spec.items() if key == TOKENS_KEY), None)
    if tokens is None:
        return NoNativeSchedule(
            f"no knob sets {facts.SPEC_FLAG}'s {TOKENS_KEY}, the one setting vLLM varies by "
            "batch size"
        )
    speculative = [band for band in bands if any(v is not None for v in band.config.values())]
    if not speculative:
        return NoNativeSchedule("the baseline wins at every load: there is nothing to schedule")
    fixed = varying_knobs(speculative) - {tokens}
    if fixed:
        return NoNativeSchedule(
            f"{', '.join(sorted(fixed))} differ between bands, and vLLM varies only "
            f"{TOKENS_KEY} by batch size"
        )
    common = speculative[0].config
    method = common.get(next((n for n, k in spec.items() if k == "method"), ""), None)
    if isinstance(method, str) and facts.canonical_method(method) not in DYNAMIC_METHODS:
        return NoNativeSchedule(
            f"vLLM {facts.VERSION} keeps a batch-size schedule only for "
            f"{', '.join(DYNAMIC_METHODS)} on model runner V1; method {method} would fall back "
            "to its static draft length"
        )
    counts = [_count(band.config.get(tokens)) if band in speculative else 0 for band in bands]
    ranges = _ranges([band.start for band in bands], counts)
    flag = knobs[tokens].flag or facts.SPEC_FLAG
    return NativeSchedule(
        config={**common, tokens: max(counts)},
        overlay=LaunchOverlay(json={flag: {SCHEDULE_KEY: ranges}}, refused_line=FALLBACK_LINE),
    )


def _count(value: KnobValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{TOKENS_KEY} is not a count: {value!r}")
    return int(value)


__all__ = ["DYNAMIC_METHODS", "FALLBACK_LINE", "SCHEDULE_KEY", "native_schedule"]
