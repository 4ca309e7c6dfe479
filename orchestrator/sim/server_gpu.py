"""GPU memory registration: how the simulated host learns which process holds which GPUs.

At load start the server (or its leftover child) writes ``<gpu_state_dir>/<pid>.json``
atomically. The file is never removed by the server: the simulated host decides when memory is
released (after the pid is gone plus the driver's teardown lag).
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path


def gpu_indices(tp_size: int, gpu_count: int, cuda_visible_devices: str | None) -> list[int]:
    """The GPUs a TP group uses: the first tp_size of CUDA_VISIBLE_DEVICES, or of 0..count-1."""
    if cuda_visible_devices:
        pool = [int(x) for x in cuda_visible_devices.split(",") if x.strip().isdigit()]
    else:
        pool = list(range(gpu_count))
    return pool[:tp_size]


def register_gpu_memory(state_dir: str, pid: int, gpus: list[int], used_mib: int) -> Path:
    """Write the registration file atomically (tmp + rename); returns its path."""
    directory = Path(state_dir)
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / f"{pid}.json"
    tmp = directory / f".{pid}.json.tmp"
    payload = {"pid": pid, "gpus": gpus, "used_mib": used_mib, "started": time.time()}
    tmp.write_text(json.dumps(payload), encoding="utf-8")
    os.replace(tmp, target)
    return target
