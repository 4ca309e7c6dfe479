"""SGLang's command line as the simulated server takes it: strict argparse plus SGLang's rules.

The parser has SGLang's real flag names for what the simulator models and, like SGLang, rejects
anything else (``error: unrecognized arguments: ...``, exit 2). Which spelling of the draft-window
flag exists depends on the SGLang version the sim pretends to be; DDTree flags exist only when
the settings say the build has the fork. :func:`resolve` then applies SGLang's post-parse rules
(DFLASH forcing steps = topk = 1, the EAGLE auto-choice and topk-1 adjustment, the window >= block
check, unknown algorithm names, ``--speculative-adaptive`` with its file and its fallback) and
raises the exception type SGLang raises.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.sim import sglang_adaptive
from orchestrator.sim.drafting import AdaptiveDraft, DraftSchedule, FixedDraft, SlotRule
from orchestrator.sim.perfmodel import BASELINE, SpecKind, SpecShape
from orchestrator.sim.settings import ROOT_ENV

OLD_WINDOW_FLAG = "--speculative-dflash-draft-window-size"
NEW_WINDOW_FLAG = "--speculative-draft-window-size"
HIDDEN_ALIAS_AFTER = (0, 5, 23)
"""Builds newer than this accept OLD_WINDOW_FLAG again, hidden from --help."""
ADAPTIVE_SINCE = (0, 5, 23)
"""The build the adaptive flags were read from (``--speculative-adaptive`` and
``--speculative-adaptive-config``); older builds are not modelled with them."""

BUILTIN_ALGORITHMS: tuple[str, ...] = (
    "EAGLE", "EAGLE3", "NEXTN", "STANDALONE", "NGRAM", "DFLASH", "DSPARK", "UNO",
)
DFLASH_FAMILY: tuple[str, ...] = ("DFLASH", "DSPARK", "DDTREE")
EAGLE_FAMILY: tuple[str, ...] = ("EAGLE", "EAGLE3", "STANDALONE", "UNO")
DEFAULT_DFLASH_BLOCK = 16
DEFAULT_DDTREE_TOPK = 4

REASONING_PARSER_CHOICES: tuple[str, ...] = (
    "deepseek-r1", "deepseek-v3", "glm45", "gpt-oss", "kimi", "kimi_k2", "minimax",
    "qwen3", "qwen3-thinking", "step3",
)


def parse_version(text: str) -> tuple[int, ...]:
    """'0.5.23' -> (0, 5, 23); suffixes such as 'rc1' or '.post1' are ignored."""
    parts: list[int] = []
    for piece in text.split("."):
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def window_flag_spellings(version: str) -> tuple[str, ...]:
    """Draft-window flags a build accepts: 0.5.11 old only, 0.5.12-0.5.19 both, >=0.5.20 new."""
    v = parse_version(version)
    if v < (0, 5, 11):
        return ()
    if v < (0, 5, 12):
        return (OLD_WINDOW_FLAG,)
    if v < (0, 5, 20):
        return (NEW_WINDOW_FLAG, OLD_WINDOW_FLAG)
    return (NEW_WINDOW_FLAG,)


def window_dest(version: str) -> str:
    """The /server_info key of the draft window for this version."""
    spellings = window_flag_spellings(version)
    if spellings == (OLD_WINDOW_FLAG,):
        return "speculative_dflash_draft_window_size"
    return "speculative_draft_window_size"


def build_parser(version: str, ddtree: bool) -> argparse.ArgumentParser:
    """The strict parser of ``python -m sglang.launch_server`` for this build."""
    p = argparse.ArgumentParser(prog="launch_server.py", allow_abbrev=False)
    p.add_argument("--model-path", "--model", dest="model_path", required=True)
    p.add_argument("--tokenizer-path", default=None)
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--tensor-parallel-size", "--tp-size", "--tp", dest="tp_size", type=int,
                   default=1)
    p.add_argument("--data-parallel-size", "--dp-size", "--dp", dest="dp_size", type=int,
                   default=1)
    p.add_argument("--pipeline-parallel-size", "--pp-size", dest="pp_size", type=int, default=1)
    p.add_argument("--expert-parallel-size", "--ep-size", "--ep", dest="ep_size", type=int,
                   default=1)
    p.add_argument("--attention-context-parallel-size", "--attn-cp-size", dest="attn_cp_size",
                   type=int, default=1)
    p.add_argument("--moe-data-parallel-size", "--moe-dp-size", dest="moe_dp_size", type=int,
                   default=1)
    p.add_argument("--enable-dp-attention", action="store_true")
    p.add_argument("--served-model-name", default=None)
    p.add_argument("--trust-remote-code", action="store_true")
    p.add_argument("--dtype", default="auto")
    p.add_argument("--quantization", default=None)
    p.add_argument("--kv-cache-dtype", default="auto")
    p.add_argument("--mem-fraction-static", type=float, default=None)
    p.add_argument("--context-length", type=int, default=None)
    p.add_argument("--max-running-requests", type=int, default=None)
    p.add_argument("--max-total-tokens", type=int, default=None)
    p.add_argument("--chunked-prefill-size", type=int, default=None)
    p.add_argument("--page-size", type=int, default=1)
    p.add_argument("--schedule-policy", default="fcfs")
    p.add_argument("--stream-interval", type=int, default=1)
    p.add_argument("--random-seed", type=int, default=None)
    p.add_argument("--watchdog-timeout", type=float, default=300.0)
    p.add_argument("--attention-backend", default=None)
    p.add_argument("--cuda-graph-max-bs", type=int, default=None)
    p.add_argument("--disable-cuda-graph", action="store_true")
    p.add_argument("--disable-radix-cache", action="store_true")
    p.add_argument("--enable-cache-report", action="store_true")
    p.add_argument("--skip-server-warmup", action="store_true")
    p.add_argument("--api-key", default=None)
    p.add_argument("--log-level", default="info")
    p.add_argument("--log-requests", action="store_true")
    p.add_argument("--enable-metrics", action="store_true")
    p.add_argument("--decode-log-interval", type=int, default=40)
    p.add_argument("--reasoning-parser", choices=REASONING_PARSER_CHOICES, default=None)
    p.add_argument("--tool-call-parser", default=None)
    p.add_argument("--speculative-algorithm", default=None)
    p.add_argument(
        "--speculative-draft-model-path", "--speculative-draft-model",
        dest="speculative_draft_model_path", default=None,
    )
    p.add_argument("--speculative-num-steps", type=int, default=None)
    p.add_argument("--speculative-eagle-topk", type=int, default=None)
    p.add_argument("--speculative-num-draft-tokens", type=int, default=None)
    p.add_argument("--speculative-dflash-block-size", type=int, default=None)
    spellings = window_flag_spellings(version)
    if spellings:
        p.add_argument(*spellings, dest=window_dest(version), type=int, default=None)
    if parse_version(version) > HIDDEN_ALIAS_AFTER:
        # Newer builds re-register the old spelling as a deprecated alias that --help hides.
        p.add_argument(OLD_WINDOW_FLAG, dest=window_dest(version), type=int, default=None,
                       help=argparse.SUPPRESS)
    if parse_version(version) >= ADAPTIVE_SINCE:
        p.add_argument("--speculative-adaptive", action="store_true")
        p.add_argument("--speculative-adaptive-config", default=None)
    if ddtree:
        p.add_argument("--speculative-ddtree-budget", type=int, default=None)
    return p


@dataclass(frozen=True)
class ServerArgs:
    """Resolved arguments: what /server_info reports and what the model runs."""

    values: Mapping[str, Any]
    """Every resolved server arg by its SGLang name (dest)."""
    shape: SpecShape
    warnings: tuple[str, ...]
    deprecated_window_flag: bool
    draft: DraftSchedule | None = None
    """How the server drafts step by step (None: ``shape`` at every step)."""

    @property
    def model_path(self) -> str:
        return str(self.values["model_path"])

    @property
    def served_model_name(self) -> str:
        return str(self.values["served_model_name"])

    @property
    def tp_size(self) -> int:
        return int(self.values["tp_size"])

    @property
    def speculative(self) -> bool:
        return self.shape.speculative

    def get(self, key: str) -> Any:
        return self.values.get(key)

    @property
    def drafting(self) -> DraftSchedule:
        """What the server drafts by: its schedule, else ``shape`` at every step."""
        return self.draft if self.draft is not None else FixedDraft(self.shape)


FileReader = Callable[[str], str]
"""Reads a file the command line names, by its path on the server's host."""


def host_file_reader(environ: Mapping[str, str]) -> FileReader:
    """How the server opens a path its flags name: below the simulated host's root when it
    runs on one (``ORCH_SIM_ROOT``), else as it is."""
    root = environ.get(ROOT_ENV)

    def read(path: str) -> str:
        local = os.path.join(root, path.lstrip("/")) if root else path
        with open(local, encoding="utf-8") as handle:
            return handle.read()

    return read


def _env_float(environ: Mapping[str, str], name: str, default: float) -> float:
    raw = environ.get(name)
    if raw is None or raw == "":
        return default
    return float(raw)


def resolve(
    ns: argparse.Namespace,
    argv: Sequence[str],
    *,
    version: str,
    ddtree: bool,
    environ: Mapping[str, str],
    read_file: FileReader | None = None,
) -> ServerArgs:
    """Apply SGLang's post-parse rules. Raises ValueError / AssertionError as SGLang does, and
    ``OSError`` for an adaptive config file it cannot open (``read_file``: how the server opens
    it, by default :func:`host_file_reader`)."""
    values: dict[str, Any] = dict(vars(ns))
    warnings: list[str] = []
    _check_parallelism(values)
    wkey = window_dest(version)
    values.setdefault(wkey, None)
    if values["served_model_name"] is None:
        values["served_model_name"] = values["model_path"]
    raw_algo = values["speculative_algorithm"]
    shape = BASELINE
    if raw_algo is not None:
        algo = str(raw_algo).upper()
        known = BUILTIN_ALGORITHMS + (("DDTREE",) if ddtree else ())
        if algo not in known:
            raise ValueError(f"Unknown speculative algorithm name: {raw_algo}")
        if algo == "NEXTN":
            algo = "EAGLE"
        values["speculative_algorithm"] = algo
    adaptive = _adaptive(values, warnings, read_file or host_file_reader(environ))
    if raw_algo is not None:
        algo = values["speculative_algorithm"]
        if algo in DFLASH_FAMILY:
            shape = _resolve_dflash(values, algo, wkey, warnings, environ)
        elif algo == "NGRAM":
            n = values["speculative_num_draft_tokens"] or 12
            values["speculative_num_draft_tokens"] = n
            shape = SpecShape(SpecKind.CHAIN, algo, n, n - 1, 1, None, 0)
        else:
            shape = _resolve_eagle(values, algo, warnings)
        if values["max_running_requests"] is None:
            values["max_running_requests"] = 48
    if values["max_running_requests"] is None:
        values["max_running_requests"] = 1024
    deprecated = OLD_WINDOW_FLAG in argv and NEW_WINDOW_FLAG in window_flag_spellings(version)
    draft = None
    if adaptive is not None:
        keys, slots, candidates = adaptive
        shapes = {steps: eagle_chain(str(values["speculative_algorithm"]), steps)
                  for steps in candidates}  # fmt: skip
        draft = AdaptiveDraft(keys, slots, int(values["speculative_num_steps"]), shapes)
    return ServerArgs(values, shape, tuple(warnings), deprecated, draft)


def _adaptive(
    values: dict[str, Any], warnings: list[str], read_file: FileReader
) -> tuple[tuple[int, ...], tuple[SlotRule, ...], list[int]] | None:
    """``--speculative-adaptive``: SGLang's fallback (its warning, then static params) or its
    slots, with the steps and top-k it sets (before the algorithm's own rules run)."""
    if not values.get("speculative_adaptive"):
        return None
    reason = sglang_adaptive.unsupported_reason(values)
    if reason is not None:
        warnings.append(sglang_adaptive.FALLBACK.format(reason=reason))
        values["speculative_adaptive"] = False
        return None
    path = values.get("speculative_adaptive_config")
    slots = sglang_adaptive.load_config(None if path is None else read_file(str(path)))
    candidates = sglang_adaptive.candidate_steps(slots)
    if values["speculative_eagle_topk"] is None:
        values["speculative_eagle_topk"] = 1
    values["speculative_num_steps"] = sglang_adaptive.initial_steps(
        values["speculative_num_steps"], candidates
    )
    values["speculative_num_draft_tokens"] = values["speculative_num_steps"] + 1
    return tuple(slots), tuple(slots.values()), candidates


def eagle_chain(algorithm: str, steps: int) -> SpecShape:
    """An EAGLE chain of ``steps`` draft steps (top-k 1: ``steps + 1`` verified tokens); 0
    steps drafts nothing and verifies one token, as a server without speculation."""
    if steps <= 0:
        return BASELINE
    return SpecShape(SpecKind.CHAIN, algorithm, steps + 1, steps, 1, None, steps)


def _check_parallelism(values: Mapping[str, Any]) -> None:
    """SGLang's ``_handle_context_parallelism`` checks, asserted as SGLang asserts them: the
    rank tags a layout gives its log lines only exist for layouts SGLang accepts."""
    tp, dp, pp = values["tp_size"], values["dp_size"], values["pp_size"]
    cp, moe_dp, ep = values["attn_cp_size"], values["moe_dp_size"], values["ep_size"]
    for name in ("tp_size", "dp_size", "pp_size", "attn_cp_size", "moe_dp_size", "ep_size"):
        if values[name] < 1:
            raise ValueError(f"{name} must be >= 1, got {values[name]}")
    if cp > 1:
        assert tp % cp == 0, "tp_size must be divisible by attn_cp_size"
        assert tp % (dp * cp) == 0, "tp_size must be divisible by dp_size * attn_cp_size"
    if moe_dp > 1:
        assert tp % moe_dp == 0, "tp_size must be divisible by moe_dp_size"
        assert ep * moe_dp <= tp, "ep_size * moe_dp_size must be less than or equal to tp_size"
        assert pp == 1, "PP is not supported with context parallelism"
        if ep > 1:
            assert ep * moe_dp == tp, "ep_size * moe_dp_size must be equal to tp_size"
    if cp != moe_dp:
        assert moe_dp == 1, "attn_cp_size != moe_dp_size is only supported when moe_dp_size == 1"


def _resolve_dflash(
    values: dict[str, Any],
    algo: str,
    wkey: str,
    warnings: list[str],
    environ: Mapping[str, str],
) -> SpecShape:
    # SGLang's _handle_dflash, in its order (DDTREE is DFLASH's worker with a tree verify).
    if values["enable_dp_attention"]:
        raise ValueError("Currently DFLASH speculative decoding does not support dp attention.")
    if values["pp_size"] != 1:
        raise ValueError("Currently DFLASH speculative decoding only supports pp_size == 1.")
    if not values["speculative_draft_model_path"]:
        raise ValueError(
            "DFLASH speculative decoding requires setting --speculative-draft-model-path."
        )
    if values["speculative_num_steps"] not in (None, 1) or values["speculative_eagle_topk"] not in (
        None, 1,
    ):
        warnings.append(
            f"{algo} ignores --speculative-num-steps and --speculative-eagle-topk; "
            "setting both to 1"
        )
    values["speculative_num_steps"] = 1
    values["speculative_eagle_topk"] = 1
    draft_tokens = values["speculative_num_draft_tokens"]
    block_flag = values["speculative_dflash_block_size"]
    if block_flag is not None:
        if block_flag <= 0:
            raise ValueError(
                "DFLASH requires --speculative-dflash-block-size to be positive, "
                f"got {block_flag}."
            )
        if draft_tokens is not None and draft_tokens != block_flag:
            raise ValueError(
                "Both --speculative-num-draft-tokens and --speculative-dflash-block-size are "
                "set but they differ. For DFLASH they must match. "
                f"speculative_num_draft_tokens={draft_tokens}, "
                f"speculative_dflash_block_size={block_flag}."
            )
    block = draft_tokens or block_flag or DEFAULT_DFLASH_BLOCK
    if block < 2:
        raise ValueError(f"{algo} block size must be >= 2, got {block}")
    values["speculative_num_draft_tokens"] = block
    values["speculative_dflash_block_size"] = block
    window = values.get(wkey)
    if window is not None and window < block:
        raise ValueError(
            "--speculative-draft-window-size must be >= "
            "--speculative-num-draft-tokens (block_size). "
            f"window_size={window}, block_size={block}."
        )
    if algo != "DDTREE":
        return SpecShape(SpecKind.CHAIN, algo, block, block - 1, 1, window, 1)
    # The DDTree worker (PR #29907): the budget defaults to block - 1 and the tree it verifies
    # has budget + 1 nodes (the root is the bonus position).
    budget = values.get("speculative_ddtree_budget")
    if budget is None:
        budget = block - 1
    if budget < 1:
        raise ValueError(f"speculative_ddtree_budget must be >= 1, got {budget}")
    values["speculative_ddtree_budget"] = budget
    topk = int(_env_float(environ, "SGLANG_DDTREE_MAX_TOPK", DEFAULT_DDTREE_TOPK))
    if topk < 1:
        raise ValueError(f"SGLANG_DDTREE_MAX_TOPK must be >= 1, got {topk}")
    bonus = _env_float(environ, "SGLANG_DDTREE_DEPTH_BONUS", 0.0)
    values["ddtree_max_topk"] = topk
    values["ddtree_depth_bonus"] = bonus
    return SpecShape(SpecKind.TREE, algo, budget + 1, block - 1, topk, window, 1, bonus)


def _resolve_eagle(values: dict[str, Any], algo: str, warnings: list[str]) -> SpecShape:
    if values["speculative_num_steps"] is None:
        assert values["speculative_eagle_topk"] is None and (
            values["speculative_num_draft_tokens"] is None
        )
        steps, topk, draft = (3, 1, 4) if algo == "STANDALONE" else (5, 4, 8)
        values["speculative_num_steps"] = steps
        values["speculative_eagle_topk"] = topk
        values["speculative_num_draft_tokens"] = draft
    steps = int(values["speculative_num_steps"])
    topk = int(values["speculative_eagle_topk"] or 1)
    values["speculative_eagle_topk"] = topk
    draft = values["speculative_num_draft_tokens"]
    if topk == 1 and draft != steps + 1:
        warnings.append(
            "speculative_num_draft_tokens is adjusted to speculative_num_steps + 1 "
            "when speculative_eagle_topk == 1"
        )
        draft = steps + 1
    if draft is None:
        draft = steps + 1
    values["speculative_num_draft_tokens"] = draft
    kind = SpecKind.CHAIN if topk == 1 else SpecKind.TREE
    return SpecShape(kind, algo, int(draft), steps, topk, None, steps)


def server_args_repr(args: ServerArgs) -> str:
    """The ``server_args=ServerArgs(...)`` text SGLang logs at startup."""
    inner = ", ".join(f"{k}={v!r}" for k, v in args.values.items())
    return f"server_args=ServerArgs({inner})"


def shape_dict(shape: SpecShape) -> dict[str, Any]:
    data = dataclasses.asdict(shape)
    data["kind"] = shape.kind.value
    return data
