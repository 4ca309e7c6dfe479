"""The simulated server's performance model: the shapes a sweep is supposed to find."""

from __future__ import annotations

import random
import statistics

import pytest

from orchestrator.sim.perfmodel import (
    BASELINE,
    PerfParams,
    SpecKind,
    SpecShape,
    expected_accept_len,
    sample_accepted,
    steady_throughput,
    step_time_ms,
)
from orchestrator.sim.server_args import build_parser, eagle_chain, resolve

P = PerfParams()


def shape_for(*flags: str, env: dict[str, str] | None = None) -> SpecShape:
    """Resolve real SGLang flags into the model's view, exactly as the server does."""
    argv = ["--model-path", "m", *flags]
    ns = build_parser("0.5.23", True).parse_args(argv)
    return resolve(ns, argv, version="0.5.23", ddtree=True, environ=env or {}).shape


def ddtree(budget: int, topk: int = 4, window: int | None = None) -> SpecShape:
    flags = ["--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "d",
             "--speculative-ddtree-budget", str(budget)]
    if window is not None:
        flags += ["--speculative-draft-window-size", str(window)]
    return shape_for(*flags, env={"SGLANG_DDTREE_MAX_TOPK": str(topk)})


DFLASH = shape_for("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d")


def best_budget(topk: int, concurrency: int, context: int = 1024) -> int:
    return max(range(2, 65), key=lambda n: steady_throughput(ddtree(n, topk), context,
                                                             concurrency, P))


def test_baseline_is_one_token_per_step_at_a_realistic_rate() -> None:
    assert expected_accept_len(BASELINE, 1024, P) == 1.0
    rng = random.Random(0)
    assert {sample_accepted(rng, BASELINE, 1024, P) for _ in range(100)} == {1}
    assert 50 <= steady_throughput(BASELINE, 1024, 1, P) <= 80


def test_step_time_grows_with_batch_and_context() -> None:
    assert step_time_ms(DFLASH, [1024] * 8, P) > step_time_ms(DFLASH, [1024], P)
    assert step_time_ms(DFLASH, [1024] * 8, P) < step_time_ms(DFLASH, [1024] * 32, P)
    assert step_time_ms(BASELINE, [32768], P) > step_time_ms(BASELINE, [1024], P)
    assert step_time_ms(BASELINE, [], P) == 0.0


def test_throughput_has_an_interior_optimum_in_budget() -> None:
    for concurrency in (1, 8, 32):
        best = best_budget(4, concurrency)
        assert 2 < best <= 16, (concurrency, best)  # 3 at C=32: the best falls with load
        at_best = steady_throughput(ddtree(best), 1024, concurrency, P)
        assert steady_throughput(ddtree(2), 1024, concurrency, P) < at_best
        assert steady_throughput(ddtree(64), 1024, concurrency, P) < at_best
    assert 8 <= best_budget(4, 1) <= 12
    assert best_budget(4, 32) < best_budget(4, 8) < best_budget(4, 1)


def test_accept_len_grows_with_budget_and_topk_and_saturates_below_block() -> None:
    lens = [expected_accept_len(ddtree(n), 1024, P) for n in (2, 4, 8, 16, 32, 64, 128)]
    assert lens == sorted(lens)
    assert lens[-1] == pytest.approx(lens[-2])  # saturated
    assert lens[-1] <= 16
    assert expected_accept_len(ddtree(16, 8), 1024, P) > expected_accept_len(ddtree(16, 1),
                                                                          1024, P)
    assert 1.0 < expected_accept_len(DFLASH, 1024, P) <= 16


def dflash_gains(params: PerfParams) -> list[float]:
    return [steady_throughput(DFLASH, 1024, c, params)
            / steady_throughput(BASELINE, 1024, c, params) for c in (1, 8, 16, 32)]


def test_dflash_gain_shrinks_with_concurrency() -> None:
    """A 16-token block is nearly free to verify at C=1 and costs its full compute at C=32,
    where 512 tokens a step are far past the roofline's knee (60)."""
    gains = dflash_gains(P)
    assert gains == sorted(gains, reverse=True)
    assert 2.8 <= gains[0] <= 4.0
    assert gains[-1] < 1.0 < gains[1]


def test_a_compute_rich_host_keeps_the_published_dflash_curve() -> None:
    """Without the compute-bound term (a small model on one B200) the gain shrinks as
    published for Qwen3.5-4B: 3.5x at C=1 to 1.8x at C=32."""
    gains = dflash_gains(PerfParams(compute_token_ms=0.0))
    assert gains == sorted(gains, reverse=True)
    assert 2.8 <= gains[0] <= 4.0
    assert 1.4 <= gains[-1] <= 2.2


def _winners(shapes: dict[int, SpecShape]) -> dict[int, dict[int, float]]:
    """Per load (C=1, 8, 32): each draft length's throughput at 1k context (0: none)."""
    return {c: {k: steady_throughput(shape, 1024, c, P) for k, shape in shapes.items()}
            for c in (1, 8, 32)}  # fmt: skip


@pytest.mark.parametrize(
    ("name", "shapes", "expected"),
    [
        ("vLLM dflash", {k: SpecShape(SpecKind.CHAIN, "DFLASH", k + 1, k, 1, None, 1)
                         for k in range(1, 16)}, {1: 15, 8: 6, 32: 2}),
        ("EAGLE3", {k: eagle_chain("EAGLE3", k) for k in range(0, 9)}, {1: 8, 8: 5, 32: 2}),
    ],
)  # fmt: skip
def test_the_best_draft_length_falls_with_load_by_more_than_the_noise(
    name: str, shapes: dict[int, SpecShape], expected: dict[int, int]
) -> None:
    """Each load's best draft length beats every other load's best there by more than 5 %
    (what a few restarts can tell apart), so a schedule by batch size has something to gain."""
    rates = _winners(shapes)
    best = {c: max(table, key=lambda k: table[k]) for c, table in rates.items()}
    assert best == expected, name
    for load, table in rates.items():
        for other in best.values():
            if other != best[load]:
                assert table[best[load]] > 1.05 * table[other], (name, load, other)


def test_draft_window_helps_long_contexts_only() -> None:
    windowed = shape_for("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path",
                         "d", "--speculative-draft-window-size", "2048")
    short, long_ = 1024, 32768
    assert expected_accept_len(windowed, short, P) == pytest.approx(
        expected_accept_len(DFLASH, short, P))
    assert expected_accept_len(windowed, long_, P) > expected_accept_len(DFLASH, long_, P) + 0.5


def test_sampling_matches_the_expectation_and_is_seeded() -> None:
    shape = ddtree(10)
    draws = [sample_accepted(random.Random(7), shape, 1024, P) for _ in range(3)]
    assert len(set(draws)) == 1
    rng = random.Random(1)
    sample = [sample_accepted(rng, shape, 1024, P) for _ in range(20000)]
    assert statistics.fmean(sample) == pytest.approx(expected_accept_len(shape, 1024, P),
                                                     rel=0.03)
    assert min(sample) >= 1 and max(sample) <= shape.max_depth + 1


def test_eagle_rules_shape_the_model() -> None:
    chain = shape_for("--speculative-algorithm", "EAGLE", "--speculative-num-steps", "3",
                      "--speculative-eagle-topk", "1", "--speculative-num-draft-tokens", "9")
    assert chain.verify_width == 4  # topk 1 forces draft tokens = steps + 1
    auto = shape_for("--speculative-algorithm", "NEXTN")
    assert (auto.algorithm, auto.max_depth, auto.topk, auto.verify_width) == ("EAGLE", 5, 4, 8)
    with pytest.raises(AssertionError):
        shape_for("--speculative-algorithm", "EAGLE", "--speculative-eagle-topk", "4")
