"""The vLLM engine's readings of vLLM 0.33.0's own formats: log lines (both field orders,
process prefixes, lines with nothing to read), failure texts, the acceptance counters, the
running config from either source, values as vLLM reads them, the sweep file's knob rules,
and the parse script's answers. The format strings below are copied from the wheel's source
(``v1/spec_decode/metrics.py``, ``logger.py``, ``v1/worker/utils.py``, ...)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pytest

from orchestrator import engines
from orchestrator.bench import acceptlen
from orchestrator.engines.base import (
    DecodeEvent,
    Engine,
    FailureEvent,
    InitEvent,
    KnobRules,
    ReadyEvent,
    ServedModel,
)
from orchestrator.engines.vllm import config, facts
from orchestrator.host.dropin import TrialInvocation
from orchestrator.sweepfile import SweepFileError, load_sweep

VLLM = engines.get("vllm")

# vLLM 0.33.0 logger.py: f"{VLLM_LOGGING_PREFIX}(%(vllm_process_name)s pid=%(process)d) "
# "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s", datefmt "%m-%d %H:%M:%S"
FORMAT = "(%(vllm_process_name)s pid=%(process)d) %(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] %(message)s"  # noqa: E501
SPEC_033 = (
    "SpecDecoding metrics: "
    "Mean acceptance length: %.2f, "
    "Accepted throughput: %.2f tokens/s, "
    "Drafted throughput: %.2f tokens/s, "
    "Accepted: %d tokens, "
    "Drafted: %d tokens, "
    "Per-position acceptance rate: %s, "
    "Avg Draft acceptance rate: %.1f%%"
)


def vllm_line(message: str, *args: object, process: str = "APIServer") -> str:
    """One line as vLLM 0.33's formatter writes it (the real logging machinery)."""
    record = logging.LogRecord("vllm.v1.metrics.loggers", logging.INFO, "metrics.py", 100,
                               message, args, None)  # fmt: skip
    record.vllm_process_name = process
    record.process = 6485
    record.fileinfo = "metrics.py"
    formatter = logging.Formatter(FORMAT, datefmt="%m-%d %H:%M:%S")
    return formatter.format(record)


def test_the_engine_fills_the_seam_and_its_knob_rules() -> None:
    assert isinstance(VLLM, Engine) and isinstance(VLLM, KnobRules)
    assert VLLM.name == "vllm" and "vllm" in engines.names()
    assert VLLM.default_unit == "vllm.service" and VLLM.apis == frozenset({"chat"})
    assert VLLM.metrics_flags("auto") == ()


def test_a_spec_decoding_line_of_vllm_033_with_its_process_prefix() -> None:
    line = vllm_line(SPEC_033, 2.31, 12.5, 30.0, 125, 300, "0.764, 0.319, 0.100, 0.041", 41.7)
    assert line.startswith("(APIServer pid=6485) INFO ") and "[metrics.py:100] Spec" in line
    event = VLLM.parse_log_line(line)
    assert isinstance(event, DecodeEvent), line
    assert event.accept_len == 2.31 and event.accept_rate == pytest.approx(0.417)
    assert event.fields["Accepted"] == 125 and event.fields["Drafted"] == 300
    assert event.fields["Per-position acceptance rate"] == "0.764, 0.319, 0.100, 0.041"
    assert event.prefix.timestamp is not None and event.prefix.ranks["pid"] == 6485
    # Without the process tag (builds before it), without any prefix (journald's MESSAGE).
    bare = line.split(") ", 1)[1]
    for text in (bare, line.split("] ", 1)[1]):
        again = VLLM.parse_log_line(text)
        assert isinstance(again, DecodeEvent) and again.accept_len == 2.31, text


def test_the_older_field_order_and_extra_fields_are_read_by_name() -> None:
    old = (
        "INFO 08-05 20:20:43 [metrics.py:100] SpecDecoding metrics: Draft acceptance rate: "
        "69.4%, Mean acceptance length: 2.08, Accepted: 100 tokens, Drafted: 144 tokens, "
        "Per-position acceptance rate: 0.764, 0.319"
    )
    event = VLLM.parse_log_line(old)
    assert isinstance(event, DecodeEvent) and event.accept_len == 2.08
    assert event.accept_rate == pytest.approx(0.694)
    extra = vllm_line(
        SPEC_033.replace("Avg Draft", "Adaptive depth: %d, Avg Draft"),
        1.5, 1.0, 2.0, 5, 10, "0.500", 3, 50.0, process="EngineCore_DP1",
    )  # fmt: skip
    event = VLLM.parse_log_line(extra)
    assert isinstance(event, DecodeEvent) and event.accept_len == 1.5, extra
    assert event.fields["Adaptive depth"] == 3 and event.prefix.ranks["DP"] == 1


def test_lines_without_a_mean_acceptance_length_say_nothing() -> None:
    nan_old = (
        "INFO 08-05 20:20:43 [metrics.py:100] SpecDecoding metrics: Draft acceptance rate: nan%, "
        "Accepted: 0 tokens, Drafted: 0 tokens, Per-position acceptance rate: "
    )
    assert VLLM.parse_log_line(nan_old) is None
    nan_new = vllm_line(SPEC_033, float("nan"), 0.0, 0.0, 0, 0, "", float("nan"))
    assert "Mean acceptance length: nan" in nan_new
    assert VLLM.parse_log_line(nan_new) is None


def test_the_interval_throughput_line_is_a_decode_event_without_accept_length() -> None:
    line = vllm_line(
        "Engine 000: Avg prompt throughput: 120.5 tokens/s, Avg generation throughput: 310.2 "
        "tokens/s, Running: 4 reqs, Waiting: 0 reqs, GPU KV cache usage: 3.5%, Prefix cache "
        "hit rate: 0.0%"
    )
    event = VLLM.parse_log_line(line)
    assert isinstance(event, DecodeEvent) and event.accept_len is None
    assert event.running_req == 4 and event.gen_throughput == 310.2
    assert event.token_usage == pytest.approx(0.035)
    samples = acceptlen.decode_samples_from_messages(
        [line], decode_log_interval=1, parse=VLLM.parse_log_line
    )
    assert samples == []


def test_startup_lines_are_kept_for_the_provenance() -> None:
    args = {"model_tag": "/models/Kimi-K2.6", "speculative_config": {"method": "dflash",
            "model": "z-lab/Kimi-K2.6-DFlash", "num_speculative_tokens": 8},
            "tensor_parallel_size": 8, "enable_prefix_caching": False}  # fmt: skip
    event = VLLM.parse_log_line(vllm_line("non-default args: %s", args))
    assert isinstance(event, InitEvent) and event.kind == "non_default_args"
    assert event.fields["speculative_config.method"] == "dflash"
    assert event.fields["speculative_config.num_speculative_tokens"] == 8
    assert event.fields["tensor_parallel_size"] == 8
    version = VLLM.parse_log_line(
        vllm_line("vLLM server version %s, serving model %s", "0.33.0", "/models/Kimi-K2.6")
    )
    assert isinstance(version, InitEvent) and version.fields["version"] == "0.33.0"
    logo = "(APIServer pid=7) INFO 12-03 11:00:00 [startup.py:36]  ▄▄ ▄█ █     █     █ ▀▄▀ █  version 0.33.0"  # noqa: E501
    logo_event = VLLM.parse_log_line(logo)
    assert isinstance(logo_event, InitEvent) and logo_event.fields["version"] == "0.33.0"
    assert isinstance(VLLM.parse_log_line("INFO:     Application startup complete."), ReadyEvent)


# The texts of vLLM 0.33.0, as its code formats them.
FREE = (
    "ValueError: Free memory on device cuda:0 (60.1/79.19 GiB) on startup is less than "
    "desired GPU memory utilization (0.9, 71.27 GiB). Decrease GPU memory utilization or "
    "reduce GPU memory used by other processes."
)
NO_CACHE = (
    "ValueError: No available memory for the cache blocks. Try increasing "
    "`gpu_memory_utilization` when initializing the engine (this flag also controls CPU "
    "memory reservation on the CPU backend, despite its name). See "
    "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
)
MAX_LEN = (
    "ValueError: To serve at least one request with the model's max seq len (262144), "
    "(35.0 GiB KV cache is needed, which is larger than the available KV cache memory "
    "(12.5 GiB). Based on the available memory, the estimated maximum model length is 93000. "
    "Try increasing `gpu_memory_utilization` ..."
)
BUDGET = (
    "ValueError: max_num_scheduled_tokens is set to -8 based on the speculative decoding "
    "settings, which does not allow any tokens to be scheduled. Increase "
    "max_num_batched_tokens to accommodate the additional draft token slots, or decrease "
    "num_speculative_tokens."
)
CORE = (
    "RuntimeError: Engine core initialization failed. See root cause above. "
    "Failed core proc(s): {'EngineCore': 1}"
)


@pytest.mark.parametrize(
    ("text", "cause"),
    [
        (FREE, "oom"),
        (NO_CACHE, "oom"),
        (MAX_LEN, "oom"),
        ("torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB", "oom"),
        (BUDGET, "invalid-config"),
        ("ValueError: --spec-method and --speculative-config['method'] are mutually exclusive",
         "invalid-config"),
        (CORE, "exited"),
        ("vllm serve: error: unrecognized arguments: --speculative-algorithm", "bad-flag"),
        ("vllm serve: error: argument --speculative-config/-sc: Value {bad cannot be "
         "converted to <function loads at 0x7f>.", "bad-flag"),
        ("OSError: [Errno 98] Address already in use", "port-in-use"),
    ],
)  # fmt: skip
def test_startup_failures_by_vllms_texts(text: str, cause: str) -> None:
    line = f"(EngineCore pid=411) ERROR 12-03 11:50:01 [core.py:1584] {text}"
    event = VLLM.parse_log_line(line)
    assert isinstance(event, FailureEvent) and event.cause == cause, (text, event)
    assert VLLM.classify_failure(text) is not None


def test_accept_length_from_the_counters_is_one_plus_accepted_over_drafts() -> None:
    def exposition(drafts: int, accepted: int) -> str:
        labels = 'engine="0",model_name="kimi-k2.6"'
        return (
            "# TYPE vllm:spec_decode_num_drafts_total counter\n"
            f"vllm:spec_decode_num_drafts_total{{{labels}}} {float(drafts)}\n"
            f"vllm:spec_decode_num_drafts_created{{{labels}}} 1.7e9\n"
            f"vllm:spec_decode_num_draft_tokens_total{{{labels}}} {float(drafts * 8)}\n"
            f"vllm:spec_decode_num_accepted_tokens_total{{{labels}}} {float(accepted)}\n"
        )

    estimate = acceptlen.from_metrics(
        exposition(100, 50), exposition(400, 950), requests=7, counters=VLLM.acceptance_counters
    )
    assert estimate.value == pytest.approx(1 + 900 / 300) and estimate.count == 300


def test_the_running_config_from_server_info_and_from_metrics() -> None:
    assert (
        config.speculative_positions(
            "\n".join(
                f'vllm:spec_decode_num_accepted_tokens_per_pos_total{{engine="0",model_name="m",'
                f'position="{p}"}} 0.0'
                for p in range(5)
            )
        )
        == 5
    )
    assert config.speculative_positions("vllm:num_requests_running{} 0.0\n") is None
    dev = {
        "config_source": "server_info",
        "version": "0.33.0",
        "speculative_config": {"method": "mtp", "num_speculative_tokens": 3,
                               "parallel_drafting": False},
        "vllm_config": {"scheduler_config": {"max_num_seqs": 64}},
    }  # fmt: skip
    knobs = [
        VLLM.resolve_flag_knob("m", "--speculative-config", "deepseek_mtp",
                               server_info_key="speculative_config.method"),
        VLLM.resolve_flag_knob("n", "--speculative-config", 3,
                               server_info_key="speculative_config.num_speculative_tokens"),
        VLLM.resolve_flag_knob("s", "--max-num-seqs", 128),
    ]  # fmt: skip
    check = VLLM.check_server_config(dev, knobs)
    assert [d.knob for d in check.mismatches] == ["s"], check  # deepseek_mtp runs as mtp
    metrics_only = {"config_source": "metrics", "speculative_config": {"num_speculative_tokens": 4}}
    check = VLLM.check_server_config(metrics_only, knobs)
    assert [(d.knob, d.actual) for d in check.mismatches] == [("n", 4)], check
    off = {"config_source": "metrics", "speculative_config": None}
    (missing,) = VLLM.check_server_config(off, knobs).mismatches
    assert missing.knob == "n" and missing.reason == "speculative decoding is off"


def test_dflash_forces_parallel_drafting_which_is_overridden_not_a_mismatch() -> None:
    running = {
        "config_source": "server_info",
        "speculative_config": {
            "method": "dflash",
            "num_speculative_tokens": 8,
            "parallel_drafting": True,
        },
    }
    knob = VLLM.resolve_flag_knob(
        "pd", "--speculative-config", False, server_info_key="speculative_config.parallel_drafting"
    )
    check = VLLM.check_server_config(running, [knob])
    assert check.ok and [d.knob for d in check.overridden] == ["pd"]


def test_values_as_vllm_reads_them() -> None:
    a = VLLM.normal_word('{"method":"deepseek_mtp","num-speculative-tokens":3}',
                         "--speculative-config")  # fmt: skip
    b = VLLM.normal_word('{"num_speculative_tokens": 3, "method": "mtp"}', "--speculative-config")
    assert a == b
    assert VLLM.normal_word("8.0", "--max-num-seqs") == "8"
    assert VLLM.forced_flags({"--speculative-config": a}) == frozenset()


def test_the_model_a_command_line_serves() -> None:
    base = ["/opt/vllm/bin/vllm", "serve", "/models/Kimi-K2.6", "--tensor-parallel-size", "8"]
    assert VLLM.served_model(base) == ServedModel("/models/Kimi-K2.6", "serve")
    named = VLLM.served_model([*base, "--served-model-name", "kimi-k2.6", "k2"])
    assert named is not None and named.name == "kimi-k2.6"
    api = VLLM.served_model(["python", "-m", "vllm.entrypoints.openai.api_server", "--model=m"])
    assert api is not None and api.name == "m"


def test_the_parse_command_for_each_kind_of_unit() -> None:
    console = ["/opt/vllm/bin/vllm", "serve", "/m", "--port", "8000"]
    command = VLLM.parse_command(console, TrialInvocation(tuple(console)), "/srv")
    assert command is not None and command.prefix[-1] == "/opt/vllm/bin/python3"
    assert command.argv == ("serve", "/m", "--port", "8000") and "-C" in command.prefix
    module = ["/usr/bin/python3", "-m", "vllm.entrypoints.cli.main", "serve", "/m"]
    command = VLLM.parse_command(module, TrialInvocation(tuple(module)), None)
    assert command is not None and command.argv == ("serve", "/m")
    wrapper = ("/bin/wrapper.sh",)
    assert VLLM.parse_command(wrapper, TrialInvocation(wrapper), None) is None
    batch = VLLM.batch_command(["/usr/bin/python3"], [["serve", "/m"]])
    assert batch[1] == "-c" and json.loads(batch[3]) == ["serve", "/m"]


def test_the_parse_scripts_answers() -> None:
    out = "\n".join([
        'ORCHESTRATOR_VLLM_PARSE {"index": 0, "ok": true, "speculative": {"method": "dflash"}}',
        'ORCHESTRATOR_VLLM_PARSE {"index": 1, "ok": false, "kind": "argparse", "error": '
        '"vllm serve: error: unrecognized arguments: --speculative-algo"}',
        'ORCHESTRATOR_VLLM_PARSE {"index": 2, "ok": false, "kind": "resolution", "error": '
        '"ValueError: 1 validation error for SpeculativeConfig: methd: Extra inputs"}',
    ])  # fmt: skip
    verdicts = VLLM.read_answers(out, "", 4)
    assert isinstance(verdicts, list)
    ok, flag, key, missing = verdicts
    assert ok.ok and ok.speculative == {"method": "dflash"} and ok.parser == "vllm"
    assert flag.cause == "bad-flag" and flag.unknown_flags == ("--speculative-algo",)
    assert key.cause == "invalid-config" and missing.ok is None
    unavailable = VLLM.read_answers('ORCHESTRATOR_VLLM_PARSE {"import_error": "No module"}', "", 1)
    assert not isinstance(unavailable, list) and "No module" in unavailable.reason


SWEEP = """\
name: t
engine: vllm
hosts:
  - {name: a, address: 127.0.0.1, base_url: "http://127.0.0.1:8000"}
server:
  model: kimi-k2.6
  knobs:
    method: {flag: --speculative-config, json_key: method}
    tokens: {flag: --speculative-config, json_key: num_speculative_tokens}
"""


def _load(tmp_path: Path, text: str) -> SweepFileError | None:
    path = tmp_path / "s.yaml"
    path.write_text(text)
    try:
        load_sweep(path)
    except SweepFileError as exc:
        return exc
    return None


def test_a_vllm_sweep_loads_with_the_engines_own_unit(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP + "grid: {method: [dflash, eagle3, deepseek_mtp], tokens: [4, 8]}\n")
    sweep = load_sweep(path)
    assert sweep.engine == "vllm" and sweep.unit == "vllm.service"


def test_a_typod_speculative_key_is_an_error_at_its_line(tmp_path: Path) -> None:
    text = SWEEP + "    draft: {flag: --speculative-config, json_key: draft_model}\n"
    found = _load(tmp_path, text + "configs: [{method: dflash}]\n")
    assert found is not None
    (problem,) = found.problems
    assert problem.line == 10 and "'draft_model' is not a key of --speculative-config" in str(
        problem
    )
    refused = _load(
        tmp_path,
        SWEEP
        + "    tp: {flag: --speculative-config, json_key: tensor_parallel_size}\nbaseline: true\n",
    )
    assert refused is not None and "Please pass 'draft_tensor_parallel_size'" in str(refused)


def test_an_unknown_method_or_a_bad_count_is_an_error_at_its_line(tmp_path: Path) -> None:
    found = _load(tmp_path, SWEEP + "grid:\n  method: [dflash, ddtree]\n  tokens: [0, 4]\n")
    assert found is not None
    lines = {p.line: str(p) for p in found.problems}
    assert "'method' is one of ngram, draft_model" in lines[11] and "not 'ddtree'" in lines[11]
    assert "must be >= 1, not 0" in lines[12], lines
    assert set(facts.METHODS) >= {"dflash", "eagle3", "mtp", "ngram", "suffix", "dspark"}
