"""``orchestrator bench``'s options, plan and progress display, as pure units: no server, no
event loop."""

from __future__ import annotations

import argparse
import io

import pytest

from orchestrator.bench.cli import (
    RequestProgress,
    RequestSnapshot,
    WorkloadOption,
    clock_duration,
    configure_parser,
    eta_seconds,
    output_lengths,
    parse_slo,
    parse_workload,
    planned_points,
)
from orchestrator.bench.openloop import arrival_schedule
from orchestrator.bench.point import Slo


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def parse(*argv: str) -> argparse.Namespace:
    parser = configure_parser(argparse.ArgumentParser(prog="bench"))
    return parser.parse_args(["--url", "http://127.0.0.1:1", "--model", "m", *argv])


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0, "0:00"), (7.4, "0:07"), (59.6, "1:00"), (754, "12:34"), (3723, "1:02:03"), (-3, "0:00")],
)
def test_clock_duration(seconds: float, text: str) -> None:
    assert clock_duration(seconds) == text


def test_eta_is_the_pace_since_the_first_request_none_before_and_zero_at_the_end() -> None:
    assert eta_seconds(0, 500, None) is None
    assert eta_seconds(1, 500, 0.0) is None  # one request: no pace yet
    assert eta_seconds(101, 500, 20.0) == pytest.approx(20.0 / 100 * 399)
    assert eta_seconds(500, 500, 90.0) == 0.0
    assert eta_seconds(3, 2, 1.0) == 0.0


def test_progress_line_names_counts_percent_elapsed_eta_and_point() -> None:
    snap = RequestSnapshot(done=121, total=500, elapsed_s=15.0, point="ctx 60 x c4", paced_s=12.0)
    assert snap.line() == "bench 121/500 requests (24%) elapsed 0:15 ETA 0:38 | ctx 60 x c4"
    first = RequestSnapshot(done=0, total=8, elapsed_s=0.5, point="")
    assert first.line() == "bench 0/8 requests (0%) elapsed 0:00 ETA -:--"


def test_plain_progress_prints_at_most_every_few_seconds_and_at_each_point_end() -> None:
    clock, out = FakeClock(), io.StringIO()
    with RequestProgress(6, stream=out, live=False, every_s=5.0, clock=clock) as progress:
        progress.start_point("ctx 60 x c1")
        clock.now += 3.0  # start-up and calibration: not the pace
        progress.advance()  # first request: printed
        clock.now += 1.0
        progress.advance()  # 1 s later: throttled
        progress.advance()
        progress.end_point()  # printed
        progress.start_point("ctx 60 x c2")
        clock.now += 6.0
        progress.advance()  # past every_s: printed
        progress.advance()
        progress.advance()
        progress.end_point()  # printed: the last one, so the exit adds nothing
    assert out.getvalue().splitlines() == [
        "bench 1/6 requests (16%) elapsed 0:03 ETA -:-- | ctx 60 x c1",
        "bench 3/6 requests (50%) elapsed 0:04 ETA 0:02 | ctx 60 x c1",
        "bench 4/6 requests (66%) elapsed 0:10 ETA 0:05 | ctx 60 x c2",
        "bench 6/6 requests (100%) elapsed 0:10 ETA 0:00 | ctx 60 x c2",
    ]


def test_plain_progress_of_a_run_cut_short_ends_with_a_line() -> None:
    clock, out = FakeClock(), io.StringIO()
    with RequestProgress(4, stream=out, live=False, clock=clock) as progress:
        progress.advance()
        clock.now += 2.0
        progress.advance()
    assert out.getvalue().splitlines()[-1] == "bench 2/4 requests (50%) elapsed 0:02 ETA 0:04"


def test_live_progress_draws_a_bar_with_the_same_line() -> None:
    clock, out = FakeClock(), io.StringIO()
    with RequestProgress(4, stream=out, live=True, clock=clock) as progress:
        progress.start_point("ctx 1024 x c8")
        progress.advance()
        clock.now += 4.0
        progress.advance()
    drawn = out.getvalue()
    words = " ".join(drawn.split())  # a narrow console wraps the line
    assert "bench 2/4 requests (50%) elapsed 0:04 ETA 0:08 | ctx 1024 x c8" in words
    assert "━" in drawn  # rich's bar


def test_planned_points_count_warmup_and_measured_requests_in_run_order() -> None:
    args = parse("--contexts", "60", "1024", "--concurrency", "1", "4", "--rounds", "3")
    plan = planned_points(args)
    assert [(p.context, p.concurrency, p.requests) for p in plan] == [
        (60, 1, 1 + 3),
        (60, 4, 4 + 12),
        (1024, 1, 1 + 3),
        (1024, 4, 4 + 12),
    ]
    assert plan[1].label == "ctx 60 x c4"
    fixed = planned_points(parse("--contexts", "60", "--concurrency", "2", "--warmup", "0"))
    assert [p.requests for p in fixed] == [10]
    assert planned_points(parse("--no-matrix")) == []


def test_rate_points_follow_the_closed_ones_and_count_their_schedule() -> None:
    args = parse(
        "--contexts", "60", "--concurrency", "2", "--rate", "4", "0.5", "--duration", "10",
        "--arrivals", "poisson", "--seed", "7", "--max-concurrency", "3",
    )  # fmt: skip
    plan = planned_points(args)
    assert [(p.concurrency, p.rate) for p in plan] == [(2, None), (None, 4.0), (None, 0.5)]
    four = len(arrival_schedule(4.0, 10.0, "poisson", 7))
    half = len(arrival_schedule(0.5, 10.0, "poisson", 7))
    # warm-up: one second of arrivals, capped by the in-flight limit; at least one
    assert [p.requests for p in plan] == [2 + 5 * 2, 3 + four, 1 + half]
    assert plan[1].label == "ctx 60 @ 4 req/s"
    assert args.arrivals == "poisson" and args.max_concurrency == 3


def test_rate_alone_runs_no_closed_points_and_neither_alone_keeps_todays_default() -> None:
    only_rate = planned_points(parse("--contexts", "60", "--rate", "2", "--duration", "3"))
    assert [(p.concurrency, p.rate) for p in only_rate] == [(None, 2.0)]
    constant = parse("--contexts", "60", "--rate", "2", "--duration", "3", "--arrivals",
                     "constant", "--warmup", "0")
    assert [p.requests for p in planned_points(constant)] == [6]
    default = planned_points(parse("--contexts", "60"))
    assert [(p.concurrency, p.rate) for p in default] == [(1, None), (8, None)]


@pytest.mark.parametrize(
    "argv",
    [
        ["--rate", "0"],
        ["--rate", "-1"],
        ["--rate", "inf"],
        ["--rate", "fast"],
        ["--duration", "0"],
        ["--max-concurrency", "0"],
        ["--arrivals", "bursty"],
        ["--slo", "ttft=5"],
        ["--slo", "ttft_ms=0"],
        ["--slo", "ttft_ms=1,ttft_ms=2"],
        ["--output-lengths", "long"],
    ],
)
def test_bad_rate_options_are_usage_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        parse(*argv)
    assert exit_info.value.code == 2
    assert "Traceback" not in capsys.readouterr().err


def test_slo_in_milliseconds_becomes_seconds() -> None:
    assert parse_slo("ttft_ms=2000,tpot_ms=100,e2e_ms=60000") == Slo(2.0, 0.1, 60.0)
    assert parse_slo("tpot_ms=50") == Slo(tpot_s=0.05)
    assert parse("--slo", " e2e_ms=1500 ").slo == Slo(e2e_s=1.5)


def test_output_lengths_default_fixed_and_no_ignore_eos_means_natural() -> None:
    assert output_lengths(parse()) == "fixed"
    assert output_lengths(parse("--no-ignore-eos")) == "natural"
    assert output_lengths(parse("--output-lengths", "workload")) == "workload"
    assert output_lengths(parse("--no-ignore-eos", "--output-lengths", "natural")) == "natural"
    with pytest.raises(ValueError, match="contradicts"):
        output_lengths(parse("--no-ignore-eos", "--output-lengths", "fixed"))


def test_workload_labels_are_the_sweep_files() -> None:
    assert parse_workload("synthetic") == WorkloadOption("synthetic", "synthetic", "")
    assert parse_workload("builtin:chat") == WorkloadOption("builtin:chat", "builtin", "chat")
    assert parse_workload("file:a/traffic.jsonl") == WorkloadOption(
        "file:a/traffic.jsonl", "file", "a/traffic.jsonl"
    )
    assert parse().workload.label == "synthetic"
    for bad in ("builtin:nope", "file:", "traffic.jsonl", "sharegpt:x"):
        with pytest.raises(argparse.ArgumentTypeError):
            parse_workload(bad)
