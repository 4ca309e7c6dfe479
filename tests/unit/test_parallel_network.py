"""tests/parallel.py: two workers can hold the same fixed address, and installs still reach out.

Each check runs in child processes (a process cannot leave a network namespace it moved into
without help), as root; elsewhere parallel runs are refused, which ``why_unavailable`` says.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.parallel import why_unavailable

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(
    sys.platform != "linux" or os.geteuid() != 0, reason="network namespaces need root on Linux"
)

# Listens on the real-systemd host's fixed address, reports, then waits to be told to stop.
# SO_REUSEADDR as sshd sets it: the connections a real-systemd test closed on that address sit
# in TIME-WAIT for a minute after, and block a plain bind (a live listener still refuses).
WORKER = textwrap.dedent(
    """
    import os, socket, sys
    from tests.parallel import enter_private_network, host_network_argv
    if sys.argv[1] == "private":
        enter_private_network()
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(("127.0.0.41", 2241))
        sock.listen()
        print("bound", os.readlink("/proc/self/ns/net"), flush=True)
    except OSError as error:
        print("refused", error.errno, flush=True)
    argv, fds = host_network_argv(["readlink", "/proc/self/ns/net"])
    import subprocess
    outside = subprocess.run(argv, pass_fds=fds, capture_output=True, text=True, check=True)
    print("outside", outside.stdout.strip(), flush=True)
    sys.stdin.read()
    """
)


def _start(mode: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, mode],
        cwd=REPO,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _report(process: subprocess.Popen[str]) -> tuple[list[str], list[str]]:
    assert process.stdout is not None
    return process.stdout.readline().split(), process.stdout.readline().split()


def _stop(*processes: subprocess.Popen[str]) -> None:
    for process in processes:
        assert process.stdin is not None
        process.stdin.close()
        process.wait(10)


def test_workers_hold_the_same_fixed_address_at_once() -> None:
    assert why_unavailable() is None
    own = os.readlink("/proc/self/ns/net")
    first, second = _start("private"), _start("private")
    try:
        (bound1, outside1), (bound2, outside2) = _report(first), _report(second)
    finally:
        _stop(first, second)
    assert bound1[0] == bound2[0] == "bound"
    assert len({own, bound1[1], bound2[1]}) == 3  # a network of each worker's own
    # an install run from a worker (host_network_argv) is back in the machine's network
    assert outside1[1] == outside2[1] == own


def test_without_private_networks_the_second_listener_is_refused() -> None:
    """What the private networks prevent: the same two listeners in one network."""
    first = _start("shared")
    try:
        (bound, outside) = _report(first)
        if bound[0] != "bound":
            pytest.skip("127.0.0.41:2241 is taken in this network by something else")
        second = _start("shared")
        try:
            refused, _ = _report(second)
        finally:
            _stop(second)
    finally:
        _stop(first)
    assert refused[0] == "refused" and int(refused[1]) == 98  # EADDRINUSE
    assert outside[1] == os.readlink("/proc/self/ns/net")  # unchanged without a private one
