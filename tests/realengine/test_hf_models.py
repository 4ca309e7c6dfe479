"""The vLLM tier's Hugging Face models as written (pure; part of ``make test``): the
safetensors file reads back as the tensors given, the tokenizer file holds the llama.cpp
tier's vocabulary and merges, a draft is the target's first layers, and the bytes are the same
on every run. vLLM's own tokenizer reading them is the tier's (``test_vllm_sweep.py``)."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np

from tests.realengine.hf_models import (
    bfloat16_bits,
    hf_name,
    make_hf_models,
    tokenizer_json,
    write_safetensors,
)
from tests.realengine.models import SPECIAL_TOKENS, Shape, build_vocabulary

SMALL = Shape(hidden=64, layers=3, ffn=128, heads=4, kv_heads=4, context=256)


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    data = path.read_bytes()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8 : 8 + length])
    header.pop("__metadata__")
    out = {}
    for name, entry in header.items():
        assert entry["dtype"] == "BF16"
        start, end = entry["data_offsets"]
        bits = np.frombuffer(data[8 + length + start : 8 + length + end], dtype=np.uint16)
        out[name] = (bits.astype(np.uint32) << 16).view(np.float32).reshape(entry["shape"])
    return out


def test_bfloat16_rounds_to_nearest_even() -> None:
    values = np.array([1.0, -2.5, 1 + 2**-8, 1 + 3 * 2**-8, 3.14159], dtype=np.float32)
    back = (bfloat16_bits(values).astype(np.uint32) << 16).view(np.float32)
    assert list(back[:4]) == [1.0, -2.5, 1.0, 1 + 2**-6]  # ties to even, then up
    assert abs(back[4] - 3.14159) < 0.01


def test_safetensors_read_back(tmp_path: Path) -> None:
    tensors = {"b": np.arange(6, dtype=np.float32).reshape(2, 3), "a": np.ones(5, np.float32)}
    write_safetensors(tmp_path / "m.safetensors", tensors)
    back = read_safetensors(tmp_path / "m.safetensors")
    assert set(back) == {"a", "b"}
    assert (back["b"] == tensors["b"]).all() and (back["a"] == 1).all()
    (length,) = struct.unpack("<Q", (tmp_path / "m.safetensors").read_bytes()[:8])
    assert length % 8 == 0


def test_names_follow_hugging_faces_llama() -> None:
    assert hf_name("token_embd.weight") == "model.embed_tokens.weight"
    assert hf_name("blk.3.attn_q.weight") == "model.layers.3.self_attn.q_proj.weight"
    assert hf_name("blk.0.ffn_down.weight") == "model.layers.0.mlp.down_proj.weight"


def test_the_tokenizer_is_the_gguf_tiers_vocabulary() -> None:
    vocab = build_vocabulary()
    tok = tokenizer_json(vocab)
    ids = tok["model"]["vocab"] | {t["content"]: t["id"] for t in tok["added_tokens"]}
    assert sorted(ids.values()) == list(range(len(vocab.tokens)))
    assert all(ids[token] == index for index, token in enumerate(vocab.tokens))
    assert [" ".join(m) for m in tok["model"]["merges"]] == list(vocab.merges)
    assert [t["content"] for t in tok["added_tokens"]] == list(SPECIAL_TOKENS)


def test_a_draft_is_the_targets_first_layers_and_runs_repeat(tmp_path: Path) -> None:
    first = make_hf_models(tmp_path / "a", shape=SMALL, draft_layers=(1,))
    again = make_hf_models(tmp_path / "b", shape=SMALL, draft_layers=(1,))
    target = read_safetensors(first.target / "model.safetensors")
    draft = read_safetensors(first.drafts["layers1"] / "model.safetensors")
    assert {n for n in target if ".layers." in n and ".layers.0." not in n}
    assert {n for n in draft if ".layers." in n} == {n for n in target if ".layers.0." in n}
    assert all((draft[n] == target[n]).all() for n in draft)
    config = json.loads((first.drafts["layers1"] / "config.json").read_text())
    assert config["num_hidden_layers"] == 1 and config["architectures"] == ["LlamaForCausalLM"]
    for name in ("model.safetensors", "tokenizer.json", "config.json"):
        assert (first.target / name).read_bytes() == (again.target / name).read_bytes()
