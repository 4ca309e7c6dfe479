"""SGLang's log lines, rendered exactly as FACTS.md shows them, and the stderr writer.

Line prefix: ``[%Y-%m-%d %H:%M:%S{.mmm if SGLANG_LOG_MS=1}{rank tags}] message``. A scheduler
process's rank tags are built as SGLang's ``run_scheduler_process`` builds them: `` DP{d}`` when
the process has a DP rank, then `` PP{p}`` if pp > 1, `` ATTN_CP{c}`` if attn_cp > 1,
`` MOE_DP{m}`` if moe_dp > 1, `` TP{t}`` if tp > 1, `` EP{e}`` if ep > 1. Lines from the HTTP
server (the ready line) carry no rank tag; uvicorn's own lines have no prefix.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TextIO


@dataclass(frozen=True)
class SchedulerRank:
    """One scheduler process of the layout: its ranks, as SGLang hands them to the process."""

    dp: int | None
    pp: int
    attn_cp: int
    moe_dp: int
    tp: int
    ep: int
    attn_tp: int
    """Its rank inside its attention-TP group: only rank 0 of each group logs batch lines."""


@dataclass(frozen=True)
class RankLayout:
    """SGLang's parallel layout (``--tp-size``, ``--dp-size``, ``--enable-dp-attention``,
    ``--pp-size``, ``--attn-cp-size``, ``--moe-dp-size``, ``--ep-size``) and the scheduler
    processes it launches, with the ranks each is given (``data_parallel_controller``:
    attention is DP -> ATTN_CP -> ATTN_TP, MoE is MOE_DP -> EP -> MOE_TP, both over TP)."""

    tp: int = 1
    dp: int = 1
    dp_attention: bool = False
    pp: int = 1
    attn_cp: int = 1
    moe_dp: int = 1
    ep: int = 1
    router_dp_rank: int | None = None
    """``SGLANG_DP_RANK`` from the environment: the DP tag of a server without DP ranks."""

    @property
    def attn_dp(self) -> int:
        return self.dp if self.dp_attention else 1

    @property
    def attn_tp(self) -> int:
        return max(1, self.tp // self.attn_dp // self.attn_cp)

    @property
    def world_size(self) -> int:
        """GPUs the server uses: one TP x PP group, or one per DP rank without DP attention."""
        groups = self.dp if self.dp > 1 and not self.dp_attention else 1
        return groups * self.tp * self.pp

    def schedulers(self) -> tuple[SchedulerRank, ...]:
        out: list[SchedulerRank] = []
        groups = self.dp if self.dp > 1 and not self.dp_attention else 1
        for group in range(groups):
            for pp_rank in range(self.pp):
                for tp_rank in range(self.tp):
                    out.append(self._rank(group, pp_rank, tp_rank))
        return tuple(out)

    def logging_ranks(self) -> tuple[SchedulerRank, ...]:
        """Attention-TP rank 0 of each group: the processes that log batch lines."""
        return tuple(r for r in self.schedulers() if r.attn_tp == 0)

    def _rank(self, group: int, pp_rank: int, tp_rank: int) -> SchedulerRank:
        dp_rank: int | None
        if self.dp > 1 and self.dp_attention:
            dp_rank = tp_rank // (self.attn_tp * self.attn_cp)
        elif self.dp > 1:
            dp_rank = group
        else:
            dp_rank = self.router_dp_rank
        moe_group = max(1, self.tp // self.moe_dp)
        return SchedulerRank(
            dp=dp_rank,
            pp=pp_rank,
            attn_cp=(tp_rank // self.attn_tp) % self.attn_cp,
            moe_dp=tp_rank // moe_group,
            tp=tp_rank,
            ep=tp_rank % moe_group // max(1, moe_group // self.ep),
            attn_tp=tp_rank % self.attn_tp,
        )

    def tags(self, rank: SchedulerRank) -> str:
        """The rank tags of one scheduler process's log prefix (leading space included)."""
        text = ""
        if rank.dp is not None:
            text += f" DP{rank.dp}"
        if self.pp > 1:
            text += f" PP{rank.pp}"
        if self.attn_cp > 1:
            text += f" ATTN_CP{rank.attn_cp}"
        if self.moe_dp > 1:
            text += f" MOE_DP{rank.moe_dp}"
        if self.tp > 1:
            text += f" TP{rank.tp}"
        if self.ep > 1:
            text += f" EP{rank.ep}"
        return text

    @classmethod
    def from_args(cls, values: Mapping[str, object], environ: Mapping[str, str]) -> RankLayout:
        """The layout of resolved server args (their SGLang names)."""

        def size(name: str) -> int:
            value = values.get(name)
            return int(value) if isinstance(value, int) else 1

        router = environ.get("SGLANG_DP_RANK", "")
        return cls(
            tp=size("tp_size"),
            dp=size("dp_size"),
            dp_attention=bool(values.get("enable_dp_attention")),
            pp=size("pp_size"),
            attn_cp=size("attn_cp_size"),
            moe_dp=size("moe_dp_size"),
            ep=size("ep_size"),
            router_dp_rank=int(router) if router.isdigit() else None,
        )


SINGLE = RankLayout()


def prefix(wall: float, *, ms: bool, tags: str = "") -> str:
    """The bracketed prefix for a line logged at ``wall`` (epoch seconds)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall))
    if ms:
        stamp += f".{int((wall % 1) * 1000):03d}"
    return f"[{stamp}{tags}]"


def decode_line(
    *,
    running_req: int,
    tokens: int,
    token_usage: float,
    accept_len: float | None,
    accept_rate: float | None,
    cuda_graph: bool,
    gen_throughput: float,
    queue_req: int,
) -> str:
    spec = ""
    if accept_len is not None and accept_rate is not None:
        spec = f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
    return (
        f"Decode batch, #running-req: {running_req}, #token: {tokens}, "
        f"token usage: {token_usage:.2f}, {spec}cuda graph: {cuda_graph}, "
        f"gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queue_req}"
    )


def prefill_line(
    *,
    new_seq: int,
    new_token: int,
    cached_token: int,
    token_usage: float,
    running_req: int,
    queue_req: int,
    input_throughput: float,
) -> str:
    return (
        f"Prefill batch, #new-seq: {new_seq}, #new-token: {new_token}, "
        f"#cached-token: {cached_token}, token usage: {token_usage:.2f}, "
        f"#running-req: {running_req}, #queue-req: {queue_req}, #pending-token: 0, "
        f"cuda graph: False, input throughput (token/s): {input_throughput:.2f}"
    )


def dflash_init_line(*, model: str, block_size: int, window: int | None) -> str:
    return (
        "Initialized DFLASH draft runner. attention_backend=fa3, "
        f"model={model}, block_size={block_size}, draft_window_size={window}, "
        f"compact_cache={window is not None}"
    )


def ddtree_init_line(*, block_size: int, tree_budget: int) -> str:
    """The DDTree worker's init line (PR #29907): the verify width is budget + 1 nodes."""
    return (
        f"Initialized DDTree worker. block_size={block_size}, tree_budget={tree_budget}, "
        f"max_tree_nodes={tree_budget + 1}"
    )


READY_LINE = "The server is fired up and ready to roll!"


@dataclass
class SglangLog:
    """Writes SGLang-formatted lines to stderr (journald reads them line by line), with the
    prefixes of the processes of ``layout`` that really write each kind of line."""

    ms: bool
    layout: RankLayout = SINGLE
    stream: TextIO = sys.stderr
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def write_raw(self, text: str) -> None:
        with self._lock:
            self.stream.write(text if text.endswith("\n") else text + "\n")
            self.stream.flush()

    def _write(self, message: str, tags: str) -> None:
        self.write_raw(f"{prefix(time.time(), ms=self.ms, tags=tags)} {message}")

    def rank(self, message: str) -> None:
        """A scheduler's batch or status line: from attention-TP rank 0 of each group (the one
        simulated scheduler's line stands for each group's)."""
        for rank in self.layout.logging_ranks():
            self._write(message, self.layout.tags(rank))

    def tp0(self, message: str) -> None:
        """A line only global TP rank 0 writes (a worker's init line), once per DP group."""
        for rank in self.layout.schedulers():
            if rank.tp == 0 and rank.pp == 0:
                self._write(message, self.layout.tags(rank))

    def all_ranks(self, message: str) -> None:
        """A line every scheduler process writes (weight loading, KV cache allocation)."""
        for rank in self.layout.schedulers():
            self._write(message, self.layout.tags(rank))

    def main(self, message: str) -> None:
        """A line from the HTTP server / tokenizer manager process (no rank tag)."""
        self._write(message, "")
