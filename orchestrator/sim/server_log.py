"""SGLang's log lines, rendered exactly as FACTS.md shows them, and the stderr writer.

Line prefix: ``[%Y-%m-%d %H:%M:%S{.mmm if SGLANG_LOG_MS=1}{ TPn only if tp>1}] message``. Lines
from the HTTP server (the ready line) carry no rank tag; uvicorn's own lines have no prefix.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO


def prefix(wall: float, *, ms: bool, tp_rank: int | None) -> str:
    """The bracketed prefix for a line logged at ``wall`` (epoch seconds)."""
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall))
    if ms:
        stamp += f".{int((wall % 1) * 1000):03d}"
    tag = f" TP{tp_rank}" if tp_rank is not None else ""
    return f"[{stamp}{tag}]"


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


READY_LINE = "The server is fired up and ready to roll!"


@dataclass
class SglangLog:
    """Writes SGLang-formatted lines to stderr (journald reads them line by line)."""

    tp_size: int
    ms: bool
    stream: TextIO = sys.stderr

    def __post_init__(self) -> None:
        self._lock = threading.Lock()

    def write_raw(self, text: str) -> None:
        with self._lock:
            self.stream.write(text if text.endswith("\n") else text + "\n")
            self.stream.flush()

    def rank(self, message: str, tp_rank: int = 0) -> None:
        """A scheduler line (TP tag only when tp > 1)."""
        tag = tp_rank if self.tp_size > 1 else None
        self.write_raw(f"{prefix(time.time(), ms=self.ms, tp_rank=tag)} {message}")

    def all_ranks(self, message: str) -> None:
        for r in range(self.tp_size):
            self.rank(message, r)

    def main(self, message: str) -> None:
        """A line from the HTTP server / tokenizer manager process (no rank tag)."""
        self.write_raw(f"{prefix(time.time(), ms=self.ms, tp_rank=None)} {message}")
