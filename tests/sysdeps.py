"""Debian packages the tests need (sshd, ssh, sudo, chromium), installed when missing.

CI starts from a fresh machine, so a test installs what it uses on first need. One function does
it for every test: as root only, one ``apt-get`` at a time across parallel workers (a file lock;
dpkg's own lock would make the second one fail), in the machine's own network even from a worker
that lives in a private one (tests/parallel.py).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess

from tests.parallel import host_network_argv

_LOCK_PATH = "/tmp/orchestrator-tests-apt.lock"
_TIMEOUT_S = 900.0


class CannotInstall(RuntimeError):
    """The package is missing and this machine cannot install it (not root, no apt-get)."""


def apt_install(*packages: str) -> None:
    """``apt-get update`` then ``apt-get install`` of ``packages``; raises CannotInstall when
    that is impossible here and CalledProcessError (with apt's output) when it fails."""
    if os.geteuid() != 0 or shutil.which("apt-get") is None:
        raise CannotInstall(f"{' '.join(packages)}: missing, and installing needs root and apt-get")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    wait = ["-o", "DPkg::Lock::Timeout=300"]
    commands = [
        ["apt-get", *wait, "update", "-q"],
        ["apt-get", *wait, "install", "-y", "-q", "--no-install-recommends", *packages],
    ]
    with open(_LOCK_PATH, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        for command in commands:
            argv, fds = host_network_argv(command)
            subprocess.run(
                argv, check=True, env=env, capture_output=True, pass_fds=fds, timeout=_TIMEOUT_S
            )
