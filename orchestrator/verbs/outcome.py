"""How a foreground sweep ended, printed for the person who ran it (``run``, ``demo``), on stderr.

:func:`outcome_lines` says how each trial attempt ended (a failure in plain words, with its
cause and the evidence that names it), then the answer, or for a sweep without one
:func:`best_config`, the fastest config measured. While the sweep runs, the live display
(:mod:`orchestrator.progress.live`) shows its progress instead.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TextIO

from orchestrator.answers import Answer
from orchestrator.bench.coding import Outcome
from orchestrator.causes import CAUSE_WORDS, PREFLIGHT_REFUSAL
from orchestrator.report.model import trial_labels
from orchestrator.report.words import answer_words, readable

# The excerpt line that names a startup failure: a Python exception, argparse's complaint.
_NAMING_LINE = re.compile(r"\b\w*(Error|Exception)\b: |unrecognized arguments|out of memory", re.I)


def failure_words(cause: str | None, evidence: Mapping[str, Any] | None) -> str:
    """Why an attempt failed, in plain words: what its cause means and the evidence that names
    it (the unknown flag, the exception line of the journal excerpt, the message)."""
    evidence = evidence or {}
    meaning = CAUSE_WORDS.get(cause or "", "it failed")
    flags = evidence.get("unknown_flags")
    if cause == "bad-flag" and isinstance(flags, list) and flags:
        where = (
            " (found by the preflight, before any restart)"
            if evidence.get("found_by") == "preflight"
            else ""
        )
        return f"{meaning}: {' '.join(str(f) for f in flags)}{where}"
    if evidence.get("found_by") == "preflight":
        # The parser refused the argv before anything started: nothing "at startup".
        meaning = PREFLIGHT_REFUSAL
    message = evidence.get("message") or evidence.get("reason") or evidence.get("error")
    message = str(message).strip() if message else ""
    detail = ""
    excerpt = evidence.get("excerpt")
    if isinstance(excerpt, list):
        lines = [str(line) for line in excerpt]
        if message and any(message in line for line in lines):
            # The engine's classifier chose this line (vLLM's root cause, not the API server's
            # "Engine core initialization failed" that follows it): shown without its prefix.
            detail = message
        else:
            named = [line for line in lines if _NAMING_LINE.search(line)]
            detail = named[-1].strip() if named else ""
    detail = detail or message
    return f"{meaning}: {detail}" if detail else meaning


def _passed(metrics: Mapping[str, Any]) -> bool:
    try:
        return Outcome(str(metrics.get("outcome"))) is Outcome.PASS
    except ValueError:
        return False


def _trial_summary(trial: Mapping[str, Any]) -> tuple[str, str]:
    """(how it ended, what it measured or why it failed)."""
    state = str(trial.get("state"))
    if state == "done":
        points = trial.get("points") or []
        rates = [
            p["metrics"]["output_tok_s"]
            for p in points
            if p.get("kind") == "throughput"
            and isinstance((p.get("metrics") or {}).get("output_tok_s"), int | float)
        ]
        coding = [p for p in points if p.get("kind") == "coding"]
        parts = [f"{len(rates)} point{'' if len(rates) == 1 else 's'}"]
        if rates:
            parts.append(f"up to {max(rates):,.0f} tok/s")
        if coding:
            passed = sum(1 for p in coding if _passed(p.get("metrics") or {}))
            parts.append(f"coding {passed}/{len(coding)} pass")
        return "done", ", ".join(parts)
    if state in ("failed", "skipped"):
        cause = trial.get("cause")
        ended = f"{state.upper()}: {cause}" if cause else state.upper()
        return ended, failure_words(cause, trial.get("evidence"))
    return state, ""


def _labels(trials: Sequence[Mapping[str, Any]]) -> list[str]:
    scheduled = [(t.get("plan") or {}).get("purpose") == "schedule" for t in trials]
    return trial_labels([t.get("config") or {} for t in trials], scheduled)


OutcomeNote = Callable[[Mapping[str, Any]], str | None]
"""A caller's word on one trial attempt of the results (the demo: "as intended")."""


def outcome_lines(results: Mapping[str, Any], *, note: OutcomeNote | None = None) -> list[str]:
    """A heading, then one line per trial attempt: host, config in its own words, how it ended
    (with ``note``'s word on it) and what it measured or why it failed. Plain lines, not a
    table: a failure's evidence stays one piece of text however narrow the terminal."""
    trials = list(results.get("trials", []))
    words = _labels(trials)
    labels = []
    for trial, label in zip(trials, words, strict=True):
        attempt = trial.get("attempt")
        retried = isinstance(attempt, int) and attempt > 1
        labels.append(f"{label} (attempt {attempt})" if retried else label)
    width = min(max((len(label) for label in labels), default=0), 28)  # a long one pushes its row
    hosts = max((len(str(t.get("host"))) for t in trials), default=0)
    lines = [f"sweep {results.get('sweep')} (id {results.get('id')}): {results.get('state')}"]
    for trial, label in zip(trials, labels, strict=True):
        ended, detail = _trial_summary(trial)
        extra = note(trial) if note is not None else None
        ended += f" ({extra})" if extra else ""
        host = str(trial.get("host"))
        line = f"  {host:<{hosts}}  {label:<{width}}  {ended}"
        lines.append(f"{line}: {detail}" if detail else line)
    return lines


def answer_lines(answers: Sequence[Answer]) -> list[str]:
    """Each answer's headline ("Deploy X on T: ..."), as the report opens with it."""
    return [answer_words(readable(answer)).headline for answer in answers]


def print_outcome(
    results: Mapping[str, Any],
    *,
    answers: Sequence[Answer] = (),
    note: OutcomeNote | None = None,
    stream: TextIO | None = None,
) -> None:
    """:func:`outcome_lines`, then the answer (or, for a sweep without one, the fastest point),
    for the person who ran the sweep: on a terminal each line wrapped at its width under the
    config column (words and flags kept whole), elsewhere one line per attempt."""
    out = stream or sys.stderr
    width = _terminal_width(out)
    hosts = max((len(str(t.get("host"))) for t in results.get("trials", [])), default=0)
    lines = outcome_lines(results, note=note)
    if answers:
        lines.extend(f"answer: {line}" for line in answer_lines(answers))
    else:
        lines.append(f"best so far: {best_config(results) or 'no config measured'}")
    for line in lines:
        if width > 20 and len(line) > width:
            line = textwrap.fill(
                line,
                width=width,
                subsequent_indent=" " * (hosts + 6),
                break_long_words=False,
                break_on_hyphens=False,
            )
        print(line, file=out)


def _terminal_width(stream: TextIO) -> int:
    """The columns of the terminal ``stream`` writes to; 0 when it is none."""
    try:
        return os.get_terminal_size(stream.fileno()).columns if stream.isatty() else 0
    except (OSError, ValueError):  # no file descriptor (a test's StringIO), or no size
        return 0


def best_config(results: Mapping[str, Any]) -> str | None:
    """The fastest throughput point of a finished trial, named by its config's knob values."""
    trials = list(results.get("trials", []))
    words = _labels(trials)
    best: tuple[float, str] | None = None
    for trial, label in zip(trials, words, strict=True):
        if trial.get("state") != "done":
            continue
        for point in trial.get("points") or []:
            rate = (point.get("metrics") or {}).get("output_tok_s")
            if point.get("kind") != "throughput" or not isinstance(rate, int | float):
                continue
            if best is None or rate > best[0]:
                cell = f"ctx {point.get('context')}, c={point.get('concurrency')}"
                best = (float(rate), f"{label} @{trial.get('host')}: {rate:,.0f} tok/s ({cell})")
    return None if best is None else best[1]
