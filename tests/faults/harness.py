"""What every fault test shares: one simulated host on its own loopback address, a small sweep
over it run in-process by the real runner into a real SQLite store, and the checks that the host
ended as it was found.

A fault test starts a host with a fault switched on (host settings, or a server fault that
``when_args`` aims at one config), runs a sweep of two or three NGRAM configs, and asserts on
what the store recorded: the trial's cause and evidence, the events, that the next trial ran (or
did not, per ``policy.on_trial_failure``), and that the host's unit files under its private root
are byte-identical to what they were before the sweep, with the unit back in its original state.

A test that applies to both engines runs on each (``ENGINES``: the same faults on simulated
``vllm serve`` hosts, with vLLM's configs, a ``--speculative-config`` JSON per config, and its
own texts); tests/faults/test_vllm_sweep.py lists which.

Addresses 127.0.0.120-139 and 145-149 belong to these tests (one per test, so a server left in
TIME_WAIT by one test never blocks the next). The configs differ only in
``--speculative-num-draft-tokens``:
``FAULTY`` (7) is the one a ``when_args`` fault hits, ``HEALTHY`` (5) and ``OTHER`` (6) are not.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import asyncssh
import yaml

from orchestrator.engines.vllm.config import speculative_positions
from orchestrator.runner import SweepOutcome, run_sweep
from orchestrator.sim.cli import SimCluster, simulated_hosts
from orchestrator.sim.host import UNIT_NAME, VLLM_UNIT_NAME, render_unit, sglang_argv, vllm_argv
from orchestrator.store import Store
from orchestrator.store.records import EventRecord
from orchestrator.sweepfile import Sweep, parse_sweep

SSH_PORT = 2222
TIME_SCALE = 0.05
UNIT_DIR = Path("etc/systemd/system")
DRAFT_FLAG = "--speculative-num-draft-tokens"

FAULTY: dict[str, Any] = {"algorithm": "NGRAM", "draft_tokens": 7}
HEALTHY: dict[str, Any] = {"algorithm": "NGRAM", "draft_tokens": 5}
OTHER: dict[str, Any] = {"algorithm": "NGRAM", "draft_tokens": 6}
WHEN_FAULTY = [DRAFT_FLAG, "7"]

FAST_SERVER: dict[str, Any] = {"load_s": 3.0, "warmup_s": 0.5, "stop_delay_s": 0.3}
"""The server's own durations (times ``TIME_SCALE``): a start costs well under a second more
than the Python process's start-up."""

TIMEOUTS: dict[str, float] = {
    "connect": 10,
    "stop": 20,
    "memory_release": 15,
    "ready": 30,
    "probe": 10,
    "request": 10,
}


def on_faulty(value: Any) -> dict[str, Any]:
    """A server fault that fires only for the ``FAULTY`` config."""
    return {"value": value, "when_args": WHEN_FAULTY}


def host_name(address: str) -> str:
    return "fault-" + address.rsplit(".", 1)[1]


def unit_text(
    address: str,
    *,
    kill_mode: str = "control-group",
    timeout_stop_s: int = 30,
    extra_unit: Sequence[str] = (),
    engine: str = "sglang",
) -> str:
    """The simulated host's unit, with the settings a fault needs ([Unit] lines in
    ``extra_unit``)."""
    argv, server = (vllm_argv, "vLLM") if engine == "vllm" else (sglang_argv, "SGLang")
    text = render_unit(
        argv(address),
        description=f"{server} server ({host_name(address)}, simulated)",
        timeout_stop_s=timeout_stop_s,
    )
    text = text.replace("KillMode=control-group\n", f"KillMode={kill_mode}\n")
    if extra_unit:
        lines = "".join(f"{line}\n" for line in extra_unit)
        text = text.replace("\n[Service]\n", f"{lines}\n[Service]\n", 1)
    return text


@dataclass
class FaultHost:
    """One running simulated host and what it looked like before any sweep touched it."""

    cluster: SimCluster
    address: str
    unit_files_before: dict[str, bytes] = field(default_factory=dict)
    state_before: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.cluster.hosts[0].name

    @property
    def root(self) -> Path:
        return self.cluster.hosts[0].root

    @property
    def base_url(self) -> str:
        return self.cluster.hosts[0].base_url

    @property
    def unit(self) -> str:
        """The host's unit: sglang.service, or vllm.service on a vLLM host."""
        return self.cluster.hosts[0].config.unit_name

    def unit_files(self) -> dict[str, bytes]:
        """Every file under the private root's /etc/systemd/system, by relative path."""
        top = self.root / UNIT_DIR
        return {
            str(path.relative_to(top)): path.read_bytes()
            for path in sorted(top.rglob("*"))
            if path.is_file()
        }

    @contextlib.asynccontextmanager
    async def ssh(self) -> AsyncIterator[asyncssh.SSHClientConnection]:
        async with asyncssh.connect(
            self.address,
            SSH_PORT,
            username="root",
            client_keys=[str(self.cluster.key_path)],
            known_hosts=str(self.cluster.known_hosts),
            config=None,
        ) as conn:
            yield conn

    async def run(self, command: str) -> asyncssh.SSHCompletedProcess:
        async with self.ssh() as conn:
            return await conn.run(command, encoding="utf-8", errors="replace")

    async def show(self, *props: str) -> dict[str, str]:
        result = await self.run(f"systemctl show -p {','.join(props)} {self.unit}")
        pairs = (line.split("=", 1) for line in str(result.stdout).splitlines() if "=" in line)
        return dict(pairs)

    async def journal(self) -> list[str]:
        result = await self.run(f"journalctl -u {self.unit} -o cat --no-pager -q")
        return str(result.stdout).splitlines()

    async def server_info(self) -> dict[str, Any]:
        return json.loads(await self.http_text("/server_info"))

    async def http_text(self, path: str) -> str:
        async with (
            aiohttp.ClientSession() as http,
            http.get(f"{self.base_url}{path}", timeout=aiohttp.ClientTimeout(5)) as reply,
        ):
            return await reply.text()

    async def wait_serving(self, timeout: float = 30.0) -> None:
        """Until the server answers /health with 200 (the host's own first start)."""
        deadline = time.monotonic() + timeout
        async with aiohttp.ClientSession() as http:
            while True:
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with http.get(
                        f"{self.base_url}/health", timeout=aiohttp.ClientTimeout(2)
                    ) as reply:
                        if reply.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise AssertionError(f"{self.name}: server not serving within {timeout}s")
                await asyncio.sleep(0.2)


STATE_PROPS = ("ActiveState", "SubState", "LoadState", "DropInPaths", "FragmentPath")


@contextlib.asynccontextmanager
async def fault_host(
    tmp_path: Path,
    address: str,
    *,
    settings: Mapping[str, Any] | None = None,
    server_faults: Mapping[str, Any] | None = None,
    server: Mapping[str, Any] | None = None,
    unit: str | None = None,
    engine: str = "sglang",
) -> AsyncIterator[FaultHost]:
    """A simulated host on ``address`` with ``settings`` (host faults) and ``server_faults``,
    running ``engine``'s simulated server; yields once its unit serves, having recorded its
    unit files and state; stops it after."""
    name = host_name(address)
    state = tmp_path / "sim"
    host_settings: dict[str, Any] = {
        "time_scale": TIME_SCALE,
        "ddtree": False,
        **(settings or {}),
        "server": {**FAST_SERVER, **(server or {}), "faults": dict(server_faults or {})},
    }
    async with simulated_hosts(
        state,
        [(name, address, SSH_PORT)],
        defaults={},
        faults={name: host_settings},
        units=None if unit is None else {name: unit},
        engine=engine,
    ) as cluster:
        host = FaultHost(cluster, address)
        try:
            if host.cluster.hosts[0].settings.unit_running:
                await host.wait_serving()
            host.unit_files_before = host.unit_files()
            host.state_before = await host.show(*STATE_PROPS)
            yield host
        finally:
            # A command the host froze on waits for the thaw even when cancelled: thaw before
            # the host stops, or the event loop cannot close (a frozen test that failed early).
            sshd = cluster.hosts[0].sshd
            if sshd is not None:
                with contextlib.suppress(Exception):
                    await sshd.thaw()


def sweep_yaml(
    host: FaultHost,
    name: str,
    configs: Sequence[Mapping[str, Any]],
    *,
    timeouts: Mapping[str, float] | None = None,
    policy: Mapping[str, Any] | None = None,
    benchmark: Mapping[str, Any] | None = None,
    baseline: bool = False,
    knobs: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """A small sweep over ``host``: one point (context 60, concurrency 1) per trial."""
    document = {
        "name": name,
        "hosts": [
            {
                "name": host.name,
                "address": host.address,
                "port": SSH_PORT,
                "user": "root",
                "identity_file": str(host.cluster.key_path),
                "known_hosts": str(host.cluster.known_hosts),
                "base_url": host.base_url,
            }
        ],
        "server": {
            "unit": UNIT_NAME,
            "model": "kimi-k2.6",
            "knobs": {
                "algorithm": {"flag": "--speculative-algorithm"},
                "draft_tokens": {"flag": DRAFT_FLAG},
                **{name: dict(spec) for name, spec in (knobs or {}).items()},
            },
        },
        "baseline": baseline,
        "configs": [dict(c) for c in configs],
        "benchmark": {
            "api": "chat",
            "contexts": [60],
            "concurrency": [1],
            "max_tokens": 24,
            "rounds": 1,
            "warmup_requests": 0,
            **(benchmark or {}),
        },
        "timeouts": {**TIMEOUTS, **(timeouts or {})},
        "policy": {
            "on_trial_failure": "continue",
            "trial_retries": 0,
            "restore": "as-found",
            **(policy or {}),
        },
    }
    return yaml.safe_dump(document, sort_keys=False)


VLLM_KNOBS: dict[str, dict[str, str]] = {
    "method": {"flag": "--speculative-config", "json_key": "method"},
    "tokens": {"flag": "--speculative-config", "json_key": "num_speculative_tokens"},
    "draft": {"flag": "--speculative-config", "json_key": "model"},
}
VLLM_DRAFT = "/models/Kimi-K2.6-DFlash"


def _vllm_config(tokens: int) -> dict[str, Any]:
    return {"method": "dflash", "tokens": tokens, "draft": VLLM_DRAFT}


def _vllm_json(tokens: int) -> str:
    """The ``--speculative-config`` word the drop-in renders for :func:`_vllm_config`."""
    keys = {"method": "dflash", "model": VLLM_DRAFT, "num_speculative_tokens": tokens}
    return json.dumps(keys, sort_keys=True, separators=(",", ":"))


@dataclass(frozen=True)
class EngineCase:
    """One engine as a fault test that applies to both sees it: its three configs (the same
    draft lengths 7, 5, 6), the argv words that aim a fault at ``faulty``, its sweep, unit
    and texts."""

    engine: str
    faulty: dict[str, Any]
    healthy: dict[str, Any]
    other: dict[str, Any]
    when_faulty: tuple[str, ...]
    unit: str
    loading_text: str
    """A line the server logs while it loads (before it is ready)."""
    oom_text: str
    """What its log says when a start runs out of GPU memory."""

    def on_faulty(self, value: Any) -> dict[str, Any]:
        """A server fault that fires only for ``faulty``."""
        return {"value": value, "when_args": list(self.when_faulty)}

    def sweep_yaml(
        self, host: FaultHost, name: str, configs: Sequence[Mapping[str, Any]], **options: Any
    ) -> str:
        """:func:`sweep_yaml`, on this engine's knobs and unit."""
        text = sweep_yaml(host, name, configs, **options)
        if self.engine == "sglang":
            return text
        document = yaml.safe_load(text)
        document["engine"] = self.engine
        document["server"] = {"unit": self.unit, "model": "kimi-k2.6", "knobs": VLLM_KNOBS}
        return yaml.safe_dump(document, sort_keys=False)

    def unit_text(self, address: str, **options: Any) -> str:
        return unit_text(address, engine=self.engine, **options)


ENGINES: dict[str, EngineCase] = {
    "sglang": EngineCase(
        "sglang", FAULTY, HEALTHY, OTHER, tuple(WHEN_FAULTY), UNIT_NAME,
        loading_text="Load weight begin",
        oom_text="torch.OutOfMemoryError: CUDA out of memory",
    ),
    "vllm": EngineCase(
        "vllm", _vllm_config(7), _vllm_config(5), _vllm_config(6), (_vllm_json(7),),
        VLLM_UNIT_NAME,
        loading_text="Starting to load model",
        oom_text="Free memory on device",
    ),
}  # fmt: skip


@dataclass
class SweepRun:
    """A finished sweep: its outcome, its events, and the wall time it took."""

    outcome: SweepOutcome
    events: list[EventRecord]
    elapsed_s: float

    @property
    def results(self) -> dict[str, Any]:
        return self.outcome.results

    def trial(self, config: Mapping[str, Any], attempt: int | None = 1) -> dict[str, Any]:
        """The results entry of ``config``'s attempt (configs compare as JSON); attempt None
        is a trial never attempted."""
        wanted = json.dumps(dict(config), sort_keys=True)
        for entry in self.results["trials"]:
            if (
                json.dumps(entry["config"], sort_keys=True) == wanted
                and entry["attempt"] == attempt
            ):
                return dict(entry)
        raise AssertionError(f"no attempt {attempt} of {wanted} in {self.results['trials']}")

    def kinds(self) -> list[str]:
        return [event.kind for event in self.events]

    def of_kind(self, kind: str) -> list[dict[str, Any]]:
        return [dict(event.fields) for event in self.events if event.kind == kind]


async def run(
    tmp_path: Path, text: str, *, deadline_s: float = 120.0, sweep: Sweep | None = None
) -> SweepRun:
    """Run the sweep to its end with the real runner and store (bounded: a hang fails the test);
    ``sweep`` when it was loaded from a file (its workload files read beside it)."""
    sweep = sweep or parse_sweep(text, "fault-sweep.yaml")
    started = time.monotonic()
    async with await Store.open(tmp_path / "orchestrator.db") as store:
        async with asyncio.timeout(deadline_s):
            outcome = await run_sweep(sweep, text, store)
        events = await store.events(outcome.sweep_id)
    return SweepRun(outcome, events, time.monotonic() - started)


async def orchestrator_cli(*args: str, timeout: float = 120) -> tuple[int, str, str]:
    """``orchestrator ARGS`` as an operator runs it (a real subprocess): status, stdout,
    stderr."""
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "orchestrator.cli", *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    out, err = await asyncio.wait_for(process.communicate(), timeout)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def poll_until(
    check: Callable[[], Awaitable[bool]], *, timeout: float, interval: float = 0.2
) -> None:
    """Poll ``check`` (a store, a log: things with no event to wait on) until it holds."""
    async with asyncio.timeout(timeout):
        while True:
            if await check():
                return
            await asyncio.sleep(interval)


def point_count(trial: Mapping[str, Any], kind: str = "throughput") -> int:
    return sum(1 for point in trial["points"] if point["kind"] == kind)


async def assert_restored(host: FaultHost, *, serving: bool = True) -> None:
    """Unit files byte-identical to before the sweep, the unit in its original state, and (when
    it was running) the running server on the original config: no speculative algorithm."""
    assert host.unit_files() == host.unit_files_before
    state = await host.show(*STATE_PROPS)
    assert state == host.state_before, (state, host.state_before)
    if serving and host.unit == VLLM_UNIT_NAME:
        # vLLM reports no config without dev mode: no per-position counters, no speculation
        assert speculative_positions(await host.http_text("/metrics")) is None
    elif serving:
        info = await host.server_info()
        assert info["speculative_algorithm"] is None, info
        assert DRAFT_FLAG not in info["launch_command"], info["launch_command"]


def excerpt_text(evidence: Mapping[str, Any]) -> str:
    return "\n".join(evidence.get("excerpt") or [])
