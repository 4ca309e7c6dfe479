"""What the dashboard and metrics tests share: simulated GPU hosts (``orchestrator sim up``,
reached over SSH like real ones), a daemon listening on loopback TCP behind a bearer token as
an operator runs it, and sweep files cut from the simulator's own to run in seconds."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import pytest
import yaml

from tests.integration.daemon_proc import DaemonProcess, running_daemon, stop_process, tcp_config

TOKEN = "dashboard-and-metrics-test-token-0123"
HOST_TYPE = "sim-gpu"
T = TypeVar("T")


@contextlib.contextmanager
def sim_hosts(tmp_path: Path, base_address: str, hosts: int = 2) -> Iterator[dict[str, Any]]:
    """``orchestrator sim up``: its description (hosts, the sweep file it wrote)."""
    log = tmp_path / "sim.log"
    command = [sys.executable, "-m", "orchestrator.sim.cli", "up", "--hosts", str(hosts)]
    command += ["--json", "--state-dir", str(tmp_path / "sim"), "--base-address", base_address]
    with open(log, "wb") as errors:
        process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=errors)
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        if not line:
            pytest.fail(f"sim up did not start: {log.read_text()[-2000:]}")
        yield json.loads(line)
    finally:
        stop_process(process)


@dataclass
class Service:
    """A daemon over simulated hosts, reached on its TCP listener."""

    daemon: DaemonProcess
    port: int
    base_sweep: dict[str, Any]
    tmp_path: Path

    def url(self, path: str) -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def get(self, path: str, *, token: str | None = TOKEN) -> tuple[int, bytes]:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        request = urllib.request.Request(self.url(path), headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    def sweep_file(self, name: str, *, configs: int, contexts: list[int]) -> Path:
        """The simulator's sweep, renamed, with the baseline and its first ``configs``
        configs at ``contexts`` x concurrency 1 and 4 (two rounds: enough requests at 4 to
        trust), no coding, and an objective at the largest context (so it has an answer)."""
        sweep = json.loads(json.dumps(self.base_sweep))
        sweep["name"] = name
        sweep["configs"] = sweep["configs"][:configs]
        sweep["benchmark"].update(contexts=contexts, concurrency=[1, 4], rounds=2)
        sweep.pop("coding", None)
        sweep["objective"] = {"metric": "output_tok_s", "context": contexts[-1], "concurrency": 4}
        path = self.tmp_path / f"{name}.yaml"
        path.write_text(yaml.safe_dump(sweep, sort_keys=False))
        return path

    def submit(self, path: Path) -> dict[str, Any]:
        status, document = self.daemon.submit(path)
        assert status == 201, document
        return dict(document)


@contextlib.contextmanager
def service(tmp_path: Path, base_address: str | None) -> Iterator[Service]:
    """A daemon listening on 127.0.0.1 (token required) and on its socket, over simulated
    hosts from ``base_address`` on (none when None: no sweep can run)."""
    config, port = tcp_config(tmp_path, TOKEN)
    with contextlib.ExitStack() as stack:
        base: dict[str, Any] = {}
        if base_address is not None:
            described = stack.enter_context(sim_hosts(tmp_path, base_address))
            base = yaml.safe_load(Path(described["sweep_file"]).read_text())
        daemon = stack.enter_context(
            running_daemon(tmp_path / "state", "--config", str(config))
        )
        yield Service(daemon, port, base, tmp_path)


def wait_until(
    what: str, probe: Callable[[], T | None], daemon: DaemonProcess, timeout: float = 120.0
) -> T:
    """``probe()`` until it gives something true (a deadline, not a measurement)."""
    deadline = time.monotonic() + timeout
    while True:
        found = probe()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"not seen within {timeout}s: {what}\n{daemon.log()[-3000:]}")
        time.sleep(0.3)


def keep_artifact(path: Path) -> Path | None:
    """Copy a test's picture where CI collects it: ``$ORCHESTRATOR_ARTIFACTS``, or
    ``out/artifacts/`` in the checkout (git ignores ``out/``) when ``CI`` is set; None when
    neither."""
    where = os.environ.get("ORCHESTRATOR_ARTIFACTS")
    if not where and os.environ.get("CI"):
        where = str(Path(__file__).resolve().parents[2] / "out" / "artifacts")
    if not where:
        return None
    target = Path(where) / path.name
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(path, target)
    return target
