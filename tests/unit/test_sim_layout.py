"""The simulated server's parallel layout (issue 14): which scheduler processes SGLang launches
for the layout flags, which of them log batch lines, the prefixes they write, SGLang's own
refusals of layouts and block flags; every written line read back by the orchestrator's parser."""

from __future__ import annotations

import io

import pytest

from orchestrator.engines.base import DecodeEvent
from orchestrator.engines.sglang.engine import parse_log_line
from orchestrator.sim.server_args import ServerArgs, build_parser, resolve
from orchestrator.sim.server_log import RankLayout, SglangLog

DECODE = (
    "Decode batch, #running-req: 2, #token: 900, token usage: 0.01, accept len: 3.50, "
    "accept rate: 0.36, cuda graph: True, gen throughput (token/s): 120.00, #queue-req: 0"
)


def _resolve(*flags: str, environ: dict[str, str] | None = None) -> ServerArgs:
    argv = ["--model-path", "m", *flags]
    ns = build_parser("0.5.23", ddtree=True).parse_args(argv)
    return resolve(ns, argv, version="0.5.23", ddtree=True, environ=environ or {})


def _written(layout: RankLayout, kind: str) -> list[str]:
    stream = io.StringIO()
    log = SglangLog(ms=True, layout=layout, stream=stream)
    getattr(log, kind)(DECODE)
    return stream.getvalue().splitlines()


def _tags(lines: list[str]) -> list[str]:
    return [line[line.index(".") + 4 : line.index("]")] for line in lines]


@pytest.mark.parametrize(
    ("flags", "every_rank", "logging"),
    [
        ([], [""], [""]),
        (["--tp-size", "2"], [" TP0", " TP1"], [" TP0"]),
        # DP without DP attention: a TP group per DP rank, each tagged with its DP rank.
        (
            ["--dp-size", "2", "--tp-size", "2"],
            [" DP0 TP0", " DP0 TP1", " DP1 TP0", " DP1 TP1"],
            [" DP0 TP0", " DP1 TP0"],
        ),
        # DP attention: one TP group; a TP rank's DP rank is its attention group.
        (
            ["--dp-size", "2", "--tp-size", "4", "--enable-dp-attention"],
            [" DP0 TP0", " DP0 TP1", " DP1 TP2", " DP1 TP3"],
            [" DP0 TP0", " DP1 TP2"],
        ),
        (
            ["--dp-size", "2", "--tp-size", "4", "--enable-dp-attention", "--attn-cp-size", "2"],
            [" DP0 ATTN_CP0 TP0", " DP0 ATTN_CP1 TP1", " DP1 ATTN_CP0 TP2", " DP1 ATTN_CP1 TP3"],
            [" DP0 ATTN_CP0 TP0", " DP0 ATTN_CP1 TP1", " DP1 ATTN_CP0 TP2", " DP1 ATTN_CP1 TP3"],
        ),
        (
            ["--tp-size", "4", "--moe-dp-size", "2", "--attn-cp-size", "2", "--ep-size", "2"],
            [" ATTN_CP0 MOE_DP0 TP0 EP0", " ATTN_CP0 MOE_DP0 TP1 EP1",
             " ATTN_CP1 MOE_DP1 TP2 EP0", " ATTN_CP1 MOE_DP1 TP3 EP1"],
            [" ATTN_CP0 MOE_DP0 TP0 EP0", " ATTN_CP1 MOE_DP1 TP2 EP0"],
        ),
        (
            ["--pp-size", "2", "--tp-size", "2", "--ep-size", "2"],
            [" PP0 TP0 EP0", " PP0 TP1 EP1", " PP1 TP0 EP0", " PP1 TP1 EP1"],
            [" PP0 TP0 EP0", " PP1 TP0 EP0"],
        ),
    ],
)
def test_layout_prefixes_are_sglangs_and_parse(
    flags: list[str], every_rank: list[str], logging: list[str]
) -> None:
    layout = RankLayout.from_args(_resolve(*flags).values, {})
    assert _tags(_written(layout, "all_ranks")) == every_rank
    lines = _written(layout, "rank")
    assert _tags(lines) == logging
    for line, tags in zip(lines, logging, strict=True):
        event = parse_log_line(line)
        assert isinstance(event, DecodeEvent), line
        assert event.accept_len == pytest.approx(3.5)
        expected = dict((t.rstrip("0123456789"), int(t[len(t.rstrip("0123456789")):]))
                        for t in tags.split())
        assert dict(event.prefix.ranks) == expected


def test_a_router_dp_rank_tags_a_server_without_dp() -> None:
    args = _resolve("--tp-size", "2")
    layout = RankLayout.from_args(args.values, {"SGLANG_DP_RANK": "3"})
    assert _tags(_written(layout, "rank")) == [" DP3 TP0"]
    assert layout.world_size == 2


def test_world_size_counts_a_group_per_dp_rank_only_without_dp_attention() -> None:
    plain = RankLayout.from_args(_resolve("--dp-size", "2", "--tp-size", "4").values, {})
    shared = RankLayout.from_args(
        _resolve("--dp-size", "2", "--tp-size", "4", "--enable-dp-attention").values, {}
    )
    assert (plain.world_size, shared.world_size) == (8, 4)


DFLASH = ("--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d")


@pytest.mark.parametrize(
    ("flags", "error", "message"),
    [
        (
            (*DFLASH, "--dp-size", "2", "--tp-size", "2", "--enable-dp-attention"),
            ValueError,
            "Currently DFLASH speculative decoding does not support dp attention.",
        ),
        (
            (*DFLASH, "--pp-size", "2"),
            ValueError,
            "Currently DFLASH speculative decoding only supports pp_size == 1.",
        ),
        (
            (*DFLASH, "--speculative-num-draft-tokens", "8", "--speculative-dflash-block-size",
             "16"),
            ValueError,
            "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are set "
            "but they differ. For DFLASH they must match. speculative_num_draft_tokens=8, "
            "speculative_dflash_block_size=16.",
        ),
        (
            ("--tp-size", "8", "--moe-dp-size", "2", "--attn-cp-size", "4"),
            AssertionError,
            "attn_cp_size != moe_dp_size is only supported when moe_dp_size == 1",
        ),
        (
            ("--tp-size", "4", "--moe-dp-size", "2", "--ep-size", "4"),
            AssertionError,
            "ep_size * moe_dp_size must be less than or equal to tp_size",
        ),
        (
            ("--tp-size", "4", "--moe-dp-size", "2", "--pp-size", "2"),
            AssertionError,
            "PP is not supported with context parallelism",
        ),
        (
            ("--tp-size", "2", "--attn-cp-size", "4"),
            AssertionError,
            "tp_size must be divisible by attn_cp_size",
        ),
    ],
)
def test_sglangs_own_refusals(
    flags: tuple[str, ...], error: type[Exception], message: str
) -> None:
    with pytest.raises(error) as raised:
        _resolve(*flags)
    assert str(raised.value) == message


def test_dflash_block_flags_that_agree_and_ddtree_defaults() -> None:
    same = _resolve(*DFLASH, "--speculative-num-draft-tokens", "8",
                    "--speculative-dflash-block-size", "8")
    assert same.get("speculative_num_draft_tokens") == 8
    ddtree = _resolve("--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "d",
                      "--speculative-dflash-block-size", "12")
    assert ddtree.get("speculative_ddtree_budget") == 11  # block - 1
    assert ddtree.shape.verify_width == 12  # budget + 1 tree nodes
    chosen = _resolve("--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "d",
                      "--speculative-ddtree-budget", "30")
    assert chosen.shape.verify_width == 31 and chosen.shape.max_depth == 15
