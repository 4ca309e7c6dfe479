"""Tiny Llama models in Hugging Face's layout for vLLM: the same vocabulary and the same
fan-in-scaled weights as the llama.cpp tier's GGUF files (:mod:`tests.realengine.models`),
written as ``config.json``, ``model.safetensors``, ``tokenizer.json`` (a byte-level BPE with
ChatML's special tokens), ``tokenizer_config.json`` (ChatML as the chat template) and
``generation_config.json``, one directory a model.

No model can be downloaded here, and vLLM loads a directory with ``HF_HUB_OFFLINE=1`` like a
downloaded one. The drafts keep the target's first layers (every other tensor shared), so
their acceptance is a knob of the target's ``layer_scale`` and of how many layers they keep
(the module docstring of :mod:`tests.realengine.models` says why plain random weights would
not do). The safetensors file and the tokenizer are written with the standard library and
numpy alone (``make real-engine`` runs this in the project's venv, which has neither
``safetensors`` nor ``tokenizers``); vLLM's own venv reads them in :func:`check_tokenizer`.

Weights are bfloat16, as the issue's probe served (vLLM's CPU backend computes in bf16 and
casts an fp16 checkpoint to it). Everything is a function of the seed and the shape.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tests.realengine.models import (
    CHATML_TEMPLATE,
    SPECIAL_TOKENS,
    Shape,
    Vocabulary,
    build_vocabulary,
    make_weights,
)

GENERATOR = "hf1"
"""Part of every directory name: a change to what this module writes changes it."""
DEFAULT_SHAPE = Shape()
"""The llama.cpp tier's target (16 layers, hidden 1024; 395 MB in bf16). On 2 cores a forward
pass of it costs more than vLLM's own per-step work, so a verify pass of several tokens costs
little more than one and speculation pays; a smaller target (8 layers, hidden 512) was
dominated by that per-step work: every speculative config measured within 1.0-1.6x of the
baseline, their order changing from run to run (tests/realengine/vllm_configs.py)."""
DEFAULT_LAYER_SCALE = 0.05
DRAFT_LAYERS = (1,)

_GGUF_TO_HF = {
    "token_embd.weight": "model.embed_tokens.weight",
    "output_norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
    "attn_norm": "input_layernorm",
    "attn_q": "self_attn.q_proj",
    "attn_k": "self_attn.k_proj",
    "attn_v": "self_attn.v_proj",
    "attn_output": "self_attn.o_proj",
    "ffn_norm": "post_attention_layernorm",
    "ffn_gate": "mlp.gate_proj",
    "ffn_up": "mlp.up_proj",
    "ffn_down": "mlp.down_proj",
}


def hf_name(gguf_name: str) -> str:
    """``blk.3.attn_q.weight`` -> ``model.layers.3.self_attn.q_proj.weight``."""
    if gguf_name in _GGUF_TO_HF:
        return _GGUF_TO_HF[gguf_name]
    _, layer, part, suffix = gguf_name.split(".")
    return f"model.layers.{layer}.{_GGUF_TO_HF[part]}.{suffix}"


def bfloat16_bits(array: Any) -> Any:
    """``array`` rounded to bfloat16 (to nearest, ties to even), as uint16 bit patterns."""
    bits = np.ascontiguousarray(array, dtype=np.float32).view(np.uint32)
    rounding = np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))
    return ((bits + rounding) >> np.uint32(16)).astype(np.uint16)


def write_safetensors(path: Path, tensors: dict[str, Any]) -> None:
    """``tensors`` (name -> numpy array) as one safetensors file of bfloat16 tensors: an
    8-byte little-endian header length, the JSON header (names sorted, offsets into the data),
    the data."""
    header: dict[str, Any] = {"__metadata__": {"format": "pt"}}
    blobs: list[bytes] = []
    offset = 0
    for name in sorted(tensors):
        data = bfloat16_bits(tensors[name]).tobytes()
        header[name] = {
            "dtype": "BF16",
            "shape": list(tensors[name].shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with path.open("wb") as out:
        out.write(struct.pack("<Q", len(text)))
        out.write(text)
        for blob in blobs:
            out.write(blob)


def _byte_level(*, trim_offsets: bool) -> dict[str, Any]:
    """GPT-2's byte-level step (pre-tokenizer, post-processor or decoder), no prefix space."""
    return {
        "type": "ByteLevel",
        "add_prefix_space": False,
        "trim_offsets": trim_offsets,
        "use_regex": True,
    }


def tokenizer_json(vocab: Vocabulary) -> dict[str, Any]:
    """The ``tokenizers`` library's file for ``vocab``: GPT-2's byte-level BPE (its
    pre-tokenizer regex, no prefix space), the merges in rank order, ChatML's special tokens
    as added tokens."""
    ids = {token: index for index, token in enumerate(vocab.tokens)}
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {"id": ids[token], "content": token, "single_word": False, "lstrip": False,
             "rstrip": False, "normalized": False, "special": True}
            for token in SPECIAL_TOKENS
        ],
        "normalizer": None,
        "pre_tokenizer": _byte_level(trim_offsets=True),
        "post_processor": _byte_level(trim_offsets=False),
        "decoder": _byte_level(trim_offsets=True),
        "model": {
            "type": "BPE", "dropout": None, "unk_token": None,
            "continuing_subword_prefix": None, "end_of_word_suffix": None,
            "fuse_unk": False, "byte_fallback": False, "ignore_merges": False,
            "vocab": {t: i for t, i in ids.items() if t not in SPECIAL_TOKENS},
            "merges": [merge.split(" ") for merge in vocab.merges],
        },
    }


def tokenizer_config(vocab: Vocabulary, context: int) -> dict[str, Any]:
    ids = {token: index for index, token in enumerate(vocab.tokens)}
    return {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "model_max_length": context,
        "bos_token": "<|endoftext|>",
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "add_bos_token": False,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHATML_TEMPLATE,
        "added_tokens_decoder": {
            str(ids[token]): {"content": token, "lstrip": False, "normalized": False,
                              "rstrip": False, "single_word": False, "special": True}
            for token in SPECIAL_TOKENS
        },
    }


def model_config(shape: Shape, layers: int, vocab: Vocabulary) -> dict[str, Any]:
    """``config.json`` of a ``LlamaForCausalLM`` with ``layers`` layers."""
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": shape.hidden,
        "intermediate_size": shape.ffn,
        "num_hidden_layers": layers,
        "num_attention_heads": shape.heads,
        "num_key_value_heads": shape.kv_heads,
        "head_dim": shape.hidden // shape.heads,
        "hidden_act": "silu",
        "max_position_embeddings": shape.context,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "tie_word_embeddings": False,
        "attention_bias": False,
        "mlp_bias": False,
        "vocab_size": len(vocab.tokens),
        "bos_token_id": vocab.id_of("<|endoftext|>"),
        "eos_token_id": vocab.id_of("<|im_end|>"),
        "torch_dtype": "bfloat16",
    }


def write_model(
    out: Path, shape: Shape, layers: int, vocab: Vocabulary, tensors: dict[str, Any]
) -> Path:
    """One model directory: the first ``layers`` layers of ``tensors`` (GGUF names, ``(out,
    in)`` rows as Hugging Face's linear layers keep them too), config and tokenizer."""
    out.mkdir(parents=True, exist_ok=True)
    kept = {
        hf_name(name): data
        for name, data in tensors.items()
        if not name.startswith("blk.") or int(name.split(".")[1]) < layers
    }
    write_safetensors(out / "model.safetensors", kept)
    files = {
        "config.json": model_config(shape, layers, vocab),
        "tokenizer.json": tokenizer_json(vocab),
        "tokenizer_config.json": tokenizer_config(vocab, shape.context),
        "special_tokens_map.json": {
            "bos_token": "<|endoftext|>", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
        },
        "generation_config.json": {
            "bos_token_id": vocab.id_of("<|endoftext|>"),
            "eos_token_id": vocab.id_of("<|im_end|>"),
        },
    }
    for name, content in files.items():
        (out / name).write_text(json.dumps(content, indent=1, ensure_ascii=False) + "\n")
    return out


@dataclass(frozen=True)
class HfModelSet:
    target: Path
    drafts: dict[str, Path]

    def to_json(self) -> dict[str, Any]:
        return {"model": str(self.target), "drafts": {k: str(v) for k, v in self.drafts.items()}}


def make_hf_models(
    out: Path,
    *,
    seed: int = 0,
    layer_scale: float = DEFAULT_LAYER_SCALE,
    draft_layers: Sequence[int] = DRAFT_LAYERS,
    shape: Shape = DEFAULT_SHAPE,
) -> HfModelSet:
    """The target and one draft per entry of ``draft_layers`` (its first N layers), each a
    directory in ``out``; directories already there from the same parameters are kept (their
    names say them; a directory appears whole, by rename)."""
    out.mkdir(parents=True, exist_ok=True)
    stem = (
        f"tiny-llama-{GENERATOR}-h{shape.hidden}-l{shape.layers}-f{shape.ffn}"
        f"-s{layer_scale:g}-seed{seed}"
    )
    target = out / stem
    drafts = {f"layers{n}": out / f"{stem}-draft{n}" for n in draft_layers}
    wanted = [target, *drafts.values()]
    if all((p / "model.safetensors").exists() for p in wanted):
        return HfModelSet(target, drafts)
    vocab = build_vocabulary()
    tensors = make_weights(shape, len(vocab.tokens), seed, layer_scale)
    for path, layers in [(target, shape.layers), *zip(drafts.values(), draft_layers, strict=True)]:
        if (path / "model.safetensors").exists():
            continue
        partial = path.with_name(path.name + ".partial")
        write_model(partial, shape, layers, vocab, tensors)
        partial.rename(path)
    return HfModelSet(target, drafts)


CHECK_TOKENIZER = """\
import json, sys
from transformers import AutoTokenizer
tok = AutoTokenizer.from_pretrained(sys.argv[1])
words = json.loads(sys.argv[2])
print(json.dumps({
    "split": {w: tok.tokenize(w) for word in words for w in (word, " " + word)},
    "chat": tok.apply_chat_template([{"role": "user", "content": "hello world"}],
                                    tokenize=False, add_generation_prompt=True),
    "eos": tok.eos_token_id,
}))
"""
"""Run by vLLM's own interpreter (it has ``transformers``): how the served tokenizer splits
the bench's prompt words, and the chat template's text."""
