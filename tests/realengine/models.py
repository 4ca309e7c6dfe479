"""Tiny llama-architecture GGUF models whose speculative acceptance is a knob: a target and
drafts made of the target's first layers, written with the ``gguf`` package.

No model can be downloaded here, so the real engine serves models made on the spot. Plain
random weights are chaotic: a draft that is any truncation of the target agrees with it on
almost no token. Here every weight is fan-in scaled (variance 1/fan_in, so activations keep
their size through a layer) and each layer's two outputs into the residual stream (the
attention output and the FFN's down projection) are multiplied by ``layer_scale``: the target is
the embedding plus small per-layer corrections, and a draft that keeps the first layers misses
only the later corrections. The smaller the scale, the likelier the draft's argmax is the
target's. Acceptance is not monotonic in the scale, though: greedy output falls into loops
whose tokens the draft predicts well or badly, so the scale picks a trajectory as much as a
noise level. Measured here with ``orchestrator bench`` (synthetic 128-token prompts, 128-token
answers, ``-t 1 -td 1`` on 2 cores, 1-layer draft), output tok/s and accept length, with the
first vocabulary (generator ``g1``, merges from the fixed text alone):

| target | baseline | n-max 2 | n-max 4 | n-max 8 | n-max 16 |
|---|---|---|---|---|---|
| 8 layers, scale 0.08 | 66 | 56-61 (2.6) | 58-65 (3.7) | 54 (4.6) | 40-44 (5.2) |
| 16 layers, scale 0.05 (default) | 31.2 | 34.2 (2.8) | 38.6 (4.5) | 46.3 (7.3) | 42.6 (9.8) |
| 16 layers, scale 0.07 | 35.3 | 35.2 (2.9) | 42.7 (4.5) | 45.2 (7.5) | 45.3 (11.5) |

With this vocabulary (``g2``; its vocabulary size changes every weight) the default target,
measured by :mod:`tests.realengine.compare` on the same 2 cores while other test suites ran
(load average 3-4.7, so every figure is lower than on a quiet machine):

| answer length, requests | baseline | n-max 2 | n-max 4 | n-max 8 | n-max 16 |
|---|---|---|---|---|---|
| 128 tokens, 6 | 18.9 | 16.1 (2.4) | 21.5 (3.4) | 24.8 (4.6) | 22.1 (5.9) |
| 64 tokens, 12 | 13.4 | | 14.4 (3.2) | 19.0 (4.8) | 14.4 (5.7) |

On a CPU the verify pass of k+1 tokens is nearly free only up to a few tokens (then compute,
not memory, bounds it), so the draft must be much cheaper than the target: the default target
has 16 layers to the draft's one, and its draft sizes have an interior optimum (n-max 8).

The vocabulary is GPT-2's byte-level BPE: the 256 byte symbols in GPT-2's byte-to-unicode
mapping, merges learnt (deterministically) from a fixed text and from the words the bench's
synthetic prompts are made of (:data:`orchestrator.bench.prompts.WORDS`), then ChatML's special
tokens, with ChatML as the chat template. Target and drafts share it exactly, as llama.cpp
requires. Those prompts assume what the usual BPE vocabularies give: every word is one token,
with its leading space or without, so every nonce has the same length and a prompt grows by
one token per filler word. Merges learnt from the fixed text alone made 48 of the 65 words two
or three tokens, so no two prompts had the same length and every point missed its context
(flag ``P``); :func:`tokenize` checks the words here as llama.cpp splits them.
Everything is a function of the seed: the same seed writes the same bytes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from orchestrator.bench.prompts import WORDS

SPECIAL_TOKENS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
CHATML_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
DEFAULT_LAYER_SCALE = 0.05
GENERATOR = "g2"
"""Part of every file name: a change to what this module writes changes it, so a cache of
older models is not taken for the new ones."""
TOKEN_NORMAL = 1
TOKEN_CONTROL = 3

# The text the merges are learnt from (any fixed English text would do).
CORPUS = """\
Speculative decoding lets a small draft model propose several tokens that the target model
then checks in one forward pass. When the draft agrees with the target, the server emits many
tokens for the price of one step; when it does not, the extra work is wasted. The number of
tokens to draft is therefore a trade: a longer draft wins more when acceptance is high and
loses more when it is low, so the fastest setting sits somewhere in the middle, and it moves
with the model, the hardware, the prompt and the load. An operator sweeps the settings on the
real server, restarts it cleanly for each one, proves that the new process serves the new
configuration, measures throughput and acceptance at each context and concurrency, and keeps
every number with the evidence of how it was measured. The answer names the configuration to
deploy, with an interval, or says honestly that the difference is within the noise.
"""

# GPT-2's pre-tokenizer, as llama.cpp applies it for ``tokenizer.ggml.pre = gpt-2`` (with
# ASCII classes: the corpus is ASCII).
_PRE_TOKEN = re.compile(
    r"'s|'t|'re|'ve|'m|'ll|'d| ?[A-Za-z]+| ?[0-9]+| ?[^\sA-Za-z0-9]+|\s+(?!\S)|\s+"
)


def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map (``encoder.py``)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(printable, chars, strict=True)}


def learn_merges(text: str, count: int) -> list[tuple[str, str]]:
    """``count`` BPE merges learnt from ``text`` (most frequent pair first; ties broken by the
    pair itself, so the result is the same on every run)."""
    symbols = bytes_to_unicode()
    words = Counter(
        tuple(symbols[b] for b in piece.encode()) for piece in _PRE_TOKEN.findall(text)
    )
    merges: list[tuple[str, str]] = []
    for _ in range(count):
        pairs: Counter[tuple[str, str]] = Counter()
        for word, freq in words.items():
            for pair in itertools.pairwise(word):
                pairs[pair] += freq
        if not pairs:
            break
        best = min(pairs, key=lambda p: (-pairs[p], p))
        if pairs[best] < 2:
            break
        merges.append(best)
        merged: Counter[tuple[str, ...]] = Counter()
        for word, freq in words.items():
            out: list[str] = []
            i = 0
            while i < len(word):
                if i + 1 < len(word) and (word[i], word[i + 1]) == best:
                    out.append(word[i] + word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            merged[tuple(out)] += freq
        words = merged
    return merges


@dataclass(frozen=True)
class Vocabulary:
    tokens: tuple[str, ...]
    token_types: tuple[int, ...]
    merges: tuple[str, ...]

    def id_of(self, token: str) -> int:
        return self.tokens.index(token)


def prompt_word_text(words: Sequence[str] = WORDS) -> str:
    """Each prompt word twice as a line's first word and twice after a space: the two forms
    a prompt holds it in (its nonce's first word follows the chat template's newline)."""
    return "".join(f"{word}\n {word}\n" for word in words) * 2


def build_vocabulary(merge_count: int = 1000) -> Vocabulary:
    """Bytes, then each merge's result (in merge order), then ChatML's special tokens. The
    merges are learnt from :data:`CORPUS` and the prompt words until no pair repeats (about
    250), so every prompt word ends as one token."""
    tokens = list(bytes_to_unicode().values())
    merges = learn_merges(CORPUS + prompt_word_text(), merge_count)
    seen = set(tokens)
    for left, right in merges:
        if left + right not in seen:
            tokens.append(left + right)
            seen.add(left + right)
    types = [TOKEN_NORMAL] * len(tokens) + [TOKEN_CONTROL] * len(SPECIAL_TOKENS)
    return Vocabulary(
        tokens=(*tokens, *SPECIAL_TOKENS),
        token_types=tuple(types),
        merges=tuple(f"{left} {right}" for left, right in merges),
    )


def tokenize(vocab: Vocabulary, text: str) -> list[str]:
    """``text`` as llama.cpp's ``gpt2`` tokenizer splits it with ``vocab`` (special tokens
    aside): GPT-2's pre-tokenizer, then in each piece the lowest-ranked merge first, until no
    merge applies."""
    symbols = bytes_to_unicode()
    ranks = {tuple(merge.split(" ")): rank for rank, merge in enumerate(vocab.merges)}
    out: list[str] = []
    for piece in _PRE_TOKEN.findall(text):
        parts = [symbols[b] for b in piece.encode()]
        while len(parts) > 1:
            ranked = [(ranks[pair], pair) for pair in itertools.pairwise(parts) if pair in ranks]
            if not ranked:
                break
            _, (left, right) = min(ranked)
            merged: list[str] = []
            i = 0
            while i < len(parts):
                if i + 1 < len(parts) and (parts[i], parts[i + 1]) == (left, right):
                    merged.append(left + right)
                    i += 2
                else:
                    merged.append(parts[i])
                    i += 1
            parts = merged
        out.extend(parts)
    return out


@dataclass(frozen=True)
class Shape:
    """The target's dimensions (a draft keeps all but the layer count)."""

    hidden: int = 1024
    layers: int = 16
    ffn: int = 2816
    heads: int = 8
    kv_heads: int = 8
    context: int = 4096


def _fan_in(rng: np.random.Generator, rows: int, cols: int, scale: float = 1.0) -> Any:
    """A (rows, cols) matrix for ``y = W x`` with ``x`` of ``cols``: variance scale²/cols."""
    weights = rng.standard_normal((rows, cols), dtype=np.float32)
    return (weights * np.float32(scale / np.sqrt(cols))).astype(np.float16)


def make_weights(
    shape: Shape, vocab_size: int, seed: int, layer_scale: float
) -> dict[str, Any]:
    """Every tensor of the target, by its GGUF name, as numpy arrays (``(out, in)`` rows)."""
    rng = np.random.default_rng(seed)
    h, f = shape.hidden, shape.ffn
    kv = h * shape.kv_heads // shape.heads
    tensors: dict[str, Any] = {
        "token_embd.weight": rng.standard_normal((vocab_size, h), dtype=np.float32).astype(
            np.float16
        ),
        "output_norm.weight": np.ones(h, dtype=np.float32),
        "output.weight": _fan_in(rng, vocab_size, h),
    }
    for layer in range(shape.layers):
        block = f"blk.{layer}"
        tensors[f"{block}.attn_norm.weight"] = np.ones(h, dtype=np.float32)
        tensors[f"{block}.attn_q.weight"] = _fan_in(rng, h, h)
        tensors[f"{block}.attn_k.weight"] = _fan_in(rng, kv, h)
        tensors[f"{block}.attn_v.weight"] = _fan_in(rng, kv, h)
        tensors[f"{block}.attn_output.weight"] = _fan_in(rng, h, h, layer_scale)
        tensors[f"{block}.ffn_norm.weight"] = np.ones(h, dtype=np.float32)
        tensors[f"{block}.ffn_gate.weight"] = _fan_in(rng, f, h)
        tensors[f"{block}.ffn_up.weight"] = _fan_in(rng, f, h)
        tensors[f"{block}.ffn_down.weight"] = _fan_in(rng, h, f, layer_scale)
    return tensors


def write_model(
    path: Path,
    name: str,
    shape: Shape,
    layers: int,
    vocab: Vocabulary,
    tensors: dict[str, Any],
) -> Path:
    """One GGUF file: the metadata a llama-architecture model needs, the tokenizer, and the
    tensors of the first ``layers`` layers (all other tensors shared)."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name(name)
    writer.add_context_length(shape.context)
    writer.add_embedding_length(shape.hidden)
    writer.add_block_count(layers)
    writer.add_feed_forward_length(shape.ffn)
    writer.add_head_count(shape.heads)
    writer.add_head_count_kv(shape.kv_heads)
    writer.add_rope_dimension_count(shape.hidden // shape.heads)
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_vocab_size(len(vocab.tokens))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt-2")
    writer.add_token_list(list(vocab.tokens))
    writer.add_token_types(list(vocab.token_types))
    writer.add_token_merges(list(vocab.merges))
    writer.add_bos_token_id(vocab.id_of("<|endoftext|>"))
    writer.add_eos_token_id(vocab.id_of("<|im_end|>"))
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHATML_TEMPLATE)
    for tensor_name, data in tensors.items():
        if tensor_name.startswith("blk.") and int(tensor_name.split(".")[1]) >= layers:
            continue
        writer.add_tensor(tensor_name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@dataclass(frozen=True)
class ModelSet:
    target: Path
    drafts: dict[str, Path]

    def to_json(self) -> dict[str, Any]:
        return {"target": str(self.target), "drafts": {k: str(v) for k, v in self.drafts.items()}}


def make_models(
    out: Path,
    *,
    seed: int = 0,
    layer_scale: float = DEFAULT_LAYER_SCALE,
    draft_layers: Sequence[int] = (1, 2),
    shape: Shape = Shape(),
) -> ModelSet:
    """The target and one draft per entry of ``draft_layers`` (its first N layers), in
    ``out``; files already there from the same parameters are kept (their names say them)."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"tiny-llama-{GENERATOR}-h{shape.hidden}-l{shape.layers}-s{layer_scale:g}-seed{seed}"
    target = out / f"{stem}.gguf"
    drafts = {f"layers{n}": out / f"{stem}-draft{n}.gguf" for n in draft_layers}
    wanted = [target, *drafts.values()]
    if all(p.exists() for p in wanted):
        return ModelSet(target, drafts)
    vocab = build_vocabulary()
    tensors = make_weights(shape, len(vocab.tokens), seed, layer_scale)
    for path, layers in [(target, shape.layers), *zip(drafts.values(), draft_layers, strict=True)]:
        partial = path.with_suffix(".partial")
        write_model(partial, path.stem, shape, layers, vocab, tensors)
        partial.rename(path)
    return ModelSet(target, drafts)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--layer-scale", type=float, default=DEFAULT_LAYER_SCALE)
    args = parser.parse_args(argv)
    models = make_models(args.out, seed=args.seed, layer_scale=args.layer_scale)
    print(json.dumps(models.to_json()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
