"""SGLang's own speculative schedule: ``--speculative-adaptive`` with
``--speculative-adaptive-config PATH`` (SGLang 0.5.23, ``srt/speculative/adaptive_spec_params.py``).

The file is a JSON object keyed by batch size as text (``"1"``, ``"8"``, ...), each entry with
``candidate_steps`` (non-negative ints; 0 drafts nothing), ``up_hysteresis``,
``down_hysteresis`` and ``ceiling_coeff``. A running batch goes to the slot of the largest key
not above it (``AdaptiveStepRouter.batch_size_key_for_batch``), and each slot moves among its
candidates by the acceptance it sees: one candidate per slot pins the slot to the steps the
sweep measured best at that load, so the schedule runs what was measured, not a policy of its
own. Only EAGLE/EAGLE3 with top-k 1 take it (``adaptive_unsupported_reason``); otherwise
SGLang logs :data:`FALLBACK_LINE` and runs its static steps.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from orchestrator.engines.schedule import (
    NativeSchedule,
    NoNativeSchedule,
    ScheduleBand,
    check_bands,
    varying_knobs,
)
from orchestrator.engines.sglang.forcing import (
    ALGORITHM_FLAG,
    DRAFT_TOKENS_FLAG,
    STEPS_FLAG,
    TOPK_FLAG,
)
from orchestrator.host.dropin import KnobTarget
from orchestrator.types import KnobValue, LaunchOverlay

ADAPTIVE_FLAG = "--speculative-adaptive"
ADAPTIVE_CONFIG_FLAG = "--speculative-adaptive-config"
ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
FALLBACK_LINE = "speculative_adaptive disabled:"
"""``speculative_adaptive disabled: <reason>. Falling back to static speculative params.``"""


def _by_flag(knobs: Mapping[str, KnobTarget]) -> dict[str, str]:
    """Each flag's knob name."""
    return {target.flag: name for name, target in knobs.items() if target.flag is not None}


def _slot(steps: int) -> dict[str, object]:
    return {"candidate_steps": [steps], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
            "ceiling_coeff": 0}  # fmt: skip


def adaptive_file(starts: Sequence[int], steps: Sequence[int]) -> str:
    """The adaptive config file: one slot per band start, pinned to its steps."""
    slots = {str(start): _slot(count) for start, count in zip(starts, steps, strict=True)}
    return json.dumps(slots, indent=2) + "\n"


def native_schedule(
    bands: Sequence[ScheduleBand], knobs: Mapping[str, KnobTarget]
) -> NativeSchedule | NoNativeSchedule:
    """``bands`` as SGLang's adaptive config and its flags, or why SGLang cannot take them."""
    check_bands(bands)
    flags = _by_flag(knobs)
    speculative = [band for band in bands if any(v is not None for v in band.config.values())]
    if not speculative:
        return NoNativeSchedule("the baseline wins at every load: there is nothing to schedule")
    algorithms = {str(b.config.get(flags.get(ALGORITHM_FLAG, ""), "")).upper() for b in speculative}
    if ALGORITHM_FLAG in flags and not algorithms <= set(ADAPTIVE_ALGORITHMS):
        named = ", ".join(sorted(a or "no algorithm" for a in algorithms))
        return NoNativeSchedule(
            f"SGLang adapts its steps only for EAGLE/EAGLE3 with top-k 1 (here {named}): "
            "run each band's config"
        )
    steps_knob = flags.get(STEPS_FLAG)
    if steps_knob is None:
        return NoNativeSchedule(f"no knob sets {STEPS_FLAG}, the setting SGLang adapts by batch")
    # With top-k 1 SGLang sets the draft tokens to steps + 1 itself: they may follow the steps.
    fixed = varying_knobs(speculative) - {steps_knob, flags.get(DRAFT_TOKENS_FLAG, "")}
    if fixed:
        return NoNativeSchedule(
            f"{', '.join(sorted(fixed))} differ between bands, and SGLang adapts only "
            f"{STEPS_FLAG} by batch size"
        )
    common = speculative[0].config
    algorithm = str(common.get(flags.get(ALGORITHM_FLAG, ""), "")).upper()
    topk = common.get(flags.get(TOPK_FLAG, ""))
    if algorithm not in ADAPTIVE_ALGORITHMS or (topk is not None and str(topk) != "1"):
        return NoNativeSchedule(
            "SGLang adapts its steps only for EAGLE/EAGLE3 with top-k 1 "
            f"(here {algorithm or 'no algorithm'}, top-k {topk if topk is not None else 'unset'})"
        )
    counts = [_steps(band.config.get(steps_knob)) if band in speculative else 0 for band in bands]
    config: dict[str, KnobValue] = {**common, steps_knob: max(counts)}
    if (drafts := flags.get(DRAFT_TOKENS_FLAG)) is not None and drafts in config:
        config[drafts] = max(counts) + 1
    return NativeSchedule(
        config=config,
        overlay=LaunchOverlay(
            flags={ADAPTIVE_FLAG: None},
            files={ADAPTIVE_CONFIG_FLAG: adaptive_file([band.start for band in bands], counts)},
            refused_line=FALLBACK_LINE,
        ),
    )


def _steps(value: KnobValue) -> int:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{STEPS_FLAG} is not a count: {value!r}")
    return int(value)


__all__ = [
    "ADAPTIVE_CONFIG_FLAG",
    "ADAPTIVE_FLAG",
    "FALLBACK_LINE",
    "adaptive_file",
    "native_schedule",
]
