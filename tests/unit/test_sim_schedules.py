"""The simulated engines' speculative schedules: vLLM 0.33's batch-size lookup and SGLang
0.5.23's adaptive steps, their refusals and the lines with which each engine falls back."""

from __future__ import annotations

import json

import pytest

from orchestrator.sim import sglang_adaptive, vllm_args, vllm_schedule
from orchestrator.sim.drafting import (
    AdaptiveDraft,
    BatchDraft,
    FixedDraft,
    SlotRule,
    next_steps,
)
from orchestrator.sim.perfmodel import BASELINE
from orchestrator.sim.server_args import ServerArgs, build_parser, eagle_chain, resolve

# ------------------------------------------------------------------------------ vLLM's lookup


def test_dense_lookup_carries_gaps_and_tail_forward_and_caps_by_num_tokens() -> None:
    dense = vllm_schedule.dense_lookup([[1, 4, 7], [8, 16, 3], [32, 40, 0]], 48, 5)
    assert dense[0] == 0  # unused, as in vLLM
    assert dense[1:5] == [5] * 4  # 7 capped by num_speculative_tokens
    assert dense[5:8] == [5] * 3  # the gap 5..7 carries 4's count forward (capped)
    assert dense[8:17] == [3] * 9
    assert dense[17:32] == [3] * 15  # the gap 17..31
    assert dense[32:41] == [0] * 9  # 0: no drafting at these sizes
    assert dense[41:] == [0] * 8  # the tail carries the last count
    assert len(dense) == 49


def test_dense_lookup_sorts_ranges_and_stops_at_max_batch() -> None:
    assert vllm_schedule.dense_lookup([[9, 100, 1], [1, 8, 4]], 12, 4)[1:] == [4] * 8 + [1] * 4
    assert vllm_schedule.dense_lookup([[1, 1, 2]], 3, 4)[1:] == [2, 2, 2]


@pytest.mark.parametrize(
    ("schedule", "message"),
    [
        ([[2, 8, 3]], "The first batch-size range must start at 1 so every runtime batch size "
                      "has a defined schedule."),
        ([[1, 8, 3], [8, 16, 2]], "Batch-size ranges must be non-overlapping and sorted."),
        ([[0, 8, 3]], "Batch-size range (0, 8) must be positive."),
        ([[1, -2, 3]], "Batch-size range (1, -2) must be positive."),
        ([[4, 2, 3]], "Batch-size range start must be <= end for (4, 2, 3)."),
        ([[1, 8, -1]], "num_speculative_tokens_per_batch_size values must be >= 0."),
        ([], "num_speculative_tokens_per_batch_size must not be empty."),
        ([[1, 8]], "Each num_speculative_tokens_per_batch_size entry must be a 3-item sequence: "
                   "(range_start, range_end, num_speculative_tokens)."),
    ],
)  # fmt: skip
def test_validation_raises_vllms_value_errors(schedule: object, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        vllm_schedule.dense_lookup(schedule, 48, 4)
    assert str(caught.value) == message


def _vllm(spec: dict[str, object], *flags: str, environ: dict[str, str] | None = None
          ) -> ServerArgs:  # fmt: skip
    ns = vllm_args.parse(["serve", "m", "--speculative-config", json.dumps(spec), *flags])
    return vllm_args.resolve(ns, environ or {})


def test_vllm_server_drafts_by_the_lookup_of_its_running_batch() -> None:
    spec = {"method": "dflash", "model": "d", "num_speculative_tokens": 7,
            "num_speculative_tokens_per_batch_size": [[1, 3, 7], [4, 15, 4], [16, 64, 0]]}
    args = _vllm(spec, "--max-num-seqs", "64")
    assert args.warnings == ()
    draft = vllm_args.engine_draft(args)
    assert isinstance(draft, BatchDraft)
    assert draft.starts == (1, 4, 16)
    assert [draft.shape(b).verify_width for b in (1, 3, 4, 15)] == [8, 8, 5, 5]
    assert draft.shape(16) == draft.shape(64) == BASELINE
    assert vllm_args.engine_draft(_vllm({**spec, "num_speculative_tokens_per_batch_size": None}))\
        == FixedDraft(args.shape)  # fmt: skip


def test_vllm_refuses_a_bad_schedule_at_engine_start_and_types_it_at_parse() -> None:
    spec = {"method": "eagle3", "model": "d", "num_speculative_tokens": 4,
            "num_speculative_tokens_per_batch_size": [[2, 8, 3]]}
    args = _vllm(spec)  # the parse (and a preflight's parse script) takes it
    with pytest.raises(ValueError, match="The first batch-size range must start at 1"):
        vllm_args.engine_draft(args)
    with pytest.raises(ValueError, match=r"(?s)validation error for SpeculativeConfig\n"
                       r"num_speculative_tokens_per_batch_size\.0\.2\n  Field required"):
        _vllm({**spec, "num_speculative_tokens_per_batch_size": [[1, 8]]})
    with pytest.raises(ValueError, match=r"num_speculative_tokens_per_batch_size\.0\.0\n  Input "
                       "should be a valid integer, unable to parse string as an integer"):
        _vllm({**spec, "num_speculative_tokens_per_batch_size": [["a", 8, 3]]})


def test_vllm_falls_back_where_it_cannot_keep_a_schedule() -> None:
    schedule = {"num_speculative_tokens_per_batch_size": [[1, 4, 5], [5, 64, 1]]}
    suffix = _vllm({"method": "suffix", "num_speculative_tokens": 5, **schedule})
    assert suffix.warnings == (
        "Dynamic speculative decoding is not supported with the 'suffix' speculative method on "
        "Model Runner V1. Disabling num_speculative_tokens_per_batch_size and falling back to "
        "static num_speculative_tokens=5.",
    )
    assert vllm_args.engine_draft(suffix) == FixedDraft(suffix.shape)
    assert vllm_schedule.logged_at(suffix.warnings[0]) == "vllm.py:1100"
    # ngram_gpu runs on model runner V2 by default, which keeps the schedule; V1 drops it
    ngram = {"method": "ngram_gpu", "num_speculative_tokens": 5, **schedule}
    assert _vllm(ngram).warnings == ()
    v1 = _vllm(ngram, environ={"VLLM_USE_V2_MODEL_RUNNER": "0"})
    assert v1.warnings[0].startswith(
        "Dynamic speculative decoding is not supported with the 'ngram_gpu' speculative method"
    )
    assert _vllm({**ngram, "method": "eagle3", "model": "d"},
                 environ={"VLLM_USE_V2_MODEL_RUNNER": "0"}).warnings == ()  # fmt: skip
    dp = _vllm({"method": "dflash", "model": "d", "num_speculative_tokens": 5, **schedule},
               "--data-parallel-size", "2")  # fmt: skip
    assert dp.warnings == (
        "Dynamic speculative decoding is not supported with data parallelism because "
        "data-parallel ranks can select different speculative-token counts, causing DP "
        "divergence and deadlocks. Disabling num_speculative_tokens_per_batch_size and falling "
        "back to static num_speculative_tokens=5.",
    )
    assert vllm_schedule.logged_at(dp.warnings[0]) == "vllm.py:1119"
    assert dp.values["speculative_config"]["num_speculative_tokens_per_batch_size"] is None


# ------------------------------------------------------------------------- SGLang's adaptive

EAGLE3 = ["--speculative-algorithm", "EAGLE3", "--speculative-draft-model-path", "d"]


def _sglang(*flags: str, files: dict[str, str] | None = None) -> ServerArgs:
    argv = ["--model-path", "m", *flags]
    ns = build_parser("0.5.23", True).parse_args(argv)
    stored = files or {}

    def read(path: str) -> str:
        if path not in stored:
            raise FileNotFoundError(2, "No such file or directory", path)
        return stored[path]

    return resolve(ns, argv, version="0.5.23", ddtree=True, environ={}, read_file=read)


def _config(**slots: list[int]) -> str:
    return json.dumps({key.removeprefix("bs"): {"candidate_steps": steps, "up_hysteresis": 0.0,
                       "down_hysteresis": 0.0, "ceiling_coeff": 0}
                       for key, steps in slots.items()})  # fmt: skip


def test_adaptive_routes_a_batch_to_the_largest_key_not_above_it() -> None:
    args = _sglang(*EAGLE3, "--speculative-adaptive", "--speculative-adaptive-config", "/a.json",
                   files={"/a.json": _config(bs1=[6], bs8=[3], bs32=[0])})  # fmt: skip
    assert isinstance(args.draft, AdaptiveDraft)
    assert args.values["speculative_eagle_topk"] == 1
    assert args.values["speculative_num_steps"] == 3  # the middle of the candidates 0, 3, 6
    assert args.values["speculative_num_draft_tokens"] == 4
    policy = args.drafting.policy()
    assert [policy.shape(b).max_depth for b in (1, 7, 8, 31)] == [6, 6, 3, 3]
    assert policy.shape(32) == policy.shape(100) == BASELINE
    pinned = args.draft.pinned()
    assert pinned.starts == (1, 8, 32)
    assert [pinned.shape(b) for b in (1, 8, 40)] == [policy.shape(b) for b in (1, 8, 40)]
    # A first key above 1: smaller batches go to it, as SGLang's router sends them.
    late = _sglang(*EAGLE3, "--speculative-adaptive", "--speculative-adaptive-config", "/b",
                   files={"/b": _config(bs4=[5], bs16=[2])}).drafting.policy()  # fmt: skip
    assert [late.shape(b).max_depth for b in (1, 4, 15, 16)] == [5, 5, 5, 2]


def test_adaptive_steps_follow_the_ema_of_accepted_drafts() -> None:
    rule = SlotRule(candidates=(1, 3, 5, 7), down_hysteresis=-0.25)
    assert next_steps(5, 4.6, rule) == 7  # above 5 - 0.5: one up
    assert next_steps(5, 4.4, rule) == 5
    assert next_steps(5, 2.2, rule) == 3  # at or below 3 - 0.5 - 0.25: down
    assert next_steps(5, 0.1, rule) == 1
    assert next_steps(0, -1.0, SlotRule(candidates=(0, 1, 3))) == 1  # probe up from no drafting
    plan = AdaptiveDraft((1,), (SlotRule(candidates=(1, 3, 5)),), 5,
                         {s: eagle_chain("EAGLE3", s) for s in (1, 3, 5)})  # fmt: skip
    policy = plan.policy()
    assert policy.init_line() == "AdaptiveSpeculativeParams initialized: steps=5, " \
        "candidate_steps=[1, 3, 5]"  # fmt: skip
    said = [policy.observe(1, [0]) for _ in range(15)]  # nothing accepted: the EMA falls
    assert said[:14] == [None] * 14  # 10 warm-up batches, then every 5th
    assert said[14] == "Adaptive spec params updated: steps 5 -> 1 (ema_accept_len=0.14)"
    assert policy.shape(1).max_depth == 1


@pytest.mark.parametrize(
    ("flags", "reason"),
    [
        (["--speculative-algorithm", "DDTREE", "--speculative-draft-model-path", "d"],
         "speculative_algorithm=DDTREE (only EAGLE/EAGLE3 are supported)"),
        (["--speculative-algorithm", "DFLASH", "--speculative-draft-model-path", "d"],
         "speculative_algorithm=DFLASH (only EAGLE/EAGLE3 are supported)"),
        ([*EAGLE3, "--speculative-num-steps", "3", "--speculative-eagle-topk", "4",
          "--speculative-num-draft-tokens", "8"],
         "speculative_eagle_topk=4 (only topk=1 is supported)"),
        ([*EAGLE3, "--dp", "2", "--tp", "2", "--enable-dp-attention"],
         "attention DP is not supported (adaptive tier decisions are not synchronized across "
         "DP ranks)"),
    ],
)  # fmt: skip
def test_adaptive_falls_back_to_static_params_with_sglangs_line(
    flags: list[str], reason: str
) -> None:
    args = _sglang(*flags, "--speculative-adaptive", "--speculative-adaptive-config", "/x.json")
    assert args.warnings[0] == (
        f"speculative_adaptive disabled: {reason}. Falling back to static speculative params."
    )
    assert args.values["speculative_adaptive"] is False
    assert args.draft is None and args.drafting == FixedDraft(args.shape)  # the file unread


@pytest.mark.parametrize(
    ("content", "error", "message"),
    [
        ("[1, 2]", AttributeError, "'list' object has no attribute 'items'"),
        ('{"1": 3}', AttributeError, "'int' object has no attribute 'get'"),
        ('{"ema_alpha": 0.5}', ValueError,
         "speculative_adaptive_config must contain at least one integer-string BS key, e.g. "
         '{"1": {"candidate_steps": [1,3,7]}}. Got keys: [\'ema_alpha\']'),
        ('{"8": {"candidate_steps": [2, -1]}}', ValueError,
         "BS 8: candidate_steps must be a list of non-negative ints, got [2, -1]"),
        ('{"8": {"candidate_steps": []}}', ValueError,
         "BS 8: candidate_steps must be a list of non-negative ints, got []"),
        ("{", ValueError, "Expecting property name enclosed in double quotes"),
    ],
)  # fmt: skip
def test_adaptive_config_file_errors(content: str, error: type, message: str) -> None:
    with pytest.raises(error) as caught:
        _sglang(*EAGLE3, "--speculative-adaptive", "--speculative-adaptive-config", "/c.json",
                files={"/c.json": content})  # fmt: skip
    assert str(caught.value).startswith(message)


def test_adaptive_steps_must_be_a_candidate_and_the_file_must_exist() -> None:
    with pytest.raises(ValueError) as caught:
        _sglang(*EAGLE3, "--speculative-num-steps", "4", "--speculative-adaptive",
                "--speculative-adaptive-config", "/c", files={"/c": _config(bs1=[1, 3])})
    assert str(caught.value) == (
        "--speculative-num-steps=4 is not in the adaptive config candidate_steps [1, 3]. Pass "
        "one of those values."
    )
    with pytest.raises(FileNotFoundError):
        _sglang(*EAGLE3, "--speculative-adaptive", "--speculative-adaptive-config", "/gone")
    default = _sglang(*EAGLE3, "--speculative-adaptive")  # SGLang's own default slots
    assert isinstance(default.draft, AdaptiveDraft)
    assert default.draft.keys == (1, 8, 32, 64)
    assert sglang_adaptive.candidate_steps(sglang_adaptive.load_config(None)) == [0, 1, 3, 5, 7]
