"""What every benchmark of the orchestrator shares: simulated hosts started as a real
``sim up`` process, ground-truth readers (the server's own millisecond log stamps, the sim
journal), process CPU and memory from /proc, percentiles, and the one-JSON-document output.

Benchmarks compare the orchestrator against the simulator's own record of what happened, in
the same run, because absolute times on a shared 2-core machine are noisy.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import math
import os
import platform
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Coroutine, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

REPO = Path(__file__).resolve().parent.parent
PYTHON = sys.executable
CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024

_STAMP = re.compile(r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)(\.\d{3})?(?: TP\d+)?\] ")
READY_TEXT = "The server is fired up and ready to roll!"
SCHEDULER_UP = "max_total_num_tokens="
"""The simulated server writes this line just before its scheduler admits requests: from its
stamp on, the server can really generate (its own warm-up and ready line come after)."""
T = TypeVar("T")
SMOKE_HELP = (
    "the smallest size: every path once, in seconds (tests/integration/test_benchmarks_run.py "
    "runs it so the benchmark cannot rot; its figures mean nothing)"
)


# --------------------------------------------------------------------------- arguments, output


def parse_args(
    description: str, extra: Sequence[tuple[str, dict[str, Any]]] = ()
) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--quick", action="store_true", help="the short form (< 4 minutes)")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--keep", action="store_true", help="keep the state directory")
    for flag, options in extra:
        parser.add_argument(flag, **options)
    return parser.parse_args()


def run_main(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run`` where SIGTERM cancels the benchmark, so every ``finally`` stops what it
    started (simulated hosts, daemons, servers) by pid."""

    async def guarded() -> T:
        task = asyncio.ensure_future(main)
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await task

    return asyncio.run(guarded())


def note(message: str) -> None:
    """Progress on stderr (stdout carries only the result)."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def emit(result: Mapping[str, Any], as_json: bool) -> None:
    if as_json:
        print(json.dumps(result, indent=2, default=str))
        return
    for key, value in result.items():
        if isinstance(value, dict | list):
            value = json.dumps(value, default=str)
        print(f"{key:34} {value}")


def machine() -> dict[str, Any]:
    """Where the figures were taken: they are only comparable on the same kind of machine."""
    model = ""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
    }


# --------------------------------------------------------------------------- statistics


def percentile(values: Iterable[float], q: float) -> float | None:
    """Linear-interpolated percentile (numpy's default), None for no values."""
    ordered = sorted(values)
    if not ordered:
        return None
    rank = (len(ordered) - 1) * q / 100.0
    low = math.floor(rank)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def summary(values: Sequence[float], scale: float = 1.0, digits: int = 4) -> dict[str, Any]:
    """n, p50, p95, p99, max of ``values`` times ``scale``."""
    def r(x: float | None) -> float | None:
        return None if x is None else round(x * scale, digits)

    return {
        "n": len(values),
        "p50": r(percentile(values, 50)),
        "p95": r(percentile(values, 95)),
        "p99": r(percentile(values, 99)),
        "max": r(max(values) if values else None),
        "mean": r(sum(values) / len(values) if values else None),
    }


# --------------------------------------------------------------------------- /proc


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of one process (threads included, children not)."""
    raw = Path(f"/proc/{pid}/stat").read_text()
    fields = raw[raw.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def rss_mib(pid: int) -> float:
    raw = Path(f"/proc/{pid}/statm").read_text().split()
    return int(raw[1]) * PAGE_KIB / 1024


def peak_rss_mib(pid: int) -> float | None:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return None


# --------------------------------------------------------------------------- ground truth


def log_stamp(message: str) -> float | None:
    """Epoch seconds of a simulated SGLang log line's own ``[date time.mmm]`` prefix (the
    server's clock when it wrote the line; needs ``SGLANG_LOG_MS=1`` for milliseconds)."""
    match = _STAMP.match(message)
    if match is None:
        return None
    base = dt.datetime.strptime(match.group(1), "%Y-%m-%d %H:%M:%S").timestamp()
    return base + (float(match.group(2)) if match.group(2) else 0.0)


@dataclass(frozen=True)
class JournalLine:
    realtime: float
    message: str
    invocation: str | None
    from_systemd: bool


def journal_lines(raw_json_lines: Iterable[str]) -> list[JournalLine]:
    """The sim journal's ``-o json`` output as (receipt time, message, invocation)."""
    lines: list[JournalLine] = []
    for text in raw_json_lines:
        text = text.strip()
        if not text:
            continue
        obj = json.loads(text)
        message = obj.get("MESSAGE")
        if not isinstance(message, str):
            continue
        from_systemd = obj.get("_PID") == "1"
        invocation = obj.get("INVOCATION_ID" if from_systemd else "_SYSTEMD_INVOCATION_ID")
        lines.append(
            JournalLine(int(obj["__REALTIME_TIMESTAMP"]) / 1e6, message, invocation, from_systemd)
        )
    return lines


@dataclass(frozen=True)
class ServerRun:
    """One server process's startup as the simulated host recorded it."""

    invocation: str
    spawned: float | None  # systemd's "Started ..." line, stamped by the sim host
    ready: float | None  # the server's own stamp on its ready line
    last_line: float | None  # the server's own stamp on its last line
    can_generate: float | None = None  # the server's own stamp on its SCHEDULER_UP line

    @property
    def load_s(self) -> float | None:
        """Spawn to able to generate: what any orchestrator must wait for at the least."""
        end = self.can_generate if self.can_generate is not None else self.ready
        if self.spawned is None or end is None:
            return None
        return end - self.spawned


def server_runs(lines: Sequence[JournalLine]) -> list[ServerRun]:
    by_invocation: dict[str, dict[str, float | None]] = {}
    order: list[str] = []
    for line in lines:
        if line.invocation is None:
            continue
        if line.invocation not in by_invocation:
            by_invocation[line.invocation] = {
                "spawned": None, "ready": None, "last": None, "can_generate": None,
            }
            order.append(line.invocation)
        entry = by_invocation[line.invocation]
        if line.from_systemd:
            if line.message.startswith("Started ") and entry["spawned"] is None:
                entry["spawned"] = line.realtime
            continue
        stamp = log_stamp(line.message)
        if stamp is None:
            continue
        entry["last"] = stamp
        if READY_TEXT in line.message:
            entry["ready"] = stamp
        if SCHEDULER_UP in line.message and entry["can_generate"] is None:
            entry["can_generate"] = stamp
    return [
        ServerRun(inv, by_invocation[inv]["spawned"], by_invocation[inv]["ready"],
                  by_invocation[inv]["last"], by_invocation[inv]["can_generate"])
        for inv in order
    ]


# --------------------------------------------------------------------------- simulated hosts


@dataclass(frozen=True)
class SimHost:
    name: str
    address: str
    port: int
    identity_file: str
    known_hosts: str
    base_url: str
    state_dir: Path

    @property
    def gpu_dir(self) -> Path:
        return self.state_dir / "hosts" / self.name / "gpu"


@dataclass
class SimFleet:
    """A running ``sim up`` process and its hosts."""

    process: asyncio.subprocess.Process
    hosts: list[SimHost]
    sweep: dict[str, Any]
    state_dir: Path

    async def ssh(self, host: SimHost, command: str, timeout: float = 30.0) -> str:
        """One command on a simulated host through the system's OpenSSH-compatible client
        (asyncssh, as the orchestrator would, but outside it)."""
        import asyncssh

        async with asyncssh.connect(
            host.address, host.port, username="root", client_keys=[host.identity_file],
            known_hosts=host.known_hosts,
        ) as conn:
            result = await asyncio.wait_for(conn.run(command, check=False), timeout)
        out = result.stdout
        return out if isinstance(out, str) else (out or b"").decode()

    async def journal(self, host: SimHost, unit: str = "sglang.service") -> list[JournalLine]:
        text = await self.ssh(host, f"journalctl -u {unit} -o json --no-pager -a")
        return journal_lines(text.splitlines())


@contextlib.asynccontextmanager
async def sim_fleet(
    count: int,
    *,
    base_address: str,
    port: int,
    settings: Mapping[str, Any],
    time_scale: float = 1.0,
    keep: bool = False,
    start_timeout: float = 180.0,
) -> AsyncIterator[SimFleet]:
    """``python -m orchestrator.sim.cli up`` with ``settings`` as its faults file; stopped by
    pid (SIGTERM, which kills every process its hosts started) on exit."""
    state = Path(tempfile.mkdtemp(prefix="orch-bench-"))
    faults = state / "bench-hosts.yaml"
    faults.write_text(yaml.safe_dump(dict(settings)))
    argv = [
        PYTHON, "-m", "orchestrator.sim.cli", "up", "--hosts", str(count), "--json",
        "--faults", str(faults), "--time-scale", str(time_scale), "--state-dir", str(state),
        "--base-address", base_address, "--port", str(port),
    ]
    log = (state / "sim.log").open("wb")
    process = await asyncio.create_subprocess_exec(
        *argv, stdout=subprocess.PIPE, stderr=log, cwd=REPO
    )
    try:
        assert process.stdout is not None
        line = await asyncio.wait_for(process.stdout.readline(), start_timeout)
        if not line:
            raise RuntimeError(f"sim up exited early; see {state / 'sim.log'}")
        doc = json.loads(line)
        hosts = [
            SimHost(h["name"], h["address"], h["port"], h["identity_file"], h["known_hosts"],
                    h["base_url"], state)
            for h in doc["hosts"]
        ]
        sweep = yaml.safe_load(Path(doc["sweep_file"]).read_text())
        yield SimFleet(process, hosts, sweep, state)
    finally:
        await terminate(process)
        log.close()
        if not keep:
            shutil.rmtree(state, ignore_errors=True)
        else:
            note(f"kept {state}")


async def terminate(process: asyncio.subprocess.Process, timeout: float = 60.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``: what a benchmark started, stopped by its pid."""
    if process.returncode is not None:
        return
    process.send_signal(signal.SIGTERM)
    try:
        await asyncio.wait_for(process.wait(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()


def sweep_yaml(base: Mapping[str, Any], **overrides: Any) -> str:
    """The sim's own sweep file with some top-level sections replaced."""
    doc = dict(base)
    for key, value in overrides.items():
        if value is None:
            doc.pop(key, None)
        else:
            doc[key] = value
    return yaml.safe_dump(doc, sort_keys=False)


def orchestrator_env() -> dict[str, str]:
    env = dict(os.environ)
    env.setdefault("ORCH_LOG_LEVEL", "warning")
    return env
