"""``vllm serve``'s command line as the simulated vLLM server takes it (vLLM 0.33.0's flag
names for what the simulator models, and its parser's behaviour): strict argparse (an unknown
flag is ``vllm serve: error: unrecognized arguments: ...``, exit 2), flag names with ``_`` or
``-``, ``--speculative-config``/``-sc`` as JSON (a bad one: ``argument
--speculative-config/-sc: Value ... cannot be converted to <function loads ...>.``), dotted keys
(``--speculative-config.method dflash``) gathered into one JSON appended last, and the shortcut
flags ``--spec-method``, ``--spec-model``, ``--spec-tokens``. :func:`resolve` then applies what
``create_speculative_config`` and ``SpeculativeConfig`` check before a model loads, raising the
``ValueError`` vLLM raises, and gives the speculative shape the performance model runs; a
``num_speculative_tokens_per_batch_size`` schedule is typed as ``SpeculativeConfig`` types it,
dropped where vLLM drops it (:mod:`orchestrator.sim.vllm_schedule`), and becomes the engine's
draft length by batch size at its start (:func:`engine_draft`).

The simulator is a separate host: it keeps its own copy of these facts and imports nothing of
the orchestrator's control code.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

from orchestrator.sim import vllm_schedule
from orchestrator.sim.drafting import BatchDraft, DraftSchedule, FixedDraft
from orchestrator.sim.perfmodel import BASELINE, SpecKind, SpecShape
from orchestrator.sim.server_args import ServerArgs

VERSION = "0.33.0"
PROG = "vllm serve"
MTP_METHODS = frozenset({
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp",
    "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp",
    "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp",
    "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp",
    "inkling_mtp", "glm5_next_mtp",
})  # fmt: skip
METHODS = frozenset({
    "ngram", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
    "extract_hidden_states", "dflash", "ngram_gpu", "dspark", *MTP_METHODS,
})  # fmt: skip
SPEC_KEYS = frozenset({
    "enforce_eager", "num_speculative_tokens", "model", "method", "draft_tensor_parallel_size",
    "tensor_parallel_size", "quantization", "moe_backend", "attention_backend",
    "kv_cache_dtype", "max_model_len", "revision", "code_revision",
    "index_share_for_mtp_iteration", "disable_padded_drafter_batch", "disable_eagle_block_drop",
    "disable_lookahead_block_hashes", "draft_lm_head_quantization",
    "use_local_argmax_reduction", "use_heterogeneous_vocab", "prompt_lookup_max",
    "prompt_lookup_min", "parallel_drafting", "target_model_config", "target_parallel_config",
    "num_speculative_tokens_per_batch_size", "draft_model_config", "draft_parallel_config",
    "suffix_decoding_max_tree_depth", "suffix_decoding_max_cached_requests",
    "suffix_decoding_max_spec_factor", "suffix_decoding_min_token_prob", "draft_load_config",
    "rejection_sample_method", "synthetic_acceptance_rates", "synthetic_acceptance_length",
    "enable_adaptive_verification", "draft_sample_method", "dspark_draft_topk", "xpress_topc",
    "fly_window_size", "fly_entropy_threshold", "fly_entropy_top_k",
})  # fmt: skip
SHORTCUTS = (("--spec-method", "method"), ("--spec-model", "model"),
             ("--spec-tokens", "num_speculative_tokens"))  # fmt: skip
DEFAULT_MAX_NUM_BATCHED_TOKENS = 8192


class ArgparseExit(Exception):
    """argparse refused the command line: ``message`` is its ``PROG: error: ...`` line."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _loads(text: str) -> Any:
    if text in ("", "None"):
        return None
    try:
        return json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(
            f"Value {text} cannot be converted to {json.loads}."
        ) from exc


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise ArgparseExit(f"{self.prog}: error: {message}")


def build_parser() -> argparse.ArgumentParser:
    """The flags of ``vllm serve`` the simulator models (the rest are refused, as unknown)."""
    p = _Parser(prog=PROG, allow_abbrev=False, usage="vllm serve [model_tag] [options]")
    p.add_argument("model_tag", nargs="?", default=None)
    p.add_argument("--model", default=None)
    p.add_argument("--host", default=None)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--served-model-name", nargs="+", default=None)
    p.add_argument("--tensor-parallel-size", "-tp", type=int, default=1)
    p.add_argument("--data-parallel-size", "-dp", type=int, default=1)
    p.add_argument("--pipeline-parallel-size", "-pp", type=int, default=1)
    p.add_argument("--gpu-memory-utilization", type=float, default=0.92)
    p.add_argument("--max-model-len", type=int, default=None)
    p.add_argument("--max-num-seqs", type=int, default=None)
    p.add_argument("--max-num-batched-tokens", type=int, default=None)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--enable-prefix-caching", action=argparse.BooleanOptionalAction,
                   default=None)  # fmt: skip
    p.add_argument("--reasoning-parser", default=None)
    p.add_argument("--tool-call-parser", default=None)
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--disable-log-stats", action="store_true")
    p.add_argument("--speculative-config", "-sc", type=_loads, default=None)
    p.add_argument("--spec-method", default=None)
    p.add_argument("--spec-model", default=None)
    p.add_argument("--spec-tokens", type=int, default=None)
    return p


def preprocess(argv: Sequence[str]) -> list[str]:
    """``FlexibleArgumentParser.parse_args``'s rewriting: ``_`` as ``-`` in a flag's name
    (up to its first ``.``), and dotted keys gathered into one JSON value appended last."""
    words: list[str] = []
    dotted: dict[str, dict[str, Any]] = {}
    index = 0
    while index < len(argv):
        word = argv[index]
        index += 1
        if not word.startswith("--"):
            words.append(word)
            continue
        name, sep, value = word.partition("=")
        head, dot, rest = name.partition(".")
        head = head.replace("_", "-")
        if not dot:
            words.append(head + sep + value)
            continue
        if not sep:
            value = argv[index] if index < len(argv) else ""
            index += 1
        try:
            parsed: Any = json.loads(value)
        except ValueError:
            parsed = value
        dotted.setdefault(head, {})[rest] = parsed
    for head, keys in dotted.items():
        words += [head, json.dumps(keys)]
    return words


def _speculative(ns: argparse.Namespace) -> dict[str, Any] | None:
    spec = dict(ns.speculative_config) if isinstance(ns.speculative_config, dict) else None
    for flag, key in SHORTCUTS:
        value = getattr(ns, flag.removeprefix("--").replace("-", "_"))
        if value is None:
            continue
        spec = {} if spec is None else spec
        if key in spec:
            raise ValueError(f"{flag} and --speculative-config['{key}'] are mutually exclusive")
        spec[key] = value
    if spec is None:
        return None
    spec = {str(k).replace("-", "_"): v for k, v in spec.items()}
    extra = sorted(set(spec) - SPEC_KEYS)
    if extra:
        raise ValueError(
            f"1 validation error for SpeculativeConfig\n{extra[0]}\n  Unexpected keyword "
            f"argument [type=unexpected_keyword_argument, input_value={spec[extra[0]]!r}]"
        )
    if "tensor_parallel_size" in spec:
        raise ValueError(
            "'tensor_parallel_size' is not a valid argument in the speculative_config. "
            "Please pass 'draft_tensor_parallel_size' instead."
        )
    if spec.get(vllm_schedule.SCHEDULE_KEY) is not None:
        spec[vllm_schedule.SCHEDULE_KEY] = _typed_schedule(spec[vllm_schedule.SCHEDULE_KEY])
    return spec


def _typed_schedule(value: Any) -> list[list[int]]:
    """``SpeculativeConfig``'s pydantic check of ``list[tuple[int, int, int]]`` (lax: an
    integral float or a string of digits is an int), with its message for what it refuses."""
    key = vllm_schedule.SCHEDULE_KEY

    def refuse(where: str, message: str, kind: str, item: Any) -> ValueError:
        return ValueError(
            f"1 validation error for SpeculativeConfig\n{where}\n  {message} "
            f"[type={kind}, input_value={item!r}, input_type={type(item).__name__}]"
        )

    if not isinstance(value, list):
        raise refuse(key, "Input should be a valid list", "list_type", value)
    typed: list[list[int]] = []
    for index, entry in enumerate(value):
        where = f"{key}.{index}"
        if not isinstance(entry, list):
            raise refuse(where, "Input should be a valid tuple", "tuple_type", entry)
        if len(entry) > 3:
            raise refuse(where, f"Tuple should have at most 3 items after validation, not "
                         f"{len(entry)}", "too_long", entry)  # fmt: skip
        if len(entry) < 3:
            raise refuse(f"{where}.{len(entry)}", "Field required", "missing", entry)
        typed.append([_lax_int(f"{where}.{i}", item, refuse) for i, item in enumerate(entry)])
    return typed


def _lax_int(where: str, item: Any, refuse: Callable[[str, str, str, Any], ValueError]) -> int:
    if isinstance(item, bool | int):
        return int(item)
    if isinstance(item, float):
        if item.is_integer():
            return int(item)
        raise refuse(where, "Input should be a valid integer, got a number with a fractional "
                     "part", "int_from_float", item)  # fmt: skip
    if isinstance(item, str):
        try:
            return int(item.strip())
        except ValueError:
            raise refuse(where, "Input should be a valid integer, unable to parse string as an "
                         "integer", "int_parsing", item) from None  # fmt: skip
    raise refuse(where, "Input should be a valid integer", "int_type", item)


def _method(spec: Mapping[str, Any]) -> str:
    method = spec.get("method")
    if method is None:
        model = spec.get("model")
        return "ngram" if model in ("ngram", "[ngram]") else "draft_model"
    if method not in METHODS:
        raise ValueError(
            "1 validation error for SpeculativeConfig\nmethod\n  Input should be "
            + ", ".join(repr(m) for m in sorted(METHODS - MTP_METHODS))
            + f" [type=literal_error, input_value={method!r}, input_type=str]"
        )
    return "mtp" if method in MTP_METHODS else str(method)


def _shape(method: str, tokens: int) -> SpecShape:
    """What a method means to the performance model: DFlash drafts a block in one pass; EAGLE
    and MTP draft step by step (EAGLE-3's and MTP heads at EAGLE-3's acceptance, EAGLE-1/2's
    ``eagle`` at EAGLE's); n-gram and suffix look the context up. 0 tokens drafts nothing (a
    schedule's step at a batch size it gives 0)."""
    if tokens <= 0:
        return BASELINE
    if method in ("dflash", "dspark"):
        return SpecShape(SpecKind.CHAIN, "DFLASH", tokens + 1, tokens, 1, None, 1)
    if method in ("ngram", "ngram_gpu", "suffix"):
        return SpecShape(SpecKind.CHAIN, "NGRAM", tokens + 1, tokens, 1, None, 0)
    algorithm = {"draft_model": "STANDALONE", "eagle": "EAGLE"}.get(method, "EAGLE3")
    return SpecShape(SpecKind.CHAIN, algorithm, tokens + 1, tokens, 1, None, tokens)


def resolve(ns: argparse.Namespace, environ: Mapping[str, str] | None = None) -> ServerArgs:
    """vLLM's checks before a model loads, and the resolved values the server reports.
    Raises ``ValueError`` with vLLM's text. A schedule vLLM would drop (for the method on the
    model runner ``environ`` selects, or for data parallelism) is dropped, its warning in
    ``warnings``: :func:`vllm_schedule.fallback_warning` says where vLLM logs it."""
    values: dict[str, Any] = dict(vars(ns))
    model = values.pop("model_tag") or values["model"] or "Qwen/Qwen3-0.6B"
    values["model"] = model
    names = values["served_model_name"] or [model]
    values["served_model_name"] = names[0]
    values["model_path"] = model
    spec = _speculative(ns)
    shape = BASELINE
    if spec is not None:
        method = _method(spec)
        tokens = spec.get("num_speculative_tokens")
        if method in ("dflash", "dspark"):
            spec["parallel_drafting"] = True
        if tokens is None:
            raise ValueError(
                "num_speculative_tokens must be provided with speculative model unless the "
                "draft model config contains an n_predict parameter."
            )
        if not isinstance(tokens, int) or tokens <= 0:
            raise ValueError(f"Expected num_speculative_tokens to be greater than zero ({tokens}).")
        spec["method"] = method
        shape = _shape(method, tokens)
    warnings: tuple[str, ...] = ()
    if spec is not None:
        fallback = vllm_schedule.fallback_warning(
            spec, int(values["data_parallel_size"]), environ or {}
        )
        if fallback is not None:
            warnings = (fallback[0],)
            spec[vllm_schedule.SCHEDULE_KEY] = None
    values["speculative_config"] = spec
    values["max_running_requests"] = values["max_num_seqs"] or (48 if spec else 1024)
    return ServerArgs(values, shape, warnings, False)


def engine_draft(args: ServerArgs) -> DraftSchedule:
    """What the engine core's scheduler drafts by: with a schedule, the dense lookup up to
    ``max_num_seqs`` (raising vLLM's ``ValueError`` for a schedule it refuses), else the
    static shape. An empty schedule builds no lookup, as vLLM's truthiness test skips it."""
    spec = args.values["speculative_config"]
    schedule = spec.get(vllm_schedule.SCHEDULE_KEY) if spec else None
    if not schedule:
        return FixedDraft(args.shape)
    method = str(spec["method"])
    dense = vllm_schedule.dense_lookup(
        schedule, int(args.values["max_running_requests"]), int(spec["num_speculative_tokens"])
    )
    return BatchDraft.from_dense([_shape(method, tokens) for tokens in dense])


def check_engine_config(args: ServerArgs) -> None:
    """``VllmConfig._set_max_num_scheduled_tokens``: the batch's draft slots must leave room
    for a token to be scheduled. Checked at startup, not by :func:`resolve`: the parse script
    a real host runs (parser, ``SpeculativeConfig`` fields, ``validate_parsed_serve_args``)
    never builds a ``VllmConfig``, so the preflight does not see this refusal either."""
    values = args.values
    spec = values["speculative_config"]
    tokens = spec.get("num_speculative_tokens") if spec else None
    if not isinstance(tokens, int):
        return
    batched = values["max_num_batched_tokens"] or DEFAULT_MAX_NUM_BATCHED_TOKENS
    seqs = values["max_num_seqs"] or 256
    scheduled = batched - seqs * tokens
    if scheduled <= 0:
        raise ValueError(
            f"max_num_scheduled_tokens is set to {scheduled} based on the speculative "
            "decoding settings, which does not allow any tokens to be scheduled. Increase "
            "max_num_batched_tokens to accommodate the additional draft token slots, or "
            "decrease num_speculative_tokens."
        )


def parse(argv: Sequence[str]) -> argparse.Namespace:
    """``vllm serve ARGV``: the rewritten argv parsed; :class:`ArgparseExit` on a refusal."""
    words = list(argv)
    if words[:1] == ["serve"]:
        words = words[1:]
    return build_parser().parse_args(preprocess(words))
