"""Fixtures for tests against REAL systemd + journald + sshd hosts (root only, else skipped).

The hosts' addresses and ports are fixed (127.0.0.41:2241, 127.0.0.150:2250) and still per
worker in a parallel run: each pytest-xdist worker has a network of its own (tests/parallel.py),
and each host its own cgroup slice and mount namespace, so two workers' hosts never meet.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realhost.realhost import RealHost, ensure_sshd, running_real_host, unavailable_reason

pytestmark = pytest.mark.realhost


@pytest.fixture(scope="session")
def realhost_ready() -> None:
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    ensure_sshd()


@pytest.fixture
def real_host(realhost_ready: None, tmp_path: Path) -> Iterator[RealHost]:
    host = RealHost(name="orch-rh1", address="127.0.0.41", port=2241, root=tmp_path / "rh1")
    host.root.mkdir()
    try:
        host.start()
        yield host
    finally:
        host.stop()


@pytest.fixture
def real_bus_host(realhost_ready: None, tmp_path: Path) -> Iterator[RealHost]:
    """A real host (at ``real_host``'s address) with a system bus and its manager on it."""
    with running_real_host(
        "orch-rh1", "127.0.0.41", 2241, tmp_path / "rh1", system_bus=True
    ) as host:
        yield host


@pytest.fixture(scope="module")
def fidelity_host(
    realhost_ready: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RealHost]:
    """One real host shared by a fidelity module (each scenario uses units of its own)."""
    root = tmp_path_factory.mktemp("fidelity") / "rh"
    with running_real_host("orch-fid1", "127.0.0.150", 2250, root) as host:
        yield host
