"""The simulated server's performance model: step time and acceptance, as pure functions.

A sweep needs something real to find, so the model reproduces the shapes that matter on real
hardware (see docs/simulator.md for the equations):

- a decode step costs a fixed time plus terms that grow with the tokens the target model verifies
  (batch x verify width), with the context held in the KV cache, and with tree size; the fixed
  time is the weights streamed once, until the tokens a step verifies make it compute-bound
  (a smooth roofline), so a long draft that is nearly free at batch 1 costs its full compute at
  batch 32 and the best draft length falls with load;
- speculative acceptance grows with tree budget / top-k and saturates (never above the DFLASH
  block size), while verify cost keeps growing, so throughput peaks at an INTERIOR budget;
- DFLASH's gain over the baseline shrinks with concurrency (verify work becomes compute-bound);
- a drafter without a sliding window loses acceptance on long contexts; the window keeps it;
- the drafter accepts more on code and repetitive text and less on prose than on plain text
  (the request's content class, :mod:`orchestrator.sim.content`).

Everything here is deterministic except :func:`sample_accepted`, which takes a seeded RNG.
Real hardware also varies from restart to restart (clocks, memory placement, which kernels the
autotuner picked): :func:`restart_speed_factor` is one server process's multiplier on all its
step times, drawn from the seed and the invocation.
"""

from __future__ import annotations

import hashlib
import math
import random
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from statistics import NormalDist
from typing import NamedTuple

from orchestrator.sim.content import ContentClass

_STANDARD_NORMAL = NormalDist()


class SpecKind(Enum):
    """How the target model verifies drafts: not at all, a chain, or a tree."""

    NONE = "none"
    CHAIN = "chain"
    TREE = "tree"


@dataclass(frozen=True)
class PerfParams:
    """Constants of the model. Times in milliseconds, before the time scale is applied.

    The defaults describe a large model on one 8-GPU host: ~65 tok/s per request at C=1
    without speculative decoding.
    """

    step_base_ms: float = 15.0
    """Fixed cost of one target forward pass (weights streamed once per step)."""
    compute_token_ms: float = 0.25
    """Compute per token the target verifies once the step is compute-bound: the forward
    costs sqrt(step_base^2 + (this x tokens)^2), a smooth roofline whose knee is at
    step_base / this tokens (60 by default). 0: never compute-bound (a compute-rich host)."""
    verify_token_ms: float = 0.032
    """Cost per token the target processes in a step (batch size x verify width)."""
    context_ms_per_ktok: float = 0.05
    """Attention cost per 1000 tokens of KV cache read in a step (summed over the batch)."""
    tree_node_ms: float = 0.06
    """Tree-verify overhead per (tree node)^2 per step: the tree mask and tree attention are
    quadratic in the node count."""
    tree_node_batch_ref: float = 16.0
    """The tree-node overhead grows by (1 + batch / this)."""
    draft_base_ms: float = 5.0
    """Fixed cost of one drafter pass (DFLASH drafts a whole block in one pass)."""
    draft_token_ms: float = 0.0077
    """Drafter cost per drafted token in the batch."""
    draft_context_ms_per_ktok: float = 0.02
    """Drafter attention per 1000 tokens of context it reads (capped by the draft window)."""
    eagle_step_ms: float = 0.5
    """Cost of one sequential EAGLE draft step."""
    prefill_base_ms: float = 10.0
    prefill_token_ms: float = 0.08
    """Prefill cost per new (uncached) prompt token: ~12.5k tok/s."""
    alpha_dflash: float = 0.78
    """Per-position acceptance of the DFLASH drafter at short context."""
    alpha_eagle: float = 0.70
    alpha_eagle3: float = 0.80
    """EAGLE-3's drafter (trained on the target's own features, several layers fused) accepts
    more per position than EAGLE's; vLLM's ``eagle3`` and MTP heads run at this rate."""
    alpha_ngram: float = 0.45
    topk_gain: float = 0.8
    """Top-k k lifts per-depth acceptance to 1 - (1 - alpha) * k ** -topk_gain."""
    tree_width_per_extra_k: float = 0.1
    """A budget-N tree with top-k k reaches depth ~ N / (1 + (k - 1) * this)."""
    long_context_penalty: float = 0.06
    """Acceptance loss per doubling of drafter context beyond long_context_ref tokens."""
    long_context_ref: float = 2048.0
    ddtree_depth_bonus_gain: float = 0.05
    """Each unit of SGLANG_DDTREE_DEPTH_BONUS deepens the tree by this fraction of its depth."""
    content_shift_prose: float = -0.08
    """Added to alpha0 on prose (free chat): the next words are hard to guess."""
    content_shift_code: float = 0.08
    """Added to alpha0 on code: syntax, indentation and names repeat."""
    content_shift_repetitive: float = 0.12
    """Added to alpha0 on text that largely repeats itself."""
    ngram_shift_repetitive: float = 0.35
    """NGRAM's shift on repetitive text instead: it drafts by looking the context up."""


@dataclass(frozen=True)
class SpecShape:
    """What a speculative configuration means to the model, after SGLang's resolution rules.

    ``verify_width``: tokens the target verifies per request per step (1 without speculation).
    ``max_depth``: most draft tokens one step can accept (the bonus token comes on top).
    ``topk``: branching per depth (1 = chain). ``window``: drafter sliding window or None.
    ``draft_steps``: sequential draft passes (EAGLE) or 1 (DFLASH one-shot block drafting).
    """

    kind: SpecKind
    algorithm: str
    verify_width: int
    max_depth: int
    topk: int
    window: int | None
    draft_steps: int
    depth_bonus: float = 0.0

    @property
    def speculative(self) -> bool:
        return self.kind is not SpecKind.NONE


BASELINE = SpecShape(
    kind=SpecKind.NONE, algorithm="", verify_width=1, max_depth=0, topk=1, window=None,
    draft_steps=0,
)


def base_alpha(shape: SpecShape, params: PerfParams) -> float:
    """The drafter's per-position acceptance at short context, by algorithm family."""
    if shape.algorithm == "NGRAM":
        return params.alpha_ngram
    if shape.algorithm in ("DFLASH", "DDTREE", "DSPARK"):
        return params.alpha_dflash
    if shape.algorithm == "EAGLE3":
        return params.alpha_eagle3
    return params.alpha_eagle


def content_shift(shape: SpecShape, content: ContentClass, params: PerfParams) -> float:
    """What the request's content class adds to alpha0 (:mod:`orchestrator.sim.content`):
    exactly 0 on plain text, so plain text keeps the model's acceptance bit for bit."""
    if content is ContentClass.PROSE:
        return params.content_shift_prose
    if content is ContentClass.CODE:
        return params.content_shift_code
    if content is ContentClass.REPETITIVE:
        if shape.algorithm == "NGRAM":
            return params.ngram_shift_repetitive
        return params.content_shift_repetitive
    return 0.0


def per_depth_acceptance(
    shape: SpecShape,
    context_tokens: int,
    params: PerfParams,
    content: ContentClass = ContentClass.PLAIN,
) -> float:
    """Probability that the next depth of the draft is accepted, given the context length.

    alpha(ctx) = alpha0 + shift(content) - penalty * log2(1 + max(0, ctx_seen - ref) / ref),
    where ctx_seen is capped by the draft window (a drafter trained on a window is lost beyond
    it without one). Top-k lifts it: p = 1 - (1 - alpha) * k ** -gain.
    """
    seen = float(context_tokens if shape.window is None else min(context_tokens, shape.window))
    excess = max(0.0, seen - params.long_context_ref) / params.long_context_ref
    alpha0 = base_alpha(shape, params) + content_shift(shape, content, params)
    alpha = alpha0 - params.long_context_penalty * math.log2(1.0 + excess)
    alpha = min(0.98, max(0.05, alpha))
    lift: float = float(shape.topk) ** (-params.topk_gain)
    return 1.0 - (1.0 - alpha) * lift


def effective_depth(shape: SpecShape, params: PerfParams) -> float:
    """How deep the verified draft reaches (fractional), before acceptance."""
    if shape.kind is SpecKind.NONE:
        return 0.0
    if shape.kind is SpecKind.CHAIN:
        return float(shape.max_depth)
    width = 1.0 + (shape.topk - 1) * params.tree_width_per_extra_k
    depth = (shape.verify_width - 1) / width
    depth *= 1.0 + params.ddtree_depth_bonus_gain * shape.depth_bonus
    return max(1.0, min(float(shape.max_depth), depth))


class DraftReach(NamedTuple):
    """How far one request's draft reaches in one verify step: each depth is accepted with
    probability ``p`` once the one before it was, through ``whole`` depths, and the
    fractional depth beyond them adds one more with probability ``frac`` (times ``p``)."""

    p: float
    whole: int
    frac: float


def draft_reach(
    shape: SpecShape,
    context_tokens: int,
    params: PerfParams,
    content: ContentClass = ContentClass.PLAIN,
) -> DraftReach:
    """The reach of a speculative ``shape``'s draft at this context: what
    :func:`expected_accept_len`, :func:`sample_accepted` and :func:`accepted_distribution`
    read as the mean, a draw and the law of one step's gain."""
    p = per_depth_acceptance(shape, context_tokens, params, content)
    depth = effective_depth(shape, params)
    whole = int(depth)
    return DraftReach(p, whole, depth - whole)


def expected_accept_len(
    shape: SpecShape,
    context_tokens: int,
    params: PerfParams,
    content: ContentClass = ContentClass.PLAIN,
) -> float:
    """E[tokens emitted per request per verify step] = 1 + sum_{d=1..D} p^d (fractional D)."""
    if not shape.speculative:
        return 1.0
    p, whole, frac = draft_reach(shape, context_tokens, params, content)
    total = sum(p**d for d in range(1, whole + 1))
    total += frac * p ** (whole + 1)
    return 1.0 + total


def sample_accepted(
    rng: random.Random,
    shape: SpecShape,
    context_tokens: int,
    params: PerfParams,
    content: ContentClass = ContentClass.PLAIN,
) -> int:
    """Draw the tokens one request gains in one step (>= 1), matching expected_accept_len."""
    if not shape.speculative:
        return 1
    p, whole, frac = draft_reach(shape, context_tokens, params, content)
    n = 1
    for _ in range(whole):
        if rng.random() >= p:
            return n
        n += 1
    if rng.random() < frac and rng.random() < p:
        n += 1
    return n


def accepted_distribution(
    shape: SpecShape,
    context_tokens: int,
    params: PerfParams,
    content: ContentClass = ContentClass.PLAIN,
) -> tuple[float, ...]:
    """P(one request gains 1, 2, ... tokens in one step): the law :func:`sample_accepted` draws.

    Depth d (of the whole depths) is reached with p^d and stops there with (1 - p); past the
    whole depths the fractional one adds a token with (D - floor(D)) * p.
    """
    if not shape.speculative:
        return (1.0,)
    p, whole, frac = draft_reach(shape, context_tokens, params, content)
    probs = [p**k * (1.0 - p) for k in range(whole)]
    probs.append(p**whole * (1.0 - frac * p))
    probs.append(p**whole * frac * p)
    return tuple(probs)


def restart_speed_factor(seed: int, invocation: str, relative_sd: float) -> float:
    """One server process's multiplier on every prefill and decode step time.

    Lognormal with mean exactly 1 and the given relative standard deviation (so it stays
    positive however large the spread), drawn from a hash of (seed, invocation): each start of
    the unit is a new invocation, so a new draw, and the same seed and invocation give the same
    factor on any machine. ``relative_sd`` 0 is exactly 1.
    """
    if relative_sd <= 0.0:
        return 1.0
    digest = hashlib.sha256(f"restart-jitter:{seed}:{invocation}".encode()).digest()
    unit = (int.from_bytes(digest[:8], "big") + 0.5) / 2.0**64
    sigma = math.sqrt(math.log1p(relative_sd * relative_sd))
    return math.exp(sigma * _STANDARD_NORMAL.inv_cdf(unit) - 0.5 * sigma * sigma)


def step_time_ms(shape: SpecShape, contexts: Sequence[int], params: PerfParams) -> float:
    """Duration of one decode (draft + verify) step for a running batch with these contexts.

    t = sqrt(base^2 + (compute_token * B * W)^2) + verify_token * B * W + ctx * sum(ctx_i)/1000
        + [tree] tree_node * W^2 * (1 + B / ref)
        + [spec] draft_steps * (draft_base or eagle_step) + draft_token * B * W
                 + draft_ctx * sum(min(ctx_i, window))/1000
    """
    if not contexts:
        return 0.0
    window = shape.window
    seen = sum(contexts) if window is None else sum(min(c, window) for c in contexts)
    return batch_step_time_ms(shape, len(contexts), float(sum(contexts)), float(seen), params)


def batch_step_time_ms(
    shape: SpecShape, batch: int, total_context: float, seen_context: float, params: PerfParams
) -> float:
    """:func:`step_time_ms` from the batch's size and sums: the context sum of the batch and
    the drafter's (each context capped by the window). Linear in both sums, so the total time
    of steps whose sums grow linearly is the step at their mean times their count."""
    if batch == 0:
        return 0.0
    width = shape.verify_width
    tokens = batch * width
    t = math.hypot(params.step_base_ms, params.compute_token_ms * tokens)
    t += params.verify_token_ms * tokens
    t += params.context_ms_per_ktok * total_context / 1000.0
    if not shape.speculative:
        return t
    if shape.kind is SpecKind.TREE:
        t += params.tree_node_ms * width * width * (1.0 + batch / params.tree_node_batch_ref)
    if shape.algorithm in ("EAGLE", "EAGLE3", "STANDALONE"):
        t += params.eagle_step_ms * shape.draft_steps
    elif shape.algorithm != "NGRAM":
        t += params.draft_base_ms
    t += params.draft_token_ms * batch * width
    t += params.draft_context_ms_per_ktok * seen_context / 1000.0
    return t


def prefill_time_ms(new_tokens: int, params: PerfParams) -> float:
    """Prefill of a batch of new requests: fixed cost plus per uncached prompt token."""
    return params.prefill_base_ms + params.prefill_token_ms * new_tokens


def steady_throughput(
    shape: SpecShape,
    context_tokens: int,
    concurrency: int,
    params: PerfParams,
    content: ContentClass = ContentClass.PLAIN,
) -> float:
    """Per-request decode tokens per second (unscaled) with ``concurrency`` equal requests."""
    contexts = [context_tokens] * concurrency
    accept = expected_accept_len(shape, context_tokens, params, content)
    return 1000.0 * accept / step_time_ms(shape, contexts, params)
