"""The real-engine tier's host: a real-systemd test host (tests/realhost) whose
``llama-server.service`` runs the ``llama-server`` that ``make real-engine`` built."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.realengine.prepare import RealEngine
from tests.realhost.realhost import RealHost

UNIT = "llama-server.service"
PORT = 8080
MODEL = "tiny"
THREADS = ("--threads", "1", "--spec-draft-threads", "1")
"""One thread for the target and one for the draft: two OpenMP pools of two threads each on
two cores collapse throughput (FACTS.md)."""


class UnitOnHost:
    """What the tier does with a unit on its real-systemd host, whichever engine it runs: the
    unit's files, its state, its server's HTTP API, the sweep file's host entry."""

    host: RealHost
    unit: str
    TEXT_PATHS: tuple[str, ...] = ("/metrics",)
    """Paths whose answer is text, not JSON."""

    @property
    def base_url(self) -> str:
        raise NotImplementedError

    def unit_files(self) -> dict[str, bytes]:
        return {
            str(p.relative_to(self.host.unit_dir)): p.read_bytes()
            for p in self.host.unit_dir.rglob("*")
            if p.is_file()
        }

    def show(self, *props: str) -> dict[str, str]:
        out = self.host.ssh(["systemctl", "show", "-p", ",".join(props), self.unit]).stdout
        return dict(line.split("=", 1) for line in out.decode().splitlines() if "=" in line)

    def get(self, path: str, timeout: float = 10.0) -> Any:
        with urllib.request.urlopen(self.base_url + path, timeout=timeout) as reply:
            body = reply.read()
        return body.decode() if path in self.TEXT_PATHS else json.loads(body)

    def hosts_yaml(self) -> str:
        """The sweep file's ``hosts`` section: this host, over SSH as root."""
        host = self.host
        return (
            f"hosts:\n  - name: {host.name}\n    address: {host.address}\n"
            f"    port: {host.port}\n    user: root\n    identity_file: {host.identity_file}\n"
            f"    known_hosts: {host.known_hosts}\n    base_url: {self.base_url}\n"
        )


@dataclass
class LlamaHost(UnitOnHost):
    host: RealHost
    engine: RealEngine
    unit: str = UNIT

    @property
    def base_url(self) -> str:
        return f"http://{self.host.address}:{PORT}"

    def argv(self) -> list[str]:
        """The unit as found: the target alone, no speculation, no metrics; long flag names
        only, so a knob's flag removes the unit's own (``-t`` would survive ``--threads``)."""
        return [
            str(self.engine.llama_server),
            "--model", str(self.engine.models.target), "--alias", MODEL,
            "--host", self.host.address, "--port", str(PORT),
            *THREADS, "--ctx-size", "2048", "--parallel", "1",
        ]  # fmt: skip

    def install(self) -> None:
        (self.host.unit_dir / self.unit).write_text(
            "[Unit]\nDescription=llama.cpp server (real-engine tier)\n\n[Service]\n"
            f"Type=simple\nExecStart={' '.join(self.argv())}\n"
            "KillMode=control-group\nTimeoutStopSec=20\n"
        )
        self.host.ssh(["systemctl", "daemon-reload"])

    def await_serving(self, timeout: float = 60.0) -> dict[str, Any]:
        """``/props`` once ``/health`` answers 200."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                if self.get("/health").get("status") == "ok":
                    props: dict[str, Any] = self.get("/props")
                    return props
            except (OSError, urllib.error.URLError, ValueError):
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.unit} not serving at {self.base_url} within {timeout}s")

    def sweep_yaml(self, name: str, body: str) -> str:
        """A sweep file of the tier: ``body`` (configs, benchmark, ...) after the host and the
        server with the tier's knobs."""
        return (
            f"name: {name}\nengine: llamacpp\n{self.hosts_yaml()}"
            f"server:\n  unit: {self.unit}\n  model: {MODEL}\n  knobs:\n"
            "    spec: {flag: --spec-type}\n"
            "    draft: {flag: --spec-draft-model}\n"
            "    n_max: {flag: --spec-draft-n-max}\n"
            "    legacy_n_max: {flag: --draft-max}\n"
            f"{body}"
        )

    def draft(self, name: str = "layers1") -> Path:
        return self.engine.models.drafts[name]
