"""SGLang 0.5.23's adaptive speculative steps, as the simulated SGLang server honours them.

``--speculative-adaptive`` (a switch) turns it on; ``--speculative-adaptive-config PATH`` names
a JSON object keyed by batch size as text (``"1"``, ``"8"``, ...), each entry with
``candidate_steps`` (non-negative ints; 0 drafts nothing) and how the slot moves among them
(``up_hysteresis``, ``down_hysteresis``, ``ceiling_coeff``, and ``ema_alpha``,
``update_interval``, ``warmup_batches``, which a top-level key of the same name sets for every
slot); without a file, SGLang's own default (:data:`DEFAULT_CONFIG`). What SGLang does with
it, in ``ServerArgs.__post_init__`` (``speculative_hook.handle_speculative_decoding``):

1. ``_maybe_disable_adaptive``: where ``adaptive_unsupported_reason`` finds one
   (:func:`unsupported_reason`: only EAGLE/EAGLE3, top-k 1 or unset, no DP attention; its
   platform-worker, multi-layer EAGLE, two-batch-overlap and PD-mux checks concern what the
   simulator does not model), it logs :data:`FALLBACK` and runs its static steps;
2. ``_init_adaptive_speculative_params``: reads the file (:func:`load_config`: no
   integer-string key or a bad ``candidate_steps`` is a ``ValueError``, a file that is not a
   JSON object fails on ``.items()``, and the server does not start), sets top-k 1, the steps
   to the middle of the union of candidates when unset (a value outside it is a
   ``ValueError``), and the draft tokens to steps + 1.

At run time the batch goes to the slot of the largest key not above it (the simulator captures
no CUDA graphs to pad the batch to), and each slot's steps follow the EMA of the drafts its
verify steps accepted (:class:`~orchestrator.sim.drafting.AdaptiveSteps`). The simulator keeps
its own copy of these facts (it imports nothing of the orchestrator's); they were checked
against the 0.5.23 wheel's ``adaptive_spec_params.py``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from orchestrator.sim.drafting import SlotRule

ADAPTIVE_ALGORITHMS = ("EAGLE", "EAGLE3")
FALLBACK = "speculative_adaptive disabled: {reason}. Falling back to static speculative params."
DEFAULT_CONFIG: dict[str, dict[str, Any]] = {
    "1": {"candidate_steps": [1, 3, 5, 7], "up_hysteresis": 0.0, "down_hysteresis": -0.25,
          "ceiling_coeff": 0},
    "8": {"candidate_steps": [0, 1, 3], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
          "ceiling_coeff": 0},
    "32": {"candidate_steps": [0, 1], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
    "64": {"candidate_steps": [0], "up_hysteresis": 0.0, "down_hysteresis": 0.0,
           "ceiling_coeff": 0},
}  # fmt: skip
"""``adaptive_spec_params.DEFAULT_ADAPTIVE_CONFIG``: the config without a file."""
_RULE_KEYS = (
    "ema_alpha", "update_interval", "warmup_batches", "down_hysteresis", "up_hysteresis",
    "ceiling_coeff",
)  # fmt: skip


def unsupported_reason(values: Mapping[str, Any]) -> str | None:
    """``adaptive_unsupported_reason`` for the server args the simulator models (the
    algorithm as SGLang resolved it, NEXTN already EAGLE), or None when adaptive runs."""
    algorithm = values.get("speculative_algorithm")
    if algorithm not in ADAPTIVE_ALGORITHMS:
        return f"speculative_algorithm={algorithm} (only EAGLE/EAGLE3 are supported)"
    topk = values.get("speculative_eagle_topk")
    if topk is not None and topk != 1:
        return f"speculative_eagle_topk={topk} (only topk=1 is supported)"
    if values.get("enable_dp_attention"):
        return (
            "attention DP is not supported "
            "(adaptive tier decisions are not synchronized across DP ranks)"
        )
    return None


def parse_config(text: str | None) -> dict[str, Any]:
    """The config as ``json.load`` reads the file (None: SGLang's default). 0.5.23 calls
    ``.items()`` on it unchecked, so anything but an object fails as that call does."""
    if text is None:
        return DEFAULT_CONFIG
    config = json.loads(text)
    if not isinstance(config, dict):
        raise AttributeError(f"'{type(config).__name__}' object has no attribute 'items'")
    return config


def load_config(text: str | None) -> dict[int, SlotRule]:
    """``_load_adaptive_config``: each integer-string key's slot, with SGLang's errors."""
    config = parse_config(text)
    slots: dict[int, SlotRule] = {}
    for key, entry in config.items():
        if not key.isdigit():
            continue
        if not isinstance(entry, dict):
            raise AttributeError(f"'{type(entry).__name__}' object has no attribute 'get'")
        steps = entry.get("candidate_steps")
        if (
            not isinstance(steps, list)
            or not steps
            or not all(isinstance(s, int) and s >= 0 for s in steps)
        ):
            raise ValueError(
                f"BS {key}: candidate_steps must be a list of non-negative ints, got {steps!r}"
            )
        merged = {**config, **entry}
        settings = {name: merged[name] for name in _RULE_KEYS if name in merged}
        slots[int(key)] = SlotRule(candidates=tuple(sorted({int(s) for s in steps})), **settings)
    if not slots:
        raise ValueError(
            "speculative_adaptive_config must contain at least one integer-string BS key, "
            'e.g. {"1": {"candidate_steps": [1,3,7]}}. '
            f"Got keys: {list(config.keys())}"
        )
    return dict(sorted(slots.items()))


def candidate_steps(slots: Mapping[int, SlotRule]) -> list[int]:
    """``resolve_candidate_steps_from_config``: the union of every slot's candidates."""
    return sorted({step for rule in slots.values() for step in rule.candidates})


def initial_steps(steps: int | None, candidates: list[int]) -> int:
    """``_init_adaptive_speculative_params``'s steps: the server's, which must be a
    candidate, or the middle candidate when unset."""
    if steps is None:
        return candidates[len(candidates) // 2]
    if steps not in candidates:
        raise ValueError(
            f"--speculative-num-steps={steps} is not in the adaptive config candidate_steps "
            f"{candidates}. Pass one of those values."
        )
    return steps


__all__ = [
    "DEFAULT_CONFIG",
    "FALLBACK",
    "candidate_steps",
    "initial_steps",
    "load_config",
    "parse_config",
    "unsupported_reason",
]
