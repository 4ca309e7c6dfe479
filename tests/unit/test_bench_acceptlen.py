"""accept_len sources and their cross-check, and the Prometheus totals parser."""

from __future__ import annotations

import pytest

from orchestrator import engines
from orchestrator.bench.acceptlen import (
    DecodeSample,
    RequestSpec,
    combine,
    decode_samples_from_messages,
    from_journal,
    from_meta_info,
    from_metrics,
    parse_prometheus_totals,
)
from orchestrator.store.results import AcceptEstimate, AcceptLength

SGLANG = engines.get("sglang")
COUNTERS = SGLANG.acceptance_counters


def test_journal_mean_is_weighted_by_request_steps() -> None:
    samples = [
        DecodeSample(accept_len=2.0, iterations=40, running_req=1),
        DecodeSample(accept_len=4.0, iterations=40, running_req=3),
    ]
    estimate = from_journal(samples)
    assert estimate.value == pytest.approx((2.0 * 40 + 4.0 * 120) / 160)
    assert estimate.count == 2
    assert from_journal([DecodeSample(3.0)]).value == 3.0
    assert from_journal(None).reason == "journal not read"
    empty = from_journal([])
    assert empty.value is None and "no decode line" in (empty.reason or "")


def test_meta_info_is_tokens_over_verify_steps() -> None:
    # The first token of each request comes from prefill, not from a verify step.
    estimate = from_meta_info([RequestSpec(101, 40), RequestSpec(51, 10), RequestSpec(7, None)])
    assert estimate.value == pytest.approx(150 / 50)
    assert estimate.count == 2
    off = from_meta_info([RequestSpec(100, None)])
    assert off.value is None and "verify steps" in (off.reason or "")
    assert from_meta_info([]).value is None


METRICS_BEFORE = """\
# HELP sglang:spec_verify_calls_total Number of verify calls
# TYPE sglang:spec_verify_calls_total counter
sglang:spec_verify_calls_total{model_name="m",engine_type="unified"} 100.0
sglang:generation_tokens_total{model_name="m",engine_type="unified"} 300.0
sglang:spec_accept_length{model_name="m"} 3.0
"""
METRICS_AFTER = """\
sglang:spec_verify_calls_total{model_name="m",engine_type="unified"} 150.0
sglang:generation_tokens_total{model_name="m",engine_type="unified"} 500.0
sglang:generation_tokens_total{model_name="m",engine_type="x,}y"} 10 1712345678
"""


def test_prometheus_totals_sum_label_sets_and_skip_comments() -> None:
    totals = parse_prometheus_totals(
        METRICS_AFTER, ["sglang:generation_tokens_total", "sglang:spec_verify_calls_total"]
    )
    assert totals == {
        "sglang:spec_verify_calls_total": 150.0,
        "sglang:generation_tokens_total": 510.0,
    }
    assert parse_prometheus_totals("# nothing\n", ["a"]) == {}


def test_metrics_delta_is_tokens_per_verify_call() -> None:
    # 210 generated tokens, 10 of them first tokens of the point's 10 requests.
    estimate = from_metrics(METRICS_BEFORE, METRICS_AFTER, requests=10, counters=COUNTERS)
    assert estimate.value == pytest.approx(200 / 50)
    assert estimate.count == 50
    assert from_metrics(None, METRICS_AFTER, requests=1, counters=COUNTERS).value is None
    assert from_metrics("x 1\n", "x 2\n", requests=1, counters=COUNTERS).value is None
    flat = from_metrics(METRICS_BEFORE, METRICS_BEFORE, requests=0, counters=COUNTERS)
    assert flat.value is None and "no verify call" in (flat.reason or "")


def test_combine_flags_disagreement_over_five_percent() -> None:
    agree = combine(AcceptEstimate(3.0, 5), AcceptEstimate(3.1, 10), AcceptEstimate(None, 0, "off"))
    assert agree.flags == ()
    assert agree.value == 3.1  # meta_info is the most tightly scoped
    disagree = combine(AcceptEstimate(3.0, 5), AcceptEstimate(3.3, 10), AcceptEstimate(3.0, 9))
    assert "disagree" in disagree.flags
    fields = disagree.to_json()
    assert fields["accept_len"] == 3.3
    assert fields["accept_len_journal"] == 3.0
    assert fields["accept_len_flags"] == ["disagree"]


def test_combine_flags_an_empty_journal_window_but_not_an_unread_one() -> None:
    empty = combine(from_journal([]), AcceptEstimate(None, 0, "x"), AcceptEstimate(None, 0, "y"))
    assert empty.flags == ("no_decode_lines",)
    assert empty.value is None
    unread = combine(from_journal(None), AcceptEstimate(2.0, 1), AcceptEstimate(None, 0, "y"))
    assert unread.flags == ()


def test_decode_samples_from_real_log_lines() -> None:
    lines = [
        "[2026-10-30 12:00:00] Decode batch, #running-req: 4, #token: 20480, token usage: 0.05, "
        "accept len: 4.12, accept rate: 0.21, cuda graph: True, gen throughput (token/s): 512.34, "
        "#queue-req: 0",
        "[2026-10-30 12:00:01] Decode batch, #running-req: 1, #token: 512, token usage: 0.00, "
        "cuda graph: True, gen throughput (token/s): 60.00, #queue-req: 0",
        "[2026-10-30 12:00:02] Prefill batch, #new-seq: 1, #new-token: 1024, #cached-token: 0, "
        "token usage: 0.00, #running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
        "input throughput (token/s): 8123.45",
    ]
    samples = decode_samples_from_messages(
        lines, decode_log_interval=40, parse=SGLANG.parse_log_line
    )
    assert samples == [DecodeSample(accept_len=4.12, iterations=40, running_req=4)]


def test_meta_info_is_exact_where_the_server_counts_correct_drafts() -> None:
    # A 37-token answer from 8-token blocks cut by max_tokens: the verify steps accepted 40
    # tokens (34 drafts + 6 bonus) where the output kept 36 after the prefill's first token;
    # the exact form is the decode log's definition, the estimate runs low.
    exact = from_meta_info([RequestSpec(37, 6, spec_correct_drafts=34)])
    assert exact.value == pytest.approx(40 / 6) and (exact.count, exact.exact) == (1, 1)
    estimated = from_meta_info([RequestSpec(37, 6)])
    assert estimated.value == pytest.approx(36 / 6) and estimated.exact == 0
    mixed = from_meta_info([RequestSpec(37, 6, 34), RequestSpec(11, 4)])
    assert mixed.value == pytest.approx((40 + 10) / 10) and (mixed.count, mixed.exact) == (2, 1)
    # Correct drafts without a verify step mean nothing (the server writes neither).
    assert from_meta_info([RequestSpec(1, 0, 0)]).value is None


def test_request_specs_from_stored_rows_carry_the_correct_drafts() -> None:
    from orchestrator.bench.acceptlen import request_specs

    rows = [
        {"completion_tokens": 37, "spec_verify_ct": 6, "spec_num_correct_drafts": 34},
        {"completion_tokens": 11, "spec_verify_ct": 4},
        {"completion_tokens": None},
    ]
    assert request_specs(rows) == [RequestSpec(37, 6, 34), RequestSpec(11, 4, None)]


def test_the_exact_count_survives_to_the_stored_json_and_back() -> None:
    meta_info = from_meta_info(
        [RequestSpec(33, 10, spec_correct_drafts=22), RequestSpec(20, 8, None)]
    )
    assert (meta_info.count, meta_info.exact) == (2, 1)
    accept = combine(from_journal(None), meta_info, AcceptEstimate(None, 0, "off"))
    stored = accept.to_json()
    assert stored["accept_len_meta_info_exact_requests"] == 1
    assert AcceptLength.from_json(stored) == accept
