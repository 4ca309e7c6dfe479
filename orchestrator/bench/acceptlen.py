"""accept_len per benchmark point, from three independent sources, cross-checked.

- journal: the server's decode log lines of THIS invocation between the point's cursors. Each
  line averages all traffic of its interval, so it is only as scoped as the window.
- meta_info: per finished request whose response reports its verify steps (SGLang's
  ``/generate`` ``meta_info``), exactly the point's own requests: (correct drafts + verify
  steps) / verify steps where the server gives the correct drafts (the decode log's own
  definition: accepted drafts plus the bonus per verify step), else the estimate
  ``(completion_tokens - 1) / verify steps``.
- metrics: ``/metrics`` counter deltas around the measured phase (the engine's
  :class:`~orchestrator.engines.base.AcceptanceCounters`: generated tokens over verify steps),
  scoped by time but mixing any other traffic the server had.

Inputs are plain numbers so this module stays independent of the log parser; the estimate
logic is pure, and the only I/O helper (``decode_samples_from_messages``) parses text. Each
source is the point's :class:`~orchestrator.points.AcceptEstimate` and the point's sources
together its :class:`~orchestrator.points.AcceptLength`: the value the bench
measures is the value stored, exact counts included.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.engines.base import AcceptanceCounters, DecodeEvent, LogEvent
from orchestrator.points import AcceptEstimate, AcceptLength

DISAGREE_TOLERANCE = 0.05


@dataclass(frozen=True)
class DecodeSample:
    """One decode log line: its accept len and how much decoding it stands for.

    ``iterations`` is the decode-log interval the line covers; ``running_req`` the batch size
    it reports. A line's accept len is accepted tokens per request per verify step, so the
    point's value is the mean weighted by request-steps (iterations x running requests).
    """

    accept_len: float
    iterations: int = 1
    running_req: int | None = None

    @property
    def weight(self) -> float:
        batch = self.running_req if self.running_req and self.running_req > 0 else 1
        return float(max(self.iterations, 1) * batch)


def from_journal(samples: Sequence[DecodeSample] | None) -> AcceptEstimate:
    """Weighted mean of the window's decode lines; None when not read or empty."""
    if samples is None:
        return AcceptEstimate(None, 0, "journal not read")
    if not samples:
        return AcceptEstimate(None, 0, "no decode line with accept len in the window")
    total_weight = math.fsum(s.weight for s in samples)
    value = math.fsum(s.accept_len * s.weight for s in samples) / total_weight
    return AcceptEstimate(value, len(samples))


@dataclass(frozen=True)
class RequestSpec:
    """The per-request numbers meta_info gives: completion tokens, verify steps and, where the
    server reports them, the draft tokens its verify steps accepted."""

    completion_tokens: int
    spec_verify_ct: int | None
    spec_correct_drafts: int | None = None

    @property
    def decode_tokens(self) -> int:
        """Tokens the verify steps produced: correct drafts plus one bonus per step where
        the server counts them; else the completion tokens bar the prefill's first one."""
        if self.spec_correct_drafts is not None and self.spec_verify_ct:
            return self.spec_correct_drafts + self.spec_verify_ct
        return max(self.completion_tokens - 1, 0)

    @property
    def exact(self) -> bool:
        return self.spec_correct_drafts is not None


def from_meta_info(requests: Iterable[RequestSpec]) -> AcceptEstimate:
    """Decode tokens over verify steps of the requests that report verify steps.

    A request's first token comes from its prefill, not from a verify step. With the server's
    ``spec_num_correct_drafts`` a request's steps produced correct drafts + steps tokens,
    exactly what the decode log's accept len counts. Without it, ``completion_tokens - 1``
    stands in, which runs low where the server counted drafts that the output then lost to
    a stop token or ``max_new_tokens`` (an overlap verify path counts the whole accepted
    run). (A server's own ``spec_accept_length`` that divides all ``completion_tokens``
    overstates acceptance by 1/steps: 12 % for a 32-token answer at accept len 4.)
    ``exact`` counts the requests read from their correct drafts.
    """
    tokens = 0
    steps = 0
    count = 0
    exact = 0
    seen_any = False
    for request in requests:
        seen_any = True
        if request.spec_verify_ct is None or request.spec_verify_ct <= 0:
            continue
        tokens += request.decode_tokens
        steps += request.spec_verify_ct
        count += 1
        exact += request.exact
    if not seen_any:
        return AcceptEstimate(None, 0, "no successful request")
    if count == 0:
        return AcceptEstimate(
            None,
            0,
            "no response reported its verify steps (speculative decoding off, or an API that"
            " does not report them)",
        )
    return AcceptEstimate(tokens / steps, count, exact=exact)


_SAMPLE = re.compile(
    r"^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>(?:[^\"}]|\"(?:[^\"\\]|\\.)*\")*)\})?"
    r"\s+(?P<value>\S+)(?:\s+\S+)?\s*$"
)


def parse_prometheus_totals(text: str, names: Iterable[str]) -> dict[str, float]:
    """Sum of each named sample over all its label sets in Prometheus text exposition.

    Only what accept_len needs: plain samples of the given names (counters, with or without
    the ``_total`` suffix the caller names). Names absent from the text are absent from the
    result, which is how a server without speculative counters shows.
    """
    wanted = set(names)
    totals: dict[str, float] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None or match["name"] not in wanted:
            continue
        try:
            value = float(match["value"])
        except ValueError:
            continue
        if math.isnan(value):
            continue
        totals[match["name"]] = totals.get(match["name"], 0.0) + value
    return totals


def from_metrics(
    before: str | None,
    after: str | None,
    *,
    requests: int,
    counters: AcceptanceCounters,
) -> AcceptEstimate:
    """Counter deltas over the measured phase: decode tokens per verify step.

    ``counters`` are the serving engine's. Where its token counter also counts each request's
    first token, which its prefill produced, the ``requests`` the point sent in the window are
    subtracted for it (other clients' traffic in the window is not, and would show as a
    disagreement).
    """
    if before is None or after is None:
        return AcceptEstimate(None, 0, "/metrics not available (server without its metrics flag?)")
    names = (counters.verify_steps, counters.tokens)
    start = parse_prometheus_totals(before, names)
    end = parse_prometheus_totals(after, names)
    if counters.verify_steps not in end or counters.tokens not in end:
        lacking = f"/metrics lacks {counters.verify_steps} or {counters.tokens}"
        return AcceptEstimate(None, 0, lacking)
    verify = end[counters.verify_steps] - start.get(counters.verify_steps, 0.0)
    tokens = end[counters.tokens] - start.get(counters.tokens, 0.0)
    if verify <= 0:
        return AcceptEstimate(None, 0, "no verify call during the point (counters reset or flat)")
    return AcceptEstimate(counters.decode_tokens(tokens, verify, requests) / verify, int(verify))


def combine(
    journal: AcceptEstimate,
    meta_info: AcceptEstimate,
    metrics: AcceptEstimate,
    *,
    tolerance: float = DISAGREE_TOLERANCE,
    lines_expected: bool = True,
) -> AcceptLength:
    """Put the sources side by side, take the most tightly scoped available value (meta_info,
    then metrics, then journal) and flag what an operator must look at: ``disagree`` when two
    available sources differ by more than the tolerance (relative to the smaller),
    ``no_decode_lines`` when the journal window was read and held no decode line with an
    accept len although the point should have had one (``lines_expected``: an engine that
    logs on a timer writes none for a point shorter than its period). The store's own type,
    so a point's accept length is typed once."""
    flags: list[str] = []
    values = [e.value for e in (journal, meta_info, metrics) if e.value is not None]
    if len(values) >= 2:
        low, high = min(values), max(values)
        if low <= 0 or (high - low) / low > tolerance:
            flags.append("disagree")
    read = journal.reason != "journal not read"
    if lines_expected and read and journal.value is None and journal.count == 0:
        flags.append("no_decode_lines")
    best = next(
        (e.value for e in (meta_info, metrics, journal) if e.value is not None), None
    )
    return AcceptLength(
        value=best, journal=journal, meta_info=meta_info, metrics=metrics, flags=tuple(flags)
    )


def decode_samples_from_messages(
    messages: Iterable[str],
    *,
    decode_log_interval: int,
    parse: Callable[[str], LogEvent | None],
) -> list[DecodeSample]:
    """Decode samples from raw log messages, read by ``parse`` (the serving engine's
    log-line parser).

    Lines without an accept len (speculative decoding off) are skipped, so an empty result
    over a non-empty window still raises ``no_decode_lines``.
    """
    samples: list[DecodeSample] = []
    for message in messages:
        event = parse(message)
        if not isinstance(event, DecodeEvent) or event.accept_len is None:
            continue
        samples.append(
            DecodeSample(
                accept_len=event.accept_len,
                iterations=decode_log_interval,
                running_req=event.running_req,
            )
        )
    return samples


def request_specs(rows: Iterable[Mapping[str, Any]]) -> list[RequestSpec]:
    """RequestSpecs from stored request rows (``completion_tokens``, ``spec_verify_ct``,
    ``spec_num_correct_drafts``)."""
    return [
        RequestSpec(
            int(r["completion_tokens"]), r.get("spec_verify_ct"), r.get("spec_num_correct_drafts")
        )
        for r in rows
        if r.get("completion_tokens") is not None
    ]
