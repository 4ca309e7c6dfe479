"""The shipped unit files load cleanly in a real systemd (`systemd-analyze verify`, offline)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

UNITS = Path(__file__).resolve().parents[2] / "systemd"

pytestmark = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None, reason="systemd-analyze is not installed"
)


def _verify(
    tmp_path: Path, name: str, program: str, stand_in: str
) -> subprocess.CompletedProcess[str]:
    # verify checks that ExecStart's program exists; point it at one that does on this machine.
    text = (UNITS / name).read_text().replace(program, stand_in)
    unit = tmp_path / name
    unit.write_text(text)
    return subprocess.run(
        ["systemd-analyze", "verify", str(unit)], capture_output=True, text=True, timeout=60
    )


def test_orchestrator_service_verifies(tmp_path: Path) -> None:
    result = _verify(
        tmp_path, "orchestrator.service", "/opt/orchestrator/.venv/bin/orchestrator", sys.executable
    )
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # unknown keys only warn: any output is a failure
    text = (UNITS / "orchestrator.service").read_text()
    for line in (
        "Type=notify",
        "WatchdogSec=",
        "Restart=on-failure",
        "StateDirectory=orchestrator",
        "NoNewPrivileges=yes",
        "ProtectSystem=strict",
        "PrivateTmp=yes",
    ):
        assert line in text


def test_sglang_example_verifies(tmp_path: Path) -> None:
    result = _verify(tmp_path, "sglang.service", "/opt/sglang/.venv/bin/python", sys.executable)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""
