"""An answer in words: what the report opens with, the same sentences in Markdown and HTML.

A reader in the morning wants the decision first ("Deploy X on b300: 2.31× the baseline
[2.22, 2.40] ..."), then what it rests on: what the interval covers, which configs or hosts
misbehaved, which faster configs a constraint ruled out, and how much of the space the night
explored. Pure functions of an :class:`~orchestrator.answers.Answer`; the numbers are written
by :mod:`orchestrator.report.fmt` so they read as in the tables.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass, replace

import orchestrator.report.fmt as fmt
from orchestrator.answers import Answer, Contender, IntervalBasis, ObjectiveView
from orchestrator.answers.model import Band, Exploration, Schedule, named
from orchestrator.answers.smooth import PRIOR_RESTART_CV
from orchestrator.engines.schedule import NativeSchedule
from orchestrator.report.across import batch_range, load_value
from orchestrator.report.model import flag_info, shared_knobs, short_labels
from orchestrator.store.results import config_label
from orchestrator.types import SYNTHETIC_WORKLOAD, JsonObject, plural


@dataclass(frozen=True, slots=True)
class AnswerWords:
    """The headline sentence and the bullets under it (plain text, unescaped)."""

    headline: str
    details: tuple[str, ...]


def _named_pairs(answer: Answer) -> list[tuple[str, JsonObject]]:
    """Every (label, config) an answer shows: its contenders, failed configs, best, runner-up
    and tied, those of each of its per-load answers, and its schedule's."""
    pairs = [(c.label, c.config) for c in answer.contenders]
    pairs += [(f.label, f.config) for f in answer.failed]
    for contender in (answer.best, answer.runner_up, *answer.tied):
        if contender is not None:
            pairs.append((contender.label, contender.config))
    for each in answer.per_load:
        pairs += _named_pairs(each)
    schedule = answer.schedule
    if schedule is not None:
        pairs += [(band.best.label, band.best.config) for band in schedule.bands]
        if schedule.verdict is not None:
            pairs += [(c.fixed.label, c.fixed.config) for c in schedule.verdict.comparisons]
    return pairs


@dataclass(frozen=True, slots=True)
class _Names:
    """Labels as the answers layer wrote them -> as the report names them, and the pattern
    that finds a whole label in free text (longest first, in one pass: a label is never
    rewritten inside another one, ``budget=1`` in ``budget=16``, nor twice)."""

    names: dict[str, str]
    pattern: re.Pattern[str]

    @classmethod
    def of(cls, answer: Answer) -> _Names:
        unique = list(dict(_named_pairs(answer)).items())
        shorts = short_labels([config for _, config in unique])
        names = {label: short for (label, _), short in zip(unique, shorts, strict=True)}
        spelled = [label for label in sorted(names, key=len, reverse=True) if label != names[label]]
        alternatives = "|".join(re.escape(label) for label in spelled)
        pattern = re.compile(rf"(?<![\w.=])(?:{alternatives})(?![\w.])" if spelled else r"(?!)")
        return cls(names, pattern)

    def label(self, label: str) -> str:
        return self.names.get(label, label)

    def one(self, contender: Contender | None) -> Contender | None:
        return None if contender is None else replace(contender, label=self.label(contender.label))

    def all(self, contenders: Sequence[Contender]) -> tuple[Contender, ...]:
        return tuple(replace(c, label=self.label(c.label)) for c in contenders)

    def text(self, text: str) -> str:
        return self.pattern.sub(lambda m: self.names[m.group(0)], text)

    def schedule(self, schedule: Schedule | None) -> Schedule | None:
        if schedule is None:
            return None
        verdict = schedule.verdict
        if verdict is not None:
            verdict = replace(
                verdict,
                comparisons=tuple(
                    replace(c, fixed=replace(c.fixed, label=self.label(c.fixed.label)))
                    for c in verdict.comparisons
                ),
                words=self.text(verdict.words),
            )
        bands = tuple(
            replace(band, best=replace(band.best, label=self.label(band.best.label)))
            for band in schedule.bands
        )
        return replace(
            schedule,
            bands=bands,
            no_native=None if schedule.no_native is None else self.text(schedule.no_native),
            verdict=verdict,
        )

    def answer(self, answer: Answer) -> Answer:
        return replace(
            answer,
            best=self.one(answer.best),
            runner_up=self.one(answer.runner_up),
            tied=self.all(answer.tied),
            contenders=self.all(answer.contenders),
            failed=tuple(replace(f, label=self.label(f.label)) for f in answer.failed),
            convergence=tuple(
                replace(step, label=self.label(step.label)) if step.label is not None else step
                for step in answer.convergence
            ),
            notes=tuple(self.text(note) for note in answer.notes),
            per_load=tuple(self.answer(each) for each in answer.per_load),
            schedule=self.schedule(answer.schedule),
        )


def readable(answer: Answer) -> Answer:
    """The answer with its configs named as the report's tables name them: without the knob
    values most of its configs share (``budget=16 topk=4``, not four knobs of which two never
    change). The configs themselves are kept whole; the answers layer's notes get the same
    names, and so do its per-load answers and its schedule, so a config reads the same
    everywhere on the page. For rendering only: the JSON keeps the answers layer's labels."""
    names = _Names.of(answer)
    if all(label == short for label, short in names.names.items()):
        return answer
    return names.answer(answer)


def where(objective: ObjectiveView) -> str:
    """``context 4096 / concurrency 32``, or the combination of several cells; at an
    open-loop cell with the rates its points measured, ``context 2048 / rate 4 req/s (5.38
    offered, 5.31 sent)``, else ``nominal rate 4 req/s``."""
    cells = objective.cells
    if len(cells) == 1:
        return cells[0].measured_words(objective.load(cells[0]))
    if objective.across_load and len({(c.context, c.workload) for c in cells}) == 1:
        first = cells[0]
        loads = ", ".join(cell.measured_load(objective.load(cell)) for cell in cells)
        workload = "" if first.workload == SYNTHETIC_WORKLOAD else f", workload {first.workload}"
        return (
            f"context {first.context}{workload} across {loads} (the {objective.combine}, "
            f"{_weighting(objective)})"
        )
    names = ", ".join(fmt.measured_cell_label(cell, objective.load(cell)) for cell in cells)
    return f"the {objective.combine} of {len(cells)} cells ({names})"


def _weighting(objective: ObjectiveView) -> str:
    """``each load weighing the same``, or ``weighted c1 5.0%, c8 15%, c32 80%``."""
    weights = objective.weights
    if weights is None or max(weights) - min(weights) < 1e-9:
        return "each load weighing the same"
    shares = zip(objective.cells, weights, strict=False)
    return "weighted " + ", ".join(f"{cell.load} {fmt.percent(w)}" for cell, w in shares)


def value_text(objective: ObjectiveView, contender: Contender) -> str:
    """``2,310 tok/s [2,241, 2,379]``: a contender's estimate with its interval."""
    estimate = contender.estimate
    metric = objective.metric
    return fmt.metric(metric, estimate.value) + fmt.interval(
        estimate.ci95, lambda v: fmt.metric_number(metric, v)
    )


def _versus_baseline(objective: ObjectiveView, contender: Contender) -> str | None:
    """``2.31× the baseline [2.22, 2.40]``; None when no baseline was measured."""
    if contender.speedup_vs_baseline is None:
        return None
    whose = "the baseline" if objective.metric == "output_tok_s" else "the baseline's"
    metric = "" if objective.metric == "output_tok_s" else f" {objective.metric}"
    return (
        f"{fmt.ratio(contender.speedup_vs_baseline)} {whose}{metric}"
        f"{fmt.interval(contender.speedup_ci95, fmt.factor)}"
    )


def _standing(objective: ObjectiveView, contender: Contender) -> str:
    """How good a config is, in the headline's terms: vs the baseline, else its value."""
    return _versus_baseline(objective, contender) or value_text(objective, contender)


def _margin(answer: Answer) -> str:
    if answer.margin is None:
        return ""
    return fmt.percent(answer.margin.relative) + fmt.interval(answer.margin.ci95, fmt.percent)


def _names(contenders: Sequence[Contender]) -> str:
    labels = [c.label for c in contenders]
    if len(labels) <= 2:
        return " and ".join(labels)
    return ", ".join(labels[:-1]) + f" and {labels[-1]}"


def basis_words(basis: IntervalBasis, restarts: int) -> str:
    """What an interval covers, and so how far it can be trusted."""
    if basis == "restarts":
        return (
            f"the interval covers restart-to-restart and request-to-request variance over "
            f"{plural(restarts, 'restart')}"
        )
    if basis == "borrowed-restart-variance":
        return (
            "one restart: the interval borrows the restart-to-restart variance measured on "
            "this host type's repeated configs"
        )
    if basis == "within-run-only":
        return (
            "one restart and no repeated config to borrow restart variance from: the interval "
            f"is within-run only (request-to-request noise) with an assumed "
            f"{PRIOR_RESTART_CV:.0%} restart spread added, not measured, so no basis for a "
            "deploy decision"
        )
    return "no interval: too little data to build one"


def _flag_words(contenders: Sequence[Contender]) -> str:
    """``budget=8: the client's CPU or event loop was saturated (S)``: the flagged points the
    named configs' estimates rest on; empty when they are clean."""
    parts = []
    for contender in contenders:
        if contender.flags:
            meanings = ", ".join(
                f"{flag_info(flag).meaning} ({flag_info(flag).code})" for flag in contender.flags
            )
            parts.append(f"{contender.label}: {meanings}")
    return "; ".join(parts)


def _lead(answer: Answer, best: Contender, at: str) -> str:
    """What the measured configs say, when they cannot be a deploy advice (cut short)."""
    objective = answer.objective
    if answer.runner_up is None:
        return f"only {best.label} was measured validly at {at}, nothing to compare it with"
    if answer.verdict == "tie":
        return (
            f"of what was measured at {at}, the data cannot tell {best.label} from "
            f"{_names(answer.tied)}"
        )
    return (
        f"of what was measured at {at}, {best.label} leads ({_standing(objective, best)}; "
        f"ahead of {answer.runner_up.label} by {_margin(answer)})"
    )


def _next_words(exploration: Exploration) -> str:
    """``run next budget=8 topk=4, budget=16 topk=4``; empty when nothing is left to run."""
    if not exploration.next:
        return ""
    return "run next " + ", ".join(config_label(config) for config in exploration.next)


def exploration_words(exploration: Exploration) -> str:
    """``Explored 2 of 6 configs: a 67% chance that one not explored beats it by more than
    2% (...)``: how much of the space the answer rests on and what the rest risks."""
    what = f"{exploration.explored} of {exploration.space} configs explored" + (
        f", {exploration.failed} failed" if exploration.failed else ""
    )
    if exploration.unexplored == 0:
        return f"{what}: the whole space"
    how = {
        "surface": "by the smoothed surface the search picks with",
        "exchangeable": "too few configs for a surface: the share of the space unexplored",
        "complete": "",
    }[exploration.method]
    return (
        f"{what}: a {fmt.percent(exploration.risk)} chance that one not explored beats it by "
        f"more than {fmt.percent(exploration.margin)} ({how}; deploy advice needs at most "
        f"{fmt.percent(exploration.threshold)})"
    )


def _headline(answer: Answer) -> str:
    scheduled = _schedule_headline(answer)
    if scheduled is not None:
        return scheduled
    objective = answer.objective
    at = where(objective)
    best = named(answer)
    if best is None:
        text = f"No config to deploy on {answer.host_type} at {at}: {_no_valid_reason(answer)}."
        return f"Cut short ({answer.stopped}). {text}" if answer.stopped else text
    if answer.stopped:
        return (
            f"Cut short on {answer.host_type} ({answer.stopped}): {_lead(answer, best, at)}. "
            "Not a deploy advice: the sweep did not compare what it set out to."
        )
    runner = answer.runner_up
    if runner is None:
        return (
            f"Only {best.label} was measured validly on {answer.host_type} at {at} "
            f"({value_text(objective, best)}): nothing to compare it with, so no deploy advice."
        )
    if answer.verdict == "tie":
        capped = f" {answer.capped[0].upper()}{answer.capped[1:]}." if answer.capped else ""
        return (
            f"No single winner on {answer.host_type} at {at}: the data cannot tell "
            f"{best.label} from {_names(answer.tied)} on {objective.metric} (the differences "
            f"are within the uncertainty).{capped}"
        )
    flagged = _flag_words([best, runner])
    on_flagged = f", on flagged measurements ({flagged})" if flagged else ""
    exploration = answer.exploration
    if exploration is not None and exploration.risky:
        ahead = _next_words(exploration)
        return (
            f"Best found so far on {answer.host_type}: {best.label}, "
            f"{_standing(objective, best)} at {at}; beats {runner.label} by {_margin(answer)}"
            f"{on_flagged}, but only {exploration_words(exploration)}. Not a deploy advice yet"
            + (f": {ahead}." if ahead else ".")
        )
    text = (
        f"Deploy {best.label} on {answer.host_type}: {_standing(objective, best)} at {at}; "
        f"beats {runner.label} by {_margin(answer)}"
    )
    if flagged:
        text += f"{on_flagged}: check them before deploying"
    return text + "."


def _no_valid_reason(answer: Answer) -> str:
    contenders = answer.contenders
    if contenders and all(c.violations for c in contenders):
        return f"every measured config ({len(contenders)}) breaks a constraint"
    if not contenders and answer.failed:
        count = len(answer.failed)
        return (
            f"the only config tried ({answer.failed[0].label}) produced no measurement"
            if count == 1
            else f"none of the {count} configs tried produced a measurement"
        )
    if not contenders:
        return "nothing was measured on this host type"
    return "no measured config qualifies"


def _is_faster(objective: ObjectiveView, a: Contender, than: Contender) -> bool:
    if objective.minimized:
        return a.estimate.value < than.estimate.value
    return a.estimate.value > than.estimate.value


def ranked_differently(contender: Contender) -> bool:
    """The value the answer ranked it by is not its estimate (shrunk toward its neighbours,
    or its estimate comes from confirmation restarts), by more than rounding."""
    ranked = contender.ranked_on
    value = contender.estimate.value
    return ranked is not None and abs(ranked - value) > 5e-4 * max(abs(value), 1e-12)


def _best_lines(answer: Answer, best: Contender) -> list[str]:
    objective = answer.objective
    hosts = ", ".join(best.estimate.hosts)
    on = f" on {hosts}" if hosts else ""
    restarts = best.estimate.restarts
    plural = "" if restarts == 1 else "s"
    leader = "First by rank" if answer.verdict == "tie" or answer.stopped else "Estimate"
    full = config_label(best.config)
    spelled = f" ({full})" if full != best.label else ""
    lines = [
        f"{leader}: {best.label}{spelled}, {objective.metric} {value_text(objective, best)}, "
        f"from {restarts} restart{plural}{on}."
    ]
    if ranked_differently(best) and best.ranked_on is not None:
        lines.append(
            f"Ranked on {fmt.metric(objective.metric, best.ranked_on)}: the restarts it was "
            "picked on, shrunk toward its neighbours' in the space. The estimate above is "
            "the mean of its own restarts (its confirmations, where it has them): the number "
            "every table and plot shows for it."
        )
    lines.append(f"Interval basis: {basis_words(best.estimate.basis, best.estimate.restarts)}.")
    if best.screened_only:
        lines.append(
            f"{best.label} was measured at screening fidelity only (fewer rounds, the "
            "objective's cells): confirm it before deploying."
        )
    return lines


def _details(answer: Answer) -> list[str]:
    objective = answer.objective
    best = answer.best
    lines: list[str] = []
    configs = [c.config for c in answer.contenders] + [f.config for f in answer.failed]
    shared = shared_knobs(configs)
    if shared:
        lines.append(f"Every config sets {config_label(shared)} (left out of the names).")
    if best is not None:
        lines.extend(_best_lines(answer, best))
    if answer.capped:
        lines.append(f"Capped objective: {answer.capped}.")
    if answer.verdict == "tie" and best is not None:
        runner = answer.runner_up
        margin = _margin(answer)
        if runner is not None and margin:
            lines.append(f"Its lead over {runner.label} is {margin}: not beyond the uncertainty.")
        lines.append(
            "What would break the tie: more repeats of the tied configs (raise "
            "benchmark.repeats, each repeat is its own restart), so their intervals narrow."
        )
    flagged = _flag_words([c for c in answer.contenders if c.flags])
    if flagged:
        lines.append(f"Flagged measurements under the estimates: {flagged}.")
    noisy = [c for c in answer.contenders if c.estimate.noisy]
    if noisy:
        items = ", ".join(
            f"{c.label} (cv {fmt.percent(c.estimate.cv)})" if c.estimate.cv is not None else c.label
            for c in noisy
        )
        lines.append(f"Noisy (its restarts disagree by more than 5%): {items}.")
    for flag in answer.flags:
        # A flagged host is out of the pool by definition; say so once.
        kept_out = "" if "out of the pool" in flag.message else "; left out of the pool"
        lines.append(f"Host {flag.host} disagrees with its siblings: {flag.message}{kept_out}.")
    ruled_out = [
        c
        for c in answer.contenders
        if c.violations and (best is None or _is_faster(objective, c, best))
    ]
    if ruled_out:
        items = "; ".join(f"{c.label} ({', '.join(c.violations)})" for c in ruled_out)
        lead = "Ruled out by a constraint" + ("" if best is None else " although faster")
        lines.append(f"{lead}: {items}.")
    if answer.failed:
        items = ", ".join(f"{f.label} ({f.cause or 'unknown'})" for f in answer.failed)
        lines.append(f"Failed, never measured: {items}.")
    lines.append(_coverage(answer))
    lines.extend(answer.notes)
    return lines


def _coverage(answer: Answer) -> str:
    """How much of the space the answer rests on: measured, failed, never tried, and what the
    untried part risks."""
    restarts = f"{answer.restarts_used} restart{'' if answer.restarts_used == 1 else 's'} used"
    failed = len(answer.failed)
    tail = f"; {failed} failed" if failed else ""
    if not answer.space:
        return f"Explored {answer.explored} configs ({restarts}){tail}."
    untried = answer.space - answer.explored - failed
    tail += f"; {untried} not explored" if untried > 0 else ""
    text = f"Explored {answer.explored} of {answer.space} configs ({restarts}){tail}."
    exploration, best = answer.exploration, answer.best
    if exploration is not None and exploration.unexplored > 0 and best is not None:
        ahead = _next_words(exploration)
        text += (
            f" A {fmt.percent(exploration.risk)} chance that one not explored beats "
            f"{best.label} by more than {fmt.percent(exploration.margin)}"
            + (f" ({ahead})" if ahead and exploration.risky else "")
            + "."
        )
    return text


# --- the answer across load -------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AcrossLoadWords:
    """An across-load answer in words: a line per load, where the winner changes, and the
    schedule (its bands, its form, whether it was measured and what that found)."""

    loads: tuple[str, ...]
    changes: str
    schedule: tuple[str, ...]
    """The schedule proposed: its bands, and its native form or why it has none."""
    verdict: tuple[str, ...]
    """Whether the schedule was measured and, if so, what that found."""


def load_line(answer: Answer) -> str:
    """One load's answer: ``c8: tokens=5, 560 tok/s [550, 570] (1.85× the baseline [...]);
    beats tokens=3 by 5.1% [2.0%, 8.3%]``; a tie names its tied configs, a load without a
    valid config says why."""
    objective = answer.objective
    cell = answer.load_cell
    at = cell.measured_load(objective.load(cell))
    best = named(answer)
    if best is None:
        return f"{at}: no valid config ({_no_valid_reason(answer)})"
    value = value_text(objective, best)
    versus = _versus_baseline(objective, best)
    value += f" ({versus})" if versus else ""
    flagged = _flag_words([best])
    value += f", on flagged measurements ({flagged})" if flagged else ""
    margin = _margin(answer)
    lead = f"; lead {margin}, within the uncertainty" if margin else ""
    if answer.verdict == "tie":
        tied = _names(answer.tied)
        return f"{at}: a tie, {best.label} first by rank ({value}), with {tied}{lead}"
    if answer.runner_up is None:
        return f"{at}: {best.label}, {value}; the only config measured validly"
    ahead = f" by {margin}" if margin else ""
    return f"{at}: {best.label}, {value}; beats {answer.runner_up.label}{ahead}"


def _changes(answer: Answer) -> str:
    changes = answer.winner_changes()
    if changes:
        return "Where the winner changes: " + "; ".join(c.words() for c in changes) + "."
    names = {n.label for each in answer.per_load if (n := named(each)) is not None}
    if len(names) == 1:
        return f"{names.pop()} is named at every load: the winner does not change with load."
    return "No change of winner between neighbouring loads that have a named config."


def bands_text(schedule: Schedule) -> str:
    """``tokens=7 at batch 1–2, tokens=5 at batch 3–15, tokens=3 at batch 16 and up``;
    neighbouring bands of one config said once, as the server runs them (``tokens=7 at batch
    1–15``), where the bands (one per load) and the per-load table keep each."""
    runs: list[Band] = []
    for band in schedule.bands:
        if runs and runs[-1].best.config == band.best.config:
            runs[-1] = replace(runs[-1], end=band.end)
        else:
            runs.append(band)
    return ", ".join(f"{band.best.label} at {batch_range(band)}" for band in runs)


def _fixed_advice(answer: Answer) -> str:
    best = named(answer)
    if best is None:
        return "no fixed config is named either"
    return f"the advice is the best fixed config over the loads, {best.label}"


def _verdict_lines(answer: Answer, schedule: Schedule) -> list[str]:
    """Whether the schedule was measured, and against the best fixed config, how it did."""
    verdict = schedule.verdict
    if verdict is None:
        if schedule.native is None:
            return [f"Nothing to measure: {_fixed_advice(answer)}."]
        return [
            "Not measured yet: the schedule has not run as a trial of its own against the best "
            f"fixed config at every load, so it is a proposal and {_fixed_advice(answer)}."
        ]
    by = {v: [c.cell.load for c in verdict.comparisons if c.verdict == v]
          for v in ("better", "tie", "worse")}  # fmt: skip
    found = "; ".join(f"{v} at {', '.join(loads)}" for v, loads in by.items() if loads)
    runs = plural(verdict.restarts, "restart")
    lines = [
        f"Measured ({runs} of the schedule) against the best fixed config at each load: "
        f"{found or 'no load compared'}. "
        + (
            "Recommended: not worse at any load beyond the noise, and better at one."
            if verdict.recommended
            else f"Not recommended: {_fixed_advice(answer)}."
        )
    ]
    return lines + ([verdict.words] if verdict.words else [])


def _schedule_lines(answer: Answer) -> tuple[str, ...]:
    schedule = answer.schedule
    if schedule is None:
        if any(each.load_cell.rate is not None for each in answer.per_load):
            return (
                "No schedule: the loads are request rates, and an engine's schedule is keyed "
                "by its running batch size.",
            )
        return ("No schedule proposed: a load has no named config.",)
    lines = [
        f"Schedule proposed from the per-load answers: {bands_text(schedule)}. Each band's "
        "number is its config's at that load as a fixed config, not the schedule's."
    ]
    native = schedule.native
    if native is not None:
        lines.append(
            f"The engine's own form (below) starts the server from "
            f"{config_label(native.config)}"
            + (
                f"; a log line starting {native.overlay.refused_line!r} means the engine "
                "ignored the schedule and ran static settings: the schedule's trial then fails "
                "as invalid-config, never a measurement."
                if native.overlay.refused_line
                else "."
            )
        )
    else:
        lines.append(f"No native schedule: {schedule.no_native or 'the engine takes none'}.")
    return tuple(lines)


def across_load_words(answer: Answer) -> AcrossLoadWords | None:
    """The answer at each load, where its winner changes, and its schedule, in words; None
    for an answer at one load."""
    if not answer.per_load:
        return None
    rows = sorted(answer.per_load, key=lambda each: load_value(each.load_cell))
    schedule = answer.schedule
    return AcrossLoadWords(
        tuple(load_line(each) for each in rows),
        _changes(answer),
        _schedule_lines(answer),
        tuple(_verdict_lines(answer, schedule)) if schedule is not None else (),
    )


def native_form(native: NativeSchedule) -> tuple[tuple[str, str], ...]:
    """What the schedule adds to the launch of its fixed config, as (what it is, its text)
    blocks: the keys merged into a JSON-valued flag, the flags added (as a command line's
    tail), each launch file by the flag that names it (JSON indented)."""
    overlay = native.overlay
    blocks = [
        (f"keys added to {flag}'s JSON", json.dumps(dict(keys)))
        for flag, keys in overlay.json.items()
    ]
    if overlay.flags:
        flags = " ".join(
            flag if value is None else f"{flag} {shlex.quote(value)}"
            for flag, value in overlay.flags.items()
        )
        blocks.append(("flags added", flags))
    blocks += [(f"the file {flag} names", _indented(text)) for flag, text in overlay.files.items()]
    return tuple(blocks)


def _indented(text: str) -> str:
    """A JSON file's text indented; any other text as the engine reads it."""
    try:
        return json.dumps(json.loads(text), indent=2)
    except ValueError:
        return text


def _schedule_headline(answer: Answer) -> str | None:
    """The headline when a measured schedule is recommended over every fixed config."""
    schedule = answer.schedule
    verdict = schedule.verdict if schedule is not None else None
    if schedule is None or verdict is None or not verdict.recommended or answer.stopped:
        return None
    better = [c.cell.load for c in verdict.comparisons if c.verdict == "better"]
    tied = [c.cell.load for c in verdict.comparisons if c.verdict == "tie"]
    return (
        f"Deploy the schedule on {answer.host_type}: {bands_text(schedule)}; measured against "
        f"the best fixed config at every load, better at {', '.join(better) or 'no load'}"
        + (f", tied at {', '.join(tied)}" if tied else "")
        + ", worse nowhere."
    )


def answer_words(answer: Answer) -> AnswerWords:
    """The answer as a headline and its supporting bullets (configs named as given: pass
    :func:`readable` of it for the report's short names)."""
    return AnswerWords(_headline(answer), tuple(_details(answer)))


__all__ = [
    "AcrossLoadWords",
    "AnswerWords",
    "across_load_words",
    "answer_words",
    "bands_text",
    "basis_words",
    "exploration_words",
    "load_line",
    "native_form",
    "readable",
    "value_text",
    "where",
]
