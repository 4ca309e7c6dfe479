"""Start and stop a real ``python -m orchestrator.sim.sglang_server`` process for tests."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp

FAST = {"time_scale": 0.02, "load_s": 3.0, "warmup_s": 0.5, "stop_delay_s": 0.3}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class SimServer:
    """A running simulated server: its process, URL and stderr log file."""

    proc: subprocess.Popen[bytes]
    port: int
    log_path: Path
    config_path: Path
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(encoding="utf-8", errors="replace")

    def wait_exit(self, timeout: float) -> int:
        return self.proc.wait(timeout=timeout)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=10)

    def wait_ready_blocking(self, timeout: float = 15.0) -> None:
        """Poll /health until 200 (for synchronous, module-scoped fixtures)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"server exited {self.proc.returncode}:\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as resp:
                    if resp.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.02)
        raise AssertionError(f"server not ready in {timeout}s:\n{self.log()}")

    async def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as session:
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    raise AssertionError(f"server exited {self.proc.returncode}:\n{self.log()}")
                try:
                    async with session.get(f"{self.url}/health") as resp:
                        if resp.status == 200:
                            return
                except aiohttp.ClientConnectionError:
                    pass
                await asyncio.sleep(0.02)
        raise AssertionError(f"server not ready in {timeout}s:\n{self.log()}")


def start_server(
    tmp: Path,
    flags: list[str],
    settings: dict[str, Any] | None = None,
    env: dict[str, str] | None = None,
    name: str = "sim",
) -> SimServer:
    """Launch the server with ``flags`` (``--port`` added) and a settings file."""
    port = free_port()
    config = {**FAST, **(settings or {})}
    config_path = tmp / f"{name}.json"
    config_path.write_text(json.dumps(config), encoding="utf-8")
    log_path = tmp / f"{name}.log"
    full_env = {**os.environ, "ORCH_SIM_CONFIG": str(config_path), **(env or {})}
    argv = [
        sys.executable,
        "-m",
        "orchestrator.sim.sglang_server",
        *flags,
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
    ]
    with log_path.open("wb") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=full_env)
    return SimServer(proc, port, log_path, config_path)


def run_to_exit(
    tmp: Path, flags: list[str], settings: dict[str, Any] | None = None, timeout: float = 20.0
) -> tuple[int, str]:
    """Run the server expecting it to exit on its own; returns (exit code, output)."""
    server = start_server(tmp, flags, settings)
    try:
        code = server.wait_exit(timeout)
    finally:
        server.stop()
    return code, server.log()
