"""Shared helpers (no tests here) for the simulated-host tests: start a host, reach it over SSH
(asyncssh and the system OpenSSH client), and a small service program for the unit's ExecStart."""

from __future__ import annotations

import asyncio
import itertools
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path

import asyncssh

from orchestrator.sim.faults import HostSettings
from orchestrator.sim.host import SimHost, SimHostConfig, render_unit
from tests.sysdeps import apt_install

_ADDRESSES = itertools.count(101)

CHILD_PROGRAM = r"""
import http.server, json, os, signal, subprocess, sys, threading, time

# The handler is in place before the child says it is up, so a test that
# waited for that line knows how SIGTERM will be met.
delay = float(os.environ.get("STOP_DELAY_S", "0"))

def on_term(*_):
    if os.environ.get("IGNORE_TERM"):
        print("ignoring SIGTERM", flush=True)
        return
    print("stopping", flush=True)
    def later():
        time.sleep(delay)
        os._exit(0)
    threading.Thread(target=later).start()

signal.signal(signal.SIGTERM, on_term)
print(f"child {os.getpid()} up", flush=True)
if os.environ.get("EXIT_AT_START"):
    sys.exit(int(os.environ["EXIT_AT_START"]))
if os.environ.get("REGISTER_MIB"):
    state = json.load(open(os.environ["ORCH_SIM_CONFIG"]))["gpu_state_dir"]
    os.makedirs(state, exist_ok=True)
    record = {"pid": os.getpid(), "gpus": [0, 1], "used_mib": int(os.environ["REGISTER_MIB"]),
              "started": time.time()}
    with open(os.path.join(state, f".{os.getpid()}.tmp"), "w") as handle:
        json.dump(record, handle)
    os.replace(os.path.join(state, f".{os.getpid()}.tmp"),
               os.path.join(state, f"{os.getpid()}.json"))
if os.environ.get("SPAWN_CHILD"):
    spawned = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    print(f"spawned {spawned.pid}", flush=True)
if os.environ.get("CHILD_PORT"):
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = str(os.getpid()).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *args):
            pass
    server = http.server.ThreadingHTTPServer(
        (os.environ["CHILD_HOST"], int(os.environ["CHILD_PORT"])), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
if os.environ.get("NOISE"):
    sys.stdout.write("\x1b[31mred\x1b[0m\n")
    sys.stdout.write("x" * 5000 + "\n")
    sys.stdout.write("y" * (48 * 1024 + 10) + "\n")
    sys.stdout.buffer.write(b"bad \xff byte\n")
    sys.stdout.flush()
while True:
    signal.pause()
"""


def next_address() -> str:
    return f"127.0.0.{next(_ADDRESSES)}"


def child_unit(program: Path, *, timeout_stop_s: int = 5, env: dict[str, str] | None = None) -> str:
    """A unit running the test child program, with ``env`` as Environment= lines."""
    text = render_unit(
        [sys.executable, str(program)], description="Test child", timeout_stop_s=timeout_stop_s
    )
    lines = "".join(f'Environment="{k}={v}"\n' for k, v in (env or {}).items())
    return text.replace("Restart=no\n", "Restart=no\n" + lines)


@dataclass
class Client:
    """What a client needs to reach one simulated host."""

    host: SimHost
    key: Path
    known_hosts: Path

    async def connect(self) -> asyncssh.SSHClientConnection:
        return await asyncssh.connect(
            self.host.address,
            self.host.port,
            username="root",
            client_keys=[str(self.key)],
            known_hosts=str(self.known_hosts),
            config=None,
            connect_timeout=5,
        )

    async def run(self, command: str, timeout: float = 20) -> asyncssh.SSHCompletedProcess:
        async with await self.connect() as conn:
            return await asyncio.wait_for(conn.run(command, encoding=None), timeout)

    async def text(self, command: str) -> str:
        result = await self.run(command)
        assert isinstance(result.stdout, bytes)
        return result.stdout.decode(errors="replace")  # journalctl -o cat passes raw bytes

    async def show(self, *props: str, unit: str = "sglang.service") -> dict[str, str]:
        out = await self.text(f"systemctl show -p {','.join(props)} {unit}")
        return dict(line.split("=", 1) for line in out.splitlines())

    async def openssh(
        self, command: str, timeout: float = 20
    ) -> subprocess.CompletedProcess[bytes]:
        """Run ``command`` with the system OpenSSH client."""
        argv = [
            "ssh",
            "-o",
            "BatchMode=yes",
            "-o",
            f"UserKnownHostsFile={self.known_hosts}",
            "-o",
            "StrictHostKeyChecking=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-F",
            "/dev/null",
            "-i",
            str(self.key),
            "-p",
            str(self.host.port),
            f"root@{self.host.address}",
            command,
        ]
        return await asyncio.to_thread(
            subprocess.run, argv, capture_output=True, timeout=timeout, check=False
        )


def ensure_openssh_client() -> None:
    """The system ``ssh`` client; installed with apt-get on a fresh machine."""
    if not shutil.which("ssh"):
        apt_install("openssh-client")


async def start_host(
    tmp: Path,
    *,
    settings: HostSettings | None = None,
    unit_text: str | None = None,
    name: str = "sim-t",
) -> Client:
    key = asyncssh.generate_private_key("ssh-ed25519")
    key_path = tmp / "id_ed25519"
    key.write_private_key(str(key_path))
    key_path.chmod(0o600)
    authorized = tmp / "authorized_keys"
    authorized.write_text(key.export_public_key().decode())
    port = 2200 + (os.getpid() % 500)
    host = SimHost(
        SimHostConfig(
            name=name,
            address=next_address(),
            port=port,
            directory=tmp / name,
            authorized_keys=authorized,
            settings=settings or HostSettings(),
            unit_text=unit_text,
        )
    )
    await host.start()
    known_hosts = tmp / "known_hosts"
    known_hosts.write_text(host.known_hosts_line() + "\n")
    return Client(host, key_path, known_hosts)


async def eventually(
    check: Callable[[], Awaitable[bool]], timeout: float = 10.0, interval: float = 0.1
) -> None:
    deadline = time.monotonic() + timeout
    while not await check():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(interval)


def pid_alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


def processes_mentioning(text: str) -> list[int]:
    """Live processes whose environment contains ``text`` (a test's own state directory): what
    a test started, told apart from what tests running beside it started."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            environ = Path(f"/proc/{entry}/environ").read_bytes()
        except OSError:
            continue
        if text.encode() in environ and pid_alive(int(entry)):
            found.append(int(entry))
    return found
