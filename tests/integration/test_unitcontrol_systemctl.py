"""SystemctlControl: ``systemctl`` through a real LocalTransport, with a stand-in ``systemctl``
script first on PATH, so its failures reach the caller as the same typed errors the D-Bus side
raises (JobFailed, JobTimeout)."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.host.local import LocalTransport
from orchestrator.host.unitcontrol import JobFailed, JobTimeout, SystemctlControl, UnitControl

# Answers like systemctl 252: show prints Key=value in its own order; a failed start job exits 1
# with systemd's message on stderr; "slow" units' stop jobs take long.
STAND_IN = r"""#!/bin/sh
printf '%s\n' "$*" >> "$CALLS"
case "$1" in
  show) printf 'ActiveState=active\nMainPID=77\nInvocationID=%s\nLoadState=loaded\nJob=\n' \
          0123456789abcdef0123456789abcdef ;;
  start) [ "$2" = broken.service ] && {
           echo "Job for broken.service failed because the control process exited" >&2
           exit 1; } ;;
  stop) [ "$2" = slow.service ] && exec sleep 30 ;;
esac
exit 0
"""
T = 10.0


def _lines(path: Path) -> list[str]:
    return path.read_text().splitlines()


@pytest.fixture
def systemctl_calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    script = bin_dir / "systemctl"
    script.write_text(STAND_IN)
    script.chmod(0o755)
    calls = tmp_path / "calls"
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    monkeypatch.setenv("CALLS", str(calls))
    return calls


async def test_systemctl_control_maps_failures_to_job_errors(systemctl_calls: Path) -> None:
    transport = LocalTransport("t")
    control: UnitControl = SystemctlControl(transport)
    assert isinstance(control, UnitControl)
    try:
        state = await control.show("sglang.service", ("ActiveState", "MainPID"), timeout=T)
        assert (state.active_state, state.main_pid) == ("active", 77)
        assert state.invocation_id == "0123456789abcdef0123456789abcdef" and state.job is None

        await control.start("sglang.service", timeout=T)
        with pytest.raises(JobFailed) as failed:
            await control.start("broken.service", timeout=T)
        assert failed.value.job_result is None and failed.value.operation == "start"
        assert failed.value.result is not None and failed.value.result.exit_status == 1
        assert "control process exited" in str(failed.value)

        with pytest.raises(JobTimeout) as late:
            await control.stop("slow.service", timeout=0.5)
        assert late.value.operation == "stop" and late.value.timeout_s == 0.5

        await control.reset_failed("sglang.service", timeout=T)
        await control.daemon_reload(timeout=T)
    finally:
        await transport.close()
    assert _lines(systemctl_calls) == [
        "show -p ActiveState,MainPID sglang.service",
        "start sglang.service",
        "start broken.service",
        "stop slow.service",
        "reset-failed sglang.service",
        "daemon-reload",
    ]
