"""What the vLLM tier measures, defined once for its sweep (``test_vllm_sweep.py``) and its
direct comparison (:mod:`tests.realengine.vllm_compare`): the configs, each as the sweep
file's knobs and as the ``--speculative-config`` JSON a hand-started server gets, and the
sizing, with its reasons.

The question the sweep answers: which speculation, if any, makes the tiny target fastest on
this CPU: n-gram lookup (free to draft, and the tiny target's greedy output falls into loops
that the prompt and its own output predict) or the 1-layer draft model (each of its drafted
tokens costs a forward pass of the draft, nearly the price of the 8-layer target's on 2 cores,
where vLLM's own per-step work is a large part of a step), each at a short and a long draft.

Sizing (restarts dominate: a vLLM start is 45-80 s on 2 cores, a point 10-20 s):

- ``rounds`` 12 requests of 64 tokens a point at context 128: the first request after a
  start is slow (vLLM warms its kernels on it) and the warm-up takes it; 12 average over
  prompts whose loops the n-gram drafter predicts well or badly.
- ``repeats`` 3 restarts a config (15 starts for five configs, about 20 minutes on a quiet
  2-core machine): the n-gram configs are 1.4-2x the baseline and the draft model's below
  it, so 2 degrees of freedom per config (more where restart variance is pooled) separate
  them; the faults add one failed start (the missing draft) a repeat.
- ``direct_repeats`` 1: the direct comparison ranks the configs once on fresh servers.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tests.realengine.sizing import Sizing

BASELINE = "baseline"
NGRAM_LOOKUP_MAX = 4
"""``prompt_lookup_max``: the longest n-gram looked up (vLLM requires it with ``ngram``)."""


@dataclass(frozen=True)
class VllmConfig:
    """One config of the tier: its name in reports, and its speculation (None: none)."""

    name: str
    method: str | None = None
    tokens: int | None = None
    draft: str | None = None
    """The draft model's directory (``draft_model``)."""

    def knobs(self) -> dict[str, Any]:
        """The sweep file's config (the tier's knobs: method, tokens, draft, lookup_max)."""
        if self.method is None:
            return {}
        knobs: dict[str, Any] = {"method": self.method, "tokens": self.tokens}
        if self.method == "ngram":
            knobs["lookup_max"] = NGRAM_LOOKUP_MAX
        if self.draft is not None:
            knobs["draft"] = self.draft
        return knobs

    def speculative_config(self) -> dict[str, Any] | None:
        """``--speculative-config`` as the sweep's knobs build it (keys as vLLM names them)."""
        if self.method is None:
            return None
        spec: dict[str, Any] = {"method": self.method, "num_speculative_tokens": self.tokens}
        if self.method == "ngram":
            spec["prompt_lookup_max"] = NGRAM_LOOKUP_MAX
        if self.draft is not None:
            spec["model"] = self.draft
        return spec

    def flags(self) -> list[str]:
        spec = self.speculative_config()
        if spec is None:
            return []
        return ["--speculative-config", json.dumps(spec, sort_keys=True, separators=(",", ":"))]


NGRAM_TOKENS = (2, 6)
DRAFT_TOKENS = (2, 6)


def tier_configs(draft: str) -> list[VllmConfig]:
    """The baseline, n-gram at two draft lengths, the draft model at two."""
    return [
        VllmConfig(BASELINE),
        *(VllmConfig(f"ngram-{k}", "ngram", k) for k in NGRAM_TOKENS),
        *(VllmConfig(f"draft-{k}", "draft_model", k, draft) for k in DRAFT_TOKENS),
    ]


def config_name(knobs: dict[str, Any]) -> str:
    """A config's name from the sweep file's knobs (as ``results --json`` gives them back)."""
    method = knobs.get("method")
    if method is None:
        return BASELINE
    return f"{'ngram' if method == 'ngram' else 'draft'}-{knobs['tokens']}"


VLLM_TIER = Sizing(
    context=128,
    max_tokens=64,
    rounds=12,
    warmup_requests=1,
    repeats=3,
    draft_sizes=(),
    direct_repeats=1,
)
