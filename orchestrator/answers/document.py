"""The results document with its answers: what ``results --json``, ``run --json`` and the API
serve (the JSON edge).

The results' own keys stay as they were; ``answers`` is one more key. A stored sweep whose file
no longer parses (the schema moved on) still gets its results, with no answers.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.answers.answer import answer_sweep
from orchestrator.answers.model import Answer
from orchestrator.store.results import SweepResults
from orchestrator.sweepfile import Sweep, SweepFileError, parse_sweep
from orchestrator.types import JsonObject


@dataclass(frozen=True, slots=True)
class AnsweredResults:
    """A sweep's results and the answers drawn from them."""

    results: SweepResults
    answers: tuple[Answer, ...] = ()

    def to_json(self) -> JsonObject:
        return {**self.results.to_json(), "answers": [a.to_json() for a in self.answers]}


def answered(results: SweepResults, sweep: Sweep | None) -> AnsweredResults:
    """``results`` with the answers for ``sweep`` (none without a sweep)."""
    return AnsweredResults(results, () if sweep is None else answer_sweep(results, sweep))


def answered_from_text(results: SweepResults, yaml_text: str, label: str) -> AnsweredResults:
    """``results`` with the answers for the stored sweep file ``yaml_text``."""
    try:
        sweep = parse_sweep(yaml_text, label)
    except SweepFileError:
        return AnsweredResults(results)
    return answered(results, sweep)
