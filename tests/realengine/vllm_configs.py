"""What the vLLM tier measures, defined once for its sweep (``test_vllm_sweep.py``) and its
direct comparison (:mod:`tests.realengine.vllm_compare`): the configs, each as the sweep
file's knobs and as the ``--speculative-config`` JSON a hand-started server gets, and the
sizing, with its reasons.

The question the sweep answers: which speculation, if any, makes the tiny target (16 layers,
hidden 1024, :mod:`tests.realengine.hf_models`) fastest on this CPU: n-gram lookup (free to
draft, but it drafts only where the output repeats an n-gram of the prompt or of itself) or
the 1-layer draft model (each drafted token costs a forward pass of 1/16 of the target's),
each at a short and a long draft. Measured by the tier on a 2-core machine that other suites
loaded (load average 5-8), output tok/s over 3 restarts: baseline 11-14; n-gram 2 and 6:
11-20 (accept length 2.9 and 6.9: when n-gram drafts, nearly all is taken, but it seldom
finds a match); draft model 2: 20-33 (2.4); draft model 8: 34-42 (4.8). The answer: the draft
model, 3.2x the baseline (interval 2.2-4.6x), at 8 or 2 (tied); ``orchestrator bench``
against hand-started servers ranked draft-8, draft-2, ngram-2, ngram-6, baseline.

Sizing (a start is 20-80 s on 2 cores, a point 10-60 s):

- ``rounds`` 12 requests of 64 tokens a point at context 128: the first request after a
  start is slow (vLLM warms its kernels on it) and the warm-up takes it; 12 average over
  prompts whose loops the drafters predict well or badly.
- ``repeats`` 3 restarts a config (15 starts for five configs): the restart-to-restart spread
  on the loaded machine was up to 1.6x (draft model 2: 20.0-32.7), so 2 degrees of freedom a
  config, with restart variance pooled over the type, still put the best's speedup interval
  well above 1; the faults add one failed start (the missing draft, about 20 s) a round.
- ``direct_repeats`` 1: the direct comparison ranks the configs once on fresh servers; the
  check is that its fastest is the answer's best or tied with it.

The sweep took 19 minutes, the direct comparison 7, the whole vLLM tier 29 on that loaded
machine.
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
DRAFT_TOKENS = (2, 8)


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
