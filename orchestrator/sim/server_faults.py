"""Failure paths of the simulated server, with SGLang's real error texts.

Each function either writes what SGLang (or uvicorn, or CUDA) writes when that failure happens,
or reproduces the process behaviour (a scheduler child that outlives the main process).
"""

from __future__ import annotations

import os
import signal
import time
import traceback

from orchestrator.sim.server_gpu import register_gpu_memory
from orchestrator.sim.server_log import SglangLog
from orchestrator.sim.settings import ServerSimSettings

_SGLANG = "/usr/local/lib/python3.12/dist-packages/sglang"
SIGQUIT_LINE = "Received sigquit from a child process. It usually means the child failed."


def log_startup_exception(log: SglangLog, exc: BaseException) -> None:
    """An exception while resolving server args: Python's traceback, unprefixed, on stderr."""
    log.write_raw("".join(traceback.format_exception(exc)).rstrip("\n"))


def _scheduler_traceback(log: SglangLog, frames: list[tuple[str, int, str, str]],
                         last: str) -> None:
    lines = ["Scheduler hit an exception: Traceback (most recent call last):"]
    for path, line, func, code in frames:
        lines.append(f'  File "{_SGLANG}/{path}", line {line}, in {func}')
        lines.append(f"    {code}")
    lines.append(last)
    log.rank("\n".join(lines))


def log_cuda_oom(log: SglangLog, settings: ServerSimSettings) -> None:
    """CUDA OOM while loading weights, then the main process learns its child died."""
    total_gib = settings.gpu_total_mib / 1024
    _scheduler_traceback(
        log,
        [
            ("srt/managers/scheduler.py", 3023, "run_scheduler_process",
             "scheduler = Scheduler("),
            ("srt/model_executor/model_runner.py", 312, "__init__",
             "self.initialize(min_per_gpu_memory)"),
            ("srt/model_executor/model_runner.py", 905, "load_model",
             "self.model = get_model("),
        ],
        f"torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.76 GiB. GPU 0 has a "
        f"total capacity of {total_gib:.2f} GiB of which 1.02 GiB is free. Including non-PyTorch "
        f"memory, this process has {total_gib - 1.02:.2f} GiB memory in use.",
    )
    log.main(SIGQUIT_LINE)


def log_scheduler_died(log: SglangLog) -> None:
    """A scheduler child that exits during load without a classifiable message."""
    log.rank("Rank 0 scheduler is dead. Please check if there are relevant logs.")
    log.main(SIGQUIT_LINE)


def crash_scheduler(log: SglangLog) -> None:
    """A scheduler crash mid-serving: traceback, the sigquit line, exit 1 at once."""
    _scheduler_traceback(
        log,
        [
            ("srt/managers/scheduler.py", 3041, "run_scheduler_process",
             "scheduler.event_loop_overlap()"),
            ("srt/managers/scheduler.py", 1015, "event_loop_overlap",
             "batch_result = self.run_batch(batch)"),
        ],
        "RuntimeError: CUDA error: an illegal memory access was encountered",
    )
    log.main(SIGQUIT_LINE)
    os._exit(1)


def fork_leftover_child(settings: ServerSimSettings, gpus: list[int], linger_s: float) -> int:
    """Fork a "scheduler" child that holds the GPU memory and outlives the main process.

    The child registers the memory under its own pid, then waits for the main process to go
    away, lingers ``linger_s`` (scaled; negative = forever) and exits. It stays in the main
    process's process group, so a control-group style kill still reaches it; a kill of the
    main pid alone (KillMode=process) does not. Returns the child's pid (in the parent).
    """
    parent = os.getpid()
    read_fd, write_fd = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child
        os.close(read_fd)
        try:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            if settings.gpu_state_dir:
                register_gpu_memory(settings.gpu_state_dir, os.getpid(), gpus,
                                    settings.weights_mib_per_gpu)
        finally:
            os.write(write_fd, b"r")
            os.close(write_fd)
        while os.getppid() == parent:
            time.sleep(0.05)
        if linger_s < 0:
            while True:
                time.sleep(3600)
        time.sleep(settings.scaled(linger_s))
        os._exit(0)
    os.close(write_fd)
    os.read(read_fd, 1)
    os.close(read_fd)
    return pid
