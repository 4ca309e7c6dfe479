"""The benchmark engine against the simulated SGLang server, a real subprocess on loopback.

Ground truth comes from the server itself: ``/sim/requests`` has the monotonic time each
chunk's bytes were written and the tokens it carried, ``/sim/truth`` the counters. The client
and the server run on the same machine, so their ``time.monotonic()`` clocks agree.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import io
import itertools
import json
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import pytest

from orchestrator import engines
from orchestrator.bench.acceptlen import decode_samples_from_messages, from_journal
from orchestrator.bench.cli import configure_parser, run_async
from orchestrator.bench.client import BenchClient, ErrorKind, RequestRecord, TokenSource
from orchestrator.bench.measure import measure_point
from orchestrator.bench.openloop import arrival_schedule, offered_rate
from orchestrator.bench.point import (
    FLAG_CONCURRENCY_SHORT,
    FLAG_ERRORS,
    FLAG_RATE_SHORT,
    FLAG_SHORT_OUTPUTS,
    FLAG_TRUNCATED,
    Measurement,
    PointSpec,
    Slo,
    with_journal,
)
from orchestrator.bench.prompts import Calibration, PromptFactory, PromptSource, save_calibrations
from orchestrator.bench.stats import percentile, spread_gaps
from orchestrator.engines.base import Prompt
from orchestrator.types import EXIT_OK, ApiKind, Arrivals
from tests.integration.sim_server_proc import SimServer, free_port, start_server

SGLANG = engines.get("sglang")

MODEL = "bench-model"
DECODE_LOG_INTERVAL = 4
SPEC_FLAGS = [
    "--model-path",
    "org/big-model",
    "--served-model-name",
    MODEL,
    "--speculative-algorithm",
    "DFLASH",
    "--speculative-draft-model-path",
    "org/dflash",
    "--speculative-num-draft-tokens",
    "8",
    "--enable-metrics",
    "--decode-log-interval",
    str(DECODE_LOG_INTERVAL),
]
# Steps of a few ms: long enough that timing errors are measured against something.
TIMED = {"time_scale": 0.2, "load_s": 1.0, "warmup_s": 0.1}

# Loose enough for a busy, shared 2-core machine; the < 1 ms goal is a benchmark's job.
ARRIVAL_P50_S = 0.020
ARRIVAL_MAX_S = 0.500


@pytest.fixture(scope="module")
def spec_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimServer]:
    server = start_server(tmp_path_factory.mktemp("bench-sim"), SPEC_FLAGS, TIMED, name="spec")
    try:
        server.wait_ready_blocking(timeout=30.0)
        yield server
    finally:
        server.stop()


async def _truth(url: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {}
    async with aiohttp.ClientSession() as session:
        for start in range(0, len(ids), 50):
            query = ",".join(ids[start : start + 50])
            async with session.get(f"{url}/sim/requests", params={"ids": query}) as resp:
                resp.raise_for_status()
                for row in await resp.json():
                    rows[row["id"]] = row
    return rows


async def _totals(url: str) -> dict[str, Any]:
    async with aiohttp.ClientSession() as session, session.get(f"{url}/sim/truth") as resp:
        resp.raise_for_status()
        data: dict[str, Any] = await resp.json()
        return data


def _measured(point: Measurement) -> list[RequestRecord]:
    return [r for r in point.records if r.phase == "measured"]


async def run_point(
    client: BenchClient,
    prompts: PromptSource,
    *,
    scrape_metrics: bool = False,
    before_measured: Callable[[], Awaitable[Any]] | None = None,
    **spec: Any,
) -> Measurement:
    """A closed point of ``spec``'s fields, by the one path every point takes."""
    return await measure_point(
        client,
        prompts,
        PointSpec(**spec),
        scrape_metrics=scrape_metrics,
        before_measured=before_measured,
    )


async def run_rate_point(
    client: BenchClient,
    prompts: PromptSource,
    *,
    arrivals: Arrivals = "poisson",
    seed: int = 0,
    **spec: Any,
) -> Measurement:
    """A rate point of ``spec``'s fields (Poisson, seed 0 unless given)."""
    return await measure_point(
        client,
        prompts,
        PointSpec(concurrency=None, rounds=None, arrivals=arrivals, seed=seed, **spec),
    )


def _client(url: str, api: ApiKind, concurrency: int, timeout: float = 30.0) -> BenchClient:
    return BenchClient(
        url,
        api=api,
        model=MODEL,
        concurrency=concurrency,
        request_timeout=timeout, engine=SGLANG,
    )


async def test_generate_point_matches_the_servers_truth(spec_server: SimServer) -> None:
    async with _client(spec_server.url, "generate", 4) as client:
        prompts = PromptFactory(client)
        point = await run_point(
            client,
            prompts,
            context=200,
            concurrency=4,
            rounds=3,
            warmup_requests=2,
            max_tokens=48,
        )
    measured = _measured(point)
    warmup = [r for r in point.records if r.phase == "warmup"]
    assert len(measured) == 12 and len(warmup) == 2
    assert point.metrics.requests == 12 and point.metrics.errors == 0
    # three waves of four: the rate's within-run standard error by batch means over them
    rate, rate_se = point.metrics.output_tok_s, point.metrics.output_tok_s_se
    assert point.metrics.output_tok_s_batches == 3 and rate is not None and rate_se is not None
    assert 0.0 <= rate_se < 0.5 * rate
    truth = await _truth(spec_server.url, [r.response_id or "" for r in point.records])
    assert len(truth) == 14

    arrival_errors: list[float] = []
    ttft_errors: list[float] = []
    tpot_errors: list[float] = []
    unspread_gaps: list[float] = []
    for record in measured:
        row = truth[record.response_id or ""]
        assert record.token_source is TokenSource.CUMULATIVE_PER_CHUNK
        # Token counts are exact, chunk by chunk.
        assert record.completion_tokens == row["completion_tokens"] == 48
        assert record.prompt_tokens == row["prompt_tokens"] == 200
        assert [c.tokens for c in record.chunks] == [n for _, n in row["chunks"]]
        assert record.spec_verify_ct == row["verify_steps"]
        if sys.platform == "linux":
            # The kernel saw the request's bytes before the server's handler ran.
            kernel = row["arrival_kernel_monotonic"]
            assert kernel is not None and kernel <= row["arrival_monotonic"], row
            assert row["arrival_monotonic"] - kernel < ARRIVAL_MAX_S, row
        for chunk, (emitted, _n) in zip(record.chunks, row["chunks"], strict=True):
            arrival_errors.append(chunk.arrival - emitted)
        first = record.first_token_time
        assert first is not None
        ttft_errors.append(first - row["first_emit_monotonic"])
        true_chunks = [(t, int(n)) for t, n in row["chunks"]]
        true_itl = spread_gaps(true_chunks)
        true_tpot = sum(true_itl) / len(true_itl)
        assert record.tpot is not None
        tpot_errors.append(record.tpot - true_tpot)
        unspread_gaps += [
            b.arrival - a.arrival for a, b in zip(record.chunks, record.chunks[1:], strict=False)
        ]

    # Speculative steps put several tokens in one chunk...
    assert max(c.tokens for r in measured for c in r.chunks) > 1
    # ...and ITL spreads each chunk's gap over its tokens instead of inflating it.
    assert point.metrics.itl.count == sum(48 - r.chunks[0].tokens for r in measured)
    assert point.metrics.itl.mean_s is not None and point.metrics.tpot.mean_s is not None
    assert point.metrics.itl.mean_s < 0.75 * (sum(unspread_gaps) / len(unspread_gaps))
    assert percentile([abs(e) for e in arrival_errors], 50) < ARRIVAL_P50_S
    assert max(abs(e) for e in arrival_errors) < ARRIVAL_MAX_S
    assert percentile([abs(e) for e in ttft_errors], 50) < ARRIVAL_P50_S
    assert percentile([abs(e) for e in tpot_errors], 50) < 0.002
    # Warm-up requests are recorded, labelled, and nowhere in the metrics.
    assert point.metrics.ttft.count == 12
    assert point.metrics.output_tokens == 12 * 48
    assert point.metrics.wall_s is not None
    assert min(r.send_time for r in measured) > max(r.send_time for r in warmup)


async def test_accept_len_sources_match_the_servers_counters(spec_server: SimServer) -> None:
    async with _client(spec_server.url, "generate", 4) as client:
        prompts = PromptFactory(client)
        await prompts.calibrate(300)
        log_offset = len(spec_server.log())
        before = await _totals(spec_server.url)
        point = await run_point(
            client,
            prompts,
            context=300,
            concurrency=4,
            rounds=3,
            warmup_requests=0,
            max_tokens=64,
            scrape_metrics=True,
        )
        after = await _totals(spec_server.url)
    accepted = after["accepted_tokens"] - before["accepted_tokens"]
    steps = after["verify_steps"] - before["verify_steps"]
    true_accept = accepted / steps
    accept = point.point.accept
    assert accept.meta_info.value == pytest.approx(true_accept, rel=0.01)
    assert accept.meta_info.count == 12
    assert accept.metrics.value == pytest.approx(true_accept, rel=0.01)
    assert accept.flags == ()
    assert accept.value == accept.meta_info.value
    # The decode lines written during the point: interval averages, so only roughly equal.
    lines = spec_server.log()[log_offset:].splitlines()
    samples = decode_samples_from_messages(
        lines, decode_log_interval=DECODE_LOG_INTERVAL, parse=SGLANG.parse_log_line
    )
    assert samples, "no decode line during the point"
    attached = with_journal(point.point, samples)
    journal = from_journal(samples)
    assert journal.value == pytest.approx(true_accept, rel=0.10)
    assert attached.accept.journal.count == len(samples)


async def test_chat_point_holds_concurrency_and_counts_tokens(spec_server: SimServer) -> None:
    async with _client(spec_server.url, "chat", 8) as client:
        prompts = PromptFactory(client)
        point = await run_point(
            client,
            prompts,
            context=300,
            concurrency=8,
            rounds=3,
            warmup_requests=8,
            max_tokens=32,
        )
    measured = _measured(point)
    assert len(measured) == 24 and point.metrics.errors == 0
    assert point.metrics.concurrency_held is not None
    assert point.metrics.concurrency_held > 0.9 * 8
    assert FLAG_CONCURRENCY_SHORT not in point.flags or point.metrics.concurrency_held < 7.6
    truth = await _truth(spec_server.url, [r.response_id or "" for r in measured])
    ttft_errors = []
    for record in measured:
        row = truth[record.response_id or ""]
        assert record.token_source is TokenSource.TEXT_WEIGHTED
        assert record.completion_tokens == row["completion_tokens"] == 32
        assert sum(c.tokens for c in record.chunks) == 32
        assert record.prompt_tokens == row["prompt_tokens"] == 300
        assert record.finish_reason == "length"
        assert record.first_token_time is not None
        ttft_errors.append(abs(record.first_token_time - row["first_emit_monotonic"]))
    assert percentile(ttft_errors, 50) < ARRIVAL_P50_S
    assert point.metrics.calibration is not None and point.metrics.calibration["tolerance"] == 0
    assert point.metrics.prompt_tokens_tolerance == 0


@pytest.mark.parametrize("api", ["generate", "chat"])
async def test_calibration_is_exact_cached_and_prompts_are_unique(
    spec_server: SimServer, api: ApiKind, tmp_path: Path
) -> None:
    cache = tmp_path / "calibration.json"
    async with _client(spec_server.url, api, 2) as client:
        factory = PromptFactory(client, cache_path=cache)
        for context in (60, 1000):
            calibration = await factory.calibrate(context)
            assert calibration.tolerance == 0, calibration
            assert calibration.requests <= 5
            records = [
                await client.send(factory.prompt(calibration), max_tokens=1) for _ in range(3)
            ]
            assert [r.prompt_tokens for r in records] == [context] * 3
            if api == "generate":
                # Unique at the start: the radix cache serves nothing.
                assert [r.cached_tokens for r in records] == [0, 0, 0]
        heads = {str(factory.prompt(calibration).text).split()[:5].__repr__() for _ in range(50)}
        assert len(heads) == 50
        before = (await _totals(spec_server.url))["completed_requests"]
        reloaded = PromptFactory(client, cache_path=cache)
        assert await reloaded.calibrate(1000) == calibration
        assert (await _totals(spec_server.url))["completed_requests"] == before


async def test_hanging_and_failing_requests_are_errors(
    spec_server: SimServer, tmp_path: Path
) -> None:
    hanging = start_server(
        tmp_path, SPEC_FLAGS, {**TIMED, "faults": {"hang_request_every": 3}}, name="hang"
    )
    try:
        await hanging.wait_ready(timeout=30.0)
        # Calibrate on the healthy server (same model and tokenizer) and hand the result to
        # the hanging one through the calibration cache: its probes must not hang.
        async with _client(spec_server.url, "generate", 2) as healthy:
            calibration = await PromptFactory(healthy).calibrate(60)
        cache = tmp_path / "cal.json"
        moved = dataclasses.replace(calibration, base_url=hanging.url)
        save_calibrations(cache, {moved.key: moved})
        async with _client(hanging.url, "generate", 2, timeout=1.0) as client:
            point = await run_point(
                client,
                PromptFactory(client, cache_path=cache),
                context=60,
                concurrency=2,
                rounds=3,
                warmup_requests=0,
                max_tokens=8,
            )
        assert point.metrics.requests == 6
        assert point.metrics.errors_by_kind == {"timeout": 2}
        assert point.metrics.requests_ok == 4
        assert FLAG_ERRORS in point.flags
        failed = [r for r in point.records if not r.ok]
        assert all(r.error is ErrorKind.TIMEOUT and r.e2e is not None for r in failed)
        assert all(0.9 < (r.e2e or 0) < 5.0 for r in failed)
    finally:
        hanging.stop()

    async with _client(f"http://127.0.0.1:{free_port()}", "generate", 1) as refused:
        record = await refused.send("hello", max_tokens=4)
    assert record.error is ErrorKind.CONNECTION
    bad = BenchClient(
        spec_server.url,
        api="generate",
        model=MODEL,
        concurrency=1,
        request_timeout=10.0,
        extra_body={"sampling_params": {"max_new_tokens": 0}}, engine=SGLANG,
    )
    async with bad:
        record = await bad.send("hello", max_tokens=4)
    assert record.error is ErrorKind.HTTP_STATUS and record.http_status == 400


async def test_run_point_marks_the_measured_phase_after_its_warmup(spec_server: SimServer) -> None:
    """What the runner relies on, point after point on one client: ``before_measured`` runs
    once per point, after every warm-up request ended and before the first measured one was
    sent (so the journal window holds no warm-up), its value comes back as the point's
    ``marker``, /metrics is scraped around the measured phase, the stored point carries every
    request, and the point's document is JSON."""
    marks: list[float] = []

    async def mark() -> str:
        await asyncio.sleep(0)
        marks.append(time.monotonic())
        return f"cursor-{len(marks)}"

    order = [(60, 1), (60, 2), (120, 2)]
    points: list[Measurement] = []
    async with _client(spec_server.url, "generate", 2) as client:
        prompts = PromptFactory(client)
        for context, concurrency in order:
            points.append(
                await run_point(
                    client,
                    prompts,
                    context=context,
                    concurrency=concurrency,
                    rounds=1,
                    warmup_requests=2,
                    max_tokens=8,
                    scrape_metrics=True,
                    before_measured=mark,
                )
            )
    assert [(p.spec.context, p.spec.concurrency) for p in points] == order
    assert [p.marker for p in points] == ["cursor-1", "cursor-2", "cursor-3"]
    for point, marked in zip(points, marks, strict=True):
        warm = [r for r in point.records if r.phase == "warmup"]
        measured = _measured(point)
        assert len(warm) == 2 and len(measured) == point.spec.concurrency
        assert all(r.end_time is not None and r.end_time <= marked for r in warm)
        assert all(r.send_time >= marked for r in measured)
        assert point.metrics_text_before and point.metrics_text_after
        assert "sglang:generation_tokens_total" in point.metrics_text_after
        stored = point.point.requests
        assert [r.warmup for r in stored] == [r.phase == "warmup" for r in point.records]
    doc = points[0].to_json()
    assert doc["invocation_id"] is None and doc["journal_cursor_start"] is None
    assert len(doc["raw_requests"]) == 3
    json.dumps(doc)


async def test_rate_point_sends_on_its_schedule_and_reports_bench_serving_rates(
    spec_server: SimServer,
) -> None:
    """4 requests/s for 2 s, Poisson from a seed: every scheduled request goes out at its
    offset (stamps against the stored schedule), the server saw each one, and the point's
    rates are bench_serving's definitions over the records."""
    schedule = arrival_schedule(4.0, 2.0, "poisson", seed=7)
    async with _client(spec_server.url, "generate", 8) as client:
        point = await run_rate_point(
            client,
            PromptFactory(client),
            context=200,
            rate=4.0,
            arrivals="poisson",
            duration_s=2.0,
            max_concurrency=8,
            warmup_requests=1,
            max_tokens=16,
            seed=7,
            slo=Slo(ttft_s=30.0, e2e_s=30.0),
        )
    measured = _measured(point)
    m = point.metrics
    assert m.arrival_schedule == schedule and len(measured) == len(schedule) >= 5
    assert m.requests_scheduled == len(schedule) and m.requests_unsent == 0 and m.errors == 0
    # Each request left at its own offset from the phase's start, never before it.
    start = min(r.send_time for r in measured) - schedule[0]
    lags = [r.send_time - (start + offset) for r, offset in zip(measured, schedule, strict=True)]
    assert min(lags) > -0.002 and percentile(lags, 50) < ARRIVAL_P50_S
    assert m.send_lag.count == len(schedule) and m.send_lag.max_s is not None
    assert m.achieved_rate == pytest.approx(offered_rate(schedule, 2.0), rel=0.05)
    assert FLAG_RATE_SHORT not in point.flags
    # bench_serving: completed requests and their tokens over start -> last response's end.
    assert m.wall_s is not None and m.wall_s >= max(schedule)
    assert m.request_s == pytest.approx(len(measured) / m.wall_s)
    assert m.input_tok_s == pytest.approx(200 * len(measured) / m.wall_s)
    assert m.output_tok_s == pytest.approx(16 * len(measured) / m.wall_s)
    assert m.goodput == m.request_s and m.goodput_fraction == 1.0
    assert m.output_len_count == len(measured) and m.output_len_p50 == 16.0
    assert m.prompts_distinct == len(measured) and m.prompts_reused == 0
    truth = await _truth(spec_server.url, [r.response_id or "" for r in measured])
    assert [truth[r.response_id or ""]["completion_tokens"] for r in measured] == [16] * len(
        measured
    )
    doc = point.to_json(include_requests=False)
    assert doc["rate"] == 4.0 and doc["arrivals"] == "poisson" and doc["concurrency"] is None
    assert doc["arrival_schedule"] == list(schedule) and doc["seed"] == 7
    assert doc["achieved_rate"] == m.achieved_rate and doc["goodput"] == m.goodput
    assert doc["workload"] == "synthetic" and doc["slo"]["ttft_s"] == 30.0
    assert doc["prompt_calibration"]["method"] == "filler"
    json.dumps(doc)


async def test_rate_point_that_cannot_keep_up_is_flagged_not_reported_as_offered(
    spec_server: SimServer,
) -> None:
    """One slot at 40 requests/s of 32-token answers: the loop waits for its slot (lateness
    measured), leaves what it could not send unsent, and the point says it fell short."""
    async with _client(spec_server.url, "generate", 1) as client:
        point = await run_rate_point(
            client,
            PromptFactory(client),
            context=60,
            rate=40.0,
            arrivals="constant",
            duration_s=0.5,
            max_concurrency=1,
            warmup_requests=0,
            max_tokens=32,
        )
    m = point.metrics
    measured = _measured(point)
    assert m.requests_scheduled == 20 and m.requests_unsent is not None
    assert len(measured) + m.requests_unsent == 20 and m.requests_unsent > 0
    assert m.achieved_rate is not None and m.achieved_rate < 0.95 * 40.0
    assert m.achieved_rate == pytest.approx(len(measured) / 0.5, rel=0.2)
    assert FLAG_RATE_SHORT in point.flags
    # Never two in flight: each send waited for the previous answer.
    for before, after in itertools.pairwise(measured):
        assert before.end_time is not None and after.send_time >= before.end_time
    assert m.send_lag.max_s is not None and m.send_lag.max_s > 0.5 / 20


class _OwnLengths:
    """Synthetic prompts that each carry their own output length, as a workload's do."""

    def __init__(self, factory: PromptFactory, lengths: list[int]) -> None:
        self.factory = factory
        self.lengths = itertools.cycle(lengths)

    async def calibrate(self, target_tokens: int) -> Calibration:
        return await self.factory.calibrate(target_tokens)

    def prompt(self, calibration: Calibration) -> Prompt:
        own = next(self.lengths)
        return dataclasses.replace(self.factory.prompt(calibration), max_tokens=own)


async def test_each_request_gets_its_own_output_length_and_no_false_short_flag(
    spec_server: SimServer,
) -> None:
    async with _client(spec_server.url, "generate", 2) as client:
        point = await run_point(
            client,
            _OwnLengths(PromptFactory(client), [5, 9]),
            context=60,
            concurrency=2,
            rounds=3,
            warmup_requests=0,
            max_tokens=32,
        )
    measured = _measured(point)
    assert sorted(r.max_tokens for r in measured) == [5, 5, 5, 9, 9, 9]
    assert all(r.completion_tokens == r.max_tokens for r in measured)
    m = point.metrics
    assert m.short_outputs == 0 and m.truncated == 0
    assert FLAG_SHORT_OUTPUTS not in point.flags and FLAG_TRUNCATED not in point.flags
    assert (m.output_len_count, m.output_len_mean, m.output_len_max) == (6, 7.0, 9.0)
    assert (m.prompts_distinct, m.prompts_reused) == (6, 0)


async def test_a_cancelled_rate_point_leaves_no_request_running(spec_server: SimServer) -> None:
    """The runner cancels a point when the sweep stops: the open loop's in-flight requests
    are cancelled with it, not left streaming behind the next trial."""
    async with _client(spec_server.url, "generate", 8) as client:
        prompts = PromptFactory(client)
        await prompts.calibrate(60)
        point = asyncio.create_task(
            run_rate_point(
                client,
                prompts,
                context=60,
                rate=20.0,
                duration_s=30.0,
                max_concurrency=8,
                warmup_requests=0,
                max_tokens=200,
            )
        )
        await asyncio.sleep(0.5)
        point.cancel()
        with pytest.raises(asyncio.CancelledError):
            await point
        assert asyncio.all_tasks() == {asyncio.current_task()}


def test_bench_cli_prints_one_json_document(spec_server: SimServer) -> None:
    argv = [
        sys.executable,
        "-m",
        "orchestrator.bench.cli",
        "--url",
        spec_server.url,
        "--model",
        MODEL,
        "--api",
        "generate",
        "--contexts",
        "60",
        "256",
        "--concurrency",
        "1",
        "4",
        "--rounds",
        "2",
        "--max-tokens",
        "24",
        "--json",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)  # a hang only
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)  # the whole of stdout is one JSON document
    points = document["points"]
    assert [(p["context"], p["concurrency"]) for p in points] == [
        (60, 1),
        (60, 4),
        (256, 1),
        (256, 4),
    ]
    for p in points:
        assert p["requests"] == 2 * p["concurrency"] and p["errors"] == 0
        for key in (
            "ttft_p50_s",
            "ttft_p99_s",
            "itl_p50_s",
            "itl_p99_s",
            "tpot_mean_s",
            "e2e_p90_s",
            "output_tok_s",
            "concurrency_held",
        ):
            assert isinstance(p[key], float), key
        assert p["accept_len_meta_info"] > 1.0
        assert p["accept_len_metrics"] == pytest.approx(p["accept_len_meta_info"], rel=0.05)
        assert p["accept_len_journal"] is None
        assert "journal" in p["accept_len_journal_reason"]
        assert "raw_requests" not in p

    chat = subprocess.run(
        [
            *argv[:8],
            "chat",
            "--contexts",
            "60",
            "--concurrency",
            "2",
            "--rounds",
            "1",
            "--max-tokens",
            "8",
            "--no-metrics",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert chat.returncode == 0, chat.stderr[-3000:]
    (point,) = json.loads(chat.stdout)["points"]
    assert point["accept_len"] is None
    assert "verify steps" in point["accept_len_meta_info_reason"]
    assert "not scraped" in point["accept_len_metrics_reason"]


def test_bench_cli_output_file_has_one_line_per_point_with_its_requests(
    spec_server: SimServer, tmp_path: Path
) -> None:
    output = tmp_path / "points.jsonl"
    done = subprocess.run(
        [
            sys.executable, "-m", "orchestrator.bench.cli", "--url", spec_server.url,
            "--model", MODEL, "--api", "generate", "--contexts", "60", "--concurrency", "1", "2",
            "--rate", "40", "--duration", "0.2", "--seed", "3", "--slo", "e2e_ms=60000",
            "--warmup", "1", "--rounds", "1", "--max-tokens", "8", "--no-metrics",
            "--output", str(output), "--output-prompts",
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    lines = [json.loads(line) for line in output.read_text().splitlines()]
    assert [(p["context"], p["concurrency"], p["rate"]) for p in lines] == [
        (60, 1, None), (60, 2, None), (60, None, 40.0)
    ]  # fmt: skip
    total = 0
    for line in lines:
        assert line["url"] == spec_server.url and line["api"] == "generate"
        requests = line["raw_requests"]
        total += len(requests)
        phases = [r["phase"] for r in requests]
        assert phases == ["warmup"] + ["measured"] * line["requests"]
        truth = await_truth(spec_server.url, [r["response_id"] for r in requests])
        for request in requests:
            # the prompt kept is the one the server got: its length in the server's tokens
            assert truth[request["response_id"]]["prompt_tokens"] == request["prompt_tokens"] == 60
            assert len(request["prompt"].split()) == 60  # the simulator counts words
        assert len({r["prompt"] for r in requests}) == len(requests)  # each its own nonce
    rate = lines[2]
    measured = sorted((r for r in rate["raw_requests"] if r["phase"] == "measured"),
                      key=lambda r: r["send_time"])
    assert len(rate["arrival_schedule"]) == len(measured) == rate["requests"] > 1
    assert rate["goodput"] == pytest.approx(rate["request_s"])  # a 60 s bound: every request
    # progress: plain lines on stderr (not a terminal), the last one complete
    progress = [line for line in done.stderr.splitlines() if line.startswith("bench ")]
    assert progress[-1].startswith(f"bench {total}/{total} requests (100%)")

    unwritable = subprocess.run(
        [
            sys.executable, "-m", "orchestrator.bench.cli", "--url", spec_server.url,
            "--model", MODEL, "--output", str(tmp_path / "no" / "such" / "dir.jsonl"),
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert unwritable.returncode == 2 and unwritable.stdout == ""
    (message,) = unwritable.stderr.splitlines()
    assert message.startswith("bench: --output: No such file or directory")


def test_bench_cli_file_workload_with_its_output_lengths(
    spec_server: SimServer, tmp_path: Path
) -> None:
    sample = tmp_path / "traffic.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": f"question {i}: " + "why is the sky blue " * 8}],
         "output_tokens": 4 + i}
        for i in range(3)
    ]
    sample.write_text("".join(json.dumps(line) + "\n" for line in lines))
    output = tmp_path / "points.jsonl"
    done = subprocess.run(
        [
            sys.executable, "-m", "orchestrator.bench.cli", "--url", spec_server.url,
            "--model", MODEL, "--api", "chat", "--workload", f"file:{sample}", "--contexts", "96",
            "--concurrency", "1", "--rounds", "4", "--warmup", "0", "--output-lengths",
            "workload", "--max-tokens", "32", "--no-metrics", "--output", str(output),
            "--output-prompts",
        ],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    (point,) = [json.loads(line) for line in output.read_text().splitlines()]
    assert point["workload"] == f"file:{sample}"
    requests = point["raw_requests"]
    assert len(requests) == 4
    # each request asks for its sample line's output length, and gets it (ignore_eos)
    assert {r["max_tokens"] for r in requests} <= {4, 5, 6}
    assert all(r["completion_tokens"] == r["max_tokens"] for r in requests)
    assert all(r["prompt_tokens"] == 96 for r in requests)
    for request in requests:  # chat: the messages as sent, the sample's question in them
        assert any("why is the sky blue" in m["content"] for m in request["prompt"])
    assert point["prompts_distinct"] == 3 and point["prompts_reused"] == 1

    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(lines[0]) + "\n" + '{"messages": 3}\n')
    rejected = subprocess.run(
        [sys.executable, "-m", "orchestrator.bench.cli", "--url", spec_server.url, "--model",
         MODEL, "--workload", f"file:{bad}", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert rejected.returncode == 2 and rejected.stdout == ""
    (message,) = rejected.stderr.splitlines()  # one plain line per bad line, no traceback
    assert message.startswith(f"bench: --workload: {bad}:2: ")


def await_truth(url: str, ids: list[str]) -> dict[str, dict[str, Any]]:
    return asyncio.run(_truth(url, ids))


def test_bench_cli_coding_only(spec_server: SimServer) -> None:
    argv = [
        sys.executable,
        "-m",
        "orchestrator.bench.cli",
        "--url",
        spec_server.url,
        "--model",
        MODEL,
        "--coding",
        "--no-matrix",
        "--problem-ids",
        "is_palindrome",
        "gcd",
        "--coding-max-tokens",
        "2048",
        "--json",
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    document = json.loads(done.stdout)
    assert document["points"] == []
    coding = document["coding"]
    assert [r["problem_id"] for r in coding["results"]] == ["is_palindrome", "gcd"]
    assert coding["total"] == 2
    assert sum(coding["outcomes"].values()) == 2
    assert all(r["outcome"] != "request_error" for r in coding["results"])

    bad = subprocess.run(
        [*argv[:-1], "--problem-ids", "no_such_problem", "--json"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert bad.returncode == 2 and bad.stdout == ""
    assert "no_such_problem" in bad.stderr


def _orchestrator_bench(*args: str) -> subprocess.CompletedProcess[str]:
    """``orchestrator bench ...`` through the real command's entry point, as a person runs it."""
    argv = [sys.executable, "-m", "orchestrator.cli", "bench", *args]
    return subprocess.run(argv, capture_output=True, text=True, timeout=120)


def test_bench_url_without_a_scheme_is_http(spec_server: SimServer) -> None:
    bare = spec_server.url.removeprefix("http://")
    assert "://" not in bare
    done = _orchestrator_bench(
        "--url", bare, "--model", MODEL, "--api", "generate", "--contexts", "60",
        "--concurrency", "1", "--rounds", "1", "--max-tokens", "8", "--json",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    document = json.loads(done.stdout)
    assert document["url"] == spec_server.url
    (point,) = document["points"]
    assert point["requests"] == 1 and point["errors"] == 0


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("ftp://127.0.0.1:30000", "scheme must be http or https"),
        ("http://", "has no host"),
        ("http://127.0.0.1:99999", "Port out of range"),
        ("http://user:pw@127.0.0.1:30000", "credentials in the URL are not supported"),
    ],
)
def test_bench_unusable_url_is_one_plain_line_and_exit_2(url: str, why: str) -> None:
    done = _orchestrator_bench("--url", url, "--model", MODEL, "--json")
    assert done.returncode == 2
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()  # one plain line, no traceback
    assert line.startswith(f"bench: --url: base URL {url!r}") and why in line


class CountingProxy:
    """A TCP forwarder in front of the simulated server that counts the connections it
    accepts and the requests sent on each (the simulator's own HTTP layer is not asked)."""

    def __init__(self, target: str) -> None:
        parts = urlsplit(target)
        assert parts.hostname is not None and parts.port is not None
        self.target = (parts.hostname, parts.port)
        self.posts: list[int] = []
        self._server: asyncio.Server | None = None

    async def __aenter__(self) -> CountingProxy:
        self._server = await asyncio.start_server(self._forward, "127.0.0.241", 0)
        return self

    async def __aexit__(self, *_exc: object) -> None:
        assert self._server is not None
        self._server.close()
        await self._server.wait_closed()

    @property
    def url(self) -> str:
        assert self._server is not None
        return f"http://127.0.0.241:{self._server.sockets[0].getsockname()[1]}"

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        index = len(self.posts)
        self.posts.append(0)
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def pipe(
            source: asyncio.StreamReader, sink: asyncio.StreamWriter, count: bool
        ) -> None:
            try:
                while data := await source.read(65536):
                    if count:
                        self.posts[index] += data.count(b"POST /generate ")
                    sink.write(data)
                    await sink.drain()
            finally:
                sink.close()

        await asyncio.gather(
            pipe(reader, up_writer, True), pipe(up_reader, writer, False), return_exceptions=True
        )


@pytest.mark.parametrize("connections", ["per-request", "keep-alive"])
async def test_bench_connections_option_decides_the_connections_on_the_wire(
    spec_server: SimServer, connections: str
) -> None:
    """``--connections per-request``: every request (calibration probes too) on a connection
    of its own, as bench_serving sends; keep-alive (the default): all on one, at
    concurrency 1. The results file and the settings say which."""
    async with CountingProxy(spec_server.url) as proxy:
        args = configure_parser(argparse.ArgumentParser()).parse_args([
            "--url", proxy.url, "--model", MODEL, "--api", "generate", "--contexts", "60",
            "--concurrency", "1", "--rounds", "3", "--warmup", "0", "--max-tokens", "4",
            "--no-metrics", "--connections", connections,
        ])  # fmt: skip
        output = io.StringIO()
        code, document, points = await run_async(args, None, output, None)
    assert code == EXIT_OK and points[0].metrics.requests_ok == 3
    assert document["settings"]["connections"] == connections
    assert json.loads(output.getvalue())["connections"] == connections
    sent = sum(proxy.posts)
    assert sent >= 3  # the calibration's probes, then the 3 measured
    assert proxy.posts == ([1] * sent if connections == "per-request" else [sent])
