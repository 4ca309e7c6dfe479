"""A REAL systemd 252 + journald + OpenSSH sshd test host, one per mount namespace.

Recipe from FACTS.md ("systemd 252, journald and OpenSSH sshd run for real on these
machines"): a cgroup slice per host in both hierarchies, a private mount namespace with its own
/etc/systemd/system and /run, journald and sshd started from ``NAME.slice/aux.scope``, then
``systemd --user`` exec'd as the host's manager. Only the GPU (a stand-in ``nvidia-smi`` fed by
the simulated server's allocations) and SGLang (the simulated server) are stood in.

Hosts are stopped by the PIDs listed in their slices' ``cgroup.procs`` files.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.sysdeps import apt_install

CGROUP_UNIFIED = Path("/sys/fs/cgroup/unified")
CGROUP_SYSTEMD = Path("/sys/fs/cgroup/systemd")
SYSTEMD = Path("/lib/systemd/systemd")
JOURNALD = Path("/lib/systemd/systemd-journald")
SSHD = Path("/usr/sbin/sshd")
DBUS_DAEMON = Path("/usr/bin/dbus-daemon")
DBUS_UNITS = Path("/lib/systemd/system")
SYSTEM_BUS_ADDRESS = "unix:path=/run/dbus/system_bus_socket"

# Runs as the host's first process: joins the slice, builds the namespace, starts journald and
# sshd from aux.scope, then becomes the host's systemd manager.
_BOOT_SCRIPT = r"""
set -eu
NAME=$1 ADDR=$2 PORT=$3 DIR=$4 BUS=${5:-}
U=/sys/fs/cgroup/unified/$NAME.slice; S=/sys/fs/cgroup/systemd/$NAME.slice
mount --bind "$DIR/etc-systemd-system" /etc/systemd/system
mkdir -p /run/user/0
RUNTIME_MODE=700
# With a bus, dbus-daemon (as messagebus) must reach the manager's notify socket in here, as it
# reaches /run/systemd/notify on a PID-1 host (where the manager runs with umask 0).
[ -n "$BUS" ] && RUNTIME_MODE=755
mount -t tmpfs -o mode=$RUNTIME_MODE tmpfs /run/user/0
mount -t tmpfs -o mode=755 tmpfs /run/systemd
mkdir -p /run/systemd/system /run/systemd/journal
mount -t tmpfs -o mode=755 tmpfs /run/log
mkdir -p /run/sshd
mount -t tmpfs -o mode=755 tmpfs /run/sshd
# The host's lease lives in its own /run, as on a real host (not the test machine's).
mkdir -p /run/orchestrator
mount -t tmpfs -o mode=755 tmpfs /run/orchestrator
ln -s /run/user/0/systemd/private /run/systemd/private
# sshd gives sessions its standard PATH: put the stand-in tools where that PATH looks first.
mount --bind "$DIR/bin" /usr/local/sbin
if [ -n "$BUS" ]; then
  # Debian's own system bus units, run by this host's manager as a PID-1 manager runs them.
  mkdir -p /run/dbus /run/systemd/user
  mount -t tmpfs -o mode=755 tmpfs /run/dbus
  cp /lib/systemd/system/dbus.socket /lib/systemd/system/dbus.service /run/systemd/user/
fi
mkdir -p "$U/aux.scope" "$S/aux.scope"
(
  echo "$BASHPID" > "$U/aux.scope/cgroup.procs"
  echo "$BASHPID" > "$S/aux.scope/cgroup.procs"
  /lib/systemd/systemd-journald &
  /usr/sbin/sshd -D -e -f "$DIR/sshd_config" -o "ListenAddress=$ADDR" -o "Port=$PORT" \
      2>"$DIR/sshd.log" &
  wait
) &
for _ in $(seq 100); do [ -S /run/systemd/journal/stdout ] && break; sleep 0.05; done
if [ -n "$BUS" ]; then
  # A user manager's API bus is the one named here; once its dbus.service runs, it registers
  # org.freedesktop.systemd1 there, as a PID-1 manager does on the system bus.
  export DBUS_SESSION_BUS_ADDRESS=unix:path=/run/dbus/system_bus_socket
  umask 000
fi
export XDG_RUNTIME_DIR=/run/user/0 SYSTEMD_LOG_TARGET=journal
export SYSTEMD_UNIT_PATH=/etc/systemd/system:
exec /lib/systemd/systemd --user
"""


def unavailable_reason() -> str | None:
    """Why a real-systemd host cannot run here, or None when it can."""
    if sys.platform != "linux":
        return "real-systemd hosts need Linux"
    if os.geteuid() != 0:
        return "real-systemd hosts need root (cgroups, mount namespaces)"
    for path in (SYSTEMD, JOURNALD):
        if not path.exists():
            return f"{path} is missing (Debian package systemd)"
    if not all((top / "cgroup.procs").exists() for top in (CGROUP_UNIFIED, CGROUP_SYSTEMD)):
        return "needs the hybrid cgroup layout (/sys/fs/cgroup/unified and /sys/fs/cgroup/systemd)"
    if shutil.which("unshare") is None:
        return "unshare (util-linux) is missing"
    return None


def ensure_sshd() -> None:
    """Install Debian's openssh-server when sshd is missing (CI starts from a fresh machine)."""
    if not SSHD.exists():
        apt_install("openssh-server")


def ensure_dbus_daemon() -> None:
    """Install Debian's dbus (the reference dbus-daemon and its system bus configuration) when
    it is missing."""
    if not (DBUS_DAEMON.exists() and DBUS_UNITS.joinpath("dbus.service").exists()):
        apt_install("dbus")


@dataclass
class RealHost:
    """One running real-systemd host: SSH on ``address:port`` as root with ``identity_file``."""

    name: str
    address: str
    port: int
    root: Path
    process: subprocess.Popen[bytes] | None = None
    slice_name: str = field(default_factory=lambda: f"orch-{uuid.uuid4().hex[:10]}")
    """The cgroup slice: unique per instance, so concurrent runs never share one."""
    system_bus: bool = False
    """Give the host a system bus at :data:`SYSTEM_BUS_ADDRESS` in its own /run: Debian's
    ``dbus.socket`` and ``dbus.service`` (the reference dbus-daemon, ``--system``) run by the
    host's manager, which registers ``org.freedesktop.systemd1`` on it. Without it the host has
    no bus, as before."""

    @property
    def identity_file(self) -> Path:
        return self.root / "client_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.root / "known_hosts"

    @property
    def unit_dir(self) -> Path:
        """What the host sees as /etc/systemd/system."""
        return self.root / "etc-systemd-system"

    @property
    def bin_dir(self) -> Path:
        """The host's /usr/local/sbin (first on sshd's PATH): stand-ins such as nvidia-smi."""
        return self.root / "bin"

    def _slices(self) -> list[Path]:
        return [
            CGROUP_UNIFIED / f"{self.slice_name}.slice",
            CGROUP_SYSTEMD / f"{self.slice_name}.slice",
        ]

    def prepare(self) -> None:
        """Keys, known_hosts and sshd_config. Sessions get ``root`` as HOME: bash started by
        sshd reads ~/.bashrc, and a machine's own (``pyenv init`` here) is no part of the host;
        its pyenv rehash lock, left behind when ``stop`` kills a session mid-rehash, stalled
        every later session for a minute."""
        self.unit_dir.mkdir(parents=True, exist_ok=True)
        self.bin_dir.mkdir(parents=True, exist_ok=True)
        hostkey = self.root / "ssh_host_ed25519_key"
        for key in (hostkey, self.identity_file):
            if not key.exists():
                subprocess.run(
                    ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True
                )
        shutil.copy(f"{self.identity_file}.pub", self.root / "authorized_keys")
        (self.root / "sshd_config").write_text(
            textwrap.dedent(
                f"""\
                HostKey {hostkey}
                AuthorizedKeysFile {self.root}/authorized_keys
                UsePAM no
                StrictModes no
                PermitRootLogin yes
                PasswordAuthentication no
                KbdInteractiveAuthentication no
                MaxSessions 10
                Subsystem sftp internal-sftp
                PidFile {self.root}/sshd.pid
                SetEnv HOME={self.root}
                """
            )
        )
        public = (Path(f"{hostkey}.pub").read_text()).split()
        entry = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        self.known_hosts.write_text(f"{entry} {public[0]} {public[1]}\n")

    def start(self, timeout: float = 20.0) -> None:
        if self.system_bus:
            ensure_dbus_daemon()
        self.prepare()
        for path in self._slices():
            path.mkdir(exist_ok=True)
        # The child joins the slice before unshare so every process of the host lives in it.
        join = "; ".join(f'echo $$ > "{p}/cgroup.procs"' for p in self._slices())
        self.process = subprocess.Popen(
            [
                "bash",
                "-c",
                f'{join}; exec unshare -m --propagation private bash -c "$0" bash "$@"',
                _BOOT_SCRIPT,
                self.slice_name,
                self.address,
                str(self.port),
                str(self.root),
                "1" if self.system_bus else "",
            ],
            stdin=subprocess.DEVNULL,
            stdout=(self.root / "host.log").open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{self.name} exited: {self.log_tail()}")
            if self.ssh(["systemctl", "is-system-running"], check=False).returncode in (0, 1):
                if self.system_bus:
                    self._await_manager_on_bus(deadline)
                return
            time.sleep(0.2)
        raise RuntimeError(f"{self.name} did not answer over SSH in {timeout}s: {self.log_tail()}")

    def _await_manager_on_bus(self, deadline: float) -> None:
        """Start the host's dbus.service (a PID-1 host starts it at boot) and wait until the
        manager owns ``org.freedesktop.systemd1`` on that bus."""
        self.ssh(["systemctl", "start", "dbus.service"])
        has_owner = [
            "busctl", "--system", "call", "org.freedesktop.DBus", "/org/freedesktop/DBus",
            "org.freedesktop.DBus", "NameHasOwner", "s", "org.freedesktop.systemd1",
        ]  # fmt: skip
        while time.monotonic() < deadline:
            if self.ssh(has_owner, check=False).stdout.strip() == b"b true":
                return
            time.sleep(0.1)
        raise RuntimeError(f"{self.name}: systemd is not on its bus: {self.log_tail()}")

    def log_tail(self) -> str:
        parts = []
        for log in ("host.log", "sshd.log"):
            path = self.root / log
            if path.exists():
                parts.append(path.read_text(errors="replace")[-2000:])
        return "\n".join(parts)

    def ssh_argv(self, command: list[str]) -> list[str]:
        import shlex

        return [
            "ssh",
            "-o", "BatchMode=yes",
            "-o", f"UserKnownHostsFile={self.known_hosts}",
            "-o", "StrictHostKeyChecking=yes",
            "-o", "ConnectTimeout=3",
            "-i", str(self.identity_file),
            "-p", str(self.port),
            f"root@{self.address}",
            shlex.join(command),
        ]  # fmt: skip

    def ssh(self, command: list[str], *, check: bool = True) -> subprocess.CompletedProcess[bytes]:
        return subprocess.run(self.ssh_argv(command), capture_output=True, check=check, timeout=30)

    def pids(self) -> set[int]:
        pids: set[int] = set()
        for top in self._slices():
            if top.exists():
                for procs in top.rglob("cgroup.procs"):
                    pids.update(int(p) for p in procs.read_text().split())
        return pids

    def stop(self) -> None:
        """Kill every process in the host's slices, then remove the slice directories."""
        for _ in range(50):
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.1)
        if self.process is not None:
            self.process.wait(timeout=10)
        for top in self._slices():
            if top.exists():
                for path in sorted(top.rglob("*"), key=lambda p: len(p.parts), reverse=True):
                    if path.is_dir():
                        path.rmdir()
                top.rmdir()


@contextlib.contextmanager
def running_real_host(
    name: str, address: str, port: int, root: Path, *, system_bus: bool = False
) -> Iterator[RealHost]:
    """A started host at ``address:port`` (stopped by its slices' pids on exit)."""
    root.mkdir(parents=True, exist_ok=True)
    host = RealHost(name=name, address=address, port=port, root=root, system_bus=system_bus)
    try:
        host.start()
        yield host
    finally:
        host.stop()
