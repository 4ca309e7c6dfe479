"""The dashboard's document (``GET /dashboard/state``): the sweeps as the page lays them out,
with every sentence already made.

The running sweep's words come from its :class:`~orchestrator.progress.snapshot.ProgressSnapshot`
(the one ``status`` and the terminal display read), an ended sweep's answers from the report's
own headline (:func:`orchestrator.report.words.answer_words`): the page says what the other
readers say, and never computes a number of its own. An ended sweep never changes, so its
answers are drawn once per daemon (:class:`EndedAnswers`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass, field

from orchestrator.answers import AnsweredResults
from orchestrator.progress.snapshot import ProgressSnapshot, clock_time
from orchestrator.report.words import answer_words, readable
from orchestrator.store import JsonObject, SweepRecord
from orchestrator.sweepview import SweepView, sweep_brief

ENDED_SHOWN = 10
"""The ended sweeps the page lists, latest first (``status`` lists them all)."""

REPORT_FORMATS = ("html", "md")
"""The report links of an ended sweep, in the order the page shows them."""


@dataclass(frozen=True, slots=True)
class AnswerLine:
    """One host type's answer as the report's headline says it."""

    host_type: str
    verdict: str
    headline: str

    def to_json(self) -> JsonObject:
        return asdict(self)


def answer_lines(answered: AnsweredResults) -> tuple[AnswerLine, ...]:
    """Each answer's headline in the report's words (its short config names)."""
    return tuple(
        AnswerLine(a.host_type, a.verdict, answer_words(a).headline)
        for a in (readable(answer) for answer in answered.answers)
    )


@dataclass(frozen=True, slots=True)
class EndedSweep:
    """A sweep that ended (done, failed, cancelled, interrupted), with what it found."""

    record: SweepRecord
    trials: dict[str, int]
    answers: tuple[AnswerLine, ...]

    def to_json(self) -> JsonObject:
        r = self.record
        summary = r.summary or {}
        return {
            **sweep_brief(r),
            "started_at": r.started_at,
            "finished_at": r.finished_at,
            "error": summary.get("error"),
            "trials": self.trials,
            "answers": [a.to_json() for a in self.answers],
            "reports": {fmt: f"/sweeps/{r.id}/report?format={fmt}" for fmt in REPORT_FORMATS},
        }


def progress_words(snapshot: ProgressSnapshot) -> JsonObject:
    """The running sweep's lines as ``status SWEEP`` prints them."""
    return {
        "done": snapshot.done_words(),
        "eta": snapshot.eta_words(clock_time),
        "best": snapshot.best_words(),
        "best_by": snapshot.best_by.words(),
    }


def running_json(view: SweepView) -> JsonObject:
    """A running sweep: its view (progress included, when this daemon runs it) and words."""
    snapshot = view.progress
    return {
        **view.to_json(),
        "words": None if snapshot is None else progress_words(snapshot),
    }


@dataclass(frozen=True, slots=True)
class Board:
    """The page's document at one moment."""

    version: str
    generated_at: float
    queued: tuple[SweepView, ...]
    """In run order (priority, then submission): the first runs next."""
    running: tuple[SweepView, ...]
    ended: tuple[EndedSweep, ...]
    """Latest first, at most :data:`ENDED_SHOWN`."""

    def to_json(self) -> JsonObject:
        return {
            "version": self.version,
            "generated_at": self.generated_at,
            "clock": clock_time(self.generated_at),
            "queued": [view.to_json() for view in self.queued],
            "running": [running_json(view) for view in self.running],
            "ended": [sweep.to_json() for sweep in self.ended],
        }


Results = Callable[[str], Awaitable[AnsweredResults]]
"""The daemon's ``results(ref)``: a sweep's results with their answers."""


@dataclass
class EndedAnswers:
    """Each ended sweep's trial counts and answers, drawn once: an ended sweep's store rows
    never change (a resumed one ends again, later, and is drawn again)."""

    results: Results
    _seen: dict[tuple[int, str, float | None], EndedSweep] = field(default_factory=dict)

    async def of(self, record: SweepRecord) -> EndedSweep:
        key = (record.id, record.state, record.finished_at)
        if key not in self._seen:
            answered = await self.results(str(record.id))
            counts = answered.results.state_counts()
            self._seen[key] = EndedSweep(record, counts, answer_lines(answered))
        return self._seen[key]


async def board(
    views: Sequence[SweepView], ended: EndedAnswers, *, version: str, now: float
) -> Board:
    """The page's document from the sweeps as the API lists them (queue order)."""
    queued = tuple(v for v in views if v.record.state == "queued")
    running = tuple(v for v in views if v.record.state == "running")
    done = [v.record for v in views if v.record.state not in ("queued", "running")]
    done.sort(key=lambda r: r.finished_at or r.submitted_at, reverse=True)
    shown = [await ended.of(record) for record in done[:ENDED_SHOWN]]
    return Board(version, now, queued, running, tuple(shown))
