"""Whether a sweep ran to its end on a host type, and if not, why, in words (pure).

An answer from a sweep that was cut short (a deadline, a cancel, an interrupt, a crash, a
search that ran out of time to explore) is the best of what was measured, not of what the
sweep set out to compare: it must say so first and never read as a deploy advice.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.store.results import SweepResults
from orchestrator.types import DEADLINE_STOP, plural

STOPPED_CAUSE = "stopped"
"""The cause of an attempt that a stop (cancel, deadline) ended in flight: not a failure."""
_NEVER_RAN = frozenset({"queued", "cancelled"})


def _state_reason(results: SweepResults) -> str | None:
    summary = results.summary or {}
    stopped = summary.get("stopped")
    if results.state == "cancelled":
        return "the sweep was cancelled"
    if results.state == "failed":
        error = summary.get("error")
        return f"the sweep failed ({error})" if error else "the sweep failed"
    if results.state == "running":
        return "the sweep has not finished: it is running, or its controller stopped first"
    if results.state == "queued":
        return "the sweep has not started"
    if stopped == DEADLINE_STOP:
        return "the finish_by deadline stopped it"
    if stopped:
        return f"it was stopped ({stopped})"
    return None


def cut_short(results: SweepResults, host_type: str, types: Mapping[str, str]) -> str | None:
    """Why the sweep did not run its plan or search to the end on ``host_type``; None when
    it did. The sweep's own state first, then the trials that never ran, then a search that
    stopped exploring for lack of time."""
    reasons: list[str] = []
    state = _state_reason(results)
    if state is not None:
        reasons.append(state)
    never = sum(
        1
        for outcome in results.latest()
        if types.get(outcome.host) == host_type and outcome.state in _NEVER_RAN
    )
    if never:
        reasons.append(f"{plural(never, 'planned trial')} never ran")
    for stop in results.exploration_stops:
        if stop.host_type == host_type and "finish_by" in stop.reason:
            reached = (
                f" after {stop.explored} of {stop.space} configs"
                if stop.explored is not None and stop.space
                else ""
            )
            reasons.append(f"the search stopped exploring{reached}: {stop.reason}")
    return "; ".join(reasons) or None


__all__ = ["DEADLINE_STOP", "STOPPED_CAUSE", "cut_short"]
