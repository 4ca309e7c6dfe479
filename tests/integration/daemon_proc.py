"""Helpers for the daemon and API tests: a real daemon process, CLI runs, quick sweep files.

Sweeps in these tests need no GPU host: their hosts fail the preflight and are set aside, which
exercises the queue, the API and the clients for real. Two kinds of failing host:

- *untrusted*: a real SSH server (asyncssh, loopback) whose host key is in no known_hosts file;
  the client refuses it at once (no retry), so the sweep ends in well under a second;
- *unreachable*: nothing listens on the port; the transport retries with backoff and the sweep
  takes about 7.5 s, long enough to observe it running.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import asyncssh

from orchestrator.verbs.apiclient import DaemonUnreachable, call

ORCHESTRATOR = [sys.executable, "-m", "orchestrator.cli"]
START_TIMEOUT_S = 30.0
"""A deadline, not a wait: the daemon answers in 1-3 s, but its start-up is 2-3 CPU-seconds
of imports, which took over 15 s on two cores shared with a parallel suite."""
STOP_TIMEOUT_S = 15.0


def free_port(address: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((address, 0))
        return int(sock.getsockname()[1])


def tcp_config(directory: Path, token: str) -> tuple[Path, int]:
    """A daemon config that listens on 127.0.0.1 (a free port) behind ``token``, kept in a
    private file as the daemon requires: the config's path and the port."""
    token_file = directory / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    port = free_port()
    config = directory / "daemon.yaml"
    config.write_text(f"tcp: 127.0.0.1:{port}\ntoken_file: {token_file}\n")
    return config, port


def stop_process(process: subprocess.Popen[bytes], timeout: float = 20.0) -> None:
    """SIGTERM, then SIGKILL after ``timeout``: a test stops what it started, by its pid."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(5)


class UntrustedSSHServer:
    """An SSH server on loopback with a fresh host key, run on its own thread and loop."""

    def __init__(self) -> None:
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._server: asyncssh.SSHAcceptor | None = None

    def _serve(self) -> None:
        asyncio.set_event_loop(self._loop)

        async def start() -> None:
            key = asyncssh.generate_private_key("ssh-ed25519")
            self._server = await asyncssh.listen(
                "127.0.0.1", 0, server_host_keys=[key], reuse_address=True
            )
            self.port = self._server.sockets[0].getsockname()[1]
            self._ready.set()

        self._loop.run_until_complete(start())
        self._loop.run_forever()

    def __enter__(self) -> UntrustedSSHServer:
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the test SSH server did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        def close() -> None:
            if self._server is not None:
                self._server.close()
            self._loop.stop()

        self._loop.call_soon_threadsafe(close)
        self._thread.join(10)


@dataclass
class HostEntry:
    """A host line of a test sweep."""

    name: str
    port: int
    address: str = "127.0.0.1"


def sweep_yaml(
    name: str,
    hosts: list[HostEntry],
    keys_dir: Path,
    *,
    priority: int = 0,
    budget: int = 4,
    webhook: str | None = None,
    not_before: str | None = None,
) -> str:
    """A valid sweep over ``hosts``; ``keys_dir`` holds an identity and an empty known_hosts."""
    identity = keys_dir / "id_ed25519"
    known_hosts = keys_dir / "known_hosts"
    if not identity.exists():
        keys_dir.mkdir(parents=True, exist_ok=True)
        asyncssh.generate_private_key("ssh-ed25519").write_private_key(str(identity))
        known_hosts.write_text("")
    lines = [f"name: {name}", f"priority: {priority}", "hosts:"]
    for host in hosts:
        lines += [
            f"  - name: {host.name}",
            f"    address: {host.address}",
            f"    port: {host.port}",
            f"    identity_file: {identity}",
            f"    known_hosts: {known_hosts}",
            f"    base_url: http://{host.address}:9",
        ]
    lines += [
        "server:",
        "  model: m",
        "  knobs:",
        "    budget: {flag: --speculative-ddtree-budget}",
        "configs:",
        f"  - {{budget: {budget}}}",
        "timeouts: {connect: 1}",
    ]
    if webhook:
        lines += ["notify:", f"  webhook: {webhook}"]
    if not_before:
        lines += ["schedule:", f'  not_before: "{not_before}"']
    return "\n".join(lines) + "\n"


def clock_a_minute_ago() -> str:
    """A ``not_before`` that lies (almost) a day ahead: the sweep waits until stopped."""
    moment = time.localtime(time.time() - 60)
    return f"{moment.tm_hour:02d}:{moment.tm_min:02d}"


@dataclass
class CliResult:
    returncode: int
    stdout: str
    stderr: str

    def json(self) -> Any:
        return json.loads(self.stdout)


@dataclass
class DaemonProcess:
    """``orchestrator daemon --state-dir DIR`` as a child process, stopped by its pid."""

    state_dir: Path
    extra_args: list[str] = field(default_factory=list)
    env: Mapping[str, str] = field(default_factory=dict)
    process: subprocess.Popen[bytes] | None = None
    log_path: Path | None = None

    @property
    def socket(self) -> Path:
        return self.state_dir / "orchestrator.sock"

    def start(self) -> DaemonProcess:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = self.state_dir.parent / f"{self.state_dir.name}.daemon.log"
        with open(self.log_path, "ab") as log:
            self.process = subprocess.Popen(
                [
                    *ORCHESTRATOR,
                    "--log-level",
                    "debug",
                    "daemon",
                    "--state-dir",
                    str(self.state_dir),
                    *self.extra_args,
                ],
                stdout=subprocess.DEVNULL,
                stderr=log,
                env={**os.environ, **self.env},
            )
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"daemon exited {self.process.returncode}: {self.log()}")
            if self.socket.exists() and self.answers():
                return self
            time.sleep(0.1)
        self.kill()  # not left running beside the next test (it is no child of anything then)
        raise RuntimeError(f"daemon did not answer within {START_TIMEOUT_S}s: {self.log()}")

    def log(self) -> str:
        return self.log_path.read_text() if self.log_path and self.log_path.exists() else ""

    def events(self, name: str) -> list[dict[str, Any]]:
        found = []
        for line in self.log().splitlines():
            with contextlib.suppress(json.JSONDecodeError):
                entry = json.loads(line)
                if isinstance(entry, dict) and entry.get("event") == name:
                    found.append(entry)
        return found

    def api(
        self,
        url_path: str,
        *,
        method: str = "GET",
        body: bytes | None = None,
        headers: Mapping[str, str] | None = None,
        timeout: float = 10.0,
    ) -> tuple[int, Any]:
        """One request on the daemon's socket from the test's own process: the HTTP status and
        the JSON document (what the CLI's ``--json`` prints). For a test's waits and for steps
        whose timing matters: a CLI run costs a Python start-up (about a CPU-second), and a poll
        loop of them kept a core busy."""
        response = call(
            self.socket, method, url_path, body=body, headers=dict(headers or {}), timeout_s=timeout
        )
        return response.status, response.document

    def submit(self, path: Path) -> tuple[int, Any]:
        """What ``orchestrator submit PATH --json`` sends and prints, without the start-up."""
        return self.api(
            "/sweeps",
            method="POST",
            body=path.read_bytes(),
            headers={"X-Sweep-Filename": path.name},
        )

    def answers(self) -> bool:
        try:
            return self.api("/sweeps")[0] == 200
        except DaemonUnreachable:
            return False

    def cli(self, *args: str, timeout: float = 30.0) -> CliResult:
        result = subprocess.run(
            [*ORCHESTRATOR, *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            env={**os.environ, "ORCHESTRATOR_SOCKET": str(self.socket)},
        )
        return CliResult(result.returncode, result.stdout, result.stderr)

    def terminate(self, timeout: float = STOP_TIMEOUT_S) -> float:
        """SIGTERM; returns how long the daemon took to exit (SIGKILL after ``timeout``)."""
        assert self.process is not None
        began = time.monotonic()
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(5)
            raise
        return time.monotonic() - began

    def kill(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(5)

    def wait_for(self, ref: str, states: tuple[str, ...], timeout: float = 30.0) -> dict[str, Any]:
        """Poll the sweep's status (``status SWEEP --json``) until it is in one of ``states``."""
        deadline = time.monotonic() + timeout
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status, document = self.api(f"/sweeps/{ref}")
            if status == 200:
                last = document
                if last["state"] in states:
                    return last
            time.sleep(0.2)
        raise AssertionError(f"sweep {ref} not in {states} after {timeout}s: {last}")


@contextlib.contextmanager
def running_daemon(
    state_dir: Path, *extra_args: str, env: Mapping[str, str] | None = None
) -> Iterator[DaemonProcess]:
    daemon = DaemonProcess(state_dir, list(extra_args), dict(env or {})).start()
    try:
        yield daemon
    finally:
        if daemon.process is not None and daemon.process.poll() is None:
            try:
                daemon.terminate()
            finally:
                daemon.kill()
