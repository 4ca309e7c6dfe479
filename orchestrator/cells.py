"""Measuring one planned cell of a trial: its workload's prompts, closed or open loop.

A served server walks a trial's planned cells (:class:`orchestrator.running.RunningServer`);
this module turns one cell and the sweep's ``benchmark`` section into a point spec
(:func:`cell_spec`) measured by the benchmark layer's one path
(:func:`~orchestrator.bench.measure.measure_point`: closed loop at a concurrency, open loop
at a rate), with the prompt source of the cell's workload. Samples
are parsed once per sweep (:class:`WorkloadSamples`); a sample's calibrated prompts are kept
per host from one trial to the next (the host serves the same model throughout), and the
synthetic prompts, cheap to calibrate, are made afresh per trial.

An open-loop cell's arrival schedule is drawn from a seed derived from ``search.seed``, the
cell's workload and its context: every config meets the same arrivals at the same cell, so a
difference between configs is not a difference between random draws, and the same seed at
another rate gives the same schedule scaled in time.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

from orchestrator.bench.client import BenchClient
from orchestrator.bench.measure import measure_point
from orchestrator.bench.point import Measurement, PointSpec, Slo
from orchestrator.bench.prompts import PromptFactory, PromptSource
from orchestrator.bench.workloads import WorkloadSample, load_builtin, parse_sample
from orchestrator.bench.workloads.source import WorkloadPrompts
from orchestrator.sweepfile.schema import BenchmarkSpec
from orchestrator.types import MatrixCell

_POISSON_HEADROOM = 1.25
"""Prompts prepared for a rate point, over rate x duration (a Poisson count runs above its
mean; a shortfall only means some prompts go out twice, marked reused)."""


class WorkloadSamples:
    """Each workload's parsed sample (file or built-in), read once for the whole sweep, and
    each host's calibrated prompt sources, kept from one trial to the next.

    A sample's prompts cost one prefill probe each per context to make exact; a host serves
    the same model through every trial of a sweep, so a later trial reuses them
    (:meth:`WorkloadPrompts.rebound`) instead of probing a long context hundreds of times
    again after each restart."""

    def __init__(self, bench: BenchmarkSpec) -> None:
        self._bench = bench
        self._samples: dict[str, WorkloadSample] = {}
        self._calibrated: dict[tuple[str, str, int], WorkloadPrompts] = {}

    def prompts(
        self, host: str, label: str, sample: WorkloadSample, client: BenchClient, distinct: int
    ) -> WorkloadPrompts:
        """``host``'s source of ``label``'s prompts on this trial's ``client``."""
        key = (host, label, distinct)
        known = self._calibrated.get(key)
        if known is not None:
            return known.rebound(client)
        made = WorkloadPrompts(
            client,
            sample,
            max_distinct=distinct,
            workload_output_lengths=self._bench.output_lengths == "workload",
        )
        self._calibrated[key] = made
        return made

    def sample(self, label: str) -> WorkloadSample | None:
        """The sample behind ``label``; None for the synthetic prompts."""
        if label in self._samples:
            return self._samples[label]
        spec = next(s for s in self._bench.workload_specs() if s.label == label)
        if spec.kind == "synthetic":
            return None
        if spec.kind == "builtin":
            found = load_builtin(spec.name)
        else:
            assert spec.content is not None  # the loader attached it (or refused the sweep)
            found = parse_sample(spec.content, filename=spec.name, label=spec.label)
        self._samples[label] = found
        return found


def requests_needed(cell: MatrixCell, bench: BenchmarkSpec, rounds: int) -> int:
    """How many prompts one measurement of ``cell`` sends, warm-up included."""
    if cell.rate is None:
        assert cell.concurrency is not None
        return bench.warmup_requests + rounds * cell.concurrency
    expected = cell.rate * bench.rate_duration_s * _POISSON_HEADROOM
    return bench.warmup_requests + math.ceil(expected) + 1


class PromptSources:
    """One trial's prompt source per workload, on the trial's client.

    A sample's source prepares (and probes the server for) as many distinct prompts as the
    trial's largest cell of that workload sends, no more: a point needing more than the sample
    holds reuses its prompts behind fresh nonces, and records that it did."""

    def __init__(
        self,
        host: str,
        client: BenchClient,
        bench: BenchmarkSpec,
        samples: WorkloadSamples,
        cells: Sequence[MatrixCell],
        rounds: int,
    ) -> None:
        self._host = host
        self._client = client
        self._bench = bench
        self._samples = samples
        self._needed: dict[str, int] = {}
        for cell in cells:
            need = requests_needed(cell, bench, rounds)
            self._needed[cell.workload] = max(self._needed.get(cell.workload, 1), need)
        self._sources: dict[str, PromptSource] = {}

    def source(self, workload: str) -> PromptSource:
        found = self._sources.get(workload)
        if found is not None:
            return found
        sample = self._samples.sample(workload)
        made: PromptSource
        if sample is None:
            made = PromptFactory(self._client)
        else:
            distinct = min(len(sample.requests), self._needed.get(workload, 1))
            made = self._samples.prompts(self._host, workload, sample, self._client, distinct)
        self._sources[workload] = made
        return made


def schedule_seed(seed: int, cell: MatrixCell) -> int:
    """The arrival schedule's seed of ``cell``: the sweep's seed, its workload and context
    (not the config, nor the rate: every config meets the same arrivals)."""
    return zlib.crc32(f"{seed}|{cell.workload}|{cell.context}".encode())


def slo_of(bench: BenchmarkSpec) -> Slo | None:
    spec = bench.slo
    return None if spec is None else Slo(ttft_s=spec.ttft_s, tpot_s=spec.tpot_s, e2e_s=spec.e2e_s)


def client_connections(bench: BenchmarkSpec) -> int:
    """Connections the trial's client pool needs: the largest concurrency, and at a rate point
    ``max_concurrency`` (a request queued inside the client would leave late unseen)."""
    closed = max(bench.concurrency, default=1)
    return max(closed, bench.max_concurrency) if bench.rate else closed


def cell_spec(cell: MatrixCell, bench: BenchmarkSpec, *, rounds: int, seed: int) -> PointSpec:
    """The point ``cell`` asks for under the sweep's ``benchmark``: at a concurrency, its
    ``rounds``; at a rate, the sweep's arrivals, duration and cap, and the cell's schedule
    seed (:func:`schedule_seed`)."""
    closed = cell.rate is None
    return PointSpec(
        context=cell.context,
        concurrency=cell.concurrency if closed else None,
        rounds=rounds if closed else None,
        warmup_requests=bench.warmup_requests,
        max_tokens=bench.max_tokens,
        temperature=bench.temperature,
        ignore_eos=bench.ignore_eos,
        rate=cell.rate,
        arrivals=None if closed else bench.arrivals,
        duration_s=None if closed else bench.rate_duration_s,
        max_concurrency=None if closed else bench.max_concurrency,
        workload=cell.workload,
        seed=None if closed else schedule_seed(seed, cell),
        slo=slo_of(bench),
    )


async def measure_cell(
    client: BenchClient,
    sources: PromptSources,
    cell: MatrixCell,
    bench: BenchmarkSpec,
    *,
    rounds: int,
    seed: int,
    before_measured: Callable[[], Awaitable[Any]],
) -> Measurement:
    """One measurement of ``cell`` (its journal window is the caller's), read by ``client``'s
    engine: its dialect parses the answers, its counters are read from ``/metrics``. The
    ``bench`` verb measures its points by the same :func:`~orchestrator.bench.measure.
    measure_point`."""
    return await measure_point(
        client,
        sources.source(cell.workload),
        cell_spec(cell, bench, rounds=rounds, seed=seed),
        scrape_metrics=True,
        before_measured=before_measured,
    )


__all__ = [
    "PromptSources",
    "WorkloadSamples",
    "cell_spec",
    "client_connections",
    "measure_cell",
    "requests_needed",
    "schedule_seed",
    "slo_of",
]
