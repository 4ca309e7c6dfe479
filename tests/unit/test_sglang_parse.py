"""SGLang log lines, the server-config check, the probe and provenance, on real-format samples."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from orchestrator.engines.base import ProvenanceSources
from orchestrator.engines.sglang.engine import (
    DdtreeInitEvent,
    DecodeEvent,
    DflashInitEvent,
    EnvKnob,
    FailureEvent,
    PrefillEvent,
    ReadyEvent,
    build_probe_request,
    build_provenance,
    check_server_config,
    parse_log_line,
    parse_proc_environ,
    probe_generated_tokens,
    probe_generation,
    resolve_flag_knob,
    server_info_keys,
    version_tuple,
)
from orchestrator.engines.shared import env_differences
from orchestrator.host.gpu import GpuIdentity

DECODE = (
    "Decode batch, #running-req: 4, #token: 20480, token usage: 0.05, accept len: 4.12, "
    "accept rate: 0.21, cuda graph: True, gen throughput (token/s): 512.34, #queue-req: 0"
)
PREFILL = (
    "Prefill batch, #new-seq: 1, #new-token: 1024, #cached-token: 0, token usage: 0.00, "
    "#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
    "input throughput (token/s): 8123.45"
)


def _decode(line: str) -> DecodeEvent:
    event = parse_log_line(line)
    assert isinstance(event, DecodeEvent), line
    return event


@pytest.mark.parametrize(
    "prefix",
    [
        "",
        "[2026-10-30 12:00:00] ",
        "[2026-10-30 12:00:00.123] ",
        "[2026-10-30 12:00:00 TP0] ",
        "[2026-10-30 12:00:00.456 DP1 PP0 TP0 EP0] ",
        # Rank tags with underscores (configure_scheduler_process, issue 14).
        "[2026-11-30 22:14:03 DP1 ATTN_CP0 TP2] ",
        "[2026-11-30 22:14:03 MOE_DP0 TP0 EP0] ",
        "[2026-11-30 22:14:03.120 DP0 PP1 ATTN_CP1 MOE_DP1 TP3 EP1] ",
        "[2026-11-30 22:14:03 ATTN_CP1 TP4] ",
        "[2026-11-30 22:14:03 PP1] ",
    ],
)
def test_decode_line_with_every_prefix_variant(prefix: str) -> None:
    event = _decode(prefix + DECODE)
    assert event.kind == "decode"
    assert event.accept_len == pytest.approx(4.12)
    assert event.accept_rate == pytest.approx(0.21)
    assert event.gen_throughput == pytest.approx(512.34)
    assert (event.running_req, event.queue_req, event.num_tokens) == (4, 0, 20480)
    assert event.token_usage == pytest.approx(0.05)
    assert (event.graph, event.graph_kind, event.forward_iter) == (True, "cuda", None)


def test_prefix_fields_are_kept() -> None:
    event = _decode("[2026-10-30 12:00:00.456 DP1 TP3] " + DECODE)
    assert event.prefix.timestamp == "2026-10-30 12:00:00.456"
    assert dict(event.prefix.ranks) == {"DP": 1, "TP": 3}
    tagged = _decode("[2026-11-30 22:14:03 DP1 PP0 ATTN_CP0 MOE_DP1 TP2 EP3] " + DECODE)
    assert dict(tagged.prefix.ranks) == {
        "DP": 1, "PP": 0, "ATTN_CP": 0, "MOE_DP": 1, "TP": 2, "EP": 3,
    }


def test_ddtree_init_line_goes_into_the_provenance() -> None:
    line = (
        "[2026-11-30 22:14:03 TP0] Initialized DDTree worker. block_size=16, tree_budget=15, "
        "max_tree_nodes=16"
    )
    event = parse_log_line(line)
    assert isinstance(event, DdtreeInitEvent) and event.kind == "ddtree_init"
    assert (event.block_size, event.tree_budget, event.max_tree_nodes) == (16, 15, 16)
    dflash = parse_log_line(
        "[2026-11-30 22:14:02 TP0] Initialized DFLASH draft runner. attention_backend=fa3, "
        "model=/d, block_size=16, draft_window_size=None, compact_cache=False"
    )
    assert isinstance(dflash, DflashInitEvent)
    provenance = build_provenance(
        ProvenanceSources({"version": "0.5.23"}, init_events=[dflash, event, event])
    )
    worker = json.loads(json.dumps(provenance.to_json()))["worker_init"]
    assert worker["ddtree_init"] == {"block_size": 16, "tree_budget": 15, "max_tree_nodes": 16}
    assert worker["dflash_init"]["block_size"] == 16
    assert build_provenance(ProvenanceSources({})).worker_init == {}


def test_decode_without_speculative_decoding_has_no_accept_len() -> None:
    event = _decode(
        "[2026-10-30 12:00:00] Decode batch, #running-req: 1, #token: 102, token usage: 0.00, "
        "cuda graph: True, gen throughput (token/s): 61.20, #queue-req: 0"
    )
    assert event.accept_len is None and event.accept_rate is None
    assert event.gen_throughput == pytest.approx(61.2)


def test_decode_forward_iter_npu_graph_and_trailing_comma() -> None:
    event = _decode(
        "Decode batch [123], #running-req: 2, #token: 10, token usage: 0.01, accept len: 2.50, "
        "npu graph: False, gen throughput (token/s): 40.00, #queue-req: 3, "
    )
    assert event.forward_iter == 123
    assert (event.graph, event.graph_kind) == (False, "npu")
    assert event.queue_req == 3
    assert event.accept_len == pytest.approx(2.5)


def test_hybrid_model_fields_by_name() -> None:
    event = _decode(
        "[2026-10-30 12:00:00 TP0] Decode batch, #running-req: 8, #full token: 4096, "
        "full token usage: 0.12, mamba num: 8, accept len: 3.00, accept rate: 0.50, "
        "cpu graph: True, gen throughput (token/s): 300.00, #queue-req: 1"
    )
    assert event.num_tokens == 4096 and event.token_usage == pytest.approx(0.12)
    assert event.fields["mamba num"] == 8
    assert event.graph_kind == "cpu"
    assert event.accept_len == pytest.approx(3.0)


def test_pd_decode_fields_inserted_anywhere() -> None:
    event = _decode(
        "Decode batch, #running-req: 5, #token: 900, token usage: 0.02, pre-allocated usage: 0.10, "
        "#prealloc-req: 2, #transfer-req: 1, #retracted-req: 0, accept len: 1.75, "
        "accept rate: 0.40, cuda graph: True, gen throughput (token/s): 99.50, #queue-req: 7"
    )
    assert event.fields["#prealloc-req"] == 2
    assert event.fields["#transfer-req"] == 1
    assert event.fields["pre-allocated usage"] == pytest.approx(0.10)
    assert (event.running_req, event.queue_req) == (5, 7)
    assert event.accept_len == pytest.approx(1.75)


def test_prefill_line() -> None:
    event = parse_log_line("[2026-10-30 12:00:01 TP0] " + PREFILL)
    assert isinstance(event, PrefillEvent)
    assert (event.new_seq, event.new_token, event.cached_token) == (1, 1024, 0)
    assert event.input_throughput == pytest.approx(8123.45)
    assert event.fields["#pending-token"] == 0


def test_ready_and_dflash_init() -> None:
    ready = parse_log_line("[2026-10-30 12:05:00] The server is fired up and ready to roll!")
    assert isinstance(ready, ReadyEvent) and ready.kind == "ready"
    init = parse_log_line(
        "[2026-10-30 12:01:00 TP0] Initialized DFLASH draft runner. attention_backend=fa3, "
        "model=/models/drafter, block_size=16, draft_window_size=2048, compact_cache=True"
    )
    assert isinstance(init, DflashInitEvent)
    assert (init.block_size, init.draft_window_size, init.compact_cache) == (16, 2048, True)
    assert init.fields["attention_backend"] == "fa3"


@pytest.mark.parametrize(
    ("line", "cause"),
    [
        (
            "launch_server.py: error: unrecognized arguments: "
            "--speculative-dflash-draft-window-size 2048",
            "bad-flag",
        ),
        ("ValueError: Unknown speculative algorithm name: FOO", "invalid-config"),
        ("[2026-10-30 12:00:00] valueerror: draft window 8 < block size 16", "invalid-config"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
        ("RuntimeError: CUDA error: out of memory", "oom"),
        ("cuDNN error: CUDNN_STATUS_ALLOC_FAILED", "oom"),
        ("terminate called after throwing an instance of 'std::bad_alloc'", "oom"),
        (
            "ERROR:    [Errno 98] error while attempting to bind on address "
            "('0.0.0.0', 30000): address already in use",
            "port-in-use",
        ),
        ("Initialization failed. warmup error: Traceback ...", "warmup-failed"),
        ("Initialization failed. warmup error: CUDA error: out of memory", "oom"),
    ],
)
def test_failure_causes(line: str, cause: str) -> None:
    event = parse_log_line(line)
    assert isinstance(event, FailureEvent)
    assert event.kind == "failure" and event.cause == cause
    assert event.matched and event.matched.lower() in line.lower()


def test_unrelated_lines_are_none() -> None:
    assert parse_log_line("[2026-10-30 12:00:00] Load weight end. type=Qwen3ForCausalLM") is None
    assert parse_log_line("") is None


def test_server_info_keys_default_and_window_rename() -> None:
    assert server_info_keys("--speculative-eagle-topk") == ("speculative_eagle_topk",)
    old = "--speculative-dflash-draft-window-size"
    assert server_info_keys(old, sglang_version="0.5.12")[0] == "speculative_draft_window_size"
    assert server_info_keys(old, sglang_version="0.5.11.post1")[0] == (
        "speculative_dflash_draft_window_size"
    )
    assert server_info_keys("--speculative-dflash-block-size") == ("speculative_num_draft_tokens",)
    assert version_tuple("0.5.12rc1") == (0, 5, 12)
    explicit = resolve_flag_knob("budget", "--speculative-ddtree-budget", 8, server_info_key="b")
    assert explicit.server_info_keys == ("b",)


def test_config_check_ok_with_algorithm_case_and_nextn() -> None:
    info = {"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 8, "tp_size": 8}
    flags = [
        resolve_flag_knob("algo", "--speculative-algorithm", "nextn"),
        resolve_flag_knob("budget", "--speculative-num-draft-tokens", "8"),
    ]
    check = check_server_config(info, flags)
    assert check.ok and not check.overridden
    env = [EnvKnob("topk", "SGLANG_DDTREE_MAX_TOPK", 4), EnvKnob("bonus", "SGLANG_X", None)]
    assert env_differences(env, {"SGLANG_DDTREE_MAX_TOPK": "4"}) == []


def test_config_check_mismatch_missing_key_and_env() -> None:
    info = {"speculative_algorithm": "EAGLE", "speculative_num_draft_tokens": 16}
    flags = [
        resolve_flag_knob("budget", "--speculative-num-draft-tokens", 8),
        resolve_flag_knob("window", "--speculative-draft-window-size", 2048),
    ]
    env = [EnvKnob("topk", "SGLANG_DDTREE_MAX_TOPK", 4)]
    check = check_server_config(info, flags).also(
        *env_differences(env, {"SGLANG_DDTREE_MAX_TOPK": "2"})
    )  # as the lifecycle checks a trial: the engine's flags, then the environment
    assert not check.ok
    assert [(m.knob, m.expected, m.actual) for m in check.mismatches] == [
        ("budget", 8, 16),
        ("window", 2048, None),
        ("topk", "4", "2"),
    ]


def test_config_check_window_found_under_the_old_key_on_0_5_11() -> None:
    info = {"speculative_dflash_draft_window_size": 2048}
    flags = [resolve_flag_knob("window", "--speculative-dflash-draft-window-size", 2048)]
    assert check_server_config(info, flags).ok


def test_dflash_and_topk1_overrides_are_warnings() -> None:
    dflash = {
        "speculative_algorithm": "DFLASH",
        "speculative_num_steps": 1,
        "speculative_eagle_topk": 1,
    }
    flags = [resolve_flag_knob("topk", "--speculative-eagle-topk", 4)]
    check = check_server_config(dflash, flags)
    assert check.ok
    assert check.overridden[0].knob == "topk" and "DFLASH" in check.overridden[0].reason

    eagle = {
        "speculative_algorithm": "EAGLE",
        "speculative_num_steps": 3,
        "speculative_eagle_topk": 1,
        "speculative_num_draft_tokens": 4,
    }
    flags = [resolve_flag_knob("budget", "--speculative-num-draft-tokens", 16)]
    check = check_server_config(eagle, flags)
    assert check.ok and check.overridden[0].actual == 4


def test_parse_proc_environ() -> None:
    data = b"PATH=/usr/bin\0SGLANG_X=a=b\0BAD\xff=1\0\0"
    env = parse_proc_environ(data)
    assert env["PATH"] == "/usr/bin" and env["SGLANG_X"] == "a=b"
    assert env["BAD\ufffd"] == "1"


def test_probe_requests_and_token_counts() -> None:
    path, body = build_probe_request("chat", "qwen")
    assert path == "/v1/chat/completions" and body["temperature"] == 0
    assert body["model"] == "qwen" and body["max_tokens"] > 0
    path, body = build_probe_request("generate", None)
    assert path == "/generate" and body["sampling_params"]["temperature"] == 0
    assert probe_generated_tokens("chat", {"usage": {"completion_tokens": 5}}) == 5
    assert probe_generated_tokens("chat", {"choices": []}) == 0
    assert probe_generated_tokens("generate", {"meta_info": {"completion_tokens": 3}}) == 3
    assert probe_generated_tokens("generate", [{"meta_info": {"completion_tokens": 2}}] * 2) == 4


@contextlib.asynccontextmanager
async def _serving(app: web.Application) -> AsyncIterator[str]:
    """``app`` on a free loopback port for the length of the block; yields its base URL."""
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_probe_generation_against_a_real_http_server() -> None:
    seen: list[dict[str, object]] = []
    answer = {"tokens": 0}

    async def chat(request: web.Request) -> web.Response:
        seen.append(await request.json())
        return web.json_response({"usage": {"completion_tokens": answer["tokens"]}})

    async def generate(request: web.Request) -> web.Response:
        return web.Response(status=503, text="loading")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/generate", generate)
    async with _serving(app) as base:
        async with aiohttp.ClientSession() as session:
            empty = await probe_generation(session, base, "chat", "m", timeout=5)
            assert not empty.ok and empty.error == "no tokens generated"
            answer["tokens"] = 8
            good = await probe_generation(session, base, "chat", "m", timeout=5)
            assert good.ok and good.tokens == 8 and good.status == 200
            loading = await probe_generation(session, base, "generate", None, timeout=5)
            assert not loading.ok and loading.status == 503 and "loading" in loading.excerpt
        assert seen[0]["temperature"] == 0
    async with aiohttp.ClientSession() as session:
        refused = await probe_generation(session, base, "chat", "m", timeout=2)
    assert not refused.ok and refused.status is None and refused.error


async def test_probe_checks_the_model_name_against_v1_models() -> None:
    """The name the benchmark sends must be one the server lists: a mismatch is reported with
    its evidence and no generation is asked for; the generate API sends no name."""
    posted: list[str] = []

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "kimi-k2.6"}]})

    async def chat(request: web.Request) -> web.Response:
        posted.append(str((await request.json()).get("model")))
        return web.json_response({"usage": {"completion_tokens": 3}})

    async def generate(_request: web.Request) -> web.Response:
        return web.json_response({"text": "1 2 3", "meta_info": {"completion_tokens": 3}})

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_post("/generate", generate)
    async with _serving(app) as base, aiohttp.ClientSession() as session:
        wrong = await probe_generation(session, base, "chat", "kimi-k2", timeout=5)
        served = await probe_generation(session, base, "chat", "kimi-k2.6", timeout=5)
        native = await probe_generation(session, base, "generate", "kimi-k2", timeout=5)
    assert not wrong.ok and wrong.model_mismatch is not None
    assert (wrong.model_mismatch.where, wrong.model_mismatch.expected) == ("/v1/models", "kimi-k2")
    assert wrong.model_mismatch.actual == ["kimi-k2.6"]
    assert wrong.error == "model 'kimi-k2' is not served (served: kimi-k2.6)"
    assert served.ok and served.model_mismatch is None
    assert native.ok and native.tokens == 3 and native.model_mismatch is None
    assert posted == ["kimi-k2.6"]  # the mismatched probe asked for no generation


def test_provenance_from_server_info() -> None:
    info = {
        "version": "0.5.23",
        "model_path": "/models/kimi",
        "speculative_algorithm": "DFLASH",
        "internal_states": [{"avg_spec_accept_length": 3.2}],
        "launch_command": "python -m sglang.launch_server ...",
    }
    provenance = build_provenance(ProvenanceSources(
        info, gpus=[GpuIdentity("NVIDIA H200", "570.86.15")], exec_start=["python", "-m", "x"],
        environment={"A": "1"},
    ))  # fmt: skip
    assert provenance.engine == "sglang" and provenance.engine_version == "0.5.23"
    assert provenance.model_path == "/models/kimi"
    assert provenance.to_json()["sglang_version"] == "0.5.23"  # the key stores read before
    assert "internal_states" not in provenance.server_args
    assert provenance.server_args["speculative_algorithm"] == "DFLASH"
    assert json.loads(json.dumps(provenance.to_json()))["gpus"][0]["name"] == "NVIDIA H200"


def test_left_out_flag_is_not_checked_and_bare_flag_is_true() -> None:
    info = {"enable_metrics": True}
    flags = [
        resolve_flag_knob("metrics", "--enable-metrics", True),
        resolve_flag_knob("budget", "--speculative-ddtree-budget", None),
    ]
    assert check_server_config(info, flags).ok


def test_decode_log_interval_as_the_server_reports_it_else_sglangs_default() -> None:
    from orchestrator.engines.sglang.engine import SGLANG

    assert SGLANG.decode_log_interval({"decode_log_interval": 10}) == 10
    assert SGLANG.decode_log_interval({}) == 40
    for unusable in (0, -5, True, "40", None):
        assert SGLANG.decode_log_interval({"decode_log_interval": unusable}) == 40
