"""What vLLM 0.33.0's own source says about speculative decoding's command line: the flag,
its JSON keys and their values, the methods, the shortcut flags (read from the wheel:
``config/speculative.py``, ``engine/arg_utils.py``, ``utils/argparse_utils.py``).

The orchestrator checks a sweep file against these before any host is touched, as vLLM would
refuse the same command line at startup: ``SpeculativeConfig`` is a pydantic dataclass that
forbids extra fields (``config/utils.py``), and ``method`` is a ``Literal``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from orchestrator.types import KnobValue

VERSION = "0.33.0"
"""The vLLM release these facts were read from."""

SPEC_FLAG = "--speculative-config"
"""JSON-valued (``optional_type(json.loads)``); ``-sc`` is its short alias."""
SPEC_FLAG_ALIASES: tuple[str, ...] = (SPEC_FLAG, "-sc")
SHORTCUT_FLAGS: Mapping[str, str] = {
    "--spec-method": "method",
    "--spec-model": "model",
    "--spec-tokens": "num_speculative_tokens",
}
"""Flags that set one key each; with the same key in the JSON, ``create_speculative_config``
raises ``ValueError("{flag} and --speculative-config['{key}'] are mutually exclusive")``."""

MTP_METHODS: tuple[str, ...] = (
    "deepseek_mtp", "dots3_note_mtp", "mimo_mtp", "mimo_v2_mtp", "glm4_moe_mtp",
    "glm4_moe_lite_mtp", "glm_ocr_mtp", "ernie_mtp", "nemotron_h_mtp", "exaone_moe_mtp",
    "exaone4_5_mtp", "qwen3_next_mtp", "qwen4_exp_mtp", "qwen3_5_mtp", "longcat_flash_mtp",
    "bailing_hybrid_v3_mtp", "minimax_m3_mtp", "bailing_hybrid_mtp", "mtp", "kimi_k3_mtp",
    "pangu_ultra_moe_mtp", "step3p5_mtp", "step5_mtp", "hy_v3_mtp", "hy_v4_mtp", "gemma4_mtp",
    "inkling_mtp", "glm5_next_mtp",
)  # fmt: skip
"""``MTPModelTypes``: every one but ``mtp`` is accepted and rewritten to ``mtp`` with the
warning ``method `%s` is deprecated and replaced with mtp.``"""

METHODS: tuple[str, ...] = (
    "ngram", "draft_model", "suffix", "custom_class", "eagle", "eagle3",
    "extract_hidden_states", *MTP_METHODS, "dflash", "ngram_gpu", "dspark",
)  # fmt: skip
"""``SpeculativeMethod``, flattened: what ``method`` may be."""

REJECTION_SAMPLE_METHODS = ("standard", "synthetic", "block", "fly")
DRAFT_SAMPLE_METHODS = ("greedy", "probabilistic")


def canonical_method(method: str) -> str:
    """The method vLLM runs for ``method``: an old MTP name is ``mtp``."""
    return "mtp" if method in MTP_METHODS else method


@dataclass(frozen=True, slots=True)
class KeyRule:
    """One ``SpeculativeConfig`` field as the sweep file may set it: its kind and bounds."""

    kind: str
    """``int``, ``float``, ``bool``, ``str``, ``choice`` or ``any`` (not checked here)."""
    minimum: float | None = None
    choices: tuple[str, ...] = ()

    def problem(self, value: KnobValue) -> str | None:
        """Why vLLM's validation would refuse ``value`` (None: it would not)."""
        if value is None:
            return None
        if self.kind == "int":
            if isinstance(value, bool) or not isinstance(value, int):
                return f"takes an integer, not {value!r}"
            if self.minimum is not None and value < self.minimum:
                return f"must be >= {self.minimum:g}, not {value}"
        elif self.kind == "float":
            if isinstance(value, bool) or not isinstance(value, int | float):
                return f"takes a number, not {value!r}"
            if self.minimum is not None and value < self.minimum:
                return f"must be >= {self.minimum:g}, not {value}"
        elif self.kind == "bool" and not isinstance(value, bool):
            return f"takes true or false, not {value!r}"
        elif self.kind == "str" and not isinstance(value, str):
            return f"takes a string, not {value!r}"
        elif self.kind == "choice" and value not in self.choices:
            return f"is one of {', '.join(self.choices)}, not {value!r}"
        return None


_INT1 = KeyRule("int", 1)
_BOOL = KeyRule("bool")
_STR = KeyRule("str")
_ANY = KeyRule("any")

SPECULATIVE_KEYS: Mapping[str, KeyRule] = {
    "enforce_eager": _BOOL,
    "num_speculative_tokens": _INT1,
    "model": _STR,
    "method": KeyRule("choice", choices=METHODS),
    "draft_tensor_parallel_size": _INT1,
    "tensor_parallel_size": _ANY,
    "quantization": _STR,
    "moe_backend": _STR,
    "attention_backend": _STR,
    "kv_cache_dtype": _STR,
    "max_model_len": _INT1,
    "revision": _STR,
    "code_revision": _STR,
    "index_share_for_mtp_iteration": _BOOL,
    "disable_padded_drafter_batch": _BOOL,
    "disable_eagle_block_drop": _BOOL,
    "disable_lookahead_block_hashes": _BOOL,
    "draft_lm_head_quantization": KeyRule("choice", choices=("fp8", "nvfp4")),
    "use_local_argmax_reduction": _BOOL,
    "use_heterogeneous_vocab": _BOOL,
    "prompt_lookup_max": _INT1,
    "prompt_lookup_min": _INT1,
    "parallel_drafting": _BOOL,
    "target_model_config": _ANY,
    "target_parallel_config": _ANY,
    "num_speculative_tokens_per_batch_size": _ANY,
    "draft_model_config": _ANY,
    "draft_parallel_config": _ANY,
    "suffix_decoding_max_tree_depth": KeyRule("int"),
    "suffix_decoding_max_cached_requests": KeyRule("int"),
    "suffix_decoding_max_spec_factor": KeyRule("float"),
    "suffix_decoding_min_token_prob": KeyRule("float"),
    "draft_load_config": _ANY,
    "rejection_sample_method": KeyRule("choice", choices=REJECTION_SAMPLE_METHODS),
    "synthetic_acceptance_rates": _ANY,
    "synthetic_acceptance_length": KeyRule("float"),
    "enable_adaptive_verification": _BOOL,
    "draft_sample_method": KeyRule("choice", choices=DRAFT_SAMPLE_METHODS),
    "dspark_draft_topk": _INT1,
    "xpress_topc": KeyRule("int", 0),
    "fly_window_size": _INT1,
    "fly_entropy_threshold": KeyRule("float", 0),
    "fly_entropy_top_k": _INT1,
}
"""Every field of ``SpeculativeConfig`` (0.33.0), in its order: any other key is refused
(``extra="forbid"``). ``any``: a value the sweep file's scalars cannot express or this
check does not model; vLLM's own parser (the preflight) still judges it."""

REFUSED_KEYS: Mapping[str, str] = {
    "tensor_parallel_size": "'tensor_parallel_size' is not a valid argument in the "
    "speculative_config. Please pass 'draft_tensor_parallel_size' instead.",
}
"""Fields that exist only to be refused (``SpeculativeConfig._verify_args``)."""


def config_key(key: str) -> str:
    """A JSON key as ``create_speculative_config`` reads it (``-`` becomes ``_``)."""
    return key.replace("-", "_")


def key_problem(key: str) -> str | None:
    """Why ``key`` is no key vLLM 0.33's ``--speculative-config`` takes, or None."""
    name = config_key(key)
    if name in REFUSED_KEYS:
        return REFUSED_KEYS[name]
    if name not in SPECULATIVE_KEYS:
        return f"{key!r} is not a key of {SPEC_FLAG} (vLLM {VERSION}: extra fields are refused)"
    return None


def value_problem(key: str, value: KnobValue) -> str | None:
    """Why vLLM would refuse ``value`` for ``key`` of ``--speculative-config``, or None."""
    rule = SPECULATIVE_KEYS.get(config_key(key))
    found = None if rule is None else rule.problem(value)
    return None if found is None else f"{SPEC_FLAG} key {key!r} {found}"


__all__ = [
    "METHODS",
    "MTP_METHODS",
    "SHORTCUT_FLAGS",
    "SPECULATIVE_KEYS",
    "SPEC_FLAG",
    "SPEC_FLAG_ALIASES",
    "VERSION",
    "KeyRule",
    "canonical_method",
    "config_key",
    "key_problem",
    "value_problem",
]
