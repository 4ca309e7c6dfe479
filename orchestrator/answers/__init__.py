"""The answers layer: a sweep's stored results turned into which config to deploy per host
type, with the uncertainty that decision carries (pooling, intervals, verdicts)."""

from orchestrator.answers.answer import answer_sweep
from orchestrator.answers.document import AnsweredResults, answered, answered_from_text
from orchestrator.answers.model import (
    Answer,
    Contender,
    ConvergenceStep,
    Estimate,
    FailedConfig,
    HostFlag,
    IntervalBasis,
    Margin,
    ObjectiveView,
    Verdict,
)

__all__ = [
    "Answer",
    "AnsweredResults",
    "Contender",
    "ConvergenceStep",
    "Estimate",
    "FailedConfig",
    "HostFlag",
    "IntervalBasis",
    "Margin",
    "ObjectiveView",
    "Verdict",
    "answer_sweep",
    "answered",
    "answered_from_text",
]
