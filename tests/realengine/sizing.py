"""How much the real-engine tier measures, defined once for its sweep and for the direct
comparison (:mod:`tests.realengine.compare`) the sweep's answer is checked against.

The tier must answer with a decision on a loaded 2-core CI machine, in about 20 minutes. Its
first sizing (3 requests a point, 2 restarts a config) answered ``tie`` with the best at
``25.0 [0.6, 1016.2]``: every point flagged ``N`` (under the 5 requests a point needs) and ``P``
(prompts off their context), restart-to-restart spread 31-50 %. What each number here does:

- ``rounds`` and ``max_tokens``: 8 requests of 64 tokens a point (the ``N`` flag wants 5). A
  request's speed depends on its prompt (each starts with a fresh nonce, and the tiny target's
  greedy output falls into loops its draft predicts well or badly) and on what else the
  machine runs meanwhile; a restart's value averages both over its requests, so more, shorter
  requests average more prompts in the same time than few long ones. 512 tokens are 25-40 s a
  point on the shared machine; the within-run standard error is about 5 %.
- ``repeats``: 5 restarts of each config, in rounds (``A B C D A B C D ...``), so a machine
  that is busier for a few minutes slows every config of a round rather than one config's
  every restart. With 2 restarts a config's interval had 1 degree of freedom (t quantile
  12.7); with 5 it has 4 of its own (t 2.8), more where restart variance is pooled over the
  type. Restarts, not requests, are what the spread is made of on a shared machine: the load
  moves between trials more than within one (one restart of n-max 8 read 18.8 tok/s between
  three of 25-26 while other suites ran), and a fifth restart dilutes such a one.
- ``draft_sizes``: 2, 8 and 16: a draft too short, the interior optimum (8) and a draft too
  long, both 15-25 % below 8. With 4, 8 and 16 the three speculative configs were within
  10-20 % of each other and both the answer and the direct comparison ordered 4 and 16
  differently from run to run, so "the answer's best is one of the two fastest" depended on
  chance; with a too-short draft in their place the question (which draft size) keeps a
  config on each side of the optimum that the data can separate, and four configs fit the
  time that five restarts each take.
- ``direct_repeats``: the direct comparison (:mod:`tests.realengine.compare`) only has to rank
  the configs for the check that the answer's best is one of its two fastest; 2 rounds on fresh
  servers put n-max 8 first by 17-30 % in every run so far.
- ``context`` as before; the prompts now meet it exactly (:mod:`tests.realengine.models`
  makes every prompt word one token).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Sizing:
    context: int = 128
    max_tokens: int = 64
    rounds: int = 8
    warmup_requests: int = 1
    repeats: int = 5
    draft_sizes: tuple[int, ...] = (2, 8, 16)
    direct_repeats: int = 2
    """Rounds of the direct comparison (each config on a fresh server per round)."""

    def benchmark_yaml(self) -> str:
        """The sweep file's ``benchmark`` section and its objective."""
        return (
            "benchmark:\n  api: chat\n"
            f"  contexts: [{self.context}]\n  concurrency: [1]\n"
            f"  max_tokens: {self.max_tokens}\n  rounds: {self.rounds}\n"
            f"  warmup_requests: {self.warmup_requests}\n  repeats: {self.repeats}\n"
            f"objective: {{metric: output_tok_s, context: {self.context}, concurrency: 1}}\n"
        )

    def bench_args(self) -> tuple[str, ...]:
        """``orchestrator bench``'s matrix options for the same point."""
        return (
            "--contexts", str(self.context), "--concurrency", "1",
            "--rounds", str(self.rounds), "--warmup", str(self.warmup_requests),
            "--max-tokens", str(self.max_tokens),
        )  # fmt: skip


TIER = Sizing()
