"""Losslessness check: at temperature 0 a speculative config must reproduce the baseline's text.

Speculative decoding is meant to change speed, not output. A config whose temperature-0 outputs
on the coding prompts drift from the baseline trial's points at a broken build, draft model or
flag, even when its tests still pass, so the drift is flagged on its own. The position of the
first divergence helps tell an early break (wrong verification) from a late floating-point
wobble of a different batch shape.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.points import CodingPoint
from orchestrator.types import Outcome

_TOKENISH = re.compile(r"\w+|[^\w\s]")


@dataclass(frozen=True)
class OutputComparison:
    """One prompt's output under the config against the baseline's."""

    problem_id: str
    identical: bool
    first_divergence_char: int | None
    """Index of the first differing character (None when identical)."""
    first_divergence_token: int | None
    """Word-or-punctuation tokens before that point: a tokenizer-free stand-in for tokens."""
    baseline_chars: int
    candidate_chars: int


@dataclass(frozen=True)
class LosslessReport:
    """Exact-match rate of a config's outputs against the baseline's, and whether it drifted."""

    compared: int
    exact_matches: int
    drifted: bool
    comparisons: tuple[OutputComparison, ...]
    only_in_baseline: tuple[str, ...]
    only_in_candidate: tuple[str, ...]

    @property
    def exact_match_rate(self) -> float | None:
        return self.exact_matches / self.compared if self.compared else None

    @property
    def earliest_divergence_char(self) -> int | None:
        positions = [c.first_divergence_char for c in self.comparisons if not c.identical]
        return min((p for p in positions if p is not None), default=None)


def first_divergence(a: str, b: str) -> int | None:
    """Index of the first character where `a` and `b` differ; None when equal."""
    if a == b:
        return None
    limit = min(len(a), len(b))
    for index in range(limit):
        if a[index] != b[index]:
            return index
    return limit


def tokenish_count(text: str) -> int:
    """Words and punctuation marks in `text` (a position in "tokens" without a tokenizer)."""
    return len(_TOKENISH.findall(text))


def compare_output(problem_id: str, baseline: str, candidate: str) -> OutputComparison:
    position = first_divergence(baseline, candidate)
    return OutputComparison(
        problem_id=problem_id,
        identical=position is None,
        first_divergence_char=position,
        first_divergence_token=None if position is None else tokenish_count(baseline[:position]),
        baseline_chars=len(baseline),
        candidate_chars=len(candidate),
    )


def compare_outputs(
    baseline: Mapping[str, str], candidate: Mapping[str, str], *, tolerance: float = 0.0
) -> LosslessReport:
    """Compare outputs keyed by problem id. `tolerance` is the fraction of outputs allowed
    to differ before the config counts as drifted (0: any difference drifts)."""
    if not 0.0 <= tolerance < 1.0:
        raise ValueError(f"tolerance must be in [0, 1), got {tolerance}")
    shared = [pid for pid in baseline if pid in candidate]
    comparisons = tuple(compare_output(pid, baseline[pid], candidate[pid]) for pid in shared)
    matches = sum(1 for c in comparisons if c.identical)
    mismatches = len(comparisons) - matches
    drifted = bool(comparisons) and mismatches > tolerance * len(comparisons)
    return LosslessReport(
        compared=len(comparisons),
        exact_matches=matches,
        drifted=drifted,
        comparisons=comparisons,
        only_in_baseline=tuple(pid for pid in baseline if pid not in candidate),
        only_in_candidate=tuple(pid for pid in candidate if pid not in baseline),
    )


def check_lossless(
    baseline: Sequence[CodingPoint],
    candidate: Sequence[CodingPoint],
    *,
    temperature: float,
    tolerance: float = 0.0,
) -> LosslessReport:
    """Compare a config's coding outputs (reasoning + content) with the baseline trial's.

    Only meaningful at temperature 0; results whose request failed are left out.
    """
    if temperature != 0.0:
        raise ValueError(f"the lossless check needs temperature 0, got {temperature}")
    return compare_outputs(_outputs(baseline), _outputs(candidate), tolerance=tolerance)


def _outputs(points: Sequence[CodingPoint]) -> dict[str, str]:
    return {p.problem: p.output for p in points if p.outcome is not Outcome.REQUEST_ERROR}
